/**
 * ratelimit.h - per client key token buckets: requests per minute and
 * tokens per minute (SPEC sections 3 [key] rpm / tpm, 7 shared state).
 *
 * Two backends ([state] backend): local keeps the buckets in the host's
 * shared memory (shm.h), shared by every worker; redis keeps them in Redis,
 * shared by every gateway on it (state_redis.c); state.c picks the one in
 * force, ratelimit.c is the local one and the fallback of the Redis one.
 *
 * Buckets are keyed by key name so they survive a configuration reload.
 * Times are milliseconds from any monotonic clock (uv_now()).
 */
#ifndef PROXAI_RATELIMIT_H
#define PROXAI_RATELIMIT_H

#include <stdint.h>
#include <uv.h>

#include "proxai/shm.h"
#include "proxai/config.h"

/** Take one request from key's rpm bucket and check its tpm bucket is not
 *  in debt (this host's buckets; nothing reserved). Returns 0 when allowed,
 *  else the seconds to wait (>= 1) for the retry-after header. rpm/tpm 0 =
 *  unlimited. */
unsigned px_rl_admit(const char *key, uint64_t rpm, uint64_t tpm, uint64_t now_ms);
/** Charge tokens used by a finished request to key's tpm bucket (no
 *  reservation to return). */
void px_rl_charge(const char *key, uint64_t tpm, uint64_t tokens, uint64_t now_ms);
/** Forget all buckets. */
void px_rl_reset(void);

typedef enum px_rl_verdict {
  PX_RL_ALLOW,       /**< admitted by the backend; its reservation is held */
  PX_RL_LIMITED,     /**< 429; why->retry_after set */
  PX_RL_BUDGET,      /**< 429 insufficient_quota: why names the budget */
  PX_RL_UNAVAILABLE, /**< the backend is unreachable and on_error = deny, or the
                          request needs the backend (PX_RL_STRICT: budgets and
                          runtime keys never fail open): 503 */
  PX_RL_PENDING,     /**< answer comes through the callback */
  PX_RL_OPEN,        /**< unreachable, on_error = allow: served, nothing held */
  PX_RL_LOCAL,       /**< unreachable, on_error = local: admitted by this host's
                          buckets at the instance's share (settle with local = 1) */
} px_rl_verdict_t;

/** One admission: what it takes from the key's (and its team's) buckets
 *  and budgets, all or nothing, in one atomic step; settled once with
 *  px_rl_settle(). */
typedef struct px_admit {
  const px_key_conf_t *key; /**< its team: key->team */
  uint64_t tokens;          /**< set aside on the key's tpm bucket */
  int64_t cost;             /**< nano-USD set aside on each budget (0: none) */
  int budgeted;             /**< the key or its team has a budget (never
                                 fails open: PX_RL_STRICT) */
  int local;                /**< set by the check: admitted by PX_RL_LOCAL
                                 (settled in this host's buckets) */
  int64_t now_s;            /**< wall clock (budget windows) */
} px_admit_t;

/** Why an admission was refused. */
typedef struct px_refusal {
  unsigned retry_after; /**< seconds; 0: none (a `total` budget) */
  int team;             /**< PX_RL_BUDGET: 1 the team's budget, 0 the key's */
  int64_t remaining;    /**< PX_RL_BUDGET: nano-USD left (>= 0) */
  int64_t resets_at;    /**< PX_RL_BUDGET: unix s, 0 for `total` */
} px_refusal_t;

/** px_rl_check flag: never fail open, refused (503) while the backend is
 *  unreachable whatever on_error (budgets, SPEC 12). */
#define PX_RL_STRICT 1u

/** Called once with the verdict of a PX_RL_PENDING admission. */
typedef void (*px_rl_done_fn)(void *arg, px_rl_verdict_t v, const px_refusal_t *why);
typedef struct px_rl_wait px_rl_wait_t;

/**
 * Admit one request: one rpm token, `tokens` on tpm (refused while the
 * bucket is in debt), `cost` on the key's and the team's budgets (each must
 * fit: spend + reserved + cost <= budget). Returns the verdict at once
 * (*why filled when refused), or PX_RL_PENDING with *wait set: done(arg) is
 * then called later exactly once, unless px_rl_cancel(*wait) came first.
 */
