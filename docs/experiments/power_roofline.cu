// How close to its roofline floor, max(FLOPs / R, bytes / BW), any kernel can run a row's work at
// the board's power limit (docs/PERF.md 65): the least work every forward of the row does, with
// nothing waiting on anything. One block an SM, 384 threads:
//   stream:   one thread of the first warpgroup reads the row's bytes of weight-like data (N(0, 1)
//             / sqrt(2048) rounded to the dtype, as the bench's weights) from HBM into a ring of
//             shared memory by 16 KiB bulk copies, every block a 16 KiB chunk in turn (a linear
//             read of the whole buffer), 6 in flight a block;
//   multiply: two consumer warpgroups run the row's FLOPs as wgmma.m64n256k16, both operands in
//             shared memory (the densest tile the kernels use: 64 weight rows a warpgroup against
//             256 token rows), on two stages of weight-like and N(0, 1) token data filled once.
// Both run at once and neither waits for the other, so the launch takes what the slower of the
// two takes with the other beside it, drawing from the same power budget. A real forward does all
// of this and more (its MMAs wait for the weights they multiply, it gathers token rows from L2,
// writes h and y, runs the routing and the combine), so where this mimic of a row runs at X times
// its floor, no kernel of that row runs much below X at the same limit.
// Each pattern runs ~`seconds` back to back; the draw and the launches' time are the second half's.
// Prints, per dtype: the stream alone and the multiply alone (the mimic's own ceilings, R and BW),
// the swapped tile's MMAs alone at N = 64, 128, 144 and 160 token rows, then each row's work: ms a
// launch, the board, and the time over max(F / R, B / BW); with the bench's ceilings as arguments
// (its HBM read GB/s and cuBLAS steady TFLOP/s of each dtype), the time over the bench's floor too.
// Build here (nvcc 13; tools/power.cpp for NVML, fmt header-only), run on the GPU host:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DFMT_HEADER_ONLY -Itools \
//        -Ikernel_templates -Xcompiler -Wno-stringop-overflow \
//        -o power_roofline docs/experiments/power_roofline.cu tools/power.cpp
// Run: ./power_roofline [seconds [all|fed|split [hbm_gbps bf16_tflops fp16_tflops]]] (default 2 s,
// all, no bench floor); fed: bf16's ceilings and its fed mimics by each way of loading the token
// rows; split: those and the split rings (PERF.md 65e).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bulk_copy.h"
#include "cuda_check.h"
#include "grouped_gemm_sm90_swap.cuh"
#include "normal_fill.h"
#include "power.h"
#include "steady_power.h"

using namespace rt_moe;

namespace {

constexpr int kThreads = 384;
constexpr int kN = 256;                     // token rows of a stage
constexpr int kTokenBytes = kN * 128;       // 64 elements of each
constexpr int kWeightBytes = 2 * 64 * 128;  // 64 weight rows a consumer warpgroup
constexpr int kStageBytes = kTokenBytes + kWeightBytes;
constexpr int kMmaStages = 2;
constexpr int kChunk = 16384;  // bytes of one bulk copy
constexpr int kSlots = 6;      // copies in flight a block
constexpr int kSmemBytes = kMmaStages * kStageBytes + kSlots * kChunk + 1024 + 64;
// A K tile of 64: both warpgroups, 4 k16 steps of 64 x 256 x 16 each.
constexpr double kFlopsPerTile = 2.0 * 4 * 2.0 * 64 * kN * 16;

// This block's chunks of the stream: chunk i at (blockIdx.x + i x gridDim.x) x kChunk, kSlots in
// flight, each slot's barrier completing once a use; then every copy waited for.
__device__ void stream_through(const char* stream, long long chunks, unsigned ring, unsigned full) {
  const char* mine = stream + size_t(blockIdx.x) * kChunk;
  const size_t step = size_t(gridDim.x) * kChunk;
  for (long long i = 0; i < chunks; ++i) {
    const int slot = int(i % kSlots);
    const long long use = i / kSlots;
    if (use > 0) mbarrier_wait(full + 8 * slot, unsigned(use - 1) & 1);
    mbarrier_arrive_expect_tx(full + 8 * slot, kChunk);
    bulk_load(ring + slot * kChunk, mine + size_t(i) * step, kChunk, full + 8 * slot);
  }
  for (long long i = chunks > kSlots ? chunks - kSlots : 0; i < chunks; ++i) {
    mbarrier_wait(full + 8 * int(i % kSlots), unsigned(i / kSlots) & 1);
  }
}

// A consumer warpgroup: k_tiles K tiles of 4 MMAs against the two stages in turn, committed as one
// batch and waited for one batch later (the swapped kernel's k_loop).
template <class D>
__device__ void multiply(int k_tiles, unsigned base, float* sink) {
  const int group = threadIdx.x / 128 - 1;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const unsigned tokens = base + (kt & 1) * kStageBytes;
    const unsigned weights = tokens + kTokenBytes + group * 64 * 128;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      Wgmma256<D>::wgmma_m64n256k16(acc, smem_descriptor(weights + ks * 32),
                                    smem_descriptor(tokens + ks * 32), 1);
    }
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  // Every accumulator out, each pinned after the wait (wgmma_smem.cu says why), so that ptxas
  // keeps every MMA.
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < 128; ++i) {
    asm volatile("" : "+f"(acc[i])::"memory");
    total += acc[i];
  }
  if (total == 1234.5f) sink[threadIdx.x] = total;
}

