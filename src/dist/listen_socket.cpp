#include "dist/listen_socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace hetpar {
namespace {

std::string numeric_address(const sockaddr* addr, socklen_t len, std::uint16_t& port) {
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(addr, len, host, sizeof host, service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  port = static_cast<std::uint16_t>(std::stoi(service));
  return host;
}

}  // namespace

ListenSocket listen_on(const std::string& host, std::uint16_t port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    throw std::runtime_error("cannot resolve " + host + " to listen on: " + gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      ListenSocket s;
      s.fd = fd;
      s.address = numeric_address(reinterpret_cast<sockaddr*>(&bound), len, s.port);
      freeaddrinfo(found);
      return s;
    }
    last_error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  throw std::runtime_error("cannot listen on " + where + ": " + last_error);
}

}  // namespace hetpar
