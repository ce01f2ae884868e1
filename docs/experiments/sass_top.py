#!/usr/bin/env python3
"""Where a kernel's warps wait: the SASS instructions with the most warp-state samples, each with
its top three stall reasons, and the samples by opcode (docs/PERF.md 18d, 19b).

  ncu --section WarpStateStats --section SourceCounters -o REPORT ... (one kernel)
  ncu --import REPORT.ncu-rep --page source --csv --print-source sass > SASS.csv
  sass_top.py SASS.csv [N]     (N instructions, default 30)

Samples count every resident warp: in the warp-specialized GEMMs the producer warps' waits for
free stages are among them.
"""
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
# find the header row (the one with a 'Source' column)
h = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
head = rows[h]; data = [r for r in rows[h + 1:] if len(r) == len(head)]
print("columns:", "|".join(c[:40] for c in head)[:1500])
def col(name):
    for i, c in enumerate(head):
        if c.strip() == name: return i
    return None
src = col("Source"); addr = col("Address")
samp = next((i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All")), None)
stall_cols = [i for i, c in enumerate(head) if c.startswith("stall_") or ("Stall" in c and "(All" not in c and "Not" not in c and i != samp)]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
total = sum(num(r[samp]) for r in data)
print(f"instructions {len(data)}, samples {total:.0f}")
# by opcode
ops = {}
for r in data:
    op = r[src].split()[0] if r[src].split() else "?"
    if op.startswith("@"): op = r[src].split()[1] if len(r[src].split()) > 1 else op
    op = op.split(".")[0]
    ops[op] = ops.get(op, 0) + num(r[samp])
print("by opcode:", ", ".join(f"{k} {100*v/total:.1f}%" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:14]))
top = sorted(data, key=lambda r: -num(r[samp]))[:int(sys.argv[2]) if len(sys.argv) > 2 else 30]
for r in top:
    s = num(r[samp])
    reasons = sorted(((num(r[i]), head[i]) for i in stall_cols), reverse=True)[:3]
    rs = ", ".join(f"{n.replace('stall_','')[:28]} {100*v/max(s,1):.0f}%" for v, n in reasons if v > 0)
    print(f"{100*s/total:5.1f}% {r[addr] if addr is not None else ''} {r[src][:60]:60s} {rs}")
