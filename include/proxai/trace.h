/**
 * trace.h - OpenTelemetry spans (SPEC section 15): the W3C trace context of a
 * request, the sampling decision, finished spans written as OTLP/JSON into
 * this process's batch, and the batch handed to the exporter
 * (src/core/trace_export.c), which POSTs it without blocking the loop.
 *
 * One batch per process (one loop per process). It is bounded: a span that
 * does not fit is dropped and counted (proxai_trace_spans_dropped_total),
 * never waited for. Spans carry names, models, statuses, token counts and
 * ids, never request or response content and never a secret.
 */
#ifndef PROXAI_TRACE_H
#define PROXAI_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "proxai/buf.h"
#include "proxai/config.h"

/** Length of a version-00 traceparent value: 00-<32 hex>-<16 hex>-<2 hex>. */
#define PX_TRACEPARENT_LEN 55
/** Longest client tracestate carried into a span (W3C: 512 characters). */
#define PX_TRACESTATE_MAX 512

/** The trace context of one request; all zero = tracing off. */
typedef struct px_trace_ctx {
  uint8_t on;         /**< [trace] is configured: the gateway propagates its ids */
  uint8_t sampled;    /**< spans of this request are recorded */
  uint8_t has_parent; /**< the client sent a valid traceparent */
  uint8_t trace_id[16];
  uint8_t parent_id[8]; /**< the client's span (valid with has_parent) */
  /* the ids in lower-case hex, as they are written (not terminated): the
   * trace's, the client's span, the request's SERVER span (sampled only),
   * the current attempt's CLIENT span */
  char trace_hex[32], parent_hex[16], span_hex[16], att_hex[16];
  px_str_t tracestate; /**< the client's, a view into its request head */
} px_trace_ctx_t;

/** Starts the context of a request: continues the client's traceparent when
 *  it is valid (else a new trace), decides sampling by conf->sample on the
 *  trace id (the client's flag does not override it). conf->endpoint NULL:
 *  t is zeroed (off). traceparent / tracestate: the client's header values
 *  (len 0 when absent). */
void px_trace_begin(px_trace_ctx_t *t, const px_trace_conf_t *conf, px_str_t traceparent,
                    px_str_t tracestate);

/** A new attempt span id in t->att_hex; the traceparent to send upstream
 *  (this attempt as parent, sampled flag as decided) written into out, which
 *  holds PX_TRACEPARENT_LEN bytes (not NUL-terminated); out may be NULL. */
void px_trace_attempt(px_trace_ctx_t *t, char *out);

/** The trace id in lower-case hex, NUL-terminated (out holds 33 bytes). */
void px_trace_id_hex(const px_trace_ctx_t *t, char *out);

enum { PX_SPAN_SERVER = 2, PX_SPAN_CLIENT = 3 }; /* OTLP Span.SpanKind */

/** A finished span as the core describes it. Strings may be NULL (the
 *  attribute is left out); times are uv_hrtime() nanoseconds. */
typedef struct px_span {
  int kind;
  const char *id;     /**< 16 hex digits (px_trace_ctx_t's) */
  const char *parent; /**< 16 hex digits; NULL: a root span */
  uint64_t start, end;
  uint64_t first_token;      /**< 0: no gen_ai.first_token event */
  const char *operation;     /**< gen_ai.operation.name */
  const char *name_model;    /**< the model in the span name */
  const char *provider;      /**< gen_ai.provider.name */
  const char *request_model; /**< gen_ai.request.model */
  /* the answer's, as the protocol spelled them; len 0: none */
  px_str_t response_model; /**< gen_ai.response.model */
  px_str_t response_id;    /**< gen_ai.response.id */
  px_str_t finish_reason;  /**< gen_ai.response.finish_reasons: [it] */
  int64_t max_tokens;   /**< gen_ai.request.max_tokens; <0: none */
  int64_t input_tokens; /**< <0: unknown */
  int64_t output_tokens;
  const char *server_url; /**< server.address is its host */
  int status;             /**< http.response.status_code; 0: none */
  const char *error_type; /**< error.type and status ERROR; NULL: none */
  const char *key;        /**< proxai.key (the key's name) */
  const char *team;       /**< proxai.team */
  const char *user;       /**< proxai.user */
  const char *route;      /**< proxai.route */
  const char *upstream;   /**< proxai.upstream */
  const char *lossy;      /**< proxai.lossy: comma-separated field list */
  int64_t cost_nano;      /**< proxai.cost_usd in nano-USD; <0: none */
  unsigned attempt;       /**< proxai.attempt (CLIENT spans), 1-based */
  /** The configuration that owns operation, provider, server_url and
   *  upstream (CLIENT) or key, team and route (SERVER): their encoded
   *  attributes are kept for the next span while a reference on it is
   *  held. NULL: they are not (a runtime key's name, tests). */
  const px_config_t *cfg;
} px_span_t;

/** Writes a finished span of a sampled request into the batch; a span that
 *  does not fit is dropped and counted. */
void px_trace_emit(const px_trace_ctx_t *t, const px_span_t *s);

/** Spans waiting in the batch. */
size_t px_trace_pending(void);
/** Whether the batch is large enough to be sent now. */
int px_trace_ready(void);

/** Moves the batch out as one complete ExportTraceServiceRequest (OTLP/JSON)
 *  into body (emptied first; its memory is the caller's until the next
 *  take) and returns its span count; 0 when empty. */
size_t px_trace_take(px_buf_t *body);

/** Spans lost: counted in proxai_trace_spans_dropped_total{reason}. */
void px_trace_dropped(size_t n, const char *reason);

/** Called (from px_trace_emit) when the batch holds enough spans to be sent
 *  now rather than at the next tick; NULL: none. */
void px_trace_on_ready(void (*cb)(void));

/** Refreshes the offset between uv_hrtime() and the wall clock (called at
 *  start and on each exporter tick). */
void px_trace_clock(void);

/** Discards the batch and its memory, and the kept attributes with their
 *  configuration's reference (worker exit, tests). */
void px_trace_reset(void);

#endif
