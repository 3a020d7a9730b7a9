/* test_sse.c - the incremental SSE parser and writer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/sse.h"

#define CHECK_STR(a, b)                                                                  \
  do {                                                                                   \
    const char *a_ = (a), *b_ = (b);                                                     \
    if (strcmp(a_, b_) != 0) {                                                           \
      fprintf(stderr, "%s:%d: got\n[%s]\nexpected\n[%s]\n", __FILE__, __LINE__, a_, b_); \
      failures++;                                                                        \
    }                                                                                    \
  } while (0)

/* Events rendered as "event|data|id\n" lines (data's \n shown as '~'). */
typedef struct {
  char s[65536];
  size_t n;
  int count;
  int stop_after; /* return stop_rc (default 7) after this many (0 = never) */
  int stop_rc;
} sink_t;

static int on_ev(void *arg, const px_sse_event_t *ev) {
  sink_t *k = arg;
  char tmp[8192];
  size_t t = 0;
  for (size_t i = 0; i < ev->event.len && t < 4000; i++) tmp[t++] = ev->event.ptr[i];
  tmp[t++] = '|';
  for (size_t i = 0; i < ev->data.len && t < 8000; i++)
    tmp[t++] = ev->data.ptr[i] == '\n' ? '~' : ev->data.ptr[i];
  tmp[t++] = '|';
  for (size_t i = 0; i < ev->id.len && t < 8100; i++) tmp[t++] = ev->id.ptr[i];
  tmp[t++] = '\n';
  if (k->n + t < sizeof(k->s)) {
    memcpy(k->s + k->n, tmp, t);
    k->n += t;
    k->s[k->n] = 0;
  }
  k->count++;
  if (k->stop_after && k->count >= k->stop_after) return k->stop_rc ? k->stop_rc : 7;
  return 0;
}

/* Parse `in` fed as chunks ending at cuts[] (sorted, each in (0,len)). */
static int parse_cuts(const char *in, size_t len, const size_t *cuts, size_t nc,
                      size_t cap, sink_t *k) {
  px_sse_t p;
  memset(k, 0, sizeof(*k));
  px_sse_init(&p, cap, on_ev, k);
  size_t at = 0;
  int rc = 0;
  for (size_t i = 0; i <= nc && rc == 0; i++) {
    size_t end = i < nc ? cuts[i] : len;
    /* copy each chunk so views into it cannot outlive it unnoticed */
    char *chunk = malloc(end - at + 1);
    memcpy(chunk, in + at, end - at);
    rc = px_sse_feed(&p, chunk, end - at);
    memset(chunk, 'Z', end - at);
    free(chunk);
    at = end;
  }
  px_sse_done(&p);
  return rc;
}

static int parse_all(const char *in, sink_t *k) {
  return parse_cuts(in, strlen(in), NULL, 0, 1 << 20, k);
}

/* Every 1-cut and 2-cut split and byte-at-a-time must give `expect`. */
static void check_all_splits(const char *in, const char *expect) {
  size_t len = strlen(in);
  sink_t k;
  CHECK(parse_all(in, &k) == 0);
  CHECK_STR(k.s, expect);
  for (size_t i = 1; i < len; i++) {
    CHECK(parse_cuts(in, len, &i, 1, 1 << 20, &k) == 0);
    if (strcmp(k.s, expect) != 0) {
      fprintf(stderr, "split at %zu differs:\n%s\n", i, k.s);
      failures++;
      return;
    }
  }
  for (size_t i = 1; i < len; i++)
    for (size_t j = i + 1; j < len; j++) {
      size_t c[2] = {i, j};
      CHECK(parse_cuts(in, len, c, 2, 1 << 20, &k) == 0);
      if (strcmp(k.s, expect) != 0) {
        fprintf(stderr, "split at %zu,%zu differs:\n%s\n", i, j, k.s);
        failures++;
        return;
      }
    }
  size_t *cuts = malloc(len * sizeof(size_t));
  for (size_t i = 1; i < len; i++) cuts[i - 1] = i;
  CHECK(parse_cuts(in, len, cuts, len ? len - 1 : 0, 1 << 20, &k) == 0);
  CHECK_STR(k.s, expect);
  free(cuts);
}

static void test_basic(void) {
  const char *in =
      "event: message_start\n"
      "data: {\"a\":1}\n"
      "\n"
      ": keep-alive comment\n"
      "data: [DONE]\n"
      "\n";
  check_all_splits(in, "message_start|{\"a\":1}|\n|[DONE]|\n");
}

