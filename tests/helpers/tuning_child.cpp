// One process of the multi-process tuning store test (tests/cpu/test_tuning_store.cpp):
//
//   rt_moe_tuning_child <tuning file> <id> <number of problems> <go file>
//
// Waits until <go file> exists (so that all processes start together), then records its own
// problems ("child <id> problem <i>") and, halfway through, its own candidate of the problem all
// children share ("shared"), each with a fresh store now and then so that loads race with writes.
// Checks that its store answers every problem it recorded and exits 0. Any failure prints a line on
// stderr and exits non-zero.
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "tuning_store.h"

namespace fs = std::filesystem;
using namespace rt_moe::cache;

namespace {

// The same metadata, problems and candidates as the test that checks the file afterwards.
TuningMetadata child_metadata() { return {"NVIDIA H200", 132, 12080, "12.8", "0.1.0"}; }

std::string child_problem(int id, int i) {
  return "child " + std::to_string(id) + " problem " + std::to_string(i);
}

TuningRecord child_record(int id, int i) {
  const double inf = std::numeric_limits<double>::infinity();
  return {child_problem(id, i), {{"a", 1.0 + id + i / 100.0}, {"b", 0.5 + id}, {"c", inf}}, {}};
}

int fail(const std::string& what) {
  std::fprintf(stderr, "rt_moe_tuning_child: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return fail("usage: rt_moe_tuning_child <file> <id> <problems> <go file>");
  try {
    const fs::path file = argv[1];
    const int id = std::stoi(argv[2]);
    const int problems = std::stoi(argv[3]);
    const fs::path go = argv[4];

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(go)) {
      if (std::chrono::steady_clock::now() > deadline) return fail("no go file");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }

    auto store = std::make_unique<TuningStore>(file, child_metadata());
    for (int i = 0; i < problems; ++i) {
      if (i == problems / 2) {
        store->record({"shared", {{"child " + std::to_string(id), 10.0 + id}}, {}});
      }
      if (i % 3 == 2) store = std::make_unique<TuningStore>(file, child_metadata());
      store->record(child_record(id, i));
      if (!store->usable()) return fail("the store became unusable");
    }
    for (int i = 0; i < problems; ++i) {
      if (store->best(child_problem(id, i)) != "b") {
        return fail("wrong best for " + child_problem(id, i));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
