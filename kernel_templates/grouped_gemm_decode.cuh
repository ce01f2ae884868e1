// The decode forward's two expert GEMMs in one kernel (mma.sync tiles of grouped_gemm_sm80.cuh),
// so that the weights stream as one read: on the H200 one read kernel over 792 MiB streamed at
// 98-99% of the 4 GiB read rate, two kernels of 528 and 264 MiB at 83-87% (docs/PERF.md 9d), and
// DeepSeek-V3 at T = 1 reads 792 MB.
//
// Work items, in ticket order (a block takes one ticket from a counter, zero when the forward
// starts, and does that item):
//   1. the shared expert's gate/up tiles, 2. its down tiles, 3. the routed experts' gate/up tiles,
//      4. their down tiles; each group row block by row block, column blocks fastest.
//   With SHARED_DOWN_LAST: 1, 3, 2, 4, so that the shared expert's down tiles do not hold 112
//   slots (DeepSeek-V3 at T = 1) while they wait for its gate/up tiles; they wait for the
//   routing instead, as their tickets follow the routed gate/up tiles'.
//   With DOWN_PARTS = 2, each routed down tile is two items, its K halves (consecutive
//   tickets), which add their partial sums to y with fp32 atomics: the last wave holds items of
//   half the bytes, so it finishes less raggedly. Each routed gate/up tile (m, n) first zeroes
//   its share (columns [n H / kGateUpCols, (n + 1) H / kGateUpCols)) of y's rows of row block
//   m, published with its count, so the halves add onto zeros and the sum is the same in either
//   order.
//   With SHARED_PARTS > 1, each of the shared expert's gate/up tiles is that many items, its K
//   parts (consecutive tickets), the last of them to finish adding their fp32 partial sums in
//   part order and writing h (GroupedGemmSm80::tile). At DeepSeek-V3 T = 1 the shared expert
//   has 64 gate/up tiles, and until the routing ends (~8-9 us into the forward) they are all
//   that can stream weights while the other ~200 resident blocks wait (docs/PERF.md 32f, 41a):
//   as 2 parts (the default there, 45a), 128 items stream from the start.
// The shared expert's rows do not depend on the routing (every token, in token order: a table of
// its pairs written at plan time, its own h rows), so items 1 and 2 run before the dependency
// wait, while the routing kernels still run; items 3 and 4 wait for them.
//   - gate/up: GroupedGemmSm80<kGateUp>::tile, then every thread fences its h stores and the
//     block adds one to its row block's count of finished gate/up tiles;
//   - down: thread 0 waits (acquire) until its row block's count reaches the gate/up column
//     blocks, then the block runs GroupedGemmSm80<kDown>::tile, which reads h through L2
//     (cp.async.cg).
// No deadlock: a block takes its ticket only once it runs, so every gate/up ticket below a
// waiting down ticket belongs to a block that runs or ran, and gate/up items wait for nothing
// but the routing kernels, which never wait for this one.
#pragma once

#include "grouped_gemm_sm80.cuh"

namespace rt_moe {

// BLOCK_K: 64, or 128 for stages of 256 bytes of each weight row (GroupedGemmSm80's wide stages).
template <typename D, int H, int I, int E, int S, int K, int BLOCK_N, int BLOCK_K, int WARPS_N,
          int STAGES, bool SHARED_DOWN_LAST, int DOWN_PARTS, int SHARED_PARTS, typename Y = float>
struct GroupedGemmDecode {
  using GateUp =
      GroupedGemmSm80<D, H, I, E, S, K, kGateUp, 16, BLOCK_N, BLOCK_K, 1, WARPS_N, STAGES>;
  using Down =
      GroupedGemmSm80<D, H, I, E, S, K, kDown, 16, BLOCK_N, BLOCK_K, 1, WARPS_N, STAGES, Y>;
  static constexpr int kThreads = GateUp::kThreads;
  static constexpr int kSmemBytes =
      GateUp::kSmemBytes > Down::kSmemBytes ? GateUp::kSmemBytes : Down::kSmemBytes;
  static constexpr int kGateUpCols = (I + BLOCK_N / 2 - 1) / (BLOCK_N / 2);
  static constexpr int kDownCols = (H + BLOCK_N - 1) / BLOCK_N;
  static constexpr int kSlots = K + S;
  static_assert(GateUp::kThreads == Down::kThreads, "one block size for both GEMMs");
  static_assert(DOWN_PARTS == 1 || DOWN_PARTS == 2, "down tiles whole or in two K halves");
  static_assert(DOWN_PARTS == 1 || YOps<Y>::kBytes == 4, "K halves add into fp32 y (atomics)");
  static_assert(BLOCK_N >= 32 && BLOCK_N <= 128, "the workspace's shared counts and partials");
  static_assert(SHARED_PARTS >= 1 && SHARED_PARTS <= kMaxSharedParts,
                "the shared gate/up tiles whole or in up to kMaxSharedParts K parts");

  // Zeroes columns [n H / kGateUpCols, (n + 1) H / kGateUpCols) of the y rows of row block m's
  // pairs (DOWN_PARTS = 2).
  static __device__ __forceinline__ void zero_y(const GemmParams& down, int m, int n) {
    const int c0 = n * H / kGateUpCols, cols = (n + 1) * H / kGateUpCols - c0;
    float* y = static_cast<float*>(down.out);
    for (int i = threadIdx.x; i < 16 * cols; i += kThreads) {
      const int pair = down.sorted_rows[m * 16 + i / cols];
      if (pair >= 0 && pair / kSlots < down.tokens) y[(long long)pair * H + c0 + i % cols] = 0.f;
    }
  }

