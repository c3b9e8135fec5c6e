/* stream.c — gcclStream_t: a FIFO of collectives run in order by one worker thread.
 *
 * The queue is a fixed ring allocated with the stream, so queueing never mallocs;
 * a full ring makes the caller wait for space. */
#include <pthread.h>
#include <stdlib.h>

#include "common/result.h"
#include "core/argcheck.h"
#include "core/comm.h"
#include "core/execute.h"

#define STREAM_CAPACITY 256

struct stream_task {
  gcclComm_t comm;
  struct coll_args args;
};

struct gcclStream {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t changed; /* task queued, task done, or stop */
  struct stream_task tasks[STREAM_CAPACITY];
  size_t head, tail; /* tasks[head % CAP] is next; tail - head queued */
  int running;       /* a task is being executed */
  int stop;
  gcclResult_t first_error;
  void* cuda; /* cudaStream_t of gcclStreamCreateCuda, else NULL */
};

static void* stream_main(void* arg) {
  gcclStream_t s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->head == s->tail && !s->stop) pthread_cond_wait(&s->changed, &s->mu);
    if (s->head == s->tail) break; /* stop requested and nothing left */
    struct stream_task t = s->tasks[s->head % STREAM_CAPACITY];
    s->running = 1;
    pthread_mutex_unlock(&s->mu);
    gcclResult_t res = execute_collective(t.comm, &t.args);
    comm_pending_add(t.comm, -1);
    pthread_mutex_lock(&s->mu);
    if (res != gcclSuccess && s->first_error == gcclSuccess) s->first_error = res;
    s->head++;
    s->running = 0;
    pthread_cond_broadcast(&s->changed);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int stream_valid(gcclStream_t s) {
  return handle_live(HANDLE_STREAM, s);
}

void* stream_cuda(gcclStream_t s) {
  return s ? s->cuda : NULL;
}

void stream_set_cuda(gcclStream_t s, void* cuda) {
  s->cuda = cuda;
}

gcclResult_t gcclStreamCreate(gcclStream_t* out) {
  GCCL_CHECK(argcheck_not_null(out, "gcclStreamCreate", "stream"));
  *out = NULL;
  gcclStream_t s = calloc(1, sizeof *s);
  if (!s) return err_set(gcclSystemError, "gcclStreamCreate: out of memory");
  gcclResult_t res = handle_add(HANDLE_STREAM, s);
  if (res != gcclSuccess) {
    free(s);
    return res;
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->changed, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->changed);
    handle_retire(HANDLE_STREAM, s);
    return err_set(gcclSystemError, "gcclStreamCreate: cannot start the worker thread");
  }
  *out = s;
  return gcclSuccess;
}

gcclResult_t stream_push(gcclStream_t s, gcclComm_t comm, const struct coll_args* args) {
  comm_pending_add(comm, +1);
  pthread_mutex_lock(&s->mu);
  while (s->tail - s->head == STREAM_CAPACITY) pthread_cond_wait(&s->changed, &s->mu);
  s->tasks[s->tail % STREAM_CAPACITY] = (struct stream_task){comm, *args};
  s->tail++;
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->mu);
  return gcclSuccess;
}

gcclResult_t gcclStreamSynchronize(gcclStream_t s) {
  GCCL_CHECK(argcheck_stream(s, "gcclStreamSynchronize"));
  pthread_mutex_lock(&s->mu);
  while (s->head != s->tail) pthread_cond_wait(&s->changed, &s->mu);
  gcclResult_t res = s->first_error;
  s->first_error = gcclSuccess;
  pthread_mutex_unlock(&s->mu);
  if (res != gcclSuccess)
    err_set(res, "gcclStreamSynchronize: queued work failed: see gcclGetLastError of its communicator");
  return res;
}

gcclResult_t gcclStreamDestroy(gcclStream_t s) {
  GCCL_CHECK(argcheck_stream(s, "gcclStreamDestroy"));
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL); /* the worker drains the queue first */
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->changed);
  handle_retire(HANDLE_STREAM, s);
  return gcclSuccess;
}

gcclResult_t comm_group_stream(gcclComm_t comm, gcclStream_t* out) {
  if (!comm->group_stream) GCCL_CHECK(gcclStreamCreate(&comm->group_stream));
  *out = comm->group_stream;
  return gcclSuccess;
}
