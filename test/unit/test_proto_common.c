/* test_proto_common.c - the shared protocol pieces (src/proto/common.c):
 * stop-reason mapping (seeds 000/001, SPEC 5), lossy lists, the protocol
 * table and paths, error kinds, JSON escaping of px_buf; plus the hub's
 * protocol-independent behaviour (src/proto/translate.c). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/buf.h"
#include "proxai/proto.h"
#include "proxai/sse.h"
#include "ref.h"

static int streq(const char *a, const char *b) {
  if (a == NULL || b == NULL) return a == b;
  return strcmp(a, b) == 0;
}
#define CHECK_STR(a, b)                                                       \
  do {                                                                        \
    const char *a_ = (a), *b_ = (b);                                          \
    if (!streq(a_, b_)) {                                                     \
      fprintf(stderr, "%s:%d: got '%s', expected '%s'\n", __FILE__, __LINE__, \
              a_ ? a_ : "(null)", b_ ? b_ : "(null)");                        \
      failures++;                                                             \
    }                                                                         \
  } while (0)

/* ---- stop reasons ---- */

static void test_stop_names(void) {
  static const struct {
    px_stop_t s;
    const char *name;
  } t[] = {
      {PX_STOP_END_TURN, "end_turn"},
      {PX_STOP_MAX_TOKENS, "max_tokens"},
      {PX_STOP_STOP_SEQUENCE, "stop_sequence"},
      {PX_STOP_TOOL_USE, "tool_use"},
      {PX_STOP_PAUSE_TURN, "pause_turn"},
      {PX_STOP_REFUSAL, "refusal"},
      {PX_STOP_CONTENT_FILTER, "content_filter"},
  };
  CHECK(px_stop_name(PX_STOP_NONE) == NULL);
  CHECK(px_stop_parse(NULL) == PX_STOP_NONE);
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    CHECK_STR(px_stop_name(t[i].s), t[i].name);
    CHECK(px_stop_parse(t[i].name) == t[i].s);
  }
  CHECK(px_stop_parse("something_new") == PX_STOP_END_TURN);
}

static void test_stop_chat(void) {
  /* seed 001 table, seed 000 (refusal -> finish_reason stop) */
  static const struct {
    px_stop_t s;
    const char *fr;
  } to[] = {
      {PX_STOP_END_TURN, "stop"},
      {PX_STOP_STOP_SEQUENCE, "stop"},
      {PX_STOP_MAX_TOKENS, "length"},
      {PX_STOP_TOOL_USE, "tool_calls"},
      {PX_STOP_PAUSE_TURN, "stop"},
      {PX_STOP_REFUSAL, "stop"},
      {PX_STOP_CONTENT_FILTER, "content_filter"},
  };
  CHECK(px_stop_to_chat(PX_STOP_NONE) == NULL);
  for (size_t i = 0; i < sizeof(to) / sizeof(to[0]); i++)
    CHECK_STR(px_stop_to_chat(to[i].s), to[i].fr);
  CHECK(px_stop_from_chat(NULL) == PX_STOP_NONE);
  CHECK(px_stop_from_chat("stop") == PX_STOP_END_TURN);
  CHECK(px_stop_from_chat("length") == PX_STOP_MAX_TOKENS);
  CHECK(px_stop_from_chat("tool_calls") == PX_STOP_TOOL_USE);
  CHECK(px_stop_from_chat("function_call") == PX_STOP_TOOL_USE);
  CHECK(px_stop_from_chat("content_filter") == PX_STOP_CONTENT_FILTER);
  /* round trips through Chat for what Chat can hold */
  px_stop_t rt[] = {PX_STOP_END_TURN, PX_STOP_MAX_TOKENS, PX_STOP_TOOL_USE,
                    PX_STOP_CONTENT_FILTER};
  for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++)
    CHECK(px_stop_from_chat(px_stop_to_chat(rt[i])) == rt[i]);
}

