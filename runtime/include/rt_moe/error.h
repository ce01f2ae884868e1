// The one exception type of rt_moe. Its message names what failed and where: the failing call,
// file:line, the CUDA or NVRTC error name and text, and whatever context the thrower adds (bucket,
// options, compile log). A library never exits and never prints-and-continues.
#pragma once

#include <stdexcept>
#include <string>

namespace rt_moe {

enum class ErrorCode {
  kInvalidArgument,  // a caller passed a bad value; the message names it
  kNoDriver,         // libcuda could not be loaded, or no GPU is present
  kNoCompiler,       // libnvrtc could not be loaded
  kCuda,             // a driver API call failed
  kCompile,          // NVRTC failed to compile a kernel
  kCache,            // the kernel cache could not do what was asked
  kIo,               // a file could not be read or written
  kUnsupported,      // valid input this build or GPU cannot run
  kInternal,         // a broken invariant: a bug in rt_moe
};

const char* to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace rt_moe
