#include "util/log.hpp"

#include "dist/group.hpp"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include "util/exit_codes.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace hetpar {
namespace {

std::string g_tag;
std::string g_device = "cpu";
int g_rank = -1;
std::mutex g_mutex;  // whole lines, even from helper threads

void write_line(FILE* stream, const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fputs(g_tag.c_str(), stream);
  std::fputs(line.c_str(), stream);
  std::fputc('\n', stream);
  std::fflush(stream);
}

}  // namespace

void set_log_rank(int rank) {
  g_rank = rank;
  g_tag = rank < 0 ? "" : fmt::format("[rank {}] ", rank);
}
void set_log_device(const std::string& device) { g_device = device; }
void log_line(const std::string& line) { write_line(stdout, line); }
void log_error_line(const std::string& line) { write_line(stderr, line); }

void die(int code, const std::string& message) {
  log_error_line("error: " + message);
  std::fflush(stdout);
  _exit(code);
}

void quiet_torch_logging() {
  const char* level = std::getenv("TORCH_CPP_LOG_LEVEL");
  if (level == nullptr || *level == '\0') FLAGS_caffe2_log_level = c10::GLOG_FATAL;
}

std::string error_message(const std::exception& error) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error)) return torch_error->what_without_backtrace();
  return error.what();
}

void die_of(const std::exception& error) {
  // Out of memory is an outcome a sweep records, not a crash: its own code and words.
  // NCCL reports its own allocation failures as backend errors.
  const bool nccl_oom = dynamic_cast<const c10::DistBackendError*>(&error) &&
                        error_message(error).find("out of memory") != std::string::npos;
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) || dynamic_cast<const std::bad_alloc*>(&error) || nccl_oom) {
    die(kExitOutOfMemory, fmt::format("out of memory on rank {} (device {}): {}", g_rank < 0 ? 0 : g_rank, g_device,
                                      error_message(error)));
  }
  const bool collective = dynamic_cast<const CollectiveError*>(&error) != nullptr;
  // Where a torch error came from, when asked for (the GPU check's host-sync run does).
  const char* trace = std::getenv("TORCH_SHOW_CPP_STACKTRACES");
  const bool with_trace = trace != nullptr && std::string(trace) == "1" && dynamic_cast<const c10::Error*>(&error);
  die(collective ? kExitCollectiveError : kExitError, with_trace ? std::string(error.what()) : error_message(error));
}

}  // namespace hetpar
