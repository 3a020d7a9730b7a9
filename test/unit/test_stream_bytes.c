/* test_stream_bytes.c - the stream codecs' bytes, pinned: upstream streams
 * whose events take the decoders' general path (tool calls, annotations
 * and citations with escaped, repeated and extra members, reals, usage
 * details, thought parts, a Gemini call whose arguments stream) translated
 * to other client protocols, compared byte for byte with
 * test/unit/stream_bytes/<case>.<client>.out, and the upstream decoder's
 * events (every field) with <case>.events (the fixtures compare JSON
 * structurally: these hold what the codecs write, the JSON re-written as
 * json_dumps writes it, exactly). PROXAI_STREAM_BYTES_WRITE=1 writes the
 * .out files instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/proto.h"
#include "proxai/sse.h"

static const char *const names[] = {"chat", "responses", "anthropic", "gemini"};

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  char *p = malloc((size_t)len + 1);
  if (p != NULL && fread(p, 1, (size_t)len, f) != (size_t)len) {
    free(p);
    p = NULL;
  }
  fclose(f);
  if (p != NULL) *n = (size_t)len;
  return p;
}

/* The client bytes of upstream stream body[0..n) from protocol up to client
 * protocol in, fed in one piece then finished. */
static int translate(px_proto_t up, px_proto_t in, const char *body, size_t n,
                     px_buf_t *out) {
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = in;
  ctx.out = up;
  ctx.stream = 1;
  ctx.client_include_usage = 1;
  ctx.client_model = "client-model";
  ctx.upstream_model = "upstream-model";
  ctx.created = 1700000000;
  ctx.max_accum = 1 << 20;
  px_buf_init(out, 8u << 20);
  px_stream_tr_t *t = px_stream_tr_new(&ctx, out);
  if (t == NULL) return -1;
  px_stream_tr_feed(t, body, n);
  int rc = px_stream_tr_finish(t, 1, PX_ERR_TIMEOUT, "timeout");
  px_stream_tr_free(t);
  return rc;
}

/* the decoder's events, one line each, every field */
static int put_str(px_buf_t *b, const char *k, px_str_t s) {
  if (s.ptr == NULL) return 0;
  int rc = px_buf_printf(b, " %s=", k);
  if (rc == 0) rc = px_buf_json_str(b, s.ptr, s.len);
  return rc;
}

static int on_ev(void *arg, const px_ev_t *ev) {
  px_buf_t *b = arg;
  const px_usage_t *u = &ev->usage;
  int rc = px_buf_printf(
      b, "%d i=%d b=%d d=%d stop=%d err=%d custom=%d u=%lld/%lld/%lld/%lld/%lld",
      (int)ev->type, ev->index, (int)ev->block, (int)ev->delta, (int)ev->stop,
      (int)ev->errkind, ev->custom, (long long)u->input_tokens,
      (long long)u->output_tokens, (long long)u->cache_read_tokens,
      (long long)u->cache_creation_tokens, (long long)u->reasoning_tokens);
  if (rc == 0) rc = put_str(b, "text", ev->text);
  if (rc == 0) rc = put_str(b, "id", ev->id);
  if (rc == 0) rc = put_str(b, "name", ev->name);
  if (rc == 0) rc = put_str(b, "model", ev->model);
  if (rc == 0) rc = put_str(b, "finish", ev->finish);
  if (rc == 0) rc = put_str(b, "stop_sequence", ev->stop_sequence);
  if (rc == 0) rc = put_str(b, "expl", ev->refusal_explanation);
  if (rc == 0) rc = px_buf_puts(b, "\n");
  return rc;
}

typedef struct {
  const px_proto_ops_t *ops;
  px_sdec_t *d;
} feed_t;

static int on_sse(void *arg, const px_sse_event_t *ev) {
  feed_t *f = arg;
  f->ops->sdec_feed(f->d, ev);
  return 0;
}

static void decode(px_proto_t up, const char *body, size_t n, px_buf_t *out) {
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = up == PX_PROTO_CHAT ? PX_PROTO_ANTHROPIC : PX_PROTO_CHAT;
  ctx.out = up;
  ctx.stream = 1;
  ctx.max_accum = 1 << 20;
  px_buf_init(out, 8u << 20);
  feed_t f = {px_proto_get(up), NULL};
  f.d = f.ops->sdec_new(&ctx, on_ev, out);
  px_sse_t sse;
  px_sse_init(&sse, 1 << 20, on_sse, &f);
  px_sse_feed(&sse, body, n);
  px_sse_done(&sse);
  f.ops->sdec_finish(f.d);
  f.ops->sdec_free(f.d);
}

