// Even row blocks (the swapped tiles' layout: dispatch.cuh, grouped_gemm_sm90_swap.cuh), shared
// with the host so that a CPU test can check it. Only built-in types: NVRTC compiles this with no
// system header.
//
// An expert of n rows takes ceil(n / b) blocks of b rows' room, as with its rows packed in order,
// but the rows are spread over them evenly, the first n % blocks one row longer; the padding rows
// are each block's last. The blocks that read one weight tile then multiply as many rows (+-1)
// and last as long: none runs ahead of the others and reads the weights again after they left L2
// (docs/PERF.md 17e, 23e), and no tail block is mostly padding.
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
  int q;  // rows of a short block
  int r;  // blocks with q + 1 rows (the first r)
  RT_MOE_HOST_DEVICE EvenBlocks(int n, int b) {
    const int blocks = n > b ? (n + b - 1) / b : 1;
    q = n / blocks;
    r = n % blocks;
  }
  // Rows of the expert's block j.
  RT_MOE_HOST_DEVICE int rows(int j) const { return q + (j < r ? 1 : 0); }
  // Where the expert's i-th row goes, past its first row: block j at j b, then the row in it.
  RT_MOE_HOST_DEVICE int row(int i, int b) const {
    const int long_rows = r * (q + 1);
    if (i < long_rows) return i / (q + 1) * b + i % (q + 1);
    i -= long_rows;
    return (r + i / q) * b + i % q;
  }
};

}  // namespace rt_moe
