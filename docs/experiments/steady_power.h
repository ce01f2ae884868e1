// The draw of one kernel launched back to back (energy_costs.cu, stripe_energy.cu): NVML's
// energy counter (tools/power.h) over the second half of ~`seconds` of launches, and the rate the
// SMs read by events over the same launches.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "cuda_check.h"
#include "power.h"

using rt_moe::tools::PowerMeter;

// The PCI bus id of CUDA device `device`, as PowerMeter takes it.
inline std::string device_bus_id(int device) {
  char bus_id[32] = {};
  CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
  return bus_id;
}

// Whether `meter` reads the board; if not, says why on stderr, after `tool`'s name.
inline bool meter_ready(const PowerMeter& meter, const char* tool) {
  if (meter.available()) return true;
  std::fprintf(stderr, "%s: no power meter: %s\n", tool, meter.why().c_str());
  return false;
}

struct Run {
  double watts, mhz, bytes_per_s;
  int updates;
  double capped;  // share of the polls that read the clock held by the power cap (NaN: unknown)
};

// `launch` (one kernel reading `bytes`) back to back for `seconds`, synchronized every 16: the
// draw over the second half, the rate by events over the same launches.
template <typename Launch>
Run steady(PowerMeter& meter, double seconds, double bytes, Launch launch) {
  using Clock = PowerMeter::Clock;
  const PowerMeter::Active sampling(&meter);
  for (int i = 0; i < 3; ++i) launch();
  CHECK(cudaDeviceSynchronize());
  const Clock::time_point start = Clock::now();
  Clock::time_point from{};
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  long long launches = 0;
  bool second_half = false;
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    if (!second_half && std::chrono::duration<double>(Clock::now() - start).count() > seconds / 2) {
      second_half = true;
      from = Clock::now();
      CHECK(cudaEventRecord(a));
    }
    for (int i = 0; i < 16; ++i) launch();
    if (second_half) launches += 16;
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  CHECK(cudaGetLastError());
  const PowerMeter::Reading r = meter.between(from, Clock::now());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return {r.watts, r.sm_mhz, launches * bytes / (ms * 1e-3), r.updates, r.power_capped};
}

// One pattern's line: its draw, clock and rate, and its picojoules a byte above `idle_watts`;
// then a pause, so that the next pattern starts from a settled board.
inline void report_run(const char* name, const Run& r, double idle_watts) {
  std::printf("%-34s %7.0f W %6.0f MHz %7.0f GB/s %6.1f pJ/B above idle (%d updates)\n", name,
              r.watts, r.mhz, r.bytes_per_s / 1e9, (r.watts - idle_watts) / r.bytes_per_s * 1e12,
              r.updates);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}
