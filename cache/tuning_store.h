// The tuning store: the measured time of every tile candidate of a problem, and the best one, kept
// in one JSON file that all processes of a user share (`<cache dir>/tuning.json`, next to the
// cubin cache's `v1/`).
//
// The file belongs to one setup (GPU, driver, NVRTC, rt_moe version): a file written on another
// setup, or one that cannot be parsed, is ignored with one warning and replaced by the next
// record(). record() merges under an exclusive lock on `<file>.lock` (read, merge, write a staging
// file, fsync, rename over the file), so processes recording at once all end up in the file and a
// reader sees a complete file or the previous one. Disk failures are logged, never thrown: the
// store keeps answering from memory. The format is in docs/CACHE.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "disk_cache.h"

namespace rt_moe::cache {

// The setup a file's measurements hold for; a file is used only when all fields are equal.
struct TuningMetadata {
  std::string gpu_name;  // e.g. "NVIDIA H200"
  int sm_count = 0;
  int driver_version = 0;     // cuDriverGetVersion()
  std::string nvrtc_version;  // e.g. "12.8"
  std::string rt_moe_version;
  friend bool operator==(const TuningMetadata&, const TuningMetadata&) = default;
};

struct CandidateTime {
  std::string candidate;  // opaque name, e.g. "128x256x64 s4 w2"
  double ms = 0;          // +inf: failed to compile or launch, or gave wrong results
  friend bool operator==(const CandidateTime&, const CandidateTime&) = default;
};

struct TuningRecord {
  // Opaque key, e.g. "H=7168 I=2048 E=256 S=1 k=8 bf16 bucket=32768 stage=gate_up".
  std::string problem;
  std::vector<CandidateTime> candidates;  // as stored: one per name, ordered by name
  // The candidate with the lowest finite time (ties: the first by name); empty when none is
  // finite. record() recomputes it, so a caller's value is ignored.
  std::string best;
  std::int64_t updated = 0;  // unix seconds of the last record() of this problem; set by record()
  friend bool operator==(const TuningRecord&, const TuningRecord&) = default;
};

// What the constructor found at the store's path.
enum class TuningFileState {
  kNone,        // no path: memory only
  kMissing,     // no file yet (an empty store)
  kLoaded,      // read, and its metadata matched
  kMismatched,  // another setup's file (or another format): ignored, replaced by record()
  kCorrupt,     // not a valid tuning file: ignored, replaced by record()
  kUnreadable,  // could not be read (permissions, a directory in the way): ignored
};

// `<options.dir>/tuning.json`, or empty (memory only) when the cache is disabled or has no
// directory.
std::filesystem::path default_tuning_path(const CacheOptions& options);
// The same for options_from_env().
std::filesystem::path default_tuning_path();

class TuningStore {
 public:
  // Loads `file` (an empty path: memory only). Never throws for anything found on disk.
  TuningStore(std::filesystem::path file, TuningMetadata expected);
  TuningStore(const TuningStore&) = delete;
  TuningStore& operator=(const TuningStore&) = delete;

  std::optional<TuningRecord> find(const std::string& problem) const;
  // The best candidate of `problem`; nullopt when unknown or when no candidate succeeded.
  std::optional<std::string> best(const std::string& problem) const;
  std::vector<TuningRecord> records() const;  // every record, ordered by problem

  // Merges `record` into memory and into the file: other problems are kept (including those other
  // processes wrote meanwhile, which this store then also answers), a candidate measured again
  // takes the new time, and best is recomputed. A time that is NaN or negative counts as failed
  // (+inf). Write failures are logged (a warning the first time, then debug) and never thrown.
  void record(const TuningRecord& record);

  // True while the store can persist: it has a file and its last write, if any, succeeded.
  bool usable() const;
  TuningFileState file_state() const { return file_state_; }  // as loaded by the constructor
  const std::filesystem::path& file() const { return file_; }
  const TuningMetadata& metadata() const { return expected_; }

  // A record as the store keeps it: one time per candidate (later ones win), ordered by name,
  // NaN and negative times as +inf, best recomputed.
  static TuningRecord normalized(const TuningRecord& record);

 private:
  using Records = std::map<std::string, TuningRecord>;
  // Merges `update` into the file's current records (and this store's records the file lacks) and
  // writes them back; returns what was written, or nullopt when that failed (already logged).
  std::optional<Records> write_merged(const TuningRecord& update, const Records& known);
  void write_failed(const std::string& what);

  const std::filesystem::path file_;
  const TuningMetadata expected_;
  TuningFileState file_state_ = TuningFileState::kNone;

  std::mutex write_mutex_;    // one read-modify-write of the file at a time in this process
  mutable std::mutex mutex_;  // guards the members below; never held during disk I/O
  Records records_;
  bool usable_ = false;
  bool write_failure_warned_ = false;
};

}  // namespace rt_moe::cache
