#include "file_ops.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>

namespace rt_moe::cache {
namespace fs = std::filesystem;

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() { close(); }

int UniqueFd::close() {
  if (fd_ < 0) return 0;
  // Linux releases the descriptor even when close() fails, so it is never retried.
  const int rc = ::close(release());
  return rc == 0 ? 0 : errno;
}

namespace {

int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

int fsync_dir(const fs::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return errno;
  // Some file systems cannot fsync a directory; the entry itself is already durable.
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != EROFS) return errno;
  return 0;
}

// Hard links are what make the first publisher win; these errors mean the file system has none.
bool link_unsupported(int error) {
  return error == EPERM || error == EOPNOTSUPP || error == ENOSYS || error == EMLINK ||
         error == EXDEV;
}

}  // namespace

FileBytes read_file(const fs::path& path) {
  FileBytes file;
  file.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file.fd) {
    file.error = errno;
    return file;
  }
  struct stat st {};
  if (::fstat(file.fd.get(), &st) != 0) {
    file.error = errno;
    return file;
  }
  if (!S_ISREG(st.st_mode)) {
    file.error = EISDIR;
    return file;
  }
  file.device = st.st_dev;
  file.inode = st.st_ino;
  file.bytes.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < file.bytes.size()) {
    const ssize_t n = ::read(file.fd.get(), file.bytes.data() + done, file.bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      file.error = errno;
      return file;
    }
    if (n == 0) break;  // shrank while we read: the verification sees a short file
    done += static_cast<std::size_t>(n);
  }
  file.bytes.resize(done);
  return file;
}

bool remove_if_same(const fs::path& path, dev_t device, ino_t inode) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  if (st.st_dev != device || st.st_ino != inode) return false;
  return ::unlink(path.c_str()) == 0;
}

std::string staging_name(std::string_view stem) {
  thread_local std::mt19937_64 random(std::random_device{}() ^
                                      std::hash<std::thread::id>{}(std::this_thread::get_id()));
  char suffix[80];
  std::snprintf(suffix, sizeof(suffix), ".%ld.%zx.%016llx.tmp", static_cast<long>(::getpid()),
                std::hash<std::thread::id>{}(std::this_thread::get_id()),
                static_cast<unsigned long long>(random()));
  std::string name(1, '.');
  name.append(stem);
  name.append(suffix);
  return name;
}

bool is_staging_name(std::string_view name) {
  return name.starts_with('.') && name.ends_with(".tmp");
}

namespace {

// Creates `dir` if missing and writes `bytes` to a fresh staging file in it, fsync'ed and closed.
// On failure the staging file is removed and the result says which step failed.
PublishResult write_staging(const fs::path& dir, const fs::path& staging, std::string_view bytes) {
  auto failed = [](const char* step, int error) {
    return PublishResult{Published::kFailed, error, step};
  };
  std::error_code ec;
  fs::create_directories(dir, ec);  // also recreates a cache directory deleted mid-run
  if (ec) return failed("create directory", ec.value());

  UniqueFd fd(::open(staging.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return failed("create staging file", errno);
  const char* step = "write";
  int error = write_all(fd.get(), bytes);
  if (error == 0) {
    step = "fsync";
    if (::fsync(fd.get()) != 0) error = errno;
  }
  if (error == 0) {
    step = "close";
    error = fd.close();
  }
  if (error != 0) {
    ::unlink(staging.c_str());
    return failed(step, error);
  }
  return PublishResult{Published::kYes};
}

}  // namespace

PublishResult publish(const fs::path& dir, const std::string& name, std::string_view bytes) {
  auto failed = [](const char* step, int error) {
    return PublishResult{Published::kFailed, error, step};
  };
  const fs::path staging = dir / staging_name(name);
  const fs::path final_path = dir / name;
  if (PublishResult written = write_staging(dir, staging, bytes);
      written.outcome != Published::kYes) {
    return written;
  }

  if (::link(staging.c_str(), final_path.c_str()) == 0) {
    ::unlink(staging.c_str());
  } else if (const int link_error = errno; link_error == EEXIST) {
    ::unlink(staging.c_str());
    return PublishResult{Published::kLostRace};
  } else if (!link_unsupported(link_error)) {
    ::unlink(staging.c_str());
    return failed("link", link_error);
  } else if (::rename(staging.c_str(), final_path.c_str()) != 0) {
    // Without hard links the last writer wins; entries of one key hold the same bytes.
    const int rename_error = errno;
    ::unlink(staging.c_str());
    return failed("rename", rename_error);
  }
  if (const int sync_error = fsync_dir(dir); sync_error != 0) {
    return failed("fsync directory", sync_error);
  }
  return PublishResult{Published::kYes};
}

PublishResult replace(const fs::path& dir, const std::string& name, std::string_view bytes) {
  const fs::path staging = dir / staging_name(name);
  if (PublishResult written = write_staging(dir, staging, bytes);
      written.outcome != Published::kYes) {
    return written;
  }
  // rename() swaps the directory entry in one step: a reader opens the old file or the new one.
  if (::rename(staging.c_str(), (dir / name).c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(staging.c_str());
    return PublishResult{Published::kFailed, rename_error, "rename"};
  }
  if (const int sync_error = fsync_dir(dir); sync_error != 0) {
    return PublishResult{Published::kFailed, sync_error, "fsync directory"};
  }
  return PublishResult{Published::kYes};
}

}  // namespace rt_moe::cache
