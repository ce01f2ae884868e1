// Does the grouped GEMMs' weight stream read DRAM as fast as a linear read? (docs/PERF.md 35g)
// The swapped kernel's producer loads, a K tile at a time, 128 bytes (BLOCK_K = 64 bf16) of each of
// a tile's 256 weight rows. The rows are 14336 bytes apart (H = 7168), and about four K tiles are
// in flight a block. Here 132 blocks of 256 threads (one an SM, as the persistent GEMM) read a
// 4.3 GB matrix of 14336-byte rows, tile by tile (256 rows, round robin over the blocks):
// - linear: the buffer in address order (the HBM ceiling's pattern), 32 loads in flight a thread;
// - stripes S: each K step S bytes of each of the tile's 256 rows (128-byte lines, 8 threads a
//   line for S = 128), K steps in order, DEPTH steps issued before any is consumed (~128 KB in
//   flight a block, as the ring's stages).
// If stripes of 128 bytes read much slower than linear, the middle's DRAM rate (77-80% of the
// ceiling in the swapped GEMMs, PERF.md 13b) is its access pattern's, and wider K steps or a
// tiled weight layout would be the lever; if not, it is not.
// Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o dram_stripes dram_stripes.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"
#include "read_sink.h"

constexpr int kThreads = 256;
constexpr int kRowBytes = 14336;  // 7168 bf16
constexpr int kTileRows = 256;

// 32 loads in flight a thread, in address order over the whole buffer.
__global__ void __launch_bounds__(kThreads, 1) linear_read(const int4* p, size_t n, int4* out) {
  int4 acc{0, 0, 0, 0};
  const size_t stride = (size_t)gridDim.x * kThreads;
  for (size_t base = blockIdx.x * (size_t)kThreads + threadIdx.x; base < n; base += 32 * stride) {
    int4 v[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const size_t i = base + j * stride;
      v[j] = i < n ? __ldcg(p + i) : int4{0, 0, 0, 0};
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) fold(acc, v[j]);
  }
  sink(acc, out);
}

// Tile t = blockIdx.x + i * gridDim.x: rows [256 t, 256 t + 256), STEP bytes of each a K step.
template <int STEP, int DEPTH>
__global__ void __launch_bounds__(kThreads, 1) stripes_read(const char* p, int tiles, int4* out) {
  constexpr int kChunks = STEP / 16;                 // 16-byte loads a row a K step
  constexpr int kRowsPerPass = kThreads / kChunks;   // rows one load instruction covers
  constexpr int kPasses = kTileRows / kRowsPerPass;  // = kChunks: loads a thread a K step
  constexpr int kSteps = kRowBytes / STEP;
  static_assert(kSteps % DEPTH == 0, "whole groups of K steps");
  const int chunk = threadIdx.x % kChunks, row0 = threadIdx.x / kChunks;
  int4 acc{0, 0, 0, 0};
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const char* base = p + (size_t)tile * kTileRows * kRowBytes + chunk * 16;
    for (int s0 = 0; s0 < kSteps; s0 += DEPTH) {
      int4 v[DEPTH * kPasses];
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) {
#pragma unroll
        for (int pass = 0; pass < kPasses; ++pass) {
          const int row = row0 + pass * kRowsPerPass;
          v[d * kPasses + pass] = __ldcg(reinterpret_cast<const int4*>(
              base + (size_t)row * kRowBytes + (size_t)(s0 + d) * STEP));
        }
      }
#pragma unroll
      for (int j = 0; j < DEPTH * kPasses; ++j) fold(acc, v[j]);
    }
  }
  sink(acc, out);
}

template <typename Launch>
float median_ms(Launch launch, cudaEvent_t a, cudaEvent_t b) {
  std::vector<float> ms;
  for (int r = 0; r < 7; ++r) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaGetLastError());
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const int tiles = 1170;  // 299520 rows, 4.29 GB: far past the 50 MB L2
  const size_t bytes = (size_t)tiles * kTileRows * kRowBytes;
  char* buf;
  int4* out;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMalloc(&out, kThreads * sizeof(int4)));
  CHECK(cudaMemset(buf, 0x5a, bytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int4* p4 = reinterpret_cast<const int4*>(buf);
  const size_t n4 = bytes / 16;
  printf("%s, %d SMs; %.2f GB read once a run, median of 7 runs\n", prop.name, sms, bytes / 1e9);
  auto report = [&](const char* name, float ms) {
    printf("%-34s %8.3f ms %7.0f GB/s\n", name, ms, bytes / ms / 1e6);
  };
  report("linear, 132 x 256 threads",
         median_ms([&] { linear_read<<<sms, kThreads>>>(p4, n4, out); }, a, b));
  report("linear, 4 x 132 x 256 threads",
         median_ms([&] { linear_read<<<4 * sms, kThreads>>>(p4, n4, out); }, a, b));
  report("stripes 128 B, 4 steps in flight",
         median_ms([&] { stripes_read<128, 4><<<sms, kThreads>>>(buf, tiles, out); }, a, b));
  report("stripes 128 B, 2 steps in flight",
         median_ms([&] { stripes_read<128, 2><<<sms, kThreads>>>(buf, tiles, out); }, a, b));
  report("stripes 256 B, 2 steps in flight",
         median_ms([&] { stripes_read<256, 2><<<sms, kThreads>>>(buf, tiles, out); }, a, b));
  report("stripes 512 B, 1 step in flight",
         median_ms([&] { stripes_read<512, 1><<<sms, kThreads>>>(buf, tiles, out); }, a, b));
  CHECK(cudaFree(buf));
  CHECK(cudaFree(out));
  return 0;
}
