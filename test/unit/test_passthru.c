/* test_passthru.c - the JSON member scanner, model rewrite and the stream
 * watcher of same-protocol pass-through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/passthru.h"
#include "proxai/usage.h"

static const char *const TOP[] = {"model"};
static const char *const MSG[] = {"message", "model"};

static void test_find(void) {
  const char *j =
      " {\"a\": [1, {\"model\": \"x\"}], \"s\": \"q\\\"model\\\":\", \"model\" : "
      "\"gpt-4o\" }";
  size_t s, l;
  CHECK(px_json_find(j, strlen(j), TOP, 1, &s, &l) == PX_JSON_FOUND);
  CHECK(l == 8 && memcmp(j + s, "\"gpt-4o\"", 8) == 0);
  /* nested path */
  const char *m =
      "{\"type\":\"message_start\",\"message\":{\"id\":\"x\",\"model\":\"m1\"}}";
  CHECK(px_json_find(m, strlen(m), MSG, 2, &s, &l) == PX_JSON_FOUND);
  CHECK(l == 4 && memcmp(m + s, "\"m1\"", 4) == 0);
  CHECK(px_json_find(m, strlen(m), TOP, 1, &s, &l) == PX_JSON_ABSENT);
  /* every prefix of a document is "need more" or found, never bad */
  for (size_t i = 0; i < strlen(j); i++) {
    int rc = px_json_find(j, i, TOP, 1, &s, &l);
    CHECK(rc == PX_JSON_MORE || rc == PX_JSON_FOUND);
  }
  CHECK(px_json_find("[1,2]", 5, TOP, 1, &s, &l) == PX_JSON_BAD);
  CHECK(px_json_find("{\"a\" 1}", 7, TOP, 1, &s, &l) == PX_JSON_BAD);
  CHECK(px_json_find("{}", 2, TOP, 1, &s, &l) == PX_JSON_ABSENT);
  CHECK(px_json_find("{\"model\":12}", 12, TOP, 1, &s, &l) == PX_JSON_FOUND && l == 2);
  /* the one reader's names: the last of a repeated one (at every level of
   * the path), compared unescaped; an escape jansson refuses names nothing */
  const char *rep =
      "{\"message\":{\"model\":\"a\"},\"x\":1,\"m\\u0065ssage\":{\"model\":\"b\","
      "\"mod\\u0065l\":\"c\",\"mod\\x65l\":\"d\"}}";
  CHECK(px_json_find(rep, strlen(rep), MSG, 2, &s, &l) == PX_JSON_FOUND);
  CHECK(l == 3 && memcmp(rep + s, "\"c\"", 3) == 0);
  /* cut inside the last one: need more */
  CHECK(px_json_find(rep, strlen(rep) - 4, MSG, 2, &s, &l) == PX_JSON_MORE);
  /* (the name's closing quote after its content) */
  CHECK(px_json_name_is("mod\\u0065l\"", 10, "model", 5) == 1);
  CHECK(px_json_name_is("mod\\u0065\"", 9, "mode", 4) == 1);
  CHECK(px_json_name_is("mod\\u0065\"", 9, "model", 5) == 0);
  CHECK(px_json_name_is("mod\\u00\"", 7, "mod", 3) == 0);
  CHECK(px_json_name_is("\\ud800\"", 6, "x", 1) == 0);
  CHECK(px_json_find("{\"x\":1,}", 8, TOP, 1, &s, &l) == PX_JSON_BAD);
}

