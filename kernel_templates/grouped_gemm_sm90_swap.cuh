// Grouped GEMM with swapped operands on sm_90a: weight rows are wgmma's M side, token rows its N
// side. For the middle batches (DeepSeek-V3 at T = 4096: ~128 rows an expert), where the tile of
// grouped_gemm_sm90_ws.cuh (64-row granularity, 128 rows a block) runs an expert of 129-143 rows
// as two row blocks that each pull the whole weight tile through L2, and multiplies up to 63
// padding rows. Here a block takes TOKENS token rows of one expert (the dispatch pads experts to
// TOKENS rows), so an expert of up to TOKENS rows streams each weight tile to the SMs once; a
// larger expert's rows are spread evenly over its blocks (dispatch.cuh's EVEN layout), so that its
// blocks multiply as many rows and read each weight tile together.
//
// Same pipeline as grouped_gemm_sm90_ws.cuh (persistent grid, tiles from the in-order counter in
// bands, tile_order.h; one producer warpgroup, a STAGES-deep ring, full/empty mbarriers), with two
// consumer warpgroups and a tile of 256 weight rows x TOKENS token rows:
//   - the producer loads the weight tile (two 128-row boxes, TMA, 128-byte swizzle) and the token
//     rows by cp.async from all 128 threads: gathered x rows (kGateUp) or the h rows of the block
//     (kDown), rows past the expert's last row zero-filled, each thread arriving for a stage's
//     copies a stage later, once they are complete and fenced for wgmma (arrive_copied,
//     docs/PERF.md 72: 1.7-2.9% off gpumode bench 1 on an H100); except in the down GEMM of tiles
//     of 128 token rows or more (kTmaTokens), where the block's TOKENS consecutive h rows are one
//     more TMA box (the map GemmTmaParams::a), rows past the block's tokens holding whatever h
//     holds there, which only the MMA columns of tokens that are never stored read (H200,
//     docs/PERF.md 34: 0.6-0.7% faster at DeepSeek-V3 T = 4096 and 16384 and at gpumode bench 1;
//     the 64-row tile at T = 512 0.3% slower, so it keeps the cp.async);
//   - consumer warpgroup c issues two wgmma.m64nTOKENSk16 per 16 K elements, the token tile as B
//     (K-major, the same swizzled layout as the weights), two 64-row weight slices as A:
//       kGateUp: gate rows [64 c, 64 c + 64) and the up rows of the same columns, so a thread
//                holds g and u of the same (column, token): h = SiLU(g) * u, 128 columns a tile;
//       kDown:   down rows [128 c, 128 c + 128), 256 columns a tile, y scaled by the routing
//       weight.
//   - the accumulators are (weight row, token): a lane holds two tokens of one column. h and fp16
//     y leave through a 1 KB staging a warp (store_staged: stmatrix .trans makes token rows, then
//     16-byte stores); fp32 y by one shuffle with the lane of the next column, 8-byte stores
//     (store, Y: YOps).
// Padding token rows are zero in the ring, so their h rows are written as zeros (inside the
// expert's padded range); kDown skips them.
//
// The down GEMM fills gate/up's last wave (GemmTmaParams::row_done set): a gate/up consumer warp
// counts each tile whose h it stored in row_done[row block] (release), and gate/up's first block
// sets gate_up_started once its wait for the routing returned. The down kernel, launched early,
// gets an SM as soon as one of gate/up's blocks leaves it (one block an SM for both) and does not
// wait for gate/up's whole grid: it waits (acquire) for gate_up_started before it reads the
// routing's outputs, and its producer for the row block's kGateUpCounts before it copies the row
// block's h rows. The tile orders run row block by row block, so only down's tiles of gate/up's
// last row blocks wait. The down grid waits for gate/up's grid before it exits, so the kernels
// after it may rely on both having completed (common.cuh).
#pragma once

#include "even_blocks.h"
#include "grouped_gemm_sm90_ws.cuh"

