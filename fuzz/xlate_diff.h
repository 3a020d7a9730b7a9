/* xlate_diff.h - the differential check of request and non-streaming
 * response translation
 * shared by fuzz_translate_fast.c and fuzz_gemini_fast.c: the fast path
 * (src/proto/translate_fast.c) against the jansson path, the arbiter. Wherever
 * the fast path takes a body (as written, or in its plain spelling:
 * px_json_respell), the jansson path must succeed too, with a
 * JSON-equal body (json_equal of both parses) and the same lossy list,
 * and the usage it hands over must be what px_usage_scan reads.
 * Where the gateway refuses a body, the reference refuses it too: in the
 * same words when a codec refused it, in any words when the codecs declined
 * it (the hub's refusal), but for the deliberate differences
 * (declined_on_purpose); an upstream answer the codecs decline as written
 * and in its plain spelling (the hub's 502) is one the reference refuses
 * too, but for the same differences. Else the target aborts. */
#ifndef PX_FUZZ_XLATE_DIFF_H
#define PX_FUZZ_XLATE_DIFF_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jdepth.h"
#include "jumps_check.h"
#include "proxai/fastir.h"
#include "proxai/passthru.h"
#include "proxai/proto.h"
#include "proxai/usage.h"
#include "ref.h"

static inline void diff_fail(const char *what, const px_tr_ctx_t *c, const char *body,
                             size_t len, const char *fast, const char *slow,
                             const char *lf, const char *ls) {
  fprintf(stderr,
          "fuzz_translate_fast: %s differs (%d -> %d)\nbody: %.*s\nfast: %s\nslow: %s\n"
          "lossy fast: %s\nlossy slow: %s\n",
          what, (int)c->in, (int)c->out, (int)len, body, fast ? fast : "(none)",
          slow ? slow : "(none)", lf, ls);
  abort();
}

static inline void check_json(const char *what, const px_tr_ctx_t *c, const char *body,
                              size_t len, const char *fast, size_t flen, const char *slow,
                              size_t slen, const px_lossy_t *lf, const px_lossy_t *ls) {
  json_t *a = json_loadb(fast, flen, 0, NULL);
  json_t *b = json_loadb(slow, slen, 0, NULL);
  if (a == NULL || b == NULL || !json_equal(a, b) || strcmp(lf->buf, ls->buf) != 0)
    diff_fail(what, c, body, len, fast, slow, lf->buf, ls->buf);
  json_decref(a);
  json_decref(b);
}

static inline int same_refusal(const px_tr_err_t *a, const px_tr_err_t *b) {
  return a->kind == b->kind && strcmp(a->param, b->param) == 0 &&
         strcmp(a->message, b->message) == 0;
}

/* A body translated in parts (the client body's long strings as spans, as
 * the gateway sends it) made whole: *fo replaced by the parts joined. */
static inline void join_parts(char **fo, size_t *fl, const px_spans_t *sp) {
  px_str_t *parts = NULL;
  size_t np = 0, at = 0;
  if (px_spans_parts(*fo, *fl, sp, &parts, &np) != 0) abort();
  char *w = malloc(*fl + sp->bytes + 1);
  if (w == NULL) abort();
  for (size_t i = 0; i < np; at += parts[i].len, i++)
    memcpy(w + at, parts[i].ptr, parts[i].len);
  w[at] = 0;
  free(parts);
  free(*fo);
  *fo = w;
  *fl = at;
}

/* The fast codecs' own refusal of the body, as written or in its plain
 * spelling, into *e: 1; 0 when both decline (the gateway's refusal is
 * then the hub's, odd_refusal in translate_fast.c). */
static inline int codec_refusal(const px_tr_ctx_t *c, const char *body, size_t len,
                                px_tr_err_t *e) {
  int r = PX_FAST_DECLINE;
  for (int pass = 0; pass < 2 && r == PX_FAST_DECLINE; pass++) {
    px_buf_t b;
    px_buf_init(&b, len + 1);
    const char *p = body;
    size_t n = len;
    if (pass == 1) {
      if (px_json_respell(body, len, &b) <= 0) {
        px_buf_free(&b);
        break;
      }
      p = b.data;
      n = b.len;
    }
    char *d = NULL;
    size_t dl = 0;
    px_lossy_t ld;
    px_lossy_init(&ld);
    memset(e, 0, sizeof(*e));
    px_tr_ctx_t pc = *c;
    pc.spans = NULL;
    r = px_translate_request_fast(&pc, p, n, 0, &d, &dl, &ld, e);
    free(d);
    px_buf_free(&b);
  }
  return r == PX_FAST_REFUSE;
}

