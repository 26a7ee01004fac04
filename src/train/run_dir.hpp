// The directory one training run writes (--out), claimed before any rank
// starts and held until the run ends:
//
//   fresh run   -> refused if it holds files hetpar train did not write
//                  (see util/output_dir.hpp) or a complete checkpoint
//                  (continue that with --resume); else marked, locked, and
//                  the earlier run's outputs there removed, so no stale
//                  summary, profile or log is read as this run's
//   resumed run -> (--resume names this directory; its checkpoint was
//                  verified before) marked, locked, the stale summary removed
//
// The lock (flock on the marker) refuses a second run into the directory
// while one is writing there; the holder's PID is in the marker.
#pragma once

#include <stdexcept>
#include <string>

#include "util/marker_lock.hpp"

namespace hetpar {

class RunDirError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RunDirClaim {
 public:
  RunDirClaim() = default;
  // Throws RunDirError naming the problem and what to do instead.
  RunDirClaim(const std::string& dir, bool resuming_here);

 private:
  MarkerLock lock_;  // released when the claim is destroyed
};

// Whether two paths name the same directory (either may not exist yet).
bool same_directory(const std::string& a, const std::string& b);

}  // namespace hetpar
