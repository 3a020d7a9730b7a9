/* fuzz_translate.c - request, response and error translation for every
 * protocol pair from arbitrary JSON.
 *
 * Input: byte 0 picks the pair (in = (b & 15) >> 2, out = b & 3: 16 pairs) and, in its
 * high bits, the stream flag; byte 1 an HTTP status; the rest is the body. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/proto.h"
#include "ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = (px_proto_t)((data[0] & 15) >> 2);
  ctx.out = (px_proto_t)(data[0] & 3);
  ctx.stream = (data[0] >> 7) & 1;
  ctx.client_include_usage = (data[0] >> 6) & 1;
  ctx.created = 1700000000;
  ctx.max_accum = 1 << 20;
  ctx.default_max_tokens = data[0] & 32 ? 1024 : 0;
  if (data[0] & 16) {
    ctx.client_model = "client-model";
    ctx.upstream_model = "upstream-model";
  }
  int status = 400 + data[1] % 200;
  const char *body = (const char *)data + 2;
  size_t len = size - 2;

  /* errors take any bytes */
  px_buf_t out;
  px_buf_init(&out, 1 << 20);
  int cst = 0;
  if (px_translate_error(&ctx, status, body, len, "req_1", &out, &cst) == 0 &&
      (cst < 400 || cst > 599))
    abort();
  px_buf_free(&out);

  json_t *j = json_loadb(body, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
  if (j == NULL) return 0;
  px_lossy_t lossy;
  px_tr_err_t err;
  json_t *res = NULL;

  px_lossy_init(&lossy);
  memset(&err, 0, sizeof(err));
  if (px_translate_request(&ctx, j, &res, &lossy, &err) == 0) {
    if (res == NULL) abort();
    char *s = json_dumps(res, JSON_COMPACT);
    free(s);
    /* what we send upstream is a valid request of the upstream protocol, as
     * its own decoder judges it */
    const px_ref_ops_t *up = px_ref_get(ctx.out);
    if (ctx.in != ctx.out && up->decode_request != NULL) {
      px_tr_ctx_t c2 = ctx;
      c2.in = ctx.out;
      json_t *ir = NULL;
      px_lossy_t l2;
      px_tr_err_t e2;
      px_lossy_init(&l2);
      memset(&e2, 0, sizeof(e2));
      if (up->decode_request(&c2, res, &ir, &l2, &e2) < 0) {
        char *d = json_dumps(res, JSON_COMPACT);
        fprintf(stderr, "fuzz_translate: %s rejects our own request: %s [%s]\n%s\n",
                px_proto_get(ctx.out)->name, e2.message, e2.param, d ? d : "");
        free(d);
        abort();
      }
      json_decref(ir);
    }
    json_decref(res);
  } else if (err.message[0] == 0) {
    abort(); /* a rejection must say why */
  }
  if (lossy.len != strlen(lossy.buf)) abort();

  res = NULL;
  px_lossy_init(&lossy);
  memset(&err, 0, sizeof(err));
  if (px_translate_response(&ctx, j, &res, &lossy, &err) == 0) {
    if (res == NULL) abort();
    char *s = json_dumps(res, JSON_COMPACT);
    free(s);
    json_decref(res);
  } else if (err.message[0] == 0) {
    abort();
  }
  json_decref(j);
  return 0;
}
