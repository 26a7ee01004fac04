// The distributed runtime of one rank: the job's store, the world group and
// every sub-group, created eagerly and in one agreed order on every rank.
#pragma once

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/group.hpp"
#include "dist/launch_env.hpp"

namespace hetpar {

struct RuntimeOptions {
  std::string backend = "auto";  // "auto" (nccl on a CUDA device, else gloo) | "gloo" | "nccl"
  // NCCL: the GPU this rank's communicators are bound to (dist/device.hpp
  // made it current); every group connects eagerly, in the global order.
  at::Device device{at::kCPU};
  std::chrono::milliseconds timeout{60'000};
  int intra_op_threads = 1;
  // NCCL: every sub-group split from the world communicator (one collective
  // over the world's, no fresh rendezvous) instead of initialised on its own.
  bool nccl_split = true;
};

struct GroupSpec {
  std::string name;        // for messages, e.g. "llm.tp"
  std::vector<int> ranks;  // job ranks, ascending
};

class Runtime {
 public:
  // Rendezvous through the job's TCPStore and creates the world group.
  Runtime(const LaunchEnv& env, const RuntimeOptions& options);
  // Shuts every communicator down, in the order they were created (the same
  // on every rank), before the store goes: NCCL aborts otherwise.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const std::string& backend() const { return backend_; }  // resolved: "gloo" or "nccl"
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  const at::Device& device() const { return options_.device; }
  Group& world() { return *world_; }

  // Every rank calls this with the same list in the same order (checked
  // through the store; a mismatch throws instead of deadlocking). Each rank
  // joins the groups it is in, in list order; a rank set already created is
  // reused. Lazy, per-rank group creation is how jobs deadlock.
  void create_groups(const std::vector<GroupSpec>& specs);
  // The group over exactly these ranks; throws if it was never created or
  // this rank is not in it.
  Group& group(const std::vector<int>& ranks);
  // A group with a communicator of its own even where another group has the
  // same ranks (the point-to-point links, dist/p2p_groups.hpp). Every rank of
  // the world calls it, in the same order; this rank must be a member.
  Group& create_separate_group(const GroupSpec& spec);

 private:
  void check_same_list_everywhere(const std::vector<GroupSpec>& specs);
  // The communicator of a new group; null where this rank is not in it or the
  // group has one rank. A split is collective over the world, so then every
  // rank calls it, members or not.
  c10::intrusive_ptr<c10d::Backend> new_backend(const GroupSpec& spec, const std::string& store_prefix);
  bool splits_from_world() const;

  LaunchEnv env_;
  RuntimeOptions options_;
  std::string backend_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<Group> world_;
  std::map<std::vector<int>, std::unique_ptr<Group>> groups_;  // groups this rank is in
  std::map<std::vector<int>, int> known_;                      // every rank set created
  std::vector<std::unique_ptr<Group>> separate_;                // create_separate_group's
  std::vector<c10::intrusive_ptr<c10d::Backend>> backends_;    // this rank's, in creation order
  c10::intrusive_ptr<c10d::Backend> world_backend_;           // null for a world of one rank
  int create_calls_ = 0;
};

}  // namespace hetpar
