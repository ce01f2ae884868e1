// Every kernel template compiles for sm_90a with NVRTC, for real model shapes and every tile the
// heuristic can choose, so a broken template fails the suite, not a user; and none spills
// registers to local memory (the cubins' .nv.info says). No GPU needed.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "base/env.h"
#include "compiler.h"
#include "cubin_info.h"
#include "kernels.h"
#include "nvrtc_sm90a.h"
#include "reference.h"
#include "rt_moe/error.h"
#include "specs.h"
#include "test_util.h"

namespace rt_moe {

using test::make_config;

namespace {

// Whether ptxas kept the kernel of `cubin` out of local memory (no spills, no stack frame); what
// it used goes with the caller's next assertion (an INFO here would end with this scope).
bool no_local_memory(const std::string& cubin) {
  const std::optional<CubinResources> resources = cubin_resources(cubin);
  if (!resources) return false;
  UNSCOPED_INFO("registers " << resources->registers << ", frame " << resources->frame_bytes
                             << " B, stack " << resources->stack_bytes << " B");
  return resources->registers > 0 && !resources->uses_local_memory();
}

// Compiles `spec` for sm_90a and checks its cubin: an ELF, kept out of local memory, and no wgmma
// that ptxas serialized or made wait for MMAs in flight (the compile log goes with a failure).
void check_sm90a_kernel(const KernelSpec& spec) {
  const nvrtc::Result compiled = compile_result_for_sm90a(spec);
  CHECK(is_elf(compiled.cubin));
  CHECK(no_local_memory(compiled.cubin));
  INFO(compiled.log);
  CHECK(nvrtc::wgmma_stalls(compiled.log).empty());
}

}  // namespace

TEST_CASE("a cubin's registers and local memory are read from its .nv.info", "[nvrtc]") {
  nvrtc::Request request;
  request.arch = "sm_90a";
  request.name = "plain";
  request.source = "extern \"C\" __global__ void plain(float* out) { out[threadIdx.x] *= 2.f; }\n";
  const std::optional<CubinResources> plain = cubin_resources(nvrtc::compile(request).cubin);
  REQUIRE(plain);
  CHECK(plain->registers > 0);
  CHECK_FALSE(plain->uses_local_memory());
  // An array indexed by a run-time value cannot live in registers: a stack frame.
  request.name = "spills";
  request.source =
      "extern \"C\" __global__ void spills(float* out, int n) {\n"
      "  float a[256];\n"
      "  for (int i = 0; i < 256; ++i) a[i] = out[i * n];\n"
      "  float s = 0.f;\n"
      "  for (int i = 0; i < n; ++i) s += a[(i * 7) & 255];\n"
      "  out[threadIdx.x] = s;\n"
      "}\n";
  const std::string cubin = nvrtc::compile(request).cubin;
  const std::optional<CubinResources> spills = cubin_resources(cubin);
  REQUIRE(spills);
  CHECK(spills->frame_bytes >= 1024);
  CHECK(spills->uses_local_memory());
  CHECK_FALSE(no_local_memory(cubin));
  // Not an ELF image, or a cut one: no answer, and no read outside the bytes.
  CHECK_FALSE(cubin_resources(""));
  CHECK_FALSE(cubin_resources("RTMOECUB not a cubin"));
  for (std::size_t size :
       {std::size_t(4), std::size_t(63), std::size_t(64), cubin.size() / 2, cubin.size() - 1}) {
    INFO(size);
    const std::optional<CubinResources> cut =
        cubin_resources(std::string_view(cubin).substr(0, size));
    CHECK((!cut || cut->frame_bytes == spills->frame_bytes));
  }
}

TEST_CASE("ptxas's serialized wgmma is found in the compile log", "[nvrtc]") {
  // The same wgmma twice: inline, then across a call ptxas may not inline, which serializes the
  // pipeline (C7510) and makes ptxas wait for the MMA before the callee returns (C7517).
  const std::string body =
      "  asm volatile(\"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, "
      "%5, 1, 1, 1, 0, 0;\\n\"\n"
      "               : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3]) : \"l\"(a), "
      "\"l\"(b));\n";
  auto kernel = [&](const char* qualifier) {
    return fmt::format(
        "{0} void mma(float* d, unsigned long long a, unsigned long long b) {{\n{1}}}\n"
        "extern \"C\" __global__ void stalls(float* out, unsigned long long a, int n) {{\n"
        "  float d[4] = {{0.f, 0.f, 0.f, 0.f}};\n"
        "  for (int k = 0; k < n; ++k) {{\n"
        "    asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
        "    mma(d, a + k, a + 2 * k);\n"
        "    asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
        "  }}\n"
        "  asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
        "  out[threadIdx.x] = d[0] + d[1] + d[2] + d[3];\n}}\n",
        qualifier, body);
  };
  auto stalls = [&](const char* qualifier) {
    nvrtc::Request request;
    request.name = "stalls";
    request.source = kernel(qualifier);
    request.arch = "sm_90a";
    const nvrtc::Result compiled = nvrtc::compile(request);
    REQUIRE(is_elf(compiled.cubin));
    INFO(compiled.log);
    return nvrtc::wgmma_stalls(compiled.log);
  };
  const std::vector<std::string> called = stalls("__device__ __noinline__");
  REQUIRE(!called.empty());
  bool serialized = false;
  for (const std::string& line : called) {
    serialized = serialized || line.find("(C7510)") != std::string::npos;
    CHECK(line.find('\n') == std::string::npos);
  }
  CHECK(serialized);
  CHECK(stalls("__device__ __forceinline__").empty());
  // Only the overlap-losing advisories: an injected warpgroup.arrive (C7519) is not one.
  CHECK(nvrtc::wgmma_stalls("ptxas info    : (C7519) warpgroup.arrive is injected\n").empty());
  CHECK(nvrtc::wgmma_stalls("ptxas info    : (C7517) warpgroup.wait is injected\nnext").size() ==
        1);
  // Every serialization, whatever its reason's code (C7514: accumulators read inside the stage).
  CHECK(nvrtc::wgmma_stalls("x\nptxas info    : (C7514) Potential Performance Loss: "
                            "wgmma.mma_async instructions are serialized due to ...\n")
            .size() == 1);
}

TEST_CASE("every kernel template compiles for sm_90a (DeepSeek-V3 shape, all tiles)", "[nvrtc]") {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (YDType y : {YDType::kF16, YDType::kF32}) {
      MoeConfig c = make_config(7168, 2048, 256, 1, 8, dtype);
      c.y_dtype = y;
      // One token count per tile the heuristic picks: decode to prefill.
      for (long long tokens : {1LL, 64LL, 512LL, 1024LL, 4096LL, 16384LL}) {
        GemmTile tile = default_tile(c, tokens, "sm_90a");
        for (const KernelSpec& spec : forward_specs(c, tile, tokens)) {
          // y's type reaches the kernels that write or read it, and only those.
          const bool has_y = spec.family == "combine" || spec.family == "grouped_gemm_decode" ||
                             spec.name().find("kDown") != std::string::npos;
          INFO(spec.name());
          CHECK((spec.name().find("rt_moe::F16>") != std::string::npos) ==
                (has_y && y == YDType::kF16));
          // fp32 y is each template's default: its instances are spelled without Y.
          CHECK(spec.name().find("float") == std::string::npos);
          check_sm90a_kernel(spec);
        }
      }
    }
  }
}

