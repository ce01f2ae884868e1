#!/usr/bin/env bash
# The fuzz test of a g++ build: configures a clang sub-build with the fuzzers, builds them and runs
# each for a bounded time with its seed corpus.
#
#   run_fuzzers.sh <source dir> <sub-build dir> <seconds per fuzzer>
#
# Exits 77 (ctest: skipped) when clang++ or its libFuzzer runtime is missing; 0 when every fuzzer
# ran its time without a finding; 1 on a finding (the crashing input is left in
# <sub-build dir>/tests/fuzz/<fuzzer>_run/artifacts/) or a build failure.
set -euo pipefail

if (($# != 3)); then
  echo "usage: run_fuzzers.sh <source dir> <sub-build dir> <seconds per fuzzer>" >&2
  exit 2
fi
source_dir=$1
build_dir=$2
seconds=$3
fuzzers=(fuzz_cache_entry fuzz_config)

log() { printf 'run_fuzzers: %s\n' "$*" >&2; }

clang=${RT_MOE_FUZZ_CXX:-}
if [[ -z "$clang" ]]; then
  for candidate in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if command -v "$candidate" >/dev/null 2>&1; then
      clang=$(command -v "$candidate")
      break
    fi
  done
fi
if [[ -z "$clang" ]]; then
  log "SKIP: no clang++ on PATH; the fuzzers need clang's libFuzzer" \
    "(Debian: apt-get install clang libclang-rt-dev)"
  exit 77
fi

probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }' \
  >"$probe_dir/probe.cpp"
if ! "$clang" -fsanitize=fuzzer "$probe_dir/probe.cpp" -o "$probe_dir/probe" \
  >"$probe_dir/probe.log" 2>&1; then
  log "SKIP: $clang cannot link -fsanitize=fuzzer (no libFuzzer runtime;" \
    "Debian: apt-get install libclang-rt-$("$clang" -dumpversion | cut -d. -f1)-dev):"
  sed 's/^/  /' "$probe_dir/probe.log" | tail -5 >&2
  exit 77
fi

# The sub-build's own flags only: a sanitizer build's CXXFLAGS would fight libFuzzer's.
unset CXXFLAGS LDFLAGS
generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
mkdir -p "$build_dir"
log "configuring $build_dir with $clang"
cmake -S "$source_dir" -B "$build_dir" "${generator[@]}" -DCMAKE_CXX_COMPILER="$clang" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRT_MOE_BUILD_FUZZERS=ON -DRT_MOE_BUILD_TOOLS=OFF \
  >"$build_dir/configure.log" 2>&1 || {
  log "configure failed:"
  tail -30 "$build_dir/configure.log" >&2
  exit 1
}
log "building ${fuzzers[*]}"
cmake --build "$build_dir" --target "${fuzzers[@]}" --parallel "${RT_MOE_FUZZ_JOBS:-2}"

status=0
for fuzzer in "${fuzzers[@]}"; do
  work="$build_dir/tests/fuzz/${fuzzer}_run"
  short=${fuzzer#fuzz_}
  mkdir -p "$work/corpus" "$work/artifacts"
  log "running $fuzzer for $seconds s"
  # -error_exitcode: libFuzzer's default (77) would read as "skipped".
  if (cd "$work" && "$build_dir/tests/fuzz/$fuzzer" -max_total_time="$seconds" \
    -error_exitcode=1 -timeout_exitcode=1 -timeout=10 -print_final_stats=1 \
    -dict="$source_dir/tests/fuzz/$short.dict" -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "$source_dir/tests/fuzz/corpus_$short" >"$work/run.log" 2>&1); then
    log "$fuzzer: $(grep -E '^Done [0-9]+ runs' "$work/run.log" || echo 'done'), corpus" \
      "$(find "$work/corpus" -type f | wc -l) files"
  else
    status=1
    log "$fuzzer FAILED; its log ends:"
    tail -40 "$work/run.log" >&2
    log "inputs that failed: $(ls "$work/artifacts")"
  fi
done
exit "$status"
