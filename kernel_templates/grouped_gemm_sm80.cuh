// Grouped GEMM over the experts' row blocks, mma.sync (sm_80 and later), the portable path.
//
// Tiling: a block computes BLOCK_M rows x BLOCK_N columns of one expert, K in steps of BLOCK_K.
// WARPS_M x WARPS_N warps each own a (BLOCK_M / WARPS_M) x (BLOCK_N / WARPS_N) tile of
// m16n8k16 fragments. Pipeline: STAGES-deep cp.async ring of A and B tiles in shared memory, fed
// by TileLoader (tile_loader.cuh: swizzled 128-byte rows, zero-filled tails). BLOCK_K is 64 or a
// multiple of it: a stage then holds BLOCK_K / 64 of TileLoader's 64-wide A and B tiles, so that
// each weight row's BLOCK_K * 2 bytes are asked for together (the fused decode tile's wide
// stripes: 256 bytes of each row stream ~4% faster than 128 from HBM, docs/PERF.md 58c), in the
// same order of K steps as 64-wide stages (the same sums, bit for bit, without K parts). A K tail
// past the last 64-wide tile is zero-filled like any other.
//
// Modes:
//   kGateUp: A = x rows gathered through sorted_rows (pair / (k + S) is the token; no permuted copy
//     of x), B = the expert's gate and up rows interleaved per warp: of a warp's BLOCK_N / WARPS_N
//     B rows, the first half are gate rows and the second half the up rows of the same output
//     columns, so the epilogue has g and u of one column in one thread and writes
//     h = SiLU(g) * u, BLOCK_N / 2 columns per block.
//   kDown: A = h rows (sorted order), B = the expert's down rows; the epilogue scales by the pair's
//     routing weight (1 for shared chunks) and writes y at the pair's row (t * (k + S) + slot),
//     in fp32 or as scaled fp16 (Y: YOps in common.cuh). Not bf16: a bf16 y costs up to half an
//     ulp of the largest slot in the combine's sum, more than the 1e-2 accuracy rule allows for
//     outputs near cancellation.
//   kRouter: the gating GEMM as a plain dense GEMM (the tensor-core path from 32 tokens): A = x
//     rows 0..T-1, B = the router's E rows, the epilogue writes fp32 logits, rounded to the dtype
//     when p.round_logits. With gridDim.z > 1, block z takes part z of the K tiles and writes its
//     fp32 partial sums to array z of the logits (p.round_logits is then 0; the top-k kernel adds
//     the parts and rounds).
// Row blocks past num_blocks (the grid is sized for the bucket's worst case) exit at once.
#pragma once

#include "common.cuh"
#include "tile_loader.cuh"

namespace rt_moe {

template <typename D, int H, int I, int E, int S, int K, int MODE, int BLOCK_M, int BLOCK_N,
          int BLOCK_K, int WARPS_M, int WARPS_N, int STAGES, typename Y = float>
struct GroupedGemmSm80 {
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int kSlots = K + S;
  static constexpr int kWarpM = BLOCK_M / WARPS_M;
  static constexpr int kWarpN = BLOCK_N / WARPS_N;
  static constexpr int kFragsM = kWarpM / 16;
  static constexpr int kFragsN = kWarpN / 8;
  using Loader = TileLoader<H, I, E, kSlots, MODE, BLOCK_M, BLOCK_N, kThreads, kWarpN>;
  static constexpr int kTileABytes = Loader::kTileABytes;
  // 64-wide tiles a stage (the loader's), each its A tile then its B tile.
  static constexpr int kSubTiles = BLOCK_K / Loader::kBlockK;
  static constexpr int kSubBytes = Loader::kTileABytes + Loader::kTileBBytes;
  static constexpr int kStageBytes = kSubTiles * kSubBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes;
  // K steps of BLOCK_K (the last one's tail zero-filled).
  static constexpr int kSteps = (Loader::kTiles + kSubTiles - 1) / kSubTiles;

  static_assert(BLOCK_K % Loader::kBlockK == 0 && BLOCK_K >= Loader::kBlockK,
                "the swizzle assumes 128-byte rows (64 elements): BLOCK_K a multiple of 64");
  static_assert(kWarpM % 16 == 0, "BLOCK_M / WARPS_M must be a multiple of the mma's 16 rows");
  static_assert(kWarpN % 16 == 0, "BLOCK_N / WARPS_N must be a multiple of 16 (ldmatrix.x4 of B)");
  static_assert(MODE != kGateUp || kFragsN % 2 == 0, "gate and up halves need whole fragments");
  static_assert(STAGES >= 2, "the pipeline needs at least two stages");

