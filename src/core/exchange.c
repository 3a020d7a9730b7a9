/* exchange.c - the life of one exchange, and nothing above it: its memory
 * (new, recycled), the client's response (error, respond, write, flush,
 * abort), the client's side (drain, close) and the one exit, finalize().
 * The attempt (attempt.c), the upstream request (upreq.c) and the response
 * modes (respond.c) stand on it; it calls none of them.
 *
 * After finalize the exchange is not touched. A caller that has just ended
 * it (px_exch_error, px_exch_finalize, ...) returns at once; a callback
 * that may run later (the client's connection, the upstream transfer, the
 * state backend) is handed px_exch_arg(x), a handle that carries the
 * exchange's generation, and px_exch_get() gives the exchange back only
 * while that generation lives (handle.h: the generation is kept in a
 * table, never in the exchange, so a handle outlives its memory safely).
 */
#include "exchange.h"

#include <stdio.h>
#include <stdlib.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <string.h>
#include <strings.h>

#include "proxai/inflight.h"
#include "proxai/keys.h"
#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/money.h"

static void finalize(px_exch_t *x);
static const px_conn_handler_t conn_handler;

px_handles_t px_exch_handles;

/* ---------------------------------------------------------------------- */
/* the client's response                                                    */

/* Build the client-shape error body and send it. */
void px_exch_error_h(px_exch_t *x, px_errkind_t kind, int status, const char *msg,
                     const char *param, const px_hdr_t *extra, size_t nextra) {
  if (x->conn == NULL) {
    finalize(x);
    return;
  }
  px_buf_t b;
  px_buf_init(&b, 1u << 20);
  const px_proto_ops_t *ops = px_exch_client_ops(x);
  const char *type = ops->error_type(kind);
  ops->encode_error(&b, kind, type, msg, param, x->req->request_id);
  x->status = status ? status : px_errkind_status(kind);
  x->error_type = type;
  px_log_req(PX_LOG_DEBUG, x->req->request_id, "%d %s", x->status, type);
  px_hdr_t h[8];
  size_t n = 0;
  for (size_t i = 0; i < nextra && n < 6; i++)
    if (px_header_value_ok(extra[i].value.ptr, extra[i].value.len)) h[n++] = extra[i];
  if (x->lossy.len && px_header_value_ok(x->lossy.buf, x->lossy.len))
    h[n++] = (px_hdr_t){px_str("x-proxai-lossy"), px_str(x->lossy.buf)};
  h[n++] = (px_hdr_t){px_str("content-type"), px_str("application/json")};
  x->started = 1;
  if (px_resp_start(x->conn, x->status, h, n, (int64_t)b.len) == 0)
    px_resp_write(x->conn, b.data, b.len, 0);
  px_buf_free(&b);
  finalize(x);
}

void px_exch_error(px_exch_t *x, px_errkind_t kind, const char *msg, const char *param) {
  px_exch_error_h(x, kind, 0, msg, param, NULL, 0);
}

static int value_ok(const char *v) { return px_header_value_ok(v, strlen(v)); }

/* Response head for the client: passed-back headers plus ours. Every value
 * goes through the one header-value rule (SPEC 10); the framing headers
 * (Content-Length, Transfer-Encoding) are the server's, never an upstream's. */
static size_t build_head(px_exch_t *x, px_hdr_t *h, size_t max, const char *ctype,
                         int stream) {
  size_t n = 0;
  h[n++] = (px_hdr_t){px_str("content-type"), px_str(value_ok(ctype) ? ctype : "application/json")};
  if (stream) {
    h[n++] = (px_hdr_t){px_str("cache-control"), px_str("no-cache")};
    h[n++] = (px_hdr_t){px_str("x-accel-buffering"), px_str("no")};
  }
  if (x->label[0] && value_ok(x->label))
    h[n++] = (px_hdr_t){px_str("x-proxai-upstream"), px_str(x->label)};
  if (x->lossy.len && px_header_value_ok(x->lossy.buf, x->lossy.len))
    h[n++] = (px_hdr_t){px_str("x-proxai-lossy"), px_str(x->lossy.buf)};
  const char *p = x->passhdrs.data, *e = p + x->passhdrs.len;
  while (p < e && n + 1 < max) {
    const char *name = p;
    p += strlen(p) + 1;
    const char *val = p;
    p += strlen(p) + 1;
    /* the upstream's x-request-id would clash with ours */
    if (strcasecmp(name, "x-request-id") == 0) name = "x-upstream-request-id";
    h[n++] = (px_hdr_t){px_str(name), px_str(val)};
  }
  return n;
}

