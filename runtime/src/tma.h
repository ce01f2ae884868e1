// Tensor maps for the TMA loads of the warp-specialized grouped GEMM (grouped_gemm_sm90_ws.cuh).
#pragma once

#include <cstdint>

#include "params.h"
#include "rt_moe/config.h"
#include "rt_moe/runtime.h"

namespace rt_moe {

// A tensor map over a row-major matrix of `rows` x `cols` 16-bit elements with a row stride of
// `ld` elements, loaded in boxes of 64 elements (128 bytes) x `box_rows` rows with the 128-byte
// swizzle; reads past the matrix fill zeros. Throws Error naming what the hardware refuses.
TensorMap tensor_map_2d(DType dtype, const void* base, std::uint64_t rows, std::uint64_t cols,
                        std::uint64_t ld, std::uint32_t box_rows, const char* what);

// The weight maps of the gate/up (`down` false) or down GEMM for a tile of `block_n` columns.
void weight_tensor_maps(const MoeConfig& config, const MoeWeights& weights, int block_n, bool down,
                        GemmTmaParams& params);

}  // namespace rt_moe
