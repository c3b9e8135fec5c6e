/* fault.c — the fault-injecting transport decorator (fault.h) and GCCL_FAULT's parser.
 *
 * Requests. The decorator hands out its own handles, indices into a table that
 * maps each to the inner request (or none: a dropped message's send completes at
 * once) and to a private copy of the message when it sends one. A corrupted or
 * duplicated message must be a copy: the local transport hands the receiver the
 * sender's address and the receiver copies at match time, so altering the
 * caller's buffer would be visible to it, and a duplicate may be matched after the
 * caller reused its buffer. A copy lives until its send completes; a duplicate's
 * send is never waited for (the receiver may never match it), so it and its copy
 * stay until cancel_all or destroy, after which no peer can read it.
 *
 * Stopping. The stopped operation sleeps on the decorator's condition variable,
 * woken by abort and every few milliseconds to look whether the inner transport
 * broke (a peer timed out or failed; over MPI that news arrives only inside MPI
 * calls, so the sleeper also drives the inner transport's progress). */
#include "transport/fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/result.h"

/* How often a stopped rank looks whether its communicator broke. */
#define FAULT_POLL_NS 2000000

/* ---- GCCL_FAULT --------------------------------------------------------------- */

static const char* const KIND_NAMES[FAULT_KINDS] = {"drop", "delay", "truncate", "duplicate", "flip", "stop"};

const char* fault_kind_name(enum fault_kind kind) {
  return kind >= 0 && kind < FAULT_KINDS ? KIND_NAMES[kind] : "unknown";
}

enum fault_key { KEY_RANK = 0, KEY_SEND, KEY_PEER, KEY_OP, KEY_MS, KEY_BYTES, KEY_BYTE, KEY_BIT, KEYS };

static const char* const KEY_NAMES[KEYS] = {"rank", "send", "peer", "op", "ms", "bytes", "byte", "bit"};

/* The keys each kind requires, and the optional ones (peer), as bit masks. */
#define K(key) (1u << (key))
static const unsigned REQUIRED[FAULT_KINDS] = {
    [FAULT_DROP] = K(KEY_RANK) | K(KEY_SEND),
    [FAULT_DELAY] = K(KEY_RANK) | K(KEY_SEND) | K(KEY_MS),
    [FAULT_TRUNCATE] = K(KEY_RANK) | K(KEY_SEND) | K(KEY_BYTES),
    [FAULT_DUPLICATE] = K(KEY_RANK) | K(KEY_SEND),
    [FAULT_FLIP] = K(KEY_RANK) | K(KEY_SEND) | K(KEY_BYTE) | K(KEY_BIT),
    [FAULT_STOP] = K(KEY_RANK) | K(KEY_OP),
};
#define OPTIONAL_KEYS(kind) ((kind) == FAULT_STOP ? 0u : K(KEY_PEER))

/* A decimal integer filling [s, e), at most `max`. */
static int parse_uint(const char* s, const char* e, uint64_t max, uint64_t* out) {
  if (s == e || e - s > 20) return 0;
  uint64_t v = 0;
  for (const char* c = s; c < e; c++) {
    if (*c < '0' || *c > '9') return 0;
    unsigned d = (unsigned)(*c - '0');
    if (v > (UINT64_MAX - d) / 10) return 0;
    v = v * 10 + d;
  }
  if (v > max) return 0;
  *out = v;
  return 1;
}

/* The index of the name that is exactly [s, e), or n. */
static int find_name(const char* const* names, int n, const char* s, const char* e) {
  int i = 0;
  while (i < n && !(strlen(names[i]) == (size_t)(e - s) && memcmp(s, names[i], (size_t)(e - s)) == 0)) i++;
  return i;
}

