#include "common/stack_dump.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <initializer_list>

namespace ufp4 {

namespace {

void dump_stack(int) {
  static const char head[] = "=== ufp4: stack of the thread that took SIGUSR1\n";
  (void)!::write(2, head, sizeof head - 1);
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, 2);
}

volatile sig_atomic_t g_fatal = 0;

// The stack walk below takes the dynamic loader's lock: if the crash came while another thread held it,
// the walk would wait for ever. After 10 s the alarm ends the process with the crash's own signal.
void give_up_on_the_stack(int) {
  ::signal(g_fatal, SIG_DFL);
  ::raise(g_fatal);
}

// A fatal signal (a crash): its number and the stack of the thread that took it, then the signal's default
// action (SA_RESETHAND), so the process still dies by it and its parent sees that. It runs on an alternate
// stack of the main thread's, so that a stack overflow is reported too.
void dump_stack_and_die(int sig) {
  g_fatal = sig;
  ::signal(SIGALRM, give_up_on_the_stack);
  ::alarm(10);
  static const char head[] = "=== ufp4: fatal signal ";
  (void)!::write(2, head, sizeof head - 1);
  char num[4] = {static_cast<char>('0' + sig / 10 % 10), static_cast<char>('0' + sig % 10), '\n', 0};
  (void)!::write(2, sig >= 10 ? num : num + 1, sig >= 10 ? 3 : 2);
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, 2);
  ::raise(sig);
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
  static char alternate[64 * 1024];  // the main thread's stack for the handler (static: no allocation)
  stack_t ss {};
  ss.ss_sp = alternate;
  ss.ss_size = sizeof alternate;
  ::sigaltstack(&ss, nullptr);
  struct sigaction fatal {};
  fatal.sa_handler = dump_stack_and_die;
  sigemptyset(&fatal.sa_mask);
  fatal.sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::sigaction(sig, &fatal, nullptr);
}

}  // namespace ufp4