static void test_replace(void) {
  px_buf_t b;
  px_buf_init(&b, 4096);
  const char *j = "{\"model\": \"gpt-4o\",\n \"messages\":[{\"content\":\"model\"}]}";
  CHECK(px_json_replace_str(&b, j, strlen(j), TOP, 1, "my\"model") == PX_JSON_FOUND);
  const char *want =
      "{\"model\": \"my\\\"model\",\n \"messages\":[{\"content\":\"model\"}]}";
  CHECK(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
  px_buf_reset(&b);
  /* absent: bytes unchanged */
  const char *k = "{\"x\":1}";
  CHECK(px_json_replace_str(&b, k, strlen(k), TOP, 1, "m") == PX_JSON_ABSENT);
  CHECK(b.len == strlen(k) && memcmp(b.data, k, b.len) == 0);
  px_buf_free(&b);
}

/* Feed a stream split at every byte boundary; output must be identical. */
static void run_stream(px_proto_t p, const char *model, const char *in, const char *want,
                       int want_terminal) {
  size_t n = strlen(in);
  for (size_t cut = 0; cut <= n; cut++) {
    px_passthru_t pt;
    px_buf_t out;
    px_buf_init(&out, 1 << 20);
    px_passthru_init(&pt, p, model);
    CHECK(px_passthru_feed(&pt, in, cut, &out) == 0);
    CHECK(px_passthru_feed(&pt, in + cut, n - cut, &out) == 0);
    int term = px_passthru_finish(&pt);
    CHECK(term == want_terminal);
    if (want == NULL) want = in; /* no rewrite: the complete events as they came */
    if (!(out.len == strlen(want) && memcmp(out.data, want, out.len) == 0)) {
      fprintf(stderr, "cut %zu: got [%.*s]\n", cut, (int)out.len, out.data);
      failures++;
      cut = n; /* one report is enough */
    }
    px_passthru_done(&pt);
    px_buf_free(&out);
  }
}

static void test_streams(void) {
  const char *chat =
      "data: {\"id\":\"1\",\"model\":\"up\",\"choices\":[]}\r\n\r\n"
      ": keep-alive\n\n"
      "data: "
      "{\"id\":\"1\",\"model\":\"up\",\"usage\":{\"prompt_tokens\":3,\"completion_"
      "tokens\":4}}\n\n"
      "data: [DONE]\n\n";
  const char *chat_want =
      "data: {\"id\":\"1\",\"model\":\"cli\",\"choices\":[]}\r\n\r\n"
      ": keep-alive\n\n"
      "data: "
      "{\"id\":\"1\",\"model\":\"cli\",\"usage\":{\"prompt_tokens\":3,\"completion_"
      "tokens\":4}}\n\n"
      "data: [DONE]\n\n";
  run_stream(PX_PROTO_CHAT, "cli", chat, chat_want, 1);
  run_stream(PX_PROTO_CHAT, NULL, chat, NULL, 1);
  /* truncated: no [DONE] */
  run_stream(PX_PROTO_CHAT, NULL, "data: {\"model\":\"up\"}\n\n", NULL, 0);

  const char *an =
      "event: message_start\ndata: "
      "{\"type\":\"message_start\",\"message\":{\"model\":\"up\","
      "\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":2}}}\n\n"
      "event: content_block_delta\ndata: "
      "{\"type\":\"content_block_delta\",\"delta\":{\"text\":\"model\"}}\n\n"
      "event: message_delta\ndata: "
      "{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  px_passthru_t pt;
  px_buf_t out;
  px_buf_init(&out, 1 << 20);
  px_passthru_init(&pt, PX_PROTO_ANTHROPIC, "cli");
  CHECK(px_passthru_feed(&pt, an, strlen(an), &out) == 0);
  CHECK(px_passthru_finish(&pt) == 1);
  CHECK(memmem(out.data, out.len, "\"model\":\"cli\"", 13) != NULL);
  CHECK(memmem(out.data, out.len, "\"up\"", 4) == NULL);
  CHECK(pt.usage.input_tokens == 7 && pt.usage.output_tokens == 9);
  px_passthru_done(&pt);
  px_buf_free(&out);

  /* an upstream error event ends the stream properly (no extra error) */
  px_buf_init(&out, 1 << 20);
  px_passthru_init(&pt, PX_PROTO_ANTHROPIC, NULL);
  const char *err =
      "event: error\ndata: "
      "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n";
  CHECK(px_passthru_feed(&pt, err, strlen(err), &out) == 0);
  CHECK(px_passthru_finish(&pt) == 1 && pt.upstream_error == 1 && pt.terminal == 0);
  px_passthru_done(&pt);
  px_buf_free(&out);

  run_stream(PX_PROTO_RESPONSES, "cli",
             "event: response.created\ndata: "
             "{\"type\":\"response.created\",\"response\":{\"model\":\"up\"}}\n\n"
             "event: response.completed\ndata: "
             "{\"type\":\"response.completed\",\"response\":{\"model\":\"up\"}}\n\n",
             "event: response.created\ndata: "
             "{\"type\":\"response.created\",\"response\":{\"model\":\"cli\"}}\n\n"
             "event: response.completed\ndata: "
             "{\"type\":\"response.completed\",\"response\":{\"model\":\"cli\"}}\n\n",
             1);
}

