/* test_transport_mpi.c — the MPI transport's contract (src/transport/transport.h),
 * below the collectives.
 *
 * Messages around the chunk size (GCCL_MPI_CHUNK_BYTES=64 here), exact and of
 * unknown size, many in flight on one pair and waited for out of order, and so
 * in pieces of that size to "other nodes" only (split_far); steps of tagged
 * messages both ways, with a stray message of another communicator dropped
 * before them, and one way, with a plain message posted after the send;
 * the in-band exchange's verdict on calls whose hashes collide, and the board's
 * (rounds of records of every size; none when one rank sets GCCL_MPI_BOARD=0 or
 * does not want one), with its verdict on the same collisions; the collective
 * primitives; and failures: a size mismatch, a message longer than its receive
 * (plain or tagged), a timeout (in a wait or a step) and an abort each break the
 * transport on every rank promptly, and cancel_all returns. Every transport is
 * made up front and freed at the end: Open MPI reuses a freed communicator's
 * context id, and messages of a broken one still in flight would reach its
 * successor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/in_band.h"
#include "collectives/on_board.h"
#include "mpi_check.h"
#include "transport/mpi.h"
#include "transport/mpi_internal.h"

#define CHUNK 64
#define NTRANSPORTS 8

static struct transport* make_transport(uint64_t id, int64_t timeout_ms) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  struct transport* tp = NULL;
  MC_OK(mpi_transport_create(&tp, dup, id, timeout_ms, level, 0), NULL);
  if (!tp) MPI_Abort(MPI_COMM_WORLD, 2);
  return tp;
}

static unsigned char pattern(int sender, int msg, size_t j) {
  return (unsigned char)(sender * 31 + msg * 7 + (int)j);
}

/* Every rank sends messages of every size to its right neighbour and receives
 * its left neighbour's, all posted at once, and waits for them last to first. */
static void check_sizes(struct transport* tp, int upto) {
  const size_t sizes[] = {0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK + 5, 1000, 0, CHUNK};
  enum { N = sizeof sizes / sizeof sizes[0] };
  int p = tp->nranks, right = (tp->rank + 1) % p, left = (tp->rank + p - 1) % p;
  unsigned char* out[N];
  unsigned char* in[N];
  size_t got[N];
  tp_req sends[N], recvs[N];
  for (int k = 0; k < N; k++) {
    /* capacity: exactly the size for multiples of the chunk, more otherwise */
    size_t cap = upto && sizes[k] % CHUNK ? sizes[k] + 2 * CHUNK + 3 : sizes[k];
    out[k] = malloc(sizes[k] + 1);
    in[k] = calloc(cap + 1, 1);
    for (size_t j = 0; j < sizes[k]; j++) out[k][j] = pattern(tp->rank, k, j);
    got[k] = (size_t)-1;
    if (upto)
      MC_OK(tp->ops->irecv_upto(tp, left, in[k], cap, &got[k], &recvs[k]), NULL);
    else
      MC_OK(tp->ops->irecv(tp, left, in[k], sizes[k], &recvs[k]), NULL);
    MC_OK(tp->ops->isend(tp, right, out[k], sizes[k], &sends[k]), NULL);
  }
  for (int k = N - 1; k >= 0; k--) MC_OK(tp->ops->wait(tp, recvs[k]), NULL);
  for (int k = N - 1; k >= 0; k--) MC_OK(tp->ops->wait(tp, sends[k]), NULL);
  for (int k = 0; k < N; k++) {
    if (upto) MC_CHECK(got[k] == sizes[k], "message %d: received %zu bytes, %zu were sent", k, got[k], sizes[k]);
    for (size_t j = 0; j < sizes[k]; j++)
      if (in[k][j] != pattern(left, k, j)) {
        mc_fail(__FILE__, __LINE__, "%s message %d of %zu bytes: byte %zu differs", upto ? "irecv_upto" : "irecv", k,
                sizes[k], j);
        break;
      }
    free(out[k]);
    free(in[k]);
  }
}

/* split_far: messages to ranks of other nodes in pieces of CHUNK, every peer
 * far (nodes of one rank), then some (nodes of two), then whole again. Sizes
 * around the piece size, exact and of unknown size (check_sizes). */
