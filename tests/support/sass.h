// The SASS of a cubin, by nvdisasm, and the instructions the tests look for in it: the wgmma
// (HGMMA) shapes and mma.sync (HMMA) a GEMM's tile promises, its TMA loads, and local memory
// (LDL, STL: spills). issue 6 asks for "HGMMA present, no local-memory spills"; the SASS tests
// (tests/sass) check it on every kernel the tuner can pick, without a GPU.
#pragma once

#include <map>
#include <string>

namespace rt_moe::test {

// The nvdisasm to run, the first that runs of: $RT_MOE_NVDISASM; the one CMake found (the CUDA
// toolkit's, or the one scripts/test installs into build/_deps from PyPI); $CUDA_HOME's,
// $CUDA_PATH's and /usr/local/cuda's; `nvdisasm` on PATH. Empty, with what was tried in `why`,
// when none runs.
std::string find_nvdisasm(std::string* why);

// nvdisasm -c (the code sections) of `cubin`; throws std::runtime_error with the command's output
// when it fails.
std::string disassemble(const std::string& nvdisasm, const std::string& cubin);

struct SassCounts {
  int instructions = 0;
  int hgmma = 0;
  std::map<int, int> hgmma_n;  // N of each HGMMA.64xNx16 shape present: how many of it
  int hmma = 0;
  int tma_loads = 0;      // UTMALDG, multicast or not
  int tma_multicast = 0;  // UTMALDG.*.MULTICAST
  int tma_prefetch = 0;   // UTMAPF: a TMA box asked of L2 (cp.async.bulk.prefetch.tensor)
  int local = 0;          // LDL and STL: local memory
  int setmaxnreg = 0;     // USETMAXREG: warpgroups trading registers (producer / consumers)
};

// Counts the instructions of nvdisasm's text: each line "/*0120*/ [@[!]P0] OPCODE ...".
SassCounts count_sass(const std::string& sass);

}  // namespace rt_moe::test
