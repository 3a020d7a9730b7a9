/* test_responses_store.c - the Responses side of stored responses
 * (px_responses_store, responses_store.c): resource paths, the request's
 * fields, its own input items with ids, the chain spliced into the body,
 * the terminal event's response object, input_items pages (SPEC 14). */
#include <jansson.h>
#include <string.h>

#include "check.h"
#include "proxai/protoutil.h"

static const px_store_ops_t *so = &px_responses_store;

static int match(const char *path, const char *id, int items) {
  px_str_t got;
  int it = -1;
  if (!so->match(path, strlen(path), &got, &it)) return id == NULL;
  return id != NULL && got.len == strlen(id) && memcmp(got.ptr, id, got.len) == 0 &&
         it == items;
}

/* A JSON text equal to want (compared as documents). */
static int json_eq(const char *got, size_t n, const char *want) {
  json_t *a = json_loadb(got, n, 0, NULL), *b = json_loads(want, 0, NULL);
  int eq = a && b && json_equal(a, b);
  if (!eq) fprintf(stderr, "got:  %.*s\nwant: %s\n", (int)n, got, want);
  json_decref(a);
  json_decref(b);
  return eq;
}

/* The admission's scan of a body, with the members the store ops read. */
static const px_json_req_t *scanned(const char *body) {
  static px_json_req_t jr;
  CHECK(px_json_request_watch(body, strlen(body), NULL, so->members, &jr) == 0);
  return &jr;
}

static int fields(const char *body, char *prev, size_t cap, int *store) {
  return so->fields(body, scanned(body), prev, cap, store);
}

static int input_items(const char *body, const char *id, px_buf_t *out) {
  return so->input_items(body, scanned(body), id, out);
}

static size_t used_n;
static void used(void *arg, size_t t) {
  (void)arg;
  CHECK(t == used_n); /* each turn once, oldest first */
  used_n++;
}

static int expand(const char *body, const px_stored_turn_t *t, size_t n, px_buf_t *out) {
  used_n = 0;
  return so->expand(body, strlen(body), scanned(body), t, n, out, used, NULL);
}

static void test_match(void) {
  CHECK(match("/v1/responses/resp_1", "resp_1", 0));
  CHECK(match("/responses/resp_1", "resp_1", 0));
  CHECK(match("/v1/responses/resp_1/input_items", "resp_1", 1));
  CHECK(match("/v1/responses", NULL, 0));
  CHECK(match("/v1/responses/", NULL, 0));
  CHECK(match("/v1/responses/resp_1/cancel", NULL, 0));
  CHECK(match("/v1/chat/completions", NULL, 0));
}

