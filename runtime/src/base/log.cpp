#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "base/env.h"

namespace rt_moe {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    // Not registered in spdlog's registry: the application's loggers and its default logger stay
    // untouched, and an application that already made an "rt_moe" logger cannot collide with ours.
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto made = std::make_shared<spdlog::logger>("rt_moe", std::move(sink));
    made->set_pattern("[%H:%M:%S.%e] [rt_moe] [%^%l%$] %v");
    made->set_level(spdlog::level::from_str(env().log_level));
    return made;
  }();
  return *logger;
}

}  // namespace rt_moe
