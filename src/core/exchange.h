/* exchange.h - the request core's exchange (not installed).
 *
 * One request is one exchange (px_exch_t), from admission until finalize.
 * The core's files stand on each other, arrows only downward:
 *
 *   admit.c     the front door: gateway endpoints, the body scan, the client
 *               key, the key's models, rate limits, the route
 *   attempt.c   the attempt: deployment pick, transfer, the upstream head,
 *               retries and fallbacks (attempt.h)
 *   respond.c   the response modes: one handler table each, chosen once
 *               when the upstream head arrives (respond.h)
 *   upreq.c     the upstream request: body (pass-through or translated),
 *               URL and headers, from the protocols' ops (upreq.h)
 *   exchange.c  the exchange's life: new, the client's response (error,
 *               respond, write, flush, abort), the client's side, finalize,
 *               its memory recycled (this header)
 */
#ifndef PROXAI_EXCHANGE_H
#define PROXAI_EXCHANGE_H

#include <string.h>

#include "proxai/balance.h"
#include "proxai/handle.h"
#include "proxai/json.h"
#include "proxai/passthru.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/proxy.h"
#include "proxai/ratelimit.h"
#include "proxai/server.h"
#include "proxai/trace.h"
#include "proxai/upstream.h"
#include "proxai/usage.h"
#include "proxai/worker.h"

#define PX_MAX_UPSTREAM_JSON (64u << 20) /* translated non-stream body cap */
#define PX_MAX_UPSTREAM_ERROR (1u << 20)
#define PX_MAX_STREAM_ACCUM (16u << 20)
/* client output of one upstream chunk: the Responses closing events repeat
 * the accumulated text up to four times */
#define PX_MAX_STREAM_OUT (4 * PX_MAX_STREAM_ACCUM + (1u << 20))

typedef struct px_exch px_exch_t;
typedef struct px_stored_x px_stored_x_t;

/* The stored-responses part of an exchange (x->rs), kept by stored.c above
 * the exchange: finalize asks it whether to wait, recycling frees it,
 * through the table stored.c sets beside x->rs. */
typedef struct px_exch_part {
  int (*defer)(px_exch_t *x); /* 1: finalize waits (it is called again) */
  void (*free)(px_exch_t *x);
} px_exch_part_t;

/* A handle on an exchange, for a callback that may run after the exchange
 * ended: px_exch_get() gives the exchange while it lives, else NULL. Passed
 * as the callback's void * (px_exch_arg). */
typedef px_handle_t px_exch_ref_t;

/* A response mode: how the answer of one attempt reaches the client. The
 * core picks one when the upstream head arrives (px_mode_choose, or the
 * retry's discard mode) and calls only these from then on. */
typedef struct px_mode {
  const char *name;
  /* the mode was chosen: buffers, stream state, the response head for a
   * stream; <0 refuses the transfer */
  int (*on_head)(px_exch_t *x);
  /* upstream body bytes: 0, PX_XFER_PAUSE or <0 (the transfer fails) */
  int (*on_data)(px_exch_t *x, const char *p, size_t n);
  /* the transfer ended well: answer (or retry) and finalize */
  void (*on_done)(px_exch_t *x);
  /* the transfer failed before the client's response started */
  void (*on_fail)(px_exch_t *x, px_xfer_result_t r);
  /* the transfer failed after the response started: end it in the
   * client's protocol (an error event), or drop the connection */
  void (*on_cut)(px_exch_t *x, px_xfer_result_t r);
  /* a failed transfer counts a failed attempt in /metrics even when no
   * 2xx attempt is open (no head yet, or a retried answer) */
  int count_failure;
} px_mode_t;