TEST_CASE(
    "the stage timeline's entries (RT_MOE_STAGE_TIMELINE) compile, the default's do not change",
    "[nvrtc]") {
  const MoeConfig c = make_config(7168, 2048, 256, 1, 8, DType::kBF16);
  for (long long tokens : {1LL, 512LL, 4096LL}) {
    const GemmTile tile = default_tile(c, tokens, "sm_90a");
    for (const KernelSpec& spec : forward_specs(c, tile, tokens)) {
      INFO(spec.name());
      // Without RT_MOE_STAGE_TIMELINE the source has no timeline, and the cache keys of
      // production kernels stay as they were.
      CHECK(spec.source() == spec.source(env().stage_timeline));
      CHECK(spec.source(false).find(kTimelineName) == std::string::npos);
      const std::string timed = spec.source(true);
      CHECK(timed.find(kTimelineName) != std::string::npos);
      nvrtc::Request request;
      request.name = spec.name();
      request.source = timed;
      request.arch = "sm_90a";
      request.name_expressions = {std::string("&") + kMetaName, std::string("&") + kTimelineName};
      const std::string cubin = nvrtc::compile(request).cubin;
      CHECK(is_elf(cubin));
      CHECK(no_local_memory(cubin));
    }
  }
}

TEST_CASE("the stage timeline's slots reduce to the earliest start and the latest end",
          "[timeline]") {
  std::vector<std::uint64_t> words = cleared_timeline();
  REQUIRE(words.size() * sizeof(std::uint64_t) == kTimelineBytes);
  // No block ran: no span.
  CHECK(reduce_timeline(words).first == ~std::uint64_t(0));
  CHECK(reduce_timeline(words).second == 0);
  // Blocks of three slots ran; the earliest start and the latest end are in different slots, and
  // the slots no block ran in (start ~0, end 0) take no part.
  const auto slot = [&](int s) { return words.begin() + std::ptrdiff_t(s) * kTimelineSlotWords; };
  slot(0)[0] = 500, slot(0)[1] = 900;
  slot(7)[0] = 300, slot(7)[1] = 800;
  slot(kTimelineSlots - 1)[0] = 600, slot(kTimelineSlots - 1)[1] = 1200;
  CHECK(reduce_timeline(words) == std::pair<std::uint64_t, std::uint64_t>{300, 1200});
}