template <class D>
__global__ void __launch_bounds__(kThreads, 1)
    mimic(const char* stream, long long chunks, const uint4* tokens, const uint4* weights,
          int k_tiles, float* sink) {
  extern __shared__ char smem_raw[];
  const unsigned base = (smem_address(smem_raw) + 1023) & ~1023u;
  const unsigned ring = base + kMmaStages * kStageBytes;
  const unsigned full = ring + kSlots * kChunk;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) mbarrier_init(full + 8 * s, 1);
    mbarrier_init_fence();
  }
  // The MMAs' stages, this block's own data: token rows, then the two warpgroups' weight rows.
  const uint4* my_tokens = tokens + size_t(blockIdx.x) * kMmaStages * kTokenBytes / 16;
  const uint4* my_weights = weights + size_t(blockIdx.x) * kMmaStages * kWeightBytes / 16;
  for (int i = threadIdx.x; i < kMmaStages * kStageBytes / 16; i += kThreads) {
    const int stage = i / (kStageBytes / 16), at = i % (kStageBytes / 16);
    const uint4 v = at < kTokenBytes / 16
                        ? my_tokens[stage * (kTokenBytes / 16) + at]
                        : my_weights[stage * (kWeightBytes / 16) + at - kTokenBytes / 16];
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(base + 16 * i), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w));
  }
  fence_proxy_async();  // the stores, before the MMAs read them through the async proxy
  __syncthreads();
  if (threadIdx.x < 128) {
    warpgroup_registers_dec<56>();
    if (threadIdx.x == 0) stream_through(stream, chunks, ring, full);
  } else {
    warpgroup_registers_inc<224>();
    multiply<D>(k_tiles, base, sink);
  }
}

// How the fed mimics' token rows come: one bulk copy a stage, gathered by cp.async from the
// producer's threads (as the real gate/up producer does), or one 128-byte bulk copy a row.
enum TokensBy { kByBulk = 0, kByGather = 1, kByRows = 2 };

template <int N>
struct Fed {
  static constexpr int kStages = 4;
  static constexpr int kTokenBytes = N * 128;
  static constexpr int kWeightBytes = 256 * 128;
  static constexpr int kStageBytes = kTokenBytes + kWeightBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024 + 64;
  static constexpr double kFlopsPerTile = 2.0 * 256 * N * 64;
  static constexpr int kKTiles = 112;  // K = 7168 in tiles of 64: a token block's rows
  static constexpr int kExperts = 4;   // distinct experts' token rows, 16 blocks each in turn
  static constexpr int kRowBytes = kKTiles * 128;  // a gathered token row of 7168 elements
  static size_t token_bytes(int reuse) { return size_t(kExperts) * reuse * kKTiles * kTokenBytes; }

  // This block's expert's range of the token buffer: reuse x N rows of kRowBytes (16 blocks an
  // expert, kExperts in turn).
  static __device__ const char* expert_rows(const char* tokens, int reuse) {
    return tokens + size_t(blockIdx.x / 16 % kExperts) * reuse * kKTiles * kTokenBytes;
  }
  // Gathered row r of token block 0 at a hashed row of the range (block b's rows 8 b further on).
  static __device__ const char* gathered_row(const char* range, unsigned r, int reuse) {
    return range + size_t((r * 2654435761u >> 7) % unsigned(reuse * N - 8 * reuse)) * kRowBytes;
  }
  // K tile kt's offset in a gathered row: block kt % reuse, K tile (kt / reuse) % kKTiles.
  static __device__ size_t gathered_offset(int kt, int reuse) {
    return size_t(kt % reuse) * 8 * kRowBytes + size_t(kt / reuse % kKTiles) * 128;
  }
  // K tile kt's token tile in the range, one contiguous stage's worth (the bulk loads).
  static __device__ const char* bulk_tile(const char* range, int kt, int reuse) {
    return range + (size_t(kt % reuse) * kKTiles + kt / reuse % kKTiles) * kTokenBytes;
  }
  // K tile kt of the gathered rows into a stage at dst, 16 bytes a thread a row, from THREADS
  // threads (tid < THREADS): thread tid copies chunk tid % 8 of rows tid / 8 + THREADS / 8 j,
  // rows[j] already offset by that chunk.
  template <int THREADS>
  static __device__ void gather(unsigned dst, const char* const* rows, int kt, int reuse, int tid) {
    constexpr int kGroups = THREADS / 8;
    static_assert(N % kGroups == 0, "every gathering thread copies as many rows");
    const size_t at = gathered_offset(kt, reuse);
#pragma unroll
    for (int j = 0; j < N / kGroups; ++j) {
      cp_async_16(dst + swizzle_128b(tid / 8 + kGroups * j, tid % 8), rows[j] + at, true);
    }
  }
};

