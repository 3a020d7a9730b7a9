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
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "proxai/balance.h"
#include "proxai/json.h"
#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/passthru.h"
#include "proxai/protoutil.h"
#include "proxai/proxy.h"
#include "proxai/ratelimit.h"
#include "proxai/server.h"

#define PX_MAX_UPSTREAM_JSON (64u << 20) /* translated non-stream body cap */
#define PX_MAX_UPSTREAM_ERROR (1u << 20)
#define PX_MAX_STREAM_ACCUM (16u << 20)
/* client output of one upstream chunk: the Responses closing events repeat
 * the accumulated text up to four times */
#define PX_MAX_STREAM_OUT (4 * PX_MAX_STREAM_ACCUM + (1u << 20))
/* a parsed retry-after never exceeds this (one day): no overflow downstream */
#define PX_RETRY_AFTER_CLAMP_MS 86400000ull
/* a pass-through JSON answer up to this size is held and sent with our own
 * Content-Length once complete; a larger one goes on chunked as it arrives */
#define PX_PASS_HOLD (256u << 10)
/* the tail kept of a larger one, for the usage scan */
#define PX_USAGE_TAIL (64u << 10)

typedef enum {
  M_NONE,        /* waiting for upstream headers */
  M_BAD,         /* unusable answer (3xx, encoded body, ...): 502 on done */
  M_DISCARD,     /* retryable answer: drop the body, retry on done */
  M_ERROR,       /* upstream error body: collect, translate on done */
  M_PASS_JSON,   /* same protocol, forwarded as it arrives */
  M_PASS_REWRITE,/* same protocol, model rewritten: collect then send */
  M_PASS_STREAM, /* same protocol SSE */
  M_TR_JSON,     /* translated JSON: collect, translate on done */
  M_TR_STREAM,   /* translated SSE */
} mode_t_;


typedef struct px_exch {
  px_server_t *srv;
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
  px_rl_wait_t *rl_wait; /* admission waiting for the state backend */
  uint64_t rl_reserved;  /* tpm tokens set aside at admission */
  int rl_admitted;       /* settle the key's tpm at the end */
  int metric_status;     /* status for /metrics when a started response failed */
  int attempt_open;      /* a 2xx attempt, counted in /metrics when it ends */
  const px_route_conf_t *route;
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
  size_t up_body_len;
  char **up_hdrs;
  char *url;
  px_xfer_t *xfer;
  mode_t_ mode;
  int up_status;
  int acc_trunc;         /* M_ERROR: the body went over PX_MAX_UPSTREAM_ERROR */
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
  /* Text buffers, last: gateway() zeroes the fields above and only empties
   * these (zeroing 1.7 KiB per request costs more than the rest of it). */
  char retry_reason[96]; /* why the last attempt is retried (for the log) */
  char bad_msg[200];     /* M_BAD: the 502 message */
  char content_type[128];
  char label[256];       /* x-proxai-upstream value */
  px_lossy_t lossy;
} px_exch_t;

static void start_attempt(px_exch_t *x);
static void finalize(px_exch_t *x);

static const px_conn_handler_t conn_handler;

/* ---------------------------------------------------------------------- */
/* helpers                                                                  */

static uint64_t now_ms(px_exch_t *x) { return uv_now(x->srv->loop); }

/* The upstream header lines: one block (build_upstream_headers). */
static void free_hdrs(char **h) { free(h); }

static const px_proto_ops_t *client_ops(px_exch_t *x) { return px_proto_get(x->in); }

/* dst = a then b, cut to cap - 1 bytes and NUL-terminated (snprintf "%s%.*s"
 * without printf: this runs per request). */
static void copy_cut(char *dst, size_t cap, px_str_t a, px_str_t b) {
  size_t k = a.len < cap - 1 ? a.len : cap - 1;
  if (k) memcpy(dst, a.ptr, k);
  size_t l = b.len < cap - 1 - k ? b.len : cap - 1 - k;
  if (l) memcpy(dst + k, b.ptr, l);
  dst[k + l] = 0;
}

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

/* px_lossy_each: one proxai_lossy_fields_total count ({inbound, upstream}). */
static void count_lossy(void *arg, const char *field) {
  const char *const *l = arg;
  px_metrics_lossy(l[0], l[1], field);
}

static void attempt_end(px_exch_t *x);

/* Ends the exchange once: the access log, metrics, limits, the client's
 * response, and the exchange's memory (freed here, or when its timer has
 * closed). A second call is a no-op. */
static void finalize(px_exch_t *x) {
  if (x->finalized) return;
  x->finalized = 1;
  if (x->xfer) {
    px_xfer_cancel(x->xfer);
    x->xfer = NULL;
  }
  attempt_end(x);
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
  };
  if (px_access_log_on()) {
    char path[256];
    size_t pl = x->req->path_len < sizeof(path) - 1 ? x->req->path_len : sizeof(path) - 1;
    if (pl) memcpy(path, x->req->url.data, pl);
    path[pl] = 0;
    rec.path = path;
    if (x->conn) px_conn_access_log(x->conn, &rec); /* once the bytes are out */
    else px_access_log(&rec);
  }
  if (x->attempt_open && x->up)
    px_metrics_attempt(x->up->name, x->metric_status ? x->error_type : NULL);
  /* a response that failed after it started counts as that failure */
  px_metrics_request(inbound, upname, x->metric_status ? x->metric_status : x->status, dur,
                     x->stream ? ttft : -1);
  const char *labels[2] = {inbound, upname};
  px_lossy_each(&x->lossy, count_lossy, labels); /* one count per dropped field */
  int64_t toks = (x->usage.input_tokens > 0 ? x->usage.input_tokens : 0) +
                 (x->usage.output_tokens > 0 ? x->usage.output_tokens : 0);
  if (toks > 0 || x->usage.input_tokens >= 0)
    px_metrics_tokens(x->key ? x->key->name : NULL, upname, x->usage.input_tokens,
                      x->usage.output_tokens);
  if (x->rl_admitted) px_rl_settle(x->key, x->rl_reserved, (uint64_t)toks, now_ms(x));
  if (x->conn) {
    px_conn_set_handler(x->conn, NULL, NULL);
    if (x->started) px_resp_end(x->conn);
    else px_resp_abort(x->conn);
    x->conn = NULL;
  }
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

/* Ejections end by themselves (balance.c reads the clock); this per-process
 * timer only brings the ejected gauge back when no request looks first. */
static uv_timer_t g_eject_timer;
static int g_eject_timer_init;

static void on_eject_timer(uv_timer_t *t) {
  uint64_t next = px_balance_sweep(uv_now(t->loop));
  if (next) uv_timer_start(t, on_eject_timer, next, 0);
}

