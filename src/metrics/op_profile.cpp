#include "metrics/op_profile.hpp"

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "util/durable_file.hpp"

namespace hetpar {
namespace {

namespace prof = torch::autograd::profiler;

// "torch::autograd::CppNode<hetpar::(anonymous namespace)::AllReduceFwd>" -> "backward of AllReduceFwd".
std::string readable(std::string name) {
  const std::string node = "torch::autograd::CppNode<";
  if (name.rfind(node, 0) == 0 && name.back() == '>') name = "backward of " + name.substr(node.size(), name.size() - node.size() - 1);
  for (const std::string noise : {"hetpar::", "(anonymous namespace)::"}) {
    for (size_t at; (at = name.find(noise)) != std::string::npos;) name.erase(at, noise.size());
  }
  return name;
}

struct OpTotals {
  int64_t calls = 0;
  double total_ns = 0, self_ns = 0;
};

// Self time: an operator's time minus that of the operators it called
// (events nest on a thread: a child starts and ends inside its parent).
std::map<std::string, OpTotals> totals_by_op(const std::vector<prof::KinetoEvent>& events) {
  std::map<uint64_t, std::vector<const prof::KinetoEvent*>> by_thread;
  for (const auto& e : events) {
    if (e.deviceType() == c10::DeviceType::CPU && !e.isAsync()) by_thread[e.startThreadId()].push_back(&e);
  }
  std::map<std::string, OpTotals> totals;
  for (auto& [thread, list] : by_thread) {
    std::sort(list.begin(), list.end(), [](const auto* a, const auto* b) {
      return a->startNs() != b->startNs() ? a->startNs() < b->startNs() : a->endNs() > b->endNs();
    });
    std::vector<std::pair<const prof::KinetoEvent*, double>> open;  // event, its children's time
    auto close = [&](size_t keep) {
      while (open.size() > keep) {
        const auto [e, children] = open.back();
        open.pop_back();
        OpTotals& t = totals[readable(e->name())];
        ++t.calls;
        t.total_ns += static_cast<double>(e->durationNs());
        t.self_ns += static_cast<double>(e->durationNs()) - children;
        if (!open.empty()) open.back().second += static_cast<double>(e->durationNs());
      }
    };
    for (const auto* e : list) {
      size_t keep = open.size();
      while (keep > 0 && open[keep - 1].first->endNs() <= e->startNs()) --keep;
      close(keep);
      open.emplace_back(e, 0.0);
    }
    close(0);
  }
  return totals;
}

// The GPU's own time: each kernel (and copy) by name, as the device ran it.
std::map<std::string, OpTotals> totals_by_kernel(const std::vector<prof::KinetoEvent>& events) {
  std::map<std::string, OpTotals> totals;
  for (const auto& e : events) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    OpTotals& t = totals[e.name()];
    ++t.calls;
    t.total_ns += static_cast<double>(e.durationNs());
    t.self_ns = t.total_ns;
  }
  return totals;
}

// Rows by self time, largest first, as a table; `head` gets its first `top` rows.
std::string table_of(const std::map<std::string, OpTotals>& totals, const char* what, int top, std::string& head) {
  std::vector<std::pair<std::string, OpTotals>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.self_ns > b.second.self_ns; });
  double all_self = 0;
  for (const auto& [name, t] : rows) all_self += t.self_ns;
  std::string table = fmt::format("{:<56} {:>7} {:>12} {:>7} {:>12}\n", what, "calls", "self ms", "self %", "total ms");
  head += table;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& [name, t] = rows[i];
    const std::string line = fmt::format("{:<56} {:>7} {:>12.3f} {:>6.1f}% {:>12.3f}\n", name.substr(0, 56), t.calls,
                                         t.self_ns / 1e6, all_self > 0 ? 100 * t.self_ns / all_self : 0.0,
                                         t.total_ns / 1e6);
    table += line;
    if (static_cast<int>(i) < top) head += line;
  }
  return table + fmt::format("{:<56} {:>7} {:>12.3f}\n", "(sum)", "", all_self / 1e6);
}

}  // namespace

OpProfile::OpProfile(bool gpu_kernels) : gpu_kernels_(gpu_kernels) {
  using torch::profiler::impl::ActivityType;
  const std::set<ActivityType> activities =
      gpu_kernels ? std::set<ActivityType>{ActivityType::CPU, ActivityType::CUDA} : std::set<ActivityType>{ActivityType::CPU};
  // Shapes and FLOPs in the trace: what a kernel was asked to do, beside how long it took.
  prof::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO, /*report_input_shapes=*/true,
                              /*profile_memory=*/false, /*with_stack=*/false, /*with_flops=*/true);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  active_ = true;
}

OpProfile::~OpProfile() {
  if (active_) prof::disableProfiler();
}

std::string OpProfile::finish(const std::string& path_prefix, int top) {
  active_ = false;
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  result->save(path_prefix + ".json");
  std::string head;
  std::string table = table_of(totals_by_op(result->events()), "operator (host)", top, head);
  if (gpu_kernels_) {
    head += "\n";
    table += "\n" + table_of(totals_by_kernel(result->events()), "GPU kernel", top, head);
  }
  write_file_atomic(path_prefix + ".txt", table);
  return head;
}

}  // namespace hetpar
