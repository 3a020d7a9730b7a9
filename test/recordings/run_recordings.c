/* run_recordings.c - real recorded provider traffic through every client
 * protocol (issue 11).
 *
 * usage: run_recordings RECORDINGS_DIR [FILTER]
 *
 * Each case folder holds a published cassette (cassette.yaml, kept whole,
 * its source named in source.txt) and the interactions extract.py took from
 * it: NN-request.json, NN-response.json | NN-response.sse, NN-meta.json
 * ({"proto","status"}). For every interaction:
 *
 *  - responses (status 200) are translated for every other client
 *    protocol (Anthropic, Chat, Responses and Gemini recordings alike): bodies with px_translate_response, streams with the stream
 *    hub whole, at every byte split (sampled past 4 KiB) and one byte at a
 *    time; the client's output is decoded again with the client protocol's
 *    own decoder and compared with the recording as its own protocol's
 *    decoder reads it: text, tool calls (name, arguments), reasoning, usage
 *    (cached tokens included), stop reason, annotations. What is missing
 *    must be declared: in the translation's lossy list (bodies), or in the
 *    x-proxai-lossy prediction or the stream's dropped list (streams).
 *    A stream is also accumulated into the body its provider would have
 *    answered without streaming, and both paths must agree: the same
 *    visible outcome, every field the body path declares is declared by
 *    the stream path too, and what the stream drops the body path drops.
 *    A body is also sent the stream way: its IR as the shared event model
 *    through the client's stream encoder, held to the same agreement.
 *  - error responses: through every other client protocol the client error
 *    keeps the status and its type follows the status (SPEC 6: 429 ->
 *    rate_limit_error / RESOURCE_EXHAUSTED, 529 -> overloaded_error ...;
 *    a Gemini client's error.code is the status).
 *  - streams also go to a client of their own protocol through the
 *    pass-through watcher, whole and byte by byte: complete (a Gemini
 *    stream by its finishReason or a blocked prompt's blockReason), no
 *    error appended, the bytes untouched. Toward Gemini clients every
 *    chunk has content and a refusal finishes SAFETY; a refusal's
 *    explanation reaches the client or is declared.
 *  - requests are translated to the other upstream protocols; the
 *    result must decode again, keep every turn, text, tool call, tool
 *    result, image and file, or declare what it drops, and obey rules the
 *    target API enforces. */
#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../fast_json.h"
#include "proxai/buf.h"
#include "proxai/passthru.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"
#include "ref.h"

#define OUT_CAP (64u << 20)

static const char *const pnames[] = {"chat", "responses", "anthropic", "gemini"};

static int failures, checks;
static char cur_case[512];

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s: ", cur_case);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  failures++;
}

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  char tmp[65536];
  size_t k;
  while ((k = fread(tmp, 1, sizeof(tmp), f)) > 0) px_buf_append(&b, tmp, k);
  fclose(f);
  px_buf_append(&b, "", 1);
  *n = b.len - 1;
  return b.data;
}

static int proto_of(const char *s) {
  for (int i = 0; i < PX_PROTO_COUNT; i++)
    if (s != NULL && strcmp(s, pnames[i]) == 0) return i;
  return -1;
}

/* ------------------------------------------------------------------------ */
/* The outcome of a response, as a client reads it                          */

typedef struct outcome {
  px_buf_t text;      /* text (and refusal) in order */
  px_buf_t reasoning; /* reasoning text */
  px_buf_t tools;     /* "name(args-normalized);" per call, in order */
  px_buf_t expl;      /* a refusal's explanation (stop_details, finishMessage) */
  int ntools;
  int nann;           /* annotations */
  int signature;      /* opaque reasoning present */
  px_stop_t stop;
  px_usage_t usage;
  int failed;         /* the stream ended in error */
} outcome_t;

static void oc_init(outcome_t *o) {
  memset(o, 0, sizeof(*o));
  px_buf_init(&o->text, SIZE_MAX);
  px_buf_init(&o->reasoning, SIZE_MAX);
  px_buf_init(&o->tools, SIZE_MAX);
  px_buf_init(&o->expl, SIZE_MAX);
  o->usage.input_tokens = o->usage.output_tokens = -1;
  o->usage.cache_read_tokens = o->usage.cache_creation_tokens = -1;
  o->usage.reasoning_tokens = -1;
}

static void oc_free(outcome_t *o) {
  px_buf_free(&o->text);
  px_buf_free(&o->reasoning);
  px_buf_free(&o->tools);
  px_buf_free(&o->expl);
}

/* tool arguments compared as JSON (key order and spacing free) */
static void add_tool(outcome_t *o, const char *name, const char *args, size_t alen) {
  px_buf_puts(&o->tools, name ? name : "?");
  px_buf_puts(&o->tools, "(");
  json_t *j = alen ? json_loadb(args, alen, 0, NULL) : json_object();
  char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  if (s != NULL)
    px_buf_puts(&o->tools, s);
  else
    px_buf_append(&o->tools, args, alen);
  free(s);
  json_decref(j);
  px_buf_puts(&o->tools, ");");
  o->ntools++;
}

/* IR response -> outcome */
static void oc_from_ir(outcome_t *o, json_t *ir) {
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(ir, "content"), i, p) {
    const char *t = json_string_value(json_object_get(p, "type"));
    const char *tx = json_string_value(json_object_get(p, "text"));
    if (t == NULL) continue;
    if ((strcmp(t, "text") == 0 || strcmp(t, "refusal") == 0) && tx)
      px_buf_puts(&o->text, tx);
    if (strcmp(t, "text") == 0) o->nann += (int)json_array_size(json_object_get(p, "annotations"));
    if (strcmp(t, "reasoning") == 0) {
      if (tx) px_buf_puts(&o->reasoning, tx);
      if (json_object_get(p, "signature") || json_object_get(p, "encrypted_content") ||
          json_object_get(p, "redacted_data") || json_object_get(p, "thought_signature"))
        o->signature = 1;
    }
    if (strcmp(t, "tool_call") == 0) {
      const char *a = json_string_value(json_object_get(p, "arguments"));
      add_tool(o, json_string_value(json_object_get(p, "name")), a ? a : "",
               a ? strlen(a) : 0);
    }
  }
  o->stop = px_stop_parse(json_string_value(json_object_get(ir, "stop_reason")));
  const char *ex = json_string_value(json_object_get(ir, "refusal_explanation"));
  if (ex) px_buf_puts(&o->expl, ex);
  json_t *u = json_object_get(ir, "usage");
  json_t *v;
  if ((v = json_object_get(u, "input_tokens")) != NULL) o->usage.input_tokens = json_integer_value(v);
  if ((v = json_object_get(u, "output_tokens")) != NULL) o->usage.output_tokens = json_integer_value(v);
  if ((v = json_object_get(u, "cache_read_tokens")) != NULL)
    o->usage.cache_read_tokens = json_integer_value(v);
}

/* stream events -> outcome */
typedef struct ev_state {
  outcome_t *o;
  px_block_t kind[4096];
  px_buf_t args[4096];
  char *names[4096];
  int n;
} ev_state_t;

