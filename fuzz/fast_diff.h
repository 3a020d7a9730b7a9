/* fast_diff.h - the differential-test scaffolding shared by the stream
 * decoder fast-path fuzz targets (fuzz_anthropic_fast.c,
 * fuzz_responses_fast.c, fuzz_chat_fast.c, fuzz_gemini_stream.c): two
 * decoders of one protocol, one with the fast path on and one with it off,
 * get the same events; every event must give the same return code and the
 * same emitted events (types, indexes, kinds, text bytes, ids, usage,
 * errors), else the target aborts.
 *
 * Input of fd_fuzz_one: byte 0 picks the mode.
 *   even: the rest (after byte 1) is an upstream SSE body; a stream that
 *         fails is restarted with a block of kind byte 1 % nkinds open.
 *   odd:  a valid stream start is fed first (ops->start with kind byte 1 %
 *         nkinds), then every line of the rest is fed twice: as the raw
 *         JSON string content of the matching delta event (heads[kind],
 *         the line, tail) and as an event's data as is.
 * The first call also checks, on the fixed stream self_body, that the fast
 * path does handle self_hits events (a differential test of a path never
 * taken would prove nothing). */
#ifndef PX_FUZZ_FAST_DIFF_H
#define PX_FUZZ_FAST_DIFF_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/proto.h"
#include "proxai/sse.h"

typedef struct fd_pair fd_pair_t;

/* What differs between the decoders under test. */
typedef struct fd_ops {
  const px_proto_ops_t *proto;        /* the decoder under test */
  px_proto_t out;                     /* its protocol (ctx.out) */
  long (*fast)(px_sdec_t *d, int on); /* the px_*_sdec_fast switch */
  /* feed a valid stream start with a block of this kind open (fd_feed) */
  void (*start)(fd_pair_t *p, int kind);
  int nkinds;               /* block kinds start() and heads know */
  const char *const *heads; /* [nkinds] a delta event up to its string */
  const char *tail;         /* closes a heads[] event after the string */
  const char *const *tails; /* [nkinds] per kind instead of tail, or NULL */
  const char *self_body;    /* the self check's SSE body */
  size_t self_len;
  long self_hits; /* events of it the fast path must handle */
} fd_ops_t;

struct fd_pair {
  const fd_ops_t *ops;
  px_tr_ctx_t ctx;
  px_sdec_t *d[2]; /* [0] fast path, [1] jansson only */
  px_buf_t out[2];
  int kind;  /* block kind of start() */
  long hits; /* events the fast path handled, over restarts */
};

/* The sink: one line per event with every field, so that the two outputs
 * are equal exactly when the events are. */
static inline int fd_rec(void *arg, const px_ev_t *ev) {
  px_buf_t *b = arg;
  const px_str_t *s[] = {&ev->text,          &ev->id,
                         &ev->name,          &ev->model,
                         &ev->stop_sequence, &ev->refusal_explanation};
  if (px_buf_printf(b, "T%d I%d B%d D%d S%d E%d C%d U%lld,%lld,%lld,%lld,%lld",
                    (int)ev->type, ev->index, (int)ev->block, (int)ev->delta,
                    (int)ev->stop, (int)ev->errkind, ev->custom,
                    (long long)ev->usage.input_tokens, (long long)ev->usage.output_tokens,
                    (long long)ev->usage.cache_read_tokens,
                    (long long)ev->usage.cache_creation_tokens,
                    (long long)ev->usage.reasoning_tokens) < 0)
    abort();
  for (size_t k = 0; k < sizeof(s) / sizeof(s[0]); k++) {
    if (px_buf_printf(b, " %d:%zu:", s[k]->ptr != NULL, s[k]->len) < 0) abort();
    if (s[k]->len && px_buf_append(b, s[k]->ptr, s[k]->len) < 0) abort();
  }
  if (px_buf_puts(b, "\n") < 0) abort();
  return 0;
}

/* Fresh decoders; ops, kind and hits survive a restart. A Chat client
 * (it carries custom calls). */
static inline void fd_pair_init(fd_pair_t *p) {
  memset(&p->ctx, 0, sizeof(p->ctx));
  p->ctx.in = PX_PROTO_CHAT;
  p->ctx.out = p->ops->out;
  p->ctx.stream = 1;
  p->ctx.max_accum = 1u << 20;
  for (int k = 0; k < 2; k++) {
    px_buf_init(&p->out[k], 64u << 20);
    p->d[k] = p->ops->proto->sdec_new(&p->ctx, fd_rec, &p->out[k]);
    if (p->d[k] == NULL) abort();
    p->ops->fast(p->d[k], k == 0);
  }
}

