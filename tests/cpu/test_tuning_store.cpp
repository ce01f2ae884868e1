// The tuning store: round trips through the file, best and failed candidates, merging, files from
// another setup, corrupt files, processes and threads recording at once, and locations that cannot
// be written. Every test counts the warnings it expects.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tuning_store.h"

// Readable failures: Catch prints these instead of {?}.
namespace Catch {
template <>
struct StringMaker<rt_moe::cache::CandidateTime> {
  static std::string convert(const rt_moe::cache::CandidateTime& c) {
    return "{" + c.candidate + ": " + std::to_string(c.ms) + " ms}";
  }
};
template <>
struct StringMaker<rt_moe::cache::TuningRecord> {
  static std::string convert(const rt_moe::cache::TuningRecord& r) {
    std::string text = "{" + r.problem + ": best '" + r.best + "', ";
    for (const auto& c : r.candidates)
      text += StringMaker<rt_moe::cache::CandidateTime>::convert(c);
    return text + ", updated " + std::to_string(r.updated) + "}";
  }
};
}  // namespace Catch

namespace fs = std::filesystem;
using nlohmann::json;
using namespace rt_moe::cache;
using rt_moe::test::read_bytes;
using rt_moe::test::run_together;
using rt_moe::test::TempDir;
using rt_moe::test::Warnings;
using rt_moe::test::write_bytes;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

json read_json(const fs::path& path) { return json::parse(read_bytes(path)); }

// Must match tests/helpers/tuning_child.cpp.
TuningMetadata h200() { return {"NVIDIA H200", 132, 12080, "12.8", "0.1.0"}; }

const std::string kGateUp = "H=7168 I=2048 E=256 S=1 k=8 bf16 bucket=32768 stage=gate_up";
const std::string kDown = "H=7168 I=2048 E=256 S=1 k=8 bf16 bucket=32768 stage=down";

// The files in `dir` other than the tuning file and its lock file: staging files left behind.
std::vector<std::string> stray_files(const fs::path& dir) {
  std::vector<std::string> stray;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name != "tuning.json" && name != "tuning.json.lock") stray.push_back(name);
  }
  return stray;
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TEST_CASE("tuning store: a record round-trips through the file into a new store", "[tuning]") {
  TempDir tmp;
  const fs::path file = tmp.path() / "cache" / "tuning.json";  // the directory is created
  Warnings warnings;
  const std::int64_t before = unix_now();
  TuningRecord written;
  {
    TuningStore store(file, h200());
    REQUIRE(store.file_state() == TuningFileState::kMissing);
    REQUIRE(store.usable());
    REQUIRE_FALSE(store.find(kGateUp).has_value());
    store.record({kGateUp, {{"128x128x64 s4", 0.412}, {"64x128x64 s3", 0.530}}, {}});
    REQUIRE(store.usable());
    written = store.find(kGateUp).value();
    REQUIRE(written.best == "128x128x64 s4");
    REQUIRE(written.updated >= before);
    REQUIRE(written.updated <= unix_now());
  }
  REQUIRE(stray_files(file.parent_path()).empty());

  // The documented format.
  const json root = read_json(file);
  REQUIRE(root.at("format") == 1);
  REQUIRE(root.at("metadata") == json{{"gpu_name", "NVIDIA H200"},
                                      {"sm_count", 132},
                                      {"driver_version", 12080},
                                      {"nvrtc_version", "12.8"},
                                      {"rt_moe_version", "0.1.0"}});
  const json& entry = root.at("records").at(kGateUp);
  REQUIRE(entry.at("candidates") == json{{"128x128x64 s4", 0.412}, {"64x128x64 s3", 0.530}});
  REQUIRE(entry.at("best") == "128x128x64 s4");
  REQUIRE(entry.at("updated") == written.updated);

  TuningStore fresh(file, h200());
  REQUIRE(fresh.file_state() == TuningFileState::kLoaded);
  REQUIRE(fresh.find(kGateUp) == written);  // times read back exactly
  REQUIRE(fresh.best(kGateUp) == "128x128x64 s4");
  REQUIRE_FALSE(fresh.find(kDown).has_value());
  REQUIRE_FALSE(fresh.best(kDown).has_value());
  REQUIRE(fresh.records().size() == 1);
  REQUIRE(warnings.count() == 0);
}

