/* SPDX-License-Identifier: MIT */
/* library.c: libraries, kernels and their functions, read from cubins.
 *
 * cuLibraryLoadData keeps a copy of the image. For an ELF cubin (what NVRTC
 * gives cudalua) a kernel exists when the image has its ".text.<name>"
 * section, and its parameters come from the KPARAM_INFO attributes of its
 * ".nv.info.<name>" section, as the real driver reads them. Any other image
 * (PTX, a fatbin without an uncompressed cubin) loads, but finds kernels by name only (PTX
 * lists its ".entry" names) and reports no
 * parameters (cuFuncGetParamInfo: CUDA_ERROR_NOT_SUPPORTED), so cudalua
 * cannot launch them. Launching runs a host emulation when the kernel's name
 * has one (kernels.c), and does nothing otherwise. */
#define _GNU_SOURCE   /* memmem */
#include <ctype.h>
#include <elf.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

struct CUlib_st {
  unsigned char *image;
  size_t size;
  int elf;
  struct CUkern_st *kernels;
};

struct CUfunc_st { struct CUkern_st *kernel; };

struct CUkern_st {
  struct CUkern_st *next;
  CUlibrary lib;
  char *name;
  struct CUfunc_st fn;
  int nparams;               /* -1: not known */
  size_t param_offset[FAKE_MAX_PARAMS], param_size[FAKE_MAX_PARAMS];
  int max_dynamic_shmem;
};

/* The image's size: ELF and fatbin headers say it; PTX ends at its NUL. */
static size_t image_size(const unsigned char *code, int *elf)
{
  const Elf64_Ehdr *eh = (const void *)code;
  *elf = memcmp(code, ELFMAG, SELFMAG) == 0 && code[EI_CLASS] == ELFCLASS64;
  if (*elf) {
    size_t sh = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
    size_t ph = eh->e_phoff + (size_t)eh->e_phnum * eh->e_phentsize;
    return sh > ph ? sh : ph;
  }
  uint32_t magic;
  memcpy(&magic, code, sizeof magic);
  if (magic == 0xBA55ED50u) {   /* fatbin: magic, version, header size, body size */
    uint16_t header;
    uint64_t body;
    memcpy(&header, code + 6, sizeof header);
    memcpy(&body, code + 8, sizeof body);
    return header + body;
  }
  return strlen((const char *)code) + 1;
}

/* The SM a cubin is for: e_flags bits 8-15 since ELF ABI version 8 (CUDA
 * 12.9), bits 0-7 before. The fake devices are all sm_90. */
static unsigned elf_arch(const unsigned char *image)
{
  const Elf64_Ehdr *eh = (const void *)image;
  return image[EI_ABIVERSION] >= 8 ? (eh->e_flags >> 8) & 0xff : eh->e_flags & 0xff;
}

/* A fatbin's first uncompressed cubin, which the fake loads in its place
 * (nvcc -fatbin -arch=sm_90 makes one); else the image itself. */
static const void *fatbin_cubin(const void *code, size_t *size, int *elf)
{
  const unsigned char *cubin = *elf ? NULL : memmem(code, *size, ELFMAG, SELFMAG);
  if (!cubin)
    return code;
  *size = image_size(cubin, elf);
  return cubin;
}

static const Elf64_Shdr *section(CUlibrary lib, const char *prefix, const char *name)
{
  const Elf64_Ehdr *eh = (const void *)lib->image;
  const Elf64_Shdr *sh = (const void *)(lib->image + eh->e_shoff);
  const char *names = (const char *)lib->image + sh[eh->e_shstrndx].sh_offset;
  size_t plen = strlen(prefix);
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    const char *n = names + sh[i].sh_name;
    if (strncmp(n, prefix, plen) == 0 && (!name || strcmp(n + plen, name) == 0))
      return &sh[i];
  }
  return NULL;
}

/* Kernel names of an ELF image, in section order: the i-th, or NULL. */
static const char *elf_kernel_name(CUlibrary lib, unsigned i)
{
  const Elf64_Ehdr *eh = (const void *)lib->image;
  const Elf64_Shdr *sh = (const void *)(lib->image + eh->e_shoff);
  const char *names = (const char *)lib->image + sh[eh->e_shstrndx].sh_offset;
  for (unsigned s = 0; s < eh->e_shnum; s++)
    if (strncmp(names + sh[s].sh_name, ".text.", 6) == 0 && i-- == 0)
      return names + sh[s].sh_name + 6;
  return NULL;
}