static void test_stop_anthropic(void) {
  /* SPEC 5: content_filter -> refusal (seeds 000/001, not seed 002's end_turn) */
  CHECK_STR(px_stop_to_anthropic(PX_STOP_CONTENT_FILTER), "refusal");
  CHECK_STR(px_stop_to_anthropic(PX_STOP_REFUSAL), "refusal");
  CHECK_STR(px_stop_to_anthropic(PX_STOP_END_TURN), "end_turn");
  CHECK_STR(px_stop_to_anthropic(PX_STOP_MAX_TOKENS), "max_tokens");
  CHECK_STR(px_stop_to_anthropic(PX_STOP_STOP_SEQUENCE), "stop_sequence");
  CHECK_STR(px_stop_to_anthropic(PX_STOP_TOOL_USE), "tool_use");
  CHECK_STR(px_stop_to_anthropic(PX_STOP_PAUSE_TURN), "pause_turn");
  CHECK(px_stop_to_anthropic(PX_STOP_NONE) == NULL);
  /* Chat content_filter arriving at an Anthropic client */
  CHECK_STR(px_stop_to_anthropic(px_stop_from_chat("content_filter")), "refusal");
}

static void test_stop_responses(void) {
  const char *why = "x";
  /* seed 000 forward table */
  static const struct {
    px_stop_t s;
    const char *status;
    const char *reason;
  } to[] = {
      {PX_STOP_NONE, "in_progress", NULL},
      {PX_STOP_END_TURN, "completed", NULL},
      {PX_STOP_STOP_SEQUENCE, "completed", NULL},
      {PX_STOP_TOOL_USE, "completed", NULL},
      {PX_STOP_PAUSE_TURN, "completed", NULL},
      {PX_STOP_MAX_TOKENS, "incomplete", "max_output_tokens"},
      {PX_STOP_REFUSAL, "failed", NULL},                        /* seed 000, SPEC 5 */
      {PX_STOP_CONTENT_FILTER, "incomplete", "content_filter"}, /* SPEC 5 */
  };
  for (size_t i = 0; i < sizeof(to) / sizeof(to[0]); i++) {
    why = "x";
    CHECK_STR(px_stop_to_responses(to[i].s, 0, &why), to[i].status);
    CHECK_STR(why, to[i].reason);
  }
  /* seed 000 reverse table */
  CHECK(px_stop_from_responses("completed", NULL, 0) == PX_STOP_END_TURN);
  CHECK(px_stop_from_responses("completed", NULL, 1) == PX_STOP_TOOL_USE);
  CHECK(px_stop_from_responses("incomplete", "max_output_tokens", 0) ==
        PX_STOP_MAX_TOKENS);
  CHECK(px_stop_from_responses("incomplete", NULL, 0) == PX_STOP_MAX_TOKENS);
  CHECK(px_stop_from_responses("incomplete", "content_filter", 0) ==
        PX_STOP_CONTENT_FILTER);
  CHECK(px_stop_from_responses("failed", NULL, 0) == PX_STOP_REFUSAL); /* -> refusal */
  CHECK(px_stop_from_responses("cancelled", NULL, 0) == PX_STOP_NONE);
  CHECK(px_stop_from_responses("queued", NULL, 0) == PX_STOP_NONE);
  CHECK(px_stop_from_responses("in_progress", NULL, 0) == PX_STOP_NONE);
  CHECK(px_stop_from_responses(NULL, NULL, 0) == PX_STOP_NONE);
  /* round trips of the three primary terminal states (seed 000) */
  px_stop_t rt[] = {PX_STOP_END_TURN, PX_STOP_MAX_TOKENS, PX_STOP_REFUSAL,
                    PX_STOP_CONTENT_FILTER};
  for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++) {
    const char *st = px_stop_to_responses(rt[i], 0, &why);
    CHECK(px_stop_from_responses(st, why, 0) == rt[i]);
  }
  /* stop_sequence / pause_turn lose granularity: completed -> end_turn */
  const char *st = px_stop_to_responses(PX_STOP_STOP_SEQUENCE, 0, &why);
  CHECK(px_stop_from_responses(st, why, 0) == PX_STOP_END_TURN);
  /* Responses failed at an Anthropic client is a refusal */
  CHECK_STR(px_stop_to_anthropic(px_stop_from_responses("failed", NULL, 0)), "refusal");
}

/* ---- lossy ---- */

