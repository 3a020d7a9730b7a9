/**
 * ratelimit.h - per client key token buckets: requests per minute and
 * tokens per minute (SPEC section 3 [key] rpm / tpm).
 *
 * Buckets are keyed by key name so they survive a configuration reload.
 * Times are milliseconds from any monotonic clock (uv_now()).
 */
#ifndef PROXAI_RATELIMIT_H
#define PROXAI_RATELIMIT_H

#include <stdint.h>

/** Take one request from key's rpm bucket and check its tpm bucket is not
 *  in debt. Returns 0 when allowed, else the seconds to wait (>= 1) for the
 *  retry-after header. rpm/tpm 0 = unlimited. */
unsigned px_rl_admit(const char *key, uint64_t rpm, uint64_t tpm, uint64_t now_ms);
/** Charge tokens used by a finished request to key's tpm bucket. */
void px_rl_charge(const char *key, uint64_t tpm, uint64_t tokens, uint64_t now_ms);
/** Forget all buckets. */
void px_rl_reset(void);

#endif
