#include "power.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <type_traits>

namespace rt_moe::tools {

bool PowerModel::valid() const {
  const auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  return positive(idle_w) && positive(gemm_flops_per_s) && positive(read_bytes_per_s) &&
         std::isfinite(gemm_w) && std::isfinite(read_w) && std::isfinite(limit_w) &&
         gemm_w > idle_w && read_w > idle_w && limit_w > idle_w;
}

double PowerModel::energy_floor_s(double flops, double bytes) const {
  if (!valid()) return std::nan("");
  return (joules_per_flop() * flops + joules_per_byte() * bytes) / (limit_w - idle_w);
}

double PowerModel::floor_s(double flops, double bytes) const {
  if (!valid()) return std::nan("");
  return std::max(
      {energy_floor_s(flops, bytes), flops / gemm_flops_per_s, bytes / read_bytes_per_s});
}

// The few NVML entry points the meter needs (nvml.h's C ABI: an int return code, 0 = success;
// an opaque device handle), resolved from a dlopen'ed libnvidia-ml.
struct PowerMeter::Nvml {
  using Device = struct nvmlDevice_st*;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*handle_by_bus_id)(const char*, Device*) = nullptr;
  int (*energy)(Device, unsigned long long*) = nullptr;   // mJ since the driver loaded
  int (*power_limit)(Device, unsigned*) = nullptr;        // mW
  int (*clock)(Device, int, unsigned*) = nullptr;         // MHz
  int (*reasons)(Device, unsigned long long*) = nullptr;  // optional: clock event reasons
  static constexpr int kClockSm = 1;                      // NVML_CLOCK_SM
  Device device = nullptr;
  bool initialized = false;

  std::string text(int status) const {
    const char* s = error_string != nullptr ? error_string(status) : nullptr;
    return s != nullptr ? fmt::format("{} ({})", s, status) : fmt::format("status {}", status);
  }

  // Empty on success, else why the meter cannot run.
  std::string open(const std::string& library, const std::string& bus_id) {
    // Never closed: the driver's library may be in use by others in the process.
    void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* error = dlerror();
      return fmt::format("cannot load {}: {}", library, error ? error : "unknown error");
    }
    const auto resolve = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      return fn != nullptr;
    };
    if (!resolve(init, "nvmlInit_v2") || !resolve(shutdown, "nvmlShutdown") ||
        !resolve(error_string, "nvmlErrorString") ||
        !resolve(handle_by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
        !resolve(energy, "nvmlDeviceGetTotalEnergyConsumption") ||
        !resolve(power_limit, "nvmlDeviceGetEnforcedPowerLimit") ||
        !resolve(clock, "nvmlDeviceGetClockInfo")) {
      return fmt::format(
          "{} lacks an entry point the meter needs (nvmlInit_v2, "
          "nvmlDeviceGetTotalEnergyConsumption, ...)",
          library);
    }
    // Optional (the meter runs without): the current name, then the one older drivers export.
    if (!resolve(reasons, "nvmlDeviceGetCurrentClocksEventReasons")) {
      resolve(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    }
    if (int s = init(); s != 0) return fmt::format("nvmlInit_v2 failed: {}", text(s));
    initialized = true;
    if (int s = handle_by_bus_id(bus_id.c_str(), &device); s != 0) {
      return fmt::format("NVML has no device at PCI bus id '{}': {}", bus_id, text(s));
    }
    unsigned long long mj = 0;
    if (int s = energy(device, &mj); s != 0) {
      return fmt::format("nvmlDeviceGetTotalEnergyConsumption failed: {}", text(s));
    }
    return {};
  }

  ~Nvml() {
    if (initialized) shutdown();
  }
};

PowerMeter::PowerMeter(const std::string& pci_bus_id, std::chrono::microseconds poll,
                       const std::string& library) {
  nvml_ = std::make_unique<Nvml>();
  why_ = nvml_->open(library, pci_bus_id);
  if (!why_.empty()) return;
  unsigned mw = 0;
  if (nvml_->power_limit(nvml_->device, &mw) == 0) limit_w_ = mw * 1e-3;
  thread_ = std::thread([this, poll] { run(poll); });
}

