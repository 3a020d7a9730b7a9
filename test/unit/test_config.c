/* test_config.c - proxai.conf parsing, validation, defaults and lookups. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "proxai/config.h"

#define CHECK_STR(a, b)                                                                  \
  do {                                                                                   \
    const char *a_ = (a), *b_ = (b);                                                     \
    if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                               \
      fprintf(stderr, "%s:%d: CHECK_STR failed: %s\n  got:  %s\n  want: %s\n", __FILE__, \
              __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                     \
      failures++;                                                                        \
    }                                                                                    \
  } while (0)

static const char up_openai[] =
    "[upstream openai]\n"
    "protocol = openai_chat_completions\n"
    "base_url = http://127.0.0.1:9/v1\n";

/* Parse text that must fail; compare the whole error message. */
static void expect_err_at(int line, const char *text, const char *want) {
  char err[512] = "";
  px_config_t *c = px_config_parse(text, "t.conf", err, sizeof err);
  if (c != NULL) {
    fprintf(stderr, "test line %d: config unexpectedly valid, wanted: %s\n", line, want);
    failures++;
    px_config_unref(c);
    return;
  }
  if (strcmp(err, want) != 0) {
    fprintf(stderr, "test line %d: wrong error\n  got:  %s\n  want: %s\n", line, err,
            want);
    failures++;
  }
}
#define EXPECT_ERR(text, want) expect_err_at(__LINE__, text, want)

static px_config_t *parse_ok_at(int line, const char *text) {
  char err[512] = "";
  px_config_t *c = px_config_parse(text, "t.conf", err, sizeof err);
  if (c == NULL) {
    fprintf(stderr, "test line %d: config rejected: %s\n", line, err);
    failures++;
  }
  return c;
}
#define PARSE_OK(text) parse_ok_at(__LINE__, text)

static void test_units(void) {
  uint64_t v = 0;
  CHECK(px_parse_duration_ms("150ms", &v) == 0 && v == 150);
  CHECK(px_parse_duration_ms("5s", &v) == 0 && v == 5000);
  CHECK(px_parse_duration_ms("2m", &v) == 0 && v == 120000);
  CHECK(px_parse_duration_ms("10", &v) == 0 && v == 10000);
  CHECK(px_parse_duration_ms("0", &v) == 0 && v == 0);
  CHECK(px_parse_duration_ms("", &v) == -1);
  CHECK(px_parse_duration_ms("s", &v) == -1);
  CHECK(px_parse_duration_ms("5h", &v) == 0 && v == 18000000);
  CHECK(px_parse_duration_ms("30d", &v) == 0 && v == 2592000000ull);
  CHECK(px_parse_duration_ms("5d ", &v) == -1);
  CHECK(px_parse_duration_ms("-5s", &v) == -1);
  CHECK(px_parse_duration_ms("1.5s", &v) == -1);
  CHECK(px_parse_duration_ms("5 s", &v) == -1);
  CHECK(px_parse_duration_ms("99999999999999999999", &v) == -1);
  CHECK(px_parse_duration_ms("18446744073709551615m", &v) == -1);

  CHECK(px_parse_size("1000", &v) == 0 && v == 1000);
  CHECK(px_parse_size("64k", &v) == 0 && v == 65536);
  CHECK(px_parse_size("16m", &v) == 0 && v == 16u * 1024 * 1024);
  CHECK(px_parse_size("1g", &v) == 0 && v == 1024ull * 1024 * 1024);
  CHECK(px_parse_size("2G", &v) == 0 && v == 2048ull * 1024 * 1024);
  CHECK(px_parse_size("16mb", &v) == -1);
  CHECK(px_parse_size("k", &v) == -1);
  CHECK(px_parse_size("1t", &v) == -1);
  CHECK(px_parse_size("18446744073709551615k", &v) == -1);
}

static void test_glob(void) {
  CHECK(px_glob_match("*", ""));
  CHECK(px_glob_match("*", "gpt-4o"));
  CHECK(px_glob_match("gpt-4o", "gpt-4o"));
  CHECK(!px_glob_match("gpt-4o", "gpt-4o-mini"));
  CHECK(!px_glob_match("gpt-4o", "gpt-4"));
  CHECK(px_glob_match("gpt-*", "gpt-4o"));
  CHECK(px_glob_match("gpt-*", "gpt-"));
  CHECK(!px_glob_match("gpt-*", "gpt"));
  CHECK(px_glob_match("claude-*-sonnet*", "claude-3-5-sonnet-20241022"));
  CHECK(!px_glob_match("claude-*-sonnet", "claude-3-5-sonnet-20241022"));
  CHECK(px_glob_match("gpt-?o", "gpt-4o"));
  CHECK(!px_glob_match("gpt-?o", "gpt-o"));
  CHECK(!px_glob_match("gpt-?o", "gpt-45o"));
  CHECK(px_glob_match("*a*b*c", "xxaxxbxxbxc"));
  CHECK(!px_glob_match("*a*b*c", "xxaxxbxxbx"));
  CHECK(px_glob_match("**x", "abx"));
  CHECK(!px_glob_match("", "a"));
  CHECK(px_glob_match("", ""));
}

