/* test_log_metrics.c - Prometheus text rendered and parsed back; access log
 * lines parsed as JSON; error log level filtering and line shape. */
#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "proxai/log.h"
#include "proxai/metrics.h"

/* ---- a small parser of the text exposition format ---- */

#define MAX_SAMPLES 512
#define MAX_LBL 4

typedef struct sample {
  char name[128];
  int nl;
  char lname[MAX_LBL][32];
  char lval[MAX_LBL][128]; /* unescaped */
  char value[64];
} sample_t;

static sample_t samples[MAX_SAMPLES];
static int nsamples;
static char types[64][2][128]; /* family name, type */
static int ntypes;

/* Parse every line; any syntax error is a failure. Also checks that each
 * sample's family has HELP and TYPE lines before it. */
static int parse_exposition(const char *text) {
  nsamples = ntypes = 0;
  int helps = 0;
  const char *p = text;
  while (*p) {
    const char *eol = strchr(p, '\n');
    if (!eol) return -1; /* every line ends with \n */
    if (*p == '#') {
      char kw[8], name[128], rest[128];
      if (sscanf(p, "# %7s %127s %127[^\n]", kw, name, rest) != 3) return -2;
      if (strcmp(kw, "TYPE") == 0) {
        if (ntypes >= 64) return -3;
        snprintf(types[ntypes][0], 128, "%s", name);
        snprintf(types[ntypes][1], 128, "%s", rest);
        ntypes++;
      } else if (strcmp(kw, "HELP") == 0) {
        helps++;
      } else {
        return -4;
      }
      p = eol + 1;
      continue;
    }
    if (nsamples >= MAX_SAMPLES) return -5;
    sample_t *s = &samples[nsamples++];
    memset(s, 0, sizeof(*s));
    size_t n = 0;
    while (p < eol && (isalnum((unsigned char)*p) || *p == '_' || *p == ':')) {
      if (n + 1 >= sizeof(s->name)) return -6;
      s->name[n++] = *p++;
    }
    if (n == 0) return -7;
    if (*p == '{') {
      p++;
      while (*p != '}') {
        if (s->nl >= MAX_LBL) return -8;
        n = 0;
        while (isalnum((unsigned char)*p) || *p == '_') {
          if (n + 1 >= 32) return -9;
          s->lname[s->nl][n++] = *p++;
        }
        if (n == 0 || *p++ != '=' || *p++ != '"') return -10;
        n = 0;
        while (*p != '"') {
          char c = *p++;
          if (c == '\n' || c == 0) return -11;
          if (c == '\\') {
            c = *p++;
            if (c == 'n')
              c = '\n';
            else if (c != '\\' && c != '"')
              return -12;
          }
          if (n + 1 >= 128) return -13;
          s->lval[s->nl][n++] = c;
        }
        p++;
        s->nl++;
        if (*p == ',')
          p++;
        else if (*p != '}')
          return -14;
      }
      p++;
    }
    if (*p++ != ' ') return -15;
    n = 0;
    while (p < eol) {
      if (n + 1 >= sizeof(s->value)) return -16;
      s->value[n++] = *p++;
    }
    char *end;
    strtod(s->value, &end);
    if (n == 0 || (*end && strcmp(s->value, "+Inf") != 0)) return -17;
    /* The family (name minus histogram suffixes) was typed before. */
    char fam[128];
    snprintf(fam, sizeof(fam), "%s", s->name);
    int typed = 0;
    for (int pass = 0; pass < 2 && !typed; pass++) {
      for (int i = 0; i < ntypes; i++)
        if (strcmp(types[i][0], fam) == 0) typed = 1;
      static const char *const suf[] = {"_bucket", "_sum", "_count"};
      for (int k = 0; k < 3 && !typed; k++) {
        size_t fl = strlen(fam), sl = strlen(suf[k]);
        if (fl > sl && strcmp(fam + fl - sl, suf[k]) == 0) {
          fam[fl - sl] = 0;
          break;
        }
      }
    }
    if (!typed) return -18;
    p = eol + 1;
  }
  if (helps != ntypes) return -19;
  return 0;
}

static const char *type_of(const char *fam) {
  for (int i = 0; i < ntypes; i++)
    if (strcmp(types[i][0], fam) == 0) return types[i][1];
  return NULL;
}

/* Value of the sample with this name and label pairs (NULL-terminated
 * name, value list, compared unescaped); NULL when absent. */
