// Compiles a kernel spec for sm_90a with NVRTC, as the CPU and SASS tests do (no GPU needed).
#pragma once

#include <string>

#include "compiler.h"
#include "kernels.h"

namespace rt_moe {

inline bool is_elf(const std::string& bytes) {
  return bytes.size() > 4 && bytes.compare(0, 4,
                                           "\x7f"
                                           "ELF") == 0;
}

// The cubin and log of `spec` for sm_90a; throws Error(kCompile), with NVRTC's log, when it
// fails.
inline nvrtc::Result compile_result_for_sm90a(const KernelSpec& spec) {
  nvrtc::Request request;
  request.name = spec.name();
  request.source = spec.source();
  request.arch = "sm_90a";
  request.name_expressions = {std::string("&") + kMetaName};
  return nvrtc::compile(request);
}

inline std::string compile_for_sm90a(const KernelSpec& spec) {
  return compile_result_for_sm90a(spec).cubin;
}

}  // namespace rt_moe
