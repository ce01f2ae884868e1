// How the swapped GEMMs' weight loads stream against the decode tile's (docs/PERF.md 50d). At
// DeepSeek-V3 T = 512 the swapped GEMMs stream 92-95% of the HBM ceiling where the fused decode
// kernel streams 98%; 50b ruled out the token rows' L2 reads and the power cap, 50a the stages in
// flight. What is left is the load itself: a swapped tile's stage is 256 weight rows x 128 bytes
// (a K tile of 64 bf16), 14336 bytes apart (H = 7168), loaded by the tensor-copy engine as two
// boxes of 128 rows into a 5-stage ring of 32 KiB stages, one block an SM, a producer warpgroup
// and two consumer warpgroups that wait for each stage and release it. Here the same ring and the
// same bytes, the consumers doing nothing but wait and release, loaded:
//   - "tma 2 x 128": as the swapped kernel loaded before ec4de99 (L2 promotion 128 B, 128-byte
//     swizzle; its maps ask for 256 B since);
//   - "tma 4 x 64": four boxes of 64 rows;
//   - "tma 2 x 128, 256 B promotion": the boxes asking L2 for 256-byte lines;
//   - "cp.async": the producer's 128 threads, 16 copies of 16 bytes each a stage, arriving on the
//     full barrier as they land (the decode tile's kind of copy, in the swapped kernel's ring).
// Each pattern back to back for ~1.5 s, random bits (as the weights), the board's draw by NVML
// (steady_power.h). If the boxes stream 3-5% under cp.async, the swapped GEMMs' producer should
// copy the weights by cp.async; if all four stream alike, the load is not it either.
// Measured on an H200 (PERF.md 51a): the boxes 97% of the linear read, cp.async 96%, the boxes
// with 256-byte promotion 98%; the swapped kernels' maps now ask for 256 bytes (51b).
// Build here (nvcc 13; tools/power.cpp for NVML, fmt header-only), run on the GPU host
// (1886: bench.cuh's and the sm_90 kernels' dynamic shared memory declare different alignments,
// which no runtime kernel meets, as none includes both):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DFMT_HEADER_ONLY -Itools \
//        -Ikernel_templates -Xcompiler -Wno-stringop-overflow -diag-suppress 1886 \
//        -o box_stream docs/experiments/box_stream.cu tools/power.cpp
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench.cuh"  // FillBits, the HBM ceiling's random fill
#include "cuda_check.h"
#include "grouped_gemm_sm90_ws.cuh"  // the kernels' mbarrier and TMA wrappers, cp.async
#include "power.h"
#include "read_sink.h"
#include "steady_power.h"
#include "tensor_map.h"

using namespace rt_moe;

constexpr int kThreads = 384;  // a producer warpgroup, two consumer warpgroups
constexpr int kRowBytes = 14336;
constexpr int kCols = kRowBytes / 2;  // bf16 elements a row
constexpr int kTileRows = 256;
constexpr long long kTileBytes = (long long)kTileRows * kRowBytes;  // 3.67 MB
constexpr int kStageBytes = kTileRows * 128;                        // 32 KiB
constexpr int kStages = 5;
constexpr int kSteps = kRowBytes / 128;  // 112 K tiles a tile
constexpr int kConsumerWarps = 8;
constexpr int kSmem = kStages * kStageBytes + 1024;  // + 1024: the ring's 1024-byte alignment

enum Mode { kTma128 = 0, kTma64 = 1, kCpAsync = 2 };

// Block b streams tiles b, b + gridDim.x, ... (as many for every block: the grid ends evenly).
template <int MODE>
__global__ void __launch_bounds__(kThreads, 1)
    box_ring(const __grid_constant__ TensorMap map, const char* w, int tiles, int4* out) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) unsigned long long bars[2 * kStages];
  const unsigned ring = (smem_address(smem_raw) + 1023) / 1024 * 1024;
  const unsigned full = smem_address(bars), empty = full + 8 * kStages;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full + 8 * s, MODE == kCpAsync ? 128 : 1);
      mbarrier_init(empty + 8 * s, kConsumerWarps);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  int stage = 0;
  unsigned phase = 0;
  if (tid < 128) {  // the producer
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      for (int kt = 0; kt < kSteps; ++kt) {
        mbarrier_wait(empty + 8 * stage, phase ^ 1);
        const unsigned dst = ring + stage * kStageBytes, bar = full + 8 * stage;
        if (MODE == kCpAsync) {
          const char* src = w + tile * kTileBytes + kt * 128;
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const int idx = tid + 128 * j, row = idx / 8, chunk = idx % 8;
            cp_async_16(dst + swizzle_128b(row, chunk),
                        src + (long long)row * kRowBytes + chunk * 16, true);
          }
          mbarrier_arrive_on_cp_async(bar);
        } else if (tid == 0) {
          mbarrier_arrive_expect_tx(bar, kStageBytes);
          constexpr int kBoxes = MODE == kTma128 ? 2 : 4, kBoxRows = kTileRows / kBoxes;
#pragma unroll
          for (int b = 0; b < kBoxes; ++b) {
            tma_load_2d(dst + b * kBoxRows * 128, &map, kt * 64, tile * kTileRows + b * kBoxRows,
                        bar);
          }
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    cp_async_wait<0>();
  } else {  // the consumers: wait for each stage, touch one word of it, release it
    int4 acc{0, 0, 0, 0};
    const int lane = tid % 32;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      for (int kt = 0; kt < kSteps; ++kt) {
        mbarrier_wait(full + 8 * stage, phase);
        if (lane == 0) {
          int v;
          asm volatile("ld.shared.b32 %0, [%1];"
                       : "=r"(v)
                       : "r"(ring + stage * kStageBytes + 4 * tid));
          acc.x ^= v;
        }
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty + 8 * stage);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    sink(acc, out);
  }
}

