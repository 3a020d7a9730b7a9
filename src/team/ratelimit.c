/* ratelimit.c - per key token buckets for rpm and tpm, and budgets, on
 * this host (the local backend), and the dispatch to the Redis one.
 *
 * Levels are kept in integer units of 1/60000 token so that refilling
 * `limit` tokens per minute adds exactly `limit` units per millisecond: no
 * floating point drift, exact results under a synthetic clock.
 *
 * rpm: capacity rpm, one token per request, refused when less than one.
 * tpm: capacity tpm; an admission sets aside its token estimate while the
 * bucket is not in debt, the end of the request settles the real usage; it
 * may go negative (debt), and requests are refused until it is back to
 * zero or above.
 * budget: spend and reservations of the current window, nano-USD, on the
 * key's entry and on its team's (a team is an entry named "\x1f" NAME); an
 * admission must fit both. The spend is also added to the persistent store
 * ([state] dir) and read back from it when an entry starts a window (first
 * use after a restart, or a new day or month).
 *
 * An admission locks the key's entry, then its team's (always that order),
 * decides on everything, then takes everything: all or nothing. What each
 * worker has set aside is also counted per worker slot (held[]), so that
 * the master can release a dead worker's reservations.
 */
#include "proxai/ratelimit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/money.h"
#include "proxai/shm.h"
#include "proxai/store.h"

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

typedef struct budget {
  int64_t spend;    /* nano-USD in window `win` */
  int64_t reserved; /* nano-USD set aside by requests in flight */
  uint32_t win;     /* px_win_t.id; 0 = none read yet */
} budget_t;

/* What one worker has set aside on one entry. */
typedef struct held {
  int64_t tokens;
  int64_t nano;
} held_t;

/* One key's buckets in the shared mapping. `ready` is published last
 * (release): a lookup that sees it sees the name. Names longer than
 * RL_NAME - 1 bytes are told apart by their full hash. */
typedef struct rl_entry {
  pthread_mutex_t mu;
  uint32_t ready;
  uint64_t hash;
  char name[RL_NAME];
  bucket_t rpm, tpm;
  budget_t bud;
} rl_entry_t;

typedef struct rl_shm {
  pthread_mutex_t mu; /* taken only to create an entry */
  rl_entry_t e[RL_SLOTS];
  held_t held[]; /* [worker * RL_SLOTS + entry], under the entry's lock */
} rl_shm_t;

size_t px_rl_shm_size(unsigned nworkers) {
  return sizeof(rl_shm_t) + (size_t)(nworkers ? nworkers : 1) * RL_SLOTS * sizeof(held_t);
}

