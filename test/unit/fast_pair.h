/* fast_pair.h - the unit tests' check of the fast path of non-streaming
 * translation against the jansson path (include/proxai/fastir.h): the fast
 * path takes the body, and both write JSON-equal bodies with the same lossy
 * list. Include after check.h. */
#ifndef PX_TEST_FAST_PAIR_H
#define PX_TEST_FAST_PAIR_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "ref.h"

static inline void ctx_of(px_tr_ctx_t *c, int in, int out) {
  memset(c, 0, sizeof(*c));
  c->in = (px_proto_t)in;
  c->out = (px_proto_t)out;
  c->client_model = "client-model";
  c->upstream_model = "upstream-model";
  c->created = 1700000000;
}

/* the context of a client request body toward (in, out), a body the
 * scanner accepts (checked); stream: the context's (-1: the body's
 * `stream`, as the gateway sets it) */
static inline void request_ctx(px_tr_ctx_t *c, int in, int out, const char *body,
                               size_t len, int stream) {
  ctx_of(c, in, out);
  px_json_req_t scan;
  CHECK(px_json_request(body, len, &scan) == 0);
  c->stream = stream < 0 ? scan.stream : stream;
}

static inline int same_json(const char *a, size_t an, const char *b, size_t bn) {
  json_t *x = json_loadb(a, an, 0, NULL), *y = json_loadb(b, bn, 0, NULL);
  int eq = x != NULL && y != NULL && json_equal(x, y);
  json_decref(x);
  json_decref(y);
  return eq;
}

/* an answer IR before a decoder fills it: no token counts */
static inline void fresp_init(px_fresp_t *ir) {
  memset(ir, 0, sizeof(*ir));
  ir->in = ir->out = ir->cache_read = ir->cache_creation = ir->reasoning = -1;
}

/* a fast refusal ef in the reference's words es: kind, param, message */
static inline int same_words(const px_tr_err_t *ef, const px_tr_err_t *es) {
  return ef->kind == es->kind && strcmp(ef->param, es->param) == 0 &&
         strcmp(ef->message, es->message) == 0;
}

/* the fast body b and lossy list lf against the reference body so (NULL:
 * none) and lossy list ls: JSON-equal, the same list (what names the
 * check on stderr); want (when not NULL) in the fast body */
static inline void fast_same(const char *what, px_buf_t *b, const px_lossy_t *lf,
                             const char *so, const px_lossy_t *ls, const char *want) {
  int eq = so != NULL && b->data != NULL && same_json(b->data, b->len, so, strlen(so)) &&
           strcmp(lf->buf, ls->buf) == 0;
  CHECK(eq);
  if (!eq)
    fprintf(stderr, "%s\nfast: %.*s [%s]\nslow: %s [%s]\n", what, (int)b->len,
            b->data ? b->data : "", lf->buf, so ? so : "", ls->buf);
  if (want != NULL && b->data != NULL) {
    CHECK(px_buf_append(b, "", 1) == 0);
    b->len--; /* the NUL ends the text, not the body */
    int has = strstr(b->data, want) != NULL;
    CHECK(has);
    if (!has) fprintf(stderr, "%s: no %s in %s\n", what, want, b->data);
  }
}

/* A request IR through the fast encoder of c->out, and the same IR as a
 * document (jir) through the reference's encode_request: fast_same (want
 * in the fast body); lf and ls: the lossy lists, for the caller's checks */
static inline void encoder_same(const char *what, const px_tr_ctx_t *c,
                                const px_freq_t *ir, json_t *jir, px_lossy_t *lf,
                                px_lossy_t *ls, const char *want) {
  const px_ref_ops_t *ops = px_ref_get(c->out);
  px_arena_t a;
  px_arena_init(&a);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  CHECK((px_freq_uses(ir) & ~px_proto_get(c->out)->fast->encodes) == 0);
  CHECK(px_proto_get(c->out)->fast->encode_request(c, ir, &b, &a, lf, NULL) == 0);
  json_t *out = NULL;
  px_tr_err_t err;
  CHECK(jir != NULL && ops->encode_request(c, jir, &out, ls, &err) == 0);
  char *so = out ? json_dumps(out, JSON_COMPACT) : NULL;
  fast_same(what, &b, lf, so, ls, want);
  free(so);
  json_decref(out);
  px_buf_free(&b);
  px_arena_free(&a);
}

/* An answer IR through protocol p's fast response encoder, and the same IR
 * as a document (jir) through p's reference encode_response, in context c:
 * fast_same (want in the fast body) */
