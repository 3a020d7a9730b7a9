/* trace_export.c - sends this worker's span batch (SPEC section 15; the
 * spans are the exchange's, exchange.c) to the [trace] endpoint over the
 * upstream transfer interface, so it never blocks
 * the loop: one export in flight at a time; while it runs, spans gather in
 * the next batch (bounded in trace.c: what does not fit is dropped). A batch
 * leaves when it is large or at the next tick (every second): spans leave
 * within a few seconds of ending. An export unanswered in 10 s is cancelled
 * and its spans counted as dropped, as are those a collector refuses or
 * cannot be reached for: a collector that is down or slow costs spans,
 * never a request.
 *
 *   tick / batch ready --> take batch --> POST (10 s) --> 2xx: exported
 *                                                    \--> else: dropped
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/proxy.h"
#include "proxai/trace.h"
#include "proxai/upstream.h"
#include "proxai/worker.h"

#define TICK_MS 1000
#define EXPORT_TIMEOUT_MS 10000

typedef struct exporter {
  px_worker_t *w;
  uv_timer_t tick;
  uv_timer_t deadline;
  uv_idle_t kick; /* a ready batch goes out on the next loop turn */
  int started;
  px_xfer_t *xfer;
  px_config_t *cfg; /* the configuration the export's URL and headers are from */
  char **hdrs;      /* "Name: value" lines of the export in flight */
  px_buf_t body;    /* the batch in flight */
  size_t nspans;
  int status;
  int warned; /* the collector's failures are logged once until it answers */
} exporter_t;

static exporter_t ex;
/* a draining worker: called once the last batch is out (or lost) */
static void (*drain_cb)(void *arg);
static void *drain_arg;

static void send_batch(void);
static void on_ready(void);
static void drain_step(void);

static void export_end(const char *drop_reason) {
  if (drop_reason)
    px_trace_dropped(ex.nspans, drop_reason);
  else
    px_metrics_trace_spans(NULL, ex.nspans);
  ex.nspans = 0;
  ex.xfer = NULL;
  free(ex.hdrs);
  ex.hdrs = NULL;
  px_config_unref(ex.cfg);
  ex.cfg = NULL;
  uv_timer_stop(&ex.deadline);
}

static void warn_once(const char *what) {
  if (ex.warned) return;
  ex.warned = 1;
  px_log_warn("trace export to %s failed (%s): spans are dropped until it answers",
              ex.cfg && ex.cfg->trace.endpoint ? ex.cfg->trace.endpoint : "?", what);
}

static int on_headers(void *arg, int status, const px_hdr_t *h, size_t n) {
  (void)arg, (void)h, (void)n;
  ex.status = status;
  return 0;
}

static int on_data(void *arg, const char *p, size_t n) {
  (void)arg, (void)p, (void)n;
  return 0; /* the collector's answer (partial success details) is not read */
}

static void on_done(void *arg, px_xfer_result_t r, const char *errmsg) {
  (void)arg, (void)errmsg;
  int ok = r == PX_XFER_OK && ex.status >= 200 && ex.status < 300;
  if (!ok) {
    char what[48];
    if (r == PX_XFER_OK)
      snprintf(what, sizeof(what), "HTTP %d", ex.status);
    else
      snprintf(what, sizeof(what), "transfer error %d", (int)r);
    warn_once(what);
  } else {
    ex.warned = 0;
  }
  export_end(ok ? NULL : "export_failed");
  /* a batch that filled meanwhile goes now; after a failure, at the tick
   * (a collector that is down is not asked once per request) */
  if (ok && px_trace_ready()) on_ready();
  drain_step();
}

static void on_deadline(uv_timer_t *t) {
  (void)t;
  if (ex.xfer == NULL) return;
  px_xfer_cancel(ex.xfer);
  warn_once("no answer in 10 s");
  export_end("export_timeout");
  drain_step();
}

static const px_xfer_cbs_t cbs = {on_headers, on_data, on_done};

/* The export's header lines: the content type and the configured ones. */
static char **export_headers(const px_trace_conf_t *tc) {
  char **h = calloc(tc->nheaders + 2, sizeof(char *));
  if (h == NULL) return NULL;
  h[0] = (char *)"Content-Type: application/json";
  for (size_t i = 0; i < tc->nheaders; i++) h[i + 1] = tc->headers[i];
  return h;
}

