/* fuzz_upstream_response.c - what the response path does with raw upstream
 * body bytes before anything is translated: the pass-through stream watcher
 * (terminal / error detection, model rewrite, the usage-only chunk strip),
 * usage read from a JSON body, and the upstream error body turned into the
 * client's error.
 *
 * Input: byte 0 picks the protocol (b % PX_PROTO_COUNT) and the watcher mode
 * (b / PX_PROTO_COUNT % 4:
 * watch, rewrite, strip, rewrite+strip); byte 1 a chunking seed; byte 2 the
 * upstream status (400 + b % 200); the rest is the upstream body.
 * Properties: never a crash or leak; the watcher's output, result, usage
 * and a traced answer's id, model and finish reason (read from the
 * events) do not depend on how the bytes were chunked; the output only ever
 * ends at an event boundary (so an error event can always follow it); an
 * unchanged watch passes on a prefix of its input; the id, model and
 * finish reason read from a body end at the lengths noted; an error body
 * always becomes a client error with a status from 400 to 599. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jdepth.h"
#include "proxai/json.h"
#include "proxai/passthru.h"
#include "proxai/proto.h"
#include "proxai/usage.h"

/* jansson's reading of a counter of a body's usage (the last of a
 * repeated member, names unescaped, as JSON parsers keep): a non-negative
 * integer, else none. */
static int64_t ref_int(json_t *o, const char *name) {
  json_t *x = name ? json_object_get(o, name) : NULL;
  return json_is_integer(x) && json_integer_value(x) >= 0 ? json_integer_value(x) : -1;
}

/* A body that is one JSON object: the usage read equals jansson's (but for
 * the one reader's two deliberate differences: a raw NUL byte after a
 * token, which jansson drops, and nesting past PX_JSON_MAX_DEPTH). */
static void usage_oracle(px_proto_t proto, const char *p, size_t n,
                         const px_usage_t *got) {
  const px_wire_watch_t *w = &px_proto_get(proto)->watch;
  if (!w->usage_obj || memchr(p, 0, n) != NULL) return;
  json_t *doc = json_loadb(p, n, JSON_DECODE_ANY, NULL);
  if (!json_is_object(doc) || doc_depth(doc) > PX_JSON_MAX_DEPTH) {
    json_decref(doc);
    return;
  }
  px_usage_t want = {.input_tokens = -1, .output_tokens = -1};
  json_t *us = json_object_get(doc, w->usage_obj);
  if (json_is_object(us)) {
    int64_t v = ref_int(us, w->usage_in);
    if (v >= 0) {
      want.input_tokens = v;
      for (int k = 0; k < 2; k++) {
        int64_t c = ref_int(us, w->usage_in_extra[k]);
        if (c > 0) want.input_tokens += c;
      }
    }
    v = ref_int(us, w->usage_out);
    if (v >= 0) {
      int64_t c = ref_int(us, w->usage_out_extra);
      want.output_tokens = v + (c > 0 ? c : 0);
    }
  }
  json_decref(doc);
  if (want.input_tokens != got->input_tokens ||
      want.output_tokens != got->output_tokens) {
    fprintf(stderr, "fuzz_upstream_response: usage %lld/%lld, jansson reads %lld/%lld\n",
            (long long)got->input_tokens, (long long)got->output_tokens,
            (long long)want.input_tokens, (long long)want.output_tokens);
    abort();
  }
}

typedef struct {
  int rc, fin;
  px_usage_t usage;
  px_answer_t answer;
} result_t;

static void watch(px_proto_t proto, int mode, const uint8_t *p, size_t n, uint32_t seed,
                  px_buf_t *out, result_t *r) {
  px_passthru_t pt;
  px_passthru_init(&pt, proto, (mode & 1) ? "client-model" : NULL);
  pt.strip_usage = (mode & 2) != 0;
  memset(&r->answer, 0, sizeof(r->answer));
  px_passthru_answer(&pt, &r->answer);
  px_buf_init(out, 64u << 20);
  r->rc = 0;
  size_t at = 0;
  while (at < n) {
    size_t chunk = n - at;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      chunk = 1 + (seed >> 16) % 29;
      if (chunk > n - at) chunk = n - at;
    }
    /* a copy, so that a view kept past the call is caught by ASan */
    char *c = malloc(chunk);
    memcpy(c, p + at, chunk);
    int rc = px_passthru_feed(&pt, c, chunk, out);
    free(c);
    at += chunk;
    if (rc < 0) {
      r->rc = rc;
      /* a broken stream stays broken */
      if (px_passthru_feed(&pt, "data: x\n\n", 9, out) != rc) abort();
      break;
    }
  }
  r->fin = px_passthru_finish(&pt);
  r->usage = pt.usage;
  px_passthru_done(&pt);
}

