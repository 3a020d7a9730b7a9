/* test_usage_scan.c - px_usage_scan (the one walk of a held pass-through
 * body) against jansson: whether the body is one complete object, and the
 * usage it reads, for every protocol's member names, on generated bodies
 * with escapes, brackets and the usage name inside strings and nested
 * objects, at every alignment across the scanner's 64-byte blocks. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/buf.h"
#include "proxai/passthru.h"
#include "proxai/proto.h"
#include "proxai/usage.h"

static unsigned rnd_state = 12345;
static unsigned rnd(unsigned n) {
  rnd_state = rnd_state * 1103515245u + 12345u;
  return (rnd_state >> 8) % n;
}

/* A JSON string with the tricky bytes a scanner must not mistake for
 * structure: quotes, backslashes, brackets, the usage name itself. */
static void gen_string(px_buf_t *b, const char *name) {
  static const char *const parts[] = {"a", "\\\"", "\\\\", "{", "}", "[", "]", ":", ",",
                                      "\\\\\\\"", " ", "\\n", "\xc3\xa9", "yY_", "\\u00e9"};
  px_buf_append(b, "\"", 1);
  unsigned k = rnd(12);
  for (unsigned i = 0; i < k; i++) {
    if (rnd(8) == 0) px_buf_puts(b, name);
    else px_buf_puts(b, parts[rnd(sizeof(parts) / sizeof(parts[0]))]);
  }
  px_buf_append(b, "\"", 1);
}

static void gen_ws(px_buf_t *b) {
  static const char *const ws[] = {"", "", " ", "\n", "  \t"};
  px_buf_puts(b, ws[rnd(5)]);
}

static void gen_value(px_buf_t *b, const char *name, int depth);

static void gen_object(px_buf_t *b, const char *name, int depth) {
  px_buf_append(b, "{", 1);
  unsigned k = rnd(depth > 2 ? 2 : 4);
  for (unsigned i = 0; i < k; i++) {
    if (i) px_buf_append(b, ",", 1);
    gen_ws(b);
    if (rnd(3) == 0) px_buf_printf(b, "\"%s\"", name); /* a nested member of that name */
    else gen_string(b, name);
    gen_ws(b);
    px_buf_append(b, ":", 1);
    gen_ws(b);
    gen_value(b, name, depth + 1);
  }
  gen_ws(b);
  px_buf_append(b, "}", 1);
}

static void gen_value(px_buf_t *b, const char *name, int depth) {
  switch (rnd(depth > 3 ? 3 : 6)) {
  case 0: gen_string(b, name); break;
  case 1: px_buf_printf(b, "%u", rnd(100000)); break;
  case 2: px_buf_puts(b, rnd(2) ? "null" : "true"); break;
  case 3: gen_object(b, name, depth); break;
  default: {
    px_buf_append(b, "[", 1);
    unsigned k = rnd(3);
    for (unsigned i = 0; i < k; i++) {
      if (i) px_buf_append(b, ",", 1);
      gen_value(b, name, depth + 1);
    }
    px_buf_append(b, "]", 1);
  }
  }
}

/* A member name as an upstream may spell it: one character escaped now
 * and then (\u0075 for u), which names the same member. */
static void gen_name(px_buf_t *b, const char *name) {
  size_t n = strlen(name), at = rnd(5) == 0 ? rnd((unsigned)n) : n;
  px_buf_append(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    if (i == at)
      px_buf_printf(b, "\\u%04x", (unsigned char)name[i]);
    else
      px_buf_append(b, name + i, 1);
  }
  px_buf_append(b, "\"", 1);
}

/* The usage object: the protocol's counters (some missing, some repeated,
 * some not integers, names escaped), other members around them. */
static void gen_usage(px_buf_t *b, const px_wire_watch_t *w) {
  static const char *const odd[] = {"null", "12.5", "-3", "1e2", "\"7\"", "-0", "[1]"};
  const char *names[5] = {w->usage_in, w->usage_out, w->usage_in_extra[0],
                          w->usage_in_extra[1], w->usage_out_extra};
  px_buf_append(b, "{", 1);
  int first = 1;
  for (int i = 0; i < 7; i++) {
    const char *nm = names[i < 5 ? (unsigned)i : rnd(2)]; /* then a counter again */
    if (!nm || rnd(5) == 0) continue;
    if (!first) px_buf_append(b, ",", 1);
    first = 0;
    if (rnd(4) == 0) px_buf_puts(b, "\"other\":{\"x\":[1,\"}\"]},");
    gen_name(b, nm);
    px_buf_append(b, ":", 1);
    if (rnd(6) == 0)
      px_buf_puts(b, odd[rnd(sizeof(odd) / sizeof(odd[0]))]);
    else px_buf_printf(b, "%u", rnd(1000000));
  }
  px_buf_append(b, "}", 1);
}