/* One fault, the text [s, e). */
static gcclResult_t parse_rule(struct fault_rule* r, const char* s, const char* e, int nranks) {
  const char* colon = memchr(s, ':', (size_t)(e - s));
  const char* name_end = colon ? colon : e;
  int kind = find_name(KIND_NAMES, FAULT_KINDS, s, name_end);
  if (kind == FAULT_KINDS)
    return err_set(gcclInvalidUsage,
                   "GCCL_FAULT: unknown fault \"%.*s\" (drop, delay, truncate, duplicate, flip or stop)",
                   (int)(name_end - s), s);
  *r = (struct fault_rule){.kind = (enum fault_kind)kind};
  unsigned seen = 0;
  uint64_t val[KEYS] = {0};
  for (const char* k = colon ? colon + 1 : e; k < e;) {
    const char* comma = memchr(k, ',', (size_t)(e - k));
    const char* item_end = comma ? comma : e;
    const char* eq = memchr(k, '=', (size_t)(item_end - k));
    const char* key_end = eq ? eq : item_end;
    int key = find_name(KEY_NAMES, KEYS, k, key_end);
    if (key == KEYS || !((REQUIRED[kind] | OPTIONAL_KEYS(kind)) & K(key)))
      return err_set(gcclInvalidUsage, "GCCL_FAULT: %s takes no key \"%.*s\"", KIND_NAMES[kind], (int)(key_end - k), k);
    if (seen & K(key))
      return err_set(gcclInvalidUsage, "GCCL_FAULT: %s gives %s twice", KIND_NAMES[kind], KEY_NAMES[key]);
    seen |= K(key);
    uint64_t max = key == KEY_BIT ? 7 : (key == KEY_RANK || key == KEY_PEER) ? (uint64_t)nranks - 1 : UINT64_MAX;
    if (key == KEY_MS) max = 3600000; /* an hour: longer is surely a typo */
    uint64_t v = 0;
    if (!eq || !parse_uint(eq + 1, item_end, max, &v) || ((key == KEY_SEND || key == KEY_OP) && v == 0))
      return err_set(gcclInvalidUsage, "GCCL_FAULT: %s: \"%.*s\" is not %s=N with N a decimal integer in [%d, %llu]",
                     KIND_NAMES[kind], (int)(item_end - k), k, KEY_NAMES[key],
                     (key == KEY_SEND || key == KEY_OP) ? 1 : 0, (unsigned long long)max);
    val[key] = v;
    k = comma ? comma + 1 : e;
    if (comma && k == e) return err_set(gcclInvalidUsage, "GCCL_FAULT: %s ends with a comma", KIND_NAMES[kind]);
  }
  r->rank = (int)val[KEY_RANK];
  r->peer = seen & K(KEY_PEER) ? (int)val[KEY_PEER] : -1;
  r->send = val[KEY_SEND];
  r->op = val[KEY_OP];
  r->ms = val[KEY_MS];
  r->bytes = val[KEY_BYTES];
  r->byte = val[KEY_BYTE];
  r->bit = (int)val[KEY_BIT];
  unsigned missing = REQUIRED[kind] & ~seen;
  if (missing) {
    int key = 0;
    while (!(missing & K(key))) key++;
    return err_set(gcclInvalidUsage, "GCCL_FAULT: %s needs %s=N", KIND_NAMES[kind], KEY_NAMES[key]);
  }
  if (r->peer == r->rank)
    return err_set(gcclInvalidUsage, "GCCL_FAULT: %s: rank %d sends nothing to itself (peer=%d)", KIND_NAMES[kind],
                   r->rank, r->peer);
  return gcclSuccess;
}

gcclResult_t fault_config_parse(struct fault_config* cfg, const char* text, int nranks) {
  cfg->n = 0;
  if (!text || !*text) return err_set(gcclInvalidUsage, "GCCL_FAULT is empty");
  for (const char* s = text;;) {
    const char* semi = strchr(s, ';');
    const char* e = semi ? semi : s + strlen(s);
    if (cfg->n == FAULT_RULES_MAX)
      return err_set(gcclInvalidUsage, "GCCL_FAULT: more than %d faults in \"%s\"", FAULT_RULES_MAX, text);
    if (e == s) return err_set(gcclInvalidUsage, "GCCL_FAULT: an empty fault in \"%s\"", text);
    gcclResult_t res = parse_rule(&cfg->rules[cfg->n], s, e, nranks);
    if (res != gcclSuccess) {
      char why[256];
      snprintf(why, sizeof why, "%s", err_last());
      return err_set(res, "%s (in GCCL_FAULT=\"%s\"; src/transport/fault.h has the syntax)", why, text);
    }
    cfg->n++;
    if (!semi) break;
    s = semi + 1;
  }
  return gcclSuccess;
}

/* ---- the decorator -------------------------------------------------------------- */

struct fault_req {
  int used;
  tp_req inner; /* -1: no inner request (a dropped message) */
  void* copy;   /* the private copy sent instead of the caller's buffer, or NULL */
};

struct fault_tp {
  struct transport base;
  struct transport* inner;
  struct fault_rule rules[FAULT_RULES_MAX]; /* this rank's only */
  int nrules;
  int fired[FAULT_RULES_MAX];
  uint64_t sends;     /* posted so far */
  uint64_t* sends_to; /* [nranks] posted so far to each peer */
  uint64_t ops;       /* operations so far */
  int stopped;        /* a stop fired: every operation fails */
  struct fault_req* reqs;
  int nreqs;
  /* Copies sent without a request of the caller's: duplicates, and the copies of
   * sends whose wait failed (the inner transport may still read them). */
  void** orphans;
  int norphans, orphans_cap;