namespace rt_moe {

// wgmma.m64nNk16 with fp32 accumulators d[0 .. N / 2), A and B from shared memory through
// descriptors, for N = 8, 16, ..., 160 (the token rows of a block, rounded up to 8); A, B and P
// are the operand numbers of the two descriptors and scale_d, LIST the accumulators' operands.
// clang-format off
#define RT_MOE_WGMMA_TOKENS_TYPE(DTYPE, TYPE, N, A, B, P, LIST, ...)                            \
  template <>                                                                                  \
  struct WgmmaTokens<DTYPE, N> {                                                               \
    static __device__ __forceinline__ void mma(float* d, unsigned long long desc_a,            \
                                               unsigned long long desc_b, int scale_d) {       \
      asm volatile(                                                                            \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\n"                                        \
        "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" LIST "}, %" A     \
        ", %" B ", p, 1, 1, 0, 0;\n}\n"                                                        \
        : __VA_ARGS__                                                                          \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                             \
    }                                                                                          \
  };
#define RT_MOE_WGMMA_TOKENS(N, A, B, P, LIST, ...)                                             \
  RT_MOE_WGMMA_TOKENS_TYPE(BF16, "bf16", N, A, B, P, LIST, __VA_ARGS__)                        \
  RT_MOE_WGMMA_TOKENS_TYPE(F16, "f16", N, A, B, P, LIST, __VA_ARGS__)
#define RT_MOE_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
// Operand strings and operands of the first N / 2 accumulators.
#define RT_MOE_L8 "%0,%1,%2,%3"
#define RT_MOE_O8 RT_MOE_F4(0)
#define RT_MOE_L16 RT_MOE_L8 ",%4,%5,%6,%7"
#define RT_MOE_O16 RT_MOE_O8, RT_MOE_F4(4)
#define RT_MOE_L24 RT_MOE_L16 ",%8,%9,%10,%11"
#define RT_MOE_O24 RT_MOE_O16, RT_MOE_F4(8)
#define RT_MOE_L32 RT_MOE_L24 ",%12,%13,%14,%15"
#define RT_MOE_O32 RT_MOE_O24, RT_MOE_F4(12)
#define RT_MOE_L40 RT_MOE_L32 ",%16,%17,%18,%19"
#define RT_MOE_O40 RT_MOE_O32, RT_MOE_F4(16)
#define RT_MOE_L48 RT_MOE_L40 ",%20,%21,%22,%23"
#define RT_MOE_O48 RT_MOE_O40, RT_MOE_F4(20)
#define RT_MOE_L56 RT_MOE_L48 ",%24,%25,%26,%27"
#define RT_MOE_O56 RT_MOE_O48, RT_MOE_F4(24)
#define RT_MOE_L64 RT_MOE_L56 ",%28,%29,%30,%31"
#define RT_MOE_O64 RT_MOE_O56, RT_MOE_F4(28)
#define RT_MOE_L72 RT_MOE_L64 ",%32,%33,%34,%35"
#define RT_MOE_O72 RT_MOE_O64, RT_MOE_F4(32)
#define RT_MOE_L80 RT_MOE_L72 ",%36,%37,%38,%39"
#define RT_MOE_O80 RT_MOE_O72, RT_MOE_F4(36)
#define RT_MOE_L88 RT_MOE_L80 ",%40,%41,%42,%43"
#define RT_MOE_O88 RT_MOE_O80, RT_MOE_F4(40)
#define RT_MOE_L96 RT_MOE_L88 ",%44,%45,%46,%47"
#define RT_MOE_O96 RT_MOE_O88, RT_MOE_F4(44)
#define RT_MOE_L104 RT_MOE_L96 ",%48,%49,%50,%51"
#define RT_MOE_O104 RT_MOE_O96, RT_MOE_F4(48)
#define RT_MOE_L112 RT_MOE_L104 ",%52,%53,%54,%55"
#define RT_MOE_O112 RT_MOE_O104, RT_MOE_F4(52)
#define RT_MOE_L120 RT_MOE_L112 ",%56,%57,%58,%59"
#define RT_MOE_O120 RT_MOE_O112, RT_MOE_F4(56)
#define RT_MOE_L128 RT_MOE_L120 ",%60,%61,%62,%63"
#define RT_MOE_O128 RT_MOE_O120, RT_MOE_F4(60)
#define RT_MOE_L136 RT_MOE_L128 ",%64,%65,%66,%67"
#define RT_MOE_O136 RT_MOE_O128, RT_MOE_F4(64)
#define RT_MOE_L144 RT_MOE_L136 ",%68,%69,%70,%71"
#define RT_MOE_O144 RT_MOE_O136, RT_MOE_F4(68)
#define RT_MOE_L152 RT_MOE_L144 ",%72,%73,%74,%75"
#define RT_MOE_O152 RT_MOE_O144, RT_MOE_F4(72)
#define RT_MOE_L160 RT_MOE_L152 ",%76,%77,%78,%79"
#define RT_MOE_O160 RT_MOE_O152, RT_MOE_F4(76)
// clang-format on

// One warpgroup's wgmma.m64nNk16 (N / 2 accumulators a thread).
template <typename D, int N>
struct WgmmaTokens;
RT_MOE_WGMMA_TOKENS(8, "4", "5", "6", RT_MOE_L8, RT_MOE_O8)
RT_MOE_WGMMA_TOKENS(16, "8", "9", "10", RT_MOE_L16, RT_MOE_O16)
RT_MOE_WGMMA_TOKENS(24, "12", "13", "14", RT_MOE_L24, RT_MOE_O24)
RT_MOE_WGMMA_TOKENS(32, "16", "17", "18", RT_MOE_L32, RT_MOE_O32)
RT_MOE_WGMMA_TOKENS(40, "20", "21", "22", RT_MOE_L40, RT_MOE_O40)
RT_MOE_WGMMA_TOKENS(48, "24", "25", "26", RT_MOE_L48, RT_MOE_O48)
RT_MOE_WGMMA_TOKENS(56, "28", "29", "30", RT_MOE_L56, RT_MOE_O56)
RT_MOE_WGMMA_TOKENS(64, "32", "33", "34", RT_MOE_L64, RT_MOE_O64)
RT_MOE_WGMMA_TOKENS(72, "36", "37", "38", RT_MOE_L72, RT_MOE_O72)
RT_MOE_WGMMA_TOKENS(80, "40", "41", "42", RT_MOE_L80, RT_MOE_O80)
RT_MOE_WGMMA_TOKENS(88, "44", "45", "46", RT_MOE_L88, RT_MOE_O88)
RT_MOE_WGMMA_TOKENS(96, "48", "49", "50", RT_MOE_L96, RT_MOE_O96)
RT_MOE_WGMMA_TOKENS(104, "52", "53", "54", RT_MOE_L104, RT_MOE_O104)
RT_MOE_WGMMA_TOKENS(112, "56", "57", "58", RT_MOE_L112, RT_MOE_O112)
RT_MOE_WGMMA_TOKENS(120, "60", "61", "62", RT_MOE_L120, RT_MOE_O120)
RT_MOE_WGMMA_TOKENS(128, "64", "65", "66", RT_MOE_L128, RT_MOE_O128)
RT_MOE_WGMMA_TOKENS(136, "68", "69", "70", RT_MOE_L136, RT_MOE_O136)
RT_MOE_WGMMA_TOKENS(144, "72", "73", "74", RT_MOE_L144, RT_MOE_O144)
RT_MOE_WGMMA_TOKENS(152, "76", "77", "78", RT_MOE_L152, RT_MOE_O152)
RT_MOE_WGMMA_TOKENS(160, "80", "81", "82", RT_MOE_L160, RT_MOE_O160)
#undef RT_MOE_O160
#undef RT_MOE_O152
#undef RT_MOE_O144
#undef RT_MOE_O136
#undef RT_MOE_O128
#undef RT_MOE_O120
#undef RT_MOE_O112
#undef RT_MOE_O104
#undef RT_MOE_O96
#undef RT_MOE_O88
#undef RT_MOE_O80
#undef RT_MOE_O72
#undef RT_MOE_O64
#undef RT_MOE_O56
#undef RT_MOE_O48
#undef RT_MOE_O40
#undef RT_MOE_O32
#undef RT_MOE_O24
#undef RT_MOE_O16
#undef RT_MOE_O8
#undef RT_MOE_L160
#undef RT_MOE_L152
#undef RT_MOE_L144
#undef RT_MOE_L136
#undef RT_MOE_L128
#undef RT_MOE_L120
#undef RT_MOE_L112
#undef RT_MOE_L104
#undef RT_MOE_L96
#undef RT_MOE_L88
#undef RT_MOE_L80
#undef RT_MOE_L72
#undef RT_MOE_L64
#undef RT_MOE_L56
#undef RT_MOE_L48
#undef RT_MOE_L40
#undef RT_MOE_L32
#undef RT_MOE_L24
#undef RT_MOE_L16
#undef RT_MOE_L8
#undef RT_MOE_F4
#undef RT_MOE_WGMMA_TOKENS
#undef RT_MOE_WGMMA_TOKENS_TYPE

template <typename D, int H, int I, int E, int S, int K, int MODE, int TOKENS, int STAGES,
          typename Y = float>
struct GroupedGemmSm90Swap {
  static constexpr int BLOCK_M = TOKENS;  // token rows a block: the dispatch's padding
  static constexpr int BLOCK_N = 256;     // weight rows a tile
  static constexpr int BLOCK_K = 64;
  static constexpr int CONSUMERS = 2;
  static constexpr int kThreads = 128 * (CONSUMERS + 1);
  static constexpr int kMinBlocks = 1;  // one block per SM: a register cap for setmaxnreg
  static constexpr int kSlots = K + S;
  // kDown's h rows by TMA (see the top of the file).
  static constexpr bool kTmaTokens = MODE == kDown && TOKENS >= 128;
  // Arrivals a full barrier waits for: the producer's thread 0 (its expect_tx), and with
  // cp.async token rows each producer thread's.
  static constexpr int kFullArrivals = kTmaTokens ? 1 : 128 + 1;
  static constexpr int kReduce = MODE == kDown ? I : H;
  static constexpr int kTiles = kReduce / BLOCK_K;
  static constexpr int kOutCols = MODE == kGateUp ? BLOCK_N / 2 : BLOCK_N;  // per tile
  static constexpr int kColBlocks = ((MODE == kGateUp ? I : H) + kOutCols - 1) / kOutCols;
  static constexpr int kTokenBytes = TOKENS * BLOCK_K * 2;  // the ring's token tile
  static constexpr int kWeightBytes = BLOCK_N * BLOCK_K * 2;
  static constexpr int kStageBytes = kTokenBytes + kWeightBytes;
  static constexpr int kSliceBytes = 64 * BLOCK_K * 2;  // 64 weight rows: one wgmma's A
  // full and empty barriers, the per-stage tile slots, two broadcast slots for the producer; the
  // pair and weight of each token row of the consumers' tile (kDown).
  static constexpr int kBarrierBytes = 2 * STAGES * 8 + STAGES * 4 + 8;
  static constexpr int kPairBytes = MODE == kDown ? TOKENS * 8 : 0;
  // h (kGateUp) and fp16 y (kDown): each consumer warp transposes its outputs into its own
  // staging area (stmatrix .trans), 32 token rows of 16 columns at a time, and stores whole
  // 16-byte chunks of the output rows from there (store_staged); 1 KB a warp.
  static constexpr bool kStagedY = MODE == kGateUp || YOps<Y>::kBytes == 2;
  static constexpr int kStagingWarpBytes = 32 * 32;  // 32 tokens x 16 columns of fp16
  static constexpr int kStagingBytes = kStagedY ? CONSUMERS * 4 * kStagingWarpBytes : 0;
  static constexpr int kSmemBytes =
      STAGES * kStageBytes + kStagingBytes + kBarrierBytes + kPairBytes + 1024;
  static constexpr int kAcc =
      TOKENS / 2;  // fp32 accumulators of one wgmma (N = TOKENS), per thread
  static constexpr int kRowsPerProducer = TOKENS * 8 / 128;  // 16-byte chunks of 128 threads
  // kDown with row_done: the counts of a row block's h (gate/up: (I / 128) tiles, a count from
  // each of its consumer warps).
  static constexpr int kGateUpCounts = (I + BLOCK_N / 2 - 1) / (BLOCK_N / 2) * CONSUMERS * 4;

