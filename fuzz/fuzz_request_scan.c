/* fuzz_request_scan.c - the request scanner (px_json_request) against
 * jansson, the full parser: the gateway's fast path must accept exactly the
 * bodies the translated path accepts, and read the same members from them
 * (SPEC section 10).
 *
 * Input: a request body, as is. For every input:
 *   accepted  -> jansson (json_loadb, flags 0) accepts it, it is an object
 *                nested at most PX_JSON_MAX_DEPTH deep, and model, stream
 *                and stream_options.include_usage read as jansson reads
 *                them; replacing the model span gives the same document
 *                with the new model.
 *   refused   -> by reason: SYNTAX: jansson refuses it (or the scanner
 *                stopped at a NUL byte outside a string, which jansson 2.14
 *                skips after a number or a literal); DEPTH: jansson
 *                refuses it or it is nested deeper than the limit;
 *                NOT_OBJECT: jansson reads a non-object; DUPLICATE: jansson
 *                with JSON_REJECT_DUPLICATES refuses it (when it parses).
 * An accepted body is also translated for every pair of protocols, by the
 * gateway's path (px_translate_request_body: the fast codecs, then the one
 * reader's rule for what they decline) and by the reference (the jansson
 * codecs, px_translate_request): a JSON-equal body with the same lossy
 * list, or the same refusal; where the fast codecs decline the body as it
 * is written, the gateway's refusal is its own (a repeated member, a name
 * no codec reads), and a body it takes in its plain spelling is still the
 * reference's. The scan records its containers' ends too
 * (px_json_request_jumps, a small table: its cap is reached), each sound
 * by the walker's own skip (jumps_check.h), and the gateway's path reads
 * the body with them, as it does after admission. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jumps_check.h"
#include "proxai/fastir.h"
#include "proxai/json.h"
#include "proxai/proto.h"
#include "ref.h"

static size_t depth_of(const json_t *j) {
  size_t d = 0, k;
  const char *key;
  json_t *v;
  if (json_is_object(j)) {
    json_object_foreach((json_t *)j, key, v) {
      size_t c = depth_of(v);
      if (c > d) d = c;
    }
    return d + 1;
  }
  if (json_is_array(j)) {
    json_array_foreach(j, k, v) {
      size_t c = depth_of(v);
      if (c > d) d = c;
    }
    return d + 1;
  }
  return 0;
}

#define CHECK(c)                                                                        \
  do {                                                                                  \
    if (!(c)) {                                                                         \
      fprintf(stderr, "fuzz_request_scan: %s (scan err %d at %zu: %s)\n", #c, r.err,   \
              r.err_at, r.reason ? r.reason : "-");                                     \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

/* The scanner's token of a member agrees with jansson's value. */
static int same_kind(const char *p, size_t at, size_t len, const json_t *v) {
  if (len == 0) return v == NULL;
  switch (p[at]) {
  case '"': return json_is_string(v);
  case '{': return json_is_object(v);
  case '[': return json_is_array(v);
  case 't': return json_is_true(v);
  case 'f': return json_is_false(v);
  case 'n': return json_is_null(v);
  default: return json_is_number(v);
  }
}