static void test_full(void) {
  setenv("PX_T_OPENAI_KEY", "sk-test-openai", 1);
  setenv("PX_T_TEAM", "team-secret-1", 1);
  setenv("PX_T_HOST", "127.0.0.1", 1);
  const char *text =
      "; leading comment\n"
      "# hash comment\n"
      "\n"
      "[server]\n"
      "listen = [::1]:8443        ; inline comment\n"
      "workers = 0\n"
      "max_connections = 500\n"
      "max_body = 1m\n"
      "max_header = 8k\n"
      "header_timeout = 1500ms\n"
      "idle_timeout = 2m\n"
      "shutdown_timeout = 3\n"
      "access_log = /tmp/proxai-access.log\n"
      "log_level = debug\n"
      "\n"
      "[route claude-*]\n" /* line 16: upstream defined later */
      "upstream = anthropic\n"
      "model = claude-sonnet-4-5\n"
      "fallback = openai\n"
      "fallback = backup\n"
      "max_tokens = 8192\n"
      "\n"
      "[route gpt-4o]\n"
      "upstream = openai\n"
      "\n"
      "[route *]\n"
      "upstream = backup\n"
      "\n"
      "[upstream openai]\n"
      "protocol = openai_chat_completions\n"
      "base_url = https://api.openai.com/v1///\n"
      "api_key = ${PX_T_OPENAI_KEY}\n"
      "header = OpenAI-Organization:   org-123\n"
      "header = X-Trace: a=b;c   ; comment after the value\n"
      "connect_timeout = 2s\n"
      "first_byte_timeout = 30s\n"
      "idle_timeout = 45s\n"
      "max_connections = 64\n"
      "retries = 0\n"
      "http2 = yes\n"
      "\n"
      "[upstream anthropic]\n"
      "protocol = anthropic_messages\n"
      "base_url = http://${PX_T_HOST}:9999/\n"
      "anthropic_version = 2024-01-01\n"
      "\n"
      "[upstream backup]\n"
      "protocol: openai_responses\n"
      "base_url = http://localhost:1/v1\n"
      "api_key =\n"
      "\n"
      "[key team-a]\n"
      "secret = ${PX_T_TEAM}\n"
      "models = gpt-* ,  claude-*\n"
      "rpm = 600\n"
      "tpm = 200000\n"
      "\n"
      "[key open]\n"
      "secret = literal-$-secret\n";
  px_config_t *c = PARSE_OK(text);
  if (c == NULL) return;
  CHECK_STR(c->path, "t.conf");
  CHECK(c->refs == 1);
  CHECK_STR(c->server.listen, "[::1]:8443");
  CHECK(c->server.workers == 0);
  CHECK(c->server.max_connections == 500);
  CHECK(c->server.max_body == 1024 * 1024);
  CHECK(c->server.max_header == 8192);
  CHECK(c->server.header_timeout_ms == 1500);
  CHECK(c->server.idle_timeout_ms == 120000);
  CHECK(c->server.shutdown_timeout_ms == 3000);
  CHECK_STR(c->server.access_log, "/tmp/proxai-access.log");
  CHECK(c->server.log_level == PX_LOG_DEBUG);

  CHECK(c->nupstreams == 3);
  CHECK(c->nroutes == 3);
  CHECK(c->nkeys == 2);
  CHECK(c->unconfigured_message == NULL);
  if (c->nupstreams != 3 || c->nroutes != 3 || c->nkeys != 2) goto out;

  const px_upstream_conf_t *o = &c->upstreams[0], *a = &c->upstreams[1],
                           *b = &c->upstreams[2];
  CHECK_STR(o->name, "openai");
  CHECK(o->protocol == PX_PROTO_CHAT);
  CHECK_STR(o->base_url, "https://api.openai.com/v1");
  CHECK_STR(o->api_key, "sk-test-openai");
  CHECK(o->nheaders == 2);
  if (o->nheaders == 2) {
    CHECK_STR(o->headers[0], "OpenAI-Organization: org-123");
    CHECK_STR(o->headers[1], "X-Trace: a=b;c");
  }
  CHECK(o->connect_timeout_ms == 2000);
  CHECK(o->first_byte_timeout_ms == 30000);
  CHECK(o->idle_timeout_ms == 45000);
  CHECK(o->max_connections == 64);
  CHECK(o->retries == 0);
  CHECK(o->http2 == 1);

  CHECK_STR(a->name, "anthropic");
  CHECK(a->protocol == PX_PROTO_ANTHROPIC);
  CHECK_STR(a->base_url, "http://127.0.0.1:9999");
  CHECK(a->api_key == NULL);
  CHECK_STR(a->anthropic_version, "2024-01-01");
  /* defaults */
  CHECK(a->connect_timeout_ms == 5000);
  CHECK(a->first_byte_timeout_ms == 120000);
  CHECK(a->idle_timeout_ms == 120000);
  CHECK(a->max_connections == 256);
  CHECK(a->retries == 2);
  CHECK(a->http2 == 0);
  CHECK(a->nheaders == 0);

  CHECK(b->protocol == PX_PROTO_RESPONSES);
  CHECK(b->api_key == NULL); /* empty means none */
  CHECK_STR(b->anthropic_version, "2023-06-01");

  const px_route_conf_t *r0 = &c->routes[0];
  CHECK_STR(r0->pattern, "claude-*");
  CHECK(r0->upstream == 1);
  CHECK_STR(r0->model, "claude-sonnet-4-5");
  CHECK(r0->nfallbacks == 2);
  if (r0->nfallbacks == 2) CHECK(r0->fallbacks[0].upstream == 0 && r0->fallbacks[1].upstream == 2);
  CHECK(r0->max_tokens == 8192);
  CHECK_STR(c->routes[1].pattern, "gpt-4o");
  CHECK(c->routes[1].upstream == 0);
  CHECK(c->routes[1].model == NULL);
  CHECK(c->routes[1].nfallbacks == 0);
  CHECK(c->routes[1].max_tokens == 0);
  CHECK(c->routes[2].upstream == 2);

  /* route matching: first match in file order */
  CHECK(px_config_route(c, "claude-3-haiku") == &c->routes[0]);
  CHECK(px_config_route(c, "gpt-4o") == &c->routes[1]);
  CHECK(px_config_route(c, "gpt-4o-mini") == &c->routes[2]);
  CHECK(px_config_route(c, "anything") == &c->routes[2]);

  /* keys */
  const px_key_conf_t *k0 = &c->keys[0];
  CHECK_STR(k0->name, "team-a");
  CHECK_STR(k0->secret, "team-secret-1");
  CHECK(k0->nmodels == 2);
  if (k0->nmodels == 2) {
    CHECK_STR(k0->models[0], "gpt-*");
    CHECK_STR(k0->models[1], "claude-*");
  }
  CHECK(k0->rpm == 600);
  CHECK(k0->tpm == 200000);
  CHECK_STR(c->keys[1].secret, "literal-$-secret");
  CHECK(c->keys[1].nmodels == 0);
  CHECK(c->keys[1].rpm == 0 && c->keys[1].tpm == 0);

  CHECK(px_config_key(c, "team-secret-1", 13) == k0);
  CHECK(px_config_key(c, "literal-$-secret", 16) == &c->keys[1]);
  CHECK(px_config_key(c, "team-secret-2", 13) == NULL);
  CHECK(px_config_key(c, "team-secret-1x", 14) == NULL);
  CHECK(px_config_key(c, "team-secret-", 12) == NULL);
  CHECK(px_config_key(c, "team-secret-1", 0) == NULL);
  CHECK(px_config_key(c, "", 0) == NULL);
  /* length-delimited: bytes after len are ignored */
  CHECK(px_config_key(c, "team-secret-1XYZ", 13) == k0);

  CHECK(px_key_allows(k0, "gpt-4o"));
  CHECK(px_key_allows(k0, "claude-3-opus"));
  CHECK(!px_key_allows(k0, "o1-preview"));
  CHECK(!px_key_allows(k0, "gpt"));
  CHECK(px_key_allows(&c->keys[1], "o1-preview"));

  /* --check output: resolved, never secrets */
  char *buf = NULL;
  size_t blen = 0;
  FILE *m = open_memstream(&buf, &blen);
  CHECK(m != NULL);
  if (m != NULL) {
    px_config_print(c, m);
    fclose(m);
    CHECK(strstr(buf, "listen: [::1]:8443") != NULL);
    CHECK(strstr(buf, "upstream openai\n") != NULL);
    CHECK(strstr(buf, "protocol: openai_chat_completions") != NULL);
    CHECK(strstr(buf, "base_url: https://api.openai.com/v1\n") != NULL);
    CHECK(strstr(buf, "api_key: set") != NULL);
    CHECK(strstr(buf, "api_key: none") != NULL);
    CHECK(strstr(buf, "route claude-* -> anthropic\n") != NULL);
    CHECK(strstr(buf, "fallback: openai, backup") != NULL);
    CHECK(strstr(buf, "max_tokens: 8192") != NULL);
    CHECK(strstr(buf, "model: claude-sonnet-4-5") != NULL);
    CHECK(strstr(buf, "key team-a\n") != NULL);
    CHECK(strstr(buf, "models: gpt-*, claude-*") != NULL);
    /* routes in file order */
    const char *p1 = strstr(buf, "route claude-*"), *p2 = strstr(buf, "route gpt-4o"),
               *p3 = strstr(buf, "route * -> backup");
    CHECK(p1 && p2 && p3 && p1 < p2 && p2 < p3);
    CHECK(strstr(buf, "sk-test-openai") == NULL);
    CHECK(strstr(buf, "team-secret-1") == NULL);
    CHECK(strstr(buf, "literal-$-secret") == NULL);
    CHECK(strstr(buf, "org-123") == NULL);
    free(buf);
  }

  /* references */
  CHECK(px_config_ref(c) == c);
  CHECK(c->refs == 2);
  px_config_unref(c);
  CHECK(c->refs == 1);
out:
  px_config_unref(c);
}

