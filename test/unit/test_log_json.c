/* test_log_json.c - log_format = json: every diagnostic line is one JSON
 * object (parsed back with jansson) with time, level, pid, the request id when
 * there is one, the message and the fields, whatever bytes the message holds;
 * access_log = stdout. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "proxai/log.h"

/* Run fn with file descriptor fd (1 or 2) captured; returns the text. */
static char *capture(int which, void (*fn)(void)) {
  char path[] = "/tmp/proxai_test_logjson_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  fflush(which == 1 ? stdout : stderr);
  int saved = dup(which);
  dup2(fd, which);
  fn();
  dup2(saved, which);
  close(saved);
  char *text = NULL;
  off_t n = lseek(fd, 0, SEEK_END);
  if (n >= 0 && (text = calloc(1, (size_t)n + 1)) != NULL &&
      pread(fd, text, (size_t)n, 0) != n) {
    free(text);
    text = NULL;
  }
  close(fd);
  unlink(path);
  return text;
}

/* The lines of text as JSON objects; *n lines. NULL entries did not parse. */
static json_t **parse_lines(char *text, size_t *n) {
  static json_t *out[64];
  *n = 0;
  for (char *l = text, *nl; l && *l && *n < 64; l = nl ? nl + 1 : NULL) {
    nl = strchr(l, '\n');
    if (nl) *nl = '\0';
    out[(*n)++] = json_loads(l, JSON_REJECT_DUPLICATES, NULL);
    if (!nl) break;
  }
  return out;
}

static const char *str(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

static void log_some(void) {
  px_log_error("plain %d", 42);
  px_log_ctx(PX_LOG_WARN, "rid-7", NULL,
             "quote \" backslash \\ newline\n tab\t bell\a end");
  const char *const fields[] = {"upstream", "up\"stream", "error_type", NULL, NULL};
  px_log_ctx(PX_LOG_WARN, "rid-8", fields, "bad utf-8 \xff\xfe and cut \xe2\x82");
  px_log_ctx(PX_LOG_INFO, "", NULL, "empty request id is none");
  px_log_debug("filtered out");
  static char big[10000];
  memset(big, 'y', sizeof(big) - 1);
  big[100] = '"';
  px_log_error("%s", big);
}

static void test_json_lines(void) {
  CHECK(px_log_init(PX_LOG_INFO, "off") == 0);
  px_log_set_format(PX_LOG_JSON);
  char *text = capture(2, log_some);
  CHECK(text != NULL);
  if (text == NULL) return;
  size_t n;
  json_t **l = parse_lines(text, &n);
  CHECK(n == 5);
  for (size_t i = 0; i < n; i++) {
    CHECK(json_is_object(l[i]));
    CHECK(str(l[i], "time") && strlen(str(l[i], "time")) == 24 &&
          str(l[i], "time")[23] == 'Z');
    CHECK(json_integer_value(json_object_get(l[i], "pid")) == (json_int_t)getpid());
    CHECK(str(l[i], "level") != NULL);
    CHECK(str(l[i], "message") != NULL);
  }
  if (n == 5 && l[0] && l[1] && l[2] && l[3] && l[4]) {
    CHECK(strcmp(str(l[0], "level"), "error") == 0);
    CHECK(strcmp(str(l[0], "message"), "plain 42") == 0);
    CHECK(json_object_get(l[0], "request_id") == NULL);
    CHECK(json_object_get(l[0], "fields") == NULL);

    CHECK(strcmp(str(l[1], "level"), "warn") == 0);
    CHECK(strcmp(str(l[1], "request_id"), "rid-7") == 0);
    /* escaped, not replaced: the message comes back byte for byte */
    CHECK(strcmp(str(l[1], "message"),
                 "quote \" backslash \\ newline\n tab\t bell\a end") == 0);

    CHECK(strcmp(str(l[2], "request_id"), "rid-8") == 0);
    CHECK(strcmp(str(l[2], "message"),
                 "bad utf-8 \xef\xbf\xbd\xef\xbf\xbd and cut "
                 "\xef\xbf\xbd\xef\xbf\xbd") == 0);
    json_t *f = json_object_get(l[2], "fields");
    CHECK(json_is_object(f) && json_object_size(f) == 2);
    CHECK(strcmp(json_string_value(json_object_get(f, "upstream")), "up\"stream") == 0);
    CHECK(json_is_null(json_object_get(f, "error_type")));

    CHECK(strcmp(str(l[3], "level"), "info") == 0);
    CHECK(json_object_get(l[3], "request_id") == NULL);

    /* a long message is cut, still one valid line */
    const char *m = str(l[4], "message");
    CHECK(m && strlen(m) > 1000 && strlen(m) < 4096 && m[100] == '"');
  }
  for (size_t i = 0; i < n; i++) json_decref(l[i]);
  free(text);

  /* text stays the default shape, with the request id in front */
  px_log_set_format(PX_LOG_TEXT);
  text = capture(2, log_some);
  CHECK(text && strstr(text, " warn [") && strstr(text, "] rid-7: quote \" backslash"));
  CHECK(text && text[0] != '{');
  free(text);
  px_log_done();
}

static void access_one(void) {
  px_access_rec_t r = {0};
  r.request_id = "rid-9";
  r.status = 200;
  r.input_tokens = r.output_tokens = -1;
  r.ttfb_ms = -1;
  px_access_log(&r);
}

static void test_access_stdout(void) {
  CHECK(px_log_init(PX_LOG_INFO, "stdout") == 0);
  char *out = capture(1, access_one);
  char *err = capture(2, access_one);
  size_t n;
  json_t **l = out ? parse_lines(out, &n) : NULL;
  CHECK(l && n == 1 && l[0] && strcmp(str(l[0], "request_id"), "rid-9") == 0);
  if (l) json_decref(l[0]);
  CHECK(err && err[0] == '\0');
  free(out);
  free(err);
  px_log_done();
}

int main(void) {
  test_json_lines();
  test_access_stdout();
  return check_report("test_log_json");
}