// A consumer warpgroup's K tile in the fed mimics: its two 64-row weight slices against the
// stage's N token rows, 4 k16 steps, committed as one batch and waited for one batch later.
template <class D, int N>
__device__ __forceinline__ void mma_k_tile(float (&acc)[2][N / 2], unsigned weights_at,
                                           unsigned tokens_at) {
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      WgmmaTokens<D, N>::mma(acc[s], smem_descriptor(weights_at + s * 64 * 128 + ks * 32),
                             smem_descriptor(tokens_at + ks * 32), 1);
    }
  }
  wgmma_commit();
  wgmma_wait<1>();
}

// Every accumulator out after the last batch, each pinned after the wait (wgmma_smem.cu says
// why), so that ptxas keeps every MMA.
template <int N>
__device__ __forceinline__ void drain_to_sink(float (&acc)[2][N / 2], float* sink) {
  wgmma_wait<0>();
  float total = 0.f;
#pragma unroll
  for (int s = 0; s < 2; ++s) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      asm volatile("" : "+f"(acc[s][i])::"memory");
      total += acc[s][i];
    }
  }
  if (total == 1234.5f) sink[threadIdx.x] = total;
}

// The fed mimic: the swapped kernel's ring without its epilogue. A producer thread fills each of 4
// stages with N token rows of a K tile from an L2-resident buffer and 256 weight rows (32 KiB, two
// 16 KiB bulk copies) from the HBM stream, each weight K tile used for `reuse` token blocks in turn
// (the second and later from L2, as the tile order walks an expert's row blocks); two consumer
// warpgroups wait for a stage, multiply it (2 slices of 64 weight rows each, wgmma.m64nNk16) and
// release it a batch later. The token rows (BY):
//   kByBulk:   one bulk copy a stage (the volume the real producer gathers);
//   kByGather: 16-byte cp.async from all 128 producer threads, each row's K tile from a row of
//              7168 elements at a hashed row of the expert's range, into the 128-byte swizzle,
//              arriving on the stage's barrier as they land; the consumers' proxy fence after
//              each wait (the real gate/up kernel's way);
//   kByRows:   the same rows, one 128-byte bulk copy a row's K tile from warp 1's lanes,
//              unswizzled (the MMAs' data is not checked).
// FIXED: the same MMAs alone, on two stages filled once (the N-row tile's own multiply ceiling).
template <class D, int N, bool FIXED, int BY>
__global__ void __launch_bounds__(kThreads, 1)
    fed(const char* stream, const char* tokens, int reuse, int k_tiles, float* sink) {
  using F = Fed<N>;
  constexpr bool GATHER = BY == kByGather, ROWS = BY == kByRows;
  extern __shared__ char smem_raw[];
  const unsigned base = (smem_address(smem_raw) + 1023) & ~1023u;
  const unsigned full = base + F::kStages * F::kStageBytes;
  const unsigned empty = full + 8 * F::kStages;
  if constexpr (FIXED) {  // two stages of this block's own data, token rows then weight rows
    const uint4* from_tokens =
        reinterpret_cast<const uint4*>(tokens) + size_t(blockIdx.x) * 2 * F::kTokenBytes / 16;
    const uint4* from_weights =
        reinterpret_cast<const uint4*>(stream) + size_t(blockIdx.x) * 2 * F::kWeightBytes / 16;
    for (int i = threadIdx.x; i < 2 * F::kStageBytes / 16; i += kThreads) {
      const int stage = i / (F::kStageBytes / 16), at = i % (F::kStageBytes / 16);
      const uint4 v = at < F::kTokenBytes / 16
                          ? from_tokens[stage * (F::kTokenBytes / 16) + at]
                          : from_weights[stage * (F::kWeightBytes / 16) + at - F::kTokenBytes / 16];
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(base + 16 * i), "r"(v.x),
                   "r"(v.y), "r"(v.z), "r"(v.w));
    }
    fence_proxy_async();
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < F::kStages; ++s) {
      mbarrier_init(full + 8 * s, GATHER ? 128 + 1 : 1);  // every gathering thread, thread 0
      mbarrier_init(empty + 8 * s, 8);                    // each consumer warp
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    warpgroup_registers_dec<56>();
    if (FIXED || (BY == kByBulk && threadIdx.x != 0) ||
        (ROWS && threadIdx.x >= 64 && threadIdx.x != 0)) {
      return;
    }
    if (ROWS && threadIdx.x > 0 && threadIdx.x < 32) return;
    const int tid = threadIdx.x, chunk = tid % 8;
    const char* mine = F::expert_rows(tokens, reuse);
    // kByRows: lane l of warp 1 copies rows l + 32 j.
    const char* rows[N / 16];
#pragma unroll
    for (int j = 0; j < N / 16; ++j) {
      const unsigned r = ROWS ? unsigned(tid - 32 + 32 * j) : unsigned(tid / 8 + 16 * j);
      rows[j] = F::gathered_row(mine, r, reuse) + (ROWS ? 0 : chunk * 16);
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int stage = kt % F::kStages;
      if (kt >= F::kStages) mbarrier_wait(empty + 8 * stage, ((kt / F::kStages) & 1) ^ 1);
      const unsigned dst = base + stage * F::kStageBytes;
      const int w = kt / reuse;
      if (tid == 0) {
        mbarrier_arrive_expect_tx(full + 8 * stage, GATHER ? F::kWeightBytes : F::kStageBytes);
        if (BY == kByBulk) {
          bulk_load(dst, F::bulk_tile(mine, kt, reuse), F::kTokenBytes, full + 8 * stage);
        }
        const char* weights = stream + (blockIdx.x + size_t(w) * gridDim.x) * F::kWeightBytes;
        for (int half = 0; half < 2; ++half) {
          bulk_load(dst + F::kTokenBytes + half * (F::kWeightBytes / 2),
                    weights + half * (F::kWeightBytes / 2), F::kWeightBytes / 2, full + 8 * stage);
        }
      }
      if constexpr (GATHER) {
        F::template gather<128>(dst, rows, kt, reuse, tid);
        mbarrier_arrive_on_cp_async(full + 8 * stage);
      }
      if (ROWS && tid >= 32) {
        const size_t at = F::gathered_offset(kt, reuse);
#pragma unroll
        for (int j = 0; j < (N + 31) / 32; ++j) {
          const int r = tid - 32 + 32 * j;
          if (r < N) bulk_load(dst + r * 128, rows[j] + at, 128, full + 8 * stage);
        }
      }
    }
    if constexpr (GATHER) cp_async_wait<0>();
    return;
  }
  warpgroup_registers_inc<224>();
  const int group = threadIdx.x / 128 - 1, lane = threadIdx.x % 32;
  float acc[2][N / 2] = {};
  int release = -1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int stage = FIXED ? kt & 1 : kt % F::kStages;
    if (!FIXED) mbarrier_wait(full + 8 * stage, (kt / F::kStages) & 1);
    if (GATHER) fence_proxy_async();  // cp.async's generic-proxy writes, before wgmma reads them
    const unsigned tokens_at = base + stage * F::kStageBytes;
    const unsigned weights_at = tokens_at + F::kTokenBytes + group * 2 * 64 * 128;
    mma_k_tile<D, N>(acc, weights_at, tokens_at);
    if (!FIXED && release >= 0 && lane == 0) mbarrier_arrive(empty + 8 * release);
    release = stage;
  }
  drain_to_sink<N>(acc, sink);
}