/* jansson's view: usage as the scanner should read it. */
static int64_t ref_int(json_t *o, const char *name) {
  json_t *v = name ? json_object_get(o, name) : NULL;
  return json_is_integer(v) && json_integer_value(v) >= 0 ? json_integer_value(v) : -1;
}

static void reference(const px_wire_watch_t *w, json_t *doc, px_usage_t *u) {
  json_t *us = json_object_get(doc, w->usage_obj);
  if (!json_is_object(us)) return;
  int64_t v = ref_int(us, w->usage_in);
  if (v >= 0) {
    u->input_tokens = v;
    for (int k = 0; k < 2; k++) {
      int64_t c = ref_int(us, w->usage_in_extra[k]);
      if (c > 0) u->input_tokens += c;
    }
  }
  v = ref_int(us, w->usage_out);
  if (v >= 0) {
    int64_t c = ref_int(us, w->usage_out_extra);
    u->output_tokens = v + (c > 0 ? c : 0);
  }
}

static void test_generated(void) {
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_wire_watch_t *w = &px_proto_get((px_proto_t)p)->watch;
    if (!w->usage_obj) continue;
    for (int round = 0; round < 3000; round++) {
      px_buf_t b;
      px_buf_init(&b, 1 << 20);
      px_buf_append(&b, "   ", rnd(4)); /* shifts every block boundary */
      px_buf_append(&b, "{", 1);
      unsigned k = 1 + rnd(6), at = rnd(k + 1);
      for (unsigned i = 0; i <= k; i++) {
        if (i) px_buf_append(&b, ",", 1);
        gen_ws(&b);
        if (i == at || (i > at && rnd(8) == 0)) { /* the top-level usage member
                                                   * (or something else of that name) */
          gen_name(&b, w->usage_obj);
          px_buf_append(&b, ":", 1);
          if (rnd(6) == 0) gen_value(&b, w->usage_obj, 1);
          else gen_usage(&b, w);
        } else {
          gen_string(&b, w->usage_obj);
          px_buf_append(&b, ":", 1);
          gen_value(&b, w->usage_obj, 1);
        }
      }
      px_buf_append(&b, "}", 1);
      gen_ws(&b);
      json_error_t je;
      json_t *doc = json_loadb(b.data, b.len, 0, &je);
      CHECK(doc != NULL); /* repeated names too: the last one is read */
      px_usage_t want = {.input_tokens = -1, .output_tokens = -1}, got = want;
      reference(w, doc, &want);
      json_decref(doc);
      CHECK(px_usage_scan((px_proto_t)p, b.data, b.len, &got) == 1);
      CHECK(got.input_tokens == want.input_tokens);
      CHECK(got.output_tokens == want.output_tokens);
      if (got.input_tokens != want.input_tokens || got.output_tokens != want.output_tokens)
        fprintf(stderr, "body: %.*s\n", (int)b.len, b.data);
      /* a body cut anywhere before its closing brace is not complete, and
       * reads nothing, unless the cut happens to end in a closing brace: a
       * body that ends like an object is read back from its end */
      size_t end = b.len;
      while (end > 0 && (b.data[end - 1] == ' ' || b.data[end - 1] == '\n' ||
                         b.data[end - 1] == '\t'))
        end--;
      size_t cut = rnd((unsigned)end);
      while (cut > 0 && (b.data[cut - 1] == ' ' || b.data[cut - 1] == '\n' ||
                         b.data[cut - 1] == '\t' || b.data[cut - 1] == '}'))
        cut--;
      px_usage_t none = {.input_tokens = -1, .output_tokens = -1};
      CHECK(px_usage_scan((px_proto_t)p, b.data, cut, &none) == 0);
      CHECK(none.input_tokens == -1 && none.output_tokens == -1);
      px_buf_free(&b);
    }
  }
}

