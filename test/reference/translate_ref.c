/* translate_ref.c - the reference's document pipeline: a client body
 * parsed into a jansson document, decoded into the document IR by the
 * client protocol's jansson codec (test/reference/<p>.c), encoded by the
 * upstream's, and written, within a memory budget; the same for answers.
 * The tests' and fuzzers' oracle of the gateway's codecs (src/proto/<p>.c),
 * never linked into the gateway. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/json.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "ref.h"

static int bad_proto(const px_tr_ctx_t *ctx) {
  return (unsigned)ctx->in >= PX_PROTO_COUNT || (unsigned)ctx->out >= PX_PROTO_COUNT;
}

static const px_ref_ops_t *const refs[] = {
#define XX(e, name, inpath, uppath, sym) &px_ref_##sym,
    PX_PROTO_MAP(XX)
#undef XX
};

const px_ref_ops_t *px_ref_get(px_proto_t p) {
  return (unsigned)p < PX_PROTO_COUNT ? refs[p] : NULL;
}

static int not_impl(px_tr_err_t *err, const px_tr_ctx_t *ctx, const char *what) {
  px_tr_fail(err, "", "translation %s -> %s: %s not implemented",
             px_proto_get(ctx->in)->name, px_proto_get(ctx->out)->name, what);
  if (err != NULL) err->kind = PX_ERR_NOT_IMPL;
  return PX_EINVAL;
}

typedef int (*tr_fn)(const px_tr_ctx_t *, json_t *, json_t **, px_lossy_t *,
                     px_tr_err_t *);

static int over_budget(void);

/* The one pipeline of every translation, request or response, document or
 * raw body: decode (src -> IR), the fix-ups between the stages, encode
 * (IR -> *dst). Between the two, a request's IR gets the upstream model (and
 * a stream's lossy prediction), and a response's IR model is the client
 * model when the context has none. take_src: src is the pipeline's, released
 * as soon as the IR is built (a raw body's peak is then two documents, never
 * three). Under a memory budget (px_translate_request_body) a stage that
 * went past it stops the pipeline. */
static int pipeline(px_tr_ctx_t *c, int is_request, tr_fn decode, tr_fn encode,
                    json_t *src, int take_src, json_t **dst, px_lossy_t *lossy,
                    px_tr_err_t *err) {
  const char *what = is_request ? "request" : "response";
  json_t *ir = NULL, *body = NULL;
  int rc = decode(c, src, &ir, lossy, err);
  if (take_src) json_decref(src);
  if (rc < 0 || over_budget()) goto fail;
  if (ir == NULL) {
    rc = px_tr_fail(err, "", "%s decoder produced nothing", what);
    goto fail;
  }
  if (is_request && c->upstream_model != NULL)
    json_object_set_new(ir, "model", json_string(c->upstream_model));
  if (is_request) px_ir_fit_request(c, ir, lossy); /* what the upstream cannot hold */
  /* a stream's headers leave before its content: what it may drop is
   * named now, from the request (the rules of the non-streaming path) */
  if (is_request && c->stream) px_lossy_predict(c, px_ir_reasoning_on(ir), lossy);
  if (!is_request && c->client_model == NULL) {
    json_t *m = json_object_get(ir, "model");
    if (json_is_string(m)) c->client_model = json_string_value(m);
  }
  rc = encode(c, ir, &body, lossy, err);
  json_decref(ir);
  ir = NULL;
  if (rc < 0 || over_budget()) goto fail;
  if (body == NULL) {
    rc = px_tr_fail(err, "", "%s encoder produced nothing", what);
    goto fail;
  }
  *dst = body;
  return 0;
fail:
  json_decref(ir);
  json_decref(body);
  return rc < 0 ? rc : PX_EINVAL;
}

/* Whether this pair can translate requests at all. */
static int request_pair_ok(const px_tr_ctx_t *ctx, px_tr_err_t *err) {
  if (bad_proto(ctx)) return px_tr_fail(err, "", "unknown protocol");
  if (px_ref_get(ctx->in)->decode_request == NULL)
    return not_impl(err, ctx, "request decoding");
  if (px_ref_get(ctx->out)->encode_request == NULL)
    return not_impl(err, ctx, "request encoding");
  return 0;
}

/* The request pipeline (c: a copy of the caller's context, models set). */
static int request_pipeline(px_tr_ctx_t *c, json_t *src, int take_src, json_t **dst,
                            px_lossy_t *lossy, px_tr_err_t *err) {
  if (c->upstream_model == NULL) c->upstream_model = c->client_model;
  return pipeline(c, 1, px_ref_get(c->in)->decode_request,
                  px_ref_get(c->out)->encode_request, src, take_src, dst, lossy, err);
}

int px_translate_request(const px_tr_ctx_t *ctx, json_t *client_body,
                         json_t **upstream_body, px_lossy_t *lossy, px_tr_err_t *err) {
  int rc = request_pair_ok(ctx, err);
  if (rc < 0) return rc;
  if (!json_is_object(client_body))
    return px_tr_fail(err, "", "request body must be a JSON object");

  px_tr_ctx_t c = *ctx;
  json_t *m = json_object_get(client_body, "model");
  if (c.client_model == NULL && json_is_string(m)) c.client_model = json_string_value(m);
  return request_pipeline(&c, client_body, 0, upstream_body, lossy, err);
}

/* ------------------------------------------------------------------------ */
/* The memory budget of a translated request (SPEC section 10)             */

