/* fuzz_sse.c - the SSE parser and the pass-through watcher on it:
 * arbitrary bytes, arbitrary splits.
 *
 * Input: byte 0 picks the cap (small caps exercise PX_ETOOBIG), byte 1 a
 * split seed, the rest is the stream. Properties checked: the events seen
 * when the stream is fed whole equal the events seen when it is fed in
 * chunks (and the result code matches); the same for what the pass-through
 * watcher (src/core/passthru.c) passes on, and what it reads of the stream
 * (terminal, error, usage, and a traced answer's id, model and finish
 * reason: also what reading every event with px_answer_event finds), for
 * a protocol and a model rewrite picked by byte 0; neither crashes or
 * leaks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/passthru.h"
#include "proxai/sse.h"
#include "proxai/usage.h"

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

/* The pass-through watcher over the same chunks: what it passed on, its
 * result and what it read into *pt_out (done: nothing to free). */
/* The answer as reading every event finds it (px_answer_event): what the
 * watcher must have read as the events passed. 0 when the stream parses. */
typedef struct {
  const px_wire_watch_t *w;
  px_answer_t *a;
} ref_t;

static int on_ref(void *arg, const px_sse_event_t *ev) {
  ref_t *r = arg;
  px_answer_event(r->w, ev->event, ev->data.ptr, ev->data.len, r->a);
  return 0;
}

static int ref_answer(const uint8_t *p, size_t n, px_proto_t proto, px_answer_t *a) {
  ref_t r = {&px_proto_get(proto)->watch, a};
  px_sse_t s;
  memset(a, 0, sizeof(*a));
  px_sse_init(&s, PX_MAX_SSE_EVENT, on_ref, &r);
  int rc = px_sse_feed(&s, (const char *)p, n);
  px_sse_done(&s);
  return rc;
}

static int run_pt(const uint8_t *p, size_t n, uint32_t seed, px_proto_t proto,
                  const char *model, int strip, px_answer_t *ans, px_buf_t *out,
                  px_passthru_t *pt_out) {
  px_passthru_t pt;
  px_passthru_init(&pt, proto, model);
  pt.strip_usage = strip;
  if (ans) memset(ans, 0, sizeof(*ans));
  px_passthru_answer(&pt, ans);
  int rc = 0;
  size_t at = 0;
  while (at < n && rc == 0) {
    size_t chunk = n - at;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      chunk = 1 + (seed >> 16) % 17;
      if (chunk > n - at) chunk = n - at;
    }
    char *c = malloc(chunk ? chunk : 1);
    memcpy(c, p + at, chunk);
    rc = px_passthru_feed(&pt, c, chunk, out);
    free(c);
    at += chunk;
  }
  pt.terminal = px_passthru_finish(&pt);
  px_passthru_done(&pt);
  *pt_out = pt;
  return rc;
}

static void check_passthru(const uint8_t *p, size_t n, uint32_t seed, unsigned pick) {
  static const px_proto_t protos[] = {PX_PROTO_CHAT, PX_PROTO_RESPONSES,
                                      PX_PROTO_ANTHROPIC, PX_PROTO_GEMINI};
  px_proto_t proto = protos[pick & 3];
  const char *model = pick & 4 ? "client-model" : NULL;
  int strip = (pick & 8) != 0, traced = (pick & 16) != 0;
  px_buf_t a, b;
  px_passthru_t pa, pb;
  px_answer_t aa, ab, ref;
  px_buf_init(&a, (size_t)1 << 24);
  px_buf_init(&b, (size_t)1 << 24);
  int ra = run_pt(p, n, 0, proto, model, strip, traced ? &aa : NULL, &a, &pa);
  int rb = run_pt(p, n, seed, proto, model, strip, traced ? &ab : NULL, &b, &pb);
  if (traced && ra == 0 && rb == 0 && ref_answer(p, n, proto, &ref) == 0 &&
      (memcmp(&aa, &ab, sizeof(aa)) != 0 || strcmp(aa.id, ref.id) != 0 ||
       strcmp(aa.model, ref.model) != 0 || strcmp(aa.finish, ref.finish) != 0)) {
    fprintf(stderr,
            "fuzz_sse: the watcher's answer (%s|%s|%s) is not what reading every event "
            "finds (%s|%s|%s)\n",
            aa.id, aa.model, aa.finish, ref.id, ref.model, ref.finish);
    abort();
  }
  /* a failure (an event over the cap, a buffer error) may come at another
   * point of a chunked stream; a stream that went through is the same */
  if (ra == 0 && rb == 0 &&
      (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0) ||
       pa.terminal != pb.terminal || pa.upstream_error != pb.upstream_error ||
       memcmp(&pa.usage, &pb.usage, sizeof(pa.usage)) != 0)) {
    fprintf(stderr, "fuzz_sse: chunking changed what the pass-through watcher did\n");
    abort();
  }
  px_buf_free(&a);
  px_buf_free(&b);
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
  check_passthru(data + 2, size - 2, seed, data[0]);
  return 0;
}