static int ev_sink(void *arg, const px_ev_t *ev) {
  ev_state_t *s = arg;
  outcome_t *o = s->o;
  switch (ev->type) {
    case PX_EV_MESSAGE_START:
      px_usage_merge(&o->usage, &ev->usage);
      break;
    case PX_EV_BLOCK_START:
      if (ev->index < 0 || ev->index >= 4096) return -1;
      if (ev->index >= s->n) s->n = ev->index + 1;
      s->kind[ev->index] = ev->block;
      px_buf_init(&s->args[ev->index], SIZE_MAX);
      s->names[ev->index] = strndup(ev->name.ptr ? ev->name.ptr : "", ev->name.len);
      if (ev->block == PX_BLOCK_REDACTED_THINKING) o->signature = 1;
      if (ev->text.len && (ev->block == PX_BLOCK_TEXT || ev->block == PX_BLOCK_REFUSAL))
        px_buf_append(&o->text, ev->text.ptr, ev->text.len);
      break;
    case PX_EV_DELTA:
      if (ev->index < 0 || ev->index >= s->n) return -1;
      switch (ev->delta) {
        case PX_DELTA_TEXT:
        case PX_DELTA_REFUSAL:
          px_buf_append(&o->text, ev->text.ptr, ev->text.len);
          break;
        case PX_DELTA_THINKING:
          px_buf_append(&o->reasoning, ev->text.ptr, ev->text.len);
          break;
        case PX_DELTA_SIGNATURE:
          if (ev->text.len) o->signature = 1;
          break;
        case PX_DELTA_TOOL_ARGS:
          px_buf_append(&s->args[ev->index], ev->text.ptr, ev->text.len);
          break;
        case PX_DELTA_ANNOTATION:
          o->nann++;
          break;
      }
      break;
    case PX_EV_BLOCK_STOP:
      if (ev->index >= 0 && ev->index < s->n && s->kind[ev->index] == PX_BLOCK_TOOL_CALL)
        add_tool(o, s->names[ev->index], s->args[ev->index].data ? s->args[ev->index].data : "",
                 s->args[ev->index].len);
      break;
    case PX_EV_MESSAGE_DELTA:
      if (ev->stop != PX_STOP_NONE) o->stop = ev->stop;
      if (ev->refusal_explanation.len)
        px_buf_append(&o->expl, ev->refusal_explanation.ptr, ev->refusal_explanation.len);
      px_usage_merge(&o->usage, &ev->usage);
      break;
    case PX_EV_MESSAGE_STOP:
      break;
    case PX_EV_ERROR:
      o->failed = 1;
      break;
  }
  return 0;
}

typedef struct sse_ctx {
  const px_proto_ops_t *ops;
  px_sdec_t *d;
} sse_ctx_t;

static int sse_cb(void *arg, const px_sse_event_t *ev) {
  sse_ctx_t *c = arg;
  return c->ops->sdec_feed(c->d, ev) < 0 ? -1 : 0;
}

/* Decode a stream of protocol p with p's own decoder. 0 when complete. */
static int oc_from_stream(outcome_t *o, px_proto_t p, px_proto_t peer, const char *s,
                          size_t n) {
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = peer;
  ctx.out = p;
  ctx.stream = 1;
  ev_state_t *st = calloc(1, sizeof(*st));
  st->o = o;
  const px_proto_ops_t *ops = px_proto_get(p);
  sse_ctx_t c = {ops, ops->sdec_new(&ctx, ev_sink, st)};
  px_sse_t sse;
  px_sse_init(&sse, 64u << 20, sse_cb, &c);
  int rc = px_sse_feed(&sse, s, n);
  if (rc == 0) rc = px_sse_feed(&sse, "\n\n", 2);
  if (rc == 0) rc = ops->sdec_finish(c.d);
  ops->sdec_free(c.d);
  px_sse_done(&sse);
  for (int i = 0; i < st->n; i++) {
    px_buf_free(&st->args[i]);
    free(st->names[i]);
  }
  free(st);
  return rc < 0 || o->failed ? -1 : 0;
}

