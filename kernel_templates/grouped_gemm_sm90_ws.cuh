// Grouped GEMM with a warp-specialized TMA pipeline on sm_90a: the Hopper path for prefill.
//
// A persistent grid (one block per SM) walks the tiles of (row block, column block) in an order
// that keeps the readers of a weight tile, and those of a block's A rows, close together in time
// (tile_order.h), so that they share them in L2. The tiles are handed out by an atomic counter (in
// tile order, so blocks that run faster or slower never drift apart in the order and lose that
// sharing); in a CTA pair the first CTA takes the pair's tile from the counter and passes it to
// the second through its shared memory. The producer passes each tile to the consumers with the
// tile's first stage (a per-stage slot in shared memory: the tile decoded, TileSlot), and -1 when
// there is no more work.
// A block has one producer warpgroup and CONSUMERS consumer warpgroups:
//   - the producer fills a STAGES-deep ring of A and B tiles (64 K elements each): weight tiles
//     (B: gate and up rows, or down rows) and, in kDown, the h rows (A, contiguous in sorted
//     order) by the tensor-copy engine (TMA, one thread), completing on the stage's `full`
//     mbarrier with a transaction count; in kGateUp the gathered x rows (A) by cp.async from all
//     128 producer threads, each arriving on the same `full` barrier when its copies land
//     (cp.async.mbarrier.arrive.noinc). It never waits for the consumers except on a stage's
//     `empty` barrier, so it runs ahead into the next tile while the consumers store the last;
//   - consumer warpgroup c owns rows [64 c, 64 c + 64) of the block and all BLOCK_N columns: one
//     wgmma.m64nBLOCK_Nk16 per 16 K elements, A and B from shared memory through descriptors,
//     fp32 accumulators in registers (BLOCK_N / 2 per thread). It keeps one wgmma batch in flight
//     and releases a stage (one arrival per warp on `empty`) once the batch reading it retired.
//     A warpgroup whose 64 rows are all padding (the tail of an expert's last block) skips its
//     stores, and in kDown its MMAs. In kGateUp it multiplies its zero rows anyway, so that every
//     tile lasts as long as a full one: a 64-row block's tile that ran twice as fast drifted ahead
//     of the other readers of its weight tile, and the weights it read were gone from L2 when they
//     came (docs/PERF.md 17e, 18a: 3.9 GB fewer DRAM reads at T = 16384, the zero rows' MMAs
//     nearly free at the power limit).
// CLUSTER = 2: the two CTAs of a cluster take row blocks 2 j and 2 j + 1 of the same column block
// (unit j of tile_order.h's order with units of two row blocks); when both belong to one expert,
// each loads half of the weight tile and multicasts it to both, halving the weight bytes read from
// L2 per FLOP (else each loads its whole tile). Consumers release a stage in both CTAs (a stage is
// rewritten only when the two have read it), so the two CTAs walk the same (tile, K tile)
// sequence; a missing odd block runs as all padding.
// The ring's rows are 128 bytes with 16-byte chunks XOR-swizzled by (row % 8) from 1024-byte
// aligned tiles: what TMA's 128-byte swizzle writes, what swizzle_128b places for the
// gathered rows, and what wgmma's 128-byte swizzle descriptors read.
//
// Modes: kGateUp (B = 64 x (BLOCK_N / 2) gate rows then as many up rows of the same columns, so a
// thread holds g and u of each of its columns; h = SiLU(g) * u, BLOCK_N / 2 columns per tile) and
// kDown (B = BLOCK_N rows of down; y (fp32 or fp16, Y: YOps) scaled by the routing weight, written
// at the pair's row: from registers, or with STAGED_Y through shared memory by the copy engine,
// store_staged).
// Needs H and I multiples of 64 (the host picks this path only then): a K tile never straddles two
// experts' columns of the shared expert's down matrix.
#pragma once

#include "common.cuh"
#include "grouped_gemm_sm90.cuh"
#include "tile_loader.cuh"
#include "tile_order.h"

namespace rt_moe {

// ---- mbarrier and tensor-copy wrappers (shared::cta addresses) ----

__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the barrier initializations visible to the other threads and to the async proxy.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Arrives and adds `bytes` to the transaction count the current phase waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
// One arrival, made when this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void mbarrier_arrive_on_cp_async(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Spins on mbarrier.try_wait.parity`SEM` until the phase of parity `parity` of `bar` completed.
#define RT_MOE_MBARRIER_WAIT(SEM, bar, parity) \
  asm volatile(                                \
      "{\n.reg .pred done;\nwait:\n"           \
      "mbarrier.try_wait.parity" SEM           \
      ".shared::cta.b64 done, [%0], %1;\n"     \
      "@!done bra wait;\n}\n" ::"r"(bar),      \
      "r"(parity)                              \
      : "memory")
// Waits until the phase of parity `parity` has completed (acquire at CTA scope).
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  RT_MOE_MBARRIER_WAIT("", bar, parity);
}
// The same with cluster-scope acquire: for a phase completed by another CTA's release.
__device__ __forceinline__ void mbarrier_wait_cluster(unsigned bar, unsigned parity) {
  RT_MOE_MBARRIER_WAIT(".acquire.cluster", bar, parity);
}
#undef RT_MOE_MBARRIER_WAIT

