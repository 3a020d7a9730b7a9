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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"

/* ======================================================================== */
/* Decoder                                                                    */

/* The arguments of a call streamed in pieces (Gemini partialArgs): a small
 * tree built over the chunks, each piece set at its jsonPath, written as
 * json_dumps writes the document jansson would build the same way (an
 * object's members in their first place, a string at a path continuing the
 * one there); other scalars kept as json_dumps writes them (px_fb_jdump). */
typedef enum { PA_OBJ, PA_ARR, PA_STR, PA_ATOM } pa_kind_t;
typedef struct pa {
  pa_kind_t kind;
  px_buf_t text;    /* PA_STR: the value; PA_ATOM: its JSON */
  char **keys;      /* PA_OBJ: member names (NUL-terminated) */
  struct pa **vals; /* PA_OBJ, PA_ARR: members, elements */
  size_t n, cap;
} pa_t;

static void pa_free(pa_t *t) {
  if (t == NULL) return;
  for (size_t i = 0; i < t->n; i++) {
    if (t->keys) free(t->keys[i]);
    pa_free(t->vals[i]);
  }
  free(t->keys);
  free(t->vals);
  px_buf_free(&t->text);
  free(t);
}

static pa_t *pa_new(pa_kind_t k) {
  pa_t *t = calloc(1, sizeof(*t));
  if (t != NULL) {
    t->kind = k;
    px_buf_init(&t->text, SIZE_MAX / 2);
  }
  return t;
}

/* member `key` of object t, or element idx of array t (key NULL); NULL */
static pa_t **pa_at(pa_t *t, const char *key, size_t idx) {
  if (key == NULL) return t->kind == PA_ARR && idx < t->n ? &t->vals[idx] : NULL;
  if (t->kind != PA_OBJ) return NULL;
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->keys[i], key) == 0) return &t->vals[i];
  return NULL;
}

/* v set as member `key` of object t (in its place when there), or appended
 * to array t (key NULL); v is t's then, or freed. 0 or -1. */
static int pa_put(pa_t *t, const char *key, pa_t *v) {
  pa_t **at = key != NULL ? pa_at(t, key, 0) : NULL;
  if (at != NULL) {
    pa_free(*at);
    *at = v;
    return 0;
  }
  if (t->n == t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 4;
    pa_t **nv = realloc(t->vals, nc * sizeof(*nv));
    if (nv != NULL) t->vals = nv;
    char **nk = nv != NULL && key != NULL ? realloc(t->keys, nc * sizeof(*nk)) : NULL;
    if (nk != NULL) t->keys = nk;
    if (nv == NULL || (key != NULL && nk == NULL)) {
      pa_free(v);
      return -1;
    }
    t->cap = nc;
  }
  if (key != NULL && (t->keys[t->n] = strdup(key)) == NULL) {
    pa_free(v);
    return -1;
  }
  t->vals[t->n++] = v;
  return 0;
}

/* the tree of a checked value; NULL on memory */
static pa_t *pa_of(const px_fv_t *v, px_arena_t *ar) {
  pa_t *t = pa_new(v->kind == PX_FV_OBJ   ? PA_OBJ
                   : v->kind == PX_FV_ARR ? PA_ARR
                   : v->kind == PX_FV_STR ? PA_STR
                                          : PA_ATOM);
  if (t == NULL) return NULL;
  px_jv_it_t it;
  px_fv_t x;
  px_fstr_t k;
  px_jv_iter(&it, v);
  if (t->kind == PA_OBJ) {
    while (px_jv_member(&it, &k, &x)) {
      px_fv_t kv = {.kind = PX_FV_STR, .s = k, .raw = {k.p, k.n}};
      const char *ks = px_jv_str(ar, &kv, NULL);
      pa_t *c = ks != NULL ? pa_of(&x, ar) : NULL;
      if (c == NULL || pa_put(t, ks, c) < 0) goto fail;
    }
  } else if (t->kind == PA_ARR) {
    while (px_jv_elem(&it, &x)) {
      pa_t *c = pa_of(&x, ar);
      if (c == NULL || pa_put(t, NULL, c) < 0) goto fail;
    }
  } else if (t->kind == PA_STR) {
    size_t n = 0;
    const char *sv = px_jv_str(ar, v, &n);
    if (sv == NULL || px_buf_append(&t->text, sv, n) < 0) goto fail;
  } else if (px_fb_jdump(&t->text, v) < 0) {
    goto fail;
  }
  return t;
fail:
  pa_free(t);
  return NULL;
}

static int pa_dump(px_buf_t *b, const pa_t *t) {
  if (t->kind == PA_STR)
    return px_buf_json_str_as(b, t->text.data ? t->text.data : "", t->text.len,
                              PX_ESC_JANSSON);
  if (t->kind == PA_ATOM) return px_buf_append(b, t->text.data, t->text.len);
  int rc = px_buf_append(b, t->kind == PA_OBJ ? "{" : "[", 1);
  for (size_t i = 0; rc == 0 && i < t->n; i++) {
    if (i > 0) rc = px_buf_append(b, ",", 1);
    if (rc == 0 && t->kind == PA_OBJ)
      rc = px_buf_json_str_as(b, t->keys[i], strlen(t->keys[i]), PX_ESC_JANSSON);
    if (rc == 0 && t->kind == PA_OBJ) rc = px_buf_append(b, ":", 1);
    if (rc == 0) rc = pa_dump(b, t->vals[i]);
  }
  return rc == 0 ? px_buf_append(b, t->kind == PA_OBJ ? "}" : "]", 1) : rc;
}

struct px_sdec {
  const px_tr_ctx_t *ctx;
  px_ev_sink_fn sink;
  void *arg;
  int started, ended, failed, done;
  int open;          /* index of the open block, -1 */
  px_block_t block;  /* its kind */
  int next;          /* next block index */
  int calls;         /* function calls seen */
  int fast;          /* the fast path is on (px_gemini_sdec_fast) */
  long fast_hits;    /* chunks it handled */
  char resp_id[128];
  /* a call whose arguments stream (willContinue, Vertex): the arguments so
   * far (pa_t, built over the chunks) */
  struct pa *pargs;
  /* the run of stringValue fragments at one jsonPath not yet in pargs
   * (joined once when the run ends: no quadratic re-joining) */
  char *run_path;
  px_buf_t run;
  size_t pargs_held; /* bytes the streaming call's arguments hold (max_accum) */
  px_usage_t usage; /* an event's usage as px_ev_init leaves it */
  px_buf_t scratch; /* the fast path's unescaped text */
  struct gf_memo *memo; /* the fast path's tail memo (see fast_chunk), or NULL */
};