static void test_cases(void) {
  /* the first protocol with usage counters named by its watch descriptor */
  for (int p = 0; p < PX_PROTO_COUNT; p++) {
    const px_wire_watch_t *w = &px_proto_get((px_proto_t)p)->watch;
    if (!w->usage_obj) continue;
    char body[512];
    px_usage_t u = {.input_tokens = -1, .output_tokens = -1};
    /* usage only as a string value, and inside a nested object: none read */
    snprintf(body, sizeof(body), "{\"a\":\"%s\",\"b\":{\"%s\":{\"%s\":7}}}", w->usage_obj,
             w->usage_obj, w->usage_in);
    CHECK(px_usage_scan((px_proto_t)p, body, strlen(body), &u) == 1);
    CHECK(u.input_tokens == -1);
    /* an escaped quote before it does not end the string early */
    snprintf(body, sizeof(body), "{\"a\":\"x\\\",\\\"%s\\\":{\\\"%s\\\":9}\",\"%s\":{\"%s\":4}}",
             w->usage_obj, w->usage_in, w->usage_obj, w->usage_in);
    CHECK(px_usage_scan((px_proto_t)p, body, strlen(body), &u) == 1);
    CHECK(u.input_tokens == 4);
    /* long counts: read exactly up to INT64_MAX; past it jansson refuses the
     * number, and the usage object reads nothing */
    static const struct {
      const char *digits;
      int64_t want;
    } big[] = {{"123456789012345678", 123456789012345678},
               {"9223372036854775806", INT64_MAX - 1},
               {"9223372036854775807", INT64_MAX},
               {"9223372036854775808", -1},
               {"99999999999999999999999", -1}};
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
      px_usage_t b = {.input_tokens = -1, .output_tokens = -1};
      snprintf(body, sizeof(body), "{\"%s\":{\"%s\":%s}}", w->usage_obj, w->usage_in,
               big[i].digits);
      CHECK(px_usage_scan((px_proto_t)p, body, strlen(body), &b) == 1);
      CHECK(b.input_tokens == big[i].want);
    }
    /* not one object */
    CHECK(px_usage_scan((px_proto_t)p, "[1]", 3, &u) == 0);
    CHECK(px_usage_scan((px_proto_t)p, "{} {}", 5, &u) == 0);
    CHECK(px_usage_scan((px_proto_t)p, "{\"a\":\"}\"", 8, &u) == 0);
    CHECK(px_usage_scan((px_proto_t)p, "", 0, &u) == 0);
    /* a name repeated at the top: the last one counts, as in jansson */
    u.input_tokens = -1;
    snprintf(body, sizeof(body), "{\"%s\":{\"%s\":3},\"x\":[\"\\\\\"],\"%s\":{\"%s\":5}}",
             w->usage_obj, w->usage_in, w->usage_obj, w->usage_in);
    CHECK(px_usage_scan((px_proto_t)p, body, strlen(body), &u) == 1);
    CHECK(u.input_tokens == 5);
    json_t *doc = json_loads(body, 0, NULL);
    CHECK(doc != NULL && json_integer_value(json_object_get(
                             json_object_get(doc, w->usage_obj), w->usage_in)) == 5);
    json_decref(doc);
    /* the last member not an object: no usage read, even with an earlier one */
    u.input_tokens = -1;
    snprintf(body, sizeof(body), "{\"%s\":{\"%s\":3},\"%s\":null}", w->usage_obj,
             w->usage_in, w->usage_obj);
    CHECK(px_usage_scan((px_proto_t)p, body, strlen(body), &u) == 1);
    CHECK(u.input_tokens == -1);
    /* text before the opening brace or a stray quote: read forward, not one object */
    CHECK(px_usage_scan((px_proto_t)p, "x{}", 3, &u) == 0);
    CHECK(px_usage_scan((px_proto_t)p, "{\"a\":\"b}", 8, &u) == 0);
    CHECK(px_usage_scan((px_proto_t)p, "{\"a\":1}}", 8, &u) == 0);
  }
}

/* The finish reason px_answer_body reads from a Chat body (its usage member
 * found by px_usage_scan_at first, as the pass-through does), and
 * px_answer_read from a chunk: the last choice's, as the protocol spells it
 * (escapes kept), "" when null or absent; the shapes read in a few bytes
 * back from usage and those walked back further give the same. */