// 2-D tile copy global -> shared through a tensor map (a __grid_constant__ parameter), completing
// on `bar` with the box's bytes. (x, y) = (inner element, row) of the box's first element.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, int x, int y,
                                            unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// The same copy, multicast: the box lands at `dst` in every CTA of the cluster named in `mask`,
// each completing on its own barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TensorMap* map, int x,
                                                      int y, unsigned bar, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar), "h"(mask)
      : "memory");
}

// Stores `value` at the same offset as `addr` in the shared memory of CTA `rank` of the cluster.
__device__ __forceinline__ void st_shared_remote(unsigned addr, unsigned rank, int value) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "st.shared::cluster.b32 [remote], %2;\n}" ::"r"(addr),
      "r"(rank), "r"(value)
      : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}
// Every thread of every CTA of the cluster: arrive (release) and wait (acquire).
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;" ::
          : "memory");
}
// One arrival on the barrier at the same offset in the shared memory of CTA `rank`, with the
// memory semantics SEM ("" is the default, a CTA-scope release).
#define RT_MOE_MBARRIER_ARRIVE_REMOTE(SEM, bar, rank)                          \
  asm volatile(                                                                \
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"       \
      "mbarrier.arrive" SEM ".shared::cluster.b64 _, [remote];\n}" ::"r"(bar), \
      "r"(rank)                                                                \
      : "memory")
// A release at cluster scope: what this thread wrote before it, in either CTA's shared memory, is
// visible to a thread of CTA `rank` that waits on the barrier with a cluster-scope acquire (the
// tile mailbox).
__device__ __forceinline__ void mbarrier_arrive_remote(unsigned bar, unsigned rank) {
  RT_MOE_MBARRIER_ARRIVE_REMOTE(".release.cluster", bar, rank);
}
// The default CTA-scope release, for a stage's `empty` barrier: it only tells the other CTA's
// producer that this CTA's reads of the stage (by wgmma, retired before) are done, and what that
// producer does next is a TMA write. A cluster-scope release is a memory fence on every K tile of
// every consumer warp.
__device__ __forceinline__ void mbarrier_arrive_remote_cta(unsigned bar, unsigned rank) {
  RT_MOE_MBARRIER_ARRIVE_REMOTE("", bar, rank);
}
#undef RT_MOE_MBARRIER_ARRIVE_REMOTE

// bar.sync on named barrier ID among THREADS threads (whole warps).
template <int ID, int THREADS>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;" ::"n"(ID), "n"(THREADS) : "memory");
}

// ---- the staged y stores of kDown: shared memory, then bulk copies shared -> global ----

