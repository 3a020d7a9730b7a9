/* test_json.c - the request scanner (SPEC section 10: one rule set for the
 * fast and the translated path) and the memory budget of a translated
 * request. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "jumps_check.h"
#include "proxai/fastir.h"
#include "proxai/json.h"
#include "proxai/proto.h"
#include "ref.h"

static int scan(const char *s, px_json_req_t *r) { return px_json_request(s, strlen(s), r); }

/* rc of the scan and of jansson agree, and the refusal has this reason;
 * an object refused for its syntax is refused as an element of a member's
 * array too (the walk of the containers below the top), with the same
 * reason at the same byte */
static void refused(int line, const char *s, size_t n, px_jreq_err_t why) {
  px_json_req_t r;
  if (px_json_request(s, n, &r) == 0 || r.err != why) {
    fprintf(stderr, "test line %d: want refusal %d, got rc/err %d\n", line, (int)why,
            (int)r.err);
    failures++;
    return;
  }
  if (why != PX_JREQ_SYNTAX || n == 0 || s[0] != '{' || n > 200) return;
  json_t *first = json_loadb(s, n, JSON_DISABLE_EOF_CHECK, NULL);
  json_decref(first);
  if (first != NULL) return; /* refused for what follows the object: {} x */
  static const char pre[] = "{\"m\":[1,", post[] = "]}";
  char *b = malloc(n + sizeof(pre) + sizeof(post));
  memcpy(b, pre, sizeof(pre) - 1);
  memcpy(b + sizeof(pre) - 1, s, n);
  memcpy(b + sizeof(pre) - 1 + n, post, sizeof(post) - 1);
  px_json_req_t in;
  size_t bn = n + sizeof(pre) + sizeof(post) - 2;
  int rc = px_json_request(b, bn, &in);
  json_t *j = json_loadb(b, bn, 0, NULL);
  if (rc == 0 || j != NULL || in.err != why || in.err_at != r.err_at + sizeof(pre) - 1 ||
      strcmp(in.reason, r.reason) != 0) {
    fprintf(stderr, "test line %d: nested: rc %d err %d at %zu (%s), top at %zu (%s)\n",
            line, rc, (int)in.err, in.err_at, rc < 0 ? in.reason : "-", r.err_at,
            r.reason);
    failures++;
  }
  json_decref(j);
  free(b);
}
#define REFUSED(s, why) refused(__LINE__, s, sizeof(s) - 1, why)

static void test_members(void) {
  px_json_req_t r;
  const char *b = "{\"messages\":[{\"model\":\"inner\"}],\"model\":\"gpt-4o\",\"stream\":true,"
                  "\"stream_options\":{\"include_usage\":true}}";
  CHECK(scan(b, &r) == 0);
  CHECK(r.model_len == 8 && memcmp(b + r.model_at, "\"gpt-4o\"", 8) == 0);
  CHECK(r.stream == 1 && r.include_usage == 1);
  char *m = px_json_req_model(b, &r);
  CHECK(m != NULL && strcmp(m, "gpt-4o") == 0);
  free(m);
  /* an escaped name and value are read as jansson reads them */
  b = "{\"mod\\u0065l\":\"a\\u002db\",\"str\\u0065am\":false}";
  CHECK(scan(b, &r) == 0 && r.model_esc && r.stream == 0 && r.stream_len == 5);
  m = px_json_req_model(b, &r);
  CHECK(m != NULL && strcmp(m, "a-b") == 0);
  free(m);
  /* the rewrite replaces exactly the model token */
  px_buf_t o;
  px_buf_init(&o, 1024);
  CHECK(px_json_splice_str(&o, b, strlen(b), r.model_at, r.model_len, "x\"y") == 0);
  CHECK(o.len == strlen("{\"mod\\u0065l\":\"x\\\"y\",\"str\\u0065am\":false}") &&
        memcmp(o.data, "{\"mod\\u0065l\":\"x\\\"y\",\"str\\u0065am\":false}", o.len) == 0);
  px_buf_free(&o);
  /* absent, other types */
  CHECK(scan("{}", &r) == 0 && r.model_len == 0 && px_json_req_model("{}", &r) == NULL);
  b = "{\"model\":{\"a\":1},\"stream\":[true]}";
  CHECK(scan(b, &r) == 0 && b[r.model_at] == '{' && b[r.stream_at] == '[' && !r.stream);
  CHECK(px_json_req_model(b, &r) == NULL);
  /* include_usage only counts inside the top-level stream_options */
  CHECK(scan("{\"x\":{\"stream_options\":{\"include_usage\":true}}}", &r) == 0 &&
        !r.include_usage);
  CHECK(scan("{\"include_usage\":true}", &r) == 0 && !r.include_usage);
}

