#include "sweep/sweep_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace hetpar {
namespace {

namespace fs = std::filesystem;

std::string marker_text() { return "hetpar sweep directory\npid " + std::to_string(::getpid()) + "\n"; }

// The PID a marker names, or "unknown".
std::string holder_pid(const std::string& marker) {
  std::ifstream in(marker);
  std::string word, pid = "unknown";
  while (in >> word) {
    if (word == "pid") in >> pid;
  }
  return pid;
}

bool is_empty_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_empty(dir, ec) && !ec;
}

}  // namespace

SweepDir::SweepDir(const std::string& dir, bool fresh) : dir_(dir) {
  const fs::path marker = fs::path(dir) / kSweepMarker;
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(dir, ec));
  if (exists && !fs::is_directory(dir, ec)) {
    throw SweepDirError(dir + " exists and is not a directory; choose another --out");
  }
  if (exists && !fs::exists(marker, ec) && !is_empty_dir(dir)) {
    throw SweepDirError(dir + " exists, is not empty and was not made by hetpar sweep (it has no " +
                        std::string(kSweepMarker) + " marker); hetpar will not write into it" +
                        (fresh ? " or empty it" : "") + ": choose another --out, or remove it yourself");
  }
  fs::create_directories(dir, ec);
  if (ec) throw SweepDirError("cannot create " + dir + ": " + ec.message());

  lock_fd_ = ::open(marker.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw SweepDirError("cannot create " + marker.string() + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (error == EWOULDBLOCK) {
      throw SweepDirError("another sweep (pid " + holder_pid(marker) + ") is writing into " + dir +
                          "; wait for it to end or choose another --out");
    }
    throw SweepDirError("cannot lock " + marker.string() + ": " + std::strerror(error));
  }
  const std::string text = marker_text();
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    throw SweepDirError("cannot write " + marker.string() + ": " + std::strerror(errno));
  }
  if (!fresh) return;
  // Everything but the marker, which holds the lock; remove_all never follows links.
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename() == kSweepMarker) continue;
    fs::remove_all(entry.path(), ec);
    if (ec) throw SweepDirError("cannot remove " + entry.path().string() + ": " + ec.message());
  }
}

SweepDir::~SweepDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing drops the flock
}

}  // namespace hetpar
