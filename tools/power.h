// What the GPU draws while the benchmark runs, and the floor its power limit sets.
//
// PowerMeter reads the board's energy counter (NVML's nvmlDeviceGetTotalEnergyConsumption,
// millijoules) and SM clock from a thread of its own, every ~2 ms while a PowerMeter::Active is
// alive (so that no poll falls among the bench's timed forwards), with libnvidia-ml loaded by
// dlopen (never linked: the bench must start on machines without it). A window of host time then
// reads as average watts: the energy between the counter's first and last update inside the
// window, over the time between them, so that the counter's update period (not documented; tens
// of ms on some boards) costs no precision at the window's ends. Each poll also reads why the
// clock is held down (nvmlDeviceGetCurrentClocksEventReasons, where the driver has it), so that a
// window says what share of it the power cap, or a thermal or hardware slowdown, was holding it.
//
// PowerModel is the floor that the power limit sets (docs/PERF.md 36a). An H200 runs its dense
// GEMM ceiling at its 700 W limit, below its boost clock; reading HBM at full bandwidth draws
// power too. With the idle draw P0 (the GPU warm, nothing running), the GEMM's draw Pg at its
// steady rate R and the read's draw Pr at its bandwidth BW, a FLOP costs eF = (Pg - P0) / R
// joules above idle and a byte read eB = (Pr - P0) / BW, where the bench reads random bits, as the
// weights are (a constant buffer's bytes cost ~30% less, docs/PERF.md 47b, 48a). Work of F FLOPs
// and B bytes, done within the limit Pmax, then takes at least
//   (eF F + eB B) / (Pmax - P0),
// if energy per FLOP and per byte stay as measured: a model, not a bound (at a lower clock a FLOP
// costs less energy, and the forward's L2 traffic, padding and waits cost more). The power floor
// is the larger of that and the roofline floor max(F / R, B / BW).
#pragma once

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rt_moe::tools {

struct PowerModel {
  double idle_w = 0;   // P0
  double limit_w = 0;  // Pmax
  double gemm_w = 0;   // Pg, at gemm_flops_per_s
  double gemm_flops_per_s = 0;
  double read_w = 0;  // Pr, at read_bytes_per_s
  double read_bytes_per_s = 0;

  // Whether every value is a measurement that the model can use: positive rates, an idle draw
  // below both loads' and a limit above it.
  bool valid() const;
  double joules_per_flop() const { return (gemm_w - idle_w) / gemm_flops_per_s; }
  double joules_per_byte() const { return (read_w - idle_w) / read_bytes_per_s; }
  // Seconds: (eF flops + eB bytes) / (Pmax - P0); NaN unless valid().
  double energy_floor_s(double flops, double bytes) const;
  // Seconds: the larger of energy_floor_s and max(flops / R, bytes / BW); NaN unless valid().
  double floor_s(double flops, double bytes) const;
};

class PowerMeter {
 public:
  using Clock = std::chrono::steady_clock;

  // A meter of the GPU at `pci_bus_id` (driver::DeviceInfo::pci_bus_id), sampled every `poll`,
  // through the NVML of `library` (another only in tests: tests/helpers/fake_nvml.cpp). Never
  // throws for a missing NVML or device: available() is then false and why() says why.
  explicit PowerMeter(const std::string& pci_bus_id,
                      std::chrono::microseconds poll = std::chrono::microseconds(2000),
                      const std::string& library = "libnvidia-ml.so.1");
  ~PowerMeter();
  PowerMeter(const PowerMeter&) = delete;
  PowerMeter& operator=(const PowerMeter&) = delete;

  // Sampling runs while at least one of these is alive; a window must lie inside one.
  class Active {
   public:
    explicit Active(PowerMeter* meter);  // null: nothing
    ~Active();
    Active(const Active&) = delete;
    Active& operator=(const Active&) = delete;

   private:
    PowerMeter* meter_;
  };

  bool available() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  // Whether the driver's NVML tells why the clock is held down (Reading::power_capped, slowed).
  bool reads_reasons() const;
  double limit_w() const { return limit_w_; }  // the enforced power limit

  struct Reading {
    double watts = std::nan("");   // average power over the window (see above)
    double sm_mhz = std::nan("");  // mean of the SM clock's samples in the window
    double seconds = 0;            // between the counter's first and last update in the window
    int updates = 0;               // counter updates in the window
    // Shares of the window's polls that read the clock held down by the software power cap
    // (kReasonPowerCap), and by a thermal or hardware slowdown (kReasonSlowdown); NaN where no
    // poll in the window read the reasons.
    double power_capped = std::nan("");
    double slowed = std::nan("");
    bool valid() const { return updates >= 2 && seconds > 0; }
  };
  // nvml.h's clock event reasons (nvmlClocksEventReason*): the software power cap; HW slowdown,
  // SW thermal, HW thermal and HW power brake.
  static constexpr unsigned long long kReasonPowerCap = 0x4;
  static constexpr unsigned long long kReasonSlowdown = 0x8 | 0x20 | 0x40 | 0x80;
  // The window [from, to] of host time; invalid (NaN watts) with fewer than two counter updates
  // in it, or when the meter is not available.
  Reading between(Clock::time_point from, Clock::time_point to) const;

  // Idle draw: sleeps `settle`, then reads the window of the next `window` of host time.
  Reading idle(std::chrono::milliseconds settle, std::chrono::milliseconds window);

  struct Sample {
    Clock::time_point t;
    unsigned long long millijoules;
    unsigned sm_mhz;
    // The first poll after sampling resumed: a change since the poll before is no update here.
    bool resumed = false;
    bool has_reasons = false;        // whether `reasons` was read at this poll
    unsigned long long reasons = 0;  // nvmlClocksEventReason* bits
  };
  // The same average over samples given in time order (the sampler's, or a test's).
  static Reading average(const std::vector<Sample>& samples, Clock::time_point from,
                         Clock::time_point to);

 private:
  void run(std::chrono::microseconds poll);

  struct Nvml;
  std::string why_;
  double limit_w_ = 0;
  std::unique_ptr<Nvml> nvml_;  // only the sampler thread calls it after construction
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  int active_ = 0;  // live Active objects
  bool stop_ = false;
  std::vector<Sample> samples_;
  std::thread thread_;
};

}  // namespace rt_moe::tools
