// Whether shared memory's bandwidth slows the swapped kernel's MMAs (docs/PERF.md 37c). Each
// wgmma.m64nNk16 with both operands in shared memory reads A (64 x 16, 2 KB) and B (N x 16, 32 N
// bytes) for 2048 N FLOPs: 1/N + 1/64 bytes a FLOP. The swapped kernel's A is a 64-row weight
// slice and its N the block's token rows (8 to 160, a row block of an expert), so a block of 128
// tokens reads 20% more shared memory a FLOP than a dense 128 x 256 tile (N = 256), one of 96
// tokens 33% more; the copy engine's writes of each stage come on top. At the tensor pipe's
// ~4096 dense FLOPs a clock an SM, N = 160 asks ~90 B a clock of reads and ~41 of writes, near the
// 128 B a clock a Hopper SM's shared memory is quoted at. This measures it, per N: one block an
// SM, the swapped kernel's shape (a producer warpgroup, two consumer warpgroups of SLICES 64-row
// slices each, 4 stages of N token rows and 128 SLICES weight rows, 64 K elements a stage), in
// four modes:
//   mma:       the consumers' MMAs alone, on stages nobody writes;
//   copies:    the real ring: the producer fills each stage by bulk copies from L2 (each block its
//              own ~200 KB, read again and again), the consumers wait for it and release it;
//   multicast: the same in clusters of two, each block copying half of every stage to both
//              blocks' shared memory: the same shared-memory writes for half the L2 reads;
//   fill:      the copies alone (the consumers release each stage as it lands).
// It prints the SM clocks a K tile takes and the tensor pipe's share of them (the MMAs' FLOPs at
// 4096 a clock), and the copies' bytes a clock an SM. If "mma" is near 100% at every N but
// "multicast" falls with N, the writes and the MMA's reads share shared memory's bandwidth.
// Build here (nvcc 13), run on the GPU host:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ikernel_templates \
//        -o wgmma_smem docs/experiments/wgmma_smem.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bulk_copy.h"
#include "cuda_check.h"
#include "grouped_gemm_sm90_swap.cuh"

using namespace rt_moe;

namespace {

constexpr int kStages = 4;
constexpr int kThreads = 384;  // producer warpgroup, two consumer warpgroups
enum Mode { kMma, kCopies, kMulticast, kFill };

template <int N, int SLICES>
struct Shape {
  static constexpr int kTokenBytes = N * 128;                 // N rows of 64 bf16
  static constexpr int kWeightBytes = 2 * SLICES * 64 * 128;  // two warpgroups' slices
  static constexpr int kStageBytes = kTokenBytes + kWeightBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024 + 64;
  static constexpr int kAccumulators = N / 2;  // fp32 a thread, one slice
};

template <int N>
__device__ __forceinline__ void mma(float* acc, unsigned weights, unsigned tokens) {
  if constexpr (N == 256) {
    Wgmma256<BF16>::wgmma_m64n256k16(acc, smem_descriptor(weights), smem_descriptor(tokens), 1);
  } else {
    WgmmaTokens<BF16, N>::mma(acc, smem_descriptor(weights), smem_descriptor(tokens), 1);
  }
}

// The producer's ring: each stage of K tile kt from this block's own source (read again every
// kStages K tiles: L2 hits), in 4 KB bulk copies; with a partner, this block's half of the pieces
// to both blocks.
template <class S, bool kPair>
__device__ void produce(const char* src, int k_tiles, unsigned base, unsigned full, unsigned empty,
                        unsigned rank) {
  const char* mine = src + size_t(blockIdx.x / (kPair ? 2 : 1)) * kStages * S::kStageBytes;
  constexpr int kPiece = 4096;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int stage = kt % kStages;
    if (kt >= kStages) mbarrier_wait(empty + 8 * stage, ((kt / kStages) & 1) ^ 1);
    const unsigned dst = base + stage * S::kStageBytes;
    const char* from = mine + size_t(stage) * S::kStageBytes;
    mbarrier_arrive_expect_tx(full + 8 * stage, S::kStageBytes);
    for (int off = 0; off < S::kStageBytes; off += kPiece) {
      const int bytes = min(kPiece, S::kStageBytes - off);
      if constexpr (kPair) {
        if ((off / kPiece) % 2 == int(rank)) {
          bulk_load_multicast(dst + off, from + off, bytes, full + 8 * stage);
        }
      } else {
        bulk_load(dst + off, from + off, bytes, full + 8 * stage);
      }
    }
  }
}

