/* fast_json.h - the runners' way into the fast path of non-streaming
 * translation (include/proxai/fastir.h): a document in, a document out, so
 * that the fixture and recording runners check the path the gateway takes
 * first. Each returns 0 when the fast path took the body (*out and lossy
 * set), 1 when it declined or refused (the runner then takes the jansson
 * path). A refusal (PX_FAST_REFUSE) is an answer, not in the census: it is
 * held to the jansson path's refusal of the same body (kind, param,
 * message), a difference failing the runner. */
#ifndef PX_TEST_FAST_JSON_H
#define PX_TEST_FAST_JSON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "ref.h"

/* The census (PX_FAST_CENSUS=1 in the environment): every body the fast
 * path declines is named on stderr, "census: request|response <name>
 * (<in> -> <out>)", where <name> is what the runner set last. What is left
 * before a protocol's jansson codec can go. */
static const char *px_test_census_name = "";

/* The protocols whose fast codec is complete (issue 21: one codec per
 * protocol): all four roles (decode and encode, requests and answers) take
 * every body of the fixtures and recordings, or refuse it as the reference
 * does (PX_FAST_REFUSE). A body between two complete protocols that the
 * fast path declines fails the runner. Indexed by px_proto_t (chat,
 * responses, anthropic, gemini). */
static const int px_test_fast_complete[PX_PROTO_COUNT] = {1, 1, 1, 1};
static int px_test_census_missed;

static inline void px_test_census(const char *what, const px_tr_ctx_t *ctx) {
  static int on = -1;
  if (on < 0) on = getenv("PX_FAST_CENSUS") != NULL;
  int must = px_test_fast_complete[ctx->in] && px_test_fast_complete[ctx->out];
  if (must) px_test_census_missed++;
  if (on || must)
    fprintf(stderr, "census: %s%s %s (%s -> %s)\n", must ? "MISSED " : "", what,
            px_test_census_name, px_proto_get(ctx->in)->name, px_proto_get(ctx->out)->name);
}

/* A fast refusal fe against the jansson path's (rc, es) of the same body. */
static inline void px_test_refusal(const char *what, const px_tr_ctx_t *ctx,
                                   const px_tr_err_t *fe, int rc, const px_tr_err_t *es) {
  if (rc < 0 && fe->kind == es->kind && strcmp(fe->param, es->param) == 0 &&
      strcmp(fe->message, es->message) == 0)
    return;
  px_test_census_missed++;
  fprintf(stderr,
          "census: REFUSAL DIFFERS %s %s (%s -> %s): fast [%s] %s; jansson %s[%s] %s\n",
          what, px_test_census_name, px_proto_get(ctx->in)->name,
          px_proto_get(ctx->out)->name, fe->param, fe->message, rc < 0 ? "" : "took it ",
          es->param, es->message);
}

typedef int (*px_test_jansson_fn)(const px_tr_ctx_t *ctx, json_t *in, json_t **out,
                                  px_lossy_t *lossy, px_tr_err_t *err);

/* After the fast path's fr on body (what: "request" or "response"): a
 * refusal fe held to the jansson path's (jansson: px_translate_request or
 * px_translate_response) of the same body, a decline named in the census. */
static inline void px_test_fast_after(const char *what, const px_tr_ctx_t *ctx,
                                      json_t *body, int fr, const px_tr_err_t *fe,
                                      px_test_jansson_fn jansson) {
  if (fr == PX_FAST_REFUSE) {
    px_tr_err_t es;
    px_lossy_t l;
    json_t *jo = NULL;
    memset(&es, 0, sizeof(es));
    px_lossy_init(&l);
    px_test_refusal(what, ctx, fe, jansson(ctx, body, &jo, &l, &es), &es);
    json_decref(jo);
  } else if (fr != 0) {
    px_test_census(what, ctx);
  }
}

static inline int px_test_fast_request(const px_tr_ctx_t *ctx, json_t *body, json_t **out,
                                       px_lossy_t *lossy) {
  px_tr_ctx_t c = *ctx;
  json_t *m = json_object_get(body, "model");
  if (c.client_model == NULL && json_is_string(m)) c.client_model = json_string_value(m);
  if (c.client_model == NULL) return 1;
  char *s = json_dumps(body, JSON_COMPACT), *o = NULL;
  size_t ol = 0;
  px_json_req_t scan;
  px_tr_err_t fe;
  memset(&fe, 0, sizeof(fe));
  int fr = s != NULL && px_json_request(s, strlen(s), &scan) == 0
               ? px_translate_request_fast(&c, s, strlen(s), 0, &o, &ol, lossy, &fe)
               : PX_FAST_DECLINE;
  int rc = fr == 0 ? 0 : 1;
  free(s);
  px_test_fast_after("request", ctx, body, fr, &fe, px_translate_request);
  if (rc == 0) {
    *out = json_loadb(o, ol, 0, NULL);
    free(o);
    if (*out == NULL) abort(); /* the fast path wrote invalid JSON */
  }
  return rc;
}

static inline int px_test_fast_response(const px_tr_ctx_t *ctx, json_t *body, json_t **out,
                                        px_lossy_t *lossy) {
  char *s = json_dumps(body, JSON_COMPACT);
  if (s == NULL) return 1;
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  px_tr_err_t fe;
  memset(&fe, 0, sizeof(fe));
  int fr = px_translate_response_fast(ctx, s, strlen(s), &b, lossy, NULL, &fe);
  int rc = fr == 0 ? 0 : 1;
  free(s);
  px_test_fast_after("response", ctx, body, fr, &fe, px_translate_response);
  if (rc == 0) {
    *out = json_loadb(b.data, b.len, 0, NULL);
    if (*out == NULL) abort();
  }
  px_buf_free(&b);
  return rc;
}

/* "N requests and M responses took the fast path" */
static inline void px_test_fast_report(void) {
  unsigned long rq, rs;
  px_translate_fast_counts(&rq, &rs);
  printf("fast path: %lu requests, %lu responses\n", rq, rs);
  if (px_test_census_missed)
    printf("fast path: %d bodies between complete codecs declined (census: MISSED)\n",
           px_test_census_missed);
}

#endif
