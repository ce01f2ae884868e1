#!/usr/bin/env python3
"""Reads l2_partition.cu's output: splits the write-then-read latencies into near and far, then
looks for the home partition as a GF(2)-linear function (an XOR of address bits) of the offset.
Usage: l2_partition.py OUTPUT.txt"""
import sys
from collections import Counter


def split(lats):
    """Threshold between the two modes of the latencies: the widest gap between the 5th and 95th
    percentile of the sorted values."""
    s = sorted(lats)
    lo, hi = s[len(s) // 20], s[len(s) * 19 // 20]
    vals = sorted(set(v for v in s if lo <= v <= hi))
    if len(vals) < 2:
        return s[-1] + 0.5  # one value: no second mode, every line near
    best = max(range(len(vals) - 1), key=lambda i: vals[i + 1] - vals[i])
    return (vals[best] + vals[best + 1]) / 2


def solve(rows):
    """rows: (offset, bit). Finds mask, c with parity(offset & mask) ^ c == bit for most rows,
    by Gaussian elimination over GF(2) on the rows (offset bits 7..40 and a constant)."""
    nbits = 41
    basis = {}  # pivot -> (vector, rhs)
    for off, b in rows:
        v = ((off >> 7) << 1) | 1  # bit 0: the constant
        r = b
        for p in sorted(basis, reverse=True):
            if v >> p & 1:
                v ^= basis[p][0]
                r ^= basis[p][1]
        if v == 0:
            if r:
                return None  # inconsistent: not linear (or a misclassified row)
            continue
        p = v.bit_length() - 1
        basis[p] = (v, r)
    # back-substitute: set free variables to 0
    sol = 0
    for p in sorted(basis):
        v, r = basis[p]
        rest = v & ~(1 << p)
        if bin(rest & sol).count("1") % 2:
            r ^= 1
        if r:
            sol |= 1 << p
    return sol


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else "-"


def analyze(name, data, col):
    """Classes (1: far) of the lines of `data` by the latency in column `col`, and the home as an
    XOR of offset bits, over all lines and page by page; returns the classes by line index."""
    lats = [d[col] for d in data]
    t = split(lats)
    far = [1 if v > t else 0 for v in lats]
    print(f"{name}: {len(data)} lines, threshold {t:.0f} cycles, far {sum(far)}; near median "
          f"{median([v for v, f_ in zip(lats, far) if not f_])}, far median "
          f"{median([v for v, f_ in zip(lats, far) if f_])}; second read median "
          f"{median([d[2] for d in data])}")
    print("  first 64 lines' classes:", "".join(str(x) for x in far[:64]))
    rows = [(d[0], f_) for d, f_ in zip(data, far)]
    sol = solve(rows)
    if sol is None:
        print("  not an XOR of address bits on all lines; trying subsets")
        for n in (64, 256, 1024):
            s2 = solve(rows[:n])
            print(f"   first {n}: {'linear, mask ' + hex((s2 >> 1) << 7) + ' const ' + str(s2 & 1) if s2 is not None else 'not linear'}")
    else:
        mask = (sol >> 1) << 7
        print(f"  home = parity(offset & {hex(mask)}) ^ {sol & 1}: bits",
              [b for b in range(7, 48) if mask >> b & 1])
    if name.startswith("fine"):
        # Inside each 2 MiB page (the physical frame's bits above 21 are the page's own): the
        # mask of the first page, and whether every other page follows it up to a constant.
        page = 1 << 21
        first = [r for r in rows if r[0] < page]
        sol = solve(first)
        if sol is None:
            print("  page 0: not an XOR of offset bits")
        else:
            mask = (sol >> 1) << 7
            agree = []
            for pg in range(1, max(r[0] for r in rows) // page + 1):
                rs = [(o, b) for o, b in rows if o // page == pg]
                m = sum(1 for o, b in rs if (bin(o & mask).count("1") & 1) == b)
                agree.append(max(m, len(rs) - m) / len(rs))
            print(f"  page 0: home = parity(offset & {hex(mask)}) ^ {sol & 1}; other pages "
                  f"agree up to a constant: {', '.join(f'{a:.3f}' for a in agree)}")
            print(f"MASK {hex(mask)}")
        # period: the smallest P with class(i) == class(i + P) for most i
        for P in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768):
            same = sum(1 for i in range(len(far) - P) if far[i] == far[i + P])
            print(f"  period {P} lines ({P * 128} B): agree {same / (len(far) - P):.3f}")
    return far


def main():
    fine, coarse, sms = [], [], []
    for line in open(sys.argv[1]):
        f = line.split()
        if not f:
            continue
        if f[0] in ("fine", "coarse"):
            # OFFSET LAT1 LAT2 [ATOM] smID (ATOM since version 38)
            atom = int(f[4]) if len(f) >= 6 else None
            (fine if f[0] == "fine" else coarse).append((int(f[1]), int(f[2]), int(f[3]), atom))
        elif f[0] == "sm":
            sms.append((int(f[1]), int(f[2]), [int(x) for x in f[3:]]))
    classes = {}
    for name, data in (("fine", fine), ("coarse", coarse)):
        if not data:
            continue
        classes[name] = analyze(name + " (write, then read)", data, 1)
        if data[0][3] is not None:
            classes[name] = analyze(name + " (atomic)", data, 3)
    if sms and fine:
        # Since version 38 the SM rows time atomics, compared with the fine run's atomic classes.
        fine_far = {d[0] // 128: c for d, c in zip(fine, classes["fine"])}
        print("SMs: agreement of each SM's near/far with the fine run's SM (1: same partition, 0: other)")
        part = Counter()
        out = []
        for sm, first, lats in sms:
            ts = split(lats)
            agree = sum(1 for i, v in enumerate(lats) if (1 if v > ts else 0) == fine_far[first + i]) / len(lats)
            out.append((sm, agree))
            part[agree > 0.5] += 1
        print("  ", " ".join(f"{sm}:{a:.2f}" for sm, a in sorted(out)))
        print("  same partition:", part[True], "other:", part[False])
        print("  SMs of the other partition:", sorted(sm for sm, a in out if a <= 0.5))


main()