static void test_duplicates(void) {
  px_json_req_t r;
  CHECK(scan("{\"model\":\"a\",\"model\":\"b\"}", &r) < 0 && r.err == PX_JREQ_DUPLICATE &&
        strcmp(r.key, "model") == 0);
  CHECK(scan("{\"model\":\"a\",\"m\\u006fdel\":\"b\"}", &r) < 0 && r.err == PX_JREQ_DUPLICATE);
  CHECK(scan("{\"stream\":true,\"x\":1,\"stream\":false}", &r) < 0 &&
        strcmp(r.key, "stream") == 0);
  CHECK(scan("{\"stream_options\":{},\"stream_options\":{}}", &r) < 0);
  CHECK(scan("{\"stream_options\":{\"include_usage\":1,\"include_usage\":2}}", &r) < 0 &&
        strcmp(r.key, "include_usage") == 0);
  /* members the gateway does not act on may repeat (jansson: the last) */
  CHECK(scan("{\"a\":1,\"a\":2,\"x\":{\"model\":1,\"model\":2}}", &r) == 0);
  CHECK(scan("[{\"model\":1,\"model\":2}]", &r) < 0 && r.err == PX_JREQ_NOT_OBJECT);
}

static void test_syntax(void) {
  REFUSED("", PX_JREQ_SYNTAX);
  REFUSED(" ", PX_JREQ_SYNTAX);
  REFUSED("\xef\xbb\xbf{}", PX_JREQ_SYNTAX);
  REFUSED("{} x", PX_JREQ_SYNTAX);
  REFUSED("{}{}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":1,}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\" 1}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":\"x\0y\"}", PX_JREQ_SYNTAX);
  /* a raw NUL after a token too (jansson's lexer drops that one) */
  REFUSED("{\"a\":1\0}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":true\0,\"b\":2}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":\"x\ny\"}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":\"\\u0000\"}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":\"\\ud800\"}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":\"\\udc00\\ud800\"}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":\"\xc0\xaf\"}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":\"\xed\xa0\x80\"}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":\"\xff\"}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":01}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":1.}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":.5}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":+1}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":1e}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":1e400}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":-1e400}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":9223372036854775808}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":-9223372036854775809}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":tru}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":truex}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":[1,2}", PX_JREQ_SYNTAX);
  REFUSED("{\"a\":{\"b\":1]}", PX_JREQ_SYNTAX);
  REFUSED("[1]", PX_JREQ_NOT_OBJECT);
  px_json_req_t r;
  CHECK(scan("{\"a\":[-0,0.5e-3,1E+2,9223372036854775807,-9223372036854775808,1e-400,"
             "\"\\ud83d\\ude00\xe2\x82\xac\\/\"],\"b\":null}",
             &r) == 0);
  /* every proper prefix of a valid body is refused */
  const char *b = "{\"model\":\"m\",\"x\":[1,{\"y\":\"z\"}]}";
  for (size_t i = 0; i < strlen(b); i++) CHECK(px_json_request(b, i, &r) < 0);
}

/* {"a": + levels-1 arrays + } : levels deep in all */
static size_t nested(char *b, size_t levels) {
  size_t k = 0;
  memcpy(b, "{\"a\":", 5);
  k = 5;
  for (size_t i = 1; i < levels; i++) b[k++] = '[';
  for (size_t i = 1; i < levels; i++) b[k++] = ']';
  b[k++] = '}';
  return k;
}

