/* gemini_fast.c - the fast codec of Gemini generateContent bodies
 * (include/proxai/fastir.h): the common shape of a request (system
 * instruction, user and model turns of text, function calls and function
 * responses, function declarations, tool config, the sampling part of
 * generationConfig) and of a response (one candidate: text and function
 * calls, usageMetadata), without a jansson document. Anything else
 * (thoughts and thought signatures, blobs, thinkingConfig, JSON output,
 * promptFeedback, refusals, ...) declines to gemini.c, the reference: every
 * rule here is that codec's rule for the same shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/protoutil.h"

#define DECLINE PX_FAST_DECLINE
#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define HAS(x) (seen & (1u << (x)))
#define SCHEMA_DEPTH 64

/* an arena copy of "<prefix><n>" or "<prefix><mid>_<n>" (plain ASCII) */
static int mint_id(px_arena_t *a, const char *prefix, px_fstr_t mid, int n,
                   px_fstr_t *out) {
  size_t pl = strlen(prefix);
  char *s = px_arena_alloc(a, pl + mid.n + 24);
  if (s == NULL) return DECLINE;
  memcpy(s, prefix, pl);
  size_t k = pl;
  if (mid.p != NULL) {
    if (mid.n) memcpy(s + k, mid.p, mid.n);
    k += mid.n;
    s[k++] = '_';
  }
  k += (size_t)snprintf(s + k, 24, "%d", n);
  *out = (px_fstr_t){s, k, 0};
  return 0;
}

static int fs_eq(px_fstr_t x, px_fstr_t y) {
  return x.n == y.n && (x.n == 0 || memcmp(x.p, y.p, x.n) == 0);
}

/* ======================================================================== */
/* Request decode                                                            */

/* A schema with every "type" string lower-cased, as schema_lower in
 * gemini.c: the raw text is copied once and its type names patched in
 * place (same length). Property names are not schemas: a string directly
 * in "properties" would be kept there, and declines here. */
