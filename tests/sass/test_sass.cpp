// The SASS of every kernel the tuner can pick for DeepSeek-V3 on sm_90a, by nvdisasm, against
// what each kernel's tile promises (issue 6: "Check the SASS: HGMMA present, no local-memory
// spills"):
//   - the wgmma GEMMs issue HGMMA of their tile's shapes and no HMMA; the TMA tiles load by
//     UTMALDG, multicast in CTA pairs, and their warpgroups trade registers (USETMAXREG); no
//     kernel asks L2 for TMA boxes ahead (UTMAPF) unless its tile says so;
//   - the mma.sync GEMMs (the portable path, the decode GEMV and the fused decode kernel) issue
//     HMMA and no HGMMA; the routing, dispatch and combine kernels neither;
//   - no kernel reads or writes local memory (LDL, STL), and none has a compile log in which
//     ptxas serialized its wgmma or waits for its MMAs (nvrtc::wgmma_stalls).
// No GPU needed: NVRTC compiles for sm_90a here.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler.h"
#include "host_parallel.h"
#include "kernels.h"
#include "nvrtc_sm90a.h"
#include "params.h"
#include "reference.h"
#include "sass.h"
#include "specs.h"

namespace rt_moe {
namespace {

using test::SassCounts;

struct Expected {
  std::set<int> hgmma_n;  // empty: no HGMMA
  int hgmma_each_n = 0;   // > 0: exactly this many HGMMAs of each N
  bool hmma = false;
  bool tma = false;
  bool multicast = false;
  bool prefetch = false;    // weight boxes asked of L2 ahead of their loads (UTMAPF)
  bool setmaxnreg = false;  // the warp-specialized kernels: producer and consumers trade registers
};

// What a spec's SASS must hold. The GEMM specs of a bucket use `tile`; the gating GEMM has its own
// tile (router_tile), whose family alone says what it issues.
Expected expected_sass(const KernelSpec& spec, const GemmTile& tile) {
  Expected e;
  if (spec.family == "grouped_gemm_sm90_swap") {
    // wgmma.m64nNk16 for N = 8, 16, ..., the tile's token rows: a block's rows pick the N. Each
    // N's path is one K tile's MMAs: two 64-row weight slices times four k16 steps (ptxas drops
    // the MMAs of a slice whose results go unused: PERF.md 37c).
    for (int n = 8; n <= tile.block_m; n += 8) e.hgmma_n.insert(n);
    e.hgmma_each_n = 8;
    e.tma = true;
    e.setmaxnreg = true;
  } else if (spec.family == "grouped_gemm_sm90_ws") {
    e.hgmma_n = {tile.block_n};  // wgmma.m64nBLOCK_Nk16 a consumer warpgroup
    e.tma = true;
    e.multicast = tile.cluster == 2;
    // With one consumer warpgroup, 255 registers a thread fit without a trade.
    e.setmaxnreg = tile.warps_m >= 2;
  } else if (spec.family == "grouped_gemm_sm90") {
    e.hgmma_n = {128};  // wgmma.m64n128k16, one a 128-column slice
  } else if (spec.family == "grouped_gemm_sm80" || spec.family == "grouped_gemv" ||
             spec.family == "grouped_gemm_decode") {
    e.hmma = true;
  }
  return e;
}

struct Disassembled {
  std::string name;
  std::string tile;
  std::string family;
  Expected expected;
  SassCounts counts;
  std::vector<std::string> stalls;  // nvrtc::wgmma_stalls of its compile log
  std::string error;
};

// Every distinct kernel of `specs` ({spec, its bucket's tile}), compiled for sm_90a and
// disassembled, on all hardware threads.
std::vector<Disassembled> disassemble_all(
    const std::vector<std::pair<KernelSpec, GemmTile>>& specs) {
  std::string why;
  const std::string nvdisasm = test::find_nvdisasm(&why);
  REQUIRE_FALSE(nvdisasm.empty());
  std::vector<Disassembled> out(specs.size());
  test::host::parallel_items(std::int64_t(specs.size()), [&] {
    return [&](std::int64_t i) {
      const auto& [spec, tile] = specs[std::size_t(i)];
      Disassembled& d = out[std::size_t(i)];
      d.name = spec.name();
      d.tile = tile.describe();
      d.family = spec.family;
      d.expected = expected_sass(spec, tile);
      try {
        const nvrtc::Result compiled = compile_result_for_sm90a(spec);
        d.stalls = nvrtc::wgmma_stalls(compiled.log);
        d.counts = test::count_sass(test::disassemble(nvdisasm, compiled.cubin));
      } catch (const std::exception& error) {
        d.error = error.what();
      }
    };
  });
  return out;
}

std::vector<std::pair<KernelSpec, GemmTile>> distinct_specs(
    const MoeConfig& config, const std::vector<long long>& token_counts, bool all_candidates) {
  std::vector<std::pair<KernelSpec, GemmTile>> specs;
  std::set<std::string> seen;
  for (long long tokens : token_counts) {
    const std::vector<GemmTile> tiles =
        all_candidates ? candidate_tiles(config, tokens, "sm_90a", kMaxDynamicSmemSm90)
                       : std::vector<GemmTile>{default_tile(config, tokens, "sm_90a")};
    for (const GemmTile& tile : tiles) {
      for (const KernelSpec& spec : forward_specs(config, tile, tokens)) {
        if (seen.insert(spec.name()).second) specs.emplace_back(spec, tile);
      }
    }
  }
  return specs;
}

void check_sass(const std::vector<Disassembled>& kernels) {
  for (const Disassembled& d : kernels) {
    INFO(d.name << "\nthe bucket's tile " << d.tile << "\nHGMMA " << d.counts.hgmma << ", HMMA "
                << d.counts.hmma << ", UTMALDG " << d.counts.tma_loads << " (multicast "
                << d.counts.tma_multicast << ", prefetch " << d.counts.tma_prefetch << "), LDL/STL "
                << d.counts.local << ", " << d.counts.instructions << " instructions\n"
                << d.error << (d.stalls.empty() ? "" : d.stalls.front()));
    REQUIRE(d.error.empty());
    REQUIRE(d.counts.instructions > 0);
    CHECK(d.counts.local == 0);
    CHECK(d.stalls.empty());  // ptxas serialized no wgmma, waits for no MMA in flight
    std::set<int> shapes;
    for (const auto& [n, count] : d.counts.hgmma_n) {
      shapes.insert(n);
      if (d.expected.hgmma_each_n > 0) {
        INFO("HGMMA.64x" << n << "x16: " << count);
        CHECK(count == d.expected.hgmma_each_n);
      }
    }
    CHECK(shapes == d.expected.hgmma_n);
    CHECK((d.counts.hgmma > 0) == !d.expected.hgmma_n.empty());
    CHECK((d.counts.hmma > 0) == d.expected.hmma);
    CHECK((d.counts.tma_loads > 0) == d.expected.tma);
    CHECK((d.counts.tma_multicast > 0) == d.expected.multicast);
    CHECK((d.counts.tma_prefetch > 0) == d.expected.prefetch);
    CHECK((d.counts.setmaxnreg > 0) == d.expected.setmaxnreg);
  }
}

}  // namespace

TEST_CASE("the SASS of every tile the tuner can pick holds what the tile promises (bf16)",
          "[sass]") {
  const MoeConfig c = test::make_config(7168, 2048, 256, 1, 8, DType::kBF16);
  const std::vector<Disassembled> kernels =
      disassemble_all(distinct_specs(c, {1, 8, 64, 512, 4096, 16384}, true));
  check_sass(kernels);
  // Every GEMM family of the runtime is among them, so none goes unchecked.
  std::set<std::string> families;
  for (const Disassembled& d : kernels) families.insert(d.family);
  for (const char* family : {"grouped_gemm_sm90_swap", "grouped_gemm_sm90_ws", "grouped_gemm_sm90",
                             "grouped_gemm_sm80", "grouped_gemv", "grouped_gemm_decode"}) {
    INFO(family);
    CHECK(families.count(family) == 1);
  }
}

TEST_CASE("the SASS of the default tiles holds what the tiles promise in fp16 and with fp32 y",
          "[sass]") {
  MoeConfig c = test::make_config(7168, 2048, 256, 1, 8, DType::kF16);
  check_sass(disassemble_all(distinct_specs(c, {1, 8, 64, 512, 4096, 16384}, false)));
  c.y_dtype = YDType::kF32;
  check_sass(disassemble_all(distinct_specs(c, {1, 64, 4096, 16384}, false)));
}

TEST_CASE("nvdisasm's SASS lines are counted by opcode", "[sass]") {
  const std::string sass =
      "\tcode for sm_90a\n"
      "        /*0000*/                   LDC R1, c[0x0][0x28] ;       /* 0x00000a00ff017b82 */\n"
      "                                                                /* 0x000fe20000000800 */\n"
      "        /*1260*/                   HGMMA.64x160x16.F32.BF16 R104, gdesc[UR20], R104, UP0 ;\n"
      "        /*1270*/                   HGMMA.64x8x16.F32.BF16 R24, gdesc[UR20], R24, gsb0 ;\n"
      "        /*1280*/              @!P0 HMMA.16816.F32.BF16 R4, R8, R12, R4 ;\n"
      "        /*1290*/               @P1 UTMALDG.2D [UR8], [UR4] ;\n"
      "        /*12a0*/                   UTMALDG.2D.MULTICAST [UR8], [UR4], UR6 ;\n"
      "        /*12a8*/                   UTMAPF.L2.2D [UR8], [UR12] ;\n"
      "        /*12b0*/                   STL.64 [R1], R2 ;\n"
      "        /*12c0*/                   LDL R3, [R1+0x8] ;\n"
      "        /*12d0*/                   HGMMA.64x160x16.F32.BF16 R104, gdesc[UR20], R104 ;\n"
      "        /*12e0*/                   USETMAXREG.TRY R0, 0xe0 ;\n"
      "        /*12f0*/                   BRA 0x12e0;\n";
  const SassCounts counts = test::count_sass(sass);
  CHECK(counts.instructions == 12);
  CHECK(counts.setmaxnreg == 1);
  CHECK(counts.hgmma == 3);
  CHECK(counts.hgmma_n == std::map<int, int>{{8, 1}, {160, 2}});
  CHECK(counts.hmma == 1);
  CHECK(counts.tma_loads == 2);
  CHECK(counts.tma_multicast == 1);
  CHECK(counts.tma_prefetch == 1);
  CHECK(counts.local == 2);
}

}  // namespace rt_moe