static void test_depth(void) {
  char *b = malloc(2 * PX_JSON_MAX_DEPTH + 16);
  px_json_req_t r;
  size_t k = nested(b, PX_JSON_MAX_DEPTH);
  CHECK(px_json_request(b, k, &r) == 0);
  json_t *j = json_loadb(b, k, 0, NULL);
  CHECK(j != NULL);
  json_decref(j);
  k = nested(b, PX_JSON_MAX_DEPTH + 1);
  CHECK(px_json_request(b, k, &r) < 0 && r.err == PX_JREQ_DEPTH);
  j = json_loadb(b, k, 0, NULL); /* jansson's own limit is higher */
  CHECK(j != NULL);
  json_decref(j);
  free(b);
}

static void test_budget(void) {
  /* a body of many tiny messages needs more than the budget: refused with
   * PX_ERR_TOO_LARGE, nothing leaks, and the next request works */
  px_buf_t b;
  px_buf_init(&b, 64u << 20);
  px_buf_puts(&b, "{\"model\":\"m\",\"messages\":[");
  for (int i = 0; i < 100000; i++)
    px_buf_puts(&b, i ? ",{\"role\":\"user\",\"content\":\"m\"}"
                      : "{\"role\":\"user\",\"content\":\"m\"}");
  px_buf_puts(&b, "]}");
  px_tr_ctx_t ctx = {.in = PX_PROTO_CHAT, .out = PX_PROTO_ANTHROPIC, .client_model = "m"};
  px_lossy_t lossy;
  px_tr_err_t err;
  char *out = NULL;
  size_t len = 0;
  px_lossy_init(&lossy);
  memset(&err, 0, sizeof(err));
  /* the reference's budget */
  CHECK(px_translate_request_ref(&ctx, b.data, b.len, 0, &out, &len, &lossy, &err) < 0);
  CHECK(err.kind == PX_ERR_TOO_LARGE && out == NULL);
  /* the codecs take it (no document: memory of the order of the body) */
  CHECK(px_translate_request_body(&ctx, b.data, b.len, 0, &out, &len, &lossy, &err) == 0);
  free(out);
  out = NULL;
  const char *small = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                      "\"stream\":true}";
  memset(&err, 0, sizeof(err));
  CHECK(px_translate_request_body(&ctx, small, strlen(small), 0, &out, &len, &lossy, &err) ==
        0);
  CHECK(out != NULL && len == strlen(out) && strstr(out, "\"stream\":true") != NULL);
  free(out);
  /* count_tokens drops the generation controls */
  out = NULL;
  CHECK(px_translate_request_body(&ctx, small, strlen(small), PX_TR_COUNT_TOKENS, &out, &len,
                                  &lossy, &err) == 0);
  CHECK(out != NULL && strstr(out, "\"stream\"") == NULL);
  free(out);
  px_buf_free(&b);
}

/* Every fixture request, translated under budgets from nothing up to what
 * it needs: each run stops cleanly at some stage (PX_ERR_TOO_LARGE, no
 * output, nothing leaked: the sanitizer build checks) or gives exactly the
 * unbounded result. */
