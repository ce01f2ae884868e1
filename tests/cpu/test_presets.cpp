// Model presets and config files (rt_moe/presets.h): every shipped preset loads and validates, and
// every kind of bad file is an Error(kInvalidArgument) whose message names the bad key or file.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "rt_moe/error.h"
#include "rt_moe/presets.h"

namespace rt_moe {
namespace {

// Writes `text` to a fresh file; removes it when done.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("rt_moe_test_presets_" + std::to_string(getpid()) + "_" + std::to_string(counter++) +
             ".json");
    std::ofstream(path_) << text;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

const char* kValid = R"({
  "name": "custom", "d_hidden": 1024, "d_expert": 512, "n_routed_experts": 16,
  "n_shared_experts": 2, "top_k": 4, "dtype": "fp16", "max_tokens": 4096,
  "routing": {"score": "softmax", "renormalize": true, "routed_scaling_factor": 2.5}
})";

// The message of the Error that loading `text` throws; fails the test if nothing or something else
// is thrown.
std::string load_error(const std::string& text) {
  TempFile file(text);
  try {
    load_config_file(file.path());
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    std::string what = e.what();
    CHECK(what.find(file.path()) != std::string::npos);  // names the file
    return what;
  }
  FAIL("no Error for " << text);
  return {};
}

}  // namespace

TEST_CASE("presets: every preset loads, validates and carries its own name", "[presets]") {
  const std::vector<std::string> names = preset_names();
  const std::vector<std::string> expected = {"deepseek-v2",  "deepseek-v3",   "gpumode-moe",
                                             "mixtral-8x7b", "qwen3-30b-a3b", "race-moe",
                                             "tiny"};
  CHECK(names == expected);
  for (const std::string& name : names) {
    INFO(name);
    ModelConfig model = preset(name);
    CHECK(model.name == name);
    CHECK_FALSE(model.description.empty());
    CHECK(model.max_tokens == 16384);
    CHECK(model.moe.dtype == DType::kBF16);
    CHECK_NOTHROW(model.moe.validate());
  }
}

TEST_CASE("presets: each preset carries its model's routing (REFERENCE.md section 4)",
          "[presets]") {
  using Score = RoutingConfig::Score;
  using GroupScore = RoutingConfig::GroupScore;
  const RoutingConfig v3 = preset("deepseek-v3").moe.routing;
  CHECK(v3.score == Score::kSigmoid);
  CHECK(v3.correction_bias);
  CHECK(v3.n_group == 8);
  CHECK(v3.topk_group == 4);
  CHECK(v3.group_score == GroupScore::kSumTop2);
  CHECK(v3.renormalize);
  CHECK(v3.routed_scaling_factor == 2.5f);
  CHECK_FALSE(v3.logits_fp32);

  const RoutingConfig v2 = preset("deepseek-v2").moe.routing;
  CHECK(v2.score == Score::kSoftmax);
  CHECK_FALSE(v2.correction_bias);
  CHECK(v2.n_group == 8);
  CHECK(v2.topk_group == 3);
  CHECK(v2.group_score == GroupScore::kMax);
  CHECK_FALSE(v2.renormalize);
  CHECK(v2.routed_scaling_factor == 16.0f);
  CHECK_FALSE(v2.logits_fp32);

  for (const char* name : {"qwen3-30b-a3b", "mixtral-8x7b"}) {
    INFO(name);
    const RoutingConfig r = preset(name).moe.routing;
    CHECK(r.score == Score::kSoftmax);
    CHECK_FALSE(r.correction_bias);
    CHECK(r.n_group == 1);
    CHECK(r.renormalize);
    CHECK(r.routed_scaling_factor == 1.0f);
    CHECK(r.logits_fp32);
  }
  for (const char* name : {"gpumode-moe", "race-moe", "tiny"}) {
    INFO(name);
    const RoutingConfig r = preset(name).moe.routing;
    CHECK(r.describe() == RoutingConfig{}.describe());  // the reference default
    CHECK(r.score == Score::kSoftmax);
    CHECK_FALSE(r.correction_bias);
    CHECK(r.n_group == 1);
    CHECK(r.topk_group == 1);
    CHECK_FALSE(r.renormalize);
    CHECK(r.routed_scaling_factor == 1.0f);
    CHECK_FALSE(r.logits_fp32);
  }
}