static const char *find(const char *name, const char *const *kv) {
  for (int i = 0; i < nsamples; i++) {
    sample_t *s = &samples[i];
    if (strcmp(s->name, name) != 0) continue;
    int want = 0, ok = 1;
    for (; kv[want * 2]; want++) {
      int hit = 0;
      for (int k = 0; k < s->nl; k++)
        if (strcmp(s->lname[k], kv[want * 2]) == 0 &&
            strcmp(s->lval[k], kv[want * 2 + 1]) == 0)
          hit = 1;
      if (!hit) ok = 0;
    }
    if (ok && want == s->nl) return s->value;
  }
  return NULL;
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})
#define CHECK_VAL(name, kv, expect)                                              \
  do {                                                                           \
    const char *v_ = find(name, kv);                                             \
    if (!v_ || strcmp(v_, expect) != 0) {                                        \
      fprintf(stderr, "%s:%d: %s = %s, expected %s\n", __FILE__, __LINE__, name, \
              v_ ? v_ : "(absent)", expect);                                     \
      failures++;                                                                \
    }                                                                            \
  } while (0)

static int render(px_buf_t *b) {
  px_buf_init(b, 1 << 20);
  int rc = px_metrics_render(b);
  if (rc == 0) rc = px_buf_append(b, "", 1) == 0 ? 0 : -1;
  if (rc == 0) b->len--;
  return rc;
}

static void test_metrics(void) {
  px_metrics_reset();
  px_metrics_request("openai_chat_completions", "openai", 200, 0.003, 0.002);
  px_metrics_request("openai_chat_completions", "openai", 200, 0.2, -1);
  px_metrics_request("openai_chat_completions", "openai", 200, 7.0, 0.25);
  px_metrics_request("openai_chat_completions", "anthropic", 502, 100.0, -1);
  px_metrics_request(NULL, NULL, 404, 0.001, -1);
  px_metrics_attempt("openai", NULL);
  px_metrics_attempt("openai", NULL);
  px_metrics_attempt("openai", "timeout");
  px_metrics_tokens("team-a", "openai", 10, 20);
  px_metrics_tokens("team-a", "openai", 5, -1);
  px_metrics_tokens(NULL, "openai", 0, 3);
  px_metrics_gauge_add(PX_G_CONNECTIONS, 3);
  px_metrics_gauge_add(PX_G_CONNECTIONS, -1);
  px_metrics_gauge_add(PX_G_ACTIVE_STREAMS, 4);
  px_metrics_gauge_add(PX_G_PAUSED_STREAMS, 1);

  px_buf_t b;
  CHECK(render(&b) == 0);
  int prc = parse_exposition(b.data);
  if (prc != 0) fprintf(stderr, "parse error %d in:\n%s\n", prc, b.data);
  CHECK(prc == 0);

  /* Exact counter lines, as text. */
  CHECK(strstr(b.data,
               "\nproxai_requests_total{inbound=\"openai_chat_completions\","
               "upstream=\"openai\",status=\"200\"} 3\n"));
  CHECK(strstr(b.data, "# TYPE proxai_requests_total counter\n"));
  CHECK(strstr(b.data,
               "# TYPE proxai_open_connections gauge\nproxai_open_connections 2\n"));

  const char *chat = "openai_chat_completions";
  CHECK_VAL("proxai_requests_total",
            L("inbound", chat, "upstream", "anthropic", "status", "502"), "1");
  CHECK_VAL("proxai_requests_total",
            L("inbound", "none", "upstream", "none", "status", "404"), "1");

  /* Duration histogram, cumulative: 0.003 0.2 7 100 for chat. */
  const char *H = "proxai_request_duration_seconds_bucket";
  CHECK(type_of("proxai_request_duration_seconds") &&
        strcmp(type_of("proxai_request_duration_seconds"), "histogram") == 0);
  CHECK_VAL(H, L("inbound", chat, "le", "0.005"), "1");
  CHECK_VAL(H, L("inbound", chat, "le", "0.1"), "1");
  CHECK_VAL(H, L("inbound", chat, "le", "0.25"), "2");
  CHECK_VAL(H, L("inbound", chat, "le", "5"), "2");
  CHECK_VAL(H, L("inbound", chat, "le", "10"), "3");
  CHECK_VAL(H, L("inbound", chat, "le", "60"), "3");
  CHECK_VAL(H, L("inbound", chat, "le", "+Inf"), "4");
  CHECK_VAL("proxai_request_duration_seconds_count", L("inbound", chat), "4");
  const char *sum = find("proxai_request_duration_seconds_sum", L("inbound", chat));
  CHECK(sum && strtod(sum, NULL) > 107.2029 && strtod(sum, NULL) < 107.2031);
  CHECK_VAL(H, L("inbound", "none", "le", "0.005"), "1");
  /* Buckets never decrease, and +Inf equals _count. */
  {
    long prev = -1;
    int nb = 0;
    for (int i = 0; i < nsamples; i++) {
      if (strcmp(samples[i].name, H) != 0 || strcmp(samples[i].lval[0], chat) != 0)
        continue;
      long v = strtol(samples[i].value, NULL, 10);
      CHECK(v >= prev);
      prev = v;
      nb++;
    }
    CHECK(nb == 14);
  }

  /* TTFT: only the observations >= 0 (0.002 and 0.25). */
  const char *T = "proxai_time_to_first_token_seconds_bucket";
  CHECK_VAL(T, L("inbound", chat, "le", "0.005"), "1");
  CHECK_VAL(T, L("inbound", chat, "le", "0.25"), "2");
  CHECK_VAL(T, L("inbound", chat, "le", "+Inf"), "2");
  CHECK_VAL("proxai_time_to_first_token_seconds_count", L("inbound", chat), "2");
  CHECK_VAL("proxai_time_to_first_token_seconds_count", L("inbound", "none"), "0");

  CHECK_VAL("proxai_upstream_attempts_total", L("upstream", "openai", "result", "ok"),
            "2");
  CHECK_VAL("proxai_upstream_attempts_total",
            L("upstream", "openai", "result", "timeout"), "1");
  CHECK_VAL("proxai_tokens_total",
            L("key", "team-a", "upstream", "openai", "direction", "in"), "15");
  CHECK_VAL("proxai_tokens_total",
            L("key", "team-a", "upstream", "openai", "direction", "out"), "20");
  CHECK_VAL("proxai_tokens_total",
            L("key", "none", "upstream", "openai", "direction", "out"), "3");
  CHECK(!find("proxai_tokens_total",
              L("key", "none", "upstream", "openai", "direction", "in")));
  CHECK_VAL("proxai_active_streams", L(NULL), "4");
  CHECK_VAL("proxai_paused_streams", L(NULL), "1");
  px_buf_free(&b);

  /* A buffer too small fails instead of truncating silently. */
  px_buf_t small;
  px_buf_init(&small, 64);
  CHECK(px_metrics_render(&small) < 0);
  px_buf_free(&small);

  /* Reset empties every series and gauge. */
  px_metrics_reset();
  CHECK(render(&b) == 0);
  CHECK(parse_exposition(b.data) == 0);
  CHECK(!find("proxai_requests_total",
              L("inbound", chat, "upstream", "openai", "status", "200")));
  CHECK_VAL("proxai_open_connections", L(NULL), "0");
  px_buf_free(&b);
}

