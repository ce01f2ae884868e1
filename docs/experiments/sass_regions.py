#!/usr/bin/env python3
"""Share of a warp-specialized GEMM's warp samples by region (docs/PERF.md 27d, 28e, 69a): the
consumers' tile start (from their setmaxnreg to the K loop's first full-barrier wait, less the
loop head's instructions there), main loop (to the last `wgmma.wait_group 0` before the
producer's setmaxnreg), epilogue (from there to the producer's setmaxnreg), and the producer;
the out-of-line barrier retry loops after the producer's EXIT are attributed by their barrier
operand. The K loop's full-barrier waits are the consumers'
barrier waits run at least half as often as the most run one (the TMA tile unrolls its loop by
two: two such waits); their samples (with their retry loops) are printed apart, as the share of
the consumers' samples spent waiting for a stage's data. Works on the swapped and the TMA tiles.

  ncu --section WarpStateStats --section SourceCounters -o REPORT ... (one kernel)
  ncu --import REPORT.ncu-rep --page source --csv --print-source sass > SASS.csv
  sass_regions.py SASS.csv
(docs/experiments/issue6_runs.sh stalls splits a whole forward's source page per kernel.)
"""
import csv
import sys

path = sys.argv[1]
rows = list(csv.reader(open(path, errors="replace")))
h = next(i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r))
head = rows[h]
data = [r for r in rows[h + 1:] if len(r) == len(head)]
src = head.index(next(c for c in head if c.strip() == "Source"))
samp = next(i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All"))
executed = head.index("Instructions Executed")


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


S = [num(r[samp]) for r in data]
E = [num(r[executed]) for r in data]
ins = [r[src] for r in data]
tot = sum(S)
first = lambda pred, start=0: next(i for i in range(start, len(ins)) if pred(ins[i]))
alloc = first(lambda s: "SETMAXREG.TRY_ALLOC" in s)
dealloc = first(lambda s: "SETMAXREG.DEALLOC" in s)
exit_ = max(i for i in range(len(ins)) if "EXIT" in ins[i].split())
waits = [i for i in range(alloc, dealloc) if "SYNCS.PHASECHK" in ins[i]]
most = max(E[i] for i in waits)
loop_waits = [i for i in waits if E[i] >= most / 2]
loop_start = loop_waits[0]
wait0 = max(i for i in range(alloc, dealloc) if "DEPBAR.LE gsb0, 0x0" in ins[i])
# The K loop's head (its stage and phase arithmetic) sits before its first wait in the code: an
# instruction there run at least half as often as that wait is the loop's, not the tile start's.
head = [i for i in range(alloc, loop_start) if E[i] >= E[loop_start] / 2]
reg = {"prologue": sum(S[:alloc]),
       "tile start": sum(S[alloc:loop_start]) - sum(S[i] for i in head),
       "main loop": sum(S[loop_start:wait0]) + sum(S[i] for i in head),
       "epilogue": sum(S[wait0:dealloc]), "producer": sum(S[dealloc:exit_ + 1])}
operand = lambda s: s.split("[")[1].split("]")[0] if "[" in s else ""
loop_operands = {operand(ins[i]) for i in loop_waits}
start_operands = {operand(ins[i]) for i in waits if i < loop_start}


def with_branch(i):  # a wait's samples and its branch's (the first BRA within 4 instructions)
    return S[i] + next((S[j] for j in range(i + 1, min(i + 5, len(ins))) if "BRA" in ins[j]), 0)


full_wait = sum(with_branch(i) for i in loop_waits)
# The producer's waits for a free stage (or its tile's turn), in line and in the retry loops.
producer_wait = sum(with_branch(i) for i in range(dealloc, exit_ + 1) if "SYNCS.PHASECHK" in ins[i])
i = exit_ + 1
while i < len(ins):  # the retry loops: a wait and its branch back, right after it
    if "SYNCS.PHASECHK" in ins[i]:
        s = with_branch(i)
        o = operand(ins[i])
        if o in loop_operands:
            reg["main loop"] += s
            full_wait += s
        elif o in start_operands:
            reg["tile start"] += s
        else:
            reg["producer"] += s
            producer_wait += s
        i += 2
        continue
    reg["producer"] += S[i]
    i += 1
cons = reg["tile start"] + reg["main loop"] + reg["epilogue"]
print(path, "samples", int(tot), {k: f"{v / tot * 100:.1f}%" for k, v in reg.items()})
print("  of consumer samples: tile start %.1f%%, main loop %.1f%% (of it the full-barrier waits "
      "%.1f%%), epilogue %.1f%%" % (reg["tile start"] / cons * 100, reg["main loop"] / cons * 100,
                                    full_wait / cons * 100, reg["epilogue"] / cons * 100))
print("  of producer samples: waits on a barrier %.1f%%" % (producer_wait / reg["producer"] * 100))
print("  markers", alloc, loop_waits, wait0, dealloc, exit_)
