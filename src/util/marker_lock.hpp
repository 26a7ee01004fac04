// A marker file that says hetpar owns a directory and, held with flock for as
// long as this object lives, that one process is writing there now. The
// marker's text names the holder's PID, for the message another process
// gets; the kernel drops the lock when the holder dies, however it dies.
#pragma once

#include <stdexcept>
#include <string>

namespace hetpar {

// Whether `path` is a marker: a plain file, not a link (a link could lend a
// user's directory hetpar's ownership).
bool is_marker_file(const std::string& path);

// Another live process holds the marker.
class MarkerBusy : public std::runtime_error {
 public:
  explicit MarkerBusy(const std::string& holder_pid)
      : std::runtime_error("held by pid " + holder_pid), holder_pid(holder_pid) {}
  std::string holder_pid;
};

class MarkerLock {
 public:
  MarkerLock() = default;
  // Creates (if needed) and locks `path`, then writes `owner` and this PID
  // into it. Throws MarkerBusy, or std::runtime_error naming the path.
  MarkerLock(const std::string& path, const std::string& owner);
  MarkerLock(MarkerLock&& other) noexcept;
  MarkerLock& operator=(MarkerLock&& other) noexcept;
  MarkerLock(const MarkerLock&) = delete;
  MarkerLock& operator=(const MarkerLock&) = delete;
  ~MarkerLock();  // closing drops the lock

 private:
  int fd_ = -1;
};

}  // namespace hetpar