static void test_metrics_escaping(void) {
  px_metrics_reset();
  const char *evil = "a\"b\\c\nd";
  px_metrics_request("x", evil, 200, 0.1, -1);
  px_metrics_attempt(evil, "http_5xx");
  px_buf_t b;
  CHECK(render(&b) == 0);
  CHECK(strstr(b.data, "upstream=\"a\\\"b\\\\c\\nd\"") != NULL);
  int prc = parse_exposition(b.data);
  CHECK(prc == 0);
  CHECK_VAL("proxai_requests_total", L("inbound", "x", "upstream", evil, "status", "200"),
            "1");
  CHECK_VAL("proxai_upstream_attempts_total", L("upstream", evil, "result", "http_5xx"),
            "1");
  px_buf_free(&b);

  /* Many series: the index grows and every series is still found. */
  px_metrics_reset();
  char name[32];
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof(name), "up%d", i);
    for (int k = 0; k <= i % 3; k++) px_metrics_attempt(name, NULL);
  }
  CHECK(render(&b) == 0);
  CHECK(parse_exposition(b.data) == 0);
  for (int i = 0; i < 300; i++) {
    snprintf(name, sizeof(name), "up%d", i);
    char want[4];
    snprintf(want, sizeof(want), "%d", i % 3 + 1);
    CHECK_VAL("proxai_upstream_attempts_total", L("upstream", name, "result", "ok"),
              want);
  }
  px_buf_free(&b);
  px_metrics_reset();
}

/* ---- logs ---- */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 20);
  size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  (void)n;
  fclose(f);
  return buf;
}

static int is_iso_ms(const char *s) {
  /* 2026-11-21T21:00:00.123Z */
  const char *pat = "dddd-dd-ddTdd:dd:dd.dddZ";
  for (size_t i = 0; pat[i]; i++) {
    if (pat[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != pat[i]) return 0;
  }
  return 1;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; s && *s; s++) n += *s == '\n';
  return n;
}