/* Output ends where an event ended: empty, or after a blank line (LF LF,
 * CR CR, CRLF CRLF, mixed), never inside a line or an event. */
static int at_boundary(const px_buf_t *b) {
  if (b->len == 0) return 1;
  const char *d = b->data;
  size_t n = b->len;
  char c = d[n - 1];
  if (c != '\n' && c != '\r') return 0;
  size_t i = n - 1;
  if (c == '\n' && i > 0 && d[i - 1] == '\r') i--; /* one CRLF line end */
  if (i == 0) return 1;
  char e = d[i - 1];
  return e == '\n' || e == '\r';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  px_proto_t proto = (px_proto_t)(data[0] % PX_PROTO_COUNT);
  int mode = data[0] / PX_PROTO_COUNT % 4;
  uint32_t seed = (uint32_t)data[1] | 1u;
  int status = 400 + data[2] % 200;
  const uint8_t *p = data + 3;
  size_t n = size - 3;

  px_buf_t a, b;
  result_t ra, rb;
  watch(proto, mode, p, n, 0, &a, &ra);
  watch(proto, mode, p, n, seed, &b, &rb);
  if (ra.rc != rb.rc || ra.fin != rb.fin || a.len != b.len ||
      (a.len && memcmp(a.data, b.data, a.len) != 0) ||
      ra.usage.input_tokens != rb.usage.input_tokens ||
      ra.usage.output_tokens != rb.usage.output_tokens ||
      memcmp(&ra.answer, &rb.answer, sizeof(ra.answer)) != 0) {
    fprintf(stderr,
            "fuzz_upstream_response: chunking changed the result (rc %d/%d fin %d/%d len "
            "%zu/%zu)\n",
            ra.rc, rb.rc, ra.fin, rb.fin, a.len, b.len);
    abort();
  }
  if (!at_boundary(&a)) {
    fprintf(stderr, "fuzz_upstream_response: output ends inside an event\n");
    abort();
  }
  if (mode == 0 && a.len && (a.len > n || memcmp(a.data, p, a.len) != 0)) {
    fprintf(stderr,
            "fuzz_upstream_response: watch-only output is not a prefix of the input\n");
    abort();
  }
  px_buf_free(&a);
  px_buf_free(&b);

  /* usage from a JSON body (pass-through JSON answers) */
  px_usage_t u;
  memset(&u, 0, sizeof(u));
  u.input_tokens = u.output_tokens = -1;
  px_usage_scan(proto, (const char *)p, n, &u);
  usage_oracle(proto, (const char *)p, n, &u);

  /* a traced answer's id, model and finish reason from the body (after
   * the usage, as the pass-through reads them), and as an event's */
  size_t tail = PX_JSON_NPOS;
  px_usage_scan_at(proto, (const char *)p, n, &u, &tail);
  const px_wire_watch_t *w = &px_proto_get(proto)->watch;
  px_answer_t ans[2];
  memset(ans, 0, sizeof(ans));
  px_answer_body(w, (const char *)p, n, tail, &ans[0]);
  px_answer_read(w, (const char *)p, n, NULL, &ans[1]);
  for (int k = 0; k < 2; k++) /* (a raw NUL in a string is copied as it is) */
    if (ans[k].id_len >= sizeof(ans[k].id) || ans[k].id[ans[k].id_len] ||
        ans[k].model_len >= sizeof(ans[k].model) || ans[k].model[ans[k].model_len] ||
        ans[k].finish_len >= sizeof(ans[k].finish) || ans[k].finish[ans[k].finish_len]) {
      fprintf(stderr, "fuzz_upstream_response: an answer's string ends elsewhere\n");
      abort();
    }

  /* the error body, toward every client protocol */
  for (int in = 0; in < 3; in++) {
    px_tr_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.in = (px_proto_t)in;
    ctx.out = proto;
    ctx.client_model = "client-model";
    ctx.upstream_model = "upstream-model";
    px_buf_t e;
    px_buf_init(&e, 1u << 20);
    int st = 0;
    if (px_translate_error(&ctx, status, (const char *)p, n, "req-1", &e, &st) == 0 &&
        (st < 400 || st > 599 || e.len == 0)) {
      fprintf(stderr, "fuzz_upstream_response: error status %d, %zu bytes\n", st, e.len);
      abort();
    }
    px_buf_free(&e);
  }
  return 0;
}