static const char *finish_of(const char *body, int chunk) {
  static px_answer_t a;
  const px_wire_watch_t *w = &px_proto_get(PX_PROTO_CHAT)->watch;
  memset(&a, 0, sizeof(a));
  size_t n = strlen(body), tail = PX_JSON_NPOS;
  px_usage_t u = {.input_tokens = -1, .output_tokens = -1};
  if (chunk) {
    px_answer_read(w, body, n, NULL, &a);
  } else {
    CHECK(px_usage_scan_at(PX_PROTO_CHAT, body, n, &u, &tail) == 1);
    px_answer_body(w, body, n, tail, &a);
  }
  CHECK(strlen(a.finish) == a.finish_len);
  return a.finish;
}

static void test_finish(void) {
  static const struct {
    const char *choices, *want;
  } cases[] = {
      {"[{\"index\":0,\"finish_reason\":\"stop\"}]", "stop"},
      {"[{\"index\":0,\"finish_reason\":null}]", ""},
      {"[{\"finish_reason\":\"\"}]", ""},
      {"[{\"finish_reason\":\"MALFORMED_FUNCTION_CALL\"}]", "MALFORMED_FUNCTION_CALL"},
      {"[{\"finish_reason\":\"0123456789abcdef\"}]", "0123456789abcdef"},
      {"[{\"finish_reason\":\"st\\\"op\"}]", "st\\\"op"},           /* escaped: walked */
      {"[{\"finish_reason\": \"stop\" } ]", "stop"},                /* spaced: walked */
      {"[{\"finish_reason\":\"stop\",\"logprobs\":null}]", "stop"}, /* not last: walked */
      {"[{\"finish_reason\":\"stop\"},{\"finish_reason\":\"length\"}]", "length"},
      {"[{\"finish_reason\":\"stop\"},{\"finish_reason\":null}]", ""},
      {"[{\"xfinish_reason\":\"stop\"}]", ""},               /* another name */
      {"[{\"c\":\"\\\"finish_reason\\\":\\\"x\\\"\"}]", ""}, /* in a string */
      {"[{\"reason\":\"finish_reason\"}]", ""},              /* a value, not a name */
      {"[{\"finish_reason\":[\"stop\"]}]", ""},              /* not a string */
      /* the name spelled with escapes */
      {"[{\"fin\\u0069sh_reason\":\"stop\"}]", "stop"},
      {"[{\"fin\\u0069sh_reason\":null,\"c\":\"\\\"finish_reason\\\":\\\"x\\\"\"}]", ""},
      {"[{\"finish_reason\":\"0123456789012345678901234567890123456789012345678901234567"
       "89012345\"}]",
       "0123456789012345678901234567890"}, /* over 64 bytes back: walked, cut to fit */
  };
  char body[512];
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    snprintf(
        body, sizeof(body),
        "{\"id\":\"c1\",\"model\":\"m\",\"choices\":%s,\"usage\":{\"prompt_tokens\":1,"
        "\"completion_tokens\":2}}",
        cases[i].choices);
    const char *got = finish_of(body, 0);
    if (strcmp(got, cases[i].want) != 0)
      fprintf(stderr, "body %s: finish '%s', want '%s'\n", body, got, cases[i].want);
    CHECK(strcmp(got, cases[i].want) == 0);
    snprintf(body, sizeof(body), "{\"id\":\"c1\",\"model\":\"m\",\"choices\":%s}",
             cases[i].choices);
    got = finish_of(body, 1);
    if (strcmp(got, cases[i].want) != 0)
      fprintf(stderr, "chunk %s: finish '%s', want '%s'\n", body, got, cases[i].want);
    CHECK(strcmp(got, cases[i].want) == 0);
  }
  /* a usage-only chunk, and a body whose choices come after usage */
  CHECK(strcmp(
            finish_of("{\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":1}}", 1),
            "") == 0);
  CHECK(
      strcmp(finish_of("{\"usage\":{\"prompt_tokens\":1},\"choices\":[{\"finish_reason\":"
                       "\"stop\"}]}",
                       0),
             "stop") == 0);
}

/* The id and model px_answer_read finds leading a Chat answer or chunk: the
 * first top-level members of those names, as spelled (escapes kept), at
 * every alignment of the names across sixteen-byte blocks, whatever comes
 * before them (the names as values, escaped inside strings, containers). */
