// POSIX file helpers for the disk cache and the tuning store. Nothing here throws: each call
// reports an errno value (0 on success), because a disk problem must degrade the cache, never fail
// the caller.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace rt_moe::cache {

// A move-only owner of a file descriptor; the destructor closes it and never throws.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  int close();  // errno of close(), or 0

 private:
  int fd_ = -1;
};

struct FileBytes {
  int error = 0;  // ENOENT: no such entry
  std::string bytes;
  dev_t device = 0;  // identity of the file that was read, to remove exactly that one later
  ino_t inode = 0;
  UniqueFd fd;  // still open, so a hit can refresh the mtime of the file it read
};
FileBytes read_file(const std::filesystem::path& path);

// Removes `path` only if it still is the file (device, inode) that was read: another process may
// have replaced a bad entry with a good one in the meantime.
bool remove_if_same(const std::filesystem::path& path, dev_t device, ino_t inode);

// A name no other thread or process uses: ".<stem>.<pid>.<thread>.<random>.tmp".
std::string staging_name(std::string_view stem);
bool is_staging_name(std::string_view name);

enum class Published { kYes, kLostRace, kFailed };
struct PublishResult {
  Published outcome = Published::kFailed;
  int error = 0;              // errno of the failing step
  const char* step = "none";  // which step failed, for the log
};

// Writes `bytes` to a staging file in `dir` (created if missing), fsyncs it, links it to
// `dir/name` (rename where the file system has no hard links), removes the staging name and
// fsyncs `dir`. When `dir/name` already exists the existing file wins (kLostRace).
PublishResult publish(const std::filesystem::path& dir, const std::string& name,
                      std::string_view bytes);

// Like publish(), but renames the staging file over `dir/name`: readers see the old file or the
// new one, never a mix, and the last writer wins. Callers that read, merge and write back must
// serialize themselves (the tuning store holds a lock file).
PublishResult replace(const std::filesystem::path& dir, const std::string& name,
                      std::string_view bytes);

}  // namespace rt_moe::cache
