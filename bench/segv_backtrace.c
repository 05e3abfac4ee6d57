/* SPDX-License-Identifier: MIT */
/* segv_backtrace.c: preloaded into a process (LD_PRELOAD), it writes a
 * backtrace to stderr when the process takes SIGSEGV, SIGBUS or SIGABRT,
 * then dies of the signal as it would have. bench/gpu_job.sh builds it on
 * the GPU machine for the real-GPU fuzzer: a crash inside the driver then
 * names the driver entry point and the cudalua function that called it
 * (addr2line turns the "(+0x...)" offsets into lines).
 *
 * SIGTERM (what timeout(1) sends) writes the main thread's backtrace
 * too: a run that hangs then says which call it hangs in. The kernel may
 * hand that signal to any thread (the driver's own among them), so a
 * thread other than the main one passes it on to the main one.
 *
 *   cc -shared -fPIC -O1 -pthread -o segv_backtrace.so bench/segv_backtrace.c */
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static pthread_t main_thread;

static void on_fatal(int sig)
{
  static const char head[] = "segv_backtrace: fatal signal, backtrace:\n";
  if (sig == SIGTERM && !pthread_equal(pthread_self(), main_thread)) {
    pthread_kill(main_thread, sig);
    return;
  }
  void *frames[64];
  int n = backtrace(frames, 64);
  if (write(STDERR_FILENO, head, sizeof head - 1) < 0)
    _exit(128 + sig);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);         /* die of it, so the exit status tells which */
  raise(sig);
}

/* On an alternate stack: a stack overflow is a SIGSEGV too. */
__attribute__((constructor)) static void install(void)
{
  static char stack[1 << 16];
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = stack;
  ss.ss_size = sizeof stack;
  sigaltstack(&ss, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
  main_thread = pthread_self();
  sa.sa_flags = SA_ONSTACK;     /* kept: it may first reach another thread */
  sigaction(SIGTERM, &sa, NULL);
}
