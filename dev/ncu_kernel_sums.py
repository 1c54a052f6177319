"""Per-kernel time of one training step from Nsight Compute's CSV, summed by kernel name.

Reads `ncu --csv --metrics gpu__time_duration.sum ...` output of `ufp4 bench step --warmup 0 --steps 1`
and sums the kernels of the first step: from its embedding gather (or the batched weight quantization
before it) through the second launch of the fused AdamW (the optimizer runs two multi-tensor launches
a step). Kernel names keep their template
arguments and lose their call arguments.

usage: python dev/ncu_kernel_sums.py ncu.csv[.gz] [--top 40]
       python dev/ncu_kernel_sums.py ncu.csv[.gz] --groups   (a Markdown table: the step's time by kind of kernel)
       python dev/ncu_kernel_sums.py after.csv --before before.csv [--min-us 20]   (a Markdown table of the kernels whose
       sum changed by at least min-us, the step's total first)
"""
import argparse
import collections
import csv
import gzip
import re


def metric_rows(path):
    """Nsight Compute's CSV rows (one a kernel and metric), its warnings and notes left out."""
    with (gzip.open(path, "rt", newline="") if path.endswith(".gz") else open(path, newline="")) as f:
        lines = [line for line in f if line.startswith('"')]
    return csv.DictReader(lines)


def kernel_name(r):
    """The row's kernel name with its template arguments, without its call arguments."""
    return re.sub(r"\(.*$", "", r["Kernel Name"]).strip()


def value(r):
    """The row's metric value; durations in ns."""
    v = float(r["Metric Value"].replace(",", ""))
    return v * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(r["Metric Unit"], 1)


def read(path):
    return [(kernel_name(r), value(r)) for r in metric_rows(path) if r.get("Metric Name") == "gpu__time_duration.sum"]


def first_step(rows):
    """The launches (rows whose first field is the kernel's name) of the first step."""
    # The step begins with the forward's batched weight quantization (models/weight_operands.h) where the
    # recipe quantizes W, else with the embedding's gather.
    start = next(i for i, r in enumerate(rows) if "gather" in r[0])
    batch = [i for i, r in enumerate(rows[:start]) if "quantize_pair_batch_kernel" in r[0]]
    if batch:
        start = batch[-1]
    adam = [i for i, r in enumerate(rows) if i > start and "FusedOptimizerTensorListMetadata" in r[0]]
    end = adam[1] if len(adam) > 1 else (adam[0] if adam else len(rows) - 1)
    return rows[start:end + 1]


def step_sums(rows):
    """The first step's kernels summed by name: (total ns by name, launches by name, total ns, launches)."""
    step = first_step(rows)
    total = collections.defaultdict(float)
    count = collections.Counter()
    for n, ns in step:
        total[n] += ns
        count[n] += 1
    return total, count, sum(ns for _, ns in step), len(step)


# Kinds of kernel, first match wins (kernel names as Nsight Compute gives them).
GROUPS = [
    ("attention (forward, backward, RoPE)", r"attention|sdpa|flash|rope"),
    ("4-bit quantizers", r"quantize|segments_pair"),
    ("GEMMs (with cuBLAS's split-K reductions)", r"nvjet|cutlass|gemm|splitKreduce|xmma"),
    ("RMSNorm, SwiGLU, cross entropy", r"rms_norm|swiglu|cross_entropy"),
    ("MoE routing, dispatch and combine", r"moe_|router_top_k|inverse_permutation|padded_segments|[Tt]op[Kk]|[Ss]ort|searchsorted|scatter_gather|indexing_backward|MaxNan|MinNan|assert_async|where_kernel|CompareEq"),
    ("AdamW, fills, copies, other elementwise", r"."),
]


def group_table(total, ns_all):
    by = collections.OrderedDict((g, 0.0) for g, _ in GROUPS)
    for n, ns in total.items():
        by[next(g for g, rx in GROUPS if re.search(rx, n))] += ns
    print("| kind of kernel | us | share |\n|---|---|---|")
    for g, ns in by.items():
        print(f"| {g} | {ns / 1e3:.0f} | {100 * ns / ns_all:.1f}% |")
    print(f"| all kernels of the step | {ns_all / 1e3:.0f} | 100% |")


def short(name):
    return re.sub(r"^void ", "", name).replace("native::", "").replace("<unnamed>::", "")[:100]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--before", help="a CSV of the same step before a change: print the differences")
    ap.add_argument("--min-us", type=float, default=20.0)
    ap.add_argument("--groups", action="store_true", help="the step's time by kind of kernel")
    args = ap.parse_args()
    total, count, ns_all, launches = step_sums(read(args.csv))
    if args.groups:
        return group_table(total, ns_all)
    if args.before:
        b_total, b_count, b_all, b_launches = step_sums(read(args.before))
        print("| kernel | before: us (launches) | after: us (launches) | after - before, us |\n|---|---|---|---|")
        print(f"| all kernels of the step | {b_all / 1e3:.1f} ({b_launches}) | {ns_all / 1e3:.1f} ({launches}) | {(ns_all - b_all) / 1e3:+.1f} |")
        names = set(total) | set(b_total)
        for n in sorted(names, key=lambda n: -abs(total.get(n, 0) - b_total.get(n, 0))):
            d = total.get(n, 0) - b_total.get(n, 0)
            if abs(d) >= args.min_us * 1e3:
                print(f"| `{short(n)}` | {b_total.get(n, 0) / 1e3:.1f} ({b_count.get(n, 0)}) | {total.get(n, 0) / 1e3:.1f} ({count.get(n, 0)}) | {d / 1e3:+.1f} |")
        return
    print(f"step: kernels {launches}, {ns_all / 1e3:.1f} us")
    for n, ns in sorted(total.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{ns / 1e3:9.1f} us {count[n]:4d}  {n[:150]}")


if __name__ == "__main__":
    main()
