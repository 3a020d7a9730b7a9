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
 * admission must fit both. The spend goes to the persistent store ([state]
 * dir) once a second (each worker flushes what any worker spent: adds that
 * commute), at a window's change and at shutdown, and is read back when an
 * entry starts a window (first use after a restart, or a new day or month).
 *
 * An admission locks the key's entry, then its team's (always that order),
 * decides on everything, then takes everything: all or nothing. What a
 * request has set aside is in its worker's in-flight records (inflight.h),
 * so that the master can release a dead worker's reservations.
 *
 * This is the local backend and what the Redis one falls back on; state.c
 * dispatches between them. With [state] backend = redis the same table
 * holds the buckets of on_error = local: during an outage each key gets
 * ceil(limit / instances) here. Entries carry the outage they belong to
 * (epoch), so every bucket starts full at each outage.
 */
#include "proxai/ratelimit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxai/inflight.h"
#include "proxai/money.h"
#include "proxai/shm.h"
#include "proxai/store.h"
#include "ratelimit_local.h"

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
  int64_t spend;     /* nano-USD in window `win` */
  int64_t persisted; /* what of spend the store holds (flushed once a second) */
  int64_t reserved;  /* nano-USD set aside by requests in flight */
  int64_t resets_at; /* end of window `win` (unix s), 0 for total */
  int64_t last_use;  /* unix s of the key's last admitted request (this host) */
  uint32_t win;      /* px_win_t.id; 0 = none read yet */
  char label[12];    /* px_win_t.label: the store's counter of the window */
} budget_t;

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
  budget_t bud;
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
        memset(&e->bud, 0, sizeof(e->bud));
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
/* admissions with reservations and budgets (local backend)                 */

#define TEAM_MARK '\x1f' /* a team's entry: TEAM_MARK NAME (no key name has it) */

static rl_shm_t *table(void) {
  return px_shm_get(&px_rl_region);
}

static rl_entry_t *lookup_team(const char *team) {
  char n[RL_NAME];
  size_t l = strlen(team);
  if (l > RL_NAME - 2) l = RL_NAME - 2; /* longer names are cut */
  n[0] = TEAM_MARK;
  memcpy(n + 1, team, l);
  n[l + 1] = 0;
  return lookup(n, 0);
}

/* The store's spend counter of an entry's window: "k:NAME|LABEL" for a
 * key, "t:NAME|LABEL" for a team. */
static size_t spend_key(char *buf, size_t cap, const rl_entry_t *e, const char *label) {
  int team = e->name[0] == TEAM_MARK;
  int n = snprintf(buf, cap, "%c:%s|%s", team ? 't' : 'k', e->name + team, label);
  return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

/* Add what the entry spent since the last flush to the store (locked
 * entry). Adds commute: workers flushing the same entry never lose one. */
static void flush(rl_entry_t *e) {
  budget_t *b = &e->bud;
  if (b->spend == b->persisted || !b->win || !px_store_on()) return;
  char k[PX_STORE_KEY_MAX];
  size_t kl = spend_key(k, sizeof(k), e, b->label);
  if (kl && px_store_add(PX_STORE_SPEND, k, kl, b->spend - b->persisted, NULL) == 0)
    b->persisted = b->spend;
}

/* Bring an entry's budget to the window of that kind holding now (locked
 * entry): the same window costs two compares; a new one flushes the old
 * and starts from what the store holds for it (0 without a store). */
static void roll(rl_entry_t *e, px_window_t kind, int64_t now_s) {
  budget_t *b = &e->bud;
  if (b->win >> 28 == (uint32_t)kind + 1 && (b->resets_at == 0 || now_s < b->resets_at))
    return;
  px_win_t w;
  px_window_at(kind, (time_t)now_s, &w);
  b->resets_at = w.resets_at;
  if (b->win == w.id) return;
  flush(e);
  b->win = w.id;
  snprintf(b->label, sizeof(b->label), "%.11s", w.label);
  b->spend = b->persisted = 0;
  char k[PX_STORE_KEY_MAX];
  size_t kl = spend_key(k, sizeof(k), e, b->label);
  int64_t v = 0;
  if (kl && px_store_on() && px_store_counter(PX_STORE_SPEND, k, kl, &v) == 0)
    b->spend = b->persisted = v;
}

/* Once a second in every worker: the spend of every entry to the store. */
static void flush_all(void) {
  rl_shm_t *t = table();
  if (!t || !px_store_on()) return;
  for (size_t j = 0; j < RL_SLOTS; j++) {
    rl_entry_t *e = &t->e[j];
    if (!__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE)) continue;
    /* a racy first look: most entries have nothing to write */
    if (__atomic_load_n(&e->bud.spend, __ATOMIC_RELAXED) ==
        __atomic_load_n(&e->bud.persisted, __ATOMIC_RELAXED))
      continue;
    px_shm_lock(&e->mu);
    flush(e);
    px_shm_unlock(&e->mu);
  }
}