static int lossy_has(const char *list, const char *path) {
  size_t n = strlen(path);
  for (const char *p = list; (p = strstr(p, path)) != NULL; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
  return 0;
}

static int lossy_any(const char *list, const char *const *paths) {
  for (; *paths; paths++)
    if (lossy_has(list, *paths)) return 1;
  return 0;
}

static const char *const ann_names[] = {
    "content[].citations", "choices[].message.annotations",
    "output[].content[].annotations", "candidates[].groundingMetadata", NULL};
static const char *const sig_names[] = {
    "output[].encrypted_content", "content[].signature", "content[].redacted_thinking",
    "candidates[].content.parts[].thoughtSignature", NULL};

static const char *const expl_names[] = {"stop_details.explanation",
                                         "candidates[].finishMessage", NULL};

/* compare what the client got (c) with the recording (u); declared is the
 * comma list of what the translation named as dropped */
static void compare(const char *what, const outcome_t *u, const outcome_t *c,
                    const char *declared, px_proto_t client) {
  checks++;
  /* a refusal's explanation may become its only wording (SPEC 5, 11) */
  int as_text = u->text.len == 0 && u->expl.len && c->text.len == u->expl.len &&
                memcmp(c->text.data, u->expl.data, u->expl.len) == 0;
  if (!as_text && (u->text.len != c->text.len ||
                   (u->text.len && memcmp(u->text.data, c->text.data, u->text.len) != 0)))
    fail("%s: text differs (%zu vs %zu bytes)", what, u->text.len, c->text.len);
  if (u->expl.len && !as_text && c->expl.len != u->expl.len &&
      !lossy_any(declared, expl_names))
    fail("%s: a refusal's explanation dropped, undeclared", what);
  if (u->tools.len != c->tools.len ||
      (u->tools.len && memcmp(u->tools.data, c->tools.data, u->tools.len) != 0))
    fail("%s: tool calls differ: %.*s | %.*s", what, (int)u->tools.len,
         u->tools.data ? u->tools.data : "", (int)c->tools.len,
         c->tools.data ? c->tools.data : "");
  if (u->reasoning.len != c->reasoning.len && !lossy_has(declared, "reasoning"))
    fail("%s: reasoning differs (%zu vs %zu bytes)", what, u->reasoning.len,
         c->reasoning.len);
  if (u->nann != c->nann && !lossy_any(declared, ann_names))
    fail("%s: %d annotations became %d, undeclared", what, u->nann, c->nann);
  if (u->signature && !c->signature && !lossy_any(declared, sig_names))
    fail("%s: opaque reasoning dropped, undeclared", what);
  px_stop_t us = u->stop, cs = c->stop;
  /* one-way spellings: Chat has no pause_turn/refusal-by-stop;
   * content_filter reads back as refusal from Anthropic */
  int stop_ok = us == cs || (us == PX_STOP_CONTENT_FILTER && cs == PX_STOP_REFUSAL) ||
                (client == PX_PROTO_CHAT && us == PX_STOP_PAUSE_TURN) ||
                (us == PX_STOP_STOP_SEQUENCE && cs == PX_STOP_END_TURN) ||
                (us == PX_STOP_REFUSAL && cs == PX_STOP_END_TURN) ||
                (us == PX_STOP_REFUSAL && cs == PX_STOP_CONTENT_FILTER);
  if (!stop_ok) fail("%s: stop reason %s became %s", what, px_stop_name(us), px_stop_name(cs));
  if (u->usage.input_tokens >= 0 && u->usage.input_tokens != c->usage.input_tokens)
    fail("%s: input tokens %lld became %lld", what, (long long)u->usage.input_tokens,
         (long long)c->usage.input_tokens);
  if (u->usage.output_tokens >= 0 && u->usage.output_tokens != c->usage.output_tokens)
    fail("%s: output tokens %lld became %lld", what, (long long)u->usage.output_tokens,
         (long long)c->usage.output_tokens);
  if (u->usage.cache_read_tokens > 0 &&
      u->usage.cache_read_tokens != c->usage.cache_read_tokens)
    fail("%s: cached tokens %lld became %lld", what, (long long)u->usage.cache_read_tokens,
         (long long)c->usage.cache_read_tokens);
}

/* ------------------------------------------------------------------------ */
/* Streams accumulated to the body the provider answers without streaming    */

/* Anthropic: content blocks rebuilt from their events */
static json_t *accum_anthropic(const char *s, size_t n);
/* Chat: choices[0].message from the deltas */
static json_t *accum_chat(const char *s, size_t n);

typedef struct list_ctx {
  json_t *events; /* array of parsed data objects */
} list_ctx_t;

static int list_cb(void *arg, const px_sse_event_t *ev) {
  list_ctx_t *l = arg;
  json_t *j = json_loadb(ev->data.ptr, ev->data.len, 0, NULL);
  if (j != NULL) json_array_append_new(l->events, j);
  return 0;
}

static json_t *sse_events(const char *s, size_t n) {
  list_ctx_t l = {json_array()};
  px_sse_t sse;
  px_sse_init(&sse, 64u << 20, list_cb, &l);
  px_sse_feed(&sse, s, n);
  px_sse_feed(&sse, "\n\n", 2);
  px_sse_done(&sse);
  return l.events;
}

static json_t *accum_anthropic(const char *s, size_t n) {
  json_t *evs = sse_events(s, n), *msg = NULL;
  json_t *partial = json_object(); /* index -> partial_json text */
  size_t i;
  json_t *e;
  json_array_foreach(evs, i, e) {
    const char *t = json_string_value(json_object_get(e, "type"));
    if (t == NULL) continue;
    if (strcmp(t, "message_start") == 0) {
      msg = json_deep_copy(json_object_get(e, "message"));
    } else if (msg && strcmp(t, "content_block_start") == 0) {
      json_array_append(json_object_get(msg, "content"), json_object_get(e, "content_block"));
    } else if (msg && strcmp(t, "content_block_delta") == 0) {
      json_t *content = json_object_get(msg, "content");
      json_t *b = json_array_get(content, json_array_size(content) - 1);
      json_t *d = json_object_get(e, "delta");
      const char *dt = json_string_value(json_object_get(d, "type"));
      const char *field = NULL, *val = NULL;
      if (b == NULL || dt == NULL) continue;
      if (strcmp(dt, "text_delta") == 0) field = "text", val = json_string_value(json_object_get(d, "text"));
      if (strcmp(dt, "thinking_delta") == 0) field = "thinking", val = json_string_value(json_object_get(d, "thinking"));
      if (strcmp(dt, "signature_delta") == 0) field = "signature", val = json_string_value(json_object_get(d, "signature"));
      if (field && val) {
        const char *old = json_string_value(json_object_get(b, field));
        size_t ol = old ? strlen(old) : 0, vl = strlen(val);
        char *nv = malloc(ol + vl + 1);
        memcpy(nv, old ? old : "", ol);
        memcpy(nv + ol, val, vl + 1);
        json_object_set_new(b, field, json_string(nv));
        free(nv);
      } else if (strcmp(dt, "input_json_delta") == 0) {
        char key[32];
        snprintf(key, sizeof(key), "%zu", json_array_size(content) - 1);
        const char *old = json_string_value(json_object_get(partial, key));
        const char *pj = json_string_value(json_object_get(d, "partial_json"));
        size_t ol = old ? strlen(old) : 0, vl = pj ? strlen(pj) : 0;
        char *nv = malloc(ol + vl + 1);
        memcpy(nv, old ? old : "", ol);
        memcpy(nv + ol, pj ? pj : "", vl);
        nv[ol + vl] = 0;
        json_object_set_new(partial, key, json_string(nv));
        free(nv);
      } else if (strcmp(dt, "citations_delta") == 0) {
        json_t *c = json_object_get(b, "citations");
        if (!json_is_array(c)) {
          c = json_array();
          json_object_set_new(b, "citations", c);
        }
        json_array_append(c, json_object_get(d, "citation"));
      }
    } else if (msg && strcmp(t, "message_delta") == 0) {
      json_t *d = json_object_get(e, "delta");
      const char *k;
      json_t *v;
      json_object_foreach(d, k, v) json_object_set(msg, k, v);
      json_t *u = json_object_get(msg, "usage"), *du = json_object_get(e, "usage");
      json_object_foreach(du, k, v) {
        if (!json_is_null(v)) json_object_set(u, k, v);
      }
    }
  }
  if (msg != NULL) {
    const char *k;
    json_t *v;
    json_object_foreach(partial, k, v) {
      json_t *b = json_array_get(json_object_get(msg, "content"), (size_t)atoi(k));
      json_t *in = json_loads(json_string_value(v), 0, NULL);
      if (b && in) json_object_set_new(b, "input", in);
      else json_decref(in);
    }
  }
  json_decref(partial);
  json_decref(evs);
  return msg;
}

static json_t *accum_chat(const char *s, size_t n) {
  json_t *evs = sse_events(s, n), *body = NULL, *msg = NULL, *tcs = NULL;
  px_buf_t text, reasoning;
  px_buf_init(&text, SIZE_MAX);
  px_buf_init(&reasoning, SIZE_MAX);
  json_t *anns = json_array();
  const char *finish = NULL;
  int any_text = 0;
  size_t i;
  json_t *e;
  json_array_foreach(evs, i, e) {
    if (body == NULL) {
      body = json_pack("{s:O?, s:s, s:O?, s:O?}", "id", json_object_get(e, "id"), "object",
                       "chat.completion", "created", json_object_get(e, "created"), "model",
                       json_object_get(e, "model"));
      msg = json_pack("{s:s}", "role", "assistant");
      tcs = json_array();
    }
    if (json_is_object(json_object_get(e, "usage")))
      json_object_set(body, "usage", json_object_get(e, "usage"));
    json_t *ch = json_array_get(json_object_get(e, "choices"), 0);
    if (ch == NULL) continue;
    if (json_string_value(json_object_get(ch, "finish_reason")))
      finish = json_string_value(json_object_get(ch, "finish_reason"));
    json_t *d = json_object_get(ch, "delta");
    const char *c = json_string_value(json_object_get(d, "content"));
    if (c) px_buf_puts(&text, c), any_text = 1;
    const char *r = json_string_value(json_object_get(d, "reasoning_content"));
    if (r) px_buf_puts(&reasoning, r);
    json_array_extend(anns, json_object_get(d, "annotations"));
    size_t k;
    json_t *tc;
    json_array_foreach(json_object_get(d, "tool_calls"), k, tc) {
      json_int_t idx = json_integer_value(json_object_get(tc, "index"));
      while ((json_int_t)json_array_size(tcs) <= idx)
        json_array_append_new(tcs, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", "", "type",
                                             "function", "function", "name", "", "arguments", ""));
      json_t *slot = json_array_get(tcs, (size_t)idx);
      json_t *fn = json_object_get(slot, "function"), *f2 = json_object_get(tc, "function");
      if (json_string_value(json_object_get(tc, "id")))
        json_object_set(slot, "id", json_object_get(tc, "id"));
      if (json_string_value(json_object_get(f2, "name")))
        json_object_set(fn, "name", json_object_get(f2, "name"));
      const char *a = json_string_value(json_object_get(f2, "arguments"));
      if (a) {
        const char *old = json_string_value(json_object_get(fn, "arguments"));
        px_buf_t nb;
        px_buf_init(&nb, SIZE_MAX);
        px_buf_puts(&nb, old ? old : "");
        px_buf_puts(&nb, a);
        json_object_set_new(fn, "arguments", json_stringn(nb.data ? nb.data : "", nb.len));
        px_buf_free(&nb);
      }
    }
  }
  if (body != NULL) {
    json_object_set_new(msg, "content", any_text ? json_stringn(text.data ? text.data : "", text.len)
                                                 : json_null());
    if (reasoning.len) json_object_set_new(msg, "reasoning_content", json_stringn(reasoning.data, reasoning.len));
    if (json_array_size(tcs)) json_object_set(msg, "tool_calls", tcs);
    if (json_array_size(anns)) json_object_set(msg, "annotations", anns);
    json_object_set_new(body, "choices",
                        json_pack("[{s:i, s:O, s:s?}]", "index", 0, "message", msg,
                                  "finish_reason", finish));
  }
  json_decref(msg);
  json_decref(tcs);
  json_decref(anns);
  px_buf_free(&text);
  px_buf_free(&reasoning);
  json_decref(evs);
  return body;
}

