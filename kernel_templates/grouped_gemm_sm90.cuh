// Grouped GEMM over the experts' row blocks with wgmma (sm_90a), the Hopper path.
//
// Tiling: a block computes BLOCK_M = 64 x WG_M rows by BLOCK_N columns of one expert, K in steps
// of 64, with WG_M x WG_N warpgroups. Warpgroup (gm, gn) issues wgmma.m64n128k16 on rows
// [64 gm, 64 gm + 64) against its slice of BLOCK_N / WG_N columns (one instruction per 128 columns
// per k16 step), A and B read from shared memory through descriptors, fp32 accumulators in
// registers (BLOCK_N / WG_N / 2 per thread).
// Pipeline: a STAGES-deep ring filled by cp.async from all threads (A rows are gathered through
// sorted_rows, which the tensor-copy engine cannot do on Hopper), with a prefetch distance of
// STAGES - 2 so that one wgmma batch stays in flight while the next is issued: iteration kt waits
// for tile kt, fences the async proxy, syncs, refills the stage of tile kt - 2 (whose wgmma batch
// every warpgroup has retired), issues tile kt's wgmmas and retires batch kt - 1.
// Shared memory rows are 128 bytes with 16-byte chunks XOR-swizzled by (row % 8) from 1024-byte
// aligned tiles: exactly the 128-byte swizzle wgmma's K-major descriptors expect.
//
// Modes as in grouped_gemm_sm80.cuh: kGateUp (each warpgroup's slice of B rows is half gate rows,
// half the up rows of the same columns, so a thread holds g and u of each of its columns;
// h = SiLU(g) * u, BLOCK_N / 2 columns per block), kDown (y, fp32 or scaled fp16 (Y: YOps),
// scaled by the routing weight, written at the pair's row) and kRouter (the gating GEMM of many
// tokens: A = x rows 0..T-1, B = the router's E rows, fp32 logits, part blockIdx.z of gridDim.z of
// the K tiles).
#pragma once

#include "common.cuh"
#include "tile_loader.cuh"

namespace rt_moe {

template <typename D>
struct Wgmma;

// wgmma.m64n128k16 with fp32 accumulators d[0..63], A and B from shared memory through
// descriptors; scale_d = 0 overwrites d, 1 accumulates. TYPE is the PTX type of A and B.
// clang-format off
#define RT_MOE_WGMMA_M64N128K16(TYPE)                                                           \
  static __device__ __forceinline__ void wgmma_m64n128k16(float* d, unsigned long long desc_a,  \
                                                          unsigned long long desc_b,            \
                                                          int scale_d) {                        \
    asm volatile(                                                                               \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                              \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                         \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                  \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                        \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                        \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"                         \
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                        \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),     \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),              \
        "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),           \
        "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),           \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),           \
        "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),           \
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),           \
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),           \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),           \
        "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),           \
        "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                   \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                \
  }
// clang-format on

template <>
struct Wgmma<BF16> {
  RT_MOE_WGMMA_M64N128K16("bf16")
};

template <>
struct Wgmma<F16> {
  RT_MOE_WGMMA_M64N128K16("f16")
};

#undef RT_MOE_WGMMA_M64N128K16

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy writes to shared memory (cp.async) before later reads by the
// async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The same between this thread's view of global memory and its later async-proxy (TMA) reads.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Shared memory descriptor of a K-major tile with the 128-byte swizzle: start address, stride of
// 1024 bytes between groups of 8 rows (the leading offset is unused for this layout).
__device__ __forceinline__ unsigned long long smem_descriptor(unsigned address) {
  unsigned long long desc = 0;
  desc |= (unsigned long long)((address & 0x3FFFF) >> 4);
  desc |= (unsigned long long)1 << 16;            // leading byte offset (ignored): 16 B
  desc |= (unsigned long long)(1024 >> 4) << 32;  // stride byte offset: 8 rows x 128 B
  desc |= (unsigned long long)1 << 62;            // 128-byte swizzle
  return desc;
}

template <typename D, int H, int I, int E, int S, int K, int MODE, int WG_M, int WG_N, int BLOCK_N,
          int STAGES, typename Y = float>
struct GroupedGemmSm90 {
  static constexpr int BLOCK_M = 64 * WG_M;
  static constexpr int BLOCK_K = 64;
  static constexpr int kThreads = WG_M * WG_N * 128;
  static constexpr int kSlice = BLOCK_N / WG_N;  // B rows (output columns) of one warpgroup
  static constexpr int kSlots = K + S;
  using Loader = TileLoader<H, I, E, kSlots, MODE, BLOCK_M, BLOCK_N, kThreads, kSlice>;
  static constexpr int kTileABytes = Loader::kTileABytes;
  static constexpr int kTileBBytes = Loader::kTileBBytes;
  static constexpr int kStageBytes = kTileABytes + kTileBBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes + 1024;  // + alignment slack
  static constexpr int kAcc = kSlice / 2;                         // fp32 accumulators per thread
  static constexpr int kTiles = Loader::kTiles;

  static_assert(MODE == kGateUp || MODE == kDown || MODE == kRouter, "a mode of tile_loader.cuh");
  static_assert(kSlice % 128 == 0, "each warpgroup's columns are a multiple of the n128 wgmma");
  static_assert(STAGES >= 3, "prefetch distance STAGES - 2 needs at least three stages");
  static_assert(kTileABytes % 1024 == 0 && kTileBBytes % 1024 == 0,
                "tiles start 1024-byte aligned for the 128-byte swizzle");