void px_rl_shm_setup(void *p) {
  px_shm_mutex_init(&((rl_shm_t *)p)->mu);
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

/* The key's entry, locked; NULL when the table is full. */
static rl_entry_t *lookup(const char *key) {
  rl_shm_t *t = px_shm_ratelimit();
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
        memset(&e->bud, 0, sizeof(e->bud));
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
  rl_shm_t *t = px_shm_ratelimit();
  if (!t) return;
  px_shm_lock(&t->mu);
  for (size_t i = 0; i < RL_SLOTS; i++)
    __atomic_store_n(&t->e[i].ready, 0, __ATOMIC_RELEASE);
  px_shm_unlock(&t->mu);
}

/* ---------------------------------------------------------------------- */
/* admissions with reservations and budgets (local backend)                 */

#define TEAM_MARK '\x1f' /* a team's entry: TEAM_MARK NAME (no key name has it) */

static rl_shm_t *table(void) {
  return px_shm_ratelimit();
}

static held_t *held_of(rl_entry_t *e) {
  rl_shm_t *t = table();
  return &t->held[(size_t)px_shm_worker() * RL_SLOTS + (size_t)(e - t->e)];
}

static rl_entry_t *lookup_team(const char *team) {
  char n[RL_NAME + 8];
  snprintf(n, sizeof(n), "%c%s", TEAM_MARK, team);
  return lookup(n);
}

/* The store's spend counter of a budget in a window: "k:NAME|LABEL". */
static size_t spend_key(char *buf, size_t cap, int team, const char *name, const px_win_t *w) {
  int n = snprintf(buf, cap, "%c:%s|%s", team ? 't' : 'k', name, w->label);
  return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

/* Bring a budget to the window holding now (locked entry): a new window
 * starts from what the store holds for it (0 without a store). */
static void roll(budget_t *b, int team, const char *name, px_window_t kind, int64_t now_s,
                 px_win_t *w) {
  px_window_at(kind, (time_t)now_s, w);
  if (b->win == w->id) return;
  b->win = w->id;
  b->spend = 0;
  char k[PX_STORE_KEY_MAX];
  size_t kl = spend_key(k, sizeof(k), team, name, w);
  int64_t v = 0;
  if (kl && px_store_on() && px_store_counter(PX_STORE_SPEND, k, kl, &v) == 0) b->spend = v;
}

/* Whether cost fits the budget (limit nano-USD); else the refusal. */
static int fits(const budget_t *b, int64_t limit, int64_t cost, const px_win_t *w,
                int team, px_refusal_t *why) {
  int64_t left = limit - b->spend - b->reserved;
  if (cost <= left) return 1;
  why->team = team;
  why->remaining = left > 0 ? left : 0;
  why->resets_at = w->resets_at;
  return 0;
}

static void tpm_take(rl_entry_t *e, uint64_t tokens) {
  int64_t room = e->tpm.level - DEBT_FLOOR;
  if (tokens >= (uint64_t)room / UNITS_PER_TOKEN)
    e->tpm.level = DEBT_FLOOR;
  else
    e->tpm.level -= (int64_t)tokens * UNITS_PER_TOKEN;
}

static void tpm_give(rl_entry_t *e, uint64_t tokens) {
  int64_t cap = (int64_t)(e->tpm.limit > LIMIT_MAX ? LIMIT_MAX : e->tpm.limit) * UNITS_PER_TOKEN;
  if (tokens >= (uint64_t)(cap - e->tpm.level) / UNITS_PER_TOKEN + 1)
    e->tpm.level = cap;
  else
    e->tpm.level += (int64_t)tokens * UNITS_PER_TOKEN;
  if (e->tpm.level > cap) e->tpm.level = cap;
}

static px_rl_verdict_t local_admit(const px_admit_t *a, uint64_t now, px_refusal_t *why) {
  const px_key_conf_t *k = a->key;
  const px_team_conf_t *tm = k->team && k->team->budget > 0 ? k->team : NULL;
  int64_t kb = k->budget;
  rl_entry_t *e = lookup(k->name);
  if (!e) return a->budgeted ? PX_RL_UNAVAILABLE : PX_RL_ALLOW; /* table full */
  rl_entry_t *te = tm ? lookup_team(tm->name) : NULL;
  if (tm && !te) {
    px_shm_unlock(&e->mu);
    return PX_RL_UNAVAILABLE;
  }
  px_rl_verdict_t v = PX_RL_ALLOW;
  unsigned wait = 0;
  px_win_t kw, tw;
  if (k->tpm) {
    refill(&e->tpm, k->tpm, now);
    if (e->tpm.level < 0) wait = wait_secs(&e->tpm, 0);
  }
  if (k->rpm && !wait) {
    refill(&e->rpm, k->rpm, now);
    if (e->rpm.level < UNITS_PER_TOKEN) wait = wait_secs(&e->rpm, UNITS_PER_TOKEN);
  }
  if (wait) {
    v = PX_RL_LIMITED;
    why->retry_after = wait;
  }
  if (v == PX_RL_ALLOW && kb > 0) {
    roll(&e->bud, 0, k->name, k->window, a->now_s, &kw);
    if (!fits(&e->bud, kb, a->cost, &kw, 0, why)) v = PX_RL_BUDGET;
  }
  if (v == PX_RL_ALLOW && te) {
    roll(&te->bud, 1, tm->name, tm->window, a->now_s, &tw);
    if (!fits(&te->bud, tm->budget, a->cost, &tw, 1, why)) v = PX_RL_BUDGET;
  }
  if (v == PX_RL_ALLOW) {
    held_t *h = held_of(e);
    if (k->rpm) e->rpm.level -= UNITS_PER_TOKEN;
    if (k->tpm && a->tokens) {
      tpm_take(e, a->tokens);
      h->tokens += (int64_t)a->tokens;
    }
    if (kb > 0) {
      e->bud.reserved += a->cost;
      h->nano += a->cost;
    }
    if (te) {
      te->bud.reserved += a->cost;
      held_of(te)->nano += a->cost;
    }
  }
  if (v == PX_RL_BUDGET) {
    int64_t left = why->resets_at - a->now_s;
    why->retry_after = why->resets_at == 0 ? 0 : left < 1 ? 1 : left > 0x7fffffff ? 0x7fffffff : (unsigned)left;
  }
  if (te) px_shm_unlock(&te->mu);
  px_shm_unlock(&e->mu);
  return v;
}

/* Settle one budget: the reservation returned, the cost spent (here and in
 * the store, for the window in force now). */
static void settle_budget(rl_entry_t *e, int team, const char *name, px_window_t kind,
                          const px_admit_t *a, int64_t cost) {
  px_win_t w;
  roll(&e->bud, team, name, kind, a->now_s, &w);
  e->bud.reserved -= a->cost;
  if (e->bud.reserved < 0) e->bud.reserved = 0;
  held_of(e)->nano -= a->cost;
  e->bud.spend += cost;
  px_shm_unlock(&e->mu);
  char k[PX_STORE_KEY_MAX];
  size_t kl = spend_key(k, sizeof(k), team, name, &w);
  /* an add, not a write of the level: adds of several workers commute */
  if (cost && kl && px_store_on()) px_store_add(PX_STORE_SPEND, k, kl, cost, NULL);
}

static void local_settle(const px_admit_t *a, uint64_t used, int64_t cost, uint64_t now) {
  const px_key_conf_t *k = a->key;
  if (k->tpm) {
    rl_entry_t *e = lookup(k->name);
    if (e) {
      refill(&e->tpm, k->tpm, now);
      if (used > a->tokens) tpm_take(e, used - a->tokens);
      else tpm_give(e, a->tokens - used);
      held_of(e)->tokens -= (int64_t)a->tokens;
      px_shm_unlock(&e->mu);
    }
  }
  if (!a->budgeted) return;
  if (k->budget > 0) {
    rl_entry_t *e = lookup(k->name);
    if (e) settle_budget(e, 0, k->name, k->window, a, cost);
  }
  if (k->team && k->team->budget > 0) {
    rl_entry_t *e = lookup_team(k->team->name);
    if (e) settle_budget(e, 1, k->team->name, k->team->window, a, cost);
  }
}

static void local_usage(const px_key_conf_t *k, int64_t now_s, px_budget_state_t st[2]) {
  memset(st, 0, 2 * sizeof(*st));
  px_win_t w;
  rl_entry_t *e = lookup(k->name);
  if (e) {
    roll(&e->bud, 0, k->name, k->window, now_s, &w);
    st[0].spend = e->bud.spend;
    st[0].reserved = e->bud.reserved;
    px_shm_unlock(&e->mu);
  }
  if (k->team && (e = lookup_team(k->team->name)) != NULL) {
    roll(&e->bud, 1, k->team->name, k->team->window, now_s, &w);
    st[1].spend = e->bud.spend;
    st[1].reserved = e->bud.reserved;
    px_shm_unlock(&e->mu);
  }
}

void px_rl_release_worker(unsigned worker) {
  rl_shm_t *t = table();
  if (!t || worker >= px_shm_nworkers()) return;
  for (size_t j = 0; j < RL_SLOTS; j++) {
    held_t *h = &t->held[(size_t)worker * RL_SLOTS + j];
    if (h->tokens == 0 && h->nano == 0) continue;
    rl_entry_t *e = &t->e[j];
    px_shm_lock(&e->mu);
    if (h->tokens > 0 && e->tpm.limit) tpm_give(e, (uint64_t)h->tokens);
    e->bud.reserved -= h->nano;
    if (e->bud.reserved < 0) e->bud.reserved = 0;
    h->tokens = h->nano = 0;
    px_shm_unlock(&e->mu);
  }
}

/* ---------------------------------------------------------------------- */
/* backend dispatch                                                         */

#include "proxai/log.h"
#include "proxai/state_redis.h"

px_rl_verdict_t px_rl_check(const px_admit_t *a, uint64_t now_ms, px_refusal_t *why,
                            px_rl_done_fn done, void *arg, px_rl_wait_t **wait) {
  const px_key_conf_t *k = a->key;
  if (k->rpm == 0 && k->tpm == 0 && !a->budgeted) return PX_RL_ALLOW;
  if (px_redis_running()) return px_redis_admit(a, now_ms, why, done, arg, wait);
  return local_admit(a, now_ms, why);
}

void px_rl_cancel(px_rl_wait_t *w) {
  if (w) px_redis_cancel(w);
}

void px_rl_settle(const px_admit_t *a, uint64_t used, int64_t cost, uint64_t now_ms) {
  if (a->key->tpm == 0 && !a->budgeted) return;
  if (px_redis_running()) {
    px_redis_settle(a, used, cost);
    return;
  }
  local_settle(a, used, cost, now_ms);
}

int px_rl_usage(const px_key_conf_t *k, int64_t now_s, px_budget_state_t st[2],
                px_rl_usage_fn done, void *arg, px_rl_wait_t **wait) {
  if (px_redis_running()) return px_redis_usage(k, now_s, done, arg, wait);
  local_usage(k, now_s, st);
  return 0;
}

static uv_timer_t sync_timer;
static int sync_on;

static void on_sync(uv_timer_t *t) {
  (void)t;
  px_store_sync();
}

int px_rl_start(uv_loop_t *loop, const px_config_t *cfg) {
  if (cfg->state.backend == PX_STATE_LOCAL && cfg->state.dir) {
    char err[512];
    if (px_store_open(cfg->state.dir, 0, err, sizeof(err)) < 0) {
      px_log_error("%s", err);
      return -1;
    }
    uv_timer_init(loop, &sync_timer);
    uv_unref((uv_handle_t *)&sync_timer);
    uv_timer_start(&sync_timer, on_sync, 1000, 1000);
    sync_on = 1;
  }
  if (cfg->state.backend != PX_STATE_REDIS) return 0;
  return px_redis_start(loop, &cfg->state);
}

static void on_sync_closed(uv_handle_t *h) {
  (void)h;
}

void px_rl_stop(void) {
  px_redis_stop();
  if (sync_on) {
    sync_on = 0;
    uv_close((uv_handle_t *)&sync_timer, on_sync_closed);
  }
  px_store_close();
}
