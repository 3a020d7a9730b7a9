/* test_fast_agents.c - what coding agents send takes the fast path (issue
 * 21): every request captured from the real agents (test/agents/captured:
 * Claude Code, Codex, Gemini CLI) and every agent-shaped body bench/agents.py
 * generates from them (grown with tool-call rounds, thinking and reasoning
 * with opaque tokens) is translated to each other upstream protocol by the
 * fast path, and the fast body is JSON-equal to the jansson path's (the
 * reference), with the same lossy list; and sent in parts (the client
 * body's long strings as spans of it, as the gateway sends it), byte for
 * byte the body written whole. The fast path reads each body with the
 * admission walk's table of container ends (px_json_request_jumps, as the
 * gateway does): the table is checked against the walker's own skip, and
 * the body it gives byte for byte the body read without it.
 *
 * A pair must take the fast path once its client's fast decoder and its
 * upstream's fast encoder know the agents' shapes (dec_ready / enc_ready);
 * wherever the fast path takes a body, it must equal the reference. The
 * test prints how many of the cases took the fast path. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fast_pair.h"
#include "jumps_check.h"

/* by PX_PROTO_ value: chat, responses, anthropic, gemini */
static const int dec_ready[PX_PROTO_COUNT] = {
    [PX_PROTO_CHAT] = 1,
    [PX_PROTO_RESPONSES] = 1,
    [PX_PROTO_ANTHROPIC] = 1,
    [PX_PROTO_GEMINI] = 1,
};
static const int enc_ready[PX_PROTO_COUNT] = {
    [PX_PROTO_CHAT] = 1,
    [PX_PROTO_RESPONSES] = 1,
    [PX_PROTO_ANTHROPIC] = 1,
    [PX_PROTO_GEMINI] = 1,
};

static int cases, taken, spanned, bodies, jumped;

/* The same translation read without the admission walk's table (c0->scan):
 * byte for byte the body read with it. */
static void same_without_jumps(const px_tr_ctx_t *c0, const char *what, const char *body,
                               size_t len, int flags, const char *with, size_t wl) {
  px_tr_ctx_t c = *c0;
  c.scan = NULL;
  char *t = NULL;
  size_t tl = 0;
  px_lossy_t l;
  px_lossy_init(&l);
  CHECK(px_translate_request_fast(&c, body, len, flags, &t, &tl, &l, NULL) == 0);
  int eq = t != NULL && tl == wl && memcmp(t, with, wl) == 0;
  if (!eq) fprintf(stderr, "%s: the body read with the jumps differs\n", what);
  CHECK(eq);
  free(t);
}

/* The same translation with the client's long strings as spans of its body
 * (what the gateway sends upstream, in parts): byte for byte the body the
 * fast path writes whole. */
static void same_in_parts(const px_tr_ctx_t *c0, const char *what, const char *body,
                          size_t len, const char *whole, size_t wl) {
  px_tr_ctx_t c = *c0;
  px_spans_t sp = {0};
  c.spans = &sp;
  char *t = NULL;
  size_t tl = 0;
  px_lossy_t l;
  px_lossy_init(&l);
  CHECK(px_translate_request_fast(&c, body, len, 0, &t, &tl, &l, NULL) == 0);
  px_str_t *parts = NULL;
  size_t np = 0, total = 0;
  CHECK(px_spans_parts(t, tl, &sp, &parts, &np) == 0);
  for (size_t i = 0; i < np; i++) total += parts[i].len;
  int eq = total == wl && total == tl + sp.bytes;
  for (size_t i = 0, at = 0; eq && i < np; at += parts[i].len, i++) {
    eq = memcmp(whole + at, parts[i].ptr, parts[i].len) == 0;
    /* a part in the client's body is a span: a long string, not copied */
    if (parts[i].ptr >= body && parts[i].ptr < body + len)
      CHECK(parts[i].len >= PX_FB_SPAN_MIN);
  }
  if (!eq) fprintf(stderr, "%s: the body in parts differs from the whole\n", what);
  CHECK(eq);
  if (sp.n) spanned++;
  free(parts);
  free(t);
  px_spans_free(&sp);
}

/* one body from a client of protocol in, to every other upstream; and as a
 * token count (the count_tokens endpoints) where the upstream counts */
