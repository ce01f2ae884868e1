#!/usr/bin/env python3
"""Share of a warp-specialized swapped GEMM's warp samples by region (docs/PERF.md 27d, 28e):
the consumers' tile start (from their setmaxnreg to the first K tile's full-barrier wait), main
loop (to `wgmma.wait_group 0`), epilogue (to the producer's setmaxnreg), and the producer; the
out-of-line barrier retry loops after the producer's EXIT are attributed by their barrier operand.

  ncu --section WarpStateStats --section SourceCounters -o REPORT ... (one kernel)
  ncu --import REPORT.ncu-rep --page source --csv --print-source sass > SASS.csv
  sass_regions.py SASS.csv
"""
import csv, sys
f=sys.argv[1]
rows=list(csv.reader(open(f,errors='replace')))
h=next(i for i,r in enumerate(rows) if any(c.strip()=="Source" for c in r))
head=rows[h]; data=[r for r in rows[h+1:] if len(r)==len(head)]
src=head.index(next(c for c in head if c.strip()=="Source"))
samp=next(i for i,c in enumerate(head) if c.startswith("Warp Stall Sampling (All"))
def num(x):
    try: return float(x.replace(",",""))
    except: return 0.0
S=[num(r[samp]) for r in data]; tot=sum(S); ins=[r[src] for r in data]
idx=lambda pred, start=0: next(i for i in range(start,len(ins)) if pred(ins[i]))
alloc=idx(lambda s:"SETMAXREG.TRY_ALLOC" in s)
dealloc=idx(lambda s:"SETMAXREG.DEALLOC" in s)
tilebar=idx(lambda s:"BAR.SYNC.DEFER_BLOCKING 0x2" in s, alloc)
loopwait=idx(lambda s:"SYNCS.PHASECHK" in s, tilebar)
wait0=max(i for i in range(alloc,dealloc) if "DEPBAR.LE gsb0, 0x0" in ins[i])
exit_=max(i for i in range(len(ins)) if ins[i].strip().startswith("EXIT") or " EXIT" in ins[i])
# out-of-line retries after the producer's EXIT: attribute by the barrier register
tail=range(exit_+1,len(ins))
reg={"prologue":sum(S[:alloc]),"tile start":sum(S[alloc:loopwait]),"main loop":sum(S[loopwait:wait0]),
     "epilogue":sum(S[wait0:dealloc]),"producer":sum(S[dealloc:exit_+1])}
first=idx(lambda s:"SYNCS.PHASECHK" in s, alloc)
op=lambda s: s.split("[")[1].split("]")[0] if "[" in s else ""
for i in tail:
    s=ins[i]
    if op(s)==op(ins[first]): reg["tile start"]+=S[i]
    elif op(s)==op(ins[loopwait]): reg["main loop"]+=S[i]
    else: reg["producer"]+=S[i]
cons=reg["tile start"]+reg["main loop"]+reg["epilogue"]
print(f, "samples", int(tot), {k:f"{v/tot*100:.1f}%" for k,v in reg.items()})
print("  of consumer samples: tile start %.1f%%, main loop %.1f%%, epilogue %.1f%%"%(reg["tile start"]/cons*100, reg["main loop"]/cons*100, reg["epilogue"]/cons*100))
print("  markers", alloc, tilebar, loopwait, wait0, dealloc, exit_)