  pthread_mutex_t mu; /* guards what follows; abort may come from any thread */
  pthread_cond_t cv;
  int aborted;
  uint64_t injected[FAULT_KINDS];
};

static const struct transport_ops fault_ops;

static struct fault_tp* ft(struct transport* tp) {
  return (struct fault_tp*)tp;
}

static void count_injected(struct fault_tp* t, const struct fault_rule* r, size_t bytes, int peer) {
  pthread_mutex_lock(&t->mu);
  t->injected[r->kind]++;
  pthread_mutex_unlock(&t->mu);
  if (r->kind == FAULT_STOP)
    GCCL_INFO(LOG_TRANSPORT, "GCCL_FAULT: rank %d stops at its operation %llu", t->base.rank,
              (unsigned long long)r->op);
  else
    GCCL_INFO(LOG_TRANSPORT, "GCCL_FAULT: %s of send %llu%s of rank %d (to rank %d, %zu bytes)", KIND_NAMES[r->kind],
              (unsigned long long)r->send, r->peer >= 0 ? " to the peer" : "", t->base.rank, peer, bytes);
}

/* Sleeps until the deadline (0: until woken by abort or the inner transport's
 * failure); returns non-zero when the communicator was aborted or broke. */
static int sleep_until(struct fault_tp* t, int64_t deadline_ns) {
  int broke = 0;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    broke = t->aborted || t->inner->ops->broken(t->inner) != gcclSuccess;
    int64_t now = clock_now_ns();
    if (broke || (deadline_ns && now >= deadline_ns)) break;
    if (!deadline_ns) {
      pthread_mutex_unlock(&t->mu);
      tp_progress(t->inner);
      pthread_mutex_lock(&t->mu);
    }
    int64_t until = now + FAULT_POLL_NS;
    if (deadline_ns && deadline_ns < until) until = deadline_ns;
    struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
  }
  pthread_mutex_unlock(&t->mu);
  return broke;
}

/* Counts an operation; the chosen one of a stop blocks until the communicator is
 * aborted or broken. Fails once the rank has stopped. */
static gcclResult_t enter_op(struct fault_tp* t) {
  t->ops++;
  for (int i = 0; i < t->nrules && !t->stopped; i++) {
    const struct fault_rule* r = &t->rules[i];
    if (r->kind != FAULT_STOP || t->fired[i] || r->op != t->ops) continue;
    t->fired[i] = 1;
    count_injected(t, r, 0, -1);
    sleep_until(t, 0);
    t->stopped = 1;
  }
  if (t->stopped)
    return err_set(gcclRemoteError, "rank %d stopped responding (GCCL_FAULT stop) and its communicator was aborted",
                   t->base.rank);
  return gcclSuccess;
}

static gcclResult_t req_alloc(struct fault_tp* t, tp_req* h) {
  for (int i = 0; i < t->nreqs; i++)
    if (!t->reqs[i].used) {
      t->reqs[i] = (struct fault_req){.used = 1, .inner = -1};
      *h = i;
      return gcclSuccess;
    }
  int n = t->nreqs ? 2 * t->nreqs : 16;
  struct fault_req* grown = realloc(t->reqs, (size_t)n * sizeof *grown);
  if (!grown) return err_set(gcclSystemError, "out of memory in the fault injector");
  memset(grown + t->nreqs, 0, (size_t)(n - t->nreqs) * sizeof *grown);
  t->reqs = grown;
  *h = t->nreqs;
  t->nreqs = n;
  t->reqs[*h] = (struct fault_req){.used = 1, .inner = -1};
  return gcclSuccess;
}

/* Keeps `copy` until cancel_all or destroy; frees it at once if that fails. */
static gcclResult_t keep_orphan(struct fault_tp* t, void* copy) {
  if (t->norphans == t->orphans_cap) {
    int n = t->orphans_cap ? 2 * t->orphans_cap : 8;
    void** grown = realloc(t->orphans, (size_t)n * sizeof *grown);
    if (!grown) {
      free(copy); /* only reachable before the copy was posted */
      return err_set(gcclSystemError, "out of memory in the fault injector");
    }
    t->orphans = grown;
    t->orphans_cap = n;
  }
  t->orphans[t->norphans++] = copy;
  return gcclSuccess;
}

