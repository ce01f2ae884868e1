// What a byte costs the H200's power budget by where it comes from (docs/PERF.md 36d): the
// board's draw, by NVML's energy counter (tools/power.h), while the SMs read
//   dram:    a 4 GiB buffer, each byte once (the HBM read ceiling's pattern): DRAM, the fabric
//            between the two L2 partitions for half the lines (PERF.md 14b), L2 to SM;
//   l2:      one 16 MiB buffer, every block all of it from its own start, again and again: L2
//            hits served from the reader's own partition once warm (14b's "shared": 0.2% of the
//            fabric busy), L2 to SM only;
//   private: each block its own 128 KiB slice again and again (L2 hits, few crossings).
// each back to back for ~1.5 s, and idle. Above idle, a byte of each costs (P - P0) / rate. With
// rt_moe_bench's power table (joules a forward, PERF.md 36a) and ncu's bytes per forward
// (scripts/profile: DRAM and L2 bytes), the forward's energy splits into FLOPs, DRAM bytes and L2
// bytes: whether the token rows' L2 re-reads (each row block's rows read by every column block)
// are worth cutting at the power limit.
// Build here (nvcc 13; tools/power.cpp for NVML, fmt header-only), run on the GPU host:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DFMT_HEADER_ONLY -Itools \
//        -Xcompiler -Wno-stringop-overflow \
//        -o energy_costs docs/experiments/energy_costs.cu tools/power.cpp
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cuda_check.h"
#include "power.h"
#include "read_sink.h"
#include "steady_power.h"

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  PowerMeter meter(device_bus_id(0));
  if (!meter_ready(meter, "energy_costs")) return 1;
  const int sms = prop.multiProcessorCount;
  const size_t big = 4ull << 30, l2_bytes = 16ull << 20, slice = 128ull << 10;
  int4 *buf, *out;
  CHECK(cudaMalloc(&buf, big));
  CHECK(cudaMalloc(&out, 1024 * sizeof(int4)));
  CHECK(cudaMemset(buf, 0x5a, big));
  CHECK(cudaDeviceSynchronize());
  std::printf(
      "%s, %d SMs, power limit %.0f W; each pattern ~1.5 s back to back, the draw of the "
      "second half\n",
      prop.name, sms, meter.limit_w());

  const PowerMeter::Reading idle =
      meter.idle(std::chrono::milliseconds(500), std::chrono::milliseconds(1000));
  std::printf("%-8s %7.0f W %6.0f MHz (%d counter updates)\n", "idle", idle.watts, idle.sm_mhz,
              idle.updates);
  const auto report = [&](const char* name, const Run& r) {
    std::printf(
        "%-8s %7.0f W %6.0f MHz %9.0f GB/s the SMs read  %6.1f pJ a byte above idle "
        "(%d updates)\n",
        name, r.watts, r.mhz, r.bytes_per_s / 1e9, (r.watts - idle.watts) / r.bytes_per_s * 1e12,
        r.updates);
  };
  const int reps = 16;
  report("dram",
         steady(meter, 1.5, double(big), [&] { dram_read<<<sms * 4, 512>>>(buf, big / 16, out); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  report("l2", steady(meter, 1.5, double(l2_bytes) * sms * reps,
                      [&] { shared_read<<<sms, 1024>>>(buf, l2_bytes / 16, reps, out); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  report("private", steady(meter, 1.5, double(slice) * sms * reps * 8,
                           [&] { private_read<<<sms, 1024>>>(buf, slice / 16, reps * 8, out); }));
  CHECK(cudaFree(buf));
  CHECK(cudaFree(out));
  return 0;
}