static void test_fields(void) {
  char prev[PX_STORED_ID_MAX + 1];
  int store;
  const char *b1 =
      "{\"model\":\"m\",\"previous_response_id\":\"resp_abc-1\",\"store\":false}";
  CHECK(fields(b1, prev, sizeof(prev), &store) == 0);
  CHECK(strcmp(prev, "resp_abc-1") == 0 && store == 0);
  const char *b2 = "{\"model\":\"m\",\"previous_response_id\":null}";
  CHECK(fields(b2, prev, sizeof(prev), &store) == 0);
  CHECK(prev[0] == 0 && store == 1);
  const char *bad[] = {"{\"previous_response_id\":\"a b\"}",
                       "{\"previous_response_id\":7}", "{\"previous_response_id\":\"\"}",
                       "{\"previous_response_id\":\"r\\u0065sp\"}"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    CHECK(fields(bad[i], prev, sizeof(prev), &store) < 0);
  char longid[300] = "{\"previous_response_id\":\"";
  memset(longid + strlen(longid), 'a', 129);
  strcat(longid, "\"}");
  CHECK(fields(longid, prev, sizeof(prev), &store) < 0);
}

static void test_input_items(void) {
  px_buf_t b;
  px_buf_init(&b, 1u << 20);
  const char *s = "{\"input\":\"hi\"}";
  CHECK(input_items(s, "resp_X", &b) == 0);
  CHECK(json_eq(b.data, b.len,
                "[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_"
                "text\",\"text\":\"hi\"}],\"id\":\"msg_X_0\"}]"));
  px_buf_reset(&b);
  const char *a =
      "{\"input\":[{\"role\":\"user\",\"content\":\"a\"},{\"type\":\"function_call_"
      "output\",\"call_id\":\"c\",\"output\":\"o\"},{\"type\":\"message\",\"role\":"
      "\"user\",\"content\":\"b\",\"id\":\"mine\"}]}";
  CHECK(input_items(a, "resp_X", &b) == 0);
  CHECK(json_eq(
      b.data, b.len,
      "[{\"role\":\"user\",\"content\":\"a\",\"id\":\"msg_X_0\",\"type\":\"message\"},"
      "{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"o\",\"id\":"
      "\"fco_X_1\"},{\"type\":\"message\",\"role\":\"user\",\"content\":\"b\",\"id\":"
      "\"mine\"}]"));
  /* shapes read without a document and the rest alike */
  static const struct {
    const char *body, *want;
  } cases[] = {
      {"{\"input\":[]}", "[]"},
      {"{\"input\":[ {} ]}", "[{\"id\":\"msg_X_0\",\"type\":\"message\"}]"},
      {"{\"input\":[{\"id\":\"\",\"role\":\"user\",\"content\":\"a\"}]}",
       "[{\"id\":\"msg_X_0\",\"role\":\"user\",\"content\":\"a\",\"type\":\"message\"}]"},
      {"{\"input\":[{\"\\u0069d\":\"esc\",\"type\":\"reasoning\",\"summary\":[]}]}",
       "[{\"id\":\"esc\",\"type\":\"reasoning\",\"summary\":[]}]"},
      {"{\"input\":[{\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":\"e\"}]"
       "}",
       "[{\"id\":\"rs_X_0\",\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":"
       "\"e\"}]"},
      {"{\"input\":\"caf\\u00e9 \\\"q\\\"\"}",
       "[{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
       "\"text\":\"caf\\u00e9 \\\"q\\\"\"}],\"id\":\"msg_X_0\"}]"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    px_buf_reset(&b);
    CHECK(input_items(cases[i].body, "resp_X", &b) == 0);
    CHECK(json_eq(b.data, b.len, cases[i].want));
  }
  px_buf_free(&b);
}

static void test_expand(void) {
  px_stored_turn_t t[2] = {
      {PX_STR("[{\"id\":\"i1\",\"role\":\"user\",\"content\":\"one\"}]"),
       PX_STR("{\"id\":\"resp_1\",\"output\":[{\"id\":\"o1\",\"type\":\"message\"}]}")},
      {PX_STR("[ ]"),
       PX_STR("{\"id\":\"resp_2\",\"output\":[{\"id\":\"o2\"},{\"id\":\"o3\"}]}")},
  };
  px_buf_t b;
  px_buf_init(&b, 1u << 20);
  const char *body =
      "{\"previous_response_id\":\"resp_2\",\"model\":\"m\",\"input\":\"two\"}";
  CHECK(expand(body, t, 2, &b) == 0 && used_n == 2);
  CHECK(json_eq(
      b.data, b.len,
      "{\"previous_response_id\":null,\"model\":\"m\",\"input\":[{\"id\":\"i1\","
      "\"role\":\"user\",\"content\":\"one\"},{\"id\":\"o1\",\"type\":\"message\"},"
      "{\"id\":\"o2\"},{\"id\":\"o3\"},{\"type\":\"message\",\"role\":\"user\","
      "\"content\":\"two\"}]}"));
  px_buf_reset(&b);
  const char *body2 = "{\"input\":[{\"x\":1}],\"previous_response_id\":\"resp_2\"}";
  CHECK(expand(body2, t, 1, &b) == 0);
  CHECK(
      json_eq(b.data, b.len,
              "{\"input\":[{\"id\":\"i1\",\"role\":\"user\",\"content\":\"one\"},{\"id\":"
              "\"o1\",\"type\":\"message\"},{\"x\":1}],\"previous_response_id\":null}"));
  px_buf_t small;
  px_buf_init(&small, 40);
  CHECK(expand(body, t, 2, &small) == PX_ETOOBIG);
  px_buf_free(&small);
  px_buf_free(&b);
}

static void test_final_event(void) {
  const char *ok =
      "event: response.output_item.done\ndata: {\"x\":1}\n\n"
      "event: response.completed\ndata: {\"type\":\"response.completed\","
      "\"sequence_number\":9,\"response\":{\"id\":\"resp_1\",\"output\":[]}}\n\n";
  size_t at = 0;
  px_str_t r;
  CHECK(so->final_event(ok, strlen(ok), &at, &r) == 1);
  CHECK(at == strlen("event: response.output_item.done\ndata: {\"x\":1}\n\n"));
  CHECK(r.len == strlen("{\"id\":\"resp_1\",\"output\":[]}") &&
        memcmp(r.ptr, "{\"id\":\"resp_1\"", 14) == 0);
  const char *inc = "event: response.incomplete\ndata: {\"response\":{\"id\":\"r\"}}\n\n";
  CHECK(so->final_event(inc, strlen(inc), &at, &r) == 1 && at == 0);
  const char *failed = "event: response.failed\ndata: {\"response\":{\"id\":\"r\"}}\n\n";
  CHECK(so->final_event(failed, strlen(failed), &at, &r) == 0);
  const char *cut = "event: response.completed\ndata: {\"response\":{\"id\":\"r\"}}\n";
  CHECK(so->final_event(cut, strlen(cut), &at, &r) == 0);
}

static void test_list_items(void) {
  px_str_t items = PX_STR("[{\"id\":\"a\"},{\"id\":\"b\"},{\"id\":\"c\"}]");
  px_buf_t b;
  char err[128];
  px_buf_init(&b, 1u << 20);
  CHECK(so->list_items(items, "", 0, &b, err, sizeof(err)) == 0);
  CHECK(json_eq(
      b.data, b.len,
      "{\"object\":\"list\",\"data\":[{\"id\":\"c\"},{\"id\":\"b\"},{\"id\":\"a\"}],"
      "\"first_id\":\"c\",\"last_id\":\"a\",\"has_more\":false}"));
  px_buf_reset(&b);
  const char *q = "?order=asc&limit=1&after=a";
  CHECK(so->list_items(items, q, strlen(q), &b, err, sizeof(err)) == 0);
  CHECK(
      json_eq(b.data, b.len,
              "{\"object\":\"list\",\"data\":[{\"id\":\"b\"}],\"first_id\":\"b\",\"last_"
              "id\":\"b\",\"has_more\":true}"));
  const char *bad[] = {"?limit=0", "?limit=101", "?limit=x", "?order=up", "?after=zz"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    px_buf_reset(&b);
    err[0] = 0;
    CHECK(so->list_items(items, bad[i], strlen(bad[i]), &b, err, sizeof(err)) < 0 &&
          err[0]);
  }
  px_buf_reset(&b);
  CHECK(so->deleted(&b, "resp_1") == 0);
  CHECK(json_eq(b.data, b.len,
                "{\"id\":\"resp_1\",\"object\":\"response\",\"deleted\":true}"));
  px_buf_free(&b);
}

int main(void) {
  test_match();
  test_fields();
  test_input_items();
  test_expand();
  test_final_event();
  test_list_items();
  return check_report("responses_store");
}
