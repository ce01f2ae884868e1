#!/usr/bin/env python3
"""Summarizes a fused decode kernel trace (RT_MOE_DECODE_TRACE of decode_persist.patch, PERF.md 54).

    decode_trace.py FILE H I S K [SHARED_PARTS] [DOWN_PARTS] [BLOCK_N] [WORDS]

FILE holds WORDS little-endian u64 a ticket (6, the default; 20 with tail_help.patch, PERF.md 55,
21 since 56; the first six are the same): block << 32 | SM, start, end of the down item's wait
(0 for gate/up; since 56 a routed gate/up item's wait for the routing), end, and when the
item's K loop issued its step tiles / 2 and 3 tiles / 4 (ns, %globaltimer). The other arguments
give the ticket order's groups (grouped_gemm_decode.cuh, shared down last): the shared expert's
gate/up items, the routed gate/up items, the shared down items, the routed down items; their
bytes of weights.
"""
import struct
import sys
from collections import defaultdict


GROUPS = ("shared gate/up", "routed gate/up", "shared down", "routed down")  # ticket order


def item_kinds(n, H, I, S, sp=2, dp=1, bn=64):
    """The group and the weight bytes of each of n items in ticket order (shared down last), and
    the routed row blocks R: the shared expert's gate/up items, the routed gate/up items, the
    shared down items, the routed down items."""
    gu_cols = (I + bn // 2 - 1) // (bn // 2)
    down_cols = (H + bn - 1) // bn
    shared_gu = S * gu_cols * sp  # one row block a shared chunk (T <= 16)
    # n = shared_gu + R gu_cols + S down_cols + R down_cols dp.
    R = (n - shared_gu - S * down_cols) // (gu_cols + down_cols * dp)
    counts = (shared_gu, R * gu_cols, S * down_cols, R * down_cols * dp)
    nbytes = (bn * H * 2 // sp, bn * H * 2, bn * I * 2, bn * I * 2 // dp)
    kinds = []
    for name, count, b in zip(GROUPS, counts, nbytes):
        kinds += [(name, b)] * count
    return kinds, R


def main():
    path = sys.argv[1]
    H, I, S, K = (int(v) for v in sys.argv[2:6])
    sp = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    dp = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    bn = int(sys.argv[8]) if len(sys.argv) > 8 else 64
    nw = int(sys.argv[9]) if len(sys.argv) > 9 else 6
    data = open(path, "rb").read()
    words = struct.unpack(f"<{len(data) // 8}Q", data)
    items = []
    for t in range(len(words) // nw):
        w = words[nw * t:nw * t + 6]
        if w[1] == 0:
            continue
        items.append((t, w[0] >> 32, w[0] & 0xFFFFFFFF, w[1], w[2], w[3], w[4], w[5]))
    if not items:
        print(path, "no items")
        return
    n = len(items)
    kinds, R = item_kinds(n, H, I, S, sp, dp, bn)
    if len(kinds) != n:
        print(f"{path}: {n} items, the groups count {len(kinds)} (R = {R}); kinds approximate")
        kinds += [("?", 0)] * (n - len(kinds))
    t0 = min(i[3] for i in items)
    t1 = max(i[5] for i in items)
    us = lambda v: (v - t0) / 1e3
    total_bytes = sum(kinds[k][1] for k in range(n))
    print(f"{path}: {n} items, {len({i[1] for i in items})} blocks on {len({i[2] for i in items})} SMs, "
          f"span {us(t1):.1f} us, {total_bytes / 1e6:.1f} MB of weights, "
          f"{total_bytes / (t1 - t0):.0f} GB/s over the span")
    by_kind = defaultdict(list)
    for k, it in enumerate(items):
        name, nbytes = kinds[k]
        wait = (it[4] - it[3]) / 1e3 if it[4] else 0.0
        by_kind[name].append(((it[5] - it[3]) / 1e3, wait, us(it[3]), us(it[5])))
    for name in GROUPS:
        v = by_kind.get(name)
        if not v:
            continue
        d = sorted(x[0] for x in v)
        w = sorted(x[1] for x in v)
        print(f"  {name:15s} {len(v):5d} items: duration median {d[len(d) // 2]:.2f} us "
              f"(10% {d[len(d) // 10]:.2f}, 90% {d[9 * len(d) // 10]:.2f}), wait median "
              f"{w[len(w) // 2]:.2f}, starts {min(x[2] for x in v):.1f}-{max(x[2] for x in v):.1f}, "
              f"ends {min(x[3] for x in v):.1f}-{max(x[3] for x in v):.1f}")
    # Per block: gaps between its consecutive items (persistent blocks), and its last end.
    blocks = defaultdict(list)
    for it in items:
        blocks[it[1]].append(it)
    gaps = []
    for b in blocks.values():
        b.sort(key=lambda i: i[3])
        gaps += [(b[j + 1][3] - b[j][5]) / 1e3 for j in range(len(b) - 1)]
    if gaps:
        gaps.sort()
        print(f"  gaps between a block's items: {len(gaps)}, median {gaps[len(gaps) // 2]:.2f} us, "
              f"90% {gaps[9 * len(gaps) // 10]:.2f}")
    sm_end = defaultdict(int)
    for it in items:
        sm_end[it[2]] = max(sm_end[it[2]], it[5])
    idle = sorted((t1 - e) / 1e3 for e in sm_end.values())
    print(f"  SM idle after its last item: median {idle[len(idle) // 2]:.2f} us, mean "
          f"{sum(idle) / len(idle):.2f}, max {idle[-1]:.2f}")
    # Down items by when they end (5 us bins): the median time of their K loop's second half
    # (step tiles / 2 to the end) and last quarter, against the first half's (ready to tiles / 2).
    bins = defaultdict(list)
    for k, it in enumerate(items):
        if "down" not in kinds[k][0] or it[4] == 0 or it[6] == 0:
            continue
        bins[int(us(it[5]) // 5) * 5].append(
            ((it[6] - it[4]) / 1e3, (it[5] - it[6]) / 1e3, (it[5] - it[7]) / 1e3))
    med = lambda v: sorted(v)[len(v) // 2]
    print("  down items by end (us): first half / second half / last quarter, median us (items)")
    line = [f"{b}:{med([x[0] for x in v]):.1f}/{med([x[1] for x in v]):.1f}/"
            f"{med([x[2] for x in v]):.1f}({len(v)})" for b, v in sorted(bins.items())]
    for j in range(0, len(line), 8):
        print("   ", " ".join(line[j:j + 8]))
    # The stream's rate in windows: weight bytes of the items running, spread evenly over each
    # item's span, and the items running.
    step = 5.0
    edges = [step * j for j in range(int(us(t1) / step) + 2)]
    rate = [0.0] * len(edges)
    running = [0] * len(edges)
    for k, it in enumerate(items):
        a, e = us(it[3]), us(it[5])
        nbytes = kinds[k][1]
        for j, lo in enumerate(edges):
            hi = lo + step
            overlap = max(0.0, min(e, hi) - max(a, lo))
            if overlap > 0 and e > a:
                rate[j] += nbytes * overlap / (e - a)
                running[j] += 1 if a < hi and e > lo else 0
    print("  window us: GB/s (items running)")
    line = []
    for j, lo in enumerate(edges):
        if lo > us(t1):
            break
        line.append(f"{lo:.0f}:{rate[j] / step / 1e3:.0f}({running[j]})")
    for j in range(0, len(line), 10):
        print("   ", " ".join(line[j:j + 10]))


if __name__ == "__main__":
    main()