static void test_budget_sweep(void) {
  const char *src = getenv("PROXAI_TEST_SRCDIR");
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/test/fixtures", src ? src : ".");
  static const char *const names[] = {"chat", "responses", "anthropic"};
  int cases = 0;
  for (int in = 0; in < 3; in++) {
    for (int out = 0; out < 3; out++) {
      if (in == out) continue;
      char pair[4200];
      snprintf(pair, sizeof(pair), "%s/%s__%s", dir, names[in], names[out]);
      DIR *d = opendir(pair);
      if (d == NULL) continue;
      struct dirent *e;
      while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[8400];
        snprintf(path, sizeof(path), "%s/%s/client_request.json", pair, e->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL) continue;
        static char body[1 << 20];
        size_t len = fread(body, 1, sizeof(body), f);
        fclose(f);
        px_json_req_t r;
        if (px_json_request(body, len, &r) < 0) continue;
        px_tr_ctx_t ctx = {.in = (px_proto_t)in,
                           .out = (px_proto_t)out,
                           .client_model = "client-model",
                           .upstream_model = "up-model",
                           .created = 1700000000,
                           .max_accum = 1 << 20};
        px_lossy_t lossy;
        px_tr_err_t err;
        char *want = NULL, *got;
        size_t wl = 0, gl;
        px_lossy_init(&lossy);
        memset(&err, 0, sizeof(err));
        if (px_translate_request_ref(&ctx, body, len, 0, &want, &wl, &lossy, &err) < 0)
          continue; /* a request the translation refuses anyway */
        cases++;
        for (long long lim = 0;; lim += 97) {
          ctx.mem_limit = &lim;
          got = NULL;
          memset(&err, 0, sizeof(err));
          int rc = px_translate_request_ref(&ctx, body, len, 0, &got, &gl, &lossy, &err);
          ctx.mem_limit = NULL;
          if (rc < 0) {
            CHECK(err.kind == PX_ERR_TOO_LARGE && got == NULL);
            if (err.kind != PX_ERR_TOO_LARGE) {
              fprintf(stderr, "  %s at %lld: %s\n", path, lim, err.message);
              break;
            }
            continue;
          }
          CHECK(gl == wl && memcmp(got, want, wl) == 0);
          free(got);
          break;
        }
        free(want);
      }
      closedir(d);
    }
  }
  CHECK(cases > 50);
}

/* The output-token caps the gateway reserves by (issue 21): found where the
 * upstream reads them, and a repeated one (any spelling) refused, so that
 * the rate limiter and the upstream cannot read two values. */
static void test_caps(void) {
  static const char *const chat[2][2] = {{"max_completion_tokens", NULL},
                                         {"max_tokens", NULL}};
  static const char *const gem[2][2] = {{"generationConfig", "maxOutputTokens"}, {NULL}};
  px_json_req_t r;
  const char *b =
      "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[],\"max_tokens\":99999}";
  CHECK(px_json_request_caps(b, strlen(b), chat, &r) < 0 && r.err == PX_JREQ_DUPLICATE &&
        strcmp(r.key, "max_tokens") == 0);
  b = "{\"model\":\"m\",\"max_tokens\":1,\"max_to\\u006bens\":99999}";
  CHECK(px_json_request_caps(b, strlen(b), chat, &r) < 0 && r.err == PX_JREQ_DUPLICATE);
  /* both caps once each: found */
  b = "{\"max_tokens\":7,\"x\":{\"max_tokens\":1,\"max_tokens\":2},\"max_completion_"
      "tokens\":9}";
  CHECK(px_json_request_caps(b, strlen(b), chat, &r) == 0);
  CHECK(r.cap_len[0] == 1 && b[r.cap_at[0]] == '9' && r.cap_len[1] == 1 &&
        b[r.cap_at[1]] == '7');
  /* without the caps, a repeated max_tokens is not the scan's business */
  b = "{\"max_tokens\":1,\"max_tokens\":2}";
  CHECK(scan(b, &r) == 0 && r.cap_len[0] == 0);
  /* a nested cap: its place only, and the object holding it once */
  b = "{\"generationConfig\":{\"maxOutputTokens\":5,\"topK\":1},\"contents\":[]}";
  CHECK(px_json_request_caps(b, strlen(b), gem, &r) == 0 && r.cap_len[0] == 1 &&
        b[r.cap_at[0]] == '5');
  b = "{\"generationConfig\":{\"maxOutputTokens\":5,\"maxOutputTokens\":50000}}";
  CHECK(px_json_request_caps(b, strlen(b), gem, &r) < 0 && r.err == PX_JREQ_DUPLICATE);
  b = "{\"generationConfig\":{\"maxOutputTokens\":5},\"generationConfig\":{}}";
  CHECK(px_json_request_caps(b, strlen(b), gem, &r) < 0 && r.err == PX_JREQ_DUPLICATE);
  b = "{\"maxOutputTokens\":1,\"maxOutputTokens\":2,\"x\":{\"maxOutputTokens\":1}}";
  CHECK(px_json_request_caps(b, strlen(b), gem, &r) == 0 && r.cap_len[0] == 0);
  /* stream_options keeps its member watched beside a cap's object */
  b = "{\"generationConfig\":{},\"stream_options\":{\"include_usage\":true}}";
  CHECK(px_json_request_caps(b, strlen(b), gem, &r) == 0 && r.include_usage);
}

