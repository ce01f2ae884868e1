// The energy a byte of a linear DRAM read, by what the bytes hold (docs/PERF.md 64a, 64b): the HBM
// ceiling's constant 0x3f803f80 words, FillBits' random bits (the random read's), and N(0, 1)
// values at the gate/up scale (1 / sqrt(2048)) rounded to bf16 and to fp16, as the bench's
// weights are. 64a's model, energy a byte above idle = the constant's + slope x the bus toggle
// rate (bus_toggles.h), fitted on 47b's constant and random reads, predicts the two weight
// buffers; this measures all four in one process, in turns, and prints each buffer's toggles
// (its first 64 MiB, read back) beside its draw.
// Build here (nvcc 13; tools/power.cpp for NVML, fmt header-only), run on the GPU host:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DFMT_HEADER_ONLY -Itools \
//        -Ikernel_templates -Xcompiler -Wno-stringop-overflow \
//        -o data_energy docs/experiments/data_energy.cu tools/power.cpp
// Run: ./data_energy [rounds] (default 3).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench.cuh"  // FillBits, the HBM ceiling's random fill
#include "bus_toggles.h"
#include "cuda_check.h"
#include "normal_fill.h"
#include "power.h"
#include "read_sink.h"
#include "steady_power.h"

namespace {

__global__ void fill_word(unsigned* p, long long words, unsigned word) {  // the ceiling's fill
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x) {
    p[i] = word;
  }
}

__global__ void fill_bits(unsigned* p, long long words) {
  rt_moe::FillBits<256>::run({p, words, 0x5eedu, 0xbfffbfffu});  // the bench's random read
}

struct Buffer {
  const char* name;
  unsigned* data;
  Toggles toggles;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  PowerMeter meter(device_bus_id(0));
  if (!meter_ready(meter, "data_energy")) return 1;
  const int sms = prop.multiProcessorCount;
  const size_t bytes = size_t(4) << 30;  // 4 GiB a buffer, as the HBM ceiling's read
  const long long words = (long long)(bytes / 4);
  std::vector<Buffer> buffers = {{"constant 0x3f803f80", nullptr, {}},
                                 {"FillBits 0xbfff (random read)", nullptr, {}},
                                 {"bf16 N(0,1)/sqrt(2048)", nullptr, {}},
                                 {"fp16 N(0,1)/sqrt(2048)", nullptr, {}}};
  for (Buffer& b : buffers) CHECK(cudaMalloc(&b.data, bytes));
  int4* out;
  CHECK(cudaMalloc(&out, 1024 * sizeof(int4)));
  const float scale = 1.0f / std::sqrt(2048.0f);
  fill_word<<<4 * sms, 256>>>(buffers[0].data, words, 0x3f803f80u);
  fill_bits<<<4 * sms, 256>>>(buffers[1].data, words);
  fill_normal<true><<<4 * sms, 256>>>(buffers[2].data, words, scale, 0x1234u);
  fill_normal<false><<<4 * sms, 256>>>(buffers[3].data, words, scale, 0x1234u);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<std::uint32_t> host(size_t(16) << 20);  // 64 MiB
  for (Buffer& b : buffers) {
    CHECK(cudaMemcpy(host.data(), b.data, host.size() * 4, cudaMemcpyDeviceToHost));
    b.toggles = bus_toggles(host);
  }
  std::printf(
      "%s, %d SMs, power limit %.0f W; %.2f GB a launch; each buffer's linear read ~1.5 s "
      "back to back, the draw of the second half, %d rounds\n",
      prop.name, sms, meter.limit_w(), bytes / 1e9, rounds);
  for (const Buffer& b : buffers) {
    std::printf("%-34s ones %.3f toggles raw %.3f dbi %.3f\n", b.name, b.toggles.ones,
                b.toggles.raw, b.toggles.dbi);
  }
  const PowerMeter::Reading idle =
      meter.idle(std::chrono::milliseconds(500), std::chrono::milliseconds(1000));
  std::printf("%-34s %7.0f W %6.0f MHz\n", "idle", idle.watts, idle.sm_mhz);
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < buffers.size(); ++k) {
      // Turns: each round starts one buffer later, so no kind always follows the same one.
      const Buffer& b = buffers[(k + round) % buffers.size()];
      const int4* p = reinterpret_cast<const int4*>(b.data);
      report_run(b.name,
                 steady(meter, 1.5, double(bytes),
                        [&] { dram_read<<<sms * 4, 512>>>(p, bytes / 16, out); }),
                 idle.watts);
    }
  }
  CHECK(cudaGetLastError());
  for (Buffer& b : buffers) CHECK(cudaFree(b.data));
  CHECK(cudaFree(out));
  return 0;
}
