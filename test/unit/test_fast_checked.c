/* test_fast_checked.c - the fast decoders of upstream answers read the body
 * once, checking it as they read it (the px_fc_* reads of fastir.h: no
 * scan before them), and hand the usage they found to the caller:
 *  - an answer jansson refuses is declined, wherever the fault is (also
 *    inside members the decoder only skips), so the jansson path answers
 *    the 502 as before;
 *  - a valid answer is taken and its usage is what px_usage_scan
 *    reads (the tr_json mode makes no second walk over it);
 *  - a usage the decoder cannot read exactly is left to that scan
 *    (PX_FAST_USAGE). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fast_pair.h"
#include "proxai/fastir.h"
#include "proxai/passthru.h"
#include "proxai/usage.h"

/* protocols by index, as in PX_PROTO_MAP: 0 chat, 1 responses, 2 anthropic */
static const char *const answers[] = {
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"u\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello\"},"
    "\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":25,"
    "\"completion_tokens\":14,\"total_tokens\":39},\"system_fingerprint\":SKIP}",
    "{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"completed\","
    "\"model\":\"u\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"role\":"
    "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hello\","
    "\"annotations\":[]}]}],\"temperature\":1.0,\"tools\":[],\"usage\":{\"input_tokens\":"
    "25,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":14,"
    "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":39},"
    "\"metadata\":SKIP}",
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"u\","
    "\"content\":[{\"type\":\"text\",\"text\":\"Hello\"}],\"stop_reason\":\"end_turn\","
    "\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":14,"
    "\"cache_read_input_tokens\":3},\"container\":SKIP}",
};

/* what a skipped member may hold: valid, then what jansson refuses */
static const char *const good[] = {
    "null", "{}", "[]", "-0.5e+3", "{\"a\":[1,{\"b\":\"\\u00e9\\ud83d\\ude00\"}],\"c\":true}",
    "\"caf\xc3\xa9\"",
};
static const char *const bad[] = {
    "01",           "1.",          "-",           "1e",         "nul",
    "tru",          "[1,]",        "{\"a\":1,}",  "{,\"a\":1}", "[1 2]",
    "{\"a\" 1}",    "{\"a\":}",    "\"\\x\"",     "\"\\u0000\"", "\"\\ud800\"",
    "\"\xc3\"",     "\"\xff\"",    "\"a\x01\"",   "[",          "{\"a\":1",
    "99999999999999999999", "1e999", "}",        "]",          "{1:2}",
};

static int valid(const char *s, size_t n) {
  json_t *j = json_loadb(s, n, 0, NULL);
  json_decref(j);
  return j != NULL;
}

static char *with(const char *tmpl, const char *v) {
  const char *at = strstr(tmpl, "SKIP");
  size_t a = (size_t)(at - tmpl), vl = strlen(v), rest = strlen(at + 4);
  char *s = malloc(a + vl + rest + 1);
  memcpy(s, tmpl, a);
  memcpy(s + a, v, vl);
  memcpy(s + a + vl, at + 4, rest + 1);
  return s;
}

/* 0 taken with the usage handed over, PX_FAST_USAGE, or PX_FAST_DECLINE */
static int run(int in, int out, const char *body, size_t len, px_usage_t *u) {
  px_tr_ctx_t c;
  ctx_of(&c, in, out);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  px_lossy_t l;
  px_lossy_init(&l);
  int rc = px_translate_response_fast(&c, body, len, &b, &l, u, NULL);
  if (rc != PX_FAST_DECLINE) CHECK(valid(b.data, b.len));
  px_buf_free(&b);
  return rc;
}

/* The walker's string end (fast.c string_end: 64-byte blocks, escapes by
 * their backslash runs) against the pieces a string was built from: every
 * escape kind and backslash run at every offset around the block edges,
 * the string at the end of the body and with a member after it. */
