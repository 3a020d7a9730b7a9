/* proxy.c - the request core. It knows no protocol: it authenticates,
 * routes, asks the translator table for bodies, runs the upstream transfer
 * with retries and fallbacks, feeds the answer through pass-through or the
 * translator, and ends every request through finalize().
 *
 *   request -> auth -> rate limit -> route -> attempt --headers--> mode
 *                                              ^   |
 *                  retry / fallback (timer) ---+   +-- data --> client
 *                                                  +-- done --> finalize
 */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/passthru.h"
#include "proxai/proxy.h"
#include "proxai/ratelimit.h"
#include "proxai/server.h"

#define PX_MAX_UPSTREAM_JSON (64u << 20) /* translated non-stream body cap */
#define PX_MAX_UPSTREAM_ERROR (1u << 20)
#define PX_MAX_STREAM_ACCUM (16u << 20)
/* client output of one upstream chunk: the Responses closing events repeat
 * the accumulated text up to four times */
#define PX_MAX_STREAM_OUT (4 * PX_MAX_STREAM_ACCUM + (1u << 20))
#define PX_MAX_RETRY_AFTER_MS 30000

typedef enum {
  M_NONE,        /* waiting for upstream headers */
  M_DISCARD,     /* retryable answer: drop the body, retry on done */
  M_ERROR,       /* upstream error body: collect, translate on done */
  M_PASS_JSON,   /* same protocol, forwarded as it arrives */
  M_PASS_REWRITE,/* same protocol, model rewritten: collect then send */
  M_PASS_STREAM, /* same protocol SSE */
  M_TR_JSON,     /* translated JSON: collect, translate on done */
  M_TR_STREAM,   /* translated SSE */
} mode_t_;

typedef enum { EP_GATEWAY, EP_COUNT_TOKENS } endpoint_t;

typedef struct px_exch {
  px_server_t *srv;
  px_conn_t *conn;       /* NULL once the client is gone */
  px_req_t *req;
  px_config_t *cfg;      /* reference held until finalize */
  endpoint_t ep;
  px_proto_t in, out;
  json_t *body;
  const char *model;     /* client's model (in body or model_buf) */
  char *model_buf;
  int stream;
  int include_usage;
  const px_key_conf_t *key;
  const px_route_conf_t *route;
  size_t target;         /* 0 = route upstream, k = fallback k-1 */
  unsigned attempt;      /* attempts on this target */
  unsigned attempts;     /* attempts in all */
  const px_upstream_conf_t *up;
  const char *up_model;
  char *up_body_owned;
  const char *up_body;
  size_t up_body_len;
  char **up_hdrs;
  char *url;
  px_xfer_t *xfer;
  mode_t_ mode;
  int up_status;
  int64_t up_content_length;
  px_buf_t passhdrs;     /* "name\0value\0" pairs to pass back */
  char content_type[128];
  uint64_t retry_after_ms;
  int started;           /* client response head sent */
  int paused;
  int streaming_gauge;
  px_buf_t acc;
  px_buf_t obuf;
  px_stream_tr_t *str;
  px_passthru_t pt;
  int pt_init;
  px_lossy_t lossy;
  px_tr_ctx_t ctx;
  uv_timer_t timer;
  int timer_init;
  uint64_t t_start, t_first;
  px_usage_t usage;
  const char *error_type;
  int status;            /* status sent to the client */
  char label[256];       /* x-proxai-upstream value */
} px_exch_t;

static void start_attempt(px_exch_t *x);
static void finalize(px_exch_t *x);
static int parse_body(px_exch_t *x);

static const px_conn_handler_t conn_handler;

/* ---------------------------------------------------------------------- */
/* helpers                                                                  */

static uint64_t now_ms(px_exch_t *x) { return uv_now(x->srv->loop); }

static void free_hdrs(char **h) {
  if (h == NULL) return;
  for (char **p = h; *p; p++) free(*p);
  free(h);
}

static const px_proto_ops_t *client_ops(px_exch_t *x) { return px_proto_get(x->in); }

/* Build the client-shape error body and send it. */
static void send_error_h(px_exch_t *x, px_errkind_t kind, int status, const char *msg,
                         const char *param, const px_hdr_t *extra, size_t nextra) {
  if (x->conn == NULL) {
    finalize(x);
    return;
  }
  px_buf_t b;
  px_buf_init(&b, 1u << 20);
  const px_proto_ops_t *ops = client_ops(x);
  const char *type =
      x->in == PX_PROTO_ANTHROPIC ? px_errkind_anthropic(kind) : px_errkind_openai(kind);
  ops->encode_error(&b, kind, type, msg, param, x->req->request_id);
  x->status = status ? status : px_errkind_status(kind);
  x->error_type = type;
  px_log_debug("%s: %d %s", x->req->request_id, x->status, type);
  px_hdr_t h[8];
  size_t n = 0;
  for (size_t i = 0; i < nextra && n < 6; i++) h[n++] = extra[i];
  if (x->lossy.len) h[n++] = (px_hdr_t){px_str("x-proxai-lossy"), px_str(x->lossy.buf)};
  h[n++] = (px_hdr_t){px_str("content-type"), px_str("application/json")};
  x->started = 1;
  if (px_resp_start(x->conn, x->status, h, n, (int64_t)b.len) == 0)
    px_resp_write(x->conn, b.data, b.len);
  px_buf_free(&b);
  finalize(x);
}

static void send_error(px_exch_t *x, px_errkind_t kind, const char *msg, const char *param) {
  send_error_h(x, kind, 0, msg, param, NULL, 0);
}

/* Headers to give back from the upstream response. */
static int pass_back(const px_hdr_t *h) {
  static const char *const exact[] = {"retry-after", "retry-after-ms", "request-id",
                                      "openai-processing-ms", "openai-version"};
  for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
    if (h->name.len == strlen(exact[i]) &&
        strncasecmp(h->name.ptr, exact[i], h->name.len) == 0)
      return 1;
  if (h->name.len > 12 && strncasecmp(h->name.ptr, "x-ratelimit-", 12) == 0) return 1;
  if (h->name.len > 20 && strncasecmp(h->name.ptr, "anthropic-ratelimit-", 20) == 0) return 1;
  return 0;
}