/* jansson allocates through these for the whole process (installed once;
 * the worker is one thread). Outside a budgeted section they are malloc and
 * free; inside, live bytes are counted. An allocation never fails: jansson's
 * lexer does not survive a failed one (2.14 asserts on a string it lost
 * bytes of), and the codecs parse tool-call arguments with it. So the parse
 * is admitted by the scanner's cost bound before it starts, and each stage
 * (parse, decode, encode, write) is checked when it ends: a request past
 * its budget stops there with PX_ERR_TOO_LARGE. */
static struct {
  int active, exceeded;
  long long used, limit;
} mem;

static void *mem_malloc(size_t n) {
  if (!mem.active) return malloc(n);
  void *p = malloc(n);
  if (p != NULL) mem.used += (long long)malloc_usable_size(p);
  if (mem.used > mem.limit) mem.exceeded = 1;
  return p;
}

static void mem_free(void *p) {
  if (p != NULL && mem.active) mem.used -= (long long)malloc_usable_size(p);
  free(p);
}

static void mem_begin(const px_tr_ctx_t *ctx, size_t body_len) {
  static int installed;
  if (!installed) {
    json_set_alloc_funcs(mem_malloc, mem_free);
    installed = 1;
  }
  mem.active = 1;
  mem.exceeded = 0;
  mem.used = 0;
  mem.limit = ctx->mem_limit ? *ctx->mem_limit
                             : (long long)body_len * PX_TR_MEM_FACTOR + PX_TR_MEM_BASE;
}

/* Ends the section; whether the budget held. */
static int mem_end(void) {
  mem.active = 0;
  return !mem.exceeded;
}

/* Inside a budgeted section, whether a stage went past the budget. */
static int over_budget(void) {
  return mem.active && mem.exceeded;
}

/* Whether the budget admits the body at all: the pipeline holds up to about
 * three documents of the body's size at once (client + IR, then IR +
 * upstream, each up to twice the client's), so a body that cannot fit is
 * refused before anything is built. */
static int budget_admits(const px_tr_ctx_t *ctx) {
  if ((long long)ctx->scan->cost * 3 > mem.limit) mem.exceeded = 1;
  return !mem.exceeded;
}

/* The parse stage of a raw body under the budget: the body's scan (the
 * caller's, when it has one: one scan a body) admits it, then jansson
 * builds the document. NULL: refused (over the budget, or not an object). */
static json_t *parse_budgeted(const px_tr_ctx_t *ctx, const char *body, size_t len,
                              px_tr_err_t *err) {
  json_error_t je;
  json_t *src = px_jdoc_load(body, len, 0, &je);
  if (src == NULL || !json_is_object(src) || mem.exceeded) {
    if (!mem.exceeded)
      px_tr_fail(err, "", "request body is not a JSON object: %s", je.text);
    json_decref(src);
    return NULL;
  }
  return src;
}

/* The reference's raw-body entry: parse, the request pipeline, write; the
 * whole under the memory budget (each stage checked as it ends). */
int px_translate_request_ref(const px_tr_ctx_t *ctx, const char *body, size_t len,
                             int flags, char **out, size_t *out_len, px_lossy_t *lossy,
                             px_tr_err_t *err) {
  int rc = request_pair_ok(ctx, err);
  if (rc < 0) return rc;
  if (ctx->client_model == NULL) return px_tr_fail(err, "", "no client model");
  px_tr_ctx_t c = *ctx;
  px_json_req_t own;
  if (c.scan == NULL) {
    if (px_json_request(body, len, &own) < 0)
      return px_tr_fail(err, "", "request body is not a valid JSON object: %s",
                        own.reason);
    c.scan = &own;
  }
  json_t *ub = NULL;
  char *text = NULL;
  rc = PX_EINVAL;
  mem_begin(&c, len);
  if (!budget_admits(&c)) goto done;
  json_t *src = parse_budgeted(&c, body, len, err);
  if (src == NULL) goto done;
  rc = request_pipeline(&c, src, 1, &ub, lossy, err);
  if (rc < 0) goto done;
  if ((flags & PX_TR_COUNT_TOKENS) && px_ref_get(ctx->out)->count_request)
    px_ref_get(ctx->out)->count_request(ub, ctx->upstream_model);
  text = px_jdoc_dump(ub, JSON_COMPACT);
  if (text == NULL && !mem.exceeded) {
    rc = px_tr_fail(err, "", "out of memory");
    if (err) err->kind = PX_ERR_API;
    goto done;
  }
  rc = 0;
done:
  json_decref(ub);
  if (!mem_end()) {
    free(text);
    text = NULL;
    rc = px_tr_fail(err, "",
                    "the request is too complex to translate within %u times its size "
                    "in memory",
                    (unsigned)PX_TR_MEM_FACTOR);
    if (err) err->kind = PX_ERR_TOO_LARGE;
  }
  if (rc < 0) {
    free(text);
    return rc;
  }
  *out = text;
  *out_len = strlen(text);
  return 0;
}

int px_translate_response(const px_tr_ctx_t *ctx, json_t *upstream_body,
                          json_t **client_body, px_lossy_t *lossy, px_tr_err_t *err) {
  if (bad_proto(ctx)) return px_tr_fail(err, "", "unknown protocol");
  const px_ref_ops_t *in = px_ref_get(ctx->in), *out = px_ref_get(ctx->out);
  if (out->decode_response == NULL) return not_impl(err, ctx, "response decoding");
  if (in->encode_response == NULL) return not_impl(err, ctx, "response encoding");
  if (!json_is_object(upstream_body)) {
    px_tr_fail(err, "", "upstream response body is not a JSON object");
    if (err) err->kind = PX_ERR_BAD_GATEWAY;
    return PX_EPROTO;
  }
  px_tr_ctx_t c = *ctx;
  return pipeline(&c, 0, out->decode_response, in->encode_response, upstream_body, 0,
                  client_body, lossy, err);
}
