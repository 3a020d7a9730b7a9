/* translate_fast.c - the fast path of request translation (streaming or
 * not) and of non-streaming answers
 * (include/proxai/fastir.h): the client protocol's fast decoder reads the
 * body into the C IR, the upstream protocol's fast encoder writes the
 * upstream body; the same for an upstream answer. When either side
 * declines, the body is respelled and asked again, else refused in words
 * (the one reader's rule, px_translate_request_body); a request whose IR
 * goes past its memory budget (ctx->ir_budget) is refused as too large. */
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/usage.h"

static unsigned long taken_req, taken_resp;

void px_translate_fast_counts(unsigned long *requests, unsigned long *responses) {
  if (requests) *requests = taken_req;
  if (responses) *responses = taken_resp;
}

static const px_fast_ops_t *fast_of(px_proto_t p) {
  if ((unsigned)p >= PX_PROTO_COUNT) return NULL;
  return px_proto_get(p)->fast;
}

/* the output may grow past the body (arguments become strings, a model
 * name is longer): bounded all the same */
static size_t out_cap(size_t len) { return len * 4 + (64u << 10); }

void px_spans_free(px_spans_t *s) {
  free(s->v);
  memset(s, 0, sizeof(*s));
}

int px_spans_parts(const char *text, size_t len, const px_spans_t *s, px_str_t **parts,
                   size_t *nparts) {
  px_str_t *v = malloc((2 * s->n + 1) * sizeof(*v));
  if (v == NULL) return PX_ENOMEM;
  size_t k = 0, at = 0;
  for (size_t i = 0; i < s->n; i++) {
    const px_body_span_t *sp = &s->v[i];
    if (sp->at > at) v[k++] = (px_str_t){text + at, sp->at - at};
    v[k++] = (px_str_t){sp->p, sp->n};
    at = sp->at;
  }
  if (len > at) v[k++] = (px_str_t){text + at, len - at};
  *parts = v;
  *nparts = k;
  return 0;
}

void px_freq_init(px_freq_t *ir) {
  memset(ir, 0, sizeof(*ir));
  ir->parallel = ir->reasoning_enabled = ir->rf_strict = -1;
}

int px_fast_request_steps(const px_tr_ctx_t *dc, const px_tr_ctx_t *ec, const px_fast_ops_t *in,
                          const px_fast_ops_t *op, const char *body, size_t len, px_freq_t *ir,
                          px_arena_t *a, px_buf_t *out, px_lossy_t *l, px_tr_err_t *err) {
  px_freq_init(ir);
  int rc = in->decode_request(dc, body, len, ir, a, l, err);
  if (rc == 0) px_fit_fast_request(ec, ir, l);
  if (rc == 0 && (px_freq_uses(ir) & ~op->encodes) != 0) rc = PX_FAST_DECLINE;
  /* a stream's headers name what it may drop, before what the encoder
   * names (one rule and one order with the jansson pipeline) */
  if (rc == 0 && ec->stream) px_lossy_predict(ec, px_freq_reasoning_on(ir), l);
  if (rc == 0) rc = op->encode_request(ec, ir, out, a, l, err);
  return rc;
}

/* A request whose decoded form would take more than its budget (the IR
 * arena's limit, ctx->ir_budget): refused as too large (413), not declined,
 * since no other spelling of it is smaller. */
static int over_budget(const px_tr_ctx_t *ctx, size_t len, px_tr_err_t *err) {
  px_tr_fail(err, "",
             "request body cannot be translated within the gateway's memory budget "
             "(%zu bytes for a body of %zu bytes, [server] translate_memory): send "
             "fewer, longer messages or a smaller body",
             ctx->ir_budget, len);
  if (err) err->kind = PX_ERR_TOO_LARGE;
  return PX_FAST_REFUSE;
}