/* Gemini: every chunk is a GenerateContentResponse; the body is one
 * candidate with every chunk's parts in order, the last finishReason,
 * finishMessage and usageMetadata, and the prompt feedback. */
static json_t *accum_gemini(const char *s, size_t n) {
  json_t *evs = sse_events(s, n), *body = json_object(), *parts = json_array();
  json_t *cand = json_pack("{s:{s:s, s:O}}", "content", "role", "model", "parts", parts);
  int any_cand = 0;
  size_t i, k;
  json_t *e, *pt;
  json_array_foreach(evs, i, e) {
    static const char *const top[] = {"usageMetadata", "modelVersion", "responseId",
                                      "promptFeedback"};
    for (size_t t = 0; t < 4; t++)
      if (json_object_get(e, top[t]))
        json_object_set(body, top[t], json_object_get(e, top[t]));
    json_t *c = json_array_get(json_object_get(e, "candidates"), 0);
    if (c == NULL) continue;
    any_cand = 1;
    json_array_foreach(json_object_get(json_object_get(c, "content"), "parts"), k, pt)
        json_array_append(parts, pt);
    const char *keep[] = {"finishReason", "finishMessage", "safetyRatings",
                          "groundingMetadata", "citationMetadata"};
    for (size_t t = 0; t < 5; t++)
      if (json_object_get(c, keep[t]))
        json_object_set(cand, keep[t], json_object_get(c, keep[t]));
  }
  if (any_cand) json_object_set_new(body, "candidates", json_pack("[O]", cand));
  json_decref(cand);
  json_decref(parts);
  json_decref(evs);
  return body;
}

static json_t *accum_responses(const char *s, size_t n) {
  json_t *evs = sse_events(s, n), *r = NULL;
  size_t i;
  json_t *e;
  json_array_foreach(evs, i, e) {
    const char *t = json_string_value(json_object_get(e, "type"));
    if (t && (strcmp(t, "response.completed") == 0 || strcmp(t, "response.incomplete") == 0))
      r = json_incref(json_object_get(e, "response"));
  }
  json_decref(evs);
  return r;
}

/* ------------------------------------------------------------------------ */
/* Responses                                                                 */

static void ctx_for(px_tr_ctx_t *ctx, px_proto_t client, px_proto_t up, int stream) {
  memset(ctx, 0, sizeof(*ctx));
  ctx->in = client;
  ctx->out = up;
  ctx->client_model = "client-model";
  ctx->upstream_model = "upstream-model";
  ctx->stream = stream;
  ctx->created = 1700000000;
  ctx->client_include_usage = 1;
  ctx->max_accum = 64u << 20;
}

/* the lossy list a stream's headers carry: the request translated with
 * stream on (prediction included) */
static void stream_header_lossy(px_proto_t client, px_proto_t up, json_t *upstream_req,
                                px_lossy_t *out) {
  px_lossy_init(out);
  if (upstream_req == NULL) return;
  /* the recorded request is in the upstream's protocol: bring it to the
   * client's first, then back (what a client of that protocol would send) */
  px_tr_ctx_t c1;
  ctx_for(&c1, up, client, 1);
  px_lossy_t l1;
  px_lossy_init(&l1);
  px_tr_err_t err;
  json_t *creq = NULL, *ureq = NULL;
  if (px_translate_request(&c1, upstream_req, &creq, &l1, &err) < 0) return;
  px_tr_ctx_t c2;
  ctx_for(&c2, client, up, 1);
  if (px_translate_request(&c2, creq, &ureq, out, &err) < 0) px_lossy_init(out);
  json_decref(creq);
  json_decref(ureq);
}

static void stream_header_lossy(px_proto_t client, px_proto_t up, json_t *upstream_req,
                                px_lossy_t *out);
static void gemini_client_rules(const char *s, size_t n, const outcome_t *o,
                                const char *what);

static px_str_t jv(json_t *o, const char *k) {
  return px_str(json_string_value(json_object_get(o, k)));
}

static int64_t ji(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

typedef struct synth {
  const px_proto_ops_t *ops;
  px_senc_t *enc;
  int rc;
} synth_t;

static void syn(synth_t *s, const px_ev_t *ev) {
  if (s->rc == 0) s->rc = s->ops->senc_event(s->enc, ev);
}

static void syn_block(synth_t *s, int index, px_block_t kind, px_str_t id, px_str_t name,
                      px_str_t data) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_BLOCK_START);
  ev.index = index;
  ev.block = kind;
  ev.id = id;
  ev.name = name;
  ev.text = data;
  syn(s, &ev);
}

static void syn_delta(synth_t *s, int index, px_delta_t kind, px_str_t text) {
  if (text.len == 0) return;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_DELTA);
  ev.index = index;
  ev.delta = kind;
  ev.text = text;
  syn(s, &ev);
}

static void syn_stop(synth_t *s, int index) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_BLOCK_STOP);
  ev.index = index;
  syn(s, &ev);
}

/* A body recording as a stream: its IR as the shared event model (what the
 * upstream's stream decoder hands the hub for the same answer) through the
 * client's stream encoder. Both paths must agree: the same visible outcome
 * as the body translation (ob), what the body path declares the stream
 * declares (header prediction, the encoder's drops, or the decoder's: the
 * body decoder's list stands for those), and what the stream encoder drops
 * the body path drops too. */
