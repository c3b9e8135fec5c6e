/* rendezvous.c — thread ranks find each other by unique id.
 *
 * The only global mutable state besides the one-time env parse: a table of
 * communicators still gathering their ranks. The first rank to arrive creates the
 * shared world; the last one removes the entry (ids are one-shot, as NCCL's). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/result.h"
#include "core/comm.h"
#include "transport/local.h"

struct pending_comm {
  struct pending_comm* next;
  char key[GCCL_UNIQUE_ID_BYTES];
  int nranks;
  int joined;
  int complete;
  unsigned char* taken; /* [nranks] */
  struct local_world* world;
};

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t table_cv = PTHREAD_COND_INITIALIZER;
static struct pending_comm* table;

static struct pending_comm* find(const gcclUniqueId* id) {
  for (struct pending_comm* p = table; p; p = p->next)
    if (!memcmp(p->key, id->internal, GCCL_UNIQUE_ID_BYTES)) return p;
  return NULL;
}

static void unlink_entry(struct pending_comm* e) {
  for (struct pending_comm** p = &table; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      return;
    }
}

static void free_entry(struct pending_comm* e) {
  local_world_unref(e->world);
  free(e->taken);
  free(e);
}

static gcclResult_t create_entry(const gcclUniqueId* id, int nranks, struct pending_comm** out) {
  struct pending_comm* e = calloc(1, sizeof *e);
  if (!e || !(e->taken = calloc((size_t)nranks, 1))) {
    free(e);
    return err_set(gcclSystemError, "out of memory in the rendezvous");
  }
  gcclResult_t res = local_world_create(&e->world, nranks);
  if (res != gcclSuccess) {
    free(e->taken);
    free(e);
    return res;
  }
  memcpy(e->key, id->internal, GCCL_UNIQUE_ID_BYTES);
  e->nranks = nranks;
  e->next = table;
  table = e;
  *out = e;
  return gcclSuccess;
}

gcclResult_t rendezvous_join(const gcclUniqueId* id, int nranks, int rank, int64_t timeout_ms, struct transport** tp) {
  gcclResult_t res = gcclSuccess;
  pthread_mutex_lock(&table_mu);
  struct pending_comm* e = find(id);
  if (!e) GCCL_CHECK_GOTO(create_entry(id, nranks, &e), res, out);
  if (e->nranks != nranks) {
    res = err_set(gcclInvalidUsage, "gcclCommInitRank: rank %d passed nranks %d, but this id's communicator has %d",
                  rank, nranks, e->nranks);
    goto out;
  }
  if (e->taken[rank]) {
    res = err_set(gcclInvalidUsage, "gcclCommInitRank: rank %d joined this id twice", rank);
    goto out;
  }
  e->taken[rank] = 1;
  if (++e->joined == nranks) {
    e->complete = 1;
    unlink_entry(e);
    pthread_cond_broadcast(&table_cv);
  }
  int64_t deadline = clock_now_ns() + (timeout_ms > INT64_MAX / 2000000 ? INT64_MAX / 2 : timeout_ms * 1000000);
  while (!e->complete) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* the global cv uses the default clock */
    int64_t left = deadline - clock_now_ns();
    if (left <= 0) {
      e->taken[rank] = 0;
      int last = --e->joined == 0;
      if (last) {
        unlink_entry(e);
        free_entry(e);
      }
      res = err_set(gcclTimeout, "gcclCommInitRank: rank %d waited %lld ms for %d ranks to join (GCCL_TIMEOUT_MS)",
                    rank, (long long)timeout_ms, nranks);
      goto out;
    }
    int64_t step = left < 100000000 ? left : 100000000;
    int64_t ns = ts.tv_nsec + step;
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&table_cv, &table_mu, &ts);
  }
  res = local_transport_create(tp, e->world, rank, timeout_ms);
  /* The last rank to take its transport drops the table's reference. */
  if (--e->joined == 0) free_entry(e);
out:
  pthread_mutex_unlock(&table_mu);
  return res;
}