/* The string check (px_json_string) against jansson on generated strings:
 * runs of one-letter escapes, backslash runs of every length (up to
 * several blocks) before a letter or a quote, \u escapes and surrogate
 * pairs (good, lone, cut), UTF-8 of every length (good, at the edges of its
 * ranges, cut, overlong, surrogates, above U+10FFFF, stray continuation
 * bytes), raw controls,
 * plain runs of every length (so that each of these meets the 16, 32 and
 * 64 byte block edges at every offset), an unescaped quote; at every
 * offset of a block, and followed by nothing (the string at the very end
 * of a malloc'd buffer: the sanitizer build sees any read past it) or by
 * more text. With every instruction set the CPU has (px_json_simd). */
static unsigned str_rnd_state = 2463534242u;
static unsigned str_rnd(unsigned n) {
  str_rnd_state ^= str_rnd_state << 13;
  str_rnd_state ^= str_rnd_state >> 17;
  str_rnd_state ^= str_rnd_state << 5;
  return str_rnd_state % n;
}

/* the UTF-8 parts start at str_parts[STR_UTF8] and end before the controls */
#define STR_UTF8 27
static const char *const str_parts[] = {
    /* mostly what agents send (text and one-letter escapes): first 8 */
    "a", "plain text ", "0123456789abcdef", "\\n", "\\\"", "\\\\", "\\/", "\\t",
    /* escapes */
    "\\b\\f\\r", "\\u00e9", "\\u00E9", "\\ud83d\\ude00", "\\uDBFF\\uDFFF", "\\ud83d",
    "\\ude00", "\\ud83d\\u0041", "\\ud83d\\n", "\\x", "\\u12", "\\u12g4", "\\u0000",
    "\\u0001", "\\U0041", "\\", "\\\\\\", "\\\\\\\\\\\"", "\\\\\\\\\\\\\\\\\\\\\\\\\\",
    /* UTF-8: good (edges too), cut, overlong, surrogate, too high, stray */
    "\xc3\xa9", "\xc2\x80", "\xdf\xbf", "\xe6\x97\xa5", "\xe0\xa0\x80", "\xed\x9f\xbf",
    "\xee\x80\x80", "\xef\xbf\xbf", "\xf0\x9f\x98\x80", "\xf0\x90\x80\x80",
    "\xf4\x8f\xbf\xbf", "\xc3", "\xe6\x97", "\xf0\x9f\x98", "\xc0\xaf", "\xc1\xbf",
    "\xe0\x80\x80", "\xe0\x9f\xbf", "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf",
    "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80",
    "\xf8\x88\x80\x80\x80", "\x80", "\xbf", "\xfe", "\xff", "\xe4\xb8\xad\xe6\x96\x87",
    "\\\xc3\xa9",
    /* controls, DEL (allowed), quotes */
    "\x01", "\x1f", "\t", "\n", "\x7f", "\"", " \" "};
#define STR_NPARTS (sizeof(str_parts) / sizeof(str_parts[0]))
#define STR_UTF8_N 31

/* What jansson makes of the text t[0..n) (an opening quote first) read as
 * far as its closing quote: the first quote at which jansson reads
 * t[0..e] as one string is the end (1, *end = e); none: refused (0). */