/* [responses] (SPEC 14): defaults, values, errors */
static void test_responses(void) {
  const char *base =
      "[upstream a]\nprotocol = anthropic_messages\nbase_url = http://x\n"
      "[route *]\nupstream = a\n";
  char text[1024];
  px_config_t *c = PARSE_OK(base);
  if (c) {
    CHECK(c->responses.store == 1);
    CHECK(c->responses.ttl_ms == 30ull * 86400 * 1000);
    CHECK(c->responses.max_size == 1ull << 30);
    px_config_unref(c);
  }
  snprintf(text, sizeof text, "%s[responses]\nstore = off\nttl = 12h\nmax_size = 64m\n",
           base);
  c = PARSE_OK(text);
  if (c) {
    CHECK(c->responses.store == 0);
    CHECK(c->responses.ttl_ms == 12ull * 3600 * 1000);
    CHECK(c->responses.max_size == 64ull << 20);
    px_config_unref(c);
  }
  snprintf(text, sizeof text, "[responses]\nttl = forever\n%s", base);
  EXPECT_ERR(text,
             "t.conf:2: invalid duration 'forever' for 'ttl' (examples: 150ms, 5s, 2m)");
  snprintf(text, sizeof text, "[responses]\n[responses]\n%s", base);
  EXPECT_ERR(text, "t.conf:2: duplicate section [responses] (first at line 1)");
  snprintf(text, sizeof text, "[responses x]\n%s", base);
  EXPECT_ERR(text, "t.conf:1: [responses] takes no name");
}