TEST_CASE("presets: the routing keys load, and bad routing values name their key", "[presets]") {
  TempFile file(R"({"d_hidden": 64, "d_expert": 32, "n_routed_experts": 16,
    "n_shared_experts": 0, "top_k": 4, "routing": {"score": "sigmoid", "correction_bias": true,
    "n_group": 4, "topk_group": 2, "group_score": "sum_top2", "logits_fp32": true}})");
  const RoutingConfig r = load_config_file(file.path()).moe.routing;
  CHECK(r.score == RoutingConfig::Score::kSigmoid);
  CHECK(r.correction_bias);
  CHECK(r.n_group == 4);
  CHECK(r.topk_group == 2);
  CHECK(r.group_score == RoutingConfig::GroupScore::kSumTop2);
  CHECK(r.logits_fp32);
  CHECK_FALSE(r.renormalize);

  auto with_routing = [](const std::string& routing) {
    return R"({"d_hidden": 64, "d_expert": 32, "n_routed_experts": 16, "n_shared_experts": 0,
               "top_k": 4, "routing": {)" +
           routing + "}}";
  };
  CHECK(load_error(with_routing(R"("group_score": "mean")")).find("'routing.group_score'") !=
        std::string::npos);
  CHECK(load_error(with_routing(R"("n_group": "8")")).find("'routing.n_group'") !=
        std::string::npos);
  CHECK(load_error(with_routing(R"("correction_bias": 1)")).find("'routing.correction_bias'") !=
        std::string::npos);
  CHECK(load_error(with_routing(R"("logits_fp32": "yes")")).find("'routing.logits_fp32'") !=
        std::string::npos);
  CHECK(load_error(with_routing(R"("topk_group": 4294967297)")).find("'routing.topk_group'") !=
        std::string::npos);
  // Ranges are validate()'s, reported with the file's name.
  CHECK(load_error(with_routing(R"("n_group": 3)")).find("routing.n_group = 3") !=
        std::string::npos);
  CHECK(
      load_error(with_routing(R"("n_group": 4, "topk_group": 5)")).find("routing.topk_group = 5") !=
      std::string::npos);
  CHECK(load_error(with_routing(R"("n_group": 16, "topk_group": 2)")).find("top_k = 4 exceeds") !=
        std::string::npos);
}

TEST_CASE("presets: presets hold the REFERENCE.md shapes", "[presets]") {
  struct Shape {
    const char* name;
    std::int64_t H, I, E, S, k;
  };
  for (const Shape& s :
       {Shape{"deepseek-v3", 7168, 2048, 256, 1, 8}, Shape{"gpumode-moe", 7168, 2048, 32, 1, 4},
        Shape{"race-moe", 7168, 2048, 8, 0, 4}, Shape{"qwen3-30b-a3b", 2048, 768, 128, 0, 8},
        Shape{"mixtral-8x7b", 4096, 14336, 8, 0, 2}, Shape{"tiny", 256, 128, 8, 1, 2},
        Shape{"deepseek-v2", 5120, 1536, 160, 2, 6}}) {
    INFO(s.name);
    const MoeConfig c = preset(s.name).moe;
    CHECK(c.d_hidden == s.H);
    CHECK(c.d_expert == s.I);
    CHECK(c.n_routed_experts == s.E);
    CHECK(c.n_shared_experts == s.S);
    CHECK(c.top_k == s.k);
  }
}

