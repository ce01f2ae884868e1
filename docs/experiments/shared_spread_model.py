#!/usr/bin/env python3
"""A fluid model of the swapped gate/up and down GEMMs of 64-token tiles (docs/PERF.md 49a).

132 SMs take tiles from an in-order counter (gate/up's, then down's once gate/up's are all handed
out; a down tile waits for its row block's gate/up tiles). A weight tile read by r row blocks'
tiles, consecutive in the order, costs DRAM 1/r of their bytes and L2 the rest: a routed expert
of one row block reads its weights from DRAM; the shared expert's T tokens are T / 64 row blocks
in bands of up to 12 (band_tile), so a band of b blocks reads a weight tile from L2 b - 1 times
in b. Every active SM streams at one rate x, the largest that keeps x <= an SM's L2 feed, the
SMs' DRAM demand <= the DRAM rate and their sum <= L2's rate. It compares the shared tiles last
(main) with spread_shared_tile's order (gate/up's groups over the first half of its routed tiles,
down's over all). A fluid model has no ragged end (the last SMs speed up as the others leave),
so it prices only what the shared tiles' order costs.

DeepSeek-V3 (E = 256, k = 8) at T = 512 and 1024: 16 and 32 rows an expert, one block each.
gpumode (E = 32, k = 4) at T = 512: ~64 rows an expert, one or two blocks (uniform random
routing, seeded).

Usage: shared_spread_model.py [DRAM_GBPS ...]   (default 4583, the H200's measured ceiling)
"""
import random
import sys

SMS = 132
L2_RATE = 9.5e12  # L2 to the SMs, all SMs (docs/PERF.md 14b, 38k: 8.5-10 TB/s)
SM_FEED = 72e9  # one SM's L2 feed, ~40 B a clock at 1.8 GHz (38k)
TOKENS_A_BLOCK, BAND, GATE_UP_COLS, DOWN_COLS = 64, 12, 16, 28
GATE_UP_BYTES, DOWN_BYTES = 256 * 7168 * 2, 256 * 2048 * 2  # a tile's weights (H 7168, I 2048)


def makespan(gate_up, down, dram_rate):
    """Seconds until the last tile ends; a tile is (row block, bytes, readers of its weights)."""
    now, g, d = 0.0, 0, 0
    work = [None] * SMS  # [bytes left, readers, row block, is gate/up]
    in_down = [False] * SMS
    done = {}  # row block -> gate/up tiles finished
    while True:
        for i in range(SMS):
            if work[i] is None and not in_down[i]:
                if g < len(gate_up):
                    m, b, r = gate_up[g]
                    g += 1
                    work[i] = [b, r, m, True]
                    continue
                in_down[i] = True
            if work[i] is None and in_down[i] and d < len(down):
                m, b, r = down[d]
                d += 1
                work[i] = [b, r, m, False]
        active = [i for i in range(SMS) if work[i] is not None and
                  (work[i][3] or done.get(work[i][2], 0) == GATE_UP_COLS)]
        if not active:
            if all(w is None for w in work):
                return now
            raise RuntimeError("a down tile waits for gate/up tiles that never run")
        dram_share = sum(1.0 / work[i][1] for i in active)
        x = min(SM_FEED, dram_rate / dram_share, L2_RATE / len(active))
        step = min(work[i][0] for i in active) / x
        now += step
        for i in active:
            work[i][0] -= x * step
            if work[i][0] <= 1e-3:
                if work[i][3]:
                    done[work[i][2]] = done.get(work[i][2], 0) + 1
                work[i] = None


def order(blocks, tokens, cols, tile_bytes, spread):
    """band_tile's order for routed experts of blocks[e] row blocks (one band each) and one
    shared expert of `tokens` rows (band by band, column block by column block, a band's blocks
    fastest), with the shared groups last (spread 0) or group u before routed tile
    u * (routed / spread) / groups."""
    routed = [((e, b), tile_bytes, n) for e, n in enumerate(blocks) for _ in range(cols)
              for b in range(n)]
    shared = (tokens + TOKENS_A_BLOCK - 1) // TOKENS_A_BLOCK
    groups = []
    for first in range(0, shared, BAND):
        rows = min(BAND, shared - first)
        groups += [[(("shared", first + b), tile_bytes, rows) for b in range(rows)]
                   for _ in range(cols)]
    if spread == 0:
        return routed + [t for grp in groups for t in grp]
    span, out, at = len(routed) // spread, [], 0
    for u, grp in enumerate(groups):
        before = u * span // len(groups)
        out += routed[at:before] + grp
        at = before
    return out + routed[at:]


def model(name, blocks, tokens, rate):
    experts = len(blocks) + 1
    total = experts * (GATE_UP_COLS * GATE_UP_BYTES + DOWN_COLS * DOWN_BYTES)
    floor = total / rate
    print(f"{name}, DRAM {rate / 1e9:.0f} GB/s: {total / 1e9:.2f} GB of weights, "
          f"floor {floor * 1e6:.1f} us")
    for label, (gate_up, down) in (("shared last (main)", (0, 0)),
                                   ("spread (gate/up 1/2, down all)", (2, 1))):
        t = makespan(order(blocks, tokens, GATE_UP_COLS, GATE_UP_BYTES, gate_up),
                     order(blocks, tokens, DOWN_COLS, DOWN_BYTES, down), rate)
        print(f"  {label:32s} {t * 1e6:8.1f} us  {t / floor:.4f} x floor")


def main():
    rates = [float(a) * 1e9 for a in sys.argv[1:]] or [4583e9]
    rng = random.Random(1)
    counts = [0] * 32
    for _ in range(512):
        for e in rng.sample(range(32), 4):
            counts[e] += 1
    gpumode = [(c + TOKENS_A_BLOCK - 1) // TOKENS_A_BLOCK for c in counts]
    for rate in rates:
        model("DeepSeek-V3 T = 512", [1] * 256, 512, rate)
        model("DeepSeek-V3 T = 1024", [1] * 256, 1024, rate)
        model("gpumode T = 512", gpumode, 512, rate)


if __name__ == "__main__":
    main()