/* An event over the SSE cap breaks the stream in both modes (SPEC 5: it
 * ends with the client's error event): the complete events before it are
 * passed on, none of its bytes, and the stream is no longer complete. */
static void test_oversize(void) {
  size_t big = PX_MAX_SSE_EVENT + 1024;
  char *ev = malloc(big + 64);
  memcpy(ev, "data: {\"x\":\"", 13);
  memset(ev + 13, 'a', big);
  memcpy(ev + 13 + big, "\"}\n\n", 5);
  size_t n = 13 + big + 5;
  static const char first[] = "data: {\"id\":\"1\",\"choices\":[]}\n\n";
  for (int rw = 0; rw < 2; rw++) {
    px_passthru_t pt;
    px_buf_t out;
    px_buf_init(&out, 64u << 20);
    px_passthru_init(&pt, PX_PROTO_CHAT, rw ? "cli" : NULL);
    CHECK(px_passthru_feed(&pt, first, strlen(first), &out) == 0);
    CHECK(px_passthru_feed(&pt, ev, n, &out) == PX_ETOOBIG);
    CHECK(out.len == strlen(first) && memcmp(out.data, first, out.len) == 0);
    CHECK(px_passthru_feed(&pt, "data: [DONE]\n\n", 14, &out) < 0);
    CHECK(px_passthru_finish(&pt) == 0);
    px_passthru_done(&pt);
    px_buf_free(&out);
  }
  free(ev);
}

/* The usage-only chunk the gateway asked for is dropped for a client that
 * did not ask; its usage is still read; other chunks pass untouched. */
static void test_strip_usage(void) {
  const char *in =
      "data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n"
      "data: {\"id\":\"1\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],"
      "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"
      "data: {\"id\":\"1\",\"choices\":[ ],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":8}}\r\n\r\n"
      "data: [DONE]\n\n";
  const char *want =
      "data: {\"id\":\"1\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n"
      "data: {\"id\":\"1\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],"
      "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n"
      "data: [DONE]\n\n";
  size_t n = strlen(in);
  for (size_t cut = 0; cut <= n; cut++) {
    px_passthru_t pt;
    px_buf_t out;
    px_buf_init(&out, 1 << 20);
    px_passthru_init(&pt, PX_PROTO_CHAT, NULL);
    pt.strip_usage = 1;
    CHECK(px_passthru_feed(&pt, in, cut, &out) == 0);
    CHECK(px_passthru_feed(&pt, in + cut, n - cut, &out) == 0);
    CHECK(px_passthru_finish(&pt) == 1);
    CHECK(pt.usage.input_tokens == 7 && pt.usage.output_tokens == 8);
    if (!(out.len == strlen(want) && memcmp(out.data, want, out.len) == 0)) {
      fprintf(stderr, "strip cut %zu: got [%.*s]\n", cut, (int)out.len, out.data);
      failures++;
      cut = n;
    }
    px_passthru_done(&pt);
    px_buf_free(&out);
  }
}

static void test_usage(void) {
  px_usage_t u = {-1, -1, -1, -1, -1};
  const char *b =
      "{\"id\":\"x\",\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":22}}";
  px_usage_scan(PX_PROTO_CHAT, b, strlen(b), &u);
  CHECK(u.input_tokens == 11 && u.output_tokens == 22);
}

/* Gemini repeats its usage on every chunk: a chunk ending as the last one
 * read is not read again, and what is read is what reading every chunk
 * gives (a changed count, a count only an earlier chunk had, a repeated
 * ending after a different start), at every split. */
