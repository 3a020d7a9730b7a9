/* fuzz_responses_codec.c - Responses' fast request codec
 * (src/proto/responses_fast.c) against responses.c, in halves: a body the
 * scanner accepts is decoded as a Responses client's request for an
 * upstream of protocol dout, fitted and encoded toward a Responses upstream
 * for a client of protocol ein, by the fast codec and by the jansson codec.
 * Wherever both fast halves take the body, the jansson halves must succeed
 * too, with a JSON-equal body and the same lossy list; else the target
 * aborts. The halves reach what the hub's pairs do not yet (a pair takes
 * the fast path only when the other side's codec knows every part).
 *
 * Input: byte 0 picks dout (b & 3) and ein ((b >> 2) & 3), Responses
 * standing for Chat on either side, and bit 4 a stored-responses context
 * (a response id: store is kept); the rest is the body. The member names
 * and values of fuzz_responses_codec.dict (-dict=) reach the items' kinds
 * quickly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/proto.h"

static void fail(const char *body, size_t len, const char *fast, const char *slow,
                 const char *lf, const char *ls) {
  fprintf(stderr,
          "fuzz_responses_codec: differs\nbody: %.*s\nfast: %s\nslow: %s\nlossy fast: "
          "%s\nlossy slow: %s\n",
          (int)len, body, fast ? fast : "(none)", slow ? slow : "(none)", lf, ls);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  px_json_req_t scan;
  if (px_json_request(body, len, &scan) < 0) return 0; /* as the hub reads bodies */
  px_tr_ctx_t d, e;
  memset(&d, 0, sizeof(d));
  d.in = PX_PROTO_RESPONSES;
  d.out = (px_proto_t)(data[0] & 3);
  if (d.out == PX_PROTO_RESPONSES) d.out = PX_PROTO_CHAT;
  d.client_model = d.upstream_model = "m";
  d.created = 1700000000;
  if (data[0] & 16) d.resp_id = "resp_kept";
  e = d;
  e.in = (px_proto_t)((data[0] >> 2) & 3);
  if (e.in == PX_PROTO_RESPONSES) e.in = PX_PROTO_CHAT;
  e.out = PX_PROTO_RESPONSES;

  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_freq_init(&ir);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t fb;
  px_buf_init(&fb, 64u << 20);
  int rc = px_fast_request_steps(&d, &e, &px_responses_fast, &px_responses_fast, body, len, &ir,
                                 &a, &fb, &lf);
  if (rc == 0) {
    const px_proto_ops_t *ops = px_proto_get(PX_PROTO_RESPONSES);
    json_t *src = json_loadb(body, len, 0, NULL), *jir = NULL, *out = NULL;
    px_tr_err_t err;
    memset(&err, 0, sizeof(err));
    if (px_buf_append(&fb, "", 1) < 0) abort();
    if (src == NULL || ops->decode_request(&d, src, &jir, &ls, &err) != 0)
      fail(body, len, fb.data, err.message, lf.buf, "(decode refused)");
    json_object_set_new(jir, "model", json_string(e.upstream_model));
    px_ir_fit_request(&e, jir, &ls);
    if (ops->encode_request(&e, jir, &out, &ls, &err) != 0)
      fail(body, len, fb.data, err.message, lf.buf, "(encode refused)");
    json_t *fj = json_loadb(fb.data, fb.len - 1, 0, NULL);
    if (fj == NULL || !json_equal(fj, out) || strcmp(lf.buf, ls.buf) != 0) {
      char *s = json_dumps(out, JSON_COMPACT);
      fail(body, len, fb.data, s, lf.buf, ls.buf);
    }
    json_decref(fj);
    json_decref(src);
    json_decref(jir);
    json_decref(out);
  }
  px_buf_free(&fb);
  px_arena_free(&a);
  return 0;
}
