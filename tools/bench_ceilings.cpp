#include "bench_ceilings.h"

#include <cublas_v2.h>  // types and constants only: libcublas is loaded with dlopen
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "params.h"
#include "reference.h"

namespace rt_moe::tools {
namespace {

constexpr std::size_t kReadBytes = std::size_t(4) << 30;  // 4 GiB, ~80x the H200's 50 MiB L2
constexpr std::size_t kMinReadBytes = std::size_t(2) << 30;
constexpr int kReadThreads = 256;
// 16-byte loads in flight per thread: the kernel variants the ceiling takes the fastest of. (The
// decode GEMMs keep 56-64 KB a block in cp.async stages and streamed 2.3% faster than the read of
// 4 x 16 B a thread on one H200: docs/PERF.md version 9.)
constexpr int kReadUnrolls[] = {4, 8};
constexpr int kGemmSize = 8192;
constexpr int kWarmup = 3;

// REFERENCE.md section 5: measured on one H200 with PyTorch 2.11 / CUDA 13.0.
constexpr double kReferenceGemmBf16 = 680e12;
constexpr double kReferenceGemmF16 = 656e12;

KernelSpec read_spec(bool evict_first, int unroll = kReadUnrolls[0]) {
  return {"bench", "bench.cuh",
          fmt::format("rt_moe::ReadBandwidth<{}, {}, {}>", kReadThreads, unroll, evict_first),
          "rt_moe::ReadParams"};
}

struct ReadVariant {
  std::string name;
  KernelSpec spec;
};

// The read kernels the HBM ceiling takes the fastest of (Ceiling::variants, in this order):
// plain and evict-first loads (as the decode GEMMs' weights load), 4 and 8 in flight a thread,
// and a cp.async ring as the fused decode tile's (bench.cuh's RingRead).
std::vector<ReadVariant> read_variants() {
  std::vector<ReadVariant> variants;
  for (const int unroll : kReadUnrolls) {
    for (const bool evict_first : {false, true}) {
      variants.push_back({fmt::format("{} loads, {} in flight a thread",
                                      evict_first ? "evict-first" : "plain", unroll),
                          read_spec(evict_first, unroll)});
    }
  }
  variants.push_back(
      {"cp.async ring of 8 stages of 8 KiB a block",
       {"bench", "bench.cuh", "rt_moe::RingRead<128, 8, 8192>", "rt_moe::ReadParams"}});
  return variants;
}

// The read kernel's grid: as many blocks as fit on the GPU at once.
unsigned read_blocks(const Kernel& kernel, const driver::DeviceInfo& device) {
  int blocks_per_sm = 0;
  RT_MOE_CALL(cuOccupancyMaxActiveBlocksPerMultiprocessor, &blocks_per_sm, kernel.function,
              kernel.threads, std::size_t(kernel.smem_bytes));
  return unsigned(std::max(1, blocks_per_sm) * device.sm_count);
}

// The read kernels' buffer: `short_bytes` (> 0) or kReadBytes, at most half the free memory;
// throws when the ceiling's (short_bytes = 0) would be under kMinReadBytes. Filled as `data` says.
driver::DeviceBuffer read_buffer(KernelCache& kernels, const driver::DeviceInfo& device,
                                 std::size_t short_bytes, ReadData data, CUstream stream) {
  std::size_t free_bytes = 0, total_bytes = 0;
  RT_MOE_CALL(cuMemGetInfo, &free_bytes, &total_bytes);
  const std::size_t bytes = short_bytes > 0 ? std::min(short_bytes, free_bytes / 2) / 16 * 16
                                            : std::min(kReadBytes, free_bytes / 2 / 16 * 16);
  if (short_bytes == 0 && bytes < kMinReadBytes) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("HBM read ceiling: {:.1f} GiB free, need {} GiB for the read buffer",
                            free_bytes / double(1 << 30), 2 * (kMinReadBytes >> 30)));
  }
  driver::DeviceBuffer buffer(bytes);
  if (data == ReadData::kConstant) {
    // Not zeros: the bytes read should look like data (bf16 1.0 / fp16 ~1.9 pairs).
    RT_MOE_CALL(cuMemsetD32Async, buffer.get(), 0x3f803f80u, bytes / 4, stream);
  } else {
    // Each 16-bit half's top exponent bit clear: finite bf16 and fp16 values below 2.
    const Kernel& fill =
        kernels.get({"bench", "bench.cuh", fmt::format("rt_moe::FillBits<{}>", kReadThreads),
                     "rt_moe::FillParams"});
    const FillParams params{buffer.as<unsigned>(), (long long)(bytes / 4), 0x5eedu, 0xbfffbfffu};
    launch(fill, {unsigned(4 * device.sm_count)}, params, stream);
  }
  return buffer;
}

