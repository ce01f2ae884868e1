#include "tuning_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "file_ops.h"

namespace rt_moe::cache {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kFormat = 1;
constexpr double kFailed = std::numeric_limits<double>::infinity();
// A writer holds the lock for one read-merge-write of a small file; a process stopped or hung
// while holding it must not hang every other process's tuning, so waiting is bounded.
constexpr auto kLockWait = std::chrono::seconds(10);
// Staging files are written under the lock, so one older than this was left by a dead process.
constexpr auto kStaleStaging = std::chrono::hours(1);

std::string errno_text(int error) { return std::strerror(error); }

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double sanitized(double ms) { return std::isnan(ms) || ms < 0 ? kFailed : ms; }

// The lowest finite time; candidates are ordered by name, so a tie goes to the first name.
std::string best_of(const std::vector<CandidateTime>& candidates) {
  const CandidateTime* best = nullptr;
  for (const CandidateTime& c : candidates) {
    if (std::isfinite(c.ms) && (best == nullptr || c.ms < best->ms)) best = &c;
  }
  return best != nullptr ? best->candidate : std::string();
}

// `old` with `update`'s times replacing those of the same candidates.
TuningRecord merged(const TuningRecord& old, const TuningRecord& update) {
  TuningRecord both = update;
  both.candidates = old.candidates;
  both.candidates.insert(both.candidates.end(), update.candidates.begin(), update.candidates.end());
  return TuningStore::normalized(both);
}

struct Loaded {
  TuningFileState state = TuningFileState::kMissing;
  std::string why;  // for kMismatched, kCorrupt and kUnreadable
  std::map<std::string, TuningRecord> records;
};

Loaded failed(TuningFileState state, std::string why) { return Loaded{state, std::move(why), {}}; }

// `text` as a JSON string literal, for messages; bytes that are not UTF-8 are replaced.
std::string as_json_string(std::string_view text) {
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The int in `object[key]`, or nullopt when it is missing or not an integer of int's range.
std::optional<int> int_field(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) {
    const auto value = it->get<std::uint64_t>();
    if (value > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) return std::nullopt;
    return static_cast<int>(value);
  }
  const auto value = it->get<std::int64_t>();
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return std::nullopt;
  }
  return static_cast<int>(value);
}

