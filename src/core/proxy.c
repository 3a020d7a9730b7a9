/* proxy.c - the request core's attempt phase and its one exit. It knows no
 * protocol. After admission (admit.c) it picks a deployment, has the
 * upstream request built (upreq.c), runs the transfer, reads the upstream
 * head and hands the answer to the response mode chosen there (respond.c);
 * it plans retries and fallbacks, follows the client's side (drain, close),
 * and ends every request through finalize().
 *
 *   admit.c --> attempt --headers--> retry planned? --> discard mode
 *                 ^   |                   \--> px_mode_choose --> mode
 *                 |   +-- data --> mode->on_data --> client
 *                 |   +-- done --> mode->on_done | on_fail | on_cut
 *   retry / fallback (timer) <--+                       --> finalize
 */
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/money.h"
#include "proxy_int.h"
#include "stored.h"

/* a parsed retry-after never exceeds this (one day): no overflow downstream */
#define PX_RETRY_AFTER_CLAMP_MS 86400000ull

static void start_attempt(px_exch_t *x);
static void finalize(px_exch_t *x);
static void attempt_end(px_exch_t *x);

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
   * stream are ~2 KiB; the deltas that follow fit the smallest size) */
  if (x->obuf.size > 512) px_buf_free(&x->obuf);
}

/* ---------------------------------------------------------------------- */
/* finalize: the one exit of every request                                  */

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

/* px_lossy_each: one proxai_lossy_fields_total count ({inbound, upstream}). */
static void count_lossy(void *arg, const char *field) {
  const char *const *l = arg;
  px_metrics_lossy(l[0], l[1], field);
}

/* The access log line of the exchange (written once its bytes are out). */
/* dst = a then b, cut to cap - 1 bytes and NUL-terminated (snprintf "%s%.*s"
 * without printf: this runs per request). */
static void copy_cut(char *dst, size_t cap, px_str_t a, px_str_t b) {
  size_t k = a.len < cap - 1 ? a.len : cap - 1;
  if (k) memcpy(dst, a.ptr, k);
  size_t l = b.len < cap - 1 - k ? b.len : cap - 1 - k;
  if (l) memcpy(dst + k, b.ptr, l);
  dst[k + l] = 0;
}

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
  char path[256];
  copy_cut(path, sizeof(path), (px_str_t){x->req->url.data, x->req->path_len}, PX_STR(""));
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
  const char *labels[2] = {inbound, upname};
  px_lossy_each(&x->lossy, count_lossy, labels); /* one count per dropped field */
  int64_t toks = (x->usage.input_tokens > 0 ? x->usage.input_tokens : 0) +
                 (x->usage.output_tokens > 0 ? x->usage.output_tokens : 0);
  if (toks > 0 || x->usage.input_tokens >= 0)
    px_metrics_tokens(x->key ? x->key->name : NULL, upname, x->usage.input_tokens,
                      x->usage.output_tokens);
  if (x->cost_nano > 0)
    px_metrics_spend(x->key ? x->key->name : NULL, x->team, x->up_model, x->cost_nano);
  if (x->rl_admitted)
    px_rl_settle(&x->adm, (uint64_t)toks, x->cost_nano > 0 ? x->cost_nano : 0,
                 px_exch_now(x));
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

px_exch_t *px_exch_alloc(void) {
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
  return x;
}

/* The exchange's memory (freed here, or when its timer has closed). */
static void exch_free(px_exch_t *x) {
  free(x->model_buf);
  free(x->user_buf);
  px_stored_free(x);
  px_upreq_free(x);
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
  if (x->finalized || px_stored_defer(x)) return;
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
  x->cost_nano = cost_of(x);
  access_log(x, inbound, upname, dur, ttft);
  account(x, inbound, upname, dur, ttft);
  if (x->conn) {
    px_conn_set_handler(x->conn, NULL, NULL);
    if (x->started) px_resp_end(x->conn);
    else px_resp_abort(x->conn);
    x->conn = NULL;
  }
  exch_free(x);
}

void px_exch_finalize(px_exch_t *x) { finalize(x); }

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

