/* state.c - the [state] backend of rate limits and budgets: the Redis one
 * (state_redis.c) when it runs, else this host's buckets (ratelimit.c).
 * Both backends sit below this file; the Redis one falls back on the
 * host's buckets through ratelimit.h (on_error). */
#include "proxai/ratelimit.h"
#include "proxai/state_redis.h"
#include "ratelimit_local.h"

px_rl_verdict_t px_rl_check(const px_admit_t *a, uint64_t now_ms, px_refusal_t *why,
                            px_rl_done_fn done, void *arg, px_rl_wait_t **wait) {
  const px_key_conf_t *k = a->key;
  if (k->rpm == 0 && k->tpm == 0 && !a->budgeted) return PX_RL_ALLOW;
  if (px_redis_running()) return px_redis_admit(a, now_ms, why, done, arg, wait);
  return px_rl_local_admit(a, now_ms, why);
}

void px_rl_cancel(px_rl_wait_t *w) {
  if (w) px_redis_cancel(w);
}

void px_rl_settle(const px_admit_t *a, uint64_t used, int64_t cost, uint64_t now_ms) {
  if (a->key->tpm == 0 && !a->budgeted && cost <= 0) return;
  /* admitted by on_error = local: settled in this host's share */
  if (!a->local && px_redis_running()) {
    px_redis_settle(a, used, cost);
    return;
  }
  px_rl_local_settle(a, used, cost, now_ms);
}

int px_rl_usage(const px_key_conf_t *k, int64_t now_s, px_budget_state_t st[2],
                px_rl_usage_fn done, void *arg, px_rl_wait_t **wait) {
  if (px_redis_running()) return px_redis_usage(k, now_s, done, arg, wait);
  px_rl_local_usage(k, now_s, st);
  return 0;
}

void px_rl_release_lost(const px_config_t *cfg, const px_inflight_rec_t *recs, size_t n,
                        unsigned worker, long pid) {
  if (n == 0) return;
  if (cfg->state.backend == PX_STATE_REDIS) {
    char owner[160];
    px_rl_owner(worker, pid, owner, sizeof(owner));
    px_redis_release(&cfg->state, recs, n, owner);
    return;
  }
  px_rl_local_release(recs, n);
}

int px_rl_start(uv_loop_t *loop, const px_config_t *cfg) {
  if (px_rl_local_start(loop, cfg) < 0) return -1;
  if (cfg->state.backend != PX_STATE_REDIS) return 0;
  return px_redis_start(loop, &cfg->state);
}

void px_rl_stop(void) {
  px_redis_stop();
  px_rl_local_stop();
}
