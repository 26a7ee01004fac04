#include "sweep/sweep_dir.hpp"

#include <filesystem>

#include "util/marker_lock.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;

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
  if (exists && !is_marker_file(marker.string()) && !is_empty_dir(dir)) {
    throw SweepDirError(dir + " exists, is not empty and was not made by hetpar sweep (it has no " +
                        std::string(kSweepMarker) + " marker); hetpar will not write into it" +
                        (fresh ? " or empty it" : "") + ": choose another --out, or remove it yourself");
  }
  fs::create_directories(dir, ec);
  if (ec) throw SweepDirError("cannot create " + dir + ": " + ec.message());

  try {
    lock_ = MarkerLock(marker.string(), "hetpar sweep directory");
  } catch (const MarkerBusy& e) {
    throw SweepDirError("another sweep (pid " + e.holder_pid + ") is writing into " + dir +
                        "; wait for it to end or choose another --out");
  } catch (const std::runtime_error& e) {
    throw SweepDirError(e.what());
  }
  if (!fresh) return;
  // Everything but the marker, which holds the lock; remove_all never follows links.
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename() == kSweepMarker) continue;
    fs::remove_all(entry.path(), ec);
    if (ec) throw SweepDirError("cannot remove " + entry.path().string() + ": " + ec.message());
  }
}

}  // namespace hetpar