int px_exch_respond(px_exch_t *x, int status, const char *ctype, int stream, int64_t clen) {
  px_hdr_t h[48];
  size_t n = build_head(x, h, 48, ctype, stream);
  x->status = status;
  x->started = 1;
  return px_resp_start(x->conn, status, h, n, clen);
}

void px_exch_write(px_exch_t *x, const char *p, size_t n) {
  if (x->conn == NULL || n == 0) return;
  if (x->t_first == 0) x->t_first = uv_hrtime();
  px_resp_write(x->conn, p, n, 0);
}

/* Send what the encoder wrote. Large output (the closing events of a
 * Responses stream repeat the whole text) is handed over, not copied. */
void px_exch_flush(px_exch_t *x) {
  if (x->obuf.len >= (64u << 10) && x->conn) {
    if (x->t_first == 0) x->t_first = uv_hrtime();
    size_t n;
    char *d = px_buf_steal(&x->obuf, &n);
    px_resp_write(x->conn, d, n, PX_RESP_TAKE);
    return;
  }
  px_exch_write(x, x->obuf.data, x->obuf.len);
  px_buf_reset(&x->obuf);
  /* an idle stream keeps no large buffer (the first events of a Responses
   * stream are ~2 KiB; the deltas that follow fit the smallest size): an
   * allocation for a larger event is the price of 8,000 streams under
   * 16 KiB each (keeping 2 KiB made a Responses client's stream 18 KiB) */
  if (x->obuf.size > 512) px_buf_free(&x->obuf);
}

/* A failed transfer before the response started: a 502 or 504 in the
 * client's shape. */
void px_exch_fail(px_exch_t *x, px_xfer_result_t result) {
  char msg[256];
  px_errkind_t k = px_exch_result_kind(result);
  snprintf(msg, sizeof(msg), "%s: upstream '%s' %s",
           k == PX_ERR_TIMEOUT ? "gateway timeout" : "bad gateway", x->up->name,
           result == PX_XFER_ECONNECT ? "is unreachable"
           : k == PX_ERR_TIMEOUT      ? "timed out"
                                      : "failed");
  px_exch_error(x, k, msg, NULL);
}

/* A response cut short that cannot be ended in the client's protocol: the
 * connection is dropped (finalize follows). */
void px_exch_abort(px_exch_t *x) {
  px_conn_set_handler(x->conn, NULL, NULL);
  px_resp_abort(x->conn);
  x->conn = NULL;
}

px_errkind_t px_exch_result_kind(px_xfer_result_t r) {
  switch (r) {
  case PX_XFER_ETIMEOUT_CONNECT:
  case PX_XFER_ETIMEOUT_FIRST_BYTE:
  case PX_XFER_ETIMEOUT_IDLE:
    return PX_ERR_TIMEOUT;
  default:
    return PX_ERR_BAD_GATEWAY;
  }
}

/* ---------------------------------------------------------------------- */
/* finalize: the one exit of every request                                  */

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

/* px_lossy_each: one proxai_lossy_fields_total count ({inbound, upstream}). */
static void count_lossy(void *arg, const char *field) {
  const char *const *l = arg;
  px_metrics_lossy(l[0], l[1], field);
}

/* ---------------------------------------------------------------------- */
/* tracing (SPEC 15): a SERVER span per request from its first byte to its
 * last (finalize), a CLIENT span per attempt from its transfer's start to
 * its end, children of the SERVER span, so retries and fallbacks are
 * siblings; an attempt's span is written when the next attempt starts or at
 * finalize (the last one then carries the answer's usage). trace.c encodes
 * them into the worker's batch; trace_export.c sends it. */

/* an answer not seen yet (its strings' first bytes and lengths) */
static void answer_clear(px_answer_t *a) {
  a->id[0] = a->model[0] = a->finish[0] = 0;
  a->id_len = a->model_len = a->finish_len = a->noted = 0;
}