static int jansson_string(const char *t, size_t n, size_t *end) {
  for (size_t e = 1; e < n; e++) {
    if (t[e] != '"') continue;
    json_error_t err;
    json_t *j = json_loadb(t, e + 1, JSON_DECODE_ANY, &err);
    int ok = j != NULL && json_is_string(j);
    json_decref(j);
    if (ok) {
      *end = e;
      return 1;
    }
  }
  return 0;
}

static unsigned str_cases;

/* t[0..n): one case; the scan starts at t[pad] (the opening quote) */
static void str_case(const char *t, size_t n, size_t pad) {
  unsigned char *b = malloc(n ? n : 1); /* exactly n: no slack to read */
  memcpy(b, t, n);
  size_t want_end = 0;
  int want = jansson_string(t + pad, n - pad, &want_end);
  for (int level = px_json_simd(-1); level >= 0; level--) {
    px_json_simd(level);
    size_t end = 0;
    int esc = -1;
    int rc = px_json_string(b, n, pad + 1, &end, &esc);
    if ((rc == 0) != want || (want && end != pad + want_end)) {
      fprintf(stderr, "string scan (level %d) %d end %zu, jansson %d end %zu: %.*s\n",
              level, rc, end - pad, want, want_end, (int)(n - pad), t + pad);
      failures++;
    } else if (want) {
      int has = memchr(t + pad + 1, '\\', want_end - 1) != NULL;
      CHECK(esc == has);
    }
  }
  px_json_simd(-1);
  free(b);
  str_cases++;
}

static void test_strings(void) {
  char text[2048];
  for (int iter = 0; iter < 40000; iter++) {
    size_t pad = str_rnd(70), n; /* the string starts at every offset of a block */
    memset(text, 'x', pad);
    n = pad;
    text[n++] = '"';
    size_t k = str_rnd(iter < 8000 ? 12 : iter < 24000 ? 40 : 100);
    int dense = iter % 3 == 2; /* mostly non-ASCII: the vector UTF-8 check */
    for (size_t j = 0; j < k; j++) {
      const char *pt;
      char run[240];
      unsigned pick = str_rnd(10);
      if (pick == 0) { /* a plain run of any length moves what follows */
        size_t l = 1 + str_rnd(70);
        memset(run, 'p', l);
        run[l] = 0;
        pt = run;
      } else if (pick == 1) { /* a run of backslashes of any length, then a letter */
        /* (some over several blocks: the escape carried from block to block) */
        size_t l = 1 + str_rnd(iter % 4 == 3 ? 230 : 70);
        memset(run, '\\', l);
        run[l] = "n\"u\\x/"[str_rnd(6)];
        run[l + 1] = 0;
        pt = run;
      } else if (dense && pick < 8) { /* text in a non-Latin script: a block of it */
        static const unsigned good[] = {0, 3, 8, 29}; /* 2, 3, 4 bytes, two of 3 */
        pt = str_parts[STR_UTF8 + (str_rnd(12) ? good[str_rnd(4)] : str_rnd(STR_UTF8_N))];
      } else {
        pt = str_parts[pick < 6 ? str_rnd(8) : str_rnd((unsigned)STR_NPARTS)];
      }
      size_t l = strlen(pt);
      if (n + l + 200 >= sizeof(text)) break;
      memcpy(text + n, pt, l);
      n += l;
    }
    if (str_rnd(8)) text[n++] = '"';
    str_case(text, n, pad); /* the string ends the buffer */
    /* more text after it: the body goes on (JSON, or anything) */
    size_t more = str_rnd(140);
    for (size_t j = 0; j < more; j++)
      text[n++] = str_rnd(4) ? "x,:{}[] 1"[str_rnd(9)] : "\"\\\n\x80\xc3"[str_rnd(5)];
    str_case(text, n, pad);
  }
  CHECK(str_cases == 80000);
}