static void free_orphans(struct fault_tp* t) {
  for (int i = 0; i < t->norphans; i++) free(t->orphans[i]);
  t->norphans = 0;
}

/* The message fault chosen for this send, if any (marked fired). */
static const struct fault_rule* choose(struct fault_tp* t, int peer) {
  t->sends++;
  t->sends_to[peer]++;
  for (int i = 0; i < t->nrules; i++) {
    const struct fault_rule* r = &t->rules[i];
    if (r->kind == FAULT_STOP || t->fired[i]) continue;
    if (r->peer >= 0 ? (r->peer == peer && r->send == t->sends_to[peer]) : r->send == t->sends) {
      t->fired[i] = 1;
      return r;
    }
  }
  return NULL;
}

static void* copy_of(const void* buf, size_t bytes) {
  void* c = malloc(bytes ? bytes : 1);
  if (c && bytes) memcpy(c, buf, bytes);
  return c;
}

static gcclResult_t fault_isend(struct transport* tp, int peer, const void* buf, size_t bytes, tp_req* h) {
  struct fault_tp* t = ft(tp);
  GCCL_CHECK(enter_op(t));
  const struct fault_rule* r = choose(t, peer);
  if (r && ((r->kind == FAULT_TRUNCATE && r->bytes >= bytes) || (r->kind == FAULT_FLIP && r->byte >= bytes))) {
    GCCL_WARN("GCCL_FAULT: %s of send %llu of rank %d not injected: the message has %zu bytes", KIND_NAMES[r->kind],
              (unsigned long long)r->send, tp->rank, bytes);
    r = NULL;
  }
  GCCL_CHECK(req_alloc(t, h));
  struct fault_req* q = &t->reqs[*h];
  const void* sbuf = buf;
  size_t sbytes = bytes;
  gcclResult_t res = gcclSuccess;
  if (r && r->kind == FAULT_DELAY) sleep_until(t, clock_now_ns() + (int64_t)r->ms * 1000000);
  if (r && r->kind == FAULT_TRUNCATE) sbytes = (size_t)r->bytes;
  if (r && (r->kind == FAULT_FLIP || r->kind == FAULT_DUPLICATE)) {
    q->copy = copy_of(buf, bytes);
    if (!q->copy) res = err_set(gcclSystemError, "out of memory in the fault injector");
  }
  if (res == gcclSuccess && r && r->kind == FAULT_FLIP) {
    ((unsigned char*)q->copy)[r->byte] ^= (unsigned char)(1u << r->bit);
    sbuf = q->copy;
  }
  if (res == gcclSuccess && !(r && r->kind == FAULT_DROP))
    res = t->inner->ops->isend(t->inner, peer, sbuf, sbytes, &q->inner);
  if (res == gcclSuccess && r && r->kind == FAULT_DUPLICATE) {
    void* dup = q->copy; /* the duplicate reads the copy; the original, the caller's buffer */
    q->copy = NULL;
    tp_req ignored;
    res = keep_orphan(t, dup);
    if (res == gcclSuccess) res = t->inner->ops->isend(t->inner, peer, dup, bytes, &ignored);
  }
  if (res != gcclSuccess) { /* the caller's cancel_all withdraws what was posted */
    if (q->copy) keep_orphan(t, q->copy);
    *q = (struct fault_req){.inner = -1};
    return res;
  }
  if (r) count_injected(t, r, bytes, peer);
  return gcclSuccess;
}

static gcclResult_t fault_irecv_upto(struct transport* tp, int peer, void* buf, size_t cap, size_t* got, tp_req* h) {
  struct fault_tp* t = ft(tp);
  GCCL_CHECK(enter_op(t));
  GCCL_CHECK(req_alloc(t, h));
  struct fault_req* q = &t->reqs[*h];
  gcclResult_t res = got ? t->inner->ops->irecv_upto(t->inner, peer, buf, cap, got, &q->inner)
                         : t->inner->ops->irecv(t->inner, peer, buf, cap, &q->inner);
  if (res != gcclSuccess) q->used = 0;
  return res;
}

static gcclResult_t fault_irecv(struct transport* tp, int peer, void* buf, size_t bytes, tp_req* h) {
  return fault_irecv_upto(tp, peer, buf, bytes, NULL, h);
}