std::optional<std::string> string_field(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// Every field of `found` that differs from `expected`, with both values, for the warning.
std::string differences(const TuningMetadata& found, const TuningMetadata& expected) {
  std::string text;
  auto add = [&](const char* field, const std::string& in_file, const std::string& here) {
    if (in_file == here) return;
    if (!text.empty()) text += ", ";
    text += std::string(field) + " " + in_file + " in the file, " + here + " here";
  };
  add("gpu_name", as_json_string(found.gpu_name), as_json_string(expected.gpu_name));
  add("sm_count", std::to_string(found.sm_count), std::to_string(expected.sm_count));
  add("driver_version", std::to_string(found.driver_version),
      std::to_string(expected.driver_version));
  add("nvrtc_version", as_json_string(found.nvrtc_version), as_json_string(expected.nvrtc_version));
  add("rt_moe_version", as_json_string(found.rt_moe_version),
      as_json_string(expected.rt_moe_version));
  return text;
}

// Reads one record; empty `why` on success.
std::string parse_record(const std::string& problem, const json& value, TuningRecord& record) {
  const std::string where = "record " + as_json_string(problem);
  if (!value.is_object()) return where + " is not an object";
  const auto candidates = value.find("candidates");
  if (candidates == value.end() || !candidates->is_object()) {
    return where + ": \"candidates\" is missing or not an object";
  }
  record.problem = problem;
  for (const auto& [name, ms] : candidates->items()) {
    if (ms.is_null()) {
      record.candidates.push_back({name, kFailed});
    } else if (ms.is_number()) {
      record.candidates.push_back({name, ms.get<double>()});
    } else {
      return where + ": candidate " + as_json_string(name) + " is not a number or null";
    }
  }
  // The stored best is for people reading the file; the store recomputes it.
  const auto best = value.find("best");
  if (best == value.end() || !(best->is_string() || best->is_null())) {
    return where + ": \"best\" is missing or not a string or null";
  }
  const auto updated = value.find("updated");
  if (updated == value.end() || !updated->is_number_integer()) {
    return where + ": \"updated\" is missing or not an integer";
  }
  record.updated = updated->get<std::int64_t>();
  return {};
}

Loaded parse(const std::string& bytes, const TuningMetadata& expected) {
  json root;
  try {
    root = json::parse(bytes);
  } catch (const json::exception& e) {
    return failed(TuningFileState::kCorrupt, e.what());
  }
  if (!root.is_object()) return failed(TuningFileState::kCorrupt, "the top level is not an object");
  const std::optional<int> format = int_field(root, "format");
  if (!format) return failed(TuningFileState::kCorrupt, "\"format\" is missing or not an integer");
  if (*format != kFormat) {
    return failed(
        TuningFileState::kMismatched,
        "format " + std::to_string(*format) + " in the file, " + std::to_string(kFormat) + " here");
  }

  const auto meta = root.find("metadata");
  if (meta == root.end() || !meta->is_object()) {
    return failed(TuningFileState::kCorrupt, "\"metadata\" is missing or not an object");
  }
  TuningMetadata found;
  for (auto [key, field] :
       {std::pair{"gpu_name", &found.gpu_name}, std::pair{"nvrtc_version", &found.nvrtc_version},
        std::pair{"rt_moe_version", &found.rt_moe_version}}) {
    const std::optional<std::string> value = string_field(*meta, key);
    if (!value) {
      return failed(TuningFileState::kCorrupt,
                    std::string("metadata.") + key + " is missing or not a string");
    }
    *field = *value;
  }
  for (auto [key, field] : {std::pair{"sm_count", &found.sm_count},
                            std::pair{"driver_version", &found.driver_version}}) {
    const std::optional<int> value = int_field(*meta, key);
    if (!value) {
      return failed(TuningFileState::kCorrupt,
                    std::string("metadata.") + key + " is missing or not an integer");
    }
    *field = *value;
  }
  if (found != expected) return failed(TuningFileState::kMismatched, differences(found, expected));

  const auto records = root.find("records");
  if (records == root.end() || !records->is_object()) {
    return failed(TuningFileState::kCorrupt, "\"records\" is missing or not an object");
  }
  Loaded loaded{TuningFileState::kLoaded, {}, {}};
  for (const auto& [problem, value] : records->items()) {
    TuningRecord record;
    if (std::string why = parse_record(problem, value, record); !why.empty()) {
      return failed(TuningFileState::kCorrupt, why);
    }
    loaded.records.emplace(problem, TuningStore::normalized(record));
  }
  return loaded;
}

Loaded load(const fs::path& file, const TuningMetadata& expected) {
  const FileBytes read = read_file(file);
  // ENOTDIR: a file where a parent directory should be, so there is no tuning file either.
  if (read.error == ENOENT || read.error == ENOTDIR) return failed(TuningFileState::kMissing, {});
  if (read.error != 0) return failed(TuningFileState::kUnreadable, errno_text(read.error));
  return parse(read.bytes, expected);
}

std::string serialize(const std::map<std::string, TuningRecord>& records,
                      const TuningMetadata& metadata) {
  json out_records = json::object();
  for (const auto& [problem, record] : records) {
    json candidates = json::object();
    // JSON has no infinity: a failed candidate is null.
    for (const CandidateTime& c : record.candidates) {
      candidates[c.candidate] = std::isfinite(c.ms) ? json(c.ms) : json(nullptr);
    }
    json entry = json::object();
    entry["candidates"] = std::move(candidates);
    entry["best"] = record.best.empty() ? json(nullptr) : json(record.best);
    entry["updated"] = record.updated;
    out_records[problem] = std::move(entry);
  }
  json root = json::object();
  root["format"] = kFormat;
  root["metadata"] = json{{"gpu_name", metadata.gpu_name},
                          {"sm_count", metadata.sm_count},
                          {"driver_version", metadata.driver_version},
                          {"nvrtc_version", metadata.nvrtc_version},
                          {"rt_moe_version", metadata.rt_moe_version}};
  root["records"] = std::move(out_records);
  // `replace`: a name that is not UTF-8 must not make a write throw.
  return root.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

// Empty when `fd` is locked exclusively, or when the file system has no locks (then concurrent
// writers lose merges, never whole files); otherwise why it could not be locked.
std::string lock_exclusive(int fd, const fs::path& lock_path) {
  const auto deadline = std::chrono::steady_clock::now() + kLockWait;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return {};
    const int error = errno;
    if (error == EINTR) continue;
    if (error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS || error == EINVAL) {
      log().debug("tuning: no locks on {} ({}); writing without one", lock_path.string(),
                  errno_text(error));
      return {};
    }
    if (error != EWOULDBLOCK) return "cannot lock " + lock_path.string() + ": " + errno_text(error);
    if (std::chrono::steady_clock::now() > deadline) {
      return "another process held " + lock_path.string() + " for over 10 s";
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

// Removes staging files of `name` in `dir` left by processes that died while writing.
void remove_stale_staging(const fs::path& dir, const std::string& name) {
  const std::string prefix = "." + name + ".";
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (!file.starts_with(prefix) || !is_staging_name(file)) continue;
    std::error_code time_ec;
    const auto mtime = it->last_write_time(time_ec);
    if (!time_ec && now - mtime > kStaleStaging) {
      std::error_code remove_ec;
      fs::remove(it->path(), remove_ec);
    }
  }
}

}  // namespace

fs::path default_tuning_path(const CacheOptions& options) {
  if (options.disabled || options.dir.empty()) return {};
  return fs::path(options.dir) / "tuning.json";
}

fs::path default_tuning_path() { return default_tuning_path(options_from_env()); }

TuningRecord TuningStore::normalized(const TuningRecord& record) {
  std::map<std::string, double> times;
  for (const CandidateTime& c : record.candidates) times[c.candidate] = sanitized(c.ms);
  TuningRecord out;
  out.problem = record.problem;
  out.updated = record.updated;
  for (const auto& [name, ms] : times) out.candidates.push_back({name, ms});
  out.best = best_of(out.candidates);
  return out;
}

TuningStore::TuningStore(fs::path file, TuningMetadata expected)
    : file_(std::move(file)), expected_(std::move(expected)) {
  if (file_.empty()) {
    log().debug("tuning: no tuning file; results are kept in memory only");
    return;
  }
  usable_ = true;
  Loaded loaded = load(file_, expected_);
  file_state_ = loaded.state;
  const std::string path = file_.string();
  switch (loaded.state) {
    case TuningFileState::kNone:
    case TuningFileState::kMissing:
      log().debug("tuning: {} does not exist yet", path);
      break;
    case TuningFileState::kLoaded:
      records_ = std::move(loaded.records);
      log().debug("tuning: {}: {} records", path, records_.size());
      break;
    case TuningFileState::kMismatched:
      log().warn("tuning: ignoring {}, measured on another setup ({}); the next result replaces it",
                 path, loaded.why);
      break;
    case TuningFileState::kCorrupt:
      log().warn("tuning: ignoring {}, not a valid tuning file ({}); the next result replaces it",
                 path, loaded.why);
      break;
    case TuningFileState::kUnreadable:
      // record() will not replace a file it cannot read, so this is the one warning.
      usable_ = false;
      write_failure_warned_ = true;
      log().warn("tuning: cannot read {} ({}); tuning results are kept in memory only", path,
                 loaded.why);
      break;
  }
}

std::optional<TuningRecord> TuningStore::find(const std::string& problem) const {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(problem);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> TuningStore::best(const std::string& problem) const {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(problem);
  if (it == records_.end() || it->second.best.empty()) return std::nullopt;
  return it->second.best;
}

std::vector<TuningRecord> TuningStore::records() const {
  std::lock_guard lock(mutex_);
  std::vector<TuningRecord> out;
  out.reserve(records_.size());
  for (const auto& [problem, record] : records_) out.push_back(record);
  return out;
}

bool TuningStore::usable() const {
  std::lock_guard lock(mutex_);
  return usable_;
}

void TuningStore::record(const TuningRecord& record) {
  TuningRecord update = normalized(record);
  update.updated = unix_now();
  std::lock_guard write_lock(write_mutex_);
  Records known;
  {
    std::lock_guard lock(mutex_);
    TuningRecord& slot = records_[update.problem];
    slot = merged(slot, update);
    if (file_.empty()) return;
    known = records_;
  }
  std::optional<Records> written = write_merged(update, known);
  std::lock_guard lock(mutex_);
  usable_ = written.has_value();
  // The file now also holds what other processes measured; answer from it too.
  if (written) records_ = std::move(*written);
}

std::optional<TuningStore::Records> TuningStore::write_merged(const TuningRecord& update,
                                                              const Records& known) {
  const fs::path dir = file_.has_parent_path() ? file_.parent_path() : fs::path(".");
  const std::string name = file_.filename().string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    write_failed("cannot create " + dir.string() + ": " + ec.message());
    return std::nullopt;
  }
  // The lock file is never removed: removing it would let two writers lock different files.
  fs::path lock_path = file_;
  lock_path += ".lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) {
    write_failed("cannot open " + lock_path.string() + ": " + errno_text(errno));
    return std::nullopt;
  }
  if (const std::string why = lock_exclusive(lock.get(), lock_path); !why.empty()) {
    write_failed(why);
    return std::nullopt;
  }

  Loaded current = load(file_, expected_);
  if (current.state == TuningFileState::kUnreadable) {
    // Replacing a file we cannot read would drop what other processes measured.
    write_failed("cannot read it: " + current.why);
    return std::nullopt;
  }
  if (current.state == TuningFileState::kMismatched || current.state == TuningFileState::kCorrupt) {
    log().info("tuning: replacing {} ({})", file_.string(), current.why);
  }
  Records records = std::move(current.records);
  // What this process knows and the file lacks (it was replaced, deleted, or never written
  // because of an earlier failure) goes back in.
  for (const auto& [problem, record] : known) records.try_emplace(problem, record);
  TuningRecord& slot = records[update.problem];
  slot = merged(slot, update);

  remove_stale_staging(dir, name);
  const PublishResult result = replace(dir, name, serialize(records, expected_));
  if (result.outcome != Published::kYes) {
    write_failed(std::string(result.step) + ": " + errno_text(result.error));
    return std::nullopt;
  }
  log().debug("tuning: recorded {} in {} ({} records)", update.problem, file_.string(),
              records.size());
  return records;
}

void TuningStore::write_failed(const std::string& what) {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    first = !write_failure_warned_;
    write_failure_warned_ = true;
  }
  if (first) {
    log().warn("tuning: cannot write {} ({}); tuning results are kept in memory only",
               file_.string(), what);
  } else {
    log().debug("tuning: cannot write {} ({})", file_.string(), what);
  }
}

}  // namespace rt_moe::cache
