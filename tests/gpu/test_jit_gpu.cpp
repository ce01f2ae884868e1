// The JIT core on a GPU: a template compiled through the cache, loaded and launched through the
// driver, its result checked; then a second process loads the same kernel from disk without
// compiling.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "child_process.h"
#include "disk_cache.h"
#include "driver.h"
#include "kernels.h"
#include "params.h"
#include "reference.h"
#include "specs.h"

namespace rt_moe {
namespace {

constexpr int kH = 1032;  // not a multiple of any tile
constexpr int kSlots = 3;
constexpr int kTokens = 37;

KernelSpec combine_kernel(YDType y_dtype = YDType::kF32) {
  MoeConfig config;
  config.d_hidden = kH;
  config.top_k = kSlots;
  config.n_shared_experts = 0;
  config.dtype = DType::kBF16;
  config.y_dtype = y_dtype;
  return combine_spec(config);
}

// Launches the combine kernel of `y_dtype` on random data and checks every output against the
// host sum. fp32 y: random bf16 values; scaled fp16 y: random fp16 bits of y * 2^-8 (YOps).
void launch_and_check(const Kernel& kernel, YDType y_dtype = YDType::kF32) {
  const bool f16 = y_dtype == YDType::kF16;
  std::vector<std::uint16_t> y_bits(std::size_t(kTokens) * kSlots * kH);
  test::fill_random(y_bits, f16 ? DType::kF16 : DType::kBF16, 1.0f, 1234);
  std::vector<float> y(y_bits.size());  // the values the combine adds
  for (std::size_t i = 0; i < y.size(); ++i) {
    y[i] = test::bits_to_float(f16 ? DType::kF16 : DType::kBF16, y_bits[i]);
  }
  driver::DeviceBuffer y_dev(y.size() * y_bytes(y_dtype)), out_dev(std::size_t(kTokens) * kH * 2);
  if (f16) {
    y_dev.upload(y_bits.data(), y_bits.size() * 2);
  } else {
    y_dev.upload(y.data(), y.size() * 4);
  }
  RT_MOE_CALL(cuMemsetD8Async, out_dev.get(), 0xFF, out_dev.bytes(), nullptr);
  CombineParams params{y_dev.as<const void>(), out_dev.as<void>(), kTokens};
  launch(kernel, {combine_blocks(kTokens, kH, y_dtype)}, params, nullptr);
  RT_MOE_CALL(cuCtxSynchronize);
  std::vector<std::uint16_t> out(std::size_t(kTokens) * kH);
  out_dev.download(out.data(), out.size() * 2);
  std::int64_t wrong = 0;
  for (int t = 0; t < kTokens; ++t) {
    for (int n = 0; n < kH; ++n) {
      float sum = 0;
      for (int s = 0; s < kSlots; ++s) {
        sum += y[(std::size_t(t) * kSlots + s) * kH + n];
      }
      // Same order, same fp32 additions, the same exact scale, one rounding: bitwise equal.
      const float expected = f16 ? sum * 256.f : sum;
      if (out[std::size_t(t) * kH + n] != test::float_to_bits(DType::kBF16, expected)) ++wrong;
    }
  }
  INFO("y " << to_string(y_dtype) << ": " << wrong << " of " << kTokens * kH << " outputs wrong");
  REQUIRE(wrong == 0);
}

std::string temp_dir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "rt_moe_jit_XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE(
    "a template compiles through the cache, loads, launches, and a second process loads "
    "it from disk without compiling",
    "[jit]") {
  const std::string dir = temp_dir();
  driver::PrimaryContext context(0);
  driver::ScopedContext scope(context.get());
  const std::string arch = driver::device_info(0).arch();
  {
    cache::CubinCache cubins(cache::CacheOptions{dir, false, 1ull << 30});
    REQUIRE(cubins.persistent());
    KernelCache kernels(context.get(), arch, cubins);
    auto start = std::chrono::steady_clock::now();
    const Kernel& kernel = kernels.get(combine_kernel());
    double cold = seconds_since(start);
    CHECK(cubins.stats().compiles == 1);
    CHECK(cubins.stats().disk_hits == 0);
    CHECK(cubins.stats().stores == 1);
    std::printf("cold compile + load of %s: %.3f s\n", kernel.name.c_str(), cold);
    launch_and_check(kernel);
  }
  // The second process: this binary again, running the hidden child test below.
  test::run_child_test("second process loads from disk", {"RT_MOE_TEST_JIT_DIR=" + dir});
  std::filesystem::remove_all(dir);
}

TEST_CASE("second process loads from disk", "[.child]") {
  const char* dir = std::getenv("RT_MOE_TEST_JIT_DIR");
  REQUIRE(dir != nullptr);
  driver::PrimaryContext context(0);
  driver::ScopedContext scope(context.get());
  cache::CubinCache cubins(cache::CacheOptions{dir, false, 1ull << 30});
  KernelCache kernels(context.get(), driver::device_info(0).arch(), cubins);
  auto start = std::chrono::steady_clock::now();
  const Kernel& kernel = kernels.get(combine_kernel());
  double warm = seconds_since(start);
  CHECK(cubins.stats().compiles == 0);
  CHECK(cubins.stats().disk_hits == 1);
  std::printf("warm load (disk hit + module load) of %s: %.3f s\n", kernel.name.c_str(), warm);
  launch_and_check(kernel);
}

TEST_CASE("the combine of scaled fp16 y sums every slot in order, bit for bit", "[jit]") {
  const std::string dir = temp_dir();
  driver::PrimaryContext context(0);
  driver::ScopedContext scope(context.get());
  cache::CubinCache cubins(cache::CacheOptions{dir, false, 1ull << 30});
  KernelCache kernels(context.get(), driver::device_info(0).arch(), cubins);
  launch_and_check(kernels.get(combine_kernel(YDType::kF16)), YDType::kF16);
  std::filesystem::remove_all(dir);
}

TEST_CASE("driver errors name the call and the CUDA error", "[jit]") {
  driver::PrimaryContext context(0);
  driver::ScopedContext scope(context.get());
  try {
    driver::DeviceBuffer huge(std::size_t(1) << 50);  // 1 PiB
    FAIL("a 1 PiB allocation succeeded");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(e.code() == ErrorCode::kCuda);
    CHECK(what.find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos);
  }
}

}  // namespace rt_moe