/* The block loop's paths, directed: after a first escape (where the block
 * check starts), plain text, then one part at every offset of the next
 * three blocks (a one-letter escape, a backslash run across a block's end,
 * a \u escape, good UTF-8 of every length and wrong UTF-8 at and across
 * block ends, a control byte, DEL, a quote), then more plain text, a
 * second part (or none) and the end: against jansson as a string
 * (px_json_string, *esc too) and inside a request body (the tree walk's
 * string check), with every instruction set. */
/* The request body doc[0..n) (copied to an exact-size buffer: nothing
 * after it is readable) is taken by px_json_request exactly when jansson
 * reads it, with every instruction set. */
static void document_agrees(const char *doc, size_t n) {
  unsigned char *d = malloc(n);
  memcpy(d, doc, n);
  json_t *j = json_loadb(doc, n, 0, NULL);
  for (int level = px_json_simd(-1); level >= 0; level--) {
    px_json_simd(level);
    px_json_req_t r;
    int rc = px_json_request((const char *)d, n, &r);
    if ((rc == 0) != (j != NULL)) {
      fprintf(stderr, "request scan (level %d) %d, jansson %d: %.*s\n", level, rc,
              j != NULL, (int)n, doc);
      failures++;
    }
  }
  px_json_simd(-1);
  json_decref(j);
  free(d);
}

static void test_string_blocks(void) {
  static const char *const parts[] = {"\\n",
                                      "\\\"",
                                      "\\\\",
                                      "\\\\\\\\\\\"",
                                      "\\\\\\",
                                      "\\u00e9",
                                      "\\ud83d\\ude00",
                                      "\\b",
                                      "\\x",
                                      "\xc3\xa9",
                                      "\xe6\x97\xa5",
                                      "\xf0\x9f\x98\x80",
                                      "\xe4\xb8\xad\xe6\x96\x87",
                                      "\xc3",
                                      "\xe6\x97",
                                      "\xf0\x9f\x98",
                                      "\x80",
                                      "\xc0\xaf",
                                      "\xe0\x9f\xbf",
                                      "\xed\xa0\x80",
                                      "\xf4\x90\x80\x80",
                                      "\xf5\x80\x80\x80",
                                      "\xff",
                                      "\\\xc3\xa9",
                                      "\x01",
                                      "\x1f",
                                      "\n",
                                      "\x7f",
                                      "\""};
  enum { NP = sizeof(parts) / sizeof(parts[0]) };
  char t[512], doc[600];
  unsigned cases = 0;
  for (size_t a = 0; a < NP; a++)
    for (size_t k = 0; k < 200; k++) {
      size_t b = (a * 7 + k) % (NP + 1); /* the second part (NP: none) */
      size_t n = 0;
      t[n++] = '"';
      memcpy(t + n, "\\n", 2);
      n += 2;
      memset(t + n, 'p', k);
      n += k;
      size_t l = strlen(parts[a]);
      memcpy(t + n, parts[a], l);
      n += l;
      size_t more = (k * 13) % 70;
      memset(t + n, 'q', more);
      n += more;
      if (b < NP) {
        l = strlen(parts[b]);
        memcpy(t + n, parts[b], l);
        n += l;
      }
      t[n++] = '"';
      str_case(t, n, 0);
      /* the same string as an element below the top (the tree walk) */
      int dn =
          snprintf(doc, sizeof(doc), "{\"model\":\"m\",\"k\":[{\"v\":%.*s}]}", (int)n, t);
      document_agrees(doc, (size_t)dn);
      cases++;
    }
  CHECK(cases == NP * 200);
}

/* Whole request bodies with each string part above as a member name and as
 * a value, after plain runs of every length 0-39 (so that it falls in the
 * walk's first 16-byte step of a string, at its edge, and past it), the
 * body at the very end of an exact-size buffer: px_json_request accepts
 * exactly what jansson reads as an object, with every instruction set. */
