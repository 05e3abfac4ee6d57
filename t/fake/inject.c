/* SPDX-License-Identifier: MIT */
/* inject.c: call counting and failure injection.
 *
 * Every entry point counts its calls; a failure scheduled for the nth next
 * call of a name makes that call return the given CUresult instead of doing
 * anything. Schedules come from fakecuda.fail() in Lua, or from the
 * environment, FAKECUDA_FAIL=name:nth[:code][,...], for calls made before
 * any Lua code runs (cuInit at the driver's load). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

const char *const fake_kind_names[FAKE_NKINDS] = {
  "allocations", "streams", "events", "libraries", "graphs", "pools", "contexts",
  "arrays", "textures", "virtual", "host registrations", "graph_allocations"
};
long fake_live[FAKE_NKINDS];

/* FAKECUDA_EXIT_REPORT=1: the live objects left when the process exits,
 * after the Lua state closed and every finalizer ran (a destructor runs
 * after main returns), on stderr: "fakecuda at exit: pools=0 ...". A test
 * sees there what finalizers run in some order failed to release. */
__attribute__((destructor)) static void exit_report(void)
{
  if (!getenv("FAKECUDA_EXIT_REPORT"))
    return;
  fputs("fakecuda at exit:", stderr);
  for (int k = 0; k < FAKE_NKINDS; k++)
    fprintf(stderr, " %s=%ld", fake_kind_names[k], fake_live[k]);
  fputc('\n', stderr);
}

struct Counter {
  const char *name;
  long calls;
  long fail_at;        /* the call number that fails; 0 for none */
  CUresult code;
};

/* One counter per entry point, found by name: the entry table is the list. */
static struct Counter *counters;
static size_t ncounters;

static void make_counters(void)
{
  while (fake_entry_name(ncounters))
    ncounters++;
  counters = calloc(ncounters, sizeof *counters);
  for (size_t i = 0; counters && i < ncounters; i++)
    counters[i].name = fake_entry_name(i);
  fake_fail_from_env();
}

static struct Counter *counter(const char *name)
{
  if (!counters)
    make_counters();
  for (size_t i = 0; counters && i < ncounters; i++)
    if (strcmp(counters[i].name, name) == 0)
      return &counters[i];
  return NULL;
}

const char *fake_current_call;

CUresult fake_enter(const char *name)
{
  fake_current_call = name;
  struct Counter *c = counter(name);
  if (!c)
    return CUDA_SUCCESS;
  c->calls++;
  if (c->fail_at == 0 || c->calls != c->fail_at)
    return CUDA_SUCCESS;
  c->fail_at = 0;
  return c->code;
}

void fake_fail(const char *name, long nth, CUresult r)
{
  struct Counter *c = counter(name);
  if (c) {
    c->fail_at = c->calls + (nth > 0 ? nth : 1);
    c->code = r;
  }
}

void fake_reset(void)
{
  counter("");   /* makes the table */
  for (size_t i = 0; counters && i < ncounters; i++) {
    counters[i].calls = 0;
    counters[i].fail_at = 0;
  }
}

long fake_calls(const char *name)
{
  struct Counter *c = counter(name);
  return c ? c->calls : -1;
}

/* FAKECUDA_FAIL=cuInit:1:100,cuMemAllocFromPoolAsync:3 (code defaults to
 * CUDA_ERROR_OUT_OF_MEMORY) */
void fake_fail_from_env(void)
{
  const char *spec = getenv("FAKECUDA_FAIL");
  char name[128];
  long nth = 1, code = CUDA_ERROR_OUT_OF_MEMORY;
  int used = 0;
  while (spec && *spec) {
    nth = 1;
    code = CUDA_ERROR_OUT_OF_MEMORY;
    if (sscanf(spec, "%127[^:,]%n:%ld%n:%ld%n", name, &used, &nth, &used, &code, &used) < 1)
      return;
    fake_fail(name, nth, (CUresult)code);
    spec += used;
    spec += strcspn(spec, ",");
    if (*spec == ',')
      spec++;
  }
}

static void **kept;
static size_t nkept, capkept;

void fake_keep(void *object)
{
  if (nkept == capkept) {
    size_t cap = capkept ? 2 * capkept : 64;
    void **more = realloc(kept, cap * sizeof *more);
    if (!more)
      return;   /* only LeakSanitizer's view suffers */
    kept = more;
    capkept = cap;
  }
  kept[nkept++] = object;
}

void fake_unkeep(void *object)
{
  for (size_t i = 0; i < nkept; i++)
    if (kept[i] == object) {
      kept[i] = kept[--nkept];
      return;
    }
}