/* Whether the fast codecs refused the answer (in their own words, the
 * reference's) as written or in its plain spelling, rather than both
 * declining it (the hub's 502 then, odd_refusal). */
static inline int answer_codec_refusal(const px_tr_ctx_t *c, const char *body,
                                       size_t len) {
  int r = PX_FAST_DECLINE;
  for (int pass = 0; pass < 2 && r == PX_FAST_DECLINE; pass++) {
    px_buf_t b, out;
    px_buf_init(&b, len + 1);
    px_buf_init(&out, len * 4 + 65536);
    const char *p = body;
    size_t n = len;
    if (pass == 1 && px_json_respell(body, len, &b) <= 0) {
      px_buf_free(&b);
      px_buf_free(&out);
      break;
    }
    if (pass == 1) p = b.data, n = b.len;
    px_lossy_t l;
    px_lossy_init(&l);
    px_usage_t u = {-1, -1, -1, -1, -1};
    px_tr_err_t e;
    memset(&e, 0, sizeof(e));
    r = px_translate_response_fast(c, p, n, &out, &l, &u, &e);
    px_buf_free(&out);
    px_buf_free(&b);
  }
  return r == PX_FAST_REFUSE;
}

/* a schema "type" of 32 bytes and more anywhere in v (the reference cuts
 * it to 31 before lower-casing it for Gemini) */
static inline int long_type(json_t *v) {
  const char *key;
  json_t *m;
  size_t i;
  if (json_is_array(v)) {
    json_array_foreach(v, i, m) if (long_type(m)) return 1;
    return 0;
  }
  json_object_foreach(v, key, m) {
    if (!strcmp(key, "type") && json_string_length(m) >= 32) return 1;
    if (long_type(m)) return 1;
  }
  return 0;
}

/* an "arguments" string anywhere in v holding brackets nested deeper than
 * the one reader takes (PX_JSON_MAX_DEPTH), counted as if no bracket were
 * in a string: jansson reads such arguments to its own limit */
static inline int deep_arguments(json_t *v) {
  const char *key;
  json_t *m;
  size_t i;
  if (json_is_array(v)) {
    json_array_foreach(v, i, m) if (deep_arguments(m)) return 1;
    return 0;
  }
  json_object_foreach(v, key, m) {
    if (!strcmp(key, "arguments") && json_is_string(m)) {
      int d = 0, top = 0;
      for (const char *t = json_string_value(m); *t; t++) {
        if (*t == '[' || *t == '{') top = ++d > top ? d : top;
        if (*t == ']' || *t == '}') d--;
      }
      if (top > PX_JSON_MAX_DEPTH) return 1;
    }
    if (deep_arguments(m)) return 1;
  }
  return 0;
}

/* The deliberate differences: what the gateway refuses (in the hub's
 * words) and the reference translated. By the refusal's path: a member
 * held twice, a member name with a quote, a backslash or a control
 * character, a name the lossy list cannot hold (the codecs read no such
 * member; the reference read the last of a repeat). By the body's field,
 * for the catch-all: numbers the codecs read only in range, where the
 * reference read a double or a wrapped integer: thinking.budget_tokens
 * negative or of 19 digits and more, generationConfig.topK of 1e15 and
 * more in magnitude (past a double's integer precision); a schema "type"
 * of 32 bytes and more; a tool call's arguments nested deeper than the one
 * reader's limit (deep_arguments). By the body: nesting deeper than that
 * limit (PX_JSON_MAX_DEPTH; an upstream answer meets it in the hub, a
 * client body at admission), and a raw NUL byte (jansson's lexer drops
 * one that directly follows a number or a literal, so `[1<NUL>,2]` loads;
 * in a string it refuses it: any NUL in a body it took is that one; the
 * one reader refuses every raw NUL, as RFC 8259 has it). (Values escaped
 * in every spelling, ids and names included, are read by their value:
 * px_fs_is, px_fs_same.) */