  static __device__ __forceinline__ unsigned swizzle(int row, int chunk) {
    return Loader::swizzle(row, chunk);
  }

  // Lines [0, shared_prefetch / 128) of every shared expert gate and up row (S I rows of each,
  // contiguous from chunk 0's), first lines first, spread over all the grid's threads. Read only
  // the experts table, written at prepare(), and weights: no other kernel of the forward writes
  // them, so this may run before the dependency wait, while the routing kernels run.
  static __device__ void prefetch_shared(const GemmParams& p) {
    const int lines = p.shared_prefetch / 128;
    const long long rows = 2LL * S * I, total = rows * lines;
    const ExpertWeights w = p.experts[E];
    const long long threads = (long long)gridDim.x * gridDim.y * kThreads;
    for (long long i = ((long long)blockIdx.y * gridDim.x + blockIdx.x) * kThreads + threadIdx.x;
         i < total; i += threads) {
      const long long row = i % rows, line = i / rows;
      const char* base = static_cast<const char*>(row < (long long)S * I ? w.gate : w.up);
      prefetch_l2(base + (row % ((long long)S * I)) * H * 2 + line * 128);
    }
  }

  static __device__ void run(const GemmParams& p) {
    if (MODE == kRouter) {
      // The forward's first kernel: it waits before it triggers, as RouterLogits::run says.
      grid_dependency_wait();
      grid_dependency_trigger();
    } else {
      grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
      if (MODE == kGateUp && S > 0 && p.shared_prefetch > 0) prefetch_shared(p);
      grid_dependency_wait();
    }
    extern __shared__ __align__(128) unsigned char smem[];
    tile(p, blockIdx.x, blockIdx.y, smem);
  }

  // fp32 accumulators a thread holds: a tile's partial sums are kThreads x kAccFloats floats.
  static constexpr int kAccFloats = kFragsM * kFragsN * 4;