int px_translate_request_fast(const px_tr_ctx_t *ctx, const char *body, size_t len,
                              int flags, char **out, size_t *out_len, px_lossy_t *lossy,
                              px_tr_err_t *err) {
  if ((flags & ~PX_TR_COUNT_TOKENS) != 0 || ctx->in == ctx->out) return PX_FAST_DECLINE;
  const px_fast_ops_t *in = fast_of(ctx->in), *op = fast_of(ctx->out);
  if (in == NULL || op == NULL || in->decode_request == NULL || op->encode_request == NULL)
    return PX_FAST_DECLINE;
  px_tr_ctx_t c = *ctx;
  if (c.upstream_model == NULL) c.upstream_model = c.client_model;
  if (c.upstream_model == NULL) return PX_FAST_DECLINE;
  px_arena_t a;
  px_arena_init(&a);
  a.limit = ctx->ir_budget;
  px_freq_t ir;
  px_lossy_t l;
  px_lossy_init(&l);
  px_buf_t b;
  px_buf_init(&b, out_cap(len));
  int rc = px_buf_reserve(&b, len + 256);
  /* the client's long strings as spans of its body (not for a token
   * count: its body is rewritten in place) */
  px_spans_t *sp = (flags & PX_TR_COUNT_TOKENS) ? NULL : ctx->spans;
  if (sp) {
    sp->n = sp->bytes = 0;
    px_fb_spanning = (px_fb_spanning_t){&b, body, body + len, sp};
  }
  /* the containers' ends the admission walk found, when it walked these
   * very bytes */
  const px_json_jumps_t *jt = ctx->scan ? ctx->scan->jumps : NULL;
  if (jt && (jt->base != body || jt->len != len)) jt = NULL;
  if (jt) px_fw_jumps = (px_fw_jumps_t){jt, 0};
  if (rc == 0) rc = px_fast_request_steps(&c, &c, in, op, body, len, &ir, &a, &b, &l, err);
  if (jt) px_fw_jumps.table = NULL;
  px_fb_spanning.b = NULL;
  /* a token count: the body the upstream's count endpoint takes */
  if (rc == 0 && (flags & PX_TR_COUNT_TOKENS) && op->count_request != NULL)
    rc = op->count_request(&b, 0, c.upstream_model) == 0 ? 0 : PX_FAST_DECLINE;
  if (rc == 0) rc = px_buf_append(&b, "", 1);
  if (a.over) rc = over_budget(ctx, len, err);
  px_arena_free(&a);
  if (rc != 0) {
    px_buf_free(&b);
    if (sp) sp->n = sp->bytes = 0;
    return rc == PX_FAST_REFUSE ? PX_FAST_REFUSE : PX_FAST_DECLINE;
  }
  *out_len = b.len - 1;
  size_t room = b.size - b.len;
  *out = px_buf_steal(&b, NULL);
  /* the room reserved and not used (the spans' bytes, the doubling) goes:
   * the body is held while its request is in flight (a stream's life) */
  if (room >= 64) {
    char *o = realloc(*out, *out_len + 1);
    if (o) *out = o;
  }
  px_lossy_merge(lossy, &l);
  taken_req++;
  return 0;
}

