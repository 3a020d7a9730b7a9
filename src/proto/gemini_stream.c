/*
 * gemini_stream.c - Gemini streamGenerateContent (?alt=sse) <-> events.
 *
 * Every SSE event is a whole GenerateContentResponse chunk. A Gemini stream
 * has no terminal event (SPEC section 11): it is complete when a chunk with
 * a finishReason has arrived and the upstream ended cleanly, so the decoder
 * emits MESSAGE_DELTA on the finishReason and MESSAGE_STOP at sdec_finish.
 * The encoder writes one chunk per text/thinking delta, a functionCall part
 * whole when its block stops (Gemini carries args as an object), and the
 * finishReason with usageMetadata on MESSAGE_DELTA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"

/* ======================================================================== */
/* Decoder                                                                    */

struct px_sdec {
  const px_tr_ctx_t *ctx;
  px_ev_sink_fn sink;
  void *arg;
  int started, ended, failed, done;
  int open;          /* index of the open block, -1 */
  px_block_t block;  /* its kind */
  int next;          /* next block index */
  int calls;         /* function calls seen */
  char resp_id[128];
  px_usage_t usage;
};

px_sdec_t *px_gemini_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg) {
  px_sdec_t *d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  d->ctx = ctx;
  d->sink = sink;
  d->arg = arg;
  d->open = -1;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_ERROR);
  d->usage = ev.usage;
  return d;
}

void px_gemini_sdec_free(px_sdec_t *d) { free(d); }

static int sd_fail(px_sdec_t *d, px_errkind_t kind, const char *msg) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_ERROR);
  ev.errkind = kind;
  ev.text = px_str(msg);
  d->failed = 1;
  int rc = d->sink(d->arg, &ev);
  return rc < 0 ? rc : PX_EPROTO;
}

static int sd_close(px_sdec_t *d) {
  if (d->open < 0) return 0;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_BLOCK_STOP);
  ev.index = d->open;
  d->open = -1;
  return d->sink(d->arg, &ev);
}

static int sd_open(px_sdec_t *d, px_block_t kind, px_str_t id, px_str_t name) {
  int rc = sd_close(d);
  if (rc < 0) return rc;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_BLOCK_START);
  ev.index = d->open = d->next++;
  ev.block = d->block = kind;
  ev.id = id;
  ev.name = name;
  return d->sink(d->arg, &ev);
}

static int sd_delta(px_sdec_t *d, px_block_t kind, px_delta_t dk, px_str_t text) {
  int rc = 0;
  if (d->open < 0 || d->block != kind) rc = sd_open(d, kind, PX_STR_NULL, PX_STR_NULL);
  if (rc < 0 || text.len == 0) return rc;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_DELTA);
  ev.index = d->open;
  ev.delta = dk;
  ev.text = text;
  return d->sink(d->arg, &ev);
}

static int sd_start(px_sdec_t *d, json_t *j) {
  if (d->started) return 0;
  d->started = 1;
  const char *rid = px_jstr(j, "responseId");
  snprintf(d->resp_id, sizeof(d->resp_id), "%s", rid ? rid : "gemini");
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_START);
  ev.id = px_str(d->resp_id);
  ev.model = px_jview(j, "modelVersion");
  json_t *um = json_object_get(j, "usageMetadata");
  if (json_is_object(um)) {
    px_usage_t u;
    px_gemini_usage_in(um, &u);
    ev.usage.input_tokens = u.input_tokens;
    ev.usage.cache_read_tokens = u.cache_read_tokens;
  }
  return d->sink(d->arg, &ev);
}