static void test_lead(void) {
  static const struct {
    const char *lead, *id, *model;
  } cases[] = {
      {"\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,\"model\":"
       "\"gpt\"",
       "chatcmpl-1", "gpt"},
      {"\"model\":\"m\",\"id\":\"i\"", "i", "m"},
      {"\"object\":\"id\",\"x\":\"model\",\"id\":\"i\",\"model\":\"m\"", "i", "m"},
      {"\"s\":\"\\\"id\\\":\\\"no\\\",\\\"model\\\":\\\"no\\\"\",\"id\":\"i\",\"model\":"
       "\"m\"",
       "i", "m"},
      {"\"id\":\"a\\\"b\",\"model\":\"m\\\\n\"", "a\\\"b",
       "m\\\\n"},                                         /* escaped: walked */
      {"\"id\":\"{x}\",\"model\":\"[m]\"", "{x}", "[m]"}, /* brackets: walked */
      {"\"id\" : \"i\" , \"model\" : \"m\"", "i", "m"},   /* spaced: walked */
      {"\"n\":{\"id\":\"no\"},\"id\":\"i\",\"model\":\"m\"", "i",
       "m"}, /* after a container */
      {"\"n\":[],\"id\":\"i\",\"model\":null", "i", ""},
      {"\"ids\":\"no\",\"id\":\"i\",\"models\":\"no\",\"model\":\"m\"", "i", "m"},
      /* the id first, then: the model after a bracket in the id's string,
       * after a container, inside a string only, an escaped id; names
       * that begin as the id's does */
      {"\"id\":\"a[b{\",\"object\":\"x\",\"model\":\"m\"", "a[b{", "m"},
      {"\"id\":\"i\",\"n\":{\"model\":\"no\"},\"model\":\"m\"", "i", "m"},
      {"\"id\":\"i\",\"s\":\"\\\"model\\\":\\\"no\\\"\",\"model\":\"m\"", "i", "m"},
      {"\"id\":\"i\\\"j\",\"model\":\"m\"", "i\\\"j", "m"},
      /* an escaped backslash ends them: kept whole (only a cut drops one) */
      {"\"id\":\"i\\\\\",\"model\":\"m\\\\\"", "i\\\\", "m\\\\"},
      {"\"idx:\":\"v\",\"id\":\"i\",\"model\":\"m\"", "i", "m"},
      {"\"id__\":\"x\",\"id\":\"i\",\"model\":\"m\"", "i", "m"},
      /* names spelled with escapes: the names they decode to */
      {"\"\\u0069d\":\"i\",\"mod\\u0065l\":\"m\"", "i", "m"},
      {"\"object\":\"x\",\"mod\\u0065l\":\"m\",\"n\":{},\"i\\u0064\":\"i\"", "i", "m"},
      {"\"\\u0069d\":\"i\",\"n\":{\"model\":\"no\"},\"m\\u006fdel\":\"m\"", "i", "m"},
      {"\"\\u0069\":\"no\",\"i\\u0064x\":\"no\",\"id\":\"i\",\"model\":\"m\"", "i", "m"},
      /* a name repeated: the first; an empty model read as written: the
       * first of its name as it reads unescaped */
      {"\"id\":\"a\",\"id\":\"b\",\"model\":\"m\",\"model\":\"n\"", "a", "m"},
      {"\"id\":\"i\",\"mod\\u0065l\":\"x\",\"model\":\"\"", "i", "x"},
  };
  const px_wire_watch_t *w = &px_proto_get(PX_PROTO_CHAT)->watch;
  char body[600];
  /* pad -1: no member before the case's (the id first: taken at once) */
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (int pad = -1; pad < 40; pad++)
      for (int tail = 0; tail < 2; tail++) {
        char pads[48], lead[64];
        memset(pads, 'p', (size_t)(pad > 0 ? pad : 0));
        pads[pad > 0 ? pad : 0] = 0;
        snprintf(lead, sizeof(lead), pad < 0 ? "" : "\"pad\":\"%s\",", pads);
        snprintf(body, sizeof(body), "{%s%s%s}", lead, cases[i].lead,
                 tail ? ",\"choices\":[{\"index\":0,\"finish_reason\":\"stop\"}]" : "");
        px_answer_t a;
        memset(&a, 0, sizeof(a));
        px_answer_read(w, body, strlen(body), NULL, &a);
        int ok = strcmp(a.id, cases[i].id) == 0 && strcmp(a.model, cases[i].model) == 0;
        if (!ok) fprintf(stderr, "%s: id '%s', model '%s'\n", body, a.id, a.model);
        CHECK(ok);
      }
}

