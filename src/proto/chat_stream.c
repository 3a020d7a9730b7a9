/* chat_stream.c - OpenAI Chat Completions streams: the chunk decoder
 * (upstream `data: {chat.completion.chunk}` ... `data: [DONE]` -> px_ev_t)
 * and the chunk encoder (px_ev_t -> client chunks).
 *
 * Decoder states (one function, dec_set(), changes them):
 *
 *   INIT --first chunk with a choice--> OPEN --finish_reason--> FINISHED
 *                                                                 |
 *        FINISHED --usage-only chunk (choices: [])--> USAGE       |
 *        FINISHED | USAGE --[DONE]--> DONE (MESSAGE_DELTA held until here
 *                                           or the usage chunk; MESSAGE_STOP)
 *   INIT | OPEN --[DONE]--> ERROR (no finish_reason: never a fabricated stop)
 *   any --{"error":..} / multi-choice / logprobs / bad order--> ERROR
 *
 * Chat streams tool calls as fragments keyed by a per-call index, and some
 * servers interleave the fragments of parallel calls. Our events need one
 * block at a time, so the first tool call streams live and everything that
 * starts while it is open (other calls, later text) is deferred, bounded by
 * ctx->max_accum, and flushed in start order when finish_reason arrives.
 *
 * Encoder states: INIT --MESSAGE_START (role chunk)--> OPEN --MESSAGE_DELTA
 * with a stop (finish chunk)--> FINISHED --MESSAGE_STOP (usage chunk when the
 * client asked, [DONE])--> DONE.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"
#include "proxai/usage.h"

#define CHAT_MAX_TOOLS 1024           /* distinct tool-call indexes per stream */
#define CHAT_DEFAULT_ACCUM (8u << 20) /* when ctx->max_accum is 0 */
#define CHAT_MAX_DEFERRED 4096        /* deferred blocks per stream */

/* ======================================================================== */
/* Decoder                                                                   */

typedef enum { D_INIT, D_OPEN, D_FINISHED, D_USAGE, D_DONE, D_ERROR } dstate_t;

typedef enum { LIVE_NONE, LIVE_TEXT, LIVE_REFUSAL, LIVE_THINKING, LIVE_TOOL } live_t;

typedef struct deferred {
  px_block_t block;
  int tool; /* chat tool index, -1 for text kinds */
  char *id; /* tool calls */
  char *name;
  int custom; /* a custom (freeform) tool call */
  px_buf_t data;
} deferred_t;

typedef struct tool_slot {
  int seen;
  int custom;   /* a custom tool call: fragments in "custom": {"input"} */
  int live;     /* this call is the live block */
  int deferred; /* index into d->defs, valid when !live */
} tool_slot_t;

struct px_sdec {
  const px_tr_ctx_t *ctx; /* the caller's, outlives the decoder */
  px_ev_sink_fn sink;
  void *arg;
  dstate_t state;
  int nblocks;    /* events' next block index */
  live_t live;    /* the open block, if any */
  int live_index; /* its event index */
  tool_slot_t *tools;
  int ntools; /* slots allocated */
  deferred_t *defs;
  int ndefs, capdefs;
  size_t accum; /* bytes deferred */
  size_t max_accum;
  px_stop_t stop;
  char finish[40];     /* the finish_reason as sent, for MESSAGE_DELTA (cut
                        * past px_answer_t's room: px_answer_set cuts it) */
  size_t finish_len;
  px_usage_t usage;    /* final usage (usage-only chunk, else finish chunk's) */
  int fast;            /* fast path on (differential tests turn it off) */
  long fast_hits;      /* chunks the fast path handled */
  px_buf_t scratch;    /* unescaped strings of the fast path, one after another */
  int64_t chars;       /* characters of delta.content read */
  int64_t text_start;  /* ... before the live text block */
  unsigned char *memo; /* the fast path's head memo (see fast_chunk) */
  size_t memo_len, memo_cap;
  uint32_t memo_seen;
};

static void dec_set(px_sdec_t *d, dstate_t s) {
  d->state = s;
}

static int emit(px_sdec_t *d, px_ev_t *ev) {
  return d->sink(d->arg, ev);
}

static int dec_error(px_sdec_t *d, px_errkind_t kind, const char *msg) {
  if (d->state == D_ERROR) return PX_EPROTO;
  dec_set(d, D_ERROR);
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_ERROR);
  ev.errkind = kind;
  ev.text = px_str(msg);
  emit(d, &ev);
  return PX_EPROTO;
}

static int proto_error(px_sdec_t *d, const char *msg) {
  char m[200];
  snprintf(m, sizeof(m), "upstream chat stream: %s", msg);
  return dec_error(d, PX_ERR_BAD_GATEWAY, m);
}

px_sdec_t *px_chat_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg) {
  px_sdec_t *d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  d->ctx = ctx;
  d->sink = sink;
  d->arg = arg;
  d->max_accum = ctx->max_accum ? ctx->max_accum : CHAT_DEFAULT_ACCUM;
  px_buf_init(&d->scratch, PX_MAX_SSE_EVENT);
  d->fast = 1;
  px_ev_t z;
  px_ev_init(&z, PX_EV_MESSAGE_DELTA);
  d->usage = z.usage;
  dec_set(d, D_INIT);
  return d;
}

/* For the differential test (fuzz/fuzz_chat_fast.c), not part of the
 * protocol table: turn the fast path on (1) or off (0), or leave it (<0);
 * returns how many chunks the fast path has handled so far. */
long px_chat_sdec_fast(px_sdec_t *d, int on) {
  if (on >= 0) d->fast = on;
  return d->fast_hits;
}

void px_chat_sdec_free(px_sdec_t *d) {
  if (d == NULL) return;
  for (int i = 0; i < d->ndefs; i++) {
    free(d->defs[i].id);
    free(d->defs[i].name);
    px_buf_free(&d->defs[i].data);
  }
  free(d->defs);
  free(d->tools);
  px_buf_free(&d->scratch);
  free(d->memo);
  free(d);
}

static void read_usage(const px_fv_t *u, px_usage_t *out) {
  static const px_fkey_t keys[] = {PX_FK("prompt_tokens"), PX_FK("completion_tokens"),
                                   PX_FK("prompt_tokens_details"),
                                   PX_FK("completion_tokens_details")};
  px_fv_t f[4];
  px_jv_fields(u, keys, 4, f);
  px_jv_int(&f[0], &out->input_tokens);
  px_jv_int(&f[1], &out->output_tokens);
  out->cache_read_tokens = px_jv_iget(&f[2], "cached_tokens", out->cache_read_tokens);
  out->reasoning_tokens = px_jv_iget(&f[3], "reasoning_tokens", out->reasoning_tokens);
}

static int block_start(px_sdec_t *d, px_block_t b, const char *id, const char *name,
                       int custom) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_BLOCK_START);
  ev.custom = custom;
  ev.index = d->nblocks++;
  ev.block = b;
  ev.id = px_str(id);
  ev.name = px_str(name);
  return emit(d, &ev);
}

static int delta(px_sdec_t *d, int index, px_delta_t k, const char *p, size_t n) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_DELTA);
  ev.index = index;
  ev.delta = k;
  ev.text = (px_str_t){p, n};
  return emit(d, &ev);
}

static int block_stop(px_sdec_t *d, int index) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_BLOCK_STOP);
  ev.index = index;
  return emit(d, &ev);
}

static int close_live(px_sdec_t *d) {
  if (d->live == LIVE_NONE) return 0;
  d->live = LIVE_NONE;
  return block_stop(d, d->live_index);
}

static px_block_t block_of(live_t l) {
  return l == LIVE_TEXT       ? PX_BLOCK_TEXT
         : l == LIVE_REFUSAL  ? PX_BLOCK_REFUSAL
         : l == LIVE_THINKING ? PX_BLOCK_THINKING
                              : PX_BLOCK_TOOL_CALL;
}