// The fed mimic with split rings (docs/PERF.md 65e): TS stages of token rows and WS of weight rows,
// each with its own barriers, so that the token rows can be asked for further ahead than the
// weights. Warp 0's thread 0 loads the weights (two 16 KiB bulk copies a K tile); warps 1-3 load
// the token rows, by one bulk copy (thread 32) or gathered by cp.async from their 96 threads (12
// row groups of 8 16-byte chunks). The consumers wait for both stages of a K tile and release both
// a batch later.
template <int N, int TS, int WS>
struct Split {
  static constexpr int kTokenBytes = N * 128;
  static constexpr int kWeightBytes = 256 * 128;
  static constexpr int kSmemBytes = TS * kTokenBytes + WS * kWeightBytes + 2 * 8 * (TS + WS) + 1024;
  static_assert(kTokenBytes % 1024 == 0 && N % 12 == 0, "whole swizzle atoms, 12 row groups");
  static_assert(kSmemBytes <= 227 * 1024, "the rings fit an SM");
};

template <class D, int N, bool GATHER, int TS, int WS>
__global__ void __launch_bounds__(kThreads, 1)
    fed_split(const char* stream, const char* tokens, int reuse, int k_tiles, float* sink) {
  using F = Fed<N>;
  using S = Split<N, TS, WS>;
  extern __shared__ char smem_raw[];
  const unsigned base = (smem_address(smem_raw) + 1023) & ~1023u;
  const unsigned weights_base = base + TS * S::kTokenBytes;
  const unsigned tfull = weights_base + WS * S::kWeightBytes, tempty = tfull + 8 * TS;
  const unsigned wfull = tempty + 8 * TS, wempty = wfull + 8 * WS;
  if (threadIdx.x == 0) {
    for (int s = 0; s < TS; ++s) {
      mbarrier_init(tfull + 8 * s, GATHER ? 96 : 1);
      mbarrier_init(tempty + 8 * s, 8);
    }
    for (int s = 0; s < WS; ++s) {
      mbarrier_init(wfull + 8 * s, 1);
      mbarrier_init(wempty + 8 * s, 8);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    warpgroup_registers_dec<56>();
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int stage = kt % WS;
        if (kt >= WS) mbarrier_wait(wempty + 8 * stage, ((kt / WS) & 1) ^ 1);
        const unsigned dst = weights_base + stage * S::kWeightBytes;
        mbarrier_arrive_expect_tx(wfull + 8 * stage, S::kWeightBytes);
        const char* weights =
            stream + (blockIdx.x + size_t(kt / reuse) * gridDim.x) * S::kWeightBytes;
        for (int half = 0; half < 2; ++half) {
          bulk_load(dst + half * (S::kWeightBytes / 2), weights + half * (S::kWeightBytes / 2),
                    S::kWeightBytes / 2, wfull + 8 * stage);
        }
      }
      return;
    }
    if (threadIdx.x < 32 || (!GATHER && threadIdx.x != 32)) return;
    const int tid = threadIdx.x - 32, chunk = tid % 8;
    const char* mine = F::expert_rows(tokens, reuse);
    const char* rows[N / 12];
#pragma unroll
    for (int j = 0; j < N / 12; ++j) {
      rows[j] = F::gathered_row(mine, unsigned(tid / 8 + 12 * j), reuse) + chunk * 16;
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int stage = kt % TS;
      if (kt >= TS) mbarrier_wait(tempty + 8 * stage, ((kt / TS) & 1) ^ 1);
      const unsigned dst = base + stage * S::kTokenBytes;
      if constexpr (GATHER) {
        F::template gather<96>(dst, rows, kt, reuse, tid);
        mbarrier_arrive_on_cp_async(tfull + 8 * stage);
      } else {
        mbarrier_arrive_expect_tx(tfull + 8 * stage, S::kTokenBytes);
        bulk_load(dst, F::bulk_tile(mine, kt, reuse), S::kTokenBytes, tfull + 8 * stage);
      }
    }
    if constexpr (GATHER) cp_async_wait<0>();
    return;
  }
  warpgroup_registers_inc<224>();
  const int group = threadIdx.x / 128 - 1, lane = threadIdx.x % 32;
  float acc[2][N / 2] = {};
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int ts = kt % TS, ws = kt % WS;
    mbarrier_wait(tfull + 8 * ts, (kt / TS) & 1);
    mbarrier_wait(wfull + 8 * ws, (kt / WS) & 1);
    if (GATHER) fence_proxy_async();  // cp.async's generic-proxy writes, before wgmma reads them
    const unsigned tokens_at = base + ts * S::kTokenBytes;
    const unsigned weights_at = weights_base + ws * S::kWeightBytes + group * 2 * 64 * 128;
    mma_k_tile<D, N>(acc, weights_at, tokens_at);
    if (kt > 0 && lane == 0) {
      mbarrier_arrive(tempty + 8 * ((kt - 1) % TS));
      mbarrier_arrive(wempty + 8 * ((kt - 1) % WS));
    }
  }
  drain_to_sink<N>(acc, sink);
}

