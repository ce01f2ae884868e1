#!/usr/bin/env bash
# One device call for issue 6 (planned in session 76), from the repository root on the GPU host,
# carrying devrun/m26.tgz (main's kernels: `scripts/ab_prepare --tune --tar main devrun/m26`) and
# devrun/wf1.tgz (version 74, branch ws-producer-fence: `scripts/ab_prepare --tune --tar
# ws-producer-fence devrun/wf1`), both made here by docs/experiments/issue6_prepare.sh (which
# makes the branch from docs/experiments/ws_producer_fence.patch where it is missing). Whatever
# GPU comes, the call goes to what that GPU can answer, the most needed first, each step bounded by
# the seconds left of LIMIT (default 570):
#   - an H200: issue 6's table in bf16 at main's kernels, version 74's A/B (issue6_runs.sh
#     wsfence: the tiles' GPU case on wf1, ab_bench at gpumode 8192 and 2048, the forward cases),
#     the table in fp16, then the whole GPU suite on m26 for what is left;
#   - any other GPU: version 74's A/B, then the whole GPU suite on m26.
# SECOND=1 (a second call, carrying devrun/wf1.tgz and devrun/wd1.tgz, 74d on 74, branch
# ws-down-even, also made by issue6_prepare.sh): 74d's A/B against 74 (issue6_runs.sh downeven),
# then the whole GPU suite on wd1 for what is left.
# Each step's log is $OUT/NAME.log, its files under $OUT/NAME; issue6_runs.sh runs each build with
# its own kernel cache.
set -u
limit=${LIMIT:-570}
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
builds="m26 wf1"
[[ ${SECOND:-0} == 1 ]] && builds="wf1 wd1"
for build in $builds; do tar xzf "devrun/$build.tgz" -C devrun || exit 2; done
step() {  # NAME MOST_SECONDS MODE ARGS...: issue6_runs.sh MODE ARGS, within the time left
  local name=$1 most=$2 start=$SECONDS
  shift 2
  local left=$((limit - SECONDS - 5))
  ((left < 30)) && { echo "$name: skipped, $left s left"; return; }
  ((most > left)) && most=$left
  mkdir -p "$OUT/$name"
  (OUT=$OUT/$name timeout "$most" bash docs/experiments/issue6_runs.sh "$@") \
    > "$OUT/$name.log" 2>&1
  echo "== $name rc=$? $((SECONDS - start)) s"
  tail -14 "$OUT/$name.log" | cut -c1-240
}
if [[ ${SECOND:-0} == 1 ]]; then
  step d 330 downeven devrun/wd1 devrun/wf1
  step s 600 suite devrun/wd1 $((limit - SECONDS - 20))
elif nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  step b 150 table devrun/m26 bf16
  step w 330 wsfence devrun/wf1 devrun/m26
  step f 150 table devrun/m26 fp16
  step s 600 suite devrun/m26 $((limit - SECONDS - 20))
else
  step w 330 wsfence devrun/wf1 devrun/m26
  step s 600 suite devrun/m26 $((limit - SECONDS - 20))
fi
