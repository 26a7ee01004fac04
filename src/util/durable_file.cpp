#include "util/durable_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>

namespace hetpar {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what, const std::string& path, int error) {
  throw FileError("cannot " + what + " " + path + ": " + std::strerror(error));
}

// All of [data, data + size) or the errno of the first failed write.
int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

// The rename is durable only once the directory entry is on disk.
void sync_directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  const int fd = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the data itself is already synced
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, std::vector<std::string_view>{content});
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", tmp, errno);
  int error = 0;
  for (const std::string_view piece : pieces) {
    if (error == 0) error = write_all(fd, piece.data(), piece.size());
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(tmp.c_str());
    fail("write", path, error);
  }
  sync_directory_of(path);
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  static const std::regex temporary(R"(.+\.tmp\.([0-9]+))");
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec) || e.is_symlink(ec) || !std::regex_match(name, m, temporary)) continue;
    const long pid = std::strtol(m[1].str().c_str(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    if (fs::remove(e.path(), ec)) removed.push_back(e.path().string());
  }
  return removed;
}

void ensure_writable_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw FileError("cannot use " + dir + " as a directory: it is a file");
  }
  fs::create_directories(dir, ec);
  if (ec) throw FileError("cannot create directory " + dir + ": " + ec.message());
  const std::string probe = dir + "/.hetpar-write-probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("write into directory", dir, errno);
  // One byte: a full disk refuses even that, where creating an empty file may pass.
  int error = write_all(fd, "x", 1);
  if (::close(fd) != 0 && error == 0) error = errno;
  ::unlink(probe.c_str());
  if (error != 0) fail("write into directory", dir, error);
}

AppendFile::AppendFile(const std::string& path, bool truncate) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0644);
  if (fd_ < 0) fail("open", path, errno);
}

AppendFile::AppendFile(AppendFile&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append_line(const std::string& line) {
  if (fd_ < 0) throw FileError("cannot append to " + path_ + ": not open");
  const std::string text = line + "\n";
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  int error = write_all(fd_, text.data(), text.size());
  if (error == 0 && ::fdatasync(fd_) != 0) error = errno;
  if (error != 0) {
    if (before >= 0 && ::ftruncate(fd_, before) != 0) {
      // Nothing more to do: the reader skips a torn last line.
    }
    fail("append to", path_, error);
  }
}

}  // namespace hetpar
