/* faults.h — GCCL_FAULT on a communicator: the fault injector of
 * transport/fault.h, installed when the communicator is created, and what it has
 * injected. Plain C declarations: tests include it from C++. */
#ifndef GCCL_CORE_FAULTS_H
#define GCCL_CORE_FAULTS_H

#include <stdint.h>

#include "gccl.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "transport/fault.h"

/* Copies the faults comm's rank has injected so far into counts[FAULT_KINDS], by
 * kind (all zero when GCCL_FAULT was unset at creation). Returns gcclSuccess, or
 * gcclInvalidArgument for a bad comm or a NULL counts. Valid on a broken
 * communicator, until it is destroyed or aborted. */
gcclResult_t comm_faults_injected(gcclComm_t comm, uint64_t counts[FAULT_KINDS]);

#ifdef __cplusplus
}
#endif

#endif