static void check_split_far(struct transport* tp) {
  const int node_sizes[] = {1, 2};
  for (int i = 0; i < 2; i++) {
    int node = node_sizes[i];
    tp_split_far(tp, node, CHUNK);
    for (int peer = 0; peer < tp->nranks; peer++) {
      size_t want = peer / node == tp->rank / node ? MPI_TP_CHUNK_BYTES_DEFAULT : CHUNK;
      MC_CHECK(mpi_transport_chunk_to(tp, peer) == want, "nodes of %d: messages to rank %d split at %zu, not %zu", node,
               peer, mpi_transport_chunk_to(tp, peer), want);
    }
    check_sizes(tp, 0);
    check_sizes(tp, 1);
  }
  tp_split_far(tp, 1, 0);
  for (int peer = 0; peer < tp->nranks; peer++)
    MC_CHECK(mpi_transport_chunk_to(tp, peer) == MPI_TP_CHUNK_BYTES_DEFAULT, "rank %d still split at %zu", peer,
             mpi_transport_chunk_to(tp, peer));
  check_sizes(tp, 1);
}

/* Tagged messages to the right neighbour, after untagged ones on the same pair:
 * sizes from empty to past the eager limit, tags from 0 to the largest, each
 * reported with its bytes. Before them a message with another communicator's
 * tagged MPI tag (what a freed communicator can leave to its successor) reaches
 * the same MPI communicator; the tagged receive drops it. */
static void check_tagged(struct transport* tp) {
  const size_t sizes[] = {0, 1, 256, 4100, 40000};
  const uint32_t tags[] = {0, 1, (1u << TP_TAG_BITS) - 1, 12345, 0x2aaaaa};
  enum { N = sizeof sizes / sizeof sizes[0] };
  int p = tp->nranks, right = (tp->rank + 1) % p, left = (tp->rank + p - 1) % p;
  struct mpi_tp* t = (struct mpi_tp*)tp;
  MC_CHECK(tp->agree_in_band, "Open MPI's tags reach 2^31 - 1, yet tagged messages are not offered");
  unsigned char plain_out = (unsigned char)tp->rank, plain_in = 0xff;
  unsigned char* out = malloc(sizes[N - 1]);
  unsigned char* in = malloc(sizes[N - 1]);
  struct mpi_tp other = *t;
  other.comm_id ^= 1; /* another communicator's owner bits */
  MPI_Request stray;
  MPI_Isend(out, 8, MPI_BYTE, right, (int)mpi_tag_tagged(&other, 7), t->comm, &stray);
  tp_req plain[2];
  MC_OK(tp->ops->irecv(tp, left, &plain_in, 1, &plain[0]), NULL);
  MC_OK(tp->ops->isend(tp, right, &plain_out, 1, &plain[1]), NULL);
  MC_OK(tp->ops->wait(tp, plain[0]), NULL);
  MC_OK(tp->ops->wait(tp, plain[1]), NULL);
  MC_CHECK(plain_in == (unsigned char)left, "the untagged message before the tagged ones carried %d", plain_in);
  for (int k = 0; k < N; k++) {
    for (size_t j = 0; j < sizes[k]; j++) out[j] = pattern(tp->rank, k, j);
    struct tp_tagged_step s = {.to = right,
                               .from = left,
                               .sbuf = out,
                               .sbytes = sizes[k],
                               .stag = tags[k],
                               .rbuf = in,
                               .cap = sizes[N - 1],
                               .got = (size_t)-1,
                               .rtag = 0xffffffffu};
    MC_OK(tp_step_tagged(tp, &s), NULL);
    size_t got = s.got;
    MC_CHECK(got == sizes[k], "tagged message %d: %zu bytes received, %zu sent", k, got, sizes[k]);
    MC_CHECK(s.rtag == tags[k], "tagged message %d: tag %#x received, %#x sent", k, s.rtag, tags[k]);
    for (size_t j = 0; j < sizes[k] && j < got; j++)
      if (in[j] != pattern(left, k, j)) {
        mc_fail(__FILE__, __LINE__, "tagged message %d: byte %zu differs", k, j);
        break;
      }
  }
  MPI_Wait(&stray, MPI_STATUS_IGNORE);
  MC_OK(tp->ops->barrier(tp), NULL);
  free(out);
  free(in);
}

