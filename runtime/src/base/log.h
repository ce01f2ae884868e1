// rt_moe logs through its own named spdlog logger ("rt_moe"), never the application's default one.
// The level comes from RT_MOE_LOG_LEVEL (trace, debug, info, warn, error, critical, off; default
// warn) and is read once.
#pragma once

#include <spdlog/spdlog.h>

namespace rt_moe {

spdlog::logger& log();

}  // namespace rt_moe
