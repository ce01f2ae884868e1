#!/usr/bin/env bash
# Prepares here (no GPU) what docs/experiments/issue6_call.sh carries: devrun/m26.tgz (main's
# kernels) and devrun/wf1.tgz (version 74), each `scripts/ab_prepare --tune --tar` (~7 minutes a
# build on 2 cores). devrun/ and unlanded branches do not survive into a fresh checkout, so the
# branch ws-producer-fence is made from docs/experiments/ws_producer_fence.patch where it is
# missing (`git am` on 12a7d41, the commit the patch was made on). A build whose tarball exists is
# kept. Run from the repository root: bash docs/experiments/issue6_prepare.sh
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
if ! git rev-parse --verify --quiet ws-producer-fence >/dev/null; then
  tree=$(mktemp -d "${TMPDIR:-/tmp}/wf.XXXXXX")
  git worktree add -q -b ws-producer-fence "$tree" 12a7d41
  git -C "$tree" am -q "$root/docs/experiments/ws_producer_fence.patch"
  git worktree remove "$tree"
  echo "branch ws-producer-fence: $(git log --oneline -1 ws-producer-fence)"
fi
mkdir -p devrun
for pair in main:m26 ws-producer-fence:wf1; do
  rev=${pair%%:*} dir=devrun/${pair#*:}
  if [[ -f $dir.tgz ]]; then
    echo "$dir.tgz: kept ($(cat "$dir/REVISION" 2>/dev/null || echo 'revision unknown'))"
    continue
  fi
  scripts/ab_prepare --tune --tar "$rev" "$dir"
done
ls -l devrun/m26.tgz devrun/wf1.tgz