static void body_as_stream(px_proto_t up, px_proto_t c, json_t *ir, json_t *req,
                           const outcome_t *ob, const char *body_lossy,
                           const char *decode_lossy, const char *what) {
  px_tr_ctx_t ctx;
  ctx_for(&ctx, c, up, 1);
  px_lossy_t dropped;
  px_lossy_init(&dropped);
  ctx.dropped = &dropped;
  px_buf_t out;
  px_buf_init(&out, OUT_CAP);
  synth_t s = {px_proto_get(c), NULL, 0};
  s.enc = s.ops->senc_new(&ctx, &out);
  checks++;
  if (s.enc == NULL) {
    fail("%s (as a stream): no stream encoder", what);
    px_buf_free(&out);
    return;
  }
  json_t *u = json_object_get(ir, "usage");
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_START);
  ev.id = jv(ir, "id");
  ev.model = jv(ir, "model");
  ev.usage.input_tokens = ji(u, "input_tokens");
  ev.usage.cache_read_tokens = ji(u, "cache_read_tokens");
  ev.usage.cache_creation_tokens = ji(u, "cache_creation_tokens");
  syn(&s, &ev);
  size_t i, k;
  json_t *p, *a;
  int idx = 0;
  json_array_foreach(json_object_get(ir, "content"), i, p) {
    const char *t = json_string_value(json_object_get(p, "type"));
    if (t == NULL) continue;
    if (strcmp(t, "text") == 0 || strcmp(t, "refusal") == 0) {
      int text = strcmp(t, "text") == 0;
      syn_block(&s, idx, text ? PX_BLOCK_TEXT : PX_BLOCK_REFUSAL, PX_STR_NULL, PX_STR_NULL,
                PX_STR_NULL);
      syn_delta(&s, idx, text ? PX_DELTA_TEXT : PX_DELTA_REFUSAL, jv(p, "text"));
      json_array_foreach(json_object_get(p, "annotations"), k, a) {
        char *aj = json_dumps(a, JSON_COMPACT);
        syn_delta(&s, idx, PX_DELTA_ANNOTATION, px_str(aj));
        free(aj);
      }
    } else if (strcmp(t, "reasoning") == 0) {
      if (jv(p, "redacted_data").ptr != NULL) {
        syn_block(&s, idx, PX_BLOCK_REDACTED_THINKING, PX_STR_NULL, PX_STR_NULL,
                  jv(p, "redacted_data"));
      } else {
        syn_block(&s, idx, PX_BLOCK_THINKING, jv(p, "id"), PX_STR_NULL, PX_STR_NULL);
        syn_delta(&s, idx, PX_DELTA_THINKING, jv(p, "text"));
        px_str_t sig = jv(p, "signature");
        if (sig.len == 0) sig = jv(p, "encrypted_content");
        if (sig.len == 0) sig = jv(p, "thought_signature");
        syn_delta(&s, idx, PX_DELTA_SIGNATURE, sig);
      }
    } else if (strcmp(t, "tool_call") == 0) {
      syn_block(&s, idx, PX_BLOCK_TOOL_CALL, jv(p, "id"), jv(p, "name"), PX_STR_NULL);
      syn_delta(&s, idx, PX_DELTA_TOOL_ARGS, jv(p, "arguments"));
    } else {
      continue;
    }
    syn_stop(&s, idx++);
  }
  px_ev_init(&ev, PX_EV_MESSAGE_DELTA);
  ev.stop = px_stop_parse(json_string_value(json_object_get(ir, "stop_reason")));
  ev.stop_sequence = jv(ir, "stop_sequence");
  ev.refusal_explanation = jv(ir, "refusal_explanation");
  ev.usage.input_tokens = ji(u, "input_tokens");
  ev.usage.output_tokens = ji(u, "output_tokens");
  ev.usage.cache_read_tokens = ji(u, "cache_read_tokens");
  ev.usage.cache_creation_tokens = ji(u, "cache_creation_tokens");
  ev.usage.reasoning_tokens = ji(u, "reasoning_tokens");
  syn(&s, &ev);
  px_ev_init(&ev, PX_EV_MESSAGE_STOP);
  syn(&s, &ev);
  s.ops->senc_free(s.enc);
  if (s.rc < 0) fail("%s (as a stream): the stream encoder failed (%d)", what, s.rc);
  px_lossy_t header;
  stream_header_lossy(c, up, req, &header);
  char declared[3400];
  snprintf(declared, sizeof(declared), "%s,%s,%s", header.buf, dropped.buf, decode_lossy);
  outcome_t os;
  oc_init(&os);
  char w2[700];
  snprintf(w2, sizeof(w2), "%s (as a stream)", what);
  if (oc_from_stream(&os, c, c, out.data ? out.data : "", out.len) < 0) {
    fail("%s: the client stream does not decode as %s", w2, pnames[c]);
  } else {
    outcome_t b = *ob;
    os.usage = b.usage; /* usage: the stream's counts arrive split */
    compare(w2, &b, &os, declared, c);
    if (c == PX_PROTO_GEMINI)
      gemini_client_rules(out.data ? out.data : "", out.len, ob, w2);
  }
  oc_free(&os);
  char *list = strdup(body_lossy);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    if (strcmp(tok, "...") == 0) continue;
    if (!lossy_has(declared, tok))
      fail("%s: the body path declares %s, the stream path does not", w2, tok);
  }
  free(list);
  list = strdup(dropped.buf);
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    if (strcmp(tok, "...") == 0) continue;
    if (!lossy_has(body_lossy, tok))
      fail("%s: the stream path drops %s, the body path does not", w2, tok);
  }
  free(list);
  px_buf_free(&out);
}

static void check_body(px_proto_t up, json_t *body, json_t *req, const char *name) {
  outcome_t ou;
  oc_init(&ou);
  px_tr_ctx_t c0;
  ctx_for(&c0, up, up, 0);
  px_lossy_t l0;
  px_lossy_init(&l0);
  px_tr_err_t err;
  json_t *ir = NULL;
  if (px_ref_get(up)->decode_response(&c0, body, &ir, &l0, &err) < 0) {
    fail("%s: the recorded %s body does not decode: %s", name, pnames[up], err.message);
    oc_free(&ou);
    return;
  }
  oc_from_ir(&ou, ir);
  for (int c = 0; c < PX_PROTO_COUNT; c++) {
    if (c == (int)up) continue;
    char what[600];
    snprintf(what, sizeof(what), "%s body -> %s client", name, pnames[c]);
    px_tr_ctx_t ctx;
    ctx_for(&ctx, (px_proto_t)c, up, 0);
    px_lossy_t lossy;
    px_lossy_init(&lossy);
    json_t *cb = NULL;
    px_test_census_name = what;
    if (px_test_fast_response(&ctx, body, &cb, &lossy) != 0 &&
        px_translate_response(&ctx, body, &cb, &lossy, &err) < 0) {
      fail("%s: translation failed: %s", what, err.message);
      continue;
    }
    /* read back as the client's protocol */
    px_tr_ctx_t cr;
    ctx_for(&cr, (px_proto_t)c, (px_proto_t)c, 0);
    px_lossy_t l2;
    px_lossy_init(&l2);
    json_t *ir2 = NULL;
    outcome_t oc;
    oc_init(&oc);
    if (px_ref_get((px_proto_t)c)->decode_response(&cr, cb, &ir2, &l2, &err) < 0) {
      fail("%s: client body does not decode as %s: %s", what, pnames[c], err.message);
    } else {
      oc_from_ir(&oc, ir2);
      compare(what, &ou, &oc, lossy.buf, (px_proto_t)c);
      body_as_stream(up, (px_proto_t)c, ir, req, &oc, lossy.buf, l0.buf, what);
    }
    json_decref(ir2);
    json_decref(cb);
    oc_free(&oc);
  }
  json_decref(ir);
  oc_free(&ou);
}