px_sdec_t *px_gemini_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg) {
  px_sdec_t *d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  d->ctx = ctx;
  d->sink = sink;
  d->arg = arg;
  d->open = -1;
  d->fast = 1;
  px_buf_init(&d->scratch, PX_MAX_SSE_EVENT);
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_ERROR);
  d->usage = ev.usage;
  return d;
}

void px_gemini_sdec_free(px_sdec_t *d) {
  if (d == NULL) return;
  px_buf_free(&d->scratch);
  free(d->memo);
  pa_free(d->pargs);
  free(d->run_path);
  px_buf_free(&d->run);
  free(d);
}

/* For the differential test (fuzz/fuzz_gemini_stream.c), not part of the
 * protocol table: turn the fast path on (1) or off (0), or leave it (<0);
 * returns how many chunks the fast path has handled so far. */
long px_gemini_sdec_fast(px_sdec_t *d, int on) {
  if (on >= 0) d->fast = on;
  return d->fast_hits;
}

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

/* MESSAGE_START once: rid is the responseId (PX_STR_NULL: none), u the
 * chunk's usage (NULL: no usageMetadata). */
static int sd_start(px_sdec_t *d, px_str_t rid, px_str_t model, const px_usage_t *u) {
  if (d->started) return 0;
  d->started = 1;
  if (rid.ptr == NULL) rid = px_str("gemini");
  size_t n = rid.len < sizeof(d->resp_id) - 1 ? rid.len : sizeof(d->resp_id) - 1;
  if (n) memcpy(d->resp_id, rid.ptr, n);
  d->resp_id[n] = 0;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_START);
  ev.id = px_str(d->resp_id);
  ev.model = model;
  if (u != NULL) {
    ev.usage.input_tokens = u->input_tokens;
    ev.usage.cache_read_tokens = u->cache_read_tokens;
  }
  return d->sink(d->arg, &ev);
}

/* The open call's arguments (their compact JSON text) as one TOOL_ARGS
 * delta, and its block closed. */
static int sd_call_text(px_sdec_t *d, px_str_t a) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_DELTA);
  ev.index = d->open;
  ev.delta = PX_DELTA_TOOL_ARGS;
  ev.text = a;
  int rc = d->sink(d->arg, &ev);
  if (rc == 0) rc = sd_close(d);
  return rc;
}

/* A call's args (a view of the chunk: an object, else "{}") ended. */
static int sd_call_end(px_sdec_t *d, const px_fv_t *args) {
  if (!px_jv_is(args, PX_FV_OBJ)) return sd_call_text(d, PX_STR("{}"));
  px_buf_t a;
  px_buf_init(&a, PX_JV_GROWTH * (size_t)PX_MAX_SSE_EVENT);
  int rc = px_fb_jdump(&a, args);
  if (rc == 0) rc = sd_call_text(d, (px_str_t){a.data, a.len});
  px_buf_free(&a);
  return rc < 0 ? rc : 0;
}

/* A partialArgs value v set into args at path ("$.a.b[0]"): a string
 * continues the one already at its path. 0, or -1 when the path is not
 * one; v is args' then, or freed. */
static int parg_apply(pa_t *args, const char *path, pa_t *v) {
  if (path == NULL || path[0] != '$' || v == NULL) goto fail;
  pa_t *at = args; /* the container the next step reads */
  const char *p = path + 1;
  unsigned depth = 0;
  while (*p) {
    if (++depth > PX_JSON_MAX_DEPTH) goto fail; /* as deep as any JSON read */
    char key[256];
    size_t kl = 0;
    long idx = -1;
    if (*p == '.') {
      for (p++; *p && *p != '.' && *p != '['; p++) {
        if (kl == sizeof(key) - 1) goto fail; /* never cut: two keys would meet */
        key[kl++] = *p;
      }
      if (kl == 0) goto fail;
    } else if (*p == '[') {
      char *end;
      idx = strtol(p + 1, &end, 10);
      if (end == p + 1 || *end != ']' || idx < 0 || idx > 4096) goto fail;
      /* the next element or one already there: no room made for a far index */
      if (at->kind == PA_ARR && (size_t)idx > at->n) goto fail;
      p = end + 1;
    } else {
      goto fail;
    }
    key[kl] = 0;
    const char *k = idx < 0 ? key : NULL;
    int last = *p == 0;
    pa_t **cur = pa_at(at, k, (size_t)idx), *next;
    if (last) {
      if (cur != NULL && (*cur)->kind == PA_STR && v->kind == PA_STR) {
        /* a string continues */
        int rc = px_buf_append(&(*cur)->text, v->text.data, v->text.len);
        pa_free(v);
        return rc < 0 ? -1 : 0;
      }
      next = v;
      v = NULL;
    } else if (cur != NULL && ((*cur)->kind == PA_OBJ || (*cur)->kind == PA_ARR)) {
      at = *cur;
      continue;
    } else if ((next = pa_new(*p == '[' ? PA_ARR : PA_OBJ)) == NULL) {
      goto fail;
    }
    if ((k != NULL && at->kind != PA_OBJ) || (k == NULL && at->kind != PA_ARR)) {
      pa_free(next);
      goto fail;
    }
    if (cur != NULL) { /* replaced where it stands */
      pa_free(*cur);
      *cur = next;
    } else if (pa_put(at, k, next) < 0) {
      goto fail;
    }
    at = next;
  }
  pa_free(v);
  return 0;
fail:
  pa_free(v);
  return -1;
}

/* The pending run of string fragments into pargs, joined once. */
static int sd_run_end(px_sdec_t *d) {
  if (d->run_path == NULL) return 0;
  pa_t *v = pa_new(PA_STR);
  int rc = v != NULL && px_buf_append(&v->text, d->run.data, d->run.len) == 0 ? 0 : -1;
  if (rc == 0)
    rc = parg_apply(d->pargs, d->run_path, v);
  else
    pa_free(v);
  free(d->run_path);
  d->run_path = NULL;
  d->run.len = 0;
  return rc;
}

/* The call whose arguments stream, ended: its arguments so far as one
 * delta. Also when something else arrives before its last part. */