  // The weight loads are those of the TMA kernel's 128 x 256 tile.
  using WeightLoader = GroupedGemmSm90Ws<D, H, I, E, S, K, MODE, 2, BLOCK_N, STAGES, 1>;

  static_assert(MODE == kGateUp || MODE == kDown, "the expert GEMMs only");
  static_assert(TOKENS % 16 == 0 && TOKENS >= 16 && TOKENS <= 160,
                "wgmma N variants of 16 to 160 token rows");
  static_assert(STAGES >= 2, "a ring of at least two stages");
  // A gathering producer thread arrives on a stage after it issued the next one's copies, which
  // waits for the release of the stage STAGES - 1 back: with two stages that is the stage itself.
  static_assert(kTmaTokens || STAGES >= 3, "gathered token rows need a ring of three stages");
  static_assert(kTokenBytes % 1024 == 0, "tiles start 1024-byte aligned for the 128-byte swizzle");
  static_assert(kSmemBytes <= kMaxDynamicSmemSm90, "the ring and the staging fit an SM");
  static_assert(!kStagedY || (H % 8 == 0 && I % 8 == 0),
                "staged rows leave in 16-byte chunks of 8 columns");

  static __device__ __forceinline__ BandTile tile_of(const GemmParams& g, int tile, int num_blocks,
                                                     int band) {
    return band_tile(tile, kColBlocks, band, num_blocks, g.block_expert, g.padded_offsets, BLOCK_M);
  }