TEST_CASE("the fused decode tile's smallest buckets run one kernel for top-k, offsets and scatter",
          "[nvrtc]") {
  MoeConfig c = make_config(7168, 2048, 256, 1, 8, DType::kBF16);
  for (long long tokens : {1LL, kRouteDecodeMaxTokens}) {
    const GemmTile fused = default_tile(c, tokens, "sm_90a");
    REQUIRE(fused.fused);
    REQUIRE(uses_route_decode(fused, tokens));
    const std::vector<KernelSpec> specs = forward_specs(c, fused, tokens);
    REQUIRE(specs.size() == 7);
    CHECK(specs[1].family == "route_decode");
    CHECK(specs[1].name() == specs[2].name());
    CHECK(specs[1].name() == specs[3].name());
    // Its layout is the fused tile's 16-row blocks, with the shared expert as one more expert.
    CHECK(specs[1].name().find(fmt::format(", {}, {}>", c.n_shared_experts, kFusedBlockM)) !=
          std::string::npos);
    CHECK(is_elf(compile_for_sm90a(specs[1])));
  }
  // Larger buckets keep the three kernels, with the fused tile (64 tokens) or another (4096).
  for (long long tokens : {64LL, 4096LL}) {
    const GemmTile tile = default_tile(c, tokens, "sm_90a");
    CHECK(tile.fused == (tokens == 64));
    CHECK_FALSE(uses_route_decode(tile, tokens));
    const std::vector<KernelSpec> three = forward_specs(c, tile, tokens);
    CHECK(three[1].family == "routing");
    CHECK(three[2].family == "dispatch");
    CHECK(three[3].family == "dispatch");
    CHECK(three[2].name() != three[3].name());
  }
}