/* The i-th ".entry <name>" of a PTX image, copied into buf. */
static const char *ptx_kernel_name(CUlibrary lib, unsigned i, char *buf, size_t size)
{
  const char *end = (const char *)lib->image + lib->size;
  for (const char *p = (const char *)lib->image; p && p < end; p++) {
    p = memmem(p, (size_t)(end - p), ".entry", 6);
    if (!p)
      break;
    const char *name = p + 6;
    while (name < end && isspace((unsigned char)*name))
      name++;
    size_t n = 0;
    while (name + n < end && (name[n] == '_' || isalnum((unsigned char)name[n])))
      n++;
    if (n > 0 && n < size && i-- == 0) {
      memcpy(buf, name, n);
      buf[n] = '\0';
      return buf;
    }
  }
  return NULL;
}

/* The i-th kernel's name: from the ELF sections or the PTX entries. */
static const char *kernel_name(CUlibrary lib, unsigned i, char *buf, size_t size)
{
  return lib->elf ? elf_kernel_name(lib, i) : ptx_kernel_name(lib, i, buf, size);
}

#define EIATTR_KPARAM_INFO 0x17
#define EIFMT_SVAL 4

/* .nv.info attributes: format byte, attribute byte, then 2 bytes of value,
 * or for EIFMT_SVAL a 2-byte size and that many bytes. KPARAM_INFO's value:
 * u32 index, u16 ordinal, u16 offset, u32 whose bits 18.. are the size. */
static void read_params(struct CUkern_st *k)
{
  const Elf64_Shdr *info = section(k->lib, ".nv.info.", k->name);
  if (!info)
    return;
  const unsigned char *p = k->lib->image + info->sh_offset, *end = p + info->sh_size;
  k->nparams = 0;
  while (p + 4 <= end) {
    uint16_t len = 0, ordinal, offset;
    uint32_t flags;
    if (p[0] == EIFMT_SVAL)
      memcpy(&len, p + 2, 2);
    if (p[0] == EIFMT_SVAL && p[1] == EIATTR_KPARAM_INFO && len >= 12) {
      memcpy(&ordinal, p + 8, 2);
      memcpy(&offset, p + 10, 2);
      memcpy(&flags, p + 12, 4);
      if (ordinal < FAKE_MAX_PARAMS) {
        k->param_offset[ordinal] = offset;
        k->param_size[ordinal] = (flags >> 18) & 0x3fff;
        if (ordinal >= k->nparams)
          k->nparams = ordinal + 1;
      }
    }
    p += 4 + len;
  }
}

static int has_kernel(CUlibrary lib, const char *name)
{
  if (lib->elf)
    return section(lib, ".text.", name) != NULL;
  size_t n = strlen(name);
  for (const unsigned char *p = lib->image; p && p + n <= lib->image + lib->size; p++) {
    p = memmem(p, (size_t)(lib->image + lib->size - p), name, n);
    if (p && (p + n == lib->image + lib->size || !(p[n] == '_' || isalnum(p[n]))))
      return 1;
    if (!p)
      break;
  }
  return 0;
}