/* Response head for the client: passed-back headers plus ours. */
static size_t build_head(px_exch_t *x, px_hdr_t *h, size_t max, const char *ctype,
                         int stream) {
  size_t n = 0;
  h[n++] = (px_hdr_t){px_str("content-type"), px_str(ctype)};
  if (stream) {
    h[n++] = (px_hdr_t){px_str("cache-control"), px_str("no-cache")};
    h[n++] = (px_hdr_t){px_str("x-accel-buffering"), px_str("no")};
  }
  if (x->label[0]) h[n++] = (px_hdr_t){px_str("x-proxai-upstream"), px_str(x->label)};
  if (x->lossy.len) h[n++] = (px_hdr_t){px_str("x-proxai-lossy"), px_str(x->lossy.buf)};
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

static int start_response(px_exch_t *x, int status, const char *ctype, int stream,
                          int64_t clen) {
  px_hdr_t h[48];
  size_t n = build_head(x, h, 48, ctype, stream);
  x->status = status;
  x->started = 1;
  return px_resp_start(x->conn, status, h, n, clen);
}

static void client_write(px_exch_t *x, const char *p, size_t n) {
  if (x->conn == NULL || n == 0) return;
  if (x->t_first == 0) x->t_first = uv_hrtime();
  px_resp_write(x->conn, p, n);
}

/* Send what the encoder wrote. Large output (the closing events of a
 * Responses stream repeat the whole text) is handed over, not copied. */
static void flush_obuf(px_exch_t *x) {
  if (x->obuf.len >= (64u << 10) && x->conn) {
    if (x->t_first == 0) x->t_first = uv_hrtime();
    size_t n;
    char *d = px_buf_steal(&x->obuf, &n);
    px_resp_write_take(x->conn, d, n);
    return;
  }
  client_write(x, x->obuf.data, x->obuf.len);
  px_buf_reset(&x->obuf);
}

/* ---------------------------------------------------------------------- */
/* finalize: the one exit of every request                                  */

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

static void finalize(px_exch_t *x) {
  if (x->xfer) {
    px_xfer_cancel(x->xfer);
    x->xfer = NULL;
  }
  if (x->paused) px_metrics_gauge_add(PX_G_PAUSED_STREAMS, -1);
  if (x->streaming_gauge) px_metrics_gauge_add(PX_G_ACTIVE_STREAMS, -1);
  uint64_t end = uv_hrtime();
  double dur = (double)(end - x->t_start) / 1e9;
  double ttft = x->t_first ? (double)(x->t_first - x->t_start) / 1e9 : -1;
  const char *inbound = x->ep == EP_GATEWAY || x->ep == EP_COUNT_TOKENS
                            ? px_proto_get(x->in)->name
                            : NULL;
  const char *upname = x->up ? x->up->name : NULL;
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
  };
  char path[256];
  snprintf(path, sizeof(path), "%.*s", (int)x->req->path_len, x->req->url.data);
  rec.path = path;
  px_access_log(&rec);
  px_metrics_request(inbound, upname, x->status, dur, x->stream ? ttft : -1);
  int64_t toks = (x->usage.input_tokens > 0 ? x->usage.input_tokens : 0) +
                 (x->usage.output_tokens > 0 ? x->usage.output_tokens : 0);
  if (toks > 0 || x->usage.input_tokens >= 0) {
    px_metrics_tokens(x->key ? x->key->name : NULL, upname, x->usage.input_tokens,
                      x->usage.output_tokens);
    if (x->key && x->key->tpm)
      px_rl_charge(x->key->name, x->key->tpm, (uint64_t)toks, now_ms(x));
  }
  if (x->conn) {
    px_conn_set_handler(x->conn, NULL, NULL);
    if (x->started) px_resp_end(x->conn);
    else px_resp_abort(x->conn);
    x->conn = NULL;
  }
  json_decref(x->body);
  free(x->model_buf);
  free(x->up_body_owned);
  free_hdrs(x->up_hdrs);
  free(x->url);
  px_buf_free(&x->passhdrs);
  px_buf_free(&x->acc);
  px_buf_free(&x->obuf);
  if (x->str) px_stream_tr_free(x->str);
  if (x->pt_init) px_passthru_done(&x->pt);
  px_config_unref(x->cfg);
  if (x->timer_init) {
    uv_timer_stop(&x->timer);
    x->timer.data = x;
    uv_close((uv_handle_t *)&x->timer, on_timer_closed);
  } else {
    free(x);
  }
}

/* ---------------------------------------------------------------------- */
/* client side events                                                        */

static void on_client_drain(void *arg) {
  px_exch_t *x = arg;
  if (x->paused && x->xfer) {
    x->paused = 0;
    px_metrics_gauge_add(PX_G_PAUSED_STREAMS, -1);
    px_xfer_resume(x->xfer);
  }
}

static void on_client_close(void *arg) {
  px_exch_t *x = arg;
  x->conn = NULL;
  if (x->status == 0) x->status = 499;
  x->error_type = "client_closed";
  finalize(x);
}

static const px_conn_handler_t conn_handler = {on_client_drain, on_client_close};

/* ---------------------------------------------------------------------- */
/* retries and fallbacks                                                     */

static int retryable_status(int st) {
  return st == 429 || st == 500 || st == 502 || st == 503 || st == 504 || st == 529;
}

/* Is another attempt possible (same target again, or a fallback)? */
static int can_retry(px_exch_t *x) {
  if (x->attempt <= x->up->retries) return 1;
  return x->target < x->route->nfallbacks;
}

static void on_retry_timer(uv_timer_t *t) {
  px_exch_t *x = t->data;
  start_attempt(x);
}