struct Row {
  const char* name;
  int h, i, e, s, k, t;
  int fed_n, reuse;  // the fed mimic's token rows a block and blocks a weight tile (0: none)
  // REFERENCE.md 5: FLOPs of the expert GEMMs; the fewest bytes (each expert hit under uniform
  // routing read once, the shared experts, x in and out).
  double flops() const { return 6.0 * t * (double(k) + s) * h * i; }
  double bytes(int elem) const {
    const double hit = e * (1 - std::pow(1 - double(k) / e, t));
    return (hit + s) * 3.0 * h * i * elem + 2.0 * t * h * elem;
  }
};

struct Ceilings {
  double gbps = 0, tflops = 0;  // the bench's, from the command line; 0: not given
};

struct Buffers {
  char* stream;
  size_t stream_bytes;
  uint4 *tokens, *weights;
  char* fed_tokens;
  size_t fed_token_bytes;
  float* sink;
};

using RingKernel = void (*)(const char*, const char*, int, int, float*);

// A ring mimic (fed or fed_split, `smem_bytes` of shared memory) of `row`: its FLOPs in K tiles of
// N token rows, each weight K tile serving row.reuse token blocks; seconds a launch, its FLOPs and
// the bytes it streams from HBM.
template <int N>
Run run_ring(RingKernel kernel, int smem_bytes, PowerMeter& meter, double seconds, int sms,
             const Buffers& buf, const Row& row, double& flops, double& bytes) {
  using F = Fed<N>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  const int k_tiles =
      int(std::lround(row.flops() / (double(sms) * F::kFlopsPerTile) / row.reuse)) * row.reuse;
  flops = double(k_tiles) * sms * F::kFlopsPerTile;
  bytes = double(k_tiles / row.reuse) * sms * F::kWeightBytes;
  if (bytes > double(buf.stream_bytes) || F::token_bytes(row.reuse) > buf.fed_token_bytes) {
    std::fprintf(stderr, "power_roofline: the ring mimic of %s T %d needs larger buffers\n",
                 row.name, row.t);
    std::exit(1);
  }
  return steady(meter, seconds, 1.0, [&] {
    kernel<<<sms, kThreads, smem_bytes>>>(buf.stream, buf.fed_tokens, row.reuse, k_tiles, buf.sink);
  });
}