// Random bits, as a model's weights: the bench's own fill (bench.cuh's FillBits, seed 0), each
// bf16's exponent below 0x80.
__global__ void fill_random(unsigned* p, size_t n) {
  rt_moe::FillBits<256>::run({p, (long long)n, 0u, 0xbfffbfffu});
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 2;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  PowerMeter meter(device_bus_id(0));
  if (!meter_ready(meter, "box_stream")) return 1;
  const int sms = prop.multiProcessorCount;
  const int tiles = sms * 8;  // 3.9 GB on 132 SMs, far past the 50 MB L2
  const size_t bytes = size_t(tiles) * kTileBytes;
  char* w;
  int4* out;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMalloc(&out, 1024 * sizeof(int4)));
  fill_random<<<4 * sms, 256>>>(reinterpret_cast<unsigned*>(w), bytes / 4);
  CHECK(cudaGetLastError());
  const unsigned long long rows = (unsigned long long)tiles * kTileRows;
  // The weights as a [rows, kCols] bf16 matrix with boxes of 64 elements x 128 or 64 rows.
  const auto weight_map = [&](unsigned box_rows, CUtensorMapL2promotion promotion) {
    return bf16_tensor_map(w, kCols, rows, kRowBytes, 64, box_rows, promotion, "box_stream");
  };
  const TensorMap map128 = weight_map(128, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  const TensorMap map64 = weight_map(64, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  const TensorMap map128p = weight_map(128, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  CHECK(
      cudaFuncSetAttribute(box_ring<kTma128>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(box_ring<kTma64>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(
      cudaFuncSetAttribute(box_ring<kCpAsync>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaDeviceSynchronize());
  std::printf(
      "%s, %d SMs, power limit %.0f W; %.2f GB of random bits a launch, %d blocks of %d "
      "threads, %d stages of %d KiB; each pattern ~1.5 s back to back, the draw of the "
      "second half\n",
      prop.name, sms, meter.limit_w(), bytes / 1e9, sms, kThreads, kStages, kStageBytes / 1024);
  const PowerMeter::Reading idle =
      meter.idle(std::chrono::milliseconds(500), std::chrono::milliseconds(1000));
  std::printf("%-34s %7.0f W %6.0f MHz\n", "idle", idle.watts, idle.sm_mhz);
  const auto report = [&](const char* name, const Run& r) { report_run(name, r, idle.watts); };
  const double b = double(bytes);
  for (int round = 0; round < rounds; ++round) {
    report("linear (ceiling's pattern)", steady(meter, 1.5, b, [&] {
             dram_read<<<sms * 4, 512>>>(reinterpret_cast<const int4*>(w), bytes / 16, out);
           }));
    report("tma 2 x 128 (the swapped kernel)", steady(meter, 1.5, b, [&] {
             box_ring<kTma128><<<sms, kThreads, kSmem>>>(map128, w, tiles, out);
           }));
    report("tma 4 x 64", steady(meter, 1.5, b, [&] {
             box_ring<kTma64><<<sms, kThreads, kSmem>>>(map64, w, tiles, out);
           }));
    report("tma 2 x 128, 256 B promotion", steady(meter, 1.5, b, [&] {
             box_ring<kTma128><<<sms, kThreads, kSmem>>>(map128p, w, tiles, out);
           }));
    report("cp.async, 128 threads", steady(meter, 1.5, b, [&] {
             box_ring<kCpAsync><<<sms, kThreads, kSmem>>>(map128, w, tiles, out);
           }));
  }
  CHECK(cudaGetLastError());
  CHECK(cudaFree(w));
  CHECK(cudaFree(out));
  return 0;
}
