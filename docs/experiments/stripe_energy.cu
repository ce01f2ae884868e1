// Where the decode tile's energy a byte goes (docs/PERF.md 47). The fused decode kernel draws
// ~150 pJ a weight byte above idle (PERF.md 38h, 46e, 47a), a linear read ~90. Its weight
// stream differs from the read's in two ways, measured apart here, each pattern back to back for
// ~1.5 s with the board's draw by NVML (steady_power.h):
//   - the DRAM pattern: a K tile of 128 bytes of each of a tile's 64 weight rows, 14336 bytes
//     apart (H = 7168 bf16), against the same bytes read as one contiguous 8 KiB a stage;
//   - the SM side: cp.async into an 8-stage ring of 10 KiB stages (the tile's 2 KiB x tile, one
//     live row and 15 zero-filled, and 8 KiB of weights), then per stage, as the tile does, 4 K
//     steps of ldmatrix.x4 (x and weights) and 2 mma.sync m16n8k16 a warp; or no use of the
//     stage at all (wait and barrier only); or plain loads into registers, no shared memory.
// Blocks of 128 threads, two an SM (the fused tile's 16x64x64 w1x4 s8); each block takes tiles
// of 64 rows x 14336 bytes by a ticket, so the grid ends evenly. "wide" reads 512 bytes of each
// of 16 rows a stage (the same 8 KiB), K fastest within a 16-row group.
// If the stripes cost much more than contiguous stages, the DRAM pattern is the decode tile's
// energy, and a weight layout tiled at prepare() (each tile's K tiles contiguous) the lever; if
// the SM side does, fewer shared-memory round trips or narrower MMAs are.
// Build here (nvcc 13; tools/power.cpp for NVML, fmt header-only), run on the GPU host:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DFMT_HEADER_ONLY -Itools \
//        -Ikernel_templates \
//        -Xcompiler -Wno-stringop-overflow \
//        -o stripe_energy docs/experiments/stripe_energy.cu tools/power.cpp
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench.cuh"  // FillBits, the HBM ceiling's random fill
#include "cuda_check.h"
#include "decode_stage.h"
#include "power.h"
#include "read_sink.h"
#include "steady_power.h"
#include "tile_loader.cuh"  // the kernels' swizzle, cp.async, ldmatrix and mma.sync wrappers

using namespace rt_moe;

constexpr int kThreads = 128;
constexpr int kRowBytes = 14336;
constexpr int kTileRows = 64;
constexpr int kTileBytes = kTileRows * kRowBytes;  // 917504
constexpr int kStageB = 8192;                      // weights a stage
constexpr int kStageA = 2048;                      // the x tile: 16 rows x 128 bytes
constexpr int kStages = 8;
constexpr int kSteps = kTileBytes / kStageB;  // 112 stages a tile
constexpr int kSmem = kStages * (kStageA + kStageB);

enum Pattern { kStripes = 0, kContiguous = 1, kWide = 2 };
enum Use { kMma = 0, kBarrierOnly = 1 };

// Global address of 16-byte chunk `idx` (0..511) of stage `s` of tile `tile`.
template <int PATTERN>
__device__ __forceinline__ const char* chunk_src(const char* w, long long tile, int s, int idx) {
  const char* base = w + tile * kTileBytes;
  if (PATTERN == kContiguous) return base + (long long)s * kStageB + idx * 16;
  if (PATTERN == kStripes) return base + (long long)(idx / 8) * kRowBytes + s * 128 + idx % 8 * 16;
  // wide: 16 rows x 512 bytes; stage s: row group s / 28, K step s % 28
  constexpr int kWideSteps = kRowBytes / 512;
  const int row = s / kWideSteps * 16 + idx / 32;
  return base + (long long)row * kRowBytes + (s % kWideSteps) * 512 + idx % 32 * 16;
}