/* Whether cost fits the budget (limit nano-USD); else the refusal. */
static int fits(const budget_t *b, int64_t limit, int64_t cost, int team,
                px_refusal_t *why) {
  int64_t left = limit - b->spend - b->reserved;
  if (cost <= left) return 1;
  why->team = team;
  why->remaining = left > 0 ? left : 0;
  why->resets_at = b->resets_at;
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
  int64_t cap =
      (int64_t)(e->tpm.limit > LIMIT_MAX ? LIMIT_MAX : e->tpm.limit) * UNITS_PER_TOKEN;
  if (tokens >= (uint64_t)(cap - e->tpm.level) / UNITS_PER_TOKEN + 1)
    e->tpm.level = cap;
  else
    e->tpm.level += (int64_t)tokens * UNITS_PER_TOKEN;
  if (e->tpm.level > cap) e->tpm.level = cap;
}

px_rl_verdict_t px_rl_local_admit(const px_admit_t *a, uint64_t now, px_refusal_t *why) {
  const px_key_conf_t *k = a->key;
  const px_team_conf_t *tm = k->team && k->team->budget > 0 ? k->team : NULL;
  int64_t kb = k->budget;
  rl_entry_t *e = lookup(k->name, 0);
  if (!e) return a->budgeted ? PX_RL_UNAVAILABLE : PX_RL_ALLOW; /* table full */
  rl_entry_t *te = tm ? lookup_team(tm->name) : NULL;
  if (tm && !te) {
    px_shm_unlock(&e->mu);
    return PX_RL_UNAVAILABLE;
  }
  px_rl_verdict_t v = PX_RL_ALLOW;
  unsigned wait = 0;
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
    roll(e, k->window, a->now_s);
    if (!fits(&e->bud, kb, a->cost, 0, why)) v = PX_RL_BUDGET;
  }
  if (v == PX_RL_ALLOW && te) {
    roll(te, tm->window, a->now_s);
    if (!fits(&te->bud, tm->budget, a->cost, 1, why)) v = PX_RL_BUDGET;
  }
  if (v == PX_RL_ALLOW) {
    if (k->rpm) e->rpm.level -= UNITS_PER_TOKEN;
    if (k->tpm && a->tokens) tpm_take(e, a->tokens);
    if (kb > 0) e->bud.reserved += a->cost;
    if (te) te->bud.reserved += a->cost;
  }
  if (v == PX_RL_BUDGET) {
    int64_t left = why->resets_at - a->now_s;
    why->retry_after = why->resets_at == 0 ? 0
                       : left < 1          ? 1
                       : left > 0x7fffffff ? 0x7fffffff
                                           : (unsigned)left;
  }
  if (te) px_shm_unlock(&te->mu);
  px_shm_unlock(&e->mu);
  return v;
}

/* Settle one budget: its reservation returned (reserved: what admission
 * set aside there), the cost spent in the window in force now (the store
 * gets it at the next flush). Unlocks e. */
static void settle_budget(rl_entry_t *e, px_window_t kind, const px_admit_t *a,
                          int64_t reserved, int64_t cost) {
  roll(e, kind, a->now_s);
  e->bud.reserved -= reserved;
  if (e->bud.reserved < 0) e->bud.reserved = 0;
  e->bud.spend += cost;
  px_shm_unlock(&e->mu);
}

static uint64_t share(uint64_t limit);
static uint32_t outage_epoch(void);

