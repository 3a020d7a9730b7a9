/* translate.c - the translation hub: error translation, the stream hub
 * (upstream decoder -> event rules -> client encoder) and the memory bound
 * of an answer's document; requests and non-streaming answers go through
 * the codecs in translate_fast.c. No I/O. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/json.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/scrub.h"
#include "proxai/sse.h"
#include "proxai/usage.h"

/* config names from the X-macro (a table entry may not be filled in yet) */
static const char *const proto_names[] = {
#define XX(e, name, inpath, uppath, sym) name,
    PX_PROTO_MAP(XX)
#undef XX
};

static int bad_proto(const px_tr_ctx_t *ctx) {
  return (unsigned)ctx->in >= PX_PROTO_COUNT || (unsigned)ctx->out >= PX_PROTO_COUNT;
}

int px_translate_answer_fits(const char *p, size_t n) {
  if (n <= PX_TR_EVENT_SCAN) return 1; /* small whatever its shape: no scan */
  px_json_req_t scan;
  if (px_json_request(p, n, &scan) < 0) return 0;
  /* three documents of its size at once within PX_TR_MEM_FACTOR times it */
  return (long long)scan.cost * 3 <= (long long)n * PX_TR_MEM_FACTOR + PX_TR_MEM_BASE;
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/* Copy s into out (NUL-terminated, at most cap-1 bytes) keeping only valid
 * UTF-8 and no control characters: error texts may quote upstream bytes,
 * and JSON encoders reject invalid UTF-8. */
static void clean_text(char *out, size_t cap, const char *s, size_t n) {
  size_t o = 0;
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < n && o + 4 < cap;) {
    unsigned c = p[i];
    size_t len = px_utf8_seq(p + i, n - i);
    if (len == 0) {
      out[o++] = '?';
      i++;
      continue;
    }
    if (len == 1 && c < 0x20) {
      out[o++] = ' ';
    } else {
      memcpy(out + o, s + i, len);
      o += len;
    }
    i += len;
  }
  out[o] = 0;
}