// Times `body` (enqueued on `stream`) between two events, `iters` times after kWarmup untimed
// runs; returns the median in milliseconds.
template <typename Body>
double time_median_ms(CUstream stream, int iters, Body body) {
  for (int i = 0; i < kWarmup; ++i) body();
  return median(time_events_ms(stream, iters, nullptr, body));
}

// Windows of work (each enqueued by `window`, timed with events and synchronized) one after the
// other for `seconds`, at least four: each window's milliseconds and the host times around it.
// The steady values come from the second half's windows.
struct SteadyWindows {
  std::vector<double> ms;
  std::vector<std::chrono::steady_clock::time_point> starts, ends;

  std::size_t half() const { return ms.size() / 2; }
  double second_half_median_ms() const { return median({ms.begin() + half(), ms.end()}); }
  // The host times of the second half (Ceiling::steady_from, steady_to).
  void stamp(Ceiling& c) const {
    c.steady_from = starts[half()];
    c.steady_to = ends.back();
  }
};

SteadyWindows run_windows(CUstream stream, double seconds, const std::function<void()>& window) {
  using Clock = std::chrono::steady_clock;
  SteadyWindows w;
  const Clock::time_point start = Clock::now();
  while (w.ms.size() < 4 || std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    w.starts.push_back(Clock::now());
    w.ms.push_back(time_events_ms(stream, 1, nullptr, window).front());
    w.ends.push_back(Clock::now());
  }
  return w;
}

// The few cuBLAS entry points the GEMM ceiling needs, resolved from a dlopen'ed libcublas.
struct Cublas {
  using Create = cublasStatus_t (*)(cublasHandle_t*);
  using Destroy = cublasStatus_t (*)(cublasHandle_t);
  using SetStream = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  Create create = nullptr;
  Destroy destroy = nullptr;
  SetStream set_stream = nullptr;
  GemmEx gemm_ex = nullptr;
  std::string library;

  // Empty on success, else why cuBLAS cannot be used.
  std::string load() {
    std::vector<std::string> candidates = {"libcublas.so.13", "libcublas.so.12"};
#ifdef RT_MOE_BUILD_CUDA_LIB_DIR
    candidates.push_back(std::string(RT_MOE_BUILD_CUDA_LIB_DIR) + "/libcublas.so.13");
    candidates.push_back(std::string(RT_MOE_BUILD_CUDA_LIB_DIR) + "/libcublas.so.12");
#endif
    std::string errors;
    void* handle = nullptr;
    for (const std::string& name : candidates) {
      // Never closed: unloading cuBLAS while the CUDA runtime may still reference it is unsafe.
      handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        library = name;
        break;
      }
      const char* error = dlerror();
      errors += fmt::format("{}{}", errors.empty() ? "" : "; ", error ? error : name);
    }
    if (handle == nullptr) return "cannot load libcublas: " + errors;
    create = reinterpret_cast<Create>(dlsym(handle, "cublasCreate_v2"));
    destroy = reinterpret_cast<Destroy>(dlsym(handle, "cublasDestroy_v2"));
    set_stream = reinterpret_cast<SetStream>(dlsym(handle, "cublasSetStream_v2"));
    gemm_ex = reinterpret_cast<GemmEx>(dlsym(handle, "cublasGemmEx"));
    if (!create || !destroy || !set_stream || !gemm_ex) {
      return library +
             " lacks cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2 or "
             "cublasGemmEx";
    }
    return {};
  }
};

