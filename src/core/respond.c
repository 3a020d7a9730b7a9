/* respond.c - the response modes: how one attempt's answer reaches the
 * client. Each mode is a table of handlers (px_mode_t); the core chooses one
 * when the upstream head arrives and only calls its handlers from then on.
 * It knows no protocol: bodies and events go through the translator and
 * the protocols' ops.
 *
 *   head -> retryable, a retry planned ......... discard (attempt.c)
 *        -> unusable (3xx, encoded, no body) .... bad: 502 at done
 *        -> 1xx / 4xx / 5xx ..................... error: collect, forward or
 *                                                 translate at done
 *        -> SSE, same protocol .................. pass_stream (passthru.c)
 *        -> SSE, other protocol ................. tr_stream (stream hub)
 *        -> JSON, same protocol, same model ..... pass_json: held (up to
 *                                                 PX_PASS_HOLD), else streamed
 *        -> JSON, same protocol, model rewritten  pass_rewrite: collect, rewrite
 *        -> JSON, other protocol ................ tr_json: collect, translate
 *        -> JSON, other protocol, count_tokens .. count: collect, re-encode
 */
#include "respond.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/json.h"
#include "proxai/log.h"
#include "proxai/metrics.h"
#include "proxai/scrub.h"
#include "stored.h"

/* a pass-through JSON answer up to this size is held and sent with our own
 * Content-Length once complete; a larger one goes on chunked as it arrives */
#define PX_PASS_HOLD (256u << 10)
/* the tail kept of a larger one, for the usage scan */
#define PX_USAGE_TAIL (64u << 10)

static const char *up_ctype(px_exch_t *x) {
  return x->content_type[0] ? x->content_type : "application/json";
}

/* empty, up to cap bytes (the memory it has is kept: a reused exchange's) */
static void acc_init(px_exch_t *x, size_t cap) {
  px_buf_reset(&x->acc);
  x->acc.cap = cap;
}

/* ---------------------------------------------------------------------- */
/* handlers shared by several modes                                          */

static int data_drop(px_exch_t *x, const char *p, size_t n) { return 0; }

static int data_collect(px_exch_t *x, const char *p, size_t n) {
  return px_buf_append(&x->acc, p, n) < 0 ? -1 : 0;
}

/* Backpressure of the streamed modes: a client whose queue is over the
 * high-water mark pauses the transfer (resumed on its drain). */
static int paused_by_client(px_exch_t *x) {
  if (px_conn_pending(x->conn) <= PX_WQ_HIGH) return 0;
  if (!x->paused) {
    x->paused = 1;
    px_metrics_gauge_add(PX_G_PAUSED_STREAMS, 1);
  }
  return 1;
}

/* A JSON body cut short cannot be repaired: drop the connection. */
static void cut_drop(px_exch_t *x, px_xfer_result_t result) { px_exch_abort(x); }

/* ---------------------------------------------------------------------- */
/* bad: an answer the gateway cannot pass on or read                         */

static int bad_head(px_exch_t *x) {
  x->error_type = "bad_gateway";
  return 0;
}

static void bad_done(px_exch_t *x) { px_exch_error(x, PX_ERR_BAD_GATEWAY, x->bad_msg, NULL); }

static void bad_fail(px_exch_t *x, px_xfer_result_t r) {
  x->error_type = "bad_gateway";
  bad_done(x);
}

static const px_mode_t mode_bad = {"bad", bad_head, data_drop, bad_done, bad_fail, cut_drop, 0};

/* ---------------------------------------------------------------------- */
/* error: the upstream's error body                                          */

static int error_head(px_exch_t *x) {
  x->acc_trunc = 0;
  acc_init(x, PX_MAX_UPSTREAM_ERROR);
  return 0;
}