static inline void answer_encoder_same(const char *what, int p, const px_tr_ctx_t *c,
                                       const px_fresp_t *ir, json_t *jir,
                                       const char *want) {
  const px_ref_ops_t *ops = px_ref_get((px_proto_t)p);
  px_arena_t a;
  px_arena_init(&a);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  CHECK((px_fresp_uses(ir) & ~px_proto_get((px_proto_t)p)->fast->resp_encodes) == 0);
  CHECK(px_proto_get((px_proto_t)p)->fast->encode_response(c, ir, &b, &a, &lf, NULL) ==
        0);
  json_t *out = NULL;
  px_tr_err_t err;
  CHECK(jir != NULL && ops->encode_response(c, jir, &out, &ls, &err) == 0);
  char *so = out ? json_dumps(out, JSON_COMPACT) : NULL;
  fast_same(what, &b, &lf, so, &ls, want);
  free(so);
  json_decref(out);
  px_buf_free(&b);
  px_arena_free(&a);
}

/* An answer through both fast halves, as the hub steps them: dec's
 * decode_response, then enc's encode_response into b (declined when the
 * IR holds a part enc does not write); ef (may be NULL): a refusal's
 * words. */
static inline int fast_answer_halves(const px_tr_ctx_t *c, const px_fast_ops_t *dec,
                                     const px_fast_ops_t *enc, const char *body,
                                     size_t len, px_buf_t *b, px_lossy_t *lf,
                                     px_tr_err_t *ef) {
  px_arena_t a;
  px_arena_init(&a);
  px_fresp_t ir;
  fresp_init(&ir);
  int rc = dec->decode_response(c, body, len, &ir, &a, lf, ef);
  if (rc == 0 && (px_fresp_uses(&ir) & ~enc->resp_encodes) != 0) rc = PX_FAST_DECLINE;
  if (rc == 0) rc = enc->encode_response(c, &ir, b, &a, lf, ef);
  px_arena_free(&a);
  return rc;
}

/* what a check of the fast path against the reference holds: the
 * context, the fast body, both lossy lists and both refusals (fast,
 * reference); sides_free frees the body */
typedef struct {
  px_tr_ctx_t c;
  px_buf_t b;
  px_lossy_t lf, ls;
  px_tr_err_t ef, es;
} sides_t;

static inline void sides_init(sides_t *r, int in, int out) {
  memset(r, 0, sizeof(*r));
  ctx_of(&r->c, in, out);
  px_buf_init(&r->b, 1 << 20);
  px_lossy_init(&r->lf);
  px_lossy_init(&r->ls);
}

static inline void sides_free(sides_t *r) {
  px_buf_free(&r->b);
}

/* refused (the fast path refused, the reference too) in the same words,
 * param (when not NULL) the one named; what and body on stderr if not */
static inline void refusal_same(const char *what, const sides_t *r, int refused,
                                const char *param, const char *body) {
  int same = refused && same_words(&r->ef, &r->es) &&
             (param == NULL || strcmp(r->ef.param, param) == 0);
  CHECK(same);
  if (!same)
    fprintf(stderr, "%s %d -> %d of %s\nfast: [%s] %s\nslow: [%s] %s\n", what,
            (int)r->c.in, (int)r->c.out, body ? body : "(IR)", r->ef.param, r->ef.message,
            r->es.param, r->es.message);
}

/* a request body toward (in, out) the fast path declines (the reference
 * then answers): nothing written, nothing named lossy */
static inline void request_declined(int in, int out, const char *body) {
  px_tr_ctx_t c;
  ctx_of(&c, in, out);
  char *o = NULL;
  size_t ol = 0;
  px_lossy_t l;
  px_lossy_init(&l);
  int rc = px_translate_request_fast(&c, body, strlen(body), 0, &o, &ol, &l, NULL);
  int declined = rc == PX_FAST_DECLINE && o == NULL && l.len == 0;
  CHECK(declined);
  if (!declined) fprintf(stderr, "%d -> %d not declined (%d): %s\n", in, out, rc, body);
  free(o);
}

/* a request body toward (in, out) the reference refuses: the fast path
 * refuses it in the same words, param (when not NULL) the one named */
static inline void request_refused(int in, int out, const char *body, const char *param) {
  sides_t r;
  sides_init(&r, in, out);
  size_t len = strlen(body);
  char *fo = NULL, *so = NULL;
  size_t fl = 0, sl = 0;
  int rc = px_translate_request_fast(&r.c, body, len, 0, &fo, &fl, &r.lf, &r.ef);
  CHECK(fo == NULL);
  px_tr_ctx_t ref = r.c;
  int rs = px_translate_request_ref(&ref, body, len, 0, &so, &sl, &r.ls, &r.es);
  refusal_same("request refusal", &r, rc == PX_FAST_REFUSE && rs != 0, param, body);
  free(fo);
  free(so);
  sides_free(&r);
}

/* an upstream answer (out) for a client (in) the reference refuses: the
 * fast halves refuse it in the same words, a bad gateway (the hub's
 * px_translate_response_fast; its steps for a same-protocol pair, which
 * the hub passes through) */