static void schedule_retry(px_exch_t *x) {
  uint64_t delay = 0;
  if (x->attempt > x->up->retries) {
    x->target++; /* fallbacks are tried at once */
    x->attempt = 0;
  } else {
    unsigned shift = x->attempt > 6 ? 6 : x->attempt;
    uint64_t base = 100ull << shift;
    delay = base / 2 + (uint64_t)rand() % (base / 2 + 1);
    if (x->retry_after_ms > delay) delay = x->retry_after_ms;
  }
  x->retry_after_ms = 0;
  x->mode = M_NONE;
  if (!x->timer_init) {
    uv_timer_init(x->srv->loop, &x->timer);
    x->timer_init = 1;
  }
  x->timer.data = x;
  uv_timer_start(&x->timer, on_retry_timer, delay, 0);
}

/* ---------------------------------------------------------------------- */
/* upstream callbacks                                                        */

static uint64_t parse_retry_after(const px_hdr_t *h, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (h[i].name.len == 14 && strncasecmp(h[i].name.ptr, "retry-after-ms", 14) == 0)
      return strtoull(h[i].value.ptr, NULL, 10);
  }
  for (size_t i = 0; i < n; i++) {
    if (h[i].name.len == 11 && strncasecmp(h[i].name.ptr, "retry-after", 11) == 0) {
      char *end;
      double s = strtod(h[i].value.ptr, &end);
      if (end != h[i].value.ptr) return s > 0 ? (uint64_t)(s * 1000) : 0;
      /* an HTTP-date */
      char date[128];
      snprintf(date, sizeof(date), "%.*s", (int)h[i].value.len, h[i].value.ptr);
      time_t when = curl_getdate(date, NULL), now = time(NULL);
      return when > now ? (uint64_t)(when - now) * 1000 : 0;
    }
  }
  return 0;
}

/* on_headers refuses the transfer: upstream.c frees it without on_done, so
 * the exchange lets go of it and ends here. */
static int headers_failed(px_exch_t *x) {
  x->xfer = NULL;
  x->error_type = "client_write";
  finalize(x);
  return -1;
}

static int up_on_headers(void *arg, int status, const px_hdr_t *h, size_t n) {
  px_exch_t *x = arg;
  x->up_status = status;
  /* the lane hands up no framing header: the length it enforces */
  x->up_content_length = px_xfer_content_length(x->xfer);
  px_buf_reset(&x->passhdrs);
  x->content_type[0] = 0;
  for (size_t i = 0; i < n; i++) {
    if (h[i].name.len == 12 && strncasecmp(h[i].name.ptr, "content-type", 12) == 0)
      snprintf(x->content_type, sizeof(x->content_type), "%.*s", (int)h[i].value.len,
               h[i].value.ptr);
    if (pass_back(&h[i]) ||
        (h[i].name.len == 12 && strncasecmp(h[i].name.ptr, "x-request-id", 12) == 0)) {
      px_buf_append(&x->passhdrs, h[i].name.ptr, h[i].name.len);
      px_buf_append(&x->passhdrs, "", 1);
      px_buf_append(&x->passhdrs, h[i].value.ptr, h[i].value.len);
      px_buf_append(&x->passhdrs, "", 1);
    }
  }
  if (retryable_status(status) && can_retry(x)) {
    x->retry_after_ms = parse_retry_after(h, n);
    if (x->retry_after_ms <= PX_MAX_RETRY_AFTER_MS ||
        x->target < x->route->nfallbacks) {
      if (x->retry_after_ms > PX_MAX_RETRY_AFTER_MS) x->attempt = x->up->retries + 1;
      x->mode = M_DISCARD;
      px_metrics_attempt(x->up->name, status == 429 ? "http_429" : "http_5xx");
      return 0;
    }
  }
  px_metrics_attempt(x->up->name, status >= 400 ? (status == 429 ? "http_429" : status >= 500 ? "http_5xx" : "http_4xx") : NULL);
  if (status >= 400 || status < 200) {
    x->mode = M_ERROR;
    px_buf_init(&x->acc, PX_MAX_UPSTREAM_ERROR);
    return 0;
  }
  int sse = strncasecmp(x->content_type, "text/event-stream", 17) == 0;
  /* same protocol: the gateway endpoints, and Anthropic count_tokens forwarded as is */
  int same = x->in == x->out;
  if (sse && x->stream) {
    x->streaming_gauge = 1;
    px_metrics_gauge_add(PX_G_ACTIVE_STREAMS, 1);
    if (same) {
      const char *rw = strcmp(x->up_model, x->model) != 0 ? x->model : NULL;
      px_passthru_init(&x->pt, x->in, rw);
      x->pt_init = 1;
      x->mode = M_PASS_STREAM;
    } else {
      x->str = px_stream_tr_new(&x->ctx, &x->obuf);
      if (x->str == NULL) return headers_failed(x);
      x->mode = M_TR_STREAM;
    }
    return start_response(x, 200, "text/event-stream", 1, -1) < 0 ? headers_failed(x) : 0;
  }
  if (same) {
    if (strcmp(x->up_model, x->model) != 0) {
      x->mode = M_PASS_REWRITE;
      px_buf_init(&x->acc, PX_MAX_UPSTREAM_JSON);
      return 0;
    }
    x->mode = M_PASS_JSON;
    px_buf_init(&x->acc, 1u << 16); /* the last 64 KiB, for the usage scan */
    return start_response(x, status, x->content_type[0] ? x->content_type : "application/json",
                          0, x->up_content_length) < 0 ? headers_failed(x) : 0;
  }
  x->mode = M_TR_JSON;
  px_buf_init(&x->acc, PX_MAX_UPSTREAM_JSON);
  return 0;
}