static px_delta_t delta_of(live_t l) {
  return l == LIVE_TEXT       ? PX_DELTA_TEXT
         : l == LIVE_REFUSAL  ? PX_DELTA_REFUSAL
         : l == LIVE_THINKING ? PX_DELTA_THINKING
                              : PX_DELTA_TOOL_ARGS;
}

static deferred_t *new_deferred(px_sdec_t *d, px_block_t b, int tool, const char *id,
                                const char *name) {
  if (d->ndefs >= CHAT_MAX_DEFERRED) return NULL;
  if (d->ndefs == d->capdefs) {
    int nc = d->capdefs ? d->capdefs * 2 : 4;
    deferred_t *n = realloc(d->defs, sizeof(*n) * (size_t)nc);
    if (n == NULL) return NULL;
    d->defs = n;
    d->capdefs = nc;
  }
  deferred_t *x = &d->defs[d->ndefs++];
  memset(x, 0, sizeof(*x));
  x->block = b;
  x->tool = tool;
  x->id = id ? strdup(id) : NULL;
  x->name = name ? strdup(name) : NULL;
  px_buf_init(&x->data, d->max_accum);
  return x;
}

static int defer_bytes(px_sdec_t *d, deferred_t *x, const char *p, size_t n) {
  if (d->accum + n > d->max_accum)
    return dec_error(d, PX_ERR_BAD_GATEWAY,
                     "upstream chat stream: interleaved output exceeds the buffer limit");
  d->accum += n;
  if (px_buf_append(&x->data, p, n) < 0) return dec_error(d, PX_ERR_API, "out of memory");
  return 0;
}

/* A text-like fragment (content, refusal, reasoning). */
static int text_like(px_sdec_t *d, live_t kind, const char *p, size_t n) {
  if (n == 0) return 0;
  int64_t before = d->chars;
  if (kind == LIVE_TEXT) d->chars += (int64_t)px_utf8_chars(p, n);
  if (d->live == kind && d->ndefs == 0)
    return delta(d, d->live_index, delta_of(kind), p, n);
  if (d->live == LIVE_TOOL || d->ndefs > 0) {
    deferred_t *x = d->ndefs ? &d->defs[d->ndefs - 1] : NULL;
    if (x == NULL || x->block != block_of(kind)) {
      x = new_deferred(d, block_of(kind), -1, NULL, NULL);
      if (x == NULL) return proto_error(d, "too many interleaved blocks");
    }
    return defer_bytes(d, x, p, n);
  }
  int rc = close_live(d);
  if (rc < 0) return rc;
  d->live = kind;
  d->live_index = d->nblocks;
  if (kind == LIVE_TEXT) d->text_start = before;
  rc = block_start(d, block_of(kind), NULL, NULL, 0);
  if (rc < 0) return rc;
  return delta(d, d->live_index, delta_of(kind), p, n);
}

/* delta.annotations (search models: url_citation with message-wide
 * character indexes) -> annotation events on the live text block, indexes
 * made relative to it; elsewhere they cannot be placed: dropped, named as
 * the non-streaming decoder names them. */
static int annotations(px_sdec_t *d, const px_fv_t *anns, px_arena_t *ar) {
  px_jv_it_t it, mi;
  px_fv_t a;
  px_buf_t o;
  px_buf_init(&o, PX_JV_GROWTH * (size_t)PX_MAX_SSE_EVENT);
  px_jv_iter(&it, anns);
  int rc = 0;
  while (rc == 0 && px_jv_elem(&it, &a)) {
    px_fv_t uc, tv, x;
    px_fstr_t k;
    px_jv_get(&a, "url_citation", &uc);
    px_jv_get(&a, "type", &tv);
    const char *t = px_jv_str(ar, &tv, NULL);
    if (t == NULL || strcmp(t, "url_citation") != 0 || !px_jv_is(&uc, PX_FV_OBJ) ||
        d->live != LIVE_TEXT || d->ndefs > 0) {
      px_dropped(d->ctx, "choices[].message.annotations");
      continue;
    }
    /* {"type":"url_citation"} with uc's members set on it (a "type" among
     * them keeps the first place), the indexes made relative to the block */
    px_buf_reset(&o);
    rc = px_buf_puts(&o, "{\"type\":");
    if (rc == 0)
      rc = px_jv_get(&uc, "type", &tv) ? px_fb_jdump(&o, &tv)
                                       : px_buf_puts(&o, "\"url_citation\"");
    px_jv_iter(&mi, &uc);
    while (rc == 0 && px_jv_member(&mi, &k, &x)) {
      px_fv_t kv = {.kind = PX_FV_STR, .s = k, .raw = {k.p, k.n}};
      const char *ks = px_jv_str(ar, &kv, NULL);
      if (ks == NULL) {
        rc = PX_ENOMEM;
        break;
      }
      if (strcmp(ks, "type") == 0) continue;
      int64_t v;
      rc = px_buf_puts(&o, ",");
      if (rc == 0) rc = px_buf_json_str_as(&o, ks, strlen(ks), PX_ESC_JANSSON);
      if (rc == 0) rc = px_buf_puts(&o, ":");
      if (rc == 0)
        rc = (strcmp(ks, "start_index") == 0 || strcmp(ks, "end_index") == 0) &&
                     px_jv_int(&x, &v)
                 ? px_buf_i64(&o, (long long)(v - d->text_start))
                 : px_fb_jdump(&o, &x);
    }
    if (rc == 0) rc = px_buf_puts(&o, "}");
    if (rc < 0) {
      rc = dec_error(d, PX_ERR_API, "out of memory");
      break;
    }
    rc = delta(d, d->live_index, PX_DELTA_ANNOTATION, o.data, o.len);
  }
  px_buf_free(&o);
  return rc < 0 ? rc : 0;
}

static int tool_fragment(px_sdec_t *d, const px_fv_t *tc, size_t pos, px_arena_t *ar) {
  enum { T_INDEX, T_TYPE, T_FUNCTION, T_CUSTOM, T_ID };
  static const px_fkey_t tkeys[] = {PX_FK("index"), PX_FK("type"), PX_FK("function"),
                                    PX_FK("custom"), PX_FK("id")};
  enum { F_NAME, F_INPUT, F_ARGS };
  static const px_fkey_t fkeys[] = {PX_FK("name"), PX_FK("input"), PX_FK("arguments")};
  px_fv_t t[5], f[3], fn;
  int64_t k = (int64_t)pos;
  px_jv_fields(tc, tkeys, 5, t);
  px_jv_int(&t[T_INDEX], &k);
  if (k < 0 || k >= CHAT_MAX_TOOLS) return proto_error(d, "tool call index out of range");
  const char *type = px_jv_str(ar, &t[T_TYPE], NULL);
  /* custom (freeform) tool calls: {"type":"custom","custom":{"name","input"}};
   * only a client with custom tools can hold them */
  int custom = type != NULL && strcmp(type, "custom") == 0;
  if (custom && !px_tr_in_can(d->ctx, PX_CAP_CUSTOM_TOOLS))
    return proto_error(d, "custom tool call cannot be translated");
  if (type != NULL && !custom && strcmp(type, "function") != 0)
    return proto_error(d, "tool call of a type other than function");
  fn = t[custom ? T_CUSTOM : T_FUNCTION];
  if (!custom && fn.raw.ptr == NULL && px_jv_is(&t[T_CUSTOM], PX_FV_OBJ) &&
      px_tr_in_can(d->ctx, PX_CAP_CUSTOM_TOOLS))
    fn = t[T_CUSTOM]; /* a later fragment of a custom call */
  px_jv_fields(&fn, fkeys, 3, f);
  const char *name = px_jv_str(ar, &f[F_NAME], NULL);
  const char *id = px_jv_str(ar, &t[T_ID], NULL);
  size_t alen = 0;
  const char *args = px_jv_str(ar, &f[f[F_INPUT].raw.ptr ? F_INPUT : F_ARGS], &alen);
  if (k >= d->ntools) {
    int nc = d->ntools ? d->ntools : 8;
    while (nc <= k) nc *= 2;
    tool_slot_t *t = realloc(d->tools, sizeof(*t) * (size_t)nc);
    if (t == NULL) return dec_error(d, PX_ERR_API, "out of memory");
    memset(t + d->ntools, 0, sizeof(*t) * (size_t)(nc - d->ntools));
    d->tools = t;
    d->ntools = nc;
  }
  tool_slot_t *s = &d->tools[k];
  if (!s->seen) {
    /* first fragment: carries id and name */
    if (name == NULL || *name == 0) return proto_error(d, "tool call without a name");
    if (id == NULL || *id == 0) return proto_error(d, "tool call without an id");
    s->seen = 1;
    s->custom = custom;
    if (d->live != LIVE_TOOL && d->ndefs == 0) {
      int rc = close_live(d);
      if (rc < 0) return rc;
      d->live = LIVE_TOOL;
      d->live_index = d->nblocks;
      s->live = 1;
      rc = block_start(d, PX_BLOCK_TOOL_CALL, id, name, custom);
      if (rc < 0) return rc;
    } else {
      deferred_t *x = new_deferred(d, PX_BLOCK_TOOL_CALL, (int)k, id, name);
      if (x == NULL) return proto_error(d, "too many interleaved blocks");
      x->custom = custom;
      s->deferred = d->ndefs - 1;
    }
  }
  if (alen == 0) return 0;
  if (s->live) return delta(d, d->live_index, PX_DELTA_TOOL_ARGS, args, alen);
  return defer_bytes(d, &d->defs[s->deferred], args, alen);
}

