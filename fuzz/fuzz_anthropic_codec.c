/* fuzz_anthropic_codec.c - Anthropic's fast codec (src/proto/anthropic_fast.c)
 * against anthropic.c, in halves: a body the scanner accepts is decoded as
 * an Anthropic client's request for an upstream of protocol dout, fitted
 * and encoded toward an Anthropic upstream for a client of protocol ein, by
 * the fast codec and by the jansson codec; the same body is decoded as an
 * Anthropic answer and encoded for an Anthropic client. Wherever both fast
 * halves take the body, the jansson halves must succeed too, with a
 * JSON-equal body and the same lossy list; else the target aborts. The
 * halves reach what the hub's pairs do not yet (a pair takes the fast path
 * only when the other side's codec knows every part: thinking blocks, the
 * thinking configuration).
 *
 * Input: byte 0 picks dout (b & 3) and ein ((b >> 2) & 3), Anthropic
 * standing for Chat on either side, and bit 4 a route max_tokens; the rest
 * is the body. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/proto.h"

static void fail(const char *what, const char *body, size_t len, const char *fast,
                 const char *slow, const char *lf, const char *ls) {
  fprintf(stderr,
          "fuzz_anthropic_codec: %s differs\nbody: %.*s\nfast: %s\nslow: %s\nlossy fast: "
          "%s\nlossy slow: %s\n",
          what, (int)len, body, fast ? fast : "(none)", slow ? slow : "(none)", lf, ls);
  abort();
}

static void same(const char *what, const char *body, size_t len, px_buf_t *fb,
                 json_t *out, const px_lossy_t *lf, const px_lossy_t *ls) {
  json_t *fj = json_loadb(fb->data, fb->len - 1, 0, NULL);
  if (fj == NULL || !json_equal(fj, out) || strcmp(lf->buf, ls->buf) != 0) {
    char *s = json_dumps(out, JSON_COMPACT);
    fail(what, body, len, fb->data, s, lf->buf, ls->buf);
  }
  json_decref(fj);
}

static void request(const char *body, size_t len, const px_tr_ctx_t *d,
                    const px_tr_ctx_t *e) {
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_freq_init(&ir);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t fb;
  px_buf_init(&fb, 64u << 20);
  int rc = px_fast_request_steps(d, e, &px_anthropic_fast, &px_anthropic_fast, body, len, &ir,
                                 &a, &fb, &lf);
  if (rc == 0) {
    const px_proto_ops_t *ops = px_proto_get(PX_PROTO_ANTHROPIC);
    json_t *src = json_loadb(body, len, 0, NULL), *jir = NULL, *out = NULL;
    px_tr_err_t err;
    memset(&err, 0, sizeof(err));
    if (px_buf_append(&fb, "", 1) < 0) abort();
    if (src == NULL || ops->decode_request(d, src, &jir, &ls, &err) != 0)
      fail("request", body, len, fb.data, err.message, lf.buf, "(decode refused)");
    json_object_set_new(jir, "model", json_string(e->upstream_model));
    px_ir_fit_request(e, jir, &ls);
    if (ops->encode_request(e, jir, &out, &ls, &err) != 0)
      fail("request", body, len, fb.data, err.message, lf.buf, "(encode refused)");
    same("request", body, len, &fb, out, &lf, &ls);
    json_decref(src);
    json_decref(jir);
    json_decref(out);
  }
  px_buf_free(&fb);
  px_arena_free(&a);
}

static void answer(const char *body, size_t len, const px_tr_ctx_t *c) {
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
  int rc = px_anthropic_fast.decode_response(c, body, len, &ir, &a, &lf);
  if (rc == 0 && (px_fresp_uses(&ir) & ~px_anthropic_fast.resp_encodes) != 0)
    rc = PX_FAST_DECLINE;
  if (rc == 0) rc = px_anthropic_fast.encode_response(c, &ir, &fb, &a, &lf);
  if (rc == 0) {
    const px_proto_ops_t *ops = px_proto_get(PX_PROTO_ANTHROPIC);
    json_t *src = json_loadb(body, len, 0, NULL), *jir = NULL, *out = NULL;
    px_tr_err_t err;
    memset(&err, 0, sizeof(err));
    if (px_buf_append(&fb, "", 1) < 0) abort();
    if (src == NULL || ops->decode_response(c, src, &jir, &ls, &err) != 0)
      fail("answer", body, len, fb.data, err.message, lf.buf, "(decode refused)");
    if (ops->encode_response(c, jir, &out, &ls, &err) != 0)
      fail("answer", body, len, fb.data, err.message, lf.buf, "(encode refused)");
    same("answer", body, len, &fb, out, &lf, &ls);
    json_decref(src);
    json_decref(jir);
    json_decref(out);
  }
  px_buf_free(&fb);
  px_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  px_tr_ctx_t d, e;
  memset(&d, 0, sizeof(d));
  d.in = PX_PROTO_ANTHROPIC;
  d.out = (px_proto_t)(data[0] & 3);
  if (d.out == PX_PROTO_ANTHROPIC) d.out = PX_PROTO_CHAT;
  d.client_model = d.upstream_model = "m";
  d.created = 1700000000;
  d.default_max_tokens = data[0] & 16 ? 1024 : 0;
  e = d;
  e.in = (px_proto_t)((data[0] >> 2) & 3);
  if (e.in == PX_PROTO_ANTHROPIC) e.in = PX_PROTO_CHAT;
  e.out = PX_PROTO_ANTHROPIC;
  px_json_req_t scan;
  if (px_json_request(body, len, &scan) == 0) request(body, len, &d, &e);
  /* an upstream answer is checked by the fast decoder itself */
  px_tr_ctx_t c = e;
  c.client_model = NULL;
  c.in = PX_PROTO_ANTHROPIC;
  answer(body, len, &c);
  return 0;
}
