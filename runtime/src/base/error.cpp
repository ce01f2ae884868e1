#include "rt_moe/error.h"

namespace rt_moe {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNoDriver:
      return "no CUDA driver";
    case ErrorCode::kNoCompiler:
      return "no NVRTC";
    case ErrorCode::kCuda:
      return "CUDA error";
    case ErrorCode::kCompile:
      return "compile error";
    case ErrorCode::kCache:
      return "cache error";
    case ErrorCode::kIo:
      return "I/O error";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string("rt_moe: ") + to_string(code) + ": " + message), code_(code) {}

}  // namespace rt_moe
