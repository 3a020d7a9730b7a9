/**
 * state_redis.h - the redis backend of the rate limiter ([state] backend =
 * redis). One hiredis async connection per worker, on the libuv loop; see
 * state_redis.c. Used through ratelimit.h only.
 */
#ifndef PROXAI_STATE_REDIS_H
#define PROXAI_STATE_REDIS_H

#include <hiredis/hiredis.h>

#include "proxai/buf.h"
#include "proxai/inflight.h"
#include "proxai/ratelimit.h"

int px_redis_start(uv_loop_t *loop, const px_state_conf_t *sc);
void px_redis_stop(void);
int px_redis_running(void);
/** px_rl_check on Redis: one script, one round trip, whatever the admission
 *  takes (rpm, tpm, the key's and the team's budgets); PX_RL_PENDING, or at
 *  once the cached over-limit verdict or, while Redis is unreachable,
 *  px_rl_fallback's (budgets: PX_RL_STRICT). */
px_rl_verdict_t px_redis_admit(const px_admit_t *a, uint64_t now_ms, px_refusal_t *why,
                               px_rl_done_fn done, void *arg, px_rl_wait_t **wait);
void px_redis_cancel(px_rl_wait_t *w);
/** px_rl_settle on Redis: tokens settled with the real usage, the cost
 *  spent, the reservations returned (one script, no reply awaited). */
void px_redis_settle(const px_admit_t *a, uint64_t used, int64_t cost);
/** px_rl_usage on Redis: 1 (pending) or <0 (not connected). */
int px_redis_usage(const px_key_conf_t *k, int64_t now_s, px_rl_usage_fn done, void *arg,
                   px_rl_wait_t **wait);

/** The answer of px_redis_key_lookup: ok 0 when Redis could not be asked;
 *  rec empty when there is no such key; team: the team's record or empty. */
typedef void (*px_redis_key_fn)(void *arg, int ok, px_str_t rec, px_str_t team);
/** A runtime key's records by the hex SHA-256 of its secret, in one round
 *  trip. 1 (pending; px_rl_cancel(*wait) forgets it) or <0 (not connected). */
int px_redis_key_lookup(const char *hex, px_redis_key_fn done, void *arg,
                        px_rl_wait_t **wait);
/** The admin API's blocking connection (1 s timeout), connected and
 *  authenticated, or NULL; px_redis_sync_drop() after an I/O error. */
redisContext *px_redis_sync(void);
void px_redis_sync_drop(void);
/** px_redis_usage over the admin API's blocking connection: 0 with st
 *  filled, or <0. */
int px_redis_usage_sync(const px_key_conf_t *k, int64_t now_s, px_budget_state_t st[2]);
/** The [state] prefix of every Redis key. */
const char *px_redis_prefix(void);
/** The master (no loop): return the reservations of a dead worker's
 *  records (tpm; its budget reservations, by their owner) over a short
 *  blocking connection, each step within sc's timeout; what cannot be
 *  returned is logged (it lapses by itself). */
void px_redis_release(const px_state_conf_t *sc, const px_inflight_rec_t *recs, size_t n,
                      const char *owner);
/** A reply to px_redis_command: NULL when the connection was lost. */
struct redisReply;
typedef void (*px_redis_reply_fn)(void *arg, struct redisReply *reply);
/** One command (argv) on the worker's connection (stored responses,
 *  rstore.c); cb is called once with the reply, NULL when the connection is
 *  lost or unanswered within timeout_ms (0: [state] timeout; the watchdog
 *  drops the connection). <0 when there is no connection (cb is not
 *  called). */
int px_redis_command(int argc, const char **argv, const size_t *argvlen,
                     uint64_t timeout_ms, px_redis_reply_fn cb, void *arg);

#endif