static int sd_call(px_sdec_t *d, json_t *fc) {
  char id[160];
  const char *cid = px_jstr(fc, "id");
  if (cid == NULL) px_gemini_call_id(d->resp_id, d->calls, id, sizeof(id));
  d->calls++;
  px_str_t name = px_jview(fc, "name");
  if (name.len == 0) return sd_fail(d, PX_ERR_BAD_GATEWAY, "upstream functionCall without a name");
  int rc = sd_open(d, PX_BLOCK_TOOL_CALL, px_str(cid ? cid : id), name);
  json_t *args = json_object_get(fc, "args");
  char *a = json_is_object(args) ? json_dumps(args, JSON_COMPACT) : strdup("{}");
  if (rc == 0 && a == NULL) rc = PX_ENOMEM;
  if (rc == 0) {
    px_ev_t ev;
    px_ev_init(&ev, PX_EV_DELTA);
    ev.index = d->open;
    ev.delta = PX_DELTA_TOOL_ARGS;
    ev.text = px_str(a);
    rc = d->sink(d->arg, &ev);
  }
  free(a);
  if (rc == 0) rc = sd_close(d);
  return rc;
}

static int sd_part(px_sdec_t *d, json_t *pt, int refused) {
  int rc = 0;
  px_str_t text = px_jview(pt, "text");
  px_str_t sig = px_jview(pt, "thoughtSignature");
  json_t *fc = json_object_get(pt, "functionCall");
  if (json_is_true(json_object_get(pt, "thought"))) {
    rc = sd_delta(d, PX_BLOCK_THINKING, PX_DELTA_THINKING, text);
    if (rc == 0 && sig.len) rc = sd_delta(d, PX_BLOCK_THINKING, PX_DELTA_SIGNATURE, sig);
    return rc;
  }
  if (sig.len) /* a signature riding on a call or text: its own thinking block */
    if ((rc = sd_open(d, PX_BLOCK_THINKING, PX_STR_NULL, PX_STR_NULL)) == 0)
      rc = sd_delta(d, PX_BLOCK_THINKING, PX_DELTA_SIGNATURE, sig);
  if (rc < 0) return rc;
  if (text.ptr != NULL)
    return refused ? sd_delta(d, PX_BLOCK_REFUSAL, PX_DELTA_REFUSAL, text)
                   : sd_delta(d, PX_BLOCK_TEXT, PX_DELTA_TEXT, text);
  if (json_is_object(fc)) return sd_call(d, fc);
  return 0; /* inline data, code execution: nothing a stream event can carry */
}

static int sd_finish_reason(px_sdec_t *d, const char *fr, json_t *um) {
  int rc = sd_close(d);
  if (rc < 0) return rc;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_DELTA);
  ev.stop = fr ? px_gemini_stop(fr, d->calls > 0) : PX_STOP_NONE;
  if (json_is_object(um)) px_gemini_usage_in(um, &ev.usage);
  if (fr != NULL) d->ended = 1;
  return d->sink(d->arg, &ev);
}

static int sd_chunk(px_sdec_t *d, json_t *j) {
  json_t *e = json_object_get(j, "error");
  if (json_is_object(e)) {
    const char *msg = px_jstr(e, "message");
    return sd_fail(d, px_errkind_from_type(NULL, (int)px_jint(e, "code", 500)),
                   msg ? msg : "upstream stream error");
  }
  int rc = sd_start(d, j);
  if (rc < 0) return rc;
  json_t *cand = json_array_get(json_object_get(j, "candidates"), 0);
  const char *fr = px_jstr(cand, "finishReason");
  const char *block = px_jstr(json_object_get(j, "promptFeedback"), "blockReason");
  if (block != NULL && cand == NULL) fr = block;
  json_t *um = json_object_get(j, "usageMetadata");
  if (d->ended) /* after the finish chunk: at most late usage */
    return json_is_object(um) ? sd_finish_reason(d, NULL, um) : 0;
  int refused = fr != NULL && px_gemini_stop(fr, 0) == PX_STOP_REFUSAL;
  size_t i;
  json_t *pt;
  json_array_foreach(json_object_get(json_object_get(cand, "content"), "parts"), i, pt) {
    if ((rc = sd_part(d, pt, refused)) < 0) return rc;
  }
  if (fr != NULL) return sd_finish_reason(d, fr, um);
  return 0;
}

