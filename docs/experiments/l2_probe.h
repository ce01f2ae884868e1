// Device helpers of the L2 partition probes (l2_partition.cu, l2_local_stream.cu): the SM a
// thread runs on, and the timing of one line's read or atomic, in one place so that a fix to the
// timing (PERF.md 18c: not yet shown to wait for its load) reaches both.
#pragma once

__device__ __forceinline__ unsigned smid() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Cycles of a read of the line at p that bypasses L1 (a volatile load, which ptxas may not merge
// with another of the same address).
__device__ __forceinline__ unsigned timed_read(const unsigned* p) {
  __shared__ volatile unsigned sink;
  const unsigned t0 = clock();
  unsigned v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  sink = v;  // waits for v: a warp issues in order, so the clock below reads after it
  return clock() - t0;
}

// Cycles of a read right after this thread wrote the line (the write goes to its home partition).
__device__ __forceinline__ unsigned write_then_read(unsigned* p, unsigned value) {
  asm volatile("st.global.cg.u32 [%0], %1;" ::"l"(p), "r"(value) : "memory");
  asm volatile("membar.gl;" ::: "memory");
  return timed_read(p);
}

// Cycles of an atomic on the line at p (adding 0: the line keeps its value). An atomic is done at
// the line's home L2 slice, whatever copy the reader's partition holds, so its round trip is
// near or far by the home alone (PERF.md 38d), where a read may be served by a copy (14b).
__device__ __forceinline__ unsigned timed_atomic(unsigned* p) {
  __shared__ volatile unsigned sink;
  const unsigned t0 = clock();
  unsigned v;
  asm volatile("atom.global.add.u32 %0, [%1], 0;" : "=r"(v) : "l"(p) : "memory");
  sink = v;  // waits for v, as in timed_read
  return clock() - t0;
}