static void test_lossy(void) {
  px_lossy_t l;
  px_lossy_init(&l);
  CHECK(l.len == 0 && l.buf[0] == 0);
  px_lossy_add(&l, "top_k");
  px_lossy_add(&l, "messages[1].content[0].is_error");
  px_lossy_add(&l, "top_k");
  px_lossy_add(&l, "top");    /* a prefix of an element is not a duplicate */
  px_lossy_add(&l, "top_k2"); /* nor is an extension */
  CHECK_STR(l.buf, "top_k,messages[1].content[0].is_error,top,top_k2");
  CHECK(l.len == strlen(l.buf));
  px_lossy_add(&l, "messages[1].content[0].is_error");
  CHECK_STR(l.buf, "top_k,messages[1].content[0].is_error,top,top_k2");

  /* overflow: stops cleanly, ends with "...", never past the buffer */
  px_lossy_init(&l);
  char p[64];
  for (int i = 0; i < 500; i++) {
    snprintf(p, sizeof(p), "messages[%d].content[0].cache_control", i);
    px_lossy_add(&l, p);
    CHECK(l.len < sizeof(l.buf));
    CHECK(l.len == strlen(l.buf));
  }
  CHECK(l.len >= 3 && memcmp(l.buf + l.len - 3, "...", 3) == 0);
  CHECK(strstr(l.buf, "...") == l.buf + l.len - 3); /* only once */
  CHECK(strncmp(l.buf, "messages[0].content[0].cache_control,", 37) == 0);
  size_t len = l.len;
  px_lossy_add(&l, "x");
  CHECK(l.len == len);
}

/* ---- protocol table and paths ---- */

static void test_table(void) {
  CHECK(px_proto_by_name("openai_chat_completions") == PX_PROTO_CHAT);
  CHECK(px_proto_by_name("openai_responses") == PX_PROTO_RESPONSES);
  CHECK(px_proto_by_name("anthropic_messages") == PX_PROTO_ANTHROPIC);
  CHECK(px_proto_by_name("anthropic") == -1);
  CHECK(px_proto_by_name("") == -1);
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_proto_ops_t *o = px_proto_get((px_proto_t)p);
    CHECK(o != NULL);
    CHECK(o->id == (px_proto_t)p);
    CHECK(px_proto_by_name(o->name) == p);
  }
  CHECK_STR(px_proto_get(PX_PROTO_ANTHROPIC)->upstream_path, "/v1/messages");
  CHECK_STR(px_proto_get(PX_PROTO_CHAT)->upstream_path, "/chat/completions");
  CHECK_STR(px_proto_get(PX_PROTO_RESPONSES)->upstream_path, "/responses");
}

static int bypath(const char *s) {
  return px_proto_by_path(s, strlen(s));
}

static void test_paths(void) {
  CHECK(bypath("/v1/chat/completions") == PX_PROTO_CHAT);
  CHECK(bypath("/chat/completions") == PX_PROTO_CHAT);
  CHECK(bypath("/v1/responses") == PX_PROTO_RESPONSES);
  CHECK(bypath("/responses") == PX_PROTO_RESPONSES);
  CHECK(bypath("/v1/messages") == PX_PROTO_ANTHROPIC);
  CHECK(bypath("/messages") == PX_PROTO_ANTHROPIC);
  CHECK(bypath("/v1/messages?beta=true") == PX_PROTO_ANTHROPIC); /* Claude Code */
  CHECK(bypath("/messages?") == PX_PROTO_ANTHROPIC);
  CHECK(bypath("/v1/chat/completions?x=1&y=2") == PX_PROTO_CHAT);
  CHECK(bypath("/v1/messages/count_tokens") == -1);
  CHECK(bypath("/v1/messagesx") == -1);
  CHECK(bypath("/v1") == -1);
  CHECK(bypath("/v1x/messages") == -1);
  CHECK(bypath("/v2/messages") == -1);
  CHECK(bypath("/v1/v1/messages") == -1);
  CHECK(bypath("") == -1);
  CHECK(bypath("/") == -1);
  CHECK(bypath("/v1/chat/completions/") == -1);
  /* the length is honoured (no NUL needed) */
  CHECK(px_proto_by_path("/v1/messagesXYZ", 12) == PX_PROTO_ANTHROPIC);
}

/* Gemini's model-in-path: the model (still encoded), the method, the list */
static int gem_path(const char *s, const char *model, int stream, px_endpoint_t ep) {
  px_inbound_t in;
  if (!px_proto_match(s, strlen(s), &in)) return model == NULL;
  return model != NULL && in.proto == PX_PROTO_GEMINI && in.ep == ep &&
         (ep == PX_EP_MODELS || (in.stream == stream && px_str_eq(in.model, model)));
}

