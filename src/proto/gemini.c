/* gemini.c - the Gemini generateContent codec
 * (include/proxai/fastir.h), without a jansson document, in all four
 * roles: a request (system instruction, user and model turns of text,
 * thoughts, thought signatures, blobs, function calls and function
 * responses with the ids gemini.c mints, function declarations and the
 * other tools gemini.c drops, tool config, generationConfig with
 * thinkingConfig and JSON output) both ways, and an answer (one candidate
 * or a blocked prompt: text or refusal wording, function calls, thoughts
 * and signatures, the refusal's explanation, usageMetadata) both ways.
 * Then the wire: errors, token counts, model lists, the path with the
 * model in it, the protocol table (streams: gemini_stream.c). Every rule
 * here is the reference's (test/reference/gemini.c) for the same shape,
 * and what it refuses is refused in its words (PX_FAST_REFUSE); what
 * cannot be proved the same as written (escaped or repeated member names,
 * a value split at a place not in the plain spelling: px_fs_plain)
 * declines to the hub's one reader's rule (translate_fast.c: respelled,
 * else refused); values that decide are read by their value (px_fs_is). jansson stays
 * only where the reference's rule is its dump (function call args and
 * structured function responses made strings) or its parse (arguments
 * that are no object, on the way to a refusal), and in the error and count
 * bodies. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/protoutil.h"
#include "proxai/usage.h"

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

/* a C string as string content (escaped) in the arena */
static int fs_of_cstr(px_arena_t *a, const char *s, px_fstr_t *out) {
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  int rc = px_buf_json_escape(&b, s, strlen(s));
  char *c = rc == 0 ? px_arena_alloc(a, b.len + 1) : NULL;
  if (c != NULL && b.len) memcpy(c, b.data, b.len);
  *out = (px_fstr_t){c, b.len, c != NULL && memchr(c, '\\', b.len) != NULL};
  px_buf_free(&b);
  return c != NULL ? 0 : DECLINE;
}

/* a functionCall's args (NULL: absent) -> the call's arguments: an object's
 * compact JSON (as gemini.c dumps it), anything else {} */
static int args_in(px_arena_t *a, const px_fv_t *args, px_fpart_t *p) {
  if (args != NULL && args->kind == PX_FV_OBJ) {
    if (px_fast_dump_value(a, args->raw, &p->args) != 0) return DECLINE;
    p->input = args->raw;
  } else {
    p->args = (px_fstr_t){"{}", 2, 0};
    p->input = (px_str_t){"{}", 2};
  }
  return 0;
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
      /* snprintf into char[32] there: longer names are cut. An escaped
       * one in the plain spelling (px_fs_plain) is lowered as written: its
       * escapes keep their value (a \u001F is a \u001f) */
      char tv[32];
      if (x.s.esc ? !px_fs_plain(x.s) || px_fs_value(x.s, tv, sizeof(tv)) == sizeof(tv)
                  : x.s.n >= 32)
        return DECLINE;
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

/* The calls of the conversation not answered yet, in order: a function
 * response takes the id of the earliest open call of its name. */
typedef struct open_call {
  struct open_call *next;
  const px_fpart_t *call;
} open_call_t;

/* A member of a tool gemini.c drops (googleSearch, codeExecution ...). */
typedef struct tool_drop {
  struct tool_drop *next;
  px_fstr_t key;
} tool_drop_t;

/* gemini.c's refusals, by the order it checks them: the first one it
 * would meet is the answer, wherever the body holds it */
enum { E_CONTENTS = 1, E_CACHED, E_SYSTEM, E_TURNS, E_TOOLS, E_TC, E_GEN };

/* What the decoding of a request keeps from member to member. */
typedef struct gdec {
  open_call_t *open, **open_tail;
  int n;            /* calls seen */
  int k_sig, k_enc; /* the IR fields "signature" and "encrypted_content" */
  int exec;         /* code execution parts were dropped (lossy) */
  tool_drop_t *drops, **drops_tail;
  int prio; /* the refusal held (E_*), 0: none */
  px_tr_err_t e;
} gdec_t;

/* a refusal of gemini.c at order prio: kept unless one before it is */
__attribute__((format(printf, 4, 5))) static int gfail(gdec_t *d, int prio,
                                                       const char *param, const char *fmt,
                                                       ...) {
  if (d->prio != 0 && d->prio <= prio) return PX_FAST_REFUSE;
  d->prio = prio;
  d->e.kind = PX_ERR_INVALID;
  snprintf(d->e.param, sizeof(d->e.param), "%s", param);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->e.message, sizeof(d->e.message), fmt, ap);
  va_end(ap);
  return PX_FAST_REFUSE;
}

/* systemInstruction: {parts: [{text}, ...]}, read in place; gemini.c
 * reads nothing of a value of another shape, and refuses a part without a
 * text string */
