// NVRTC, loaded with dlopen on first use, and the one function that turns a generated translation
// unit into a cubin for an exact target. The kernel templates are handed to NVRTC as in-memory
// headers (the embedded copies), so no CUDA or system header is needed at run time.
#pragma once

#include <string>
#include <vector>

namespace rt_moe::nvrtc {

// NVRTC's version as "major.minor"; throws Error(kNoCompiler) when libnvrtc cannot be loaded.
std::string version();
bool available(std::string* why_not = nullptr);

struct Request {
  std::string name;    // for logs and the failure dump, e.g. "grouped_gemm_sm80<...>"
  std::string source;  // the generated instantiation
  std::string arch;    // exact target, e.g. "sm_90a"
  std::vector<std::string> name_expressions;  // kept alive and reported lowered
};

struct Result {
  std::string cubin;
  std::string log;  // warnings, if any
  double seconds = 0;
};

// The normalized option list for `arch`: what compile() passes to NVRTC and what cache keys hash.
std::vector<std::string> options(const std::string& arch);

// Throws Error(kCompile) with the options, the full log and the path of a dump of the source when
// NVRTC fails or produces an empty cubin (NVRTC 13 can report success with an empty cubin).
Result compile(const Request& request);

// Whether `arch` is a real target NVRTC compiles cubins for: sm_XY or sm_XYZ, with the
// arch-specific 'a' or family 'f' suffix (sm_80, sm_90a, sm_100f).
bool is_target(const std::string& arch);

// The lines of a compile log in which ptxas says the tensor pipe loses its overlap: every
// "Potential Performance Loss" (C7510 to C7515: it serialized the wgmma instructions, and why),
// and an injected warpgroup.wait before registers a wgmma defines are read (C7517), which waits
// for the MMAs in flight. Not among them: C7519, an injected warpgroup.arrive, which waits for no
// MMA (the swapped kernel has one a token-count path, beside its own wgmma.fence: docs/PERF.md
// 37b).
std::vector<std::string> wgmma_stalls(const std::string& log);

}  // namespace rt_moe::nvrtc
