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
 *
 * With [state] backend = redis the same table holds the buckets of
 * on_error = local: during an outage each key gets ceil(limit / instances)
 * here. Entries carry the outage they belong to (epoch), so every bucket
 * starts full at each outage.
 */
#include "proxai/ratelimit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
  uint32_t epoch; /* 0: backend = local; else the outage of on_error = local */
  uint64_t hash;
  char name[RL_NAME];
  bucket_t rpm, tpm;
} rl_entry_t;

/* Worker slots whose outage flags are kept (more workers: counted as 0's) */
#define RL_WORKERS 1024

typedef struct rl_shm {
  pthread_mutex_t mu;       /* taken to create an entry, and for outages */
  uint32_t epoch;           /* outages of the shared backend seen by this host */
  uint8_t down[RL_WORKERS]; /* workers that find the backend unreachable now */
  char instance[96];        /* this instance's name in the shared backend's registry */
  uint32_t instances;       /* instances the registry last counted (0: not yet) */
  rl_entry_t e[RL_SLOTS];
} rl_shm_t;

static size_t region_size(unsigned nworkers) {
  return sizeof(rl_shm_t);
}

static void region_setup(void *p, unsigned nworkers) {
  rl_shm_t *t = p;
  px_shm_mutex_init(&t->mu);
  /* set before the workers fork: all of them share it */
  char host[64] = "";
  gethostname(host, sizeof(host) - 1);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(t->instance, sizeof(t->instance), "%s:%ld:%lld.%09ld", host, (long)getpid(),
           (long long)ts.tv_sec, ts.tv_nsec);
}

px_shm_region_t px_rl_region = {.name = "ratelimit", .size = region_size, .setup = region_setup};

const char *px_rl_instance(void) {
  rl_shm_t *t = px_shm_get(&px_rl_region);
  return t ? t->instance : "";
}

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

/* The key's entry of that epoch, locked; NULL when the table is full. An
 * entry of another epoch starts again with full buckets. */
