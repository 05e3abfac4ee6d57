/* SPDX-License-Identifier: MIT */
/* cuda.c: luaopen_cuda and the module functions that belong to no type.
 *
 * Each type registers itself from its own file (cl_open_*); the shared
 * helpers they use live in handle.c, dtype.c and file.c, never here. */
#include <time.h>

#include "cl.h"
#include "nvml.h"

/* cuda.clock(): seconds on a monotonic clock, for host-side timing. */
static int cuda_clock(lua_State *L)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

int luaopen_cuda(lua_State *L)
{
  cl_open_gc_hold(L);
  lua_newtable(L);
  lua_pushcfunction(L, cuda_clock);
  lua_setfield(L, -2, "clock");
  lua_pushliteral(L, PACKAGE_VERSION);
  lua_setfield(L, -2, "version");
  cl_open_driver(L);
  cl_open_lifetimes(L);
  cl_open_device(L);
  cl_open_stream(L);
  cl_open_dtype(L);
  cl_open_memory(L);
  cl_open_buffer(L);
  cl_open_view(L);
  cl_open_view_math(L);
  cl_open_copy(L);
  cl_open_copy_batch(L);
  cl_open_program(L);
  cl_open_module(L);
  cl_open_cache(L);
  cl_open_linker(L);
  cl_open_launch(L);
  cl_open_graph(L);
  cl_open_hostfunc(L);
  cl_open_term(L);
  cl_open_ipc(L);
  cl_open_graph_builder(L);
  cl_open_graph_def(L);
  cl_open_graph_memory(L);
  cl_open_context(L);
  cl_open_nvtx(L);
  cl_open_affinity(L);
  cl_open_array(L);
  cl_open_texture(L);
  cl_open_vmm(L);
  cl_open_tensormap(L);
  cl_open_nvml(L);
  cl_open_foreign(L);
  cl_open_dlpack(L);
  cl_open_host_register(L);
  cl_open_hold(L);
  return 1;
}