void px_rl_local_settle(const px_admit_t *a, uint64_t used, int64_t cost, uint64_t now) {
  const px_key_conf_t *k = a->key;
  if (a->local) { /* admitted by on_error = local: this host's share */
    if (k->tpm) charge_at(k->name, share(k->tpm), used, now, outage_epoch());
    return;
  }
  if (k->tpm) {
    rl_entry_t *e = lookup(k->name, 0);
    if (e) {
      refill(&e->tpm, k->tpm, now);
      if (used > a->tokens)
        tpm_take(e, used - a->tokens);
      else
        tpm_give(e, a->tokens - used);
      px_shm_unlock(&e->mu);
    }
  }
  /* the spend of every key and team is counted, budget or not */
  if (!a->budgeted && cost <= 0) return;
  rl_entry_t *e = lookup(k->name, 0);
  if (e) settle_budget(e, k->window, a, a->budgeted && k->budget > 0 ? a->cost : 0, cost);
  if (k->team && (e = lookup_team(k->team->name)) != NULL)
    settle_budget(e, k->team->window, a, a->budgeted && k->team->budget > 0 ? a->cost : 0,
                  cost);
}

void px_rl_local_usage(const px_key_conf_t *k, int64_t now_s, px_budget_state_t st[2]) {
  memset(st, 0, 2 * sizeof(*st));
  rl_entry_t *e = lookup(k->name, 0);
  if (e) {
    roll(e, k->window, now_s);
    st[0].spend = e->bud.spend;
    st[0].reserved = e->bud.reserved;
    px_shm_unlock(&e->mu);
  }
  if (k->team && (e = lookup_team(k->team->name)) != NULL) {
    roll(e, k->team->window, now_s);
    st[1].spend = e->bud.spend;
    st[1].reserved = e->bud.reserved;
    px_shm_unlock(&e->mu);
  }
}

void px_rl_touch(const char *key, int64_t now_s) {
  rl_entry_t *e = lookup(key, 0);
  if (!e) return;
  e->bud.last_use = now_s;
  px_shm_unlock(&e->mu);
}

int64_t px_rl_last_use(const char *key) {
  rl_entry_t *e = key ? lookup(key, 0) : NULL;
  if (!e) return 0;
  int64_t t = e->bud.last_use;
  px_shm_unlock(&e->mu);
  return t;
}

/* The local backend's part of px_rl_release_lost: tpm and budget
 * reservations back to this host's entries. */
static void release_local(const px_inflight_rec_t *r) {
  rl_entry_t *e = lookup(r->key, 0);
  if (e) {
    if (r->tpm_reserved > 0 && e->tpm.limit) tpm_give(e, r->tpm_reserved);
    e->bud.reserved -= (int64_t)r->cost_key;
    if (e->bud.reserved < 0) e->bud.reserved = 0;
    px_shm_unlock(&e->mu);
  }
  if (r->cost_team > 0 && r->team[0] && (e = lookup_team(r->team)) != NULL) {
    e->bud.reserved -= (int64_t)r->cost_team;
    if (e->bud.reserved < 0) e->bud.reserved = 0;
    px_shm_unlock(&e->mu);
  }
}

/* ---------------------------------------------------------------------- */
/* outages of the shared backend (on_error), the store's start and stop   */

#include "proxai/log.h"
#include "proxai/metrics.h"

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

static uv_timer_t sync_timer;
static int sync_on;

static void on_sync(uv_timer_t *t) {
  (void)t;
  flush_all();
  px_store_sync();
}

static const char *scratch_dir;

void px_rl_scratch_dir(const char *dir) {
  scratch_dir = dir;
}

void px_rl_owner(unsigned worker, long pid, char *out, size_t len) {
  snprintf(out, len, "%s/%u/%ld", px_rl_instance(), worker, pid);
}

void px_rl_local_release(const px_inflight_rec_t *recs, size_t n) {
  for (size_t i = 0; i < n; i++) release_local(&recs[i]);
}

int px_rl_local_start(uv_loop_t *loop, const px_config_t *cfg) {
  g_on_error = cfg->state.on_error;
  const char *dir = cfg->state.dir ? cfg->state.dir : scratch_dir;
  if (cfg->state.backend == PX_STATE_LOCAL && dir) {
    char err[512];
    if (px_store_open(dir, 0, err, sizeof(err)) < 0) {
      px_log_error("%s", err);
      return -1;
    }
    uv_timer_init(loop, &sync_timer);
    uv_unref((uv_handle_t *)&sync_timer);
    uv_timer_start(&sync_timer, on_sync, 1000, 1000);
    sync_on = 1;
  }
  return 0;
}

static void on_sync_closed(uv_handle_t *h) {
  (void)h;
}

void px_rl_local_stop(void) {
  if (sync_on) {
    sync_on = 0;
    uv_close((uv_handle_t *)&sync_timer, on_sync_closed);
  }
  flush_all();
  px_store_close();
}
