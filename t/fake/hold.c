/* SPDX-License-Identifier: MIT */
/* hold.c: cuda.bench's blocking kernel, cudalua_bench_block(flag, timed_out,
 * timeout_ns), as the fake runs it.
 *
 * On a GPU the kernel spins until the host writes *flag, and the work
 * queued behind it waits; a driver call that waits for the device while it
 * spins waits until the kernel gives up (timeout_ns, 30 s by default) and
 * reports that it timed out. The fake runs kernels at once, so it keeps the
 * spinning as state: from the launch until *flag != 0 the stream is held,
 * and a call that waits for the device meanwhile (fake_host_wait's callers:
 * synchronizes, frees, module loads and unloads, graph destroys, copies
 * into pageable memory) is a stall. A stall is counted and named
 * (fakecuda.stalls()), the kernel's timed_out word is set, and the hold
 * ends, as on a GPU after the timeout: cudalua then sees what a GPU shows,
 * at once instead of after 30 s. */
#include "fake.h"

static volatile int *held_flag, *held_timed_out;
static long stall_count;
static const char *last_stall;

void fake_hold_launched(volatile int *flag, volatile int *timed_out)
{
  held_flag = flag;
  held_timed_out = timed_out;
}

void fake_hold_wait(void)
{
  if (!held_flag)
    return;
  if (*held_flag == 0) {
    stall_count++;
    last_stall = fake_current_call;
    if (held_timed_out)
      *held_timed_out = 1;
  }
  held_flag = held_timed_out = NULL;
}

long fake_hold_stalls(const char **last)
{
  *last = last_stall;
  return stall_count;
}
