// A bf16 matrix's 2-D tensor map for the experiments' tensor copies (box_stream.cu, sm_rate.cu),
// encoded by the driver's cuTensorMapEncodeTiled, found at run time (no -lcuda): `rows` rows of
// `cols` elements, `row_bytes` apart, boxes of `box_cols` x `box_rows` with the 128-byte swizzle
// (the tiles' swizzle_128b layout when box_cols is 64). `who` names the program in its errors.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"
#include "params.h"  // rt_moe::TensorMap, the kernels' parameter type

inline rt_moe::TensorMap bf16_tensor_map(void* w, unsigned long long cols, unsigned long long rows,
                                         unsigned long long row_bytes, unsigned box_cols,
                                         unsigned box_rows, CUtensorMapL2promotion promotion,
                                         const char* who) {
  using Encode =
      CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found));
  if (fn == nullptr || found != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "%s: no cuTensorMapEncodeTiled\n", who);
    std::exit(1);
  }
  CUtensorMap map;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = reinterpret_cast<Encode>(fn)(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, w, dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promotion,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s: cuTensorMapEncodeTiled failed (%d)\n", who, int(r));
    std::exit(1);
  }
  rt_moe::TensorMap out;
  std::memcpy(&out, &map, sizeof(map));
  return out;
}