static int up_on_data(void *arg, const char *p, size_t n) {
  px_exch_t *x = arg;
  if (x->conn == NULL) return -1;
  switch (x->mode) {
  case M_DISCARD:
    return 0;
  case M_ERROR:
    px_buf_append(&x->acc, p, n); /* capped: the rest of a huge error is dropped */
    return 0;
  case M_PASS_REWRITE:
  case M_TR_JSON:
    return px_buf_append(&x->acc, p, n) < 0 ? -1 : 0;
  default:
    break;
  }
  if (px_conn_pending(x->conn) > PX_WQ_HIGH) {
    if (!x->paused) {
      x->paused = 1;
      px_metrics_gauge_add(PX_G_PAUSED_STREAMS, 1);
    }
    return PX_XFER_PAUSE;
  }
  switch (x->mode) {
  case M_PASS_JSON:
    /* keep the tail: every protocol puts usage at the end of the body */
    if (n >= x->acc.cap) {
      px_buf_reset(&x->acc);
      px_buf_append(&x->acc, p + n - x->acc.cap, x->acc.cap);
    } else {
      if (x->acc.len + n > x->acc.cap) px_buf_consume(&x->acc, x->acc.len + n - x->acc.cap);
      px_buf_append(&x->acc, p, n);
    }
    client_write(x, p, n);
    return 0;
  case M_PASS_STREAM: {
    if (px_passthru_feed(&x->pt, p, n, &x->obuf) < 0) return -1;
    if (x->pt.model == NULL) client_write(x, p, n);
    else {
      client_write(x, x->obuf.data, x->obuf.len);
      px_buf_reset(&x->obuf);
    }
    return 0;
  }
  case M_TR_STREAM: {
    int rc = px_stream_tr_feed(x->str, p, n);
    flush_obuf(x);
    if (rc < 0) {
      x->error_type = "upstream_protocol";
      return -1;
    }
    return 0;
  }
  default:
    return 0;
  }
}

static px_errkind_t result_kind(px_xfer_result_t r) {
  switch (r) {
  case PX_XFER_ETIMEOUT_CONNECT:
  case PX_XFER_ETIMEOUT_FIRST_BYTE:
  case PX_XFER_ETIMEOUT_IDLE:
    return PX_ERR_TIMEOUT;
  default:
    return PX_ERR_BAD_GATEWAY;
  }
}

static const char *result_name(px_xfer_result_t r) {
  switch (r) {
  case PX_XFER_ECONNECT: return "connect";
  case PX_XFER_ETIMEOUT_CONNECT: return "connect_timeout";
  case PX_XFER_ETIMEOUT_FIRST_BYTE: return "first_byte_timeout";
  case PX_XFER_ETIMEOUT_IDLE: return "idle_timeout";
  case PX_XFER_ERECV: return "reset";
  default: return "upstream_error";
  }
}

/* Usage of a pass-through JSON answer from the last 64 KiB of its body: the
 * whole body when it fits, else the top-level "usage" member found in the
 * tail, read as if it opened an object of its own. */
static void usage_from_tail(px_exch_t *x) {
  const char *d = x->acc.data;
  size_t n = x->acc.len;
  if (d == NULL || n == 0) return;
  if (px_json_complete(d, n)) {
    px_usage_from_body(x->out, d, n, &x->usage);
    return;
  }
  const char *u = NULL;
  for (const char *q = d; (q = memmem(q, (size_t)(d + n - q), "\"usage\"", 7)) != NULL; q += 7)
    u = q;
  if (u == NULL) return;
  px_buf_t b;
  px_buf_init(&b, n + 2);
  if (px_buf_append(&b, "{", 1) == 0 && px_buf_append(&b, u, (size_t)(d + n - u)) == 0)
    px_usage_from_body(x->out, b.data, b.len, &x->usage);
  px_buf_free(&b);
}

/* Translated or rewritten JSON answer is complete. */
static void finish_json(px_exch_t *x) {
  if (x->mode == M_PASS_REWRITE) {
    static const char *const top[] = {"model"};
    px_buf_t b;
    px_buf_init(&b, PX_MAX_UPSTREAM_JSON + 4096);
    px_json_replace_str(&b, x->acc.data, x->acc.len, top, 1, x->model);
    px_usage_from_body(x->out, b.data, b.len, &x->usage);
    if (start_response(x, x->up_status, x->content_type[0] ? x->content_type : "application/json",
                       0, (int64_t)b.len) == 0)
      client_write(x, b.data, b.len);
    px_buf_free(&b);
    finalize(x);
    return;
  }
  json_error_t je;
  json_t *ub = json_loadb(x->acc.data, x->acc.len, 0, &je);
  if (ub == NULL) {
    x->error_type = "bad_gateway";
    send_error(x, PX_ERR_BAD_GATEWAY, "bad gateway: upstream returned invalid JSON", NULL);
    return;
  }
  px_usage_from_body(x->out, x->acc.data, x->acc.len, &x->usage);
  json_t *cb = NULL;
  px_tr_err_t err;
  memset(&err, 0, sizeof(err));
  int rc = px_translate_response(&x->ctx, ub, &cb, &x->lossy, &err);
  json_decref(ub);
  if (rc < 0) {
    char msg[300];
    snprintf(msg, sizeof(msg), "upstream response cannot be translated: %s", err.message);
    send_error(x, err.kind == PX_ERR_INVALID ? PX_ERR_BAD_GATEWAY : err.kind, msg, NULL);
    return;
  }
  char *s = json_dumps(cb, JSON_COMPACT);
  json_decref(cb);
  if (s == NULL) {
    send_error(x, PX_ERR_API, "out of memory", NULL);
    return;
  }
  size_t len = strlen(s);
  if (start_response(x, 200, "application/json", 0, (int64_t)len) == 0)
    client_write(x, s, len);
  free(s);
  finalize(x);
}

static void finish_count_tokens(px_exch_t *x) {
  json_t *ub = json_loadb(x->acc.data, x->acc.len, 0, NULL);
  json_t *n = ub ? json_object_get(ub, "input_tokens") : NULL;
  if (!json_is_integer(n)) {
    json_decref(ub);
    send_error(x, PX_ERR_BAD_GATEWAY, "bad gateway: upstream token count is not understood", NULL);
    return;
  }
  char body[64];
  int len = snprintf(body, sizeof(body), "{\"input_tokens\":%lld}",
                     (long long)json_integer_value(n));
  json_decref(ub);
  if (start_response(x, 200, "application/json", 0, len) == 0) client_write(x, body, (size_t)len);
  finalize(x);
}

