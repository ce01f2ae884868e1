// The two ceilings of the floor (REFERENCE.md section 5), measured in the benchmark's own run:
// HBM read bandwidth (a read kernel, kernel_templates/bench.cuh) and the dense GEMM rate (cuBLAS,
// loaded with dlopen; never linked). Also the L2 flush that keeps one timed forward from reading
// the previous one's data out of L2.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "driver.h"
#include "kernels.h"
#include "rt_moe/config.h"

namespace rt_moe::tools {

struct Ceiling {
  double value = 0;       // bytes/s or FLOP/s
  bool measured = false;  // false: REFERENCE.md's value, with `note` saying why
  std::string note;       // how it was measured, or why it was not
};

// Median over `iters` passes of a read of a >= 2 GiB buffer, after warm-up.
Ceiling measure_hbm_read(KernelCache& kernels, const driver::DeviceInfo& device, CUstream stream,
                         int iters = 20);

// Dense 8192^3 GEMM of `dtype` with fp32 accumulation through cublasGemmEx: median of `iters`
// after warm-up. Without a loadable cuBLAS: REFERENCE.md's H200 value, measured = false.
Ceiling measure_gemm_rate(DType dtype, CUstream stream, int iters = 10);

// Writes a scratch buffer larger than L2 (256 MiB) on `stream`, evicting what the last run left.
class L2Flush {
 public:
  L2Flush();
  void operator()(CUstream stream);

 private:
  driver::DeviceBuffer scratch_;
  unsigned char value_ = 0;
};

double median(std::vector<double> values);

}  // namespace rt_moe::tools
