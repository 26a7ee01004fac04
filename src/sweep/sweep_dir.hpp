// The output directory of a sweep. hetpar writes, and with --fresh empties,
// only directories it made itself: each carries a marker file, which is also
// the lock that keeps a second sweep out while one is writing there.
//
//   absent                  -> created and marked
//   empty                   -> marked
//   marked                  -> resumed; with --fresh, emptied (the marker stays)
//   anything else, or busy  -> refused, naming the reason (or the holder's PID)
#pragma once

#include <stdexcept>
#include <string>

#include "util/marker_lock.hpp"

namespace hetpar {

class SweepDirError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr const char* kSweepMarker = ".hetpar-sweep";

class SweepDir {
 public:
  // Throws SweepDirError when `dir` cannot be used (see above).
  SweepDir(const std::string& dir, bool fresh);
  SweepDir(const SweepDir&) = delete;
  SweepDir& operator=(const SweepDir&) = delete;

  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
  MarkerLock lock_;  // released when the sweep ends
};

}  // namespace hetpar
