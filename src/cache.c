/* cache.c: stub */
#include "cl.h"