/* finish_reason: close the live block, flush deferred blocks in order. */
static int finish(px_sdec_t *d, const char *fr) {
  int rc = close_live(d);
  for (int i = 0; rc == 0 && i < d->ndefs; i++) {
    deferred_t *x = &d->defs[i];
    int index = d->nblocks;
    rc = block_start(d, x->block, x->id, x->name, x->custom);
    if (rc == 0 && x->data.len > 0) {
      px_delta_t k = x->block == PX_BLOCK_TOOL_CALL  ? PX_DELTA_TOOL_ARGS
                     : x->block == PX_BLOCK_REFUSAL  ? PX_DELTA_REFUSAL
                     : x->block == PX_BLOCK_THINKING ? PX_DELTA_THINKING
                                                     : PX_DELTA_TEXT;
      rc = delta(d, index, k, x->data.data, x->data.len);
    }
    if (rc == 0) rc = block_stop(d, index);
    px_buf_free(&x->data);
  }
  if (rc < 0) return rc;
  d->stop = px_stop_from_chat(fr);
  if (fr != NULL) {
    d->finish_len = strnlen(fr, sizeof(d->finish) - 1);
    memcpy(d->finish, fr, d->finish_len);
  }
  dec_set(d, D_FINISHED);
  return 0;
}

static int message_delta(px_sdec_t *d) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_DELTA);
  ev.stop = d->stop;
  ev.finish = (px_str_t){d->finish, d->finish_len};
  ev.usage = d->usage;
  return emit(d, &ev);
}

/* what the general path reads of a chunk (on_chunk), of its choice and
 * its delta (on_choice) */
enum { C_ERROR, C_CHOICES, C_USAGE, C_ID, C_MODEL, C_N };
static const px_fkey_t chunk_keys[] = {PX_FK("error"), PX_FK("choices"), PX_FK("usage"),
                                       PX_FK("id"), PX_FK("model")};
enum { H_INDEX, H_LOGPROBS, H_DELTA, H_FINISH, H_N };
static const px_fkey_t choice_keys[] = {PX_FK("index"), PX_FK("logprobs"), PX_FK("delta"),
                                        PX_FK("finish_reason")};
enum { L_ROLE, L_RC, L_RS, L_CONTENT, L_REFUSAL, L_TOOLS, L_ANN, L_N };
static const px_fkey_t delta_keys[] = {
    PX_FK("role"),    PX_FK("reasoning_content"), PX_FK("reasoning"),  PX_FK("content"),
    PX_FK("refusal"), PX_FK("tool_calls"),        PX_FK("annotations")};

