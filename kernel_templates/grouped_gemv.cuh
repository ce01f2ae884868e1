// Grouped GEMV for decode: row blocks of 8 or 16 rows (tokens of one expert), where the expert
// GEMMs are a stream of weight bytes and staging them through shared memory only adds latency.
//
// Operands swapped on mma.sync m16n8k16: the weights are the A operand (16 rows), the block's
// token rows the B operand (8 columns an n tile), both loaded from global memory straight into
// registers. Per 32-element K step a lane loads 16 contiguous bytes (8 K elements) of each of its
// rows; a dot product does not care in which order its K elements come, so the step's two k16
// MMAs take the lane's elements 0-3 and 4-7 as the fragment's K slots (2t, 2t+1, 2t+8, 2t+9,
// t = lane % 4), the same for A and B, and every load is a full 16-byte vector.
//
// A block owns 16 weight rows and one row block: kGateUp: A rows 0-7 are the gate rows and rows
// 8-15 the up rows of 8 output columns, so a lane holds g and u of one column and writes
// h = SiLU(g) * u; kDown: 16 down rows (output columns of y), scaled by the pair's routing weight.
// The WARPS warps of a block split K (warp w takes K steps w, w + WARPS, ...) and add their
// partial sums in shared memory. Weights are streamed (no L1 allocation); token rows go through L1,
// since every block of the expert reads them.
// Grid: (row blocks, column blocks of 8 (kGateUp) or 16 (kDown)); row blocks past num_blocks exit.
#pragma once

#include "common.cuh"
#include "tile_loader.cuh"

namespace rt_moe {

template <typename D, int H, int I, int E, int S, int K, int MODE, int ROWS, int WARPS, int STAGES,
          typename Y = float>
struct GroupedGemv {
  static constexpr int kThreads = 32 * WARPS;
  static constexpr int kSmemBytes = 0;  // the partial sums are static shared memory
  static constexpr int kSlots = K + S;
  static constexpr int kTiles = ROWS / 8;                 // n tiles of 8 token rows
  static constexpr int kReduce = MODE == kDown ? I : H;   // the GEMM's K
  static constexpr int kSteps = (kReduce + 31) / 32;      // K steps of 32 elements
  static constexpr int kCols = MODE == kGateUp ? 8 : 16;  // output columns per block
  // 16-byte weight loads a round per lane: 2 rows x kUnroll steps (up to STAGES rounds in flight).
  static constexpr int kUnroll = (kTiles == 1 ? 8 : 4) / STAGES;

  static_assert(MODE == kGateUp || MODE == kDown, "the expert GEMMs only");
  static_assert(ROWS == 8 || ROWS == 16, "one or two n tiles of 8 token rows");
  static_assert(kReduce % 8 == 0, "K must be a multiple of 8 for 16-byte loads");
  static_assert(WARPS >= 1 && WARPS <= 8, "1 to 8 warps split K");
  static_assert(STAGES == 1 || STAGES == 2, "one round of loads in flight, or two");

  // One round's operands: kUnroll K steps of this lane's two A rows and kTiles B rows.
  struct Round {
    Vec8 a[kUnroll][2], b[kUnroll][kTiles];