  // A gathering producer thread's arrival on a stage's full barrier, once its copies there are
  // complete (all but the newest PENDING groups) and, by the proxy fence, ordered before the
  // consumers' wgmma reads (the async proxy): the writer's side of the generic-to-async handoff,
  // so that the consumers start their MMAs right after their wait (docs/PERF.md 72).
  template <int PENDING>
  static __device__ __forceinline__ void arrive_copied(unsigned bar) {
    cp_async_wait<PENDING>();
    fence_proxy_async();
    mbarrier_arrive(bar);
  }

  static __device__ void produce(const GemmTmaParams& p, unsigned smem_base, unsigned full,
                                 unsigned empty, int* tile_slots, int* broadcast, int tiles,
                                 int num_blocks) {
    const GemmParams& g = p.gemm;
    const int tid = threadIdx.x - 128 * CONSUMERS;
    const int chunk = tid % 8;
    const unsigned short* a = reinterpret_cast<const unsigned short*>(g.a);
    int stage = 0;
    unsigned phase = 0;
    int h_ready = -1;  // kDown with row_done: the row block whose h rows were last waited for
    for (int iteration = 0;; ++iteration) {
      const int tile = next_tile_in_order<1>(p.tile_counter, broadcast, 0, iteration, tid, 0);
      if (tile >= tiles) {
        // No more work: a stage that carries -1 instead of data tells the consumers, with the
        // same arrivals as a stage of data (every gathering thread, and thread 0 for the TMA).
        mbarrier_wait(empty + 8 * stage, phase ^ 1);
        if (tid == 0) tile_slots[stage] = -1;
        if (!kTmaTokens) mbarrier_arrive(full + 8 * stage);
        if (tid == 0) mbarrier_arrive(full + 8 * stage);
        break;
      }
      const BandTile t = tile_of(g, tile, num_blocks, p.band);
      const int m0 = t.m_block * BLOCK_M;
      if (MODE == kDown && p.row_done != nullptr && t.m_block != h_ready) {
        // Thread 0's acquire, then the barrier: every producer thread's copies below see the h
        // rows gate/up's warps released.
        if (tid == 0) {
          while (load_acquire_gpu(p.row_done + t.m_block) < kGateUpCounts) __nanosleep(64);
          // The h rows that gate/up's generic stores wrote, before this thread's TMA reads them.
          if (kTmaTokens) fence_proxy_async_global();
        }
        named_barrier_sync<3, 128>();
        h_ready = t.m_block;
      }
      const unsigned short* rows[kRowsPerProducer];  // the token rows this thread copies
#pragma unroll
      for (int j = 0; j < (kTmaTokens ? 0 : kRowsPerProducer); ++j) {
        const int r = tid / 8 + 16 * j;
        const int pair = g.sorted_rows[m0 + r];
        const long long row =
            MODE == kGateUp ? (long long)(pair / kSlots) * H : (long long)(m0 + r) * I;
        rows[j] = pair >= 0 ? a + row + chunk * 8 : nullptr;
      }
      int arrive_at = -1;  // gathered token rows: the stage this thread has yet to arrive on
      for (int kt = 0; kt < kTiles; ++kt) {
        mbarrier_wait(empty + 8 * stage, phase ^ 1);
        const unsigned token_smem = smem_base + stage * kStageBytes;
        const unsigned weight_smem = token_smem + kTokenBytes;
        const unsigned bar = full + 8 * stage;
        if (tid == 0) {
          if (kt == 0) tile_slots[stage] = tile;  // published by the arrival below
          mbarrier_arrive_expect_tx(bar, kWeightBytes + (kTmaTokens ? kTokenBytes : 0));
          WeightLoader::load_b_half(p, t.expert, t.n_block, kt, 0, weight_smem, bar, false);
          WeightLoader::load_b_half(p, t.expert, t.n_block, kt, 1, weight_smem, bar, false);
          if (kTmaTokens) tma_load_2d(token_smem, &p.a, kt * BLOCK_K, m0, bar);
        }
        if constexpr (!kTmaTokens) {
#pragma unroll
          for (int j = 0; j < kRowsPerProducer; ++j) {
            const int r = tid / 8 + 16 * j;
            const bool ok = rows[j] != nullptr;
            cp_async_16(token_smem + swizzle_128b(r, chunk), ok ? rows[j] + kt * BLOCK_K : a, ok);
          }
          // This stage's copies are one group; the previous stage's, complete once at most this
          // one is in flight, are made visible to wgmma's async proxy and arrived for.
          cp_async_commit();
          if (arrive_at >= 0) arrive_copied<1>(full + 8 * arrive_at);
          arrive_at = stage;
          // The tile's last stage now, not after the next tile's fetch.
          if (kt == kTiles - 1) arrive_copied<0>(full + 8 * stage);
        }
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    cp_async_wait<0>();
  }

  static __device__ void consume(const GemmTmaParams& p, unsigned smem_base, unsigned full,
                                 unsigned empty, const int* tile_slots, int* tile_pairs,
                                 int num_blocks, unsigned staging) {
    const GemmParams& g = p.gemm;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    // The warpgroup, broadcast from lane 0 so that the compiler knows it warp-uniform: the
    // slices' descriptors below are then computed in uniform registers (no R2UR a wgmma).
    const int group = __shfl_sync(0xffffffffu, warp / 4, 0), warp_in_group = warp % 4;
    float* tile_weights = reinterpret_cast<float*>(tile_pairs + TOKENS);
    // This warpgroup's two 64-row weight slices (offsets in the stage's weight tile): gate and up
    // rows of the same 64 columns, or 128 consecutive down rows.
    const unsigned slice0 = MODE == kGateUp ? group * kSliceBytes : 2 * group * kSliceBytes;
    const unsigned slice1 = MODE == kGateUp ? slice0 + 2 * kSliceBytes : slice0 + kSliceBytes;
    int stage = 0;
    unsigned phase = 0;
    float acc0[kAcc], acc1[kAcc];
    for (;;) {
      // The tile comes with its first stage (lane 0 reads the slot; see grouped_gemm_sm90_ws).
      mbarrier_wait(full + 8 * stage, phase);
      int tile = 0;
      if (lane == 0) tile = tile_slots[stage];
      tile = __shfl_sync(0xffffffffu, tile, 0);
      if (tile < 0) break;
      const BandTile t = tile_of(g, tile, num_blocks, p.band);
      const int m0 = t.m_block * BLOCK_M;
      // The block's token rows, rounded up to 8: the N of its MMAs (its padding rows are zero
      // in the ring, or with kTmaTokens the h rows gate/up wrote from zeros; those past n are
      // neither multiplied nor stored). A routed expert's rows are spread evenly over its blocks
      // (EvenBlocks); a shared chunk's fill its blocks in order.
      const int offset = m0 - g.padded_offsets[t.expert];
      const int rows = t.expert < E
                           ? EvenBlocks(g.expert_counts[t.expert], TOKENS).rows(offset / TOKENS)
                           : min(TOKENS, g.tokens - offset);
      const int n = (rows + 7) / 8 * 8;
      if (MODE == kDown) {
        // The last tile's stores have read the pairs (barrier), then this tile's go in.
        named_barrier_sync<2, 128 * CONSUMERS>();
        for (int r = tid; r < TOKENS; r += 128 * CONSUMERS) {
          const int pair = g.sorted_rows[m0 + r];
          tile_pairs[r] = pair;
          tile_weights[r] = pair >= 0 ? pair_weight<K, kSlots, Y>(g, pair) : 0.f;
        }
      }
      // The tile's K loop for its N, chosen once a tile; returns with every batch retired and
      // the last stage released.
      k_loop<TOKENS>(n, acc0, acc1, smem_base, slice0, slice1, full, empty, stage, phase, lane);
      if (MODE == kDown) named_barrier_sync<2, 128 * CONSUMERS>();  // the tile's pairs are in
      if constexpr (kStagedY) {
        const unsigned mine = staging + warp * kStagingWarpBytes;
        if constexpr (MODE == kGateUp) {
          // h = SiLU(gate) * up of 16 columns of this warpgroup's 64.
          const int col = t.n_block * kOutCols + group * 64 + warp_in_group * 16;
          store_staged<true>(g, acc0, acc1, tile_pairs, tile_weights, m0, n, col, lane, mine);
          if (p.row_done != nullptr) {
            __syncwarp();  // the warp's h stores, before lane 0's release
            if (lane == 0) red_add_release_gpu(p.row_done + t.m_block, 1);
          }
        } else {
          const int col = t.n_block * kOutCols + group * 128 + warp_in_group * 16;
          store_staged<false>(g, acc0, acc0, tile_pairs, tile_weights, m0, n, col, lane, mine);
          store_staged<false>(g, acc1, acc1, tile_pairs, tile_weights, m0, n, col + 64, lane, mine);
        }
      } else {
        store<0>(g, acc0, acc1, tile_pairs, tile_weights, n, t.n_block, group,
                 warp_in_group * 16 + lane / 4, lane);
      }
    }
  }

  // A tile's K loop: the two weight slices (at slice0 and slice1 of each stage's weight tile)
  // against the first n (= N, found by recursion from TOKENS down, once a tile) token rows of
  // each stage, a batch of 8 wgmma a K tile, committed and waited for one batch later, when the
  // previous stage is released. The first stage's barrier was waited for with the tile. Each N
  // has its own loop, so a K tile starts its MMAs with no search for its N after the stage's
  // wait (docs/PERF.md 71); every batch retires on each N's own path (after the paths join,
  // ptxas closed them with an empty wgmma group, and the wait for all but the last group then
  // drained every batch).
  template <int N>
  static __device__ __forceinline__ void k_loop(int n, float* acc0, float* acc1, unsigned smem_base,
                                                unsigned slice0, unsigned slice1, unsigned full,
                                                unsigned empty, int& stage, unsigned& phase,
                                                int lane) {
    if constexpr (N > 8) {
      if (n < N) {
        k_loop<N - 8>(n, acc0, acc1, smem_base, slice0, slice1, full, empty, stage, phase, lane);
        return;
      }
    }
    int release = -1;
    for (int kt = 0; kt < kTiles; ++kt) {
      // Gathered token rows (cp.async, the generic proxy) were fenced for wgmma's async proxy by
      // the producer threads that copied them, before their arrivals (arrive_copied).
      if (kt > 0) mbarrier_wait(full + 8 * stage, phase);
      const unsigned b = smem_base + stage * kStageBytes;
      const unsigned a0 = b + kTokenBytes + slice0, a1 = b + kTokenBytes + slice1;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        // k16 steps advance 32 bytes inside the swizzled 128-byte rows.
        const unsigned long long tokens = smem_descriptor(b + ks * 32);
        const int scale_d = (kt > 0 || ks > 0) ? 1 : 0;
        WgmmaTokens<D, N>::mma(acc0, smem_descriptor(a0 + ks * 32), tokens, scale_d);
        WgmmaTokens<D, N>::mma(acc1, smem_descriptor(a1 + ks * 32), tokens, scale_d);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous stage's batch retired: release that stage
      if (release >= 0) release_stage(empty, release, lane);
      release = stage;
      if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
      }
    }
    wgmma_wait<0>();
    release_stage(empty, release, lane);
  }

  // A consumer warp's release of stage s, once its MMAs there retired: one arrival a warp.
  static __device__ __forceinline__ void release_stage(unsigned empty, int s, int lane) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty + 8 * s);
  }