static void up_on_done(void *arg, px_xfer_result_t result, const char *errmsg) {
  px_exch_t *x = arg;
  x->xfer = NULL;
  if (x->paused) {
    x->paused = 0;
    px_metrics_gauge_add(PX_G_PAUSED_STREAMS, -1);
  }
  if (x->conn == NULL) {
    finalize(x);
    return;
  }
  if (result != PX_XFER_OK) {
    px_log_warn("%s: upstream %s: %s (%s)", x->req->request_id, x->up->name,
                result_name(result), errmsg ? errmsg : "");
    if (x->mode == M_NONE || x->mode == M_DISCARD) px_metrics_attempt(x->up->name, result_name(result));
    x->error_type = result_name(result);
    if (!x->started) {
      if (result == PX_XFER_ECONNECT && x->mode == M_NONE && can_retry(x)) {
        schedule_retry(x);
        return;
      }
      if (x->mode == M_DISCARD && can_retry(x)) {
        schedule_retry(x);
        return;
      }
      char msg[256];
      px_errkind_t k = result_kind(result);
      snprintf(msg, sizeof(msg), "%s: upstream '%s' %s",
               k == PX_ERR_TIMEOUT ? "gateway timeout" : "bad gateway", x->up->name,
               result == PX_XFER_ECONNECT ? "is unreachable"
               : k == PX_ERR_TIMEOUT      ? "timed out"
                                          : "failed");
      send_error(x, k, msg, NULL);
      return;
    }
    /* mid-response failure: the client's protocol error event */
    if (x->mode == M_TR_STREAM) {
      px_stream_tr_finish(x->str, 0, result_kind(result), "upstream stream failed");
      client_write(x, x->obuf.data, x->obuf.len);
      px_buf_reset(&x->obuf);
    } else if (x->mode == M_PASS_STREAM) {
      if (!px_passthru_finish(&x->pt, &x->obuf)) {
        client_write(x, x->obuf.data, x->obuf.len);
        px_buf_reset(&x->obuf);
        const px_proto_ops_t *ops = client_ops(x);
        if (ops->encode_stream_error)
          ops->encode_stream_error(&x->obuf, result_kind(result), "upstream stream failed");
        client_write(x, x->obuf.data, x->obuf.len);
      }
    } else {
      /* a JSON body cut short cannot be repaired: drop the connection */
      px_conn_set_handler(x->conn, NULL, NULL);
      px_resp_abort(x->conn);
      x->conn = NULL;
    }
    finalize(x);
    return;
  }
  switch (x->mode) {
  case M_DISCARD:
    schedule_retry(x);
    return;
  case M_ERROR: {
    px_upstream_err_t ue;
    const px_proto_ops_t *uops = px_proto_get(x->out);
    if (x->in == x->out && x->ep == EP_GATEWAY && uops->decode_error &&
        uops->decode_error(x->up_status, x->acc.data ? x->acc.data : "", x->acc.len,
                           &ue) == 0) {
      /* same protocol and a proper error body: forwarded as it is */
      x->error_type = "upstream_error";
      if (start_response(x, x->up_status,
                         x->content_type[0] ? x->content_type : "application/json", 0,
                         (int64_t)x->acc.len) == 0)
        client_write(x, x->acc.data, x->acc.len);
      finalize(x);
      return;
    }
    px_buf_t b;
    px_buf_init(&b, 1u << 20);
    int st = 502;
    if (px_translate_error(&x->ctx, x->up_status, x->acc.data, x->acc.len,
                           x->req->request_id, &b, &st) < 0) {
      px_buf_reset(&b);
      px_buf_puts(&b, "{\"error\":{\"message\":\"bad gateway\",\"type\":\"api_error\"}}");
    }
    x->error_type = "upstream_error";
    if (start_response(x, st, "application/json", 0, (int64_t)b.len) == 0)
      client_write(x, b.data, b.len);
    px_buf_free(&b);
    finalize(x);
    return;
  }
  case M_PASS_JSON:
    usage_from_tail(x);
    finalize(x);
    return;
  case M_PASS_REWRITE:
  case M_TR_JSON:
    if (x->ep == EP_COUNT_TOKENS && x->out == PX_PROTO_RESPONSES) finish_count_tokens(x);
    else finish_json(x);
    return;
  case M_PASS_STREAM:
    if (!px_passthru_finish(&x->pt, &x->obuf)) {
      client_write(x, x->obuf.data, x->obuf.len);
      px_buf_reset(&x->obuf);
      const px_proto_ops_t *ops = client_ops(x);
      if (ops->encode_stream_error)
        ops->encode_stream_error(&x->obuf, PX_ERR_BAD_GATEWAY,
                                 "upstream stream ended before its terminal event");
      x->error_type = "truncated_stream";
    }
    client_write(x, x->obuf.data, x->obuf.len);
    x->usage = x->pt.usage;
    finalize(x);
    return;
  case M_TR_STREAM:
    if (px_stream_tr_finish(x->str, 1, PX_ERR_BAD_GATEWAY,
                            "upstream stream ended before its terminal event") != 0)
      x->error_type = "truncated_stream";
    flush_obuf(x);
    x->usage = *px_stream_tr_usage(x->str);
    finalize(x);
    return;
  default:
    finalize(x);
    return;
  }
}

static const px_xfer_cbs_t xfer_cbs = {up_on_headers, up_on_data, up_on_done};

/* ---------------------------------------------------------------------- */
/* building the upstream request                                             */

static int forward_header(const px_str_t name, px_proto_t out) {
  static const char *const openai[] = {"openai-organization", "openai-project",
                                       "openai-beta"};
  static const char *const anthropic[] = {"anthropic-beta"};
  static const char *const any[] = {"user-agent", "traceparent", "tracestate"};
  for (size_t i = 0; i < sizeof(any) / sizeof(any[0]); i++)
    if (name.len == strlen(any[i]) && strncasecmp(name.ptr, any[i], name.len) == 0) return 1;
  if (out == PX_PROTO_ANTHROPIC) {
    for (size_t i = 0; i < sizeof(anthropic) / sizeof(anthropic[0]); i++)
      if (name.len == strlen(anthropic[i]) && strncasecmp(name.ptr, anthropic[i], name.len) == 0)
        return 1;
  } else {
    for (size_t i = 0; i < sizeof(openai) / sizeof(openai[0]); i++)
      if (name.len == strlen(openai[i]) && strncasecmp(name.ptr, openai[i], name.len) == 0)
        return 1;
  }
  return 0;
}