/* compare (or write) path with got */
static void same_as(const char *path, const px_buf_t *got, int write, const char *what) {
  size_t en = 0;
  if (write) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(got->data, 1, got->len, f) == got->len);
    if (f) fclose(f);
    return;
  }
  char *want = slurp(path, &en);
  CHECK(want != NULL);
  int same = want != NULL && en == got->len && memcmp(want, got->data, en) == 0;
  if (!same)
    fprintf(stderr, "%s: got\n%.*s\n", what, (int)got->len, got->data ? got->data : "");
  CHECK(same);
  free(want);
}

/* case `name`'s upstream stream from protocol up: its decoder's events
 * (in < 0) or its client bytes for client protocol in, compared with (or
 * written to) <name>.events / <name>.<client>.out */
static void pin(const char *dir, const char *name, px_proto_t up, int in, int write) {
  char path[4096];
  size_t n = 0;
  snprintf(path, sizeof(path), "%s/%s.sse", dir, name);
  char *body = slurp(path, &n);
  CHECK(body != NULL);
  if (body == NULL) return;
  px_buf_t out;
  if (in < 0) {
    decode(up, body, n, &out);
    snprintf(path, sizeof(path), "%s/%s.events", dir, name);
  } else {
    /* a stream cut short or ending in an error does not complete */
    int ends_badly = strstr(name, "_cut") != NULL || strstr(name, "_error") != NULL;
    CHECK((translate(up, (px_proto_t)in, body, n, &out) == 0) == !ends_badly);
    snprintf(path, sizeof(path), "%s/%s.%s.out", dir, name, names[in]);
  }
  same_as(path, &out, write, path);
  px_buf_free(&out);
  free(body);
}

int main(void) {
  const char *src = getenv("PROXAI_TEST_SRCDIR");
  const char *w = getenv("PROXAI_STREAM_BYTES_WRITE");
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/test/unit/stream_bytes", src ? src : ".");
  int write = w != NULL && strcmp(w, "1") == 0;
  pin(dir, "chat_general", PX_PROTO_CHAT, PX_PROTO_ANTHROPIC, write);
  pin(dir, "chat_general", PX_PROTO_CHAT, PX_PROTO_GEMINI, write);
  pin(dir, "anthropic_general", PX_PROTO_ANTHROPIC, PX_PROTO_CHAT, write);
  pin(dir, "anthropic_general", PX_PROTO_ANTHROPIC, PX_PROTO_GEMINI, write);
  pin(dir, "gemini_general", PX_PROTO_GEMINI, PX_PROTO_CHAT, write);
  pin(dir, "gemini_general", PX_PROTO_GEMINI, PX_PROTO_ANTHROPIC, write);
  pin(dir, "chat_general", PX_PROTO_CHAT, -1, write);
  pin(dir, "anthropic_general", PX_PROTO_ANTHROPIC, -1, write);
  pin(dir, "gemini_general", PX_PROTO_GEMINI, -1, write);
  /* the Responses stream codec: its decoder's events off the fast path
   * (lifecycle events with repeated and extra members, reasoning taken from
   * a finished item, annotations, calls whose arguments come with their
   * item, an error event, a failed and an incomplete end), and its encoder's
   * annotations, refusal parts, partial items at a cut and error events */
  static const char *const rcases[] = {"responses_general", "responses_error",
                                       "responses_failed"};
  for (size_t i = 0; i < sizeof(rcases) / sizeof(rcases[0]); i++) {
    pin(dir, rcases[i], PX_PROTO_RESPONSES, -1, write);
    pin(dir, rcases[i], PX_PROTO_RESPONSES, PX_PROTO_CHAT, write);
    pin(dir, rcases[i], PX_PROTO_RESPONSES, PX_PROTO_ANTHROPIC, write);
  }
  pin(dir, "responses_general", PX_PROTO_RESPONSES, PX_PROTO_GEMINI, write);
  static const struct {
    const char *name;
    px_proto_t up;
  } ecases[] = {
      {"chat_general", PX_PROTO_CHAT},       {"anthropic_general", PX_PROTO_ANTHROPIC},
      {"gemini_general", PX_PROTO_GEMINI},   {"anthropic_refusal", PX_PROTO_ANTHROPIC},
      {"anthropic_cut", PX_PROTO_ANTHROPIC}, {"chat_cut", PX_PROTO_CHAT},
      {"chat_cut_tool", PX_PROTO_CHAT},      {"chat_error", PX_PROTO_CHAT},
      {"chat_annotations", PX_PROTO_CHAT},   {"responses_general", PX_PROTO_RESPONSES}};
  for (size_t i = 0; i < sizeof(ecases) / sizeof(ecases[0]); i++)
    pin(dir, ecases[i].name, ecases[i].up, PX_PROTO_RESPONSES, write);
  return check_report("test_stream_bytes");
}
