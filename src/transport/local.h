/* local.h — the local transport: ranks are threads of one process. */
#ifndef GCCL_TRANSPORT_LOCAL_H
#define GCCL_TRANSPORT_LOCAL_H

#include "transport/transport.h"

/* The state shared by the nranks threads of one communicator (queues, barrier). */
struct local_world;

/* Creates a world for nranks ranks with reference count 1. */
gcclResult_t local_world_create(struct local_world** world, int nranks);
void local_world_ref(struct local_world* world);
void local_world_unref(struct local_world* world);

/* Creates rank `rank`'s endpoint on world (takes a reference on world). Every wait
 * gives up after timeout_ms milliseconds. */
gcclResult_t local_transport_create(struct transport** tp, struct local_world* world, int rank, int64_t timeout_ms);

#endif