bool PowerMeter::reads_reasons() const { return available() && nvml_->reasons != nullptr; }

PowerMeter::~PowerMeter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

PowerMeter::Active::Active(PowerMeter* meter) : meter_(meter) {
  if (meter_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(meter_->mutex_);
    ++meter_->active_;
  }
  meter_->wake_.notify_all();
}

PowerMeter::Active::~Active() {
  if (meter_ == nullptr) return;
  std::lock_guard<std::mutex> lock(meter_->mutex_);
  --meter_->active_;
}

void PowerMeter::run(std::chrono::microseconds poll) {
  // Readings are taken right after each window, so only the last minutes are kept.
  constexpr std::size_t kMaxSamples = std::size_t(1) << 20;
  bool resumed = true;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (active_ == 0) {
      wake_.wait(lock, [this] { return stop_ || active_ > 0; });
      resumed = true;
      continue;
    }
    lock.unlock();
    Sample s{Clock::now(), 0, 0};
    const bool read = nvml_->energy(nvml_->device, &s.millijoules) == 0;
    if (read && nvml_->clock(nvml_->device, Nvml::kClockSm, &s.sm_mhz) != 0) s.sm_mhz = 0;
    s.has_reasons =
        read && nvml_->reasons != nullptr && nvml_->reasons(nvml_->device, &s.reasons) == 0;
    lock.lock();
    if (read) {
      s.resumed = resumed;
      resumed = false;
      if (samples_.size() >= kMaxSamples) {
        samples_.erase(samples_.begin(), samples_.begin() + kMaxSamples / 2);
      }
      samples_.push_back(s);
    }
    lock.unlock();
    std::this_thread::sleep_for(poll);
    lock.lock();
  }
}

PowerMeter::Reading PowerMeter::average(const std::vector<Sample>& samples, Clock::time_point from,
                                        Clock::time_point to) {
  Reading r;
  const auto first = std::lower_bound(samples.begin(), samples.end(), from,
                                      [](const Sample& s, Clock::time_point t) { return s.t < t; });
  const Sample* first_update = nullptr;
  const Sample* last_update = nullptr;
  double mhz_sum = 0;
  int mhz_count = 0, reason_polls = 0, capped = 0, slowed = 0;
  for (auto it = first; it != samples.end() && it->t <= to; ++it) {
    if (it->sm_mhz > 0) {
      mhz_sum += it->sm_mhz;
      ++mhz_count;
    }
    if (it->has_reasons) {
      ++reason_polls;
      capped += (it->reasons & kReasonPowerCap) != 0;
      slowed += (it->reasons & kReasonSlowdown) != 0;
    }
    // An update: the counter moved since the sample before (which may lie before the window).
    if (it == samples.begin() || it->resumed || std::prev(it)->millijoules == it->millijoules) {
      continue;
    }
    if (first_update == nullptr) first_update = &*it;
    last_update = &*it;
    ++r.updates;
  }
  if (mhz_count > 0) r.sm_mhz = mhz_sum / mhz_count;
  if (reason_polls > 0) {
    r.power_capped = double(capped) / reason_polls;
    r.slowed = double(slowed) / reason_polls;
  }
  if (r.updates >= 2) {
    r.seconds = std::chrono::duration<double>(last_update->t - first_update->t).count();
    if (r.seconds > 0) {
      r.watts = double(last_update->millijoules - first_update->millijoules) * 1e-3 / r.seconds;
    }
  }
  return r;
}

PowerMeter::Reading PowerMeter::between(Clock::time_point from, Clock::time_point to) const {
  if (!available()) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  return average(samples_, from, to);
}

PowerMeter::Reading PowerMeter::idle(std::chrono::milliseconds settle,
                                     std::chrono::milliseconds window) {
  if (!available()) return {};
  const Active active(this);
  std::this_thread::sleep_for(settle);
  const Clock::time_point from = Clock::now();
  std::this_thread::sleep_for(window);
  return between(from, Clock::now());
}

}  // namespace rt_moe::tools