  // The block's work on (row block block_m, column block n_block), with `smem` (kSmemBytes) as
  // its ring; also the work items of the fused decode kernel (grouped_gemm_decode.cuh). Every
  // thread of the block calls it. Returns whether the block wrote the tile's output (the same in
  // every thread). The fused kernel only, K part `part` of PARTS (consecutive K tiles, the last
  // part taking the remainder):
  //   - down, PARTS = 2: its weighted partial sums added to y by fp32 atomics onto zeros (y
  //     zeroed beforehand), so the two halves give the same sum in either order;
  //   - gate/up, PARTS = 2 to kMaxSharedParts: the block stores its fp32 partial sums at
  //     partials + part kThreads kAccFloats (each thread its own fragments, those of live
  //     pairs' rows only) and counts itself in *part_count; the block that counts last adds the
  //     PARTS partials in part order (the same sum whichever block is last) and writes h, the
  //     others return false. *part_count is left at PARTS (the combine zeroes the counters).
  // ROLLED: the prologue's STAGES - 1 stage loads stay a loop instead of being unrolled, so that a
  // block whose code no SM has run since L2 was last flushed (the fused decode kernel's first
  // wave) fetches less of it before its first weight load (docs/PERF.md 56).
  template <int PARTS = 1, bool ROLLED = false>
  static __device__ bool tile(const GemmParams& p, int block_m, int n_block, unsigned char* smem,
                              int part = 0, float* partials = nullptr, int* part_count = nullptr) {
    static_assert(PARTS == 1 || (PARTS == 2 && MODE == kDown) ||
                      (PARTS <= kMaxSharedParts && MODE == kGateUp && kFragsM == 1),
                  "down's K halves, or gate/up's K parts of one 16-row fragment a thread");
    static_assert(PARTS == 1 || MODE != kDown || YOps<Y>::kBytes == 4,
                  "K halves add into fp32 y (atomics)");
    const int m0 = block_m * BLOCK_M;
    if (MODE == kRouter ? m0 >= p.tokens : block_m >= *p.num_blocks) return part == PARTS - 1;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
    bool once;
    const ExpertWeights w = block_weights<E, H, MODE>(p, block_m, BLOCK_M, once);
    const Loader loader(p, w, m0, n_block, tid, once);
    const unsigned smem_base = smem_address(smem);
    auto load_stage = [&](int stage, int k_step) {
#pragma unroll
      for (int sub = 0; sub < kSubTiles; ++sub) {
        const unsigned a_smem = smem_base + stage * kStageBytes + sub * kSubBytes;
        loader.load(a_smem, a_smem + kTileABytes, k_step * kSubTiles + sub);
      }
    };

    float acc[kFragsM][kFragsN][4];
#pragma unroll
    for (int mi = 0; mi < kFragsM; ++mi)
#pragma unroll
      for (int ni = 0; ni < kFragsN; ++ni)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[mi][ni][v] = 0.f;

    // K steps [k0, k0 + tiles): all of them, or the router's part blockIdx.z of gridDim.z, or
    // part `part` of PARTS.
    const int k0 = MODE == kRouter ? int(blockIdx.z * kSteps / gridDim.z) : part * kSteps / PARTS;
    const int tiles = MODE == kRouter ? int((blockIdx.z + 1) * kSteps / gridDim.z) - k0
                                      : (part + 1) * kSteps / PARTS - k0;
    // Gate/up's K parts: whether this thread's fragment rows (lane / 4 and lane / 4 + 8) hold
    // live pairs, loaded now so that the loads' latency passes under the main loop.
    bool live_rows = true;
    if constexpr (MODE == kGateUp && PARTS > 1) {
      const auto live = [&](int row) {
        const int pair = p.sorted_rows[m0 + row];
        return pair >= 0 && pair / kSlots < p.tokens;
      };
      live_rows = live(lane / 4) || live(lane / 4 + 8);
    }
    if constexpr (ROLLED) {
#pragma unroll 1
      for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) load_stage(s, k0 + s);
        cp_async_commit();
      }
    } else {
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) load_stage(s, k0 + s);
        cp_async_commit();
      }
    }
    for (int kt = 0; kt < tiles; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile kt landed for all threads; stage (kt - 1) % STAGES is free
      if (kt + STAGES - 1 < tiles) load_stage((kt + STAGES - 1) % STAGES, k0 + kt + STAGES - 1);
      cp_async_commit();

#pragma unroll
      for (int sub = 0; sub < kSubTiles; ++sub) {
        const unsigned a_smem = smem_base + (kt % STAGES) * kStageBytes + sub * kSubBytes;
        const unsigned b_smem = a_smem + kTileABytes;
#pragma unroll
        for (int ks = 0; ks < Loader::kBlockK / 16; ++ks) {
          unsigned a_frag[kFragsM][4];
          unsigned b_frag[kFragsN][2];
#pragma unroll
          for (int mi = 0; mi < kFragsM; ++mi) {
            int row = warp_m * kWarpM + mi * 16 + lane % 16;
            ldmatrix_x4(a_frag[mi], a_smem + swizzle(row, ks * 2 + lane / 16));
          }
#pragma unroll
          for (int nj = 0; nj < kFragsN / 2; ++nj) {
            int row = warp_n * kWarpN + nj * 16 + (lane / 16) * 8 + lane % 8;
            unsigned r[4];
            ldmatrix_x4(r, b_smem + swizzle(row, ks * 2 + (lane / 8) % 2));
            b_frag[2 * nj][0] = r[0];
            b_frag[2 * nj][1] = r[1];
            b_frag[2 * nj + 1][0] = r[2];
            b_frag[2 * nj + 1][1] = r[3];
          }
#pragma unroll
          for (int mi = 0; mi < kFragsM; ++mi)
#pragma unroll
            for (int ni = 0; ni < kFragsN; ++ni)
              DTypeOps<D>::mma(acc[mi][ni], a_frag[mi], b_frag[ni]);
        }
      }
    }
    cp_async_wait<0>();
    if constexpr (MODE == kGateUp && PARTS > 1) {
      if (!parts_meet<PARTS>(acc, smem, part, partials, part_count, live_rows)) return false;
    }

    // Epilogue. Fragment element v of acc[mi][ni]: row lane / 4 (+ 8 for v >= 2), column
    // (lane % 4) * 2 + (v & 1).
    unsigned* out = reinterpret_cast<unsigned*>(p.out);
    typename YOps<Y>::Pair* y = reinterpret_cast<typename YOps<Y>::Pair*>(p.out);