static inline void answer_refused(int in, int out, const char *body) {
  sides_t r;
  sides_init(&r, in, out);
  size_t len = strlen(body);
  int rc = in != out
               ? px_translate_response_fast(&r.c, body, len, &r.b, &r.lf, NULL, &r.ef)
               : fast_answer_halves(&r.c, px_proto_get((px_proto_t)out)->fast,
                                    px_proto_get((px_proto_t)in)->fast, body, len, &r.b,
                                    &r.lf, &r.ef);
  json_t *up = json_loadb(body, len, 0, NULL), *cb = NULL;
  int rs = up != NULL ? px_translate_response(&r.c, up, &cb, &r.ls, &r.es) : 0;
  refusal_same("answer refusal", &r,
               rc == PX_FAST_REFUSE && rs != 0 && r.ef.kind == PX_ERR_BAD_GATEWAY, NULL,
               body);
  json_decref(cb);
  json_decref(up);
  sides_free(&r);
}

/* a request IR the reference's encoder for out refuses (doc: the same IR
 * as a document), for a client of in: out's fast encoder refuses it in the
 * same words, param (when not NULL) the one named */
static inline void encoder_refused(px_freq_t *ir, int in, int out, const char *doc,
                                   const char *param) {
  sides_t r;
  sides_init(&r, in, out);
  px_arena_t a;
  px_arena_init(&a);
  const px_ref_ops_t *ops = px_ref_get((px_proto_t)out);
  int rc = px_proto_get((px_proto_t)out)
               ->fast->encode_request(&r.c, ir, &r.b, &a, &r.lf, &r.ef);
  json_t *jir = json_loads(doc, 0, NULL), *o = NULL;
  int rs = jir != NULL ? ops->encode_request(&r.c, jir, &o, &r.ls, &r.es) : 0;
  refusal_same("encoder refusal", &r, rc == PX_FAST_REFUSE && rs != 0, param, NULL);
  json_decref(jir);
  json_decref(o);
  px_arena_free(&a);
  sides_free(&r);
}

/* a client request: the fast path takes it; the same body and lossy list,
 * and want (when not NULL) in the fast body. stream: the context's (-1: the
 * body's `stream`, as the gateway sets it) */
static inline void request_pair_s(int in, int out, const char *body, const char *want,
                                  int stream) {
  px_tr_ctx_t c;
  size_t len = strlen(body);
  request_ctx(&c, in, out, body, len, stream);
  char *fo = NULL, *so = NULL;
  size_t fl = 0, sl = 0;
  px_lossy_t lf, ls;
  px_tr_err_t err;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  CHECK(px_translate_request_fast(&c, body, len, 0, &fo, &fl, &lf, NULL) == 0);
  px_tr_ctx_t ref = c;
  CHECK(px_translate_request_ref(&ref, body, len, 0, &so, &sl, &ls, &err) == 0);
  if (fo != NULL && so != NULL) {
    int eq = same_json(fo, fl, so, sl) && strcmp(lf.buf, ls.buf) == 0;
    CHECK(eq);
    if (!eq)
      fprintf(stderr, "%d -> %d\nfast: %s [%s]\nslow: %s [%s]\n", in, out, fo, lf.buf, so,
              ls.buf);
    if (want != NULL) CHECK(strstr(fo, want) != NULL);
  }
  free(fo);
  free(so);
}

static inline void request_pair(int in, int out, const char *body, const char *want) {
  request_pair_s(in, out, body, want, -1);
}

/* an upstream answer: the same */
static inline void answer_pair(int in, int out, const char *body, const char *want) {
  px_tr_ctx_t c;
  ctx_of(&c, in, out);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  CHECK(px_translate_response_fast(&c, body, strlen(body), &b, &lf, NULL, NULL) == 0);
  json_t *up = json_loadb(body, strlen(body), 0, NULL), *cb = NULL;
  px_tr_err_t err;
  CHECK(px_translate_response(&c, up, &cb, &ls, &err) == 0);
  char *s = cb ? json_dumps(cb, JSON_COMPACT) : NULL;
  int eq = s != NULL && same_json(b.data ? b.data : "", b.len, s, strlen(s)) &&
           strcmp(lf.buf, ls.buf) == 0;
  CHECK(eq);
  if (!eq)
    fprintf(stderr, "%d <- %d\nfast: %.*s [%s]\nslow: %s [%s]\n", in, out, (int)b.len,
            b.data, lf.buf, s ? s : "", ls.buf);
  if (want != NULL && b.data != NULL) {
    CHECK(px_buf_append(&b, "", 1) == 0);
    CHECK(strstr(b.data, want) != NULL);
  }
  free(s);
  json_decref(cb);
  json_decref(up);
  px_buf_free(&b);
}

#endif