static void test_line_ends(void) {
  /* CRLF, CR only, and mixed: identical events, whatever the split */
  const char *expect = "e1|x|\n|y~z|7\n";
  check_all_splits("event: e1\r\ndata: x\r\n\r\ndata: y\r\ndata: z\r\nid: 7\r\n\r\n",
                   expect);
  check_all_splits("event: e1\rdata: x\r\rdata: y\rdata: z\rid: 7\r\r", expect);
  check_all_splits("event: e1\r\ndata: x\n\rdata: y\rdata: z\r\nid: 7\n\n", expect);
  /* CR at the end of one chunk, LF at the start of the next: one line end,
   * not an extra blank line (which would dispatch early) */
  sink_t k;
  const char *in = "data: a\r\ndata: b\r\n\r\n";
  size_t cut = 8; /* after the first CR */
  CHECK(in[cut - 1] == '\r');
  CHECK(parse_cuts(in, strlen(in), &cut, 1, 1 << 20, &k) == 0);
  CHECK_STR(k.s, "|a~b|\n");
}

static void test_fields(void) {
  /* one optional space only; no colon = empty value; data without space */
  check_all_splits("data:x\n\ndata:  two\n\ndata\ndata\n\n", "|x|\n| two|\n|~|\n");
  /* empty data line dispatches an event with empty data */
  check_all_splits("data:\n\n", "||\n");
  /* event-only block: no data, no dispatch; the type does not leak */
  check_all_splits("event: ping\n\ndata: d\n\n", "|d|\n");
  /* unknown fields and retry ignored; last event field wins */
  check_all_splits("retry: 100\nfoo: bar\nevent: a\nevent: b\ndata: 1\n\n", "b|1|\n");
  /* id belongs to its event */
  check_all_splits("id: 1\ndata: a\n\ndata: b\n\n", "|a|1\n|b|\n");
  /* a field name must match exactly */
  check_all_splits("data : no\ndatax: no\nData: no\ndata: yes\n\n", "|yes|\n");
  /* multi-line data joined with \n; colons inside the value kept */
  check_all_splits("data: {\"k\":\ndata: \"v: w\"}\n\n", "|{\"k\":~\"v: w\"}|\n");
  /* comments never dispatch, even ":" alone */
  check_all_splits(":\n: x\n\n:data: y\n\n", "");
  /* incomplete last event is not dispatched without its blank line */
  sink_t k;
  CHECK(parse_all("data: a\n\ndata: b\n", &k) == 0);
  CHECK_STR(k.s, "|a|\n");
}

static size_t big_len;
static int big_ok;
static int on_big(void *arg, const px_sse_event_t *ev) {
  (void)arg;
  big_len = ev->data.len;
  big_ok = 1;
  for (size_t i = 0; i < ev->data.len; i++)
    if (ev->data.ptr[i] != (char)('a' + i % 26)) big_ok = 0;
  return 0;
}

static void test_big_event_zero_copy_and_copy(void) {
  /* an event whose data spans many chunks is reassembled exactly */
  size_t n = 100000;
  char *in = malloc(n + 32);
  size_t len = 0;
  len += (size_t)sprintf(in, "data: ");
  for (size_t i = 0; i < n; i++) in[len++] = (char)('a' + i % 26);
  memcpy(in + len, "\n\n", 2);
  len += 2;
  size_t cuts[] = {3, 7, 5000, 5001, 99999, len - 1};
  for (size_t nc = 0; nc <= 6; nc++) {
    px_sse_t p;
    px_sse_init(&p, 1 << 20, on_big, NULL);
    big_len = 0;
    big_ok = 0;
    size_t at = 0;
    for (size_t i = 0; i <= nc; i++) {
      size_t end = i < nc ? cuts[i] : len;
      CHECK(px_sse_feed(&p, in + at, end - at) == 0);
      at = end;
    }
    CHECK(big_len == n);
    CHECK(big_ok);
    px_sse_done(&p);
  }
  free(in);
}

static void test_cap(void) {
  sink_t k;
  /* data over the cap -> PX_ETOOBIG, and the parser stays broken */
  const char *big = "data: 0123456789012345678901234567890123456789\n\n";
  px_sse_t p;
  memset(&k, 0, sizeof(k));
  px_sse_init(&p, 32, on_ev, &k);
  CHECK(px_sse_feed(&p, big, strlen(big)) == PX_ETOOBIG);
  CHECK(px_sse_feed(&p, "data: ok\n\n", 10) == PX_ETOOBIG);
  CHECK(k.count == 0);
  px_sse_done(&p);
  /* many small data lines summing over the cap */
  memset(&k, 0, sizeof(k));
  px_sse_init(&p, 32, on_ev, &k);
  int rc = 0;
  for (int i = 0; i < 20 && rc == 0; i++) rc = px_sse_feed(&p, "data: abcd\n", 11);
  CHECK(rc == PX_ETOOBIG);
  CHECK(k.count == 0);
  px_sse_done(&p);
  /* a partial line growing past the cap across feeds, never a newline */
  memset(&k, 0, sizeof(k));
  px_sse_init(&p, 32, on_ev, &k);
  rc = 0;
  for (int i = 0; i < 20 && rc == 0; i++) rc = px_sse_feed(&p, "xxxxxxxx", 8);
  CHECK(rc == PX_ETOOBIG);
  px_sse_done(&p);
  /* just under the cap is fine, split or not */
  const char *ok = "data: 0123456789012345678901234\n\n";
  size_t cut = 10;
  CHECK(parse_cuts(ok, strlen(ok), &cut, 1, 32, &k) == 0);
  CHECK(k.count == 1);
  CHECK(parse_cuts(ok, strlen(ok), NULL, 0, 32, &k) == 0);
  CHECK(k.count == 1);
}

