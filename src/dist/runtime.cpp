#include "dist/runtime.hpp"

#include <csignal>

#include <ATen/Parallel.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <functional>

#include "dist/backend_factory.hpp"
#include "dist/listen_socket.hpp"
#include "util/log.hpp"

namespace hetpar {
namespace {

// "auto" follows the rank's device: NCCL for CUDA tensors, Gloo for host ones.
std::string resolve_backend(const std::string& requested, const at::Device& device) {
  if (requested == "auto") return device.is_cuda() ? "nccl" : "gloo";
  if (requested != "gloo" && requested != "nccl") {
    throw std::runtime_error("unknown runtime.backend \"" + requested + "\"");
  }
  if (requested == "nccl" && !device.is_cuda()) {
    throw std::runtime_error("runtime.backend = \"nccl\" needs the rank's CUDA device (select_device) first");
  }
  return requested;
}

std::vector<int> iota_ranks(int n) {
  std::vector<int> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

}  // namespace

Runtime::Runtime(const LaunchEnv& env, const RuntimeOptions& options)
    : env_(env), options_(options), backend_(resolve_backend(options.backend, options.device)) {
  // A write to a lost peer's socket must fail as an error (a collective
  // failure the rank reports), not kill the rank with SIGPIPE and hide the culprit.
  std::signal(SIGPIPE, SIG_IGN);
  at::set_num_threads(options.intra_op_threads);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = !env.agent_store && env.rank == 0;
  store_options.numWorkers = env.world_size;
  store_options.waitWorkers = false;
  store_options.timeout = options.timeout;
  try {
    // Rank 0 hosting the store binds it where MASTER_ADDR says, not on every interface.
    if (store_options.isServer) {
      const ListenSocket listener = listen_on(env.master_addr, static_cast<std::uint16_t>(env.master_port));
      store_options.masterListenFd = listener.fd;
      log_info("rendezvous store on {}:{}", listener.address, listener.port);
    }
    store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format(
        "rendezvous with the store at {}:{} failed: {} (is {} running and listening there?)", env.master_addr,
        env.master_port, error_message(e), env.agent_store ? "the launcher's agent" : "rank 0"));
  }
  // Namespaced so a torchrun agent store shared by restarts stays clean.
  store_ = c10::make_intrusive<c10d::PrefixStore>("hetpar", store_);
  const GroupSpec world{"world", iota_ranks(env.world_size)};
  world_backend_ = new_backend(world, "group0");
  world_ = std::make_unique<Group>(world.name, world.ranks, env.rank, world_backend_, options.timeout);
  known_[world_->ranks()] = 0;
}

Runtime::~Runtime() {
  if (backend_ != "nccl") return;  // Gloo's destructors need no agreed order
  for (const auto& b : backends_) {
    try {
      b->shutdown();
    } catch (const std::exception& e) {
      log_error("shutting down a {} communicator failed: {}", backend_, error_message(e));
    }
  }
}

bool Runtime::splits_from_world() const { return backend_ == "nccl" && options_.nccl_split && world_backend_; }

c10::intrusive_ptr<c10d::Backend> Runtime::new_backend(const GroupSpec& spec, const std::string& store_prefix) {
  const auto it = std::find(spec.ranks.begin(), spec.ranks.end(), env_.rank);
  const bool member = it != spec.ranks.end();
  const int size = static_cast<int>(spec.ranks.size());
  if (size == 1 || (!member && !splits_from_world())) return nullptr;
  auto store = c10::make_intrusive<c10d::PrefixStore>(store_prefix, store_);
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    if (splits_from_world()) {
      backend = split_nccl_backend(world_backend_, store, spec.ranks, options_.timeout);
    } else {
      const int rank_in_group = static_cast<int>(it - spec.ranks.begin());
      backend = backend_ == "nccl"
                    ? make_nccl_backend(store, spec.ranks, rank_in_group, options_.timeout, options_.device)
                    : make_gloo_backend(store, rank_in_group, size, options_.timeout, env_.master_addr);
    }
  } catch (const std::exception& e) {
    throw CollectiveError(fmt::format("creating {} group {} over ranks [{}] failed: {} (a rank that never "
                                      "joined within runtime.timeout_s: were all {} ranks started?)",
                                      backend_, spec.name, fmt::join(spec.ranks, ","), error_message(e),
                                      env_.world_size));
  }
  if (backend) backends_.push_back(backend);
  return backend;
}

void Runtime::check_same_list_everywhere(const std::vector<GroupSpec>& specs) {
  std::string text;
  for (const auto& s : specs) text += fmt::format("{}:[{}];", s.name, fmt::join(s.ranks, ","));
  const std::string key = fmt::format("create_groups/{}", create_calls_++);
  if (env_.rank == 0) {
    store_->set(key, std::vector<uint8_t>(text.begin(), text.end()));
    return;
  }
  std::vector<uint8_t> got;
  try {
    got = store_->get(key);
  } catch (const std::exception& e) {
    throw CollectiveError(fmt::format("waiting for rank 0's group list failed: {}", error_message(e)));
  }
  if (std::string(got.begin(), got.end()) != text) {
    throw std::logic_error(fmt::format(
        "rank {} was asked to create other groups than rank 0 (call {}); every rank must create "
        "the same groups in the same order", env_.rank, create_calls_ - 1));
  }
}

void Runtime::create_groups(const std::vector<GroupSpec>& specs) {
  for (const auto& s : specs) {
    if (s.ranks.empty() || !std::is_sorted(s.ranks.begin(), s.ranks.end()) ||
        std::adjacent_find(s.ranks.begin(), s.ranks.end()) != s.ranks.end() ||
        s.ranks.front() < 0 || s.ranks.back() >= env_.world_size) {
      throw std::logic_error(fmt::format("group {} has bad ranks [{}] for world size {}", s.name,
                                         fmt::join(s.ranks, ","), env_.world_size));
    }
  }
  check_same_list_everywhere(specs);
  for (const auto& s : specs) {
    if (known_.count(s.ranks)) continue;
    const int index = static_cast<int>(known_.size());
    known_[s.ranks] = index;
    auto backend = new_backend(s, fmt::format("group{}", index));
    if (std::binary_search(s.ranks.begin(), s.ranks.end(), env_.rank)) {
      groups_[s.ranks] = std::make_unique<Group>(s.name, s.ranks, env_.rank, backend, options_.timeout);
    }
  }
}

Group& Runtime::create_separate_group(const GroupSpec& spec) {
  if (!std::binary_search(spec.ranks.begin(), spec.ranks.end(), env_.rank)) {
    throw std::logic_error(fmt::format("rank {} is not in group {}", env_.rank, spec.name));
  }
  auto backend = new_backend(spec, fmt::format("separate{}", separate_.size()));
  separate_.push_back(std::make_unique<Group>(spec.name, spec.ranks, env_.rank, backend, options_.timeout));
  return *separate_.back();
}

Group& Runtime::group(const std::vector<int>& ranks) {
  if (ranks == world_->ranks()) return *world_;
  const auto it = groups_.find(ranks);
  if (it == groups_.end()) {
    throw std::logic_error(fmt::format("rank {} has no group over ranks [{}]", env_.rank,
                                       fmt::join(ranks, ",")));
  }
  return *it->second;
}

}  // namespace hetpar