static int error_data(px_exch_t *x, const char *p, size_t n) {
  /* capped: the rest of a huge error is dropped, its start kept */
  if (!x->acc_trunc && px_buf_append(&x->acc, p, n) < 0) {
    size_t room = x->acc.cap - x->acc.len;
    px_buf_append(&x->acc, p, room < n ? room : n);
    x->acc_trunc = 1;
  }
  return 0;
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
  px_exch_error_h(x, px_errkind_from_type(NULL, st), st, msg, NULL, NULL, 0);
}

static void error_done(px_exch_t *x) {
  /* whatever of it reaches the client holds no configured secret (SPEC 10) */
  px_scrub(x->acc.data, x->acc.len);
  if (x->acc_trunc) {
    send_truncated_error(x);
    return;
  }
  /* a large error body is read only when its document fits the memory
   * bound of its size (SPEC 10); else it is no error body of any protocol */
  if (x->acc.len > 4 * PX_TR_EVENT_SCAN &&
      !px_translate_answer_fits(x->acc.data, x->acc.len))
    x->acc.len = 0;
  px_upstream_err_t ue;
  const px_proto_ops_t *uops = px_proto_get(x->out);
  if (x->in == x->out && x->ep == PX_EP_GENERATE && uops->decode_error &&
      uops->decode_error(x->up_status, x->acc.data ? x->acc.data : "", x->acc.len, &ue) ==
          0) {
    /* same protocol and a proper error body: forwarded as it is */
    x->error_type = "upstream_error";
    if (px_exch_respond(x, x->up_status, up_ctype(x), 0, (int64_t)x->acc.len) == 0)
      px_exch_write(x, x->acc.data, x->acc.len);
    px_exch_finalize(x);
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
  if (px_exch_respond(x, st, "application/json", 0, (int64_t)b.len) == 0)
    px_exch_write(x, b.data, b.len);
  px_buf_free(&b);
  px_exch_finalize(x);
}

static const px_mode_t mode_error = {"error", error_head, error_data, error_done,
                                     px_exch_fail, cut_drop, 0};

/* ---------------------------------------------------------------------- */
/* pass_json: same protocol and model, held or streamed                      */

static int pass_json_head(px_exch_t *x) {
  /* held until complete (or PX_PASS_HOLD): framed by us, and a broken
   * upstream body still gets a 502 in shape (SPEC 10) */
  acc_init(x, PX_PASS_HOLD);
  return 0;
}

static int pass_json_data(px_exch_t *x, const char *p, size_t n) {
  if (!x->started) {
    if (px_buf_append(&x->acc, p, n) == 0) return 0;
    /* too large to hold: our chunked framing from here on */
    if (px_exch_respond(x, x->up_status, up_ctype(x), 0, -1) < 0) return -1;
    px_exch_write(x, x->acc.data, x->acc.len);
    if (x->acc.len > PX_USAGE_TAIL) px_buf_consume(&x->acc, x->acc.len - PX_USAGE_TAIL);
  }
  if (paused_by_client(x)) return PX_XFER_PAUSE;
  /* keep the tail: every protocol puts usage at the end of the body */
  if (n >= PX_USAGE_TAIL) {
    px_buf_reset(&x->acc);
    px_buf_append(&x->acc, p + n - PX_USAGE_TAIL, PX_USAGE_TAIL);
  } else {
    if (x->acc.len + n > PX_USAGE_TAIL) px_buf_consume(&x->acc, x->acc.len + n - PX_USAGE_TAIL);
    px_buf_append(&x->acc, p, n);
  }
  px_exch_write(x, p, n);
  return 0;
}

static void pass_json_done(px_exch_t *x) {
  if (!x->started) { /* held whole: sent with our own Content-Length */
    size_t tail;     /* where usage starts: a trace's reading of the answer stops there */
    px_usage_scan_at(x->out, x->acc.data ? x->acc.data : "", x->acc.len, &x->usage,
                     &tail);
    px_exch_trace_answer(x, x->acc.data, x->acc.len, tail, NULL, 0);
    if (px_exch_respond(x, x->up_status, up_ctype(x), 0, (int64_t)x->acc.len) == 0)
      px_exch_write(x, x->acc.data, x->acc.len);
  } else {
    /* usage from the last 64 KiB of the body: found back from its end */
    if (x->acc.data != NULL) px_usage_tail(x->out, x->acc.data, x->acc.len, &x->usage);
    px_exch_trace_answer(x, x->acc.data, x->acc.len, PX_JSON_NPOS, NULL,
                         0); /* its tail's */
  }
  px_exch_finalize(x);
}

static const px_mode_t mode_pass_json = {"pass_json", pass_json_head, pass_json_data,
                                         pass_json_done, px_exch_fail, cut_drop, 0};

/* ---------------------------------------------------------------------- */
/* pass_rewrite: same protocol, the client's model written back              */

static int collect_head(px_exch_t *x) {
  acc_init(x, PX_MAX_UPSTREAM_JSON);
  return 0;
}

static void pass_rewrite_done(px_exch_t *x) {
  const char *key = px_exch_client_ops(x)->watch.body_model;
  const char *const top[] = {key ? key : "model"};
  px_buf_t b;
  px_buf_init(&b, PX_MAX_UPSTREAM_JSON + 4096);
  px_json_replace_str(&b, x->acc.data, x->acc.len, top, 1, x->model);
  px_usage_scan(x->out, b.data, b.len, &x->usage);
  px_exch_trace_answer(x, x->acc.data, x->acc.len, PX_JSON_NPOS, NULL,
                       0); /* its model written back */
  if (px_exch_respond(x, x->up_status, up_ctype(x), 0, (int64_t)b.len) == 0)
    px_exch_write(x, b.data, b.len);
  px_buf_free(&b);
  px_exch_finalize(x);
}

static const px_mode_t mode_pass_rewrite = {"pass_rewrite", collect_head, data_collect,
                                            pass_rewrite_done, px_exch_fail, cut_drop, 0};

/* ---------------------------------------------------------------------- */
/* tr_json: another protocol's JSON answer, translated                       */

/* The translated body, answered and the exchange finished. */
static void tr_json_answer(px_exch_t *x, const char *p, size_t n) {
  px_exch_trace_answer(x, x->acc.data, x->acc.len, PX_JSON_NPOS, p, n);
  if (px_stored_json(x, p, n)) return; /* answered once the turn is kept */
  if (px_exch_respond(x, 200, "application/json", 0, (int64_t)n) == 0) px_exch_write(x, p, n);
  px_exch_finalize(x);
}

/* An answer the codecs refuse to translate: a bad gateway (or the kind the
 * codec names), in the client's shape. */
static void tr_json_refused(px_exch_t *x, const px_tr_err_t *err) {
  char msg[300];
  snprintf(msg, sizeof(msg), "upstream response cannot be translated: %s", err->message);
  px_exch_error(x, err->kind == PX_ERR_INVALID ? PX_ERR_BAD_GATEWAY : err->kind, msg, NULL);
}

static void tr_json_done(px_exch_t *x) {
  if (x->tr.sampled) { /* the decoder's id, model and finish; the encoder's */
    x->ctx.answer = &x->ans_up;
    x->ctx.client = &x->ans_cl;
  }
  px_buf_t fb; /* no document at all (translate_fast.c) */
  px_buf_init(&fb, x->acc.len * 4 + (64u << 10));
  px_tr_err_t err;
  memset(&err, 0, sizeof(err));
  int fr = px_translate_response_body(&x->ctx, x->acc.data, x->acc.len, &fb, &x->lossy,
                                      &x->usage, &err);
  if (fr == 0 || fr == PX_FAST_USAGE) {
    if (fr == PX_FAST_USAGE) px_usage_scan(x->out, x->acc.data, x->acc.len, &x->usage);
    tr_json_answer(x, fb.data, fb.len);
    px_buf_free(&fb);
    return;
  }
  px_buf_free(&fb);
  /* the tokens were spent all the same */
  px_usage_scan(x->out, x->acc.data, x->acc.len, &x->usage);
  if (err.kind == PX_ERR_BAD_GATEWAY) x->error_type = "bad_gateway";
  tr_json_refused(x, &err);
}

static const px_mode_t mode_tr_json = {"tr_json", collect_head, data_collect, tr_json_done,
                                       px_exch_fail, cut_drop, 0};

/* ---------------------------------------------------------------------- */
/* count: another protocol's token count, in the client's shape              */

static void count_done(px_exch_t *x) {
  json_t *ub = px_translate_answer_fits(x->acc.data ? x->acc.data : "", x->acc.len)
                   ? px_jdoc_load(x->acc.data, x->acc.len, 0, NULL)
                   : NULL;
  int64_t n = px_proto_get(x->out)->count_decode(ub);
  json_decref(ub);
  if (n < 0) {
    px_exch_error(x, PX_ERR_BAD_GATEWAY, "bad gateway: upstream token count is not understood",
                  NULL);
    return;
  }
  px_buf_t b;
  px_buf_init(&b, 256);
  px_exch_client_ops(x)->count_encode(&b, n);
  if (px_exch_respond(x, 200, "application/json", 0, (int64_t)b.len) == 0)
    px_exch_write(x, b.data, b.len);
  px_buf_free(&b);
  px_exch_finalize(x);
}

static const px_mode_t mode_count = {"count", collect_head, data_collect, count_done,
                                     px_exch_fail, cut_drop, 0};

/* ---------------------------------------------------------------------- */
/* pass_stream: same protocol SSE, through the watcher                       */

static int stream_head(px_exch_t *x) {
  x->streaming_gauge = 1;
  px_metrics_gauge_add(PX_G_ACTIVE_STREAMS, 1);
  return 0;
}

static int pass_stream_head(px_exch_t *x) {
  stream_head(x);
  const char *rw = strcmp(x->up_model, x->model) != 0 ? x->model : NULL;
  px_passthru_init(&x->pt, x->in, rw);
  /* upreq.c asked an opt-in upstream for usage (pass_body) */
  x->pt.strip_usage = px_exch_client_ops(x)->stream_usage_opt_in && !x->include_usage;
  x->pt_init = 1;
  px_exch_trace_stream(x);
  return px_exch_respond(x, 200, "text/event-stream", 1, -1);
}

static int pass_stream_data(px_exch_t *x, const char *p, size_t n) {
  if (paused_by_client(x)) return PX_XFER_PAUSE;
  int rc = px_passthru_feed(&x->pt, p, n, &x->obuf);
  px_exch_write(x, x->obuf.data, x->obuf.len);
  px_buf_reset(&x->obuf);
  if (rc < 0) {
    /* an event over the cap: the stream ends in error (pass_stream_cut) */
    x->error_type = "upstream_protocol";
    return -1;
  }
  return 0;
}

/* End a pass-through stream that did not end properly with the client
 * protocol's error event (the watcher keeps the client at an event
 * boundary, so the event stands on its own). */
static void pass_stream_error(px_exch_t *x, px_errkind_t kind, const char *msg) {
  const px_proto_ops_t *ops = px_exch_client_ops(x);
  px_buf_reset(&x->obuf);
  if (ops->encode_stream_error) ops->encode_stream_error(&x->obuf, kind, msg);
  px_exch_write(x, x->obuf.data, x->obuf.len);
  px_buf_reset(&x->obuf);
}

static void pass_stream_done(px_exch_t *x) {
  if (!px_passthru_finish(&x->pt)) {
    pass_stream_error(x, PX_ERR_BAD_GATEWAY, "upstream stream ended before its terminal event");
    x->error_type = "truncated_stream";
    x->metric_status = 502;
  }
  px_exch_finalize(x);
}

static void pass_stream_cut(px_exch_t *x, px_xfer_result_t result) {
  if (x->pt.failed) /* an event over the cap */
    pass_stream_error(x, PX_ERR_BAD_GATEWAY,
                      "bad gateway: upstream stream event over the size limit");
  else if (!px_passthru_finish(&x->pt))
    pass_stream_error(x, px_exch_result_kind(result), "upstream stream failed");
}

static const px_mode_t mode_pass_stream = {"pass_stream",    pass_stream_head, pass_stream_data,
                                           pass_stream_done, px_exch_fail,      pass_stream_cut,
                                           0};

/* ---------------------------------------------------------------------- */
/* tr_stream: another protocol's SSE, through the stream hub                 */

/* An encoder writing much in one call hands it over as it goes. */
static void tr_stream_flush(void *arg) { px_exch_flush(arg); }

static int tr_stream_head(px_exch_t *x) {
  stream_head(x);
  x->ctx.flush = tr_stream_flush;
  x->ctx.flush_arg = x;
  x->str = px_stream_tr_new(&x->ctx, &x->obuf);
  if (x->str == NULL) return -1;
  px_exch_trace_stream(x);
  return px_exch_respond(x, 200, "text/event-stream", 1, -1);
}

static int tr_stream_data(px_exch_t *x, const char *p, size_t n) {
  if (paused_by_client(x)) return PX_XFER_PAUSE;
  int rc = px_stream_tr_feed(x->str, p, n);
  px_stored_stream(x); /* the terminal event waits for the turn's write */
  px_exch_flush(x);
  if (rc < 0) {
    x->error_type = "upstream_protocol";
    return -1;
  }
  return 0;
}

static void tr_stream_done(px_exch_t *x) {
  if (px_stream_tr_finish(x->str, 1, PX_ERR_BAD_GATEWAY,
                          "upstream stream ended before its terminal event") != 0) {
    x->error_type = "truncated_stream";
    x->metric_status = 502;
  }
  px_stored_stream(x);
  px_exch_flush(x);
  px_exch_finalize(x);
}

static void tr_stream_cut(px_exch_t *x, px_xfer_result_t result) {
  px_stream_tr_finish(x->str, 0, px_exch_result_kind(result), "upstream stream failed");
  px_exch_write(x, x->obuf.data, x->obuf.len);
  px_buf_reset(&x->obuf);
}

static const px_mode_t mode_tr_stream = {"tr_stream",    tr_stream_head, tr_stream_data,
                                         tr_stream_done, px_exch_fail,    tr_stream_cut,
                                         0};

/* ---------------------------------------------------------------------- */
/* the choice                                                                */

/* Why the gateway cannot pass this answer on or read it (into x->bad_msg):
 * the client sees neither a redirect nor bytes it cannot decode. */
static int unusable(px_exch_t *x, int status, const char *encoding, int sse) {
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
  else if (status >= 200 && status < 300 && x->stream && !sse) {
    const char *ct = x->content_type[0] ? x->content_type : "(none)";
    snprintf(x->bad_msg, sizeof(x->bad_msg),
             "bad gateway: upstream '%s' answered a streaming request with Content-Type "
             "'%.*s'",
             x->up->name, px_utf8_cut(ct, strlen(ct), 60), ct);
  }
  return x->bad_msg[0] != 0;
}

const px_mode_t *px_mode_choose(px_exch_t *x, int status, const char *encoding) {
  int sse = strncasecmp(x->content_type, "text/event-stream", 17) == 0;
  if (unusable(x, status, encoding, sse)) return &mode_bad;
  if (status >= 400 || status < 200) return &mode_error;
  /* same protocol: the gateway endpoints, and count_tokens forwarded as is */
  int same = x->in == x->out;
  if (sse && x->stream) return same ? &mode_pass_stream : &mode_tr_stream;
  if (same) return strcmp(x->up_model, x->model) != 0 ? &mode_pass_rewrite : &mode_pass_json;
  return x->ep == PX_EP_COUNT_TOKENS ? &mode_count : &mode_tr_json;
}
