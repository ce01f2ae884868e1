// The two ceilings of the floor (REFERENCE.md section 5), measured in the benchmark's own run:
// HBM read bandwidth (a read kernel, kernel_templates/bench.cuh) and the dense GEMM rate (cuBLAS,
// loaded with dlopen; never linked). Also the L2 flush that keeps one timed forward from reading
// the previous one's data out of L2.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <functional>
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
  // GEMM only: `value` is the steady rate, that of products run back to back for seconds, as an
  // engine's prefill runs them, by when the H200 is at its power limit (700 W) and its clock is
  // down from the 1.98 GHz boost; `burst` is the median of single products (after a warm-up of a
  // few), which a GPU that was idle runs at the boost clock. The steady rate is the median of
  // the windows of `window_count` products (~25 ms, one prefill forward) in the second half of
  // `steady_s` seconds of them; `steady_first` and `steady_last` are the first window's and the
  // median of the last five, to show the decline. 0 when not measured.
  double burst = 0;
  double steady_s = 0;
  int window_count = 0;
  double steady_first = 0;
  double steady_last = 0;
  // The host times between which the windows that make the steady rate ran (for PowerMeter),
  // here and in measure_hbm_read_steady.
  std::chrono::steady_clock::time_point steady_from, steady_to;
  // HBM read only: each kernel variant measured, and which is the fastest (the value's).
  struct Variant {
    std::string name;
    double value;
  };
  std::vector<Variant> variants;
  std::size_t best_variant = 0;
};

// What the read kernels' buffer holds. kConstant: every 32-bit word 0x3f803f80 (bf16 1.0 pairs),
// the floor's ceiling as measured since version 1. kRandom: random bits shaped as 16-bit values
// below 2 in magnitude (bench.cuh's FillBits), as a forward's weights are: the same read draws
// ~45% more power above idle than of the constant (docs/PERF.md 47b), which a board at its power
// limit pays in clock.
enum class ReadData { kConstant, kRandom };
const char* to_string(ReadData data);

// Median over `iters` passes of a read of a >= 2 GiB buffer, after warm-up. With `bytes` > 0:
// a read of that many bytes instead (a diagnostic: how fast one short kernel can stream, e.g. the
// 0.26-0.53 GB a decode GEMM reads; never the floor's ceiling).
Ceiling measure_hbm_read(KernelCache& kernels, const driver::DeviceInfo& device, CUstream stream,
                         int iters = 20, std::size_t bytes = 0,
                         ReadData data = ReadData::kConstant);

// Read variant `variant` of measure_hbm_read (Ceiling::variants' order; 0: plain loads, 4 in
// flight a thread) over a buffer of `data` back to back for `seconds`, in windows of ~25 ms timed
// with events: `value` is the median rate of the second half's windows, `steady_from` and
// `steady_to` when they ran. What the read draws at full bandwidth is read between those (the
// power floor's byte cost, tools/power.h).
Ceiling measure_hbm_read_steady(KernelCache& kernels, const driver::DeviceInfo& device,
                                CUstream stream, double seconds = 1.0,
                                ReadData data = ReadData::kConstant, std::size_t variant = 0);

// Dense 8192^3 GEMM of `dtype` with fp32 accumulation through cublasGemmEx: the burst rate
// (median of `iters` single products after warm-up) and the steady rate (`steady_s` seconds of
// products back to back, see Ceiling), which is the value. Without a loadable cuBLAS:
// REFERENCE.md's H200 value (a median of many PyTorch runs), measured = false.
Ceiling measure_gemm_rate(DType dtype, CUstream stream, int iters = 10, double steady_s = 2.0);

// Evicts what the last run left in L2 by reading a scratch buffer 5x its size (256 MiB) on
// `stream`, with the read kernel of the HBM ceiling. A read, not a write: a write leaves L2 full
// of dirty lines, whose write-back the next timed run would pay (up to the L2's 50 MB of DRAM
// writes), where the read ceiling, measured back to back with no flush, pays none.
class L2Flush {
 public:
  L2Flush(CUcontext context, const std::string& arch, const driver::DeviceInfo& device);
  void operator()(CUstream stream);

 private:
  KernelCache kernels_;
  const Kernel* kernel_ = nullptr;
  driver::DeviceBuffer scratch_;
  driver::DeviceBuffer block_sums_;
  unsigned blocks_ = 0;
};

double median(std::vector<double> values);

// Times each of `bodies` (work each enqueues on `stream`) between two device events, in turns:
// `iters` rounds, each body once a round in order; with `flush`, L2 is flushed before each,
// outside its events. Returns each body's milliseconds, round by round. In turns, bodies compared
// with each other run in the same clock and power state (docs/PERF.md 29c).
inline std::vector<std::vector<double>> time_events_in_turns(
    CUstream stream, int iters, L2Flush* flush, const std::vector<std::function<void()>>& bodies) {
  std::vector<driver::Event> events;
  for (int i = 0; i < iters; ++i) {
    for (const std::function<void()>& body : bodies) {
      if (flush != nullptr) (*flush)(stream);
      events.push_back(driver::create_event());
      RT_MOE_CALL(cuEventRecord, events.back().get(), stream);
      body();
      events.push_back(driver::create_event());
      RT_MOE_CALL(cuEventRecord, events.back().get(), stream);
    }
  }
  RT_MOE_CALL(cuStreamSynchronize, stream);
  std::vector<std::vector<double>> ms(bodies.size());
  for (std::size_t e = 0; e < events.size(); e += 2) {
    ms[(e / 2) % bodies.size()].push_back(driver::elapsed_ms(events[e].get(), events[e + 1].get()));
  }
  return ms;
}

// Times `body` `iters` times, as time_events_in_turns with one body.
inline std::vector<double> time_events_ms(CUstream stream, int iters, L2Flush* flush,
                                          const std::function<void()>& body) {
  return time_events_in_turns(stream, iters, flush, {body}).front();
}

}  // namespace rt_moe::tools
