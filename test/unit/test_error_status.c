/* test_error_status.c - error types follow the status (SPEC 6, issue 11):
 * an upstream error whose own type has no counterpart in the client's
 * protocol (OpenAI insufficient_quota, a code, an unknown type) reaches the
 * client with the type of its status, in every direction; a mid-stream
 * error event is classified by the same rule. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "proxai/buf.h"
#include "proxai/proto.h"

/* the client-visible type of an upstream error body translated in->out */
static int code; /* the Gemini body's error.code of the last client_type() */

static void client_type(px_proto_t in, px_proto_t out, int status, const char *body,
                        char *type, size_t tn, int *st) {
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = in;
  ctx.out = out;
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  type[0] = 0;
  *st = 0;
  CHECK(px_translate_error(&ctx, status, body, strlen(body), NULL, &b, st) == 0);
  json_t *j = json_loadb(b.data, b.len, 0, NULL);
  json_t *e = json_object_get(j, "error");
  /* Gemini errors carry their kind as a status string */
  const char *t = json_string_value(json_object_get(e, in == PX_PROTO_GEMINI ? "status" : "type"));
  snprintf(type, tn, "%s", t ? t : "");
  code = (int)json_integer_value(json_object_get(e, "code"));
  json_decref(j);
  px_buf_free(&b);
}

static const char *openai_body(const char *type, const char *code) {
  static char buf[512];
  snprintf(buf, sizeof(buf),
           "{\"error\":{\"message\":\"m\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}",
           type, code);
  return buf;
}

static const char *gem_body(int status, const char *st) {
  static char buf[512];
  snprintf(buf, sizeof(buf), "{\"error\":{\"code\":%d,\"message\":\"m\",\"status\":\"%s\"}}",
           status, st);
  return buf;
}

static const char *anth_body(const char *type) {
  static char buf[512];
  snprintf(buf, sizeof(buf),
           "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"m\"}}", type);
  return buf;
}

static void test_follow_status(void) {
  static const struct {
    int status;
    const char *utype; /* upstream's own type (no counterpart) */
    const char *anth;  /* expected for Anthropic clients */
    const char *oai;   /* expected for OpenAI clients */
    const char *gem;   /* expected for Gemini clients (status string) */
  } t[] = {
      {429, "insufficient_quota", "rate_limit_error", "rate_limit_error", "RESOURCE_EXHAUSTED"},
      {429, "tokens", "rate_limit_error", "rate_limit_error", "RESOURCE_EXHAUSTED"},
      {429, "invalid_request_error", "rate_limit_error", "rate_limit_error", "RESOURCE_EXHAUSTED"},
      {529, "something_new", "overloaded_error", "api_error", "UNAVAILABLE"},
      {401, "invalid_request_error", "authentication_error", "authentication_error",
       "UNAUTHENTICATED"},
      {401, "whatever", "authentication_error", "authentication_error", "UNAUTHENTICATED"},
      {403, "unsupported_country_region_territory", "permission_error", "permission_error",
       "PERMISSION_DENIED"},
      {404, "model_not_found", "not_found_error", "not_found_error", "NOT_FOUND"},
      {500, "server_error", "api_error", "api_error", "INTERNAL"},
      {502, "bad_gateway_thing", "api_error", "api_error", "INTERNAL"},
      {400, "invalid_request_error", "invalid_request_error", "invalid_request_error",
       "INVALID_ARGUMENT"},
  };
  char type[128];
  int st;
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    for (int up = 0; up < PX_PROTO_COUNT; up++) {
      const char *body = up == PX_PROTO_ANTHROPIC ? anth_body(t[i].utype)
                         : up == PX_PROTO_GEMINI  ? gem_body(t[i].status, t[i].utype)
                                                  : openai_body(t[i].utype, t[i].utype);
      for (int in = 0; in < PX_PROTO_COUNT; in++) {
        if (in == up) continue;
        client_type((px_proto_t)in, (px_proto_t)up, t[i].status, body, type,
                    sizeof(type), &st);
        const char *want = in == PX_PROTO_ANTHROPIC ? t[i].anth
                           : in == PX_PROTO_GEMINI  ? t[i].gem
                                                    : t[i].oai;
        if (strcmp(type, want) != 0) {
          fprintf(stderr, "status %d type %s upstream %d client %d: got %s want %s\n",
                  t[i].status, t[i].utype, up, in, type, want);
          failures++;
        }
        /* a Gemini error names its status in the body (`code`): a status
         * outside its vocabulary becomes its kind's in both (529
         * overloaded -> 503 UNAVAILABLE, 502 -> 500 INTERNAL) */
        int want_st = t[i].status;
        if (in == PX_PROTO_GEMINI && want_st == 529) want_st = 503;
        if (in == PX_PROTO_GEMINI && want_st == 502) want_st = 500;
        CHECK(st == want_st);
        if (in == PX_PROTO_GEMINI) CHECK(code == st);
      }
    }
  }
}

/* the reported case: a 429 insufficient_quota from a Responses upstream */
static void test_insufficient_quota_to_anthropic(void) {
  const char *body =
      "{\"error\":{\"message\":\"You exceeded your current quota, please check your "
      "plan and billing details.\",\"type\":\"insufficient_quota\",\"param\":null,"
      "\"code\":\"insufficient_quota\"}}";
  char type[128];
  int st;
  client_type(PX_PROTO_ANTHROPIC, PX_PROTO_RESPONSES, 429, body, type, sizeof(type), &st);
  CHECK(strcmp(type, "rate_limit_error") == 0);
  CHECK(st == 429);
}

/* codes inside a 200 stream (no error status) */
static void test_stream_codes(void) {
  CHECK(px_errkind_from_type("insufficient_quota", 0) == PX_ERR_RATE_LIMIT);
  CHECK(px_errkind_from_type("rate_limit_exceeded", 0) == PX_ERR_RATE_LIMIT);
  CHECK(px_errkind_from_type("overloaded_error", 0) == PX_ERR_OVERLOADED);
  CHECK(px_errkind_from_type("permission_error", 403) == PX_ERR_PERMISSION);
  CHECK(px_errkind_from_type("insufficient_quota", 403) == PX_ERR_PERMISSION);
  CHECK(px_errkind_from_type("overloaded_error", 529) == PX_ERR_OVERLOADED);
}

int main(void) {
  test_follow_status();
  test_insufficient_quota_to_anthropic();
  test_stream_codes();
  return check_report("error_status");
}