static void test_defaults_in_file(void) {
  px_config_t *c = PARSE_OK("");
  if (c != NULL) {
    CHECK_STR(c->server.listen, "127.0.0.1:8080");
    CHECK(c->server.workers == 1);
    CHECK(c->server.max_connections == 10000);
    CHECK(c->server.max_body == 16u * 1024 * 1024);
    CHECK(c->server.translate_memory == 4);
    CHECK(c->server.translate_memory_base == 1024 * 1024);
    CHECK(c->server.max_header == 64 * 1024);
    CHECK(c->server.header_timeout_ms == 10000);
    CHECK(c->server.idle_timeout_ms == 75000);
    CHECK(c->server.shutdown_timeout_ms == 30000);
    CHECK_STR(c->server.access_log, "stderr");
    CHECK(c->server.log_level == PX_LOG_INFO);
    CHECK(c->nupstreams == 0 && c->nroutes == 0 && c->nkeys == 0);
    CHECK(c->unconfigured_message == NULL);
    CHECK(px_config_route(c, "gpt-4o") == NULL);
    CHECK(px_config_key(c, "x", 1) == NULL);
    px_config_unref(c);
  }
  /* listen forms, booleans, CRLF line endings, BOM */
  static const char *const listens[] = {"0.0.0.0:80", "localhost:8080", "[::]:0",
                                        "unix:/tmp/proxai.sock", "my-host.example:65535"};
  for (size_t i = 0; i < sizeof listens / sizeof listens[0]; i++) {
    char text[256];
    snprintf(text, sizeof text, "[server]\r\nlisten = %s\r\n", listens[i]);
    c = PARSE_OK(text);
    if (c != NULL) CHECK_STR(c->server.listen, listens[i]);
    px_config_unref(c);
  }
  static const char *const yes[] = {"on", "true", "yes", "1", "ON", "True"};
  static const char *const no[] = {"off", "false", "no", "0", "OFF"};
  for (size_t i = 0; i < 6 + 5; i++) {
    char text[256];
    snprintf(text, sizeof text, "%shttp2 = %s\n", up_openai, i < 6 ? yes[i] : no[i - 6]);
    c = PARSE_OK(text);
    if (c != NULL) CHECK(c->upstreams[0].http2 == (i < 6));
    px_config_unref(c);
  }
  c = PARSE_OK("\xEF\xBB\xBF[server]\nlog_level = warn\n");
  if (c != NULL) CHECK(c->server.log_level == PX_LOG_WARN);
  px_config_unref(c);

  /* lines longer than inih's default 200 bytes, names longer than its 50 */
  char big[4096];
  char longname[120];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  snprintf(
      big, sizeof big,
      "%s[route %s]\nupstream = openai\nmodel = %s%s\n[route y]\nupstream = openai\n",
      up_openai, longname, longname, longname);
  c = PARSE_OK(big);
  if (c != NULL && c->nroutes == 2) {
    CHECK_STR(c->routes[0].pattern, longname);
    CHECK(c->routes[0].model != NULL &&
          strlen(c->routes[0].model) == 2 * strlen(longname));
    CHECK_STR(c->routes[1].pattern, "y");
  } else {
    CHECK(!"long lines");
  }
  px_config_unref(c);
}

