#include "util/log.hpp"

#include "dist/group.hpp"
#include "util/exit_codes.hpp"

#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace hetpar {
namespace {

std::string g_tag;
std::mutex g_mutex;  // whole lines, even from helper threads

void write_line(FILE* stream, const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fputs(g_tag.c_str(), stream);
  std::fputs(line.c_str(), stream);
  std::fputc('\n', stream);
  std::fflush(stream);
}

}  // namespace

void set_log_rank(int rank) { g_tag = rank < 0 ? "" : fmt::format("[rank {}] ", rank); }
void log_line(const std::string& line) { write_line(stdout, line); }
void log_error_line(const std::string& line) { write_line(stderr, line); }

void die(int code, const std::string& message) {
  log_error_line("error: " + message);
  std::fflush(stdout);
  _exit(code);
}

void die_of(const std::exception& error) {
  const bool collective = dynamic_cast<const CollectiveError*>(&error) != nullptr;
  die(collective ? kExitCollectiveError : kExitError, error.what());
}

}  // namespace hetpar