static int sd_call_flush(px_sdec_t *d) {
  if (d->pargs == NULL) return 0;
  if (sd_run_end(d) < 0)
    return sd_fail(d, PX_ERR_BAD_GATEWAY, "upstream partialArgs with a bad jsonPath");
  d->pargs_held = 0;
  pa_t *done = d->pargs;
  d->pargs = NULL;
  px_buf_t a; /* the pieces held are within pargs_held (ctx->max_accum) */
  px_buf_init(&a, SIZE_MAX / 2);
  int rc = pa_dump(&a, done);
  pa_free(done);
  if (rc == 0) rc = sd_call_text(d, (px_str_t){a.data, a.len});
  px_buf_free(&a);
  return rc < 0 ? PX_ENOMEM : rc;
}

/* One partialArgs entry {jsonPath, stringValue | numberValue | boolValue |
 * nullValue, willContinue} into the streaming call: a string fragment at
 * the path of the run goes on the run; anything else ends the run first.
 * The arguments held stay within ctx->max_accum. 0 or -1. */
static int sd_parg(px_sdec_t *d, const px_fv_t *pa, px_arena_t *ar) {
  px_fv_t pv, v;
  px_jv_get(pa, "jsonPath", &pv);
  const char *path = px_jv_str(ar, &pv, NULL);
  int str = px_jv_get(pa, "stringValue", &v), null = 0;
  if (!str && !px_jv_get(pa, "numberValue", &v) && !px_jv_get(pa, "boolValue", &v))
    null = px_jv_get(pa, "nullValue", &v);
  if (path == NULL || path[0] != '$' || v.raw.ptr == NULL) return -1;
  size_t n = 16;
  const char *sv = str ? px_jv_str(ar, &v, &n) : NULL;
  if (sv == NULL) n = 16;
  d->pargs_held += n + strlen(path);
  if (d->ctx->max_accum > 0 && d->pargs_held > d->ctx->max_accum) return -1;
  if (sv != NULL) {
    if (d->run_path != NULL && strcmp(d->run_path, path) != 0 && sd_run_end(d) < 0)
      return -1;
    if (d->run_path == NULL) {
      if ((d->run_path = strdup(path)) == NULL) return -1;
      if (d->run.cap == 0) px_buf_init(&d->run, SIZE_MAX / 2);
    }
    return px_buf_append(&d->run, sv, n) == 0 ? 0 : -1;
  }
  if (sd_run_end(d) < 0) return -1;
  pa_t *pt = null ? pa_new(PA_ATOM) : pa_of(&v, ar);
  if (pt != NULL && null && px_buf_puts(&pt->text, "null") < 0) {
    pa_free(pt);
    pt = NULL;
  }
  return parg_apply(d->pargs, path, pt);
}

/* A part's partialArgs (and whole args) into the streaming call. */
static int sd_call_args(px_sdec_t *d, const px_fv_t *fc, px_arena_t *ar) {
  px_fv_t pas, pa, args;
  px_jv_it_t it;
  px_jv_get(fc, "partialArgs", &pas);
  px_jv_iter(&it, &pas);
  while (px_jv_is(&pas, PX_FV_ARR) && px_jv_elem(&it, &pa)) {
    if (sd_parg(d, &pa, ar) < 0)
      return sd_fail(d, PX_ERR_BAD_GATEWAY,
                     "upstream partialArgs with a bad jsonPath or over the size limit");
  }
  px_jv_get(fc, "args", &args);
  if (px_jv_is(&args, PX_FV_OBJ)) {
    if (sd_run_end(d) < 0)
      return sd_fail(d, PX_ERR_BAD_GATEWAY, "upstream partialArgs with a bad jsonPath");
    /* its members set on the arguments so far */
    px_jv_it_t it;
    px_fstr_t k;
    px_fv_t x;
    px_jv_iter(&it, &args);
    while (px_jv_member(&it, &k, &x)) {
      px_fv_t kv = {.kind = PX_FV_STR, .s = k, .raw = {k.p, k.n}};
      const char *ks = px_jv_str(ar, &kv, NULL);
      pa_t *c = ks != NULL ? pa_of(&x, ar) : NULL;
      if (c == NULL || pa_put(d->pargs, ks, c) < 0) return PX_ENOMEM;
    }
  }
  return 0;
}

/* A functionCall part. Vertex may stream one call's arguments: the part
 * naming the call says willContinue, later parts (no name) bring
 * partialArgs, and the first part without willContinue ends it. The call
 * reaches the events whole, as a non-streamed one. */
static int has(const px_fv_t *o, const char *k) {
  px_fv_t v;
  return px_jv_get(o, k, &v);
}

static int is_true(const px_fv_t *o, const char *k) {
  px_fv_t v;
  px_jv_get(o, k, &v);
  return px_jv_is(&v, PX_FV_TRUE);
}

static int sd_call(px_sdec_t *d, const px_fv_t *fc, px_arena_t *ar) {
  int more = is_true(fc, "willContinue");
  px_str_t name = px_jv_sget(ar, fc, "name");
  int rc;
  if (d->pargs == NULL || name.len > 0) {
    /* a new call (one still streaming ends here) */
    if ((rc = sd_call_flush(d)) < 0) return rc;
    char id[160];
    const char *cid = px_jv_sget(ar, fc, "id").ptr;
    if (cid == NULL) px_gemini_call_id(d->resp_id, d->calls, id, sizeof(id));
    d->calls++;
    if (name.len == 0)
      return sd_fail(d, PX_ERR_BAD_GATEWAY, "upstream functionCall without a name");
    if ((rc = sd_open(d, PX_BLOCK_TOOL_CALL, px_str(cid ? cid : id), name)) < 0) return rc;
    if (!more && !has(fc, "partialArgs")) {
      px_fv_t args;
      px_jv_get(fc, "args", &args);
      return sd_call_end(d, &args);
    }
    if ((d->pargs = pa_new(PA_OBJ)) == NULL) return PX_ENOMEM;
  }
  if ((rc = sd_call_args(d, fc, ar)) < 0) return rc;
  return more ? 0 : sd_call_flush(d);
}

