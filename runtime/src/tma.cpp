#include "tma.h"

#include <fmt/format.h>

#include <cstring>

#include "driver.h"

namespace rt_moe {

static_assert(sizeof(TensorMap) == sizeof(CUtensorMap) &&
                  alignof(TensorMap) == alignof(CUtensorMap),
              "params.h's TensorMap must mirror CUtensorMap");

TensorMap tensor_map_2d(DType dtype, const void* base, std::uint64_t rows, std::uint64_t cols,
                        std::uint64_t ld, std::uint32_t box_rows, const char* what) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {ld * 2};  // bytes between rows
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = driver::api().cuTensorMapEncodeTiled(
      &map,
      dtype == DType::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      // L2 promotion of 256 bytes: an L2 miss on a box row (128 bytes, one K tile) fetches the
      // row's next K tile with it, which the same block's next stage reads ~1 us later. In the
      // swapped kernels' ring it streams 1.0-1.3% faster than the 128-byte promotion on an H200
      // (docs/PERF.md 51a), and end to end it took 2-3% off DeepSeek-V3 T = 512, 1024 and 4096
      // on an H100 (51b) and 1-2.5% on an H200 (52a), the prefill unchanged; the non-swapped
      // kernel's maps (gpumode T = 8192) ran as fast with 128 bytes as with 256 (52a). (In the
      // kernels of version 14 the promoted lines crossed the L2 partition fabric and the 128-byte
      // promotion was faster, 14d.)
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(ErrorCode::kCuda,
                fmt::format("cuTensorMapEncodeTiled for {} ({} x {}, row stride {} elements, box "
                            "64 x {}, base {}) failed: {}",
                            what, rows, cols, ld, box_rows, base, driver::error_text(result)));
  }
  TensorMap out;
  std::memcpy(&out, &map, sizeof(map));
  return out;
}

void weight_tensor_maps(const MoeConfig& c, const MoeWeights& w, int block_n, bool down,
                        GemmTmaParams& p) {
  const std::uint64_t H = c.d_hidden, I = c.d_expert, E = c.n_routed_experts;
  const std::uint64_t S = c.n_shared_experts;
  const DType dt = c.dtype;
  if (!down) {
    const auto rows = std::uint32_t(block_n / 2);  // gate rows, then as many up rows
    p.b_routed[0] = tensor_map_2d(dt, w.gate, E * I, H, H, rows, "weights.gate");
    p.b_routed[1] = tensor_map_2d(dt, w.up, E * I, H, H, rows, "weights.up");
    if (S > 0) {
      p.b_shared[0] = tensor_map_2d(dt, w.shared_gate, S * I, H, H, rows, "weights.shared_gate");
      p.b_shared[1] = tensor_map_2d(dt, w.shared_up, S * I, H, H, rows, "weights.shared_up");
    }
  } else {
    const auto rows = std::uint32_t(block_n / 2);  // two boxes per tile (one per CTA of a pair)
    p.b_routed[0] = tensor_map_2d(dt, w.down, E * H, I, I, rows, "weights.down");
    if (S > 0) {
      p.b_shared[0] =
          tensor_map_2d(dt, w.shared_down, H, S * I, S * I, rows, "weights.shared_down");
    }
  }
}

}  // namespace rt_moe