static void test_errors(void) {
  char text[2048];
  unsetenv("PX_T_UNSET");

  EXPECT_ERR(
      "[upstream openai]\nprotocol = openai_chat_completions\n"
      "base_url = http://x\n\ntimout = 5s\n",
      "t.conf:5: unknown key 'timout' in [upstream openai]");
  EXPECT_ERR("[server]\nlisten = 1.2.3.4:5\n[servre]\nx = 1\n",
             "t.conf:3: unknown section [servre] (expected [server], [upstream NAME], "
             "[route PATTERN], [key NAME], [team NAME], [price PATTERN], [state], "
             "[admin], [trace] or [responses])");
  /* a section without keys is still checked */
  EXPECT_ERR(
      "[bogus thing]\n",
      "t.conf:1: unknown section [bogus thing] (expected [server], [upstream NAME], "
      "[route PATTERN], [key NAME], [team NAME], [price PATTERN], [state], [admin], "
      "[trace] or [responses])");
  EXPECT_ERR("listen = 1.2.3.4:5\n", "t.conf:1: key 'listen' outside of any section");
  EXPECT_ERR("[server]\n; c\nlisten = 1.2.3.4:5\nlisten = 1.2.3.4:6\n",
             "t.conf:4: duplicate key 'listen' in [server] (first at line 3)");
  EXPECT_ERR("[server]\n[server]\n",
             "t.conf:2: duplicate section [server] (first at line 1)");
  EXPECT_ERR("[server x]\n", "t.conf:1: [server] takes no name");
  snprintf(text, sizeof text, "%s\n[upstream openai]\n", up_openai);
  EXPECT_ERR(text, "t.conf:5: duplicate section [upstream openai] (first at line 1)");
  snprintf(text, sizeof text,
           "%s[route a]\nupstream=openai\n[route a]\nupstream=openai\n", up_openai);
  EXPECT_ERR(text, "t.conf:6: duplicate section [route a] (first at line 4)");
  EXPECT_ERR("[key k]\nsecret = a\n[key k]\nsecret = b\n",
             "t.conf:3: duplicate section [key k] (first at line 1)");
  EXPECT_ERR("[upstream]\n", "t.conf:1: [upstream] needs a name: [upstream NAME]");
  EXPECT_ERR("[key]\n", "t.conf:1: [key] needs a name: [key NAME]");
  EXPECT_ERR("[route]\n",
             "t.conf:1: [route] needs a model name or pattern: [route PATTERN]");
  EXPECT_ERR("[upstream a/b]\n",
             "t.conf:1: invalid upstream name 'a/b' (letters, digits, '-', '_' and '.')");
  EXPECT_ERR("[server]\nlisten 8080\n",
             "t.conf:2: syntax error (expected '[section]' or 'key = value')");
  EXPECT_ERR("[server\nlisten = 1.2.3.4:5\n",
             "t.conf:1: syntax error (expected '[section]' or 'key = value')");
  /* continuation lines are not a thing */
  EXPECT_ERR("[server]\nlisten = 1.2.3.4:5\n   more\n",
             "t.conf:3: syntax error (expected '[section]' or 'key = value')");

  /* environment */
  EXPECT_ERR(
      "[upstream openai]\nprotocol = openai_chat_completions\n"
      "base_url = http://x\n\n\n\napi_key = ${PX_T_UNSET}\n",
      "t.conf:7: environment variable 'PX_T_UNSET' is not set");
  EXPECT_ERR("[server]\naccess_log = /var/log/${PX_T_UNSET}/x\n",
             "t.conf:2: environment variable 'PX_T_UNSET' is not set");
  EXPECT_ERR("[server]\naccess_log = ${PX_T_UNSET\n",
             "t.conf:2: unterminated '${' in value");
  EXPECT_ERR("[server]\naccess_log = a${}b\n",
             "t.conf:2: invalid environment variable reference '${}'");
  setenv("PX_T_NL", "sk-abc\n", 1);
  snprintf(text, sizeof text, "%sapi_key = ${PX_T_NL}\n", up_openai);
  EXPECT_ERR(text, "t.conf:4: control character in value of 'api_key'");

  /* values */
  EXPECT_ERR("[upstream u]\nprotocol = openai_chat\nbase_url = http://x\n",
             "t.conf:2: unknown protocol 'openai_chat' (expected one of: "
             "openai_chat_completions, openai_responses, anthropic_messages, gemini_generate_content)");
  EXPECT_ERR("[upstream u]\nprotocol = anthropic_messages\nbase_url = ftp://x\n",
             "t.conf:3: invalid base_url 'ftp://x': must start with http:// or https://");
  EXPECT_ERR(
      "[upstream u]\nprotocol = anthropic_messages\nbase_url = api.anthropic.com\n",
      "t.conf:3: invalid base_url 'api.anthropic.com': must start with http:// or "
      "https://");
  EXPECT_ERR(
      "[upstream u]\nprotocol = anthropic_messages\nbase_url = https:///\n",
      "t.conf:3: invalid base_url 'https://': must start with http:// or https://");
  EXPECT_ERR("[upstream u]\nprotocol = anthropic_messages\n",
             "t.conf:1: missing 'base_url' in [upstream u]");
  EXPECT_ERR("[upstream u]\nbase_url = http://x\n[server]\n",
             "t.conf:1: missing 'protocol' in [upstream u]");
  static const char *const bad_listen[] = {
      "8080",    "127.0.0.1",     ":8080",  "1.2.3.4:x", "1.2.3.4:65536", "[::1:80",
      "[zz]:80", "unix:rel/path", "a b:80", "::1:80",    "host:"};
  for (size_t i = 0; i < sizeof bad_listen / sizeof bad_listen[0]; i++) {
    char want[256];
    snprintf(text, sizeof text, "[server]\nlisten = %s\n", bad_listen[i]);
    snprintf(want, sizeof want,
             "t.conf:2: invalid listen address '%s' (expected host:port, [v6]:port or "
             "unix:/path)",
             bad_listen[i]);
    EXPECT_ERR(text, want);
  }
  EXPECT_ERR("[server]\nlog_level = verbose\n",
             "t.conf:2: invalid log_level 'verbose' (error, warn, info or debug)");
  EXPECT_ERR(
      "[server]\nheader_timeout = 10x\n",
      "t.conf:2: invalid duration '10x' for 'header_timeout' (examples: 150ms, 5s, 2m)");
  EXPECT_ERR(
      "[server]\nmax_body = 16q\n",
      "t.conf:2: invalid size '16q' for 'max_body' (examples: 1000, 64k, 16m, 1g)");
  EXPECT_ERR("[server]\ntranslate_memory = 1001\n",
             "t.conf:2: invalid value '1001' for 'translate_memory' (expected an integer "
             "from 0 to 1000)");
  px_config_t *tm = PARSE_OK("[server]\ntranslate_memory = 0\ntranslate_memory_base = 2m\n");
  if (tm != NULL) {
    CHECK(tm->server.translate_memory == 0 && tm->server.translate_memory_base == 2u << 20);
    px_config_unref(tm);
  }
  EXPECT_ERR(
      "[server]\nworkers = -1\n",
      "t.conf:2: invalid value '-1' for 'workers' (expected an integer from 0 to 1024)");
  EXPECT_ERR(
      "[server]\nmax_connections = 0\n",
      "t.conf:2: invalid value '0' for 'max_connections' (expected an integer from 1 "
      "to 1000000)");
  EXPECT_ERR("[server]\naccess_log =\n",
             "t.conf:2: empty value for 'access_log' in [server]");
  snprintf(text, sizeof text, "%shttp2 = maybe\n", up_openai);
  EXPECT_ERR(
      text,
      "t.conf:4: invalid boolean 'maybe' for 'http2' (on/off, true/false, yes/no, 1/0)");
  snprintf(text, sizeof text, "%sheader = NoColon\n", up_openai);
  EXPECT_ERR(text, "t.conf:4: invalid header 'NoColon' (expected 'Name: value')");
  snprintf(text, sizeof text, "%sheader = Bad Name: x\n", up_openai);
  EXPECT_ERR(text, "t.conf:4: invalid header 'Bad Name: x' (expected 'Name: value')");
  snprintf(text, sizeof text, "%sheader = Content-Length: 5\n", up_openai);
  EXPECT_ERR(text,
             "t.conf:4: header 'Content-Length' is managed by proxai and cannot be set");
  snprintf(text, sizeof text, "%sretries = 3\nretries = 4\n", up_openai);
  EXPECT_ERR(text,
             "t.conf:5: duplicate key 'retries' in [upstream openai] (first at line 4)");

  /* routes */
  snprintf(text, sizeof text, "%s\n[route gpt-*]\nmodel = x\n", up_openai);
  EXPECT_ERR(text, "t.conf:5: missing 'upstream' in [route gpt-*]");
  snprintf(text, sizeof text, "[route gpt-*]\nupstream = opnai\n%s", up_openai);
  EXPECT_ERR(text, "t.conf:2: unknown upstream 'opnai' in [route gpt-*]");
  snprintf(text, sizeof text, "[route gpt-*]\nupstream = openai\nfallback = nope\n%s",
           up_openai);
  EXPECT_ERR(text, "t.conf:3: unknown fallback upstream 'nope' in [route gpt-*]");
  snprintf(text, sizeof text, "%s[route gpt-*]\nupstream = openai\nfallback = openai\n",
           up_openai);
  EXPECT_ERR(text,
             "t.conf:6: fallback 'openai' is the route's own upstream in [route gpt-*]");
  snprintf(text, sizeof text,
           "%s[upstream b]\nprotocol=openai_responses\nbase_url=http://b\n"
           "[route x]\nupstream = openai\nfallback = b\nfallback = b\n",
           up_openai);
  EXPECT_ERR(text, "t.conf:10: fallback 'b' listed twice in [route x]");
  snprintf(text, sizeof text, "%s[route x]\nupstream = openai\nupstream = openai\n",
           up_openai);
  EXPECT_ERR(text, "t.conf:6: duplicate key 'upstream' in [route x] (first at line 5)");
  snprintf(text, sizeof text, "%s[route x]\nupstream = openai\nmax_tokens = 0\n",
           up_openai);
  EXPECT_ERR(text,
             "t.conf:6: invalid value '0' for 'max_tokens' (expected an integer from 1 "
             "to 4294967295)");
  snprintf(text, sizeof text, "%s[route x]\nupstream = openai\nmax_tokens = lots\n",
           up_openai);
  EXPECT_ERR(text,
             "t.conf:6: invalid value 'lots' for 'max_tokens' (expected an integer "
             "from 1 to 4294967295)");
  snprintf(text, sizeof text, "%s[route x]\nupstream = openai\nretries = 1\n", up_openai);
  EXPECT_ERR(text, "t.conf:6: unknown key 'retries' in [route x]");

  /* keys */
  EXPECT_ERR("[key a]\nmodels = *\n", "t.conf:1: missing 'secret' in [key a]");
  EXPECT_ERR("[key a]\nsecret =\n", "t.conf:2: empty value for 'secret' in [key a]");
  EXPECT_ERR("[key a]\nsecret = s\nmodels = a,,b\n",
             "t.conf:3: empty entry in models list 'a,,b'");
  EXPECT_ERR("[key a]\nsecret = s\n[key b]\nsecret = s\n",
             "t.conf:3: key 'b' has the same secret as key 'a'");
  EXPECT_ERR("[key a]\nsecret = s\nrpm = many\n",
             "t.conf:3: invalid value 'many' for 'rpm' (expected an integer from 0 to "
             "4294967295)");

  /* the first error wins, even when a later line is also wrong */
  EXPECT_ERR("[server]\nfoo = 1\nbar\n", "t.conf:2: unknown key 'foo' in [server]");
  EXPECT_ERR("[server]\nbar\nfoo = 1\n",
             "t.conf:2: syntax error (expected '[section]' or 'key = value')");

  /* lines too long are rejected, not split */
  char *huge = malloc(20000 + 64);
  if (huge != NULL) {
    strcpy(huge, "[server]\naccess_log = ");
    size_t n = strlen(huge);
    memset(huge + n, 'a', 20000);
    strcpy(huge + n + 20000, "\n");
    EXPECT_ERR(huge, "t.conf:2: line too long (more than 16384 bytes)");
    free(huge);
  }

  /* err may be tiny; must stay terminated */
  char small[8];
  memset(small, 'Z', sizeof small);
  CHECK(px_config_parse("[nope]\n", "t.conf", small, sizeof small) == NULL);
  CHECK(memchr(small, '\0', sizeof small) != NULL);
  CHECK(px_config_parse("[nope]\n", "t.conf", NULL, 0) == NULL);
}