static rl_entry_t *lookup(const char *key, uint32_t epoch) {
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
      if (e->epoch != epoch) {
        memset(&e->rpm, 0, sizeof(e->rpm));
        memset(&e->tpm, 0, sizeof(e->tpm));
        e->epoch = epoch;
      }
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

static unsigned admit_at(const char *key, uint64_t rpm, uint64_t tpm, uint64_t now_ms,
                         uint32_t epoch) {
  if (rpm == 0 && tpm == 0) return 0;
  rl_entry_t *e = lookup(key, epoch);
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

unsigned px_rl_admit(const char *key, uint64_t rpm, uint64_t tpm, uint64_t now_ms) {
  return admit_at(key, rpm, tpm, now_ms, 0);
}

static void charge_at(const char *key, uint64_t tpm, uint64_t tokens, uint64_t now_ms,
                      uint32_t epoch) {
  if (tpm == 0 || tokens == 0) return;
  rl_entry_t *e = lookup(key, epoch);
  if (!e) return;
  refill(&e->tpm, tpm, now_ms);
  int64_t room = e->tpm.level - DEBT_FLOOR;
  if (tokens >= (uint64_t)room / UNITS_PER_TOKEN)
    e->tpm.level = DEBT_FLOOR;
  else
    e->tpm.level -= (int64_t)tokens * UNITS_PER_TOKEN;
  px_shm_unlock(&e->mu);
}

void px_rl_charge(const char *key, uint64_t tpm, uint64_t tokens, uint64_t now_ms) {
  charge_at(key, tpm, tokens, now_ms, 0);
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

#include "proxai/inflight.h"
#include "proxai/metrics.h"
#include "proxai/state_redis.h"

static px_on_error_t g_on_error;

/* The current outage's epoch (on_error = local), 0 when there is none. */
static uint32_t outage_epoch(void) {
  rl_shm_t *t = px_shm_get(&px_rl_region);
  return t ? __atomic_load_n(&t->epoch, __ATOMIC_ACQUIRE) : 0;
}

void px_rl_set_instances(unsigned n) {
  rl_shm_t *t = px_shm_get(&px_rl_region);
  if (t) __atomic_store_n(&t->instances, n, __ATOMIC_RELAXED);
  px_metrics_state_instances(n);
}

/* ceil(limit / n), n the instances last counted: this instance's share
 * while the shared buckets are out of reach (0 stays unlimited). */
static uint64_t share(uint64_t limit) {
  rl_shm_t *t = px_shm_get(&px_rl_region);
  unsigned n = t ? __atomic_load_n(&t->instances, __ATOMIC_RELAXED) : 1;
  return n > 1 ? (limit + n - 1) / n : limit;
}

void px_rl_outage(int down) {
  rl_shm_t *t = px_shm_get(&px_rl_region);
  unsigned me = px_shm_worker();
  if (!t || me >= RL_WORKERS) return;
  px_shm_lock(&t->mu);
  if (down) {
    int any = 0;
    for (unsigned i = 0; i < px_shm_nworkers() && i < RL_WORKERS; i++) any |= t->down[i];
    if (!any) __atomic_store_n(&t->epoch, t->epoch + 1, __ATOMIC_RELEASE);
  }
  t->down[me] = down != 0;
  px_shm_unlock(&t->mu);
}

void px_rl_worker_gone(unsigned worker) {
  rl_shm_t *t = px_shm_get(&px_rl_region);
  if (!t || worker >= RL_WORKERS) return;
  px_shm_lock(&t->mu);
  t->down[worker] = 0;
  px_shm_unlock(&t->mu);
}

px_rl_verdict_t px_rl_fallback(const char *key, uint64_t rpm, uint64_t tpm,
                               unsigned flags, uint64_t now_ms, unsigned *retry_after) {
  if (flags & PX_RL_STRICT) {
    px_metrics_state("redis", "refused");
    return PX_RL_UNAVAILABLE;
  }
  if (g_on_error == PX_ON_ERROR_DENY) {
    px_metrics_state("redis", "denied");
    return PX_RL_UNAVAILABLE;
  }
  if (g_on_error == PX_ON_ERROR_ALLOW) {
    px_metrics_state("redis", "allowed");
    return PX_RL_OPEN;
  }
  px_metrics_state("redis", "local");
  unsigned w = admit_at(key, share(rpm), share(tpm), now_ms, outage_epoch());
  if (w == 0) return PX_RL_LOCAL;
  *retry_after = w;
  return PX_RL_LIMITED;
}

px_rl_verdict_t px_rl_check(const px_key_conf_t *k, uint64_t reserve, unsigned flags,
                            uint64_t now_ms, unsigned *retry_after, px_rl_done_fn done,
                            void *arg, px_rl_wait_t **wait) {
  if (k->rpm == 0 && k->tpm == 0 && !(flags & PX_RL_STRICT)) return PX_RL_ALLOW;
  if (px_redis_running())
    return px_redis_admit(k->name, k->rpm, k->tpm, k->tpm ? reserve : 0, flags, now_ms,
                          retry_after, done, arg, wait);
  unsigned w = px_rl_admit(k->name, k->rpm, k->tpm, now_ms);
  if (w == 0) return PX_RL_ALLOW;
  *retry_after = w;
  return PX_RL_LIMITED;
}

void px_rl_cancel(px_rl_wait_t *w) {
  if (w) px_redis_cancel(w);
}

void px_rl_settle(const px_key_conf_t *k, uint64_t reserved, uint64_t used, int local,
                  uint64_t now_ms) {
  if (k->tpm == 0) return;
  if (local) {
    charge_at(k->name, share(k->tpm), used, now_ms, outage_epoch());
    return;
  }
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

void px_rl_release_lost(const px_config_t *cfg, const px_inflight_rec_t *recs, size_t n) {
  /* the local backend reserves nothing (it charges at the end): only the
   * shared one holds reservations */
  if (n > 0 && cfg->state.backend == PX_STATE_REDIS)
    px_redis_release(&cfg->state, recs, n);
}

int px_rl_start(uv_loop_t *loop, const px_config_t *cfg) {
  g_on_error = cfg->state.on_error;
  if (cfg->state.backend != PX_STATE_REDIS) return 0;
  return px_redis_start(loop, &cfg->state);
}

void px_rl_stop(void) {
  px_redis_stop();
}
