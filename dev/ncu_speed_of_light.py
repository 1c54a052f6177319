"""How busy one training step keeps the GPU, from Nsight Compute's speed-of-light metrics, and the least time
any packing of the same kernels could take.

Reads `ncu --csv --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,
gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed ...` of `ufp4 bench step --warmup 0 --steps 1`
(tools/gpu-step-profile.sh with NCU_METRICS=sol) and takes the first step's launches as dev/ncu_kernel_sums.py does.
For each launch: its time t, its SM throughput s and its memory throughput m, each the busiest unit of its
kind as a share of that unit's peak (ncu's speed of light).

Runs that share the GPU (MPS, streams) can overlap one kernel's idle units with another's busy ones, but no
unit can go past its peak: K steps packed take at least K * max(sum t*s, sum t*m). That is the bound printed
beside the step's time. It holds for the same kernels doing the same work; a kernel that does less (fused,
rewritten) moves it. It is a bound, not a forecast: s is the busiest of the SM's pipes, so two kernels that
load different pipes could overlap past it, and nothing is ever packed that tightly.

usage: python dev/ncu_speed_of_light.py ncu.csv[.gz]   (a Markdown table by kind of kernel, then the bound)
"""
import collections
import re
import sys

from ncu_kernel_sums import GROUPS, first_step, kernel_name, metric_rows, value

TIME, SM, MEM = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                 "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")


def launches(path):
    """[(name, ns, sm %, memory %)] in launch order."""
    by_id = collections.OrderedDict()
    for r in metric_rows(path):
        by_id.setdefault(r["ID"], {"name": kernel_name(r)})[r["Metric Name"]] = value(r)
    missing = [m for m in (TIME, SM, MEM) if not by_id or m not in next(iter(by_id.values()))]
    if missing:
        print(f"{path}: no {', '.join(missing)} in the CSV (profile with NCU_METRICS=sol)", file=sys.stderr)
        sys.exit(2)
    return [(r["name"], r[TIME], r[SM], r[MEM]) for r in by_id.values()]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    step = first_step(launches(sys.argv[1]))
    sums = collections.OrderedDict((g, [0.0, 0.0, 0.0]) for g, _ in GROUPS)  # ns, ns * sm, ns * memory
    for name, ns, s, m in step:
        acc = sums[next(g for g, rx in GROUPS if re.search(rx, name))]
        acc[0] += ns
        acc[1] += ns * s / 100
        acc[2] += ns * m / 100
    total = [sum(a[i] for a in sums.values()) for i in range(3)]
    print("| kind of kernel | us | SM busy, time-weighted | memory busy, time-weighted | SM work, us at peak | memory work, us at peak |")
    print("|---|---|---|---|---|---|")
    for g, (ns, sm_ns, mem_ns) in list(sums.items()) + [("all kernels of the step", total)]:
        if ns:
            print(f"| {g} | {ns / 1e3:.0f} | {100 * sm_ns / ns:.0f}% | {100 * mem_ns / ns:.0f}% | {sm_ns / 1e3:.0f} | {mem_ns / 1e3:.0f} |")
    bound = max(total[1], total[2])
    print(f"\n{len(step)} launches, {total[0] / 1e3:.0f} us of kernels. Packed, a step of these kernels takes at least "
          f"{bound / 1e3:.0f} us (the larger work at peak): at most {total[0] / bound:.2f}x the step's own rate.")


if __name__ == "__main__":
    main()