static inline int declined_on_purpose(const char *body, size_t len,
                                      const px_tr_err_t *e) {
  if (memchr(body, 0, len) != NULL) return 1;
  if (strstr(e->message, " more than once") != NULL ||
      strstr(e->message, "has a member name with a quote") != NULL ||
      strstr(e->message, "has a member name the x-proxai-lossy header") != NULL)
    return 1;
  if (e->param[0] != 0) return 0;
  json_t *doc = json_loadb(body, len, 0, NULL);
  if (doc_depth(doc) > PX_JSON_MAX_DEPTH) { /* the one reader's limit (jansson's: 2048) */
    json_decref(doc);
    return 1;
  }
  const json_int_t huge = 1000000000000000000LL; /* 19 digits */
  int yes = 0;
  json_t *v = json_object_get(json_object_get(doc, "thinking"), "budget_tokens");
  if (json_is_integer(v) && (json_integer_value(v) < 0 || json_integer_value(v) >= huge))
    yes = 1;
  v = json_object_get(json_object_get(doc, "generationConfig"), "topK");
  if (json_is_number(v) && !(json_number_value(v) < 1e15 && json_number_value(v) > -1e15))
    yes = 1;
  if (long_type(doc) || deep_arguments(doc)) yes = 1;
  json_decref(doc);
  return yes;
}

static inline void request_one(const px_tr_ctx_t *c, const char *body, size_t len) {
  unsigned long before, after;
  px_translate_fast_counts(&before, NULL);
  char *fo = NULL, *so = NULL;
  size_t fl = 0, sl = 0;
  px_lossy_t lf, ls;
  px_tr_err_t ef, es;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  memset(&ef, 0, sizeof(ef));
  memset(&es, 0, sizeof(es));
  /* in parts, as the gateway sends it: what the reference is held to */
  px_tr_ctx_t pc = *c;
  px_spans_t sp = {0};
  pc.spans = &sp;
  int rf = px_translate_request_body(&pc, body, len, 0, &fo, &fl, &lf, &ef);
  if (rf == 0 && sp.n) join_parts(&fo, &fl, &sp);
  px_spans_free(&sp);
  px_translate_fast_counts(&after, NULL);
  if (after != before) {
    if (rf != 0) abort(); /* a fast answer is an answer */
    px_tr_ctx_t ref = *c;
    int rs = px_translate_request_ref(&ref, body, len, 0, &so, &sl, &ls, &es);
    if (rs != 0)
      diff_fail("request (jansson refused)", c, body, len, fo, es.message, lf.buf, "");
    check_json("request", c, body, len, fo, fl, so, sl, &lf, &ls);
  } else if (rf != 0) {
    /* a refusal of the fast codecs is the reference's refusal, word for word;
     * what they decline, as written and in its plain spelling, is the
     * gateway's 400, and the reference refuses it too, but for the
     * deliberate differences (declined_on_purpose) */
    if (ef.kind != PX_ERR_INVALID)
      diff_fail("request (not a 400)", c, body, len, ef.message, "", "", "");
    px_tr_ctx_t ref = *c;
    int rs = px_translate_request_ref(&ref, body, len, 0, &so, &sl, &ls, &es);
    px_tr_err_t ed;
    memset(&ed, 0, sizeof(ed));
    if (codec_refusal(c, body, len, &ed)) {
      if (rs == 0 || !same_refusal(&ed, &es))
        diff_fail("request refusal", c, body, len, ed.message, es.message, ed.param,
                  es.param);
    } else if (rs == 0 && !declined_on_purpose(body, len, &ef)) {
      diff_fail("request (declined, the reference takes it)", c, body, len, ef.message,
                so, ef.param, "");
    }
  }
  free(fo);
  free(so);
}

/* as the gateway sets the context: the request streams as the body's
 * `stream` says, or, where the path names the model and the method (Gemini),
 * either way; the admission scan's container ends handed to the decoder
 * (px_json_request_jumps, sound: jumps_check.h) */
