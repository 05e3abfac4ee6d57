/* SPDX-License-Identifier: MIT */
/* toolkit.h: the CUDA toolkit libraries cudalua uses, opened at run time.
 *
 * Like the driver (driver.h), NVRTC and nvJitLink are never linked:
 * toolkit.c dlopen()s each on first use and fills a table of entry points
 * typed from the toolkit's own headers. So cudalua starts, and runs cached
 * or precompiled code, on a machine that has only the driver; compiling or
 * linking there raises one sentence naming the missing library.
 *
 * Where each library is looked for, first match wins:
 *     CUDALUA_NVRTC / CUDALUA_NVJITLINK   a path; when set, the only one
 *     the toolkit that configure found    (--with-cuda)
 *     libnvrtc.so.13, libnvrtc.so         (libnvJitLink.so.13, ...) */
#ifndef CUDALUA_TOOLKIT_H
#define CUDALUA_TOOLKIT_H

#include <lua.h>
#include <nvJitLink.h>
#include <nvrtc.h>

#define CL_NVRTC_API(X)                                                     \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram)              \
  X(nvrtcDestroyProgram) X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize)   \
  X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)               \
  X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetLTOIRSize) X(nvrtcGetLTOIR)   \
  X(nvrtcAddNameExpression) X(nvrtcGetLoweredName)                          \
  X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs)

#define CL_NVJITLINK_API(X)                                                 \
  X(nvJitLinkVersion) X(nvJitLinkCreate) X(nvJitLinkDestroy)                \
  X(nvJitLinkAddData) X(nvJitLinkComplete) X(nvJitLinkGetLinkedCubinSize)   \
  X(nvJitLinkGetLinkedCubin) X(nvJitLinkGetLinkedPtxSize)                   \
  X(nvJitLinkGetLinkedPtx) X(nvJitLinkGetErrorLogSize)                      \
  X(nvJitLinkGetErrorLog) X(nvJitLinkGetInfoLogSize) X(nvJitLinkGetInfoLog)

#define CL_TOOLKIT_FIELD(name) __typeof__(name) *p_##name;
struct cl_NvrtcAPI { CL_NVRTC_API(CL_TOOLKIT_FIELD) };
struct cl_NvJitLinkAPI { CL_NVJITLINK_API(CL_TOOLKIT_FIELD) };
extern struct cl_NvrtcAPI cl_nvrtc;
extern struct cl_NvJitLinkAPI cl_nvjitlink;

typedef enum { CL_LIB_NVRTC, CL_LIB_NVJITLINK, CL_NLIBS } cl_ToolkitLib;

/* Open the library once per process; 1 when its table is filled, else 0
 * with the one-sentence reason in why. */
int cl_toolkit_try_load(cl_ToolkitLib lib, char *why, size_t size);
/* The same, raising a cuda.Error (unavailable = true) that says which
 * library is missing and what needed it ("compiling", "linking"). */
void cl_toolkit_load(lua_State *L, cl_ToolkitLib lib);

#define CL_NVRTC(name) (cl_nvrtc.p_##name)
#define CL_NVJITLINK(name) (cl_nvjitlink.p_##name)

#endif
