/* inflight.c - each worker's requests in flight, in the host's shared
 * memory (see inflight.h).
 *
 * One part per worker slot: a counter of started, unfinished requests on
 * its own cache line, then the records. The free records are a stack in the
 * worker's private memory (the master has no use for it), so taking one is
 * a pop and a few stores, and the most recently used records are reused
 * first: the pages of a mostly idle table are never touched.
 */
#include "proxai/inflight.h"

#include <stdlib.h>
#include <string.h>

#include "proxai/shm.h"

typedef struct part {
  int64_t n; /* started, not finished */
  char pad[56];
  px_inflight_rec_t rec[PX_INFLIGHT_RECS];
} part_t;

static size_t region_size(unsigned nworkers) {
  return (size_t)nworkers * sizeof(part_t);
}

/* all zero: nothing in flight, no setup */
px_shm_region_t px_inflight_region = {.name = "inflight", .size = region_size};

static part_t *g_me; /* this process's part, found on first use (after fork) */
static uint16_t g_free[PX_INFLIGHT_RECS];
static unsigned g_nfree;

static part_t *me(void) {
  if (g_me == NULL) {
    part_t *t = px_shm_get(&px_inflight_region);
    if (t == NULL) return NULL;
    g_me = &t[px_shm_worker()];
    for (unsigned i = 0; i < PX_INFLIGHT_RECS; i++)
      g_free[i] = (uint16_t)(PX_INFLIGHT_RECS - 1 - i);
    g_nfree = PX_INFLIGHT_RECS;
  }
  return g_me;
}

void px_inflight_begin(void) {
  part_t *p = me();
  if (p) __atomic_store_n(&p->n, p->n + 1, __ATOMIC_RELAXED);
}

void px_inflight_end(void) {
  part_t *p = g_me;
  if (p) __atomic_store_n(&p->n, p->n - 1, __ATOMIC_RELAXED);
}

px_inflight_rec_t *px_inflight_hold(const char *key) {
  part_t *p = me();
  if (p == NULL || g_nfree == 0) return NULL;
  px_inflight_rec_t *r = &p->rec[g_free[--g_nfree]];
  size_t kl = strnlen(key, PX_INFLIGHT_KEY - 1);
  memcpy(r->key, key, kl);
  r->key[kl] = 0;
  r->tpm_reserved = r->tpm = 0;
  r->used = 1;
  return r;
}

void px_inflight_drop(px_inflight_rec_t *r) {
  if (r == NULL || g_me == NULL) return;
  r->used = 0;
  g_free[g_nfree++] = (uint16_t)(r - g_me->rec);
}

unsigned px_inflight_reap(unsigned worker, px_inflight_rec_t **recs, size_t *nrecs) {
  part_t *t = px_shm_get(&px_inflight_region);
  *recs = NULL;
  *nrecs = 0;
  if (t == NULL || worker >= px_shm_nworkers()) return 0;
  part_t *p = &t[worker];
  int64_t n = __atomic_load_n(&p->n, __ATOMIC_RELAXED);
  size_t held = 0;
  for (size_t i = 0; i < PX_INFLIGHT_RECS; i++) held += p->rec[i].used != 0;
  if (held > 0) *recs = malloc(held * sizeof(**recs));
  /* the replacement starts from an empty part */
  for (size_t i = 0; i < PX_INFLIGHT_RECS; i++) {
    if (!p->rec[i].used) continue;
    if (*recs) (*recs)[(*nrecs)++] = p->rec[i];
    p->rec[i].used = 0;
  }
  p->n = 0;
  return n > 0 ? (unsigned)n : 0;
}