static int sd_part(px_sdec_t *d, const px_fv_t *pt, int refused, px_arena_t *ar) {
  enum { P_TEXT, P_SIG, P_CALL, P_THOUGHT, P_INLINE, P_FILE, P_CODE, P_CODE_RESULT, P_N };
  static const px_fkey_t keys[] = {PX_FK("text"),           PX_FK("thoughtSignature"),
                                   PX_FK("functionCall"),   PX_FK("thought"),
                                   PX_FK("inlineData"),     PX_FK("fileData"),
                                   PX_FK("executableCode"), PX_FK("codeExecutionResult")};
  px_fv_t f[P_N];
  px_jv_fields(pt, keys, P_N, f);
  int rc = 0;
  size_t tl = 0, sl = 0;
  const char *tp = px_jv_str(ar, &f[P_TEXT], &tl), *sp = px_jv_str(ar, &f[P_SIG], &sl);
  px_str_t text = tp ? (px_str_t){tp, tl} : PX_STR_NULL;
  px_str_t sig = sp ? (px_str_t){sp, sl} : PX_STR_NULL;
  const px_fv_t *fc = &f[P_CALL];
  if (px_jv_is(fc, PX_FV_OBJ) && d->pargs != NULL && sig.len == 0 &&
      px_jv_sget(ar, fc, "name").len == 0)
    return sd_call(d, fc, ar); /* a streaming call goes on */
  if ((rc = sd_call_flush(d)) < 0) return rc;
  if (px_jv_is(&f[P_THOUGHT], PX_FV_TRUE)) {
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
  if (px_jv_is(fc, PX_FV_OBJ)) return sd_call(d, fc, ar);
  /* inline data, code execution: nothing a stream event can carry */
  if (f[P_INLINE].raw.ptr || f[P_FILE].raw.ptr)
    px_dropped(d->ctx, PX_LOSSY("candidates[].content.parts[].inlineData"));
  else if (f[P_CODE].raw.ptr || f[P_CODE_RESULT].raw.ptr)
    px_dropped(d->ctx, PX_LOSSY("candidates[].content.parts[].executableCode"));
  return 0;
}

/* Candidate members no stream event carries, named as the body decoder
 * (gemini.c) names them: bit i of `which` is cand_drops[i]. */
static const char *const cand_drops[] = {"safetyRatings", "groundingMetadata",
                                         "citationMetadata"};
static void sd_dropped(px_sdec_t *d, unsigned which) {
  static const char *const names[] = {PX_LOSSY("candidates[].safetyRatings"),
                                      PX_LOSSY("candidates[].groundingMetadata"),
                                      PX_LOSSY("candidates[].citationMetadata")};
  for (unsigned i = 0; i < 3; i++)
    if (which & (1u << i)) px_dropped(d->ctx, names[i]);
}

/* u: the chunk's usage, NULL when it has no usageMetadata */
/* word: the candidate's finishReason as sent (traces; a blocked prompt's
 * blockReason is not one) */
static int sd_finish_reason(px_sdec_t *d, const char *fr, const px_usage_t *u,
                            px_str_t explanation, px_str_t word) {
  int rc = sd_call_flush(d);
  if (rc == 0) rc = sd_close(d);
  if (rc < 0) return rc;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_DELTA);
  ev.stop = fr ? px_gemini_stop(fr, d->calls > 0) : PX_STOP_NONE;
  ev.finish = word;
  if (px_stop_refused(ev.stop)) ev.refusal_explanation = explanation;
  if (u != NULL) ev.usage = *u;
  if (fr != NULL) d->ended = 1;
  return d->sink(d->arg, &ev);
}

/* What the general path reads of a chunk and of its candidate (each in one
 * walk, px_jv_fields). */
enum { G_ERROR, G_USAGE, G_RID, G_MODEL, G_CANDS, G_FEEDBACK, G_N };
static const px_fkey_t chunk_keys[] = {PX_FK("error"),      PX_FK("usageMetadata"),
                                       PX_FK("responseId"), PX_FK("modelVersion"),
                                       PX_FK("candidates"), PX_FK("promptFeedback")};
/* the first three are cand_drops[] */
enum { CA_SAFETY, CA_GROUNDING, CA_CITATION, CA_FINISH, CA_MESSAGE, CA_CONTENT, CA_N };
static const px_fkey_t cand_keys[] = {
    PX_FK("safetyRatings"), PX_FK("groundingMetadata"), PX_FK("citationMetadata"),
    PX_FK("finishReason"),  PX_FK("finishMessage"),     PX_FK("content")};

