// From a kernel spec to a launchable kernel: the generated instantiation, its cache preimage, the
// process-wide cubin cache, and the per-context map of loaded modules.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "disk_cache.h"
#include "driver.h"

namespace rt_moe {

// One instantiation of a kernel template. `source()` is all NVRTC compiles besides the embedded
// templates: an include, a type alias, the fixed extern "C" entry and the meta record.
struct KernelSpec {
  std::string family;    // e.g. "grouped_gemm_sm80", for logs and tools
  std::string header;    // template file, e.g. "grouped_gemm_sm80.cuh"
  std::string instance;  // e.g. "rt_moe::Combine<rt_moe::BF16, 7168, 9>"
  std::string params;    // parameter struct, e.g. "rt_moe::CombineParams"
  int min_blocks = 0;    // > 0: __launch_bounds__'s minimum blocks per SM (a register cap)

  // With `timeline` (EnvConfig::stage_timeline, the default's source), the entry also records its
  // first block's start and its last warp's end in kTimelineName.
  std::string source() const;
  std::string source(bool timeline) const;
  // Everything that affects the cubin: schema (added by Preimage), source, the bytes of every
  // embedded template, NVRTC's options, the exact arch and NVRTC's version.
  cache::Preimage preimage(const std::string& arch) const;
  std::string name() const { return instance; }
};

inline constexpr const char* kEntryName = "rt_moe_entry";
inline constexpr const char* kMetaName = "rt_moe_meta";
// With EnvConfig::stage_timeline: kTimelineSlots slots of kTimelineSlotWords words, the first two
// of each {first block's start, last warp's end} in %globaltimer ns over the blocks of that slot
// (block index mod kTimelineSlots); a start of ~0 is a slot no block ran in.
inline constexpr const char* kTimelineName = "rt_moe_timeline";
inline constexpr int kTimelineSlots = 64;
inline constexpr int kTimelineSlotWords = 16;  // a 128-byte line a slot
inline constexpr std::size_t kTimelineBytes =
    std::size_t(kTimelineSlots) * kTimelineSlotWords * sizeof(std::uint64_t);
// The timeline global as no block has touched it.
std::vector<std::uint64_t> cleared_timeline();
// {start, end} over the slots of a timeline global's contents (start ~0: no block ran).
std::pair<std::uint64_t, std::uint64_t> reduce_timeline(const std::vector<std::uint64_t>& words);

// The kernel log (EnvConfig::kernel_log, RT_MOE_KERNEL_LOG): one line a kernel, tab-separated
//   ARCH FAMILY HEADER INSTANCE PARAMS MIN_BLOCKS
// (no field holds a tab), so that `rt_moe_prewarm --kernels FILE` compiles the same kernels again.
// Lines starting with '#' and blank lines are comments.
std::string kernel_log_line(const KernelSpec& spec, const std::string& arch);
// The spec and arch of one line of a kernel log; nullopt for a comment or blank line. Throws
// Error(kInvalidArgument) naming what is wrong with a malformed line.
std::optional<std::pair<KernelSpec, std::string>> parse_kernel_log_line(const std::string& line);
// Appends kernel_log_line(spec, arch) to the file at `path`, once a process for each distinct
// line (a header comment first in an empty file). A file that cannot be written
// is warned about once; the kernel runs all the same.
void append_kernel_log(const std::string& path, const KernelSpec& spec, const std::string& arch);

// The process-wide cubin cache, configured from the environment on first use.
cache::CubinCache& cubin_cache();

struct CompiledCubin {
  std::shared_ptr<const std::string> cubin;
  cache::Source source = cache::Source::kCompiled;
  double seconds = 0;  // time to get it (compile, disk load or memory hit)
};

// Needs NVRTC (on a miss) but no GPU: what rt_moe_prewarm calls.
CompiledCubin compile_cubin(const KernelSpec& spec, const std::string& arch,
                            cache::CubinCache& cache = cubin_cache());

struct Kernel {
  CUfunction function = nullptr;
  int threads = 0;
  int smem_bytes = 0;
  std::string name;
  CUdeviceptr timeline = 0;  // kTimelineName's slots, with EnvConfig::stage_timeline
};

// Loaded kernels of one context. get() is thread-safe and loads each spec once.
class KernelCache {
 public:
  KernelCache(CUcontext context, std::string arch, cache::CubinCache& cubins = cubin_cache())
      : context_(context), arch_(std::move(arch)), cubins_(cubins) {}
  const Kernel& get(const KernelSpec& spec);
  const std::string& arch() const { return arch_; }
  cache::CubinCache& cubins() const { return cubins_; }