/* Usage in one stream event (px_usage_read, the pass-through watcher's),
 * under an outer object wherever its members stand, and in the tail of a
 * body too large to hold (px_usage_tail): the same reading as a whole body
 * (escaped names, the last of a repeated one, a real counts nothing). */
static void test_events(void) {
  const px_wire_watch_t *rs = &px_proto_get(PX_PROTO_RESPONSES)->watch,
                        *an = &px_proto_get(PX_PROTO_ANTHROPIC)->watch;
  const struct {
    const px_wire_watch_t **w;
    const char *outer, *event;
    int64_t in, out;
  } cases[] = {
      /* Responses' terminal event: usage inside response, not last there,
       * response not last in the event */
      {&rs, "response",
       "{\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{"
       "\"input_tokens\":7,\"output_tokens\":3},\"user\":null,\"metadata\":{\"usage\":"
       "{\"input_tokens\":99}}},\"sequence_number\":9}",
       7, 3},
      /* the outer object's name escaped, and repeated: the last */
      {&rs, "response",
       "{\"response\":{\"usage\":{\"input_tokens\":1}},\"r\\u0065sponse\":{\"usage\":{"
       "\"input_tokens\":2,\"input_tokens\":5,\"output_tokens\":1.0}}}",
       5, -1},
      /* Anthropic's message_start: message.usage, cache counts added */
      {&an, "message",
       "{\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[],\"usage\":{"
       "\"input_tokens\":10,\"cache_read_input_tokens\":4,\"cache_creation_input_"
       "tokens\":2,"
       "\"output_tokens\":1}}}",
       16, 1},
      /* Anthropic's message_delta: usage at the top, a name escaped */
      {&an, NULL,
       "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{"
       "\"output_t\\u006fkens\":15}}",
       -1, 15},
      /* the outer member is no object, or absent: nothing */
      {&an, "message", "{\"message\":[{\"usage\":{\"input_tokens\":1}}]}", -1, -1},
      {&an, "message", "{\"usage\":{\"input_tokens\":1}}", -1, -1},
      /* a count token jansson refuses (a leading zero): none; the next read */
      {&an, NULL, "{\"usage\":{\"input_tokens\":012,\"output_tokens\":2}}", -1, 2},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    px_usage_t u = {.input_tokens = -1, .output_tokens = -1};
    const char *e = cases[i].event;
    px_usage_read(*cases[i].w, e, strlen(e), cases[i].outer, &u);
    if (u.input_tokens != cases[i].in || u.output_tokens != cases[i].out)
      fprintf(stderr, "event %zu: %lld/%lld\n", i, (long long)u.input_tokens,
              (long long)u.output_tokens);
    CHECK(u.input_tokens == cases[i].in && u.output_tokens == cases[i].out);
  }
  /* the tail of a body: usage found back from the end, whatever the cut
   * left at the front (Gemini's name, not Chat's) */
  static const char *const tails[] = {
      "Text\"}]}}],\"usageMetadata\":{\"promptTokenCount\":8,\"candidatesTokenCount\":2}"
      "}",
      "\":1}],\"us\\u0061geMetadata\":{\"promptTokenCount\":8,\"candidatesTokenCount\":2}"
      "}\n"};
  for (size_t i = 0; i < 2; i++) {
    px_usage_t u = {.input_tokens = -1, .output_tokens = -1};
    px_usage_tail(PX_PROTO_GEMINI, tails[i], strlen(tails[i]), &u);
    CHECK(u.input_tokens == 8 && u.output_tokens == 2);
    px_usage_t v = {.input_tokens = -1, .output_tokens = -1};
    CHECK(px_usage_scan(PX_PROTO_GEMINI, tails[i], strlen(tails[i]), &v) == 0);
  }
}