static int sd_chunk(px_sdec_t *d, const px_fv_t *j, px_arena_t *ar) {
  static const px_fkey_t um_keys[] = {
      PX_FK("promptTokenCount"), PX_FK("candidatesTokenCount"),
      PX_FK("thoughtsTokenCount"), PX_FK("cachedContentTokenCount")};
  px_fv_t g[G_N], c[CA_N], cand, pt, x[4];
  px_jv_fields(j, chunk_keys, G_N, g);
  const px_fv_t *e = &g[G_ERROR], *fb = &g[G_FEEDBACK];
  if (px_jv_is(e, PX_FV_OBJ)) {
    const char *msg = px_jv_sget(ar, e, "message").ptr;
    return sd_fail(d, px_errkind_from_type(NULL, (int)px_jv_iget(e, "code", 500)),
                   msg ? msg : "upstream stream error");
  }
  px_usage_t u = d->usage, *up = NULL;
  if (px_jv_is(&g[G_USAGE], PX_FV_OBJ)) {
    int64_t n[4] = {-1, -1, -1, -1};
    px_jv_fields(&g[G_USAGE], um_keys, 4, x);
    for (int k = 0; k < 4; k++) px_jv_int(&x[k], &n[k]);
    px_gemini_usage_of(up = &u, n[0], n[1], n[2], n[3]);
  }
  size_t rl = 0, ml = 0;
  const char *rid = px_jv_str(ar, &g[G_RID], &rl),
             *model = px_jv_str(ar, &g[G_MODEL], &ml);
  int rc = sd_start(d, rid ? (px_str_t){rid, rl} : PX_STR_NULL,
                    model ? (px_str_t){model, ml} : PX_STR_NULL, up);
  if (rc < 0) return rc;
  px_jv_it_t it;
  px_jv_iter(&it, &g[G_CANDS]);
  if (!px_jv_is(&g[G_CANDS], PX_FV_ARR) || !px_jv_elem(&it, &cand)) cand.raw.ptr = NULL;
  px_jv_fields(&cand, cand_keys, CA_N, c);
  const char *fr = px_jv_str(ar, &c[CA_FINISH], NULL);
  const char *block = px_jv_sget(ar, fb, "blockReason").ptr;
  size_t el = 0;
  const char *em = px_jv_str(ar, &c[CA_MESSAGE], &el);
  px_str_t expl = em ? (px_str_t){em, el} : PX_STR_NULL;
  px_str_t word = px_str(fr);
  if (block != NULL && cand.raw.ptr == NULL)
    fr = block, expl = px_jv_sget(ar, fb, "blockReasonMessage"), word = PX_STR_NULL;
  if (d->ended) /* after the finish chunk: at most late usage */
    return up != NULL ? sd_finish_reason(d, NULL, up, PX_STR_NULL, PX_STR_NULL) : 0;
  int refused = fr != NULL && px_stop_refused(px_gemini_stop(fr, 0));
  unsigned drops = 0;
  for (unsigned k = 0; k < 3; k++)
    if (c[k].raw.ptr != NULL) drops |= 1u << k;
  sd_dropped(d, drops);
  px_fv_t parts;
  px_jv_get(&c[CA_CONTENT], "parts", &parts);
  px_jv_iter(&it, &parts);
  while (px_jv_is(&parts, PX_FV_ARR) && px_jv_elem(&it, &pt))
    if ((rc = sd_part(d, &pt, refused, ar)) < 0) return rc;
  if (fr != NULL) return sd_finish_reason(d, fr, up, expl, word);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Fast path. Nearly every chunk of a Gemini stream is one candidate with
 * one text part (the last one adding finishReason), plus usageMetadata,
 * modelVersion and responseId. The general path (the chunk checked whole,
 * then each member looked up in its bytes) walks a chunk several times, so
 * those chunks are read by one flat validating walk
 * (px_fj_key / px_fj_pass / px_fj_next of json.h, as the other stream
 * decoders): it accepts only what it can prove the general path accepts and
 * read the same way (strings: valid UTF-8, no raw control characters, valid
 * escapes, no \u0000, surrogate escapes only as pairs; numbers: plain
 * integers of at most 15 digits; nesting at most 32 deep), with no escaped
 * or repeated keys where fields are read. Anything else (thought parts,
 * signatures, calls, errors, promptFeedback, several candidates or parts,
 * escaped ids or finish reasons, chunks after the finish) returns "not
 * handled" and goes to the general path, which stays the arbiter. Nothing
 * is emitted before the whole chunk has been checked.
 *
 * Tail memo: a chunk that opens the usual way (`{"candidates":[{"content":
 * {"parts":[{"text":`, blanks allowed) has the walk in the same state after
 * its text whatever the text, and a stream's chunks repeat the bytes after
 * it (the rest of the candidate, usageMetadata, modelVersion, responseId),
 * but for the counts when the usage is live. So the decoder keeps the last
 * walked tail with its integers as holes and the members the walk met in
 * it: a chunk whose tail is the same bytes around valid integers (of any
 * length) is validated exactly as if walked again (the same tokens but for
 * integers, which the walk accepts the same way) and handled as that one
 * was, with its own text. What else the walk reads in a tail (the id, the
 * model, the counts, a finishReason) only the first chunk and the finish
 * use: the memo is read once the message has started, and a tail with a
 * finishReason is not kept. */

#define GF_MEMO_MAX 512 /* longest tail kept */
#define GF_HOLES 12     /* most integers in it */

typedef struct gf {
  const unsigned char *p;
  size_t n, i;
  unsigned seen; /* GF_* members read (a repeat declines) */
  px_fj_str_t text, fr, model, rid;
  int64_t um[4]; /* prompt, candidates, thoughts, cached; -1 */
} gf_t;

/* A tail: its bytes, integers at hole_at[k]..hole_end[k] (offsets in it),
 * the members the walk of its chunk met (gf_t.seen) */
typedef struct gf_memo {
  uint16_t len, cap, nholes;
  uint16_t hole_at[GF_HOLES], hole_end[GF_HOLES];
  unsigned seen;
  unsigned char tail[];
} gf_memo_t;

enum {
  GF_CANDS = 1u << 0,
  GF_USAGE = 1u << 1,
  GF_MODEL = 1u << 2,
  GF_RID = 1u << 3,
  GF_CONTENT = 1u << 4,
  GF_FR = 1u << 5,
  GF_PARTS = 1u << 6,
  GF_TEXT = 1u << 7,
  GF_UM0 = 1u << 8,   /* .. 1u << 11: the four counts */
  GF_DROP0 = 1u << 12 /* .. 1u << 14: cand_drops[] */
};
/* what the usual head reads */
#define GF_HEAD_SEEN (GF_CANDS | GF_CONTENT | GF_PARTS | GF_TEXT)

#define GF_IS(k, kl, lit) \
  ((kl) == sizeof(lit) - 1 && memcmp((k), lit, sizeof(lit) - 1) == 0)

/* Mark member bit m read; 0, or -1 when it was read before. */
static inline int gf_once(gf_t *g, unsigned m) {
  if (g->seen & m) return -1;
  g->seen |= m;
  return 0;
}

/* The container opening at g->i ('{' or '['): 1 with g->i on its first
 * member or element, 0 when it is empty (g->i past it), -1 else. */
static inline int gf_open(gf_t *g, unsigned char open, unsigned char close) {
  if (g->p[g->i] != open) return -1;
  size_t i = px_json_ws(g->p, g->n, g->i + 1);
  if (i >= g->n) return -1;
  g->i = i;
  if (g->p[i] != close) return 1;
  g->i = i + 1;
  return 0;
}

/* A string value at g->i into *s; g->i moves past it. */
static inline int gf_str(gf_t *g, px_fj_str_t *s) {
  if (g->p[g->i] != '"' || px_json_string(g->p, g->n, g->i + 1, &s->e, &s->esc) < 0)
    return -1;
  s->s = g->i + 1;
  s->set = 1;
  g->i = s->e + 1;
  return 0;
}

/* The member name at g->i: *k, *kl; g->i moves onto its value. */
static inline int gf_key(gf_t *g, const unsigned char **k, size_t *kl) {
  *k = g->p + g->i + 1;
  return px_fj_key(g->p, g->n, &g->i, kl);
}

/* The usual head of a chunk, up to the text's opening quote: with it the
 * walk starts at the text (resume), the members before it being known. */
static const char gf_head[] = "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"";
#define GF_HEAD_LEN (sizeof(gf_head) - 2) /* up to the quote */

/* The index of the text's opening quote when p[0..n) opens with the usual
 * head (blanks between its tokens, as the real API writes it, allowed),
 * else 0. */
static size_t gf_head_end(const unsigned char *p, size_t n) {
  if (n > GF_HEAD_LEN && memcmp(p, gf_head, GF_HEAD_LEN) == 0) return GF_HEAD_LEN;
  static const char *const tok[] = {
      "{", "\"candidates\"", ":", "[", "{", "\"content\"", ":",
      "{", "\"parts\"",      ":", "[", "{", "\"text\"",    ":"};
  size_t i = 0;
  for (size_t k = 0; k < sizeof(tok) / sizeof(tok[0]); k++) {
    size_t l = strlen(tok[k]);
    i = px_json_ws(p, n, i);
    if (n - i < l || memcmp(p + i, tok[k], l) != 0) return 0;
    i += l;
  }
  i = px_json_ws(p, n, i);
  return i < n && p[i] == '"' ? i : 0;
}

/* The one part: {"text":".."} and nothing else. resume: g->i past the
 * text. */
static int gf_part(gf_t *g, int resume) {
  const unsigned char *k;
  size_t kl;
  int r = 1;
  if (resume)
    r = px_fj_next(g->p, g->n, &g->i, '}');
  else if ((r = gf_open(g, '{', '}')) <= 0)
    return -1;
  for (; r > 0; r = px_fj_next(g->p, g->n, &g->i, '}')) {
    if (gf_key(g, &k, &kl) < 0 || !GF_IS(k, kl, "text") || gf_once(g, GF_TEXT) < 0 ||
        gf_str(g, &g->text) < 0)
      return -1;
  }
  return r;
}

/* content: "parts" an array of at most one part; others checked, skipped. */
static int gf_content(gf_t *g, int resume) {
  const unsigned char *k;
  size_t kl;
  int r;
  if (resume) {
    if (gf_part(g, 1) < 0 || px_fj_next(g->p, g->n, &g->i, ']') != 0) return -1;
    r = px_fj_next(g->p, g->n, &g->i, '}');
  } else {
    r = gf_open(g, '{', '}');
  }
  for (; r > 0; r = px_fj_next(g->p, g->n, &g->i, '}')) {
    if (gf_key(g, &k, &kl) < 0) return -1;
    if (!GF_IS(k, kl, "parts")) {
      if (px_fj_pass(g->p, g->n, &g->i, 4) < 0) return -1;
      continue;
    }
    if (gf_once(g, GF_PARTS) < 0) return -1;
    int a = gf_open(g, '[', ']');
    if (a < 0 ||
        (a > 0 && (gf_part(g, 0) < 0 || px_fj_next(g->p, g->n, &g->i, ']') != 0)))
      return -1;
  }
  return r;
}

/* candidates: an array of exactly one candidate object. */
static int gf_cands(gf_t *g, int resume) {
  const unsigned char *k;
  size_t kl;
  int r;
  if (resume) {
    if (gf_content(g, 1) < 0) return -1;
    r = px_fj_next(g->p, g->n, &g->i, '}');
  } else {
    if (gf_open(g, '[', ']') <= 0) return -1;
    r = gf_open(g, '{', '}');
  }
  for (; r > 0; r = px_fj_next(g->p, g->n, &g->i, '}')) {
    if (gf_key(g, &k, &kl) < 0) return -1;
    if (GF_IS(k, kl, "content")) {
      if (gf_once(g, GF_CONTENT) < 0 || gf_content(g, 0) < 0) return -1;
    } else if (GF_IS(k, kl, "finishReason")) {
      if (gf_once(g, GF_FR) < 0 || gf_str(g, &g->fr) < 0) return -1;
    } else if (GF_IS(k, kl, "finishMessage")) {
      return -1; /* a refusal's words: the general path */
    } else {
      for (unsigned c = 0; c < 3; c++)
        if (kl == strlen(cand_drops[c]) && memcmp(k, cand_drops[c], kl) == 0)
          g->seen |= GF_DROP0 << c;
      if (px_fj_pass(g->p, g->n, &g->i, 3) < 0) return -1;
    }
  }
  if (r < 0) return -1;
  return px_fj_next(g->p, g->n, &g->i, ']') == 0 ? 0 : -1;
}

/* usageMetadata: the four counts read must be proven integers. */
static int gf_usage(gf_t *g) {
  /* the four names differ in length: one compare each */
  static const char *const names[4] = {"promptTokenCount", "candidatesTokenCount",
                                       "thoughtsTokenCount", "cachedContentTokenCount"};
  const unsigned char *k;
  size_t kl;
  int r = gf_open(g, '{', '}');
  for (; r > 0; r = px_fj_next(g->p, g->n, &g->i, '}')) {
    if (gf_key(g, &k, &kl) < 0) return -1;
    int c = kl == 16 ? 0 : kl == 20 ? 1 : kl == 18 ? 2 : kl == 23 ? 3 : 4;
    if (c < 4 && memcmp(k, names[c], kl) != 0) c = 4;
    if (c == 4) {
      if (px_fj_pass(g->p, g->n, &g->i, 2) < 0) return -1;
      continue;
    }
    size_t e = px_fj_int_end(g->p, g->n, g->i);
    if (e == 0 || gf_once(g, GF_UM0 << c) < 0) return -1;
    g->um[c] = px_fj_int_value(g->p, g->i, e);
    g->i = e;
  }
  return r;
}

/* The members of the chunk from g->i: after the candidates when resumed,
 * else from its '{'. 0 when the chunk is one the fast path reads, -1 else. */
static int gf_walk(gf_t *g, int resume) {
  const unsigned char *k;
  size_t kl;
  int r = resume ? px_fj_next(g->p, g->n, &g->i, '}') : gf_open(g, '{', '}');
  for (; r > 0; r = px_fj_next(g->p, g->n, &g->i, '}')) {
    if (gf_key(g, &k, &kl) < 0) return -1;
    if (GF_IS(k, kl, "candidates")) {
      if (gf_once(g, GF_CANDS) < 0 || gf_cands(g, 0) < 0) return -1;
    } else if (GF_IS(k, kl, "usageMetadata")) {
      if (gf_once(g, GF_USAGE) < 0 || gf_usage(g) < 0) return -1;
    } else if (GF_IS(k, kl, "modelVersion")) {
      if (gf_once(g, GF_MODEL) < 0 || gf_str(g, &g->model) < 0) return -1;
    } else if (GF_IS(k, kl, "responseId")) {
      if (gf_once(g, GF_RID) < 0 || gf_str(g, &g->rid) < 0) return -1;
    } else if (GF_IS(k, kl, "error") || GF_IS(k, kl, "promptFeedback")) {
      return -1;
    } else if (px_fj_pass(g->p, g->n, &g->i, 1) < 0) {
      return -1;
    }
  }
  if (r < 0 || px_json_ws(g->p, g->n, g->i) != g->n || !(g->seen & GF_CANDS)) return -1;
  return 0;
}

/* The tail p[t..n) of a chunk walked from the usual head, kept as the
 * memo (none when it is too long, has too many integers or a
 * finishReason). */
static void gf_memo_keep(px_sdec_t *d, const gf_t *g, size_t t) {
  size_t len = g->n - t;
  gf_memo_t *m = d->memo;
  if (m != NULL) m->len = 0; /* none until complete */
  if (len > GF_MEMO_MAX || g->fr.set) return;
  if (m == NULL || m->cap < len) {
    gf_memo_t *nm = realloc(m, sizeof(*m) + len);
    if (nm == NULL) return;
    d->memo = m = nm;
    m->cap = (uint16_t)len;
    m->len = 0;
  }
  /* the integers: outside strings, a '-' or a digit opens one (the walk
   * checked every byte: strings end before n, numbers are integers) */
  const unsigned char *p = g->p + t;
  unsigned nh = 0;
  for (size_t i = 0; i < len;) {
    unsigned char c = p[i];
    if (c == '"') {
      for (i++; i < len && p[i] != '"'; i++)
        if (p[i] == '\\') i++;
      i++;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t e = px_fj_int_end(p, len, i);
      if (e == 0 || nh == GF_HOLES) return;
      m->hole_at[nh] = (uint16_t)i;
      m->hole_end[nh++] = (uint16_t)e;
      i = e;
    } else {
      i++;
    }
  }
  memcpy(m->tail, p, len);
  m->nholes = (uint16_t)nh;
  m->seen = g->seen;
  m->len = (uint16_t)len;
}

/* The chunk's tail g->p[g->i..n) against memo m: 1 when it is the memo's
 * bytes around valid integers (g->seen then what the walk meets), 0 else. */
static int gf_memo_read(const gf_memo_t *m, gf_t *g) {
  const unsigned char *p = g->p;
  size_t n = g->n, q = g->i, from = 0;
  for (unsigned k = 0;; k++) {
    size_t to = k < m->nholes ? m->hole_at[k] : m->len, sl = to - from;
    if (n - q < sl || memcmp(p + q, m->tail + from, sl) != 0) return 0;
    q += sl;
    if (k == m->nholes) break;
    if ((q = px_fj_int_end(p, n, q)) == 0) return 0;
    from = m->hole_end[k];
  }
  if (q != n) return 0;
  g->seen = m->seen;
  return 1;
}

/* Returns 1 when the chunk was handled, 0 to use the general path, <0 on a
 * sink error. */
static int fast_chunk(px_sdec_t *d, const char *data, size_t n) {
  gf_t g = {.p = (const unsigned char *)data, .n = n, .um = {-1, -1, -1, -1}};
  if (d->ended || d->pargs != NULL) return 0; /* late usage, a call streaming: rare */
  size_t h = gf_head_end(g.p, n);
  if (h > 0) { /* the text, then the tail: from the memo or walked */
    g.i = h;
    g.seen = GF_HEAD_SEEN;
    if (gf_str(&g, &g.text) < 0) return 0;
    size_t t = g.i;
    if (!d->started || d->memo == NULL || d->memo->len == 0 ||
        !gf_memo_read(d->memo, &g)) {
      if (gf_cands(&g, 1) < 0 || gf_walk(&g, 1) < 0) return 0;
      gf_memo_keep(d, &g, t);
    }
  } else {
    g.i = px_json_ws(g.p, n, 0);
    if (g.i >= n || gf_walk(&g, 0) < 0) return 0;
  }
  /* the members read, as the general path reads them */
  char fr[32];
  size_t frl = g.fr.e - g.fr.s;
  if (g.fr.set) {
    if (g.fr.esc || frl >= sizeof(fr)) return 0;
    memcpy(fr, data + g.fr.s, frl);
    fr[frl] = 0;
  }
  if (!d->started && (g.model.esc || g.rid.esc)) return 0;
  px_str_t text = PX_STR_NULL;
  if (g.text.set && px_json_unescape(data + g.text.s, g.text.e - g.text.s, g.text.esc,
                                     &d->scratch, &text) < 0)
    return 0; /* scratch too small: the general path decides */
  /* checked: from here on the chunk is handled */
  px_usage_t u = d->usage, *up = NULL;
  if (g.seen & GF_USAGE) px_gemini_usage_of(up = &u, g.um[0], g.um[1], g.um[2], g.um[3]);
  px_str_t rid = g.rid.set ? (px_str_t){data + g.rid.s, g.rid.e - g.rid.s} : PX_STR_NULL;
  px_str_t model =
      g.model.set ? (px_str_t){data + g.model.s, g.model.e - g.model.s} : PX_STR_NULL;
  int rc = sd_start(d, rid, model, up);
  sd_dropped(d, (g.seen / GF_DROP0) & 7u);
  if (rc == 0 && g.text.set)
    rc = g.fr.set && px_stop_refused(px_gemini_stop(fr, 0))
             ? sd_delta(d, PX_BLOCK_REFUSAL, PX_DELTA_REFUSAL, text)
             : sd_delta(d, PX_BLOCK_TEXT, PX_DELTA_TEXT, text);
  if (rc == 0 && g.fr.set) rc = sd_finish_reason(d, fr, up, PX_STR_NULL, px_str(fr));
  if (d->scratch.size > 1024) px_buf_free(&d->scratch); /* keep a stream small */
  return rc < 0 ? rc : 1;
}

/* The general path: the chunk checked whole, then read where it lies. Out
 * of line: its arena is no weight on the fast path's frame. */
__attribute__((noinline)) static int general_chunk(px_sdec_t *d, px_str_t data) {
  px_fv_t j;
  if (px_jv_parse(data.ptr, data.len, &j) < 0 || !px_jv_is(&j, PX_FV_OBJ))
    return sd_fail(d, PX_ERR_BAD_GATEWAY,
                   "upstream sent a chunk that is not a JSON object");
  px_arena_t ar; /* the chunk's strings, unescaped */
  px_arena_init(&ar);
  int rc = sd_chunk(d, &j, &ar);
  px_arena_free(&ar);
  return rc;
}

int px_gemini_sdec_feed(px_sdec_t *d, const struct px_sse_event *sse) {
  if (d->failed) return PX_EPROTO;
  if (d->done || sse->data.len == 0) return 0;
  if (d->fast) {
    int frc = fast_chunk(d, sse->data.ptr, sse->data.len);
    if (frc != 0) {
      d->fast_hits++;
      return frc < 0 ? frc : 0;
    }
  }
  return general_chunk(d, sse->data);
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
  int texted; /* text or refusal wording written */
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

/* `,"usageMetadata":{..}` of usage u, as the body's (gemini.c's
 * px_gemini_usage_out): thoughts counted within the output */
__attribute__((noinline)) static int put_usage(px_buf_t *o, const px_usage_t *u) {
  int64_t in = u->input_tokens > 0 ? u->input_tokens : 0;
  int64_t out = u->output_tokens > 0 ? u->output_tokens : 0;
  int64_t th = u->reasoning_tokens > 0 ? u->reasoning_tokens : 0;
  if (th > out) th = out;
  int rc = px_buf_puts(o, ",\"usageMetadata\":{\"promptTokenCount\":");
  if (rc == 0) rc = px_buf_i64(o, (long long)in);
  if (rc == 0) rc = px_buf_puts(o, ",\"candidatesTokenCount\":");
  if (rc == 0) rc = px_buf_i64(o, (long long)(out - th));
  if (rc == 0) rc = px_buf_puts(o, ",\"totalTokenCount\":");
  if (rc == 0) rc = px_buf_i64(o, (long long)(in + out));
  if (rc == 0 && th > 0) rc = px_buf_puts(o, ",\"thoughtsTokenCount\":");
  if (rc == 0 && th > 0) rc = px_buf_i64(o, (long long)th);
  if (rc == 0 && u->cache_read_tokens > 0)
    rc = px_buf_puts(o, ",\"cachedContentTokenCount\":");
  if (rc == 0 && u->cache_read_tokens > 0)
    rc = px_buf_i64(o, (long long)u->cache_read_tokens);
  if (rc == 0) rc = px_buf_puts(o, "}");
  return rc;
}

/* End a chunk: `"index":0}],"modelVersion":..,"responseId":..}` + usage. */
static int chunk_close(px_senc_t *e, const px_usage_t *u) {
  const char *model = e->ctx->client_model ? e->ctx->client_model : "";
  int rc = px_buf_append(e->out, "\"index\":0}]", 11);
  if (rc == 0 && u != NULL) rc = put_usage(e->out, u);
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

/* The held call whole: its arguments (Gemini's args is an object) checked
 * to be one JSON object and written as json_dumps writes it. */
static int call_chunk(px_senc_t *e) {
  px_fv_t args;
  if (e->args.len > 0 &&
      (px_jv_parse(e->args.data, e->args.len, &args) < 0 || !px_jv_is(&args, PX_FV_OBJ)))
    return PX_EPROTO; /* the hub ends the stream with an error */
  size_t mark = e->out->len;
  int rc = chunk_open(e);
  if (rc == 0) rc = w(e, "\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"id\":");
  if (rc == 0) rc = px_buf_json_str(e->out, e->tool_id, strlen(e->tool_id));
  if (rc == 0) rc = w(e, ",\"name\":");
  if (rc == 0) rc = px_buf_json_str(e->out, e->tool_name, strlen(e->tool_name));
  if (rc == 0) rc = w(e, ",\"args\":");
  if (rc == 0) rc = e->args.len > 0 ? px_fb_jdump(e->out, &args) : w(e, "{}");
  if (rc == 0) rc = w(e, "}");
  if (rc == 0) rc = put_sig(e);
  if (rc == 0) rc = w(e, "}]},");
  if (rc == 0) rc = chunk_close(e, NULL);
  if (rc < 0) e->out->len = mark;
  return rc;
}

static int se_delta(px_senc_t *e, const px_ev_t *ev) {
  switch (ev->delta) {
  case PX_DELTA_TEXT:
  case PX_DELTA_REFUSAL:
    if (ev->text.len) e->texted = 1;
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

/* The finish chunk. As the real API's, it always has content (LangChain's
 * client drops a chunk without, usage and finishReason with it): a pending
 * signature on an empty part, a refusal's explanation when nothing else
 * worded it (SPEC 11: a refusal is SAFETY, its words a text part and the
 * finishMessage), else the role alone, as Gemini sends after calls. */
static int se_finish(px_senc_t *e, const px_ev_t *ev) {
  px_stop_t st = ev->stop == PX_STOP_NONE ? PX_STOP_NONE
                 : e->refusal             ? PX_STOP_REFUSAL
                                          : ev->stop;
  const char *fr = px_gemini_finish(st);
  px_str_t expl = px_stop_refused(st) ? ev->refusal_explanation : PX_STR_NULL;
  int rc = chunk_open(e);
  int worded = e->texted || e->refusal;
  if (rc == 0 && (e->sig.len || (expl.len && !worded))) {
    rc = w(e, "\"content\":{\"role\":\"model\",\"parts\":[{\"text\":");
    if (rc == 0)
      rc = px_buf_json_str(e->out,
                           worded     ? ""
                           : expl.ptr ? expl.ptr
                                      : "",
                           worded ? 0 : expl.len);
    if (rc == 0) rc = put_sig(e);
    if (rc == 0) rc = w(e, "}]},");
  } else if (rc == 0) {
    rc = w(e, "\"content\":{\"role\":\"model\"},");
  }
  if (rc == 0 && fr != NULL) {
    rc = w(e, "\"finishReason\":\"");
    if (rc == 0) rc = w(e, fr);
    if (rc == 0) rc = w(e, "\",");
  }
  if (rc == 0 && expl.len) {
    rc = w(e, "\"finishMessage\":");
    if (rc == 0) rc = px_buf_json_str(e->out, expl.ptr, expl.len);
    if (rc == 0) rc = w(e, ",");
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