TEST_CASE("tuning store: best is the lowest finite time and failed candidates are null on disk",
          "[tuning]") {
  TempDir tmp;
  const fs::path file = tmp.path() / "tuning.json";
  {
    TuningStore store(file, h200());
    // b failed, d is NaN and e negative (both count as failed), c is the lowest finite time.
    store.record({kGateUp,
                  {{"a", 2.5}, {"b", kInf}, {"c", 1.25}, {"d", std::nan("")}, {"e", -1}},
                  "b" /* ignored: best is recomputed */});
    REQUIRE(store.best(kGateUp) == "c");
    store.record({kDown, {{"x", kInf}, {"y", kInf}}, {}});  // every candidate failed
    REQUIRE(store.find(kDown).has_value());
    REQUIRE(store.find(kDown)->best.empty());
    REQUIRE_FALSE(store.best(kDown).has_value());
    store.record({"tie", {{"q", 1.0}, {"p", 1.0}}, {}});
    REQUIRE(store.best("tie") == "p");  // ties go to the first name
  }
  const json root = read_json(file);
  const json& records = root.at("records");
  REQUIRE(records.at(kGateUp).at("candidates") ==
          json{{"a", 2.5}, {"b", nullptr}, {"c", 1.25}, {"d", nullptr}, {"e", nullptr}});
  REQUIRE(records.at(kGateUp).at("best") == "c");
  REQUIRE(records.at(kDown).at("best").is_null());

  TuningStore fresh(file, h200());
  const TuningRecord gate_up = fresh.find(kGateUp).value();
  REQUIRE(gate_up.candidates.size() == 5);
  for (const CandidateTime& c : gate_up.candidates) {
    INFO("candidate " << c.candidate << ": " << c.ms);
    if (c.candidate == "a" || c.candidate == "c") {
      REQUIRE(std::isfinite(c.ms));
    } else {
      REQUIRE(std::isinf(c.ms));
      REQUIRE(c.ms > 0);
    }
  }
  REQUIRE(fresh.best(kGateUp) == "c");
  REQUIRE_FALSE(fresh.best(kDown).has_value());
  REQUIRE(fresh.best("tie") == "p");
}

TEST_CASE("tuning store: recording a problem again merges its candidates and recomputes best",
          "[tuning]") {
  TempDir tmp;
  const fs::path file = tmp.path() / "tuning.json";
  TuningStore store(file, h200());
  store.record({kGateUp, {{"a", 1.0}, {"b", 2.0}}, {}});
  store.record({kDown, {{"z", 3.0}}, {}});
  store.record({kGateUp, {{"b", 0.5}, {"c", kInf}}, {}});  // b measured again, c is new
  const std::vector<CandidateTime> merged = {{"a", 1.0}, {"b", 0.5}, {"c", kInf}};
  REQUIRE(store.find(kGateUp)->candidates == merged);
  REQUIRE(store.best(kGateUp) == "b");
  store.record({kGateUp, {{"b", kInf}}, {}});  // b now fails: a is best again
  REQUIRE(store.best(kGateUp) == "a");
  // Duplicates in one record: the later time wins.
  store.record({kGateUp, {{"c", 0.2}, {"c", 1.5}}, {}});
  REQUIRE(store.best(kGateUp) == "a");

  TuningStore fresh(file, h200());
  const std::vector<CandidateTime> expected = {{"a", 1.0}, {"b", kInf}, {"c", 1.5}};
  REQUIRE(fresh.find(kGateUp)->candidates == expected);
  REQUIRE(fresh.best(kGateUp) == "a");
  REQUIRE(fresh.best(kDown) == "z");  // the other problem is kept
  REQUIRE(fresh.records().size() == 2);
}

