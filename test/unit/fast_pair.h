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

static inline void ctx_of(px_tr_ctx_t *c, int in, int out) {
  memset(c, 0, sizeof(*c));
  c->in = (px_proto_t)in;
  c->out = (px_proto_t)out;
  c->client_model = "client-model";
  c->upstream_model = "upstream-model";
  c->created = 1700000000;
}

static inline int same_json(const char *a, size_t an, const char *b, size_t bn) {
  json_t *x = json_loadb(a, an, 0, NULL), *y = json_loadb(b, bn, 0, NULL);
  int eq = x != NULL && y != NULL && json_equal(x, y);
  json_decref(x);
  json_decref(y);
  return eq;
}

/* a client request: the fast path takes it; the same body and lossy list,
 * and want (when not NULL) in the fast body. stream: the context's (-1: the
 * body's `stream`, as the gateway sets it) */
static inline void request_pair_s(int in, int out, const char *body, const char *want,
                                  int stream) {
  px_tr_ctx_t c;
  ctx_of(&c, in, out);
  size_t len = strlen(body);
  px_json_req_t scan;
  CHECK(px_json_request(body, len, &scan) == 0);
  c.stream = stream < 0 ? scan.stream : stream;
  char *fo = NULL, *so = NULL;
  size_t fl = 0, sl = 0;
  px_lossy_t lf, ls;
  px_tr_err_t err;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  CHECK(px_translate_request_fast(&c, body, len, 0, &fo, &fl, &lf, NULL) == 0);
  px_tr_ctx_t ref = c;
  ref.reference = 1;
  CHECK(px_translate_request_body(&ref, body, len, 0, &so, &sl, &ls, &err) == 0);
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
