/**
 * money.h - what a request costs and which budget window it falls in
 * (SPEC section 12). No I/O: prices come from the configuration, spend and
 * reservations live in the state backends (ratelimit.h).
 *
 * Amounts are nano-USD in int64_t (config.h PX_NANO_PER_USD); prices are
 * nano-USD per million tokens, so a cost is one integer division of an
 * exact 128-bit sum: no float drift, however many requests are added.
 */
#ifndef PROXAI_MONEY_H
#define PROXAI_MONEY_H

#include <stdint.h>
#include <time.h>

#include "proxai/config.h"
#include "proxai/proto.h"

/** Output tokens assumed at admission when neither the request nor the
 *  route caps them (SPEC 12). */
#define PX_BUDGET_DEFAULT_OUTPUT 32768

/** The cost of usage u at price p, nano-USD (rounded to the nearest): the
 *  uncached input, cache reads, cache writes and output (reasoning
 *  included) each at their own price. Unknown counts (-1) cost 0. */
int64_t px_cost(const px_price_conf_t *p, const px_usage_t *u);
/** An upper bound of a request's cost: input_tokens at the highest of the
 *  input prices, output_tokens at the output price. */
int64_t px_cost_bound(const px_price_conf_t *p, uint64_t input_tokens,
                      uint64_t output_tokens);

/** A budget window at one moment. */
typedef struct px_win {
  uint32_t id;       /**< distinct per window and kind (never 0) */
  char label[32];    /**< "2026-11-27", "2026-11" or "total" */
  int64_t resets_at; /**< unix seconds of the next window, 0 for total */
} px_win_t;

/** The window of kind w that holds the unix time now. */
void px_window_at(px_window_t w, time_t now, px_win_t *out);
/** RFC 3339 UTC ("2026-12-01T00:00:00Z") of unix seconds t. buf >= 24. */
const char *px_rfc3339(int64_t t, char *buf, size_t len);

#endif
