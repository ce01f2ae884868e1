// How fast one SM streams cold weights from HBM, by blocks on the SM, bytes in flight and the copy
// (docs/PERF.md 57b). 54e measured a decode block at ~35 GB/s (56 KiB in flight) however many
// blocks streamed, and 54c's routing phase found two blocks on an SM streaming 11.5-18 GB/s each,
// no more than one alone. The H200 needs 4.58 TB/s / 132 = 34.7 GB/s from every SM at its HBM
// ceiling, the H100 ~25: if an SM streams at most ~35 GB/s whatever runs on it, the H200 has no
// headroom to win back a phase in which fewer SMs stream (the routing, the last wave), and that
// would be why the fused decode kernel loses twice as much there as on the H100 (46d). This asks:
//   - does a second block on the SM double its rate (the limit is the block's ring), or not (the
//     SM's own limit on requests in flight)?
//   - does the copy engine get more from an SM than 128 threads' 16-byte cp.async at the same
//     bytes in flight: one 8 KiB bulk copy a stage (cp.async.bulk), or one tensor box of 64 rows x
//     128 bytes a stage (cp.async.bulk.tensor, 128-byte swizzle), as a TMA-fed decode tile would
//     load its weights?
// The grid is two blocks an SM (100 KiB of shared memory each); a block finds its SM (%smid) and
// takes a slot of it; blocks on SMs >= `sms` or in a slot >= `per_sm` exit at once. Each active
// block streams its own region of 8 items (cold: each launch reads addresses the last did not),
// an item 64 rows of 14336 bytes (the decode tile's gate/up item at H = 7168, 112 K steps),
// through a ring of STAGES stages of 8 KiB, STAGES - 1 in flight, and does nothing with them but
// wait for them. A stage is 8 KiB in address order ("contiguous") or 128 bytes of each of the
// item's 64 rows ("stripes", the decode tile's). Prints the median of 3 launches: GB/s an SM and
// in all.
// Build here (nvcc 13), run on the GPU host:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ikernel_templates \
//        -Xcompiler -Wno-stringop-overflow -diag-suppress 1886 \
//        -o sm_rate docs/experiments/sm_rate.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bulk_copy.h"
#include "cuda_check.h"
#include "grouped_gemm_sm90_ws.cuh"  // the kernels' mbarrier wrappers, cp.async
#include "read_sink.h"
#include "tensor_map.h"

using namespace rt_moe;

constexpr int kThreads = 128;
constexpr int kStageBytes = 8192;
constexpr int kRowBytes = 14336;             // a row of gate or up at H = 7168
constexpr int kItemRows = 64;                // a decode item's weight rows
constexpr int kItemSteps = kRowBytes / 128;  // 112 K steps of 128 bytes a row
constexpr long long kItemBytes = (long long)kItemRows * kRowBytes;  // 917504
constexpr int kItems = 8;                                           // items a block streams
constexpr long long kRegion = kItems * kItemBytes;
constexpr int kSteps = kItems * kItemSteps;
constexpr int kSmem = 100 * 1024 + 1024;  // two blocks an SM; + 1024 to align the ring

enum Copy { kCpAsync = 0, kBulk = 1, kCpAsyncStripes = 2, kBox = 3 };
const char* kCopyNames[] = {"cp.async contiguous", "bulk 8 KiB contiguous", "cp.async stripes",
                            "tma box stripes"};

__device__ __forceinline__ unsigned smid() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// The source of 16-byte chunk `idx` (0..511) of stage `s` of a region. Stripes of WIDTH bytes: a
// stage is WIDTH bytes of each of 8192 / WIDTH rows (128: the decode tile's 64 rows x 128 bytes),
// an item those rows' whole length (14336 / WIDTH stages), the region 8 x 64 rows whatever WIDTH.
template <int COPY, int WIDTH>
__device__ __forceinline__ const char* chunk_src(const char* region, int s, int idx) {
  if (COPY == kCpAsync) return region + (long long)s * kStageBytes + idx * 16;
  constexpr int rows = kStageBytes / WIDTH, steps = kRowBytes / WIDTH, chunks = WIDTH / 16;
  const int item = s / steps, k = s % steps;
  return region + (long long)item * rows * kRowBytes + (long long)(idx / chunks) * kRowBytes +
         k * WIDTH + idx % chunks * 16;
}