static void arm_eject_timer(uv_loop_t *loop, uint64_t ms) {
  uv_handle_t *h = (uv_handle_t *)&g_eject_timer;
  if (!g_eject_timer_init || (g_eject_timer.loop != loop && uv_is_closing(h))) {
    uv_timer_init(loop, &g_eject_timer);
    uv_unref(h); /* never keeps a draining worker alive */
    g_eject_timer_init = 1;
  }
  if (g_eject_timer.loop != loop || uv_is_closing(h)) return;
  if (!uv_is_active(h) || uv_timer_get_due_in(&g_eject_timer) > ms)
    uv_timer_start(&g_eject_timer, on_eject_timer, ms, 0);
}

/* The attempt's transfer is over (done, refused or cancelled). */
static void attempt_end(px_exch_t *x) {
  px_balance_end(x->bal);
  x->bal = NULL;
}

/* Passive health: the outcome of this attempt, once. ok: an answer that is
 * neither 429 nor 5xx; a failure is that or a connect error / timeout. */
static void attempt_health(px_exch_t *x, int ok, const char *why) {
  if (x->bal == NULL || x->health_done) return;
  x->health_done = 1;
  uint64_t now = now_ms(x);
  uint64_t d = px_balance_result(x->bal, x->up, ok, now - x->t_attempt, now);
  if (d == 0) return;
  px_log_warn(
      "%s: upstream %s ejected for %llu ms after %u consecutive failures (last: %s)",
      x->req->request_id, x->up->name, (unsigned long long)d, x->up->eject_after, why);
  arm_eject_timer(x->srv->loop, d);
}

/* Plans the attempt after a retryable failure of this one; 0 when nothing is
 * left. Untried deployments of the route come first and at once; then the
 * same target again (up to its `retries`, with backoff and its retry-after),
 * unless skip (a retry-after above retry_after_max); then the next fallback,
 * at once. why: the failure, for the log. */
static int plan_retry(px_exch_t *x, int skip, uint64_t retry_after_ms, const char *why) {
  snprintf(x->retry_reason, sizeof(x->retry_reason), "%s", why);
  x->next_delay = 0;
  if (x->target == 0 && px_balance_has_untried(x->cfg, x->route, x->tried, now_ms(x))) {
    x->next_target = 0;
    return 1;
  }
  if (!skip && x->attempt <= x->up->retries) {
    unsigned shift = x->attempt > 6 ? 6 : x->attempt;
    uint64_t base = 100ull << shift;
    x->next_delay = base / 2 + (uint64_t)rand() % (base / 2 + 1);
    if (retry_after_ms > x->next_delay) x->next_delay = retry_after_ms;
    x->next_target = x->target;
    return 1;
  }
  if (x->target < x->route->nfallbacks) {
    x->next_target = x->target + 1;
    return 1;
  }
  return 0;
}

static void on_retry_timer(uv_timer_t *t) {
  px_exch_t *x = t->data;
  start_attempt(x);
}

/* Runs the plan of plan_retry(). */
static void schedule_retry(px_exch_t *x) {
  if (x->next_target != x->target) {
    x->target = x->next_target;
    x->attempt = 0;
  }
  x->mode = M_NONE;
  if (!x->timer_init) {
    uv_timer_init(x->srv->loop, &x->timer);
    x->timer_init = 1;
  }
  x->timer.data = x;
  uv_timer_start(&x->timer, on_retry_timer, x->next_delay, 0);
}

/* ---------------------------------------------------------------------- */
/* upstream callbacks                                                        */

/* A number of seconds (or ms) from a header value: finite, clamped to
 * [0, one day] in ms before any conversion, so 1e30, inf, nan, negative or
 * huge values never reach an integer cast out of range. -1: not a number. */
static int64_t retry_ms(px_str_t v, double unit_ms) {
  char tmp[64];
  size_t len = v.len < sizeof(tmp) - 1 ? v.len : sizeof(tmp) - 1;
  memcpy(tmp, v.ptr, len); /* the view is not NUL-terminated */
  tmp[len] = 0;
  char *end;
  double d = strtod(tmp, &end);
  if (end == tmp) return -1;
  while (*end == ' ' || *end == '\t') end++;
  if (*end != 0 || isnan(d) || d <= 0) return 0; /* "1s", nan, negative: no wait */
  double ms = d * unit_ms;
  if (!(ms < (double)PX_RETRY_AFTER_CLAMP_MS)) return (int64_t)PX_RETRY_AFTER_CLAMP_MS;
  return (int64_t)ms;
}

static uint64_t parse_retry_after(const px_hdr_t *h, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (h[i].name.len == 14 && strncasecmp(h[i].name.ptr, "retry-after-ms", 14) == 0) {
      int64_t ms = retry_ms(h[i].value, 1);
      return ms > 0 ? (uint64_t)ms : 0;
    }
  }
  for (size_t i = 0; i < n; i++) {
    if (h[i].name.len == 11 && strncasecmp(h[i].name.ptr, "retry-after", 11) == 0) {
      int64_t ms = retry_ms(h[i].value, 1000);
      if (ms >= 0) return (uint64_t)ms;
      /* an HTTP-date */
      char date[128];
      snprintf(date, sizeof(date), "%.*s", (int)h[i].value.len, h[i].value.ptr);
      time_t when = curl_getdate(date, NULL), now = time(NULL);
      if (when <= now) return 0;
      uint64_t d = (uint64_t)(when - now);
      return d >= PX_RETRY_AFTER_CLAMP_MS / 1000 ? PX_RETRY_AFTER_CLAMP_MS : d * 1000;
    }
  }
  return 0;
}

/* A retryable status: is there a next attempt? A retry-after above the
 * upstream's retry_after_max is not waited for: the next deployment or
 * fallback is tried at once, and the client gets this answer only when
 * nothing is left. */
static int retry_planned(px_exch_t *x, int status, const px_hdr_t *h, size_t n) {
  uint64_t ra = parse_retry_after(h, n);
  int skip = ra > x->up->retry_after_max_ms;
  char why[96];
  if (skip)
    snprintf(why, sizeof(why), "http_%d, retry-after %llu ms above retry_after_max",
             status, (unsigned long long)ra);
  else
    snprintf(why, sizeof(why), "http_%d", status);
  return plan_retry(x, skip, ra, why);
}

/* on_headers refuses the transfer: upstream.c frees it without on_done, so
 * the exchange lets go of it and ends here. */
static int headers_failed(px_exch_t *x) {
  x->xfer = NULL;
  attempt_end(x);
  x->error_type = "client_write";
  finalize(x);
  return -1;
}