/* after_send's record of its calls (check_one_way_steps). */
struct sent_after {
  struct transport* tp;
  int calls, peer;
  unsigned char byte;
  tp_req req;
};

static gcclResult_t post_plain_after(void* arg, int peer) {
  struct sent_after* a = arg;
  a->calls++;
  a->peer = peer;
  return tp_isend(a->tp, peer, &a->byte, 1, &a->req);
}

/* Steps one way only: a send to the right neighbour whose after_send posts a
 * plain message behind it, then a receive from the left, which takes the
 * tagged message and leaves the plain one to the plain receive after it. */
static void check_one_way_steps(struct transport* tp) {
  int p = tp->nranks, right = (tp->rank + 1) % p, left = (tp->rank + p - 1) % p;
  unsigned char out[3] = {(unsigned char)tp->rank, 1, 2}, in[8] = {0}, plain = 0xff;
  struct sent_after after = {.tp = tp, .peer = -1, .byte = (unsigned char)(100 + tp->rank), .req = -1};
  struct tp_tagged_step send = {.to = right,
                                .from = -1,
                                .sbuf = out,
                                .sbytes = 3,
                                .stag = 77,
                                .after_send = post_plain_after,
                                .after_send_arg = &after};
  MC_OK(tp_step_tagged(tp, &send), NULL);
  MC_CHECK(after.calls == 1 && after.peer == right, "after_send ran %d times, last for rank %d (send to %d)",
           after.calls, after.peer, right);
  struct tp_tagged_step recv = {.to = -1, .from = left, .rbuf = in, .cap = sizeof in};
  MC_OK(tp_step_tagged(tp, &recv), NULL);
  MC_CHECK(recv.got == 3 && recv.rtag == 77 && in[0] == (unsigned char)left,
           "a one-way step received %zu bytes, tag %u, first byte %d (rank %d sent 3, tag 77)", recv.got, recv.rtag,
           in[0], left);
  MC_OK(tp_recv(tp, left, &plain, 1), NULL);
  MC_CHECK(plain == (unsigned char)(100 + left), "the plain message behind the tagged one carried %d", plain);
  MC_OK(tp->ops->wait(tp, after.req), NULL);
  MC_OK(tp->ops->barrier(tp), NULL);
}

/* On either exchange (in band or on the board), calls whose hashes collide but
 * whose sizes differ (rank r sums r + 1 floats) are a mismatch on every rank, the
 * receive buffer untouched; calls that agree sum exactly. */
typedef gcclResult_t (*exchange_fn)(struct coll_ctx* ctx, uint64_t hash, const struct coll_args* sum, int* agreed);

/* The in-band exchange with a sum (nothing sent beside it). */
static gcclResult_t in_band_sum(struct coll_ctx* ctx, uint64_t hash, const struct coll_args* sum, int* agreed) {
  return in_band_exchange(ctx, hash, sum, NULL, agreed);
}

static void check_collision(struct transport* tp, exchange_fn exchange) {
  struct coll_ctx ctx = {.tp = tp, .rank = tp->rank, .nranks = tp->nranks};
  ctx.scratch_bytes = IN_BAND_SCRATCH_BYTES;
  ctx.scratch = malloc(ctx.scratch_bytes);
  ctx.peer_send = calloc((size_t)tp->nranks, sizeof *ctx.peer_send);
  float send[16], recv[16];
  for (int i = 0; i < 16; i++) send[i] = (float)(tp->rank + i);
  for (int differ = 0; differ <= 1; differ++) {
    for (int i = 0; i < 16; i++) recv[i] = -1.0f;
    size_t count = differ ? (size_t)tp->rank + 1 : 5;
    struct coll_args a = {.sendbuff = send, .recvbuff = recv, .count = count, .dt = gcclFloat32, .op = gcclSum};
    int agreed = -1;
    MC_OK(exchange(&ctx, 0x1234567890abcdefull, &a, &agreed), NULL);
    int want = !differ || tp->nranks == 1;
    MC_CHECK(agreed == want, "%s counts under one hash: agreed = %d", differ ? "different" : "equal", agreed);
    for (int i = 0; i < 16; i++) {
      int p = tp->nranks;
      float expect = want && (size_t)i < count ? (float)(p * (p - 1) / 2 + p * i) : -1.0f;
      if (recv[i] != expect) {
        mc_fail(__FILE__, __LINE__, "%s counts: element %d is %g, expected %g", differ ? "different" : "equal", i,
                recv[i], expect);
        break;
      }
    }
  }
  free(ctx.scratch);
  free(ctx.peer_send);
}