TEST_CASE("tuning store: a file from another setup is ignored with one warning naming the field",
          "[tuning]") {
  struct Change {
    const char* field;
    TuningMetadata metadata;
  };
  const Change changes[] = {
      {"gpu_name", {"NVIDIA H100 80GB HBM3", 132, 12080, "12.8", "0.1.0"}},
      {"sm_count", {"NVIDIA H200", 114, 12080, "12.8", "0.1.0"}},
      {"driver_version", {"NVIDIA H200", 132, 12090, "12.8", "0.1.0"}},
      {"nvrtc_version", {"NVIDIA H200", 132, 12080, "12.9", "0.1.0"}},
      {"rt_moe_version", {"NVIDIA H200", 132, 12080, "12.8", "0.2.0"}},
  };
  for (const Change& change : changes) {
    INFO("changed field: " << change.field);
    TempDir tmp;
    const fs::path file = tmp.path() / "tuning.json";
    TuningStore(file, h200()).record({kGateUp, {{"old", 1.0}}, {}});

    Warnings warnings;
    TuningStore store(file, change.metadata);
    REQUIRE(store.file_state() == TuningFileState::kMismatched);
    REQUIRE(warnings.count() == 1);
    INFO("warning: " << warnings.messages()[0]);
    REQUIRE(warnings.messages()[0].find(change.field) != std::string::npos);
    REQUIRE(warnings.messages()[0].find(file.string()) != std::string::npos);
    REQUIRE_FALSE(store.find(kGateUp).has_value());
    REQUIRE(store.records().empty());

    // The new setup wins: the file is rewritten with its metadata and only its records.
    store.record({kDown, {{"new", 2.0}}, {}});
    REQUIRE(store.usable());
    REQUIRE(warnings.count() == 1);
    REQUIRE_FALSE(store.find(kGateUp).has_value());
    TuningStore reread(file, change.metadata);
    REQUIRE(reread.file_state() == TuningFileState::kLoaded);
    REQUIRE(reread.best(kDown) == "new");
    REQUIRE_FALSE(reread.find(kGateUp).has_value());
    REQUIRE(TuningStore(file, h200()).file_state() == TuningFileState::kMismatched);
    REQUIRE(warnings.count() == 2);  // that last store warned once more
  }
}

TEST_CASE("tuning store: a file of another format version is ignored and replaced", "[tuning]") {
  TempDir tmp;
  const fs::path file = tmp.path() / "tuning.json";
  TuningStore(file, h200()).record({kGateUp, {{"a", 1.0}}, {}});
  json root = read_json(file);
  root["format"] = 2;
  write_bytes(file, root.dump());

  Warnings warnings;
  TuningStore store(file, h200());
  REQUIRE(store.file_state() == TuningFileState::kMismatched);
  REQUIRE(warnings.count() == 1);
  REQUIRE(warnings.messages()[0].find("format 2") != std::string::npos);
  REQUIRE_FALSE(store.find(kGateUp).has_value());
  store.record({kDown, {{"b", 1.0}}, {}});
  REQUIRE(read_json(file).at("format") == 1);
  REQUIRE(TuningStore(file, h200()).file_state() == TuningFileState::kLoaded);
}