static void test_callback_stop(void) {
  sink_t k;
  memset(&k, 0, sizeof(k));
  k.stop_after = 1;
  px_sse_t p;
  px_sse_init(&p, 1 << 20, on_ev, &k);
  CHECK(px_sse_feed(&p, "data: a\n\ndata: b\n\n", 18) == 7);
  CHECK(k.count == 1);
  CHECK_STR(k.s, "|a|\n");
  /* the parser is still usable after a stop */
  k.stop_after = 0;
  CHECK(px_sse_feed(&p, "data: c\n\n", 9) == 0);
  CHECK_STR(k.s, "|a|\n|c|\n");
  px_sse_done(&p);
  /* a callback's own negative code (even PX_ETOOBIG) is returned and does
   * not break the parser */
  memset(&k, 0, sizeof(k));
  k.stop_after = 1;
  k.stop_rc = PX_ETOOBIG;
  px_sse_init(&p, 1 << 20, on_ev, &k);
  CHECK(px_sse_feed(&p, "data: a\n\n", 9) == PX_ETOOBIG);
  k.stop_after = 0;
  CHECK(px_sse_feed(&p, "data: b\n\n", 9) == 0);
  CHECK(k.count == 2);
  px_sse_done(&p);
}

static void test_write(void) {
  px_buf_t b;
  px_buf_init(&b, 1 << 16);
  CHECK(px_sse_write(&b, "message_start", "{\"a\":1}", 7) == 0);
  CHECK(px_sse_write(&b, NULL, "[DONE]", 6) == 0);
  CHECK(b.len == strlen("event: message_start\ndata: {\"a\":1}\n\ndata: [DONE]\n\n"));
  CHECK(memcmp(b.data, "event: message_start\ndata: {\"a\":1}\n\ndata: [DONE]\n\n",
               b.len) == 0);
  /* round trip through the parser */
  sink_t k;
  char *s = strndup(b.data, b.len);
  CHECK(parse_all(s, &k) == 0);
  CHECK_STR(k.s, "message_start|{\"a\":1}|\n|[DONE]|\n");
  free(s);
  /* the cap of the out buffer is honoured and the buffer left unchanged */
  px_buf_t small;
  px_buf_init(&small, 10);
  CHECK(px_sse_write(&small, NULL, "0123456789", 10) == PX_ETOOBIG);
  CHECK(small.len == 0);
  px_buf_free(&small);
  px_buf_free(&b);
}

/* The blank line hook: every event's end (comments-only ones too), as the
 * offset past its line end in the piece fed, after the event was
 * dispatched; a CR ending a piece is its end there. */
typedef struct {
  char log[256];
  size_t len, base;
} ends_t;
static int on_end_ev(void *arg, const px_sse_event_t *ev) {
  ends_t *e = arg;
  e->len += (size_t)snprintf(e->log + e->len, sizeof(e->log) - e->len, "ev(%.*s) ",
                             (int)ev->data.len, ev->data.ptr);
  return 0;
}
static int on_end(void *arg, size_t end) {
  ends_t *e = arg;
  e->len += (size_t)snprintf(e->log + e->len, sizeof(e->log) - e->len, "end@%zu ",
                             e->base + end);
  return 0;
}
static void test_end_hook(void) {
  const char *in = "data: a\n\n: ping\r\n\r\nevent: x\ndata: b\r\rdata: c\n\n";
  size_t n = strlen(in);
  const char *want = "ev(a) end@9 end@19 ev(b) end@37 ev(c) end@46 ";
  for (size_t cut = 0; cut <= n; cut++) {
    ends_t e = {{0}, 0, 0};
    px_sse_t p;
    px_sse_init(&p, 1 << 20, on_end_ev, &e);
    p.on_end = on_end;
    CHECK(px_sse_feed(&p, in, cut) == 0);
    e.base = cut;
    CHECK(px_sse_feed(&p, in + cut, n - cut) == 0);
    px_sse_done(&p);
    /* a CRLF cut between its CR and LF ends the event at the CR */
    char w[256];
    snprintf(w, sizeof(w), "%s", want);
    if (cut == 18)
      snprintf(w, sizeof(w), "ev(a) end@9 end@18 ev(b) end@37 ev(c) end@46 ");
    if (strcmp(e.log, w) != 0) {
      fprintf(stderr, "cut %zu: %s\n", cut, e.log);
      failures++;
      break;
    }
  }
}

int main(void) {
  test_basic();
  test_line_ends();
  test_fields();
  test_big_event_zero_copy_and_copy();
  test_cap();
  test_callback_stop();
  test_write();
  test_end_hook();
  return check_report("test_sse");
}