static int up_on_headers(void *arg, int status, const px_hdr_t *h, size_t n) {
  px_exch_t *x = arg;
  x->up_status = status;
  x->bad_msg[0] = 0;
  px_buf_reset(&x->passhdrs);
  x->content_type[0] = 0;
  char encoding[48] = "";
  for (size_t i = 0; i < n; i++) {
    /* a value that breaks the header rule is dropped (SPEC 10) */
    if (!px_header_value_ok(h[i].value.ptr, h[i].value.len)) continue;
    if (h[i].name.len == 12 && strncasecmp(h[i].name.ptr, "content-type", 12) == 0)
      copy_cut(x->content_type, sizeof(x->content_type), PX_STR(""), h[i].value);
    else if (h[i].name.len == 16 && strncasecmp(h[i].name.ptr, "content-encoding", 16) == 0 &&
             h[i].value.len > 0 &&
             !(h[i].value.len == 8 && strncasecmp(h[i].value.ptr, "identity", 8) == 0))
      copy_cut(encoding, sizeof(encoding), PX_STR(""), h[i].value);
    if (pass_back(&h[i]) ||
        (h[i].name.len == 12 && strncasecmp(h[i].name.ptr, "x-request-id", 12) == 0)) {
      px_buf_append(&x->passhdrs, h[i].name.ptr, h[i].name.len);
      px_buf_append(&x->passhdrs, "", 1);
      px_buf_append(&x->passhdrs, h[i].value.ptr, h[i].value.len);
      px_buf_append(&x->passhdrs, "", 1);
    }
  }
  attempt_health(x, !retryable_status(status) && status < 500,
                 status == 429 ? "http_429" : "http_5xx");
  if (retryable_status(status) && retry_planned(x, status, h, n)) {
    x->mode = M_DISCARD;
    px_metrics_attempt(x->up->name, status == 429 ? "http_429" : "http_5xx");
    return 0;
  }
  if (status >= 400)
    px_metrics_attempt(x->up->name, status == 429 ? "http_429" : status >= 500 ? "http_5xx" : "http_4xx");
  else
    x->attempt_open = 1; /* ok or not is known at its end (a stream can fail midway) */
  int sse = strncasecmp(x->content_type, "text/event-stream", 17) == 0;
  /* answers the gateway cannot pass on or read: a 502 in the client's shape
   * once the body is drained (the client sees neither a redirect nor bytes
   * it cannot decode) */
  if (encoding[0])
    snprintf(x->bad_msg, sizeof(x->bad_msg),
             "bad gateway: upstream '%s' answered with Content-Encoding '%s'", x->up->name,
             encoding);
  else if (status >= 300 && status < 400)
    snprintf(x->bad_msg, sizeof(x->bad_msg),
             "bad gateway: upstream '%s' answered with a redirect (HTTP %d)", x->up->name, status);
  else if (status == 204 || status == 205 || status == 206)
    snprintf(x->bad_msg, sizeof(x->bad_msg),
             "bad gateway: upstream '%s' answered HTTP %d without a body", x->up->name, status);
  else if (status >= 200 && status < 300 && x->stream && !sse)
    snprintf(x->bad_msg, sizeof(x->bad_msg),
             "bad gateway: upstream '%s' answered a streaming request with Content-Type '%.60s'",
             x->up->name, x->content_type[0] ? x->content_type : "(none)");
  if (x->bad_msg[0]) {
    x->error_type = "bad_gateway";
    x->mode = M_BAD;
    return 0;
  }
  if (status >= 400 || status < 200) {
    x->mode = M_ERROR;
    x->acc_trunc = 0;
    px_buf_free(&x->acc);
    px_buf_init(&x->acc, PX_MAX_UPSTREAM_ERROR);
    return 0;
  }
  /* same protocol: the gateway endpoints, and Anthropic count_tokens forwarded as is */
  int same = x->in == x->out;
  if (sse && x->stream) {
    x->streaming_gauge = 1;
    px_metrics_gauge_add(PX_G_ACTIVE_STREAMS, 1);
    if (same) {
      const char *rw = strcmp(x->up_model, x->model) != 0 ? x->model : NULL;
      px_passthru_init(&x->pt, x->in, rw);
      /* the gateway asked a Chat upstream for usage (start_attempt) */
      x->pt.strip_usage = client_ops(x)->stream_usage_opt_in && !x->include_usage;
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
      px_buf_free(&x->acc);
      px_buf_init(&x->acc, PX_MAX_UPSTREAM_JSON);
      return 0;
    }
    /* held until complete (or PX_PASS_HOLD): framed by us, and a broken
     * upstream body still gets a 502 in shape (SPEC 10) */
    x->mode = M_PASS_JSON;
    px_buf_free(&x->acc);
    px_buf_init(&x->acc, PX_PASS_HOLD);
    return 0;
  }
  x->mode = M_TR_JSON;
  px_buf_free(&x->acc);
  px_buf_init(&x->acc, PX_MAX_UPSTREAM_JSON);
  return 0;
}