static void test_repeated_usage(void) {
#define GEM(text, usage)                                              \
  "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"" text \
  "\"}]}}],"                                                          \
  "\"usageMetadata\":" usage ",\"modelVersion\":\"m\"}\r\n\r\n"
  const char *in = GEM("a", "{\"promptTokenCount\":4,\"candidatesTokenCount\":1}")
      GEM("bb", "{\"promptTokenCount\":4,\"candidatesTokenCount\":1}")
      GEM("\\\"usageMetadata\\\"", "{\"promptTokenCount\":4,\"candidatesTokenCount\":1}")
      GEM("c", "{\"promptTokenCount\":5}")
      GEM("d", "{\"promptTokenCount\":5}")
      "data: {\"candidates\":[{\"finishReason\":\"STOP\"}],\"usageMetadata\":"
      "{\"promptTokenCount\":6},\"modelVersion\":\"m\"}\n\n";
#undef GEM
  size_t n = strlen(in);
  for (size_t cut = 0; cut <= n; cut++) {
    px_passthru_t pt;
    px_buf_t out;
    px_buf_init(&out, 1 << 20);
    px_passthru_init(&pt, PX_PROTO_GEMINI, NULL);
    CHECK(px_passthru_feed(&pt, in, cut, &out) == 0);
    if (cut == 40) /* before the first chunk's end: nothing read yet */
      CHECK(pt.usage.input_tokens == -1);
    CHECK(px_passthru_feed(&pt, in + cut, n - cut, &out) == 0);
    CHECK(px_passthru_finish(&pt) == 1);
    CHECK(out.len == n && memcmp(out.data, in, n) == 0);
    /* the last prompt count; the output count of the chunks that had one */
    CHECK(pt.usage.input_tokens == 6 && pt.usage.output_tokens == 1);
    px_passthru_done(&pt);
    px_buf_free(&out);
  }
}

/* A traced Chat stream: the finish reason of the chunk that has it (null
 * ones and the usage-only one say none), with usage on the same chunk,
 * whatever the split; a finish reason never makes a stream look complete
 * without [DONE]. */
static void test_traced_finish(void) {
#define CHUNK(rest) "data: {\"id\":\"c1\",\"model\":\"up\",\"choices\":" rest "}\n\n"
#define DONE "data: [DONE]\n\n"
#define NULL_FIN "[{\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]"
#define FIN(f) "[{\"delta\":{},\"finish_reason\":\"" f "\"}]"
#define USAGE "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}"
  static const struct {
    const char *in, *finish;
    int terminal;
  } cases[] = {
      {CHUNK(NULL_FIN) CHUNK(FIN("stop")) CHUNK("[]," USAGE) DONE, "stop", 1},
      {CHUNK(FIN("length") "," USAGE) DONE, "length", 1}, /* with usage */
      {CHUNK(FIN("stop")), "stop", 0},                    /* no [DONE]: not complete */
      {CHUNK("[{\"delta\":{\"content\":\"a\"}}]") DONE, "", 1}, /* without the name */
      /* a chunk with usage: the name in its usage object (or after it) is
       * read, and the list's name there ends the walk, as the reference
       * reading from the end reads them */
      {CHUNK(FIN("stop")) CHUNK(FIN("length") "," USAGE) DONE, "length", 1},
      {CHUNK(FIN("stop")) CHUNK(FIN("q") ",\"usage\":{\"choices\":1,\"prompt_tokens\":3}")
           DONE,
       "stop", 1},
      {CHUNK(FIN("stop"))
           CHUNK("[],\"usage\":{\"finish_reason\":\"x\",\"prompt_tokens\":3}") DONE,
       "x", 1},
      {CHUNK(FIN("stop")) CHUNK("[]," USAGE ",\"finish_reason\":\"y\"") DONE, "y", 1},
      /* the name inside a string only: not a member, none read */
      {CHUNK(FIN("stop")) CHUNK("[]," USAGE ",\"note\":\"\\\"finish_reason\\\"\"") DONE,
       "stop", 1},
      /* a choice's end and longer ones: the finish reason after null ones */
      {CHUNK("[{\"delta\":{},\"finish_reason\":null}],\"x\":[{}]") CHUNK(FIN("length"))
           DONE,
       "length", 1},
      {CHUNK("[{\"delta\":{},\"finish_reason\":\"stop\",\"z\":{\"finish_reason\":null}}]")
           DONE,
       "", 1},
  };
#undef CHUNK
#undef DONE
#undef NULL_FIN
#undef FIN
#undef USAGE
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t n = strlen(cases[i].in);
    for (size_t cut = 0; cut <= n; cut += 7) {
      px_passthru_t pt;
      px_answer_t a;
      px_buf_t out;
      memset(&a, 0, sizeof(a));
      px_buf_init(&out, 1 << 20);
      px_passthru_init(&pt, PX_PROTO_CHAT, NULL);
      px_passthru_answer(&pt, &a);
      CHECK(px_passthru_feed(&pt, cases[i].in, cut, &out) == 0);
      CHECK(px_passthru_feed(&pt, cases[i].in + cut, n - cut, &out) == 0);
      CHECK(px_passthru_finish(&pt) == cases[i].terminal);
      CHECK(strcmp(a.finish, cases[i].finish) == 0);
      CHECK(strcmp(a.id, "c1") == 0 && strcmp(a.model, "up") == 0);
      px_passthru_done(&pt);
      px_buf_free(&out);
    }
  }
}

