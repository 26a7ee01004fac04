#include "util/marker_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

namespace hetpar {
namespace {

// The PID a marker names, or "unknown".
std::string holder_pid(const std::string& marker) {
  std::ifstream in(marker);
  std::string word, pid = "unknown";
  while (in >> word) {
    if (word == "pid") in >> pid;
  }
  return pid;
}

}  // namespace

bool is_marker_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec));
}

MarkerLock::MarkerLock(const std::string& path, const std::string& owner) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);  // a link is never a marker
  if (fd_ < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) throw MarkerBusy(holder_pid(path));
    throw std::runtime_error("cannot lock " + path + ": " + std::strerror(error));
  }
  const std::string text = owner + "\npid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(error));
  }
}

MarkerLock::MarkerLock(MarkerLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

MarkerLock& MarkerLock::operator=(MarkerLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

MarkerLock::~MarkerLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace hetpar