static inline void request(const px_tr_ctx_t *c, const char *body, size_t len) {
  px_json_req_t scan;
  px_json_jumps_t jt = {.cap = len / (PX_JSON_JUMP_MIN / 2) + 1};
  jt.v = malloc(jt.cap * sizeof(*jt.v));
  if (jt.v == NULL) abort();
  if (px_json_request_jumps(body, len, NULL, NULL, &jt, &scan) < 0) {
    free(jt.v);
    return;
  }
  if (!jumps_sound(body, len, &jt)) {
    fprintf(stderr, "the scan's container ends are not the walker's\nbody: %.*s\n",
            (int)len, body);
    abort();
  }
  px_tr_ctx_t s = *c;
  s.scan = &scan;
  for (int st = 0; st < 2; st++) {
    if (!px_proto_get(c->in)->model_in_path && st != scan.stream) continue;
    s.stream = st;
    request_one(&s, body, len);
  }
  free(jt.v);
}

static inline void response(const px_tr_ctx_t *c, const char *body, size_t len) {
  px_buf_t fb;
  px_buf_init(&fb, len * 4 + 65536);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_usage_t uf = {-1, -1, -1, -1, -1}, us = uf;
  px_tr_err_t ef;
  memset(&ef, 0, sizeof(ef));
  int fr = px_translate_response_fast(c, body, len, &fb, &lf, &uf, &ef);
  if (fr == PX_FAST_DECLINE) {
    /* the gateway's rule: the answer in its plain spelling, else a 502 */
    fr = px_translate_response_body(c, body, len, &fb, &lf, &uf, &ef);
    if (fr == PX_FAST_REFUSE && ef.kind != PX_ERR_BAD_GATEWAY)
      diff_fail("response (not a 502)", c, body, len, ef.message, "", "", "");
    if (fr == PX_FAST_REFUSE && !answer_codec_refusal(c, body, len)) {
      /* the codecs declined it as written and in its plain spelling: the
       * hub's 502, and the reference refuses it too, but for the
       * deliberate differences (declined_on_purpose) */
      json_t *ub = json_loadb(body, len, 0, NULL), *cb = NULL;
      px_tr_err_t es;
      memset(&es, 0, sizeof(es));
      if (ub != NULL && px_translate_response(c, ub, &cb, &ls, &es) == 0 &&
          !declined_on_purpose(body, len, &ef)) {
        char *s = json_dumps(cb, JSON_COMPACT);
        diff_fail("response (declined, the reference takes it)", c, body, len, ef.message,
                  s, ef.param, "");
      }
      json_decref(cb);
      json_decref(ub);
      fr = PX_FAST_DECLINE; /* checked */
    }
  }
  if (fr == PX_FAST_REFUSE) {
    /* the reference refuses it too, in the same words */
    json_t *ub = json_loadb(body, len, 0, NULL), *cb = NULL;
    px_tr_err_t es;
    memset(&es, 0, sizeof(es));
    if (ub != NULL &&
        (px_translate_response(c, ub, &cb, &ls, &es) == 0 || !same_refusal(&ef, &es)))
      diff_fail("response refusal", c, body, len, ef.message, es.message, ef.param,
                es.param);
    json_decref(cb);
    json_decref(ub);
  }
  if (fr == 0 || fr == PX_FAST_USAGE) {
    /* the usage handed over is what the scan of the body finds */
    px_usage_scan(c->out, body, len, &us);
    if (fr == PX_FAST_USAGE) uf = us;
    if (uf.input_tokens != us.input_tokens || uf.output_tokens != us.output_tokens) {
      fprintf(stderr, "usage differs: fast %lld/%lld, scan %lld/%lld\nbody: %.*s\n",
              (long long)uf.input_tokens, (long long)uf.output_tokens,
              (long long)us.input_tokens, (long long)us.output_tokens, (int)len, body);
      abort();
    }
    json_t *ub = json_loadb(body, len, 0, NULL), *cb = NULL;
    px_tr_err_t err;
    memset(&err, 0, sizeof(err));
    if (px_buf_append(&fb, "", 1) < 0) abort();
    if (ub == NULL || px_translate_response(c, ub, &cb, &ls, &err) < 0)
      diff_fail("response (jansson refused)", c, body, len, fb.data, err.message, lf.buf,
                "");
    char *s = json_dumps(cb, JSON_COMPACT);
    if (s == NULL) abort();
    check_json("response", c, body, len, fb.data, fb.len - 1, s, strlen(s), &lf, &ls);
    free(s);
    json_decref(cb);
    json_decref(ub);
  }
  px_buf_free(&fb);
}

#endif
