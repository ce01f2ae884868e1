# shellcheck shell=bash
# Shared set-up of scripts/test and scripts/demo: Debian packages, the CUDA toolkit check, and the
# release build in build/. Sourced, not run; the caller sets -euo pipefail.

# The repository root, whatever directory the caller was started from.
RT_MOE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# What the build needs from Debian 12. spdlog, fmt, xxHash, nlohmann-json and CLI11 are used
# header-only; Catch2 (v2) is for the tests, pip to fetch nvidia-cuda-nvdisasm for the SASS tests.
RT_MOE_PACKAGES=(cmake ninja-build g++ libspdlog-dev libfmt-dev catch2 libxxhash-dev
  nlohmann-json3-dev libcli11-dev python3-pip)

rt_moe_log() { printf 'scripts/%s: %s\n' "$(basename "$0")" "$*" >&2; }

# Prints the running script's header comment (from its second line to its first line that is not
# a comment) as its usage, and exits 2.
rt_moe_usage() {
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Installs the missing packages when root (one apt-get update, one install); otherwise names them
# and fails.
rt_moe_install_packages() {
  local missing=() pkg
  for pkg in "${RT_MOE_PACKAGES[@]}"; do
    # dpkg -s also answers for removed packages that left their configuration behind.
    if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
      missing+=("$pkg")
    fi
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  # A machine that received a finished build/ (a GPU host without Debian's packages or a
  # registry) runs it as it is: the binaries need none of these packages.
  if [[ -x "$RT_MOE_ROOT/build/tools/rt_moe_bench" && -f "$RT_MOE_ROOT/build/build.ninja" ]]; then
    rt_moe_log "packages missing (${missing[*]}), but build/ holds a finished build: using it"
    RT_MOE_PREBUILT=1
    return 0
  fi
  if [[ "$(id -u)" != 0 ]]; then
    rt_moe_log "missing Debian packages: ${missing[*]}"
    rt_moe_log "install them with: sudo apt-get install --no-install-recommends ${missing[*]}"
    exit 1
  fi
  rt_moe_log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
}

# True when $CUDA_HOME, $CUDA_PATH or /usr/local/cuda holds the file `$1` (a path inside it).
rt_moe_cuda_has() {
  local home
  for home in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [[ -n "$home" && -e "$home/$1" ]]; then
      return 0
    fi
  done
  return 1
}

# The CUDA toolkit provides cuda.h and nvrtc.h at build time and libnvrtc at run time (libcuda
# comes with the driver). It is not a Debian package here: say where it was looked for.
rt_moe_check_cuda() {
  if rt_moe_cuda_has include/cuda.h || command -v nvcc >/dev/null 2>&1; then
    return 0
  fi
  rt_moe_log "error: no CUDA toolkit: nvcc is not on PATH and no cuda.h in \$CUDA_HOME/include," \
    "\$CUDA_PATH/include or /usr/local/cuda/include; install the CUDA toolkit (12.0 or newer)"
  exit 1
}

# nvdisasm, for the SASS tests (tests/sass): the CUDA toolkit's or one on PATH when there is one;
# else PyPI's nvidia-cuda-nvdisasm wheel, fetched by pip and unpacked into build/_deps/nvdisasm
# (nothing is installed into a Python environment), where CMake finds it. Without one the SASS
# tests skip, and scripts/test says so.
RT_MOE_NVDISASM_WHEEL="nvidia-cuda-nvdisasm==13.5.37"
rt_moe_install_nvdisasm() {
  local dest="$RT_MOE_ROOT/build/_deps/nvdisasm" tmp
  if [[ "${RT_MOE_PREBUILT:-0}" == 1 || -x "$dest/nvidia/cu13/bin/nvdisasm" ]] ||
    rt_moe_cuda_has bin/nvdisasm || command -v nvdisasm >/dev/null 2>&1; then
    return 0
  fi
  tmp="$(mktemp -d)"
  if python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" \
    "$RT_MOE_NVDISASM_WHEEL" && rm -rf "$dest" && mkdir -p "$dest" &&
    python3 -m zipfile -e "$tmp"/*.whl "$dest" && chmod +x "$dest/nvidia/cu13/bin/nvdisasm" &&
    "$dest/nvidia/cu13/bin/nvdisasm" --version >/dev/null; then
    rt_moe_log "nvdisasm ($RT_MOE_NVDISASM_WHEEL from PyPI) in build/_deps/nvdisasm"
  else
    rm -rf "$dest"
    rt_moe_log "warning: could not fetch $RT_MOE_NVDISASM_WHEEL from PyPI: the SASS tests" \
      "(label cpu-sass) will skip"
  fi
  rm -rf "$tmp"
}

# Configures (preset "release", build dir build/) and builds with every core.
rt_moe_build() {
  cd "$RT_MOE_ROOT" || exit 1
  if [[ "${RT_MOE_PREBUILT:-0}" == 1 ]]; then
    return 0
  fi
  cmake --preset release
  cmake --build --preset release --parallel "$(nproc)"
}

# True when nvidia-smi works and lists at least one GPU; the reason is left in RT_MOE_NO_GPU_WHY.
# shellcheck disable=SC2034  # read by the scripts that source this file
rt_moe_have_gpu() {
  RT_MOE_NO_GPU_WHY=""
  local listing
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    RT_MOE_NO_GPU_WHY="nvidia-smi not found"
    return 1
  fi
  if ! listing="$(nvidia-smi -L 2>&1)"; then
    RT_MOE_NO_GPU_WHY="nvidia-smi -L failed: ${listing%%$'\n'*}"
    return 1
  fi
  if ! grep -q '^GPU [0-9]' <<<"$listing"; then
    RT_MOE_NO_GPU_WHY="nvidia-smi -L lists no GPU"
    return 1
  fi
  return 0
}

# Everything a script needs before it uses build/.
rt_moe_setup() {
  rt_moe_install_packages
  rt_moe_check_cuda
  rt_moe_build
}
