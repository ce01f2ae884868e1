#!/usr/bin/env python3
"""Prints the per-stage table of scripts/profile from ncu's CSV (--csv, one row per metric).

Usage: profile_table.py PROFILE.csv TOKENS [BENCH.log]   (TOKENS: the comma-separated token
counts, in the order the benchmark ran them; each forward is the 7 kernels from rt_moe_router to
rt_moe_combine). With the benchmark's log, each T's routing, dispatch and combine (issue 6: under
5% of the forward) are also given as a share of the forward's median time in that log.
"""
import csv
import re
import sys

STAGES = ["router", "topk", "offsets", "scatter", "gate_up", "down", "combine"]
# Everything but the two expert GEMMs.
AROUND_GEMMS = {"router", "topk", "offsets", "scatter", "combine"}


def number(text):
    return float(text.replace(",", "")) if text not in ("", "n/a") else float("nan")


def bench_medians(path):
    """T -> the forward's median ms, from the rows of rt_moe_bench's table."""
    medians = {}
    with open(path) as f:
        for line in f:
            row = re.match(r"\s+(\d+)\s+(\d+\.\d+)\s", line)
            if row:
                medians.setdefault(int(row.group(1)), float(row.group(2)))
    return medians


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    path, tokens = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]
    forward_ms = bench_medians(sys.argv[3]) if len(sys.argv) == 4 else {}
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"profile_table.py: no ncu CSV header in {path}")
    kernels = {}  # ID -> (name, {metric: value in base units})
    for row in csv.DictReader(lines[start:]):
        name, metrics = kernels.setdefault(int(row["ID"]), (row["Kernel Name"], {}))
        value, unit = number(row["Metric Value"]), row["Metric Unit"]
        scale = {"Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "us": 1e3, "ms": 1e6, "usecond": 1e3,
                 "msecond": 1e6}.get(unit, 1.0)
        metrics[row["Metric Name"]] = value * scale
    ordered = [kernels[i] for i in sorted(kernels)]
    if len(ordered) != len(STAGES) * len(tokens):
        sys.exit(f"profile_table.py: {len(ordered)} kernels profiled, expected "
                 f"{len(STAGES)} per forward x {len(tokens)} token counts")
    print(f"{'T':>7} {'stage':>8} {'us':>10} {'DRAM rd GB':>11} {'DRAM wr GB':>11} "
          f"{'TB/s':>6} {'L2 hit':>7} {'L2 %':>6} {'tensor %':>9} {'L2 rd GB':>10} {'CTAs':>7} "
          f"{'SM act':>7} {'min':>6} {'SM GHz':>7} {'fabric %':>9} {'fabric GB':>10}")
    for t_index, t in enumerate(tokens):
        total = around = 0.0
        for s_index, stage in enumerate(STAGES):
            name, m = ordered[t_index * len(STAGES) + s_index]
            # Every stage's symbol is rt_moe_entry; rt_moe_<stage> names are accepted too.
            if name not in ("rt_moe_" + stage, "rt_moe_entry"):
                sys.exit(f"profile_table.py: kernel {name} where rt_moe_{stage} was expected")
            ns = m.get("gpu__time_duration.sum", float("nan"))
            rd = m.get("dram__bytes_read.sum", float("nan"))
            wr = m.get("dram__bytes_write.sum", float("nan"))
            total += ns
            around += ns if stage in AROUND_GEMMS else 0.0
            print(f"{t:>7} {stage:>8} {ns / 1e3:>10.1f} {rd / 1e9:>11.3f} {wr / 1e9:>11.3f} "
                  f"{(rd + wr) / ns / 1e3:>6.2f} "
                  f"{m.get('lts__t_sector_hit_rate.pct', float('nan')):>6.1f}% "
                  f"{m.get('lts__throughput.avg.pct_of_peak_sustained_elapsed', float('nan')):>5.1f}% "
                  f"{m.get('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', float('nan')):>8.1f}% "
                  f"{m.get('lts__t_sectors_op_read.sum', float('nan')) * 32 / 1e9:>10.2f} "
                  f"{m.get('launch__grid_size', float('nan')):>7.0f} "
                  # sm__cycles_active / sm__cycles_elapsed: how much of the kernel its SMs had work.
                  f"{100 * m.get('sm__cycles_active.avg', float('nan')) / m.get('sm__cycles_elapsed.avg', float('nan')):>6.1f}% "
                  # The least busy SM: a ragged last wave (or a short grid) shows here first.
                  f"{100 * m.get('sm__cycles_active.min', float('nan')) / m.get('sm__cycles_elapsed.avg', float('nan')):>5.1f}% "
                  # The SM clock the kernel ran at: elapsed cycles per nanosecond. At the 700 W
                  # limit the H200 runs the prefill GEMMs well below its 1.98 GHz boost.
                  f"{m.get('sm__cycles_elapsed.avg', float('nan')) / ns:>7.2f} "
                  # The fabric between the two L2 partitions (lines homed in the far one).
                  f"{m.get('lts__ltcfabric2ltc_cycles_active.avg.pct_of_peak_sustained_elapsed', float('nan')):>8.1f}% "
                  # The sectors that crossed it. A stream of reads crosses half its bytes, each
                  # line homed in the partition far from its reader (docs/PERF.md 14b).
                  f"{m.get('lts__t_sectors_srcunit_ltcfabric.sum', float('nan')) * 32 / 1e9:>10.2f}")
        print(f"{t:>7} {'sum':>8} {total / 1e3:>10.1f}")
        share = f"{t:>7} routing, dispatch and combine: {around / 1e3:.1f} us, " \
                f"{100 * around / total:.1f}% of the kernels' sum"
        if t in forward_ms:
            share += f", {100 * around / 1e6 / forward_ms[t]:.1f}% of the forward's median " \
                     f"({forward_ms[t]:.4f} ms)"
        print(share)


if __name__ == "__main__":
    main()
