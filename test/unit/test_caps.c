/* test_caps.c - capabilities, not pairs (issue 13): the hub drops what the
 * upstream's caps cannot hold, in one place, named as the client spelled
 * it; every protocol names what its caps promise; no codec in src/proto
 * tests which protocol is on the other side. */
#include <dirent.h>
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/protoutil.h"
#include "ref.h"

static px_tr_ctx_t ctx_of(px_proto_t in, px_proto_t out) {
  px_tr_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.in = in;
  c.out = out;
  return c;
}

/* px_ir_fit_request on an IR holding prompt_cache_key and verbosity */
static void fit(px_proto_t in, px_proto_t out, const char *want_lossy, int kept) {
  px_tr_ctx_t c = ctx_of(in, out);
  json_t *ir = json_pack("{s:s, s:s, s:[]}", "prompt_cache_key", "k1", "verbosity", "low",
                         "messages");
  px_lossy_t l;
  px_lossy_init(&l);
  px_ir_fit_request(&c, ir, &l);
  CHECK(strcmp(l.buf, want_lossy) == 0);
  CHECK((json_object_get(ir, "prompt_cache_key") != NULL) == kept);
  CHECK((json_object_get(ir, "verbosity") != NULL) == kept);
  json_decref(ir);
}

/* the whole request path: a client's prompt_cache_key / verbosity reach an
 * upstream that has them, and are named lossy toward one that has not */
static void through(px_proto_t in, px_proto_t out, const char *body, const char *lossy,
                    const char *key) {
  px_tr_ctx_t c = ctx_of(in, out);
  c.client_model = c.upstream_model = "m";
  json_t *b = json_loads(body, 0, NULL), *res = NULL;
  px_lossy_t l;
  px_tr_err_t e;
  px_lossy_init(&l);
  memset(&e, 0, sizeof(e));
  CHECK(px_translate_request(&c, b, &res, &l, &e) == 0);
  CHECK(strcmp(l.buf, lossy) == 0);
  if (key != NULL) CHECK(json_object_get(res, key) != NULL);
  json_decref(b);
  json_decref(res);
}

/* every protocol has the names its caps and its wire promise */
static void names(void) {
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_proto_ops_t *o = px_proto_get((px_proto_t)p);
    if (o->caps & PX_CAP_PROMPT_CACHE_KEY) CHECK(o->names.prompt_cache_key != NULL);
    if (o->caps & PX_CAP_VERBOSITY) CHECK(o->names.verbosity != NULL);
    if (o->caps & PX_CAP_REASONING_TOKENS) {
      CHECK(o->names.reasoning_token != NULL);
      CHECK(o->names.opaque_reasoning != NULL);
    }
    CHECK(o->names.annotations != NULL);
    CHECK(o->names.reasoning_text != NULL);
    CHECK(o->names.tool_args_param != NULL);
  }
}

/* No codec compares a context's in / out with a named protocol. */
static void no_pairs(void) {
  const char *root = getenv("PROXAI_TEST_SRCDIR");
  if (root == NULL) return;
  regex_t re;
  CHECK(
      regcomp(
          &re,
          "ctx(->|\\.)(in|out)[ ]*[!=]=[ ]*PX_PROTO_|PX_PROTO_[A-Z]+[ ]*[!=]=[ ]*[a-z_]*"
          "(->|\\.)?ctx|switch[ ]*\\([a-z_>.-]*ctx(->|\\.)(in|out)\\)",
          REG_EXTENDED | REG_NOSUB) == 0);
  /* every file of src/proto: a codec added later is held to it too */
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/src/proto", root);
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  size_t nfiles = 0;
  for (struct dirent *de; d != NULL && (de = readdir(d)) != NULL;) {
    size_t l = strlen(de->d_name);
    if (l < 3 || strcmp(de->d_name + l - 2, ".c") != 0) continue;
    char path[8192], line[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f == NULL) continue;
    nfiles++;
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
      n++;
      if (regexec(&re, line, 0, NULL, 0) == 0) {
        fprintf(stderr, "%s:%d: tests the other side's protocol: %s", de->d_name, n, line);
        failures++;
      }
    }
    fclose(f);
  }
  if (d != NULL) closedir(d);
  CHECK(nfiles >= 8); /* the four protocols' codecs at least */
  regfree(&re);
}

int main(void) {
  fit(PX_PROTO_CHAT, PX_PROTO_RESPONSES, "", 1);
  fit(PX_PROTO_RESPONSES, PX_PROTO_CHAT, "", 1);
  fit(PX_PROTO_CHAT, PX_PROTO_ANTHROPIC, "prompt_cache_key,verbosity", 0);
  fit(PX_PROTO_RESPONSES, PX_PROTO_GEMINI, "prompt_cache_key,text.verbosity", 0);

  through(PX_PROTO_CHAT, PX_PROTO_RESPONSES,
          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
          "\"prompt_cache_key\":\"k\",\"verbosity\":\"low\"}",
          "", "prompt_cache_key");
  through(PX_PROTO_RESPONSES, PX_PROTO_ANTHROPIC,
          "{\"model\":\"m\",\"input\":\"hi\",\"prompt_cache_key\":\"k\","
          "\"text\":{\"verbosity\":\"low\"},\"max_output_tokens\":10}",
          "prompt_cache_key,text.verbosity", NULL);

  names();
  no_pairs();
  return check_report("caps");
}