// A consumer warpgroup: SLICES 64-row weight slices against the stage's N token rows, 4 k16 steps
// a K tile, committed as one batch and waited for one batch later (the swapped kernel's k_loop);
// then the previous stage released (with "fill", the stage released as it lands, no MMAs).
template <int N, int SLICES, Mode MODE>
__device__ void consume(int k_tiles, unsigned base, unsigned full, unsigned empty, unsigned rank,
                        long long* cycles, float* sink) {
  using S = Shape<N, SLICES>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / 4 - 1;
  float acc[SLICES][S::kAccumulators];
#pragma unroll
  for (int s = 0; s < SLICES; ++s) {
#pragma unroll
    for (int i = 0; i < S::kAccumulators; ++i) acc[s][i] = 0.f;
  }
  int release = -1;
  const long long t0 = clock64();
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int stage = kt % kStages;
    if (MODE != kMma) mbarrier_wait(full + 8 * stage, (kt / kStages) & 1);
    const unsigned tokens = base + stage * S::kStageBytes;
    const unsigned weights = tokens + S::kTokenBytes + group * SLICES * 64 * 128;
    if (MODE != kFill) {
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
        for (int s = 0; s < SLICES; ++s) {
          mma<N>(acc[s], weights + s * 64 * 128 + ks * 32, tokens + ks * 32);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
    }
    if (MODE != kMma) {
      const int done = MODE == kFill ? stage : release;
      if (done >= 0 && lane == 0) {
        mbarrier_arrive(empty + 8 * done);
        if constexpr (MODE == kMulticast) mbarrier_arrive_remote_cta(empty + 8 * done, rank ^ 1);
      }
    }
    release = stage;
  }
  wgmma_wait<0>();
  const long long t1 = clock64();
  if (threadIdx.x % 128 == 0) cycles[blockIdx.x * 2 + group] = t1 - t0;
  // Every accumulator out, so ptxas keeps every MMA (it drops those whose results go unused),
  // each pinned after the wait by an empty asm that reads and writes it (a plain sum was moved
  // above the wait, and ptxas then serialized the MMAs: C7514).
  float total = 0.f;
#pragma unroll
  for (int s = 0; s < SLICES; ++s) {
#pragma unroll
    for (int i = 0; i < S::kAccumulators; ++i) {
      asm volatile("" : "+f"(acc[s][i])::"memory");
      total += acc[s][i];
    }
  }
  if (total == 1234.5f) sink[threadIdx.x] = total;
}

template <int N, int SLICES, Mode MODE>
__device__ void run(const char* src, int k_tiles, long long* cycles, float* sink) {
  using S = Shape<N, SLICES>;
  extern __shared__ char smem_raw[];
  const unsigned base = (smem_address(smem_raw) + 1023) & ~1023u;
  const unsigned full = base + kStages * S::kStageBytes;
  const unsigned empty = full + 8 * kStages;
  const int warp = threadIdx.x / 32;
  constexpr bool kPair = MODE == kMulticast;
  const unsigned rank = kPair ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full + 8 * s, 1);
      mbarrier_init(empty + 8 * s, kPair ? 16 : 8);  // each consumer warp of both blocks
    }
    mbarrier_init_fence();
  }
  if (MODE == kMma) {  // stages nobody writes: fill them once with bf16 values near 1
    for (unsigned i = threadIdx.x * 16; i < kStages * S::kStageBytes; i += kThreads * 16) {
      asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(base + i), "r"(0x3f803f81u));
    }
    fence_proxy_async();  // the stores, before the MMAs read them through the async proxy
  }
  __syncthreads();
  if (kPair) cluster_sync();
  if (warp < 4) {
    warpgroup_registers_dec<56>();
    if (MODE != kMma && threadIdx.x == 0) produce<S, kPair>(src, k_tiles, base, full, empty, rank);
  } else {
    warpgroup_registers_inc<224>();
    consume<N, SLICES, MODE>(k_tiles, base, full, empty, rank, cycles, sink);
  }
  if (kPair) cluster_sync();  // no block exits while its partner may still write to it
}

template <int N, int SLICES, Mode MODE>
__global__ void __launch_bounds__(kThreads, 1)
    rate(const char* src, int k_tiles, long long* cycles, float* sink) {
  run<N, SLICES, MODE>(src, k_tiles, cycles, sink);
}