/* The request's trace context: the client's traceparent and tracestate
 * (noted by the server's pass over the head) continued. */
static void trace_begin(px_exch_t *x) {
  px_trace_begin(&x->tr, &x->cfg->trace, x->req->traceparent, x->req->tracestate);
  if (!x->tr.sampled) return;
  x->ans_pass = 0;
  answer_clear(&x->ans_up);
  answer_clear(&x->ans_cl);
}

/* The answer as the client got it: a translated one's (ans_cl); a
 * pass-through one's is the upstream's, its model written back when the
 * route rewrites it */
static const px_answer_t *answer_client(px_exch_t *x) {
  if (!x->ans_pass && !x->pt_init) return &x->ans_cl;
  if (!(x->up_model && x->model && x->up_model != x->model &&
        strcmp(x->up_model, x->model) != 0))
    return &x->ans_up;
  x->ans_cl = x->ans_up;
  px_copy_cut(x->ans_cl.model, sizeof(x->ans_cl.model), px_str(x->model), PX_STR(""));
  x->ans_cl.model_len = (unsigned char)strlen(x->ans_cl.model);
  return &x->ans_cl;
}

void px_exch_trace_answer(px_exch_t *x, const char *up, size_t un, size_t up_tail,
                          const char *cl, size_t cn) {
  if (!x->tr.sampled) return;
  px_answer_body(&px_proto_get(x->out)->watch, up ? up : "", un, up_tail, &x->ans_up);
  if (cl == NULL)
    x->ans_pass = 1;         /* passed through (answer_client) */
  else if (!x->ans_cl.noted) /* its encoder does not note it */
    px_answer_read(&px_exch_client_ops(x)->watch, cl, cn, NULL, &x->ans_cl);
}

void px_exch_trace_stream(px_exch_t *x) {
  if (!x->tr.sampled) return;
  if (x->pt_init) { /* the same events (the model written back: at the end) */
    px_passthru_answer(&x->pt, &x->ans_up);
    return;
  }
  px_stream_tr_answer(x->str, &x->ans_up, &x->ans_cl);
}

/* The output token limit the client's body sets, where its protocol keeps
 * it (the first of its keys present), as the body scan found it (each cap
 * at most once there: the upstream reads the same value); -1 when none.
 * Read once. */
int64_t px_exch_max_tokens(px_exch_t *x) {
  if (x->max_tokens_read) return x->max_tokens;
  x->max_tokens_read = 1;
  x->max_tokens = -1;
  const char *bd = x->req->body.data ? x->req->body.data : "";
  for (size_t i = 0; i < PX_JREQ_CAPS; i++) {
    size_t vs = x->jreq.cap_at[i], vl = x->jreq.cap_len[i];
    if (vl > 0 && bd[vs] >= '0' && bd[vs] <= '9') {
      uint64_t v = 0; /* the digits of the number, saturated */
      for (size_t k = vs; k < vs + vl && bd[k] >= '0' && bd[k] <= '9'; k++)
        v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + (uint64_t)(bd[k] - '0');
      x->max_tokens = v > INT64_MAX ? INT64_MAX : (int64_t)v;
      break;
    }
  }
  return x->max_tokens;
}

/* error.type in the client protocol's words for an attempt's outcome */
static const char *attempt_error(px_exch_t *x) {
  const px_proto_ops_t *ops = px_exch_client_ops(x);
  if (x->tr_status >= 400)
    return ops->error_type(px_errkind_from_type(NULL, x->tr_status));
  if (x->tr_failed) return ops->error_type(px_exch_result_kind(x->tr_result));
  if (x->tr_cut)
    return x->error_type ? x->error_type : "cancelled"; /* the gateway's name */
  return NULL;
}

/* The attempt span (last: the one whose answer the client got). Its
 * members are all named, as the request span's are: the record is built
 * by stores, not a clearing of the whole struct first (a rep stos, ~30
 * instructions a span) */