 private:
  struct Entry {
    driver::Module module;
    Kernel kernel;
  };
  CUcontext context_;
  std::string arch_;
  cache::CubinCache& cubins_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Entry>> loaded_;  // by source
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Whether `arch` (e.g. "sm_90a") has programmatic dependent launch: sm_90 on. Kernels compiled for
// an older arch have no griddepcontrol (common.cuh compiles it out), so they must never be launched
// with the attribute.
inline bool has_programmatic_launch(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) return false;
  int number = 0;
  for (std::size_t i = 3; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) {
    number = number * 10 + (arch[i] - '0');
  }
  return number >= 90;
}

// How a kernel is ordered after the previous work on its stream.
enum class LaunchOrder {
  kSerial,  // starts after the previous work completes
  // May start (launch, run its prologue) while the previous kernel runs
  // (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION). Only for kernels that call
  // grid_dependency_wait() in every thread, on every path, before touching memory the previous
  // kernels write or read (common.cuh), on an arch where has_programmatic_launch(). After a
  // non-kernel operation (a memset, a copy) it orders like kSerial.
  kProgrammatic,
};

// The extended launch attributes of a launch: programmatic serialization and a cluster shape.
struct LaunchAttributes {
  CUlaunchAttribute items[2] = {};
  unsigned count = 0;
  LaunchAttributes(LaunchOrder order, unsigned cluster) {
    if (order == LaunchOrder::kProgrammatic) {
      items[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      items[count++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
      items[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      items[count].value.clusterDim.x = cluster;
      items[count].value.clusterDim.y = 1;
      items[count++].value.clusterDim.z = 1;
    }
  }
};

// The launch configuration of `kernel` (its own block size and shared memory) on `grid`; it
// points into `attributes`, which must outlive it. Also what the occupancy queries take.
inline CUlaunchConfig launch_config(const Kernel& kernel, Dim3 grid, CUstream stream,
                                    LaunchAttributes& attributes) {
  CUlaunchConfig config{};
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = unsigned(kernel.threads);
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = unsigned(kernel.smem_bytes);
  config.hStream = stream;
  config.attrs = attributes.items;
  config.numAttrs = attributes.count;
  return config;
}

// Launches with the kernel's own block size and shared memory, passing `params` by value as the
// kernel's one __grid_constant__ argument; `cluster` > 1 groups that many blocks along x into a
// cluster (grid.x a multiple of it).
template <typename Params>
void launch(const Kernel& kernel, Dim3 grid, const Params& params, CUstream stream,
            LaunchOrder order = LaunchOrder::kSerial, unsigned cluster = 1) {
  static_assert(std::is_trivially_copyable_v<Params>, "kernel parameters are copied as bytes");
  void* args[] = {const_cast<Params*>(&params)};
  if (order == LaunchOrder::kSerial && cluster == 1) {
    driver::check(driver::api().cuLaunchKernel(kernel.function, grid.x, grid.y, grid.z,
                                               unsigned(kernel.threads), 1, 1,
                                               unsigned(kernel.smem_bytes), stream, args, nullptr),
                  kernel.name.c_str(), __FILE__, __LINE__);
    return;
  }
  LaunchAttributes attributes(order, cluster);
  const CUlaunchConfig config = launch_config(kernel, grid, stream, attributes);
  driver::check(driver::api().cuLaunchKernelEx(&config, kernel.function, args, nullptr),
                kernel.name.c_str(), __FILE__, __LINE__);
}

}  // namespace rt_moe
