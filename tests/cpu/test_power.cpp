// rt_moe_bench's power meter and power floor (tools/power.h) without a GPU: the model's floor
// against hand-worked values, a window's average over a synthetic counter that updates less
// often than it is polled, and a meter that cannot open its device saying why.
#ifdef RT_MOE_TOOLS_DIR  // the power library is built with the tools

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "power.h"

namespace rt_moe::tools {
namespace {

using Clock = PowerMeter::Clock;
using std::chrono::milliseconds;

// Idle 100 W, limit 700 W; the GEMM 700 W at 600 TFLOP/s (1 pJ a FLOP above idle), the read
// 400 W at 4 TB/s (75 pJ a byte).
PowerModel example_model() { return {100, 700, 700, 600e12, 400, 4e12}; }

TEST_CASE("power: the floor is the larger of the energy floor and the roofline", "[power]") {
  const PowerModel m = example_model();
  REQUIRE(m.valid());
  CHECK(m.joules_per_flop() == Approx(1e-12));
  CHECK(m.joules_per_byte() == Approx(75e-12));
  // 6 TFLOP and 24 GB: roofline max(10 ms, 6 ms); energy (6 J + 1.8 J) / 600 W = 13 ms.
  CHECK(m.energy_floor_s(6e12, 24e9) == Approx(13e-3));
  CHECK(m.floor_s(6e12, 24e9) == Approx(13e-3));
  // A read alone: its energy (0.3 J / 600 W = 0.5 ms) fits under the limit, the bandwidth does not.
  CHECK(m.energy_floor_s(0, 4e9) == Approx(0.5e-3));
  CHECK(m.floor_s(0, 4e9) == Approx(1e-3));
  // A GEMM alone at the limit: its energy floor is its roofline.
  CHECK(m.floor_s(6e12, 0) == Approx(10e-3));
}

TEST_CASE("power: a model with a draw not above idle, or no rate, is no model", "[power]") {
  PowerModel m = example_model();
  m.idle_w = 700;  // not below the limit (nor the GEMM's draw)
  CHECK_FALSE(m.valid());
  CHECK(std::isnan(m.floor_s(1e12, 1e9)));
  m = example_model();
  m.read_w = 90;  // below idle: a byte would cost negative energy
  CHECK_FALSE(m.valid());
  m = example_model();
  m.gemm_flops_per_s = 0;
  CHECK_FALSE(m.valid());
  CHECK(std::isnan(m.energy_floor_s(1e12, 1e9)));
  m = example_model();
  m.read_w = std::nan("");
  CHECK_FALSE(m.valid());
}

TEST_CASE("power: a window's average spans the counter's updates inside it", "[power]") {
  // Polled every 2 ms, the counter moving every 10 ms by 5 J (500 W) and the SM clock 1500 MHz,
  // then, from 200 ms on, by 7 J (700 W) at 1300 MHz.
  const Clock::time_point t0 = Clock::now();
  std::vector<PowerMeter::Sample> samples;
  unsigned long long mj = 1000000;
  for (int ms = 0; ms <= 400; ms += 2) {
    if (ms > 0 && ms % 10 == 0) mj += ms <= 200 ? 5000 : 7000;
    samples.push_back({t0 + milliseconds(ms), mj, ms <= 200 ? 1500u : 1300u});
  }
  const PowerMeter::Reading first =
      PowerMeter::average(samples, t0 + milliseconds(15), t0 + milliseconds(185));
  REQUIRE(first.valid());
  // Updates at 20, 30, ..., 180 ms: 17, 160 ms apart, 16 x 5 J.
  CHECK(first.updates == 17);
  CHECK(first.seconds == Approx(0.160));
  CHECK(first.watts == Approx(500));
  CHECK(first.sm_mhz == Approx(1500));

  const PowerMeter::Reading second =
      PowerMeter::average(samples, t0 + milliseconds(205), t0 + milliseconds(400));
  REQUIRE(second.valid());
  CHECK(second.watts == Approx(700));
  CHECK(second.sm_mhz == Approx(1300));

  // Across the change: (5 x 5 J + 10 x 7 J) over 150 ms from 150 to 300 ms.
  const PowerMeter::Reading both =
      PowerMeter::average(samples, t0 + milliseconds(150), t0 + milliseconds(300));
  CHECK(both.watts == Approx(95.0 / 0.150));

  // One update in the window: no average (not a guess from a partial period).
  const PowerMeter::Reading one =
      PowerMeter::average(samples, t0 + milliseconds(21), t0 + milliseconds(31));
  CHECK(one.updates == 1);
  CHECK_FALSE(one.valid());
  CHECK(std::isnan(one.watts));
  // Sampling paused from 300 to 360 ms: the first poll after it shows the counter moved, but not
  // when, so it is no update; the window's average starts at the next one.
  std::vector<PowerMeter::Sample> gap;
  for (const PowerMeter::Sample& x : samples) {
    if (x.t <= t0 + milliseconds(300) || x.t >= t0 + milliseconds(360)) gap.push_back(x);
  }
  gap[std::size_t(std::find_if(gap.begin(), gap.end(),
                               [&](const auto& x) { return x.t >= t0 + milliseconds(360); }) -
                  gap.begin())]
      .resumed = true;
  const PowerMeter::Reading after =
      PowerMeter::average(gap, t0 + milliseconds(355), t0 + milliseconds(400));
  CHECK(after.updates == 4);  // 370, 380, 390, 400 ms (360's poll resumed)
  CHECK(after.seconds == Approx(0.030));
  CHECK(after.watts == Approx(700));

  // A window before every sample.
  CHECK_FALSE(PowerMeter::average(samples, t0 - milliseconds(50), t0 - milliseconds(10)).valid());
}

TEST_CASE("power: a window counts the polls that read the clock held down, by reason", "[power]") {
  // 20 polls 2 ms apart: the power cap at polls 0-14, a thermal slowdown with it at 10-14, HW
  // power brake alone at 15-16, nothing at 17-19; poll 3 did not read its reasons.
  const Clock::time_point t0 = Clock::now();
  std::vector<PowerMeter::Sample> samples;
  for (int i = 0; i < 20; ++i) {
    PowerMeter::Sample s{t0 + milliseconds(2 * i), 1000000ULL + 1000ULL * i, 1500};
    s.has_reasons = i != 3;
    if (i < 15) s.reasons |= PowerMeter::kReasonPowerCap;
    if (i >= 10 && i < 15) s.reasons |= 0x40;   // HW thermal slowdown
    if (i == 15 || i == 16) s.reasons |= 0x80;  // HW power brake
    s.reasons |= 0x1;                           // GPU idle: neither
    samples.push_back(s);
  }
  const PowerMeter::Reading all = PowerMeter::average(samples, t0, t0 + milliseconds(38));
  // 19 polls read: 14 capped (0-14 less 3), 7 slowed (10-16).
  CHECK(all.power_capped == Approx(14.0 / 19));
  CHECK(all.slowed == Approx(7.0 / 19));
  const PowerMeter::Reading tail =
      PowerMeter::average(samples, t0 + milliseconds(34), t0 + milliseconds(38));
  CHECK(tail.power_capped == 0.0);
  CHECK(tail.slowed == 0.0);
  // No poll in the window read them: unknown, not zero.
  for (PowerMeter::Sample& s : samples) s.has_reasons = false;
  const PowerMeter::Reading none = PowerMeter::average(samples, t0, t0 + milliseconds(38));
  CHECK(std::isnan(none.power_capped));
  CHECK(std::isnan(none.slowed));
}

TEST_CASE("power: a meter that cannot open its device says why and reads nothing", "[power]") {
  // No NVML on a CPU-only machine; where there is one, no device sits at this bus id.
  PowerMeter meter("ffff:ff:1f.7");
  const PowerMeter::Active sampling(&meter);  // nothing to sample: no thread runs
  REQUIRE_FALSE(meter.available());
  INFO(meter.why());
  const bool named = meter.why().find("libnvidia-ml") != std::string::npos ||
                     meter.why().find("ffff:ff:1f.7") != std::string::npos ||
                     meter.why().find("nvmlInit") != std::string::npos;
  CHECK(named);
  const Clock::time_point now = Clock::now();
  CHECK_FALSE(meter.between(now - milliseconds(10), now).valid());
  CHECK_FALSE(meter.idle(milliseconds(0), milliseconds(1)).valid());
  CHECK_FALSE(meter.reads_reasons());
}

TEST_CASE("power: a meter over an NVML samples inside its windows only", "[power]") {
  // tests/helpers/fake_nvml.cpp: 500 W in steps of 5 J every 10 ms, 1234 MHz, a 700 W limit.
  PowerMeter meter("0000:fa:00.0", std::chrono::microseconds(2000), RT_MOE_FAKE_NVML);
  INFO(meter.why());
  REQUIRE(meter.available());
  CHECK(meter.limit_w() == Approx(700));

  const Clock::time_point before = Clock::now();
  std::this_thread::sleep_for(milliseconds(100));
  // No Active: nothing sampled, nothing read.
  CHECK_FALSE(meter.between(before, Clock::now()).valid());

  Clock::time_point from, to;
  {
    const PowerMeter::Active sampling(&meter);
    from = Clock::now();
    std::this_thread::sleep_for(milliseconds(300));
    to = Clock::now();
  }
  const PowerMeter::Reading r = meter.between(from, to);
  REQUIRE(r.valid());
  CHECK(r.updates >= 20);  // ~30 steps, less any a slow poll merged
  CHECK(r.seconds > 0.2);
  CHECK(r.watts == Approx(500).epsilon(0.1));  // the poll's lag at either end: <= ~2 ms of 200+
  CHECK(r.sm_mhz == Approx(1234));
  REQUIRE(meter.reads_reasons());
  CHECK(r.power_capped == 1.0);  // every poll: the software power cap
  CHECK(r.slowed == 0.0);

  const PowerMeter::Reading idle = meter.idle(milliseconds(20), milliseconds(200));
  REQUIRE(idle.valid());
  CHECK(idle.watts == Approx(500).epsilon(0.1));

  PowerMeter elsewhere("0000:fb:00.0", std::chrono::microseconds(2000), RT_MOE_FAKE_NVML);
  REQUIRE_FALSE(elsewhere.available());
  CHECK(elsewhere.why().find("0000:fb:00.0") != std::string::npos);
  CHECK(elsewhere.why().find("Not Found") != std::string::npos);
}

}  // namespace
}  // namespace rt_moe::tools

#endif  // RT_MOE_TOOLS_DIR