/* Member names an upstream spells with escapes are the names they decode
 * to, as for the client's JSON parser: a Chat stream's usage chunk, its
 * error frame and its finish reason; Anthropic's usage events. Whatever
 * the split. */
static void test_escaped_names(void) {
  static const struct {
    px_proto_t p;
    const char *in;
    int64_t in_tok, out_tok;
    int fin;
  } cases[] = {
      {PX_PROTO_CHAT,
       "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"\\nx\"},"
       "\"finish_reason\":\"stop\"}]}\n\n"
       "data: {\"id\":\"c\",\"choices\":[],\"\\u0075sage\":{\"prompt_t\\u006fkens\":7,"
       "\"completion_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n",
       7, 4, 1},
      {PX_PROTO_GEMINI,
       "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\\\"a\"}]}}],"
       "\"us\\u0061geMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":1}}\n\n"
       "data: {\"candidates\":[{\"\\u0066inishReason\":\"STOP\"}],\"usageMetadata\":"
       "{\"promptTokenCount\":5,\"candidatesTokenCount\":2}}\n\n",
       5, 2, 1},
      {PX_PROTO_CHAT, "data: {\"\\u0065rror\":{\"message\":\"overloaded\"}}\n\n", -1, -1,
       1},
      {PX_PROTO_ANTHROPIC,
       "event: message_start\ndata: "
       "{\"type\":\"message_start\",\"m\\u0065ssage\":{\"id\":"
       "\"m\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"
       "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{"
       "\"output_tok\\u0065ns\":12}}\n\n"
       "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
       9, 12, 1},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t n = strlen(cases[i].in);
    for (size_t cut = 0; cut <= n; cut++) {
      px_passthru_t pt;
      px_buf_t out;
      px_buf_init(&out, 1 << 20);
      px_passthru_init(&pt, cases[i].p, NULL);
      CHECK(px_passthru_feed(&pt, cases[i].in, cut, &out) == 0);
      CHECK(px_passthru_feed(&pt, cases[i].in + cut, n - cut, &out) == 0);
      CHECK(px_passthru_finish(&pt) == cases[i].fin);
      CHECK(pt.usage.input_tokens == cases[i].in_tok);
      CHECK(pt.usage.output_tokens == cases[i].out_tok);
      px_passthru_done(&pt);
      px_buf_free(&out);
    }
  }
}

int main(void) {
  test_find();
  test_escaped_names();
  test_replace();
  test_streams();
  test_usage();
  test_oversize();
  test_strip_usage();
  test_repeated_usage();
  test_traced_finish();
  return check_report("test_passthru");
}
