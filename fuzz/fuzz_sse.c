/* fuzz_sse.c - the SSE parser: arbitrary bytes, arbitrary splits.
 *
 * Input: byte 0 picks the cap (small caps exercise PX_ETOOBIG), byte 1 a
 * split seed, the rest is the stream. Property checked: the events seen when
 * the stream is fed whole equal the events seen when it is fed in chunks
 * (and the result code matches); the parser never crashes or leaks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/sse.h"

typedef struct {
  uint64_t h; /* running FNV-1a over every event's fields */
  size_t n;
} digest_t;

static void mix(digest_t *d, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) d->h = (d->h ^ (unsigned char)p[i]) * 1099511628211ull;
  d->h = (d->h ^ 0xff) * 1099511628211ull; /* field separator */
}

static int on_ev(void *arg, const px_sse_event_t *ev) {
  digest_t *d = arg;
  if (ev->event.len)
    mix(d, ev->event.ptr, ev->event.len);
  else
    mix(d, "", 0);
  mix(d, ev->data.ptr, ev->data.len);
  mix(d, ev->id.len ? ev->id.ptr : "", ev->id.len);
  d->n++;
  return 0;
}

static int run(const uint8_t *p, size_t n, size_t cap, uint32_t seed, digest_t *d) {
  px_sse_t s;
  d->h = 1469598103934665603ull;
  d->n = 0;
  px_sse_init(&s, cap, on_ev, d);
  int rc = 0;
  size_t at = 0;
  while (at < n && rc == 0) {
    size_t chunk = n - at;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      chunk = 1 + (seed >> 16) % 17;
      if (chunk > n - at) chunk = n - at;
    }
    /* copy the chunk so that a view kept past the feed would be caught by
     * ASan as a use after free */
    char *c = malloc(chunk ? chunk : 1);
    memcpy(c, p + at, chunk);
    rc = px_sse_feed(&s, c, chunk);
    free(c);
    at += chunk;
  }
  px_sse_done(&s);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t cap = data[0] < 128 ? (size_t)data[0] + 1 : (size_t)1 << 20;
  uint32_t seed = (uint32_t)data[1] | 1u;
  digest_t a, b;
  int ra = run(data + 2, size - 2, cap, 0, &a);
  int rb = run(data + 2, size - 2, cap, seed, &b);
  /* the result never depends on the chunking: same code, same events */
  if (ra != rb || a.h != b.h || a.n != b.n) {
    fprintf(stderr, "fuzz_sse: chunking changed the result (%d/%d, %zu/%zu events)\n", ra,
            rb, a.n, b.n);
    abort();
  }
  return 0;
}