template <class D, int N, int BY>
Run run_fed(PowerMeter& meter, double seconds, int sms, const Buffers& buf, const Row& row,
            double& flops, double& bytes) {
  return run_ring<N>(fed<D, N, false, BY>, Fed<N>::kSmemBytes, meter, seconds, sms, buf, row, flops,
                     bytes);
}

template <class D, int N, bool GATHER, int TS, int WS>
Run run_split(PowerMeter& meter, double seconds, int sms, const Buffers& buf, const Row& row,
              double& flops, double& bytes) {
  return run_ring<N>(fed_split<D, N, GATHER, TS, WS>, Split<N, TS, WS>::kSmemBytes, meter, seconds,
                     sms, buf, row, flops, bytes);
}

// The N-row tile's MMAs alone (fed's FIXED), `flops` of them: the run, and the FLOPs done.
template <class D, int N>
Run run_fixed(PowerMeter& meter, double seconds, int sms, const Buffers& buf, double flops,
              double& done) {
  using F = Fed<N>;
  auto kernel = fed<D, N, true, kByBulk>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, F::kSmemBytes));
  const int k_tiles = int(std::lround(flops / (double(sms) * F::kFlopsPerTile)));
  done = double(k_tiles) * sms * F::kFlopsPerTile;
  if (size_t(sms) * 2 * F::kTokenBytes > buf.fed_token_bytes) {
    std::fprintf(stderr, "power_roofline: the fixed N %d tile needs a larger token buffer\n", N);
    std::exit(1);
  }
  return steady(meter, seconds, 1.0, [&] {
    kernel<<<sms, kThreads, F::kSmemBytes>>>(buf.stream, buf.fed_tokens, 0, k_tiles, buf.sink);
  });
}

