#include "compiler.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string_view>

#include "base/env.h"
#include "base/log.h"
#include "embedded_files.h"
#include "rt_moe/error.h"

namespace rt_moe::nvrtc {
namespace {

// clang-format off
#define RT_MOE_NVRTC_FUNCTIONS(X)                                                  \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) \
  X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)              \
  X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcAddNameExpression) X(nvrtcGetLoweredName)
// clang-format on

struct Api {
#define RT_MOE_DECLARE_MEMBER(name) decltype(&::name) name = nullptr;
  RT_MOE_NVRTC_FUNCTIONS(RT_MOE_DECLARE_MEMBER)
#undef RT_MOE_DECLARE_MEMBER
  int major = 0, minor = 0;
};

struct Loaded {
  Api api;
  std::string error;
};

std::vector<std::string> candidate_paths() {
  std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> dirs;
  if (!env().cuda_home.empty()) dirs.push_back(env().cuda_home + "/lib64");
  dirs.push_back(RT_MOE_BUILD_CUDA_LIB_DIR);
  dirs.push_back("/usr/local/cuda/lib64");
  std::vector<std::string> paths;
  for (const auto& name : names) paths.push_back(name);  // the loader's own search first
  for (const auto& dir : dirs) {
    for (const auto& name : names) paths.push_back(dir + "/" + name);
  }
  return paths;
}

Loaded load() {
  Loaded loaded;
  void* library = nullptr;
  std::string tried;
  for (const std::string& path : candidate_paths()) {
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      log().debug("NVRTC loaded from {}", path);
      break;
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (library == nullptr) {
    loaded.error = fmt::format(
        "libnvrtc could not be loaded (tried {}); install the CUDA toolkit's NVRTC or set "
        "CUDA_HOME",
        tried);
    return loaded;
  }
  std::string missing;
#define RT_MOE_LOAD_FUNCTION(name)                                                      \
  loaded.api.name = reinterpret_cast<decltype(loaded.api.name)>(dlsym(library, #name)); \
  if (loaded.api.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
  RT_MOE_NVRTC_FUNCTIONS(RT_MOE_LOAD_FUNCTION)
#undef RT_MOE_LOAD_FUNCTION
  if (!missing.empty()) {
    loaded.error = fmt::format("libnvrtc lacks {}", missing);
    return loaded;
  }
  loaded.api.nvrtcVersion(&loaded.api.major, &loaded.api.minor);
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

const Api& api() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(ErrorCode::kNoCompiler, l.error);
  return l.api;
}

// Owns an nvrtcProgram; never throws from its destructor.
class Program {
 public:
  explicit Program(nvrtcProgram program) : program_(program) {}
  ~Program() {
    if (program_ != nullptr) api().nvrtcDestroyProgram(&program_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_;
};

std::string program_log(nvrtcProgram program) {
  std::size_t size = 0;
  if (api().nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string text(size, '\0');
  api().nvrtcGetProgramLog(program, text.data());
  text.resize(size - 1);
  return text;
}

std::string dump_source(const Request& request) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  std::size_t hash = std::hash<std::string>{}(request.source);
  fs::path path = dir / fmt::format("rt_moe_failed_{:016x}.cu", hash);
  std::ofstream out(path, std::ios::binary);
  out << request.source;
  return out ? path.string() : std::string("(could not write a dump)");
}

}  // namespace

std::string version() {
  const Api& a = api();
  return fmt::format("{}.{}", a.major, a.minor);
}

bool available(std::string* why_not) {
  const Loaded& l = loaded();
  if (!l.error.empty() && why_not != nullptr) *why_not = l.error;
  return l.error.empty();
}

std::vector<std::string> options(const std::string& arch) {
  // -lineinfo keeps source lines for ncu and compute-sanitizer without changing the code.
  return {"-arch=" + arch, "-std=c++17", "-lineinfo", "-DNDEBUG", "--device-int128"};
}

Result compile(const Request& request) {
  const Api& a = api();
  auto start = std::chrono::steady_clock::now();
  auto files = detail::embedded_files();
  std::vector<std::string> header_names, header_sources;
  for (const auto& file : files) {
    header_names.emplace_back(file.name);
    header_sources.emplace_back(file.data);
  }
  std::vector<const char*> names, sources;
  for (std::size_t i = 0; i < files.size(); ++i) {
    names.push_back(header_names[i].c_str());
    sources.push_back(header_sources[i].c_str());
  }
  nvrtcProgram raw = nullptr;
  nvrtcResult r = a.nvrtcCreateProgram(&raw, request.source.c_str(), "rt_moe_kernel.cu",
                                       int(names.size()), sources.data(), names.data());
  if (r != NVRTC_SUCCESS) {
    throw Error(ErrorCode::kCompile, fmt::format("nvrtcCreateProgram for {} failed: {}",
                                                 request.name, a.nvrtcGetErrorString(r)));
  }
  Program program(raw);
  for (const auto& expression : request.name_expressions) {
    r = a.nvrtcAddNameExpression(program.get(), expression.c_str());
    if (r != NVRTC_SUCCESS) {
      throw Error(ErrorCode::kCompile, fmt::format("nvrtcAddNameExpression({}) failed: {}",
                                                   expression, a.nvrtcGetErrorString(r)));
    }
  }
  std::vector<std::string> opts = options(request.arch);
  std::vector<const char*> opt_ptrs;
  for (const auto& o : opts) opt_ptrs.push_back(o.c_str());
  r = a.nvrtcCompileProgram(program.get(), int(opt_ptrs.size()), opt_ptrs.data());
  std::string log_text = program_log(program.get());

  std::string cubin;
  std::size_t size = 0;
  if (r == NVRTC_SUCCESS && a.nvrtcGetCUBINSize(program.get(), &size) == NVRTC_SUCCESS &&
      size > 0) {
    cubin.resize(size);
    if (a.nvrtcGetCUBIN(program.get(), cubin.data()) != NVRTC_SUCCESS) cubin.clear();
  }
  if (r != NVRTC_SUCCESS || cubin.empty()) {
    throw Error(ErrorCode::kCompile,
                fmt::format("NVRTC {} could not compile {} for {}: {}\noptions: {}\nsource dumped "
                            "to: {}\nlog:\n{}",
                            version(), request.name, request.arch,
                            r != NVRTC_SUCCESS ? a.nvrtcGetErrorString(r) : "empty cubin",
                            fmt::join(opts, " "), dump_source(request), log_text));
  }
  Result result;
  result.cubin = std::move(cubin);
  result.log = std::move(log_text);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log().debug("compiled {} for {} in {:.3f} s ({} bytes)", request.name, request.arch,
              result.seconds, result.cubin.size());
  if (!result.log.empty()) log().debug("NVRTC log for {}:\n{}", request.name, result.log);
  return result;
}

bool is_target(const std::string& arch) {
  static const std::regex kTarget("sm_[0-9]{2,3}[af]?");
  return std::regex_match(arch, kTarget);
}

std::vector<std::string> wgmma_stalls(const std::string& log) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < log.size()) {
    std::size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string_view line(log.data() + start, end - start);
    if (line.find("Potential Performance Loss") != std::string_view::npos ||
        line.find("(C7517)") != std::string_view::npos) {
      lines.emplace_back(line);
    }
    start = end + 1;
  }
  return lines;
}

}  // namespace rt_moe::nvrtc