static void clear_default_env(void) {
  unsetenv("OPENAI_API_KEY");
  unsetenv("ANTHROPIC_API_KEY");
  unsetenv("OPENAI_BASE_URL");
  unsetenv("ANTHROPIC_BASE_URL");
  unsetenv("GEMINI_API_KEY");
  unsetenv("GEMINI_BASE_URL");
}

static void test_embedded_default(void) {
  char err[512] = "";
  char dir[] = "/tmp/proxai-test-config-XXXXXX";
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(mkdtemp(dir) != NULL);
  CHECK(chdir(dir) == 0);

  /* neither key */
  clear_default_env();
  px_config_t *c = px_config_load(NULL, err, sizeof err);
  CHECK(c != NULL);
  if (c != NULL) {
    CHECK(c->path == NULL);
    CHECK_STR(c->server.listen, "127.0.0.1:8080");
    CHECK(c->nupstreams == 0 && c->nroutes == 0 && c->nkeys == 0);
    CHECK(c->unconfigured_message != NULL);
    if (c->unconfigured_message) {
      CHECK(strstr(c->unconfigured_message, "OPENAI_API_KEY") != NULL);
      CHECK(strstr(c->unconfigured_message, "ANTHROPIC_API_KEY") != NULL);
      CHECK(strstr(c->unconfigured_message, "-c proxai.conf") != NULL);
    }
    CHECK(px_config_route(c, "gpt-4o") == NULL);
    px_config_unref(c);
  }
  /* an empty key counts as unset */
  setenv("OPENAI_API_KEY", "", 1);
  c = px_config_load(NULL, err, sizeof err);
  CHECK(c != NULL && c->nupstreams == 0);
  px_config_unref(c);

  /* both keys */
  setenv("OPENAI_API_KEY", "sk-o", 1);
  setenv("ANTHROPIC_API_KEY", "sk-a", 1);
  c = px_config_load(NULL, err, sizeof err);
  CHECK(c != NULL);
  if (c != NULL && c->nupstreams == 2 && c->nroutes == 2) {
    CHECK(c->unconfigured_message == NULL);
    CHECK_STR(c->upstreams[0].name, "openai");
    CHECK(c->upstreams[0].protocol == PX_PROTO_CHAT);
    CHECK_STR(c->upstreams[0].base_url, "https://api.openai.com/v1");
    CHECK_STR(c->upstreams[0].api_key, "sk-o");
    CHECK_STR(c->upstreams[1].name, "anthropic");
    CHECK(c->upstreams[1].protocol == PX_PROTO_ANTHROPIC);
    CHECK_STR(c->upstreams[1].base_url, "https://api.anthropic.com");
    CHECK_STR(c->upstreams[1].api_key, "sk-a");
    CHECK_STR(c->upstreams[1].anthropic_version, "2023-06-01");
    CHECK(c->upstreams[1].retries == 2);
    const px_route_conf_t *r = px_config_route(c, "claude-opus-4");
    CHECK(r != NULL && r->upstream == 1 && r->nfallbacks == 0);
    r = px_config_route(c, "gpt-4o");
    CHECK(r != NULL && r->upstream == 0);
    CHECK(c->nkeys == 0);
  } else {
    CHECK(!"default with both keys");
  }
  px_config_unref(c);

  /* only anthropic: everything goes there */
  unsetenv("OPENAI_API_KEY");
  setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:7777/", 1);
  c = px_config_load(NULL, err, sizeof err);
  CHECK(c != NULL);
  if (c != NULL && c->nupstreams == 1) {
    CHECK_STR(c->upstreams[0].name, "anthropic");
    CHECK_STR(c->upstreams[0].base_url, "http://127.0.0.1:7777");
    const px_route_conf_t *r = px_config_route(c, "gpt-4o");
    CHECK(r != NULL && r->upstream == 0);
    r = px_config_route(c, "claude-x");
    CHECK(r != NULL && r->upstream == 0);
  } else {
    CHECK(!"default with anthropic only");
  }
  px_config_unref(c);

  /* only openai */
  clear_default_env();
  setenv("OPENAI_API_KEY", "sk-o", 1);
  setenv("OPENAI_BASE_URL", "http://127.0.0.1:7778/v1", 1);
  c = px_config_load(NULL, err, sizeof err);
  CHECK(c != NULL);
  if (c != NULL && c->nupstreams == 1) {
    CHECK_STR(c->upstreams[0].name, "openai");
    CHECK_STR(c->upstreams[0].base_url, "http://127.0.0.1:7778/v1");
    const px_route_conf_t *r = px_config_route(c, "claude-x");
    CHECK(r != NULL && r->upstream == 0);
    r = px_config_route(c, "gpt-4o");
    CHECK(r != NULL && r->upstream == 0);
    char *buf = NULL;
    size_t blen = 0;
    FILE *m = open_memstream(&buf, &blen);
    if (m != NULL) {
      px_config_print(c, m);
      fclose(m);
      CHECK(strstr(buf, "(embedded default)") != NULL);
      CHECK(strstr(buf, "route * -> openai") != NULL);
      CHECK(strstr(buf, "sk-o") == NULL);
      free(buf);
    }
  } else {
    CHECK(!"default with openai only");
  }
  px_config_unref(c);

  /* a bad base URL from the environment is an error */
  setenv("OPENAI_BASE_URL", "api.example.com", 1);
  c = px_config_load(NULL, err, sizeof err);
  CHECK(c == NULL);
  CHECK_STR(err,
            "OPENAI_BASE_URL: invalid base_url 'api.example.com': must start with "
            "http:// or https://");
  clear_default_env();

  /* GEMINI_API_KEY beside OPENAI_API_KEY: gemini-* goes to Gemini, the rest
   * to OpenAI; alone, everything goes to Gemini */
  setenv("OPENAI_API_KEY", "sk-o", 1);
  setenv("GEMINI_API_KEY", "g-key", 1);
  c = px_config_load(NULL, err, sizeof err);
  CHECK(c != NULL);
  if (c != NULL && c->nupstreams == 2) {
    CHECK_STR(c->upstreams[1].name, "gemini");
    CHECK(c->upstreams[1].protocol == PX_PROTO_GEMINI);
    CHECK_STR(c->upstreams[1].base_url, "https://generativelanguage.googleapis.com");
    const px_route_conf_t *r = px_config_route(c, "gemini-2.5-pro");
    CHECK(r != NULL && r->upstream == 1);
    r = px_config_route(c, "gpt-4o");
    CHECK(r != NULL && r->upstream == 0);
  } else {
    CHECK(!"default with OpenAI and Gemini keys");
  }
  px_config_unref(c);
  unsetenv("OPENAI_API_KEY");
  setenv("GEMINI_BASE_URL", "http://127.0.0.1:7778", 1);
  c = px_config_load(NULL, err, sizeof err);
  CHECK(c != NULL && c->nupstreams == 1);
  if (c != NULL && c->nupstreams == 1) {
    CHECK_STR(c->upstreams[0].base_url, "http://127.0.0.1:7778");
    const px_route_conf_t *r = px_config_route(c, "gpt-4o");
    CHECK(r != NULL && r->upstream == 0);
  }
  px_config_unref(c);
  clear_default_env();

  /* ./proxai.conf wins over the default */
  FILE *f = fopen("proxai.conf", "w");
  CHECK(f != NULL);
  if (f != NULL) {
    fputs("[server]\nlisten = 127.0.0.1:9191\n\n[servr]\n", f);
    fclose(f);
    c = px_config_load(NULL, err, sizeof err);
    CHECK(c == NULL);
    CHECK_STR(
        err,
        "proxai.conf:4: unknown section [servr] (expected [server], [upstream "
        "NAME], [route PATTERN], [key NAME], [team NAME], [price PATTERN], [state], "
        "[admin], [trace] or [responses])");
    /* a file that routes nothing (empty, truncated) is refused */
    f = fopen("proxai.conf", "w");
    fputs("[server]\nlisten = 127.0.0.1:9191\n", f);
    fclose(f);
    c = px_config_load(NULL, err, sizeof err);
    CHECK(c == NULL);
    CHECK_STR(err, "proxai.conf: no [route] section: the file routes no model (empty or "
                   "truncated?)");
    f = fopen("proxai.conf", "w");
    fputs("[server]\nlisten = 127.0.0.1:9191\n[upstream u]\nprotocol = "
          "openai_chat_completions\nbase_url = http://127.0.0.1:9\n[route *]\nupstream = u\n",
          f);
    fclose(f);
    c = px_config_load(NULL, err, sizeof err);
    CHECK(c != NULL);
    if (c != NULL) {
      CHECK_STR(c->path, "proxai.conf");
      CHECK_STR(c->server.listen, "127.0.0.1:9191");
      CHECK(c->unconfigured_message == NULL);
    }
    px_config_unref(c);
    /* explicit path */
    char path[4200];
    snprintf(path, sizeof path, "%s/proxai.conf", dir);
    c = px_config_load(path, err, sizeof err);
    CHECK(c != NULL && c->path != NULL && strcmp(c->path, path) == 0);
    px_config_unref(c);
    unlink("proxai.conf");
  }
  c = px_config_load("does-not-exist.conf", err, sizeof err);
  CHECK(c == NULL);
  CHECK_STR(err, "does-not-exist.conf: No such file or directory");

  CHECK(chdir(cwd) == 0);
  rmdir(dir);
}

