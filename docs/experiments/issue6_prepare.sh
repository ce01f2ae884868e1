#!/usr/bin/env bash
# Prepares here (no GPU) what docs/experiments/issue6_call.sh carries: devrun/m26.tgz (main's
# kernels), devrun/wf1.tgz (version 74) and devrun/wd1.tgz (74d on 74), each `scripts/ab_prepare
# --tune --tar` (~3-7 minutes a build on 2 cores). devrun/ and unlanded branches do not survive
# into a fresh checkout, so the branches ws-producer-fence and ws-down-even are made from
# docs/experiments/ws_producer_fence.patch and ws_down_even.patch where they are missing (`git am`
# on 12a7d41, the commit the patches were made on). A build whose tarball exists is kept. Run from
# the repository root: bash docs/experiments/issue6_prepare.sh
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
branch() {  # NAME BASE PATCH: NAME = BASE with PATCH applied, unless NAME exists
  git rev-parse --verify --quiet "$1" >/dev/null && return
  local tree
  tree=$(mktemp -d "${TMPDIR:-/tmp}/branch.XXXXXX")
  git worktree add -q -b "$1" "$tree" "$2"
  git -C "$tree" am -q "$root/docs/experiments/$3"
  git worktree remove "$tree"
  echo "branch $1: $(git log --oneline -1 "$1")"
}
branch ws-producer-fence 12a7d41 ws_producer_fence.patch
branch ws-down-even ws-producer-fence ws_down_even.patch
mkdir -p devrun
for pair in main:m26 ws-producer-fence:wf1 ws-down-even:wd1; do
  rev=${pair%%:*} dir=devrun/${pair#*:}
  if [[ -f $dir.tgz ]]; then
    echo "$dir.tgz: kept ($(cat "$dir/REVISION" 2>/dev/null || echo 'revision unknown'))"
    continue
  fi
  scripts/ab_prepare --tune --tar "$rev" "$dir"
done
ls -l devrun/m26.tgz devrun/wf1.tgz devrun/wd1.tgz
