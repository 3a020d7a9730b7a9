/**
 * metrics.h - Prometheus counters, gauges and histograms (SPEC section 8).
 * Host totals: the series live in the shared mapping of shm.h, updated with
 * atomic adds by every worker of the host.
 */
#ifndef PROXAI_METRICS_H
#define PROXAI_METRICS_H

#include <stdint.h>

#include "proxai/shm.h"
#include "proxai/buf.h"

typedef enum px_gauge {
  PX_G_CONNECTIONS,    /**< open client connections */
  PX_G_ACTIVE_STREAMS, /**< streaming responses in flight */
  PX_G_PAUSED_STREAMS, /**< upstream transfers paused by backpressure */
  PX_G_COUNT
} px_gauge_t;

/** Count one finished request. inbound/upstream may be NULL ("none").
 *  duration and ttft in seconds; ttft < 0 when no token was streamed. */
void px_metrics_request(const char *inbound, const char *upstream, int status,
                        double duration_s, double ttft_s);
/** Count one finished model request by its route (the pattern; NULL:
 *  "none", no route matched), upstream and status. */
void px_metrics_route(const char *route, const char *upstream, int status);
/** Count one upstream attempt; error_type NULL on success, else e.g.
 *  "connect", "timeout", "http_429", "http_5xx", "reset". */
void px_metrics_attempt(const char *upstream, const char *error_type);
/** Count tokens by client key name (NULL = "none") and upstream. */
void px_metrics_tokens(const char *key, const char *upstream, int64_t in,
                       int64_t out);
/** Add a request's cost (nano-USD) to proxai_spend_usd_total{key, team,
 *  upstream_model}; team NULL = "" (a key without one). */
void px_metrics_spend(const char *key, const char *team, const char *upstream_model,
                      int64_t nano);
/** Count one translated request that dropped `field` (x-proxai-lossy plus
 *  what a stream dropped). */
void px_metrics_lossy(const char *inbound, const char *upstream, const char *field);
/** proxai_translate_over_budget_total: a request refused because its
 *  translation went past its memory budget ([server] translate_memory). */
void px_metrics_over_budget(const char *inbound, const char *upstream);
void px_metrics_gauge_add(px_gauge_t g, int64_t delta);
/** n trace spans exported (reason NULL) or dropped for reason
 *  (proxai_trace_spans_exported_total, proxai_trace_spans_dropped_total). */
void px_metrics_trace_spans(const char *reason, uint64_t n);
/** Passive health (balance.c): ejected 1 when this process takes upstream
 *  out of rotation (proxai_upstream_ejected gauge + 1, and
 *  proxai_upstream_ejections_total + 1), 0 when it returns (gauge - 1). */
void px_metrics_ejection(const char *upstream, int ejected);
/** Count one event of the shared state backend (backend "redis"; event
 *  "error", "back", or the on_error verdict "allowed", "denied", "local",
 *  "refused"). */
void px_metrics_state(const char *backend, const char *event);
/** The instances the shared state backend counted (a gauge). */
void px_metrics_state_instances(unsigned n);
/** Count requests lost with a worker process that died. */
void px_metrics_lost(uint64_t n);
/** Zero the gauges of a worker slot (its process died). */
void px_metrics_worker_reset(unsigned worker);
/** Append the Prometheus text exposition to out. */
int px_metrics_render(px_buf_t *out);
/** Zero every series and gauge (tests). */
void px_metrics_reset(void);

/** Its shared region (the series and the per-worker gauges): registered by the master before px_shm_init. */
extern px_shm_region_t px_metrics_region;

#endif