template <int PATTERN, int USE>
__global__ void __launch_bounds__(kThreads)
    ring_read(const char* w, const char* x, int tiles, int* ticket, int4* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int t_shared;
  const unsigned base = smem_address(smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float acc[2][4] = {};
  for (;;) {
    if (tid == 0) t_shared = atomicAdd(ticket, 1);
    __syncthreads();
    const int tile = t_shared;
    __syncthreads();
    if (tile >= tiles) break;
    auto load = [&](int s) {
      const unsigned st = base + (s % kStages) * (kStageA + kStageB);
      if (tid < 128) {  // x: row tid / 8 live only for row 0 (one token), the rest zero-filled
        const int row = tid / 8, chunk = tid % 8;
        cp_async_16(st + swizzle_128b(row, chunk), x + s % 112 * 128 + chunk * 16, row == 0);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int idx = tid + j * kThreads;
        cp_async_16(st + kStageA + swizzle_128b(idx / 8, idx % 8),
                    chunk_src<PATTERN>(w, tile, s, idx), true);
      }
    };
    decode_ring<kStages>(kSteps, load, [&](int s) {
      if (USE == kMma) {
        const unsigned a_st = base + (s % kStages) * (kStageA + kStageB);
        decode_stage_mma(acc, a_st, a_st + kStageA, lane, warp);
      }
    });
  }
  decode_stage_sink(acc, out);
}

// The same tiles and patterns read into registers: 8 stages' loads in flight a thread (32
// 16-byte loads), folded, no shared memory.
template <int PATTERN>
__global__ void __launch_bounds__(kThreads)
    reg_read(const char* w, int tiles, int* ticket, int4* out) {
  __shared__ int t_shared;
  int4 acc{0, 0, 0, 0};
  for (;;) {
    if (threadIdx.x == 0) t_shared = atomicAdd(ticket, 1);
    __syncthreads();
    const int tile = t_shared;
    __syncthreads();
    if (tile >= tiles) break;
    for (int s0 = 0; s0 < kSteps; s0 += 8) {
      int4 v[32];
#pragma unroll
      for (int d = 0; d < 8; ++d)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          v[d * 4 + j] = __ldcg(reinterpret_cast<const int4*>(
              chunk_src<PATTERN>(w, tile, s0 + d, threadIdx.x + j * kThreads)));
#pragma unroll
      for (int j = 0; j < 32; ++j) fold(acc, v[j]);
    }
  }
  sink(acc, out);
}

// Random bits, as a model's weights (the data a read toggles costs energy): the bench's own fill
// (bench.cuh's FillBits, seed 0), each bf16's exponent below 0x80: finite, |v| < 2.
__global__ void fill_random(unsigned* p, size_t n) {
  rt_moe::FillBits<256>::run({p, (long long)n, 0u, 0xbfffbfffu});
}

int main(int argc, char** argv) {
  // "random": the weights and x random bits; otherwise 0x3c bytes (the HBM ceiling's constant
  // fill, tools/bench_ceilings.cpp); "rounds N" after it.
  const bool random = argc > 1 && std::string(argv[1]) == "random";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 2;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  PowerMeter meter(device_bus_id(0));
  if (!meter_ready(meter, "stripe_energy")) return 1;
  const int sms = prop.multiProcessorCount, blocks = 2 * sms;
  const int tiles = 4488;  // 4.12 GB, far past the 50 MB L2
  const size_t bytes = size_t(tiles) * kTileBytes;
  char *w, *x;
  int* tickets;
  int4* out;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMalloc(&x, kRowBytes));
  CHECK(cudaMalloc(&tickets, 1 << 20));
  CHECK(cudaMalloc(&out, 1024 * sizeof(int4)));
  CHECK(cudaMemset(w, 0x3c, bytes));  // bf16 0x3c3c ~ 0.0115: finite products
  CHECK(cudaMemset(x, 0x3c, kRowBytes));
  if (random) {
    fill_random<<<4 * prop.multiProcessorCount, 256>>>(reinterpret_cast<unsigned*>(w), bytes / 4);
    fill_random<<<1, 256>>>(reinterpret_cast<unsigned*>(x), kRowBytes / 4);
    CHECK(cudaGetLastError());
  }
  CHECK(cudaMemset(tickets, 0, 1 << 20));
  int launch_no = 0;  // each launch its own zeroed ticket counter (256K of them)
  auto next_ticket = [&] { return tickets + (launch_no++ % (1 << 18)); };
  CHECK(cudaFuncSetAttribute(ring_read<kStripes, kMma>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kSmem));
  CHECK(cudaFuncSetAttribute(ring_read<kContiguous, kMma>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(ring_read<kWide, kMma>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kSmem));
  CHECK(cudaFuncSetAttribute(ring_read<kStripes, kBarrierOnly>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(ring_read<kContiguous, kBarrierOnly>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaDeviceSynchronize());
  std::printf(
      "%s, %d SMs, power limit %.0f W; %.2f GB a launch of %s data; each pattern ~1.5 s back to "
      "back, the draw of the second half\n",
      prop.name, sms, meter.limit_w(), bytes / 1e9, random ? "random" : "constant");
  const PowerMeter::Reading idle =
      meter.idle(std::chrono::milliseconds(500), std::chrono::milliseconds(1000));
  std::printf("%-34s %7.0f W %6.0f MHz\n", "idle", idle.watts, idle.sm_mhz);
  const auto report = [&](const char* name, const Run& r) { report_run(name, r, idle.watts); };
  // Tickets restart from zero every 2^18 launches: a ~1.5 s run launches a few hundred.
  const auto ring = [&](auto kernel) {
    return [&, kernel] { kernel<<<blocks, kThreads, kSmem>>>(w, x, tiles, next_ticket(), out); };
  };
  const auto regs = [&](auto kernel) {
    return [&, kernel] { kernel<<<blocks, kThreads>>>(w, tiles, next_ticket(), out); };
  };
  const double b = double(bytes);
  for (int round = 0; round < rounds; ++round) {
    report("linear (ceiling's pattern)", steady(meter, 1.5, b, [&] {
             dram_read<<<sms * 4, 512>>>(reinterpret_cast<const int4*>(w), bytes / 16, out);
           }));
    report("stripes, ring, ldmatrix+mma", steady(meter, 1.5, b, ring(ring_read<kStripes, kMma>)));
    report("contiguous, ring, ldmatrix+mma",
           steady(meter, 1.5, b, ring(ring_read<kContiguous, kMma>)));
    report("wide 512 B, ring, ldmatrix+mma", steady(meter, 1.5, b, ring(ring_read<kWide, kMma>)));
    report("stripes, ring, barrier only",
           steady(meter, 1.5, b, ring(ring_read<kStripes, kBarrierOnly>)));
    report("contiguous, ring, barrier only",
           steady(meter, 1.5, b, ring(ring_read<kContiguous, kBarrierOnly>)));
    report("stripes, registers", steady(meter, 1.5, b, regs(reg_read<kStripes>)));
    report("contiguous, registers", steady(meter, 1.5, b, regs(reg_read<kContiguous>)));
  }
  CHECK(cudaGetLastError());
  CHECK(cudaFree(w));
  CHECK(cudaFree(x));
  CHECK(cudaFree(tickets));
  CHECK(cudaFree(out));
  return 0;
}
