// How fast one block of the fused decode tile streams weights, against how many blocks stream at
// once (docs/PERF.md 54e). 54c's trace found a decode block at ~11-15 GB/s whether 128 or 264
// blocks streamed (8 stages of 8 KiB in flight: a ~4.7 us round trip), so the phases with fewer
// streaming blocks (the routing, the last wave) stream at a fraction of the HBM rate. Here N
// blocks of 128 threads (N = 1 .. 2 an SM), each streaming 4 regions of 917504 bytes through the
// tile's 8-stage cp.async ring with its ldmatrix + mma.sync per stage (stripe_energy.cu's ring),
// in one of four patterns a stage:
//   - stripes 14K: 128 bytes of each of 64 rows 14336 bytes apart (gate/up, H = 7168);
//   - stripes 4K: 128 bytes of each of 64 rows 4096 bytes apart (down, I = 2048);
//   - contiguous: 8 KiB in address order;
//   - wide: 512 bytes of each of 16 rows 14336 bytes apart.
// Every launch reads addresses no earlier launch of the last 3 GB read (cold in L2). Prints the
// median of 3 launches: the kernel's time, GB/s a block and in all.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ikernel_templates \
//        -o block_rate docs/experiments/block_rate.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cuda_check.h"
#include "decode_stage.h"
#include "read_sink.h"
#include "tile_loader.cuh"

using namespace rt_moe;

constexpr int kThreads = 128;
constexpr long long kRegion = 1 << 20;  // a region's stride; 917504 bytes read of each
constexpr int kStageB = 8192;
constexpr int kStageA = 2048;
constexpr int kStages = 8;
constexpr int kSteps = 112;  // 917504 / 8192
constexpr int kRegionsPerBlock = 4;
constexpr int kSmem = kStages * (kStageA + kStageB);

enum Pattern { kStripes14k = 0, kStripes4k = 1, kContiguous = 2, kWide = 3 };
const char* kNames[] = {"stripes 14K", "stripes 4K", "contiguous", "wide 512 B"};

template <int PATTERN>
__device__ __forceinline__ const char* chunk_src(const char* region, int s, int idx) {
  if (PATTERN == kContiguous) return region + (long long)s * kStageB + idx * 16;
  if (PATTERN == kStripes14k) return region + (long long)(idx / 8) * 14336 + s * 128 + idx % 8 * 16;
  if (PATTERN == kStripes4k) {
    // 64 rows of 4096 bytes a group, 32 stages a group: 3.5 groups, within the 1 MiB region.
    const int group = s / 32, k = s % 32;
    return region + (long long)(group * 64 + idx / 8) * 4096 + k * 128 + idx % 8 * 16;
  }
  const int row = s / 28 * 16 + idx / 32;  // wide: 28 K steps of 512 bytes a 16-row group
  return region + (long long)row * 14336 + (s % 28) * 512 + idx % 32 * 16;
}

template <int PATTERN>
__global__ void __launch_bounds__(kThreads) ring(const char* w, const char* x, int4* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned base = smem_address(smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float acc[2][4] = {};
  for (int r = 0; r < kRegionsPerBlock; ++r) {
    const char* region = w + ((long long)r * gridDim.x + blockIdx.x) * kRegion;
    auto load = [&](int s) {
      const unsigned st = base + (s % kStages) * (kStageA + kStageB);
      const int row = tid / 8, chunk = tid % 8;  // x: one live row, the rest zero-filled
      cp_async_16(st + swizzle_128b(row, chunk), x + s * 128 + chunk * 16, row == 0);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int idx = tid + j * kThreads;
        cp_async_16(st + kStageA + swizzle_128b(idx / 8, idx % 8),
                    chunk_src<PATTERN>(region, s, idx), true);
      }
    };
    decode_ring<kStages>(kSteps, load, [&](int s) {
      const unsigned a_st = base + (s % kStages) * (kStageA + kStageB);
      decode_stage_mma(acc, a_st, a_st + kStageA, lane, warp);
    });
  }
  decode_stage_sink(acc, out);
}

template <int PATTERN>
void run(const char* w, size_t bytes, const char* x, int4* out, int sms, long long& offset) {
  CHECK(cudaFuncSetAttribute(ring<PATTERN>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (int n : {1, 2, 8, 32, 66, 132, 198, 2 * sms}) {
    const long long span = (long long)n * kRegionsPerBlock * kRegion;
    std::vector<float> ms;
    for (int rep = 0; rep < 3; ++rep) {
      if (offset + span > (long long)bytes) offset = 0;
      CHECK(cudaEventRecord(start));
      ring<PATTERN><<<n, kThreads, kSmem>>>(w + offset, x, out);
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      CHECK(cudaGetLastError());
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
      offset += std::max(span, 64LL << 20);  // past the L2 (50-60 MB) before it is read again
    }
    std::sort(ms.begin(), ms.end());
    const double block_bytes = double(kRegionsPerBlock) * kSteps * kStageB;
    std::printf("%-12s blocks %4d: %8.1f us, %6.1f GB/s a block, %7.0f GB/s in all\n",
                kNames[PATTERN], n, ms[1] * 1e3, block_bytes / (ms[1] * 1e-3) / 1e9,
                n * block_bytes / (ms[1] * 1e-3) / 1e9);
  }
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t bytes = size_t(3) << 30;
  char *w, *x;
  int4* out;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMalloc(&x, 16384));
  CHECK(cudaMalloc(&out, 1024 * sizeof(int4)));
  CHECK(cudaMemset(w, 0x3c, bytes));
  CHECK(cudaMemset(x, 0x3c, 16384));
  CHECK(cudaDeviceSynchronize());
  std::printf("%s, %d SMs; each block 4 x 917504 bytes through an 8-stage ring of 8 KiB\n",
              prop.name, prop.multiProcessorCount);
  long long offset = 0;
  run<kStripes14k>(w, bytes, x, out, prop.multiProcessorCount, offset);
  run<kStripes4k>(w, bytes, x, out, prop.multiProcessorCount, offset);
  run<kContiguous>(w, bytes, x, out, prop.multiProcessorCount, offset);
  run<kWide>(w, bytes, x, out, prop.multiProcessorCount, offset);
  return 0;
}