static void emit_attempt(px_exch_t *x, int last) {
  const px_upstream_conf_t *up = x->tr_up;
  px_span_t s = {
      .kind = PX_SPAN_CLIENT,
      .id = x->tr.att_hex,
      .parent = x->tr.span_hex,
      .start = x->tr_start,
      .end = x->tr_end ? x->tr_end : uv_hrtime(),
      .first_token = 0,
      .operation = px_exch_client_ops(x)->otel_operation,
      .name_model = x->tr_model,
      .provider = px_proto_get(up->protocol)->otel_provider,
      .request_model = x->tr_model,
      .response_model = {x->ans_up.model, last ? x->ans_up.model_len : 0},
      .response_id = {x->ans_up.id, last ? x->ans_up.id_len : 0},
      .finish_reason = {x->ans_up.finish, last ? x->ans_up.finish_len : 0},
      .max_tokens = -1,
      .input_tokens = last ? x->usage.input_tokens : -1,
      .output_tokens = last ? x->usage.output_tokens : -1,
      .server_url = up->base_url,
      .status = x->tr_status,
      .error_type = attempt_error(x),
      .key = NULL,
      .team = NULL,
      .user = NULL,
      .route = NULL,
      .upstream = up->name,
      .lossy = NULL,
      .cost_nano = -1,
      .attempt = x->tr_n,
      .cfg = x->cfg, /* the upstream's names */
  };
  px_trace_emit(&x->tr, &s);
  x->tr_start = 0;
}

void px_exch_trace_attempt(px_exch_t *x) {
  if (!x->tr.on) return;
  if (x->tr.sampled && x->tr_start) emit_attempt(x, 0); /* the previous one */
  px_trace_attempt(&x->tr, x->tr_hdr);                  /* propagated, sampled or not */
  if (!x->tr.sampled) return;                           /* nothing more is recorded */
  x->tr_up = x->up;
  x->tr_model = x->up_model;
  x->tr_n = x->attempts;
  x->tr_start = uv_hrtime();
  x->tr_end = 0;
  x->tr_status = 0;
  x->tr_failed = 0;
  x->tr_cut = 0;
}

static void trace_end(px_exch_t *x, uint64_t end) {
  if (x->tr_start) emit_attempt(x, 1);
  const px_answer_t *cl = answer_client(x);
  const px_proto_ops_t *ops = px_exch_client_ops(x);
  /* an answered error in the client protocol's words (a forwarded or
   * translated upstream error by its status); a failure after the answer
   * started (a cut stream, a client gone) by the gateway's name for it */
  const char *err = x->error_type;
  if (x->status >= 400) err = ops->error_type(px_errkind_from_type(err, x->status));
  px_span_t s = {
      .kind = PX_SPAN_SERVER,
      .id = x->tr.span_hex,
      .parent = x->tr.has_parent ? x->tr.parent_hex : NULL,
      .start = x->t_start,
      .end = end,
      .first_token = x->t_first,
      .operation = ops->otel_operation,
      .name_model = x->model,
      .provider = NULL,
      .request_model = x->model,
      .response_model = {cl->model, cl->model_len},
      .response_id = {cl->id, cl->id_len},
      .finish_reason = {cl->finish, cl->finish_len},
      .max_tokens = px_exch_max_tokens(x),
      .input_tokens = x->usage.input_tokens,
      .output_tokens = x->usage.output_tokens,
      .server_url = NULL,
      .status = x->status,
      .error_type = err,
      .key = x->key ? x->key->name : NULL,
      .team = x->team,
      .user = x->user,
      .route = x->route ? x->route->pattern : NULL,
      .upstream = NULL,
      .lossy = x->lossy.len ? x->lossy.buf : NULL,
      .cost_nano = x->cost_nano,
      .attempt = 0,
      .cfg = x->rkey ? NULL : x->cfg, /* a runtime key's name is its own */
  };
  px_trace_emit(&x->tr, &s);
}

/* The access log line of the exchange (written once its bytes are out). */