static void send_batch(void) {
  uv_idle_stop(&ex.kick);
  px_trace_clock();
  if (ex.xfer != NULL || px_trace_pending() == 0 || ex.w->uclient == NULL) return;
  px_config_t *cfg = ex.w->config;
  ex.nspans = px_trace_take(&ex.body);
  if (ex.nspans == 0) return;
  if (cfg->trace.endpoint == NULL) { /* tracing was turned off by a reload */
    px_trace_dropped(ex.nspans, "export_failed");
    ex.nspans = 0;
    return;
  }
  ex.cfg = px_config_ref(cfg);
  ex.hdrs = export_headers(&cfg->trace);
  ex.status = 0;
  px_xfer_opts_t o = {
      .method = "POST",
      .url = cfg->trace.endpoint,
      .headers = (const char *const *)ex.hdrs,
      .body = ex.body.data,
      .body_len = ex.body.len,
      /* the deadline below decides; these only back it up */
      .connect_timeout_ms = EXPORT_TIMEOUT_MS + 1000,
      .first_byte_timeout_ms = EXPORT_TIMEOUT_MS + 1000,
      .idle_timeout_ms = EXPORT_TIMEOUT_MS + 1000,
      .pool = "proxai-trace-export",
      .max_connections = 1,
  };
  ex.xfer = ex.hdrs ? px_xfer_start(ex.w->uclient, &o, &cbs, NULL) : NULL;
  if (ex.xfer == NULL) {
    warn_once("cannot start the request");
    export_end("export_failed");
    return;
  }
  uv_timer_start(&ex.deadline, on_deadline, EXPORT_TIMEOUT_MS, 0);
}

static void on_tick(uv_timer_t *t) {
  (void)t;
  send_batch();
}

static void on_kick(uv_idle_t *h) {
  (void)h;
  send_batch();
}

static void on_ready(void) {
  if (!uv_is_active((uv_handle_t *)&ex.kick)) uv_idle_start(&ex.kick, on_kick);
}

void px_trace_export_start(px_worker_t *w) {
  ex.w = w;
  px_trace_clock();
  px_buf_init(&ex.body, 0);
  uv_timer_init(w->loop, &ex.tick);
  uv_timer_init(w->loop, &ex.deadline);
  uv_idle_init(w->loop, &ex.kick);
  /* none of the three keeps a draining worker alive */
  uv_unref((uv_handle_t *)&ex.tick);
  uv_unref((uv_handle_t *)&ex.deadline);
  uv_unref((uv_handle_t *)&ex.kick);
  uv_timer_start(&ex.tick, on_tick, TICK_MS, TICK_MS);
  px_trace_on_ready(on_ready);
  ex.started = 1;
}

void px_trace_export_stop(void) {
  drain_cb = NULL;
  if (!ex.started) return;
  ex.started = 0;
  px_trace_on_ready(NULL);
  if (ex.xfer) {
    px_xfer_cancel(ex.xfer);
    export_end("export_failed");
  }
  px_trace_dropped(px_trace_pending(), "export_failed");
  px_trace_reset();
  uv_close((uv_handle_t *)&ex.tick, NULL);
  uv_close((uv_handle_t *)&ex.deadline, NULL);
  uv_close((uv_handle_t *)&ex.kick, NULL);
  px_buf_free(&ex.body);
}

/* Draining: what waits goes out in one last export (no tick needed), then
 * the exporter stops and drain_cb runs. */
static void drain_step(void) {
  if (drain_cb == NULL || ex.xfer != NULL) return;
  if (ex.started && px_trace_pending()) {
    send_batch();
    if (ex.xfer != NULL) return; /* on_done or the deadline comes back here */
  }
  void (*cb)(void *) = drain_cb;
  void *arg = drain_arg;
  px_trace_export_stop();
  cb(arg);
}

void px_trace_export_drain(void (*cb)(void *arg), void *arg) {
  drain_cb = cb;
  drain_arg = arg;
  drain_step();
}
