// Every collective of hetpar's Group interface on 2, 3 and 4 real Gloo ranks,
// on the world and on sub-groups, against values computed locally.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include "dist/backend_factory.hpp"
#include "metrics/cpu_tensor_memory.hpp"
#include "tests/dist_harness.hpp"

namespace hetpar::test {
namespace {

// Sub-groups every rank creates: evens, odds, and all ranks but the last.
std::vector<GroupSpec> sub_group_specs(int world) {
  std::vector<GroupSpec> specs(3);
  specs[0].name = "evens";
  specs[1].name = "odds";
  specs[2].name = "prefix";
  for (int r = 0; r < world; ++r) {
    specs[r % 2].ranks.push_back(r);
    if (r + 1 < world) specs[2].ranks.push_back(r);
  }
  if (specs[1].ranks.empty()) specs.erase(specs.begin() + 1);
  return specs;
}

// The world plus each sub-group this rank is in.
std::vector<Group*> my_groups(Runtime& rt) {
  rt.create_groups(sub_group_specs(rt.world_size()));
  std::vector<Group*> groups{&rt.world()};
  for (const auto& spec : sub_group_specs(rt.world_size())) {
    if (std::find(spec.ranks.begin(), spec.ranks.end(), rt.rank()) != spec.ranks.end()) {
      groups.push_back(&rt.group(spec.ranks));
    }
  }
  return groups;
}

double rank_sum(const Group& g) { return std::accumulate(g.ranks().begin(), g.ranks().end(), 0.0); }

HETPAR_WORKER(all_reduce) {
  for (Group* g : my_groups(rt)) {
    at::Tensor t = at::arange(4, at::kDouble) + rt.rank();
    g->all_reduce(t);
    for (int i = 0; i < 4; ++i) {
      const double want = rank_sum(*g) + i * g->size();
      require(t[i].item<double>() == want, "{} sum[{}] = {}, want {}", g->name(), i, t[i].item<double>(), want);
    }
    at::Tensor mx = at::full({2}, rt.rank(), at::kFloat), mn = mx.clone();
    g->all_reduce(mx, ReduceOp::kMax);
    g->all_reduce(mn, ReduceOp::kMin);
    require(mx[1].item<float>() == g->ranks().back(), "{} max", g->name());
    require(mn[1].item<float>() == g->ranks().front(), "{} min", g->name());
  }
}

HETPAR_WORKER(all_gather) {
  for (Group* g : my_groups(rt)) {
    at::Tensor mine = at::arange(6, at::kFloat).reshape({2, 3}) + 10 * rt.rank();
    at::Tensor all = g->all_gather(mine);
    require(all.sizes() == at::IntArrayRef({2 * g->size(), 3}), "{} shape", g->name());
    for (int m = 0; m < g->size(); ++m) {
      at::Tensor want = at::arange(6, at::kFloat).reshape({2, 3}) + 10 * g->ranks()[m];
      require(at::equal(all.narrow(0, 2 * m, 2), want), "{} slot {}", g->name(), m);
    }
  }
}

HETPAR_WORKER(reduce_scatter) {
  for (Group* g : my_groups(rt)) {
    const int n = g->size();
    auto input_of = [&](int job_rank) {
      return at::arange(2 * n * 3, at::kDouble).reshape({2 * n, 3}) * (job_rank + 1);
    };
    at::Tensor out = g->reduce_scatter(input_of(rt.rank()));
    at::Tensor sum = at::zeros({2 * n, 3}, at::kDouble);
    for (int r : g->ranks()) sum += input_of(r);
    require(at::equal(out, sum.narrow(0, 2 * g->rank(), 2)), "{} my slice", g->name());
  }
}

// The memory model counts a copy of a reduce-scatter's input on Gloo
// (dist/backend_factory.hpp); this is where that fact is checked, against
// the tensors alive at the call's peak.
HETPAR_WORKER(reduce_scatter_input_copy) {
  require(install_cpu_tensor_counter(), "the tensor counter could not be installed");
  const at::Tensor input = at::ones({1 << 18}, at::kFloat);  // 1 MiB
  const size_t before = cpu_tensor_bytes_in_use();
  reset_cpu_tensor_peak();
  const at::Tensor out = rt.world().reduce_scatter(input);
  const size_t beyond = cpu_tensor_peak_bytes() - before - out.nbytes();
  const bool copied = beyond >= input.nbytes();
  require(copied == reduce_scatter_copies_input("gloo"), "{} bytes beyond the output at the peak; input {}", beyond,
          input.nbytes());
}

// Member i sends rows(i, j) rows to member j, each row (i, j, k); zeros included.
void check_all_to_all_v(Group& g, const std::function<int64_t(int, int)>& rows) {
  const int n = g.size(), me = g.rank();
  std::vector<int64_t> send(n), recv(n);
  std::vector<at::Tensor> parts;
  for (int j = 0; j < n; ++j) {
    send[j] = rows(me, j);
    recv[j] = rows(j, me);
    at::Tensor k = at::arange(send[j], at::kLong).unsqueeze(1);
    parts.push_back(at::cat({at::full({send[j], 1}, me, at::kLong), at::full({send[j], 1}, j, at::kLong), k}, 1));
  }
  at::Tensor got = g.all_to_all_v(at::cat(parts), send, recv);
  int64_t row = 0;
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < recv[j]; ++k, ++row) {
      const bool ok = got[row][0].item<int64_t>() == j && got[row][1].item<int64_t>() == me &&
                      got[row][2].item<int64_t>() == k;
      require(ok, "{}: row {} should be ({}, {}, {})", g.name(), row, j, me, k);
    }
  }
  require(row == got.size(0), "{}: {} rows received, want {}", g.name(), got.size(0), row);
}