static void test_documents(void) {
  char doc[256], s[128];
  for (size_t k = 0; k < STR_NPARTS; k++)
    for (size_t pre = 0; pre < 40; pre++)
      for (int where = 0; where < 6; where++) {
        memset(s, 'p', pre);
        strcpy(s + pre, str_parts[k]);
        /* at the top, and below it (the tree walk: names, values, blanks) */
        static const char *const shape[] = {
            "{\"model\":\"m\",\"%s\":1}", "{\"model\":\"m\",\"k\":[\"%s\"]}",
            "{\"%s\" : \"%s\" }", "{\"k\":[{\"%s\":\"%s\"},1]}",
            "{\"k\":[ { \"%s\" :\t\"%s\" } ] }",
            /* a plain name and more after the member: the walk's probe of
             * the 32 bytes after a name's quote */
            "{\"k\":[{\"n\":\"%s\",\"x\":\"%-40s\"}]}"};
        int n = where == 5 ? snprintf(doc, sizeof(doc), shape[where], s, "")
                           : snprintf(doc, sizeof(doc), shape[where], s, s);
        document_agrees(doc, (size_t)n);
      }
}

/* px_json_request_jumps: the larger containers' ends, in opening order,
 * where the walker ends them (jumps_check.h); recorded from the model on
 * when the caller's want says so (the gateway: when the route translates),
 * none when it says no; a full table keeps its first entries. */
static const char *wanted_model;
static int want_yes(px_json_jumps_t *j, const char *tok, size_t len) {
  (void)j;
  wanted_model = tok;
  return len == 5 && memcmp(tok, "\"m-1\"", 5) == 0;
}
static void test_jumps(void) {
  char body[4096];
  int n = snprintf(body, sizeof(body),
                   "{\"a\":[\"%0100d\"],\"model\":\"m-1\",\"input\":[", 0);
  for (int k = 0; k < 20; k++)
    n += snprintf(body + n, sizeof(body) - n,
                  "%s{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                  "\"%0*d\\n\"},{\"x\":[1,{}]}]}",
                  k ? "," : "", 40 + k * 7, k);
  n += snprintf(body + n, sizeof(body) - n, "],\"small\":{\"b\":[1,2]}}");
  px_json_req_t r;
  uint32_t v[64][2], w[64][2];
  px_json_jumps_t all = {.v = v, .cap = 64};
  CHECK(px_json_request_jumps(body, (size_t)n, NULL, NULL, &all, &r) == 0);
  CHECK(r.jumps == &all && jumps_sound(body, (size_t)n, &all));
  /* "a" (before the model), "input", its 20 items and the contents of the
   * longer ones; not the small ones, not the top */
  CHECK(all.n > 22 && all.v[0][0] == 5 &&
        all.v[1][0] == (uint32_t)(strstr(body, "[{") - body));
  px_json_jumps_t from = {.v = w, .cap = 64, .want = want_yes};
  CHECK(px_json_request_jumps(body, (size_t)n, NULL, NULL, &from, &r) == 0);
  CHECK(wanted_model == strstr(body, "\"m-1\""));
  CHECK(r.jumps == &from && from.n == all.n - 1 && jumps_sound(body, (size_t)n, &from));
  CHECK(memcmp(from.v, all.v + 1, from.n * sizeof(*v)) == 0);
  body[strstr(body, "m-1") - body] = 'n'; /* another model: nothing */
  CHECK(px_json_request_jumps(body, (size_t)n, NULL, NULL, &from, &r) == 0);
  CHECK(r.jumps == NULL && from.n == 0);
  px_json_jumps_t few = {.v = w, .cap = 3};
  CHECK(px_json_request_jumps(body, (size_t)n, NULL, NULL, &few, &r) == 0);
  CHECK(few.n == 3 && memcmp(few.v, all.v, 3 * sizeof(*v)) == 0);
  const char *bad = "{\"a\":[1,}";
  CHECK(px_json_request_jumps(bad, strlen(bad), NULL, NULL, &few, &r) < 0 &&
        r.jumps == NULL);
}

int main(void) {
  test_jumps();
  test_strings();
  test_string_blocks();
  test_documents();
  test_members();
  test_caps();
  test_duplicates();
  test_syntax();
  test_depth();
  test_budget();
  test_budget_sweep();
  return check_report("test_json");
}
