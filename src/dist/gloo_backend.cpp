#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>

#include "dist/backend_factory.hpp"

namespace hetpar {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& master_addr) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // A single-machine job talks over loopback: resolving the hostname can pick
  // an interface the sandbox does not route. GLOO_SOCKET_IFNAME wins, as usual.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (master_addr == "127.0.0.1" || master_addr == "localhost") {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

bool reduce_scatter_copies_input(const std::string& backend) { return backend == "gloo"; }

}  // namespace hetpar
