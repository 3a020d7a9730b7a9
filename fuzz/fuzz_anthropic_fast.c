/* fuzz_anthropic_fast.c - differential test of the Anthropic stream
 * decoder's fast path (src/proto/anthropic_stream.c) against its jansson
 * path: two decoders, one with the fast path on and one with it off, get
 * the same events; every event must give the same return code and the same
 * emitted events (types, indexes, kinds, text bytes, ids, usage, errors).
 *
 * Input: byte 0 picks the mode.
 *   even: the rest (after byte 1) is an upstream SSE body.
 *   odd:  a valid stream start is fed first (message_start and a block
 *         whose kind is byte 1 % 3: text, thinking, tool_use), then every
 *         line of the rest is fed twice: as the raw JSON string content of
 *         the matching content_block_delta (escapes, UTF-8, surrogates ...)
 *         and as an event's data as is.
 * The first call also checks, on a fixed stream, that the fast path does
 * handle the hot events (a differential test of a path never taken would
 * prove nothing). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/proto.h"
#include "proxai/protoutil.h" /* px_anthropic_sdec_fast */
#include "proxai/sse.h"

static int rec(void *arg, const px_ev_t *ev) {
  px_buf_t *b = arg;
  const px_str_t *s[] = {&ev->text,          &ev->id,
                         &ev->name,          &ev->model,
                         &ev->stop_sequence, &ev->refusal_explanation};
  if (px_buf_printf(b, "T%d I%d B%d D%d S%d E%d U%lld,%lld,%lld,%lld,%lld", (int)ev->type,
                    ev->index, (int)ev->block, (int)ev->delta, (int)ev->stop,
                    (int)ev->errkind, (long long)ev->usage.input_tokens,
                    (long long)ev->usage.output_tokens,
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

typedef struct pair {
  px_tr_ctx_t ctx;
  px_sdec_t *d[2]; /* [0] fast path, [1] jansson only */
  px_buf_t out[2];
  int kind;  /* block kind of start() */
  long hits; /* events the fast path handled, over restarts */
} pair_t;

static void pair_init(pair_t *p) {
  memset(&p->ctx, 0, sizeof(p->ctx));
  /* kind and hits survive a restart */
  p->ctx.in = PX_PROTO_CHAT;
  p->ctx.out = PX_PROTO_ANTHROPIC;
  p->ctx.stream = 1;
  p->ctx.max_accum = 1u << 20;
  for (int k = 0; k < 2; k++) {
    px_buf_init(&p->out[k], 64u << 20);
    p->d[k] = px_proto_anthropic.sdec_new(&p->ctx, rec, &p->out[k]);
    if (p->d[k] == NULL) abort();
    px_anthropic_sdec_fast(p->d[k], k == 0);
  }
}

static void check(pair_t *p, int rc0, int rc1) {
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

static void pair_done(pair_t *p) {
  int rc0 = px_proto_anthropic.sdec_finish(p->d[0]);
  int rc1 = px_proto_anthropic.sdec_finish(p->d[1]);
  check(p, rc0, rc1);
  p->hits += px_anthropic_sdec_fast(p->d[0], -1);
  if (px_anthropic_sdec_fast(p->d[1], -1) != 0) abort();
  for (int k = 0; k < 2; k++) {
    px_proto_anthropic.sdec_free(p->d[k]);
    px_buf_free(&p->out[k]);
  }
}

static void start(pair_t *p, int kind);

/* One event to both decoders. A failed stream (the decoders reject every
 * later event) is restarted with fresh decoders and a block of the same
 * kind open, so that the events after it are compared too. */
static void feed(pair_t *p, const char *data, size_t n) {
  px_sse_event_t ev = {PX_STR_NULL, {data, n}, PX_STR_NULL};
  int rc0 = px_proto_anthropic.sdec_feed(p->d[0], &ev);
  int rc1 = px_proto_anthropic.sdec_feed(p->d[1], &ev);
  check(p, rc0, rc1);
  if (rc0 < 0) {
    pair_done(p);
    pair_init(p);
    start(p, p->kind);
  }
}

static int on_sse(void *arg, const px_sse_event_t *ev) {
  pair_t *p = arg;
  feed(p, ev->data.ptr, ev->data.len);
  return 0;
}

static const char *const starts[3] = {
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\","
    "\"text\":\"\"}}",
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
    "\"thinking\","
    "\"thinking\":\"\",\"signature\":\"\"}}",
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_"
    "use\","
    "\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{}}}",
};
static const char *const heads[3] = {
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
    "\"text\":\"",
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_"
    "delta\","
    "\"thinking\":\"",
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_"
    "delta\","
    "\"partial_json\":\"",
};

static void start(pair_t *p, int kind) {
  p->kind = kind;
  static const char ms[] =
      "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\","
      "\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":"
      "3,"
      "\"output_tokens\":1}}}";
  feed(p, ms, sizeof(ms) - 1);
  feed(p, starts[kind], strlen(starts[kind]));
}

static void lines_mode(const uint8_t *data, size_t size, int kind) {
  pair_t p = {.hits = 0};
  pair_init(&p);
  start(&p, kind);
  px_buf_t ev;
  px_buf_init(&ev, 16u << 20);
  size_t at = 0;
  while (at <= size) {
    const uint8_t *nl = at < size ? memchr(data + at, '\n', size - at) : NULL;
    size_t end = nl ? (size_t)(nl - data) : size;
    ev.len = 0;
    if (px_buf_puts(&ev, heads[kind]) < 0 ||
        px_buf_append(&ev, data + at, end - at) < 0 || px_buf_puts(&ev, "\"}}") < 0)
      abort();
    feed(&p, ev.data, ev.len);
    if (end > at) feed(&p, (const char *)data + at, end - at);
    at = end + 1;
  }
  px_buf_free(&ev);
  pair_done(&p);
}

static void self_check(void) {
  static const char body[] =
      "event: message_start\n"
      "data: "
      "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_"
      "tokens\":3}}}\n\n"
      "data: "
      "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
      "\"thinking\",\"thinking\":\"\"}}\n\n"
      "data: "
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_"
      "delta\",\"thinking\":\"a\\u00e9\\ud83d\\ude00\\n\"}}\n\n"
      "data: "
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_"
      "delta\",\"signature\":\"c2ln\"}}\n\n"
      "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "data: {\"type\": \"ping\"}\n\n"
      "data: "
      "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":"
      "\"text\",\"text\":\"\"}}\n\n"
      "data: "
      "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\","
      "\"text\":\"hi \\\"x\\\"\"}}\n\n"
      "data: "
      "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\","
      "\"text\":\"lone \\ud800\"}}\n\n";
  pair_t p = {.kind = 0};
  pair_init(&p);
  px_sse_t s;
  px_sse_init(&s, PX_MAX_SSE_EVENT, on_sse, &p);
  px_sse_feed(&s, body, sizeof(body) - 1);
  px_sse_done(&s);
  /* the thinking, signature, ping and first text deltas; the lone
   * surrogate goes to jansson, which rejects the event */
  pair_done(&p);
  long hits = p.hits;
  if (hits != 4) {
    fprintf(stderr, "fast path handled %ld events of the self check, want 4\n", hits);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int checked;
  if (!checked) {
    checked = 1;
    self_check();
  }
  if (size < 2) return 0;
  if (data[0] % 2 == 1) {
    lines_mode(data + 2, size - 2, data[1] % 3);
    return 0;
  }
  /* a restart opens a block of the kind byte 1 picks */
  pair_t p = {.kind = data[1] % 3};
  pair_init(&p);
  px_sse_t s;
  px_sse_init(&s, PX_MAX_SSE_EVENT, on_sse, &p);
  px_sse_feed(&s, (const char *)data + 2, size - 2);
  px_sse_done(&s);
  pair_done(&p);
  return 0;
}
