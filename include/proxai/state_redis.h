/**
 * state_redis.h - the redis backend of the rate limiter ([state] backend =
 * redis). One hiredis async connection per worker, on the libuv loop; see
 * state_redis.c. Used through ratelimit.h only.
 */
#ifndef PROXAI_STATE_REDIS_H
#define PROXAI_STATE_REDIS_H

#include "proxai/ratelimit.h"

int px_redis_start(uv_loop_t *loop, const px_state_conf_t *sc);
void px_redis_stop(void);
int px_redis_running(void);
px_rl_verdict_t px_redis_admit(const char *key, uint64_t rpm, uint64_t tpm,
                               uint64_t reserve, uint64_t now_ms, unsigned *retry_after,
                               px_rl_done_fn done, void *arg, px_rl_wait_t **wait);
void px_redis_cancel(px_rl_wait_t *w);
/** Return (delta < 0) or charge (delta > 0) tokens on key's tpm bucket. */
void px_redis_settle(const char *key, uint64_t tpm, int64_t delta);

/** A reply to px_redis_command: NULL when the connection was lost. */
struct redisReply;
typedef void (*px_redis_reply_fn)(void *arg, struct redisReply *reply);
/** One command (argv) on the worker's connection (stored responses,
 *  rstore.c); cb is called once with the reply, NULL when the connection is
 *  lost or unanswered (the watchdog). <0 when there is no connection (cb is
 *  not called). */
int px_redis_command(int argc, const char **argv, const size_t *argvlen,
                     px_redis_reply_fn cb, void *arg);

#endif