/* Record sizes of the board test: the largest among them, and slots reused with
 * sizes they did not have. */
static const size_t board_sizes[] = {0, 1, 4, 33, 1000, 4096, TP_BOARD_MAX_BYTES};
#define NBOARD_SIZES (sizeof board_sizes / sizeof board_sizes[0])

/* Rounds on the board: rank r's record of round n is hash n * 1000 + r and
 * board_sizes[(n + r) % NBOARD_SIZES] bytes of pattern(r, n, .); every rank reads
 * every rank's, and the transport still sends messages between rounds. */
static void check_board(struct transport* tp) {
  MC_CHECK(tp_has_board(tp), "ranks of one node have no board");
  if (!tp_has_board(tp)) return;
  unsigned char* data = malloc(TP_BOARD_MAX_BYTES);
  for (int n = 1; n <= 100; n++) {
    size_t bytes = board_sizes[(size_t)(n + tp->rank) % NBOARD_SIZES];
    for (size_t j = 0; j < bytes; j++) data[j] = pattern(tp->rank, n, j);
    const struct tp_post* all = NULL;
    MC_OK(tp_board_post(tp, (uint64_t)n * 1000 + (uint64_t)tp->rank, data, bytes, &all), NULL);
    for (int r = 0; r < tp->nranks; r++) {
      size_t want = board_sizes[(size_t)(n + r) % NBOARD_SIZES];
      const unsigned char* d = all[r].data;
      int bad = all[r].hash != (uint64_t)n * 1000 + (uint64_t)r || all[r].bytes != want;
      for (size_t j = 0; j < want && !bad; j++) bad = d[j] != pattern(r, n, j);
      if (bad) {
        mc_fail(__FILE__, __LINE__, "round %d: rank %d's record is wrong (hash %llu, %zu bytes)", n, r,
                (unsigned long long)all[r].hash, all[r].bytes);
        n = 1000;
        break;
      }
    }
    if (n % 25 == 0) MC_OK(tp->ops->barrier(tp), NULL);
  }
  free(data);
}

static void check_collective_primitives(struct transport* tp) {
  for (size_t bytes = 1; bytes <= TP_SMALL_MAX; bytes *= 8) {
    unsigned char mine[TP_SMALL_MAX];
    unsigned char* all = malloc((size_t)tp->nranks * bytes);
    for (size_t j = 0; j < bytes; j++) mine[j] = pattern(tp->rank, 0, j);
    MC_OK(tp->ops->allgather_small(tp, mine, bytes, all), NULL);
    for (int r = 0; r < tp->nranks; r++)
      for (size_t j = 0; j < bytes; j++)
        if (all[(size_t)r * bytes + j] != pattern(r, 0, j)) {
          mc_fail(__FILE__, __LINE__, "allgather_small of %zu bytes: rank %d's byte %zu differs", bytes, r, j);
          r = tp->nranks;
          break;
        }
    free(all);
    MC_OK(tp->ops->barrier(tp), NULL);
  }
}

enum receive_kind { RECV_EXACT, RECV_UPTO, RECV_TAGGED };

/* One rank's message is longer (or shorter) than the receive (exact, bounded or
 * a tagged step's): gcclInternalError there, and every other rank's next wait
 * fails at once with gcclRemoteError. */