    // K steps first, first + WARPS, ...; steps past K load zeros (no memory access).
    __device__ __forceinline__ void load(const unsigned short* const (&row_a)[2],
                                         const bool (&ok_a)[2],
                                         const unsigned short* const (&row_b)[kTiles],
                                         const bool (&ok_b)[kTiles], int first, int t) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int k = (first + u * WARPS) * 32 + 8 * t;
        const bool in_k = k < kReduce;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          a[u][i] = Vec8{};
          if (in_k && ok_a[i]) a[u][i] = load_streaming_16(row_a[i] + k);
        }
#pragma unroll
        for (int n = 0; n < kTiles; ++n) {
          b[u][n] = Vec8{};
          if (in_k && ok_b[n]) b[u][n] = *reinterpret_cast<const Vec8*>(row_b[n] + k);
        }
      }
    }

    // Two k16 MMAs a step: the lane's elements 0-3, then 4-7 (see the top of the file).
    __device__ __forceinline__ void mma(float (&acc)[kTiles][4]) const {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const unsigned frag_a[4] = {a[u][0].w[2 * half], a[u][1].w[2 * half],
                                      a[u][0].w[2 * half + 1], a[u][1].w[2 * half + 1]};
#pragma unroll
          for (int n = 0; n < kTiles; ++n) {
            const unsigned frag_b[2] = {b[u][n].w[2 * half], b[u][n].w[2 * half + 1]};
            DTypeOps<D>::mma(acc[n], frag_a, frag_b);
          }
        }
      }
    }
  };

  static __device__ void run(const GemmParams& p) {
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    grid_dependency_wait();
    __shared__ float partial[WARPS][kTiles * 4][32];
    const int block_m = blockIdx.x;
    if (block_m >= *p.num_blocks) return;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int m0 = block_m * ROWS;
    const ExpertWeights w = p.experts[p.block_expert[block_m]];
    const unsigned short* weights_gate = static_cast<const unsigned short*>(w.gate);
    const unsigned short* weights_up = static_cast<const unsigned short*>(w.up);
    const unsigned short* weights_down = static_cast<const unsigned short*>(w.down);

    // This lane's A rows (g and g + 8 of the block's 16) and B rows (token row 8 n + g).
    const unsigned short* row_a[2];
    bool ok_a[2];
    if (MODE == kGateUp) {
      const int col = blockIdx.y * kCols + g;
      ok_a[0] = ok_a[1] = col < I;
      row_a[0] = weights_gate + (long long)col * H;
      row_a[1] = weights_up + (long long)col * H;
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int col = blockIdx.y * kCols + g + 8 * i;
        ok_a[i] = col < H;
        row_a[i] = weights_down + (long long)col * w.down_ld;
      }
    }
    const unsigned short* row_b[kTiles];
    bool ok_b[kTiles];
    const unsigned short* a = static_cast<const unsigned short*>(p.a);
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
      const int row = m0 + 8 * n + g;
      const int pair = p.sorted_rows[row];
      ok_b[n] = pair >= 0;
      row_b[n] = MODE == kGateUp ? a + (long long)(pair / kSlots) * H : a + (long long)row * I;
    }

    float acc[kTiles][4];
#pragma unroll
    for (int n = 0; n < kTiles; ++n)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[n][v] = 0.f;

    // Rounds of kUnroll K steps: all loads of a round are issued before its MMAs. STAGES = 2
    // issues the next round's loads before this round's MMAs (two register buffers), so a lane
    // never drains to zero loads in flight.
    constexpr int kStride = WARPS * kUnroll;  // K steps from one round of a warp to its next
    Round r0, r1;
    r0.load(row_a, ok_a, row_b, ok_b, warp, t);
    for (int s0 = warp; s0 < kSteps; s0 += STAGES * kStride) {
      if (STAGES == 1) {
        r0.mma(acc);
        if (s0 + kStride < kSteps) r0.load(row_a, ok_a, row_b, ok_b, s0 + kStride, t);
      } else {
        r1.load(row_a, ok_a, row_b, ok_b, s0 + kStride, t);
        r0.mma(acc);
        r0.load(row_a, ok_a, row_b, ok_b, s0 + 2 * kStride, t);
        r1.mma(acc);
      }
    }

    // The warps' partial sums meet in shared memory; warp 0 adds them and stores.
#pragma unroll
    for (int n = 0; n < kTiles; ++n)
#pragma unroll
      for (int v = 0; v < 4; ++v) partial[warp][4 * n + v][lane] = acc[n][v];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int n = 0; n < kTiles; ++n)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
#pragma unroll
        for (int other = 1; other < WARPS; ++other) acc[n][v] += partial[other][4 * n + v][lane];
      }
    store(p, acc, m0, lane);
  }

  // acc[n][v]: A row g (+ 8 for v >= 2), token row 8 n + 2 t + (v & 1) of the block.
  static __device__ __forceinline__ void store(const GemmParams& p, const float (&acc)[kTiles][4],
                                               int m0, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = m0 + 8 * n + 2 * t + j;
        const int pair = p.sorted_rows[row];
        if (pair < 0) continue;
        if (MODE == kGateUp) {
          const int col = blockIdx.y * kCols + g;
          if (col < I) {
            unsigned short* h = static_cast<unsigned short*>(p.out);
            h[(long long)row * I + col] =
                DTypeOps<D>::from_float(silu_mul(acc[n][j], acc[n][2 + j]));
          }
        } else {
          const float weight = pair_weight<K, kSlots, Y>(p, pair);
          typename YOps<Y>::Elem* y = static_cast<typename YOps<Y>::Elem*>(p.out);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int col = blockIdx.y * kCols + g + 8 * i;
            if (col < H) {
              __stcs(&y[(long long)pair * H + col], YOps<Y>::pack1(acc[n][2 * i + j] * weight));
            }
          }
        }
      }
    }
  }
};

}  // namespace rt_moe