TEST_CASE("every sm_90a tuner candidate of the wgmma paths compiles (gpumode shape, S = 2)",
          "[nvrtc]") {
  MoeConfig c = make_config(7168, 2048, 32, 2, 4, DType::kBF16);
  MoeConfig y32 = c;  // the down GEMMs with fp32 y as well as the default fp16
  y32.y_dtype = YDType::kF32;
  int tma_tiles = 0;
  for (const GemmTile& tile : candidate_tiles(c, 8192, "sm_90a", 227 * 1024)) {
    if (tile.sm != 90) continue;
    tma_tiles += tile.ws ? 1 : 0;
    for (const auto& [config, stage] :
         {std::pair{c, GemmStage::kGateUp}, {c, GemmStage::kDown}, {y32, GemmStage::kDown}}) {
      const KernelSpec spec = gemm_spec(config, stage, tile);
      INFO(spec.name());
      check_sm90a_kernel(spec);
      // The warp-specialized kernels need a register cap at entry for setmaxnreg.
      CHECK((spec.source().find("__launch_bounds__(RtMoeKernel::kThreads, 1)") !=
             std::string::npos) == tile.ws);
    }
  }
  CHECK(tma_tiles == 16);  // 11 of grouped_gemm_sm90_ws.cuh (3 "sy"), 5 of ..._sm90_swap.cuh
  // Shapes the TMA path cannot take (H or I not a multiple of 64) never get its tiles.
  for (const GemmTile& tile : candidate_tiles(make_config(1032, 200, 16, 1, 4, DType::kBF16), 8192,
                                              "sm_90a", 227 * 1024)) {
    CHECK_FALSE(tile.ws);
  }
}

TEST_CASE("the swapped-operand tile: the default from 17 to 64 and 129 to 640 rows an expert",
          "[nvrtc]") {
  MoeConfig c = make_config(7168, 2048, 256, 1, 8, DType::kBF16);
  // DeepSeek-V3: ~143 rows an expert at T = 4096, 287 at 8192; gpumode bench 1 (T = 2048): 311
  // (measured on the H200, docs/PERF.md).
  CHECK(default_tile(c, 4096, "sm_90a").describe() == "sm90swap 160x256x64 s4");
  CHECK(default_tile(c, 8192, "sm_90a").describe() == "sm90swap 144x256x64 s4");
  CHECK(default_tile(c, 9200, "sm_90a").describe() == "sm90swap 160x256x64 s4");  // 323 rows
  CHECK(default_tile(make_config(7168, 2048, 32, 1, 4, DType::kBF16), 2048, "sm_90a").describe() ==
        "sm90swap 144x256x64 s4");
  CHECK(default_tile(c, 16384, "sm_90a").describe() == "sm90swap 160x256x64 s4");       // 574 rows
  CHECK(default_tile(c, 18300, "sm_90a").describe() == "sm90ws 128x256x64 wg2 s4 sy");  // 641
  CHECK(default_tile(make_config(7168, 2048, 32, 1, 4, DType::kBF16), 8192, "sm_90a").describe() ==
        "sm90ws 128x256x64 wg2 s4 sy");  // gpumode bench 2: 1241 rows
  CHECK(default_tile(c, 512, "sm_90a").describe() == "sm90swap 64x256x64 s5");
  CHECK(default_tile(c, 1024, "sm_90a").describe() == "sm90swap 64x256x64 s5");
  // Not on sm_80, nor where the TMA path cannot run (H, I not multiples of 64).
  CHECK_FALSE(default_tile(c, 4096, "sm_80").swap);
  CHECK_FALSE(default_tile(make_config(7200, 2048, 256, 1, 8, DType::kBF16), 4096, "sm_90a").swap);
  // A candidate wherever an expert gets more than 16 rows: its MMAs follow the rows.
  for (long long tokens : {512LL, 4096LL, 16384LL}) {
    int swapped = 0;
    for (const GemmTile& t : candidate_tiles(c, tokens, "sm_90a", 227 * 1024)) swapped += t.swap;
    CHECK(swapped == 5);  // 32, 64, 128, 144 and 160 token rows
  }
  for (const GemmTile& t : candidate_tiles(c, 64, "sm_90a", 227 * 1024)) CHECK_FALSE(t.swap);
}

