/**
 * balance.h - which deployment of a route takes an attempt, and passive
 * health (SPEC sections 3 and 7).
 *
 * State is per worker process and lives in this module: per upstream (by
 * name, so it survives a SIGHUP reload for upstreams that keep their name)
 * the requests in flight, an EWMA of the time to response headers, the run
 * of consecutive failures and the ejection; per route (by pattern) the
 * round-robin position and the smooth weighted round-robin counters.
 *
 * No I/O and no logging above debug: callers pass the time (ms, any
 * monotonic origin) and log what px_balance_result() reports. Single
 * threaded (the loop thread).
 */
#ifndef PROXAI_BALANCE_H
#define PROXAI_BALANCE_H

#include <stdint.h>

#include "proxai/config.h"

/** Health and load of one upstream; owned by this module until
 *  px_balance_reset(). */
typedef struct px_bal_up px_bal_up_t;

/** The entry of upstream u, created on first use. NULL only when out of
 *  memory (every other call accepts NULL and does nothing). */
px_bal_up_t *px_balance_up(const px_upstream_conf_t *u);

/**
 * The deployment of route r (index into r->deployments) for the next
 * attempt. tried has bit i set for deployment i already tried by this
 * request. Order of preference: deployments neither tried nor ejected, by
 * the route's balance; then any deployment not ejected (a retry); when all
 * are ejected, the least recently ejected (untried ones first).
 */
size_t px_balance_pick(const px_config_t *c, const px_route_conf_t *r, uint64_t tried,
                       uint64_t now_ms);

/** Whether some deployment of r is neither in tried nor ejected. */
int px_balance_has_untried(const px_config_t *c, const px_route_conf_t *r, uint64_t tried,
                           uint64_t now_ms);

/** Whether b is out of rotation at now_ms. */
int px_balance_ejected(px_bal_up_t *b, uint64_t now_ms);

/** An attempt on b starts (in flight + 1) / its transfer ends (- 1). */
void px_balance_begin(px_bal_up_t *b);
void px_balance_end(px_bal_up_t *b);

/**
 * The outcome of an attempt on b (upstream u). ok: a response that is not
 * 429 or 5xx. A failure is a connect error or timeout, a 5xx or a 429.
 * latency_ms: time until the response headers (or the failure). A success
 * ends an ejection and the run of failures; u->eject_after failures in a row
 * eject b for u->eject_for_ms, doubling on each repeat without a success in
 * between, capped at PX_EJECT_MAX_MS (or eject_for when that is longer).
 * Returns the length of the ejection this failure started, else 0.
 */
uint64_t px_balance_result(px_bal_up_t *b, const px_upstream_conf_t *u, int ok,
                           uint64_t latency_ms, uint64_t now_ms);

/** Ends the ejections that are over by now_ms (the gauge follows). Returns
 *  the ms until the next one ends, 0 when none is running. */
uint64_t px_balance_sweep(uint64_t now_ms);

/** Requests in flight on b, and its latency EWMA in ms (-1: no sample yet). */
unsigned px_balance_inflight(const px_bal_up_t *b);
double px_balance_ewma_ms(const px_bal_up_t *b);

/** Seeds the choice of least_busy's two candidates (tests). */
void px_balance_seed(uint64_t seed);
/** Frees every entry (tests, shutdown); ejected gauges go back to 0. */
void px_balance_reset(void);

#endif
