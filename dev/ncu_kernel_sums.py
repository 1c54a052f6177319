"""Per-kernel time of one training step from Nsight Compute's CSV, summed by kernel name.

Reads `ncu --csv --metrics gpu__time_duration.sum ...` output of `ufp4 bench step --warmup 0 --steps 1`
and sums the kernels of the first step: from its embedding gather through the second launch of the
fused AdamW (the optimizer runs two multi-tensor launches a step). Kernel names keep their template
arguments and lose their call arguments.

usage: python dev/ncu_kernel_sums.py ncu.csv [--top 40]
"""
import argparse
import collections
import csv
import re


def read(path):
    rows = []
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r["Metric Unit"]
        v = float(r["Metric Value"].replace(",", ""))
        ns = v * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1)
        name = re.sub(r"\(.*$", "", r["Kernel Name"]).strip()
        rows.append((name, ns))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    rows = read(args.csv)
    start = next(i for i, (n, _) in enumerate(rows) if "gather" in n)
    adam = [i for i, (n, _) in enumerate(rows) if i > start and "FusedOptimizerTensorListMetadata" in n]
    end = adam[1] if len(adam) > 1 else (adam[0] if adam else len(rows) - 1)
    step = rows[start:end + 1]
    total = collections.defaultdict(float)
    count = collections.Counter()
    for n, ns in step:
        total[n] += ns
        count[n] += 1
    print(f"kernels {len(rows)}; step: kernels {start}..{end} ({len(step)}), {sum(ns for _, ns in step) / 1e3:.1f} us")
    for n, ns in sorted(total.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{ns / 1e3:9.1f} us {count[n]:4d}  {n[:150]}")


if __name__ == "__main__":
    main()
