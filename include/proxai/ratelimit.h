/**
 * ratelimit.h - per client key token buckets: requests per minute and
 * tokens per minute (SPEC sections 3 [key] rpm / tpm, 7 shared state).
 *
 * Two backends ([state] backend): local keeps the buckets in the host's
 * shared memory (shm.h), shared by every worker; redis keeps them in Redis,
 * shared by every gateway on it (state_redis.c).
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
 *  in debt (this host's buckets). Returns 0 when allowed, else the seconds
 *  to wait (>= 1) for the retry-after header. rpm/tpm 0 = unlimited. */
unsigned px_rl_admit(const char *key, uint64_t rpm, uint64_t tpm, uint64_t now_ms);
/** Charge tokens used by a finished request to key's tpm bucket. */
void px_rl_charge(const char *key, uint64_t tpm, uint64_t tokens, uint64_t now_ms);
/** Forget all buckets. */
void px_rl_reset(void);

typedef enum px_rl_verdict {
  PX_RL_ALLOW,       /**< admitted by the backend; its reservation is held */
  PX_RL_LIMITED,     /**< 429; *retry_after set */
  PX_RL_UNAVAILABLE, /**< the backend is unreachable and on_error = deny, or the
                          request needs the backend (PX_RL_STRICT): 503 */
  PX_RL_PENDING,     /**< answer comes through the callback */
  PX_RL_OPEN,        /**< unreachable, on_error = allow: served, nothing held */
  PX_RL_LOCAL,       /**< unreachable, on_error = local: admitted by this host's
                          buckets at the instance's share (settle with local = 1) */
} px_rl_verdict_t;

/** px_rl_check flag: never fail open, refused (503) while the backend is
 *  unreachable whatever on_error (budgets, SPEC 12). */
#define PX_RL_STRICT 1u

/** Called once with the verdict of a PX_RL_PENDING admission. */
typedef void (*px_rl_done_fn)(void *arg, px_rl_verdict_t v, unsigned retry_after);
typedef struct px_rl_wait px_rl_wait_t;

/**
 * Admit one request of key k. reserve: tokens set aside on the tpm bucket
 * until px_rl_settle() (redis backend; the local one charges at the end).
 * flags: PX_RL_STRICT or 0. Returns the verdict at once, or PX_RL_PENDING
 * with *wait set: done(arg) is then called later exactly once, unless
 * px_rl_cancel(*wait) came first.
 */
px_rl_verdict_t px_rl_check(const px_key_conf_t *k, uint64_t reserve, unsigned flags,
                            uint64_t now_ms, unsigned *retry_after, px_rl_done_fn done,
                            void *arg, px_rl_wait_t **wait);
/** Forget a pending admission: its callback will not be called. */
void px_rl_cancel(px_rl_wait_t *w);
/** A finished request used `used` tokens; `reserved` were set aside at
 *  admission (0 when the admission reserved nothing); local: it was
 *  admitted by PX_RL_LOCAL. */
void px_rl_settle(const px_key_conf_t *k, uint64_t reserved, uint64_t used, int local,
                  uint64_t now_ms);
/** Whether admissions reserve tokens (the redis backend). */
int px_rl_reserves(void);

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
/** The master: release the reservations of a dead worker's requests
 *  (charging nothing for their unknown output). cfg: the master's. */
void px_rl_release_lost(const px_config_t *cfg, const struct px_inflight_rec *recs,
                        size_t n);

/** Start this worker's backend from cfg->state (connects to Redis). 0 or <0. */
int px_rl_start(uv_loop_t *loop, const px_config_t *cfg);
/** Close the backend's handles (before the loop ends). */
void px_rl_stop(void);

/** Its shared region (the keys' local buckets): registered by the master before px_shm_init. */
extern px_shm_region_t px_rl_region;

#endif
