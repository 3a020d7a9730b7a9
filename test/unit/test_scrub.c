/* test_scrub.c - configured secrets overwritten where an upstream's error
 * text is relayed (scrub.h): whole, or as the part providers echo in their
 * authentication errors; ordinary text untouched; lengths kept; a secret
 * registered by a configuration is scrubbed from log lines. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "proxai/config.h"
#include "proxai/log.h"
#include "proxai/scrub.h"

#define KEY "fake-key-test-only-not-a-real-key-placeholder-wxyz"

/* s with its first occurrence of word overwritten with '*' (static) */
static const char *starred(const char *s, const char *word) {
  static char b[1024];
  snprintf(b, sizeof(b), "%s", s);
  char *w = strstr(b, word);
  if (w) memset(w, '*', strlen(word));
  return b;
}

/* s scrubbed: returns a static copy */
static const char *scrubbed(const char *s) {
  static char b[1024];
  snprintf(b, sizeof(b), "%s", s);
  size_t n = strlen(b);
  px_scrub(b, n);
  CHECK(strlen(b) == n); /* length-preserving */
  return b;
}

static void test_shapes(void) {
  px_scrub_add(KEY, strlen(KEY));
  px_scrub_add("short", 5); /* under the minimum: ignored */
  /* OpenAI's echo shape: a prefix, stars, the last four; a full stop after
   * it (the secrets here are plainly fake, not shaped like a provider's) */
  const char *echo =
      "Incorrect API key provided: fake-key-****************************wxyz. You";
  CHECK(strcmp(scrubbed(echo),
               starred(echo, "fake-key-****************************wxyz")) == 0);
  const char *cases[][2] = {
      {"key fake-key-te...wxyz is bad", "fake-key-te...wxyz"},
      {"key ****wxyz", "****wxyz"},
      {"key fake-key-tes**", "fake-key-tes**"},
      {"\"" KEY "\"", KEY},
      {"x=" KEY "&y", KEY},
      /* a long enough piece of a secret without a mask */
      {"prefix fake-key-test-o shown", "fake-key-test-o"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char want[1024];
    snprintf(want, sizeof(want), "%s", starred(cases[i][0], cases[i][1]));
    CHECK(strcmp(scrubbed(cases[i][0]), want) == 0);
  }
  /* ordinary text stays as it is; a JSON number stays one even when its
   * digits are inside a secret */
  px_scrub_add("tok-12345678-abcdef", 19);
  const char *plain[] = {
      "You can find your API key at https://platform.openai.com/account/api-keys.",
      "Please try again... later",
      "rate limit *** reached",
      "short word",
      "model gpt-4o-mini-2024-07-18 not found",
      "{\"created\":12345678,\"n\":-12345678.0}"};
  for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
    CHECK(strcmp(scrubbed(plain[i]), plain[i]) == 0);
  CHECK(px_scrub(NULL, 0) == 0);
}

static void log_it(void) {
  px_log_error("upstream said: Incorrect API key provided: fake-anth-t***qrst.");
}

static void test_config_and_log(void) {
  char err[256];
  px_config_t *c = px_config_parse(
      "[upstream a]\nprotocol = anthropic_messages\n"
      "base_url = http://127.0.0.1:1\n"
      "api_key = fake-anth-test-only-not-a-real-key-placeholder-qrst\n"
      "header = X-Extra-Token: Bearer tok-0123456789\n"
      "[route *]\nupstream = a\n[key k]\nsecret = client-secret-1\n"
      "[admin]\ntoken = admin-token-abcdef\n",
      "t", err, sizeof(err));
  CHECK(c != NULL);
  CHECK(strcmp(scrubbed("admin admin-token-abcdef"),
               starred("admin admin-token-abcdef", "admin-token-abcdef")) == 0);
  CHECK(strcmp(scrubbed("bad client-secret-1 and tok-0123456789"),
               "bad *************** and **************") == 0);
  /* a log line */
  char path[] = "/tmp/proxai_test_scrub_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  log_it();
  dup2(saved, 2);
  close(saved);
  char text[512] = {0};
  CHECK(pread(fd, text, sizeof(text) - 1, 0) > 0);
  close(fd);
  unlink(path);
  CHECK(strstr(text, "Incorrect API key provided: ******************.") != NULL);
  CHECK(strstr(text, "qrst") == NULL && strstr(text, "fake-anth") == NULL);
  px_config_unref(c);
}

int main(void) {
  px_log_init(PX_LOG_INFO, "off");
  test_shapes();
  test_config_and_log();
  return check_report("scrub");
}