#pragma unroll
    for (int mi = 0; mi < kFragsM; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = m0 + warp_m * kWarpM + mi * 16 + lane / 4 + half * 8;
        if (MODE == kGateUp) {
#pragma unroll
          for (int ni = 0; ni < kFragsN / 2; ++ni) {
            const int col =
                n_block * (BLOCK_N / 2) + warp_n * (kWarpN / 2) + ni * 8 + (lane % 4) * 2;
            if (col < I) {
              float g0 = acc[mi][ni][half * 2], g1 = acc[mi][ni][half * 2 + 1];
              float u0 = acc[mi][ni + kFragsN / 2][half * 2],
                    u1 = acc[mi][ni + kFragsN / 2][half * 2 + 1];
              float h0 = silu_mul(g0, u0);
              float h1 = silu_mul(g1, u1);
              out[((long long)row * I + col) / 2] = DTypeOps<D>::pack2(h0, h1);
            }
          }
        } else if (MODE == kRouter) {
          float* logits = reinterpret_cast<float*>(p.out) + (long long)blockIdx.z * p.tokens * E;
#pragma unroll
          for (int ni = 0; ni < kFragsN; ++ni) {
            const int col = n_block * BLOCK_N + warp_n * kWarpN + ni * 8 + (lane % 4) * 2;
            if (row < p.tokens) {
              const float l0 = acc[mi][ni][half * 2], l1 = acc[mi][ni][half * 2 + 1];
              if (col < E) logits[(long long)row * E + col] = p.round_logits ? round_to<D>(l0) : l0;
              if (col + 1 < E) {
                logits[(long long)row * E + col + 1] = p.round_logits ? round_to<D>(l1) : l1;
              }
            }
          }
        } else {
          const int pair = p.sorted_rows[row];
          if (pair >= 0 && pair / kSlots < p.tokens) {
            const float weight = pair_weight<K, kSlots, Y>(p, pair);
#pragma unroll
            for (int ni = 0; ni < kFragsN; ++ni) {
              const int col = n_block * BLOCK_N + warp_n * kWarpN + ni * 8 + (lane % 4) * 2;
              if (col < H) {
                const float y0 = acc[mi][ni][half * 2] * weight;
                const float y1 = acc[mi][ni][half * 2 + 1] * weight;
                if (PARTS == 1) {
                  y[((long long)pair * H + col) / 2] = YOps<Y>::pack(y0, y1);
                } else {
                  float* at = reinterpret_cast<float*>(p.out) + (long long)pair * H + col;
                  atomicAdd(at, y0);
                  atomicAdd(at + 1, y1);
                }
              }
            }
          }
        }
      }
    }
    return true;
  }

 private:
  // Gate/up's K parts (tile): stores this block's partial sums and counts the block; in the block
  // that counts last, acc becomes the sum of all PARTS partials in part order and it returns true.
  // A thread whose rows hold no live pair neither stores nor reads: its h rows feed only down
  // rows that are not stored.
  template <int PARTS>
  static __device__ __forceinline__ bool parts_meet(float (&acc)[kFragsM][kFragsN][4],
                                                    unsigned char* smem, int part, float* partials,
                                                    int* part_count, bool live_rows) {
    const int tid = threadIdx.x;
    if (live_rows) {
      float4* mine = reinterpret_cast<float4*>(partials + (part * kThreads + tid) * kAccFloats);
#pragma unroll
      for (int ni = 0; ni < kFragsN; ++ni) {
        mine[ni] = make_float4(acc[0][ni][0], acc[0][ni][1], acc[0][ni][2], acc[0][ni][3]);
      }
    }
    __threadfence();  // this thread's partials, before the block's count
    __syncthreads();  // every thread's fenced; no thread reads the ring any more
    int* arrived = reinterpret_cast<int*>(smem);
    if (tid == 0) *arrived = atomicAdd(part_count, 1);
    __syncthreads();
    if (*arrived != PARTS - 1) return false;
    __threadfence();  // the other parts' partials (fenced before their counts), after ours
    if (live_rows) {
#pragma unroll
      for (int ni = 0; ni < kFragsN; ++ni)
        acc[0][ni][0] = acc[0][ni][1] = acc[0][ni][2] = acc[0][ni][3] = 0.f;
#pragma unroll
      for (int q = 0; q < PARTS; ++q) {
        const float4* theirs =
            reinterpret_cast<const float4*>(partials + (q * kThreads + tid) * kAccFloats);
#pragma unroll
        for (int ni = 0; ni < kFragsN; ++ni) {
          const float4 v = __ldcg(theirs + ni);  // from L2: other SMs wrote them
          acc[0][ni][0] += v.x;
          acc[0][ni][1] += v.y;
          acc[0][ni][2] += v.z;
          acc[0][ni][3] += v.w;
        }
      }
    }
    return true;
  }
};

}  // namespace rt_moe