static void body_case(const char *what, int in, const char *body, size_t len,
                      int stream) {
  /* the admission walk's table, as the gateway keeps it */
  px_json_jumps_t jt = {.cap = len / (PX_JSON_JUMP_MIN / 2)};
  jt.v = malloc((jt.cap + 1) * sizeof(*jt.v));
  px_json_req_t scan;
  CHECK(jt.v != NULL && px_json_request_jumps(body, len, NULL, NULL, &jt, &scan) == 0);
  CHECK(scan.jumps == &jt && jumps_sound(body, len, &jt));
  bodies++;
  if (jt.n > 0) jumped++;
  for (int out = 0; out < PX_PROTO_COUNT; out++) {
    if (out == in) continue;
    for (int count = 0; count < 2; count++) {
      int flags = count ? PX_TR_COUNT_TOKENS : 0;
      if (count && px_ref_get(out)->count_request == NULL) continue;
      px_tr_ctx_t c;
      request_ctx(&c, in, out, body, len, stream);
      c.scan = &scan;
      c.ir_budget = (size_t)PX_TR_IR_FACTOR * len + PX_TR_IR_BASE; /* the default */
      char *fo = NULL, *so = NULL;
      size_t fl = 0, sl = 0;
      px_lossy_t lf, ls;
      px_tr_err_t err;
      px_lossy_init(&lf);
      px_lossy_init(&ls);
      int rc = px_translate_request_fast(&c, body, len, flags, &fo, &fl, &lf, NULL);
      if (!count) cases++;
      if (rc == 0 && !count) taken++;
      if (rc != 0 && dec_ready[in] && enc_ready[out]) {
        fprintf(stderr, "%s: %d -> %d%s declined by the fast path\n", what, in, out,
                count ? " (count)" : "");
        CHECK(rc == 0);
      }
      if (rc == 0) {
        px_tr_ctx_t ref = c;
        CHECK(px_translate_request_ref(&ref, body, len, flags, &so, &sl, &ls, &err) == 0);
        int eq = so != NULL && same_json(fo, fl, so, sl) && strcmp(lf.buf, ls.buf) == 0;
        CHECK(eq);
        if (!eq)
          fprintf(stderr,
                  "%s: %d -> %d%s differ\nfast: %.2000s [%s]\nslow: %.2000s [%s]\n", what,
                  in, out, count ? " (count)" : "", fo, lf.buf, so ? so : "", ls.buf);
        if (!count) same_in_parts(&c, what, body, len, fo, fl);
        same_without_jumps(&c, what, body, len, flags, fo, fl);
      }
      free(fo);
      free(so);
    }
  }
  free(jt.v);
}

static int proto_of_path(const char *path) {
  if (strstr(path, "/messages")) return PX_PROTO_ANTHROPIC;
  if (strstr(path, "/responses")) return PX_PROTO_RESPONSES;
  if (strstr(path, "/chat/completions")) return PX_PROTO_CHAT;
  if (strstr(path, "/models/")) return PX_PROTO_GEMINI;
  return -1;
}

/* a capture file: an array of {method, path, query, headers, body} */
static void captured(const char *file) {
  json_error_t e;
  json_t *caps = json_load_file(file, 0, &e);
  CHECK(json_is_array(caps));
  size_t i;
  json_t *r;
  json_array_foreach(caps, i, r) {
    const char *path = json_string_value(json_object_get(r, "path"));
    json_t *b = json_object_get(r, "body");
    int in = path ? proto_of_path(path) : -1;
    CHECK(in >= 0 && json_is_object(b));
    if (in < 0 || !json_is_object(b)) continue;
    char *body = json_dumps(b, JSON_COMPACT);
    int stream = in == PX_PROTO_GEMINI ? strstr(path, ":streamGenerateContent") != NULL
                                       : json_is_true(json_object_get(b, "stream"));
    char what[1100];
    snprintf(what, sizeof(what), "%s[%zu]", file, i);
    body_case(what, in, body, strlen(body), stream);
    free(body);
  }
  json_decref(caps);
}

/* a generated body file <shape>-<k>k[-stream].json */
static void generated(const char *dir, const char *name) {
  int in = strncmp(name, "claude_code", 11) == 0  ? PX_PROTO_ANTHROPIC
           : strncmp(name, "codex", 5) == 0       ? PX_PROTO_RESPONSES
           : strncmp(name, "gemini_cli", 10) == 0 ? PX_PROTO_GEMINI
                                                  : -1;
  if (in < 0) return;
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (f == NULL) return;
  px_buf_t b;
  px_buf_init(&b, 64u << 20);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
    CHECK(px_buf_append(&b, chunk, n) == 0);
  fclose(f);
  body_case(path, in, b.data, b.len, strstr(name, "-stream") != NULL);
  px_buf_free(&b);
}

static void each_file(const char *dir, void (*fn)(const char *dir, const char *name)) {
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strstr(e->d_name, ".json") != NULL) fn(dir, e->d_name);
  closedir(d);
}

static void captured_in(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  captured(path);
}

int main(int argc, char **argv) {
  const char *src = getenv("PROXAI_TEST_SRCDIR");
  if (src == NULL) src = ".";
  char dir[1024];
  snprintf(dir, sizeof(dir), "%s/test/agents/captured", src);
  each_file(dir, captured_in);
  /* the bench's agent-shaped bodies, made here (deterministic) or given */
  char tmp[] = "/tmp/proxai-fast-agents-XXXXXX";
  const char *gen = argc > 1 ? argv[1] : NULL;
  if (gen == NULL && mkdtemp(tmp) != NULL) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "python3 '%s/bench/agents.py' gen '%s' --sizes 20,100 >/dev/null", src, tmp);
    CHECK(system(cmd) == 0);
    gen = tmp;
  }
  if (gen != NULL) each_file(gen, generated);
  if (gen == tmp) {
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
  }
  printf(
      "fast_agents: the fast path took %d of %d agent requests (%d sent in parts; "
      "%d of %d bodies with container ends)\n",
      taken, cases, spanned, jumped, bodies);
  CHECK(jumped == bodies); /* an agent's tools and turns are long */
  CHECK(cases >= 24 + 36);
  CHECK(spanned >= cases / 2); /* agents' long texts stay in their bodies */
  return check_report("fast_agents");
}