px_rl_verdict_t px_rl_check(const px_admit_t *a, uint64_t now_ms, px_refusal_t *why,
                            px_rl_done_fn done, void *arg, px_rl_wait_t **wait);
/** Forget a pending admission: its callback will not be called (an
 *  admission the backend made anyway is released). */
void px_rl_cancel(px_rl_wait_t *w);
/** A finished admitted request: it used `used` tokens and cost `cost`
 *  nano-USD; what a was reserved is returned. */
void px_rl_settle(const px_admit_t *a, uint64_t used, int64_t cost, uint64_t now_ms);

/** A budget's state now (GET /v1/proxai/usage, the admin API). */
typedef struct px_budget_state {
  int64_t spend, reserved; /**< nano-USD in the current window */
} px_budget_state_t;
/** Called once with the state of key's budget (st[0]) and its team's
 *  (st[1]); ok 0 when the backend could not be asked. */
typedef void (*px_rl_usage_fn)(void *arg, int ok, const px_budget_state_t st[2]);
/** The spend and reservations of key k and its team now. 0: st filled at
 *  once (local backend); 1: done(arg) is called later (Redis), unless
 *  px_rl_cancel(*wait) came first; <0: cannot be asked (Redis down). */
int px_rl_usage(const px_key_conf_t *k, int64_t now_s, px_budget_state_t st[2],
                px_rl_usage_fn done, void *arg, px_rl_wait_t **wait);

/** Record that key was used now (runtime keys: "last use" in the admin
 *  API; this host's shared memory). */
void px_rl_touch(const char *key, int64_t now_s);
/** When key was last used on this host (unix s), 0 if never. */
int64_t px_rl_last_use(const char *key);

/**
 * The verdict of on_error for an admission the backend could not decide
 * (state_redis.c): counted in /metrics; PX_RL_LOCAL / PX_RL_LIMITED from the
 * host's buckets at ceil(limit / instances) for on_error = local.
 */
px_rl_verdict_t px_rl_fallback(const char *key, uint64_t rpm, uint64_t tpm,
                               unsigned flags, uint64_t now_ms, unsigned *retry_after);
/** This worker found the backend unreachable (down = 1) or back (0). The
 *  first worker of the host to go down starts an outage: the buckets of
 *  on_error = local start full. */
void px_rl_outage(int down);
/** This instance's name in the shared backend's instance registry (host,
 *  master pid, start time), the same in every worker. */
const char *px_rl_instance(void);
/** The instance registry counted n instances (this one included), shown
 *  as proxai_state_instances: on_error = local divides limits by it. */
void px_rl_set_instances(unsigned n);
/** The master: worker slot `worker` died (it is no longer down). */
void px_rl_worker_gone(unsigned worker);

struct px_inflight_rec;
/** The master: release the reservations of a dead worker's requests (tpm
 *  and budgets, charging nothing for their unknown output): worker slot
 *  `worker`, process pid. cfg: the master's. */
void px_rl_release_lost(const px_config_t *cfg, const struct px_inflight_rec *recs,
                        size_t n, unsigned worker, long pid);
/** The name a worker's budget reservations carry in Redis (its slot and
 *  pid under this instance): out >= 160 bytes. */
void px_rl_owner(unsigned worker, long pid, char *out, size_t len);

/** The master, before it forks: a directory of its own for the store when
 *  [state] dir is unset and runtime keys are possible (memory only: the
 *  master removes it at exit). */
void px_rl_scratch_dir(const char *dir);

/** Start this worker's backend from cfg->state (connects to Redis; opens
 *  the persistent store of [state] dir). 0 or <0 (logged). */
int px_rl_start(uv_loop_t *loop, const px_config_t *cfg);
/** Close the backend's handles (before the loop ends). */
void px_rl_stop(void);

/** Its shared region (the keys' local buckets): registered by the master before px_shm_init. */
extern px_shm_region_t px_rl_region;

#endif