TEST_CASE("presets: an unknown preset names itself and the known ones", "[presets]") {
  try {
    preset("deepseek-v9");
    FAIL("no Error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    std::string what = e.what();
    CHECK(what.find("deepseek-v9") != std::string::npos);
    CHECK(what.find("deepseek-v3") != std::string::npos);
  }
}

TEST_CASE("presets: a config file loads every field", "[presets]") {
  TempFile file(kValid);
  ModelConfig model = load_config_file(file.path());
  CHECK(model.name == "custom");
  CHECK(model.moe.d_hidden == 1024);
  CHECK(model.moe.d_expert == 512);
  CHECK(model.moe.n_routed_experts == 16);
  CHECK(model.moe.n_shared_experts == 2);
  CHECK(model.moe.top_k == 4);
  CHECK(model.moe.dtype == DType::kF16);
  CHECK(model.max_tokens == 4096);
  CHECK(model.moe.routing.renormalize);
  CHECK(model.moe.routing.routed_scaling_factor == 2.5f);
}

TEST_CASE("presets: optional keys take their defaults and the name defaults to the file stem",
          "[presets]") {
  TempFile file(R"({"d_hidden": 64, "d_expert": 32, "n_routed_experts": 4,
                    "n_shared_experts": 0, "top_k": 2})");
  ModelConfig model = load_config_file(file.path());
  CHECK(model.name == std::filesystem::path(file.path()).stem().string());
  CHECK(model.max_tokens == 16384);
  CHECK(model.moe.dtype == DType::kBF16);
  CHECK(model.moe.routing.score == RoutingConfig::Score::kSoftmax);
  CHECK_FALSE(model.moe.routing.renormalize);
}

TEST_CASE("presets: malformed JSON is an error naming the file", "[presets]") {
  std::string what = load_error(R"({"d_hidden": 64,, })");
  CHECK(what.find("malformed JSON") != std::string::npos);
  load_error("");
  load_error("[1, 2, 3]");  // not an object
}

TEST_CASE("presets: an unknown key is an error naming it", "[presets]") {
  std::string text = kValid;
  text.insert(text.find('{') + 1, "\"d_hiden\": 7168,");
  CHECK(load_error(text).find("'d_hiden'") != std::string::npos);

  std::string routing = kValid;
  routing.insert(routing.find("\"score\""), "\"bias\": true, ");
  CHECK(load_error(routing).find("'routing.bias'") != std::string::npos);
}