static void walker_strings(void) {
  static const char *const piece[] = {"a", "\\\\", "\\\"", "\\n", "\xc3\xa9",
                                      "\\u00e9", "\\/", "\\\\\\\\"};
  unsigned seed = 7;
  char s[600], body[700];
  for (int t = 0; t < 20000; t++) {
    size_t n = 0, len = (size_t)(seed % 200);
    int esc = 0;
    while (n < len) {
      seed = seed * 1103515245u + 12345u;
      unsigned k = (seed >> 16) % 16;
      const char *pc = piece[k < 9 ? 0 : k - 8];
      if (k >= 9 && k != 12) esc = 1;
      size_t l = strlen(pc);
      memcpy(s + n, pc, l);
      n += l;
    }
    s[n] = 0;
    seed = seed * 1103515245u + 12345u;
    int tail = (seed >> 16) & 1;
    int bl = snprintf(body, sizeof(body), "{\"k\":\"%s\"%s}", s, tail ? ",\"z\":1" : "");
    CHECK(valid(body, (size_t)bl));
    px_fw_t w = {body, (size_t)bl, 0};
    px_fstr_t key;
    px_fv_t v;
    CHECK(px_fw_open(&w, '{') == 0 && px_fw_member(&w, &key) == 1);
    CHECK(px_fw_value(&w, &v) == 0 && v.kind == PX_FV_STR);
    CHECK(v.s.n == n && memcmp(v.s.p, s, n) == 0 && v.s.esc == esc);
    if (tail) CHECK(px_fw_member(&w, &key) == 1 && key.n == 1 && key.p[0] == 'z');
  }
}

int main(void) {
  walker_strings();
  for (int out = 0; out < 3; out++) {
    int in = (out + 1) % 3;
    for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++) {
      char *body = with(answers[out], good[k]);
      size_t len = strlen(body);
      CHECK(valid(body, len));
      px_usage_t fast = {-1, -1, -1, -1, -1}, scan = fast;
      int rc = run(in, out, body, len, &fast);
      CHECK(rc == 0); /* taken, the usage read on the way */
      px_usage_scan((px_proto_t)out, body, len, &scan);
      CHECK(fast.input_tokens == scan.input_tokens);
      CHECK(fast.output_tokens == scan.output_tokens);
      CHECK(fast.input_tokens == (out == 2 ? 28 : 25) && fast.output_tokens == 14);
      if (rc != 0) fprintf(stderr, "%d <- %d declined: %s\n", in, out, body);
      free(body);
    }
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
      char *body = with(answers[out], bad[k]);
      size_t len = strlen(body);
      CHECK(!valid(body, len)); /* jansson refuses it */
      px_usage_t u = {-1, -1, -1, -1, -1};
      int rc = run(in, out, body, len, &u);
      CHECK(rc == PX_FAST_DECLINE);
      CHECK(u.input_tokens == -1 && u.output_tokens == -1);
      if (rc != PX_FAST_DECLINE) fprintf(stderr, "%d <- %d taken: %s\n", in, out, body);
      free(body);
    }
    /* data after the object, and a NUL inside it */
    char *body = with(answers[out], "null");
    size_t len = strlen(body);
    char *tail = malloc(len + 3);
    memcpy(tail, body, len);
    memcpy(tail + len, " x", 3);
    CHECK(run(in, out, tail, len + 2, NULL) == PX_FAST_DECLINE);
    tail[len - 3] = '\0';
    CHECK(run(in, out, tail, len, NULL) == PX_FAST_DECLINE);
    free(tail);
    free(body);
  }
  /* a count that is a real number counts nothing, as jansson reads it (no
   * integer) and as the scan reads it: the decoder tells it */
  const char *odd =
      "{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[],\"usage\":"
      "{\"input_tokens\":25.0,\"output_tokens\":14}}";
  px_usage_t u = {-1, -1, -1, -1, -1}, scan = u;
  CHECK(run(0, 1, odd, strlen(odd), &u) == 0);
  CHECK(u.input_tokens == -1 && u.output_tokens == 14);
  px_usage_scan(PX_PROTO_RESPONSES, odd, strlen(odd), &scan);
  CHECK(scan.input_tokens == -1 && scan.output_tokens == 14);
  return check_report("fast_checked");
}