static void test_example(void) {
  const char *src = getenv("PROXAI_TEST_SRCDIR");
  char path[4096];
  char err[512] = "";
  snprintf(path, sizeof path, "%s/proxai.conf.example", src ? src : ".");
  unsetenv("OPENAI_API_KEY");
  unsetenv("ANTHROPIC_API_KEY");
  unsetenv("PROXAI_KEY_TEAM_A");
  /* it references environment variables and must say which is missing */
  px_config_t *c = px_config_load(path, err, sizeof err);
  CHECK(c == NULL);
  CHECK(strstr(err, "environment variable 'OPENAI_API_KEY' is not set") != NULL);
  setenv("OPENAI_API_KEY", "sk-example-o", 1);
  setenv("ANTHROPIC_API_KEY", "sk-example-a", 1);
  setenv("PROXAI_KEY_TEAM_A", "team-a-example-secret", 1);
  c = px_config_load(path, err, sizeof err);
  if (c == NULL) {
    fprintf(stderr, "example config rejected: %s\n", err);
    failures++;
    return;
  }
  CHECK(c->nupstreams >= 2);
  CHECK(c->nroutes >= 1);
  CHECK(c->nkeys >= 1);
  CHECK_STR(c->server.listen, "127.0.0.1:8080");
  CHECK(px_config_key(c, "team-a-example-secret", 21) != NULL);
  px_config_unref(c);
  clear_default_env();
  unsetenv("PROXAI_KEY_TEAM_A");
}