TEST_CASE("decode buckets default to the fused GEMM, the GEMV is a candidate, never the default",
          "[nvrtc]") {
  MoeConfig c = make_config(7168, 2048, 256, 1, 8, DType::kBF16);
  // Up to 64 tokens: gate/up and down in one kernel, measured on the H200 faster than the
  // two-kernel sm80 16x64 tile at T = 1, 8 and 64; the GEMV no faster than either (docs/PERF.md).
  for (long long tokens : {1LL, 2LL, 8LL, 16LL, 64LL}) {
    INFO(tokens);
    const GemmTile tile = default_tile(c, tokens, "sm_90a");
    // The shared expert's 64 gate/up tiles a row block of 16 tokens in 2 K parts (128 items);
    // at 64 tokens its 256 tiles whole.
    CHECK(tile.describe() ==
          (tokens <= 16 ? "fused 16x64x128 w1x4 s4 sdl sp2" : "fused 16x64x128 w1x4 s4 sdl"));
    // One kernel for both stages.
    CHECK(gemm_spec(c, GemmStage::kGateUp, tile).source() ==
          gemm_spec(c, GemmStage::kDown, tile).source());
  }
  // Past 64 tokens, up to 16 rows an expert: the same tile in two kernels, faster at T = 128
  // and 256; ~18 rows (T = 512): neither.
  CHECK(default_tile(c, 256, "sm_90a").describe() == "sm80 16x64x64 w1x4 s8");
  CHECK_FALSE(default_tile(c, 512, "sm_90a").fused);
  // Every fused candidate compiles, and none is offered past 16 rows an expert. The K-half tile
  // ("k2", fp32 atomics into y) is one only with fp32 y; the shared gate/up tiles in K parts
  // ("sp2", "sp4") and the wide stages of 128 in sp2 only with a shared expert.
  for (YDType y : {YDType::kF16, YDType::kF32}) {
    for (int shared : {0, 1}) {
      MoeConfig cy = c;
      cy.y_dtype = y;
      cy.n_shared_experts = shared;
      int fused_tiles = 0, k2_tiles = 0, sp_tiles = 0, wide_tiles = 0;
      for (const GemmTile& tile : candidate_tiles(cy, 64, "sm_90a", 227 * 1024)) {
        if (!tile.fused) continue;
        ++fused_tiles;
        k2_tiles += tile.split > 1;
        sp_tiles += tile.shared_parts > 1;
        const KernelSpec spec = gemm_spec(cy, GemmStage::kGateUp, tile);
        INFO(spec.name());
        CHECK(spec.family == "grouped_gemm_decode");
        CHECK(is_elf(compile_for_sm90a(spec)));
        if (tile.block_k == 128) {
          ++wide_tiles;
          const std::string sp = tile.shared_parts > 1 ? " sp2" : "";
          CHECK(tile.describe() == fmt::format("fused 16x64x128 w1x4 s{} sdl{}", tile.stages, sp));
          CHECK(spec.name().find(fmt::format(", 64, 128, 4, {}, true, 1, {}", tile.stages,
                                             tile.shared_parts)) != std::string::npos);
        } else if (tile.shared_parts > 1) {
          CHECK(tile.describe() ==
                fmt::format("fused 16x64x64 w1x4 s8 sdl sp{}", tile.shared_parts));
          CHECK(spec.name().find(fmt::format(", 64, 64, 4, 8, true, 1, {}", tile.shared_parts)) !=
                std::string::npos);
        }
      }
      CHECK(k2_tiles == (y == YDType::kF32 ? 1 : 0));
      CHECK(wide_tiles == 1 + 2 * shared);
      CHECK(sp_tiles == 4 * shared);
      CHECK(fused_tiles == 5 + k2_tiles + sp_tiles);
    }
  }
  for (const GemmTile& tile : candidate_tiles(c, 512, "sm_90a", 227 * 1024)) {
    CHECK_FALSE(tile.fused);
  }
  // T = 64: ~2.2 rows per expert, still a candidate; T = 4096: ~143, not.
  int gemv_tiles = 0;
  for (const GemmTile& tile : candidate_tiles(c, 64, "sm_90a", 227 * 1024)) {
    if (!tile.gemv) continue;
    ++gemv_tiles;
    for (GemmStage stage : {GemmStage::kGateUp, GemmStage::kDown}) {
      const KernelSpec spec = gemm_spec(c, stage, tile);
      INFO(spec.name());
      CHECK(spec.family == "grouped_gemv");
      CHECK(is_elf(compile_for_sm90a(spec)));
    }
  }
  CHECK(gemv_tiles == 8);
  for (const GemmTile& tile : candidate_tiles(c, 4096, "sm_90a", 227 * 1024)) {
    CHECK_FALSE(tile.gemv);
  }
}

