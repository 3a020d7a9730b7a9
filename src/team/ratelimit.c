/* ratelimit.c - per key token buckets for rpm and tpm.
 *
 * Levels are kept in integer units of 1/60000 token so that refilling
 * `limit` tokens per minute adds exactly `limit` units per millisecond: no
 * floating point drift, exact results under a synthetic clock.
 *
 * rpm: capacity rpm, one token per request, refused when less than one.
 * tpm: capacity tpm, charged after the fact with the tokens a request used;
 * it may go negative (debt), and requests are refused until it is back to
 * zero or above.
 */
#include "proxai/ratelimit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/shm.h"

#define UNITS_PER_TOKEN 60000 /* ms per minute */
/* Debt floor: about 10^13 tokens, far past any real request, keeps the
 * arithmetic away from overflow. */
#define DEBT_FLOOR (-(INT64_MAX / 4))
/* Limits above this (10^12 per minute) are treated as this. */
#define LIMIT_MAX 1000000000000ULL
/* Keys with buckets on this host: configuration names, so few; a full table
 * fails open (a key it cannot hold is not limited). */
#define RL_SLOTS 2048
#define RL_NAME 120

typedef struct bucket {
  int64_t level;  /* units */
  uint64_t limit; /* per minute; 0 = not initialised */
  uint64_t last;  /* ms of the last refill */
} bucket_t;

/* One key's buckets in the shared mapping. `ready` is published last
 * (release): a lookup that sees it sees the name. Names longer than
 * RL_NAME - 1 bytes are told apart by their full hash. */
typedef struct rl_entry {
  pthread_mutex_t mu;
  uint32_t ready;
  uint64_t hash;
  char name[RL_NAME];
  bucket_t rpm, tpm;
} rl_entry_t;

typedef struct rl_shm {
  pthread_mutex_t mu; /* taken only to create an entry */
  rl_entry_t e[RL_SLOTS];
} rl_shm_t;

static size_t region_size(unsigned nworkers) {
  return sizeof(rl_shm_t);
}

static void region_setup(void *p, unsigned nworkers) {
  px_shm_mutex_init(&((rl_shm_t *)p)->mu);
}

px_shm_region_t px_rl_region = {.name = "ratelimit", .size = region_size, .setup = region_setup};

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

static int entry_is(const rl_entry_t *e, uint64_t h, const char *key) {
  return e->hash == h && strncmp(e->name, key, RL_NAME - 1) == 0;
}

/* The key's entry, locked; NULL when the table is full. */
static rl_entry_t *lookup(const char *key) {
  rl_shm_t *t = px_shm_get(&px_rl_region);
  if (!t) return NULL;
  if (!key) key = "";
  uint64_t h = hash_str(key);
  size_t j = h & (RL_SLOTS - 1);
  for (size_t n = 0; n < RL_SLOTS; n++, j = (j + 1) & (RL_SLOTS - 1)) {
    rl_entry_t *e = &t->e[j];
    if (!__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE)) {
      px_shm_lock(&t->mu);
      if (!e->ready) { /* still free: ours */
        px_shm_mutex_init(&e->mu);
        e->hash = h;
        snprintf(e->name, sizeof(e->name), "%s", key);
        memset(&e->rpm, 0, sizeof(e->rpm));
        memset(&e->tpm, 0, sizeof(e->tpm));
        __atomic_store_n(&e->ready, 1, __ATOMIC_RELEASE);
      }
      px_shm_unlock(&t->mu);
    }
    if (entry_is(e, h, key)) {
      px_shm_lock(&e->mu);
      return e;
    }
  }
  return NULL;
}

/* Bring the bucket up to now under the current limit. A bucket seen for the
 * first time starts full; a lowered limit (reload) clips the level. */
static void refill(bucket_t *b, uint64_t limit, uint64_t now) {
  if (limit > LIMIT_MAX) limit = LIMIT_MAX;
  int64_t cap = (int64_t)limit * UNITS_PER_TOKEN;
  if (b->limit == 0) {
    b->level = cap;
    b->last = now;
    b->limit = limit;
    return;
  }
  b->limit = limit;
  if (now > b->last) {
    uint64_t dt = now - b->last;
    int64_t room = cap - b->level;
    if (room <= 0)
      b->level = cap;
    else if (dt >= (uint64_t)room / limit + 1)
      b->level = cap;
    else
      b->level += (int64_t)(dt * limit);
    b->last = now;
  }
  if (b->level > cap) b->level = cap;
}