HETPAR_WORKER(all_to_all_v_uneven) {
  for (Group* g : my_groups(rt)) {
    check_all_to_all_v(*g, [](int i, int j) { return static_cast<int64_t>((3 * i + 2 * j) % 4); });
  }
}

// The last member receives nothing at all, and member 0 sends nothing.
HETPAR_WORKER(all_to_all_v_empty_receiver) {
  for (Group* g : my_groups(rt)) {
    const int last = g->size() - 1;
    check_all_to_all_v(*g, [last](int i, int j) { return (j == last || i == 0) ? int64_t{0} : int64_t{i + j}; });
  }
}

HETPAR_WORKER(broadcast) {
  for (Group* g : my_groups(rt)) {
    for (int root = 0; root < g->size(); ++root) {
      at::Tensor t = g->rank() == root ? at::arange(5, at::kFloat) * (root + 7) : at::zeros({5}, at::kFloat);
      g->broadcast(t, root);
      require(at::equal(t, at::arange(5, at::kFloat) * (root + 7)), "{} root {}", g->name(), root);
    }
  }
}

// A ring: every member sends to the next and receives from the previous, with
// even members sending first so the ring cannot deadlock; two tags per hop.
HETPAR_WORKER(send_recv) {
  for (Group* g : my_groups(rt)) {
    const int n = g->size(), me = g->rank();
    if (n == 1) continue;
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    at::Tensor a = at::full({3}, 100 * me + 1, at::kLong), b = at::full({2, 2}, 100 * me + 2, at::kLong);
    at::Tensor ra = at::empty({3}, at::kLong), rb = at::empty({2, 2}, at::kLong);
    auto do_send = [&] { g->send(a, next, 1); g->send(b, next, 2); };
    auto do_recv = [&] { g->recv(ra, prev, 1); g->recv(rb, prev, 2); };
    if (me % 2 == 0) { do_send(); do_recv(); } else { do_recv(); do_send(); }
    require(at::equal(ra, at::full({3}, 100 * prev + 1, at::kLong)), "{} tag 1", g->name());
    require(at::equal(rb, at::full({2, 2}, 100 * prev + 2, at::kLong)), "{} tag 2", g->name());
  }
}

// Rank 0 arrives late; nobody may leave the barrier before it arrives.
HETPAR_WORKER(barrier) {
  using namespace std::chrono;
  const auto start = steady_clock::now();
  if (rt.rank() == 0) std::this_thread::sleep_for(milliseconds(400));
  rt.world().barrier();
  const auto waited = duration_cast<milliseconds>(steady_clock::now() - start).count();
  require(waited >= 350, "left the barrier after {} ms, before rank 0 arrived", waited);
}

class Collectives : public ::testing::TestWithParam<int> {};

#define COLLECTIVE_TEST(name) \
  TEST_P(Collectives, name) { EXPECT_TRUE(all_ranks_succeeded(run_workers(#name, GetParam()))); }

COLLECTIVE_TEST(all_reduce)
COLLECTIVE_TEST(all_gather)
COLLECTIVE_TEST(reduce_scatter)
COLLECTIVE_TEST(all_to_all_v_uneven)
COLLECTIVE_TEST(all_to_all_v_empty_receiver)
COLLECTIVE_TEST(broadcast)
COLLECTIVE_TEST(send_recv)
COLLECTIVE_TEST(barrier)

TEST(GlooReduceScatter, CopiesItsInputAsTheMemoryModelSays) {
  EXPECT_TRUE(all_ranks_succeeded(run_workers("reduce_scatter_input_copy", 2)));
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace hetpar::test
