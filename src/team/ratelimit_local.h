/* ratelimit_local.h - this host's buckets and budgets (ratelimit.c) as the
 * local [state] backend, for the dispatch in state.c (not installed). The
 * Redis backend (state_redis.c) uses only ratelimit.h's fallback. */
#ifndef PROXAI_RATELIMIT_LOCAL_H
#define PROXAI_RATELIMIT_LOCAL_H

#include "proxai/inflight.h"
#include "proxai/ratelimit.h"

/* px_rl_check on this host: the verdict at once, never PX_RL_PENDING */
px_rl_verdict_t px_rl_local_admit(const px_admit_t *a, uint64_t now, px_refusal_t *why);
/* px_rl_settle on this host (a->local: the instance's share of an outage) */
void px_rl_local_settle(const px_admit_t *a, uint64_t used, int64_t cost, uint64_t now);
/* px_rl_usage on this host: st filled at once */
void px_rl_local_usage(const px_key_conf_t *k, int64_t now_s, px_budget_state_t st[2]);
/* px_rl_release_lost on this host */
void px_rl_local_release(const px_inflight_rec_t *recs, size_t n);
/* on_error, and the persistent store of [state] dir with its flush timer
 * (backend = local): 0 or <0 (logged) */
int px_rl_local_start(uv_loop_t *loop, const px_config_t *cfg);
/* the flush timer closed, the spend flushed, the store closed */
void px_rl_local_stop(void);

#endif
