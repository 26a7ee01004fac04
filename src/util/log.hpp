// Rank-tagged logging to stderr, and the one way a rank dies on a fatal error.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <string>

static_assert(FMT_VERSION >= 120000, "hetpar uses the fmt bundled with the pinned LibTorch");

namespace hetpar {

// Sets the tag printed in front of every line ("[rank 3] "); empty for the launcher.
void set_log_rank(int rank);
// The device named when a rank runs out of memory ("cpu" until set).
void set_log_device(const std::string& device);
void log_line(const std::string& line);        // stdout: progress and results
void log_error_line(const std::string& line);  // stderr: warnings and errors

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_line(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_error_line(fmt::format(f, std::forward<Args>(args)...));
}

// torch's own log lines (c10d's connection retries, each with a C++
// backtrace) are hidden unless TORCH_CPP_LOG_LEVEL asks for them: hetpar
// reports every failure itself, in one line. Called first thing in main().
void quiet_torch_logging();

// An exception's message for a user: torch's own errors carry a C++
// backtrace of tens of frames in what(); this is the message without it.
std::string error_message(const std::exception& error);

// Prints the error and ends the process at once with `code`. Skips static
// destructors on purpose: a process group whose peer died can block in its
// destructor, and a rank that hangs instead of exiting is the worst outcome.
[[noreturn]] void die(int code, const std::string& message);

// die() for an exception escaping a rank: a CollectiveError (a peer was lost
// or a collective timed out) exits kExitCollectiveError, anything else kExitError.
[[noreturn]] void die_of(const std::exception& error);

}  // namespace hetpar
