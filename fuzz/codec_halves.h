/* codec_halves.h - one protocol's fast codec against its jansson codec, in
 * halves (fuzz_<p>_codec.c): a client request decoded for an upstream of
 * protocol d->out, fitted and encoded toward an upstream of the protocol
 * for a client of protocol e->in; an answer decoded and encoded for a
 * client of the protocol. Wherever both fast halves take the body, the
 * jansson halves must succeed too, with a JSON-equal body and the same
 * lossy list; else the target aborts. The halves reach what the hub's
 * pairs do not yet (a pair takes the fast path only when the other side's
 * codec knows every part). */
#ifndef PX_FUZZ_CODEC_HALVES_H
#define PX_FUZZ_CODEC_HALVES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/proto.h"
#include "ref.h"

static inline void halves_fail(px_proto_t p, const char *what, const char *body, size_t len,
                        const char *fast, const char *slow, const char *lf, const char *ls) {
  fprintf(stderr,
          "%s codec: %s differs\nbody: %.*s\nfast: %s\nslow: %s\nlossy fast: %s\nlossy "
          "slow: %s\n",
          px_proto_get(p)->name, what, (int)len, body, fast ? fast : "(none)",
          slow ? slow : "(none)", lf, ls);
  abort();
}

/* the fast body fb (NUL-ended) against the jansson one, and the lossy lists */
static inline void halves_same(px_proto_t p, const char *what, const char *body, size_t len,
                        px_buf_t *fb, json_t *out, const px_lossy_t *lf, const px_lossy_t *ls) {
  json_t *fj = json_loadb(fb->data, fb->len - 1, 0, NULL);
  if (fj == NULL || !json_equal(fj, out) || strcmp(lf->buf, ls->buf) != 0) {
    char *s = json_dumps(out, JSON_COMPACT);
    halves_fail(p, what, body, len, fb->data, s, lf->buf, ls->buf);
  }
  json_decref(fj);
}

/* A fast refusal ef against the jansson halves' answer (rs, es) of the same
 * body: they must refuse it too, in the same words (kind, param, message). */
static inline void halves_refused(px_proto_t p, const char *what, const char *body,
                                  size_t len, const px_tr_err_t *ef, int rs,
                                  const px_tr_err_t *es) {
  if (rs == 0 || es->kind != ef->kind || strcmp(es->param, ef->param) != 0 ||
      strcmp(es->message, ef->message) != 0)
    halves_fail(p, what, body, len, ef->message, es->message, ef->param, es->param);
}

/* A client request of protocol p (d->in == e->out == p), a body the scanner
 * accepted. */
static inline void halves_request(px_proto_t p, const char *body, size_t len, const px_tr_ctx_t *d,
                           const px_tr_ctx_t *e) {
  const px_fast_ops_t *fast = px_proto_get(p)->fast;
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t fb;
  px_buf_init(&fb, 64u << 20);
  px_tr_err_t ef;
  memset(&ef, 0, sizeof(ef));
  int rc = px_fast_request_steps(d, e, fast, fast, body, len, &ir, &a, &fb, &lf, &ef);
  if (rc == PX_FAST_REFUSE) {
    /* the jansson halves refuse it too, in the same words */
    const px_ref_ops_t *ops = px_ref_get(p);
    json_t *src = json_loadb(body, len, 0, NULL), *jir = NULL, *out = NULL;
    px_tr_err_t es;
    memset(&es, 0, sizeof(es));
    int rs = src == NULL ? -1 : ops->decode_request(d, src, &jir, &ls, &es);
    if (rs == 0) {
      json_object_set_new(jir, "model", json_string(e->upstream_model));
      px_ir_fit_request(e, jir, &ls);
      rs = ops->encode_request(e, jir, &out, &ls, &es);
    }
    if (src != NULL) halves_refused(p, "request refusal", body, len, &ef, rs, &es);
    json_decref(src);
    json_decref(jir);
    json_decref(out);
  }
  if (rc == 0) {
    const px_ref_ops_t *ops = px_ref_get(p);
    json_t *src = json_loadb(body, len, 0, NULL), *jir = NULL, *out = NULL;
    px_tr_err_t err;
    memset(&err, 0, sizeof(err));
    if (px_buf_append(&fb, "", 1) < 0) abort();
    if (src == NULL || ops->decode_request(d, src, &jir, &ls, &err) != 0)
      halves_fail(p, "request", body, len, fb.data, err.message, lf.buf, "(decode refused)");
    json_object_set_new(jir, "model", json_string(e->upstream_model));
    px_ir_fit_request(e, jir, &ls);
    if (ops->encode_request(e, jir, &out, &ls, &err) != 0)
      halves_fail(p, "request", body, len, fb.data, err.message, lf.buf, "(encode refused)");
    halves_same(p, "request", body, len, &fb, out, &lf, &ls);
    json_decref(src);
    json_decref(jir);
    json_decref(out);
  }
  px_buf_free(&fb);
  px_arena_free(&a);
}