int px_translate_error(const px_tr_ctx_t *ctx, int status, const char *body, size_t len,
                       const char *request_id, px_buf_t *out, int *client_status) {
  if (bad_proto(ctx)) return PX_EINVAL;
  const px_proto_ops_t *in = px_proto_get(ctx->in);
  px_upstream_err_t ue;
  int found = 0;
  /* the upstream's own protocol first, then the others (a gateway or a
   * compatible server may answer in another family's shape) */
  for (int k = 0; k < PX_PROTO_COUNT && !found; k++) {
    px_proto_t p = k == 0 ? ctx->out : (px_proto_t)(k <= (int)ctx->out ? k - 1 : k);
    const px_proto_ops_t *ops = px_proto_get(p);
    if (ops->decode_error == NULL) continue;
    memset(&ue, 0, sizeof(ue));
    if (ops->decode_error(status, body ? body : "", body ? len : 0, &ue) == 0) found = 1;
  }
  int st = status;
  if (found && (ue.kind == PX_ERR_INVALID || ue.kind == PX_ERR_API)) {
    /* a generic type under a specific status: the status says more (OpenAI
     * answers a bad key with 401 + invalid_request_error) */
    px_errkind_t k = px_errkind_from_type(NULL, status);
    if (k != PX_ERR_INVALID && k != PX_ERR_API) ue.kind = k;
  }
  if (!found) {
    /* not an error body of any protocol (HTML from a load balancer, plain
     * text, empty): a bad gateway response (SPEC 6), whatever the status */
    memset(&ue, 0, sizeof(ue));
    st = 502;
    ue.kind = PX_ERR_BAD_GATEWAY;
    snprintf(ue.message, sizeof(ue.message),
             "upstream returned HTTP %d with a body that is not a %s error", status,
             proto_names[ctx->out]);
  } else if (status < 400 || status > 599 || in->error_status_of_kind) {
    st = px_errkind_status(ue.kind);
  }
  if (in->encode_error == NULL) return PX_EINVAL;
  char msg[sizeof(ue.message)];
  clean_text(msg, sizeof(msg), ue.message, strnlen(ue.message, sizeof(ue.message)));
  /* always the client family's canonical spelling of the kind (SPEC 6
   * table), so clients see one vocabulary whatever the upstream */
  const char *type = in->error_type(ue.kind);
  int rc = in->encode_error(out, ue.kind, type, msg, NULL, request_id);
  if (rc < 0) return rc;
  if (client_status) *client_status = st;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Streams                                                                   */

struct px_stream_tr {
  px_tr_ctx_t ctx;
  const px_proto_ops_t *in, *out;
  px_buf_t *buf;
  px_sse_t sse;
  px_sdec_t *dec;
  px_senc_t *enc;
  int done;            /* terminal written (normal stop or error) */
  int failed;          /* the terminal was an error event */
  int started;         /* MESSAGE_START passed */
  int stopped;         /* a MESSAGE_DELTA with a stop reason passed */
  int deltas;          /* MESSAGE_DELTAs passed */
  int nblocks;         /* blocks started */
  unsigned char *open; /* per block index: 0 closed, else 1 + px_block_t */
  int open_cap;
  int nopen;
  px_usage_t usage;
  px_lossy_t dropped;
  px_answer_t *answer; /* NULL, or the upstream answer's id, model, finish
                        * (from the decoder's MESSAGE_START and _DELTA) */
  px_answer_t *client; /* NULL, or the same as the client gets them (traces) */
};

#define PX_MAX_BLOCKS 65536

/* The one place a stream ends in error (rule in proto.h): the client
 * encoder is offered PX_EV_ERROR first, so that a stateful encoder can end
 * its stream properly (Responses: response.failed carrying the output so
 * far); when it declines (<0 or no bytes), encode_stream_error writes the
 * protocol's stateless error event. Exactly once. */
static int write_error(px_stream_tr_t *t, px_errkind_t kind, const char *msg) {
  if (t->done) return t->failed ? PX_EPROTO : 0;
  t->done = 1;
  t->failed = 1;
  char clean[1024];
  clean_text(clean, sizeof(clean), msg ? msg : "", msg ? strlen(msg) : 0);
  msg = clean[0] ? clean : "upstream stream failed";
  if (t->enc != NULL) {
    px_ev_t e;
    px_ev_init(&e, PX_EV_ERROR);
    e.errkind = kind;
    e.text = px_str(msg);
    size_t before = t->buf->len;
    int rc = t->in->senc_event(t->enc, &e);
    if (rc == 0 && t->buf->len > before) return PX_EPROTO;
    t->buf->len = before; /* drop a partial attempt */
  }
  if (t->in->encode_stream_error != NULL) t->in->encode_stream_error(t->buf, kind, msg);
  return PX_EPROTO;
}

/* Traces: the client's answer (id, model, finish reason), when its encoder
 * does not note it (px_answer_t.noted), read from the events it just wrote for a MESSAGE_* event, buf[from, len): the
 * few events that carry them, not the whole stream parsed again. The
 * encoders write complete events, an optional `event:` line and one
 * `data:` line each. */
static void client_answer(px_stream_tr_t *t, size_t from) {
  if (t->buf->len <= from) return; /* handed over meanwhile: not read */
  const char *p = t->buf->data + from, *end = t->buf->data + t->buf->len;
  px_str_t name = {NULL, 0};
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL) return;
    size_t n = (size_t)(nl - p);
    if (n > 7 && memcmp(p, "event: ", 7) == 0) {
      name = (px_str_t){p + 7, n - 7};
    } else if (n > 6 && memcmp(p, "data: ", 6) == 0) {
      px_answer_event(&t->in->watch, name, p + 6, n - 6, t->client);
      name = (px_str_t){NULL, 0};
    }
    p = nl + 1;
  }
}

static int enc(px_stream_tr_t *t, const px_ev_t *ev) {
  size_t from = t->buf->len;
  int rc = t->in->senc_event(t->enc, ev);
  if (t->client && !t->client->noted && rc >= 0 &&
      (ev->type == PX_EV_MESSAGE_START || ev->type == PX_EV_MESSAGE_DELTA ||
       ev->type == PX_EV_MESSAGE_STOP))
    client_answer(t, from);
  if (rc < 0)
    return write_error(t, rc == PX_ETOOBIG ? PX_ERR_BAD_GATEWAY : PX_ERR_API,
                       rc == PX_ETOOBIG ? "stream translation exceeded its buffer limit"
                                        : "stream translation failed");
  return 0;
}

/* which delta kinds a block may carry */
static int delta_fits(px_block_t b, px_delta_t d) {
  switch (b) {
    case PX_BLOCK_TEXT:
      return d == PX_DELTA_TEXT || d == PX_DELTA_ANNOTATION;
    case PX_BLOCK_REFUSAL:
      return d == PX_DELTA_REFUSAL;
    case PX_BLOCK_THINKING:
      return d == PX_DELTA_THINKING || d == PX_DELTA_SIGNATURE;
    case PX_BLOCK_REDACTED_THINKING:
      return d == PX_DELTA_SIGNATURE;
    case PX_BLOCK_TOOL_CALL:
      return d == PX_DELTA_TOOL_ARGS;
  }
  return 0;
}