TEST_CASE("templates compile for odd shapes (H, I not multiples of the tile, E = 3, S = 2)",
          "[nvrtc]") {
  MoeConfig c = make_config(136, 40, 3, 2, 2, DType::kBF16);
  for (long long tokens : {1LL, 17LL, 100LL, 1000LL}) {
    for (const KernelSpec& spec : forward_specs(c, tokens, "sm_90a")) {
      INFO(spec.name());
      CHECK(is_elf(compile_for_sm90a(spec)));
    }
  }
}

TEST_CASE("a compile failure throws with the options, the log and a source dump", "[nvrtc]") {
  KernelSpec broken{"test", "combine.cuh", "rt_moe::Combine<rt_moe::BF16, 7, 2>",
                    "rt_moe::CombineParams"};  // H = 7 violates the static_assert
  try {
    compile_for_sm90a(broken);
    FAIL("compiling a broken instance did not throw");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(e.code() == ErrorCode::kCompile);
    CHECK(what.find("-arch=sm_90a") != std::string::npos);
    CHECK(what.find("16-byte chunks") != std::string::npos);  // the static_assert's text
    CHECK(what.find("rt_moe_failed_") != std::string::npos);  // the dump's path
  }
}

TEST_CASE("kernel sources differ per shape and tile, and keys with them", "[nvrtc]") {
  MoeConfig a = make_config(7168, 2048, 256, 1, 8, DType::kBF16);
  MoeConfig b = a;
  b.dtype = DType::kF16;
  GemmTile t1 = default_tile(a, 1, "sm_90a"), t2 = default_tile(a, 16384, "sm_90a");
  CHECK(!(t1 == t2));
  CHECK(gemm_spec(a, GemmStage::kGateUp, t1).source() !=
        gemm_spec(a, GemmStage::kGateUp, t2).source());
  CHECK(gemm_spec(a, GemmStage::kDown, t1).source() != gemm_spec(b, GemmStage::kDown, t1).source());
  // y's precision changes the down GEMM and the combine, not the gate/up GEMM.
  MoeConfig y32 = a;
  y32.y_dtype = YDType::kF32;
  CHECK(gemm_spec(a, GemmStage::kDown, t2).source() !=
        gemm_spec(y32, GemmStage::kDown, t2).source());
  CHECK(combine_spec(a).source() != combine_spec(y32).source());
  CHECK(gemm_spec(a, GemmStage::kGateUp, t2).source() ==
        gemm_spec(y32, GemmStage::kGateUp, t2).source());
  CHECK(!(gemm_spec(a, GemmStage::kDown, t1).preimage("sm_90a").key() ==
          gemm_spec(a, GemmStage::kDown, t1).preimage("sm_80").key()));
}

