#include "dist/nccl_order_check.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace hetpar {
namespace {

constexpr size_t kMaxMismatches = 20;  // the first few say what is wrong; the rest repeat it

std::string comm_key(const TraceOp& op) {
  std::string key = op.group + "[";
  for (int r : op.ranks) key += std::to_string(r) + ",";
  return key + "]";
}

struct OpRef {
  int rank = -1;  // index into the traces
  int64_t op = -1;
};

class Checker {
 public:
  explicit Checker(const std::vector<RankTrace>& traces) : t_(traces) {
    for (size_t i = 0; i < t_.size(); ++i) index_[t_[i].rank] = static_cast<int>(i);
    state_.resize(t_.size());
    for (size_t i = 0; i < t_.size(); ++i) {
      state_[i].partner.assign(t_[i].ops.size(), {});
      state_[i].collective.assign(t_[i].ops.size(), -1);
      state_[i].started.assign(t_[i].ops.size(), false);
      state_[i].complete.assign(t_[i].ops.size(), false);
      state_[i].done.assign(t_[i].ops.size(), false);
    }
  }

  void match(OrderCheck& out);
  void simulate(OrderCheck& out);

 private:
  struct RankState {
    std::vector<OpRef> partner;                    // p2p: the matched op
    std::vector<int64_t> collective;               // collectives: index into collectives_
    std::vector<bool> started, complete, done;  // complete: its rendezvous happened; done: its unit too
    std::map<std::string, std::vector<int64_t>> streams;  // per communicator, op indices in issue order
    std::map<std::string, size_t> head;            // next unfinished position in each stream
    int64_t waits_done = 0;                        // leading entries of the wait list that are done
  };

  std::string name(OpRef r) const { return describe(t_[r.rank].rank, r.op, t_[r.rank].ops[r.op]); }
  const TraceOp& op(OpRef r) const { return t_[r.rank].ops[r.op]; }
  // The ops of the unit (a coalesced batch or one op) starting at stream position `pos`.
  std::vector<int64_t> unit(int rank, const std::vector<int64_t>& stream, size_t pos) const;
  bool rendezvous_ready(OpRef r) const;
  std::string why_not_started(OpRef r) const;
  std::string why_blocked(OpRef r) const;