static int is_open(px_stream_tr_t *t, int i) {
  return i >= 0 && i < t->nblocks && t->open[i];
}

static int close_all(px_stream_tr_t *t) {
  for (int i = 0; i < t->nblocks && t->nopen > 0; i++) {
    if (!t->open[i]) continue;
    px_ev_t e;
    px_ev_init(&e, PX_EV_BLOCK_STOP);
    e.index = i;
    t->open[i] = 0;
    t->nopen--;
    int rc = enc(t, &e);
    if (rc < 0) return rc;
  }
  return 0;
}

static int illegal(px_stream_tr_t *t, const char *what) {
  char msg[160];
  snprintf(msg, sizeof(msg), "upstream stream protocol error: %s", what);
  return write_error(t, PX_ERR_BAD_GATEWAY, msg);
}

/* The decoder's sink: validate the order, then encode. */
static int on_event(void *arg, const px_ev_t *ev) {
  px_stream_tr_t *t = arg;
  if (t->done) return t->failed ? PX_EPROTO : 0;
  switch (ev->type) {
    case PX_EV_MESSAGE_START:
      if (t->started) return illegal(t, "second message start");
      t->started = 1;
      px_usage_merge(&t->usage, &ev->usage);
      if (t->answer) px_answer_set(t->answer, ev->id, ev->model, PX_STR_NULL);
      return enc(t, ev);
    case PX_EV_BLOCK_START:
      if (!t->started) return illegal(t, "content before message start");
      if (t->deltas) return illegal(t, "content block after the stop reason");
      if (ev->index != t->nblocks) return illegal(t, "content block index out of order");
      if (t->nblocks >= PX_MAX_BLOCKS) return illegal(t, "too many content blocks");
      if (t->nblocks >= t->open_cap) {
        int nc = t->open_cap ? t->open_cap * 2 : 16;
        unsigned char *o = realloc(t->open, (size_t)nc);
        if (o == NULL) return write_error(t, PX_ERR_API, "out of memory");
        memset(o + t->open_cap, 0, (size_t)(nc - t->open_cap));
        t->open = o;
        t->open_cap = nc;
      }
      if ((unsigned)ev->block > PX_BLOCK_TOOL_CALL)
        return illegal(t, "unknown block type");
      if (ev->block == PX_BLOCK_TOOL_CALL && ev->name.len == 0)
        return illegal(t, "tool call without a name");
      t->open[t->nblocks++] = (unsigned char)(1 + ev->block);
      t->nopen++;
      return enc(t, ev);
    case PX_EV_DELTA:
      if (!is_open(t, ev->index)) return illegal(t, "delta for a block that is not open");
      if (!delta_fits((px_block_t)(t->open[ev->index] - 1), ev->delta))
        return illegal(t, "delta of the wrong kind for its block");
      return enc(t, ev);
    case PX_EV_BLOCK_STOP:
      if (!is_open(t, ev->index)) return illegal(t, "stop for a block that is not open");
      t->open[ev->index] = 0;
      t->nopen--;
      return enc(t, ev);
    case PX_EV_MESSAGE_DELTA: {
      if (!t->started) return illegal(t, "stop reason before message start");
      int rc = close_all(t);
      if (rc < 0) return rc;
      t->deltas++;
      if (ev->stop != PX_STOP_NONE) t->stopped = 1;
      px_usage_merge(&t->usage, &ev->usage);
      /* traces: the upstream's answer as its decoder read it */
      if (t->answer) px_answer_set(t->answer, PX_STR_NULL, PX_STR_NULL, ev->finish);
      return enc(t, ev);
    }
    case PX_EV_MESSAGE_STOP: {
      if (!t->started) return illegal(t, "message stop before message start");
      if (!t->stopped) return illegal(t, "message stop without a stop reason");
      int rc = close_all(t);
      if (rc < 0) return rc;
      rc = enc(t, ev);
      if (rc < 0) return rc;
      t->done = 1;
      return 0;
    }
    case PX_EV_ERROR: {
      /* an upstream's text: cut at a character, no configured secret */
      char msg[1024];
      size_t n = ev->text.ptr ? (size_t)px_utf8_cut(ev->text.ptr, ev->text.len, 1000) : 0;
      if (n) memcpy(msg, ev->text.ptr, n);
      msg[n] = 0;
      px_scrub(msg, n);
      return write_error(t, ev->errkind, msg);
    }
  }
  return illegal(t, "unknown event");
}

