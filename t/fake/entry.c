/* SPDX-License-Identifier: MIT */
/* entry.c: cuGetProcAddress_v2, the one symbol cudalua looks up itself.
 *
 * It hands out fake_<name> for every name of FAKE_API, whatever version is
 * asked for, and CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND for any other name. */
#include <string.h>

#include "fake.h"

static const struct { const char *name; void *fn; } entries[] = {
#define FAKE_ENTRY(name, ...) {#name, (void *)fake_##name},
  FAKE_API(FAKE_ENTRY)
#undef FAKE_ENTRY
};

const char *fake_entry_name(size_t i)
{
  return i < sizeof entries / sizeof entries[0] ? entries[i].name : NULL;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
  (void)version;
  (void)flags;
  if (!symbol || !pfn)
    return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
    if (strcmp(entries[i].name, symbol) == 0)
      *pfn = entries[i].fn;
  if (status)
    *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