/* The readers of the id, model and finish reason never look past an
 * answer's last byte nor before its first, wherever their blocks of
 * sixteen and thirty-two bytes fall: every prefix of each answer read from
 * a heap copy of exactly its size (the sanitizer build finds a read past
 * it) and from one followed by bytes that would complete a member, the
 * same; the whole answers read as they are (an id and model compared near
 * the end, a finish reason in the first sixteen bytes). */
static void test_bounds(void) {
  static const struct {
    px_proto_t proto;
    const char *body, *id, *model, *finish;
  } cases[] = {
      {PX_PROTO_CHAT, "{\"id\":\"i\",\"model\":\"m\"}", "i", "m", ""},
      {PX_PROTO_CHAT, "{\"model\":\"m\",\"id\":\"i\"}", "i", "m", ""},
      {PX_PROTO_CHAT,
       "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1700000000,"
       "\"model\":\"gpt\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
       "\"content\":\"Hi.\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":2,"
       "\"completion_tokens\":1}}",
       "chatcmpl-1", "gpt", "stop"},
      {PX_PROTO_CHAT,
       "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":"
       "1700000000,"
       "\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
       "\"length\"}]}",
       "chatcmpl-1", "gpt", "length"},
      {PX_PROTO_ANTHROPIC, "{\"stop_reason\":\"x\"}", "", "", "x"},
      {PX_PROTO_ANTHROPIC,
       "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
       "\"claude\","
       "\"content\":[{\"type\":\"text\",\"text\":\"Hi.\"}],\"stop_reason\":\"end_turn\","
       "\"stop_sequence\":null,\"usage\":{\"input_tokens\":2,\"output_tokens\":1}}",
       "msg_1", "claude", "end_turn"},
      {PX_PROTO_GEMINI, "{\"modelVersion\":\"m\",\"responseId\":\"r\"}", "r", "m", ""},
  };
  static const char more[] = "\":\"x\"}],\"model\":\"y\",\"finish_reason\":\"z\"}";
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const px_wire_watch_t *w = &px_proto_get(cases[i].proto)->watch;
    size_t n = strlen(cases[i].body);
    for (size_t k = 0; k <= n; k++) {
      char *exact = malloc(k ? k : 1), *longer = malloc(k + sizeof(more));
      CHECK(exact && longer);
      memcpy(exact, cases[i].body, k);
      memcpy(longer, cases[i].body, k);
      memcpy(longer + k, more, sizeof(more));
      px_answer_t a[4], b[4];
      memset(a, 0, sizeof(a));
      memset(b, 0, sizeof(b));
      px_usage_t u = {.input_tokens = -1, .output_tokens = -1};
      size_t tail = PX_JSON_NPOS, tail2 = PX_JSON_NPOS;
      px_usage_scan_at(cases[i].proto, exact, k, &u, &tail);
      px_usage_scan_at(cases[i].proto, longer, k, &u, &tail2);
      CHECK(tail == tail2);
      px_answer_read(w, exact, k, NULL, &a[0]);
      px_answer_read(w, longer, k, NULL, &b[0]);
      px_answer_ids(w, exact, k, &a[1]);
      px_answer_ids(w, longer, k, &b[1]);
      px_answer_finish(w, exact, k, &a[2]);
      px_answer_finish(w, longer, k, &b[2]);
      px_answer_body(w, exact, k, tail, &a[3]);
      px_answer_body(w, longer, k, tail, &b[3]);
      int same = memcmp(a, b, sizeof(a)) == 0;
      if (!same) fprintf(stderr, "case %zu, %zu bytes: read past them\n", i, k);
      CHECK(same);
      if (k == n) {
        int ok = strcmp(a[0].id, cases[i].id) == 0 &&
                 strcmp(a[0].model, cases[i].model) == 0 &&
                 strcmp(a[0].finish, cases[i].finish) == 0 &&
                 strcmp(a[2].finish, cases[i].finish) == 0 &&
                 memcmp(&a[0], &a[3], sizeof(a[0])) == 0;
        if (!ok)
          fprintf(stderr, "case %zu: '%s' '%s' '%s'\n", i, a[0].id, a[0].model,
                  a[0].finish);
        CHECK(ok);
      }
      free(exact);
      free(longer);
    }
  }
}

int main(void) {
  test_cases();
  test_events();
  test_lead();
  test_finish();
  test_bounds();
  test_generated();
  return check_report("usage_scan");
}