/* Abort unless both paths gave the same verdict and the same events. */
static inline void fd_check(fd_pair_t *p, int rc0, int rc1) {
  if ((rc0 < 0) != (rc1 < 0) || (rc0 < 0 && rc0 != rc1)) {
    fprintf(stderr, "fast path rc %d, jansson path rc %d\n", rc0, rc1);
    abort();
  }
  if (p->out[0].len != p->out[1].len ||
      (p->out[0].len && memcmp(p->out[0].data, p->out[1].data, p->out[0].len) != 0)) {
    fprintf(stderr, "fast path events:\n%.*s\njansson path events:\n%.*s\n",
            (int)p->out[0].len, p->out[0].data, (int)p->out[1].len, p->out[1].data);
    abort();
  }
}

static inline void fd_pair_done(fd_pair_t *p) {
  const px_proto_ops_t *pr = p->ops->proto;
  int rc0 = pr->sdec_finish(p->d[0]);
  int rc1 = pr->sdec_finish(p->d[1]);
  fd_check(p, rc0, rc1);
  p->hits += p->ops->fast(p->d[0], -1);
  if (p->ops->fast(p->d[1], -1) != 0) abort();
  for (int k = 0; k < 2; k++) {
    pr->sdec_free(p->d[k]);
    px_buf_free(&p->out[k]);
  }
}

/* One event to both decoders. A failed stream (the decoders reject every
 * later event) is restarted with fresh decoders and a block of the same
 * kind open, so that the events after it are compared too. */
static inline void fd_feed(fd_pair_t *p, const char *data, size_t n) {
  px_sse_event_t ev = {PX_STR_NULL, {data, n}, PX_STR_NULL};
  int rc0 = p->ops->proto->sdec_feed(p->d[0], &ev);
  int rc1 = p->ops->proto->sdec_feed(p->d[1], &ev);
  fd_check(p, rc0, rc1);
  if (rc0 < 0) {
    fd_pair_done(p);
    fd_pair_init(p);
    p->ops->start(p, p->kind);
  }
}

static inline int fd_on_sse(void *arg, const px_sse_event_t *ev) {
  fd_pair_t *p = arg;
  fd_feed(p, ev->data.ptr, ev->data.len);
  return 0;
}

static inline void fd_lines_mode(const fd_ops_t *ops, const uint8_t *data, size_t size,
                                 int kind) {
  fd_pair_t p = {.ops = ops};
  fd_pair_init(&p);
  ops->start(&p, kind);
  px_buf_t ev;
  px_buf_init(&ev, 16u << 20);
  size_t at = 0;
  while (at <= size) {
    const uint8_t *nl = at < size ? memchr(data + at, '\n', size - at) : NULL;
    size_t end = nl ? (size_t)(nl - data) : size;
    ev.len = 0;
    if (px_buf_puts(&ev, ops->heads[kind]) < 0 ||
        px_buf_append(&ev, data + at, end - at) < 0 ||
        px_buf_puts(&ev, ops->tails ? ops->tails[kind] : ops->tail) < 0)
      abort();
    fd_feed(&p, ev.data, ev.len);
    if (end > at) fd_feed(&p, (const char *)data + at, end - at);
    at = end + 1;
  }
  px_buf_free(&ev);
  fd_pair_done(&p);
}

/* An SSE body to both decoders; returns the events the fast path handled. */
static inline long fd_sse_mode(const fd_ops_t *ops, const char *body, size_t n,
                               int kind) {
  fd_pair_t p = {.ops = ops, .kind = kind};
  fd_pair_init(&p);
  px_sse_t s;
  px_sse_init(&s, PX_MAX_SSE_EVENT, fd_on_sse, &p);
  px_sse_feed(&s, body, n);
  px_sse_done(&s);
  fd_pair_done(&p);
  return p.hits;
}

static inline int fd_fuzz_one(const fd_ops_t *ops, const uint8_t *data, size_t size) {
  static int checked;
  if (!checked) {
    checked = 1;
    long hits = fd_sse_mode(ops, ops->self_body, ops->self_len, 0);
    if (hits != ops->self_hits) {
      fprintf(stderr, "fast path handled %ld events of the self check, want %ld\n", hits,
              ops->self_hits);
      abort();
    }
  }
  if (size < 2) return 0;
  if (data[0] % 2 == 1)
    fd_lines_mode(ops, data + 2, size - 2, data[1] % ops->nkinds);
  else
    fd_sse_mode(ops, (const char *)data + 2, size - 2, data[1] % ops->nkinds);
  return 0;
}

#endif