/* "a" "b" "c" joined into a new string, at most 4095 bytes (as the
 * snprintf into a 4096-byte buffer it replaces); no printf per header. */
static char *hdr_join(px_str_t a, px_str_t b, px_str_t c) {
  char tmp[4096];
  size_t k = 0;
  const px_str_t parts[3] = {a, b, c};
  for (size_t i = 0; i < 3; i++) {
    size_t l = parts[i].len < sizeof(tmp) - 1 - k ? parts[i].len : sizeof(tmp) - 1 - k;
    if (l) memcpy(tmp + k, parts[i].ptr, l);
    k += l;
  }
  char *s = malloc(k + 1);
  if (s) {
    memcpy(s, tmp, k);
    s[k] = 0;
  }
  return s;
}

static char **build_upstream_headers(px_exch_t *x) {
  size_t max = 16 + x->req->nhdrs + x->up->nheaders;
  char **h = calloc(max + 1, sizeof(char *));
  if (h == NULL) return NULL;
  size_t n = 0;
#define ADD(a, b, c) h[n++] = hdr_join(a, b, c)
  ADD(PX_STR("Content-Type: application/json"), PX_STR(""), PX_STR(""));
  if (x->stream) ADD(PX_STR("Accept: text/event-stream"), PX_STR(""), PX_STR(""));
  else ADD(PX_STR("Accept: application/json"), PX_STR(""), PX_STR(""));
  if (x->up->api_key) {
    if (x->out == PX_PROTO_ANTHROPIC) ADD(PX_STR("x-api-key: "), px_str(x->up->api_key), PX_STR(""));
    else ADD(PX_STR("Authorization: Bearer "), px_str(x->up->api_key), PX_STR(""));
  }
  if (x->out == PX_PROTO_ANTHROPIC) {
    const char *v = px_req_header(x->req, "anthropic-version");
    ADD(PX_STR("anthropic-version: "), px_str(v && *v ? v : x->up->anthropic_version),
        PX_STR(""));
  }
  ADD(PX_STR("x-request-id: "), px_str(x->req->request_id), PX_STR(""));
  for (size_t i = 0; i < x->req->nhdrs && n < max - x->up->nheaders - 1; i++) {
    const px_hdr_t *rh = &x->req->hdrs[i];
    if (!forward_header(rh->name, x->out)) continue;
    ADD(rh->name, PX_STR(": "), rh->value);
  }
  for (size_t i = 0; i < x->up->nheaders; i++) h[n++] = strdup(x->up->headers[i]);
#undef ADD
  h[n] = NULL;
  return h;
}

static void start_attempt(px_exch_t *x) {
  size_t up_index = x->target == 0 ? x->route->upstream : x->route->fallbacks[x->target - 1];
  x->up = &x->cfg->upstreams[up_index];
  x->out = x->up->protocol;
  x->up_model = x->route->model ? x->route->model : x->model;
  x->attempt++;
  x->attempts++;
  x->mode = M_NONE;
  snprintf(x->label, sizeof(x->label), "%s/%s", x->up->name, x->up_model);

  /* a retry on the same target sends the body, URL and headers it built */
  if (x->attempt > 1 && x->up_body != NULL && x->url != NULL && x->up_hdrs != NULL)
    goto send;
  free(x->up_body_owned);
  x->up_body_owned = NULL;
  px_tr_ctx_t *ctx = &x->ctx;
  memset(ctx, 0, sizeof(*ctx));
  ctx->in = x->in;
  ctx->out = x->out;
  ctx->client_model = x->model;
  ctx->upstream_model = x->up_model;
  ctx->default_max_tokens = x->route->max_tokens;
  ctx->client_include_usage = x->include_usage;
  ctx->stream = x->stream;
  ctx->created = (int64_t)time(NULL);
  ctx->max_accum = PX_MAX_STREAM_ACCUM;
  const char *path = px_proto_get(x->out)->upstream_path;

  if (x->ep == EP_COUNT_TOKENS) {
    if (x->out == PX_PROTO_CHAT) {
      send_error(x, PX_ERR_NOT_IMPL,
                 "count_tokens is not available for an openai_chat_completions upstream",
                 NULL);
      return;
    }
    path = x->out == PX_PROTO_ANTHROPIC ? "/v1/messages/count_tokens" : "/responses/input_tokens";
  }

  px_lossy_init(&x->lossy);
  if (x->in == x->out) {
    if (strcmp(x->up_model, x->model) != 0) {
      static const char *const top[] = {"model"};
      px_buf_t b;
      px_buf_init(&b, x->req->body.len + strlen(x->up_model) * 6 + 64);
      px_json_replace_str(&b, x->req->body.data, x->req->body.len, top, 1, x->up_model);
      x->up_body_len = b.len;
      x->up_body = x->up_body_owned = px_buf_steal(&b, NULL);
    } else {
      x->up_body = x->req->body.data;
      x->up_body_len = x->req->body.len;
    }
  } else {
    if (parse_body(x) < 0) return;
    json_t *ub = NULL;
    px_tr_err_t err;
    memset(&err, 0, sizeof(err));
    if (px_translate_request(ctx, x->body, &ub, &x->lossy, &err) < 0) {
      send_error(x, err.kind, err.message[0] ? err.message : "request cannot be translated",
                 err.param[0] ? err.param : NULL);
      return;
    }
    if (x->ep == EP_COUNT_TOKENS) {
      /* input_tokens takes the request minus generation controls */
      json_object_del(ub, "stream");
      json_object_del(ub, "max_output_tokens");
      json_object_del(ub, "stream_options");
    }
    x->up_body_owned = json_dumps(ub, JSON_COMPACT);
    json_decref(ub);
    if (x->up_body_owned == NULL) {
      send_error(x, PX_ERR_API, "out of memory", NULL);
      return;
    }
    x->up_body = x->up_body_owned;
    x->up_body_len = strlen(x->up_body_owned);
  }
  free(x->url);
  size_t ul = strlen(x->up->base_url) + strlen(path) + 1;
  x->url = malloc(ul);
  snprintf(x->url, ul, "%s%s", x->up->base_url, path);
  free_hdrs(x->up_hdrs);
  x->up_hdrs = build_upstream_headers(x);

send:;
  px_xfer_opts_t o = {
      .method = "POST",
      .url = x->url,
      .headers = (const char *const *)x->up_hdrs,
      .body = x->up_body,
      .body_len = x->up_body_len,
      .connect_timeout_ms = x->up->connect_timeout_ms,
      .first_byte_timeout_ms = x->up->first_byte_timeout_ms,
      .idle_timeout_ms = x->up->idle_timeout_ms,
      .http2 = x->up->http2,
      .ca_file = x->up->ca_file,
      .tls_no_verify = !x->up->tls_verify,
      .pool = x->up->name,
      .max_connections = x->up->max_connections,
      .client = x->up->client,
  };
  x->xfer = px_xfer_start(x->srv->uclient, &o, &xfer_cbs, x);
  if (x->xfer == NULL) send_error(x, PX_ERR_API, "cannot start the upstream request", NULL);
}

