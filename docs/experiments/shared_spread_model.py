#!/usr/bin/env python3
"""A fluid model of the swapped gate/up and down GEMMs at DeepSeek-V3 T = 512 (docs/PERF.md 49a).

132 SMs take tiles from an in-order counter (gate/up's, then down's once gate/up's are all handed
out; a down tile waits for its row block's gate/up tiles). A routed tile's weights come from DRAM;
a shared expert's weight tile is read by its 8 row blocks' tiles, consecutive in the order, so
DRAM serves 1/8 of their bytes and L2 the rest. Every active SM streams at the same rate x, the
largest that keeps x <= an SM's L2 feed, the SMs' DRAM demand <= the DRAM rate and their sum <=
L2's rate. It compares the shared tiles last (main) with spread_shared_tile's order.

Usage: shared_spread_model.py [DRAM_GBPS ...]   (default 4583, the H200's measured ceiling)
"""
import sys

SMS = 132
L2_RATE = 9.5e12  # L2 to the SMs, all SMs (docs/PERF.md 14b, 38k: 8.5-10 TB/s)
SM_FEED = 72e9  # one SM's L2 feed, ~40 B a clock at 1.8 GHz (38k)
E, SHARED_BLOCKS, GATE_UP_COLS, DOWN_COLS = 256, 8, 16, 28
GATE_UP_BYTES, DOWN_BYTES = 256 * 7168 * 2, 256 * 2048 * 2  # a tile's weights


def makespan(gate_up, down, dram_rate):
    """Seconds until the last tile ends; tiles are (shared, row block, bytes)."""
    now, g, d = 0.0, 0, 0
    work = [None] * SMS  # [bytes left, shared, row block, is gate/up]
    in_down = [False] * SMS
    done = {}  # row block -> gate/up tiles finished
    while True:
        for i in range(SMS):
            if work[i] is None and not in_down[i]:
                if g < len(gate_up):
                    shared, m, b = gate_up[g]
                    g += 1
                    work[i] = [b, shared, m, True]
                    continue
                in_down[i] = True
            if work[i] is None and in_down[i] and d < len(down):
                shared, m, b = down[d]
                d += 1
                work[i] = [b, shared, m, False]
        active = [i for i in range(SMS) if work[i] is not None and
                  (work[i][3] or done.get(work[i][2], 0) == GATE_UP_COLS)]
        if not active:
            if all(w is None for w in work):
                return now
            raise RuntimeError("a down tile waits for gate/up tiles that never run")
        shared = sum(1 for i in active if work[i][1])
        dram_share = (len(active) - shared) + shared / SHARED_BLOCKS
        x = min(SM_FEED, dram_rate / dram_share, L2_RATE / len(active))
        step = min(work[i][0] for i in active) / x
        now += step
        for i in active:
            work[i][0] -= x * step
            if work[i][0] <= 1e-3:
                if work[i][3]:
                    done[work[i][2]] = done.get(work[i][2], 0) + 1
                work[i] = None


def order(cols, tile_bytes, spread):
    """band_tile's order (expert by expert; the shared expert's 8 row blocks fastest), with the
    shared groups last (spread 0) or before routed tile u * (routed / spread) / groups."""
    routed = [(False, e, tile_bytes) for e in range(E) for _ in range(cols)]
    groups = [[(True, E + m, tile_bytes) for m in range(SHARED_BLOCKS)] for _ in range(cols)]
    if spread == 0:
        return routed + [t for grp in groups for t in grp]
    span, out, at = len(routed) // spread, [], 0
    for u, grp in enumerate(groups):
        before = u * span // len(groups)
        out += routed[at:before] + grp
        at = before
    return out + routed[at:]


def main():
    rates = [float(a) * 1e9 for a in sys.argv[1:]] or [4583e9]
    total = (E + 1) * (GATE_UP_COLS * GATE_UP_BYTES + DOWN_COLS * DOWN_BYTES)
    for rate in rates:
        floor = total / rate
        print(f"DRAM {rate / 1e9:.0f} GB/s: {total / 1e9:.2f} GB, floor {floor * 1e6:.1f} us")
        for name, spreads in (("shared last (main)", (0, 0)), ("spread (gate/up 1/2, down all)",
                                                                (2, 1))):
            t = makespan(order(GATE_UP_COLS, GATE_UP_BYTES, spreads[0]),
                         order(DOWN_COLS, DOWN_BYTES, spreads[1]), rate)
            print(f"  {name:32s} {t * 1e6:8.1f} us  {t / floor:.4f} x floor")


if __name__ == "__main__":
    main()