int px_gemini_sdec_feed(px_sdec_t *d, const struct px_sse_event *sse) {
  if (d->failed) return PX_EPROTO;
  if (d->done || sse->data.len == 0) return 0;
  json_t *j = json_loadb(sse->data.ptr, sse->data.len, 0, NULL);
  if (!json_is_object(j)) {
    json_decref(j);
    return sd_fail(d, PX_ERR_BAD_GATEWAY, "upstream sent a chunk that is not a JSON object");
  }
  int rc = sd_chunk(d, j);
  json_decref(j);
  return rc;
}

int px_gemini_sdec_finish(px_sdec_t *d) {
  if (d->failed) return PX_EPROTO;
  if (d->done) return 0;
  if (!d->ended) return sd_fail(d, PX_ERR_BAD_GATEWAY, "upstream stream ended before a finishReason");
  d->done = 1;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_STOP);
  return d->sink(d->arg, &ev);
}

/* ======================================================================== */
/* Encoder                                                                    */

struct px_senc {
  const px_tr_ctx_t *ctx;
  px_buf_t *out;
  char resp_id[128];
  int tool_open;         /* a tool call block is being held */
  char *tool_id, *tool_name;
  px_buf_t args;         /* its arguments so far */
  px_buf_t sig;          /* a signature waiting for the next part */
  int sig_index;         /* the block that signature belongs to */
  int refusal;
  int finished;
  px_buf_t tail; /* `,"modelVersion":..,"responseId":..}` + CRLF CRLF, built once */
};

px_senc_t *px_gemini_senc_new(const px_tr_ctx_t *ctx, px_buf_t *out) {
  px_senc_t *e = calloc(1, sizeof(*e));
  if (e == NULL) return NULL;
  e->ctx = ctx;
  e->out = out;
  snprintf(e->resp_id, sizeof(e->resp_id), "proxai");
  px_buf_init(&e->args, ctx->max_accum ? ctx->max_accum : PX_MAX_SSE_EVENT);
  px_buf_init(&e->sig, PX_MAX_SSE_EVENT);
  px_buf_init(&e->tail, PX_MAX_SSE_EVENT);
  return e;
}

void px_gemini_senc_free(px_senc_t *e) {
  if (e == NULL) return;
  free(e->tool_id);
  free(e->tool_name);
  px_buf_free(&e->args);
  px_buf_free(&e->sig);
  px_buf_free(&e->tail);
  free(e);
}

static int w(px_senc_t *e, const char *s) { return px_buf_puts(e->out, s); }

/* Start a chunk: `data: {"candidates":[{` */
static int chunk_open(px_senc_t *e) { return w(e, "data: {\"candidates\":[{"); }

/* End a chunk: `"index":0}],"modelVersion":..,"responseId":..}` + usage. */
static int chunk_close(px_senc_t *e, const px_usage_t *u) {
  const char *model = e->ctx->client_model ? e->ctx->client_model : "";
  int rc = px_buf_append(e->out, "\"index\":0}]", 11);
  if (rc == 0 && u != NULL) {
    json_t *um = px_gemini_usage_out(u);
    char *s = json_dumps(um, JSON_COMPACT);
    json_decref(um);
    rc = s ? w(e, ",\"usageMetadata\":") : PX_ENOMEM;
    if (rc == 0) rc = w(e, s);
    free(s);
  }
  if (rc == 0 && e->tail.len == 0) {
    px_buf_t *t = &e->tail;
    rc = px_buf_puts(t, ",\"modelVersion\":");
    if (rc == 0) rc = px_buf_json_str(t, model, strlen(model));
    if (rc == 0) rc = px_buf_puts(t, ",\"responseId\":");
    if (rc == 0) rc = px_buf_json_str(t, e->resp_id, strlen(e->resp_id));
    if (rc == 0) rc = px_buf_puts(t, "}\r\n\r\n");
    if (rc < 0) px_buf_reset(t);
  }
  if (rc == 0) rc = px_buf_append(e->out, e->tail.data, e->tail.len);
  return rc;
}

