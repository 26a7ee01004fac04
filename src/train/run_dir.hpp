// The directory one training run writes (--out), claimed before any rank
// starts and held until the run ends:
//
//   fresh run   -> refused if it holds files hetpar train did not write
//                  (see util/output_dir.hpp) or a complete checkpoint
//                  (continue that with --resume); else marked and locked;
//                  clear_earlier_outputs() then removes the earlier run's
//                  outputs there, so no stale summary, profile or log is
//                  read as this run's
//   resumed run -> (--resume names this directory; its checkpoint was
//                  verified before) marked, locked; clear_earlier_outputs()
//                  removes the stale summary
//
// Claiming removes nothing: a command refused by a later check (another
// output that cannot be written, say) leaves the earlier run as it was. Only
// when every check has passed does the caller clear.
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
  // The earlier run's outputs (resumed: its summary) removed; throws RunDirError.
  void clear_earlier_outputs() const;

 private:
  std::string dir_;
  bool resuming_here_ = false;
  MarkerLock lock_;  // released when the claim is destroyed
};

// Whether two paths name the same directory (either may not exist yet).
bool same_directory(const std::string& a, const std::string& b);

}  // namespace hetpar