static void test_gemini_paths(void) {
  CHECK(gem_path("/v1beta/models/gemini-2.5-flash:generateContent", "gemini-2.5-flash", 0,
                 PX_EP_GENERATE));
  CHECK(gem_path("/v1/models/g%3Ax:streamGenerateContent?alt=sse", "g%3Ax", 1,
                 PX_EP_GENERATE));
  CHECK(gem_path("/v1beta/models/a:b:countTokens", "a:b", 0, PX_EP_COUNT_TOKENS));
  CHECK(gem_path("/v1beta/models", "", 0, PX_EP_MODELS));
  CHECK(gem_path("/v1/models", NULL, 0, PX_EP_GENERATE)); /* every protocol's list */
  CHECK(gem_path("/v1beta/models/:generateContent", NULL, 0, PX_EP_GENERATE));
  CHECK(gem_path("/v1beta/models/x:", NULL, 0, PX_EP_GENERATE));
  CHECK(gem_path("/v1beta/models/x", NULL, 0, PX_EP_GENERATE));
  CHECK(gem_path("/v1beta/models/a/b:generateContent", NULL, 0, PX_EP_GENERATE));
  CHECK(gem_path("/v1beta/models/x:embedContent", NULL, 0, PX_EP_GENERATE));
  CHECK(gem_path("/v1beta/modelsx/y:generateContent", NULL, 0, PX_EP_GENERATE));
  CHECK(gem_path("/v1beta/model", NULL, 0, PX_EP_GENERATE));
}

/* ---- error kinds (SPEC 6 table) ---- */

static void test_errkinds(void) {
  static const struct {
    px_errkind_t k;
    int status;
    const char *oa, *an;
  } t[] = {
      {PX_ERR_INVALID, 400, "invalid_request_error", "invalid_request_error"},
      {PX_ERR_AUTH, 401, "authentication_error", "authentication_error"},
      {PX_ERR_PERMISSION, 403, "permission_error", "permission_error"},
      {PX_ERR_NOT_FOUND, 404, "not_found_error", "not_found_error"},
      {PX_ERR_TOO_LARGE, 413, "invalid_request_error", "request_too_large"},
      {PX_ERR_RATE_LIMIT, 429, "rate_limit_error", "rate_limit_error"},
      {PX_ERR_BAD_GATEWAY, 502, "api_error", "api_error"},
      {PX_ERR_TIMEOUT, 504, "timeout_error", "api_error"},
      {PX_ERR_OVERLOADED, 503, "api_error", "overloaded_error"},
      {PX_ERR_QUOTA, 429, "insufficient_quota", "rate_limit_error"},
  };
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    CHECK(px_errkind_status(t[i].k) == t[i].status);
    CHECK_STR(px_errkind_openai(t[i].k), t[i].oa);
    CHECK_STR(px_errkind_anthropic(t[i].k), t[i].an);
  }
  for (int k = 0; k < PX_ERR_COUNT; k++) {
    CHECK(px_errkind_openai((px_errkind_t)k) != NULL);
    CHECK(px_errkind_anthropic((px_errkind_t)k) != NULL);
    int st = px_errkind_status((px_errkind_t)k);
    CHECK(st >= 400 && st <= 599);
  }
  /* types of both families back to kinds */
  CHECK(px_errkind_from_type("invalid_request_error", 400) == PX_ERR_INVALID);
  CHECK(px_errkind_from_type("authentication_error", 401) == PX_ERR_AUTH);
  CHECK(px_errkind_from_type("permission_error", 403) == PX_ERR_PERMISSION);
  CHECK(px_errkind_from_type("not_found_error", 404) == PX_ERR_NOT_FOUND);
  CHECK(px_errkind_from_type("request_too_large", 413) == PX_ERR_TOO_LARGE);
  CHECK(px_errkind_from_type("rate_limit_error", 429) == PX_ERR_RATE_LIMIT);
  CHECK(px_errkind_from_type("overloaded_error", 529) == PX_ERR_OVERLOADED);
  CHECK(px_errkind_from_type("timeout_error", 504) == PX_ERR_TIMEOUT);
  CHECK(px_errkind_from_type("api_error", 500) == PX_ERR_API);
  CHECK(px_errkind_from_type("server_error", 500) == PX_ERR_API);
  /* the type wins over the status */
  CHECK(px_errkind_from_type("rate_limit_error", 400) == PX_ERR_RATE_LIMIT);
  /* unknown or absent type: guessed from the status */
  CHECK(px_errkind_from_type(NULL, 401) == PX_ERR_AUTH);
  CHECK(px_errkind_from_type("weird", 404) == PX_ERR_NOT_FOUND);
  CHECK(px_errkind_from_type(NULL, 422) == PX_ERR_INVALID);
  CHECK(px_errkind_from_type(NULL, 429) == PX_ERR_RATE_LIMIT);
  CHECK(px_errkind_from_type(NULL, 529) == PX_ERR_OVERLOADED);
  CHECK(px_errkind_from_type(NULL, 503) == PX_ERR_OVERLOADED);
  CHECK(px_errkind_from_type(NULL, 504) == PX_ERR_TIMEOUT);
  CHECK(px_errkind_from_type(NULL, 418) == PX_ERR_INVALID);
  CHECK(px_errkind_from_type(NULL, 500) == PX_ERR_API);

  px_tr_err_t e;
  memset(&e, 0, sizeof(e));
  e.kind = PX_ERR_API;
  CHECK(px_tr_fail(&e, "messages[2].role", "unsupported role '%s'", "function") ==
        PX_EINVAL);
  CHECK(e.kind == PX_ERR_INVALID);
  CHECK_STR(e.param, "messages[2].role");
  CHECK_STR(e.message, "unsupported role 'function'");
  CHECK(px_tr_fail(NULL, "x", "y") == PX_EINVAL);
}