/* c: the chunk's members (chunk_keys) */
static int on_choice(px_sdec_t *d, const px_fv_t *c, const px_fv_t *ch, px_arena_t *ar) {
  px_fv_t h[H_N], l[L_N];
  int64_t x;
  px_jv_fields(ch, choice_keys, H_N, h);
  if (h[H_INDEX].raw.ptr && (!px_jv_int(&h[H_INDEX], &x) || x != 0))
    return proto_error(d, "choice index other than 0 (n > 1 cannot be translated)");
  if (h[H_LOGPROBS].raw.ptr && !px_jv_is(&h[H_LOGPROBS], PX_FV_NULL))
    return proto_error(d, "logprobs cannot be translated");
  px_jv_fields(&h[H_DELTA], delta_keys, L_N, l);
  const char *fr = px_jv_str(ar, &h[H_FINISH], NULL);
  const char *role = px_jv_str(ar, &l[L_ROLE], NULL);
  if (role != NULL && strcmp(role, "assistant") != 0)
    return proto_error(d, "delta role other than assistant");

  size_t rl = 0, cl = 0, fl = 0;
  const char *rc_ = px_jv_str(ar, &l[L_RC], &rl);
  if (rc_ == NULL) rc_ = px_jv_str(ar, &l[L_RS], &rl); /* vLLM, OpenRouter */
  const char *content = px_jv_str(ar, &l[L_CONTENT], &cl);
  const char *refusal = px_jv_str(ar, &l[L_REFUSAL], &fl);
  const px_fv_t *tcs = &l[L_TOOLS], *u = &c[C_USAGE];
  int has_content = (rc_ != NULL && rl > 0) || (content != NULL && cl > 0) ||
                    (refusal != NULL && fl > 0) || px_jv_size(tcs) > 0;
  if (d->state == D_FINISHED || d->state == D_USAGE) {
    /* some servers repeat an empty choice after finish_reason (with usage) */
    if (has_content) return proto_error(d, "content after finish_reason");
    if (px_jv_is(u, PX_FV_OBJ) && d->state == D_FINISHED) read_usage(u, &d->usage);
    return 0;
  }
  if (d->state == D_INIT) {
    px_ev_t ev;
    px_ev_init(&ev, PX_EV_MESSAGE_START);
    ev.id = px_str(px_jv_str(ar, &c[C_ID], NULL));
    ev.model = px_str(px_jv_str(ar, &c[C_MODEL], NULL));
    dec_set(d, D_OPEN);
    int rc = emit(d, &ev);
    if (rc < 0) return rc;
  }
  int rc = 0;
  if (rc_ != NULL) rc = text_like(d, LIVE_THINKING, rc_, rl);
  if (rc == 0 && content != NULL) rc = text_like(d, LIVE_TEXT, content, cl);
  if (rc == 0 && refusal != NULL) rc = text_like(d, LIVE_REFUSAL, refusal, fl);
  if (rc == 0 && px_jv_size(&l[L_ANN]) > 0) rc = annotations(d, &l[L_ANN], ar);
  if (rc == 0 && tcs->raw.ptr != NULL && !px_jv_is(tcs, PX_FV_NULL)) {
    if (!px_jv_is(tcs, PX_FV_ARR)) return proto_error(d, "tool_calls is not an array");
    px_jv_it_t it;
    px_fv_t tc;
    size_t i = 0;
    px_jv_iter(&it, tcs);
    while (px_jv_elem(&it, &tc)) {
      rc = tool_fragment(d, &tc, i++, ar);
      if (rc < 0) return rc;
    }
  }
  if (rc < 0) return rc;
  if (fr != NULL) {
    rc = finish(d, fr);
    if (rc < 0) return rc;
    /* a server that puts the final usage on the finish chunk and sends no
     * usage-only chunk: keep it until a usage-only chunk overrides it */
    if (px_jv_is(u, PX_FV_OBJ)) read_usage(u, &d->usage);
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Fast path. Most chunks are one text / reasoning / tool-argument fragment;
 * the general path (the chunk checked whole, then each member looked up in
 * its bytes, fastir.h's checked views) walks a chunk several times. One walk of the chunk
 * with the shared validating scanner (px_fj_*, no tokens, no allocation) reads the
 * members those chunks have and checks the rest; any chunk it does not fully understand
 * or cannot prove valid (other shapes, escaped or repeated keys where it reads, bad
 * UTF-8, lone surrogates, non-integer numbers, deep nesting) goes to the general path,
 * which stays the arbiter. The fast path acts only after the whole chunk
 * has been checked, so it never half-applies a chunk. */

/* The walk is flat: one loop over the members of the chunk's five objects
 * (the chunk, choices[0], its delta, delta.tool_calls[0], its function),
 * with what each level reads known by key. A member it reads is checked
 * against what the fast path handles as it is read (anything else: the
 * general path at once); a repeated one fails (the views read the last).
 *
 * Head memo: a stream's chunks repeat the same bytes up to the delta object
 * (`{"id":..,"object":..,"created":..,"model":..,"system_fingerprint":..,
 * "choices":[{"index":0,"delta":{`). The walk's state where the delta object
 * opens is a function of the bytes before it alone, so the decoder keeps the
 * last accepted head and its state: a chunk starting with the same bytes
 * resumes the walk there, validated exactly as if walked again. */

#define CHAT_MEMO_MAX 512 /* longest head kept */

enum { LV_TOP, LV_CHOICE, LV_DELTA, LV_CALL, LV_FN, LV_USAGE, LV_PTD, LV_CTD };

/* the members read, by level; one bit each in the walk's seen mask */
enum {
  /* the chunk */
  K_CHOICES,
  K_ERROR,
  K_USAGE,
  /* choices[0] */
  K_INDEX,
  K_LOGPROBS,
  K_FINISH,
  K_DELTA,
  /* its delta */
  K_ROLE,
  K_CONTENT,
  K_RC,
  K_RS,
  K_REFUSAL,
  K_ANN,
  K_TOOLS,
  /* tool_calls[0] */
  K_TINDEX,
  K_TID,
  K_TTYPE,
  K_FUNCTION,
  /* its function */
  K_NAME,
  K_ARGS,
  K_INPUT,
  /* the chunk's id and model (read on the first chunk) */
  K_ID,
  K_MODEL,
  /* its usage object, and its two details objects */
  K_PT,
  K_CT,
  K_PTD,
  K_CTD,
  K_CACHED,
  K_REASONING,
  K_NONE
};
#define BIT(k) (1u << (k))
/* string slots: the delta's text fields and the call's arguments */
enum { S_CONTENT, S_RC, S_RS, S_REFUSAL, S_ARGS, S_ID, S_MODEL, S_FINISH, S_N };
/* integer slots: the usage counts */
enum { N_PT, N_CT, N_CACHED, N_REASONING, N_N };

static int chunk_key(int lv, const unsigned char *k, size_t l) {
#define IS(lit) (l == sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)
  switch (lv) {
    case LV_TOP:
      return IS("choices") ? K_CHOICES
             : IS("error") ? K_ERROR
             : IS("usage") ? K_USAGE
             : IS("id")    ? K_ID
             : IS("model") ? K_MODEL
                           : K_NONE;
    case LV_USAGE:
      return IS("prompt_tokens")               ? K_PT
             : IS("completion_tokens")         ? K_CT
             : IS("prompt_tokens_details")     ? K_PTD
             : IS("completion_tokens_details") ? K_CTD
                                               : K_NONE;
    case LV_PTD:
      return IS("cached_tokens") ? K_CACHED : K_NONE;
    case LV_CTD:
      return IS("reasoning_tokens") ? K_REASONING : K_NONE;
    case LV_CHOICE:
      return IS("delta")           ? K_DELTA
             : IS("index")         ? K_INDEX
             : IS("finish_reason") ? K_FINISH
             : IS("logprobs")      ? K_LOGPROBS
                                   : K_NONE;
    case LV_DELTA:
      return IS("content")             ? K_CONTENT
             : IS("role")              ? K_ROLE
             : IS("reasoning_content") ? K_RC
             : IS("reasoning")         ? K_RS
             : IS("refusal")           ? K_REFUSAL
             : IS("annotations")       ? K_ANN
             : IS("tool_calls")        ? K_TOOLS
                                       : K_NONE;
    case LV_CALL:
      return IS("index")      ? K_TINDEX
             : IS("function") ? K_FUNCTION
             : IS("id")       ? K_TID
             : IS("type")     ? K_TTYPE
                              : K_NONE;
    default:
      return IS("arguments") ? K_ARGS
             : IS("name")    ? K_NAME
             : IS("input")   ? K_INPUT
                             : K_NONE;
  }
#undef IS
}

static int is_null(const unsigned char *p, size_t n, size_t i) {
  return n - i >= 4 && memcmp(p + i, "null", 4) == 0;
}

/* `[` blanks `{` at p[*ip]: *ip past the '{' */
static int one_elem(const unsigned char *p, size_t n, size_t *ip) {
  if (p[*ip] != '[') return -1;
  size_t i = px_json_ws(p, n, *ip + 1);
  if (i >= n || p[i] != '{') return -1;
  *ip = i + 1;
  return 0;
}

static void memo_keep(px_sdec_t *d, const unsigned char *p, size_t len, uint32_t seen) {
  if (len > CHAT_MEMO_MAX) return;
  if (len > d->memo_cap) {
    unsigned char *m = realloc(d->memo, len);
    if (m == NULL) return;
    d->memo = m;
    d->memo_cap = len;
  }
  memcpy(d->memo, p, len);
  d->memo_len = len;
  d->memo_seen = seen;
}

/* The usage counts the walk read, set as read_usage sets them. */
static void fast_usage(px_sdec_t *d, const int64_t *num, unsigned nums) {
  if (nums & BIT(N_PT)) d->usage.input_tokens = num[N_PT];
  if (nums & BIT(N_CT)) d->usage.output_tokens = num[N_CT];
  if (nums & BIT(N_CACHED)) d->usage.cache_read_tokens = num[N_CACHED];
  if (nums & BIT(N_REASONING)) d->usage.reasoning_tokens = num[N_REASONING];
}

/* A string the general path hands on as a C string (px_jv_str):
 * up to its first NUL (an escaped \u0000). */
static px_str_t cstr_view(px_str_t v) {
  const char *z = memchr(v.ptr, 0, v.len);
  if (z) v.len = (size_t)(z - v.ptr);
  return v;
}

/* Returns 1 when the chunk was handled, 0 to fall back to the general path, <0 on a
 * sink error. */
static int fast_chunk(px_sdec_t *d, const char *text, size_t n) {
  if (d->state != D_INIT && d->state != D_OPEN && d->state != D_FINISHED) return 0;
  const unsigned char *p = (const unsigned char *)text;
  uint32_t seen, strs = 0; /* members read; string slots set */
  px_fj_str_t st[S_N];
  int64_t num[N_N];
  unsigned nums = 0; /* integer slots set */
  int calls = 0;     /* tool_calls is an array (its element walked) */
  int nochoice = 0;  /* choices is [] */
  int usage = 0;     /* usage is an object (walked) */
  long tk = -1;
  size_t i, kl;
  int lv, r;
  if (d->state == D_OPEN && d->memo_len > 0 && n > d->memo_len &&
      memcmp(p, d->memo, d->memo_len) == 0) {
    i = d->memo_len;
    seen = d->memo_seen;
    lv = LV_DELTA;
    goto open;
  }
  seen = 0;
  lv = LV_TOP;
  i = px_json_ws(p, n, 0);
  if (i >= n || p[i] != '{') return 0;
  i++;
open:
  /* just inside an object's '{' */
  i = px_json_ws(p, n, i);
  if (i < n && p[i] == '}') {
    i++;
    goto close;
  }
member : {
  size_t ks = i + 1;
  if (px_fj_key(p, n, &i, &kl) < 0) return 0;
  int k = chunk_key(lv, p + ks, kl);
  if (k == K_NONE) {
    if (px_fj_pass(p, n, &i, lv + 1) < 0) return 0;
    goto after;
  }
  if (seen & BIT(k)) return 0;
  seen |= BIT(k);
  int slot = -1, nslot = -1;
  switch (k) {
    case K_CHOICES:
      if (p[i] == '[') {
        size_t j = px_json_ws(p, n, i + 1);
        if (j < n && p[j] == ']') {
          nochoice = 1;
          i = j + 1;
          goto after;
        }
      }
      if (one_elem(p, n, &i) < 0) return 0;
      lv = LV_CHOICE;
      goto open;
    case K_USAGE:
      if (p[i] != '{') {
        if (!is_null(p, n, i)) return 0;
        i += 4;
        goto after;
      }
      i++;
      usage = 1;
      lv = LV_USAGE;
      goto open;
    case K_PTD:
    case K_CTD:
      if (p[i] != '{') { /* not an object: nothing read in it */
        if (px_fj_pass(p, n, &i, lv + 1) < 0) return 0;
        goto after;
      }
      i++;
      lv = k == K_PTD ? LV_PTD : LV_CTD;
      goto open;
    case K_PT:
      nslot = N_PT;
      break;
    case K_CT:
      nslot = N_CT;
      break;
    case K_CACHED:
      nslot = N_CACHED;
      break;
    case K_REASONING:
      nslot = N_REASONING;
      break;
    case K_ID:
      slot = S_ID;
      break;
    case K_MODEL:
      slot = S_MODEL;
      break;
    case K_FINISH:
      slot = S_FINISH;
      break;
    case K_DELTA:
      if (p[i] != '{') return 0;
      i++;
      lv = LV_DELTA;
      /* a head that read nothing but the id and the model (what only the
       * first chunk needs) is kept: a resumed walk reads the rest */
      if (!(strs & ~(BIT(S_ID) | BIT(S_MODEL))) && !nums && !usage)
        memo_keep(d, p, i, seen);
      goto open;
    case K_FUNCTION:
      if (p[i] != '{') return 0;
      i++;
      lv = LV_FN;
      goto open;
    case K_TOOLS:
      if (p[i] == '[') {
        if (one_elem(p, n, &i) < 0) return 0;
        calls = 1;
        lv = LV_CALL;
        goto open;
      }
      /* else only null */
      /* fall through */
    case K_ERROR:
    case K_LOGPROBS:
    case K_ANN:
    case K_TID:
    case K_TTYPE:
    case K_NAME:
      if (!is_null(p, n, i)) return 0;
      i += 4;
      goto after;
    case K_INDEX: /* 0 only */
      if (p[i] != '0' || px_fj_int_end(p, n, i) != i + 1) return 0;
      i++;
      goto after;
    case K_TINDEX: { /* a call index of at most 4 digits */
      size_t e = p[i] == '-' ? 0 : px_fj_int_end(p, n, i);
      if (e == 0 || e - i > 4) return 0;
      tk = 0;
      for (; i < e; i++) tk = tk * 10 + (p[i] - '0');
      goto after;
    }
    case K_ROLE: {
      if (is_null(p, n, i)) {
        i += 4;
        goto after;
      }
      size_t e;
      int esc;
      if (p[i] != '"' || px_json_string(p, n, i + 1, &e, &esc) < 0) return 0;
      if (e - i - 1 != 9 || memcmp(p + i + 1, "assistant", 9) != 0) return 0;
      i = e + 1;
      goto after;
    }
    case K_CONTENT:
      slot = S_CONTENT;
      break;
    case K_RC:
      slot = S_RC;
      break;
    case K_RS:
      slot = S_RS;
      break;
    case K_REFUSAL:
      slot = S_REFUSAL;
      break;
    case K_ARGS:
      slot = S_ARGS;
      break;
    default:
      return 0; /* K_INPUT: the general path decides which one it reads */
  }
  if (nslot >= 0) { /* a count: an integer, or null (not read) */
    size_t e = px_fj_int_end(p, n, i);
    if (e != 0) {
      num[nslot] = px_fj_int_value(p, i, e);
      nums |= BIT(nslot);
      i = e;
    } else if (is_null(p, n, i)) {
      i += 4;
    } else {
      return 0;
    }
    goto after;
  }
  /* a string slot: a string, or null (not for arguments) */
  if (p[i] == '"') {
    px_fj_str_t *s = &st[slot];
    s->s = i + 1;
    if (px_json_string(p, n, s->s, &s->e, &s->esc) < 0) return 0;
    strs |= BIT(slot);
    i = s->e + 1;
  } else if (slot == S_ARGS || !is_null(p, n, i)) {
    return 0;
  } else {
    i += 4;
  }
}
after:
  r = px_fj_next(p, n, &i, '}');
  if (r > 0) goto member;
  if (r < 0) return 0;
close:
  /* past an object's '}' */
  switch (lv) {
    case LV_TOP:
      break;
    case LV_USAGE:
      lv = LV_TOP;
      goto after;
    case LV_PTD:
    case LV_CTD:
      lv = LV_USAGE;
      goto after;
    case LV_FN:
      lv = LV_CALL;
      goto after;
    case LV_DELTA:
      lv = LV_CHOICE;
      goto after;
    case LV_CALL:
    case LV_CHOICE:
      /* the one element of its array */
      lv = lv == LV_CALL ? LV_DELTA : LV_TOP;
      i = px_json_ws(p, n, i);
      if (i >= n || p[i] != ']') return 0;
      i++;
      goto after;
  }
  if (px_json_ws(p, n, i) != n) return 0;
  if (!(seen & BIT(K_CHOICES))) return 0;
  if (nochoice) { /* as on_chunk: usage, or nothing (Azure's filter results) */
    if (!usage) return 1;
    if (d->state != D_FINISHED) return 0; /* the general path says why */
    fast_usage(d, num, nums);
    dec_set(d, D_USAGE);
    int rc = message_delta(d);
    return rc < 0 ? rc : 1;
  }
  /* a choice after finish_reason, or without a delta: the general path */
  if (d->state == D_FINISHED || !(seen & BIT(K_DELTA))) return 0;
  /* tool calls: only an argument fragment of a call already started */
  if (calls) {
    if (tk < 0 || tk >= d->ntools || !d->tools[tk].seen) return 0;
    if (!(seen & BIT(K_FUNCTION)) || !(strs & BIT(S_ARGS))) return 0;
  }
  /* reasoning_content when it is a string, else reasoning */
  int rs = strs & BIT(S_RC) ? S_RC : S_RS;
  if (!calls) strs &= ~BIT(S_ARGS);
  if (strs & BIT(S_RC)) strs &= ~BIT(S_RS);
  /* the escaped ones are unescaped one after another into d->scratch (never
   * longer than their raw text: room reserved once) */
  unsigned esc = 0;
  for (unsigned m = strs; m != 0; m &= m - 1) {
    int k = __builtin_ctz(m);
    if (st[k].esc) esc |= BIT(k);
  }
  if (esc != 0) {
    size_t room = 0;
    for (unsigned m = esc; m != 0; m &= m - 1) {
      int k = __builtin_ctz(m);
      room += st[k].e - st[k].s;
    }
    d->scratch.len = 0;
    if (px_buf_reserve(&d->scratch, room) < 0) return 0;
  }
  px_str_t v[S_N];
  size_t off = 0;
  for (unsigned m = strs; m != 0; m &= m - 1) {
    int k = __builtin_ctz(m);
    size_t l = st[k].e - st[k].s;
    if (!(esc & BIT(k))) {
      v[k] = (px_str_t){text + st[k].s, l};
      continue;
    }
    px_buf_t part = {d->scratch.data + off, 0, l, l};
    if (px_json_unescape(text + st[k].s, l, 1, &part, &v[k]) < 0) return 0;
    off += v[k].len;
  }
#define V(k) (strs & BIT(k) ? v[k] : PX_STR_NULL)
  px_str_t vr = V(rs), vc = V(S_CONTENT), vf = V(S_REFUSAL), va = V(S_ARGS);
#undef V
  /* checked: act exactly as on_choice would */
  int rc = 0;
  char fr[32]; /* the finish reason, as a C string */
  if (strs & BIT(S_FINISH)) {
    if (v[S_FINISH].len >= sizeof(fr) || memchr(v[S_FINISH].ptr, 0, v[S_FINISH].len))
      return 0; /* a C string would end at its NUL */
    memcpy(fr, v[S_FINISH].ptr, v[S_FINISH].len);
    fr[v[S_FINISH].len] = 0;
  }
  if (d->state == D_INIT) {
    px_ev_t ev;
    px_ev_init(&ev, PX_EV_MESSAGE_START);
    if (strs & BIT(S_ID)) ev.id = cstr_view(v[S_ID]);
    if (strs & BIT(S_MODEL)) ev.model = cstr_view(v[S_MODEL]);
    dec_set(d, D_OPEN);
    rc = emit(d, &ev);
    if (rc < 0) return rc;
  }
  if (vr.ptr) rc = text_like(d, LIVE_THINKING, vr.ptr, vr.len);
  if (rc == 0 && vc.ptr) rc = text_like(d, LIVE_TEXT, vc.ptr, vc.len);
  if (rc == 0 && vf.ptr) rc = text_like(d, LIVE_REFUSAL, vf.ptr, vf.len);
  if (rc == 0 && va.ptr && va.len > 0) {
    tool_slot_t *s = &d->tools[tk];
    rc = s->live ? delta(d, d->live_index, PX_DELTA_TOOL_ARGS, va.ptr, va.len)
                 : defer_bytes(d, &d->defs[s->deferred], va.ptr, va.len);
  }
  if (rc == 0 && (strs & BIT(S_FINISH))) {
    rc = finish(d, fr);
    /* the usage of a finish chunk, kept until a usage-only chunk's */
    if (rc == 0 && usage) fast_usage(d, num, nums);
  }
  return rc < 0 ? rc : 1;
}

static int on_chunk(px_sdec_t *d, const px_fv_t *chunk, px_arena_t *ar) {
  px_fv_t c[C_N], v;
  px_jv_fields(chunk, chunk_keys, C_N, c);
  const px_fv_t *err = &c[C_ERROR];
  if (err->raw.ptr != NULL && !px_jv_is(err, PX_FV_NULL)) {
    const char *msg = px_jv_is(err, PX_FV_STR) ? px_jv_str(ar, err, NULL)
                                               : px_jv_sget(ar, err, "message").ptr;
    const char *type = px_jv_sget(ar, err, "type").ptr;
    if (type == NULL) type = px_jv_sget(ar, err, "code").ptr;
    return dec_error(d, px_errkind_from_type(type, 0),
                     msg ? msg : "upstream stream error");
  }
  const px_fv_t *choices = &c[C_CHOICES];
  if (!px_jv_is(choices, PX_FV_ARR)) return proto_error(d, "chunk without choices");
  size_t n = px_jv_size(choices);
  if (n > 1) return proto_error(d, "multi-choice chunk (n > 1 cannot be translated)");
  if (n == 1) {
    if (d->state == D_USAGE) return proto_error(d, "choice after the usage chunk");
    px_jv_it_t it;
    px_jv_iter(&it, choices);
    px_jv_elem(&it, &v);
    return on_choice(d, c, &v, ar);
  }
  if (!px_jv_is(&c[C_USAGE], PX_FV_OBJ)) return 0; /* e.g. Azure prompt_filter_results */
  if (d->state != D_FINISHED)
    return proto_error(d, "usage-only chunk before finish_reason");
  read_usage(&c[C_USAGE], &d->usage);
  dec_set(d, D_USAGE);
  return message_delta(d);
}

/* `event: error` (some OpenAI-compatible servers): the upstream's message
 * from {"error":{"message"}}, {"message"} or the raw text. */
static int event_error(px_sdec_t *d, px_str_t data) {
  px_arena_t ar;
  px_arena_init(&ar);
  px_fv_t j, e;
  int doc = px_jv_parse(data.ptr, data.len, &j) == 0;
  px_jv_get(&j, "error", &e);
  const char *msg = px_jv_sget(&ar, &e, "message").ptr;
  if (msg == NULL) msg = px_jv_str(&ar, &e, NULL);
  if (msg == NULL) msg = px_jv_sget(&ar, &j, "message").ptr;
  const char *type = px_jv_sget(&ar, &e, "type").ptr;
  if (type == NULL) type = px_jv_sget(&ar, &j, "type").ptr;
  char raw[512];
  if (msg == NULL && !doc) {
    snprintf(raw, sizeof(raw), "%.*s", (int)(data.len < 500 ? data.len : 500), data.ptr);
    msg = raw;
  }
  int rc =
      dec_error(d, px_errkind_from_type(type, 0), msg ? msg : "upstream stream error");
  px_arena_free(&ar);
  return rc;
}

/* The general path: the chunk checked whole, then read where it lies. Out
 * of line: its arena is no weight on the fast path's frame. */
__attribute__((noinline)) static int general_chunk(px_sdec_t *d, px_str_t data) {
  px_fv_t chunk;
  if (px_jv_parse(data.ptr, data.len, &chunk) < 0)
    return proto_error(d, "malformed chunk JSON");
  if (!px_jv_is(&chunk, PX_FV_OBJ)) return proto_error(d, "chunk is not an object");
  px_arena_t ar; /* the chunk's strings, unescaped */
  px_arena_init(&ar);
  int rc = on_chunk(d, &chunk, &ar);
  px_arena_free(&ar);
  return rc;
}

int px_chat_sdec_feed(px_sdec_t *d, const struct px_sse_event *sse) {
  if (d->state == D_ERROR) return PX_EPROTO;
  if (d->state == D_DONE) return 0;
  px_str_t data = sse->data;
  /* skip leading blanks */
  while (data.len > 0 && (*data.ptr == ' ' || *data.ptr == '\t')) {
    data.ptr++;
    data.len--;
  }
  if (data.len == 0) return 0; /* keep-alive */
  if (px_str_eq(data, "[DONE]")) {
    if (d->state != D_FINISHED && d->state != D_USAGE)
      return proto_error(d, "[DONE] before finish_reason");
    int rc = 0;
    if (d->state == D_FINISHED) rc = message_delta(d);
    if (rc < 0) return rc;
    dec_set(d, D_DONE);
    px_ev_t ev;
    px_ev_init(&ev, PX_EV_MESSAGE_STOP);
    return emit(d, &ev);
  }
  if (px_str_eq(sse->event, "error")) return event_error(d, data);
  if (d->fast) {
    int frc = fast_chunk(d, data.ptr, data.len);
    if (frc != 0) {
      d->fast_hits++;
      return frc < 0 ? frc : 0;
    }
  }
  return general_chunk(d, data);
}

int px_chat_sdec_finish(px_sdec_t *d) {
  if (d->state == D_DONE) return 0;
  if (d->state == D_ERROR) return PX_EPROTO;
  return proto_error(d, "stream ended before data: [DONE]");
}

/* ======================================================================== */
/* Encoder                                                                   */

typedef enum { E_INIT, E_OPEN, E_FINISHED, E_DONE } estate_t;

typedef struct eblock {
  px_block_t block;
  int64_t shift; /* characters of content sent before this block */
  int tool;   /* chat tool index of tool blocks */
  int custom; /* a custom tool call (input, not arguments) */
} eblock_t;

struct px_senc {
  const px_tr_ctx_t *ctx; /* the caller's, outlives the encoder */
  px_buf_t *out;
  estate_t state;
  px_buf_t prefix;   /* `data: {"id":..,"object":..,"created":..,"model":..,"choices":`
                        then `[{"index":0,"delta":{` (a chunk's constant head) */
  size_t choices_at; /* prefix length up to the choices value */
  eblock_t *blocks;
  int nblocks, capblocks;
  int ntools;
  int any_content;     /* delta.content emitted */
  int any_refusal;     /* delta.refusal emitted */
  int worded;          /* refusal wording arrived (as refusal or content) */
  px_idset_t call_ids; /* tool-call ids sent (unique, non-empty) */
  int64_t chars;       /* characters of delta.content sent */
  px_usage_t usage;
};

static void enc_set(px_senc_t *e, estate_t s) {
  e->state = s;
}

px_senc_t *px_chat_senc_new(const px_tr_ctx_t *ctx, px_buf_t *out) {
  px_senc_t *e = calloc(1, sizeof(*e));
  if (e == NULL) return NULL;
  e->ctx = ctx;
  e->out = out;
  px_buf_init(&e->prefix, 4096);
  px_ev_t z;
  px_ev_init(&z, PX_EV_MESSAGE_DELTA);
  e->usage = z.usage;
  enc_set(e, E_INIT);
  return e;
}

void px_chat_senc_free(px_senc_t *e) {
  if (e == NULL) return;
  px_buf_free(&e->prefix);
  px_idset_free(&e->call_ids);
  free(e->blocks);
  free(e);
}

static int build_prefix(px_senc_t *e, px_str_t id) {
  px_buf_t *b = &e->prefix;
  int rc = px_buf_puts(b, "data: {\"id\":\"");
  size_t id_at = b->len; /* traces: the id and the model as written */
  if (rc == 0) rc = px_buf_mint_id(b, "chatcmpl-", id);
  size_t id_end = b->len;
  const char *model = e->ctx->client_model ? e->ctx->client_model : "";
  if (rc == 0)
    rc = px_buf_printf(
        b, "\",\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":",
        (long long)e->ctx->created);
  size_t model_at = b->len;
  if (rc == 0) rc = px_buf_json_str(b, model, strlen(model));
  if (rc == 0) px_answer_wrote(e->ctx->client, b, id_at, id_end, model_at, b->len, NULL);
  if (rc == 0) rc = px_buf_puts(b, ",\"choices\":");
  e->choices_at = b->len;
  if (rc == 0) rc = px_buf_puts(b, "[{\"index\":0,\"delta\":{");
  return rc;
}

/* chunk with one choice: prefix [{"index":0,"delta":{DELTA},"logprobs":null,
 * "finish_reason":FR}]} */
/* a string literal, its length known at compile time */
#define LIT(b, lit) px_buf_append((b), lit, sizeof(lit) - 1)

static int chunk_open(px_senc_t *e) {
  return px_buf_append(e->out, e->prefix.data, e->prefix.len);
}

static int chunk_close(px_senc_t *e, const char *fr) {
  if (fr == NULL) return LIT(e->out, "},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
  int rc = LIT(e->out, "},\"logprobs\":null,\"finish_reason\":");
  if (rc == 0) rc = px_buf_json_str(e->out, fr, strlen(fr));
  if (rc == 0) px_answer_wrote(e->ctx->client, e->out, 0, 0, 0, 0, fr); /* traces */
  if (rc == 0) rc = LIT(e->out, "}]}\n\n");
  return rc;
}

/* {"<field>":"<text>"} delta chunk; field_lit: the quoted key, colon and
 * opening quote. The head is written straight into the output buffer. */
static int text_chunk(px_senc_t *e, const char *field_lit, px_str_t t) {
  static const char tail[] = "\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
  px_buf_t *o = e->out;
  size_t mark = o->len, fl = strlen(field_lit);
  int rc = px_buf_reserve(o, e->prefix.len + fl);
  if (rc < 0) return rc;
  memcpy(o->data + o->len, e->prefix.data, e->prefix.len);
  memcpy(o->data + o->len + e->prefix.len, field_lit, fl);
  o->len += e->prefix.len + fl;
  rc = px_buf_json_escape(o, t.ptr ? t.ptr : "", t.len);
  if (rc == 0) rc = px_buf_append(o, tail, sizeof(tail) - 1);
  if (rc < 0) o->len = mark;
  return rc;
}

static int64_t nz(int64_t v) {
  return v < 0 ? 0 : v;
}

static eblock_t *eblock(px_senc_t *e, int index) {
  return index >= 0 && index < e->nblocks ? &e->blocks[index] : NULL;
}

static int on_block_start(px_senc_t *e, const px_ev_t *ev) {
  if (ev->index != e->nblocks) return PX_EPROTO;
  if (e->nblocks == e->capblocks) {
    int nc = e->capblocks ? e->capblocks * 2 : 8;
    eblock_t *n = realloc(e->blocks, sizeof(*n) * (size_t)nc);
    if (n == NULL) return PX_ENOMEM;
    e->blocks = n;
    e->capblocks = nc;
  }
  eblock_t *b = &e->blocks[e->nblocks++];
  b->block = ev->block;
  b->shift = e->chars;
  b->tool = -1;
  b->custom = 0;
  if (ev->block == PX_BLOCK_REDACTED_THINKING)
    px_dropped(e->ctx, px_lossy_opaque_reasoning(e->ctx, 1));
  if (ev->block != PX_BLOCK_TOOL_CALL) return 0;
  b->tool = e->ntools++;
  const char *id = px_idset_unique(&e->call_ids, ev->id, b->tool);
  if (id == NULL) return PX_ENOMEM;
  int rc = chunk_open(e);
  if (rc == 0)
    rc = LIT(e->out, "\"tool_calls\":[{\"index\":");
  if (rc == 0) rc = px_buf_i64(e->out, b->tool);
  if (rc == 0) rc = LIT(e->out, ",\"id\":");
  if (rc == 0) rc = px_buf_json_str(e->out, id, strlen(id));
  b->custom = ev->custom;
  if (rc == 0)
    rc = px_buf_puts(e->out, ev->custom
                                 ? ",\"type\":\"custom\",\"custom\":{\"name\":"
                                 : ",\"type\":\"function\",\"function\":{\"name\":");
  if (rc == 0)
    rc = px_buf_json_str(e->out, ev->name.ptr ? ev->name.ptr : "", ev->name.len);
  if (rc == 0)
    rc =
        px_buf_puts(e->out, ev->custom ? ",\"input\":\"\"}}]" : ",\"arguments\":\"\"}}]");
  if (rc == 0) rc = chunk_close(e, NULL);
  return rc;
}

/* delta.annotations, as the non-streaming message.annotations: an IR
 * url_citation with a url as {type, url_citation: its other members, the
 * indexes shifted by the content sent before the block}; others dropped */
static int annotation_chunk(px_senc_t *e, const eblock_t *b, px_str_t text) {
  px_fv_t a, tv, x;
  px_fstr_t k;
  if (text.len == 0 || px_jv_parse(text.ptr, text.len, &a) < 0 ||
      !px_jv_is(&a, PX_FV_OBJ) || !px_jv_get(&a, "type", &tv) ||
      !px_jv_is(&tv, PX_FV_STR))
    return 0;
  px_arena_t ar;
  px_arena_init(&ar);
  const char *t = px_jv_str(&ar, &tv, NULL);
  if (t == NULL || strcmp(t, "url_citation") != 0 || !px_jv_get(&a, "url", &x) ||
      !px_jv_is(&x, PX_FV_STR)) {
    px_lossy_t scratch;
    px_lossy_init(&scratch);
    px_lossy_add(e->ctx->dropped ? e->ctx->dropped : &scratch,
                 px_lossy_annotations(e->ctx));
    px_arena_free(&ar);
    return 0;
  }
  size_t mark = e->out->len;
  int rc = chunk_open(e), first = 1;
  if (rc == 0)
    rc = px_buf_puts(e->out,
                     "\"annotations\":[{\"type\":\"url_citation\",\"url_citation\":{");
  px_jv_it_t it;
  px_jv_iter(&it, &a);
  while (rc == 0 && px_jv_member(&it, &k, &x)) {
    px_fv_t kv = {.kind = PX_FV_STR, .s = k, .raw = {k.p, k.n}};
    const char *ks = px_jv_str(&ar, &kv, NULL);
    if (ks == NULL) rc = PX_ENOMEM;
    if (rc < 0 || strcmp(ks, "type") == 0) continue;
    int64_t v;
    if (!first) rc = px_buf_puts(e->out, ",");
    first = 0;
    if (rc == 0) rc = px_buf_json_str_as(e->out, ks, strlen(ks), PX_ESC_JANSSON);
    if (rc == 0) rc = px_buf_puts(e->out, ":");
    if (rc == 0)
      rc = (strcmp(ks, "start_index") == 0 || strcmp(ks, "end_index") == 0) &&
                   px_jv_int(&x, &v)
               ? px_buf_i64(e->out, (long long)(v + b->shift))
               : px_fb_jdump(e->out, &x);
  }
  if (rc == 0) rc = px_buf_puts(e->out, "}}]");
  if (rc == 0) rc = chunk_close(e, NULL);
  if (rc < 0) e->out->len = mark;
  px_arena_free(&ar);
  return rc;
}

static int on_delta(px_senc_t *e, const px_ev_t *ev) {
  eblock_t *b = eblock(e, ev->index);
  if (b == NULL) return PX_EPROTO;
  if (ev->text.len == 0) return 0;
  switch (ev->delta) {
    case PX_DELTA_TEXT:
      e->any_content = 1;
      e->chars += (int64_t)px_utf8_chars(ev->text.ptr, ev->text.len);
      return text_chunk(e, "\"content\":\"", ev->text);
    case PX_DELTA_ANNOTATION:
      return annotation_chunk(e, b, ev->text);
    case PX_DELTA_REFUSAL:
      /* seed 000: delta.refusal only before any content; after content the
       * wording stays visible as content rather than being lost */
      e->worded = 1;
      if (e->any_content) return text_chunk(e, "\"content\":\"", ev->text);
      e->any_refusal = 1;
      return text_chunk(e, "\"refusal\":\"", ev->text);
    case PX_DELTA_THINKING:
      return text_chunk(e, "\"reasoning_content\":\"", ev->text);
    case PX_DELTA_SIGNATURE:
      /* Chat has no field for thinking signatures (the non-streaming
       * encoder names the same field) */
      px_dropped(e->ctx, px_lossy_opaque_reasoning(e->ctx, 0));
      return 0;
    case PX_DELTA_TOOL_ARGS: {
      if (b->tool < 0) return PX_EPROTO;
      int rc = chunk_open(e);
      if (rc == 0) rc = LIT(e->out, "\"tool_calls\":[{\"index\":");
      if (rc == 0) rc = px_buf_i64(e->out, b->tool);
      if (rc == 0)
        rc = b->custom ? LIT(e->out, ",\"custom\":{\"input\":")
                       : LIT(e->out, ",\"function\":{\"arguments\":");
      if (rc == 0) rc = px_buf_json_str(e->out, ev->text.ptr, ev->text.len);
      if (rc == 0) rc = px_buf_puts(e->out, "}}]");
      if (rc == 0) rc = chunk_close(e, NULL);
      return rc;
    }
  }
  return 0;
}

static int on_message_delta(px_senc_t *e, const px_ev_t *ev) {
  px_usage_merge(&e->usage, &ev->usage);
  if (ev->stop == PX_STOP_NONE || e->state != E_OPEN) return 0;
  int rc = 0;
  /* a refusal with no visible wording: its explanation (Anthropic
   * stop_details, Gemini finishMessage), as the body's message.refusal */
  if (ev->refusal_explanation.len > 0 && !e->any_content && !e->any_refusal) {
    e->any_refusal = e->worded = 1;
    rc = text_chunk(e, "\"refusal\":\"", ev->refusal_explanation);
  } else if (ev->refusal_explanation.len > 0) {
    px_dropped(e->ctx, px_out_names(e->ctx)->refusal_explanation);
  }
  /* a refusal with nothing at all shown (no text, no refusal, no
   * explanation) must not read as a normal stop (chat.c does the same;
   * seed 000: text already sent words it, the finish stays stop) */
  px_stop_t st = ev->stop == PX_STOP_REFUSAL && !e->worded && !e->any_content
                     ? PX_STOP_CONTENT_FILTER
                     : ev->stop;
  if (rc == 0) rc = chunk_open(e);
  if (rc == 0) rc = chunk_close(e, px_stop_to_chat(st));
  enc_set(e, E_FINISHED);
  return rc;
}

static int on_message_stop(px_senc_t *e) {
  int rc = 0;
  if (e->ctx->client_include_usage) {
    const px_usage_t *u = &e->usage;
    rc = px_buf_append(e->out, e->prefix.data, e->choices_at);
    if (rc == 0)
      rc = px_buf_printf(
          e->out,
          "[],\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,"
          "\"total_tokens\":%lld,\"prompt_tokens_details\":{\"cached_tokens\":%lld},"
          "\"completion_tokens_details\":{\"reasoning_tokens\":%lld}}}\n\n",
          (long long)nz(u->input_tokens), (long long)nz(u->output_tokens),
          (long long)(nz(u->input_tokens) + nz(u->output_tokens)),
          (long long)nz(u->cache_read_tokens), (long long)nz(u->reasoning_tokens));
  }
  if (rc == 0) rc = px_buf_puts(e->out, "data: [DONE]\n\n");
  enc_set(e, E_DONE);
  return rc;
}

int px_chat_senc_event(px_senc_t *e, const px_ev_t *ev) {
  if (e->state == E_DONE) return 0;
  switch (ev->type) {
    case PX_EV_MESSAGE_START: {
      if (e->state != E_INIT) return PX_EPROTO;
      px_usage_merge(&e->usage, &ev->usage);
      int rc = build_prefix(e, ev->id);
      if (rc == 0) rc = chunk_open(e);
      if (rc == 0) rc = px_buf_puts(e->out, "\"role\":\"assistant\",\"content\":\"\"");
      if (rc == 0) rc = chunk_close(e, NULL);
      enc_set(e, E_OPEN);
      return rc;
    }
    case PX_EV_BLOCK_START:
      return e->state == E_OPEN ? on_block_start(e, ev) : PX_EPROTO;
    case PX_EV_DELTA:
      return e->state == E_OPEN ? on_delta(e, ev) : PX_EPROTO;
    case PX_EV_BLOCK_STOP:
      return e->state == E_INIT ? PX_EPROTO : 0;
    case PX_EV_MESSAGE_DELTA:
      return e->state == E_INIT ? PX_EPROTO : on_message_delta(e, ev);
    case PX_EV_MESSAGE_STOP:
      return e->state == E_FINISHED ? on_message_stop(e) : PX_EPROTO;
    case PX_EV_ERROR:
      /* Chat's error frame needs no stream state: declining makes the hub
       * append encode_stream_error (data: {"error":..}, no [DONE]) */
      return PX_EPROTO;
  }
  return PX_EPROTO;
}
