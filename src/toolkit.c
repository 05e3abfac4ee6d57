/* SPDX-License-Identifier: MIT */
/* toolkit.c: NVRTC and nvJitLink, opened at run time (see toolkit.h).
 *
 * One description per library (what it is for, its override variable, the
 * file names to try, its entry points) and one loader for all of them: no
 * dlsym anywhere else. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl.h"
#include "toolkit.h"

#ifndef CUDALUA_CUDA_LIBDIR
#define CUDALUA_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

struct cl_NvrtcAPI cl_nvrtc;
struct cl_NvJitLinkAPI cl_nvjitlink;

typedef struct EntryPoint {
  const char *name;
  void **slot;
} EntryPoint;

#define NVRTC_ENTRY(name) {#name, (void **)&cl_nvrtc.p_##name},
#define NVJITLINK_ENTRY(name) {#name, (void **)&cl_nvjitlink.p_##name},
static const EntryPoint nvrtc_entries[] = {CL_NVRTC_API(NVRTC_ENTRY) {NULL, NULL}};
static const EntryPoint nvjitlink_entries[] = {CL_NVJITLINK_API(NVJITLINK_ENTRY) {NULL, NULL}};

typedef struct Library {
  const char *title;            /* "NVRTC, the CUDA runtime compiler" */
  const char *needed_for;       /* "compiling CUDA C++" */
  const char *env;              /* the override variable */
  const char *names[3];         /* in the toolkit directory, then as sonames */
  const EntryPoint *entries;
  enum { UNTRIED, LOADED, FAILED } state;
  char failure[768];
} Library;

static Library libraries[CL_NLIBS] = {
  {"NVRTC (the CUDA runtime compiler)", "compiling CUDA C++", "CUDALUA_NVRTC",
   {"libnvrtc.so.13", "libnvrtc.so", NULL}, nvrtc_entries, UNTRIED, ""},
  {"nvJitLink (the CUDA device linker)", "linking", "CUDALUA_NVJITLINK",
   {"libnvJitLink.so.13", "libnvJitLink.so", NULL}, nvjitlink_entries, UNTRIED, ""},
};

/* dlopen the override, else the toolkit's copy, else the sonames. */
static void *open_library(Library *lib, char *tried, size_t size)
{
  char path[4096];
  const char *env = getenv(lib->env);
  if (env && *env) {
    void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (!h)
      snprintf(tried, size, "%s", dlerror());
    return h;
  }
  for (int i = 0; lib->names[i]; i++) {
    snprintf(path, sizeof path, "%s/%s", CUDALUA_CUDA_LIBDIR, lib->names[i]);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h)
      return h;
  }
  for (int i = 0; lib->names[i]; i++) {
    void *h = dlopen(lib->names[i], RTLD_NOW | RTLD_LOCAL);
    if (h)
      return h;
    snprintf(tried, size, "%s", dlerror());
  }
  return NULL;
}

static int load(Library *lib)
{
  char tried[512] = "";
  void *h = open_library(lib, tried, sizeof tried);
  if (!h) {
    snprintf(lib->failure, sizeof lib->failure, "%s needs %s, which could not be opened "
             "(%s; set %s to its path)", lib->needed_for, lib->title, tried, lib->env);
    lib->state = FAILED;
    return 0;
  }
  for (const EntryPoint *e = lib->entries; e->name; e++) {
    *e->slot = dlsym(h, e->name);
    if (!*e->slot) {
      snprintf(lib->failure, sizeof lib->failure, "%s needs %s, but the library found has "
               "no %s (a CUDA 13 toolkit is needed)", lib->needed_for, lib->title, e->name);
      dlclose(h);
      lib->state = FAILED;
      return 0;
    }
  }
  lib->state = LOADED;
  return 1;
}

int cl_toolkit_try_load(cl_ToolkitLib which, char *why, size_t size)
{
  Library *lib = &libraries[which];
  if (lib->state == UNTRIED)
    load(lib);
  if (lib->state == LOADED)
    return 1;
  if (why)
    snprintf(why, size, "%s", lib->failure);
  return 0;
}

void cl_toolkit_load(lua_State *L, cl_ToolkitLib which)
{
  if (!cl_toolkit_try_load(which, NULL, 0))
    cl_raise_unavailable(L, "%s", libraries[which].failure);
}