CUresult fake_cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jit_options,
                                void **jit_values, unsigned int njit,
                                CUlibraryOption *library_options, void **library_values,
                                unsigned int nlibrary)
{
  fake_current_call = "cuLibraryLoadData";   /* the wait comes before the entry: name it for hold.c */
  fake_host_wait();              /* as the H200's driver: it waits for pending host functions */
  FAKE_ENTER(cuLibraryLoadData);
  (void)jit_options; (void)jit_values; (void)njit;
  (void)library_options; (void)library_values; (void)nlibrary;
  if (!lib || !code)
    return CUDA_ERROR_INVALID_VALUE;
  struct CUlib_st *l = calloc(1, sizeof *l);
  if (!l)
    return CUDA_ERROR_OUT_OF_MEMORY;
  l->size = image_size(code, &l->elf);
  code = fatbin_cubin(code, &l->size, &l->elf);
  l->image = malloc(l->size);
  if (!l->image) {
    free(l);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(l->image, code, l->size);
  if (l->elf && elf_arch(l->image) != 90) {
    free(l->image);
    free(l);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  fake_keep(l);
  fake_live[FAKE_LIBRARY]++;
  *lib = l;
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryUnload(CUlibrary lib)
{
  fake_current_call = "cuLibraryUnload";   /* the wait comes before the entry: name it for hold.c */
  fake_host_wait();              /* as the H200's driver: it waits for pending host functions */
  FAKE_ENTER(cuLibraryUnload);
  fake_capture_unsafe();
  if (!lib)
    return CUDA_ERROR_INVALID_VALUE;
  while (lib->kernels) {
    struct CUkern_st *k = lib->kernels;
    lib->kernels = k->next;
    free(k->name);
    free(k);
  }
  free(lib->image);
  fake_unkeep(lib);
  free(lib);
  fake_live[FAKE_LIBRARY]--;
  return CUDA_SUCCESS;
}

static CUresult new_kernel(CUkernel *out, CUlibrary lib, const char *name)
{
  struct CUkern_st *k = calloc(1, sizeof *k);
  if (!k || !(k->name = strdup(name))) {
    free(k);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  k->lib = lib;
  k->fn.kernel = k;
  k->nparams = -1;
  k->max_dynamic_shmem = 48 * 1024;
  if (lib->elf)
    read_params(k);
  k->next = lib->kernels;
  lib->kernels = k;
  *out = k;
  return CUDA_SUCCESS;
}

static CUresult get_kernel(CUkernel *out, CUlibrary lib, const char *name)
{
  for (struct CUkern_st *k = lib->kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0) {
      *out = k;
      return CUDA_SUCCESS;
    }
  if (!has_kernel(lib, name))
    return CUDA_ERROR_NOT_FOUND;
  return new_kernel(out, lib, name);
}

CUresult fake_cuLibraryGetKernel(CUkernel *out, CUlibrary lib, const char *name)
{
  FAKE_ENTER(cuLibraryGetKernel);
  return lib && name ? get_kernel(out, lib, name) : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
  FAKE_ENTER(cuLibraryGetKernelCount);
  char buf[256];
  if (!lib)
    return CUDA_ERROR_INVALID_VALUE;
  *count = 0;
  while (kernel_name(lib, *count, buf, sizeof buf))
    ++*count;
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int n, CUlibrary lib)
{
  FAKE_ENTER(cuLibraryEnumerateKernels);
  char buf[256];
  if (!lib)
    return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; i++) {
    const char *name = kernel_name(lib, i, buf, sizeof buf);
    if (!name)
      return CUDA_ERROR_INVALID_VALUE;
    CUresult r = get_kernel(&kernels[i], lib, name);
    if (r != CUDA_SUCCESS)
      return r;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuKernelGetName(const char **name, CUkernel k)
{
  FAKE_ENTER(cuKernelGetName);
  if (!k || !name)
    return CUDA_ERROR_INVALID_VALUE;
  *name = k->name;
  return CUDA_SUCCESS;
}

CUresult fake_cuKernelGetFunction(CUfunction *fn, CUkernel k)
{
  FAKE_ENTER(cuKernelGetFunction);
  if (!k)
    return CUDA_ERROR_INVALID_HANDLE;
  *fn = &k->fn;
  return CUDA_SUCCESS;
}

const char *fake_function_name(CUfunction fn) { return fn->kernel->name; }
int fake_function_nparams(CUfunction fn) { return fn->kernel->nparams; }

CUresult fake_cuFuncGetParamInfo(CUfunction fn, size_t i, size_t *offset, size_t *size)
{
  FAKE_ENTER(cuFuncGetParamInfo);
  return fn ? fake_function_param(fn, i, offset, size) : CUDA_ERROR_INVALID_HANDLE;
}

CUresult fake_function_param(CUfunction fn, size_t i, size_t *offset, size_t *size)
{
  struct CUkern_st *k = fn->kernel;
  if (k->nparams < 0)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (i >= (size_t)k->nparams)
    return CUDA_ERROR_INVALID_VALUE;
  *offset = k->param_offset[i];
  *size = k->param_size[i];
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction fn)
{
  FAKE_ENTER(cuFuncGetAttribute);
  if (!fn)
    return CUDA_ERROR_INVALID_HANDLE;
  switch (a) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 32; break;
  case CU_FUNC_ATTRIBUTE_PTX_VERSION: case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = fn->kernel->max_dynamic_shmem; break;
  default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncSetAttribute(CUfunction fn, CUfunction_attribute a, int v)
{
  FAKE_ENTER(cuFuncSetAttribute);
  if (!fn)
    return CUDA_ERROR_INVALID_HANDLE;
  if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || v < 0 || v > 227 * 1024)
    return CUDA_ERROR_INVALID_VALUE;
  fn->kernel->max_dynamic_shmem = v;
  return CUDA_SUCCESS;
}

int fake_function_shmem_limit(CUfunction fn) { return fn->kernel->max_dynamic_shmem; }

/* 2048 threads, 32 blocks and 228 KiB of shared memory per SM. */
CUresult fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction fn, int block,
                                                          size_t shmem)
{
  FAKE_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  if (!fn || block <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  int n = block > 1024 ? 0 : 2048 / block;
  if (n > 32)
    n = 32;
  if (shmem && (size_t)n > 228 * 1024 / (shmem + 1024))
    n = (int)(228 * 1024 / (shmem + 1024));
  *blocks = n;
  return CUDA_SUCCESS;
}