Ceiling reference_gemm(DType dtype, const std::string& why) {
  Ceiling c;
  c.value = dtype == DType::kF16 ? kReferenceGemmF16 : kReferenceGemmBf16;
  c.measured = false;
  c.note = fmt::format("reference, not measured: {}", why);
  return c;
}

}  // namespace

const char* to_string(ReadData data) { return data == ReadData::kRandom ? "random" : "constant"; }

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

Ceiling measure_hbm_read(KernelCache& kernels, const driver::DeviceInfo& device, CUstream stream,
                         int iters, std::size_t short_bytes, ReadData contents) {
  const driver::DeviceBuffer data = read_buffer(kernels, device, short_bytes, contents, stream);
  const std::size_t bytes = data.bytes();
  Ceiling c;
  for (const ReadVariant& variant : read_variants()) {
    const Kernel& kernel = kernels.get(variant.spec);
    const unsigned blocks = read_blocks(kernel, device);
    driver::DeviceBuffer block_sums(blocks * sizeof(unsigned));
    ReadParams params{data.as<const void>(), (long long)(bytes / 16), block_sums.as<unsigned>()};
    const double ms =
        time_median_ms(stream, iters, [&] { launch(kernel, {blocks}, params, stream); });
    const double value = double(bytes) / (ms * 1e-3);
    if (value > c.value) {
      c.value = value;
      c.best_variant = c.variants.size();
      c.note =
          fmt::format("read of {:.1f} GiB of {} data, {}, {} blocks x {} threads, median of {}",
                      bytes / double(1 << 30), to_string(contents), variant.name, blocks,
                      kernel.threads, iters);
    }
    c.variants.push_back({variant.name, value});
  }
  c.measured = true;
  return c;
}

Ceiling measure_hbm_read_steady(KernelCache& kernels, const driver::DeviceInfo& device,
                                CUstream stream, double seconds, ReadData contents,
                                std::size_t variant) {
  const driver::DeviceBuffer data = read_buffer(kernels, device, 0, contents, stream);
  const std::size_t bytes = data.bytes();
  const std::vector<ReadVariant> variants = read_variants();
  if (variant >= variants.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("HBM read variant {} of {}", variant, variants.size()));
  }
  const Kernel& kernel = kernels.get(variants[variant].spec);
  const unsigned blocks = read_blocks(kernel, device);
  driver::DeviceBuffer block_sums(blocks * sizeof(unsigned));
  const ReadParams params{data.as<const void>(), (long long)(bytes / 16),
                          block_sums.as<unsigned>()};
  // ~25 ms a window at 4.6 TB/s over 4 GiB
  constexpr int kWindow = 24;
  const SteadyWindows steady = run_windows(stream, seconds, [&] {
    for (int i = 0; i < kWindow; ++i) launch(kernel, {blocks}, params, stream);
  });
  Ceiling c;
  c.value = kWindow * double(bytes) / (steady.second_half_median_ms() * 1e-3);
  c.measured = true;
  c.steady_s = seconds;
  c.window_count = kWindow;
  steady.stamp(c);
  c.note = fmt::format(
      "read of {:.1f} GiB of {} data, {}, median of the last {} of {} windows of {} reads back "
      "to back over {:.1f} s",
      bytes / double(1 << 30), to_string(contents), variants[variant].name,
      steady.ms.size() - steady.half(), steady.ms.size(), kWindow, seconds);
  return c;
}