static int run_stream(const px_tr_ctx_t *ctx, const char *p, size_t n, size_t step,
                      px_buf_t *out, px_lossy_t *dropped) {
  px_buf_init(out, OUT_CAP);
  px_stream_tr_t *t = px_stream_tr_new(ctx, out);
  if (t == NULL) return -1;
  size_t at = 0;
  while (at < n) {
    size_t k = step == 0 ? n - at : (step < n - at ? step : n - at);
    if (px_stream_tr_feed(t, p + at, k) < 0) break;
    at += k;
  }
  int rc = px_stream_tr_finish(t, 1, PX_ERR_BAD_GATEWAY, NULL);
  if (dropped) *dropped = *px_stream_tr_dropped(t);
  px_stream_tr_free(t);
  return rc;
}

/* feed split at one position */
static int run_split(const px_tr_ctx_t *ctx, const char *p, size_t n, size_t cut,
                     px_buf_t *out) {
  px_buf_init(out, OUT_CAP);
  px_stream_tr_t *t = px_stream_tr_new(ctx, out);
  if (t == NULL) return -1;
  if (px_stream_tr_feed(t, p, cut) == 0) px_stream_tr_feed(t, p + cut, n - cut);
  int rc = px_stream_tr_finish(t, 1, PX_ERR_BAD_GATEWAY, NULL);
  px_stream_tr_free(t);
  return rc;
}

/* What the real Gemini API always does and clients rely on: every chunk's
 * candidate has content (LangChain drops a chunk without, and with it the
 * usage and the finish), and a refusal finishes SAFETY (SPEC 11). */
static void gemini_client_rules(const char *s, size_t n, const outcome_t *o,
                                const char *what) {
  json_t *evs = sse_events(s, n);
  size_t i;
  json_t *e;
  const char *last_fr = NULL;
  json_array_foreach(evs, i, e) {
    json_t *c = json_array_get(json_object_get(e, "candidates"), 0);
    if (c == NULL) continue;
    if (!json_is_object(json_object_get(c, "content")))
      fail("%s: a Gemini chunk's candidate without content", what);
    if (json_string_value(json_object_get(c, "finishReason")))
      last_fr = json_string_value(json_object_get(c, "finishReason"));
  }
  if ((o->stop == PX_STOP_REFUSAL || o->stop == PX_STOP_CONTENT_FILTER) &&
      (last_fr == NULL || strcmp(last_fr, "SAFETY") != 0))
    fail("%s: a refusal finishes %s, not SAFETY", what, last_fr ? last_fr : "(none)");
  json_decref(evs);
}

/* The same stream to a client of its own protocol (pass-through): the
 * watcher must find it complete (a Gemini stream has no terminal event: a
 * finish or a blocked prompt ends it) and forward the bytes untouched,
 * whole and one byte at a time. */
static void check_passthrough(px_proto_t up, const char *s, size_t n, const char *name) {
  for (int step = 0; step < 2; step++) {
    px_passthru_t pt;
    px_passthru_init(&pt, up, NULL);
    px_buf_t out;
    px_buf_init(&out, OUT_CAP);
    int rc = 0;
    for (size_t at = 0; rc == 0 && at < n;) {
      size_t k = step ? 1 : n;
      rc = px_passthru_feed(&pt, s + at, k, &out);
      at += k;
    }
    checks++;
    if (rc != 0 || !px_passthru_finish(&pt))
      fail("%s stream -> %s client (pass-through%s): not seen as complete", name,
           pnames[up], step ? ", byte by byte" : "");
    else if (pt.upstream_error)
      fail("%s stream -> %s client (pass-through): read as an upstream error", name,
           pnames[up]);
    else if (out.len != n || memcmp(out.data, s, n) != 0)
      fail("%s stream -> %s client (pass-through): bytes changed", name, pnames[up]);
    px_buf_free(&out);
    px_passthru_done(&pt);
  }
}

static void check_stream(px_proto_t up, const char *s, size_t n, json_t *req, const char *name) {
  outcome_t ou;
  oc_init(&ou);
  if (oc_from_stream(&ou, up, up, s, n) < 0) {
    fail("%s: the recorded %s stream does not decode", name, pnames[up]);
    oc_free(&ou);
    return;
  }
  json_t *acc = up == PX_PROTO_ANTHROPIC ? accum_anthropic(s, n)
                : up == PX_PROTO_CHAT    ? accum_chat(s, n)
                : up == PX_PROTO_GEMINI  ? accum_gemini(s, n)
                                         : accum_responses(s, n);
  check_passthrough(up, s, n, name);
  for (int c = 0; c < PX_PROTO_COUNT; c++) {
    if (c == (int)up) continue;
    char what[600];
    snprintf(what, sizeof(what), "%s stream -> %s client", name, pnames[c]);
    px_tr_ctx_t ctx;
    ctx_for(&ctx, (px_proto_t)c, up, 1);
    px_buf_t whole;
    px_lossy_t dropped;
    px_lossy_init(&dropped);
    int frc = run_stream(&ctx, s, n, 0, &whole, &dropped);
    checks++;
    if (frc != 0) fail("%s: the translated stream ended in error", what);
    /* byte splits: identical client bytes */
    size_t stride = n <= 4096 ? 1 : n / 512 + 1;
    for (size_t cut = 1; cut < n; cut += stride) {
      px_buf_t o2;
      run_split(&ctx, s, n, cut, &o2);
      if (o2.len != whole.len || memcmp(o2.data, whole.data, whole.len) != 0) {
        fail("%s: split at byte %zu changes the client bytes", what, cut);
        px_buf_free(&o2);
        break;
      }
      px_buf_free(&o2);
    }
    px_buf_t o1;
    run_stream(&ctx, s, n, 1, &o1, NULL);
    if (o1.len != whole.len || memcmp(o1.data, whole.data, whole.len) != 0)
      fail("%s: byte-at-a-time feeding changes the client bytes", what);
    px_buf_free(&o1);
    /* what the client reads */
    px_lossy_t header;
    stream_header_lossy((px_proto_t)c, up, req, &header);
    char declared[2200];
    snprintf(declared, sizeof(declared), "%s,%s", header.buf, dropped.buf);
    outcome_t oc;
    oc_init(&oc);
    if (oc_from_stream(&oc, (px_proto_t)c, (px_proto_t)c, whole.data ? whole.data : "",
                       whole.len) < 0)
      fail("%s: the client stream does not decode as %s", what, pnames[c]);
    else
      compare(what, &ou, &oc, declared, (px_proto_t)c);
    if (c == PX_PROTO_GEMINI)
      gemini_client_rules(whole.data ? whole.data : "", whole.len, &ou, what);
    /* the same response without streaming: the same outcome, and what the
     * body path declares, the stream path declares too */
    if (acc != NULL) {
      px_tr_ctx_t bctx;
      ctx_for(&bctx, (px_proto_t)c, up, 0);
      px_lossy_t bl;
      px_lossy_init(&bl);
      px_tr_err_t err;
      json_t *cb = NULL, *ir2 = NULL;
      if (px_translate_response(&bctx, acc, &cb, &bl, &err) < 0) {
        fail("%s: the accumulated body does not translate: %s", what, err.message);
      } else {
        px_tr_ctx_t cr;
        ctx_for(&cr, (px_proto_t)c, (px_proto_t)c, 0);
        px_lossy_t l2;
        px_lossy_init(&l2);
        outcome_t ob;
        oc_init(&ob);
        if (px_ref_get((px_proto_t)c)->decode_response(&cr, cb, &ir2, &l2, &err) == 0) {
          oc_from_ir(&ob, ir2);
          char w2[700];
          snprintf(w2, sizeof(w2), "%s (stream vs body)", what);
          /* same visible outcome, usage aside (a body has one final count) */
          ob.usage = oc.usage;
          compare(w2, &oc, &ob, bl.buf, (px_proto_t)c);
        }
        oc_free(&ob);
        /* every name the body path declares for the response */
        char *list = strdup(bl.buf);
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
          if (strcmp(tok, "...") == 0) continue;
          if (!lossy_has(declared, tok))
            fail("%s: the body path declares %s, the stream path does not", what, tok);
        }
        free(list);
        /* and what the stream actually dropped, the body path drops too
         * (else the body maps what the stream loses); the header's
         * prediction may name more than the answer holds */
        list = strdup(dropped.buf);
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
          if (strcmp(tok, "...") == 0) continue;
          if (!lossy_has(bl.buf, tok))
            fail("%s: the stream path drops %s, the body path does not", what, tok);
        }
        free(list);
      }
      json_decref(cb);
      json_decref(ir2);
    }
    oc_free(&oc);
    px_buf_free(&whole);
  }
  json_decref(acc);
  oc_free(&ou);
}