struct Result {
  double clocks_per_tile = 0;  // median over consumer warpgroups
  double tensor_share = 0;     // the MMAs' clocks at 4096 FLOPs a clock, over clocks_per_tile
  double copy_bytes_per_clock = 0;
};

template <int N, int SLICES, Mode MODE>
Result measure(const char* src, int sms, long long* cycles, float* sink) {
  using S = Shape<N, SLICES>;
  auto kernel = rate<N, SLICES, MODE>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes));
  const int blocks = sms / 2 * 2;
  const int k_tiles = 20000;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = S::kSmemBytes;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = MODE == kMulticast ? 2 : 1;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  for (int run = 0; run < 2; ++run) {  // the first warms the L2 and the clock
    CHECK(cudaLaunchKernelEx(&config, kernel, src, k_tiles, cycles, sink));
    CHECK(cudaDeviceSynchronize());
  }
  std::vector<long long> host(size_t(blocks) * 2);
  CHECK(cudaMemcpy(host.data(), cycles, host.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  std::sort(host.begin(), host.end());
  Result r;
  r.clocks_per_tile = double(host[host.size() / 2]) / k_tiles;
  // Both warpgroups' MMAs of a K tile: 2 x SLICES x 4 x (2048 N FLOPs) at 4096 a clock.
  const double mma_clocks = 2.0 * SLICES * 4 * N / 2;
  r.tensor_share = MODE == kFill ? 0 : mma_clocks / r.clocks_per_tile;
  r.copy_bytes_per_clock = MODE == kMma ? 0 : S::kStageBytes / r.clocks_per_tile;
  return r;
}

template <int N, int SLICES>
void row(const char* src, int sms, long long* cycles, float* sink) {
  using S = Shape<N, SLICES>;
  const Result r[4] = {measure<N, SLICES, kMma>(src, sms, cycles, sink),
                       measure<N, SLICES, kCopies>(src, sms, cycles, sink),
                       measure<N, SLICES, kMulticast>(src, sms, cycles, sink),
                       measure<N, SLICES, kFill>(src, sms, cycles, sink)};
  // Shared memory a K tile at full tensor rate: the MMAs' reads (both operands of each) and the
  // stage's writes, in bytes a clock.
  const double mma_clocks = 2.0 * SLICES * 4 * N / 2;
  const double reads = 2.0 * SLICES * 4 * (2048 + 32 * N) / mma_clocks;
  const double writes = S::kStageBytes / mma_clocks;
  std::printf("%4d %6d %8.0f %8.0f", N, 128 * SLICES, reads, writes);
  for (int m = 0; m < 3; ++m)
    std::printf(" %8.0f %6.1f%%", r[m].clocks_per_tile, 100 * r[m].tensor_share);
  std::printf(" %8.1f %8.1f %8.1f\n", r[1].copy_bytes_per_clock, r[2].copy_bytes_per_clock,
              r[3].copy_bytes_per_clock);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; one block an SM, 4 stages, 20000 K tiles of 64; clocks by clock64\n",
              prop.name, sms);
  const size_t src_bytes = size_t(sms) * kStages * Shape<256, 1>::kStageBytes * 2;
  char* src = nullptr;
  long long* cycles = nullptr;
  float* sink = nullptr;
  CHECK(cudaMalloc(&src, src_bytes));
  CHECK(cudaMemset(src, 0x3f, src_bytes));
  CHECK(cudaMalloc(&cycles, size_t(sms) * 2 * sizeof(long long)));
  CHECK(cudaMalloc(&sink, kThreads * sizeof(float)));
  std::printf(
      "   N  rows  smem rd  smem wr |      mma clk tensor |   copies clk tensor |"
      " multicast clk tensor | copy B/clk: copies multicast fill\n");
  std::printf("       (weight rows a block; shared memory a clock at full tensor rate)\n");
  row<64, 2>(src, sms, cycles, sink);
  row<96, 2>(src, sms, cycles, sink);
  row<128, 2>(src, sms, cycles, sink);
  row<144, 2>(src, sms, cycles, sink);
  row<160, 2>(src, sms, cycles, sink);
  row<128, 1>(src, sms, cycles, sink);
  row<256, 1>(src, sms, cycles, sink);
  CHECK(cudaFree(src));
  CHECK(cudaFree(cycles));
  CHECK(cudaFree(sink));
  return 0;
}
