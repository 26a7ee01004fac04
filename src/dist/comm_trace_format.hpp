// The communication trace of a job: every process-group call of each rank in
// host issue order, one JSON line per event, written by dist/comm_trace.* and
// read back here for dist/nccl_order_check.*. No torch: the reader and the
// checker live in the torch-free library so their tests build in seconds.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace hetpar {

// One call as issued by the host.
struct TraceOp {
  std::string group;        // the communicator's name
  std::vector<int> ranks;   // its members, job ranks ascending
  std::string kind;         // send, recv, all_reduce, all_gather, reduce_scatter, all_to_all_v, broadcast, barrier
  int peer = -1;            // send/recv: the other side's job rank
  int64_t tag = 0;
  int64_t count = 0;        // elements
  std::string dtype;
  int64_t batch = 0;        // > 0: the ops of one coalesced batch share it
  // The host had waited on the first `waits_before` entries of the rank's
  // wait list (RankTrace::waits) when it posted this op.
  int64_t waits_before = 0;
};

struct RankTrace {
  int rank = 0;
  std::vector<TraceOp> ops;
  std::vector<int64_t> waits;  // op indices, in the order the host waited on them
};

bool is_point_to_point(const TraceOp& op);

// Lines: {"op":i,"group":..,"ranks":[..],"kind":..,"peer":..,"tag":..,"count":..,"dtype":..,"batch":..}
// (ops numbered from 0 in issue order) and {"wait":i}. Throws on a malformed line.
RankTrace read_rank_trace(std::istream& in, int rank);
// Every rank<R>.jsonl in `dir`, ordered by rank.
std::vector<RankTrace> read_trace_dir(const std::string& dir);

std::string op_line(int64_t index, const TraceOp& op);
std::string wait_line(int64_t index);
// "rank 3 op 12: send to 5 tag 7 (64 Float) on llm.pp[1,5]": for messages.
std::string describe(int rank, int64_t index, const TraceOp& op);

}  // namespace hetpar
