#include "common/stack_dump.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

namespace ufp4 {

namespace {

void dump_stack(int) {
  static const char head[] = "=== ufp4: stack of the thread that took SIGUSR1\n";
  (void)!::write(2, head, sizeof head - 1);
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, 2);
}

}  // namespace

void install_stack_dump_handler() {
  void* warm[1];
  (void)::backtrace(warm, 1);  // loads the unwinder now: its first use allocates, which a signal handler must not
  struct sigaction sa {};
  sa.sa_handler = dump_stack;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
}

}  // namespace ufp4