/* An upstream answer of protocol p for a client of p (c->in == c->out). */
static inline void halves_answer(px_proto_t p, const char *body, size_t len, const px_tr_ctx_t *c) {
  const px_fast_ops_t *fast = px_proto_get(p)->fast;
  px_arena_t a;
  px_arena_init(&a);
  px_fresp_t ir;
  memset(&ir, 0, sizeof(ir));
  ir.in = ir.out = ir.cache_read = ir.cache_creation = ir.reasoning = -1;
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t fb;
  px_buf_init(&fb, 64u << 20);
  px_tr_err_t ef;
  memset(&ef, 0, sizeof(ef));
  int rc = fast->decode_response(c, body, len, &ir, &a, &lf, &ef);
  if (rc == PX_FAST_REFUSE) {
    /* the jansson decoder refuses it too, in the same words */
    json_t *src = json_loadb(body, len, 0, NULL), *jir = NULL;
    px_tr_err_t es;
    memset(&es, 0, sizeof(es));
    int rs = src == NULL ? -1 : px_ref_get(p)->decode_response(c, src, &jir, &ls, &es);
    if (src == NULL)
      rs = 0; /* what the fast decoder refused must be JSON jansson reads */
    halves_refused(p, "answer refusal", body, len, &ef, rs, &es);
    json_decref(src);
    json_decref(jir);
  }
  if (rc == 0 && (px_fresp_uses(&ir) & ~fast->resp_encodes) != 0) rc = PX_FAST_DECLINE;
  if (rc == 0) rc = fast->encode_response(c, &ir, &fb, &a, &lf, NULL);
  if (rc == 0) {
    const px_ref_ops_t *ops = px_ref_get(p);
    json_t *src = json_loadb(body, len, 0, NULL), *jir = NULL, *out = NULL;
    px_tr_err_t err;
    memset(&err, 0, sizeof(err));
    if (px_buf_append(&fb, "", 1) < 0) abort();
    if (src == NULL || ops->decode_response(c, src, &jir, &ls, &err) != 0)
      halves_fail(p, "answer", body, len, fb.data, err.message, lf.buf, "(decode refused)");
    if (ops->encode_response(c, jir, &out, &ls, &err) != 0)
      halves_fail(p, "answer", body, len, fb.data, err.message, lf.buf, "(encode refused)");
    halves_same(p, "answer", body, len, &fb, out, &lf, &ls);
    json_decref(src);
    json_decref(jir);
    json_decref(out);
  }
  px_buf_free(&fb);
  px_arena_free(&a);
}

/* The body of a codec target (fuzz_<p>_codec.c) for protocol p: byte 0
 * picks dout (b & 3) and ein ((b >> 2) & 3), other standing for p on
 * either side, and bit 4 a route max_tokens; the rest is the body, checked
 * as a client request of p (when the scanner accepts it) and as an answer
 * of p for a client of p. */
static inline int halves_codec_target(px_proto_t p, px_proto_t other, const uint8_t *data,
                                      size_t size) {
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  px_tr_ctx_t d, e;
  memset(&d, 0, sizeof(d));
  d.in = p;
  d.out = (px_proto_t)(data[0] & 3);
  if (d.out == p) d.out = other;
  d.client_model = d.upstream_model = "m";
  d.created = 1700000000;
  d.default_max_tokens = data[0] & 16 ? 1024 : 0;
  e = d;
  e.in = (px_proto_t)((data[0] >> 2) & 3);
  if (e.in == p) e.in = other;
  e.out = p;
  px_json_req_t scan;
  if (px_json_request(body, len, &scan) == 0) halves_request(p, body, len, &d, &e);
  /* an upstream answer is checked by the fast decoder itself */
  px_tr_ctx_t c = e;
  c.client_model = NULL;
  c.in = p;
  halves_answer(p, body, len, &c);
  return 0;
}

#endif