static void access_log(px_exch_t *x, const char *inbound, const char *upname, double dur,
                       double ttft) {
  if (!px_access_log_on()) return; /* access_log = off: no record at all */
  px_access_rec_t rec = {
      .request_id = x->req->request_id,
      .key_name = x->key ? x->key->name : NULL,
      .method = "POST",
      .path = NULL,
      .inbound = inbound,
      .route = x->route ? x->route->pattern : NULL,
      .upstream = upname,
      .model = x->model,
      .upstream_model = x->up_model,
      .stream = x->stream,
      .status = x->status,
      .bytes_in = x->req->body.len,
      .bytes_out = x->conn ? px_conn_bytes_out(x->conn) : 0,
      .input_tokens = x->usage.input_tokens,
      .output_tokens = x->usage.output_tokens,
      .duration_ms = dur * 1e3,
      .ttfb_ms = ttft < 0 ? -1 : ttft * 1e3,
      .attempts = x->attempts,
      .error_type = x->error_type,
      .lossy = x->lossy.len ? x->lossy.buf : NULL,
      .cost_nano = x->cost_nano,
      .team = x->team,
      .user = x->user,
  };
  char trace_id[33];
  if (x->tr.on) {
    px_trace_id_hex(&x->tr, trace_id);
    rec.trace_id = trace_id;
  }
  char path[256];
  px_copy_cut(path, sizeof(path), (px_str_t){x->req->url.data, x->req->path_len}, PX_STR(""));
  rec.path = path;
  if (x->conn) px_conn_access_log(x->conn, &rec); /* once the bytes are out */
  else px_access_log(&rec);
}

/* /metrics and the key's tpm settlement. */
static void account(px_exch_t *x, const char *inbound, const char *upname, double dur,
                    double ttft) {
  if (x->attempt_open && x->up)
    px_metrics_attempt(x->up->name, x->metric_status ? x->error_type : NULL);
  /* a response that failed after it started counts as that failure */
  px_metrics_request(inbound, upname, x->metric_status ? x->metric_status : x->status, dur,
                     x->stream ? ttft : -1);
  px_metrics_route(x->route ? x->route->pattern : NULL, upname,
                   x->metric_status ? x->metric_status : x->status);
  const char *labels[2] = {inbound, upname};
  px_lossy_each(&x->lossy, count_lossy, labels); /* one count per dropped field */
  int64_t toks = (x->usage.input_tokens > 0 ? x->usage.input_tokens : 0) +
                 (x->usage.output_tokens > 0 ? x->usage.output_tokens : 0);
  if (toks > 0 || x->usage.input_tokens >= 0)
    px_metrics_tokens(x->key ? x->key->name : NULL, upname, x->usage.input_tokens,
                      x->usage.output_tokens);
  if (x->cost_nano > 0)
    px_metrics_spend(x->key ? x->key->name : NULL, x->team, x->up_model, x->cost_nano);
  /* admitted with reservations, or spend to count on the key and team */
  if (x->rl_admitted || (x->adm.key && x->cost_nano > 0))
    px_rl_settle(&x->adm, (uint64_t)toks, x->cost_nano > 0 ? x->cost_nano : 0,
                 px_exch_now(x));
  px_inflight_drop(x->rl_rec);
}

/* What the request cost (SPEC 12): the last usage the upstream reported at
 * the [price] of the model sent upstream (a fallback's when it answered);
 * 0 without usage (refused, cut before any); -1 when that model has no
 * price (or nothing went upstream). */
static int64_t cost_of(const px_exch_t *x) {
  if (x->up_model == NULL) return -1;
  const px_price_conf_t *p = px_config_price(x->cfg, x->up_model);
  if (p == NULL) return -1;
  return px_cost(p, &x->usage);
}

/* Memory back after a burst of large requests: glibc keeps the heap a burst
 * grew (a few hundred KB a request in flight) after it is freed. When the
 * last exchange of this process ends and one of those since the last trim
 * had a large body, the free pages go back to the system (malloc_trim) once
 * a second has passed with none in flight; small requests never arm it. */
#define TRIM_BODY (64u << 10)
static size_t live;  /* exchanges of this process in flight */
static int trim_due; /* a large body since the last trim */
static uv_timer_t trim_timer;
static int trim_timer_init;

