/* handles.h — the live gcclComm_t, gcclStream_t and gcclCompressor_t handles.
 *
 * Every public function looks its handles up here before it reads through them,
 * so a destroyed, aborted, made-up or wrong-kind handle is gcclInvalidArgument
 * rather than a read of freed memory. A destroyed object's memory is not freed at
 * once but kept in a quarantine of the last HANDLE_QUARANTINE destroyed objects:
 * until it leaves, no new object can get its address, so a stale handle stays
 * recognisably stale instead of naming someone else's communicator. */
#ifndef GCCL_CORE_HANDLES_H
#define GCCL_CORE_HANDLES_H

#include "gccl.h"

#define HANDLE_QUARANTINE 64

enum handle_kind { HANDLE_COMM = 1, HANDLE_STREAM, HANDLE_COMPRESSOR };

/* Makes p (a malloc'd object) a live handle of `kind`. gcclSystemError when out of memory. */
gcclResult_t handle_add(enum handle_kind kind, void* p);
/* Whether p is a live handle of `kind`. Safe on any pointer value, from any thread. */
int handle_live(enum handle_kind kind, const void* p);
/* Ends p's life as a handle and frees it (with free()) once HANDLE_QUARANTINE
 * later objects have been retired. p need not have been added. */
void handle_retire(enum handle_kind kind, void* p);

#endif /* GCCL_CORE_HANDLES_H */
