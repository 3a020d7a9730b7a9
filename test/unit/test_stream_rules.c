/* test_stream_rules.c - stream translation rules found by fuzzing (issue 9,
 * stream translation; issue 11):
 *  - clients get tool-call ids that are non-empty and unique in the message
 *    (minted call_proxai_<n> when the upstream's are empty or repeat), in
 *    streams and bodies, for Chat and Anthropic clients;
 *  - a Responses client never gets an event for an item after its
 *    response.output_item.done, even when the upstream interleaves blocks. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/buf.h"
#include "proxai/proto.h"
#include "ref.h"

static void translate(px_proto_t in, px_proto_t out, const char *sse, px_buf_t *o) {
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = in;
  ctx.out = out;
  ctx.stream = 1;
  ctx.created = 1700000000;
  ctx.client_model = "m";
  px_buf_init(o, 1 << 22);
  px_stream_tr_t *t = px_stream_tr_new(&ctx, o);
  CHECK(t != NULL);
  if (t == NULL) return;
  px_stream_tr_feed(t, sse, strlen(sse));
  CHECK(px_stream_tr_finish(t, 1, PX_ERR_BAD_GATEWAY, NULL) == 0);
  px_stream_tr_free(t);
  /* NUL-terminated for the string searches below */
  if (px_buf_append(o, "", 1) == 0) o->len--;
}

/* Responses upstream: two function calls with the same call_id, one empty */
static const char *dup_calls =
    "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"x\",\"output\":[]}}\n\n"
    "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"get\",\"arguments\":\"\"}}\n\n"
    "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"get\",\"arguments\":\"{}\"}}\n\n"
    "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"id\":\"fc_2\",\"call_id\":\"call_1\",\"name\":\"get\",\"arguments\":\"\"}}\n\n"
    "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"id\":\"fc_2\",\"call_id\":\"call_1\",\"name\":\"get\",\"arguments\":\"{}\"}}\n\n"
    "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":2,\"item\":{\"type\":\"function_call\",\"id\":\"fc_3\",\"call_id\":\"\",\"name\":\"get\",\"arguments\":\"\"}}\n\n"
    "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":2,\"item\":{\"type\":\"function_call\",\"id\":\"fc_3\",\"call_id\":\"\",\"name\":\"get\",\"arguments\":\"{}\"}}\n\n"
    "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n";

/* ids found after "\"id\":" in tool call / tool_use starts */
static int collect_ids(const char *s, const char *marker, char ids[][64], int max) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, marker)) != NULL && n < max; p++) {
    const char *q = p + strlen(marker);
    const char *e = strchr(q, '"');
    if (e == NULL) break;
    snprintf(ids[n++], 64, "%.*s", (int)(e - q), q);
  }
  return n;
}

static void check_unique(char ids[][64], int n, int want) {
  CHECK(n == want);
  for (int i = 0; i < n; i++) {
    CHECK(ids[i][0] != 0);
    for (int j = 0; j < i; j++) CHECK(strcmp(ids[i], ids[j]) != 0);
  }
}

static void test_ids(void) {
  char ids[8][64];
  px_buf_t o;
  translate(PX_PROTO_CHAT, PX_PROTO_RESPONSES, dup_calls, &o);
  /* tool call ids follow their index: {"index":N,"id":"..." */
  check_unique(ids, collect_ids(o.data, ",\"id\":\"", ids, 8), 3);
  CHECK(strstr(o.data, "\"id\":\"call_1\"") != NULL); /* the first keeps its id */
  px_buf_free(&o);
  translate(PX_PROTO_ANTHROPIC, PX_PROTO_RESPONSES, dup_calls, &o);
  check_unique(ids, collect_ids(o.data, "\"type\":\"tool_use\",\"id\":\"", ids, 8), 3);
  px_buf_free(&o);
}

/* the minted ids are the same in a body */
static void test_body_ids(void) {
  const char *body =
      "{\"id\":\"c\",\"object\":\"chat.completion\",\"model\":\"x\",\"choices\":[{\"index\":0,"
      "\"finish_reason\":\"tool_calls\",\"message\":{\"role\":\"assistant\",\"content\":null,"
      "\"tool_calls\":[{\"id\":\"\",\"type\":\"function\",\"function\":{\"name\":\"a\",\"arguments\":\"{}\"}},"
      "{\"id\":\"\",\"type\":\"function\",\"function\":{\"name\":\"b\",\"arguments\":\"{}\"}}]}}]}";
  json_t *b = json_loads(body, 0, NULL);
  for (int c = 0; c < 2; c++) {
    px_tr_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.in = c ? PX_PROTO_ANTHROPIC : PX_PROTO_RESPONSES;
    ctx.out = PX_PROTO_CHAT;
    ctx.client_model = "m";
    px_lossy_t l;
    px_lossy_init(&l);
    px_tr_err_t err;
    json_t *out = NULL;
    CHECK(px_translate_response(&ctx, b, &out, &l, &err) == 0);
    char *s = json_dumps(out, JSON_COMPACT);
    if (c) {
      CHECK(strstr(s, "\"id\":\"call_proxai_0\"") != NULL);
      CHECK(strstr(s, "\"id\":\"call_proxai_1\"") != NULL);
    }
    free(s);
    json_decref(out);
  }
  json_decref(b);
}

/* Anthropic upstream interleaving is impossible; a Chat upstream can send a
 * tool call while text streams, and text again after it */
static const char *interleaved =
    "data: {\"id\":\"c\",\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n"
    "data: {\"id\":\"c\",\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n"
    "data: {\"id\":\"c\",\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n"
    "data: {\"id\":\"c\",\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
    "data: [DONE]\n\n";

static void test_no_event_after_done(void) {
  px_buf_t o;
  translate(PX_PROTO_RESPONSES, PX_PROTO_CHAT, interleaved, &o);
  /* walk the events: remember items done; no later event names them */
  char done[16][128];
  int nd = 0;
  const char *p = o.data;
  while (p && (p = strstr(p, "data: ")) != NULL) {
    const char *e = strstr(p, "\n\n");
    if (e == NULL) break;
    json_t *j = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
    const char *t = json_string_value(json_object_get(j, "type"));
    const char *item = json_string_value(json_object_get(j, "item_id"));
    for (int i = 0; item && i < nd; i++)
      if (strcmp(done[i], item) == 0) {
        fprintf(stderr, "%s after item %s was done\n", t, item);
        failures++;
      }
    if (t && strcmp(t, "response.output_item.done") == 0 && nd < 16)
      snprintf(done[nd++], 128, "%s",
               json_string_value(json_object_get(json_object_get(j, "item"), "id")));
    json_decref(j);
    p = e;
  }
  /* the whole text still arrives */
  CHECK(strstr(o.data, "\"delta\":\"Hel\"") != NULL);
  CHECK(strstr(o.data, "\"delta\":\"lo\"") != NULL);
  px_buf_free(&o);
}

int main(void) {
  test_ids();
  test_body_ids();
  test_no_event_after_done();
  return check_report("stream_rules");
}