TEST_CASE("the kernel log: a line gives back its spec and arch, malformed lines are named",
          "[kernels]") {
  const MoeConfig c = make_config(7168, 2048, 256, 1, 8, DType::kBF16);
  for (const KernelSpec& spec : forward_specs(c, 4096, "sm_90a")) {
    const std::string line = kernel_log_line(spec, "sm_90a");
    INFO(line);
    const auto parsed = parse_kernel_log_line(line);
    REQUIRE(parsed.has_value());
    CHECK(parsed->second == "sm_90a");
    CHECK(parsed->first.family == spec.family);
    CHECK(parsed->first.min_blocks == spec.min_blocks);
    // The same cache entry: everything that makes the cubin came through.
    CHECK(parsed->first.preimage("sm_90a").key() == spec.preimage("sm_90a").key());
    CHECK(parse_kernel_log_line(line + "\r").has_value());  // a CRLF file
  }
  CHECK_FALSE(parse_kernel_log_line("").has_value());
  CHECK_FALSE(parse_kernel_log_line("  \t").has_value());
  CHECK_FALSE(parse_kernel_log_line("# rt_moe kernel log").has_value());
  const auto rejects = [](const std::string& line, const std::string& named) {
    INFO(line);
    try {
      parse_kernel_log_line(line);
      FAIL("accepted");
    } catch (const Error& error) {
      CHECK(error.code() == ErrorCode::kInvalidArgument);
      CHECK(std::string(error.what()).find(named) != std::string::npos);
    }
  };
  rejects("sm_90a\tcombine\tcombine.cuh\trt_moe::Combine<1>\trt_moe::CombineParams", "5 fields");
  rejects("sm_90a\tcombine\t\trt_moe::Combine<1>\trt_moe::CombineParams\t0", "an empty field");
  rejects("compute_90\tcombine\tcombine.cuh\trt_moe::Combine<1>\trt_moe::CombineParams\t0",
          "compute_90");
  rejects("sm_90x\tcombine\tcombine.cuh\trt_moe::Combine<1>\trt_moe::CombineParams\t0", "sm_90x");
  rejects("sm_90a\tcombine\tcombine.cuh\trt_moe::Combine<1>\trt_moe::CombineParams\t1x", "'1x'");
  rejects("sm_90a\tcombine\tcombine.cuh\trt_moe::Combine<1>\trt_moe::CombineParams\t-1", "'-1'");
}

TEST_CASE("the kernel log: each distinct kernel appended once, after one header line",
          "[kernels]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "kernels.tsv").string();
  const MoeConfig c = make_config(7168, 2048, 256, 1, 8, DType::kBF16);
  const std::vector<KernelSpec> specs = forward_specs(c, 4096, "sm_90a");
  REQUIRE(specs.size() >= 2);
  append_kernel_log(path, specs[0], "sm_90a");
  append_kernel_log(path, specs[1], "sm_90a");
  append_kernel_log(path, specs[0], "sm_90a");  // again: not written
  append_kernel_log(path, specs[0], "sm_80");   // another arch: another kernel
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 4);  // the header, then three kernels
  CHECK(lines[0].rfind("# rt_moe kernel log", 0) == 0);
  CHECK(lines[1] == kernel_log_line(specs[0], "sm_90a"));
  CHECK(lines[2] == kernel_log_line(specs[1], "sm_90a"));
  CHECK(lines[3] == kernel_log_line(specs[0], "sm_80"));
  // Another file gets its own header.
  const std::string other = (dir.path() / "other.tsv").string();
  append_kernel_log(other, specs[1], "sm_90a");
  std::ifstream second(other);
  std::string header;
  REQUIRE(std::getline(second, header));
  CHECK(header.rfind("# rt_moe kernel log", 0) == 0);
  // An unwritable file: a warning, no exception (the kernel runs all the same).
  CHECK_NOTHROW(
      append_kernel_log((dir.path() / "no" / "such" / "dir.tsv").string(), specs[0], "sm_90a"));
}

}  // namespace rt_moe
