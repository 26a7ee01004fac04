#include "train/run_dir.hpp"

#include <filesystem>

#include "checkpoint/checkpoint_manifest.hpp"
#include "util/durable_file.hpp"
#include "util/output_dir.hpp"

namespace hetpar {
namespace {

namespace fs = std::filesystem;

void remove_entry(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);  // never follows a link
  if (ec) throw RunDirError("cannot remove " + path + " (an earlier run's output): " + ec.message());
}

}  // namespace

RunDirClaim::RunDirClaim(const std::string& dir, bool resuming_here) : dir_(dir), resuming_here_(resuming_here) {
  const OutputKind& kind = run_outputs();
  if (!resuming_here) {
    if (const std::string why = output_dir_problem(dir, kind); !why.empty()) throw RunDirError(why);
  }
  try {
    mark_output_dir(dir, kind);
  } catch (const FileError& e) {
    throw RunDirError(e.what());
  }
  try {
    lock_ = MarkerLock((fs::path(dir) / kind.marker).string(), "made by " + kind.writer);
  } catch (const MarkerBusy& e) {
    throw RunDirError("another hetpar train (pid " + e.holder_pid + ") is writing into " + dir +
                      "; wait for it to end or choose another --out");
  } catch (const std::runtime_error& e) {
    throw RunDirError(e.what());
  }
  if (resuming_here) return;
  if (const auto checkpoint = latest_complete_checkpoint(dir)) {
    throw RunDirError(dir + " holds a complete checkpoint of an earlier run (" + *checkpoint +
                      "): continue it with --resume " + dir + ", or choose another --out");
  }
}

void RunDirClaim::clear_earlier_outputs() const {
  // What killed writes left: beside the outputs, and in checkpoints a resume goes on writing beside.
  remove_stale_temporaries(dir_);
  std::error_code ec;
  for (const fs::directory_entry& step : fs::directory_iterator(checkpoints_root(dir_), ec)) {
    if (step.is_directory(ec) && !step.is_symlink(ec)) remove_stale_temporaries(step.path().string());
  }
  if (resuming_here_) {
    remove_entry((fs::path(dir_) / "summary.json").string());
    return;
  }
  for (const std::string& path : existing_outputs(dir_, run_outputs())) remove_entry(path);
}

bool same_directory(const std::string& a, const std::string& b) {
  auto normal = [](const std::string& path, std::error_code& ec) {
    fs::path p = fs::weakly_canonical(path, ec).lexically_normal();
    return p.has_filename() ? p : p.parent_path();  // "dir/" and "dir" are one directory
  };
  std::error_code ec_a, ec_b;
  const fs::path pa = normal(a, ec_a), pb = normal(b, ec_b);
  return !ec_a && !ec_b && pa == pb;
}

}  // namespace hetpar