// One dtype's lines. fed_only: the two ceilings, then only the fed mimics of the rows whose weight
// tiles serve more than one token block, their token rows by each TokensBy; split: then in split
// rings too.
template <class D>
void run_dtype(const char* dtype, PowerMeter& meter, double idle_w, int sms, double seconds,
               const Buffers& buf, const std::vector<Row>& rows, Ceilings bench, bool fed_only,
               bool split) {
  constexpr bool kBf16 = std::is_same_v<D, BF16>;
  const float scale = 1.0f / std::sqrt(2048.0f);
  fill_normal<kBf16><<<4 * sms, 256>>>(reinterpret_cast<unsigned*>(buf.stream),
                                       (long long)(buf.stream_bytes / 4), scale, 0x1234u);
  const long long stage_words = (long long)sms * kMmaStages * kTokenBytes / 4;
  fill_normal<kBf16>
      <<<4 * sms, 256>>>(reinterpret_cast<unsigned*>(buf.tokens), stage_words, 1.0f, 0x777u);
  fill_normal<kBf16><<<4 * sms, 256>>>(reinterpret_cast<unsigned*>(buf.weights),
                                       (long long)sms * kMmaStages * kWeightBytes / 4, scale,
                                       0x4321u);
  fill_normal<kBf16><<<4 * sms, 256>>>(reinterpret_cast<unsigned*>(buf.fed_tokens),
                                       (long long)(buf.fed_token_bytes / 4), 1.0f, 0x999u);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  auto kernel = mimic<D>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const auto chunks_of = [&](double bytes) {
    return (long long)std::ceil(bytes / (double(sms) * kChunk));
  };
  const auto tiles_of = [&](double flops) {
    return int(std::lround(flops / (double(sms) * kFlopsPerTile)));
  };
  // One launch of `chunks` and `k_tiles` a block, back to back: seconds a launch and the board.
  const auto measure = [&](long long chunks, int k_tiles) {
    return steady(meter, seconds, 1.0, [&] {
      kernel<<<sms, kThreads, kSmemBytes>>>(buf.stream, chunks, buf.tokens, buf.weights, k_tiles,
                                            buf.sink);
    });
  };
  const auto board = [&](const Run& r) {
    std::printf("%5.0f W %5.0f MHz capped %4.2f", r.watts, r.mhz, r.capped);
  };
  // The mimic's own ceilings: the largest row's bytes alone, and its FLOPs alone.
  double most_bytes = 0, most_flops = 0;
  for (const Row& row : rows) {
    most_bytes = std::max(most_bytes, row.bytes(2));
    most_flops = std::max(most_flops, row.flops());
  }
  const long long bw_chunks = chunks_of(most_bytes);
  const int r_tiles = tiles_of(most_flops);
  const Run alone_b = measure(bw_chunks, 0);
  const double bw = double(bw_chunks) * sms * kChunk * alone_b.bytes_per_s;  // bytes a second
  std::printf("%s stream alone   %9.0f GB/s        ", dtype, bw / 1e9);
  board(alone_b);
  std::printf("  %6.1f pJ/B above idle\n", (alone_b.watts - idle_w) / bw * 1e12);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A multiply's line: `what` is "alone" or the tile's "N 144 ", `rate` FLOPs a second.
  const auto multiply_line = [&](const char* what, const Run& run, double rate) {
    std::printf("%s multiply %s %9.1f TFLOP/s      ", dtype, what, rate / 1e12);
    board(run);
    std::printf("  %6.3f pJ/FLOP above idle\n", (run.watts - idle_w) / rate * 1e12);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  };
  const Run alone_f = measure(0, r_tiles);
  const double r = double(r_tiles) * sms * kFlopsPerTile * alone_f.bytes_per_s;  // FLOPs a second
  multiply_line("alone", alone_f, r);
  // The swapped tile's MMAs alone at the row blocks' N (two 64-row slices a warpgroup).
  const auto fixed_line = [&](int n, const Run& run, double done) {
    char what[16];
    std::snprintf(what, sizeof(what), "N %3d ", n);
    multiply_line(what, run, done * run.bytes_per_s);
  };
  if (!fed_only) {
    double done = 0;
    Run run = run_fixed<D, 64>(meter, seconds, sms, buf, most_flops / 4, done);
    fixed_line(64, run, done);
    run = run_fixed<D, 128>(meter, seconds, sms, buf, most_flops / 4, done);
    fixed_line(128, run, done);
    run = run_fixed<D, 144>(meter, seconds, sms, buf, most_flops / 4, done);
    fixed_line(144, run, done);
    run = run_fixed<D, 160>(meter, seconds, sms, buf, most_flops / 4, done);
    fixed_line(160, run, done);
  }
  // The rest of a row's line: FLOPs a byte, ms a launch, the board, and the time over the floors.
  const auto report = [&](double f, double b, const Run& run) {
    const double s = 1.0 / run.bytes_per_s;
    std::printf("%6.1f FLOP/B  %8.4f ms  ", f / b, s * 1e3);
    board(run);
    std::printf("  x own floor %5.3f", s / std::max(f / r, b / bw));
    if (bench.gbps > 0 && bench.tflops > 0) {
      std::printf("  x bench floor %5.3f",
                  s / std::max(f / (bench.tflops * 1e12), b / (bench.gbps * 1e9)));
    }
    std::printf("\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  };
  for (const Row& row : rows) {
    if (fed_only) break;
    const long long chunks = chunks_of(row.bytes(2));
    const int k_tiles = tiles_of(row.flops());
    const double b = double(chunks) * sms * kChunk, f = double(k_tiles) * sms * kFlopsPerTile;
    std::printf("%s %-18s T %5d  ", dtype, row.name, row.t);
    report(f, b, measure(chunks, k_tiles));
  }
  for (int by = kByBulk; by <= (fed_only ? kByRows : kByGather); ++by) {
    for (const Row& row : rows) {
      if (row.fed_n == 0 || (fed_only && row.reuse < 2)) continue;
      if (row.fed_n != 144) {
        std::fprintf(stderr, "power_roofline: no fed mimic of %d token rows\n", row.fed_n);
        std::exit(1);
      }
      double f = 0, b = 0;
      const Run run =
          by == kByGather ? run_fed<D, 144, kByGather>(meter, seconds, sms, buf, row, f, b)
          : by == kByRows ? run_fed<D, 144, kByRows>(meter, seconds, sms, buf, row, f, b)
                          : run_fed<D, 144, kByBulk>(meter, seconds, sms, buf, row, f, b);
      static const char* const kBy[] = {"       ", " gather", " rows  "};
      std::printf("%s fed%s N %3d reuse %d %-15s T %5d  ", dtype, kBy[by], row.fed_n, row.reuse,
                  row.name, row.t);
      report(f, b, run);
    }
  }
  if (!split) return;
  // Split rings: token stages / weight stages.
  for (const Row& row : rows) {
    if (row.fed_n != 144 || row.reuse < 2) continue;
    const auto line = [&](const char* name, Run (*run)(PowerMeter&, double, int, const Buffers&,
                                                       const Row&, double&, double&)) {
      double f = 0, b = 0;
      const Run r = run(meter, seconds, sms, buf, row, f, b);
      std::printf("%s split %-13s reuse %d %-15s T %5d  ", dtype, name, row.reuse, row.name, row.t);
      report(f, b, r);
    };
    line("bulk 4/3", run_split<D, 144, false, 4, 3>);
    line("gather 4/3", run_split<D, 144, true, 4, 3>);
    line("gather 6/3", run_split<D, 144, true, 6, 3>);
    line("gather 8/2", run_split<D, 144, true, 8, 2>);
    line("bulk 6/3", run_split<D, 144, false, 6, 3>);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  const std::string mode = argc > 2 ? argv[2] : "all";
  const bool fed_only = mode == "fed" || mode == "split";
  if (!fed_only && mode != "all") {
    std::fprintf(stderr, "power_roofline: mode %s is none of all, fed, split\n", mode.c_str());
    return 1;
  }
  Ceilings bf16, fp16;
  if (argc > 5) {
    bf16 = {std::atof(argv[3]), std::atof(argv[4])};
    fp16 = {std::atof(argv[3]), std::atof(argv[5])};
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  PowerMeter meter(device_bus_id(0));
  if (!meter_ready(meter, "power_roofline")) return 1;
  const int sms = prop.multiProcessorCount;
  // The fed mimic's N and reuse: the swapped tiles' row blocks at the bench's routing (even
  // blocks of up to 160 or 144 rows, rounded up to 8: ~143 rows an expert at DeepSeek-V3 4096,
  // ~574 at 16384 in four blocks, gpumode 2048's ~256-row routed experts in two blocks; N a
  // multiple of 16 for the gather's 128 threads, as the real tile's).
  const std::vector<Row> rows = {{"DeepSeek-V3", 7168, 2048, 256, 1, 8, 512, 0, 0},
                                 {"DeepSeek-V3", 7168, 2048, 256, 1, 8, 4096, 144, 1},
                                 {"DeepSeek-V3", 7168, 2048, 256, 1, 8, 16384, 144, 4},
                                 {"gpumode bench 1", 7168, 2048, 32, 1, 4, 2048, 144, 2},
                                 {"gpumode bench 2", 7168, 2048, 32, 1, 4, 8192, 0, 0}};
  double most_bytes = 0;
  for (const Row& row : rows) most_bytes = std::max(most_bytes, row.bytes(2));
  Buffers buf;
  const size_t per_pass = size_t(sms) * kChunk;
  buf.stream_bytes = (size_t(std::ceil(most_bytes / per_pass)) + 1) * per_pass;
  CHECK(cudaMalloc(&buf.stream, buf.stream_bytes));
  CHECK(cudaMalloc(&buf.tokens, size_t(sms) * kMmaStages * kTokenBytes));
  CHECK(cudaMalloc(&buf.weights, size_t(sms) * kMmaStages * kWeightBytes));
  CHECK(cudaMalloc(&buf.sink, kThreads * sizeof(float)));
  buf.fed_token_bytes = Fed<144>::token_bytes(4);
  CHECK(cudaMalloc(&buf.fed_tokens, buf.fed_token_bytes));
  std::printf(
      "%s, %d SMs, power limit %.0f W; one block an SM: a linear bulk-copy stream of weight-like "
      "data (%.1f GB buffer) beside wgmma.m64n256k16 from shared memory; ~%.1f s a pattern, the "
      "second half's draw\n",
      prop.name, sms, meter.limit_w(), buf.stream_bytes / 1e9, seconds);
  const PowerMeter::Reading idle =
      meter.idle(std::chrono::milliseconds(500), std::chrono::milliseconds(1000));
  std::printf("idle %.0f W %.0f MHz\n", idle.watts, idle.sm_mhz);
  run_dtype<BF16>("bf16", meter, idle.watts, sms, seconds, buf, rows, bf16, fed_only,
                  mode == "split");
  if (!fed_only) {
    run_dtype<F16>("fp16", meter, idle.watts, sms, seconds, buf, rows, fp16, false, false);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaFree(buf.stream));
  CHECK(cudaFree(buf.tokens));
  CHECK(cudaFree(buf.weights));
  CHECK(cudaFree(buf.sink));
  CHECK(cudaFree(buf.fed_tokens));
  return 0;
}
