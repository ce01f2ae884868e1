// The decode forward's two expert GEMMs in one kernel (mma.sync tiles of grouped_gemm_sm80.cuh),
// so that the weights stream as one read: on the H200 one kernel reading 792 MiB with evict-first
// loads streamed at 98% of the 4 GiB read rate, two kernels of 528 and 264 MiB at 83-87%
// (docs/PERF.md 9d), and DeepSeek-V3 at T = 1 reads 792 MB.
//
// Work items, in ticket order: every (row block, column block) of gate/up, row block by row block,
// then every (row block, column block) of down in the same order. A block takes one ticket from a
// counter (zeroed with the expert counts before the forward) and does that item:
//   - gate/up: GroupedGemmSm80<kGateUp>::tile, then every thread fences its h stores and the
//     block adds one to its row block's count of finished gate/up tiles;
//   - down: thread 0 waits (acquire) until its row block's count reaches the gate/up column
//     blocks, then the block runs GroupedGemmSm80<kDown>::tile, which reads h through L2
//     (cp.async.cg).
// No deadlock: a block takes its ticket only once it runs, so every gate/up ticket below a
// waiting down ticket belongs to a block that runs or ran, and gate/up items wait for nothing.
#pragma once

#include "grouped_gemm_sm80.cuh"

namespace rt_moe {

template <typename D, int H, int I, int E, int S, int K, int BLOCK_N, int WARPS_N, int STAGES>
struct GroupedGemmDecode {
  using GateUp = GroupedGemmSm80<D, H, I, E, S, K, kGateUp, 16, BLOCK_N, 64, 1, WARPS_N, STAGES>;
  using Down = GroupedGemmSm80<D, H, I, E, S, K, kDown, 16, BLOCK_N, 64, 1, WARPS_N, STAGES>;
  static constexpr int kThreads = GateUp::kThreads;
  static constexpr int kSmemBytes =
      GateUp::kSmemBytes > Down::kSmemBytes ? GateUp::kSmemBytes : Down::kSmemBytes;
  static constexpr int kGateUpCols = (I + BLOCK_N / 2 - 1) / (BLOCK_N / 2);
  static constexpr int kDownCols = (H + BLOCK_N - 1) / BLOCK_N;
  static_assert(GateUp::kThreads == Down::kThreads, "one block size for both GEMMs");

  static __device__ __forceinline__ int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
  }

  static __device__ void run(const DecodeParams& p) {
    grid_dependency_trigger();  // the next kernel may launch now; it waits for this one
    grid_dependency_wait();
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int ticket;
    if (threadIdx.x == 0) ticket = atomicAdd(p.ticket, 1);
    __syncthreads();
    const int t = ticket;
    const int blocks = *p.gate_up.num_blocks;
    const int gate_up_items = blocks * kGateUpCols;
    if (t < gate_up_items) {
      const int m = t / kGateUpCols;
      GateUp::tile(p.gate_up, m, t % kGateUpCols, smem);
      __threadfence();  // this thread's h stores, before the count below
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(p.gate_up_done + m, 1);
    } else if (t < gate_up_items + blocks * kDownCols) {
      const int item = t - gate_up_items, m = item / kDownCols;
      if (threadIdx.x == 0) {
        while (load_acquire(p.gate_up_done + m) < kGateUpCols) __nanosleep(128);
      }
      __syncthreads();
      Down::tile(p.down, m, item % kDownCols, smem);
    }
  }
};

}  // namespace rt_moe