/* The pending signature as `,"thoughtSignature":".."`, then forgotten. */
static int put_sig(px_senc_t *e) {
  if (e->sig.len == 0) return 0;
  int rc = w(e, ",\"thoughtSignature\":");
  if (rc == 0) rc = px_buf_json_str(e->out, e->sig.data, e->sig.len);
  px_buf_reset(&e->sig);
  return rc;
}

/* A signature fragment of block `index`, tag before a block's first one.
 * A pending signature of an earlier block is written first on an empty
 * part of its own (two tokens never run together). */
static int sig_add(px_senc_t *e, int index, const char *tag, px_str_t frag) {
  int rc = 0;
  if (frag.len == 0) return 0;
  if (e->sig.len && index != e->sig_index) {
    rc = chunk_open(e);
    if (rc == 0) rc = w(e, "\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"");
    if (rc == 0) rc = put_sig(e);
    if (rc == 0) rc = w(e, "}]},");
    if (rc == 0) rc = chunk_close(e, NULL);
  }
  if (rc == 0 && e->sig.len == 0 && tag != NULL) rc = px_buf_puts(&e->sig, tag);
  e->sig_index = index;
  if (rc == 0) rc = px_buf_append(&e->sig, frag.ptr, frag.len);
  return rc;
}

static int text_chunk(px_senc_t *e, px_str_t text, int thought) {
  /* chunk_open and the part's head in one piece; no strlen per event */
  static const char head[] =
      "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"";
  static const char th[] = "\",\"thought\":true";
  px_buf_t *o = e->out;
  int rc = px_buf_append(o, head, sizeof(head) - 1);
  if (rc == 0) rc = px_buf_json_escape(o, text.ptr ? text.ptr : "", text.len);
  if (rc == 0)
    rc = thought ? px_buf_append(o, th, sizeof(th) - 1) : px_buf_append(o, "\"", 1);
  if (rc == 0 && !thought) rc = put_sig(e);
  if (rc == 0) rc = px_buf_append(o, "}]},", 4);
  if (rc == 0) rc = chunk_close(e, NULL);
  return rc;
}

static int call_chunk(px_senc_t *e) {
  json_t *args = e->args.len ? json_loadb(e->args.data, e->args.len, 0, NULL) : json_object();
  if (!json_is_object(args)) {
    json_decref(args);
    return PX_EPROTO; /* the hub ends the stream with an error */
  }
  char *a = json_dumps(args, JSON_COMPACT);
  json_decref(args);
  int rc = a ? chunk_open(e) : PX_ENOMEM;
  if (rc == 0) rc = w(e, "\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"id\":");
  if (rc == 0) rc = px_buf_json_str(e->out, e->tool_id, strlen(e->tool_id));
  if (rc == 0) rc = w(e, ",\"name\":");
  if (rc == 0) rc = px_buf_json_str(e->out, e->tool_name, strlen(e->tool_name));
  if (rc == 0) rc = w(e, ",\"args\":");
  if (rc == 0) rc = w(e, a);
  if (rc == 0) rc = w(e, "}");
  if (rc == 0) rc = put_sig(e);
  if (rc == 0) rc = w(e, "}]},");
  if (rc == 0) rc = chunk_close(e, NULL);
  free(a);
  return rc;
}

static int se_delta(px_senc_t *e, const px_ev_t *ev) {
  switch (ev->delta) {
  case PX_DELTA_TEXT:
  case PX_DELTA_REFUSAL:
    return ev->text.len ? text_chunk(e, ev->text, 0) : 0;
  case PX_DELTA_THINKING:
    return ev->text.len ? text_chunk(e, ev->text, 1) : 0;
  case PX_DELTA_SIGNATURE:
    /* signatures ride on the next part: Gemini's own as they are, another
     * family's behind its tag (protoutil.h), once per block */
    return sig_add(e, ev->index, px_rtok_stream_tag(PX_PROTO_GEMINI, e->ctx->out), ev->text);
  case PX_DELTA_ANNOTATION:
    px_dropped(e->ctx, px_lossy_annotations(e->ctx));
    return 0;
  case PX_DELTA_TOOL_ARGS:
    return px_buf_append(&e->args, ev->text.ptr, ev->text.len);
  }
  return 0;
}

static char *dupview(px_str_t s) {
  char *p = malloc(s.len + 1);
  if (p != NULL) {
    if (s.len) memcpy(p, s.ptr, s.len);
    p[s.len] = 0;
  }
  return p;
}

static int se_finish(px_senc_t *e, const px_ev_t *ev) {
  const char *fr = px_gemini_finish(ev->stop == PX_STOP_NONE ? PX_STOP_NONE
                                    : e->refusal            ? PX_STOP_REFUSAL
                                                            : ev->stop);
  int rc = chunk_open(e);
  if (rc == 0 && e->sig.len) { /* a signature nothing followed: an empty part holds it */
    rc = w(e, "\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"");
    if (rc == 0) rc = put_sig(e);
    if (rc == 0) rc = w(e, "}]},");
  }
  if (rc == 0 && fr != NULL) {
    rc = w(e, "\"finishReason\":\"");
    if (rc == 0) rc = w(e, fr);
    if (rc == 0) rc = w(e, "\",");
  }
  if (rc == 0) rc = chunk_close(e, &ev->usage);
  if (fr != NULL) e->finished = 1;
  return rc;
}

int px_gemini_senc_event(px_senc_t *e, const px_ev_t *ev) {
  switch (ev->type) {
  case PX_EV_MESSAGE_START:
    if (ev->id.len) {
      size_t n = ev->id.len < sizeof(e->resp_id) - 1 ? ev->id.len : sizeof(e->resp_id) - 1;
      memcpy(e->resp_id, ev->id.ptr, n);
      e->resp_id[n] = 0;
      px_buf_reset(&e->tail);
    }
    return 0;
  case PX_EV_BLOCK_START:
    if (ev->block == PX_BLOCK_REFUSAL) e->refusal = 1;
    if (ev->block == PX_BLOCK_REDACTED_THINKING) /* Anthropic's redacted data */
      return sig_add(e, ev->index, px_rtok_tag(PX_PROTO_GEMINI, "redacted_data"), ev->text);
    if (ev->block != PX_BLOCK_TOOL_CALL) return 0;
    if (ev->custom) return PX_EINVAL;
    free(e->tool_id);
    free(e->tool_name);
    e->tool_id = dupview(ev->id);
    e->tool_name = dupview(ev->name);
    px_buf_reset(&e->args);
    e->tool_open = 1;
    return e->tool_id && e->tool_name ? 0 : PX_ENOMEM;
  case PX_EV_DELTA:
    return se_delta(e, ev);
  case PX_EV_BLOCK_STOP:
    if (!e->tool_open) return 0;
    e->tool_open = 0;
    return call_chunk(e);
  case PX_EV_MESSAGE_DELTA:
    return se_finish(e, ev);
  case PX_EV_MESSAGE_STOP:
    return 0; /* Gemini streams simply end */
  case PX_EV_ERROR: {
    int rc = w(e, "data: ");
    if (rc == 0) rc = px_gemini_error_body(e->out, ev->errkind, ev->text.ptr ? ev->text.ptr : "", ev->text.len);
    if (rc == 0) rc = w(e, "\r\n\r\n");
    return rc;
  }
  }
  return 0;
}