Ceiling measure_gemm_rate(DType dtype, CUstream stream, int iters, double steady_s) {
  Cublas cublas;
  if (std::string why = cublas.load(); !why.empty()) return reference_gemm(dtype, why);
  cublasHandle_t handle = nullptr;
  if (cublasStatus_t s = cublas.create(&handle); s != CUBLAS_STATUS_SUCCESS) {
    return reference_gemm(dtype, fmt::format("cublasCreate_v2 failed with status {}", int(s)));
  }
  struct HandleGuard {
    Cublas& cublas;
    cublasHandle_t handle;
    ~HandleGuard() { cublas.destroy(handle); }
  } guard{cublas, handle};
  if (cublasStatus_t s = cublas.set_stream(handle, stream); s != CUBLAS_STATUS_SUCCESS) {
    return reference_gemm(dtype, fmt::format("cublasSetStream_v2 failed with status {}", int(s)));
  }

  // Random operands (never zeros: a GEMM of zeros draws less power and runs faster).
  const std::size_t elements = std::size_t(kGemmSize) * kGemmSize;
  std::vector<std::uint16_t> host(elements);
  test::fill_random(host, dtype, 1.0f, 0x6e6d);
  driver::DeviceBuffer a(elements * 2), b(elements * 2), c(elements * 2);
  a.upload(host.data(), elements * 2);
  test::fill_random(host, dtype, 1.0f, 0x6e6e);
  b.upload(host.data(), elements * 2);

  const cudaDataType type = dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  // C = A^T B with K contiguous in both operands: the nn.Linear layout of x @ W^T.
  auto gemm = [&] {
    cublasStatus_t s = cublas.gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, kGemmSize, kGemmSize,
                                      kGemmSize, &alpha, a.as<const void>(), type, kGemmSize,
                                      b.as<const void>(), type, kGemmSize, &beta, c.as<void>(),
                                      type, kGemmSize, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS && status == CUBLAS_STATUS_SUCCESS) status = s;
  };
  const double ms = time_median_ms(stream, iters, gemm);
  // Steady: windows of kWindow products (~25 ms, one prefill forward), one after the other for
  // steady_s seconds. On the H200 the first windows run at the burst rate; the board reaches its
  // 700 W limit within ~0.1 s and the rate keeps falling as it warms (docs/PERF.md 16a, PyTorch:
  // 787 TFLOP/s in the first window, a median of 664 over 2 s, 633 in the last); the median of
  // the second half is the steady rate.
  constexpr int kWindow = 18;
  const SteadyWindows steady = run_windows(stream, steady_s, [&] {
    for (int i = 0; i < kWindow; ++i) gemm();
  });
  const std::vector<double>& window_ms = steady.ms;
  if (status != CUBLAS_STATUS_SUCCESS) {
    return reference_gemm(dtype, fmt::format("cublasGemmEx failed with status {}", int(status)));
  }
  const double flops = 2.0 * kGemmSize * double(kGemmSize) * kGemmSize;  // one product
  auto rate = [&](double window) { return kWindow * flops / (window * 1e-3); };
  const std::size_t half = steady.half(), last = std::min<std::size_t>(5, half);
  Ceiling ceiling;
  ceiling.burst = flops / (ms * 1e-3);
  ceiling.value = rate(steady.second_half_median_ms());
  ceiling.measured = true;
  ceiling.steady_s = steady_s;
  ceiling.window_count = kWindow;
  ceiling.steady_first = rate(window_ms.front());
  ceiling.steady_last = rate(median({window_ms.end() - last, window_ms.end()}));
  steady.stamp(ceiling);
  ceiling.note = fmt::format(
      "cublasGemmEx {}^3 {} (fp32 accumulate) from {}, steady: median of the last {} of {} "
      "windows of {} products back to back over {:.1f} s",
      kGemmSize, to_string(dtype), cublas.library, window_ms.size() - half, window_ms.size(),
      kWindow, steady_s);
  return ceiling;
}

L2Flush::L2Flush(CUcontext context, const std::string& arch, const driver::DeviceInfo& device)
    : kernels_(context, arch), scratch_(std::size_t(256) << 20) {
  kernel_ = &kernels_.get(read_spec(false));
  blocks_ = read_blocks(*kernel_, device);
  block_sums_ = driver::DeviceBuffer(blocks_ * sizeof(unsigned));
  // Written once, so the reads below are of defined bytes.
  RT_MOE_CALL(cuMemsetD32Async, scratch_.get(), 0x3f803f80u, scratch_.bytes() / 4, nullptr);
  RT_MOE_CALL(cuCtxSynchronize);
}

void L2Flush::operator()(CUstream stream) {
  const ReadParams params{scratch_.as<const void>(), (long long)(scratch_.bytes() / 16),
                          block_sums_.as<unsigned>()};
  launch(*kernel_, {blocks_}, params, stream);
}

}  // namespace rt_moe::tools