static void test_access_log(void) {
  char path[] = "/tmp/proxai_test_access_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);

  CHECK(px_log_init(PX_LOG_INFO, path) == 0);
  px_access_rec_t r = {
      .request_id = "req-1",
      .key_name = "team-a",
      .method = "POST",
      .path = "/v1/chat/completions",
      .inbound = "openai_chat_completions",
      .route = "gpt-*",
      .upstream = "openai",
      .model = "gpt-4o \"quoted\" \\ \n\t\x01 \xc3\xa9",
      .upstream_model = "gpt-4o",
      .stream = 1,
      .status = 200,
      .bytes_in = 1234,
      .bytes_out = 5678901234ULL,
      .input_tokens = 10,
      .output_tokens = 20,
      .duration_ms = 12.5,
      .ttfb_ms = 3.25,
      .attempts = 2,
      .error_type = NULL,
      .cost_nano = 225000, /* 10 in at 2.50 + 20 out at 10.00 per million */
      .team = "platform",
      .user = "user-\"7\"",
  };
  px_access_log(&r);
  px_access_rec_t z = {.status = 404,
                       .input_tokens = -1,
                       .output_tokens = -1,
                       .ttfb_ms = -1,
                       .cost_nano = -1};
  px_access_log(&z);
  char *text = slurp(path);
  CHECK(text && count_lines(text) == 2);

  json_t *lines[2] = {NULL, NULL};
  const char *p = text ? text : "";
  for (int i = 0; i < 2 && *p; i++) {
    const char *eol = strchr(p, '\n');
    if (!eol) break;
    json_error_t err;
    lines[i] = json_loadb(p, (size_t)(eol - p), 0, &err);
    if (!lines[i]) fprintf(stderr, "line %d not JSON: %s\n", i, err.text);
    CHECK(lines[i] && json_is_object(lines[i]));
    p = eol + 1;
  }
  json_t *a = lines[0], *n = lines[1];
  if (a) {
    const char *t = json_string_value(json_object_get(a, "time"));
    CHECK(t && strlen(t) == 24 && is_iso_ms(t));
    CHECK(!strcmp(json_string_value(json_object_get(a, "request_id")) ?: "", "req-1"));
    CHECK(!strcmp(json_string_value(json_object_get(a, "key")) ?: "", "team-a"));
    CHECK(!strcmp(json_string_value(json_object_get(a, "method")) ?: "", "POST"));
    CHECK(!strcmp(json_string_value(json_object_get(a, "path")) ?: "",
                  "/v1/chat/completions"));
    CHECK(!strcmp(json_string_value(json_object_get(a, "inbound")) ?: "",
                  "openai_chat_completions"));
    CHECK(!strcmp(json_string_value(json_object_get(a, "route")) ?: "", "gpt-*"));
    CHECK(!strcmp(json_string_value(json_object_get(a, "upstream")) ?: "", "openai"));
    CHECK(!strcmp(json_string_value(json_object_get(a, "model")) ?: "", r.model));
    CHECK(
        !strcmp(json_string_value(json_object_get(a, "upstream_model")) ?: "", "gpt-4o"));
    CHECK(json_is_true(json_object_get(a, "stream")));
    CHECK(json_integer_value(json_object_get(a, "status")) == 200);
    CHECK(json_integer_value(json_object_get(a, "bytes_in")) == 1234);
    CHECK(json_integer_value(json_object_get(a, "bytes_out")) == 5678901234LL);
    CHECK(json_integer_value(json_object_get(a, "input_tokens")) == 10);
    CHECK(json_integer_value(json_object_get(a, "output_tokens")) == 20);
    CHECK(json_number_value(json_object_get(a, "duration_ms")) == 12.5);
    CHECK(json_number_value(json_object_get(a, "ttfb_ms")) == 3.25);
    CHECK(json_integer_value(json_object_get(a, "attempts")) == 2);
    CHECK(json_is_null(json_object_get(a, "error_type")));
    /* cost_usd: an exact decimal, never a float's rounding */
    json_t *cost = json_object_get(a, "cost_usd");
    CHECK(json_is_real(cost) && json_real_value(cost) == 0.000225);
    CHECK(!strcmp(json_string_value(json_object_get(a, "team")) ?: "", "platform"));
    CHECK(!strcmp(json_string_value(json_object_get(a, "user")) ?: "", "user-\"7\""));
    CHECK(json_object_size(a) == 23);
  }
  if (n) {
    static const char *const nulls[] = {
        "request_id",   "key",           "method", "path",           "inbound",
        "route",        "upstream",      "model",  "upstream_model", "error_type",
        "input_tokens", "output_tokens", "ttfb_ms",       "cost_usd",       "team",
        "user"};
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++) {
      json_t *v = json_object_get(n, nulls[i]);
      if (!v || !json_is_null(v)) fprintf(stderr, "%s not null\n", nulls[i]);
      CHECK(v && json_is_null(v));
    }
    CHECK(json_is_false(json_object_get(n, "stream")));
    CHECK(json_integer_value(json_object_get(n, "status")) == 404);
    CHECK(json_integer_value(json_object_get(n, "attempts")) == 0);
  }
  json_decref(a);
  json_decref(n);
  free(text);

  /* "off" writes nothing; the file stays as it was. */
  CHECK(px_log_init(PX_LOG_INFO, "off") == 0);
  px_access_log(&r);
  text = slurp(path);
  CHECK(text && count_lines(text) == 2);
  free(text);

  /* A path that cannot be opened fails and keeps the old destination. */
  CHECK(px_log_init(PX_LOG_INFO, path) == 0);
  CHECK(px_log_init(PX_LOG_INFO, "/nonexistent-dir/x/access.log") < 0);
  px_access_log(&z);
  text = slurp(path);
  CHECK(text && count_lines(text) == 3);
  free(text);

  /* Reopen after a rotation: new lines go to a fresh file at the path. */
  char rotated[sizeof(path) + 8];
  snprintf(rotated, sizeof(rotated), "%s.1", path);
  CHECK(rename(path, rotated) == 0);
  CHECK(px_log_reopen() == 0);
  px_access_log(&z);
  text = slurp(path);
  CHECK(text && count_lines(text) == 1);
  free(text);
  text = slurp(rotated);
  CHECK(text && count_lines(text) == 3);
  free(text);

  px_log_done();
  unlink(path);
  unlink(rotated);
}