/* [trace] (SPEC 15): endpoint required, sample a ratio, headers repeatable. */
static void test_trace(void) {
  px_config_t *c = PARSE_OK(
      "[route *]\nupstream = o\n[upstream o]\nprotocol = "
      "openai_chat_completions\nbase_url = http://x\n");
  if (c) {
    CHECK(c->trace.endpoint == NULL); /* absent: no tracing */
    px_config_unref(c);
  }
  c = PARSE_OK(
      "[trace]\nendpoint = https://otel.example:4318/v1/traces\nsample = 0.25\n"
      "header = x-honeycomb-team:  abc\nheader = X-Other: v w\n");
  if (c) {
    CHECK_STR(c->trace.endpoint, "https://otel.example:4318/v1/traces");
    CHECK(c->trace.sample == 0.25);
    CHECK(c->trace.nheaders == 2);
    if (c->trace.nheaders == 2) {
      CHECK_STR(c->trace.headers[0], "x-honeycomb-team: abc");
      CHECK_STR(c->trace.headers[1], "X-Other: v w");
    }
    px_config_unref(c);
  }
  c = PARSE_OK("[trace]\nendpoint = http://127.0.0.1:4318/v1/traces\n");
  if (c) {
    CHECK(c->trace.sample == 1.0); /* the default */
    px_config_unref(c);
  }
  EXPECT_ERR("[trace]\nsample = 1\n", "t.conf:1: missing 'endpoint' in [trace]");
  EXPECT_ERR(
      "[trace]\nendpoint = collector:4318\n",
      "t.conf:2: invalid endpoint 'collector:4318': must be an http:// or https:// URL");
  EXPECT_ERR(
      "[trace]\nendpoint = http://x\nsample = 1.5\n",
      "t.conf:3: invalid value '1.5' for 'sample' (expected a number from 0 to 1)");
  EXPECT_ERR(
      "[trace]\nendpoint = http://x\nsample = nan\n",
      "t.conf:3: invalid value 'nan' for 'sample' (expected a number from 0 to 1)");
  EXPECT_ERR("[trace]\nendpoint = http://x\nheader = nocolon\n",
             "t.conf:3: invalid header 'nocolon' (expected 'Name: value')");
  EXPECT_ERR("[trace]\nendpoint = http://x\n[trace]\nendpoint = http://y\n",
             "t.conf:3: duplicate section [trace] (first at line 1)");
  EXPECT_ERR("[trace x]\n", "t.conf:1: [trace] takes no name");
}

int main(void) {
  test_responses();
  test_units();
  test_trace();
  test_glob();
  test_full();
  test_defaults_in_file();
  test_errors();
  test_embedded_default();
  test_example();
  return check_report("test_config");
}