struct px_exch {
  px_exch_ref_t ref;     /* its handle; stale once finalized */
  px_worker_t *w;
  px_conn_t *conn;       /* NULL once the client is gone */
  px_req_t *req;
  px_config_t *cfg;      /* reference held until finalize */
  px_endpoint_t ep;
  px_proto_t in, out;
  px_json_req_t jreq;    /* the request scan: model/stream spans in req->body */
  const char *model;     /* client's model (model_buf) */
  char *model_buf;
  int stream;
  int include_usage;
  const px_key_conf_t *key;
  px_key_conf_t *rkey;   /* a runtime key (keys.h), owned: key points to it */
  px_rl_wait_t *rl_wait; /* admission waiting for the state backend */
  px_admit_t adm;        /* what admission set aside (tpm tokens, budget cost) */
  int64_t max_tokens;    /* px_exch_max_tokens, once max_tokens_read */
  int max_tokens_read;
  int rl_admitted;       /* settle adm at the end */
  /* who spent what (access log, metrics, traces): */
  const char *team;      /* the key's team, NULL when none */
  const char *user;      /* the end user (user_buf), NULL when none */
  char *user_buf;
  int64_t cost_nano;     /* the request's cost in nano-USD, set at finalize
                            (px_usd_str prints it); -1: no [price] for the
                            upstream model */
  struct px_inflight_rec *rl_rec; /* the reservation, for the master if we die */
  px_stored_x_t *rs;              /* stored responses (stored.c); NULL: none */
  const px_exch_part_t *rs_part;  /* what finalize and recycling do with rs */
  int metric_status;     /* status for /metrics when a started response failed */
  int attempt_open;      /* a 2xx attempt, counted in /metrics when it ends */
  const px_route_conf_t *route;
  const px_route_conf_t *scan_route; /* x->model's, looked up during the scan
                                        (admit.c jumps_wanted), or NULL */
  size_t target;         /* 0 = the route's deployments, k = fallback k-1 */
  unsigned attempt;      /* attempts on this target */
  unsigned attempts;     /* attempts in all */
  size_t dep;            /* deployment of this attempt (target 0) */
  uint64_t tried;        /* deployments tried, bit per index */
  px_bal_up_t *bal;      /* health entry while the attempt's transfer runs */
  int health_done;       /* this attempt's outcome is recorded */
  uint64_t t_attempt;    /* ms, start of this attempt */
  size_t next_target;    /* planned by plan_retry() */
  uint64_t next_delay;
  const px_upstream_conf_t *up;
  const char *up_model;
  const px_upstream_conf_t *built_up; /* what up_body/url/up_hdrs were built for */
  const char *built_model;
  char *up_body_owned;
  const char *up_body;
  size_t up_body_len;  /* the whole body's (parts included) */
  px_spans_t up_spans; /* a translated body's spans of the client body */
  px_str_t *up_parts;  /* the body in parts (up_spans inserted), or NULL */
  size_t up_nparts;
  char **up_hdrs;
  char *url;
  px_xfer_t *xfer;
  const px_mode_t *mode; /* the response mode of this attempt */
  int up_status;
  int acc_trunc;         /* error mode: the body went over PX_MAX_UPSTREAM_ERROR */
  px_buf_t passhdrs;     /* "name\0value\0" pairs to pass back */
  int started;           /* client response head sent */
  int paused;
  int streaming_gauge;
  px_buf_t acc;
  px_buf_t obuf;
  px_stream_tr_t *str;
  px_passthru_t pt;
  int pt_init;
  px_tr_ctx_t ctx;
  uv_timer_t timer;
  int timer_init;
  uint64_t t_start, t_first;
  px_usage_t usage;
  const char *error_type;
  int status;            /* status sent to the client */
  int finalized;         /* finalize() has run */
  /* tracing (SPEC 15): the request's context, and the attempt span that
   * ended last or is running, written out when the next attempt starts or
   * at finalize */
  px_trace_ctx_t tr;
  char *tr_hdr; /* the traceparent value inside tr_line; NULL: none sent */
  const px_upstream_conf_t *tr_up;
  const char *tr_model;
  unsigned tr_n;             /* the attempt's number, 1-based */
  uint64_t tr_start, tr_end; /* uv_hrtime(); tr_start 0: no attempt span */
  int tr_status;             /* its upstream status; 0: none */
  int tr_failed;             /* its transfer failed: tr_result */
  int tr_cut;                /* finalize cancelled its transfer */
  px_xfer_result_t tr_result;
  /* Text buffers, last: exch_new() zeroes the fields above and only empties
   * these (zeroing 1.7 KiB per request costs more than the rest of it). */
  char retry_reason[96]; /* why the last attempt is retried (for the log) */
  char bad_msg[200];     /* bad mode: the 502 message */
  char content_type[128];
  char label[256];       /* x-proxai-upstream value */
  char tr_line[PX_XFER_TRACE_LINE_LEN + 1]; /* the traceparent line (tr_hdr;
                                               the lanes send it after up_hdrs) */
  px_lossy_t lossy;
  /* a traced request's answer (emptied when sampled): as the upstream wrote
   * it (the last attempt's span) and as the client got it (the request's) */
  px_answer_t ans_up, ans_cl;
  int ans_pass; /**< a whole answer passed through: the client's is ans_up */
  /* the scan's container ends (jreq.jumps; v malloc'd, NULL from
   * exch_alloc on; the rest set by admit.c before the scan reads it) */
  px_json_jumps_t jumps;
};