// `map`: the buffer as a [rows, 7168] bf16 matrix, boxes of 64 elements x 64 rows (kBox); `row0`:
// the launch's first row (its byte offset in `w` / kRowBytes).
template <int COPY, int STAGES, int WIDTH>
__global__ void __launch_bounds__(kThreads)
    sm_stream(const __grid_constant__ TensorMap map, const char* w, long long row0, int sms,
              int per_sm, int* slots, int4* out) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) unsigned long long bars[STAGES];
  __shared__ int my_slot;
  const unsigned sm = smid();
  if (threadIdx.x == 0) my_slot = atomicAdd(&slots[sm], 1);
  __syncthreads();
  if (int(sm) >= sms || my_slot >= per_sm) return;
  const int block = sm * 2 + my_slot;
  const char* region = w + (long long)block * kRegion;
  const unsigned ring = (smem_address(smem_raw) + 1023) / 1024 * 1024;
  unsigned char* smem = smem_raw + (ring - smem_address(smem_raw));
  const int tid = threadIdx.x;
  if constexpr (COPY == kCpAsync || COPY == kCpAsyncStripes) {
    auto load = [&](int s) {
      const unsigned st = ring + (s % STAGES) * kStageBytes;
#pragma unroll
      for (int j = 0; j < kStageBytes / 16 / kThreads; ++j) {
        const int idx = tid + j * kThreads;
        cp_async_16(st + swizzle_128b(idx / 8, idx % 8), chunk_src<COPY, WIDTH>(region, s, idx),
                    true);
      }
    };
#pragma unroll 1
    for (int s = 0; s < STAGES - 1; ++s) {
      load(s);
      cp_async_commit();
    }
#pragma unroll 1
    for (int s = 0; s < kSteps; ++s) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      if (s + STAGES - 1 < kSteps) load(s + STAGES - 1);
      cp_async_commit();
    }
    cp_async_wait<0>();
  } else {
    if (tid == 0) {
      const unsigned bar0 = smem_address(bars);
      for (int s = 0; s < STAGES; ++s) mbarrier_init(bar0 + 8 * s, 1);
      mbarrier_init_fence();
      auto load = [&](int s) {
        const unsigned bar = bar0 + 8 * (s % STAGES), dst = ring + (s % STAGES) * kStageBytes;
        mbarrier_arrive_expect_tx(bar, kStageBytes);
        if (COPY == kBulk) {
          bulk_load(dst, region + (long long)s * kStageBytes, kStageBytes, bar);
        } else {
          const long long row =
              row0 + (long long)block * kItems * kItemRows + (s / kItemSteps) * kItemRows;
          tma_load_2d(dst, &map, (s % kItemSteps) * 64, int(row), bar);
        }
      };
      for (int s = 0; s < STAGES - 1; ++s) load(s);
      for (int s = 0; s < kSteps; ++s) {
        mbarrier_wait(bar0 + 8 * (s % STAGES), (s / STAGES) & 1);
        if (s + STAGES - 1 < kSteps) load(s + STAGES - 1);
      }
    }
  }
  __syncthreads();
  // Something of what landed, so that the copies have a reader.
  int4 acc = reinterpret_cast<const int4*>(smem)[tid];
  sink(acc, out);
}

