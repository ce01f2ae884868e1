#!/usr/bin/env bash
# consumer_test.sh CMAKE BUILD_DIR CONSUMER_SOURCE WORK_DIR GENERATOR CXX [LINKER_FLAGS]
#
# Installs BUILD_DIR into WORK_DIR/prefix, checks that the installed interface needs nothing but
# the standard library, Threads and libdl, then builds CONSUMER_SOURCE against the prefix and runs
# it (it exits 0 with or without a GPU). LINKER_FLAGS are the build's own (-fsanitize=... for a
# sanitizer build, whose archive needs the sanitizer runtimes).
set -euo pipefail
cmake=$1 build=$2 source=$3 work=$4 generator=$5 cxx=$6 link_flags=${7:-}
prefix="$work/prefix"

rm -rf "$work"
mkdir -p "$work"
"$cmake" --install "$build" --prefix "$prefix"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
for f in lib/librt_moe.a lib/cmake/rt_moe/rt_moeConfig.cmake \
  lib/cmake/rt_moe/rt_moeConfigVersion.cmake include/rt_moe/runtime.h \
  share/rt_moe/presets/deepseek-v3.json; do
  [[ -f "$prefix/$f" ]] || fail "not installed: $f"
done
if [[ -f "$build/tools/rt_moe_prewarm" && ! -x "$prefix/bin/rt_moe_prewarm" ]]; then
  fail "not installed: bin/rt_moe_prewarm"
fi
# The public headers include the standard library and each other only.
while IFS= read -r line; do
  [[ "$line" =~ ^#include\ *(\<[a-z_]+\>|\"rt_moe/[a-z_]+\.h\")$ ]] ||
    fail "public header includes more than the standard library and rt_moe: $line"
done < <(grep -h '^#include' "$prefix"/include/rt_moe/*.h)
# The exported target names no include directory or library of the build's dependencies.
if grep -Eiq 'spdlog|fmt|xxhash|nlohmann|cuda|/runtime/src|rt_moe_base|rt_moe_cache' \
  "$prefix"/lib/cmake/rt_moe/rt_moeTargets*.cmake; then
  fail "the exported target depends on build-only libraries or headers"
fi

"$cmake" -S "$source" -B "$work/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXE_LINKER_FLAGS="$link_flags"
"$cmake" --build "$work/build"
"$work/build/rt_moe_consumer"
