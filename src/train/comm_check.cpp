#include "train/comm_check.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <numeric>

namespace hetpar {
namespace {

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("communication check failed: " + what);
}

int check_group(Group& g, int job_rank, int step) {
  at::Tensor t = at::full({3}, static_cast<double>(job_rank + step), at::kDouble);
  g.all_reduce(t);
  const double want = std::accumulate(g.ranks().begin(), g.ranks().end(), 0.0) +
                      static_cast<double>(step) * g.size();
  expect(t[0].item<double>() == want, fmt::format("{}: sum {} != {}", g.name(), t[0].item<double>(), want));
  at::Tensor gathered = g.all_gather(at::full({1}, job_rank, at::kLong));
  for (int i = 0; i < g.size(); ++i) {
    expect(gathered[i].item<int64_t>() == g.ranks()[i], fmt::format("{}: all_gather slot {}", g.name(), i));
  }
  return 2;
}

// Rank r sends (r + j + step) % 3 rows to rank j, each row holding (r, j).
int check_all_to_all(Group& world, int step) {
  const int n = world.size(), me = world.rank();
  auto rows = [&](int from, int to) { return static_cast<int64_t>((from + to + step) % 3); };
  std::vector<int64_t> send(n), recv(n);
  std::vector<at::Tensor> parts;
  for (int j = 0; j < n; ++j) {
    send[j] = rows(me, j);
    recv[j] = rows(j, me);
    parts.push_back(at::tensor({static_cast<int64_t>(me), static_cast<int64_t>(j)}).repeat({send[j], 1}));
  }
  at::Tensor got = world.all_to_all_v(at::cat(parts), send, recv);
  int64_t row = 0;
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < recv[j]; ++k, ++row) {
      expect(got[row][0].item<int64_t>() == j && got[row][1].item<int64_t>() == me,
             fmt::format("world all_to_all_v row {} from rank {}", row, j));
    }
  }
  return 1;
}

}  // namespace

int check_job_groups(Runtime& runtime, JobGroups& groups, int step) {
  int checks = check_all_to_all(runtime.world(), step);
  for (ModuleGroups* m : {&groups.encoder(), &groups.llm()}) {
    if (!m->active()) continue;
    checks += check_group(m->all(), runtime.rank(), step);
    for (GroupKind kind : kAllGroupKinds) checks += check_group(m->get(kind), runtime.rank(), step);
  }
  runtime.world().barrier();
  return checks;
}

}  // namespace hetpar
