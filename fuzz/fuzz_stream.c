/* fuzz_stream.c - the stream pipeline (SSE parser -> upstream decoder ->
 * hub order checks -> client encoder) with arbitrary bytes, every pair.
 *
 * Input: byte 0 picks the pair (in = (b & 15) >> 2, out = b & 3: 16 pairs) and flags;
 * byte 1 a chunking seed; the rest is the upstream body (a configured
 * secret is registered: error events are scrubbed). Properties: never a
 * crash or leak; after finish a terminal has been written; the client bytes
 * do not depend on how the upstream bytes were chunked. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/proto.h"
#include "proxai/scrub.h"

static int run(const px_tr_ctx_t *ctx, const uint8_t *p, size_t n, uint32_t seed, int ok,
               px_buf_t *out, int *frc) {
  px_buf_init(out, 8u << 20);
  px_stream_tr_t *t = px_stream_tr_new(ctx, out);
  if (t == NULL) return -1;
  size_t at = 0;
  while (at < n) {
    size_t chunk = n - at;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      chunk = 1 + (seed >> 16) % 64;
      if (chunk > n - at) chunk = n - at;
    }
    char *c = malloc(chunk);
    memcpy(c, p + at, chunk);
    int rc = px_stream_tr_feed(t, c, chunk);
    free(c);
    at += chunk;
    if (rc < 0) {
      if (!px_stream_tr_done(t)) abort(); /* broken = error already written */
      break;
    }
  }
  *frc = px_stream_tr_finish(t, ok, PX_ERR_TIMEOUT, "upstream timed out");
  if (!px_stream_tr_done(t)) abort();
  const px_usage_t *u = px_stream_tr_usage(t);
  if (u == NULL) abort();
  /* finishing twice changes nothing */
  size_t len = out->len;
  if (px_stream_tr_finish(t, ok, PX_ERR_TIMEOUT, "again") != *frc || out->len != len)
    abort();
  px_stream_tr_free(t);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  /* a configured secret: upstream error events go through the scrubber */
  static const char key[] = "fake-key-test-only-not-a-real-key-placeholder-wxyz";
  px_scrub_add(key, sizeof(key) - 1);
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = (px_proto_t)((data[0] & 15) >> 2);
  ctx.out = (px_proto_t)(data[0] & 3);
  ctx.stream = 1;
  ctx.client_include_usage = (data[0] >> 7) & 1;
  ctx.client_model = "client-model";
  ctx.upstream_model = "upstream-model";
  ctx.created = 1700000000;
  ctx.max_accum = (data[0] >> 6) & 1 ? 256 : 1 << 20;
  int ok = !((data[0] >> 5) & 1);
  uint32_t seed = (uint32_t)data[1] | 1u;
  px_buf_t a, b;
  int fa = 0, fb = 0;
  int ra = run(&ctx, data + 2, size - 2, 0, ok, &a, &fa);
  int rb = run(&ctx, data + 2, size - 2, seed, ok, &b, &fb);
  if (ra != rb) abort();
  if (ra == 0 &&
      (fa != fb || a.len != b.len || (a.len && memcmp(a.data, b.data, a.len)))) {
    fprintf(stderr, "fuzz_stream: chunking changed the client bytes\n");
    abort();
  }
  if (ra == 0) {
    /* what the client receives is a stream of its own protocol, as our
     * decoder for that protocol judges it: complete when ours completed,
     * ending in error when ours did */
    px_tr_ctx_t c2 = ctx;
    c2.out = ctx.in;
    c2.max_accum = 1 << 24;
    px_buf_t o2;
    int f2 = 0;
    if (run(&c2, (const uint8_t *)a.data, a.len, 0, 1, &o2, &f2) == 0) {
      if ((fa == 0) != (f2 == 0)) {
        fprintf(
            stderr,
            "fuzz_stream: client stream (finish %d) re-decodes with finish %d:\n%.*s\n",
            fa, f2, (int)(a.len > 4000 ? 4000 : a.len), a.data ? a.data : "");
        abort();
      }
      px_buf_free(&o2);
    }
  }
  px_buf_free(&a);
  px_buf_free(&b);
  return 0;
}