/* What a client of each family must read for an upstream error status
 * (SPEC 6: the type follows the status when the upstream's own type has no
 * counterpart): OpenAI type, Anthropic type, Gemini status. Written here,
 * not taken from the translators, so the test states the rule itself. */
static const struct {
  int status;
  const char *openai, *anthropic, *gemini;
} err_rule[] = {
    {400, "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT"},
    {401, "authentication_error", "authentication_error", "UNAUTHENTICATED"},
    {403, "permission_error", "permission_error", "PERMISSION_DENIED"},
    {404, "not_found_error", "not_found_error", "NOT_FOUND"},
    {413, "invalid_request_error", "request_too_large", "INVALID_ARGUMENT"},
    {429, "rate_limit_error", "rate_limit_error", "RESOURCE_EXHAUSTED"},
    {500, "api_error", "api_error", "INTERNAL"},
    {503, "api_error", "overloaded_error", "UNAVAILABLE"},
    {504, "timeout_error", "api_error", "DEADLINE_EXCEEDED"},
    {529, "api_error", "overloaded_error", "UNAVAILABLE"},
};

/* An upstream error through every other client protocol: the status is
 * kept and the client's type (Gemini: error.status, error.code = the
 * status) is the one its family has for that status. */
static void check_error(px_proto_t up, int status, const char *body, size_t n,
                        const char *name) {
  int rule = -1;
  for (size_t i = 0; i < sizeof(err_rule) / sizeof(err_rule[0]); i++)
    if (err_rule[i].status == status) rule = (int)i;
  for (int c = 0; c < PX_PROTO_COUNT; c++) {
    if (c == (int)up) continue;
    px_tr_ctx_t ctx;
    ctx_for(&ctx, (px_proto_t)c, up, 0);
    px_buf_t out;
    px_buf_init(&out, 1 << 20);
    int st = 0;
    checks++;
    if (px_translate_error(&ctx, status, body, n, NULL, &out, &st) < 0) {
      fail("%s error -> %s: not translated", name, pnames[c]);
    } else {
      json_t *j = json_loadb(out.data, out.len, 0, NULL);
      json_t *e = json_object_get(j, "error");
      const char *type = json_string_value(json_object_get(e, c == PX_PROTO_GEMINI ? "status" : "type"));
      const char *wt = rule < 0                   ? NULL
                       : c == PX_PROTO_ANTHROPIC ? err_rule[rule].anthropic
                       : c == PX_PROTO_GEMINI    ? err_rule[rule].gemini
                                                 : err_rule[rule].openai;
      if (st != status) fail("%s error -> %s: status %d became %d", name, pnames[c], status, st);
      if (j == NULL || e == NULL) fail("%s error -> %s: not an error body", name, pnames[c]);
      if (c == PX_PROTO_GEMINI && json_integer_value(json_object_get(e, "code")) != status)
        fail("%s error -> %s: error.code is not the status %d", name, pnames[c], status);
      if (wt != NULL && (type == NULL || strcmp(type, wt) != 0))
        fail("%s error -> %s: type %s, the status %d says %s", name, pnames[c],
             type ? type : "(none)", status, wt);
      json_decref(j);
    }
    px_buf_free(&out);
  }
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                  */

typedef struct req_sum {
  int turns, tool_calls, tool_results, images, files, reasoning;
  size_t text;
} req_sum_t;

static void req_summary(json_t *ir, req_sum_t *s) {
  memset(s, 0, sizeof(*s));
  size_t i, j, k;
  json_t *m, *p, *q;
  json_array_foreach(json_object_get(ir, "system"), i, p) {
    const char *t = json_string_value(json_object_get(p, "text"));
    if (t) s->text += strlen(t);
  }
  json_array_foreach(json_object_get(ir, "messages"), i, m) {
    s->turns++;
    json_array_foreach(json_object_get(m, "content"), j, p) {
      const char *t = json_string_value(json_object_get(p, "type"));
      const char *tx = json_string_value(json_object_get(p, "text"));
      if (t == NULL) continue;
      if (strcmp(t, "text") == 0 && tx) s->text += strlen(tx);
      if (strcmp(t, "image") == 0) s->images++;
      if (strcmp(t, "file") == 0) s->files++;
      if (strcmp(t, "tool_call") == 0) s->tool_calls++;
      if (strcmp(t, "reasoning") == 0) s->reasoning++;
      if (strcmp(t, "tool_result") == 0) {
        s->tool_results++;
        json_array_foreach(json_object_get(p, "content"), k, q) {
          const char *qt = json_string_value(json_object_get(q, "type"));
          const char *qx = json_string_value(json_object_get(q, "text"));
          if (qt && strcmp(qt, "text") == 0 && qx) s->text += strlen(qx);
          if (qt && strcmp(qt, "image") == 0) s->images++;
          if (qt && strcmp(qt, "file") == 0) s->files++;
        }
      }
    }
  }
}

/* rules the target APIs enforce that the translation must respect */
static void target_rules(px_proto_t t, json_t *b, const char *what) {
  if (t == PX_PROTO_ANTHROPIC) {
    json_t *th = json_object_get(b, "thinking");
    const char *tt = json_string_value(json_object_get(th, "type"));
    const char *tc = json_string_value(json_object_get(json_object_get(b, "tool_choice"), "type"));
    if (tt && strcmp(tt, "enabled") == 0 && tc && (strcmp(tc, "any") == 0 || strcmp(tc, "tool") == 0))
      fail("%s: thinking with tool_choice %s (Anthropic rejects it)", what, tc);
    if (tt && strcmp(tt, "enabled") == 0 &&
        json_integer_value(json_object_get(th, "budget_tokens")) >=
            json_integer_value(json_object_get(b, "max_tokens")))
      fail("%s: budget_tokens >= max_tokens", what);
  }
  if (t == PX_PROTO_RESPONSES) {
    size_t i, j;
    json_t *it, *p;
    json_array_foreach(json_object_get(b, "input"), i, it) {
      json_array_foreach(json_object_get(it, "content"), j, p) {
        const char *pt = json_string_value(json_object_get(p, "type"));
        if (pt && strcmp(pt, "input_file") == 0 && json_object_get(p, "file_data") &&
            !json_string_value(json_object_get(p, "filename")))
          fail("%s: input_file with file_data but no filename", what);
      }
    }
  }
  if (t == PX_PROTO_CHAT) {
    /* tool messages follow the assistant message with their calls */
    json_t *msgs = json_object_get(b, "messages");
    size_t i;
    json_t *m;
    int open = 0;
    json_array_foreach(msgs, i, m) {
      const char *r = json_string_value(json_object_get(m, "role"));
      if (r && strcmp(r, "assistant") == 0) open = json_array_size(json_object_get(m, "tool_calls")) > 0;
      else if (r && strcmp(r, "tool") == 0) {
        if (!open) fail("%s: messages[%zu] tool message without its assistant call", what, i);
      } else open = 0;
    }
  }
}

static void check_request(px_proto_t up, json_t *req, const char *name) {
  px_tr_ctx_t c0;
  ctx_for(&c0, up, up, 0);
  px_lossy_t l0;
  px_lossy_init(&l0);
  px_tr_err_t err;
  json_t *ir0 = NULL;
  if (px_ref_get(up)->decode_request(&c0, req, &ir0, &l0, &err) < 0) {
    /* server-side state (conversation, previous_response_id) only its own
     * upstream holds: a clear refusal toward the others is the answer */
    checks++;
    if (err.kind != PX_ERR_INVALID && err.kind != PX_ERR_NOT_IMPL)
      fail("%s request: does not decode as %s: %s", name, pnames[up], err.message);
    return;
  }
  req_sum_t s0;
  req_summary(ir0, &s0);
  json_decref(ir0);
  int stream = json_is_true(json_object_get(req, "stream"));
  for (int t = 0; t < PX_PROTO_COUNT; t++) {
    if (t == (int)up) continue;
    char what[600];
    snprintf(what, sizeof(what), "%s request -> %s upstream", name, pnames[t]);
    px_tr_ctx_t ctx;
    ctx_for(&ctx, up, (px_proto_t)t, stream);
    px_lossy_t lossy;
    px_lossy_init(&lossy);
    json_t *ub = NULL;
    checks++;
    px_test_census_name = what;
    if (px_test_fast_request(&ctx, req, &ub, &lossy) != 0 &&
        px_translate_request(&ctx, req, &ub, &lossy, &err) < 0) {
      /* a clear refusal (a 400 naming the field) is an answer, not a drop */
      if (err.kind != PX_ERR_INVALID && err.kind != PX_ERR_NOT_IMPL)
        fail("%s: failed with kind %d: %s", what, err.kind, err.message);
      continue;
    }
    target_rules((px_proto_t)t, ub, what);
    px_tr_ctx_t cb;
    ctx_for(&cb, (px_proto_t)t, (px_proto_t)t, stream);
    px_lossy_t l2;
    px_lossy_init(&l2);
    json_t *ir1 = NULL;
    if (px_ref_get((px_proto_t)t)->decode_request(&cb, ub, &ir1, &l2, &err) < 0) {
      fail("%s: the translated body does not decode as %s: %s", what, pnames[t], err.message);
    } else {
      req_sum_t s1;
      req_summary(ir1, &s1);
      int declared = lossy.len > 0;
      if (s1.tool_calls != s0.tool_calls)
        fail("%s: %d tool calls became %d", what, s0.tool_calls, s1.tool_calls);
      if (s1.tool_results != s0.tool_results)
        fail("%s: %d tool results became %d", what, s0.tool_results, s1.tool_results);
      if (s1.images < s0.images && !declared)
        fail("%s: %d images became %d, undeclared", what, s0.images, s1.images);
      if (s1.files < s0.files && !declared)
        fail("%s: %d files became %d, undeclared", what, s0.files, s1.files);
      if (s1.text + 64 < s0.text && !declared)
        fail("%s: text shrank from %zu to %zu bytes, undeclared", what, s0.text, s1.text);
      if (s1.reasoning < s0.reasoning && !declared)
        fail("%s: reasoning parts dropped, undeclared", what);
    }
    json_decref(ir1);
    json_decref(ub);
  }
}

/* ------------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_case(const char *dir, const char *cname) {
  for (int k = 0; k < 100; k++) {
    char pre[4200], path[4300];
    snprintf(pre, sizeof(pre), "%s/%02d-", dir, k);
    snprintf(path, sizeof(path), "%smeta.json", pre);
    json_t *meta = json_load_file(path, 0, NULL);
    if (meta == NULL) break;
    int up = proto_of(json_string_value(json_object_get(meta, "proto")));
    int status = (int)json_integer_value(json_object_get(meta, "status"));
    snprintf(cur_case, sizeof(cur_case), "%s/%02d", cname, k);
    snprintf(path, sizeof(path), "%srequest.json", pre);
    json_t *req = json_load_file(path, 0, NULL);
    if (up < 0) {
      fail("unknown protocol");
      json_decref(meta);
      json_decref(req);
      continue;
    }
    if (req != NULL) check_request((px_proto_t)up, req, cur_case);
    size_t n = 0;
    snprintf(path, sizeof(path), "%sresponse.sse", pre);
    char *sse = read_all(path, &n);
    if (sse != NULL && status == 200) {
      check_stream((px_proto_t)up, sse, n, req, cur_case);
    } else {
      snprintf(path, sizeof(path), "%sresponse.json", pre);
      char *raw = read_all(path, &n);
      if (raw != NULL && status == 200) {
        json_t *body = json_loadb(raw, n, 0, NULL);
        if (body) check_body((px_proto_t)up, body, req, cur_case);
        json_decref(body);
      } else if (raw != NULL && status >= 400) {
        check_error((px_proto_t)up, status, raw, n, cur_case);
      }
      free(raw);
    }
    free(sse);
    json_decref(req);
    json_decref(meta);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s RECORDINGS_DIR [FILTER]\n", argv[0]);
    return 2;
  }
  const char *root = argv[1], *filter = argc > 2 ? argv[2] : NULL;
  DIR *d = opendir(root);
  if (d == NULL) {
    perror(root);
    return 2;
  }
  char *names[4096];
  size_t nn = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL && nn < 4096) {
    if (de->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s/00-meta.json", root, de->d_name);
    struct stat st;
    if (stat(p, &st) == 0) names[nn++] = strdup(de->d_name);
  }
  closedir(d);
  qsort(names, nn, sizeof(names[0]), cmp_str);
  size_t ncases = 0;
  for (size_t i = 0; i < nn; i++) {
    if (filter == NULL || strstr(names[i], filter) != NULL) {
      char dir[4096];
      snprintf(dir, sizeof(dir), "%s/%s", root, names[i]);
      run_case(dir, names[i]);
      ncases++;
    }
    free(names[i]);
  }
  printf("%zu recordings, %d checks, %d failure(s)\n", ncases, checks, failures);
  px_test_fast_report();
  if (ncases == 0) return 1;
  return failures || px_test_census_missed ? 1 : 0;
}
