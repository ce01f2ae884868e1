#include "kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "base/env.h"
#include "base/log.h"
#include "compiler.h"
#include "cubin_info.h"
#include "embedded_files.h"
#include "params.h"

namespace rt_moe {

std::vector<std::uint64_t> cleared_timeline() {
  std::vector<std::uint64_t> words(kTimelineBytes / sizeof(std::uint64_t), 0);
  for (int s = 0; s < kTimelineSlots; ++s) words[std::size_t(s) * kTimelineSlotWords] = ~0ull;
  return words;
}

std::pair<std::uint64_t, std::uint64_t> reduce_timeline(const std::vector<std::uint64_t>& words) {
  std::uint64_t start = ~0ull, end = 0;
  for (std::size_t s = 0; s + 1 < words.size(); s += kTimelineSlotWords) {
    if (words[s] == ~0ull) continue;  // no block of this slot ran
    start = std::min(start, words[s]);
    end = std::max(end, words[s + 1]);
  }
  return {start, end};
}

std::string kernel_log_line(const KernelSpec& spec, const std::string& arch) {
  return fmt::format("{}\t{}\t{}\t{}\t{}\t{}", arch, spec.family, spec.header, spec.instance,
                     spec.params, spec.min_blocks);
}

std::optional<std::pair<KernelSpec, std::string>> parse_kernel_log_line(const std::string& line) {
  if (line.find_first_not_of(" \t\r") == std::string::npos || line.front() == '#') {
    return std::nullopt;
  }
  std::vector<std::string> fields;
  for (std::size_t start = 0;;) {
    const std::size_t tab = line.find('\t', start);
    fields.push_back(
        line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  if (!fields.empty() && !fields.back().empty() && fields.back().back() == '\r') {
    fields.back().pop_back();
  }
  const auto bad = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument,
                 fmt::format("kernel log line '{}': {} (want 6 tab-separated fields: arch, "
                             "family, header, instance, params, min_blocks)",
                             line, what));
  };
  if (fields.size() != 6) throw bad(fmt::format("{} fields", fields.size()));
  for (const std::string& field : fields) {
    if (field.empty()) throw bad("an empty field");
  }
  if (!nvrtc::is_target(fields[0])) {
    throw bad(fmt::format("arch '{}' is no target like sm_90a", fields[0]));
  }
  KernelSpec spec;
  spec.family = fields[1];
  spec.header = fields[2];
  spec.instance = fields[3];
  spec.params = fields[4];
  std::size_t used = 0;
  try {
    spec.min_blocks = std::stoi(fields[5], &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != fields[5].size() || spec.min_blocks < 0) {
    throw bad(fmt::format("min_blocks '{}' is no count", fields[5]));
  }
  return std::make_pair(std::move(spec), fields[0]);
}

void append_kernel_log(const std::string& path, const KernelSpec& spec, const std::string& arch) {
  static std::mutex mutex;
  static std::unordered_set<std::string> written;
  static bool warned = false;
  const std::string line = kernel_log_line(spec, arch);
  std::lock_guard<std::mutex> lock(mutex);
  if (!written.insert(path + '\n' + line).second) return;
  std::FILE* file = std::fopen(path.c_str(), "a");
  bool ok = file != nullptr;
  if (ok) {
    // A new file starts with a header (two processes starting it at once may both write one).
    if (std::fseek(file, 0, SEEK_END) == 0 && std::ftell(file) == 0) {
      ok = std::fputs("# rt_moe kernel log: arch family header instance params min_blocks\n",
                      file) >= 0;
    }
    ok = ok && std::fprintf(file, "%s\n", line.c_str()) >= 0;
    ok = std::fclose(file) == 0 && ok;
  }
  if (!ok && !warned) {
    warned = true;
    log().warn("RT_MOE_KERNEL_LOG: cannot append to '{}': {}", path, std::strerror(errno));
  }
}

std::string KernelSpec::source() const { return source(env().stage_timeline); }

std::string KernelSpec::source(bool timeline) const {
  const std::string bounds = min_blocks > 0 ? fmt::format("RtMoeKernel::kThreads, {}", min_blocks)
                                            : std::string("RtMoeKernel::kThreads");
  // The default entry calls run() alone (its text is part of every production kernel's cache
  // key). With the timeline, thread 0 of each block lowers the start to its entry time, lane 0 of
  // each warp raises the end to its exit time (after run() returns: the warp's last work issued),
  // in the slot of its block (block index mod kTimelineSlots, slots a 128-byte line apart): one
  // address for every warp of a grid serialized its atomics in L2 (the combine's ~460 thousand
  // warps at DeepSeek-V3 T = 16384), the kernel's end waiting for them.
  std::string globals, body = "{ RtMoeKernel::run(params); }";
  if (timeline) {
    globals = fmt::format(
        "extern \"C\" __device__ unsigned long long {0}[{1} * {2}];\n"
        "__device__ __forceinline__ unsigned long long rt_moe_now() {{\n"
        "  unsigned long long t;\n"
        "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
        "  return t;\n"
        "}}\n",
        kTimelineName, kTimelineSlots, kTimelineSlotWords);
    body = fmt::format(
        "{{\n"
        "  unsigned long long* slot = {0} + {2} * ((blockIdx.x + gridDim.x * (blockIdx.y + "
        "gridDim.y * blockIdx.z)) % {1});\n"
        "  if (threadIdx.x == 0) atomicMin(&slot[0], rt_moe_now());\n"
        "  RtMoeKernel::run(params);\n"
        "  if (threadIdx.x % 32 == 0) atomicMax(&slot[1], rt_moe_now());\n"
        "}}",
        kTimelineName, kTimelineSlots, kTimelineSlotWords);
  }
  return fmt::format(
      "#include \"{0}\"\n"
      "using RtMoeKernel = {1};\n"
      "{6}"
      "extern \"C\" __global__ void __launch_bounds__({5})\n"
      "{3}(const __grid_constant__ {2} params) {7}\n"
      "extern \"C\" __device__ rt_moe::KernelMeta {4} = {{RtMoeKernel::kThreads, "
      "RtMoeKernel::kSmemBytes}};\n",
      header, instance, params, kEntryName, kMetaName, bounds, globals, body);
}

cache::Preimage KernelSpec::preimage(const std::string& arch) const {
  cache::Preimage preimage;
  preimage.add("source", source());
  // Every embedded template, not only the included one: cheap, and never stale.
  for (const auto& file : detail::embedded_files()) {
    preimage.add(std::string("header:") + std::string(file.name), file.data);
  }
  preimage.add("options", fmt::format("{}", fmt::join(nvrtc::options(arch), "\x1f")));
  preimage.add("arch", arch);
  preimage.add("nvrtc", nvrtc::version());
  return preimage;
}

cache::CubinCache& cubin_cache() {
  static cache::CubinCache instance(cache::options_from_env());
  return instance;
}

CompiledCubin compile_cubin(const KernelSpec& spec, const std::string& arch,
                            cache::CubinCache& cache) {
  auto start = std::chrono::steady_clock::now();
  if (!env().kernel_log.empty()) append_kernel_log(env().kernel_log, spec, arch);
  cache::Lookup lookup = cache.get_or_compile(spec.preimage(arch), [&] {
    nvrtc::Request request;
    request.name = spec.name();
    request.source = spec.source();
    request.arch = arch;
    request.name_expressions = {std::string("&") + kMetaName};
    if (env().stage_timeline) request.name_expressions.push_back(std::string("&") + kTimelineName);
    nvrtc::Result compiled = nvrtc::compile(request);
    // A kernel that spills, or whose MMAs ptxas serialized, runs slower than its tile promises:
    // say so where it is compiled (the prewarm tool, or a first forward), once, not at each load
    // from the cache.
    const std::optional<CubinResources> resources = cubin_resources(compiled.cubin);
    if (resources && resources->uses_local_memory()) {
      log().warn(
          "kernel {} uses local memory ({} B frame, {} B stack a thread, {} registers): "
          "register spills, it runs slower than it should",
          spec.name(), resources->frame_bytes, resources->stack_bytes, resources->registers);
    }
    for (const std::string& line : nvrtc::wgmma_stalls(compiled.log)) {
      log().warn("kernel {}: the tensor pipe loses its overlap, it runs slower than it should: {}",
                 spec.name(), line);
    }
    return std::move(compiled.cubin);
  });
  CompiledCubin result;
  result.cubin = std::move(lookup.binary);
  result.source = lookup.source;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

const Kernel& KernelCache::get(const KernelSpec& spec) {
  std::string source = spec.source();
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = loaded_.find(source); it != loaded_.end()) return it->second->kernel;

  CompiledCubin cubin = compile_cubin(spec, arch_, cubins_);
  auto start = std::chrono::steady_clock::now();
  driver::ScopedContext scope(context_);
  auto entry = std::make_unique<Entry>();
  CUmodule module = nullptr;
  RT_MOE_CALL(cuModuleLoadData, &module, cubin.cubin->data());
  entry->module = driver::Module(module);
  Kernel& kernel = entry->kernel;
  kernel.name = spec.name();
  RT_MOE_CALL(cuModuleGetFunction, &kernel.function, module, kEntryName);
  CUdeviceptr meta_ptr = 0;
  std::size_t meta_bytes = 0;
  RT_MOE_CALL(cuModuleGetGlobal, &meta_ptr, &meta_bytes, module, kMetaName);
  if (meta_bytes != sizeof(KernelMeta)) {
    throw Error(ErrorCode::kInternal, fmt::format("{}: {} is {} bytes, expected {}", kernel.name,
                                                  kMetaName, meta_bytes, sizeof(KernelMeta)));
  }
  KernelMeta meta{};
  RT_MOE_CALL(cuMemcpyDtoH, &meta, meta_ptr, sizeof(meta));
  kernel.threads = meta.threads;
  kernel.smem_bytes = meta.smem_bytes;
  if (env().stage_timeline) {
    std::size_t bytes = 0;
    RT_MOE_CALL(cuModuleGetGlobal, &kernel.timeline, &bytes, module, kTimelineName);
    if (bytes != kTimelineBytes) {
      throw Error(ErrorCode::kInternal, fmt::format("{}: {} is {} bytes, expected {}", kernel.name,
                                                    kTimelineName, bytes, kTimelineBytes));
    }
    // Every slot cleared: a start of ~0 and an end of 0 (then stage_timeline clears them).
    const std::vector<std::uint64_t> cleared = cleared_timeline();
    RT_MOE_CALL(cuMemcpyHtoD, kernel.timeline, cleared.data(), kTimelineBytes);
  }
  if (kernel.smem_bytes > 48 * 1024) {
    RT_MOE_CALL(cuFuncSetAttribute, kernel.function,
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.smem_bytes);
  }
  double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  static constexpr const char* kSources[] = {"memory", "disk", "compiled"};
  log().debug(
      "kernel {} ready: cubin from {} in {:.3f} s, module load {:.3f} s ({} threads, {} B "
      "shared)",
      kernel.name, kSources[int(cubin.source)], cubin.seconds, load_seconds, kernel.threads,
      kernel.smem_bytes);
  const Kernel& result = entry->kernel;
  loaded_.emplace(std::move(source), std::move(entry));
  return result;
}

}  // namespace rt_moe
