#!/usr/bin/env bash
# Issue 6's device run on an H200, from the repository root on the GPU host, carrying
# devrun/$BUILD.tgz (BUILD default m26: `scripts/ab_prepare --tune --tar main devrun/m26`) and
# devrun/power_roofline (built by the nvcc line in docs/experiments/power_roofline.cu): on any
# other GPU it only prints the name and exits 3. On an H200:
# power_roofline (PERF.md 65 on the H200), issue 6's table in bf16 and fp16, then the whole GPU
# suite for SUITE_S seconds (default 150; 0 skips it). PR_S: power_roofline's seconds a pattern
# (default 1.5); DTYPES: the table's dtypes (default "bf16 fp16"; set and empty: no table). Writes
# under $OUT.
set -u
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo NOT_H200; exit 3; }
build=devrun/${BUILD:-m26}
tar xzf "$build.tgz" -C devrun
export RT_MOE_CACHE_DIR=$PWD/$build/kcache
mkdir -p "$OUT/b" "$OUT/f" "$OUT/s"
devrun/power_roofline "${PR_S:-1.5}" > "$OUT/pr.log" 2>&1
cat "$OUT/pr.log"
for dtype in ${DTYPES-bf16 fp16}; do
  d=${dtype:0:1}
  (OUT=$OUT/$d timeout 140 bash docs/experiments/issue6_runs.sh table "$build" "$dtype") \
    > "$OUT/$d.log" 2>&1
  tail -12 "$OUT/$d.log"
done
if ((${SUITE_S:-150} > 0)); then
  OUT=$OUT/s bash docs/experiments/issue6_runs.sh suite "$build" "${SUITE_S:-150}" \
    > "$OUT/s.log" 2>&1
  tail -15 "$OUT/s.log"
fi
