/* arena.h — scratch memory allocated once per communicator and pre-touched. */
#ifndef GCCL_COMMON_ARENA_H
#define GCCL_COMMON_ARENA_H

#include <stddef.h>

#include "gccl.h"

/* Page-aligned memory whose pages are touched at allocation, so that the first
 * collective does not pay first-touch faults (~11 us per 4 KiB page here).
 * Returns gcclSystemError (with a message) when out of memory. */
gcclResult_t arena_alloc(void** out, size_t bytes);
void arena_free(void* p, size_t bytes);

#endif