static int lower_types(const px_fv_t *v, char *copy, const char *base, int in_props,
                       int depth) {
  if (depth > SCHEMA_DEPTH) return DECLINE;
  if (v->kind != PX_FV_OBJ && v->kind != PX_FV_ARR) return 0;
  px_fw_t w = {v->raw.ptr, v->raw.len, 0};
  int r;
  if (v->kind == PX_FV_ARR) {
    if (px_fw_open(&w, '[') < 0) return DECLINE;
    while ((r = px_fw_elem(&w)) == 1) {
      px_fv_t x;
      if (px_fw_value(&w, &x) < 0 || lower_types(&x, copy, base, 0, depth + 1) != 0)
        return DECLINE;
    }
    return r < 0 ? DECLINE : 0;
  }
  px_fstr_t k;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    px_fv_t x;
    if (k.esc || px_fw_value(&w, &x) < 0) return DECLINE;
    if (in_props) {
      if (x.kind == PX_FV_STR) return DECLINE;
      if (lower_types(&x, copy, base, 0, depth + 1) != 0) return DECLINE;
      continue;
    }
    if (x.kind == PX_FV_STR && k.n == 4 && memcmp(k.p, "type", 4) == 0) {
      /* snprintf into char[32] there: longer names are cut */
      if (x.s.esc || x.s.n >= 32) return DECLINE;
      char *t = copy + (x.s.p - base);
      for (size_t i = 0; i < x.s.n; i++)
        if (t[i] >= 'A' && t[i] <= 'Z') t[i] = (char)(t[i] - 'A' + 'a');
      continue;
    }
    int props = x.kind == PX_FV_OBJ && k.n == 10 && memcmp(k.p, "properties", 10) == 0;
    if (lower_types(&x, copy, base, props, depth + 1) != 0) return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

static int schema_lower(const px_fv_t *v, px_arena_t *a, px_str_t *out) {
  if (v->kind != PX_FV_OBJ) return DECLINE;
  char *copy = px_arena_alloc(a, v->raw.len + 1);
  if (copy == NULL) return DECLINE;
  memcpy(copy, v->raw.ptr, v->raw.len);
  if (lower_types(v, copy, v->raw.ptr, 0, 0) != 0) return DECLINE;
  *out = (px_str_t){copy, v->raw.len};
  return 0;
}

/* systemInstruction: {parts: [{text}, ...]}, read in place */
static int decode_system(px_fw_t *w, px_freq_t *ir, px_arena_t *a) {
  px_fstr_t k;
  px_fv_t v;
  int r, nparts = 0;
  if (px_fw_peek(w) != PX_FV_OBJ || px_fw_open(w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    if (k.esc) return DECLINE;
    if (!px_fs_is(k, "parts")) {
      if (px_fw_value(w, &v) < 0) return DECLINE;
      continue;
    }
    /* repeated: the last there */
    if (nparts++ || px_fw_peek(w) != PX_FV_ARR || px_fw_open(w, '[') < 0) return DECLINE;
    int rp;
    while ((rp = px_fw_elem(w)) == 1) {
      static const char *const pkeys[] = {"text"};
      px_fv_t g[1];
      unsigned gs = 0;
      if (px_fw_peek(w) != PX_FV_OBJ || px_fw_fields(w, pkeys, 1, g, &gs) != 0 || !gs ||
          g[0].kind != PX_FV_STR)
        return DECLINE;
      px_fpart_t *p = px_fpart_text(a, g[0].s);
      if (p == NULL) return DECLINE;
      px_fpart_push(&ir->system, &ir->system_last, p);
    }
    if (rp < 0) return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

/* The calls of the conversation not answered yet, in order: a function
 * response takes the id of the earliest open call of its name. */
typedef struct open_call {
  struct open_call *next;
  const px_fpart_t *call;
} open_call_t;

typedef struct calls {
  open_call_t *open;
  int n; /* calls seen */
} calls_t;

/* functionResponse.response -> the tool result's text: a lone "output" or
 * "content" string is the text itself, anything else its compact JSON */
static int response_text(const px_fv_t *resp, px_fpart_t *res, px_arena_t *a) {
  px_fstr_t text;
  if (resp == NULL) {
    text = (px_fstr_t){"null", 4, 0};
  } else {
    int lone = 0;
    if (resp->kind == PX_FV_OBJ) {
      px_fw_t w = {resp->raw.ptr, resp->raw.len, 0};
      px_fstr_t k;
      px_fstr_t k0 = {0};
      px_fv_t x, one = {0};
      int r, n = 0, same = 1;
      if (px_fw_open(&w, '{') < 0) return DECLINE;
      while ((r = px_fw_member(&w, &k)) == 1) {
        if (k.esc || px_fw_value(&w, &x) < 0) return DECLINE;
        if (n++ == 0)
          k0 = k, lone = px_fs_is(k, "output") || px_fs_is(k, "content");
        else
          same &= fs_eq(k, k0);
        one = x; /* jansson keeps the last of repeated members */
      }
      if (r < 0) return DECLINE;
      if (n > 1 && same) return DECLINE; /* one member there, repeated */
      if (n != 1 || one.kind != PX_FV_STR) lone = 0;
      if (lone) text = one.s;
    }
    if (!lone && px_fast_dump_value(a, resp->raw, &text) != 0) return DECLINE;
  }
  px_fpart_t *t = px_fpart_text(a, text);
  if (t == NULL) return DECLINE;
  res->content = t;
  return 0;
}

enum { P_TEXT, P_THOUGHT, P_SIG, P_FC, P_FR, P_INLINE, P_FILE, P_EXEC, P_EXECR };
static const char *const part_keys[] = {
    "text",         "thought",          "thoughtSignature",
    "functionCall", "functionResponse", "inlineData",
    "fileData",     "executableCode",   "codeExecutionResult"};

static int decode_part(px_fw_t *w, px_fmsg_t *m, calls_t *calls, px_arena_t *a) {
  px_fv_t f[NKEYS(part_keys)];
  unsigned seen = 0;
  if (px_fw_peek(w) != PX_FV_OBJ ||
      px_fw_fields(w, part_keys, NKEYS(part_keys), f, &seen) != 0)
    return DECLINE;
  /* thoughts and signatures become reasoning parts: the jansson codec */
  if (HAS(P_SIG) || (HAS(P_THOUGHT) && f[P_THOUGHT].kind == PX_FV_TRUE)) return DECLINE;
  if (HAS(P_TEXT)) {
    if (f[P_TEXT].kind != PX_FV_STR) return DECLINE;
    px_fpart_t *p = px_fpart_text(a, f[P_TEXT].s);
    if (p == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, p);
    return 0;
  }
  if (HAS(P_INLINE) || HAS(P_FILE)) return DECLINE; /* blobs */
  if (HAS(P_FC)) {
    static const char *const keys[] = {"name", "args", "id"};
    px_fv_t g[3];
    unsigned gs = 0;
    if (f[P_FC].kind != PX_FV_OBJ || px_fv_fields(&f[P_FC], keys, 3, g, &gs) != 0 ||
        !(gs & 1) || g[0].kind != PX_FV_STR || g[0].s.esc)
      return DECLINE;
    px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
    open_call_t *o = px_arena_alloc(a, sizeof(*o));
    if (p == NULL || o == NULL) return DECLINE;
    p->name = g[0].s;
    calls->n++;
    if ((gs & 4) && g[2].kind == PX_FV_STR && g[2].s.n > 0) {
      if (g[2].s.esc) return DECLINE;
      p->id = g[2].s;
    } else if (mint_id(a, "call_", (px_fstr_t){0}, calls->n, &p->id) != 0) {
      return DECLINE;
    }
    if ((gs & 2) && g[1].kind == PX_FV_OBJ) {
      if (px_fast_dump_value(a, g[1].raw, &p->args) != 0) return DECLINE;
      p->input = g[1].raw;
    } else {
      p->args = (px_fstr_t){"{}", 2, 0};
      p->input = (px_str_t){"{}", 2};
    }
    o->call = p;
    open_call_t **tail = &calls->open;
    while (*tail) tail = &(*tail)->next;
    *tail = o;
    px_fpart_push(&m->parts, &m->last, p);
    return 0;
  }
  if (HAS(P_FR)) {
    static const char *const keys[] = {"name", "id", "response"};
    px_fv_t g[3];
    unsigned gs = 0;
    if (f[P_FR].kind != PX_FV_OBJ || px_fv_fields(&f[P_FR], keys, 3, g, &gs) != 0)
      return DECLINE;
    px_fstr_t name = (gs & 1) && g[0].kind == PX_FV_STR ? g[0].s : (px_fstr_t){"", 0, 0};
    int by_id = (gs & 2) && g[1].kind == PX_FV_STR && g[1].s.n > 0;
    if (name.esc || (by_id && g[1].s.esc)) return DECLINE;
    px_fpart_t *res = px_fpart_new(a, PX_FP_TOOL_RESULT);
    if (res == NULL) return DECLINE;
    open_call_t **pp = &calls->open;
    while (*pp &&
           !(by_id ? fs_eq((*pp)->call->id, g[1].s) : fs_eq((*pp)->call->name, name)))
      pp = &(*pp)->next;
    if (*pp) {
      res->id = (*pp)->call->id;
      *pp = (*pp)->next;
    } else if (by_id) {
      res->id = g[1].s;
    } else {
      return DECLINE; /* answers no call: an error there */
    }
    if (response_text((gs & 4) ? &g[2] : NULL, res, a) != 0) return DECLINE;
    px_fpart_push(&m->parts, &m->last, res);
    return 0;
  }
  return DECLINE; /* code execution (lossy), signature-only, unsupported */
}

/* contents, each turn read in place: its role may follow its parts, so
 * the parts are checked against it when the turn is over (calls belong to
 * model turns, function responses to user turns) */
static int decode_contents(px_fw_t *w, px_freq_t *ir, px_arena_t *a) {
  calls_t calls = {NULL, 0};
  int r;
  if (px_fw_peek(w) != PX_FV_ARR || px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(w)) == 1) {
    px_fstr_t k;
    px_fv_t v;
    int rk, model = 0;
    unsigned seen = 0;
    px_fmsg_t *m = px_fmsg_push(ir, a, 0);
    if (m == NULL || px_fw_peek(w) != PX_FV_OBJ || px_fw_open(w, '{') < 0) return DECLINE;
    while ((rk = px_fw_member(w, &k)) == 1) {
      if (k.esc) return DECLINE;
      if (px_fs_is(k, "parts")) {
        if (px_fw_seen_twice(&seen, 1) || px_fw_peek(w) != PX_FV_ARR ||
            px_fw_open(w, '[') < 0)
          return DECLINE;
        int rp;
        while ((rp = px_fw_elem(w)) == 1)
          if (decode_part(w, m, &calls, a) != 0) return DECLINE;
        if (rp < 0) return DECLINE;
        continue;
      }
      if (px_fw_value(w, &v) < 0) return DECLINE;
      if (!px_fs_is(k, "role")) continue;
      if (px_fw_seen_twice(&seen, 0)) return DECLINE;
      if (v.kind != PX_FV_STR) continue; /* no role: user there */
      if (px_fs_is(v.s, "model"))
        model = 1;
      else if (!px_fs_is(v.s, "user"))
        return DECLINE;
    }
    if (rk < 0 || !HAS(1) || m->parts == NULL)
      return DECLINE; /* an empty turn: jansson */
    m->assistant = model;
    for (const px_fpart_t *p = m->parts; p; p = p->next)
      if ((p->type == PX_FP_TOOL_CALL && !model) ||
          (p->type == PX_FP_TOOL_RESULT && model))
        return DECLINE; /* an error there */
  }
  return r < 0 ? DECLINE : 0;
}

static int decode_tools(px_fw_t *wp, px_freq_t *ir, px_arena_t *a) {
  px_fw_t w = *wp;
  int r;
  if (px_fw_peek(&w) != PX_FV_ARR || px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    px_fstr_t k;
    int rk, ndecl = 0;
    if (px_fw_peek(&w) != PX_FV_OBJ || px_fw_open(&w, '{') < 0) return DECLINE;
    while ((rk = px_fw_member(&w, &k)) == 1) {
      /* other tools (googleSearch, codeExecution ...) are lossy there; a
       * repeated member is read once there */
      if (!px_fs_is(k, "functionDeclarations") || ndecl++ ||
          px_fw_peek(&w) != PX_FV_ARR || px_fw_open(&w, '[') < 0)
        return DECLINE;
      int rd;
      while ((rd = px_fw_elem(&w)) == 1) {
        static const char *const keys[] = {"name", "description", "parametersJsonSchema",
                                           "parameters"};
        px_fv_t f[4];
        unsigned seen = 0;
        if (px_fw_peek(&w) != PX_FV_OBJ || px_fw_fields(&w, keys, 4, f, &seen) != 0 ||
            !HAS(0) || f[0].kind != PX_FV_STR)
          return DECLINE;
        px_fv_t params;
        params.kind = PX_FV_OBJ;
        if (HAS(2)) {
          if (f[2].kind != PX_FV_OBJ) return DECLINE;
          params.raw = f[2].raw;
        } else if (HAS(3)) {
          if (schema_lower(&f[3], a, &params.raw) != 0) return DECLINE;
        } else {
          params.raw = PX_FAST_OPENAI_PARAMS;
        }
        if (px_ftool_push(ir, a, f[0].s, HAS(1) ? &f[1] : NULL, &params, NULL,
                          PX_FAST_OPENAI_PARAMS) == NULL)
          return DECLINE;
      }
      if (rd < 0) return DECLINE;
    }
    if (rk < 0) return DECLINE;
  }
  if (r < 0) return DECLINE;
  *wp = w;
  return 0;
}

/* toolConfig.functionCallingConfig {mode, allowedFunctionNames} */
static int decode_tool_config(const px_fv_t *tc, px_freq_t *ir) {
  static const char *const keys[] = {"functionCallingConfig"};
  static const char *const fkeys[] = {"mode", "allowedFunctionNames"};
  px_fv_t f[1], g[2];
  unsigned seen = 0, gs = 0;
  if (tc->kind != PX_FV_OBJ || px_fv_fields(tc, keys, 1, f, &seen) != 0) return DECLINE;
  if (!seen) return 0;
  if (f[0].kind != PX_FV_OBJ || px_fv_fields(&f[0], fkeys, 2, g, &gs) != 0)
    return DECLINE;
  if (!(gs & 1) || g[0].kind != PX_FV_STR) return 0;
  px_fstr_t mode = g[0].s;
  if (px_fs_is(mode, "AUTO") || px_fs_is(mode, "VALIDATED")) {
    ir->tool_choice = PX_FTC_AUTO;
    return 0;
  }
  if (px_fs_is(mode, "NONE")) {
    ir->tool_choice = PX_FTC_NONE;
    return 0;
  }
  if (!px_fs_is(mode, "ANY")) return DECLINE;
  /* ANY: one allowed name is that tool; none is any tool */
  ir->tool_choice = PX_FTC_REQUIRED;
  if (!(gs & 2) || g[1].kind != PX_FV_ARR) return 0;
  px_fw_t w = {g[1].raw.ptr, g[1].raw.len, 0};
  px_fv_t x;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  int r = px_fw_elem(&w);
  if (r == 0) return 0;
  if (r < 0 || px_fw_value(&w, &x) < 0 || px_fw_elem(&w) != 0) return DECLINE;
  if (x.kind == PX_FV_STR) {
    ir->tool_choice = PX_FTC_TOOL;
    ir->tc_name = x.s;
  }
  return 0;
}

/* the generationConfig members dropped (lossy), in gemini.c's order */
static const char *const gen_dropped[] = {
    "presencePenalty", "frequencyPenalty", "seed",         "responseLogprobs",
    "logprobs",        "mediaResolution",  "speechConfig", "responseModalities"};
#define N_DROPPED NKEYS(gen_dropped)

enum { G_TEMP, G_TOPP, G_TOPK, G_MAX, G_STOP, G_CAND, G_MIME, G_THINK, G_DROP0 };
#define N_GEN (G_DROP0 + N_DROPPED)

static int decode_generation(px_fw_t *w, px_freq_t *ir, unsigned *dropped) {
  static const char *const keys[N_GEN] = {
      "temperature", "topP", "topK", "maxOutputTokens", "stopSequences", "candidateCount",
      "responseMimeType", "thinkingConfig",
      /* gen_dropped[] */
      "presencePenalty", "frequencyPenalty", "seed", "responseLogprobs", "logprobs",
      "mediaResolution", "speechConfig", "responseModalities"};
  px_fv_t f[N_GEN];
  unsigned seen = 0;
  if (px_fw_peek(w) != PX_FV_OBJ || px_fw_fields(w, keys, N_GEN, f, &seen) != 0)
    return DECLINE;
  if (HAS(G_TEMP) && f[G_TEMP].kind == PX_FV_NUM) ir->temperature = f[G_TEMP].raw;
  if (HAS(G_TOPP) && f[G_TOPP].kind == PX_FV_NUM) ir->top_p = f[G_TOPP].raw;
  if (HAS(G_TOPK) && f[G_TOPK].kind == PX_FV_NUM) {
    /* an integer there (a real is cut): integers of a double's precision */
    if (!px_fw_is_int(f[G_TOPK].raw) || f[G_TOPK].raw.len > 15) return DECLINE;
    ir->top_k = f[G_TOPK].raw;
  }
  if (HAS(G_MAX) && f[G_MAX].kind == PX_FV_NUM && px_fw_is_int(f[G_MAX].raw)) {
    if (px_fw_uint(f[G_MAX].raw, &ir->max_tokens_v) < 0 || ir->max_tokens_v < 1)
      return DECLINE;
    ir->max_tokens = f[G_MAX].raw;
  }
  if (HAS(G_STOP) && f[G_STOP].kind == PX_FV_ARR) {
    px_fw_t w = {f[G_STOP].raw.ptr, f[G_STOP].raw.len, 0};
    int r, n = 0;
    if (px_fw_open(&w, '[') < 0) return DECLINE;
    while ((r = px_fw_elem(&w)) == 1) {
      px_fv_t x;
      if (px_fw_value(&w, &x) < 0 || x.kind != PX_FV_STR) return DECLINE;
      n++;
    }
    if (r < 0 || n == 0) return DECLINE;
    ir->stop = f[G_STOP].raw;
  }
  if (HAS(G_CAND) && !(f[G_CAND].kind == PX_FV_NUM && f[G_CAND].raw.len == 1 &&
                       f[G_CAND].raw.ptr[0] == '1'))
    return DECLINE;
  /* JSON output, other MIME types (lossy), thinking: the jansson codec */
  if (HAS(G_MIME) &&
      !(f[G_MIME].kind == PX_FV_STR && px_fs_is(f[G_MIME].s, "text/plain")))
    return DECLINE;
  if (HAS(G_THINK)) return DECLINE;
  *dropped = seen >> G_DROP0;
  return 0;
}

enum { K_CONTENTS, K_SYS, K_TOOLS, K_TC, K_GEN, K_SAFETY, K_LABELS, K_CACHED, K_WRAPPED };
static const char *const top_keys[] = {
    "contents",   "systemInstruction", "tools",
    "toolConfig", "generationConfig",  "safetySettings",
    "labels",     "cachedContent",     "generateContentRequest"};

static int gem_fast_decode_request(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                   px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy) {
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  px_fv_t f[NKEYS(top_keys)];
  unsigned seen = 0, dropped = 0;
  int r;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    if (k.esc) return DECLINE;
    int ki = px_fw_key_of(k, top_keys, NKEYS(top_keys));
    if (ki >= 0 && px_fw_seen_twice(&seen, ki)) return DECLINE;
    /* the large members are read in place, in body order */
    int rc = 0, inplace = 1;
    switch (ki) {
      case K_CONTENTS:
        rc = decode_contents(&w, ir, a);
        break;
      case K_SYS:
        rc = decode_system(&w, ir, a);
        break;
      case K_TOOLS:
        rc = decode_tools(&w, ir, a);
        break;
      case K_GEN:
        rc = decode_generation(&w, ir, &dropped);
        break;
      default:
        inplace = 0;
        break;
    }
    if (rc != 0) return DECLINE;
    if (inplace) continue;
    px_fv_t v;
    if (px_fw_value(&w, &v) < 0) return DECLINE;
    if (ki >= 0) f[ki] = v; /* other members are not read there */
  }
  if (r < 0 || !HAS(K_CONTENTS) || HAS(K_CACHED) || HAS(K_WRAPPED)) return DECLINE;
  if (HAS(K_TC) && decode_tool_config(&f[K_TC], ir) != 0) return DECLINE;
  /* the method of the path decides, as the IR says there */
  if (ctx->stream)
    ir->stream_true = 1;
  else
    ir->stream_false = 1;
  for (int i = 0; i < N_DROPPED; i++)
    if (dropped & (1u << i)) {
      char p[64];
      snprintf(p, sizeof(p), "generationConfig.%s", gen_dropped[i]);
      px_lossy_add(lossy, p);
    }
  if (HAS(K_SAFETY)) px_lossy_add(lossy, "safetySettings");
  if (HAS(K_LABELS)) px_lossy_add(lossy, "labels");
  return 0;
}

/* ======================================================================== */
/* Request encode                                                            */

/* args as an object: the JSON text, or the string checked to be one */
static int call_args(px_arena_t *a, const px_fpart_t *p, px_str_t *out) {
  if (p->input.ptr != NULL) {
    *out = p->input;
    return 0;
  }
  if (p->args.p == NULL) {
    *out = (px_str_t){"{}", 2};
    return 0;
  }
  px_fpart_t tmp = *p;
  /* a string that is no object becomes {} there: not taken here */
  if (px_fast_args_object(a, &tmp) != 0) return DECLINE;
  *out = tmp.input;
  return 0;
}

/* the name of the call a result answers (the first part with that id) */
static const px_fpart_t *call_of(const px_freq_t *ir, px_fstr_t id) {
  for (const px_fmsg_t *m = ir->msgs; m; m = m->next)
    for (const px_fpart_t *p = m->parts; p; p = p->next)
      if (p->type == PX_FP_TOOL_CALL && p->id.p != NULL && p->name.p != NULL &&
          fs_eq(p->id, id))
        return p;
  return NULL;
}

/* the response object of a tool result: its text when that is a JSON
 * object, else {"output"|"error": text} */
static int put_result(px_buf_t *b, const px_fpart_t *res, px_arena_t *a) {
  size_t n = 0;
  int esc = 0;
  for (const px_fpart_t *c = res->content; c; c = c->next) {
    if (c->type != PX_FP_TEXT) return DECLINE;
    n += c->text.n;
    esc |= c->text.esc;
  }
  if (n > 0) {
    /* the unescaped text, checked to be one object as jansson reads it */
    px_buf_t t;
    px_buf_init(&t, n + 1);
    int rc = 0;
    for (const px_fpart_t *c = res->content; c && rc == 0; c = c->next) {
      if (c->text.n == 0) continue;
      if (!esc) {
        rc = px_buf_append(&t, c->text.p, c->text.n);
      } else {
        px_str_t v;
        px_buf_t u;
        px_buf_init(&u, c->text.n + 1);
        rc = px_json_unescape(c->text.p, c->text.n, c->text.esc, &u, &v);
        if (rc == 0) rc = px_buf_append(&t, v.ptr, v.len);
        px_buf_free(&u);
      }
    }
    char *copy = rc == 0 ? px_arena_alloc(a, t.len + 1) : NULL;
    if (copy != NULL) memcpy(copy, t.data, t.len);
    size_t tl = t.len;
    px_buf_free(&t);
    if (copy == NULL) return DECLINE;
    size_t i = 0;
    while (i < tl &&
           (copy[i] == ' ' || copy[i] == '\n' || copy[i] == '\t' || copy[i] == '\r'))
      i++;
    if (i < tl && copy[i] == '{') {
      /* what the scanner refuses (depth, a repeated "model" ...) jansson
       * may still read as an object: not taken here */
      px_json_req_t scan;
      if (px_json_request(copy, tl, &scan) != 0) return DECLINE;
      return px_buf_append(b, copy, tl);
    }
  }
  int rc = px_fb_lit(b, res->is_error ? "{\"error\":\"" : "{\"output\":\"");
  if (rc == 0) rc = px_fb_texts(b, res->content);
  if (rc == 0) rc = px_fb_lit(b, "\"}");
  return rc;
}

static int put_part(px_buf_t *b, const px_freq_t *ir, const px_fpart_t *p,
                    px_arena_t *a) {
  int rc;
  switch (p->type) {
    case PX_FP_TEXT:
      rc = px_fb_lit(b, "{\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text);
      if (rc == 0) rc = px_fb_lit(b, "}");
      return rc;
    case PX_FP_TOOL_CALL: {
      px_str_t args;
      if (p->name.p == NULL || call_args(a, p, &args) != 0) return DECLINE;
      rc = px_fb_lit(b, "{\"functionCall\":{\"name\":");
      if (rc == 0) rc = px_fb_str(b, p->name);
      if (rc == 0) rc = px_fb_lit(b, ",\"args\":");
      if (rc == 0) rc = px_fb_raw(b, args);
      if (rc == 0) rc = px_fb_lit(b, "}}");
      return rc;
    }
    case PX_FP_TOOL_RESULT: {
      if (p->id.esc) return DECLINE;
      const px_fpart_t *call = call_of(ir, p->id);
      if (call == NULL || call->id.esc) return DECLINE; /* an error there */
      rc = px_fb_lit(b, "{\"functionResponse\":{\"name\":");
      if (rc == 0) rc = px_fb_str(b, call->name);
      if (rc == 0) rc = px_fb_lit(b, ",\"response\":");
      if (rc == 0) rc = put_result(b, p, a);
      if (rc == 0) rc = px_fb_lit(b, "}}");
      return rc;
    }
    default: /* not written by this encoder yet (px_fast_ops_t.encodes) */
      break;
  }
  return DECLINE;
}

static int gem_fast_encode_request(const px_tr_ctx_t *ctx, const px_freq_t *ir,
                                   px_buf_t *b, px_arena_t *a, px_lossy_t *lossy) {
  /* results find their call by id: compared as written, so unescaped */
  for (const px_fmsg_t *m = ir->msgs; m; m = m->next)
    for (const px_fpart_t *p = m->parts; p; p = p->next)
      if ((p->type == PX_FP_TOOL_CALL || p->type == PX_FP_TOOL_RESULT) && p->id.esc)
        return DECLINE;
  int rc = px_fb_lit(b, "{\"contents\":[");
  int open = -1; /* the role of the content open: consecutive turns merge */
  for (const px_fmsg_t *m = ir->msgs; m && rc == 0; m = m->next) {
    for (const px_fpart_t *p = m->parts; p && rc == 0; p = p->next) {
      if (p->cache_control.ptr) px_lossy_add(lossy, "messages[].content[].cache_control");
      if (open != m->assistant) {
        if (open >= 0) rc = px_fb_lit(b, "]},");
        if (rc == 0)
          rc = px_fb_lit(b, m->assistant ? "{\"role\":\"model\",\"parts\":["
                                         : "{\"role\":\"user\",\"parts\":[");
        open = m->assistant;
      } else {
        rc = px_fb_lit(b, ",");
      }
      if (rc == 0) rc = put_part(b, ir, p, a);
    }
  }
  if (rc == 0) rc = px_fb_lit(b, open >= 0 ? "]}]" : "]");
  if (rc == 0 && ir->system != NULL) {
    rc = px_fb_lit(b, ",\"systemInstruction\":{\"parts\":[");
    for (const px_fpart_t *p = ir->system; p && rc == 0; p = p->next) {
      rc = px_fb_lit(b, p == ir->system ? "{\"text\":" : ",{\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text);
      if (rc == 0) rc = px_fb_lit(b, "}");
    }
    if (rc == 0) rc = px_fb_lit(b, "]}");
  }
  if (rc == 0 && ir->tools != NULL) {
    rc = px_fb_lit(b, ",\"tools\":[{\"functionDeclarations\":[");
    for (const px_ftool_t *t = ir->tools; t && rc == 0; t = t->next) {
      rc = px_fb_lit(b, t == ir->tools ? "{\"name\":" : ",{\"name\":");
      if (rc == 0) rc = px_fb_str(b, t->name);
      if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", t->desc);
      if (rc == 0) rc = px_fb_opt_raw(b, ",\"parametersJsonSchema\":", t->params);
      if (rc == 0) rc = px_fb_lit(b, "}");
    }
    if (rc == 0) rc = px_fb_lit(b, "]}]");
  }
  if (rc == 0 && ir->tool_choice != PX_FTC_UNSET) {
    rc = px_fb_lit(b, ",\"toolConfig\":{\"functionCallingConfig\":{\"mode\":");
    switch (ir->tool_choice) {
      case PX_FTC_TOOL:
        if (rc == 0) rc = px_fb_lit(b, "\"ANY\",\"allowedFunctionNames\":[");
        if (rc == 0)
          rc = px_fb_str(b, ir->tc_name.p ? ir->tc_name : (px_fstr_t){"", 0, 0});
        if (rc == 0) rc = px_fb_lit(b, "]");
        break;
      case PX_FTC_REQUIRED:
        if (rc == 0) rc = px_fb_lit(b, "\"ANY\"");
        break;
      case PX_FTC_NONE:
        if (rc == 0) rc = px_fb_lit(b, "\"NONE\"");
        break;
      default:
        if (rc == 0) rc = px_fb_lit(b, "\"AUTO\"");
        break;
    }
    if (rc == 0) rc = px_fb_lit(b, "}}");
  }
  /* generationConfig: members in gemini.c's order, omitted when empty */
  int first = 1;
  if (rc == 0 && ir->max_tokens.ptr) {
    rc = px_fb_lit(b, ",\"generationConfig\":{\"maxOutputTokens\":");
    if (rc == 0) rc = px_fb_raw(b, ir->max_tokens);
    first = 0;
  } else if (rc == 0 && ctx->default_max_tokens > 0) {
    rc = px_fb_lit(b, ",\"generationConfig\":{\"maxOutputTokens\":");
    if (rc == 0) rc = px_fb_i64(b, ctx->default_max_tokens);
    first = 0;
  }
  static const char *const gk[] = {"temperature", "topP", "topK", "stopSequences"};
  px_str_t gv[4] = {ir->temperature, ir->top_p, ir->top_k, ir->stop};
  for (int i = 0; i < 4 && rc == 0; i++) {
    if (gv[i].ptr == NULL && !(i == 3 && ir->stop1.p)) continue;
    rc = px_fb_lit(b, first ? ",\"generationConfig\":{\"" : ",\"");
    first = 0;
    if (rc == 0) rc = px_fb_lit(b, gk[i]);
    if (rc == 0) rc = px_fb_lit(b, "\":");
    if (rc == 0 && gv[i].ptr) {
      rc = px_fb_raw(b, gv[i]);
    } else if (rc == 0) {
      rc = px_fb_lit(b, "[");
      if (rc == 0) rc = px_fb_str(b, ir->stop1);
      if (rc == 0) rc = px_fb_lit(b, "]");
    }
  }
  if (rc == 0 && !first) rc = px_fb_lit(b, "}");
  if (ir->user.p) px_lossy_add(lossy, "user");
  if (ir->metadata.ptr) px_lossy_add(lossy, "metadata");
  if (ir->parallel >= 0) px_lossy_add(lossy, "parallel_tool_calls");
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* ======================================================================== */
/* Response decode                                                           */

/* The answer is walked once, in place: each container is read where it
 * stands instead of skipped first and read again (a generateContent answer
 * is nested four deep). */

/* usageMetadata as px_gemini_usage_in reads it */
static int decode_usage(px_fw_t *w, px_fresp_t *ir) {
  static const char *const keys[] = {"promptTokenCount", "candidatesTokenCount",
                                     "thoughtsTokenCount", "cachedContentTokenCount"};
  px_fv_t f[4];
  int64_t v[4] = {-1, -1, -1, -1};
  unsigned seen = 0;
  if (px_fw_fields(w, keys, 4, f, &seen) != 0) return DECLINE;
  for (int i = 0; i < 4; i++)
    if (HAS(i) && px_fw_jint(&f[i], -1, &v[i]) != 0) return DECLINE;
  int64_t out = v[1] < 0 && v[2] < 0 ? -1 : (v[1] > 0 ? v[1] : 0) + (v[2] > 0 ? v[2] : 0);
  ir->has_usage = 1;
  ir->in = v[0] > 0 ? v[0] : 0;
  ir->out = out > 0 ? out : 0;
  ir->cache_read = v[3] >= 0 ? v[3] : -1;
  ir->cache_creation = -1;
  ir->reasoning = v[2] >= 0 ? v[2] : -1;
  return 0;
}

/* one part of the candidate's content; a call without an id gets its
 * minted one when the walk is over (responseId may come last) */
static int decode_part_out(px_fw_t *w, px_fresp_t *ir, px_arena_t *a) {
  px_fv_t f[NKEYS(part_keys)];
  unsigned seen = 0;
  if (px_fw_peek(w) != PX_FV_OBJ ||
      px_fw_fields(w, part_keys, NKEYS(part_keys), f, &seen) != 0)
    return DECLINE;
  /* thoughts, signatures: reasoning parts there */
  if (HAS(P_SIG) || (HAS(P_THOUGHT) && f[P_THOUGHT].kind == PX_FV_TRUE)) return DECLINE;
  px_fpart_t *p;
  if (HAS(P_TEXT) && f[P_TEXT].kind == PX_FV_STR) {
    if ((p = px_fpart_text(a, f[P_TEXT].s)) == NULL) return DECLINE;
  } else if (HAS(P_FC) && f[P_FC].kind == PX_FV_OBJ) {
    static const char *const keys[] = {"name", "args", "id"};
    px_fv_t g[3];
    unsigned gs = 0;
    if (px_fv_fields(&f[P_FC], keys, 3, g, &gs) != 0) return DECLINE;
    if ((p = px_fpart_new(a, PX_FP_TOOL_CALL)) == NULL) return DECLINE;
    p->name = (gs & 1) && g[0].kind == PX_FV_STR ? g[0].s : (px_fstr_t){"", 0, 0};
    if ((gs & 4) && g[2].kind == PX_FV_STR) p->id = g[2].s; /* else minted */
    if ((gs & 2) && g[1].kind == PX_FV_OBJ) {
      if (px_fast_dump_value(a, g[1].raw, &p->args) != 0) return DECLINE;
      p->input = g[1].raw;
    } else {
      p->args = (px_fstr_t){"{}", 2, 0};
      p->input = (px_str_t){"{}", 2};
    }
  } else {
    return DECLINE; /* blobs, code execution (lossy), others */
  }
  px_fpart_push(&ir->content, &ir->last, p);
  return 0;
}

/* content {parts: [...], role} */
static int decode_content(px_fw_t *w, px_fresp_t *ir, px_arena_t *a) {
  px_fstr_t k;
  px_fv_t v;
  int r, nparts = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) return px_fw_value(w, &v) < 0 ? DECLINE : 0;
  if (px_fw_open(w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    if (k.esc) return DECLINE;
    if (!px_fs_is(k, "parts") || px_fw_peek(w) != PX_FV_ARR) {
      if (px_fs_is(k, "parts") && nparts++) return DECLINE;
      if (px_fw_value(w, &v) < 0) return DECLINE;
      continue;
    }
    if (nparts++ || px_fw_open(w, '[') < 0) return DECLINE; /* repeated: the last there */
    int rp;
    while ((rp = px_fw_elem(w)) == 1)
      if (decode_part_out(w, ir, a) != 0) return DECLINE;
    if (rp < 0) return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

enum { C_CONTENT, C_FINISH, C_SAFETY, C_GROUND, C_CITE };
static const char *const cand_keys[] = {"content", "finishReason", "safetyRatings",
                                        "groundingMetadata", "citationMetadata"};

/* candidates: exactly one (none: promptFeedback, the jansson codec) */
static int decode_candidates(px_fw_t *w, px_fresp_t *ir, px_arena_t *a, char *fr,
                             size_t frn, unsigned *cseen) {
  px_fstr_t k;
  int r;
  if (px_fw_peek(w) != PX_FV_ARR || px_fw_open(w, '[') < 0 || px_fw_elem(w) != 1 ||
      px_fw_peek(w) != PX_FV_OBJ || px_fw_open(w, '{') < 0)
    return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    if (k.esc) return DECLINE;
    int ki = px_fw_key_of(k, cand_keys, NKEYS(cand_keys));
    if (ki >= 0 && px_fw_seen_twice(cseen, ki)) return DECLINE;
    if (ki == C_CONTENT) {
      if (decode_content(w, ir, a) != 0) return DECLINE;
      continue;
    }
    px_fv_t v;
    if (px_fw_value(w, &v) < 0) return DECLINE;
    if (ki == C_FINISH && v.kind == PX_FV_STR) {
      if (v.s.esc || v.s.n >= frn) return DECLINE;
      memcpy(fr, v.s.p, v.s.n);
      fr[v.s.n] = 0;
    }
  }
  return r < 0 || px_fw_elem(w) != 0 ? DECLINE : 0;
}

enum { R_CANDS, R_ID, R_MODEL, R_USAGE };
static const char *const resp_keys[] = {"candidates", "responseId", "modelVersion",
                                        "usageMetadata"};

static int gem_fast_decode_response(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                    px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy) {
  px_fw_t w = {body, len, 0};
  px_fstr_t k, rid = {0};
  unsigned seen = 0, cseen = 0;
  char fr[48] = "STOP";
  int r;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    if (k.esc) return DECLINE;
    int ki = px_fw_key_of(k, resp_keys, NKEYS(resp_keys));
    if (ki >= 0 && px_fw_seen_twice(&seen, ki)) return DECLINE;
    if (ki == R_CANDS) {
      if (decode_candidates(&w, ir, a, fr, sizeof(fr), &cseen) != 0) return DECLINE;
      continue;
    }
    if (ki == R_USAGE && px_fw_peek(&w) == PX_FV_OBJ) {
      if (decode_usage(&w, ir) != 0) return DECLINE;
      continue;
    }
    px_fv_t v;
    if (px_fw_value(&w, &v) < 0) return DECLINE;
    if (ki == R_ID && v.kind == PX_FV_STR) rid = v.s;
    if (ki == R_MODEL && v.kind == PX_FV_STR) ir->model = v.s;
  }
  if (r < 0 || !HAS(R_CANDS)) return DECLINE;
  if (ir->model.p == NULL && ctx->client_model == NULL)
    return DECLINE; /* upstream model */
  /* refused: the text parts are refusals there */
  if (px_stop_refused(px_gemini_stop(fr, 0))) return DECLINE;
  ir->id = rid.p ? rid : (px_fstr_t){"gemini", 6, 0};
  /* minted call ids: call_<responseId or "gemini">_<n>, cut at 159 bytes there */
  px_fstr_t mid = rid.n > 0 ? rid : (px_fstr_t){"gemini", 6, 0};
  int calls = 0;
  for (px_fpart_t *p = ir->content; p; p = p->next) {
    if (p->type != PX_FP_TOOL_CALL) continue;
    if (p->id.p == NULL &&
        (mid.esc || mid.n > 120 || mint_id(a, "call_", mid, calls, &p->id)))
      return DECLINE;
    calls++;
  }
  if (cseen & (1u << C_SAFETY)) px_lossy_add(lossy, "candidates[].safetyRatings");
  if (cseen & (1u << C_GROUND)) px_lossy_add(lossy, "candidates[].groundingMetadata");
  if (cseen & (1u << C_CITE)) px_lossy_add(lossy, "candidates[].citationMetadata");
  ir->stop = px_gemini_stop(fr, calls > 0);
  return 0;
}

/* ======================================================================== */
/* Response encode                                                           */

static int gem_fast_encode_response(const px_tr_ctx_t *ctx, const px_fresp_t *ir,
                                    px_buf_t *b, px_arena_t *a, px_lossy_t *lossy) {
  (void)lossy;
  int rc = px_fb_lit(b, "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[");
  for (const px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
    if (p != ir->content) rc = px_fb_lit(b, ",");
    if (rc != 0) break;
    if (p->type == PX_FP_TEXT) {
      rc = px_fb_lit(b, "{\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text);
      if (rc == 0) rc = px_fb_lit(b, "}");
    } else if (p->type == PX_FP_TOOL_CALL) {
      px_str_t args;
      /* arguments that are no object: an error there */
      if (call_args(a, p, &args) != 0) return DECLINE;
      rc = px_fb_lit(b, "{\"functionCall\":{\"id\":");
      if (rc == 0) rc = px_fb_str(b, p->id.p ? p->id : (px_fstr_t){"", 0, 0});
      if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
      if (rc == 0) rc = px_fb_str(b, p->name.p ? p->name : (px_fstr_t){"", 0, 0});
      if (rc == 0) rc = px_fb_lit(b, ",\"args\":");
      if (rc == 0) rc = px_fb_raw(b, args);
      if (rc == 0) rc = px_fb_lit(b, "}}");
    } else {
      return DECLINE;
    }
  }
  const char *fin = px_gemini_finish(ir->stop);
  if (rc == 0) rc = px_fb_lit(b, "]},\"finishReason\":\"");
  if (rc == 0) rc = px_fb_lit(b, fin ? fin : "STOP");
  if (rc == 0) rc = px_fb_lit(b, "\",\"index\":0}]");
  if (rc == 0 && ir->has_usage) {
    int64_t in = ir->in > 0 ? ir->in : 0, out = ir->out > 0 ? ir->out : 0;
    int64_t th = ir->reasoning > 0 ? ir->reasoning : 0;
    if (th > out) th = out;
    rc = px_fb_lit(b, ",\"usageMetadata\":{\"promptTokenCount\":");
    if (rc == 0) rc = px_fb_i64(b, in);
    if (rc == 0) rc = px_fb_lit(b, ",\"candidatesTokenCount\":");
    if (rc == 0) rc = px_fb_i64(b, out - th);
    if (rc == 0) rc = px_fb_lit(b, ",\"totalTokenCount\":");
    if (rc == 0) rc = px_fb_i64(b, in + out);
    if (rc == 0 && th > 0) {
      rc = px_fb_lit(b, ",\"thoughtsTokenCount\":");
      if (rc == 0) rc = px_fb_i64(b, th);
    }
    if (rc == 0 && ir->cache_read > 0) {
      rc = px_fb_lit(b, ",\"cachedContentTokenCount\":");
      if (rc == 0) rc = px_fb_i64(b, ir->cache_read);
    }
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (rc == 0) rc = px_fb_lit(b, ",\"modelVersion\":");
  if (rc == 0 && ctx->client_model)
    rc = px_buf_json_str(b, ctx->client_model, strlen(ctx->client_model));
  else if (rc == 0)
    rc = px_fb_str(b, ir->model.p ? ir->model : (px_fstr_t){"", 0, 0});
  if (rc == 0) rc = px_fb_lit(b, ",\"responseId\":");
  if (rc == 0) rc = px_fb_str(b, ir->id.p ? ir->id : (px_fstr_t){"", 0, 0});
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

const px_fast_ops_t px_gemini_fast = {
    .decode_request = gem_fast_decode_request,
    .encode_request = gem_fast_encode_request,
    .decode_response = gem_fast_decode_response,
    .encode_response = gem_fast_encode_response,
};