  // The tile (row block m, column block n) of GEMM `Gemm`, or its K part `part` of PARTS (down:
  // halves; gate/up: parts meeting through `partials` and `part_count`, GroupedGemmSm80::tile):
  // gate/up tiles count themselves in done[m] once written, down tiles wait for done[m] ==
  // kGateUpCols. ZERO_Y: a gate/up tile zeroes its share of the y rows of `down` first.
  template <typename Gemm, bool GATE_UP, int PARTS = 1, bool ZERO_Y = false>
  static __device__ __forceinline__ void item(const GemmParams& g, int m, int n, int* done,
                                              unsigned char* smem, int part = 0,
                                              const GemmParams* down = nullptr,
                                              float* partials = nullptr,
                                              int* part_count = nullptr) {
    if (!GATE_UP) {
      if (threadIdx.x == 0) {
        while (load_acquire_gpu(done + m) < kGateUpCols) __nanosleep(128);
      }
      __syncthreads();
    }
    if constexpr (ZERO_Y) zero_y(*down, m, n);
    // The prologue a loop: the first wave's blocks run code no SM has fetched since L2 was
    // flushed, and its seven stage loads unrolled were 2-5 us of that fetch before their first
    // weight load on an H100 (docs/PERF.md 56).
    const bool written =
        Gemm::template tile<PARTS, true>(g, m, n, smem, part, partials, part_count);
    if (GATE_UP && written) {
      __threadfence();  // this thread's h (and y) stores, before the count below
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(done + m, 1);
    }
  }

  static __device__ void run(const DecodeParams& p) {
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int ticket;
    // Before any wait, so the counter and shared_done must be zero, and the last forward's combine
    // done with y, before this kernel can start: that combine zeroed them, and this kernel
    // launches only after this forward's router passed its wait for that combine (the router
    // waits before it triggers, routing.cuh).
    if (threadIdx.x == 0) ticket = atomicAdd(p.ticket, 1);
    __syncthreads();
    int t = ticket;
    // The shared expert: chunk j's row blocks j * shared_chunk_blocks + b, b < ceil(T / 16).
    const int chunk_blocks = (p.gate_up.tokens + 15) / 16;
    const int shared_rows = S * chunk_blocks;
    auto shared_block = [&](int index) {
      return index / chunk_blocks * p.shared_chunk_blocks + index % chunk_blocks;
    };
    if (t < shared_rows * kGateUpCols * SHARED_PARTS) {
      const int tile = t / SHARED_PARTS, m = shared_block(tile / kGateUpCols),
                n = tile % kGateUpCols, at = m * kGateUpCols + n;
      item<GateUp, true, SHARED_PARTS>(
          p.shared_gate_up, m, n, p.shared_done, smem, t % SHARED_PARTS, nullptr,
          p.shared_partials + (long long)at * SHARED_PARTS * GateUp::kThreads * GateUp::kAccFloats,
          p.shared_part_counts + at);
      return;
    }
    t -= shared_rows * kGateUpCols * SHARED_PARTS;
    auto shared_down = [&](int index) {
      item<Down, false>(p.shared_down, shared_block(index / kDownCols), index % kDownCols,
                        p.shared_done, smem);
    };
    if (!SHARED_DOWN_LAST) {
      if (t < shared_rows * kDownCols) return shared_down(t);
      t -= shared_rows * kDownCols;
    }
    if (t == 0) {
      // The experts table (written at prepare(); no kernel of the forward writes it), which every
      // routed item reads right after the wait, its expert's entry after block_expert: the first
      // block past the shared items brings it into L2 while the routing runs, one DRAM round trip
      // off that chain (with the L2 flushed or cold).
      const auto first = reinterpret_cast<unsigned long long>(p.gate_up.experts) & ~127ull;
      const auto end = reinterpret_cast<unsigned long long>(p.gate_up.experts + E + S);
      for (unsigned long long line = first + threadIdx.x * 128ull; line < end;
           line += kThreads * 128ull) {
        prefetch_l2(reinterpret_cast<const void*>(line));
      }
    }
    grid_dependency_wait();  // the routing and the dispatch
    // The routed experts' row blocks come first in the sorted order, the shared chunks last.
    const int routed = *p.gate_up.num_blocks - shared_rows;
    if (t < routed * kGateUpCols) {
      item<GateUp, true, 1, DOWN_PARTS == 2>(p.gate_up, t / kGateUpCols, t % kGateUpCols,
                                             p.gate_up_done, smem, 0, &p.down);
      return;
    }
    t -= routed * kGateUpCols;
    if (SHARED_DOWN_LAST) {
      if (t < shared_rows * kDownCols) return shared_down(t);
      t -= shared_rows * kDownCols;
    }
    if (t < routed * kDownCols * DOWN_PARTS) {
      const int tile = t / DOWN_PARTS;
      item<Down, false, DOWN_PARTS>(p.down, tile / kDownCols, tile % kDownCols, p.gate_up_done,
                                    smem, t % DOWN_PARTS);
    }
  }
};

}  // namespace rt_moe