template <int COPY, int STAGES, int WIDTH = 128>
void run(const TensorMap& map, const char* w, size_t bytes, int* slots, int4* out, int sm_count,
         long long& offset, int min_sms = 8) {
  static_assert(kRowBytes % WIDTH == 0 && kStageBytes % WIDTH == 0 && WIDTH % 128 == 0, "stripes");
  static_assert(COPY == kCpAsyncStripes || WIDTH == 128, "other widths by cp.async only");
  auto kernel = sm_stream<COPY, STAGES, WIDTH>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  const long long span = 2ll * sm_count * kRegion;  // every block's region, active or not
  for (int sms : {8, 33, 66, 132}) {
    if (sms > sm_count || sms < min_sms) continue;
    for (int per_sm : {1, 2}) {
      std::vector<float> ms;
      int active = 0;
      for (int rep = 0; rep < 3; ++rep) {
        if (offset + span > (long long)bytes) offset = 0;
        CHECK(cudaMemset(slots, 0, sizeof(int) * 1024));
        CHECK(cudaEventRecord(start));
        kernel<<<2 * sm_count, kThreads, kSmem>>>(map, w + offset, offset / kRowBytes, sms, per_sm,
                                                  slots, out);
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaGetLastError());
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, start, stop));
        ms.push_back(t);
        std::vector<int> host(1024);
        CHECK(cudaMemcpy(host.data(), slots, sizeof(int) * 1024, cudaMemcpyDeviceToHost));
        active = 0;
        for (int s = 0; s < sms; ++s) active += std::min(host[s], per_sm);
        offset += span;
      }
      std::sort(ms.begin(), ms.end());
      const double gb = double(active) * kRegion / 1e9, s = ms[1] * 1e-3;
      std::printf(
          "%-14s %4d B %2d stages (%3d KiB in flight a block)  SMs %3d x %d (%3d blocks): "
          "%7.1f us, %6.1f GB/s an SM, %7.0f GB/s in all\n",
          kCopyNames[COPY], COPY == kCpAsync || COPY == kBulk ? kStageBytes : WIDTH, STAGES,
          (STAGES - 1) * kStageBytes / 1024, sms, per_sm, active, ms[1] * 1e3, gb / s / sms,
          gb / s);
    }
  }
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sm_count = prop.multiProcessorCount;
  // Room for 2 rounds of every block's region, so that a launch reads what the last did not.
  const size_t bytes = size_t(2) * 2 * sm_count * kRegion + (size_t(64) << 20);
  char* w;
  int* slots;
  int4* out;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMalloc(&slots, sizeof(int) * 1024));
  CHECK(cudaMalloc(&out, 1024 * sizeof(int4)));
  CHECK(cudaMemset(w, 0x3c, bytes));
  CHECK(cudaDeviceSynchronize());
  // The buffer as a [rows, 7168] bf16 matrix, boxes of 64 elements x 64 rows.
  const TensorMap map = bf16_tensor_map(w, kRowBytes / 2, bytes / kRowBytes, kRowBytes, 64,
                                        kItemRows, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, "sm_rate");
  std::printf("%s, %d SMs; each active block streams %.1f MB in 8 KiB stages\n", prop.name,
              sm_count, kRegion / 1e6);
  long long offset = 0;
  run<kCpAsyncStripes, 8>(map, w, bytes, slots, out, sm_count, offset);
  run<kBox, 8>(map, w, bytes, slots, out, sm_count, offset);
  run<kCpAsync, 8>(map, w, bytes, slots, out, sm_count, offset);
  run<kBulk, 8>(map, w, bytes, slots, out, sm_count, offset);
  // 58c: wider stripes (fewer rows a stage, more bytes of each), as a tile of BLOCK_K 128, 256 or
  // 512 would read them, against the contiguous stages above; the 128-byte stripes again after
  // them, so that a drift of the machine's rate between the runs shows.
  run<kCpAsyncStripes, 8, 256>(map, w, bytes, slots, out, sm_count, offset, 33);
  run<kCpAsyncStripes, 8, 512>(map, w, bytes, slots, out, sm_count, offset, 33);
  run<kCpAsyncStripes, 8, 1024>(map, w, bytes, slots, out, sm_count, offset, 33);
  run<kCpAsyncStripes, 8, 128>(map, w, bytes, slots, out, sm_count, offset, 33);
  run<kCpAsyncStripes, 12>(map, w, bytes, slots, out, sm_count, offset);
  run<kBox, 12>(map, w, bytes, slots, out, sm_count, offset);
  run<kCpAsyncStripes, 4>(map, w, bytes, slots, out, sm_count, offset);
  run<kBox, 4>(map, w, bytes, slots, out, sm_count, offset);
  return 0;
}
