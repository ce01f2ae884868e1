// Even row blocks (the swapped tiles' layout: dispatch.cuh, grouped_gemm_sm90_swap.cuh), shared
// with the host so that a CPU test can check it. Only built-in types: NVRTC compiles this with no
// system header.
//
// An expert of n rows takes ceil(n / b) blocks of b rows' room, as with its rows packed in order,
// but the rows are spread over them evenly in whole octets (8 rows, the N step of the MMAs that
// multiply them): the first blocks one octet longer, the n % 8 rows left over in the last block.
// So the blocks that read one weight tile multiply as many rows (within 8) and last as long: none
// runs ahead of the others and reads the weights again after they left L2 (docs/PERF.md 17e, 23e),
// no tail block is mostly padding, and an expert multiplies at most 7 padding rows in all, where
// rows spread one by one padded each of its blocks (docs/PERF.md 39). A b that is no multiple of 8
// spreads single rows.
#pragma once

#ifndef RT_MOE_HOST_DEVICE
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define RT_MOE_HOST_DEVICE __host__ __device__
#else
#define RT_MOE_HOST_DEVICE
#endif
#endif

namespace rt_moe {

struct EvenBlocks {
  int q;     // rows of a short block (whole units)
  int r;     // blocks one unit longer (the first r)
  int unit;  // 8 rows, or 1 where b is no multiple of 8
  int rest;  // rows past the last whole unit, in the last block
  int last;  // the last block
  RT_MOE_HOST_DEVICE EvenBlocks(int n, int b) {
    const int blocks = n > b ? (n + b - 1) / b : 1;
    unit = b % 8 == 0 ? 8 : 1;
    const int units = n / unit;
    q = units / blocks * unit;
    r = units % blocks;
    rest = n % unit;
    last = blocks - 1;
  }
  // Rows of the expert's block j (q past the last block).
  RT_MOE_HOST_DEVICE int rows(int j) const {
    return q + (j < r ? unit : 0) + (j == last ? rest : 0);
  }
  // Where the expert's i-th row goes, past its first row: block j at j b, then the row in it.
  RT_MOE_HOST_DEVICE int row(int i, int b) const {
    const int long_rows = r * (q + unit);
    if (i < long_rows) return i / (q + unit) * b + i % (q + unit);
    i -= long_rows;
    // Short blocks of q rows, the last with the rest too (with q = 0 it is the only one left).
    int j = q > 0 ? r + i / q : last;
    if (j > last) j = last;
    return j * b + i - (j - r) * q;
  }
};

}  // namespace rt_moe
