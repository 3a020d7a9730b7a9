/**
 * state_redis.h - the redis backend of the rate limiter ([state] backend =
 * redis). One hiredis async connection per worker, on the libuv loop; see
 * state_redis.c. Used through ratelimit.h only.
 */
#ifndef PROXAI_STATE_REDIS_H
#define PROXAI_STATE_REDIS_H

#include "proxai/inflight.h"
#include "proxai/ratelimit.h"

int px_redis_start(uv_loop_t *loop, const px_state_conf_t *sc);
void px_redis_stop(void);
int px_redis_running(void);
/** An admission: PX_RL_PENDING (the script runs), or at once the cached
 *  over-limit verdict or, while Redis is unreachable, px_rl_fallback's. */
px_rl_verdict_t px_redis_admit(const char *key, uint64_t rpm, uint64_t tpm,
                               uint64_t reserve, unsigned flags, uint64_t now_ms,
                               unsigned *retry_after, px_rl_done_fn done, void *arg,
                               px_rl_wait_t **wait);
void px_redis_cancel(px_rl_wait_t *w);
/** Return (delta < 0) or charge (delta > 0) tokens on key's tpm bucket. */
void px_redis_settle(const char *key, uint64_t tpm, int64_t delta);
/** The master (no loop): return the tpm reservations of a dead worker's
 *  records over a short blocking connection, each step within sc's
 *  timeout; what cannot be returned is logged (it lapses by itself). */
void px_redis_release(const px_state_conf_t *sc, const px_inflight_rec_t *recs, size_t n);

#endif