__device__ __forceinline__ void st_shared_f32x2(unsigned addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void st_shared_b32(unsigned addr, unsigned v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
// Two consecutive elements of y (YOps<Y>::Pair) to shared memory.
template <typename Y>
__device__ __forceinline__ void st_shared_y2(unsigned addr, float a, float b) {
  if constexpr (YOps<Y>::kBytes == 4) {
    st_shared_f32x2(addr, a, b);
  } else {
    st_shared_b32(addr, YOps<Y>::pack(a, b));
  }
}

// Copies `bytes` (a multiple of 16) from shared memory at `src` to global memory at `dst` (both
// 16-byte aligned) by the copy engine, in this thread's current bulk group, with an L2 policy.
__device__ __forceinline__ void bulk_store(void* dst, unsigned src, unsigned bytes,
                                           unsigned long long policy) {
  asm volatile(
      "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(dst),
      "r"(src), "r"(bytes), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until this thread's bulk groups, all but the newest N, have read their shared memory
// (the source may be written again); their writes to global memory may still be in flight.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Waits until this thread's bulk groups are complete, their writes done.
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// The next tile of a persistent CTA, in order from `counter`, for the 128 threads of its producer
// warpgroup (thread `tid` of them; all call it, once per tile, in step). Thread 0 fetches, the
// others read the tile from shared memory: slots[0..1], two, as a slow thread may still read one
// while thread 0 fills the other. In a CTA pair (CLUSTER = 2), thread 0 of rank 0 fetches the
// pair's tile and writes it to mailbox slot `slot` (slots[2 + slot]) of rank 1, then arrives on
// rank 1's tile-ready barrier of that slot (a release at cluster scope). Thread 0 of rank 1 waits
// on it, copies the tile to its own slot and arrives on rank 0's tile-free barrier of the slot,
// which rank 0 waits on before it writes that mailbox slot again, two tiles later. tile_ready:
// the two tile-ready barriers, then the two tile-free ones.
template <int CLUSTER>
__device__ __forceinline__ int next_tile_in_order(int* counter, int* slots, unsigned tile_ready,
                                                  int iteration, int tid, int rank) {
  const unsigned tile_free = tile_ready + 2 * 8;
  int* mailbox = slots + 2;
  const int slot = iteration & 1;
  const unsigned round = unsigned(iteration >> 1);  // phase of this slot's barriers
  if (tid == 0) {
    if (CLUSTER == 1 || rank == 0) {
      const int tile = atomicAdd(counter, 1);
      slots[slot] = tile;
      if (CLUSTER == 2) {
        if (round > 0) mbarrier_wait_cluster(tile_free + 8 * slot, (round - 1) & 1);
        st_shared_remote(smem_address(mailbox + slot), 1, tile);
        mbarrier_arrive_remote(tile_ready + 8 * slot, 1);
      }
    } else {
      mbarrier_wait_cluster(tile_ready + 8 * slot, round & 1);
      slots[slot] = *static_cast<volatile int*>(mailbox + slot);
      mbarrier_arrive_remote(tile_free + 8 * slot, 0);
    }
  }
  named_barrier_sync<1, 128>();
  return slots[slot];
}

template <int REGS>
__device__ __forceinline__ void warpgroup_registers_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void warpgroup_registers_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

// wgmma.m64n256k16: as Wgmma<D>::wgmma_m64n128k16 with 128 accumulators per thread.
#define RT_MOE_ACC8(i)                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
// clang-format off
#define RT_MOE_WGMMA_M64N256K16(TYPE)                                                            \
  static __device__ __forceinline__ void wgmma_m64n256k16(float* d, unsigned long long desc_a,   \
                                                          unsigned long long desc_b,             \
                                                          int scale_d) {                         \
    asm volatile(                                                                                \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                              \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {"                          \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"                       \
      "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"                     \
      "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"                     \
      "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"                     \
      "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"                     \
      "%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,"                      \
      "%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,"                        \
      "%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"                              \
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"                                                       \
      : RT_MOE_ACC8(0), RT_MOE_ACC8(8), RT_MOE_ACC8(16), RT_MOE_ACC8(24), RT_MOE_ACC8(32),       \
        RT_MOE_ACC8(40), RT_MOE_ACC8(48), RT_MOE_ACC8(56), RT_MOE_ACC8(64), RT_MOE_ACC8(72),     \
        RT_MOE_ACC8(80), RT_MOE_ACC8(88), RT_MOE_ACC8(96), RT_MOE_ACC8(104), RT_MOE_ACC8(112),   \
        RT_MOE_ACC8(120)                                                                         \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                 \
  }
// clang-format on

// wgmma.m64n192k16: 96 accumulators per thread (three consumer warpgroups of 64 rows).
// clang-format off
#define RT_MOE_WGMMA_M64N192K16(TYPE)                                                            \
  static __device__ __forceinline__ void wgmma_m64n192k16(float* d, unsigned long long desc_a,   \
                                                          unsigned long long desc_b,             \
                                                          int scale_d) {                         \
    asm volatile(                                                                                \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                                               \
      "wgmma.mma_async.sync.aligned.m64n192k16.f32." TYPE "." TYPE " {"                          \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"                       \
      "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"                     \
      "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"                     \
      "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"                     \
      "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"                     \
      "%87,%88,%89,%90,%91,%92,%93,%94,%95"                                                      \
      "}, %96, %97, p, 1, 1, 0, 0;\n}\n"                                                         \
      : RT_MOE_ACC8(0), RT_MOE_ACC8(8), RT_MOE_ACC8(16), RT_MOE_ACC8(24), RT_MOE_ACC8(32),       \
        RT_MOE_ACC8(40), RT_MOE_ACC8(48), RT_MOE_ACC8(56), RT_MOE_ACC8(64), RT_MOE_ACC8(72),     \
        RT_MOE_ACC8(80), RT_MOE_ACC8(88)                                                         \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                 \
  }
// clang-format on

template <typename D>
struct Wgmma192;
template <>
struct Wgmma192<BF16> {
  RT_MOE_WGMMA_M64N192K16("bf16")
};
template <>
struct Wgmma192<F16> {
  RT_MOE_WGMMA_M64N192K16("f16")
};
#undef RT_MOE_WGMMA_M64N192K16

template <typename D>
struct Wgmma256;
template <>
struct Wgmma256<BF16> {
  RT_MOE_WGMMA_M64N256K16("bf16")
};
template <>
struct Wgmma256<F16> {
  RT_MOE_WGMMA_M64N256K16("f16")
};
#undef RT_MOE_WGMMA_M64N256K16
#undef RT_MOE_ACC8

// One warpgroup's MMAs of a 64-element K tile: rows of `a_smem`, BLOCK_N columns of `b_smem`.
template <typename D, int BLOCK_N>
__device__ __forceinline__ void warpgroup_mma_k64(float* acc, unsigned a_smem, unsigned b_smem,
                                                  bool accumulate) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    // k16 steps advance 32 bytes inside the swizzled 128-byte rows.
    const unsigned long long desc_a = smem_descriptor(a_smem + ks * 32);
    const unsigned long long desc_b = smem_descriptor(b_smem + ks * 32);
    const int scale_d = (accumulate || ks > 0) ? 1 : 0;
    if constexpr (BLOCK_N == 256) {
      Wgmma256<D>::wgmma_m64n256k16(acc, desc_a, desc_b, scale_d);
    } else if constexpr (BLOCK_N == 192) {
      Wgmma192<D>::wgmma_m64n192k16(acc, desc_a, desc_b, scale_d);
    } else {
      Wgmma<D>::wgmma_m64n128k16(acc, desc_a, desc_b, scale_d);
    }
  }
}

template <typename D, int H, int I, int E, int S, int K, int MODE, int CONSUMERS, int BLOCK_N,
          int STAGES, int CLUSTER, bool STAGED_Y = false, typename Y = float>
struct GroupedGemmSm90Ws {
  static constexpr int BLOCK_M = 64 * CONSUMERS;
  static constexpr int BLOCK_K = 64;
  static constexpr int kThreads = 128 * (CONSUMERS + 1);
  static constexpr int kMinBlocks = 1;  // one block per SM: a register cap for setmaxnreg
  static constexpr int kSlots = K + S;
  static constexpr int kReduce = MODE == kDown ? I : H;
  static constexpr int kTiles = kReduce / BLOCK_K;
  static constexpr int kOutCols = MODE == kGateUp ? BLOCK_N / 2 : BLOCK_N;  // per tile
  static constexpr int kColBlocks = ((MODE == kGateUp ? I : H) + kOutCols - 1) / kOutCols;
  static constexpr int kTileABytes = BLOCK_M * BLOCK_K * 2;
  static constexpr int kTileBBytes = BLOCK_N * BLOCK_K * 2;
  static constexpr int kStageBytes = kTileABytes + kTileBBytes;
  static constexpr int kHalfBBytes = kTileBBytes / 2;  // one TMA box: BLOCK_N / 2 rows
  // full and empty barriers; CTA pairs: two tile-ready and two tile-free barriers
  // (next_tile_in_order); the per-stage tile slots (TileSlot), two broadcast slots for the
  // producer, two mailbox slots.
  static __host__ __device__ constexpr int barrier_bytes(int stages) {
    return 2 * stages * 8 + 4 * 8 + stages * 16 + 16;
  }
  // kDown with STAGED_Y: y leaves through shared memory, by the copy engine (store_staged), from
  // a staging area of 16 rows a consumer warp, each half a tile's row (BLOCK_N / 2 elements of Y)
  // and 16 bytes of padding, so that a fragment store's 8 rows start 4 banks apart (fp32: 2
  // wavefronts a 256-byte warp store, fp16: 1 a 128-byte store, the least there is).
  static constexpr bool kStagedY = MODE == kDown && STAGED_Y;
  static constexpr int kYBytes = YOps<Y>::kBytes;
  static constexpr int kStagingRowBytes = BLOCK_N / 2 * kYBytes + 16;
  static constexpr int kStagingWarpBytes = 16 * kStagingRowBytes;
  static constexpr int kStagingBytes = kStagedY ? CONSUMERS * 4 * kStagingWarpBytes : 0;
  // The ring keeps as many of its STAGES stages as fit beside the staging (DeepSeek-V3's 128 x 256
  // tile: 3 of 4).
  static constexpr int kFitStages =
      (kMaxDynamicSmemSm90 - kStagingBytes - barrier_bytes(STAGES) - 1024) / kStageBytes;
  static constexpr int kStages = kStagedY && kFitStages < STAGES ? kFitStages : STAGES;
  static constexpr int kBarrierBytes = barrier_bytes(kStages);
  static constexpr int kSmemBytes =
      kStages * kStageBytes + kStagingBytes + kBarrierBytes + 1024;  // + alignment
  static constexpr int kAcc = BLOCK_N / 2;  // fp32 accumulators per consumer thread
  // Padding warpgroups multiply too (every tile full length) in kGateUp: see the top.
  static constexpr bool kEvenTiles = MODE == kGateUp;
  // Gathered A rows (kGateUp): 8 chunks of 16 bytes per 128-byte row, 128 producer threads.
  static constexpr int kRowsPerProducer = BLOCK_M * 8 / 128;
  // Register split after setmaxnreg: two consumers 128 x 56 + 256 x 224, three consumers
  // 128 x 40 + 384 x 152, both <= 64 K registers.
  static constexpr int kProducerRegs = CONSUMERS == 3 ? 40 : 56;
  static constexpr int kConsumerRegs = CONSUMERS == 3 ? 152 : 224;

  static_assert(MODE == kGateUp || MODE == kDown, "the expert GEMMs only");
  static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "64, 128 or 192 rows per block");
  static_assert(BLOCK_N == 128 || BLOCK_N == 192 || BLOCK_N == 256,
                "one wgmma n128, n192 or n256 per k16 step");
  static_assert(CONSUMERS < 3 || BLOCK_N <= 192, "three consumers have 152 registers a thread");
  static_assert(H % BLOCK_K == 0 && I % BLOCK_K == 0, "K tiles must not straddle experts");
  static_assert(kStages >= 2, "a ring of at least two stages");
  // (Unstaged, the host checks the ring's size; the swapped kernel's WeightLoader is no ring.)
  static_assert(!kStagedY || kSmemBytes <= kMaxDynamicSmemSm90,
                "the ring and the staging fit an SM");
  static_assert(CLUSTER == 1 || CLUSTER == 2, "pairs of row blocks at most");
  static_assert(kTileABytes % 1024 == 0 && kTileBBytes % 1024 == 0,
                "tiles start 1024-byte aligned for the 128-byte swizzle");

  // Half `half` of the B tile (BLOCK_N / 2 rows) of an expert's weights for column block
  // `n_block` at K tile `k_tile`: gate (0) or up (1) rows in kGateUp, the first or second half of
  // the down rows in kDown. Multicast to both CTAs of the cluster when `multicast`.
  static __device__ __forceinline__ void load_b_half(const GemmTmaParams& p, int expert,
                                                     int n_block, int k_tile, int half,
                                                     unsigned b_smem, unsigned bar,
                                                     bool multicast) {
    const bool routed = expert < E;
    const int chunk = expert - E;  // shared expert chunk, when !routed
    const TensorMap* map;
    int x = k_tile * BLOCK_K, y;
    if (MODE == kGateUp) {
      map = (routed ? p.b_routed : p.b_shared) + half;
      y = (routed ? expert : chunk) * I + n_block * (BLOCK_N / 2);
    } else if (routed) {
      map = &p.b_routed[0];
      y = expert * H + n_block * BLOCK_N + half * (BLOCK_N / 2);
    } else {
      // Chunk j of the shared expert is columns [j I, (j + 1) I) of shared_down [H, S I].
      map = &p.b_shared[0];
      x += chunk * I;
      y = n_block * BLOCK_N + half * (BLOCK_N / 2);
    }
    const unsigned dst = b_smem + half * kHalfBBytes;
    if (multicast) {
      tma_load_2d_multicast(dst, map, x, y, bar, (unsigned short)0x3);
    } else {
      tma_load_2d(dst, map, x, y, bar);
    }
  }

  // The work of this CTA in tile `tile` of its cluster's sequence.
  struct Tile {
    int m_block, n_block, expert;
    bool exists;     // m_block < num_blocks (an odd last block's partner does not)
    bool multicast;  // both row blocks of the cluster belong to `expert`
  };
  // What the consumers need of a tile, decoded by the producer (which walks the tile order anyway)
  // and passed with the tile's first stage, so that the consumers' tile start has no global load
  // and no division on its path: the tile index (-1: no more work), its row and column block, and
  // bit c set when consumer warpgroup c has rows to compute (its first row is no padding; padding
  // rows are the tail of an expert's range, so all 64 are padding when the first is).
  struct TileSlot {
    int tile, m_block, n_block, active;
  };

  // In bands of row blocks (tile_order.h); CTA pairs in bands of units of two row blocks, rank r
  // taking row block 2 j + r of unit j.
  static __device__ __forceinline__ Tile tile_of(const GemmParams& g, int tile, int num_blocks,
                                                 int rank, int band) {
    const int units = (num_blocks + CLUSTER - 1) / CLUSTER;
    const BandTile b = band_tile(tile, kColBlocks, band, units, g.block_expert, g.padded_offsets,
                                 BLOCK_M, CLUSTER);
    Tile t;
    t.multicast = false;
    t.n_block = b.n_block;
    if (CLUSTER == 1) {
      t.m_block = b.m_block;
      t.expert = b.expert;
      t.exists = true;
      return t;
    }
    const int first = b.m_block;
    t.m_block = first + rank;
    t.exists = t.m_block < num_blocks;
    const int first_expert = b.expert;
    t.expert = t.exists ? g.block_expert[t.m_block] : first_expert;
    const int second_expert = first + 1 < num_blocks ? g.block_expert[first + 1] : first_expert;
    t.multicast = first_expert == second_expert;
    return t;
  }

  static __device__ void produce(const GemmTmaParams& p, unsigned smem_base, unsigned full,
                                 unsigned empty, unsigned tile_ready, TileSlot* tile_slots,
                                 int* broadcast, int tiles, int num_blocks, int rank) {
    const GemmParams& g = p.gemm;
    const int band = p.band;
    const int tid = threadIdx.x - 128 * CONSUMERS;
    const int chunk = tid % 8;
    const unsigned short* x = reinterpret_cast<const unsigned short*>(g.a);
    const unsigned tx_bytes = MODE == kGateUp ? kTileBBytes : kTileABytes + kTileBBytes;
    int stage = 0;
    unsigned phase = 0;
    for (int iteration = 0;; ++iteration) {
      const int tile =
          next_tile_in_order<CLUSTER>(p.tile_counter, broadcast, tile_ready, iteration, tid, rank);
      if (tile >= tiles) {
        // No more work: a stage that carries -1 instead of data tells the consumers.
        mbarrier_wait(empty + 8 * stage, phase ^ 1);
        // The same arrivals as a stage of data: every gathering thread, and thread 0 for the TMA.
        if (tid == 0) tile_slots[stage].tile = -1;
        if (MODE == kGateUp || tid == 0) mbarrier_arrive(full + 8 * stage);
        if (MODE == kGateUp && tid == 0) mbarrier_arrive(full + 8 * stage);
        break;
      }
      const Tile t = tile_of(g, tile, num_blocks, rank, band);
      const int m0 = t.m_block * BLOCK_M;
      const unsigned short* rows[kRowsPerProducer];
      if (MODE == kGateUp) {
#pragma unroll
        for (int j = 0; j < kRowsPerProducer; ++j) {
          const int pair = t.exists ? g.sorted_rows[m0 + tid / 8 + 16 * j] : -1;
          rows[j] = pair >= 0 ? x + (long long)(pair / kSlots) * H + chunk * 8 : nullptr;
        }
      }
      // Thread 0's rows include each consumer warpgroup's first (row 64 c = tid / 8 + 16 j for
      // j = 4 c); in kDown it reads them.
      int active = 0;
      if (tid == 0 && t.exists) {
#pragma unroll
        for (int c = 0; c < CONSUMERS; ++c) {
          const bool rows_there =
              MODE == kGateUp ? rows[4 * c] != nullptr : g.sorted_rows[m0 + 64 * c] >= 0;
          active |= rows_there ? 1 << c : 0;
        }
      }
      for (int kt = 0; kt < kTiles; ++kt) {
        mbarrier_wait(empty + 8 * stage, phase ^ 1);
        const unsigned a_smem = smem_base + stage * kStageBytes;
        const unsigned b_smem = a_smem + kTileABytes;
        const unsigned bar = full + 8 * stage;
        if (tid == 0) {
          if (kt == 0) {  // published by the arrival below
            tile_slots[stage] = {tile, t.m_block, t.n_block, active};
          }
          // The whole B tile lands here: half of it from the other CTA when multicast.
          mbarrier_arrive_expect_tx(bar, tx_bytes);
          if (t.multicast) {
            load_b_half(p, t.expert, t.n_block, kt, rank, b_smem, bar, true);
          } else {
            load_b_half(p, t.expert, t.n_block, kt, 0, b_smem, bar, false);
            load_b_half(p, t.expert, t.n_block, kt, 1, b_smem, bar, false);
          }
          if (MODE == kDown) tma_load_2d(a_smem, &p.a, kt * BLOCK_K, m0, bar);
        }
        if (MODE == kGateUp) {
#pragma unroll
          for (int j = 0; j < kRowsPerProducer; ++j) {
            const int r = tid / 8 + 16 * j;
            const bool ok = rows[j] != nullptr;
            cp_async_16(a_smem + swizzle_128b(r, chunk), ok ? rows[j] + kt * BLOCK_K : x, ok);
          }
          mbarrier_arrive_on_cp_async(bar);
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    if (MODE == kGateUp) cp_async_wait<0>();
  }

  static __device__ void consume(const GemmTmaParams& p, unsigned smem_base, unsigned full,
                                 unsigned empty, const TileSlot* tile_slots, unsigned staging,
                                 int rank) {
    const GemmParams& g = p.gemm;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int group = warp / 4, warp_in_group = warp % 4;
    const unsigned long long y_policy = kStagedY ? l2_evict_first_policy() : 0ull;
    int stage = 0;
    unsigned phase = 0;
    float acc[kAcc];
    // A stage is free again once every consumer warp of the cluster has released it: lane 0
    // arrives for its warp, after the warp barrier (the stage's data is read by wgmma only).
    auto release_stage = [&](int s) {
      __syncwarp();
      if (lane != 0) return;
      mbarrier_arrive(empty + 8 * s);
      if (CLUSTER == 2) mbarrier_arrive_remote_cta(empty + 8 * s, rank ^ 1);
    };
    for (;;) {
      // The tile comes with its first stage.
      mbarrier_wait(full + 8 * stage, phase);
      // Lane 0, the lane that releases the stage, reads its tile slot and passes it on: a read
      // by lanes 1-31 would come before the producer rewrites the slot only through lane 0's
      // arrival, an order that racecheck does not see (it reported a WAR hazard on the slot).
      TileSlot slot{};
      if (lane == 0) slot = tile_slots[stage];
      if (__shfl_sync(0xffffffffu, slot.tile, 0) < 0) break;
      const int n_block = __shfl_sync(0xffffffffu, slot.n_block, 0);
      const int m0 = __shfl_sync(0xffffffffu, slot.m_block, 0) * BLOCK_M + group * 64;
      const bool active = (__shfl_sync(0xffffffffu, slot.active, 0) >> group & 1) != 0;
      // kDown: this thread's two rows' pairs, loaded now, their weights after the second K
      // tile's MMAs are issued (the first's with one K tile), so that neither load waits in the
      // epilogue.
      const int row = m0 + warp_in_group * 16 + lane / 4;
      int pairs[2] = {-1, -1};
      float weights[2] = {0.f, 0.f};
      if (MODE == kDown && active) {
        pairs[0] = g.sorted_rows[row];
        pairs[1] = g.sorted_rows[row + 8];
      }
      int release = -1;
      for (int kt = 0; kt < kTiles; ++kt) {
        if (kt > 0) mbarrier_wait(full + 8 * stage, phase);
        if (active || kEvenTiles) {
          // The gathered rows were written by cp.async (generic proxy); wgmma reads them
          // through the async proxy.
          if (MODE == kGateUp) fence_proxy_async();
          const unsigned a_smem = smem_base + stage * kStageBytes + group * 64 * 128;
          const unsigned b_smem = smem_base + stage * kStageBytes + kTileABytes;
          wgmma_fence();
          warpgroup_mma_k64<D, BLOCK_N>(acc, a_smem, b_smem, kt > 0);
          wgmma_commit();
          wgmma_wait<1>();  // the batch of the previous stage retired: release that stage
          if (MODE == kDown && kt == (kTiles > 1 ? 1 : 0)) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if (pairs[h] >= 0) weights[h] = pair_weight<K, kSlots, Y>(g, pairs[h]);
            }
          }
        }
        if (release >= 0) release_stage(release);
        release = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
      release_stage(release);
      if (active) {
        if constexpr (kStagedY) {
          store_staged(g, acc, pairs, weights, n_block, lane, staging + warp * kStagingWarpBytes,
                       y_policy);
        } else {
          store(g, acc, row, pairs, weights, n_block, lane);
        }
      }
    }
    // The staging is read and y written before the block leaves.
    if (kStagedY) bulk_wait_all();
  }

  // kDown with STAGED_Y: the 16 rows of this warp (a lane's `row` and `row` + 8 of store()) go
  // to its staging area, times their routing weights, half a tile's columns at a time; lanes
  // 0-15 then copy one row each (lane l: the warp's row l) to y at its pair's row, 512 bytes
  // (fp32; fp16 256) for the 128 x 256 tile, by the copy engine, evict-first in L2 as store()'s
  // __stcs. Before a half is written, the copies of the half before (this tile's first, or the
  // previous tile's second) must have read the staging; the second half's writes to y overlap the
  // next tile's MMAs. (store() leaves its y through the LSU, 8 rows of 32 bytes a warp store, and
  // the epilogue waits there: docs/PERF.md 18d.)
  static __device__ __forceinline__ void store_staged(const GemmParams& g, const float* acc,
                                                      const int (&pairs)[2],
                                                      const float (&weights)[2], int n_block,
                                                      int lane, unsigned staging,
                                                      unsigned long long policy) {
    constexpr int kHalf = BLOCK_N / 2;
    const int from = (lane % 8) * 4;  // a lane of the quad that holds row `lane` % 8 (+ 8)
    const int pair0 = __shfl_sync(0xffffffffu, pairs[0], from);
    const int pair1 = __shfl_sync(0xffffffffu, pairs[1], from);
    const int pair = lane < 8 ? pair0 : lane < 16 ? pair1 : -1;
    const unsigned fragment = staging + (lane / 4) * kStagingRowBytes + (lane % 4) * 2 * kYBytes;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col = n_block * BLOCK_N + half * kHalf;
      const int bytes = (H - col < kHalf ? H - col : kHalf) * kYBytes;  // <= 0: past H, nothing
      bulk_wait_read<0>();
      __syncwarp();
      if (bytes > 0) {
#pragma unroll
        for (int j = 0; j < kHalf / 8; ++j) {
          const int a = 4 * (j + half * (kHalf / 8));
          st_shared_y2<Y>(fragment + j * 8 * kYBytes, acc[a] * weights[0], acc[a + 1] * weights[0]);
          st_shared_y2<Y>(fragment + 8 * kStagingRowBytes + j * 8 * kYBytes,
                          acc[a + 2] * weights[1], acc[a + 3] * weights[1]);
        }
        fence_proxy_async();  // these writes, before the copy engine's reads
      }
      __syncwarp();
      if (pair >= 0 && bytes > 0) {
        bulk_store(reinterpret_cast<typename YOps<Y>::Elem*>(g.out) + (long long)pair * H + col,
                   staging + lane * kStagingRowBytes, unsigned(bytes), policy);
        bulk_commit();
      }
    }
  }

  // acc[4 j + v]: row `row` (+ 8 for v >= 2), column 8 j + 2 (lane % 4) + (v & 1) of the tile;
  // kDown: pairs[h] and weights[h] of row `row` + 8 h.
  static __device__ __forceinline__ void store(const GemmParams& g, const float* acc, int row,
                                               const int (&pairs)[2], const float (&weights)[2],
                                               int n_block, int lane) {
    // One pointer a row, then constant offsets (j * 8 columns), so that a store is its two FMULs
    // or its SiLU and the store itself: computing each store's address from (row, col), with a
    // 64-bit signed halving and a bounds branch a store, took ~12 instructions each (SASS).
    // Every column is inside the output when its width is a multiple of the tile's (DeepSeek-V3,
    // gpumode: no check at all), else when this is not the last column block.
    constexpr int kWidth = MODE == kGateUp ? I : H;
    const int col0 = n_block * kOutCols + (lane % 4) * 2;  // even; I and H are multiples of 64
    const bool whole = kWidth % kOutCols == 0 || (n_block + 1) * kOutCols <= kWidth;
#pragma unroll
    for (int half = 0; half < 2; ++half, row += 8) {
      if (MODE == kGateUp) {
        unsigned* out =
            reinterpret_cast<unsigned*>(g.out) + (long long)row * (I / 2) + (unsigned(col0) >> 1);
#pragma unroll
        for (int j = 0; j < BLOCK_N / 16; ++j) {
          if (whole || col0 + j * 8 < I) {
            const int gi = 4 * j + half * 2, ui = 4 * (j + BLOCK_N / 16) + half * 2;
            const float h0 = silu_mul(acc[gi], acc[ui]);
            const float h1 = silu_mul(acc[gi + 1], acc[ui + 1]);
            out[j * 4] = DTypeOps<D>::pack2(h0, h1);
          }
        }
      } else {
        const int pair = pairs[half];
        if (pair >= 0) {
          const float weight = weights[half];
          typename YOps<Y>::Pair* y = reinterpret_cast<typename YOps<Y>::Pair*>(g.out) +
                                      (long long)pair * (H / 2) + (unsigned(col0) >> 1);
#pragma unroll
          for (int j = 0; j < BLOCK_N / 8; ++j) {
            if (whole || col0 + j * 8 < H) {
              // Streaming (evict-first): y is read once, by the combine, and should not push
              // the weight and h tiles that other blocks still read out of L2. (16-byte stores
              // after an exchange between lane pairs measured 2% slower end to end at T = 16384
              // on the H200, the down GEMM 4% slower by ncu: docs/PERF.md.)
              __stcs(&y[j * 4], YOps<Y>::pack(acc[4 * j + half * 2] * weight,
                                              acc[4 * j + half * 2 + 1] * weight));
            }
          }
        }
      }
    }
  }

  static __device__ void run(const GemmTmaParams& p) {
    // Launched programmatically after the scatter kernel: nothing it wrote is read before this.
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    grid_dependency_wait();
    extern __shared__ __align__(1024) unsigned char smem[];
    const unsigned smem_base = (smem_address(smem) + 1023u) & ~1023u;
    const unsigned staging = smem_base + kStages * kStageBytes;  // kStagedY
    const unsigned full = staging + kStagingBytes;
    const unsigned empty = full + 8 * kStages;
    const unsigned tile_ready = empty + 8 * kStages;  // then tile_free, 2 x 8 bytes each
    TileSlot* tile_slots =
        reinterpret_cast<TileSlot*>(smem + (tile_ready + 4 * 8 - smem_address(smem)));
    int* broadcast = reinterpret_cast<int*>(tile_slots + kStages);  // then the mailbox, 2 ints each
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) {
        mbarrier_init(full + 8 * s, MODE == kGateUp ? 128 + 1 : 1);
        mbarrier_init(empty + 8 * s, CLUSTER * CONSUMERS * 4);
      }
      for (int b = 0; b < 4; ++b) mbarrier_init(tile_ready + 8 * b, 1);  // tile-ready, tile-free
      mbarrier_init_fence();
    }
    // The barriers are initialized before any thread of the cluster uses them.
    if (CLUSTER == 2) {
      cluster_sync();
    } else {
      __syncthreads();
    }
    const int rank = CLUSTER == 2 ? int(cluster_rank()) : 0;
    const int num_blocks = *p.gemm.num_blocks;
    const int tiles = (num_blocks + CLUSTER - 1) / CLUSTER * kColBlocks;  // units x columns
    if (threadIdx.x >= 128 * CONSUMERS) {
      if (CONSUMERS >= 2) warpgroup_registers_dec<kProducerRegs>();
      produce(p, smem_base, full, empty, tile_ready, tile_slots, broadcast, tiles, num_blocks,
              rank);
    } else {
      if (CONSUMERS >= 2) warpgroup_registers_inc<kConsumerRegs>();
      consume(p, smem_base, full, empty, tile_slots, staging, rank);
    }
    // Neither CTA leaves while the other may still write its shared memory or arrive on its
    // barriers.
    if (CLUSTER == 2) cluster_sync();
  }
};

}  // namespace rt_moe