static void check_size_mismatch(struct transport* tp, enum receive_kind kind) {
  unsigned char buf[4 * CHUNK] = {0};
  size_t got = 0;
  double start = mc_now();
  if (tp->rank == 0) { /* the send completes, unless rank 1's failure overtakes its last chunk */
    struct tp_tagged_step s = {.to = 1, .from = -1, .sbuf = buf, .sbytes = 12};
    gcclResult_t res =
        kind == RECV_TAGGED ? tp_step_tagged(tp, &s) : tp_send(tp, 1, buf, kind == RECV_UPTO ? 3 * CHUNK : 20);
    MC_CHECK(res == gcclSuccess || res == gcclRemoteError, "the longer send returned %s", gcclGetErrorString(res));
  }
  if (tp->rank == 1) {
    tp_req req;
    struct tp_tagged_step s = {.to = -1, .from = 0, .rbuf = buf, .cap = 8};
    gcclResult_t res = kind == RECV_TAGGED ? tp_step_tagged(tp, &s)
                       : kind == RECV_UPTO ? tp->ops->irecv_upto(tp, 0, buf, 2 * CHUNK + 10, &got, &req)
                                           : tp->ops->irecv(tp, 0, buf, 10, &req);
    if (res == gcclSuccess && kind != RECV_TAGGED) res = tp->ops->wait(tp, req);
    MC_CHECK(res == gcclInternalError, "a receive (kind %d) of a longer message returned %s", kind,
             gcclGetErrorString(res));
  }
  gcclResult_t res = tp->ops->barrier(tp);
  MC_CHECK(res == gcclRemoteError, "barrier after a size mismatch returned %s", gcclGetErrorString(res));
  MC_CHECK(tp->ops->broken(tp) != gcclSuccess, "the transport is not broken after a size mismatch");
  MC_CHECK(mc_now() - start < 5, "the failure took %.1f s to reach every rank", mc_now() - start);
  tp->ops->cancel_all(tp);
}

/* Rank 0 waits for a message that never comes (plain, or in a tagged step) and
 * times out after 1 s; rank 1, waiting as well but with a 20 s timeout, and the
 * others in a barrier, fail with gcclRemoteError as soon as rank 0 tells them;
 * a step on the broken transport then fails at once. */
static void check_timeout(struct transport* tp, int tagged) {
  unsigned char byte;
  double start = mc_now();
  gcclResult_t res;
  if (tp->rank <= 1) {
    struct tp_tagged_step s = {.to = -1, .from = 1 - tp->rank, .rbuf = &byte, .cap = 1};
    res = tagged ? tp_step_tagged(tp, &s) : tp_recv(tp, 1 - tp->rank, &byte, 1);
    gcclResult_t want = tp->rank == 0 ? gcclTimeout : gcclRemoteError;
    MC_CHECK(res == want, "waiting for a message never sent (tagged: %d) returned %s, expected %s", tagged,
             gcclGetErrorString(res), gcclGetErrorString(want));
  } else {
    res = tp->ops->barrier(tp);
    MC_CHECK(res == gcclRemoteError, "a barrier without ranks 0 and 1 returned %s", gcclGetErrorString(res));
  }
  double took = mc_now() - start;
  MC_CHECK(took < 5, "rank %d failed after %.1f s", tp->rank, took);
  if (tp->rank == 0) MC_CHECK(took >= 0.9, "rank 0 timed out after %.2f s instead of 1", took);
  struct tp_tagged_step none = {.to = -1, .from = -1};
  MC_CHECK(tp_step_tagged(tp, &none) == gcclRemoteError, "a step on a broken transport did not fail");
  tp->ops->cancel_all(tp);
}

/* The last rank aborts; the others, in a barrier, fail promptly. */
static void check_abort(struct transport* tp) {
  double start = mc_now();
  if (tp->rank == tp->nranks - 1) {
    tp->ops->abort(tp, gcclInternalError);
    tp->ops->cancel_all(tp); /* tells the peers when MPI is below MPI_THREAD_MULTIPLE */
  }
  gcclResult_t res = tp->ops->barrier(tp);
  MC_CHECK(res == gcclRemoteError, "a barrier after an abort returned %s", gcclGetErrorString(res));
  MC_CHECK(mc_now() - start < 5, "the abort took %.1f s to reach rank %d", mc_now() - start, tp->rank);
  tp->ops->cancel_all(tp);
}