  const std::vector<RankTrace>& t_;
  std::map<int, int> index_;  // job rank -> trace
  std::vector<RankState> state_;
  std::vector<std::vector<OpRef>> collectives_;  // each: one op per member
};

std::vector<int64_t> Checker::unit(int rank, const std::vector<int64_t>& stream, size_t pos) const {
  std::vector<int64_t> ops{stream[pos]};
  const int64_t batch = t_[rank].ops[stream[pos]].batch;
  if (batch == 0) return ops;
  for (size_t i = pos + 1; i < stream.size() && t_[rank].ops[stream[i]].batch == batch; ++i) ops.push_back(stream[i]);
  return ops;
}

void Checker::match(OrderCheck& out) {
  const auto report = [&](std::string line) {
    if (out.mismatches.size() < kMaxMismatches) out.mismatches.push_back(std::move(line));
  };
  // (communicator, src, dst) -> sends in src's order, receives in dst's order
  std::map<std::tuple<std::string, int, int>, std::pair<std::vector<OpRef>, std::vector<OpRef>>> p2p;
  std::map<std::string, std::map<int, std::vector<OpRef>>> colls;  // communicator -> member -> its collectives
  for (size_t r = 0; r < t_.size(); ++r) {
    const int me = t_[r].rank;
    for (int64_t i = 0; i < static_cast<int64_t>(t_[r].ops.size()); ++i) {
      const TraceOp& o = t_[r].ops[i];
      const std::string key = comm_key(o);
      state_[r].streams[key].push_back(i);
      ++out.ops;
      const OpRef ref{static_cast<int>(r), i};
      if (!is_point_to_point(o)) {
        colls[key][me].push_back(ref);
        continue;
      }
      if (o.peer == me || !std::binary_search(o.ranks.begin(), o.ranks.end(), o.peer) || !index_.count(o.peer)) {
        report(name(ref) + ": its peer is not another member with a trace");
        continue;
      }
      if (o.kind == "send") p2p[{key, me, o.peer}].first.push_back(ref);
      else p2p[{key, o.peer, me}].second.push_back(ref);
    }
  }
  for (auto& [key, sr] : p2p) {
    const auto& [sends, recvs] = sr;
    const size_t n = std::min(sends.size(), recvs.size());
    bool reported = false;
    for (size_t k = 0; k < n; ++k) {
      const TraceOp &s = op(sends[k]), &v = op(recvs[k]);
      state_[sends[k].rank].partner[sends[k].op] = recvs[k];
      state_[recvs[k].rank].partner[recvs[k].op] = sends[k];
      if (!reported && (s.tag != v.tag || s.count != v.count || s.dtype != v.dtype)) {
        report("message " + std::to_string(k) + " between them pairs " + name(sends[k]) + " with " + name(recvs[k]));
        reported = true;  // the first differing pair says it; later ones usually follow from it
      }
    }
    for (size_t k = n; k < sends.size(); ++k) report(name(sends[k]) + ": no matching receive");
    for (size_t k = n; k < recvs.size(); ++k) report(name(recvs[k]) + ": no matching send");
  }
  for (auto& [key, members] : colls) {
    const std::vector<int>& ranks = op(members.begin()->second.front()).ranks;
    size_t n = SIZE_MAX;
    for (int m : ranks) n = std::min(n, members.count(m) ? members[m].size() : size_t{0});
    for (size_t k = 0; k < n; ++k) {
      std::vector<OpRef> call;
      for (int m : ranks) call.push_back(members[m][k]);
      const TraceOp& first = op(call.front());
      for (const OpRef& c : call) {
        const TraceOp& o = op(c);
        const bool sizes_agree = o.kind == "all_to_all_v" || (o.count == first.count && o.dtype == first.dtype);
        if (o.kind != first.kind || !sizes_agree) {
          report("collective " + std::to_string(k) + " on " + key + " pairs " + name(call.front()) + " with " + name(c));
          break;
        }
      }
      for (const OpRef& c : call) state_[c.rank].collective[c.op] = static_cast<int64_t>(collectives_.size());
      collectives_.push_back(std::move(call));
    }
    for (auto& [m, list] : members) {
      for (size_t k = n; k < list.size(); ++k) report(name(list[k]) + ": not every member of the group calls it");
    }
  }
}

bool Checker::rendezvous_ready(OpRef r) const {
  const TraceOp& o = op(r);
  if (is_point_to_point(o)) {
    const OpRef p = state_[r.rank].partner[r.op];
    return p.rank >= 0 && state_[p.rank].started[p.op];
  }
  const int64_t c = state_[r.rank].collective[r.op];
  if (c < 0) return false;
  for (const OpRef& m : collectives_[c]) {
    if (!state_[m.rank].started[m.op]) return false;
  }
  return true;
}

void Checker::simulate(OrderCheck& out) {
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < t_.size(); ++r) {  // start every head unit the host has posted
      RankState& s = state_[r];
      while (s.waits_done < static_cast<int64_t>(t_[r].waits.size()) && s.done[t_[r].waits[s.waits_done]]) ++s.waits_done;
      for (auto& [key, stream] : s.streams) {
        const size_t pos = s.head[key];
        if (pos >= stream.size() || s.started[stream[pos]]) continue;
        const std::vector<int64_t> ops = unit(static_cast<int>(r), stream, pos);
        const bool posted = std::all_of(ops.begin(), ops.end(), [&](int64_t i) { return t_[r].ops[i].waits_before <= s.waits_done; });
        if (!posted) continue;
        for (int64_t i : ops) s.started[i] = true;
        progress = true;
      }
    }
    for (size_t r = 0; r < t_.size(); ++r) {  // rendezvous, then retire finished units
      RankState& s = state_[r];
      for (auto& [key, stream] : s.streams) {
        size_t& pos = s.head[key];
        if (pos >= stream.size() || !s.started[stream[pos]]) continue;
        const std::vector<int64_t> ops = unit(static_cast<int>(r), stream, pos);
        for (int64_t i : ops) {
          if (!s.complete[i] && rendezvous_ready({static_cast<int>(r), i})) s.complete[i] = true;
        }
        if (std::all_of(ops.begin(), ops.end(), [&](int64_t i) { return s.complete[i]; })) {
          for (int64_t i : ops) s.done[i] = true;
          pos += ops.size();
          progress = true;
        }
      }
    }
  }
  for (size_t r = 0; r < t_.size(); ++r) {
    const auto& done = state_[r].done;
    const auto first = std::find(done.begin(), done.end(), false);
    if (first == done.end()) continue;
    const OpRef stuck{static_cast<int>(r), first - done.begin()};
    out.deadlock.push_back(name(stuck) + " never finishes: " + why_blocked(stuck));
  }
}

std::string Checker::why_not_started(OpRef r) const {
  const RankState& s = state_[r.rank];
  const std::vector<int64_t>& stream = s.streams.at(comm_key(op(r)));
  const size_t pos = s.head.count(comm_key(op(r))) ? s.head.at(comm_key(op(r))) : 0;
  if (pos < stream.size() && stream[pos] != r.op && op({r.rank, stream[pos]}).batch != op(r).batch) {
    return "queued behind " + name({r.rank, stream[pos]});
  }
  const auto& waits = t_[r.rank].waits;
  if (op(r).waits_before > s.waits_done) return "its host first waits on " + name({r.rank, waits[s.waits_done]});
  return "not started";
}

std::string Checker::why_blocked(OpRef r) const {
  if (!state_[r.rank].started[r.op]) return why_not_started(r);
  if (state_[r.rank].complete[r.op]) return "in a batch whose other ops wait";
  const TraceOp& o = op(r);
  if (is_point_to_point(o)) {
    const OpRef p = state_[r.rank].partner[r.op];
    if (p.rank < 0) return "it has no matching op";
    return "it waits for " + name(p) + ", " + why_not_started(p);
  }
  const int64_t c = state_[r.rank].collective[r.op];
  if (c < 0) return "not every member calls it";
  for (const OpRef& m : collectives_[c]) {
    if (!state_[m.rank].started[m.op]) return "it waits for " + name(m) + ", " + why_not_started(m);
  }
  return "not started";
}

}  // namespace

std::string OrderCheck::summary() const {
  std::string s;
  for (const std::string& m : mismatches) s += "mismatch: " + m + "\n";
  for (const std::string& d : deadlock) s += "deadlock: " + d + "\n";
  return s;
}

OrderCheck check_nccl_order(const std::vector<RankTrace>& ranks) {
  OrderCheck out;
  Checker checker(ranks);
  checker.match(out);
  checker.simulate(out);
  return out;
}

}  // namespace hetpar