/* ---------------------------------------------------------------------- */
/* entry points                                                              */

static void simple_json(px_conn_t *c, int status, const char *body) {
  px_resp_simple(c, status, "application/json", body, strlen(body), NULL, 0);
}

static void openai_error(px_conn_t *c, px_errkind_t kind, const char *msg) {
  px_buf_t b;
  px_buf_init(&b, 4096);
  px_proto_chat.encode_error(&b, kind, px_errkind_openai(kind), msg, NULL, NULL);
  px_resp_simple(c, px_errkind_status(kind), "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
}

static void serve_models(px_server_t *s, px_conn_t *c, px_req_t *r) {
  px_config_t *cfg = s->config;
  int anthropic = px_req_header(r, "anthropic-version") != NULL;
  px_buf_t b;
  px_buf_init(&b, 1u << 20);
  px_buf_puts(&b, anthropic ? "{\"data\":[" : "{\"object\":\"list\",\"data\":[");
  for (size_t i = 0; i < cfg->nroutes; i++) {
    const px_route_conf_t *rt = &cfg->routes[i];
    const char *id = rt->pattern;
    if (i) px_buf_puts(&b, ",");
    if (anthropic) {
      px_buf_puts(&b, "{\"type\":\"model\",\"id\":");
      px_buf_json_str(&b, id, strlen(id));
      px_buf_puts(&b, ",\"display_name\":");
      px_buf_json_str(&b, id, strlen(id));
      px_buf_puts(&b, ",\"created_at\":\"1970-01-01T00:00:00Z\"}");
    } else {
      px_buf_puts(&b, "{\"id\":");
      px_buf_json_str(&b, id, strlen(id));
      px_buf_puts(&b, ",\"object\":\"model\",\"created\":0,\"owned_by\":");
      const char *up = cfg->upstreams[rt->upstream].name;
      px_buf_json_str(&b, up, strlen(up));
      px_buf_puts(&b, "}");
    }
  }
  px_buf_puts(&b, "]");
  if (anthropic) {
    px_buf_puts(&b, ",\"has_more\":false,\"first_id\":");
    if (cfg->nroutes) px_buf_json_str(&b, cfg->routes[0].pattern, strlen(cfg->routes[0].pattern));
    else px_buf_puts(&b, "null");
    px_buf_puts(&b, ",\"last_id\":");
    if (cfg->nroutes)
      px_buf_json_str(&b, cfg->routes[cfg->nroutes - 1].pattern,
                      strlen(cfg->routes[cfg->nroutes - 1].pattern));
    else px_buf_puts(&b, "null");
  }
  px_buf_puts(&b, "}");
  px_resp_simple(c, 200, "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
}

static int path_is(const px_req_t *r, const char *p) {
  size_t n = strlen(p);
  return r->path_len == n && memcmp(r->url.data, p, n) == 0;
}

static const char *client_secret(const px_req_t *r, size_t *len) {
  const char *a = px_req_header(r, "authorization");
  if (a && strncasecmp(a, "Bearer ", 7) == 0) {
    a += 7;
    while (*a == ' ') a++;
    *len = strlen(a);
    return a;
  }
  a = px_req_header(r, "x-api-key");
  if (a) {
    *len = strlen(a);
    return a;
  }
  return NULL;
}

/* Parse the client body; on failure answer 400 and return <0. */
static int parse_body(px_exch_t *x) {
  if (x->body != NULL) return 0;
  json_error_t je;
  x->body = json_loadb(x->req->body.data ? x->req->body.data : "", x->req->body.len, 0, &je);
  if (json_is_object(x->body)) return 0;
  char msg[300];
  if (x->body == NULL)
    snprintf(msg, sizeof(msg), "request body is not valid JSON: %s (line %d, column %d)",
             je.text, je.line, je.column);
  else
    snprintf(msg, sizeof(msg), "request body must be a JSON object");
  send_error(x, PX_ERR_INVALID, msg, NULL);
  return -1;
}

static void gateway(px_server_t *s, px_conn_t *c, px_req_t *r, px_proto_t in, endpoint_t ep) {
  px_exch_t *x = calloc(1, sizeof(*x));
  if (x == NULL) {
    px_resp_abort(c);
    return;
  }
  x->srv = s;
  x->conn = c;
  x->req = r;
  x->cfg = px_config_ref(s->config);
  x->in = in;
  x->ep = ep;
  x->t_start = r->start_ns;
  x->usage.input_tokens = x->usage.output_tokens = -1;
  px_buf_init(&x->passhdrs, 64 * 1024);
  px_buf_init(&x->obuf, PX_MAX_STREAM_OUT);
  px_buf_init(&x->acc, 0);
  px_conn_set_handler(c, &conn_handler, x);

  /* The fast path reads model/stream with the raw scanner: a request that
   * stays in its own protocol is never parsed. Anything unusual (escapes in
   * the model, a body the scanner rejects) takes the full parse, which also
   * gives the precise error message. */
  static const char *const P_MODEL[] = {"model"};
  static const char *const P_STREAM[] = {"stream"};
  static const char *const P_USAGE[] = {"stream_options", "include_usage"};
  size_t vs, vl;
  const char *bd = r->body.data ? r->body.data : "";
  if (px_json_find(bd, r->body.len, P_MODEL, 1, &vs, &vl) == PX_JSON_FOUND && vl > 2 &&
      bd[vs] == '"' && memchr(bd + vs, '\\', vl) == NULL &&
      px_json_complete(bd, r->body.len)) {
    x->model_buf = strndup(bd + vs + 1, vl - 2);
    x->model = x->model_buf;
    x->stream = ep == EP_GATEWAY &&
                px_json_find(bd, r->body.len, P_STREAM, 1, &vs, &vl) == PX_JSON_FOUND &&
                vl == 4 && memcmp(bd + vs, "true", 4) == 0;
    /* only a stream uses it: no third scan of the body otherwise */
    x->include_usage = x->stream &&
                       px_json_find(bd, r->body.len, P_USAGE, 2, &vs, &vl) == PX_JSON_FOUND &&
                       vl == 4 && memcmp(bd + vs, "true", 4) == 0;
  } else {
    if (parse_body(x) < 0) return;
    json_t *m = json_object_get(x->body, "model");
    if (!json_is_string(m) || json_string_length(m) == 0) {
      send_error(x, PX_ERR_INVALID, "'model' is required and must be a non-empty string",
                 "model");
      return;
    }
    x->model = json_string_value(m);
    x->stream = ep == EP_GATEWAY && json_is_true(json_object_get(x->body, "stream"));
    json_t *so = json_object_get(x->body, "stream_options");
    x->include_usage = json_is_true(json_object_get(so, "include_usage"));
  }

  px_config_t *cfg = x->cfg;
  if (cfg->nkeys > 0) {
    size_t sl = 0;
    const char *sec = client_secret(r, &sl);
    x->key = sec ? px_config_key(cfg, sec, sl) : NULL;
    if (x->key == NULL) {
      send_error(x, PX_ERR_AUTH,
                 sec ? "invalid API key" : "missing API key: send Authorization: Bearer KEY or x-api-key",
                 NULL);
      return;
    }
    if (!px_key_allows(x->key, x->model)) {
      char msg[300];
      snprintf(msg, sizeof(msg), "this key may not use model '%.200s'", x->model);
      send_error(x, PX_ERR_PERMISSION, msg, "model");
      return;
    }
    if (x->key->rpm || x->key->tpm) {
      unsigned wait = px_rl_admit(x->key->name, x->key->rpm, x->key->tpm, now_ms(x));
      if (wait > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", wait);
        px_hdr_t h = {px_str("retry-after"), px_str(ra)};
        send_error_h(x, PX_ERR_RATE_LIMIT, 429, "rate limit exceeded for this key", NULL, &h, 1);
        return;
      }
    }
  }
  if (s->draining) {
    send_error(x, PX_ERR_OVERLOADED, "the gateway is shutting down", NULL);
    return;
  }
  x->route = px_config_route(cfg, x->model);
  if (x->route == NULL) {
    if (cfg->unconfigured_message) {
      send_error(x, PX_ERR_UNAVAILABLE, cfg->unconfigured_message, NULL);
    } else {
      char msg[300];
      snprintf(msg, sizeof(msg), "no route for model '%.200s'", x->model);
      send_error(x, PX_ERR_NOT_FOUND, msg, "model");
    }
    return;
  }
  start_attempt(x);
}

void px_proxy_request(px_server_t *s, px_conn_t *c, px_req_t *r) {
  const char *path = r->url.data;
  size_t plen = r->path_len;
  int get = r->method == HTTP_GET || r->method == HTTP_HEAD;
  if (path_is(r, "/healthz")) {
    if (!get) return openai_error(c, PX_ERR_METHOD, "method not allowed");
    return simple_json(c, 200, "{\"status\":\"ok\"}");
  }
  if (path_is(r, "/readyz")) {
    if (!get) return openai_error(c, PX_ERR_METHOD, "method not allowed");
    if (s->draining) return simple_json(c, 503, "{\"status\":\"draining\"}");
    return simple_json(c, 200, "{\"status\":\"ready\"}");
  }
  if (path_is(r, "/metrics")) {
    if (!get) return openai_error(c, PX_ERR_METHOD, "method not allowed");
    px_buf_t b;
    px_buf_init(&b, 16u << 20);
    px_metrics_render(&b);
    px_resp_simple(c, 200, "text/plain; version=0.0.4", b.data, b.len, NULL, 0);
    px_buf_free(&b);
    return;
  }
  if (path_is(r, "/v1/models") || path_is(r, "/models")) {
    if (!get) return openai_error(c, PX_ERR_METHOD, "method not allowed");
    return serve_models(s, c, r);
  }
  if (path_is(r, "/v1/messages/count_tokens") || path_is(r, "/messages/count_tokens")) {
    if (r->method != HTTP_POST) return openai_error(c, PX_ERR_METHOD, "method not allowed");
    return gateway(s, c, r, PX_PROTO_ANTHROPIC, EP_COUNT_TOKENS);
  }
  int p = px_proto_by_path(path, plen);
  if (p < 0) return openai_error(c, PX_ERR_NOT_FOUND, "not found");
  if (r->method != HTTP_POST) return openai_error(c, PX_ERR_METHOD, "method not allowed");
  gateway(s, c, r, (px_proto_t)p, EP_GATEWAY);
}
