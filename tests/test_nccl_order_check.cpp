// The NCCL-order checker on hand-made traces: what passes, and the deadlocks
// and mismatches it must name.
#include <gtest/gtest.h>

#include <sstream>

#include "dist/nccl_order_check.hpp"

namespace hetpar {
namespace {

// Builds one rank's trace as the recorder would write it.
class RankBuilder {
 public:
  explicit RankBuilder(int rank) { trace_.rank = rank; }
  int64_t send(int peer, int64_t tag, const std::string& group = "world") { return p2p("send", peer, tag, group); }
  int64_t recv(int peer, int64_t tag, const std::string& group = "world") { return p2p("recv", peer, tag, group); }
  int64_t all_reduce(const std::string& group = "world") {
    TraceOp op{group, ranks_, "all_reduce"};
    op.count = 4;
    return add(op);
  }
  void wait(int64_t op) { trace_.waits.push_back(op); }
  void begin_batch() { batch_ = ++batches_; }
  void end_batch() { batch_ = 0; }
  RankTrace trace() const { return trace_; }

 private:
  int64_t p2p(const char* kind, int peer, int64_t tag, const std::string& group) {
    TraceOp op{group, ranks_, kind, peer, tag, 16, "Float", batch_};
    return add(op);
  }
  int64_t add(TraceOp op) {
    op.waits_before = static_cast<int64_t>(trace_.waits.size());
    trace_.ops.push_back(op);
    return static_cast<int64_t>(trace_.ops.size()) - 1;
  }
  RankTrace trace_;
  std::vector<int> ranks_{0, 1};
  int64_t batch_ = 0, batches_ = 0;
};

TEST(NcclOrderCheck, AMatchingExchangePasses) {
  RankBuilder a(0), b(1);
  a.send(1, 0);
  a.wait(a.recv(1, 1));
  b.wait(b.recv(0, 0));
  b.send(0, 1);
  b.all_reduce();
  a.all_reduce();
  const OrderCheck check = check_nccl_order({a.trace(), b.trace()});
  EXPECT_TRUE(check.ok()) << check.summary();
  EXPECT_EQ(check.ops, 6);
}

// The encoder posts rows m1 before it receives the gradient of m0; the LLM
// sends that gradient before it receives rows m1: fine with tags (Gloo),
// a deadlock on one in-order NCCL stream.
TEST(NcclOrderCheck, CatchesTheRunAheadDeadlock) {
  RankBuilder enc(0), llm(1);
  enc.send(1, 0);                // rows m0
  enc.send(1, 2);                // rows m1
  enc.wait(enc.recv(1, 1));      // gradient m0
  enc.wait(enc.recv(1, 3));      // gradient m1
  llm.wait(llm.recv(0, 0));
  llm.send(0, 1);
  llm.wait(llm.recv(0, 2));
  llm.send(0, 3);
  const OrderCheck check = check_nccl_order({enc.trace(), llm.trace()});
  ASSERT_EQ(check.deadlock.size(), 2u) << check.summary();
  EXPECT_NE(check.deadlock[0].find("rank 0 op 1: send to 1 tag 2"), std::string::npos) << check.deadlock[0];
  EXPECT_NE(check.deadlock[1].find("rank 1 op 1: send to 0 tag 1"), std::string::npos) << check.deadlock[1];
  // FIFO pairing per direction still pairs the right messages: only the order is wrong.
  EXPECT_TRUE(check.mismatches.empty()) << check.summary();
}

// The same protocol with one communicator per direction completes.
TEST(NcclOrderCheck, ACommunicatorPerDirectionRemovesTheRunAheadDeadlock) {
  RankBuilder enc(0), llm(1);
  enc.send(1, 0, "rows");
  enc.send(1, 2, "rows");
  enc.wait(enc.recv(1, 1, "grads"));
  enc.wait(enc.recv(1, 3, "grads"));
  llm.wait(llm.recv(0, 0, "rows"));
  llm.send(0, 1, "grads");
  llm.wait(llm.recv(0, 2, "rows"));
  llm.send(0, 3, "grads");
  const OrderCheck check = check_nccl_order({enc.trace(), llm.trace()});
  EXPECT_TRUE(check.ok()) << check.summary();
}

TEST(NcclOrderCheck, CatchesATagOrderMismatch) {
  RankBuilder a(0), b(1);
  a.send(1, 4);
  a.send(1, 6);
  b.recv(0, 6);  // Gloo would pair by tag; NCCL pairs the first send with the first receive
  b.recv(0, 4);
  const OrderCheck check = check_nccl_order({a.trace(), b.trace()});
  ASSERT_EQ(check.mismatches.size(), 1u) << check.summary();
  EXPECT_NE(check.mismatches[0].find("rank 0 op 0: send to 1 tag 4"), std::string::npos) << check.mismatches[0];
  EXPECT_NE(check.mismatches[0].find("rank 1 op 0: recv from 0 tag 6"), std::string::npos) << check.mismatches[0];
}

TEST(NcclOrderCheck, CatchesASizeMismatchAndAMissingPartner) {
  RankBuilder a(0), b(1);
  a.send(1, 0);
  RankTrace bt = b.trace();
  bt.ops.push_back(TraceOp{"world", {0, 1}, "recv", 0, 0, 8, "Float"});
  bt.ops.push_back(TraceOp{"world", {0, 1}, "recv", 0, 2, 8, "Float"});
  const OrderCheck check = check_nccl_order({a.trace(), bt});
  ASSERT_EQ(check.mismatches.size(), 2u) << check.summary();
  EXPECT_NE(check.mismatches[1].find("no matching send"), std::string::npos);
  EXPECT_FALSE(check.deadlock.empty());
}

// Both ranks send first: a deadlock when each op runs alone, fine as one
// coalesced batch (both sides' ops start together).
TEST(NcclOrderCheck, ACoalescedBatchResolvesATwoWayExchange) {
  RankBuilder a(0), b(1);
  a.send(1, 0);
  a.wait(a.recv(1, 1));
  b.send(0, 1);
  b.wait(b.recv(0, 0));
  EXPECT_EQ(check_nccl_order({a.trace(), b.trace()}).deadlock.size(), 2u);

  RankBuilder c(0), d(1);
  c.begin_batch();
  c.send(1, 0);
  const int64_t cr = c.recv(1, 1);
  c.end_batch();
  c.wait(cr);
  d.begin_batch();
  d.send(0, 1);
  const int64_t dr = d.recv(0, 0);
  d.end_batch();
  d.wait(dr);
  const OrderCheck check = check_nccl_order({c.trace(), d.trace()});
  EXPECT_TRUE(check.ok()) << check.summary();
}

// Streams of two communicators are independent unless the host waits: rank
// 0's send does not queue behind its collective, until rank 0 waits on it.
TEST(NcclOrderCheck, AHostWaitAcrossCommunicatorsCanDeadlock) {
  RankBuilder a(0), b(1);
  a.all_reduce("tp");
  a.send(1, 0);
  b.wait(b.recv(0, 0));
  b.all_reduce("tp");
  EXPECT_TRUE(check_nccl_order({a.trace(), b.trace()}).ok());

  RankBuilder c(0), d(1);
  c.wait(c.all_reduce("tp"));
  c.send(1, 0);
  d.wait(d.recv(0, 0));
  d.all_reduce("tp");
  const OrderCheck check = check_nccl_order({c.trace(), d.trace()});
  ASSERT_EQ(check.deadlock.size(), 2u) << check.summary();
  EXPECT_NE(check.deadlock[1].find("rank 1 op 0: recv"), std::string::npos) << check.deadlock[1];
  EXPECT_NE(check.deadlock[1].find("its host first waits on rank 0 op 0: all_reduce"), std::string::npos) << check.deadlock[1];
}

TEST(NcclOrderCheck, ReadsTheRecordersLines) {
  TraceOp send{"world", {0, 1}, "send", 1, 3, 12, "Float"};
  std::stringstream lines;
  lines << op_line(0, send) << "\n" << wait_line(0) << "\n" << op_line(1, TraceOp{"llm.tp", {0, 1}, "all_reduce", -1, 0, 5, "Float"}) << "\n";
  const RankTrace t = read_rank_trace(lines, 0);
  ASSERT_EQ(t.ops.size(), 2u);
  EXPECT_EQ(t.ops[0].peer, 1);
  EXPECT_EQ(t.ops[0].tag, 3);
  EXPECT_EQ(t.ops[1].waits_before, 1);
  EXPECT_EQ(t.waits, std::vector<int64_t>{0});
}

}  // namespace
}  // namespace hetpar