/* Whole seconds (rounded up, >= 1) until the level reaches target units. */
static unsigned wait_secs(const bucket_t *b, int64_t target) {
  uint64_t need = (uint64_t)(target - b->level);
  uint64_t per_s = b->limit * 1000; /* units per second */
  uint64_t s = (need + per_s - 1) / per_s;
  if (s < 1) s = 1;
  return s > 0xffffffffu ? 0xffffffffu : (unsigned)s;
}

unsigned px_rl_admit(const char *key, uint64_t rpm, uint64_t tpm, uint64_t now_ms) {
  if (rpm == 0 && tpm == 0) return 0;
  rl_entry_t *e = lookup(key);
  if (!e) return 0; /* table full: fail open rather than refuse everyone */
  unsigned wait = 0;
  if (tpm) {
    refill(&e->tpm, tpm, now_ms);
    if (e->tpm.level < 0) wait = wait_secs(&e->tpm, 0);
  }
  if (rpm && !wait) {
    refill(&e->rpm, rpm, now_ms);
    if (e->rpm.level < UNITS_PER_TOKEN)
      wait = wait_secs(&e->rpm, UNITS_PER_TOKEN);
    else
      e->rpm.level -= UNITS_PER_TOKEN;
  }
  px_shm_unlock(&e->mu);
  return wait;
}

void px_rl_charge(const char *key, uint64_t tpm, uint64_t tokens, uint64_t now_ms) {
  if (tpm == 0 || tokens == 0) return;
  rl_entry_t *e = lookup(key);
  if (!e) return;
  refill(&e->tpm, tpm, now_ms);
  int64_t room = e->tpm.level - DEBT_FLOOR;
  if (tokens >= (uint64_t)room / UNITS_PER_TOKEN)
    e->tpm.level = DEBT_FLOOR;
  else
    e->tpm.level -= (int64_t)tokens * UNITS_PER_TOKEN;
  px_shm_unlock(&e->mu);
}

void px_rl_reset(void) {
  rl_shm_t *t = px_shm_get(&px_rl_region);
  if (!t) return;
  px_shm_lock(&t->mu);
  for (size_t i = 0; i < RL_SLOTS; i++)
    __atomic_store_n(&t->e[i].ready, 0, __ATOMIC_RELEASE);
  px_shm_unlock(&t->mu);
}

/* ---------------------------------------------------------------------- */
/* backend dispatch                                                         */

#include "proxai/state_redis.h"

px_rl_verdict_t px_rl_check(const px_key_conf_t *k, uint64_t reserve, uint64_t now_ms,
                            unsigned *retry_after, px_rl_done_fn done, void *arg,
                            px_rl_wait_t **wait) {
  if (k->rpm == 0 && k->tpm == 0) return PX_RL_ALLOW;
  if (px_redis_running())
    return px_redis_admit(k->name, k->rpm, k->tpm, k->tpm ? reserve : 0, now_ms,
                          retry_after, done, arg, wait);
  unsigned w = px_rl_admit(k->name, k->rpm, k->tpm, now_ms);
  if (w == 0) return PX_RL_ALLOW;
  *retry_after = w;
  return PX_RL_LIMITED;
}

void px_rl_cancel(px_rl_wait_t *w) {
  if (w) px_redis_cancel(w);
}

void px_rl_settle(const px_key_conf_t *k, uint64_t reserved, uint64_t used,
                  uint64_t now_ms) {
  if (k->tpm == 0) return;
  if (px_redis_running()) {
    if (used != reserved)
      px_redis_settle(k->name, k->tpm, (int64_t)used - (int64_t)reserved);
    return;
  }
  px_rl_charge(k->name, k->tpm, used, now_ms);
}

int px_rl_reserves(void) {
  return px_redis_running();
}

int px_rl_start(uv_loop_t *loop, const px_config_t *cfg) {
  if (cfg->state.backend != PX_STATE_REDIS) return 0;
  return px_redis_start(loop, &cfg->state);
}

void px_rl_stop(void) {
  px_redis_stop();
}
