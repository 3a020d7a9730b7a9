/* attempt.c - the attempt phase of the request core. It knows no protocol.
 * After admission (admit.c) it picks a deployment, has the upstream request
 * built (upreq.c), runs the transfer, reads the upstream head and hands the
 * answer to the response mode chosen there (respond.c); it plans retries
 * and fallbacks. It stands on the exchange (exchange.c), which ends every
 * request.
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

#include "attempt.h"
#include "proxai/log.h"
#include "proxai/metrics.h"
#include "respond.h"
#include "upreq.h"

/* a parsed retry-after never exceeds this (one day): no overflow downstream */
#define PX_RETRY_AFTER_CLAMP_MS 86400000ull

static void start_attempt(px_exch_t *x);
static void schedule_retry(px_exch_t *x);
static int retry_connect(px_exch_t *x, px_xfer_result_t r);

/* ---------------------------------------------------------------------- */
/* the modes of the attempt itself: no head yet, or a retried answer        */

static int data_drop(px_exch_t *x, const char *p, size_t n) { return 0; }
static void cut_drop(px_exch_t *x, px_xfer_result_t result) { px_exch_abort(x); }

static void none_fail(px_exch_t *x, px_xfer_result_t result) {
  /* connect errors and timeouts fail over like a 503 */
  if (retry_connect(x, result)) {
    schedule_retry(x);
    return;
  }
  px_exch_fail(x, result);
}

static const px_mode_t mode_none = {"none", NULL, data_drop, px_exch_finalize, none_fail,
                                    cut_drop, 1};

static void discard_fail(px_exch_t *x, px_xfer_result_t r) { schedule_retry(x); }

/* a retryable answer, the retry planned at the head */
static const px_mode_t mode_discard = {"discard", NULL,         data_drop, schedule_retry,
                                       discard_fail, cut_drop, 1};

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
  if (x->tr_start && !x->tr_end) x->tr_end = uv_hrtime();
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
  arm_eject_timer(x->w->loop, d);
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
static void schedule_retry(px_exch_t *x) {
  if (x->next_target != x->target) {
    x->target = x->next_target;
    x->attempt = 0;
  }
  x->mode = &mode_none;
  if (!x->timer_init) {
    uv_timer_init(x->w->loop, &x->timer);
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

/* on_headers refuses the transfer: the transfer core frees it without
 * on_done, so the exchange lets go of it and ends here. */
static int headers_failed(px_exch_t *x) {
  x->xfer = NULL;
  attempt_end(x);
  x->error_type = "client_write";
  px_exch_finalize(x);
  return -1;
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
      px_copy_cut(x->content_type, sizeof(x->content_type), h[i].value, PX_STR(""));
    else if (h[i].name.len == 16 && strncasecmp(h[i].name.ptr, "content-encoding", 16) == 0 &&
             h[i].value.len > 0 &&
             !(h[i].value.len == 8 && strncasecmp(h[i].value.ptr, "identity", 8) == 0))
      px_copy_cut(encoding, elen, h[i].value, PX_STR(""));
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
  px_exch_t *x = px_exch_get((px_exch_ref_t)arg);
  if (x == NULL) return -1;
  x->up_status = status;
  x->tr_status = status;
  x->bad_msg[0] = 0;
  char encoding[48] = "";
  read_head(x, h, n, encoding, sizeof(encoding));
  attempt_health(x, !retryable_status(status) && status < 500,
                 status == 429 ? "http_429" : "http_5xx");
  if (retryable_status(status) && retry_planned(x, status, h, n)) {
    x->mode = &mode_discard;
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
  px_exch_t *x = px_exch_get((px_exch_ref_t)arg);
  if (x == NULL || x->conn == NULL) return -1;
  return x->mode->on_data(x, p, n);
}

/* A connect error or timeout before any head fails over like a 503: 1 when
 * a retry is planned. */
static int retry_connect(px_exch_t *x, px_xfer_result_t r) {
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
  px_exch_finalize(x);
}

static void up_on_done(void *arg, px_xfer_result_t result, const char *errmsg) {
  px_exch_t *x = px_exch_get((px_exch_ref_t)arg);
  if (x == NULL) return;
  x->xfer = NULL;
  if (result != PX_XFER_OK) {
    if (x->conn != NULL) attempt_health(x, 0, result_name(result));
    x->tr_failed = 1;
    x->tr_result = result;
  }
  attempt_end(x);
  if (x->paused) {
    x->paused = 0;
    px_metrics_gauge_add(PX_G_PAUSED_STREAMS, -1);
  }
  if (x->conn == NULL) {
    px_exch_finalize(x);
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
  x->mode = &mode_none;
  px_copy_cut(x->label, sizeof(x->label), px_str(x->up->name), PX_STR("/")); /* "%s/%s" */
  size_t ll = strlen(x->label);
  px_copy_cut(x->label + ll, sizeof(x->label) - ll, px_str(x->up_model), PX_STR(""));
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
      .headers_checked = 1, /* build_upstream_headers checks every line */
      .trace_line = x->tr_hdr ? x->tr_line : NULL,
      .body = x->up_body,
      .body_len = x->up_body_len,
      .body_parts = x->up_parts,
      .body_nparts = x->up_nparts,
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
  px_exch_trace_attempt(x); /* before the start: it writes the traceparent */
  x->xfer = px_xfer_start(x->w->uclient, &o, &xfer_cbs, px_exch_arg(x));
  if (x->xfer == NULL) {
    x->tr_failed = 1;
    x->tr_result = PX_XFER_EOTHER;
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
