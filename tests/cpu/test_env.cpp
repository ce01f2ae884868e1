// The environment variables rt_moe reads (base/env.h), parsed from a fake environment.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "base/env.h"

namespace rt_moe {
namespace {

std::map<std::string, std::string>& fake() {
  static std::map<std::string, std::string> variables;
  return variables;
}

const char* fake_get(const char* name) {
  auto it = fake().find(name);
  return it == fake().end() ? nullptr : it->second.c_str();
}

}  // namespace

TEST_CASE("RT_MOE_STAGE_TIMELINE: on for 1, off when unset or 0", "[env]") {
  fake().clear();
  CHECK_FALSE(parse_env(fake_get).stage_timeline);
  // (std::string values: GCC 12 warns, wrongly, of -Wrestrict on assigning a literal here.)
  fake()["RT_MOE_STAGE_TIMELINE"] = std::string("1");
  CHECK(parse_env(fake_get).stage_timeline);
  fake()["RT_MOE_STAGE_TIMELINE"] = std::string("0");
  CHECK_FALSE(parse_env(fake_get).stage_timeline);
  fake().clear();
}

TEST_CASE("RT_MOE_KERNEL_LOG: the file to log kernels to, none when unset", "[env]") {
  fake().clear();
  CHECK(parse_env(fake_get).kernel_log.empty());
  fake()["RT_MOE_KERNEL_LOG"] = std::string("/tmp/kernels.tsv");
  CHECK(parse_env(fake_get).kernel_log == "/tmp/kernels.tsv");
  fake().clear();
}

}  // namespace rt_moe