/* Run fn with stderr captured in a temp file; returns the captured text. */
static char *capture_stderr(void (*fn)(void)) {
  char path[] = "/tmp/proxai_test_err_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  dup2(saved, 2);
  close(saved);
  close(fd);
  char *text = slurp(path);
  unlink(path);
  return text;
}

static void log_all_levels(void) {
  px_log_error("an error %d", 1);
  px_log_warn("a warning %s", "w");
  px_log_info("some info");
  px_log_debug("some debug");
  px_log(PX_LOG_ERROR, "two\nlines");
}

static void log_long(void) {
  static char big[10000];
  memset(big, 'x', sizeof(big) - 1);
  px_log_error("%s", big);
}

static void test_error_log(void) {
  CHECK(px_log_init(PX_LOG_WARN, "off") == 0);
  CHECK(px_log_enabled(PX_LOG_ERROR));
  CHECK(px_log_enabled(PX_LOG_WARN));
  CHECK(!px_log_enabled(PX_LOG_INFO));
  CHECK(!px_log_enabled(PX_LOG_DEBUG));
  char *text = capture_stderr(log_all_levels);
  CHECK(text != NULL);
  if (text) {
    CHECK(count_lines(text) == 3);
    CHECK(strstr(text, "some info") == NULL);
    CHECK(strstr(text, "some debug") == NULL);
    char want[128];
    snprintf(want, sizeof(want), "Z error [%ld] an error 1\n", (long)getpid());
    CHECK(strstr(text, want) != NULL);
    snprintf(want, sizeof(want), "Z warn [%ld] a warning w\n", (long)getpid());
    CHECK(strstr(text, want) != NULL);
    /* A newline inside the message does not start a new line. */
    CHECK(strstr(text, "two lines\n") != NULL);
    CHECK(is_iso_ms(text));
    const char *second = strchr(text, '\n');
    CHECK(second && is_iso_ms(second + 1));
  }
  free(text);

  CHECK(px_log_init(PX_LOG_DEBUG, "off") == 0);
  text = capture_stderr(log_all_levels);
  CHECK(text && count_lines(text) == 5);
  CHECK(text && strstr(text, " debug [") && strstr(text, " info ["));
  free(text);

  /* A long message is cut, still one line. */
  CHECK(px_log_init(PX_LOG_ERROR, "off") == 0);
  text = capture_stderr(log_long);
  CHECK(text && count_lines(text) == 1 && strlen(text) < 4096 && strlen(text) > 1000);
  free(text);
  px_log_done();
}

int main(void) {
  test_metrics();
  test_metrics_escaping();
  test_access_log();
  test_error_log();
  return check_report("test_log_metrics");
}