/* The SSE parser's callback: one upstream event to the decoder. */
static int on_sse(void *arg, const px_sse_event_t *ev) {
  px_stream_tr_t *t = arg;
  if (t->done) return 0; /* trailing bytes after the terminal: ignored */
  if (!px_translate_answer_fits(ev->data.ptr, ev->data.len))
    return write_error(t, PX_ERR_BAD_GATEWAY,
                       "upstream stream event is not JSON or too complex to translate "
                       "within the memory bound of its size");
  int rc = t->out->sdec_feed(t->dec, ev);
  if (rc < 0 && !t->done)
    return write_error(t, PX_ERR_BAD_GATEWAY, "upstream sent a malformed stream event");
  return t->done && t->failed ? PX_EPROTO : 0;
}

px_stream_tr_t *px_stream_tr_new(const px_tr_ctx_t *ctx, px_buf_t *out) {
  if (bad_proto(ctx)) return NULL;
  const px_proto_ops_t *in = px_proto_get(ctx->in), *up = px_proto_get(ctx->out);
  if (up->sdec_new == NULL || up->sdec_feed == NULL || up->sdec_finish == NULL ||
      up->sdec_free == NULL || in->senc_new == NULL || in->senc_event == NULL ||
      in->senc_free == NULL)
    return NULL;
  px_stream_tr_t *t = calloc(1, sizeof(*t));
  if (t == NULL) return NULL;
  t->ctx = *ctx;
  px_lossy_init(&t->dropped);
  t->ctx.dropped = &t->dropped;
  t->in = in;
  t->out = up;
  t->buf = out;
  px_ev_t z;
  px_ev_init(&z, PX_EV_MESSAGE_DELTA);
  t->usage = z.usage;
  px_sse_init(&t->sse, PX_MAX_SSE_EVENT, on_sse, t);
  t->dec = up->sdec_new(&t->ctx, on_event, t);
  t->enc = in->senc_new(&t->ctx, out);
  if (t->dec == NULL || t->enc == NULL) {
    px_stream_tr_free(t);
    return NULL;
  }
  return t;
}

int px_stream_tr_feed(px_stream_tr_t *t, const char *p, size_t n) {
  if (t->done) return t->failed ? PX_EPROTO : 0;
  int rc = px_sse_feed(&t->sse, p, n);
  if (rc == PX_ETOOBIG)
    return write_error(t, PX_ERR_BAD_GATEWAY, "upstream stream event too large");
  if (rc < 0) return write_error(t, PX_ERR_BAD_GATEWAY, "upstream stream failed");
  return 0;
}

int px_stream_tr_finish(px_stream_tr_t *t, int ok, px_errkind_t kind,
                        const char *message) {
  if (!t->done && ok) {
    /* lenient end: an event whose blank line never came is still complete
     * if its lines were (a truncated JSON line fails in the decoder) */
    int rc = px_sse_feed(&t->sse, "\n\n", 2);
    if (rc < 0 && !t->done)
      write_error(t, PX_ERR_BAD_GATEWAY, "upstream stream event too large");
    if (!t->done) {
      rc = t->out->sdec_finish(t->dec);
      if (rc < 0 && !t->done)
        write_error(t, PX_ERR_BAD_GATEWAY,
                    "upstream stream ended before its terminal event");
    }
  }
  if (!t->done)
    write_error(t, ok ? PX_ERR_BAD_GATEWAY : kind,
                ok || message == NULL ? "upstream stream ended before its terminal event"
                                      : message);
  return t->failed ? PX_EPROTO : 0;
}

int px_stream_tr_done(const px_stream_tr_t *t) {
  return t->done;
}

const px_usage_t *px_stream_tr_usage(const px_stream_tr_t *t) {
  return &t->usage;
}

void px_stream_tr_answer(px_stream_tr_t *t, px_answer_t *up, px_answer_t *client) {
  t->answer = up;
  t->client = client;
  t->ctx.client = client; /* an encoder that notes its answer (px_answer_wrote) */
}

const px_lossy_t *px_stream_tr_dropped(const px_stream_tr_t *t) {
  return &t->dropped;
}

void px_stream_tr_free(px_stream_tr_t *t) {
  if (t == NULL) return;
  if (t->dec) t->out->sdec_free(t->dec);
  if (t->enc) t->in->senc_free(t->enc);
  px_sse_done(&t->sse);
  free(t->open);
  free(t);
}