TEST_CASE("tuning store: a corrupt file is ignored with one warning, then repaired by record()",
          "[tuning]") {
  TempDir tmp;
  const fs::path file = tmp.path() / "tuning.json";
  TuningStore(file, h200()).record({kGateUp, {{"a", 1.0}, {"b", kInf}}, {}});
  const std::string valid = read_bytes(file);
  json root = json::parse(valid);

  std::string bytes;
  SECTION("garbage") {
    bytes =
        "\x7f"
        "ELF\x01\x02 not json at all {{{";
  }
  SECTION("empty") { bytes = ""; }
  SECTION("truncated") { bytes = valid.substr(0, valid.size() / 2); }
  SECTION("the top level is an array") { bytes = "[1, 2, 3]"; }
  SECTION("no format") {
    root.erase("format");
    bytes = root.dump();
  }
  SECTION("sm_count is a string") {
    root["metadata"]["sm_count"] = "132";
    bytes = root.dump();
  }
  SECTION("a time is a string") {
    root["records"][kGateUp]["candidates"]["a"] = "fast";
    bytes = root.dump();
  }
  SECTION("updated is a string") {
    root["records"][kGateUp]["updated"] = "yesterday";
    bytes = root.dump();
  }
  SECTION("records is missing") {
    root.erase("records");
    bytes = root.dump();
  }
  write_bytes(file, bytes);

  Warnings warnings;
  std::unique_ptr<TuningStore> store;
  REQUIRE_NOTHROW(store = std::make_unique<TuningStore>(file, h200()));
  REQUIRE(store->file_state() == TuningFileState::kCorrupt);
  REQUIRE(warnings.count() == 1);
  REQUIRE_FALSE(store->find(kGateUp).has_value());
  REQUIRE(store->records().empty());

  REQUIRE_NOTHROW(store->record({kDown, {{"c", 3.0}}, {}}));
  REQUIRE(store->usable());
  REQUIRE(warnings.count() == 1);
  TuningStore repaired(file, h200());
  REQUIRE(repaired.file_state() == TuningFileState::kLoaded);
  REQUIRE(repaired.best(kDown) == "c");
  REQUIRE(repaired.records().size() == 1);
  REQUIRE(warnings.count() == 1);
}

TEST_CASE("tuning store: processes recording at once all end up in the file", "[tuning]") {
  constexpr int kProcesses = 8;
  constexpr int kProblems = 10;
  const std::string child = RT_MOE_TEST_HELPER_DIR "/rt_moe_tuning_child";
  REQUIRE(fs::exists(child));
  TempDir tmp;
  const fs::path file = tmp.path() / "cache" / "tuning.json";
  const fs::path go = tmp.path() / "go";

  std::vector<std::vector<std::string>> children;
  for (int id = 0; id < kProcesses; ++id) {
    children.push_back(
        {child, file.string(), std::to_string(id), std::to_string(kProblems), go.string()});
  }
  run_together(children, go);

  Warnings warnings;
  TuningStore store(file, h200());
  REQUIRE(store.file_state() == TuningFileState::kLoaded);
  REQUIRE(store.records().size() == kProcesses * kProblems + 1);
  for (int id = 0; id < kProcesses; ++id) {
    for (int i = 0; i < kProblems; ++i) {
      const std::string problem = "child " + std::to_string(id) + " problem " + std::to_string(i);
      INFO(problem);
      const std::optional<TuningRecord> record = store.find(problem);
      REQUIRE(record.has_value());
      const std::vector<CandidateTime> expected = {
          {"a", 1.0 + id + i / 100.0}, {"b", 0.5 + id}, {"c", kInf}};
      REQUIRE(record->candidates == expected);
      REQUIRE(record->best == "b");
    }
  }
  // Every child recorded its own candidate of one shared problem: the union is kept.
  const TuningRecord shared = store.find("shared").value();
  REQUIRE(shared.candidates.size() == kProcesses);
  for (int id = 0; id < kProcesses; ++id) {
    INFO("child " << id);
    REQUIRE(shared.candidates[id] == CandidateTime{"child " + std::to_string(id), 10.0 + id});
  }
  REQUIRE(shared.best == "child 0");
  REQUIRE(stray_files(file.parent_path()).empty());
  REQUIRE(warnings.count() == 0);
}

