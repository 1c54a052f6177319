#include "harness/dist/store_listener.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <stdexcept>
#include <thread>

namespace ufp4 {

namespace {

enum class Probe { kAccepted, kRefused, kOther };

// One connection attempt to `a`, a second at most, closed at once.
Probe probe(const addrinfo& a) {
  const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.ai_protocol);
  if (fd < 0) return Probe::kOther;
  int err = ::connect(fd, a.ai_addr, a.ai_addrlen) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    socklen_t len = sizeof err;
    if (::poll(&p, 1, 1000) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = ETIMEDOUT;
  }
  ::close(fd);
  return err == 0 ? Probe::kAccepted : err == ECONNREFUSED ? Probe::kRefused : Probe::kOther;
}

}  // namespace

void wait_for_listener(const std::string& host, int port, std::chrono::milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return;
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    bool refused = false;
    for (const addrinfo* a = addresses.get(); a; a = a->ai_next) {
      const Probe p = probe(*a);
      if (p == Probe::kAccepted) return;
      refused = refused || p == Probe::kRefused;
    }
    if (!refused) return;  // not a store that has yet to open: the client's own attempt says what it is
    if (std::chrono::steady_clock::now() >= deadline)
      throw std::runtime_error("nothing listens at " + host + ":" + std::to_string(port) + " after " + std::to_string(limit.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace ufp4
