// Files that are either written completely or report why not. Results are
// the product of hours of compute: a full disk or a read-only target must be
// an error naming the path, never a run that "succeeded" with empty files.
//
// - write_file_atomic: the whole content goes to a temporary file beside the
//   target, is flushed to disk, then renamed over it; a reader sees the old
//   file or the new one, never half of one.
// - AppendFile: a log of whole lines (steps.jsonl, results.jsonl). Each line
//   is written with one write(2) and checked; a failed write is rolled back
//   to the last complete line, so a crash or a full disk leaves at worst a
//   missing last record, never a corrupt one.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hetpar {

// Thrown on any failed file operation; what() names the path and the cause.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void write_file_atomic(const std::string& path, const std::string& content);
// The same for content in pieces (a header, then tensors' bytes where they lie).
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

// The temporaries (`NAME.tmp.PID`) in `dir` of writers no longer running on
// this machine: what a killed write left. Removed, they are listed; a live
// writer's are never touched. Nothing else in `dir` is looked at.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

// Creates `dir` (and its parents) if needed and checks that a file can be
// created in it, so an unusable output path fails before any work starts.
void ensure_writable_dir(const std::string& dir);

class AppendFile {
 public:
  AppendFile() = default;
  // Opens (creating) `path` for appending; `truncate` empties it first.
  AppendFile(const std::string& path, bool truncate);
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Appends `line` and a newline, durably (fdatasync).
  void append_line(const std::string& line);

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace hetpar
