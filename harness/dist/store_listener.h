// The rendezvous store's address, waited for before a rank connects to it. LibTorch 1.13's TCPStore
// client meets a refused connection (rank 0 has not opened the store yet) with a sleep of a whole
// second before it tries again: every rank that started beside rank 0 and got there first paid it, ~1 s
// a launch. Waiting here in steps of 10 ms, the client then connects at its first try. No LibTorch here.
#pragma once
#include <chrono>
#include <string>

namespace ufp4 {

// Returns once something accepts a TCP connection at host:port (the probe is closed at once, before
// any message), or as soon as an attempt fails otherwise than by a refusal (a host that cannot be
// resolved or reached: the store's client meets it next and reports it, as before). Throws
// std::runtime_error when the port still refuses after `limit`.
void wait_for_listener(const std::string& host, int port, std::chrono::milliseconds limit);

}  // namespace ufp4