/* The raw and the DOM translation of an accepted body agree. */
static void translate_both(const char *p, size_t size, json_t *j,
                           const px_json_req_t *scan) {
  for (int k = 0; k < PX_PROTO_COUNT * PX_PROTO_COUNT; k++) {
    px_tr_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.in = (px_proto_t)(k / PX_PROTO_COUNT);
    ctx.out = (px_proto_t)(k % PX_PROTO_COUNT);
    if (ctx.in == ctx.out) continue;
    ctx.client_model = "client-model";
    ctx.upstream_model = "upstream-model";
    ctx.created = 1700000000;
    ctx.max_accum = 1 << 20;
    ctx.scan = scan;
    px_lossy_t l1, l2;
    px_tr_err_t e1, e2;
    px_lossy_init(&l1);
    px_lossy_init(&l2);
    memset(&e1, 0, sizeof(e1));
    memset(&e2, 0, sizeof(e2));
    char *raw = NULL;
    size_t rlen = 0;
    int rc1 = px_translate_request_body(&ctx, p, size, 0, &raw, &rlen, &l1, &e1);
    json_t *ub = NULL;
    int rc2 = px_translate_request(&ctx, j, &ub, &l2, &e2);
    /* the fast codecs declined the body as written: the one reader's rule */
    char *fo = NULL;
    size_t fl = 0;
    px_lossy_t lf;
    px_lossy_init(&lf);
    int own = rc1 < 0 && px_translate_request_fast(&ctx, p, size, 0, &fo, &fl, &lf,
                                                   NULL) == PX_FAST_DECLINE;
    free(fo);
    if (own && e1.kind != PX_ERR_INVALID) {
      fprintf(stderr, "fuzz_request_scan: %d -> %d: not a 400: %s\n", ctx.in, ctx.out,
              e1.message);
      abort();
    }
    if (!own && (rc1 < 0) != (rc2 < 0)) {
      fprintf(stderr, "fuzz_request_scan: %d -> %d: raw %d (%s), dom %d (%s)\n", ctx.in,
              ctx.out, rc1, e1.message, rc2, e2.message);
      abort();
    }
    if (own) {
      /* refused by the rule: nothing to compare */
    } else if (rc1 == 0) {
      /* the raw entry may take the fast path (translate_fast.c): its body is
       * JSON-equal to the document path's, not byte-equal */
      json_t *rj = json_loadb(raw, rlen, 0, NULL);
      if (rj == NULL || !json_equal(rj, ub) || rlen != strlen(raw) ||
          strcmp(l1.buf, l2.buf) != 0) {
        fprintf(stderr, "fuzz_request_scan: %d -> %d: raw and DOM translations differ\n%s\n%s / %s\n",
                ctx.in, ctx.out, raw, l1.buf, l2.buf);
        abort();
      }
      json_decref(rj);
    } else if (strcmp(e1.message, e2.message) != 0) {
      fprintf(stderr, "fuzz_request_scan: %d -> %d: errors differ: %s / %s\n", ctx.in,
              ctx.out, e1.message, e2.message);
      abort();
    }
    free(raw);
    json_decref(ub);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data;
  px_json_req_t r;
  uint32_t v[16][2];
  px_json_jumps_t jt = {.v = v, .cap = 16};
  int rc = px_json_request_jumps(p, size, NULL, NULL, &jt, &r);
  {
    px_json_req_t plain;
    CHECK(px_json_request(p, size, &plain) == rc);
  }
  if (rc == 0) CHECK(r.jumps == &jt && jumps_sound(p, size, &jt));
  json_error_t je;
  json_t *j = json_loadb(p, size, 0, &je);
  if (rc == 0) {
    CHECK(j != NULL);
    CHECK(json_is_object(j));
    CHECK(depth_of(j) <= PX_JSON_MAX_DEPTH);
    json_t *m = json_object_get(j, "model"), *st = json_object_get(j, "stream");
    json_t *iu = json_object_get(json_object_get(j, "stream_options"), "include_usage");
    CHECK(same_kind(p, r.model_at, r.model_len, m));
    CHECK(same_kind(p, r.stream_at, r.stream_len, st));
    CHECK(r.stream == json_is_true(st));
    CHECK(r.include_usage == json_is_true(iu));
    if (json_is_string(m)) {
      char *s = px_json_req_model(p, &r);
      CHECK(s != NULL);
      CHECK(strlen(s) == json_string_length(m) && strcmp(s, json_string_value(m)) == 0);
      free(s);
      /* the pass-through rewrite: the same document with another model */
      px_buf_t b;
      px_buf_init(&b, size + 64);
      CHECK(px_json_splice_str(&b, p, size, r.model_at, r.model_len, "re\"written") == 0);
      json_t *k = json_loadb(b.data, b.len, 0, NULL);
      CHECK(k != NULL);
      json_incref(m);
      json_object_set_new(j, "model", json_string("re\"written"));
      CHECK(json_equal(j, k));
      json_decref(k);
      px_buf_free(&b);
      json_object_set_new(j, "model", m); /* back to the client's */
    }
    translate_both(p, size, j, &r);
  } else {
    switch (r.err) {
    case PX_JREQ_SYNTAX:
      /* jansson 2.14 skips a NUL byte right after a number or a literal
       * ({"a":1\0} parses); a NUL outside a string is not JSON, and the
       * scanner refuses it on both paths */
      CHECK(j == NULL || (r.err_at < size && data[r.err_at] == 0));
      break;
    case PX_JREQ_DEPTH: CHECK(j == NULL || depth_of(j) > PX_JSON_MAX_DEPTH); break;
    case PX_JREQ_NOT_OBJECT: CHECK(j != NULL && !json_is_object(j)); break;
    case PX_JREQ_DUPLICATE:
      CHECK(r.key != NULL);
      if (j != NULL) {
        json_t *k = json_loadb(p, size, JSON_REJECT_DUPLICATES, NULL);
        CHECK(k == NULL);
      }
      break;
    default: CHECK(!"an unknown reason");
    }
  }
  json_decref(j);
  return 0;
}
