// The communication recorder: with HETPAR_COMM_TRACE=DIR set, every call a
// Group makes is appended to DIR/rank<R>.jsonl in host issue order (format:
// dist/comm_trace_format.hpp), and so is every host wait on one, so that
// dist/nccl_order_check.* can replay a Gloo run under NCCL's ordering rules.
// Off (the variable unset), a Group holds a null recorder and pays one
// pointer test per call.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "dist/comm_trace_format.hpp"

namespace hetpar {

class CommTrace {
 public:
  // This process's recorder, opened on first use; null when tracing is off.
  static CommTrace* for_rank(int job_rank);

  int64_t record(const TraceOp& op);  // returns the op's index
  void waited(int64_t index);

  ~CommTrace();

 private:
  explicit CommTrace(std::FILE* file) : file_(file) {}
  void write(const std::string& line);

  std::mutex mutex_;  // autograd may run a collective off the main thread
  std::FILE* file_;
  int64_t next_ = 0;
};

}  // namespace hetpar
