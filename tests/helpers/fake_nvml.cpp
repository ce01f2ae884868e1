// A stand-in for libnvidia-ml with the eight entry points tools/power.cpp resolves, so that the
// power meter's loading, sampling thread and windows run in the CPU tests (test_power.cpp).
// One device, at PCI bus id "0000:fa:00.0": a board drawing 500 W whose energy counter moves in
// steps of 10 ms (as a real counter moves less often than it is polled), an SM clock of 1234
// MHz held down by the software power cap, and a 700 W limit. Return codes as nvml.h's: 0
// success, 6 not found, 1 uninitialized.
#include <chrono>
#include <cstring>

namespace {

constexpr int kSuccess = 0, kUninitialized = 1, kNotFound = 6;
struct Device {};
Device the_device;
bool initialized = false;
const auto origin = std::chrono::steady_clock::now();

}  // namespace

extern "C" {

int nvmlInit_v2() {
  initialized = true;
  return kSuccess;
}

int nvmlShutdown() {
  initialized = false;
  return kSuccess;
}

const char* nvmlErrorString(int status) {
  return status == kNotFound ? "Not Found" : status == kUninitialized ? "Uninitialized" : "Other";
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, Device** device) {
  if (!initialized) return kUninitialized;
  if (std::strcmp(bus_id, "0000:fa:00.0") != 0) return kNotFound;
  *device = &the_device;
  return kSuccess;
}

int nvmlDeviceGetTotalEnergyConsumption(Device* device, unsigned long long* millijoules) {
  if (!initialized) return kUninitialized;
  if (device != &the_device) return kNotFound;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - origin)
                      .count();
  *millijoules = 1000000 + (unsigned long long)(ms / 10) * 5000;  // 5 J every 10 ms
  return kSuccess;
}

int nvmlDeviceGetEnforcedPowerLimit(Device* device, unsigned* milliwatts) {
  if (device != &the_device) return kNotFound;
  *milliwatts = 700000;
  return kSuccess;
}

int nvmlDeviceGetClockInfo(Device* device, int type, unsigned* mhz) {
  if (device != &the_device || type != 1) return kNotFound;  // NVML_CLOCK_SM only
  *mhz = 1234;
  return kSuccess;
}

int nvmlDeviceGetCurrentClocksEventReasons(Device* device, unsigned long long* reasons) {
  if (!initialized) return kUninitialized;
  if (device != &the_device) return kNotFound;
  *reasons = 0x4;  // nvmlClocksEventReasonSwPowerCap
  return kSuccess;
}

}  // extern "C"