static int decode_system(px_fw_t *w, px_freq_t *ir, gdec_t *d, px_arena_t *a) {
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
    /* repeated: the last there */
    if (nparts++ || px_fw_open(w, '[') < 0) return DECLINE;
    int rp;
    while ((rp = px_fw_elem(w)) == 1) {
      static const char *const pkeys[] = {"text"};
      px_fv_t g[1];
      unsigned gs = 0;
      if (px_fw_peek(w) != PX_FV_OBJ) {
        if (px_fw_value(w, &v) < 0) return DECLINE;
        gs = 0;
      } else if (px_fw_fields(w, pkeys, 1, g, &gs) != 0) {
        return DECLINE;
      }
      if (!gs || g[0].kind != PX_FV_STR) {
        gfail(d, E_SYSTEM, "systemInstruction.parts", "system parts must be text");
        continue;
      }
      px_fpart_t *p = px_fpart_text(a, g[0].s);
      if (p == NULL) return DECLINE;
      px_fpart_push(&ir->system, &ir->system_last, p);
    }
    if (rp < 0) return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

/* A functionResponse read where it stands (its response is the large
 * member of an agent's history: walked once). */
typedef struct fresp {
  px_fv_t name, id;
  int has_resp;
  px_str_t resp;  /* the response value, raw */
  px_fstr_t lone; /* a lone "output" or "content" string of it (p NULL: none) */
} fresp_t;

/* response {..}: its raw span, and its lone "output" / "content" string */
static int read_response(px_fw_t *w, fresp_t *fr) {
  px_fv_t x;
  fr->has_resp = 1;
  if (px_fw_peek(w) != PX_FV_OBJ) {
    if (px_fw_value(w, &x) < 0) return DECLINE;
    fr->resp = x.raw;
    return 0;
  }
  size_t start = w->i;
  px_fstr_t k, k0 = {0};
  px_fv_t one = {0};
  int r, n = 0, same = 1, lone = 0;
  if (px_fw_open(w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    if (k.esc || px_fw_value(w, &x) < 0) return DECLINE;
    if (n++ == 0)
      k0 = k, lone = px_fs_is(k, "output") || px_fs_is(k, "content");
    else
      same &= px_fs_same(k, k0);
    one = x; /* jansson keeps the last of repeated members */
  }
  if (r < 0 || (n > 1 && same)) return DECLINE; /* one member there, repeated */
  fr->resp = (px_str_t){w->p + start, w->i - start};
  if (lone && n == 1 && one.kind == PX_FV_STR) fr->lone = one.s;
  return 0;
}

/* functionResponse {name, id, response} at the cursor */
static int read_fresp(px_fw_t *w, fresp_t *fr) {
  static const px_fkey_t keys[] = {PX_FK("name"), PX_FK("id"), PX_FK("response")};
  px_fstr_t k;
  unsigned seen = 0;
  int r;
  memset(fr, 0, sizeof(*fr));
  if (px_fw_open(w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    int ki = px_fk_of(k, keys, 3);
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == 2) {
      if (read_response(w, fr) != 0) return DECLINE;
      continue;
    }
    px_fv_t x;
    if (px_fw_value(w, &x) < 0) return DECLINE;
    if (ki == 0) fr->name = x;
    if (ki == 1) fr->id = x;
  }
  if (!(seen & 1)) fr->name.kind = PX_FV_NULL;
  if (!(seen & 2)) fr->id.kind = PX_FV_NULL;
  return r < 0 ? DECLINE : 0;
}

/* functionResponse.response -> the tool result's text: a lone "output" or
 * "content" string is the text itself, anything else its compact JSON */
static int response_text(const fresp_t *fr, px_fpart_t *res, px_arena_t *a) {
  px_fstr_t text = fr->lone;
  if (!fr->has_resp)
    text = (px_fstr_t){"null", 4, 0};
  else if (text.p == NULL && px_fast_dump_value(a, fr->resp, &text) != 0)
    return DECLINE;
  px_fpart_t *t = px_fpart_text(a, text);
  if (t == NULL) return DECLINE;
  res->content = t;
  return 0;
}

/* A thoughtSignature on a call, text or blob part of a model turn: a
 * reasoning part of its own, the token in its family's field (sig_part in
 * gemini.c). Another family's signature joins the thought text before it
 * when that thought has no token yet. */
static int sig_part(px_fmsg_t *m, px_fstr_t sig, const gdec_t *d, px_arena_t *a) {
  px_fpart_t *r = px_fpart_new(a, PX_FP_REASONING);
  if (r == NULL) return DECLINE;
  r->text = (px_fstr_t){"", 0, 0};
  if (px_frtok_in(PX_PROTO_GEMINI, r, sig) != 0) return DECLINE;
  px_fpart_t *prev = m->last;
  if ((r->tok[d->k_sig].p || r->tok[d->k_enc].p) && prev != NULL &&
      prev->type == PX_FP_REASONING && prev->text.n > 0 && prev->id.p == NULL) {
    int bare = 1;
    for (int k = 0; k < PX_FRTOKS; k++) bare &= prev->tok[k].p == NULL;
    if (bare) {
      memcpy(prev->tok, r->tok, sizeof(prev->tok));
      return 0;
    }
  }
  px_fpart_push(&m->parts, &m->last, r);
  return 0;
}

/* A part's place, its path "contents[i].parts[n]" written only for a
 * refusal (the path of a part is gemini.c's words then). */
typedef struct ppath {
  size_t i, n;
  char s[128];
} ppath_t;

static const char *pp_str(ppath_t *pp) {
  snprintf(pp->s, sizeof(pp->s), "contents[%zu].parts[%zu]", pp->i, pp->n);
  return pp->s;
}

/* A refusal of gemini.c's decode_part, at the part's path. */
#define PART_FAIL(d, pp, fmt) gfail(d, E_TURNS, pp_str(pp), fmt, (pp)->s)

/* inlineData {mimeType, data} / fileData {mimeType, fileUri} -> an image or
 * file part (decode_blob in gemini.c) */
static int decode_blob(const px_fv_t *v, int is_file, px_fmsg_t *m, gdec_t *d,
                       ppath_t *path, px_arena_t *a) {
  static const char *const keys[] = {"mimeType", "data", "fileUri"};
  px_fv_t g[3];
  unsigned gs = 0;
  int dk = is_file ? 2 : 1;
  char p2[160]; /* never cut: a path is at most 58 bytes */
  if (v->kind == PX_FV_OBJ && px_fv_fields(v, keys, 3, g, &gs) != 0) return DECLINE;
  if (!(gs & 1) || !(gs & (1u << dk)) || g[0].kind != PX_FV_STR ||
      g[dk].kind != PX_FV_STR) {
    snprintf(p2, sizeof(p2), "%s.%s", pp_str(path), is_file ? "fileData" : "inlineData");
    return gfail(d, E_TURNS, p2, "%s needs mimeType and %s", p2,
                 is_file ? "fileUri" : "data");
  }
  int image = px_fs_starts(g[0].s, "image/", 6);
  px_fpart_t *p = px_fpart_new(a, image ? PX_FP_IMAGE : PX_FP_FILE);
  if (p == NULL) return DECLINE;
  if (is_file) {
    p->url = g[dk].s;
  } else {
    p->media_type = g[0].s;
    p->data = g[dk].s;
    if (!image) p->filename = (px_fstr_t){"document.pdf", 12, 0};
  }
  px_fpart_push(&m->parts, &m->last, p);
  return 0;
}

static int decode_call(const px_fv_t *v, px_fmsg_t *m, int model, gdec_t *d,
                       ppath_t *path, px_arena_t *a) {
  static const char *const keys[] = {"name", "args", "id"};
  px_fv_t g[3];
  unsigned gs = 0;
  if (v->kind == PX_FV_OBJ && px_fv_fields(v, keys, 3, g, &gs) != 0) return DECLINE;
  if (!model || !(gs & 1) || g[0].kind != PX_FV_STR)
    return PART_FAIL(d, path, "%s.functionCall needs a name in a model turn");
  px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
  open_call_t *o = px_arena_alloc(a, sizeof(*o));
  if (p == NULL || o == NULL) return DECLINE;
  p->name = g[0].s;
  d->n++;
  if ((gs & 4) && g[2].kind == PX_FV_STR && g[2].s.n > 0) {
    p->id = g[2].s;
  } else if (mint_id(a, "call_", (px_fstr_t){0}, d->n, &p->id) != 0) {
    return DECLINE;
  }
  if (args_in(a, (gs & 2) ? &g[1] : NULL, p) != 0) return DECLINE;
  o->call = p;
  *d->open_tail = o;
  d->open_tail = &o->next;
  px_fpart_push(&m->parts, &m->last, p);
  return 0;
}

static int decode_fresp(const fresp_t *fr, px_fmsg_t *m, int model, gdec_t *d,
                        ppath_t *path, px_arena_t *a) {
  px_fstr_t name = fr->name.kind == PX_FV_STR ? fr->name.s : (px_fstr_t){"", 0, 0};
  px_fstr_t id = fr->id.kind == PX_FV_STR ? fr->id.s : (px_fstr_t){0};
  int by_id = id.n > 0;
  px_fpart_t *res = px_fpart_new(a, PX_FP_TOOL_RESULT);
  if (res == NULL) return DECLINE;
  open_call_t **pp = &d->open;
  while (*pp &&
         !(by_id ? px_fs_same((*pp)->call->id, id) : px_fs_same((*pp)->call->name, name)))
    pp = &(*pp)->next;
  if (*pp && !model) {
    res->id = (*pp)->call->id;
    if (d->open_tail == &(*pp)->next) d->open_tail = pp;
    *pp = (*pp)->next;
  } else if (by_id && !model) {
    res->id = id;
  } else {
    return PART_FAIL(d, path,
                     "%s.functionResponse does not answer a preceding functionCall");
  }
  if (response_text(fr, res, a) != 0) return DECLINE;
  px_fpart_push(&m->parts, &m->last, res);
  return 0;
}

enum { P_TEXT, P_THOUGHT, P_SIG, P_FC, P_FR, P_INLINE, P_FILE, P_EXEC, P_EXECR };
static const px_fkey_t part_fkeys[] = {
    PX_FK("text"),         PX_FK("thought"),          PX_FK("thoughtSignature"),
    PX_FK("functionCall"), PX_FK("functionResponse"), PX_FK("inlineData"),
    PX_FK("fileData"),     PX_FK("executableCode"),   PX_FK("codeExecutionResult")};

/* one part of a turn, in gemini.c's order of checks (decode_part there);
 * path: "contents[i].parts[k]" */
static int decode_part(px_fw_t *w, px_fmsg_t *m, int model, gdec_t *d, ppath_t *path,
                       px_arena_t *a) {
  px_fv_t f[NKEYS(part_fkeys)];
  fresp_t fr;
  px_fstr_t k;
  unsigned seen = 0;
  int r;
  if (px_fw_peek(w) != PX_FV_OBJ) return PART_FAIL(d, path, "%s must be an object");
  if (px_fw_open(w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    int ki = px_fk_of(k, part_fkeys, NKEYS(part_fkeys));
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == P_FR) { /* read where it stands */
      memset(&fr, 0, sizeof(fr));
      fr.name.kind = fr.id.kind = PX_FV_NULL;
      if (px_fw_peek(w) == PX_FV_OBJ) {
        if (read_fresp(w, &fr) != 0) return DECLINE;
      } else if (px_fw_value(w, &f[P_FR]) < 0) {
        return DECLINE;
      }
      continue;
    }
    px_fv_t v;
    if (px_fw_value(w, &v) < 0) return DECLINE;
    if (ki >= 0) f[ki] = v;
  }
  if (r < 0) return DECLINE;
  int sig = HAS(P_SIG) && f[P_SIG].kind == PX_FV_STR;
  int thought = HAS(P_THOUGHT) && f[P_THOUGHT].kind == PX_FV_TRUE;
  if (sig && model && !thought && sig_part(m, f[P_SIG].s, d, a) != 0) return DECLINE;
  if (HAS(P_TEXT)) {
    if (f[P_TEXT].kind != PX_FV_STR)
      return PART_FAIL(d, path, "%s.text must be a string");
    px_fpart_t *p;
    if (!thought) {
      p = px_fpart_text(a, f[P_TEXT].s);
    } else if (!model) {
      return 0; /* thoughts belong to model turns */
    } else {
      p = px_fpart_new(a, PX_FP_REASONING);
      if (p == NULL) return DECLINE;
      p->text = f[P_TEXT].s;
      if (sig && px_frtok_in(PX_PROTO_GEMINI, p, f[P_SIG].s) != 0) return DECLINE;
    }
    if (p == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, p);
    return 0;
  }
  if (HAS(P_INLINE)) return decode_blob(&f[P_INLINE], 0, m, d, path, a);
  if (HAS(P_FILE)) return decode_blob(&f[P_FILE], 1, m, d, path, a);
  if (HAS(P_FC)) return decode_call(&f[P_FC], m, model, d, path, a);
  if (HAS(P_FR)) return decode_fresp(&fr, m, model, d, path, a);
  if (HAS(P_EXEC) || HAS(P_EXECR)) {
    d->exec = 1;
    return 0;
  }
  if (sig) return 0; /* a signature-only part */
  return PART_FAIL(d, path, "%s: unsupported part");
}

/* a turn's role as gemini.c reads it (by its value): 1 model, 0 user (or
 * none), -1 another one; ROLE_UNREAD when the walker cannot tell */
#define ROLE_UNREAD (-3)
static int role_of(const px_fv_t *v) {
  if (v->kind != PX_FV_STR) return 0;
  if (px_fs_is(v->s, "model")) return 1;
  return px_fs_is(v->s, "user") ? 0 : -1;
}

/* the members of a turn after its parts (w at the parts): the role there
 * (0 when none: *has says whether one is), ROLE_UNREAD when the walker
 * cannot tell or a member read is there again ("parts", a second "role":
 * jansson keeps the last, the hub's rule) */
static int role_ahead(px_fw_t w, int *has) {
  px_fv_t v;
  px_fstr_t k;
  int r, role = 0;
  *has = 0;
  if (px_fw_value(&w, &v) < 0) return ROLE_UNREAD; /* the parts */
  while ((r = px_fw_member(&w, &k)) == 1) {
    if (k.esc || px_fw_value(&w, &v) < 0 || px_fs_is(k, "parts")) return ROLE_UNREAD;
    if (px_fs_is(k, "role") && (*has)++) return ROLE_UNREAD;
    if (px_fs_is(k, "role")) role = role_of(&v);
  }
  return r < 0 ? ROLE_UNREAD : role;
}

/* whether a member named key comes in the rest of the object at w (or the
 * walker cannot tell): a value refused now may not be the one jansson
 * keeps */
static int member_later(px_fw_t w, const char *key) {
  px_fstr_t k;
  px_fv_t v;
  int r;
  while ((r = px_fw_member(&w, &k)) == 1)
    if (k.esc || px_fw_value(&w, &v) < 0 || px_fs_is(k, key)) return 1;
  return r < 0;
}

/* gemini.c's refusal of turn i */
static int turn_fail(gdec_t *d, size_t i) {
  char path[48];
  snprintf(path, sizeof(path), "contents[%zu]", i);
  return gfail(d, E_TURNS, path, "contents[%zu] needs role user or model and parts", i);
}

/* contents, each turn read in place, its parts by its role; 0, DECLINE, or
 * PX_FAST_REFUSE (a refusal held in d: the rest of contents unread) */
static int decode_contents(px_fw_t *w, px_freq_t *ir, gdec_t *d, px_arena_t *a) {
  int r;
  size_t i = 0;
  if (px_fw_peek(w) != PX_FV_ARR)
    return gfail(d, E_CONTENTS, "contents", "contents must be an array");
  if (px_fw_open(w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(w)) == 1; i++) {
    px_fstr_t k;
    px_fv_t v;
    int rk, model = -2, arr = 0; /* -2: not read yet */
    unsigned seen = 0;
    px_fmsg_t *m = px_fmsg_push(ir, a, 0);
    if (m == NULL) return DECLINE;
    if (px_fw_peek(w) != PX_FV_OBJ) return turn_fail(d, i);
    if (px_fw_open(w, '{') < 0) return DECLINE;
    while ((rk = px_fw_member(w, &k)) == 1) {
      if (k.esc) return DECLINE;
      if (px_fs_is(k, "parts")) {
        if (px_fw_seen_twice(&seen, 1)) return DECLINE;
        if (px_fw_peek(w) != PX_FV_ARR) { /* an error there, told at the end */
          if (px_fw_value(w, &v) < 0) return DECLINE;
          continue;
        }
        arr = 1;
        px_fw_t at = *w; /* the parts */
        int has_role, role_before = model != -2;
        if (model == -2) model = role_ahead(*w, &has_role);
        if (model == ROLE_UNREAD) return DECLINE;
        if (model < 0) return turn_fail(d, i);
        if (px_fw_open(w, '[') < 0) return DECLINE;
        int rp;
        ppath_t pp = {i, 0, ""};
        for (; (rp = px_fw_elem(w)) == 1; pp.n++)
          if ((rp = decode_part(w, m, model, d, &pp, a)) != 0) {
            /* a part refused is the reference's refusal when no role or
             * parts after these would be read instead (jansson keeps the
             * last): else the hub's rule */
            if (rp == PX_FAST_REFUSE &&
                (role_ahead(at, &has_role) == ROLE_UNREAD || (has_role && role_before)))
              return DECLINE;
            return rp;
          }
        if (rp < 0) return DECLINE;
        continue;
      }
      if (px_fw_value(w, &v) < 0) return DECLINE;
      if (!px_fs_is(k, "role")) continue;
      if (px_fw_seen_twice(&seen, 0)) return DECLINE;
      if ((model = role_of(&v)) == ROLE_UNREAD) return DECLINE;
      if (model < 0) return member_later(*w, "role") ? DECLINE : turn_fail(d, i);
    }
    if (rk < 0) return DECLINE;
    if (!arr) return turn_fail(d, i);
    m->assistant = model;
  }
  return r < 0 ? DECLINE : 0;
}

/* tools: function declarations; another member of a tool (googleSearch,
 * codeExecution, urlContext ...) is dropped there, named "tools[].<key>" */
static int decode_tools(px_fw_t *w, px_freq_t *ir, gdec_t *d, px_arena_t *a) {
  int r;
  px_fv_t v;
  if (px_fw_peek(w) != PX_FV_ARR) return px_fw_value(w, &v) < 0 ? DECLINE : 0;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(w)) == 1) {
    px_fstr_t k;
    int rk, ndecl = 0;
    if (px_fw_peek(w) != PX_FV_OBJ) { /* nothing of it read there */
      if (px_fw_value(w, &v) < 0) return DECLINE;
      continue;
    }
    if (px_fw_open(w, '{') < 0) return DECLINE;
    while ((rk = px_fw_member(w, &k)) == 1) {
      if (k.esc) return DECLINE;
      if (!px_fs_is(k, "functionDeclarations")) {
        tool_drop_t *t = px_arena_alloc(a, sizeof(*t));
        if (t == NULL || px_fast_lossy_key(NULL, k) != 0 || px_fw_value(w, &v) < 0)
          return DECLINE;
        t->key = k;
        *d->drops_tail = t;
        d->drops_tail = &t->next;
        continue;
      }
      if (ndecl++) return DECLINE; /* repeated: read once there */
      if (px_fw_peek(w) != PX_FV_ARR) {
        if (px_fw_value(w, &v) < 0) return DECLINE;
        continue;
      }
      if (px_fw_open(w, '[') < 0) return DECLINE;
      int rd;
      while ((rd = px_fw_elem(w)) == 1) {
        static const char *const keys[] = {"name", "description", "parametersJsonSchema",
                                           "parameters"};
        px_fv_t f[4];
        unsigned seen = 0;
        if (px_fw_peek(w) != PX_FV_OBJ) {
          if (px_fw_value(w, &v) < 0) return DECLINE;
        } else if (px_fw_fields(w, keys, 4, f, &seen) != 0) {
          return DECLINE;
        }
        if (!HAS(0) || f[0].kind != PX_FV_STR) {
          gfail(d, E_TOOLS, "tools[].functionDeclarations[].name",
                "a function declaration needs a name");
          continue;
        }
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
  return r < 0 ? DECLINE : 0;
}

/* toolConfig.functionCallingConfig {mode, allowedFunctionNames} */
static int decode_tool_config(const px_fv_t *tc, px_freq_t *ir, gdec_t *d,
                              px_arena_t *a) {
  static const char *const keys[] = {"functionCallingConfig"};
  static const char *const fkeys[] = {"mode", "allowedFunctionNames"};
  px_fv_t f[1], g[2];
  unsigned seen = 0, gs = 0;
  if (tc->kind != PX_FV_OBJ) return 0;
  if (px_fv_fields(tc, keys, 1, f, &seen) != 0) return DECLINE;
  if (!seen || f[0].kind != PX_FV_OBJ) return 0;
  if (px_fv_fields(&f[0], fkeys, 2, g, &gs) != 0) return DECLINE;
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
  /* ANY: one allowed name is that tool; none (or one not a string) is any */
  int n = 0;
  px_fv_t x = {0}, y;
  if (px_fs_is(mode, "ANY") && (gs & 2) && g[1].kind == PX_FV_ARR) {
    px_fw_t w = {g[1].raw.ptr, g[1].raw.len, 0};
    int r;
    if (px_fw_open(&w, '[') < 0) return DECLINE;
    while ((r = px_fw_elem(&w)) == 1)
      if (px_fw_value(&w, n++ ? &y : &x) < 0) return DECLINE;
    if (r < 0) return DECLINE;
  }
  if (px_fs_is(mode, "ANY") && n <= 1) {
    ir->tool_choice = n == 1 && x.kind == PX_FV_STR ? PX_FTC_TOOL : PX_FTC_REQUIRED;
    if (ir->tool_choice == PX_FTC_TOOL) ir->tc_name = x.s;
    return 0;
  }
  const char *m = px_fs_cstr(a, mode, NULL);
  if (m == NULL) return DECLINE;
  gfail(d, E_TC, "toolConfig.functionCallingConfig",
        "function calling mode %s with several allowedFunctionNames cannot be translated",
        m);
  return 0;
}

/* the generationConfig members dropped (lossy), in gemini.c's order */
static const char *const gen_dropped[] = {
    "presencePenalty", "frequencyPenalty", "seed",         "responseLogprobs",
    "logprobs",        "mediaResolution",  "speechConfig", "responseModalities"};
#define N_DROPPED NKEYS(gen_dropped)

enum {
  G_TEMP,
  G_TOPP,
  G_TOPK,
  G_MAX,
  G_STOP,
  G_CAND,
  G_MIME,
  G_JSCHEMA,
  G_SCHEMA,
  G_THINK,
  G_DROP0
};
#define N_GEN (G_DROP0 + N_DROPPED)

/* effort_of_level in gemini.c: a thinkingLevel's effort */
static int effort_of_level(px_fstr_t l, px_fstr_t *out, px_arena_t *a) {
  static const char *const lv[][2] = {
      {"minimal", "MINIMAL"}, {"low", "LOW"}, {"medium", "MEDIUM"}};
  for (size_t i = 0; i < 3; i++)
    if (px_fs_is(l, lv[i][0]) || px_fs_is(l, lv[i][1])) {
      *out = (px_fstr_t){lv[i][0], strlen(lv[i][0]), 0};
      return 0;
    }
  *out = (px_fstr_t){"high", 4, 0};
  return 0;
}

/* thinkingConfig -> the IR reasoning, as decode_generation in gemini.c */
static int decode_thinking(const px_fv_t *tc, px_freq_t *ir, px_arena_t *a) {
  static const char *const keys[] = {"thinkingBudget", "thinkingLevel"};
  px_fv_t g[2];
  unsigned gs = 0;
  if (tc->kind != PX_FV_OBJ) return 0;
  if (px_fv_fields(tc, keys, 2, g, &gs) != 0) return DECLINE;
  /* thinkingBudget: an integer's sign (0, > 0, < 0) and value */
  int sign = 0, is_int = (gs & 1) && g[0].kind == PX_FV_NUM && px_fw_is_int(g[0].raw);
  int64_t v = 0;
  if (is_int) {
    px_str_t raw = g[0].raw;
    int neg = raw.len > 0 && raw.ptr[0] == '-';
    if (neg) raw.ptr++, raw.len--;
    if (px_fw_uint(raw, &v) < 0) return DECLINE;
    sign = v == 0 ? 0 : neg ? -1 : 1;
  }
  ir->has_reasoning = 1;
  if (is_int && sign == 0) {
    ir->effort = (px_fstr_t){"none", 4, 0};
    return 0;
  }
  ir->reasoning_enabled = 1;
  if (sign > 0) {
    const char *e = px_effort_of_budget(v);
    ir->budget = g[0].raw;
    ir->budget_v = v;
    ir->effort = (px_fstr_t){e, strlen(e), 0};
  } else if ((gs & 2) && g[1].kind == PX_FV_STR) {
    return effort_of_level(g[1].s, &ir->effort, a);
  }
  return 0;
}

/* topK as the reference reads it: an integer, a real cut toward zero
 * ("40.0" is 40: Python clients write their floats so), both of a double's
 * integer precision (below 1e15 in magnitude); else declined */
static int top_k_of(px_str_t raw, px_arena_t *a, px_str_t *out) {
  char t[64];
  if (raw.len >= sizeof(t)) return DECLINE;
  memcpy(t, raw.ptr, raw.len);
  t[raw.len] = 0;
  double v = strtod(t, NULL);
  if (!(v < 1e15 && v > -1e15)) return DECLINE;
  if (px_fw_is_int(raw)) {
    *out = raw;
    return 0;
  }
  char *s = px_arena_alloc(a, 24);
  if (s == NULL) return DECLINE;
  int n = snprintf(s, 24, "%lld", (long long)v);
  *out = (px_str_t){s, (size_t)n};
  return 0;
}

/* lossy marks of generationConfig, added when the request is read */
#define L_MIME (1u << 0)

static int decode_generation(px_fw_t *w, px_freq_t *ir, gdec_t *d, px_arena_t *a,
                             unsigned *dropped, unsigned *marks) {
  static const char *const keys[N_GEN] = {
      "temperature", "topP", "topK", "maxOutputTokens", "stopSequences", "candidateCount",
      "responseMimeType", "responseJsonSchema", "responseSchema", "thinkingConfig",
      /* gen_dropped[] */
      "presencePenalty", "frequencyPenalty", "seed", "responseLogprobs", "logprobs",
      "mediaResolution", "speechConfig", "responseModalities"};
  px_fv_t f[N_GEN];
  unsigned seen = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) return px_fw_value(w, &f[0]) < 0 ? DECLINE : 0;
  if (px_fw_fields(w, keys, N_GEN, f, &seen) != 0) return DECLINE;
  if (HAS(G_TEMP) && f[G_TEMP].kind == PX_FV_NUM) ir->temperature = f[G_TEMP].raw;
  if (HAS(G_TOPP) && f[G_TOPP].kind == PX_FV_NUM) ir->top_p = f[G_TOPP].raw;
  if (HAS(G_TOPK) && f[G_TOPK].kind == PX_FV_NUM &&
      top_k_of(f[G_TOPK].raw, a, &ir->top_k) != 0)
    return DECLINE;
  if (HAS(G_MAX) && f[G_MAX].kind == PX_FV_NUM && px_fw_is_int(f[G_MAX].raw)) {
    if (px_fw_uint(f[G_MAX].raw, &ir->max_tokens_v) < 0 || ir->max_tokens_v < 1)
      gfail(d, E_GEN, "generationConfig.maxOutputTokens",
            "maxOutputTokens must be a positive integer of at most 18 digits");
    else
      ir->max_tokens = f[G_MAX].raw;
  }
  if (HAS(G_STOP) && f[G_STOP].kind == PX_FV_ARR) {
    px_fw_t sw = {f[G_STOP].raw.ptr, f[G_STOP].raw.len, 0};
    int r, n = 0;
    if (px_fw_open(&sw, '[') < 0) return DECLINE;
    while ((r = px_fw_elem(&sw)) == 1) {
      px_fv_t x;
      if (px_fw_value(&sw, &x) < 0 || x.kind != PX_FV_STR) return DECLINE;
      n++;
    }
    if (r < 0) return DECLINE;
    if (n > 0) ir->stop = f[G_STOP].raw; /* an empty list stops nothing */
  }
  if (HAS(G_CAND) && f[G_CAND].kind == PX_FV_NUM && px_fw_is_int(f[G_CAND].raw) &&
      f[G_CAND].raw.ptr[0] != '-') {
    /* an integer above 1 (any other value reads as 0 there) */
    int64_t n;
    if (px_fw_uint(f[G_CAND].raw, &n) < 0) return DECLINE;
    if (n > 1)
      gfail(d, E_GEN, "generationConfig.candidateCount",
            "candidateCount above 1 cannot be translated");
  }
  if (HAS(G_MIME) && f[G_MIME].kind == PX_FV_STR) {
    px_fstr_t mime = f[G_MIME].s;
    if (px_fs_is(mime, "application/json")) {
      /* responseJsonSchema, else responseSchema: an object is the schema */
      const px_fv_t *s = HAS(G_JSCHEMA)  ? &f[G_JSCHEMA]
                         : HAS(G_SCHEMA) ? &f[G_SCHEMA]
                                         : NULL;
      if (s != NULL && s->kind == PX_FV_OBJ) {
        if (schema_lower(s, a, &ir->rf_schema) != 0) return DECLINE;
        ir->rf_name = (px_fstr_t){"response", 8, 0};
      } else {
        ir->rf_json = 1;
      }
    } else if (!px_fs_is(mime, "text/plain")) {
      *marks |= L_MIME;
    }
  }
  if (HAS(G_THINK) && decode_thinking(&f[G_THINK], ir, a) != 0) return DECLINE;
  *dropped = seen >> G_DROP0;
  return 0;
}

enum { K_CONTENTS, K_SYS, K_TOOLS, K_TC, K_GEN, K_SAFETY, K_LABELS, K_CACHED, K_WRAPPED };
static const char *const top_keys[] = {
    "contents",   "systemInstruction", "tools",
    "toolConfig", "generationConfig",  "safetySettings",
    "labels",     "cachedContent",     "generateContentRequest"};

static int gem_fast_decode_request(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                   px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy,
                                   px_tr_err_t *err) {
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  px_fv_t f[NKEYS(top_keys)];
  unsigned seen = 0, dropped = 0, marks = 0;
  gdec_t d;
  int r;
  memset(&d, 0, sizeof(d));
  d.k_sig = px_frtok_index("signature");
  d.k_enc = px_frtok_index("encrypted_content");
  d.open_tail = &d.open;
  d.drops_tail = &d.drops;
  if (d.k_sig < 0 || d.k_enc < 0 || px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    if (k.esc) return DECLINE;
    int ki = px_fw_key_of(k, top_keys, NKEYS(top_keys));
    if (ki >= 0 && px_fw_seen_twice(&seen, ki)) return DECLINE;
    /* the large members are read in place, in body order */
    int rc = 0, inplace = 1;
    px_fw_t at = w;
    switch (ki) {
      case K_CONTENTS:
        rc = decode_contents(&w, ir, &d, a);
        break;
      case K_SYS:
        rc = decode_system(&w, ir, &d, a);
        break;
      case K_TOOLS:
        rc = decode_tools(&w, ir, &d, a);
        break;
      case K_GEN:
        rc = decode_generation(&w, ir, &d, a, &dropped, &marks);
        break;
      default:
        inplace = 0;
        break;
    }
    if (rc == PX_FAST_REFUSE) { /* refused there: the rest of it unread */
      w = at;
      inplace = 0;
    } else if (rc != 0) {
      return DECLINE;
    }
    if (inplace) continue;
    px_fv_t v;
    if (px_fw_value(&w, &v) < 0) return DECLINE;
    if (ki >= 0) f[ki] = v; /* other members are not read there */
  }
  if (r < 0) return DECLINE;
  /* a wrapped countTokens body: the inner request is read there */
  if (HAS(K_WRAPPED) && f[K_WRAPPED].kind == PX_FV_OBJ) return DECLINE;
  if (!HAS(K_CONTENTS)) gfail(&d, E_CONTENTS, "contents", "contents must be an array");
  if (HAS(K_CACHED))
    gfail(&d, E_CACHED, "cachedContent", "cachedContent cannot be translated");
  if (HAS(K_TC) && decode_tool_config(&f[K_TC], ir, &d, a) != 0) return DECLINE;
  if (d.prio != 0) {
    if (err != NULL) *err = d.e;
    return PX_FAST_REFUSE;
  }
  /* the method of the path decides, as the IR says there */
  if (ctx->stream)
    ir->stream_true = 1;
  else
    ir->stream_false = 1;
  if (d.exec) px_lossy_add(lossy, "contents[].parts[].executableCode");
  for (const tool_drop_t *t = d.drops; t; t = t->next) {
    char p[64];
    snprintf(p, sizeof(p), "tools[].%.*s", (int)t->key.n, t->key.p);
    px_lossy_add(lossy, p);
  }
  if (marks & L_MIME) px_lossy_add(lossy, "generationConfig.responseMimeType");
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

/* args as an object: the JSON text, or the string checked to be one (as
 * the reference reads it: px_fast_args_object); blank_ok: blank is {}
 * (px_tool_args_object, a client's call; an upstream's must be an object).
 * 0, PX_FAST_ARGS_NONE (no object: the caller's error to name), DECLINE */
static int call_args(px_arena_t *a, const px_fpart_t *p, int blank_ok, px_str_t *out) {
  if (p->input.ptr != NULL) {
    *out = p->input;
    return 0;
  }
  if (p->args.p == NULL && !blank_ok) return PX_FAST_ARGS_NONE;
  int blank = p->args.p == NULL ? 1 : blank_ok ? px_fs_blank_value(p->args) : 0;
  if (blank < 0) return DECLINE;
  if (blank) {
    *out = (px_str_t){"{}", 2};
    return 0;
  }
  px_fpart_t tmp = *p;
  int rc = px_fast_args_object(a, &tmp);
  if (rc != 0) return rc;
  *out = tmp.input;
  return 0;
}

/* a client's call's arguments as an object (px_tool_args_object): blank is
 * {}, anything else that is no object the client's error, named by its
 * own field; 0, DECLINE, or PX_FAST_REFUSE with err set */
static int client_args(const px_tr_ctx_t *ctx, px_arena_t *a, const px_fpart_t *p,
                       px_str_t *args, px_tr_err_t *err) {
  int rc = call_args(a, p, 1, args);
  if (rc != PX_FAST_ARGS_NONE) return rc;
  const char *id = p->id.p ? px_fs_cstr(a, p->id, NULL) : "";
  if (id == NULL) return DECLINE;
  const char *pa = px_in_names(ctx)->tool_args_param;
  px_tr_fail(err, pa, "%s: arguments of tool call '%s' are not a JSON object", pa, id);
  return PX_FAST_REFUSE;
}

/* the name of the call a result answers (the first part with that id) */
static const px_fpart_t *call_of(const px_freq_t *ir, px_fstr_t id) {
  for (const px_fmsg_t *m = ir->msgs; m; m = m->next)
    for (const px_fpart_t *p = m->parts; p; p = p->next)
      if (p->type == PX_FP_TOOL_CALL && p->id.p != NULL && p->name.p != NULL &&
          px_fs_same(p->id, id))
        return p;
  return NULL;
}

/* Whether the texts of a list, unescaped, start with '{' after whitespace:
 * 1, 0, or -1 when an escape hides it (\uXXXX). */
static int texts_open_brace(const px_fpart_t *parts) {
  for (const px_fpart_t *c = parts; c; c = c->next) {
    if (c->type != PX_FP_TEXT) continue;
    for (size_t i = 0; i < c->text.n; i++) {
      char ch = c->text.p[i];
      if (ch == ' ') continue;
      if (ch != '\\') return ch == '{';
      if (++i >= c->text.n) return -1;
      ch = c->text.p[i];
      if (ch != 'n' && ch != 't' && ch != 'r') return ch == 'u' ? -1 : 0;
    }
  }
  return 0;
}

/* the response object of a tool result (result_response in gemini.c): its
 * text when that is a JSON object, else {"output"|"error": text}; other
 * than text is dropped */
static int put_result(px_buf_t *b, const px_fpart_t *res, px_arena_t *a,
                      px_lossy_t *lossy) {
  size_t n = 0;
  int esc = 0;
  for (const px_fpart_t *c = res->content; c; c = c->next) {
    if (c->type != PX_FP_TEXT) {
      px_lossy_add(lossy, "messages[].content[].tool_result.content[].image");
      continue;
    }
    n += c->text.n;
    esc |= c->text.esc;
  }
  if (n > 0 && texts_open_brace(res->content) != 0) {
    /* the unescaped text, checked to be one object as jansson reads it */
    px_buf_t t;
    px_buf_init(&t, n + 1);
    int rc = 0;
    for (const px_fpart_t *c = res->content; c && rc == 0; c = c->next) {
      if (c->type != PX_FP_TEXT || c->text.n == 0) continue;
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
      /* an object as jansson reads it is spliced; text that only opens
       * with a brace (not JSON) is the output, as jansson refuses it; a
       * repeated "model" or "stream" there is the tool's, carried as is
       * once the whole is checked; deeper than the scanner's limit: not
       * taken */
      px_json_req_t scan;
      if (px_json_request(copy, tl, &scan) == 0) return px_buf_append(b, copy, tl);
      if (scan.err == PX_JREQ_DUPLICATE) {
        px_fw_t w = {copy, tl, 0};
        px_fv_t v;
        if (px_fc_value(&w, &v) < 0 || px_fc_end(&w) < 0) return DECLINE;
        return px_buf_append(b, copy, tl);
      }
      if (scan.err != PX_JREQ_SYNTAX) return DECLINE;
    }
  }
  int rc = px_fb_lit(b, res->is_error ? "{\"error\":\"" : "{\"output\":\"");
  if (rc == 0) rc = px_fb_texts(b, res->content);
  if (rc == 0) rc = px_fb_lit(b, "\"}");
  return rc;
}

/* mime_of_url in gemini.c: fileData's mimeType by the URL's extension */
static const char *mime_of_url(px_fstr_t url, int image) {
  static const char *const ext[][2] = {
      {".png", "image/png"},      {".jpg", "image/jpeg"}, {".jpeg", "image/jpeg"},
      {".webp", "image/webp"},    {".gif", "image/gif"},  {".heic", "image/heic"},
      {".pdf", "application/pdf"}};
  size_t n = 0;
  while (n < url.n && url.p[n] != '?' && url.p[n] != '#') n++;
  for (size_t i = 0; i < NKEYS(ext); i++) {
    size_t el = strlen(ext[i][0]);
    if (n > el && strncasecmp(url.p + n - el, ext[i][0], el) == 0) return ext[i][1];
  }
  return image ? "image/jpeg" : "application/pdf";
}

/* an image or file part with a URL or data (blob_out in gemini.c; one
 * with neither, an OpenAI file id, is dropped by put_contents) */
static int put_blob(px_buf_t *b, const px_fpart_t *p, px_arena_t *a) {
  px_fstr_t mt, data;
  int file = 0;
  if (p->url.p != NULL) {
    /* a data URL split (one not in the plain spelling declines: its ';'
     * may be an escape); another's type by its value's extension */
    int d = px_fs_data_url(p->url, 64, &mt, &data); /* the reference's buffer: 64 */
    if (d == DECLINE) return DECLINE;
    if (d != 0) {
      size_t n = p->url.n;
      const char *v = p->url.esc ? px_fs_cstr(a, p->url, &n) : p->url.p;
      if (v == NULL) return DECLINE;
      const char *m = mime_of_url((px_fstr_t){v, n, 0}, p->type == PX_FP_IMAGE);
      mt = (px_fstr_t){m, strlen(m), 0};
      data = p->url;
      file = 1;
    }
  } else {
    mt = p->media_type.p ? p->media_type : (px_fstr_t){"application/octet-stream", 24, 0};
    data = p->data;
  }
  int rc = px_fb_lit(
      b, file ? "\"fileData\":{\"mimeType\":" : "\"inlineData\":{\"mimeType\":");
  if (rc == 0) rc = px_fb_str(b, mt);
  if (rc == 0) rc = px_fb_lit(b, file ? ",\"fileUri\":" : ",\"data\":");
  if (rc == 0) rc = px_fb_str(b, data);
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* What the encoding of contents keeps: the IR fields of reasoning tokens. */
typedef struct genc {
  int k_ts, k_sig, k_enc, k_red;
} genc_t;

/* One IR part's members into the Gemini part already open (part_out in
 * gemini.c); the parts that write nothing are put_contents' */
static int put_part(const px_tr_ctx_t *ctx, px_buf_t *b, const px_freq_t *ir,
                    const px_fpart_t *p, px_arena_t *a, px_lossy_t *lossy,
                    px_tr_err_t *err) {
  int rc;
  switch (p->type) {
    case PX_FP_TEXT:
    case PX_FP_REFUSAL:
      rc = px_fb_lit(b, "\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : (px_fstr_t){"", 0, 0});
      break;
    case PX_FP_IMAGE:
    case PX_FP_FILE:
      return put_blob(b, p, a);
    case PX_FP_TOOL_CALL: {
      px_str_t args;
      if (p->custom) {
        px_tr_fail(err, "tools", "custom tools cannot be sent to a Gemini upstream");
        return PX_FAST_REFUSE;
      }
      if (p->name.p == NULL) return DECLINE;
      if ((rc = client_args(ctx, a, p, &args, err)) != 0) return rc;
      rc = px_fb_lit(b, "\"functionCall\":{\"name\":");
      if (rc == 0) rc = px_fb_str(b, p->name);
      if (rc == 0) rc = px_fb_lit(b, ",\"args\":");
      if (rc == 0) rc = px_fb_raw(b, args);
      if (rc == 0) rc = px_fb_lit(b, "}");
      break;
    }
    case PX_FP_TOOL_RESULT: {
      const px_fpart_t *call = p->id.p != NULL ? call_of(ir, p->id) : NULL;
      if (call == NULL) {
        px_tr_fail(err, "messages[].content[].tool_result",
                   "a tool result has no preceding tool call");
        return PX_FAST_REFUSE;
      }
      rc = px_fb_lit(b, "\"functionResponse\":{\"name\":");
      if (rc == 0) rc = px_fb_str(b, call->name);
      if (rc == 0) rc = px_fb_lit(b, ",\"response\":");
      if (rc == 0) rc = put_result(b, p, a, lossy);
      if (rc == 0) rc = px_fb_lit(b, "}");
      break;
    }
    default:
      return DECLINE;
  }
  return rc;
}

/* contents (contents_out in gemini.c): a turn per message, merged into the
 * turn before of the same role, none for a message that writes no part; a
 * Gemini signature of a reasoning part without text rides on the next part
 * of a model message; other families' tokens are dropped */
static int put_contents(const px_tr_ctx_t *ctx, px_buf_t *b, const px_freq_t *ir,
                        const genc_t *g, px_arena_t *a, px_lossy_t *lossy,
                        px_tr_err_t *err) {
  int rc = px_fb_lit(b, "{\"contents\":[");
  int open = -1; /* the role of the turn open */
  for (const px_fmsg_t *m = ir->msgs; m && rc == 0; m = m->next) {
    px_fstr_t sig = {0}; /* a signature waiting for the next part */
    for (const px_fpart_t *p = m->parts; p && rc == 0; p = p->next) {
      if (p->cache_control.ptr) px_lossy_add(lossy, "messages[].content[].cache_control");
      int thought = 0;
      if (p->type == PX_FP_REASONING) {
        px_fstr_t ts = p->tok[g->k_ts];
        if (ts.p == NULL) {
          if (p->tok[g->k_sig].p || p->tok[g->k_enc].p || p->tok[g->k_red].p)
            px_lossy_add(lossy, "messages[].content[].reasoning.signature");
          continue; /* thoughts of another family mean nothing to Gemini */
        }
        if (p->text.p == NULL || p->text.n == 0) {
          sig = ts;
          continue;
        }
        thought = 1;
      } else if ((p->type == PX_FP_IMAGE || p->type == PX_FP_FILE) && p->url.p == NULL &&
                 p->data.p == NULL) {
        px_lossy_add(lossy, "messages[].content[].file_id");
        continue;
      }
      if (open != m->assistant) {
        if (open >= 0) rc = px_fb_lit(b, "]},");
        if (rc == 0)
          rc = px_fb_lit(b, m->assistant ? "{\"role\":\"model\",\"parts\":[{"
                                         : "{\"role\":\"user\",\"parts\":[{");
        open = m->assistant;
      } else {
        rc = px_fb_lit(b, ",{");
      }
      if (rc != 0) break;
      if (thought) {
        rc = px_fb_lit(b, "\"text\":");
        if (rc == 0) rc = px_fb_str(b, p->text);
        if (rc == 0) rc = px_fb_lit(b, ",\"thought\":true,\"thoughtSignature\":");
        if (rc == 0) rc = px_fb_str(b, p->tok[g->k_ts]);
      } else {
        if (sig.p != NULL && m->assistant) {
          rc = px_fb_lit(b, "\"thoughtSignature\":");
          if (rc == 0) rc = px_fb_str(b, sig);
          if (rc == 0) rc = px_fb_lit(b, ",");
          sig.p = NULL;
        }
        if (rc == 0) rc = put_part(ctx, b, ir, p, a, lossy, err);
      }
      if (rc == 0) rc = px_fb_lit(b, "}");
    }
  }
  if (rc == 0) rc = px_fb_lit(b, open >= 0 ? "]}]" : "]");
  return rc;
}

/* budget_of_effort in gemini.c: -1 is dynamic */
static int64_t budget_of_effort(px_fstr_t e) {
  if (e.p == NULL) return -1;
  if (px_fs_is(e, "minimal") || px_fs_is(e, "low")) return 1024;
  if (px_fs_is(e, "medium")) return 8192;
  return 24576;
}

/* ,"<name>": opening generationConfig with its first member */
static int gen_key(px_buf_t *b, int *first, const char *name) {
  int rc = px_fb_lit(b, *first ? ",\"generationConfig\":{\"" : ",\"");
  *first = 0;
  if (rc == 0) rc = px_fb_lit(b, name);
  if (rc == 0) rc = px_fb_lit(b, "\":");
  return rc;
}

/* generationConfig (generation_out in gemini.c), omitted when empty */
static int put_generation(const px_tr_ctx_t *ctx, const px_freq_t *ir, px_buf_t *b,
                          px_lossy_t *lossy) {
  int rc = 0, first = 1;
  if (ir->max_tokens.ptr) {
    rc = gen_key(b, &first, "maxOutputTokens");
    if (rc == 0) rc = px_fb_raw(b, ir->max_tokens);
  } else if (ctx->default_max_tokens > 0) {
    rc = gen_key(b, &first, "maxOutputTokens");
    if (rc == 0) rc = px_fb_i64(b, ctx->default_max_tokens);
  }
  static const char *const gk[] = {"temperature", "topP", "topK"};
  px_str_t gv[3] = {ir->temperature, ir->top_p, ir->top_k};
  for (int i = 0; i < 3 && rc == 0; i++) {
    if (gv[i].ptr == NULL) continue;
    rc = gen_key(b, &first, gk[i]);
    if (rc == 0) rc = px_fb_raw(b, gv[i]);
  }
  if (rc == 0 && (ir->stop.ptr || ir->stop1.p)) {
    rc = gen_key(b, &first, "stopSequences");
    if (rc == 0 && ir->stop.ptr) {
      rc = px_fb_raw(b, ir->stop);
    } else if (rc == 0) {
      rc = px_fb_lit(b, "[");
      if (rc == 0) rc = px_fb_str(b, ir->stop1);
      if (rc == 0) rc = px_fb_lit(b, "]");
    }
  }
  if (rc == 0 && (ir->rf_json || ir->rf_schema.ptr)) {
    rc = gen_key(b, &first, "responseMimeType");
    if (rc == 0) rc = px_fb_lit(b, "\"application/json\"");
    if (rc == 0 && ir->rf_schema.ptr) {
      rc = px_fb_lit(b, ",\"responseJsonSchema\":");
      if (rc == 0) rc = px_fb_raw(b, ir->rf_schema);
    }
  }
  if (rc == 0 && ir->has_reasoning) {
    rc = gen_key(b, &first, "thinkingConfig");
    if (rc == 0 && px_fs_is(ir->effort, "none")) {
      rc = px_fb_lit(b, "{\"thinkingBudget\":0}");
    } else if (rc == 0) {
      rc = px_fb_lit(b, "{\"includeThoughts\":true,\"thinkingBudget\":");
      if (rc == 0)
        rc = px_fb_i64(b, ir->budget.ptr && ir->budget_v > 0
                              ? ir->budget_v
                              : budget_of_effort(ir->effort));
      if (rc == 0) rc = px_fb_lit(b, "}");
    }
    if (ir->summary.p) px_lossy_add(lossy, "reasoning.summary");
  }
  if (rc == 0 && !first) rc = px_fb_lit(b, "}");
  return rc;
}

static int gem_fast_encode_request(const px_tr_ctx_t *ctx, const px_freq_t *ir,
                                   px_buf_t *b, px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  genc_t g = {px_frtok_index("thought_signature"), px_frtok_index("signature"),
              px_frtok_index("encrypted_content"), px_frtok_index("redacted_data")};
  if (g.k_ts < 0 || g.k_sig < 0 || g.k_enc < 0 || g.k_red < 0) return DECLINE;
  int rc = put_contents(ctx, b, ir, &g, a, lossy, err);
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
      /* a custom tool holds no parameters */
      if (rc == 0 && !t->custom)
        rc = px_fb_opt_raw(b, ",\"parametersJsonSchema\":", t->params);
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
  if (rc == 0) rc = put_generation(ctx, ir, b, lossy);
  if (ir->user.p) px_lossy_add(lossy, "user");
  if (ir->metadata.ptr) px_lossy_add(lossy, "metadata");
  if (ir->parallel >= 0) px_lossy_add(lossy, "parallel_tool_calls");
  /* none after the fit: Gemini holds neither */
  if (ir->prompt_cache_key.p) px_lossy_add(lossy, "prompt_cache_key");
  if (ir->verbosity.p) px_lossy_add(lossy, "verbosity");
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* ======================================================================== */
/* Response decode                                                           */

/* The answer is walked once, in place: each container is read where it
 * stands instead of skipped first and read again (a generateContent answer
 * is nested four deep). What gemini.c reads with px_jstr is read here only
 * when a string, unescaped where its value decides something. */

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

/* What the walk of an answer keeps for the end (the finish reason may come
 * after the parts, the response id after the calls). */
typedef struct gresp {
  px_lossy_t *lossy;
  int k_ts;          /* the IR field "thought_signature" */
  int ncand;         /* candidates: its length (0: no array) */
  unsigned cseen;    /* the first candidate's members seen (C_*) */
  px_fstr_t fr, fm;  /* its finishReason, finishMessage (strings) */
  px_fstr_t br, brm; /* promptFeedback.blockReason, blockReasonMessage */
  px_fstr_t rid;     /* responseId (a string) */
  int rid_set, model_set;
} gresp_t;

/* one part of the candidate's content (gem_decode_response's loop) */
static int decode_part_out(px_fw_t *w, px_fresp_t *ir, gresp_t *g, px_arena_t *a) {
  px_fv_t f[NKEYS(part_fkeys)];
  unsigned seen = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) { /* no member of it is read there */
    px_fv_t v;
    return px_fw_value(w, &v) < 0 ? DECLINE : 0;
  }
  if (px_fw_kfields(w, part_fkeys, NKEYS(part_fkeys), f, &seen) != 0) return DECLINE;
  int sig = HAS(P_SIG) && f[P_SIG].kind == PX_FV_STR;
  int text = HAS(P_TEXT) && f[P_TEXT].kind == PX_FV_STR;
  px_fpart_t *p;
  if (HAS(P_THOUGHT) && f[P_THOUGHT].kind == PX_FV_TRUE) {
    if ((p = px_fpart_new(a, PX_FP_REASONING)) == NULL) return DECLINE;
    p->text = text ? f[P_TEXT].s : (px_fstr_t){"", 0, 0};
    if (sig) p->tok[g->k_ts] = f[P_SIG].s;
    px_fpart_push(&ir->content, &ir->last, p);
    return 0;
  }
  if (sig) {
    if ((p = px_fpart_new(a, PX_FP_REASONING)) == NULL) return DECLINE;
    p->text = (px_fstr_t){"", 0, 0};
    p->tok[g->k_ts] = f[P_SIG].s;
    px_fpart_push(&ir->content, &ir->last, p);
  }
  if (text) {
    /* a refusal's words when the finish says so: told at the end */
    if ((p = px_fpart_text(a, f[P_TEXT].s)) == NULL) return DECLINE;
  } else if (HAS(P_FC) && f[P_FC].kind == PX_FV_OBJ) {
    static const char *const keys[] = {"name", "args", "id"};
    px_fv_t c[3];
    unsigned cs = 0;
    if (px_fv_fields(&f[P_FC], keys, 3, c, &cs) != 0) return DECLINE;
    if ((p = px_fpart_new(a, PX_FP_TOOL_CALL)) == NULL) return DECLINE;
    p->name = (cs & 1) && c[0].kind == PX_FV_STR ? c[0].s : (px_fstr_t){"", 0, 0};
    if ((cs & 4) && c[2].kind == PX_FV_STR) p->id = c[2].s; /* else minted */
    if (args_in(a, (cs & 2) ? &c[1] : NULL, p) != 0) return DECLINE;
  } else {
    if (HAS(P_INLINE) || HAS(P_FILE))
      px_lossy_add(g->lossy, "candidates[].content.parts[].inlineData");
    else if (HAS(P_EXEC) || HAS(P_EXECR))
      px_lossy_add(g->lossy, "candidates[].content.parts[].executableCode");
    return 0;
  }
  px_fpart_push(&ir->content, &ir->last, p);
  return 0;
}

/* content {parts: [...], role} */
static int decode_content(px_fw_t *w, px_fresp_t *ir, gresp_t *g, px_arena_t *a) {
  px_fstr_t k;
  px_fv_t v;
  int r, nparts = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) return px_fw_value(w, &v) < 0 ? DECLINE : 0;
  if (px_fw_open(w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    if (k.esc) return DECLINE;
    if (!px_fs_is(k, "parts")) {
      if (px_fw_value(w, &v) < 0) return DECLINE;
      continue;
    }
    if (nparts++) return DECLINE; /* repeated: the last there */
    if (px_fw_peek(w) != PX_FV_ARR) {
      if (px_fw_value(w, &v) < 0) return DECLINE;
      continue;
    }
    if (px_fw_open(w, '[') < 0) return DECLINE;
    int rp;
    while ((rp = px_fw_elem(w)) == 1)
      if (decode_part_out(w, ir, g, a) != 0) return DECLINE;
    if (rp < 0) return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

enum { C_CONTENT, C_FINISH, C_SAFETY, C_GROUND, C_CITE, C_FMSG };
static const char *const cand_keys[] = {"content",          "finishReason",
                                        "safetyRatings",    "groundingMetadata",
                                        "citationMetadata", "finishMessage"};

/* candidates: the first one read, the others counted (gemini.c answers
 * one candidate, or a blocked prompt) */
static int decode_candidates(px_fw_t *w, px_fresp_t *ir, gresp_t *g, px_arena_t *a) {
  px_fstr_t k;
  px_fv_t v;
  int r;
  if (px_fw_peek(w) != PX_FV_ARR) return px_fw_value(w, &v) < 0 ? DECLINE : 0;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(w)) == 1) {
    if (g->ncand++ || px_fw_peek(w) != PX_FV_OBJ) {
      if (px_fw_value(w, &v) < 0) return DECLINE;
      continue;
    }
    if (px_fw_open(w, '{') < 0) return DECLINE;
    int rk;
    while ((rk = px_fw_member(w, &k)) == 1) {
      if (k.esc) return DECLINE;
      int ki = px_fw_key_of(k, cand_keys, NKEYS(cand_keys));
      if (ki >= 0 && px_fw_seen_twice(&g->cseen, ki)) return DECLINE;
      if (ki == C_CONTENT) {
        if (decode_content(w, ir, g, a) != 0) return DECLINE;
        continue;
      }
      if (px_fw_value(w, &v) < 0) return DECLINE;
      if (ki == C_FINISH && v.kind == PX_FV_STR) g->fr = v.s;
      if (ki == C_FMSG && v.kind == PX_FV_STR) g->fm = v.s;
    }
    if (rk < 0) return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

/* promptFeedback {blockReason, blockReasonMessage} */
static int decode_feedback(px_fw_t *w, gresp_t *g) {
  static const char *const keys[] = {"blockReason", "blockReasonMessage"};
  px_fv_t f[2];
  unsigned seen = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) return px_fw_value(w, &f[0]) < 0 ? DECLINE : 0;
  if (px_fw_fields(w, keys, 2, f, &seen) != 0) return DECLINE;
  if (HAS(0) && f[0].kind == PX_FV_STR) g->br = f[0].s;
  if (HAS(1) && f[1].kind == PX_FV_STR) g->brm = f[1].s;
  return 0;
}

enum { R_CANDS, R_ID, R_MODEL, R_USAGE, R_FEEDBACK };
static const char *const resp_keys[] = {"candidates", "responseId", "modelVersion",
                                        "usageMetadata", "promptFeedback"};

static int gem_fast_decode_response(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                    px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy,
                                    px_tr_err_t *err) {
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  gresp_t g = {.lossy = lossy, .k_ts = px_frtok_index("thought_signature")};
  int r;
  if (g.k_ts < 0 || px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    if (k.esc) return DECLINE;
    int ki = px_fw_key_of(k, resp_keys, NKEYS(resp_keys));
    if (ki >= 0 && px_fw_seen_twice(&seen, ki)) return DECLINE;
    if (ki == R_CANDS) {
      if (decode_candidates(&w, ir, &g, a) != 0) return DECLINE;
      continue;
    }
    if (ki == R_FEEDBACK) {
      if (decode_feedback(&w, &g) != 0) return DECLINE;
      continue;
    }
    if (ki == R_USAGE && px_fw_peek(&w) == PX_FV_OBJ) {
      if (decode_usage(&w, ir) != 0) return DECLINE;
      continue;
    }
    px_fv_t v;
    if (px_fw_value(&w, &v) < 0) return DECLINE;
    if (ki == R_ID && v.kind == PX_FV_STR) g.rid = v.s, g.rid_set = 1;
    if (ki == R_MODEL && v.kind == PX_FV_STR) ir->model = v.s, g.model_set = 1;
  }
  if (r < 0) return DECLINE;
  if (g.ncand != 1 && g.br.p == NULL) {
    px_tr_fail(err, "candidates", "%s", "upstream returned no single candidate");
    if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
    return PX_FAST_REFUSE;
  }
  /* the first candidate's finish, else the blocked prompt's */
  px_fstr_t frs = g.ncand > 0 ? g.fr : g.br, fms = g.ncand > 0 ? g.fm : g.brm;
  const char *fr = frs.p != NULL ? px_fs_cstr(a, frs, NULL) : "STOP";
  if (g.ncand > 0) ir->finish = g.fr; /* a candidate's, as the wire has it */
  if (fr == NULL) return DECLINE;
  int refused = px_stop_refused(px_gemini_stop(fr, 0));
  ir->id = g.rid_set ? g.rid : (px_fstr_t){"gemini", 6, 0};
  if (!g.model_set &&
      fs_of_cstr(a, ctx->upstream_model ? ctx->upstream_model : "", &ir->model) != 0)
    return DECLINE;
  /* minted call ids: px_gemini_call_id, call_<responseId or "gemini">_<n> */
  const char *rid = g.rid_set ? px_fs_cstr(a, g.rid, NULL) : "";
  if (rid == NULL) return DECLINE;
  int calls = 0;
  for (px_fpart_t *p = ir->content; p; p = p->next) {
    if (p->type == PX_FP_TEXT && refused) p->type = PX_FP_REFUSAL;
    if (p->type != PX_FP_TOOL_CALL) continue;
    if (p->id.p == NULL) {
      char id[160];
      int n = snprintf(id, sizeof(id), "call_%s_%d", *rid ? rid : "gemini", calls);
      if (n < 0 || (size_t)n >= sizeof(id) || fs_of_cstr(a, id, &p->id) != 0)
        return DECLINE; /* cut there, maybe inside a character */
    }
    calls++;
  }
  if (g.cseen & (1u << C_SAFETY)) px_lossy_add(lossy, "candidates[].safetyRatings");
  if (g.cseen & (1u << C_GROUND)) px_lossy_add(lossy, "candidates[].groundingMetadata");
  if (g.cseen & (1u << C_CITE)) px_lossy_add(lossy, "candidates[].citationMetadata");
  ir->stop = px_gemini_stop(fr, calls > 0);
  /* a refusal's own words (Vertex: promptFeedback.blockReasonMessage) */
  if (fms.p != NULL && fms.n > 0 && px_stop_refused(ir->stop))
    ir->refusal_explanation = fms;
  return 0;
}

/* ======================================================================== */
/* Response encode                                                           */

/* a Gemini part {"text":"","thoughtSignature":<sig>} holding a signature */
static int put_sig_part(px_buf_t *b, int *first, const px_fpart_t *sig) {
  int rc = px_fb_lit(b, *first ? "{\"text\":\"\",\"thoughtSignature\":"
                               : ",{\"text\":\"\",\"thoughtSignature\":");
  *first = 0;
  if (rc == 0) rc = px_fb_rtok(b, PX_PROTO_GEMINI, sig);
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* an upstream call's arguments as an object (gem_encode_response: parsed
 * by jansson, anything else is the upstream's fault): 0, DECLINE, or
 * PX_FAST_REFUSE with err set */
static int answer_args(px_arena_t *a, const px_fpart_t *p, px_str_t *args,
                       px_tr_err_t *err) {
  int rc = p->custom ? PX_FAST_ARGS_NONE : call_args(a, p, 0, args);
  if (rc != PX_FAST_ARGS_NONE) return rc;
  px_tr_fail(err, "content[].arguments", "%s",
             "upstream tool call arguments are not a JSON object");
  if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
  return PX_FAST_REFUSE;
}

static int gem_fast_encode_response(const px_tr_ctx_t *ctx, const px_fresp_t *ir,
                                    px_buf_t *b, px_arena_t *a, px_lossy_t *lossy,
                                    px_tr_err_t *err) {
  const px_fpart_t *sig = NULL; /* a signature waiting for the next part */
  int refused = 0, texted = 0, first = 1, rc;
  rc = px_fb_lit(b, "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[");
  for (const px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
    const char *tag;
    px_fstr_t tok;
    if (p->type == PX_FP_REASONING) {
      /* Gemini's own signature as is, another family's behind its tag */
      int ts = px_frtok_out(PX_PROTO_GEMINI, p, &tag, &tok);
      if (p->text.p != NULL && p->text.n > 0) {
        rc = px_fb_lit(b, first ? "{\"text\":" : ",{\"text\":");
        first = 0;
        if (rc == 0) rc = px_fb_str(b, p->text);
        if (rc == 0) rc = px_fb_lit(b, ",\"thought\":true");
        if (rc == 0 && ts) {
          rc = px_fb_lit(b, ",\"thoughtSignature\":");
          if (rc == 0) rc = px_fb_rtok(b, PX_PROTO_GEMINI, p);
        }
        if (rc == 0) rc = px_fb_lit(b, "}");
      } else if (ts) {
        /* two signatures in a row: the first on an empty part */
        if (sig != NULL) rc = put_sig_part(b, &first, sig);
        sig = p;
      }
      continue;
    }
    if (p->type != PX_FP_TEXT && p->type != PX_FP_REFUSAL && p->type != PX_FP_TOOL_CALL)
      continue; /* nothing there */
    px_str_t args = {0};
    if (p->type == PX_FP_TOOL_CALL && (rc = answer_args(a, p, &args, err)) != 0)
      return rc;
    rc = px_fb_lit(b, first ? "{" : ",{");
    first = 0;
    if (rc == 0 && sig != NULL) {
      rc = px_fb_lit(b, "\"thoughtSignature\":");
      if (rc == 0) rc = px_fb_rtok(b, PX_PROTO_GEMINI, sig);
      if (rc == 0) rc = px_fb_lit(b, ",");
      sig = NULL;
    }
    if (rc != 0) break;
    if (p->type == PX_FP_TOOL_CALL) {
      rc = px_fb_lit(b, "\"functionCall\":{\"id\":");
      if (rc == 0) rc = px_fb_str(b, p->id.p ? p->id : (px_fstr_t){"", 0, 0});
      if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
      if (rc == 0) rc = px_fb_str(b, p->name.p ? p->name : (px_fstr_t){"", 0, 0});
      if (rc == 0) rc = px_fb_lit(b, ",\"args\":");
      if (rc == 0) rc = px_fb_raw(b, args);
      if (rc == 0) rc = px_fb_lit(b, "}}");
      continue;
    }
    refused |= p->type == PX_FP_REFUSAL;
    texted = 1;
    if (p->type == PX_FP_TEXT && p->annotations.ptr != NULL &&
        !px_fw_empty(p->annotations))
      px_lossy_add(lossy, px_lossy_annotations(ctx));
    rc = px_fb_lit(b, "\"text\":");
    if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : (px_fstr_t){"", 0, 0});
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  /* a signature nothing followed: an empty part holds it */
  if (rc == 0 && sig != NULL) rc = put_sig_part(b, &first, sig);
  /* SPEC 11: toward Gemini clients any refusal is SAFETY, its wording a
   * text part, an explanation its finishMessage (and the only text part
   * when there is no other wording) */
  px_stop_t st = ir->stop;
  px_fstr_t expl = ir->refusal_explanation;
  if (refused && !px_stop_refused(st)) st = PX_STOP_REFUSAL;
  if (rc == 0 && px_stop_refused(st) && expl.p != NULL && !texted) {
    rc = px_fb_lit(b, first ? "{\"text\":" : ",{\"text\":");
    if (rc == 0) rc = px_fb_str(b, expl);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  const char *fin = px_gemini_finish(st);
  if (rc == 0) rc = px_fb_lit(b, "]},\"finishReason\":\"");
  if (rc == 0) rc = px_fb_lit(b, fin ? fin : "STOP");
  if (rc == 0) rc = px_fb_lit(b, "\",\"index\":0");
  if (rc == 0) rc = px_fb_opt_str(b, ",\"finishMessage\":", expl);
  if (rc == 0) rc = px_fb_lit(b, "}]");
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
  size_t model_at = b->len; /* traces: the model and the id as written */
  if (rc == 0)
    rc = px_buf_json_str(b, ctx->client_model ? ctx->client_model : "",
                         ctx->client_model ? strlen(ctx->client_model) : 0);
  size_t model_end = b->len;
  if (rc == 0) rc = px_fb_lit(b, ",\"responseId\":");
  size_t id_at = b->len + 1; /* its content, within the quotes */
  if (rc == 0) rc = px_fb_str(b, ir->id.p ? ir->id : (px_fstr_t){"", 0, 0});
  size_t id_end = b->len - 1;
  if (rc == 0) rc = px_fb_lit(b, "}");
  if (rc == 0)
    px_answer_wrote(ctx->client, b, id_at, id_end, model_at, model_end, fin ? fin : "STOP");
  return rc;
}

/* gemini.c's gem_count_request: the request wrapped as countTokens takes
 * it, {"generateContentRequest": {..., "model": "models/MODEL"}} */
static int gem_fast_count(px_buf_t *b, size_t start, const char *model) {
  static const char head[] = "{\"generateContentRequest\":";
  const size_t hl = sizeof(head) - 1;
  size_t n = b->len - start, i = 1;
  if (n < 2 || b->data[start] != '{' || b->data[b->len - 1] != '}') return -1;
  while (i < n - 1 && (b->data[start + i] == ' ' || b->data[start + i] == '\n')) i++;
  int empty = i == n - 1;
  /* in place: the body moves right by the head, its closing brace goes */
  int rc = px_buf_reserve(b, hl + 32 + (model ? strlen(model) : 0));
  if (rc != 0) return rc;
  memmove(b->data + start + hl, b->data + start, n - 1);
  memcpy(b->data + start, head, hl);
  b->len = start + hl + n - 1;
  rc = px_buf_puts(b, empty ? "\"model\":\"models/" : ",\"model\":\"models/");
  if (rc == 0 && model) rc = px_buf_json_escape(b, model, strlen(model));
  if (rc == 0) rc = px_buf_puts(b, "\"}}");
  return rc;
}

const px_fast_ops_t px_gemini_fast = {
    .count_request = gem_fast_count,
    .decode_request = gem_fast_decode_request,
    .encode_request = gem_fast_encode_request,
    .decode_response = gem_fast_decode_response,
    .encode_response = gem_fast_encode_response,
    /* a system note is a user turn there */
    .encodes = PX_FU_ALL | PX_FU_SYSTEM_NOTE,
    .resp_encodes = PX_FU_REASONING | PX_FU_REFUSAL | PX_FU_CUSTOM | PX_FU_MEDIA |
                    PX_FU_ANNOTATIONS | PX_FU_REFUSAL_EXPL,
};

/* ======================================================================== */
/* The wire: errors, token counts, model lists, the protocol table          */

px_stop_t px_gemini_stop(const char *fr, int has_tool_call) {
  if (fr == NULL) return PX_STOP_NONE;
  if (strcmp(fr, "STOP") == 0) return has_tool_call ? PX_STOP_TOOL_USE : PX_STOP_END_TURN;
  if (strcmp(fr, "MAX_TOKENS") == 0) return PX_STOP_MAX_TOKENS;
  if (strcmp(fr, "MALFORMED_FUNCTION_CALL") == 0 || strcmp(fr, "OTHER") == 0 ||
      strcmp(fr, "FINISH_REASON_UNSPECIFIED") == 0 ||
      strcmp(fr, "UNEXPECTED_TOOL_CALL") == 0)
    return PX_STOP_END_TURN;
  /* SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, a blocked prompt's
   * reason, ...: the output was filtered (SPEC 11: a refusal) */
  return PX_STOP_CONTENT_FILTER;
}

const char *px_gemini_finish(px_stop_t s) {
  switch (s) {
    case PX_STOP_NONE:
      return NULL;
    case PX_STOP_MAX_TOKENS:
      return "MAX_TOKENS";
    case PX_STOP_REFUSAL:
    case PX_STOP_CONTENT_FILTER:
      return "SAFETY";
    default:
      return "STOP";
  }
}

void px_gemini_usage_of(px_usage_t *u, int64_t prompt, int64_t cand, int64_t thoughts,
                        int64_t cached) {
  u->input_tokens = prompt;
  u->output_tokens = cand < 0 && thoughts < 0
                         ? -1
                         : (cand > 0 ? cand : 0) + (thoughts > 0 ? thoughts : 0);
  u->cache_read_tokens = cached;
  u->reasoning_tokens = thoughts;
}

void px_gemini_call_id(const char *resp_id, int n, char *out, size_t size) {
  snprintf(out, size, "call_%s_%d", resp_id && *resp_id ? resp_id : "gemini", n);
}

/* ---- errors ---- */

static const struct {
  px_errkind_t kind;
  const char *status;
} gstatus[] = {
    {PX_ERR_INVALID, "INVALID_ARGUMENT"},
    {PX_ERR_AUTH, "UNAUTHENTICATED"},
    {PX_ERR_PERMISSION, "PERMISSION_DENIED"},
    {PX_ERR_NOT_FOUND, "NOT_FOUND"},
    {PX_ERR_TOO_LARGE, "INVALID_ARGUMENT"},
    {PX_ERR_RATE_LIMIT, "RESOURCE_EXHAUSTED"},
    {PX_ERR_API, "INTERNAL"},
    {PX_ERR_BAD_GATEWAY, "UNAVAILABLE"},
    {PX_ERR_TIMEOUT, "DEADLINE_EXCEEDED"},
    {PX_ERR_OVERLOADED, "UNAVAILABLE"},
    {PX_ERR_UNAVAILABLE, "UNAVAILABLE"},
    {PX_ERR_NOT_IMPL, "UNIMPLEMENTED"},
    {PX_ERR_METHOD, "INVALID_ARGUMENT"},
    {PX_ERR_QUOTA, "RESOURCE_EXHAUSTED"},
};

static const char *status_of_kind(px_errkind_t k) {
  for (size_t i = 0; i < sizeof(gstatus) / sizeof(gstatus[0]); i++)
    if (gstatus[i].kind == k) return gstatus[i].status;
  return "INTERNAL";
}

static px_errkind_t kind_of_status(const char *s, int http) {
  if (s != NULL) {
    if (strcmp(s, "UNAVAILABLE") == 0)
      return http == 503 ? PX_ERR_OVERLOADED : PX_ERR_UNAVAILABLE;
    if (strcmp(s, "FAILED_PRECONDITION") == 0 || strcmp(s, "OUT_OF_RANGE") == 0)
      return PX_ERR_INVALID;
    for (size_t i = 0; i < sizeof(gstatus) / sizeof(gstatus[0]); i++)
      if (strcmp(s, gstatus[i].status) == 0) return gstatus[i].kind;
  }
  return px_errkind_from_type(NULL, http);
}

static int gem_decode_error(int status, const char *body, size_t len,
                            px_upstream_err_t *out) {
  json_t *j = px_jdoc_load(body, len, 0, NULL);
  if (json_is_array(j) && json_array_size(j) == 1) { /* streams may wrap it in an array */
    json_t *first = json_incref(json_array_get(j, 0));
    json_decref(j);
    j = first;
  }
  json_t *e = json_object_get(j, "error");
  const char *st = px_jstr(e, "status"), *msg = px_jstr(e, "message");
  if (!json_is_object(e) || st == NULL || !json_is_integer(json_object_get(e, "code"))) {
    json_decref(j);
    return PX_EINVAL;
  }
  memset(out, 0, sizeof(*out));
  out->kind = kind_of_status(st, status);
  snprintf(out->type, sizeof(out->type), "%s", st);
  snprintf(out->message, sizeof(out->message), "%s", msg ? msg : "");
  json_decref(j);
  return 0;
}

/* The error object {"error":{"code","message","status"}} (no newline). */
int px_gemini_error_body(px_buf_t *out, px_errkind_t kind, const char *message,
                         size_t len) {
  char code[16];
  snprintf(code, sizeof(code), "%d", px_errkind_status(kind));
  const char *st = status_of_kind(kind);
  int rc = px_buf_puts(out, "{\"error\":{\"code\":");
  if (rc == 0) rc = px_buf_puts(out, code);
  if (rc == 0) rc = px_buf_puts(out, ",\"message\":");
  if (rc == 0) rc = px_buf_json_str(out, message ? message : "", message ? len : 0);
  if (rc == 0) rc = px_buf_puts(out, ",\"status\":");
  if (rc == 0) rc = px_buf_json_str(out, st, strlen(st));
  if (rc == 0) rc = px_buf_puts(out, "}}");
  return rc;
}

static int gem_encode_error(px_buf_t *out, px_errkind_t kind, const char *type,
                            const char *message, const char *param,
                            const char *request_id) {
  (void)type, (void)param, (void)request_id; /* Gemini errors carry neither */
  return px_gemini_error_body(out, kind, message, message ? strlen(message) : 0);
}

static int gem_encode_stream_error(px_buf_t *out, px_errkind_t kind,
                                   const char *message) {
  int rc = px_buf_puts(out, "data: ");
  if (rc == 0)
    rc = px_gemini_error_body(out, kind, message, message ? strlen(message) : 0);
  if (rc == 0) rc = px_buf_puts(out, "\r\n\r\n");
  return rc;
}

/* ---- the wire: model-in-path URLs, countTokens, the model list ---- */

/* /v1beta/models/{model}:{method} or /v1/models/{model}:{method} */
static int gem_match(const char *path, size_t len, px_inbound_t *in) {
  static const char *const roots[] = {"/v1beta/models", "/v1/models"};
  for (size_t r = 0; r < 2; r++) {
    size_t rl = strlen(roots[r]);
    if (len < rl || memcmp(path, roots[r], rl) != 0) continue;
    if (len == rl) {
      if (r == 1) return 0; /* GET /v1/models is every protocol's list */
      in->ep = PX_EP_MODELS;
      return 1;
    }
    if (path[rl] != '/') return 0;
    const char *m = path + rl + 1, *end = path + len;
    const char *colon = memrchr(m, ':', (size_t)(end - m)); /* methods hold none */
    if (colon == NULL || colon == m || memchr(m, '/', (size_t)(colon - m))) return 0;
    px_str_t method = {colon + 1, (size_t)(end - colon - 1)};
    in->model = (px_str_t){m, (size_t)(colon - m)};
    if (px_str_eq(method, "generateContent"))
      in->stream = 0;
    else if (px_str_eq(method, "streamGenerateContent"))
      in->stream = 1;
    else if (px_str_eq(method, "countTokens"))
      in->ep = PX_EP_COUNT_TOKENS, in->stream = 0;
    else
      return 0;
    return 1;
  }
  return 0;
}

/* RFC 3986 unreserved bytes: written as they are in a path */
static const unsigned char unreserved[256] = {
    ['a' ... 'z'] = 1, ['A' ... 'Z'] = 1, ['0' ... '9'] = 1, ['-'] = 1,
    ['.'] = 1,         ['_'] = 1,         ['~'] = 1};

static int gem_upstream_url(px_buf_t *out, const char *model, int stream,
                            px_endpoint_t ep) {
  static const char root[] = "/v1beta/models/";
  if (ep == PX_EP_MODELS) return PX_EINVAL;
  const char *tail = ep == PX_EP_COUNT_TOKENS ? ":countTokens"
                     : stream                 ? ":streamGenerateContent?alt=sse"
                                              : ":generateContent";
  const unsigned char *m = (const unsigned char *)(model ? model : "");
  size_t ml = strlen((const char *)m), tl = strlen(tail);
  /* room for the longest: every byte of the model percent-encoded */
  int rc = px_buf_reserve(out, sizeof(root) - 1 + 3 * ml + tl);
  if (rc < 0) return rc;
  char *o = out->data + out->len;
  memcpy(o, root, sizeof(root) - 1);
  o += sizeof(root) - 1;
  for (size_t i = 0; i < ml;) {
    size_t r = i; /* a run of unreserved bytes: one copy */
    while (r < ml && unreserved[m[r]]) r++;
    memcpy(o, m + i, r - i);
    o += r - i;
    if ((i = r) < ml) { /* percent-encoded */
      *o++ = '%';
      *o++ = "0123456789ABCDEF"[m[i] >> 4];
      *o++ = "0123456789ABCDEF"[m[i++] & 15];
    }
  }
  memcpy(o, tail, tl);
  out->len = (size_t)(o + tl - out->data);
  return 0;
}

static int64_t gem_count_decode(json_t *body) {
  return px_jint(body, "totalTokens", -1);
}

static int gem_count_encode(px_buf_t *out, int64_t n) {
  return px_count_body(out, "{\"totalTokens\":", n);
}

static int gem_models(px_buf_t *out, const char *const *ids, const char *const *owners,
                      size_t n) {
  (void)owners;
  int rc = px_buf_puts(out, "{\"models\":[");
  for (size_t i = 0; i < n && rc == 0; i++) {
    rc = px_buf_puts(out, i ? ",{\"name\":\"models/" : "{\"name\":\"models/");
    if (rc == 0) rc = px_buf_json_escape(out, ids[i], strlen(ids[i]));
    if (rc == 0) rc = px_buf_puts(out, "\",\"displayName\":");
    if (rc == 0) rc = px_buf_json_str(out, ids[i], strlen(ids[i]));
    if (rc == 0)
      rc = px_buf_puts(out,
                       ",\"supportedGenerationMethods\":[\"generateContent\","
                       "\"streamGenerateContent\",\"countTokens\"]}");
  }
  if (rc == 0) rc = px_buf_puts(out, "]}");
  return rc;
}

static const char *const gem_forward[] = {NULL};

const px_proto_ops_t px_proto_gemini = {
    .id = PX_PROTO_GEMINI,
    .name = "gemini_generate_content",
    .otel_provider = "gcp.gemini",
    .otel_operation = "generate_content",
    .inbound_path = "/models/",
    .upstream_path = "/v1beta/models/",
    .decode_error = gem_decode_error,
    .encode_error = gem_encode_error,
    .encode_stream_error = gem_encode_stream_error,
    .sdec_new = px_gemini_sdec_new,
    .sdec_feed = px_gemini_sdec_feed,
    .sdec_finish = px_gemini_sdec_finish,
    .sdec_free = px_gemini_sdec_free,
    .senc_new = px_gemini_senc_new,
    .senc_event = px_gemini_senc_event,
    .senc_free = px_gemini_senc_free,
    .match = gem_match,
    .upstream_url = gem_upstream_url,
    .count_decode = gem_count_decode,
    .count_encode = gem_count_encode,
    .encode_models = gem_models,
    .forward_headers = gem_forward,
    .auth_header = "x-goog-api-key: ",
    .client_key_header = "x-goog-api-key",
    .client_key_query = "key",
    .error_type = status_of_kind,
    .model_in_path = 1,
    .error_status_of_kind = 1,
    .env_key = "GEMINI_API_KEY",
    .env_base = "GEMINI_BASE_URL",
    .default_base = "https://generativelanguage.googleapis.com",
    .default_name = "gemini",
    .default_glob = "gemini-*",
    .rtoks = {{"thought_signature", "pxg1:sig:"}},
    .rtoks_unasked = 1,
    .caps = PX_CAP_REASONING_TOKENS,
    .fast = &px_gemini_fast,
    .names = {.reasoning_text = PX_LOSSY("contents[].parts[].thought"),
              .reasoning_token = PX_LOSSY("contents[].parts[].thoughtSignature"),
              .reasoning_redacted = PX_LOSSY("contents[].parts[].thoughtSignature"),
              .reasoning_config = PX_LOSSY("generationConfig.thinkingConfig"),
              .stop = PX_LOSSY("generationConfig.stopSequences"),
              .tool_args_param = "contents.parts.functionCall.args",
              .annotations = PX_LOSSY("candidates[].groundingMetadata"),
              .opaque_reasoning =
                  PX_LOSSY("candidates[].content.parts[].thoughtSignature"),
              .refusal_explanation = PX_LOSSY("candidates[].finishMessage")},
    .max_tokens_keys = {{"generationConfig", "maxOutputTokens"}},
    .watch = {.usage_obj = "usageMetadata",
              .usage_in = "promptTokenCount",
              .usage_out = "candidatesTokenCount",
              .usage_out_extra = "thoughtsTokenCount",
              .finish_keys = {"finishReason", "blockReason"},
              .error_data = 1,
              .model_path = {"modelVersion"},
              .model_depth = 1,
              .body_model = "modelVersion",
              .answer_id = "responseId",
              .finish_list = "candidates",
              .finish_key = "finishReason"},
};