/* ---- px_buf JSON escaping ---- */

static void test_json_escape(void) {
  px_buf_t b;
  px_buf_init(&b, 1 << 16);
  const char in[] = "a\"b\\c\n\r\t\b\f\x01\x1f\x7f/\xc3\xa9";
  CHECK(px_buf_json_str(&b, in, sizeof(in) - 1) == 0);
  const char want[] = "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\x7f/\xc3\xa9\"";
  CHECK(b.len == sizeof(want) - 1 && memcmp(b.data, want, b.len) == 0);
  /* the result parses back to the input (NUL included) */
  px_buf_reset(&b);
  const char nul[] = "x\0y";
  CHECK(px_buf_json_str(&b, nul, 3) == 0);
  json_t *j = json_loadb(b.data, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
  CHECK(j != NULL && json_is_string(j) && json_string_length(j) == 3 &&
        memcmp(json_string_value(j), nul, 3) == 0);
  json_decref(j);
  px_buf_reset(&b);
  for (int c = 0; c < 256; c++) {
    char ch = (char)c;
    px_buf_reset(&b);
    CHECK(px_buf_json_str(&b, &ch, 1) == 0);
    if (c < 0x80) {
      j = json_loadb(b.data, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
      CHECK(j != NULL && json_string_length(j) == 1 && json_string_value(j)[0] == ch);
      json_decref(j);
    }
  }
  /* the cap holds and leaves the buffer unchanged */
  px_buf_t s;
  px_buf_init(&s, 8);
  CHECK(px_buf_json_str(&s, "\n\n\n\n\n", 5) == PX_ETOOBIG);
  CHECK(s.len <= 8);
  px_buf_free(&s);
  px_buf_free(&b);
}

/* ---- hub behaviour that does not depend on a translator's details ---- */

static void test_hub_errors(void) {
  for (int in = 0; in < PX_PROTO_COUNT; in++)
    for (int out = 0; out < PX_PROTO_COUNT; out++) {
      px_tr_ctx_t ctx;
      memset(&ctx, 0, sizeof(ctx));
      ctx.in = (px_proto_t)in;
      ctx.out = (px_proto_t)out;
      ctx.max_accum = 1 << 20;
      /* requests that are not objects are rejected, never crash */
      px_lossy_t lossy;
      px_lossy_init(&lossy);
      px_tr_err_t err;
      memset(&err, 0, sizeof(err));
      json_t *arr = json_array(), *res = NULL;
      CHECK(px_translate_request(&ctx, arr, &res, &lossy, &err) < 0);
      CHECK(res == NULL);
      CHECK(err.message[0] != 0);
      memset(&err, 0, sizeof(err));
      CHECK(px_translate_response(&ctx, arr, &res, &lossy, &err) < 0);
      CHECK(res == NULL);
      CHECK(err.message[0] != 0);
      json_decref(arr);

      /* an HTML error page: a clean error in the client's shape */
      const px_proto_ops_t *ops = px_proto_get(ctx.in);
      px_buf_t b;
      px_buf_init(&b, 1 << 16);
      const char *html = "<html><body>bad gateway</body></html>";
      int st = 0;
      int rc = px_translate_error(&ctx, 503, html, strlen(html), "req_1", &b, &st);
      if (ops->encode_error == NULL) {
        CHECK(rc < 0); /* translator not written yet: an error, not a crash */
      } else {
        CHECK(rc == 0);
        CHECK(st == 502); /* a bad gateway response, whatever its status */
        json_t *j = json_loadb(b.data, b.len, 0, NULL);
        CHECK(json_is_object(j));
        json_t *e = json_object_get(j, "error");
        CHECK(json_is_object(e));
        const char *m = json_string_value(json_object_get(e, "message"));
        CHECK(m != NULL && strstr(m, "503") != NULL);
        if (ctx.in == PX_PROTO_GEMINI) /* Gemini errors carry a status string */
          CHECK_STR(json_string_value(json_object_get(e, "status")), "UNAVAILABLE");
        else
          CHECK_STR(json_string_value(json_object_get(e, "type")), "api_error");
        CHECK(m != NULL && strstr(m, "<html>") == NULL); /* no raw upstream bytes */
        json_decref(j);
        /* a non-error status with garbage becomes 502 */
        px_buf_reset(&b);
        CHECK(px_translate_error(&ctx, 200, "x", 1, NULL, &b, &st) == 0);
        CHECK(st == 502);
      }
      px_buf_free(&b);

      /* a stream over NULL ops is refused up front; over real ops, garbage
       * ends with an error event and a failed finish */
      px_buf_init(&b, 1 << 20);
      px_stream_tr_t *t = px_stream_tr_new(&ctx, &b);
      if (t != NULL) {
        px_stream_tr_feed(t, "data: {not json\n\n", 17);
        CHECK(px_stream_tr_finish(t, 1, PX_ERR_BAD_GATEWAY, NULL) < 0);
        CHECK(px_stream_tr_done(t));
        CHECK(b.len > 0); /* the client's error event */
        size_t len = b.len;
        CHECK(px_stream_tr_feed(t, "data: {}\n\n", 10) < 0);
        CHECK(px_stream_tr_finish(t, 1, PX_ERR_BAD_GATEWAY, NULL) < 0);
        CHECK(b.len == len); /* exactly once */
        px_stream_tr_free(t);
      }
      px_buf_free(&b);
    }
}

/* ---- the stream hub over the real Anthropic decoder ---- */

#define A_START                                                                 \
  "event: message_start\n"                                                      \
  "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":"   \
  "\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],"   \
  "\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10," \
  "\"output_tokens\":1}}}\n\n"
#define A_TEXT                                                             \
  "event: content_block_start\n"                                           \
  "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":" \
  "{\"type\":\"text\",\"text\":\"\"}}\n\n"                                 \
  "event: content_block_delta\n"                                           \
  "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"         \
  "{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"                         \
  "event: content_block_stop\n"                                            \
  "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
#define A_END                                                                  \
  "event: message_delta\n"                                                     \
  "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"," \
  "\"stop_sequence\":null},\"usage\":{\"output_tokens\":5}}\n\n"               \
  "event: message_stop\n"                                                      \
  "data: {\"type\":\"message_stop\"}\n\n"

static size_t count(const px_buf_t *b, const char *needle) {
  size_t n = 0, l = strlen(needle);
  for (size_t i = 0; i + l <= b->len; i++)
    if (memcmp(b->data + i, needle, l) == 0) n++;
  return n;
}

/* run one upstream Anthropic stream toward a client protocol */
static int run_anthropic_stream(px_proto_t in, const char *up, int ok, px_buf_t *out,
                                px_usage_t *usage) {
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = in;
  ctx.out = PX_PROTO_ANTHROPIC;
  ctx.stream = 1;
  ctx.client_model = "m";
  ctx.upstream_model = "claude-x";
  ctx.created = 1700000000;
  ctx.max_accum = 1 << 20;
  px_buf_init(out, 1 << 20);
  px_stream_tr_t *t = px_stream_tr_new(&ctx, out);
  CHECK(t != NULL);
  if (t == NULL) return -1000;
  px_stream_tr_feed(t, up, strlen(up));
  int rc = px_stream_tr_finish(t, ok, PX_ERR_TIMEOUT, "upstream timed out");
  CHECK(px_stream_tr_done(t));
  if (usage) *usage = *px_stream_tr_usage(t);
  px_stream_tr_free(t);
  return rc;
}

static void test_hub_stream(void) {
  static const struct {
    px_proto_t in;
    const char *stop;  /* the normal terminal marker */
    const char *error; /* the error terminal marker */
  } cl[] = {
      {PX_PROTO_CHAT, "data: [DONE]", "data: {\"error\""},
      {PX_PROTO_RESPONSES, "event: response.completed", "event: response.failed"},
  };
  for (size_t i = 0; i < sizeof(cl) / sizeof(cl[0]); i++) {
    px_buf_t b;
    px_usage_t u = {-1, -1, -1, -1, -1};
    /* complete: normal stop, usage kept */
    CHECK(run_anthropic_stream(cl[i].in, A_START A_TEXT A_END, 1, &b, &u) == 0);
    CHECK(count(&b, cl[i].stop) == 1);
    CHECK(count(&b, cl[i].error) == 0);
    CHECK(u.output_tokens == 5);
    CHECK(u.input_tokens == 10);
    px_buf_free(&b);
    /* truncated: one error event, never a normal stop */
    CHECK(run_anthropic_stream(cl[i].in, A_START A_TEXT, 1, &b, NULL) < 0);
    CHECK(count(&b, cl[i].stop) == 0);
    CHECK(count(&b, cl[i].error) == 1);
    px_buf_free(&b);
    /* transfer failed (timeout) after a clean prefix */
    CHECK(run_anthropic_stream(cl[i].in, A_START A_TEXT, 0, &b, NULL) < 0);
    CHECK(count(&b, cl[i].stop) == 0);
    CHECK(count(&b, cl[i].error) == 1);
    CHECK(count(&b, "upstream timed out") == 1);
    px_buf_free(&b);
    /* upstream error event */
    CHECK(run_anthropic_stream(
              cl[i].in,
              A_START "event: error\ndata: {\"type\":\"error\",\"error\":"
                      "{\"type\":\"overloaded_error\",\"message\":\"Busy\"}}\n\n",
              1, &b, NULL) < 0);
    CHECK(count(&b, cl[i].stop) == 0);
    CHECK(count(&b, cl[i].error) == 1);
    CHECK(count(&b, "Busy") >= 1);
    px_buf_free(&b);
    /* illegal order: a delta for a block never started, then a normal end:
     * the error wins and nothing follows it */
    CHECK(run_anthropic_stream(cl[i].in,
                               A_START
                               "event: content_block_delta\ndata: {\"type\":"
                               "\"content_block_delta\",\"index\":3,\"delta\":{\"type\":"
                               "\"text_delta\",\"text\":\"x\"}}\n\n" A_END,
                               1, &b, NULL) < 0);
    CHECK(count(&b, cl[i].stop) == 0);
    CHECK(count(&b, cl[i].error) == 1);
    px_buf_free(&b);
    /* content after the terminal is ignored */
    CHECK(run_anthropic_stream(cl[i].in, A_START A_TEXT A_END A_START A_TEXT, 1, &b,
                               NULL) == 0);
    CHECK(count(&b, cl[i].stop) == 1);
    CHECK(count(&b, cl[i].error) == 0);
    px_buf_free(&b);
    /* an over-long SSE event: error event, not unbounded growth */
    size_t big = PX_MAX_SSE_EVENT + 16;
    char *s = malloc(sizeof(A_START) + 6 + big + 1);
    memcpy(s, A_START, sizeof(A_START) - 1);
    memcpy(s + sizeof(A_START) - 1, "data: ", 6);
    memset(s + sizeof(A_START) - 1 + 6, 'x', big);
    s[sizeof(A_START) - 1 + 6 + big] = 0;
    CHECK(run_anthropic_stream(cl[i].in, s, 1, &b, NULL) < 0);
    CHECK(count(&b, cl[i].error) == 1);
    CHECK(b.len < 1 << 16);
    px_buf_free(&b);
    free(s);
  }
}

int main(void) {
  test_stop_names();
  test_stop_chat();
  test_stop_anthropic();
  test_stop_responses();
  test_lossy();
  test_table();
  test_paths();
  test_gemini_paths();
  test_errkinds();
  test_json_escape();
  test_hub_errors();
  test_hub_stream();
  return check_report("test_proto_common");
}
