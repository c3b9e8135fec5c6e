/* handles.c — a process-wide set of live handles, and the quarantine of dead ones.
 *
 * The set is an open-addressing hash table (linear probing, deletion by backward
 * shift) under one mutex: a lookup is a hash and a probe or two, small next to any
 * collective, and programs hold hundreds of compressors at most. */
#include "core/handles.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/result.h"

struct slot {
  const void* p; /* NULL: empty */
  enum handle_kind kind;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot* table;
static size_t capacity, used; /* capacity: 0 or a power of two, at most half used */
static void* quarantine[HANDLE_QUARANTINE];
static size_t quarantine_next;

static size_t home(const void* p) {
  uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing */
  return (size_t)(h >> 32) & (capacity - 1);
}

/* The slot holding p, or the empty slot where the probe for p ends. Needs capacity > 0. */
static size_t probe(const void* p) {
  size_t i = home(p);
  while (table[i].p && table[i].p != p) i = (i + 1) & (capacity - 1);
  return i;
}

static int grow(void) {
  size_t old_cap = capacity, cap = capacity ? 2 * capacity : 64;
  struct slot* old = table;
  struct slot* fresh = calloc(cap, sizeof *fresh);
  if (!fresh) return 0;
  table = fresh;
  capacity = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].p) table[probe(old[i].p)] = old[i];
  free(old);
  return 1;
}

gcclResult_t handle_add(enum handle_kind kind, void* p) {
  pthread_mutex_lock(&mu);
  int ok = 2 * (used + 1) <= capacity || grow();
  if (ok) {
    size_t i = probe(p);
    if (!table[i].p) used++;
    table[i] = (struct slot){p, kind};
  }
  pthread_mutex_unlock(&mu);
  return ok ? gcclSuccess : err_set(gcclSystemError, "out of memory registering a handle");
}

int handle_live(enum handle_kind kind, const void* p) {
  if (!p) return 0;
  pthread_mutex_lock(&mu);
  int live = 0;
  if (capacity) {
    size_t i = probe(p);
    live = table[i].p == p && table[i].kind == kind;
  }
  pthread_mutex_unlock(&mu);
  return live;
}

/* Removes slot i and moves later entries of its probe run back, so every probe
 * still finds its entry without tombstones. */
static void remove_at(size_t i) {
  size_t mask = capacity - 1;
  table[i].p = NULL;
  used--;
  for (size_t j = (i + 1) & mask; table[j].p; j = (j + 1) & mask) {
    size_t h = home(table[j].p);
    /* j's entry may fill the hole at i unless its home lies cyclically in (i, j]. */
    int stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
    if (stays) continue;
    table[i] = table[j];
    table[j].p = NULL;
    i = j;
  }
}

void handle_retire(enum handle_kind kind, void* p) {
  if (!p) return;
  pthread_mutex_lock(&mu);
  if (capacity) {
    size_t i = probe(p);
    if (table[i].p == p && table[i].kind == kind) remove_at(i);
  }
  void* oldest = quarantine[quarantine_next];
  quarantine[quarantine_next] = p;
  quarantine_next = (quarantine_next + 1) % HANDLE_QUARANTINE;
  pthread_mutex_unlock(&mu);
  free(oldest);
}

/* At exit the quarantine's objects are freed, so leak checkers see nothing held. */
__attribute__((destructor)) static void handles_release(void) {
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < HANDLE_QUARANTINE; i++) {
    free(quarantine[i]);
    quarantine[i] = NULL;
  }
  if (used == 0) { /* live handles keep the table: they may still be used by other destructors */
    free(table);
    table = NULL;
    capacity = 0;
  }
  pthread_mutex_unlock(&mu);
}