/* Receives nobody sends, withdrawn: cancel_all returns at once and the transport still works. */
static void check_cancel_all(struct transport* tp) {
  unsigned char buf[3 * CHUNK];
  tp_req req[2];
  int left = (tp->rank + tp->nranks - 1) % tp->nranks;
  size_t got;
  MC_OK(tp->ops->irecv(tp, left, buf, 3 * CHUNK, &req[0]), NULL);
  MC_OK(tp->ops->irecv_upto(tp, left, buf, sizeof buf, &got, &req[1]), NULL);
  double start = mc_now();
  tp->ops->cancel_all(tp);
  MC_CHECK(mc_now() - start < 1, "cancel_all took %.1f s", mc_now() - start);
  MC_CHECK(tp->ops->broken(tp) == gcclSuccess, "cancel_all broke a working transport");
  MC_OK(tp->ops->barrier(tp), NULL);
}

int main(int argc, char** argv) {
  mc_init(&argc, &argv);
  char chunk[16];
  snprintf(chunk, sizeof chunk, "%d", CHUNK);
  mc_setenv("GCCL_MPI_CHUNK_BYTES", chunk);
  struct transport* tp[NTRANSPORTS];
  for (int i = 0; i < NTRANSPORTS; i++)
    tp[i] = make_transport(1000 + (uint64_t)i, (i == 5 || i == 7) && mc_rank == 0 ? 1000 : 20000);
  mc_setenv("GCCL_MPI_CHUNK_BYTES", NULL);
  struct transport* big = make_transport(999, 20000); /* the default chunk */
  struct transport* boarded = make_transport(998, 20000);
  MC_OK(mpi_transport_add_board(boarded, 1), NULL);
  if (mc_rank == mc_nranks - 1) mc_setenv("GCCL_MPI_BOARD", "0");
  struct transport* unboarded = make_transport(997, 20000);
  MC_OK(mpi_transport_add_board(unboarded, 1), NULL);
  mc_setenv("GCCL_MPI_BOARD", NULL);
  struct transport* unwanted = make_transport(996, 20000);
  MC_OK(mpi_transport_add_board(unwanted, mc_rank != 0), NULL);

  MC_CHECK(mpi_transport_chunk_bytes(tp[0]) == CHUNK, "GCCL_MPI_CHUNK_BYTES was not applied");
  MC_CHECK(mpi_transport_chunk_bytes(big) == MPI_TP_CHUNK_BYTES_DEFAULT, "the default chunk is %zu",
           mpi_transport_chunk_bytes(big));
  MC_CHECK(!tp[0]->shares_address_space, "MPI ranks do not share an address space");
  check_sizes(tp[0], 0);
  check_sizes(tp[0], 1);
  check_sizes(big, 1);
  check_collective_primitives(tp[0]);
  check_tagged(big);
  check_one_way_steps(big);
  check_collision(big, in_band_sum);
  MC_CHECK(tp_can_split_far(big), "the MPI transport cannot split messages between nodes");
  check_split_far(big);
  MC_CHECK(!tp_has_board(big), "a transport has a board without mpi_transport_add_board");
  check_board(boarded);
  if (tp_has_board(boarded)) check_collision(boarded, board_exchange); /* check_board failed otherwise */
  MC_CHECK(!tp_has_board(unboarded), "a board where one rank set GCCL_MPI_BOARD=0");
  MC_CHECK(!tp_has_board(unwanted), "a board where rank 0 did not want one");
  check_cancel_all(tp[1]);
  if (mc_nranks >= 2) {
    check_size_mismatch(tp[2], RECV_EXACT);
    check_size_mismatch(tp[3], RECV_UPTO);
    check_size_mismatch(tp[6], RECV_TAGGED);
    check_abort(tp[4]);
    check_timeout(tp[5], 0);
    check_timeout(tp[7], 1);
  }
  for (int i = 0; i < NTRANSPORTS; i++) tp[i]->ops->destroy(tp[i]);
  big->ops->destroy(big);
  boarded->ops->destroy(boarded);
  unboarded->ops->destroy(unboarded);
  unwanted->ops->destroy(unwanted);
  return mc_finish("test_transport_mpi");
}
