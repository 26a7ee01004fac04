// The rendezvous store's listening socket, bound by hetpar itself so that it
// listens only where it should: 127.0.0.1 for a local job, MASTER_ADDR's
// address for a multi-node one, never every interface (the store is
// unauthenticated). The c10d TCPStore takes the bound socket over.
#pragma once

#include <cstdint>
#include <string>

namespace hetpar {

struct ListenSocket {
  int fd = -1;
  std::string address;  // numeric, as bound
  std::uint16_t port = 0;
};

// Binds a TCP socket to `host` (a name or a numeric address; it must be one
// of this machine's) and `port` (0: any free one) and listens on it.
// Throws std::runtime_error naming host and port when it cannot.
ListenSocket listen_on(const std::string& host, std::uint16_t port);

}  // namespace hetpar