TEST_CASE("presets: a value of the wrong type is an error naming its key", "[presets]") {
  auto replaced = [](const std::string& from, const std::string& to) {
    std::string text = kValid;
    const std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  CHECK(load_error(replaced("\"d_hidden\": 1024", "\"d_hidden\": \"1024\"")).find("'d_hidden'") !=
        std::string::npos);
  CHECK(load_error(replaced("\"top_k\": 4", "\"top_k\": 4.5")).find("'top_k'") !=
        std::string::npos);
  CHECK(load_error(replaced("\"dtype\": \"fp16\"", "\"dtype\": 16")).find("'dtype'") !=
        std::string::npos);
  CHECK(load_error(replaced("\"dtype\": \"fp16\"", "\"dtype\": \"fp8\"")).find("'dtype'") !=
        std::string::npos);
  CHECK(load_error(replaced("\"renormalize\": true", "\"renormalize\": 1"))
            .find("'routing.renormalize'") != std::string::npos);
  CHECK(load_error(replaced("\"score\": \"softmax\"", "\"score\": \"relu\""))
            .find("'routing.score'") != std::string::npos);
  CHECK(load_error(replaced("\"routing\": {", "\"routing\": 3, \"x\": {")).find("'routing'") !=
        std::string::npos);
  CHECK(load_error(replaced("\"name\": \"custom\"", "\"name\": [1]")).find("'name'") !=
        std::string::npos);
}

TEST_CASE("presets: a missing required key is an error naming it", "[presets]") {
  std::string text = kValid;
  const std::string key = "\"top_k\": 4, ";
  text.erase(text.find(key), key.size());
  CHECK(load_error(text).find("'top_k'") != std::string::npos);
}

TEST_CASE("presets: zero, negative and out-of-range sizes are errors naming the key", "[presets]") {
  struct Bad {
    const char* from;
    const char* to;
    const char* key;
  };
  for (const Bad& bad :
       {Bad{"\"d_hidden\": 1024", "\"d_hidden\": 0", "d_hidden"},
        Bad{"\"d_hidden\": 1024", "\"d_hidden\": -1024", "d_hidden"},
        Bad{"\"d_expert\": 512", "\"d_expert\": 0", "d_expert"},
        Bad{"\"n_routed_experts\": 16", "\"n_routed_experts\": -3", "n_routed_experts"},
        Bad{"\"n_shared_experts\": 2", "\"n_shared_experts\": -1", "n_shared_experts"},
        Bad{"\"top_k\": 4", "\"top_k\": 0", "top_k"}, Bad{"\"top_k\": 4", "\"top_k\": 17", "top_k"},
        Bad{"\"max_tokens\": 4096", "\"max_tokens\": 0", "max_tokens"},
        Bad{"\"max_tokens\": 4096", "\"max_tokens\": -5", "max_tokens"},
        Bad{"\"routed_scaling_factor\": 2.5", "\"routed_scaling_factor\": 0",
            "routed_scaling_factor"},
        Bad{"\"d_hidden\": 1024", "\"d_hidden\": 18446744073709551615", "d_hidden"}}) {
    std::string text = kValid;
    const std::size_t at = text.find(bad.from);
    REQUIRE(at != std::string::npos);
    text.replace(at, std::strlen(bad.from), bad.to);
    INFO(bad.to);
    CHECK(load_error(text).find(bad.key) != std::string::npos);
  }
}

// Found by tests/fuzz/fuzz_config.cpp: a number beyond double threw nlohmann's out_of_range (not an
// Error), and a deeply nested value overflowed the stack when the message dumped it.
TEST_CASE("presets: hostile JSON is an Error, never another exception or a crash", "[presets]") {
  CHECK(load_error(R"({"d_hidden": 1e400})").find("1e400") != std::string::npos);
  CHECK(load_error(R"({"d_hidden": -1e400})").find("overflow") != std::string::npos);

  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  CHECK(load_error(deep).find("nested deeper") != std::string::npos);
  CHECK(load_error(R"({"d_hidden": )" + deep + "}").find("nested deeper") != std::string::npos);
  // The schema's own depth (routing) is far below the bound.
  std::string nested = kValid;
  nested.replace(nested.find("\"softmax\""), 9, "[[[[1]]]]");
  CHECK(load_error(nested).find("'routing.score'") != std::string::npos);

  // Beyond float's range: checked before the conversion (which would be undefined behaviour).
  std::string scale = kValid;
  scale.replace(scale.find("2.5"), 3, "1e300");
  CHECK(load_error(scale).find("routed_scaling_factor") != std::string::npos);

  // A huge value, key or token is shown clipped, not copied whole into the message.
  const std::string huge(1 << 20, 'x');
  std::string huge_dtype = kValid;
  huge_dtype.replace(huge_dtype.find("\"fp16\""), 6, '"' + huge + '"');
  std::string huge_key = kValid;
  huge_key.insert(1, '"' + huge + "\": 1, ");
  std::string many = "1";
  for (int i = 0; i < 100000; ++i) many += ",1";
  for (const std::string& text :
       {R"({"d_hidden": ")" + huge + "\"}", huge_dtype, huge_key, R"({"d_hidden": [)" + many + "]}",
        R"({"d_hidden": )" + std::string(100000, '9') + "}",
        R"({"d_hidden": )" + std::string(100000, '9') + "x}", R"({"name": ")" + huge}) {
    const std::string what = load_error(text);
    CHECK(what.size() < 1000);
  }
}

TEST_CASE("presets: a missing file is an error naming it", "[presets]") {
  const std::string path = "/nonexistent/rt_moe/model.json";
  try {
    load_config_file(path);
    FAIL("no Error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
}

}  // namespace rt_moe