static void on_trim(uv_timer_t *t) {
  (void)t;
  if (live > 0 || !trim_due) return;
  trim_due = 0;
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

static void trim_later(px_worker_t *w) {
  if (!trim_timer_init) {
    if (uv_timer_init(w->loop, &trim_timer) != 0) return;
    uv_unref((uv_handle_t *)&trim_timer); /* never keeps the loop alive */
    trim_timer_init = 1;
  }
  if (!uv_is_closing((uv_handle_t *)&trim_timer))
    uv_timer_start(&trim_timer, on_trim, 1000, 0);
}

/* One finished exchange's memory, its small buffers' with it, kept for the
 * next request (a keep-alive client's next one, most often): a malloc and
 * free of the exchange and the first growth of each buffer saved per
 * request. One per process (one event loop): nothing piles up. */
static px_exch_t *spare;
static px_buf_t spare_bufs[3]; /* its passhdrs, acc, obuf: outside it, seen by LSan */
#define SPARE_BUF_MAX 4096     /* a larger buffer is freed, as before */
/* While kept, the exchange is poisoned for AddressSanitizer: a use after
 * finalize is still reported as one. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PX_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(PX_ASAN)
#include <sanitizer/asan_interface.h>
#define SPARE_POISON(p) ASAN_POISON_MEMORY_REGION((p), sizeof(*(p)))
#define SPARE_UNPOISON(p) ASAN_UNPOISON_MEMORY_REGION((p), sizeof(*(p)))
#else
#define SPARE_POISON(p) ((void)(p))
#define SPARE_UNPOISON(p) ((void)(p))
#endif

static void buf_keep(px_buf_t *to, px_buf_t *b) {
  if (b->size > SPARE_BUF_MAX) px_buf_free(b);
  px_buf_reset(b);
  *to = *b;
}

/* A new exchange's memory: zero up to retry_reason, its passhdrs, acc and
 * obuf empty (cap 0; a reused one's memory kept); NULL when out of memory. */
static px_exch_t *exch_alloc(void) {
  px_exch_t *x = spare;
  px_buf_t keep[3];
  memset(keep, 0, sizeof(keep));
  if (x != NULL) {
    spare = NULL;
    SPARE_UNPOISON(x);
    memcpy(keep, spare_bufs, sizeof(keep));
    memset(spare_bufs, 0, sizeof(spare_bufs));
  } else if ((x = malloc(sizeof(*x))) == NULL) {
    return NULL;
  }
  memset(x, 0, offsetof(px_exch_t, retry_reason));
  x->passhdrs = keep[0], x->acc = keep[1], x->obuf = keep[2];
  x->jumps.v = NULL;
  return x;
}

px_exch_t *px_exch_new(px_worker_t *w, px_conn_t *c, px_req_t *r, px_proto_t in,
                       px_endpoint_t ep) {
  px_exch_t *x = exch_alloc();
  if (x == NULL) return NULL;
  if ((x->ref = px_handle_new(&px_exch_handles, x)) == 0) {
    px_buf_free(&x->passhdrs);
    px_buf_free(&x->acc);
    px_buf_free(&x->obuf);
    free(x);
    return NULL;
  }
  px_inflight_begin(); /* until finalize: lost if this worker dies first */
  live++;
  if (r->body.len > TRIM_BODY) trim_due = 1;
  x->retry_reason[0] = x->bad_msg[0] = x->content_type[0] = x->label[0] = 0;
  px_lossy_init(&x->lossy);
  x->w = w;
  x->conn = c;
  x->req = r;
  x->cfg = px_config_ref(w->config);
  x->in = in;
  x->ep = ep;
  x->t_start = r->start_ns;
  x->usage.input_tokens = x->usage.output_tokens = -1;
  x->passhdrs.cap = 64 * 1024;
  x->obuf.cap = PX_MAX_STREAM_OUT;
  if (x->cfg->trace.endpoint) trace_begin(x); /* SPEC 15 */
  px_conn_set_handler(c, &conn_handler, px_exch_arg(x));
  return x;
}

void px_exch_drop_upreq(px_exch_t *x) {
  free(x->up_body_owned);
  free(x->up_hdrs);
  free(x->url);
  free(x->up_parts);
  px_spans_free(&x->up_spans);
  x->up_parts = NULL;
  x->up_nparts = 0;
  x->up_body_owned = NULL;
  x->up_hdrs = NULL;
  x->tr_hdr = NULL;
  x->url = NULL;
}

/* The exchange's memory (freed here, or when its timer has closed). */
static void exch_free(px_exch_t *x) {
  free(x->model_buf);
  free(x->jumps.v);
  if (x->rs) x->rs_part->free(x);
  free(x->user_buf);
  px_keys_free(x->rkey);
  px_exch_drop_upreq(x);
  if (x->str) px_stream_tr_free(x->str);
  if (x->pt_init) px_passthru_done(&x->pt);
  px_config_unref(x->cfg);
  if (!x->timer_init && spare == NULL) {
    buf_keep(&spare_bufs[0], &x->passhdrs);
    buf_keep(&spare_bufs[1], &x->acc);
    buf_keep(&spare_bufs[2], &x->obuf);
    spare = x;
    SPARE_POISON(x);
    return;
  }
  px_buf_free(&x->passhdrs);
  px_buf_free(&x->acc);
  px_buf_free(&x->obuf);
  if (x->timer_init) {
    uv_timer_stop(&x->timer);
    x->timer.data = x;
    uv_close((uv_handle_t *)&x->timer, on_timer_closed);
  } else {
    free(x);
  }
}

/* Ends the exchange once: the transfer, the access log, metrics, limits,
 * the client's response, the exchange's memory. A second call is a no-op. */
static void finalize(px_exch_t *x) {
  if (x->finalized || (x->rs && x->rs_part->defer(x))) return;
  x->finalized = 1;
  px_handle_release(&px_exch_handles, x->ref); /* from here on no callback finds it */
  if (x->xfer) {
    px_xfer_cancel(x->xfer);
    x->xfer = NULL;
    /* the attempt is cut here (client gone, a timeout): its span ends now,
     * failed */
    if (x->tr_start && !x->tr_end) {
      x->tr_end = uv_hrtime();
      x->tr_cut = 1;
    }
  }
  px_balance_end(x->bal); /* the attempt's transfer is over */
  x->bal = NULL;
  if (x->rl_wait) {
    px_rl_cancel(x->rl_wait);
    x->rl_wait = NULL;
  }
  if (x->paused) px_metrics_gauge_add(PX_G_PAUSED_STREAMS, -1);
  if (x->streaming_gauge) px_metrics_gauge_add(PX_G_ACTIVE_STREAMS, -1);
  /* what a stream has shown so far is charged, however it ended (cut,
   * failed, client gone): a client cannot dodge tpm by leaving early */
  if (x->pt_init) px_usage_merge(&x->usage, &x->pt.usage);
  if (x->str) px_usage_merge(&x->usage, px_stream_tr_usage(x->str));
  uint64_t end = uv_hrtime();
  double dur = (double)(end - x->t_start) / 1e9;
  double ttft = x->t_first ? (double)(x->t_first - x->t_start) / 1e9 : -1;
  const char *inbound = px_proto_get(x->in)->name;
  const char *upname = x->up ? x->up->name : NULL;
  /* what a translated stream actually dropped joins what the headers named */
  if (x->str) px_lossy_merge(&x->lossy, px_stream_tr_dropped(x->str));
  x->cost_nano = cost_of(x);
  access_log(x, inbound, upname, dur, ttft);
  account(x, inbound, upname, dur, ttft);
  if (x->tr.sampled) trace_end(x, end);
  if (x->conn) {
    px_conn_set_handler(x->conn, NULL, NULL);
    if (x->started) px_resp_end(x->conn);
    else px_resp_abort(x->conn);
    x->conn = NULL;
  }
  px_worker_t *w = x->w;
  exch_free(x);
  px_inflight_end();
  if (--live == 0 && trim_due) trim_later(w);
}

void px_exch_finalize(px_exch_t *x) { finalize(x); }

/* ---------------------------------------------------------------------- */
/* client side events                                                        */

static void on_client_drain(void *arg) {
  px_exch_t *x = px_exch_get((px_exch_ref_t)arg);
  if (x == NULL) return;
  if (x->paused && x->xfer) {
    x->paused = 0;
    px_metrics_gauge_add(PX_G_PAUSED_STREAMS, -1);
    px_xfer_resume(x->xfer);
  }
}

static void on_client_close(void *arg) {
  px_exch_t *x = px_exch_get((px_exch_ref_t)arg);
  if (x == NULL) return;
  x->conn = NULL;
  if (x->status == 0) x->status = 499;
  x->error_type = "client_closed";
  finalize(x);
}

static const px_conn_handler_t conn_handler = {on_client_drain, on_client_close};