  // fp32 y (kDown; h and fp16 y leave by store_staged). acc[4 j + v]: weight row `row` (+ 8 for
  // v >= 2) of a 64-row slice, token 8 j + 2 (lane % 4) + (v & 1) of the tile. A lane and its
  // partner (lane ^ 4, weight row ^ 1) swap one value each, so the even row's lane stores token t
  // of rows (row, row + 1) and the odd row's lane token t + 1 of rows (row - 1, row). One J at a
  // time by recursion, so that every accumulator index is a constant (an unrolled loop of 18
  // steps was left rolled, the accumulators in local memory).
  template <int J>
  static __device__ __forceinline__ void store(const GemmParams& g, const float* acc0,
                                               const float* acc1, const int* tile_pairs,
                                               const float* tile_weights, int n, int n_block,
                                               int group, int row, int lane) {
    static_assert(MODE == kDown && !kStagedY, "only fp32 y leaves from registers");
    if (8 * J >= n) return;  // past the MMAs' N: never computed
    const bool odd = (row & 1) != 0;
    const int token = 8 * J + 2 * (lane % 4) + (odd ? 1 : 0);  // the token this lane stores
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int v = 4 * J + 2 * half;
      const int r = row + 8 * half - (odd ? 1 : 0);  // the even row of the stored pair
      const int pair = tile_pairs[token];
      const float weight = tile_weights[token];
      const int col = n_block * kOutCols + group * 128 + r;
      store_y(g, acc0[v], acc0[v + 1], pair, weight, col, odd);
      store_y(g, acc1[v], acc1[v + 1], pair, weight, col + 64, odd);
    }
    if constexpr (J + 1 < TOKENS / 8) {
      store<J + 1>(g, acc0, acc1, tile_pairs, tile_weights, n, n_block, group, row, lane);
    }
  }

