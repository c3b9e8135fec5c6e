/* sim.h — the link model: a transport decorator that makes thread ranks behave
 * as ranks on separate machines joined by a network.
 *
 * GCCL_RANKS_PER_NODE=L groups ranks into virtual nodes (rank r on node r / L).
 * GCCL_SIM_LINK_GBPS (Gbit/s) and GCCL_SIM_LINK_US (latency, microseconds) turn
 * the model on: every rank keeps a virtual clock, charged with its own thread's
 * CPU time between transport calls and advanced by the modelled transfer times of
 * its messages (each rank's NIC sends and receives at the link rate, full duplex;
 * intra-node messages move at memory speed). GCCL_SIM_LINK_PACE=0 stops the
 * decorator from sleeping until the wall clock catches up with the virtual one.
 * The decorator forwards every operation to the inner transport, so results are
 * those of the inner transport, bit for bit. */
#ifndef GCCL_TRANSPORT_SIM_H
#define GCCL_TRANSPORT_SIM_H

#include <stdint.h>

#include "transport/transport.h"

struct sim_config {
  int ranks_per_node;
  double link_bytes_per_s; /* 0: no bandwidth term (latency-only model) */
  double latency_s;
  int pace; /* sleep until the wall clock reaches the virtual clock */
};

/* Fills *cfg from the environment; returns 1 when the link model is on (either
 * GCCL_SIM_LINK_GBPS or GCCL_SIM_LINK_US is set to a valid value), else 0.
 * Malformed values are reported (WARN) and ignored. */
int sim_config_from_env(struct sim_config* cfg, int ranks_per_node);

/* The clocks, NIC timelines and message timings the ranks of one communicator share. */
struct sim_world;

/* Creates a world for nranks ranks with reference count 1; its virtual time 0 is now. */
gcclResult_t sim_world_create(struct sim_world** world, int nranks, const struct sim_config* cfg);
void sim_world_unref(struct sim_world* world);

/* Wraps `inner` (one rank's endpoint on `world`; takes a reference on world). On
 * success the decorator owns inner and destroys it with itself; on failure inner
 * is left to the caller. */
gcclResult_t sim_transport_create(struct transport** tp, struct transport* inner, struct sim_world* world);

/* The same for ranks that met by id, each holding only its own inner endpoint: a
 * collective call over inner in which rank 0 creates the world and hands it to the
 * others through inner's allgather_small (threads share the address space). */
gcclResult_t sim_transport_join(struct transport** tp, struct transport* inner, const struct sim_config* cfg);

/* Non-zero when tp is a link-model decorator. */
int sim_transport_is(const struct transport* tp);
/* For a decorator: this rank's virtual clock in seconds since the world's creation,
 * and the bytes this rank has posted for sending: to any peer, and to peers on
 * other nodes. Any thread may ask. */
double sim_transport_time(struct transport* tp);
void sim_transport_bytes_sent(struct transport* tp, uint64_t* all, uint64_t* inter_node);

#endif
