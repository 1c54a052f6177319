#pragma once

namespace ufp4 {

// On SIGUSR1 the thread that receives it writes its own call stack to stderr (one frame a line, as
// glibc's backtrace_symbols_fd prints it). The run scheduler sends it to a stalled run's main thread:
// where that thread waits (in the CUDA driver, in our code) says which side hangs, on nodes without gdb.
// A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL) writes "=== ufp4: fatal signal N" and the crashing thread's
// stack to stderr, then dies of the signal as it would have: a crash in a run's log says where.
void install_stack_dump_handler();

}  // namespace ufp4