  // The 16 weight rows of this warp in one 64-row slice for the tile's first n tokens, 32
  // tokens at a time: kGateUp (GATE) h = SiLU(a) * b, the gate and up accumulators of 16 columns
  // of h, to h's rows m0 + token; kDown a times the token's routing weight, 16 columns of y, to
  // the token's pair row of y. The accumulators' rows lane / 4 and lane / 4 + 8 are output
  // columns `col` + 0..15. The fragment of tokens 8 j .. 8 j + 7 and 8 rows is an 8 x 8 matrix
  // in ldmatrix's layout (a lane holds row lane / 4, tokens 2 (lane % 4) and + 1), so stmatrix
  // .trans writes it as 8 token rows of 16 bytes (8 output columns): a token's 16 columns are 32
  // bytes of the warp's staging, the two 16-byte halves swapped for tokens 4-7 of each 8 (no
  // bank conflict for the 8 rows of a matrix, 32 bytes apart). Then each lane loads one 16-byte
  // half of a token row and stores it (y evict-first, as store_y): 16 tokens x 32 bytes a warp
  // store, whole sectors; 4 stmatrix and 4 stores a lane for 32 tokens, where store() needs 32
  // shuffles and 32 stores of 4 bytes.
  template <bool GATE>
  static __device__ __forceinline__ void store_staged(const GemmParams& g, const float* a,
                                                      const float* b, const int* tile_pairs,
                                                      const float* tile_weights, int m0, int n,
                                                      int col, int lane, unsigned staging) {
    // The address this lane gives stmatrix: row lane % 8 of matrix lane / 8 (tokens 8 (lane / 16)
    // + lane % 8 of a 16-token half of the chunk, rows 8 ((lane / 8) % 2) + ...).
    const int row_token = 8 * (lane / 16) + lane % 8;
    const int row_half = (lane / 8) % 2;
    const unsigned row_address =
        staging + row_token * 32 + ((row_half ^ ((row_token >> 2) & 1)) << 4);
#pragma unroll
    for (int chunk = 0; chunk < (TOKENS + 31) / 32; ++chunk) {
      if (32 * chunk >= n) break;  // n is the same in every lane
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // tokens 16 q .. 16 q + 15 of the chunk: j and j + 1
        unsigned r[4];
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const int j = 4 * chunk + 2 * q + jj;
          if (j < TOKENS / 8) {
            if constexpr (GATE) {
              r[2 * jj] = DTypeOps<D>::pack2(silu_mul(a[4 * j], b[4 * j]),
                                             silu_mul(a[4 * j + 1], b[4 * j + 1]));
              r[2 * jj + 1] = DTypeOps<D>::pack2(silu_mul(a[4 * j + 2], b[4 * j + 2]),
                                                 silu_mul(a[4 * j + 3], b[4 * j + 3]));
            } else {
              // Two 4-byte loads: tile_weights is 4-byte aligned only (after an odd STAGES of
              // tile slots), and a float2 load faulted there (misaligned address, s5 tiles).
              const int t0 = 8 * j + 2 * (lane % 4);
              const float w0 = tile_weights[t0], w1 = tile_weights[t0 + 1];
              r[2 * jj] = YOps<Y>::pack(a[4 * j] * w0, a[4 * j + 1] * w1);
              r[2 * jj + 1] = YOps<Y>::pack(a[4 * j + 2] * w0, a[4 * j + 3] * w1);
            }
          } else {
            r[2 * jj] = r[2 * jj + 1] = 0u;
          }
        }
        stmatrix_x4_trans(row_address + q * 16 * 32, r);
      }
      __syncwarp();
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int token = 16 * half + lane / 2;  // of the chunk
        const int part = lane % 2;               // columns 8 part .. 8 part + 7
        const int t = 32 * chunk + token;
        const uint4 v = ld_shared_v4(staging + token * 32 + ((part ^ ((token >> 2) & 1)) << 4));
        if constexpr (GATE) {
          if (t < n && col + 8 * part < I) {
            *reinterpret_cast<uint4*>(reinterpret_cast<unsigned short*>(g.out) +
                                      (long long)(m0 + t) * I + col + 8 * part) = v;
          }
        } else {
          const int pair = t < n ? tile_pairs[t] : -1;
          if (pair >= 0 && col + 8 * part < H) {
            __stcs(reinterpret_cast<uint4*>(reinterpret_cast<typename YOps<Y>::Elem*>(g.out) +
                                            (long long)pair * H + col + 8 * part),
                   v);
          }
        }
      }
      __syncwarp();  // the chunk's loads, before the next chunk's stmatrix
    }
  }

  // y of one lane pair (see store): tokens t (value a) and t + 1 (value b) of one column.
  static __device__ __forceinline__ void store_y(const GemmParams& g, float a, float b, int pair,
                                                 float weight, int col, bool odd) {
    const float other = __shfl_xor_sync(0xffffffffu, odd ? a : b, 4);
    // Streaming (evict-first): y is read once, by the combine.
    if (pair >= 0 && col < H) {
      const typename YOps<Y>::Pair value = odd ? YOps<Y>::pack(other * weight, b * weight)
                                               : YOps<Y>::pack(a * weight, other * weight);
      // (col is even and H a multiple of 64: no 64-bit signed halving)
      __stcs(&reinterpret_cast<typename YOps<Y>::Pair*>(
                 g.out)[(long long)pair * (H / 2) + (unsigned(col) >> 1)],
             value);
    }
  }

  static __device__ void run(const GemmTmaParams& p) {
    // Launched programmatically after the scatter kernel (gate/up) or gate/up (down): nothing the
    // kernels before wrote is read before this.
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    const bool overlap = p.row_done != nullptr;
    if (MODE == kDown && overlap) {
      if (threadIdx.x == 0) {
        while (load_acquire_gpu(p.gate_up_started) == 0) __nanosleep(256);
      }
      __syncthreads();
    } else {
      grid_dependency_wait();
      if (MODE == kGateUp && overlap && blockIdx.x == 0 && threadIdx.x == 0) {
        red_add_release_gpu(p.gate_up_started, 1);
      }
    }
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned smem_base = (smem_address(smem) + 1023u) & ~1023u;
    const unsigned staging = smem_base + STAGES * kStageBytes;  // kStagingBytes (kStagedY)
    const unsigned full = staging + kStagingBytes;
    const unsigned empty = full + 8 * STAGES;
    int* tile_slots = reinterpret_cast<int*>(smem + (empty + 8 * STAGES - smem_address(smem)));
    int* broadcast = tile_slots + STAGES;
    int* tile_pairs = broadcast + 2;
    if (threadIdx.x == 0) {
      for (int s = 0; s < STAGES; ++s) {
        mbarrier_init(full + 8 * s, kFullArrivals);
        mbarrier_init(empty + 8 * s, CONSUMERS * 4);
      }
      mbarrier_init_fence();
    }
    __syncthreads();
    const int num_blocks = *p.gemm.num_blocks;
    const int tiles = num_blocks * kColBlocks;
    if (threadIdx.x >= 128 * CONSUMERS) {
      warpgroup_registers_dec<56>();
      produce(p, smem_base, full, empty, tile_slots, broadcast, tiles, num_blocks);
    } else {
      warpgroup_registers_inc<224>();
      consume(p, smem_base, full, empty, tile_slots, tile_pairs, num_blocks, staging);
    }
    // The overlapped down grid completes only after gate/up's (see the top of the file).
    if (MODE == kDown && overlap) grid_dependency_wait();
  }
};

}  // namespace rt_moe