  static __device__ void run(const GemmParams& p) {
    if (MODE == kRouter) {
      // The forward's first kernel: it waits before it triggers, as RouterLogits::run says.
      grid_dependency_wait();
      grid_dependency_trigger();
    } else {
      grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
      grid_dependency_wait();
    }
    extern __shared__ __align__(1024) unsigned char smem[];
    const int block_m = blockIdx.x;
    const int m0 = block_m * BLOCK_M;
    if (MODE == kRouter ? m0 >= p.tokens : block_m >= *p.num_blocks) return;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warpgroup = warp / 4, warp_in_group = warp % 4;
    const int wg_m = warpgroup / WG_N, wg_n = warpgroup % WG_N;
    bool once;
    const ExpertWeights w = block_weights<E, H, MODE>(p, block_m, BLOCK_M, once);
    const Loader loader(p, w, m0, blockIdx.y, tid, once);
    // K tiles [k0, k0 + tiles): all of them, or the router's part blockIdx.z of gridDim.z.
    const int k0 = MODE == kRouter ? int(blockIdx.z * kTiles / gridDim.z) : 0;
    const int tiles = MODE == kRouter ? int((blockIdx.z + 1) * kTiles / gridDim.z) - k0 : kTiles;
    const unsigned smem_base = (smem_address(smem) + 1023u) & ~1023u;
    auto load_stage = [&](int stage, int k_tile) {
      const unsigned a_smem = smem_base + stage * kStageBytes;
      loader.load(a_smem, a_smem + kTileABytes, k_tile);
    };

    float acc[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
      if (s < tiles) load_stage(s, k0 + s);
      cp_async_commit();
    }
    for (int kt = 0; kt < tiles; ++kt) {
      cp_async_wait<STAGES - 3>();  // tile kt landed (this thread's copies)
      fence_proxy_async();
      __syncthreads();  // everyone's copies of tile kt, and batch kt - 2 retired everywhere
      if (kt + STAGES - 2 < tiles) load_stage((kt + STAGES - 2) % STAGES, k0 + kt + STAGES - 2);
      cp_async_commit();

      const unsigned a_smem = smem_base + (kt % STAGES) * kStageBytes + wg_m * 64 * 128;
      const unsigned b_smem =
          smem_base + (kt % STAGES) * kStageBytes + kTileABytes + wg_n * kSlice * 128;
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < BLOCK_K / 16; ++ks) {
        // k16 steps advance 32 bytes inside the swizzled 128-byte rows.
        const unsigned long long desc_a = smem_descriptor(a_smem + ks * 32);
#pragma unroll
        for (int nh = 0; nh < kSlice / 128; ++nh) {
          const unsigned long long desc_b = smem_descriptor(b_smem + nh * 128 * 128 + ks * 32);
          Wgmma<D>::wgmma_m64n128k16(acc + nh * 64, desc_a, desc_b, (kt > 0 || ks > 0) ? 1 : 0);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
    cp_async_wait<0>();

    // Epilogue. acc[4 j + v]: row 16 * warp_in_group + lane / 4 (+ 8 for v >= 2) of the
    // warpgroup's 64, column 8 j + 2 (lane % 4) + (v & 1) of the warpgroup's slice.
    unsigned* out = reinterpret_cast<unsigned*>(p.out);
    typename YOps<Y>::Pair* y = reinterpret_cast<typename YOps<Y>::Pair*>(p.out);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + wg_m * 64 + warp_in_group * 16 + lane / 4 + half * 8;
      if (MODE == kGateUp) {
#pragma unroll
        for (int j = 0; j < kSlice / 16; ++j) {
          const int col = blockIdx.y * (BLOCK_N / 2) + wg_n * (kSlice / 2) + j * 8 + (lane % 4) * 2;
          if (col < I) {
            const int g = 4 * j + half * 2, u = 4 * (j + kSlice / 16) + half * 2;
            float h0 = silu_mul(acc[g], acc[u]);
            float h1 = silu_mul(acc[g + 1], acc[u + 1]);
            out[((long long)row * I + col) / 2] = DTypeOps<D>::pack2(h0, h1);
          }
        }
      } else if (MODE == kRouter) {
        // Part blockIdx.z's logits: rounded to the dtype when p.round_logits (one part).
        float* logits = reinterpret_cast<float*>(p.out) + (long long)blockIdx.z * p.tokens * E;
        if (row < p.tokens) {
#pragma unroll
          for (int j = 0; j < kSlice / 8; ++j) {
            const int col = blockIdx.y * BLOCK_N + wg_n * kSlice + j * 8 + (lane % 4) * 2;
            float l0 = acc[4 * j + half * 2], l1 = acc[4 * j + half * 2 + 1];
            if (p.round_logits) {
              l0 = round_to<D>(l0);
              l1 = round_to<D>(l1);
            }
            if (E % 2 == 0 && col < E) {  // col is even: an 8-byte aligned pair
              *reinterpret_cast<float2*>(logits + (long long)row * E + col) = make_float2(l0, l1);
            } else {
              if (col < E) logits[(long long)row * E + col] = l0;
              if (col + 1 < E) logits[(long long)row * E + col + 1] = l1;
            }
          }
        }
      } else {
        const int pair = p.sorted_rows[row];
        if (pair >= 0) {
          const float weight = pair_weight<K, kSlots, Y>(p, pair);
#pragma unroll
          for (int j = 0; j < kSlice / 8; ++j) {
            const int col = blockIdx.y * BLOCK_N + wg_n * kSlice + j * 8 + (lane % 4) * 2;
            if (col < H) {
              y[((long long)pair * H + col) / 2] =
                  YOps<Y>::pack(acc[4 * j + half * 2] * weight, acc[4 * j + half * 2 + 1] * weight);
            }
          }
        }
      }
    }
  }
};

}  // namespace rt_moe