const px_conn_handler_t px_exch_conn_handler = {on_client_drain, on_client_close};

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
  uint64_t now = px_exch_now(x);
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
  if (x->target == 0 && px_balance_has_untried(x->cfg, x->route, x->tried, px_exch_now(x))) {
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
void px_exch_schedule_retry(px_exch_t *x) {
  if (x->next_target != x->target) {
    x->target = x->next_target;
    x->attempt = 0;
  }
  x->mode = &px_mode_none;
  if (!x->timer_init) {
    uv_timer_init(x->srv->loop, &x->timer);
    x->timer_init = 1;
  }
  x->timer.data = x;
  uv_timer_start(&x->timer, on_retry_timer, x->next_delay, 0);
}

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

/* ---------------------------------------------------------------------- */
/* upstream callbacks                                                        */

/* Reads the upstream head: the content type, an encoding the gateway cannot
 * pass on (into encoding), and the headers given back to the client. */
static void read_head(px_exch_t *x, const px_hdr_t *h, size_t n, char *encoding,
                      size_t elen) {
  px_buf_reset(&x->passhdrs);
  x->content_type[0] = 0;
  for (size_t i = 0; i < n; i++) {
    /* a value that breaks the header rule is dropped (SPEC 10) */
    if (!px_header_value_ok(h[i].value.ptr, h[i].value.len)) continue;
    if (h[i].name.len == 12 && strncasecmp(h[i].name.ptr, "content-type", 12) == 0)
      copy_cut(x->content_type, sizeof(x->content_type), h[i].value, PX_STR(""));
    else if (h[i].name.len == 16 && strncasecmp(h[i].name.ptr, "content-encoding", 16) == 0 &&
             h[i].value.len > 0 &&
             !(h[i].value.len == 8 && strncasecmp(h[i].value.ptr, "identity", 8) == 0))
      copy_cut(encoding, elen, h[i].value, PX_STR(""));
    if (pass_back(&h[i]) ||
        (h[i].name.len == 12 && strncasecmp(h[i].name.ptr, "x-request-id", 12) == 0)) {
      px_buf_append(&x->passhdrs, h[i].name.ptr, h[i].name.len);
      px_buf_append(&x->passhdrs, "", 1);
      px_buf_append(&x->passhdrs, h[i].value.ptr, h[i].value.len);
      px_buf_append(&x->passhdrs, "", 1);
    }
  }
}

/* The upstream head: health, a retry (the discard mode), else the response
 * mode, chosen here once. */
static int up_on_headers(void *arg, int status, const px_hdr_t *h, size_t n) {
  px_exch_t *x = arg;
  x->up_status = status;
  x->bad_msg[0] = 0;
  char encoding[48] = "";
  read_head(x, h, n, encoding, sizeof(encoding));
  attempt_health(x, !retryable_status(status) && status < 500,
                 status == 429 ? "http_429" : "http_5xx");
  if (retryable_status(status) && retry_planned(x, status, h, n)) {
    x->mode = &px_mode_discard;
    px_metrics_attempt(x->up->name, status == 429 ? "http_429" : "http_5xx");
    return 0;
  }
  if (status >= 400)
    px_metrics_attempt(x->up->name, status == 429 ? "http_429" : status >= 500 ? "http_5xx" : "http_4xx");
  else
    x->attempt_open = 1; /* ok or not is known at its end (a stream can fail midway) */
  x->mode = px_mode_choose(x, status, encoding);
  if (x->mode->on_head && x->mode->on_head(x) < 0) return headers_failed(x);
  return 0;
}

static int up_on_data(void *arg, const char *p, size_t n) {
  px_exch_t *x = arg;
  if (x->conn == NULL) return -1;
  return x->mode->on_data(x, p, n);
}

/* A connect error or timeout before any head fails over like a 503: 1 when
 * a retry is planned. */
int px_exch_retry_connect(px_exch_t *x, px_xfer_result_t r) {
  int conn_fail = r == PX_XFER_ECONNECT || r == PX_XFER_ETIMEOUT_CONNECT;
  return conn_fail && plan_retry(x, 0, 0, result_name(r));
}

/* The transfer failed: logged and counted here, answered by the mode. */
static void up_failed(px_exch_t *x, px_xfer_result_t result, const char *errmsg) {
  const char *const fields[] = {"upstream", x->up->name, "error_type", result_name(result),
                                NULL};
  px_log_ctx(PX_LOG_WARN, x->req->request_id, fields, "upstream %s: %s (%s)", x->up->name,
             result_name(result), errmsg ? errmsg : "");
  if (x->mode->count_failure || x->attempt_open) {
    px_metrics_attempt(x->up->name, result_name(result));
    x->attempt_open = 0;
  }
  int broken = x->pt_init && x->pt.failed; /* an event over the cap */
  x->error_type = broken ? "upstream_protocol" : result_name(result);
  if (!x->started) {
    x->mode->on_fail(x, result);
    return;
  }
  /* mid-response failure: the client's protocol error event */
  x->metric_status = px_errkind_status(px_exch_result_kind(result));
  x->mode->on_cut(x, result);
  finalize(x);
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
  if (result != PX_XFER_OK) up_failed(x, result, errmsg);
  else x->mode->on_done(x);
}

static const px_xfer_cbs_t xfer_cbs = {up_on_headers, up_on_data, up_on_done};

/* ---------------------------------------------------------------------- */
/* the attempt                                                               */

/* The target of this attempt: a deployment of the route (balance.c picks
 * among the untried) or fallback target-1; sets up, up_model, out, label. */
static void pick_target(px_exch_t *x) {
  const px_route_conf_t *rt = x->route;
  const px_target_t *t;
  if (x->target == 0) {
    x->dep = px_balance_pick(x->cfg, rt, x->tried, px_exch_now(x));
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
  x->mode = &px_mode_none;
  copy_cut(x->label, sizeof(x->label), px_str(x->up->name), PX_STR("/")); /* "%s/%s" */
  size_t ll = strlen(x->label);
  copy_cut(x->label + ll, sizeof(x->label) - ll, px_str(x->up_model), PX_STR(""));
  if (prev != NULL)
    px_log_info("%s: %s %u on upstream %s after %s from upstream %s", x->req->request_id,
                x->target > 0 && x->attempt == 1 ? "fallback" : "retry", x->attempts - 1,
                x->up->name, x->retry_reason, prev->name);
}

/* Starts the upstream transfer of the built request. */
static void send_upstream(px_exch_t *x) {
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
  x->t_attempt = px_exch_now(x);
  px_balance_begin(x->bal);
  x->xfer = px_xfer_start(x->srv->uclient, &o, &xfer_cbs, x);
  if (x->xfer == NULL) {
    attempt_end(x);
    px_exch_error(x, PX_ERR_API, "cannot start the upstream request", NULL);
  }
}

static void start_attempt(px_exch_t *x) {
  pick_target(x);
  if (px_upreq_build(x) < 0) return; /* answered */
  send_upstream(x);
}

void px_exch_attempt(px_exch_t *x) { start_attempt(x); }