TEST_CASE("tuning store: threads of two stores on one file recording at once all end up in it",
          "[tuning]") {
  constexpr int kThreads = 3;
  constexpr int kProblems = 10;
  TempDir tmp;
  const fs::path file = tmp.path() / "tuning.json";
  Warnings warnings;
  TuningStore first(file, h200());
  TuningStore second(file, h200());
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * kThreads; ++t) {
    threads.emplace_back([&, t] {
      TuningStore& store = t % 2 == 0 ? first : second;
      for (int i = 0; i < kProblems; ++i) {
        store.record({"thread " + std::to_string(t) + " problem " + std::to_string(i),
                      {{"a", 1.0 + t}},
                      {}});
        store.record({"shared", {{"thread " + std::to_string(t), 1.0 + t + i}}, {}});
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  TuningStore fresh(file, h200());
  REQUIRE(fresh.records().size() == 2 * kThreads * kProblems + 1);
  const TuningRecord shared = fresh.find("shared").value();
  REQUIRE(shared.candidates.size() == 2 * kThreads);
  for (int t = 0; t < 2 * kThreads; ++t) {
    // Each thread's last measurement of its candidate replaced the earlier ones.
    REQUIRE(shared.candidates[t] ==
            CandidateTime{"thread " + std::to_string(t), 1.0 + t + kProblems - 1});
  }
  REQUIRE(shared.best == "thread 0");
  REQUIRE(stray_files(tmp.path()).empty());
  REQUIRE(warnings.count() == 0);
}

TEST_CASE("tuning store: an unwritable location keeps results in memory with one warning",
          "[tuning]") {
  TempDir tmp;
  const fs::path blocked = tmp.path() / "cache";
  write_bytes(blocked, "a regular file where the cache directory should be");
  const fs::path file = blocked / "tuning.json";

  Warnings warnings;
  TuningStore store(file, h200());
  REQUIRE(store.file_state() == TuningFileState::kMissing);
  REQUIRE(warnings.count() == 0);
  REQUIRE_NOTHROW(store.record({kGateUp, {{"a", 1.0}, {"b", 0.5}}, {}}));
  REQUIRE_FALSE(store.usable());
  REQUIRE(warnings.count() == 1);
  REQUIRE(warnings.messages()[0].find(file.string()) != std::string::npos);
  REQUIRE_NOTHROW(store.record({kDown, {{"c", 2.0}}, {}}));
  REQUIRE(warnings.count() == 1);  // later failures go to debug
  REQUIRE(store.best(kGateUp) == "b");
  REQUIRE(store.best(kDown) == "c");
  REQUIRE(fs::is_regular_file(blocked));

  // Once the location works again, the next record() writes everything this store knows.
  fs::remove(blocked);
  store.record({kGateUp, {{"a", 0.25}}, {}});
  REQUIRE(store.usable());
  TuningStore fresh(file, h200());
  REQUIRE(fresh.best(kGateUp) == "a");
  REQUIRE(fresh.best(kDown) == "c");
  REQUIRE(warnings.count() == 1);
}

TEST_CASE("tuning store: stale staging files are removed, fresh ones kept", "[tuning]") {
  TempDir tmp;
  const fs::path file = tmp.path() / "tuning.json";
  const fs::path stale = tmp.path() / ".tuning.json.123.abc.0000000000000001.tmp";
  const fs::path fresh = tmp.path() / ".tuning.json.456.def.0000000000000002.tmp";
  write_bytes(stale, "{\"format\":");
  write_bytes(fresh, "{\"format\":");
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(2));
  TuningStore(file, h200()).record({kGateUp, {{"a", 1.0}}, {}});
  REQUIRE_FALSE(fs::exists(stale));
  REQUIRE(fs::exists(fresh));
  REQUIRE(stray_files(tmp.path()) == std::vector<std::string>{fresh.filename().string()});
}

TEST_CASE("tuning store: the default file is tuning.json in the cache directory", "[tuning]") {
  REQUIRE(default_tuning_path(CacheOptions{"/var/cache/rt_moe"}) ==
          fs::path("/var/cache/rt_moe/tuning.json"));
  REQUIRE(default_tuning_path(CacheOptions{"/var/cache/rt_moe", /*disabled=*/true}).empty());
  REQUIRE(default_tuning_path(CacheOptions{""}).empty());
  REQUIRE(default_tuning_path() == default_tuning_path(options_from_env()));

  // No file: memory only, silently.
  Warnings warnings;
  TuningStore store({}, h200());
  REQUIRE(store.file_state() == TuningFileState::kNone);
  REQUIRE_FALSE(store.usable());
  store.record({kGateUp, {{"a", 1.0}}, {}});
  REQUIRE(store.best(kGateUp) == "a");
  REQUIRE(warnings.count() == 0);
}