int px_translate_response_fast(const px_tr_ctx_t *ctx, const char *body, size_t len,
                               px_buf_t *out, px_lossy_t *lossy, px_usage_t *usage,
                               px_tr_err_t *err) {
  if (ctx->in == ctx->out) return PX_FAST_DECLINE;
  const px_fast_ops_t *up = fast_of(ctx->out), *cl = fast_of(ctx->in);
  if (up == NULL || cl == NULL || up->decode_response == NULL || cl->encode_response == NULL)
    return PX_FAST_DECLINE;
  /* an upstream body is not checked yet: the decoder's checked reads or
   * the scanner prove it is one object jansson reads the same way, or the
   * jansson path judges it */
  px_json_req_t scan;
  if (body == NULL || (!up->response_checked && px_json_request(body, len, &scan) < 0))
    return PX_FAST_DECLINE;
  px_arena_t a;
  px_arena_init(&a);
  px_fresp_t ir;
  memset(&ir, 0, sizeof(ir));
  ir.in = ir.out = ir.cache_read = ir.cache_creation = ir.reasoning = -1;
  px_lossy_t l;
  px_lossy_init(&l);
  size_t start = out->len;
  int rc = up->decode_response(ctx, body, len, &ir, &a, &l, err);
  if (rc == 0 && (px_fresp_uses(&ir) & ~cl->resp_encodes) != 0) rc = PX_FAST_DECLINE;
  if (rc == 0) rc = px_buf_reserve(out, len + 256);
  if (rc == 0) rc = cl->encode_response(ctx, &ir, out, &a, &l, err);
  px_arena_free(&a);
  if (rc != 0) {
    out->len = start;
    return rc == PX_FAST_REFUSE ? PX_FAST_REFUSE : PX_FAST_DECLINE;
  }
  px_lossy_merge(lossy, &l);
  taken_resp++;
  /* traces: what the decoder read, not read again (px_answer_body then
   * reads nothing) */
  if (ctx->answer)
    px_answer_set(ctx->answer, (px_str_t){ir.id.p, ir.id.p ? ir.id.n : 0},
                  (px_str_t){ir.model.p, ir.model.p ? ir.model.n : 0},
                  (px_str_t){ir.finish.p, ir.finish.p ? ir.finish.n : 0});
  if (usage == NULL) return 0;
  if (!ir.usage_known) return PX_FAST_USAGE;
  /* what px_usage_scan would find: no second walk */
  if (ir.usage_in >= 0) usage->input_tokens = ir.usage_in;
  if (ir.usage_out >= 0) usage->output_tokens = ir.usage_out;
  /* parts of the input, priced apart (money.h) */
  if (ir.cache_read >= 0) usage->cache_read_tokens = ir.cache_read;
  if (ir.cache_creation >= 0) usage->cache_creation_tokens = ir.cache_creation;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The gateway's translation: the codecs, and the one reader's rule for what
 * they do not take as it is written                                        */

/* What no codec takes, refused in words: a member an object holds twice
 * (the rule admission applies to the members it acts on, for every member
 * a codec reads), a member name no codec can read or no lossy list can
 * name, or, failing all, the pair. what: "request body" / "upstream answer"; from -> to:
 * the codecs' direction. */
static int odd_refusal(const char *what, const char *p, size_t n, px_proto_t from,
                       px_proto_t to, px_tr_err_t *err) {
  char path[sizeof(err->param)];
  int o = px_fast_odd_member(p, n, path, sizeof(path));
  if (o == PX_ODD_REPEATED)
    return px_tr_fail(err, path, "%s has '%s' more than once", what, path);
  if (o == PX_ODD_ESCAPED_NAME)
    return px_tr_fail(err, path,
                      "%s has a member name with a quote, a backslash or a control "
                      "character ('%s'), which cannot be translated",
                      what, path);
  if (o == PX_ODD_UNNAMED)
    return px_tr_fail(
        err, path,
        "%s has a member name the x-proxai-lossy header cannot list ('%s': "
        "empty, with a comma, \"...\" or 256 bytes and more), which cannot be "
        "translated",
        what, path);
  return px_tr_fail(err, "",
                    "%s cannot be translated from %s to %s: it has a value of a form the "
                    "translator does not take",
                    what, px_proto_get(from)->name, px_proto_get(to)->name);
}

/* The text p[0..n) respelled (px_json_respell) into *b: 1 when that changed
 * it, 0 when it was plain already, <0 out of memory. */
static int respell(const char *p, size_t n, px_buf_t *b) {
  px_buf_init(b, n + 1); /* a plain spelling is never longer */
  return px_json_respell(p, n, b);
}

static int out_of_memory(px_tr_err_t *err) {
  px_tr_fail(err, "", "out of memory");
  if (err) err->kind = PX_ERR_API;
  return PX_ENOMEM;
}

int px_translate_request_body(const px_tr_ctx_t *ctx, const char *body, size_t len,
                              int flags, char **out, size_t *out_len, px_lossy_t *lossy,
                              px_tr_err_t *err) {
  if ((unsigned)ctx->in >= PX_PROTO_COUNT || (unsigned)ctx->out >= PX_PROTO_COUNT)
    return px_tr_fail(err, "", "unknown protocol");
  if (ctx->client_model == NULL) return px_tr_fail(err, "", "no client model");
  if (ctx->in == ctx->out)
    return px_tr_fail(err, "", "same protocol: nothing to translate");
  int rc = px_translate_request_fast(ctx, body, len, flags, out, out_len, lossy, err);
  if (rc == 0) return 0;
  if (rc == PX_FAST_REFUSE) return PX_EINVAL;
  /* names and values compared unescaped: the body in its plain spelling */
  px_buf_t b;
  int ch = respell(body, len, &b);
  if (ch > 0) {
    px_tr_ctx_t c = *ctx;
    c.spans = NULL; /* the respelled body is gone once written: written whole */
    rc = px_translate_request_fast(&c, b.data, b.len, flags, out, out_len, lossy, err);
    if (rc == 0 || rc == PX_FAST_REFUSE) {
      px_buf_free(&b);
      return rc == 0 ? 0 : PX_EINVAL;
    }
  }
  rc = ch < 0 ? out_of_memory(err)
              : odd_refusal("request body", ch > 0 ? b.data : body, ch > 0 ? b.len : len,
                            ctx->in, ctx->out, err);
  px_buf_free(&b);
  return rc;
}

int px_translate_response_body(const px_tr_ctx_t *ctx, const char *body, size_t len,
                               px_buf_t *out, px_lossy_t *lossy, px_usage_t *usage,
                               px_tr_err_t *err) {
  int rc = px_translate_response_fast(ctx, body, len, out, lossy, usage, err);
  if (rc != PX_FAST_DECLINE) return rc;
  if (ctx->in == ctx->out || body == NULL) {
    px_tr_fail(err, "", "no translation of this answer");
    return PX_FAST_REFUSE;
  }
  /* checked whole by jansson's rules (a repeated member is the rule's to
   * name below) */
  px_fw_t w = {body, len, 0};
  px_fv_t v;
  if (px_fc_value(&w, &v) < 0 || px_fc_end(&w) < 0 || v.kind != PX_FV_OBJ) {
    px_tr_fail(err, "", "upstream returned invalid JSON or JSON that is not an object");
    if (err) err->kind = PX_ERR_BAD_GATEWAY;
    return PX_FAST_REFUSE;
  }
  px_buf_t b;
  int ch = respell(body, len, &b);
  if (ch > 0) {
    rc = px_translate_response_fast(ctx, b.data, b.len, out, lossy, usage, err);
    if (rc != PX_FAST_DECLINE) {
      px_buf_free(&b);
      return rc;
    }
  }
  if (ch < 0)
    out_of_memory(err);
  else
    odd_refusal("upstream answer", ch > 0 ? b.data : body, ch > 0 ? b.len : len, ctx->out,
                ctx->in, err);
  px_buf_free(&b);
  if (err && err->kind == PX_ERR_INVALID) err->kind = PX_ERR_BAD_GATEWAY;
  return PX_FAST_REFUSE;
}