static gcclResult_t fault_wait(struct transport* tp, tp_req h) {
  struct fault_tp* t = ft(tp);
  if (h < 0 || h >= t->nreqs || !t->reqs[h].used)
    return err_set(gcclInternalError, "wait on an invalid request handle %d", h);
  struct fault_req q = t->reqs[h];
  t->reqs[h] = (struct fault_req){.inner = -1}; /* released whatever the result, as the contract says */
  gcclResult_t res = enter_op(t);
  if (res == gcclSuccess && q.inner >= 0) res = t->inner->ops->wait(t->inner, q.inner);
  if (q.copy && res == gcclSuccess)
    free(q.copy);
  else if (q.copy)
    keep_orphan(t, q.copy); /* a failed send may still be read until cancel_all */
  return res;
}

static gcclResult_t fault_allgather_small(struct transport* tp, const void* in, size_t bytes, void* out) {
  struct fault_tp* t = ft(tp);
  GCCL_CHECK(enter_op(t));
  return t->inner->ops->allgather_small(t->inner, in, bytes, out);
}

static gcclResult_t fault_barrier(struct transport* tp) {
  struct fault_tp* t = ft(tp);
  GCCL_CHECK(enter_op(t));
  return t->inner->ops->barrier(t->inner);
}

static void fault_cancel_all(struct transport* tp) {
  struct fault_tp* t = ft(tp);
  t->inner->ops->cancel_all(t->inner);
  /* No peer reads this rank's buffers any more: the copies can go. */
  for (int i = 0; i < t->nreqs; i++) {
    free(t->reqs[i].copy);
    t->reqs[i] = (struct fault_req){.inner = -1};
  }
  free_orphans(t);
}

static void fault_abort(struct transport* tp, gcclResult_t reason) {
  struct fault_tp* t = ft(tp);
  pthread_mutex_lock(&t->mu);
  t->aborted = 1;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  t->inner->ops->abort(t->inner, reason);
}

static gcclResult_t fault_broken(struct transport* tp) {
  return ft(tp)->inner->ops->broken(ft(tp)->inner);
}

static void fault_progress(struct transport* tp) {
  tp_progress(ft(tp)->inner);
}

static void fault_hear_peers(struct transport* tp) {
  tp_hear_peers(ft(tp)->inner);
}

static void fault_destroy(struct transport* tp) {
  struct fault_tp* t = ft(tp);
  t->inner->ops->destroy(t->inner); /* withdraws what is pending first */
  for (int i = 0; i < t->nreqs; i++) free(t->reqs[i].copy);
  free_orphans(t);
  free(t->reqs);
  free(t->orphans);
  free(t->sends_to);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  free(t);
}

static const struct transport_ops fault_ops = {
    .name = "fault-injection",
    .isend = fault_isend,
    .irecv = fault_irecv,
    .irecv_upto = fault_irecv_upto,
    .wait = fault_wait,
    .allgather_small = fault_allgather_small,
    .barrier = fault_barrier,
    .cancel_all = fault_cancel_all,
    .abort = fault_abort,
    .broken = fault_broken,
    .destroy = fault_destroy,
    .progress = fault_progress,
    .hear_peers = fault_hear_peers,
};

gcclResult_t fault_transport_create(struct transport** out, struct transport* inner, const struct fault_config* cfg) {
  *out = NULL;
  struct fault_tp* t = calloc(1, sizeof *t);
  if (t) t->sends_to = calloc((size_t)inner->nranks, sizeof *t->sends_to);
  if (!t || !t->sends_to) {
    free(t);
    return err_set(gcclSystemError, "out of memory creating the fault injector");
  }
  t->base.ops = &fault_ops;
  t->base.rank = inner->rank;
  t->base.nranks = inner->nranks;
  t->base.shares_address_space = 0; /* every byte through the messages it can alter */
  t->base.caller_thread_only = inner->caller_thread_only;
  t->inner = inner;
  for (int i = 0; i < cfg->n; i++)
    if (cfg->rules[i].rank == inner->rank) t->rules[t->nrules++] = cfg->rules[i];
  pthread_mutex_init(&t->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  *out = &t->base;
  return gcclSuccess;
}

struct transport* fault_transport_inner(struct transport* tp) {
  return tp && tp->ops == &fault_ops ? ft(tp)->inner : tp;
}

void fault_transport_injected(struct transport* tp, uint64_t counts[FAULT_KINDS]) {
  memset(counts, 0, FAULT_KINDS * sizeof *counts);
  if (!tp || tp->ops != &fault_ops) return;
  pthread_mutex_lock(&ft(tp)->mu);
  memcpy(counts, ft(tp)->injected, sizeof ft(tp)->injected);
  pthread_mutex_unlock(&ft(tp)->mu);
}
