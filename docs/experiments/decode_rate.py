#!/usr/bin/env python3
"""The fused decode kernel's weight stream over time, from a trace of 20 or more words (PERF.md 55).

    decode_rate.py FILE H I S K [SHARED_PARTS] [BIN_US] [WORDS]

FILE: RT_MOE_DECODE_TRACE's words of each ticket (kDecodeTraceWords, params.h): block << 32
| SM, start, end of a down item's wait, end, two legacy steps, then when the data of K step kt had
landed in the block's ring for kt = 0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96 (0 where the
item has fewer steps). An item's bytes landed by time t are (kt + 1) 8 KiB at those samples (64
weight rows of 128 bytes a step; x and h rows come from L2 and are not counted), and all of them
at its end; between samples the script interpolates linearly. Prints, for each bin of BIN_US
(default 2) microseconds from the kernel's first start: the stream in GB/s, how many items had
landed data and were not done (streaming), and how many had started but had no data yet
(filling); then the first data's latency (start to kt = 0) by group and phase.

WORDS (default 20): 21 or 23 with PERF.md 56's trace, whose word 2 is also a routed gate/up
item's end of its wait for the routing, word 20 when the item's prologue loads were issued, and
(23) words 21 and 22 when its expert and its rows had been read; then it also prints each group's
chain in the kernel's first 40 us and later: start to the wait's end, (to the expert read, to the
rows read,) to the prologue issued, to the first data.
"""
import struct
import sys
from collections import defaultdict

from decode_trace import item_kinds

STEPS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96]


def spread(values):
    """The median (10th, 90th percentile) of values, as printed."""
    v = sorted(values)
    q = lambda f: v[min(len(v) - 1, int(f * len(v)))]
    return f"{q(.5):6.2f} ({q(.1):.2f}, {q(.9):.2f})"


def main():
    path = sys.argv[1]
    H, I, S, K = (int(v) for v in sys.argv[2:6])
    sp = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    bin_ns = float(sys.argv[7]) * 1e3 if len(sys.argv) > 7 else 2e3
    WORDS = int(sys.argv[8]) if len(sys.argv) > 8 else 20
    stage = 64 * 128  # weight bytes a K step (64 rows of 128 bytes)
    data = open(path, "rb").read()
    words = struct.unpack(f"<{len(data) // 8}Q", data)
    items = [words[WORDS * t:WORDS * (t + 1)] for t in range(len(words) // WORDS)]
    items = [w for w in items if w[1]]
    # Relative to the first start, in integers: float64 holds %globaltimer's ~1.7e18 ns only to
    # 256 ns.
    base = min(w[1] for w in items)
    items = [w[:1] + tuple(v - base if v else 0 for v in w[1:]) for w in items]
    n = len(items)
    groups = [(name, nbytes // stage) for name, nbytes in item_kinds(n, H, I, S, sp)[0]]
    if len(groups) != n:
        print(f"{path}: {n} items, groups count {len(groups)}; not read")
        return
    t0 = 0
    t1 = max(w[3] for w in items)
    bins = int((t1 - t0) / bin_ns) + 1
    rate = [0.0] * bins
    streaming = [0] * bins
    filling = [0] * bins
    first_latency = defaultdict(list)
    chain = defaultdict(list)  # (group, phase): start to wait end, to prologue, to first data
    for (name, tiles), w in zip(groups, items):
        start, end = w[1], w[3]
        begin = w[2] if w[2] else start  # a down item's stream starts after its wait (0: none)
        pts = [(begin, 0.0)]
        for step, at in zip(STEPS, w[6:]):
            if at and step < tiles:
                pts.append((at, (step + 1) * stage))
        pts.append((end, tiles * stage))
        first = pts[1][0] if len(pts) > 2 else end
        if WORDS > 20 and w[20]:
            marks = [start, begin] + ([w[21], w[22]] if WORDS > 22 else []) + [w[20], first]
            if all(marks[1:]):
                chain[(name, "first 40 us" if start - t0 < 40e3 else "later")].append(
                    [(b - a) / 1e3 for a, b in zip(marks, marks[1:])] + [(start - t0) / 1e3])
        phase = "first 10 us" if begin - t0 < 10e3 else "later"
        first_latency[(name, phase)].append((first - begin) / 1e3)
        for (ta, ba), (tb, bb) in zip(pts, pts[1:]):
            if tb <= ta:
                continue
            r = (bb - ba) / (tb - ta)
            a = ta
            while a < tb:
                i = int((a - t0) / bin_ns)
                e = min(tb, t0 + (i + 1) * bin_ns)
                rate[i] += r * (e - a)
                a = e
        for i in range(bins):
            lo, hi = t0 + i * bin_ns, t0 + (i + 1) * bin_ns
            if start < hi and first > lo:
                filling[i] += 1
            elif first < hi and end > lo:
                streaming[i] += 1
    total = sum(tiles * stage for name, tiles in groups)
    print(f"{path}: {n} items, span {(t1 - t0) / 1e3:.1f} us, {total / 1e6:.1f} MB, "
          f"{total / (t1 - t0):.0f} GB/s over the span")
    print("  bin us: GB/s streaming+filling")
    line = []
    for i in range(bins):
        line.append(f"{i * bin_ns / 1e3:5.0f}:{rate[i] / bin_ns:5.0f} {streaming[i]:3d}+{filling[i]:<3d}")
        if len(line) == 6:
            print("   " + "  ".join(line))
            line = []
    if line:
        print("   " + "  ".join(line))
    print("  first data after the stream's start (us): median (10%, 90%), items")
    for key in sorted(first_latency):
        v = first_latency[key]
        print(f"    {key[0]:15s} {key[1]:11s} {spread(v)} {len(v)}")
    if chain:
        steps = (["the wait's end"] + (["the expert read", "the rows read"] if WORDS > 22 else [])
                 + ["the prologue's loads issued", "the first data"])
        print("  the chain (us, median (10%, 90%)): start to " + " | to ".join(steps) + "; starts")
        for key in sorted(chain):
            v = chain[key]
            cols = [spread(x[j] for x in v) for j in range(len(steps))]
            s0 = sorted(x[-1] for x in v)
            print(f"    {key[0]:15s} {key[1]:11s} {' | '.join(cols)}; {s0[0]:.1f}-{s0[-1]:.1f}, "
                  f"{len(v)} items")


if __name__ == "__main__":
    main()