static int up_on_data(void *arg, const char *p, size_t n) {
  px_exch_t *x = arg;
  if (x->conn == NULL) return -1;
  switch (x->mode) {
  case M_DISCARD:
  case M_BAD:
    return 0;
  case M_ERROR:
    /* capped: the rest of a huge error is dropped, its start kept */
    if (!x->acc_trunc && px_buf_append(&x->acc, p, n) < 0) {
      size_t room = x->acc.cap - x->acc.len;
      px_buf_append(&x->acc, p, room < n ? room : n);
      x->acc_trunc = 1;
    }
    return 0;
  case M_PASS_JSON:
    if (x->started) break;
    if (px_buf_append(&x->acc, p, n) == 0) return 0;
    /* too large to hold: our chunked framing from here on */
    if (start_response(x, x->up_status,
                       x->content_type[0] ? x->content_type : "application/json", 0, -1) < 0)
      return -1;
    client_write(x, x->acc.data, x->acc.len);
    if (x->acc.len > PX_USAGE_TAIL) px_buf_consume(&x->acc, x->acc.len - PX_USAGE_TAIL);
    break;
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
    if (n >= PX_USAGE_TAIL) {
      px_buf_reset(&x->acc);
      px_buf_append(&x->acc, p + n - PX_USAGE_TAIL, PX_USAGE_TAIL);
    } else {
      if (x->acc.len + n > PX_USAGE_TAIL) px_buf_consume(&x->acc, x->acc.len + n - PX_USAGE_TAIL);
      px_buf_append(&x->acc, p, n);
    }
    client_write(x, p, n);
    return 0;
  case M_PASS_STREAM: {
    int rc = px_passthru_feed(&x->pt, p, n, &x->obuf);
    client_write(x, x->obuf.data, x->obuf.len);
    px_buf_reset(&x->obuf);
    if (rc < 0) {
      /* an event over the cap: the stream ends in error (up_on_done) */
      x->error_type = "upstream_protocol";
      return -1;
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
  if (px_usage_scan(x->out, d, n, &x->usage)) return; /* complete: one walk */
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
    const char *key = client_ops(x)->watch.body_model;
    const char *const top[] = {key ? key : "model"};
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
  int64_t n = px_proto_get(x->out)->count_decode(ub);
  json_decref(ub);
  if (n < 0) {
    send_error(x, PX_ERR_BAD_GATEWAY, "bad gateway: upstream token count is not understood", NULL);
    return;
  }
  px_buf_t b;
  px_buf_init(&b, 256);
  client_ops(x)->count_encode(&b, n);
  if (start_response(x, 200, "application/json", 0, (int64_t)b.len) == 0)
    client_write(x, b.data, b.len);
  px_buf_free(&b);
  finalize(x);
}

/* End a pass-through stream that did not end properly with the client
 * protocol's error event (the watcher keeps the client at an event
 * boundary, so the event stands on its own). */
static void pass_stream_error(px_exch_t *x, px_errkind_t kind, const char *msg) {
  const px_proto_ops_t *ops = client_ops(x);
  px_buf_reset(&x->obuf);
  if (ops->encode_stream_error) ops->encode_stream_error(&x->obuf, kind, msg);
  client_write(x, x->obuf.data, x->obuf.len);
  px_buf_reset(&x->obuf);
}

/* An upstream error body over PX_MAX_UPSTREAM_ERROR: the upstream status
 * is kept, with as much of its message as arrived (SPEC 6). */
static void send_truncated_error(px_exch_t *x) {
  char part[256];
  size_t k = 0;
  const char *d = x->acc.data, *e = d + x->acc.len;
  const char *m = d ? memmem(d, x->acc.len, "\"message\"", 9) : NULL;
  if (m) {
    const char *q = m + 9;
    while (q < e && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n' || *q == ':')) q++;
    if (q < e && *q == '"') {
      for (q++; q < e && *q != '"' && k + 4 < 200;) {
        if (*q == '\\' && q + 1 < e) q++; /* an escape: its letter stands for it */
        size_t l = px_utf8_seq((const unsigned char *)q, (size_t)(e - q));
        if (l == 0) l = 1, part[k++] = '?';
        else if (l == 1 && (unsigned char)*q < 0x20) part[k++] = ' ';
        else memcpy(part + k, q, l), k += l;
        q += l;
      }
    }
  }
  part[k] = 0;
  char msg[400];
  snprintf(msg, sizeof(msg), "%s%s(upstream error body over %u KiB, truncated)", part,
           k ? "... " : "", PX_MAX_UPSTREAM_ERROR >> 10);
  int st = x->up_status >= 400 && x->up_status <= 599 ? x->up_status : 502;
  x->error_type = "upstream_error";
  send_error_h(x, px_errkind_from_type(NULL, st), st, msg, NULL, NULL, 0);
}

static void up_on_done(void *arg, px_xfer_result_t result, const char *errmsg) {
  px_exch_t *x = arg;
  x->xfer = NULL;
  if (result != PX_XFER_OK && x->conn != NULL) attempt_health(x, 0, result_name(result));
  attempt_end(x);
  if (x->paused) {
    x->paused = 0;
    px_metrics_gauge_add(PX_G_PAUSED_STREAMS, -1);
  }
  if (x->conn == NULL) {
    finalize(x);
    return;
  }
  if (result != PX_XFER_OK) {
    const char *const fields[] = {"upstream", x->up->name, "error_type",
                                  result_name(result), NULL};
    px_log_ctx(PX_LOG_WARN, x->req->request_id, fields, "upstream %s: %s (%s)",
               x->up->name, result_name(result), errmsg ? errmsg : "");
    if (x->mode == M_NONE || x->mode == M_DISCARD || x->attempt_open) {
      px_metrics_attempt(x->up->name, result_name(result));
      x->attempt_open = 0;
    }
    int broken = x->pt_init && x->pt.failed; /* an event over the cap */
    x->error_type = broken ? "upstream_protocol" : result_name(result);
    if (x->mode == M_BAD && !x->started) {
      x->error_type = "bad_gateway";
      send_error(x, PX_ERR_BAD_GATEWAY, x->bad_msg, NULL);
      return;
    }
    if (!x->started) {
      /* connect errors and timeouts fail over like a 503 */
      int conn_fail = result == PX_XFER_ECONNECT || result == PX_XFER_ETIMEOUT_CONNECT;
      if (conn_fail && x->mode == M_NONE && plan_retry(x, 0, 0, result_name(result))) {
        schedule_retry(x);
        return;
      }
      if (x->mode == M_DISCARD) { /* planned at the headers */
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
    x->metric_status = px_errkind_status(result_kind(result));
    if (x->mode == M_TR_STREAM) {
      px_stream_tr_finish(x->str, 0, result_kind(result), "upstream stream failed");
      client_write(x, x->obuf.data, x->obuf.len);
      px_buf_reset(&x->obuf);
    } else if (x->mode == M_PASS_STREAM) {
      if (broken)
        pass_stream_error(x, PX_ERR_BAD_GATEWAY,
                          "bad gateway: upstream stream event over the size limit");
      else if (!px_passthru_finish(&x->pt))
        pass_stream_error(x, result_kind(result), "upstream stream failed");
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
  case M_BAD:
    send_error(x, PX_ERR_BAD_GATEWAY, x->bad_msg, NULL);
    return;
  case M_ERROR: {
    if (x->acc_trunc) {
      send_truncated_error(x);
      return;
    }
    px_upstream_err_t ue;
    const px_proto_ops_t *uops = px_proto_get(x->out);
    if (x->in == x->out && x->ep == PX_EP_GENERATE && uops->decode_error &&
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
    if (!x->started) { /* held whole: sent with our own Content-Length */
      px_usage_from_body(x->out, x->acc.data ? x->acc.data : "", x->acc.len, &x->usage);
      if (start_response(x, x->up_status,
                         x->content_type[0] ? x->content_type : "application/json", 0,
                         (int64_t)x->acc.len) == 0)
        client_write(x, x->acc.data, x->acc.len);
    } else {
      usage_from_tail(x);
    }
    finalize(x);
    return;
  case M_PASS_REWRITE:
  case M_TR_JSON:
    if (x->ep == PX_EP_COUNT_TOKENS && x->in != x->out) finish_count_tokens(x);
    else finish_json(x);
    return;
  case M_PASS_STREAM:
    if (!px_passthru_finish(&x->pt)) {
      pass_stream_error(x, PX_ERR_BAD_GATEWAY,
                        "upstream stream ended before its terminal event");
      x->error_type = "truncated_stream";
      x->metric_status = 502;
    }
    finalize(x);
    return;
  case M_TR_STREAM:
    if (px_stream_tr_finish(x->str, 1, PX_ERR_BAD_GATEWAY,
                            "upstream stream ended before its terminal event") != 0) {
      x->error_type = "truncated_stream";
      x->metric_status = 502;
    }
    flush_obuf(x);
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

/* name is one of list (NULL-ended, lower case), case-insensitively */
static int header_in(px_str_t name, const char *const *list) {
  if (name.len == 0) return 0;
  unsigned char c0 = (unsigned char)(name.ptr[0] | 0x20); /* most names differ here */
  for (; list && *list; list++)
    if ((unsigned char)(*list)[0] == c0 && name.len == strlen(*list) &&
        strncasecmp(name.ptr, *list, name.len) == 0)
      return 1;
  return 0;
}

static int forward_header(const px_str_t name, const px_proto_ops_t *out) {
  static const char *const any[] = {"user-agent", "traceparent", "tracestate", NULL};
  return header_in(name, any) || header_in(name, out->forward_headers);
}

/* One upstream header line as its parts: name, separator, value. */
typedef struct hdr_parts {
  px_str_t a, b, c;
} hdr_parts_t;

/* Most bytes of a joined line ("a" "b" "c", as the 4096-byte snprintf the
 * join replaced); a configured line is kept whole. */
#define HDR_LINE_MAX 4095

/* Whether the upstream's configured `header =` lines name this header
 * (case-insensitive): a configured header replaces whatever the gateway or
 * the client would send under that name (SPEC 10). */
static int configured(const px_upstream_conf_t *up, px_str_t name) {
  for (size_t i = 0; i < up->nheaders; i++) {
    const char *h = up->headers[i];
    const char *c = strchr(h, ':');
    size_t l = c ? (size_t)(c - h) : strlen(h);
    while (l > 0 && (h[l - 1] == ' ' || h[l - 1] == '\t')) l--;
    if (l == name.len && strncasecmp(h, name.ptr, l) == 0) return 1;
  }
  return 0;
}

/* the upstream chooses its own billing / tenancy when it configures any
 * of the protocol's tenancy headers */
static int own_tenancy(const px_upstream_conf_t *up, const px_proto_ops_t *ops) {
  for (const char *const *t = ops->tenancy_headers; t && *t; t++)
    if (configured(up, px_str(*t))) return 1;
  return 0;
}

/* The header lines, as NULL-terminated array of strings in one allocation
 * (pointers first, then the lines): no allocation and no printf per line. */
static char **build_upstream_headers(px_exch_t *x) {
  const px_upstream_conf_t *up = x->up;
  size_t max = 16 + x->req->nhdrs + up->nheaders;
  hdr_parts_t stack[48], *parts = max <= 48 ? stack : malloc(max * sizeof(*parts));
  if (parts == NULL) return NULL;
  /* the upstream bills to its own organization / project: the client's
   * choice of either is dropped when it configures one */
  const px_proto_ops_t *ops = px_proto_get(x->out);
  int own = own_tenancy(up, ops);
  size_t n = 0;
  /* every value passes the one header-value rule; a name the upstream
   * configures is left to its `header =` line */
#define ADD(name, sep, value)                                                            \
  do {                                                                                   \
    px_str_t nm_ = (name), v_ = (value);                                                 \
    if (px_header_value_ok(v_.ptr, v_.len) && !configured(up, nm_))                      \
      parts[n++] = (hdr_parts_t){nm_, (sep), v_};                                        \
  } while (0)
  ADD(PX_STR("Content-Type"), PX_STR(": "), PX_STR("application/json"));
  ADD(PX_STR("Accept"), PX_STR(": "), x->stream ? PX_STR("text/event-stream") : PX_STR("application/json"));
  if (up->api_key) { /* "x-api-key: " = name, separator, key */
    const char *a = ops->auth_header, *colon = strchr(a, ':');
    ADD(((px_str_t){a, (size_t)(colon - a)}), px_str(colon), px_str(up->api_key));
  }
  if (ops->version_header) {
    const char *v = px_req_header(x->req, ops->version_header);
    ADD(px_str(ops->version_header), PX_STR(": "),
        px_str(v && *v && value_ok(v) ? v : up->anthropic_version));
  }
  ADD(PX_STR("x-request-id"), PX_STR(": "), px_str(x->req->request_id));
  for (size_t i = 0; i < x->req->nhdrs && n < max - up->nheaders - 1; i++) {
    const px_hdr_t *rh = &x->req->hdrs[i];
    if (!forward_header(rh->name, ops)) continue;
    if (own && header_in(rh->name, ops->tenancy_headers)) continue;
    ADD(rh->name, PX_STR(": "), rh->value);
  }
#undef ADD
  size_t joined = n; /* lines after this one are configured ones, kept whole */
  for (size_t i = 0; i < up->nheaders; i++)
    if (value_ok(up->headers[i]))
      parts[n++] = (hdr_parts_t){px_str(up->headers[i]), PX_STR(""), PX_STR("")};
  size_t bytes = (n + 1) * sizeof(char *);
  for (size_t i = 0; i < n; i++) {
    size_t l = parts[i].a.len + parts[i].b.len + parts[i].c.len;
    bytes += (i < joined && l > HDR_LINE_MAX ? HDR_LINE_MAX : l) + 1;
  }
  char **h = malloc(bytes);
  if (h != NULL) {
    char *o = (char *)(h + n + 1);
    for (size_t i = 0; i < n; i++) {
      const px_str_t ps[3] = {parts[i].a, parts[i].b, parts[i].c};
      size_t k = 0, cap = i < joined ? HDR_LINE_MAX : (size_t)-1;
      for (size_t j = 0; j < 3; j++) {
        size_t l = ps[j].len < cap - k ? ps[j].len : cap - k;
        if (l) memcpy(o + k, ps[j].ptr, l);
        k += l;
      }
      o[k] = 0;
      h[i] = o;
      o += k + 1;
    }
    h[n] = NULL;
  }
  if (parts != stack) free(parts);
  return h;
}

/* A stream body that asks for usage (SPEC 5: the final usage must be real,
 * for tpm and metrics, whatever the client asked; the watcher strips the
 * extra chunk for a client that did not ask), for protocols whose streams
 * carry usage only on request. Without stream_options the member is put
 * first, bytes otherwise untouched; with one (include_usage not true), the
 * body is parsed and include_usage set. NULL: nothing to change. */
static char *usage_body(const char *bd, size_t n, size_t *len) {
  static const char *const P_SO[] = {"stream_options"};
  size_t vs, vl;
  if (px_json_find(bd, n, P_SO, 1, &vs, &vl) == PX_JSON_ABSENT) {
    static const char ins[] = "\"stream_options\":{\"include_usage\":true},";
    size_t i = 0;
    while (i < n && bd[i] != '{') i++;
    if (i == n) return NULL;
    char *b = malloc(n + sizeof(ins));
    if (b == NULL) return NULL;
    memcpy(b, bd, i + 1);
    memcpy(b + i + 1, ins, sizeof(ins) - 1);
    memcpy(b + i + sizeof(ins), bd + i + 1, n - i - 1);
    *len = n + sizeof(ins) - 1;
    b[*len] = 0;
    return b;
  }
  json_t *body = json_loadb(bd, n, 0, NULL);
  json_t *so = json_object_get(body, "stream_options");
  char *out = NULL;
  if (json_is_object(body)) {
    json_t *nso = json_is_object(so) ? json_copy(so) : json_object();
    json_object_set_new(nso, "include_usage", json_true());
    json_object_set_new(body, "stream_options", nso);
    out = json_dumps(body, JSON_COMPACT);
    if (out) *len = strlen(out);
  }
  json_decref(body);
  return out;
}

/* Same-protocol upstream body: the client's bytes, with the route's model
 * (spliced where the scanner found it) and the usage request of a stream
 * that carries usage only on request, when either applies. */
static int pass_body(px_exch_t *x) {
  const char *bd = x->req->body.data ? x->req->body.data : "";
  size_t n = x->req->body.len;
  char *owned = NULL;
  if (strcmp(x->up_model, x->model) != 0 && !client_ops(x)->model_in_path) {
    px_buf_t b;
    px_buf_init(&b, n + strlen(x->up_model) * 6 + 64);
    if (px_json_splice_str(&b, bd, n, x->jreq.model_at, x->jreq.model_len, x->up_model) < 0) {
      px_buf_free(&b);
      send_error(x, PX_ERR_API, "out of memory", NULL);
      return -1;
    }
    n = b.len;
    bd = owned = px_buf_steal(&b, NULL);
  }
  if (client_ops(x)->stream_usage_opt_in && x->stream && x->ep == PX_EP_GENERATE &&
      !x->include_usage) {
    size_t l = 0;
    char *u = usage_body(bd, n, &l);
    if (u != NULL) {
      free(owned);
      bd = owned = u;
      n = l;
    }
  }
  x->up_body = bd;
  x->up_body_len = n;
  x->up_body_owned = owned;
  return 0;
}

static void start_attempt(px_exch_t *x) {
  const px_route_conf_t *rt = x->route;
  const px_target_t *t;
  if (x->target == 0) {
    x->dep = px_balance_pick(x->cfg, rt, x->tried, now_ms(x));
    x->tried |= 1ull << x->dep;
    t = &rt->deployments[x->dep];
  } else {
    t = &rt->fallbacks[x->target - 1];
  }
  const px_upstream_conf_t *prev = x->up;
  x->up = &x->cfg->upstreams[t->upstream];
  x->out = x->up->protocol;
  x->up_model = px_target_model(rt, t, x->model);
  x->attempt++;
  x->attempts++;
  x->mode = M_NONE;
  copy_cut(x->label, sizeof(x->label), px_str(x->up->name), PX_STR("/")); /* "%s/%s" */
  size_t ll = strlen(x->label);
  copy_cut(x->label + ll, sizeof(x->label) - ll, PX_STR(""), px_str(x->up_model));
  if (prev != NULL)
    px_log_info("%s: %s %u on upstream %s after %s from upstream %s", x->req->request_id,
                x->target > 0 && x->attempt == 1 ? "fallback" : "retry", x->attempts - 1,
                x->up->name, x->retry_reason, prev->name);

  /* a retry on the same target sends the body, URL and headers it built */
  if (x->built_up == x->up && x->built_model == x->up_model && x->up_body != NULL &&
      x->url != NULL && x->up_hdrs != NULL)
    goto send;
  x->built_up = NULL;
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
  ctx->scan = &x->jreq; /* gateway() scanned the body once */
  const px_proto_ops_t *uops = px_proto_get(x->out);
  if (x->ep == PX_EP_COUNT_TOKENS && x->in != x->out &&
      (uops->count_decode == NULL || client_ops(x)->count_encode == NULL)) {
    char msg[160];
    snprintf(msg, sizeof(msg), "token counting is not available for an %s upstream",
             uops->name);
    send_error(x, PX_ERR_NOT_IMPL, msg, NULL);
    return;
  }

  px_lossy_init(&x->lossy);
  if (x->in == x->out) {
    if (pass_body(x) < 0) return;
  } else {
    px_tr_err_t err;
    memset(&err, 0, sizeof(err));
    if (px_translate_request_body(ctx, x->req->body.data ? x->req->body.data : "",
                                  x->req->body.len,
                                  x->ep == PX_EP_COUNT_TOKENS ? PX_TR_COUNT_TOKENS : 0,
                                  &x->up_body_owned, &x->up_body_len, &x->lossy, &err) < 0) {
      send_error(x, err.kind, err.message[0] ? err.message : "request cannot be translated",
                 err.param[0] ? err.param : NULL);
      return;
    }
    x->up_body = x->up_body_owned;
  }
  free(x->url);
  x->url = NULL;
  px_buf_t ub;
  px_buf_init(&ub, 64u << 10);
  if (px_buf_puts(&ub, x->up->base_url) < 0 ||
      px_proto_upstream_url(uops, &ub, x->up_model, x->stream, x->ep) < 0 ||
      px_buf_append(&ub, "", 1) < 0) {
    px_buf_free(&ub);
    char msg[160];
    snprintf(msg, sizeof(msg), "this endpoint is not available for an %s upstream", uops->name);
    send_error(x, PX_ERR_NOT_IMPL, msg, NULL);
    return;
  }
  x->url = px_buf_steal(&ub, NULL);
  free_hdrs(x->up_hdrs);
  x->up_hdrs = build_upstream_headers(x);
  x->built_up = x->up;
  x->built_model = x->up_model;

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
  x->bal = px_balance_up(x->up);
  x->health_done = 0;
  x->t_attempt = now_ms(x);
  px_balance_begin(x->bal);
  x->xfer = px_xfer_start(x->srv->uclient, &o, &xfer_cbs, x);
  if (x->xfer == NULL) {
    attempt_end(x);
    send_error(x, PX_ERR_API, "cannot start the upstream request", NULL);
  }
}

/* ---------------------------------------------------------------------- */
/* entry points                                                              */

static void simple_json(px_conn_t *c, int status, const char *body) {
  px_resp_simple(c, status, "application/json", body, strlen(body), NULL, 0);
}

/* An error for a path in the shape of the protocol that owns it (else the
 * default protocol's). */
static void path_error(px_conn_t *c, const px_proto_ops_t *ops, px_errkind_t kind,
                       const char *msg) {
  if (ops == NULL) ops = px_proto_default();
  px_buf_t b;
  px_buf_init(&b, 4096);
  ops->encode_error(&b, kind, ops->error_type(kind), msg, NULL, NULL);
  px_resp_simple(c, px_errkind_status(kind), "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
}

/* Whether id is already among the first n names listed. */
static int listed(const char *const *ids, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(ids[i], id) == 0) return 1;
  return 0;
}

/* The concrete model names key k (NULL: open gateway) may use: exact route
 * names and the `models =` names of glob routes, never a glob, each once;
 * in the list shape of ops (the protocol the request names). */
static void serve_models(px_server_t *s, px_conn_t *c, const px_proto_ops_t *ops,
                         const px_key_conf_t *k) {
  px_config_t *cfg = s->config;
  size_t cap = 0;
  for (size_t i = 0; i < cfg->nroutes; i++) cap += 1 + cfg->routes[i].nmodels;
  const char **ids = calloc(cap ? cap : 1, sizeof(*ids));
  const char **owner = calloc(cap ? cap : 1, sizeof(*owner));
  size_t n = 0;
  for (size_t i = 0; ids && owner && i < cfg->nroutes; i++) {
    const px_route_conf_t *rt = &cfg->routes[i];
    const char *up = cfg->upstreams[rt->upstream].name;
    int glob = strpbrk(rt->pattern, "*?") != NULL;
    for (size_t j = 0; j < (glob ? rt->nmodels : 1); j++) {
      const char *id = glob ? rt->models[j] : rt->pattern;
      if ((k && !px_key_allows(k, id)) || listed(ids, n, id)) continue;
      owner[n] = up;
      ids[n++] = id;
    }
  }
  px_buf_t b;
  px_buf_init(&b, 1u << 20);
  ops->encode_models(&b, ids, owner, n);
  px_resp_simple(c, 200, "application/json", b.data, b.len, NULL, 0);
  px_buf_free(&b);
  free(ids);
  free(owner);
}

/* The protocol whose model list a GET /v1/models asks for: the one whose
 * marker header the request carries, else the default. */
static const px_proto_ops_t *models_shape(const px_req_t *r) {
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_proto_ops_t *ops = px_proto_get((px_proto_t)p);
    if (ops->models_marker_header && px_req_header(r, ops->models_marker_header)) return ops;
  }
  return px_proto_default();
}

static int path_is(const px_req_t *r, const char *p) {
  size_t n = strlen(p);
  return r->path_len == n && memcmp(r->url.data, p, n) == 0;
}

/* The client key: Authorization: Bearer, x-api-key, or the protocol's own
 * header or query parameter (Gemini's x-goog-api-key, ?key=). */
static const char *client_secret(const px_req_t *r, const px_proto_ops_t *ops, size_t *len) {
  const char *a = px_req_header(r, "authorization");
  if (a && strncasecmp(a, "Bearer ", 7) == 0) {
    a += 7;
    while (*a == ' ') a++;
    *len = strlen(a);
    return a;
  }
  a = px_req_header(r, "x-api-key");
  if (a == NULL && ops->client_key_header) a = px_req_header(r, ops->client_key_header);
  if (a) {
    *len = strlen(a);
    return a;
  }
  const char *q = r->url.data + r->path_len, *end = r->url.data + r->url.len;
  size_t kl = ops->client_key_query ? strlen(ops->client_key_query) : 0;
  if (kl == 0 || q >= end || *q != '?') return NULL;
  for (const char *p = q + 1; p < end;) {
    const char *amp = memchr(p, '&', (size_t)(end - p));
    const char *e = amp ? amp : end;
    if ((size_t)(e - p) > kl && memcmp(p, ops->client_key_query, kl) == 0 && p[kl] == '=') {
      *len = (size_t)(e - p - kl - 1);
      return p + kl + 1;
    }
    p = e + 1;
  }
  return NULL;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* A percent-decoded copy of a path segment; NULL when it decodes to a byte
 * no header value may hold (CR, LF, NUL): such a model is refused. */
static char *url_decode(px_str_t s) {
  char *o = malloc(s.len + 1);
  if (o == NULL) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < s.len; i++) {
    int hi = -1, lo = -1;
    if (s.ptr[i] == '%' && i + 2 < s.len) hi = hexval(s.ptr[i + 1]), lo = hexval(s.ptr[i + 2]);
    if (hi >= 0 && lo >= 0) {
      o[k++] = (char)(hi * 16 + lo);
      i += 2;
    } else {
      o[k++] = s.ptr[i];
    }
  }
  if (!px_header_value_ok(o, k)) {
    free(o);
    return NULL;
  }
  o[k] = 0;
  return o;
}

/* GET endpoints that need a client key when keys exist (/v1/models, /metrics
 * on the client listener): 0 with *k set (NULL when the gateway is open), or
 * <0 after answering 401. */
static int get_key(px_server_t *s, px_conn_t *c, px_req_t *r, const px_proto_ops_t *ops,
                   const px_key_conf_t **k) {
  *k = NULL;
  if (s->config->nkeys == 0) return 0;
  size_t sl = 0;
  const char *sec = client_secret(r, ops, &sl);
  *k = sec ? px_config_key(s->config, sec, sl) : NULL;
  if (*k) return 0;
  path_error(c, ops, PX_ERR_AUTH,
             sec ? "invalid API key"
                 : "missing API key: send Authorization: Bearer KEY or x-api-key");
  return -1;
}

static void serve_metrics(px_conn_t *c) {
  px_buf_t b;
  px_buf_init(&b, 16u << 20);
  px_metrics_render(&b);
  px_resp_simple(c, 200, "text/plain; version=0.0.4", b.data, b.len, NULL, 0);
  px_buf_free(&b);
}

/* Tokens to set aside on the key's tpm bucket at admission: the request's
 * own output cap, else the route's max_tokens, else PX_RL_DEFAULT_RESERVE.
 * Settled with the real usage when the request ends. */
#define PX_RL_DEFAULT_RESERVE 4096
static uint64_t reserve_estimate(px_exch_t *x) {
  static const char *const caps[][2] = {{"max_tokens", NULL},
                                        {"max_completion_tokens", NULL},
                                        {"max_output_tokens", NULL},
                                        {"generationConfig", "maxOutputTokens"}};
  const char *bd = x->req->body.data ? x->req->body.data : "";
  for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
    size_t vs, vl;
    if (px_json_find(bd, x->req->body.len, caps[i], caps[i][1] ? 2 : 1, &vs, &vl) ==
            PX_JSON_FOUND &&
        vl > 0 && bd[vs] >= '0' && bd[vs] <= '9')
      return strtoull(bd + vs, NULL, 10);
  }
  const px_route_conf_t *rt = px_config_route(x->cfg, x->model);
  if (rt && rt->max_tokens > 0) return (uint64_t)rt->max_tokens;
  return PX_RL_DEFAULT_RESERVE;
}

/* The rate limiter's verdict; <0 when the request was answered. */
static int admission(px_exch_t *x, px_rl_verdict_t v, unsigned wait) {
  if (v == PX_RL_ALLOW) {
    x->rl_admitted = 1;
    return 0;
  }
  if (v == PX_RL_UNAVAILABLE) {
    send_error(x, PX_ERR_UNAVAILABLE, "rate limits cannot be checked: the shared state "
                                      "backend is unreachable", NULL);
    return -1;
  }
  char ra[16];
  snprintf(ra, sizeof(ra), "%u", wait ? wait : 1);
  px_hdr_t h = {px_str("retry-after"), px_str(ra)};
  send_error_h(x, PX_ERR_RATE_LIMIT, 429, "rate limit exceeded for this key", NULL, &h, 1);
  return -1;
}

static void after_admission(px_exch_t *x) {
  px_config_t *cfg = x->cfg;
  if (x->srv->draining) {
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

static void on_admitted(void *arg, px_rl_verdict_t v, unsigned wait) {
  px_exch_t *x = arg;
  x->rl_wait = NULL;
  if (admission(x, v, wait) == 0) after_admission(x);
}

static void gateway(px_server_t *s, px_conn_t *c, px_req_t *r, const px_inbound_t *in) {
  px_exch_t *x = malloc(sizeof(*x));
  if (x == NULL) {
    px_resp_abort(c);
    return;
  }
  memset(x, 0, offsetof(px_exch_t, retry_reason));
  x->retry_reason[0] = x->bad_msg[0] = x->content_type[0] = x->label[0] = 0;
  px_lossy_init(&x->lossy);
  x->srv = s;
  x->conn = c;
  x->req = r;
  x->cfg = px_config_ref(s->config);
  x->in = in->proto;
  x->ep = in->ep;
  px_endpoint_t ep = in->ep;
  x->t_start = r->start_ns;
  x->usage.input_tokens = x->usage.output_tokens = -1;
  px_buf_init(&x->passhdrs, 64 * 1024);
  px_buf_init(&x->obuf, PX_MAX_STREAM_OUT);
  px_buf_init(&x->acc, 0);
  px_conn_set_handler(c, &conn_handler, x);

  /* One scan validates the body by the rules of SPEC section 10 (jansson's
   * syntax, nesting, no repeated model/stream) and finds what the gateway
   * acts on; a request that stays in its own protocol is never parsed. */
  const char *bd = r->body.data ? r->body.data : "";
  if (px_json_request(bd, r->body.len, &x->jreq) < 0) {
    const px_json_req_t *jr = &x->jreq;
    char msg[300];
    if (jr->err == PX_JREQ_DUPLICATE)
      snprintf(msg, sizeof(msg), "request body has '%s' more than once", jr->key);
    else if (jr->err == PX_JREQ_NOT_OBJECT)
      snprintf(msg, sizeof(msg), "request body must be a JSON object");
    else
      snprintf(msg, sizeof(msg), "request body is not valid JSON: %s (at byte %zu)",
               jr->reason, jr->err_at);
    send_error(x, PX_ERR_INVALID, msg, jr->err == PX_JREQ_DUPLICATE ? jr->key : NULL);
    return;
  }
  if (in->model.len > 0) { /* the path names the model (and whether it streams) */
    x->model = x->model_buf = url_decode(in->model);
    if (x->model == NULL) x->model = "\n"; /* CR, LF or NUL: refused below */
  } else {
    x->model = x->model_buf = px_json_req_model(bd, &x->jreq);
  }
  if (x->model == NULL || x->model[0] == 0) {
    send_error(x, PX_ERR_INVALID, "'model' is required and must be a non-empty string",
               "model");
    return;
  }
  if (x->jreq.stream_len > 0 && !x->jreq.stream &&
      !(x->jreq.stream_len == 5 && memcmp(bd + x->jreq.stream_at, "false", 5) == 0) &&
      !(x->jreq.stream_len == 4 && memcmp(bd + x->jreq.stream_at, "null", 4) == 0)) {
    send_error(x, PX_ERR_INVALID, "'stream' must be a boolean", "stream");
    return;
  }
  x->stream = in->stream >= 0 ? in->stream > 0 : ep == PX_EP_GENERATE && x->jreq.stream;
  x->include_usage = x->jreq.include_usage;

  /* the model reaches the x-proxai-upstream header and the upstream
   * request: it must be a valid header value (SPEC 10) */
  if (!px_header_value_ok(x->model, strlen(x->model))) {
    x->model = NULL; /* never logged either */
    send_error(x, PX_ERR_INVALID,
               "'model' is not a valid model name: it contains a control character (CR, LF "
               "or NUL)",
               "model");
    return;
  }

  px_config_t *cfg = x->cfg;
  if (cfg->nkeys > 0) {
    size_t sl = 0;
    const char *sec = client_secret(r, client_ops(x), &sl);
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
      if (px_rl_reserves()) x->rl_reserved = reserve_estimate(x);
      unsigned wait = 0;
      px_rl_verdict_t v = px_rl_check(x->key, x->rl_reserved, now_ms(x), &wait, on_admitted, x,
                                      &x->rl_wait);
      if (v == PX_RL_PENDING) return; /* on_admitted goes on */
      if (admission(x, v, wait) < 0) return;
    }
  }
  after_admission(x);
}

void px_proxy_request(px_server_t *s, px_conn_t *c, px_req_t *r) {
  const char *path = r->url.data;
  int get = r->method == HTTP_GET || r->method == HTTP_HEAD;
  if (path_is(r, "/healthz")) {
    if (!get) return path_error(c, NULL, PX_ERR_METHOD, "method not allowed");
    return simple_json(c, 200, "{\"status\":\"ok\"}");
  }
  if (path_is(r, "/readyz")) {
    if (!get) return path_error(c, NULL, PX_ERR_METHOD, "method not allowed");
    if (s->draining) return simple_json(c, 503, "{\"status\":\"draining\"}");
    return simple_json(c, 200, "{\"status\":\"ready\"}");
  }
  const px_key_conf_t *k;
  if (px_conn_is_admin(c)) { /* admin_listen: metrics and health only, no key */
    if (!path_is(r, "/metrics")) return path_error(c, NULL, PX_ERR_NOT_FOUND, "not found");
    if (!get) return path_error(c, NULL, PX_ERR_METHOD, "method not allowed");
    return serve_metrics(c);
  }
  if (path_is(r, "/metrics") && s->config->server.admin_listen == NULL) {
    if (!get) return path_error(c, NULL, PX_ERR_METHOD, "method not allowed");
    if (get_key(s, c, r, px_proto_default(), &k) < 0) return;
    return serve_metrics(c);
  }
  if (path_is(r, "/v1/models") || path_is(r, "/models")) {
    const px_proto_ops_t *ops = models_shape(r);
    if (!get) return path_error(c, ops, PX_ERR_METHOD, "method not allowed");
    if (get_key(s, c, r, ops, &k) < 0) return;
    return serve_models(s, c, ops, k);
  }
  px_inbound_t in;
  if (!px_proto_match(path, r->url.len, &in))
    return path_error(c, NULL, PX_ERR_NOT_FOUND, "not found");
  const px_proto_ops_t *ops = px_proto_get(in.proto);
  if (in.ep == PX_EP_MODELS) {
    if (!get) return path_error(c, ops, PX_ERR_METHOD, "method not allowed");
    if (get_key(s, c, r, ops, &k) < 0) return;
    return serve_models(s, c, ops, k);
  }
  if (r->method != HTTP_POST) return path_error(c, ops, PX_ERR_METHOD, "method not allowed");
  gateway(s, c, r, &in);
}