/* The answer's id, model and finish reason for the spans, read from the
 * upstream's body (its usage member at up_tail, px_usage_scan_at, or
 * PX_JSON_NPOS) and the body the client got (NULL: the same bytes, the
 * model written back when the route rewrites it); only for a sampled
 * request. */
void px_exch_trace_answer(px_exch_t *x, const char *up, size_t un, size_t up_tail,
                          const char *cl, size_t cn);
/* A stream's answer watched for the spans: the upstream's events by the
 * pass-through watcher or the translator, the client's as the translator's
 * encoder writes its start and end events. */
void px_exch_trace_stream(px_exch_t *x);

static inline uint64_t px_exch_now(px_exch_t *x) { return uv_now(x->w->loop); }
static inline const px_proto_ops_t *px_exch_client_ops(px_exch_t *x) {
  return px_proto_get(x->in);
}

/* dst = a then b, cut to cap - 1 bytes and NUL-terminated (snprintf "%s%.*s"
 * without printf: this runs per request). */
static inline void px_copy_cut(char *dst, size_t cap, px_str_t a, px_str_t b) {
  size_t k = a.len < cap - 1 ? a.len : cap - 1;
  if (k) memcpy(dst, a.ptr, k);
  size_t l = b.len < cap - 1 - k ? b.len : cap - 1 - k;
  if (l) memcpy(dst + k, b.ptr, l);
  dst[k + l] = 0;
}

/** A new exchange of request r on c (the connection's handler is its
 *  own); NULL when out of memory. Ended by px_exch_finalize, or by any
 *  call below that answers the client. */
px_exch_t *px_exch_new(px_worker_t *w, px_conn_t *c, px_req_t *r, px_proto_t in,
                       px_endpoint_t ep);
/** The handles of the live exchanges (one loop per process). */
extern px_handles_t px_exch_handles;
/** The exchange of handle r, or NULL once it is finalized. */
static inline px_exch_t *px_exch_get(px_exch_ref_t r) {
  return px_handle_get(&px_exch_handles, r);
}
static inline void *px_exch_arg(px_exch_t *x) { return (void *)x->ref; }

/* These end the exchange: the caller returns without touching it again. */
/** an error in the client's protocol (status 0: the kind's), then finalize */
void px_exch_error_h(px_exch_t *x, px_errkind_t kind, int status, const char *msg,
                     const char *param, const px_hdr_t *extra, size_t nextra);
void px_exch_error(px_exch_t *x, px_errkind_t kind, const char *msg, const char *param);
/** a failed transfer before the response started: 502 or 504, finalize */
void px_exch_fail(px_exch_t *x, px_xfer_result_t r);
void px_exch_finalize(px_exch_t *x);

/** the client's response head: passed-back headers plus the gateway's */
int px_exch_respond(px_exch_t *x, int status, const char *ctype, int stream, int64_t clen);
void px_exch_write(px_exch_t *x, const char *p, size_t n);
void px_exch_flush(px_exch_t *x); /* send what an encoder wrote to x->obuf */
/** a response that cannot be ended in the client's protocol: the connection
 *  is dropped (the exchange lives on until finalize) */
void px_exch_abort(px_exch_t *x);
/** the error kind of a failed transfer (timeout or bad gateway) */
px_errkind_t px_exch_result_kind(px_xfer_result_t r);
/** frees the built upstream request (body, headers, URL) */
void px_exch_drop_upreq(px_exch_t *x);
/** The output token limit the client's body sets (its protocol's
 *  max_tokens_keys, the first present), -1 when none; read once. */
int64_t px_exch_max_tokens(px_exch_t *x);
/** Tracing (SPEC 15): the attempt's CLIENT span starts (its traceparent is
 *  written into the built upstream head; the previous attempt's span is
 *  written out); called just before the transfer starts. */
void px_exch_trace_attempt(px_exch_t *x);

#endif
