#include "dist/comm_trace.hpp"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace hetpar {
namespace {

struct Settings {
  std::string dir;
  bool read_env = false;
  std::unique_ptr<CommTrace> trace;
  int rank = -1;
};

Settings& settings() {
  static Settings s;
  return s;
}

}  // namespace

CommTrace* CommTrace::for_rank(int job_rank) {
  Settings& s = settings();
  if (!s.read_env) {
    s.read_env = true;
    if (const char* dir = std::getenv("HETPAR_COMM_TRACE"); dir != nullptr) s.dir = dir;
  }
  if (s.dir.empty()) return nullptr;
  if (s.trace && s.rank == job_rank) return s.trace.get();
  std::filesystem::create_directories(s.dir);
  const std::string path = s.dir + "/rank" + std::to_string(job_rank) + ".jsonl";
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) throw std::runtime_error("cannot write the communication trace " + path);
  s.trace.reset(new CommTrace(file));
  s.rank = job_rank;
  return s.trace.get();
}

CommTrace::~CommTrace() { std::fclose(file_); }

void CommTrace::write(const std::string& line) {
  // Flushed per line: a rank that hangs or is killed leaves its trace up to there.
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

int64_t CommTrace::record(const TraceOp& op) {
  std::lock_guard lock(mutex_);
  write(op_line(next_, op));  // hetpar posts no coalesced batches: op.batch stays 0
  return next_++;
}

void CommTrace::waited(int64_t index) {
  std::lock_guard lock(mutex_);
  write(wait_line(index));
}

}  // namespace hetpar
