/* fuzz_gemini_fast.c - differential test of the Gemini fast codec
 * (src/proto/gemini.c) against the jansson codec (gemini.c), both
 * ways: a Gemini client's request and a Gemini upstream's answer, and
 * another protocol's request toward Gemini and its answer toward a Gemini
 * client. The checks are fuzz_translate_fast's (xlate_diff.h): wherever the
 * fast path takes a body, the jansson path gives a JSON-equal body and the
 * same lossy list.
 *
 * The bodies are templates of the common shapes (text, function calls and
 * responses, tools, tool config, generation config, usage) whose string
 * slots the input fills, raw, as JSON string content (escapes, UTF-8,
 * numbers, broken quoting ...), so that the fuzzer works inside shapes the
 * fast path takes instead of finding them first.
 *
 * Agents' shapes (thoughts, thought signatures of every family, blobs,
 * minted ids, thinkingConfig, JSON output) are also sent round: the fast
 * Gemini decoder then the fast Gemini encoder against gemini.c both ways
 * (round_trip()), whatever the other protocols' encoders take; so are
 * Gemini answers (answer_round(): thoughts and signatures, filtered
 * finishes, blocked prompts), and a refusal of the fast codec must be
 * gemini.c's, word for word.
 *
 * Input: byte 0: bits 0-1 the other protocol (% 3: chat, responses,
 * anthropic), bit 2 the Gemini template variant, bit 3 names an upstream
 * model, bit 4 sets a route max_tokens, bit 5 the agent templates (bit 2
 * picks one). The rest, split at '\n': line 0 the
 * function name (@N), line 1 the call id (@I), lines 2.. the slots @{..}@
 * in order; a slot without a line keeps its default (the text between the
 * braces). The first call checks that the fast path takes every template
 * as written (a differential test of a path never taken proves nothing). */
#include <stdint.h>
#include <string.h>

#include "xlate_diff.h"

#define MAX_LINES 64

/* Gemini client requests */
static const char *const gem_req[2] = {
    "{\"systemInstruction\":{\"parts\":[{\"text\":\"@{Be brief.}@\"}]},\"contents\":["
    "{\"role\":\"user\",\"parts\":[{\"text\":\"@{Weather in Paris?}@\"}]},"
    "{\"role\":\"model\",\"parts\":[{\"text\":\"@{Let me look.}@\"},{\"functionCall\":{"
    "\"name\":\"@N\",\"args\":{\"q\":\"@{Paris}@\",\"n\":[1,2.5,{\"k\":\"@{v}@\"}]}}}]},"
    "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"@N\",\"response\":"
    "{\"output\":\"@{sunny}@\"}}},{\"text\":\"@{thanks}@\"}]}],"
    "\"tools\":[{\"functionDeclarations\":[{\"name\":\"@N\",\"description\":\"@{Look "
    "up}@\","
    "\"parameters\":{\"type\":\"@{OBJECT}@\",\"properties\":{\"q\":{\"type\":\"STRING\","
    "\"description\":\"@{city}@\"},\"l\":{\"type\":\"ARRAY\",\"items\":{\"type\":\"@{"
    "INTEGER}@"
    "\"}}},\"required\":[\"q\"]}}]}],"
    "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"@{AUTO}@\"}},"
    "\"generationConfig\":{\"maxOutputTokens\":@{256}@,\"temperature\":0.7,\"topK\":40,"
    "\"stopSequences\":[\"@{END}@\"]}}",
    "{\"contents\":[{\"parts\":[{\"text\":\"@{hi}@\"}]},{\"role\":\"model\",\"parts\":["
    "{\"functionCall\":{\"id\":\"@I\",\"name\":\"@N\",\"args\":{}}},{\"functionCall\":{"
    "\"name\":\"@N\",\"args\":{\"a\":\"@{v}@\"}}}]},{\"role\":\"user\",\"parts\":["
    "{\"functionResponse\":{\"id\":\"@I\",\"name\":\"@N\",\"response\":{\"result\":"
    "\"@{r}@\",\"n\":1}}},{\"functionResponse\":{\"name\":\"@N\",\"response\":{"
    "\"content\":"
    "\"@{r2}@\"}}}]}],\"tools\":[{\"functionDeclarations\":[{\"name\":\"@N\","
    "\"parametersJsonSchema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
    "\"@{string}@\"}}}}]}],\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"ANY\","
    "\"allowedFunctionNames\":[\"@N\"]}},\"generationConfig\":{\"topP\":@{0.9}@,"
    "\"candidateCount\":1,\"seed\":3},\"safetySettings\":[]}",
};

/* Gemini CLI's requests: thoughts and signatures (Gemini's own, or another
 * family's behind its tag), ids of its own or minted, blobs, roles after
 * parts, code execution, thinking, JSON output */
static const char *const gem_agent[2] = {
    "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"@{run it}@\"},{\"text\":"
    "\"@{t}@\",\"thought\":true}]},{\"role\":\"model\",\"parts\":[{\"text\":\"@{plan}@\","
    "\"thought\":true,\"thoughtSignature\":\"@{c2ln}@\"},{\"text\":\"@{ok}@\","
    "\"thoughtSignature\":\"@{pxa1:sig:S1}@\"},{\"functionCall\":{\"id\":\"@I\",\"name\":"
    "\"@N\",\"args\":{\"command\":\"@{ls}@\"}},\"thoughtSignature\":\"@{Z2Vt}@\"}]},"
    "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"id\":\"@I\",\"name\":\"@N\","
    "\"response\":{\"output\":\"@{a b}@\"}}}]},{\"role\":\"model\",\"parts\":[{\"text\":"
    "\"@{x}@\",\"thought\":true},{\"text\":\"@{y}@\",\"thoughtSignature\":"
    "\"@{pxo1:enc:E1}@\"},{\"thoughtSignature\":\"@{pxa1:red:R1}@\"}]}],"
    "\"systemInstruction\":{\"role\":\"user\",\"parts\":[{\"text\":\"@{sys}@\"}]},"
    "\"tools\":[{\"functionDeclarations\":[{\"name\":\"@N\",\"description\":\"@{d}@\","
    "\"parametersJsonSchema\":{\"type\":\"object\",\"properties\":{\"command\":{"
    "\"type\":\"string\"}}}}]}],\"generationConfig\":{\"temperature\":1,\"topP\":0.95,"
    "\"topK\":64,\"thinkingConfig\":{\"includeThoughts\":true,\"thinkingBudget\":"
    "@{8192}@}}}",
    "{\"contents\":[{\"parts\":[{\"inlineData\":{\"mimeType\":\"@{image/png}@\",\"data\":"
    "\"@{QUFB}@\"}},{\"fileData\":{\"mimeType\":\"@{application/pdf}@\",\"fileUri\":"
    "\"@{https://x/a.pdf}@\"}},{\"text\":\"@{see}@\"}]},{\"parts\":[{\"functionCall\":{"
    "\"name\":\"@N\",\"args\":{}}},{\"functionCall\":{\"name\":\"@N\"}},{"
    "\"executableCode\":"
    "{\"code\":\"@{1}@\"}}],\"role\":\"model\"},{\"role\":\"user\",\"parts\":[{"
    "\"functionResponse\":{\"name\":\"@N\",\"response\":{\"content\":\"@{r1}@\"}}},{"
    "\"functionResponse\":{\"name\":\"@N\",\"response\":{\"a\":1,\"b\":\"@{x}@\"}}}]}],"
    "\"generationConfig\":{\"responseMimeType\":\"@{application/"
    "json}@\",\"responseSchema\":"
    "{\"type\":\"@{OBJECT}@\",\"properties\":{\"a\":{\"type\":\"@{INTEGER}@\"}}},"
    "\"thinkingConfig\":{\"thinkingLevel\":\"@{LOW}@\",\"thinkingBudget\":@{-1}@},"
    "\"maxOutputTokens\":@{100}@}}",
};

/* Gemini upstream answers */
static const char *const gem_resp[2] = {
    "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"@{Hello}@\"},{"
    "\"functionCall\":{"
    "\"name\":\"@N\",\"args\":{\"city\":\"@{Paris}@\"}}}],\"role\":\"model\"},"
    "\"finishReason\":\"@{STOP}@\",\"index\":0,\"safetyRatings\":[]}],\"usageMetadata\":{"
    "\"promptTokenCount\":25,\"candidatesTokenCount\":14,\"thoughtsTokenCount\":@{3}@,"
    "\"totalTokenCount\":42},\"modelVersion\":\"@{gemini-2.5-flash}@\",\"responseId\":"
    "\"@{resp1}@\"}",
    "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"@{a}@\"},{\"text\":\"@{b}@\"}]"
    ","
    "\"role\":\"model\"},\"finishReason\":\"MAX_TOKENS\"}],\"usageMetadata\":{"
    "\"promptTokenCount\":@{5}@,\"cachedContentTokenCount\":2},\"responseId\":\"@{r}@\"}",
};

/* Gemini upstream answers of agents' turns: thoughts with signatures (on
 * text, on calls, alone), a filtered finish with its message, a blocked
 * prompt, dropped parts; sent round through Gemini's own halves */
static const char *const gem_agent_resp[2] = {
    "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"@{plan}@\",\"thought\":"
    "true,\"thoughtSignature\":\"@{c2ln}@\"},{\"text\":\"@{ok}@\",\"thoughtSignature\":"
    "\"@{pxa1:sig:S1}@\"},{\"functionCall\":{\"name\":\"@N\",\"args\":{\"c\":\"@{ls}@"
    "\"}},\"thoughtSignature\":\"@{Z2Vt}@\"},{\"thoughtSignature\":\"@{pxo1:enc:E1}@\"},"
    "{\"executableCode\":{\"code\":\"@{1}@\"}},{\"inlineData\":{\"mimeType\":\"@{image/"
    "png}@\",\"data\":\"AA==\"}},{\"text\":\"@{done}@\"}],\"role\":\"model\"},"
    "\"finishReason\":\"@{STOP}@\",\"finishMessage\":\"@{m}@\",\"groundingMetadata\":{}}]"
    ","
    "\"usageMetadata\":{\"promptTokenCount\":9,\"thoughtsTokenCount\":@{3}@},"
    "\"responseId\":\"@{r1}@\"}",
    "{\"promptFeedback\":{\"blockReason\":\"@{PROHIBITED_CONTENT}@\","
    "\"blockReasonMessage\""
    ":\"@{no}@\"},\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"@{x}@\"}]},"
    "\"finishReason\":\"@{SAFETY}@\",\"finishMessage\":\"@{m}@\",\"citationMetadata\":{}}"
    "],\"modelVersion\":\"@{g}@\",\"usageMetadata\":{\"promptTokenCount\":@{4}@}}",
};

/* other clients' requests, by protocol (chat, responses, anthropic) */
static const char *const other_req[3] = {
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"@{sys}@\"},{"
    "\"role\":"
    "\"user\",\"content\":\"@{hi}@\"},{\"role\":\"assistant\",\"content\":null,\"tool_"
    "calls\":"
    "[{\"id\":\"@I\",\"type\":\"function\",\"function\":{\"name\":\"@N\",\"arguments\":"
    "\"@{{\\\"a\\\":1}}@\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"@I\",\"content\":"
    "\"@{result}@\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"@N\","
    "\"description\":\"@{d}@\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}],"
    "\"tool_choice\":\"@{auto}@\",\"max_tokens\":100,\"temperature\":0.5,\"stop\":\"@{"
    "END}@\","
    "\"user\":\"@{u}@\"}",
    "{\"model\":\"m\",\"instructions\":\"@{sys}@\",\"input\":[{\"role\":\"user\","
    "\"content\":"
    "\"@{hi}@\"},{\"type\":\"function_call\",\"call_id\":\"@I\",\"name\":\"@N\","
    "\"arguments\":\"@{{}}@\"},{\"type\":\"function_call_output\",\"call_id\":\"@I\","
    "\"output\":\"@{out}@\"}],\"tools\":[{\"type\":\"function\",\"name\":\"@N\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{}}}],\"max_output_tokens\":50}",
    "{\"model\":\"m\",\"system\":\"@{sys}@\",\"max_tokens\":64,\"messages\":[{\"role\":"
    "\"user\",\"content\":\"@{hi}@\"},{\"role\":\"assistant\",\"content\":[{\"type\":"
    "\"text\",\"text\":\"@{t}@\"},{\"type\":\"tool_use\",\"id\":\"@I\",\"name\":\"@N\","
    "\"input\":{\"a\":\"@{v}@\"}}]},{\"role\":\"user\",\"content\":[{\"type\":"
    "\"tool_result\",\"tool_use_id\":\"@I\",\"content\":\"@{{\\\"ok\\\":true}}@\"}]}],"
    "\"tools\":[{\"name\":\"@N\",\"description\":\"@{d}@\",\"input_schema\":{\"type\":"
    "\"object\"}}],\"tool_choice\":{\"type\":\"@{any}@\"},\"stop_sequences\":[\"@{S}@\"],"
    "\"top_k\":5}",
};

/* other upstreams' answers, by protocol */
static const char *const other_resp[3] = {
    "{\"id\":\"@{chatcmpl-1}@\",\"object\":\"chat.completion\",\"created\":1,\"model\":"
    "\"@{gpt}@\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
    "\"content\":"
    "\"@{hello}@\",\"tool_calls\":[{\"id\":\"@I\",\"type\":\"function\",\"function\":{"
    "\"name\":\"@N\",\"arguments\":\"@{{\\\"x\\\":1}}@\"}}]},\"finish_reason\":"
    "\"@{tool_calls}@\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":@{4}@,"
    "\"completion_tokens_details\":{\"reasoning_tokens\":2},\"prompt_tokens_details\":{"
    "\"cached_tokens\":1}}}",
    "{\"id\":\"@{resp_1}@\",\"object\":\"response\",\"created_at\":1,\"status\":"
    "\"completed\",\"model\":\"gpt\",\"output\":[{\"type\":\"message\",\"id\":\"m1\","
    "\"role\":\"assistant\",\"status\":\"completed\",\"content\":[{\"type\":\"output_"
    "text\","
    "\"text\":\"@{hi}@\",\"annotations\":[]}]},{\"type\":\"function_call\",\"id\":"
    "\"fc1\","
    "\"call_id\":\"@I\",\"name\":\"@N\",\"arguments\":\"@{{}}@\",\"status\":"
    "\"completed\"}],"
    "\"usage\":{\"input_tokens\":3,\"output_tokens\":4,\"output_tokens_details\":{"
    "\"reasoning_tokens\":1}}}",
    "{\"id\":\"@{msg_1}@\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
    "\"claude\","
    "\"content\":[{\"type\":\"text\",\"text\":\"@{hi}@\"},{\"type\":\"tool_use\",\"id\":"
    "\"@I\","
    "\"name\":\"@N\",\"input\":{\"a\":\"@{b}@\"}}],\"stop_reason\":\"@{tool_use}@\","
    "\"usage\":{"
    "\"input_tokens\":3,\"output_tokens\":5,\"cache_read_input_tokens\":@{2}@}}",
};

static const px_proto_t others[3] = {PX_PROTO_CHAT, PX_PROTO_RESPONSES,
                                     PX_PROTO_ANTHROPIC};

typedef struct lines {
  const char *p[MAX_LINES];
  size_t n[MAX_LINES];
  int count;
} lines_t;

static void put(px_buf_t *b, const char *p, size_t n) {
  if (n && px_buf_append(b, p, n) < 0) abort();
}

/* the template t with its slots filled from l */
static void fill(px_buf_t *b, const char *t, const lines_t *l) {
  int next = 2;
  b->len = 0;
  while (*t) {
    const char *at = strchr(t, '@');
    if (at == NULL) {
      put(b, t, strlen(t));
      break;
    }
    put(b, t, (size_t)(at - t));
    if (at[1] == 'N' || at[1] == 'I') {
      int k = at[1] == 'N' ? 0 : 1;
      if (k < l->count)
        put(b, l->p[k], l->n[k]);
      else
        put(b, k ? "call_1" : "get_weather", k ? 6 : 11);
      t = at + 2;
    } else if (at[1] == '{') {
      const char *end = strstr(at + 2, "}@");
      if (end == NULL) abort(); /* a broken template */
      if (next < l->count)
        put(b, l->p[next], l->n[next]);
      else
        put(b, at + 2, (size_t)(end - at - 2));
      next++;
      t = end + 2;
    } else {
      put(b, at, 1);
      t = at + 1;
    }
  }
}

static void ctx_of(px_tr_ctx_t *c, px_proto_t in, px_proto_t out, int flags) {
  memset(c, 0, sizeof(*c));
  c->in = in;
  c->out = out;
  c->created = 1700000000;
  c->max_accum = 1 << 20;
  c->default_max_tokens = flags & 16 ? 1024 : 0;
  c->client_model = "client-model";
  c->upstream_model = flags & 8 ? "upstream-\"model\"" : NULL;
}

/* A Gemini request round: the fast decoder and encoder against gemini.c's
 * (px_translate_request, Gemini on both sides), generateContent and
 * streamGenerateContent; returns the rounds the fast codec took. */
static unsigned long round_trip(const px_tr_ctx_t *c0, const char *body, size_t len) {
  px_json_req_t scan;
  unsigned long taken = 0;
  if (px_json_request(body, len, &scan) < 0) return 0;
  for (int st = 0; st < 2; st++) {
    px_tr_ctx_t c = *c0;
    c.in = c.out = PX_PROTO_GEMINI;
    c.stream = st;
    if (c.upstream_model == NULL) c.upstream_model = c.client_model;
    px_arena_t a;
    px_arena_init(&a);
    px_freq_t ir;
    px_freq_init(&ir);
    px_lossy_t lf, ls;
    px_lossy_init(&lf);
    px_lossy_init(&ls);
    px_buf_t b;
    px_buf_init(&b, len * 4 + 65536);
    px_tr_err_t ef;
    memset(&ef, 0, sizeof(ef));
    int rc = px_fast_request_steps(&c, &c, &px_gemini_fast, &px_gemini_fast, body, len,
                                   &ir, &a, &b, &lf, &ef);
    if (rc == PX_FAST_REFUSE) { /* gemini.c refuses it too, in the same words */
      px_tr_ctx_t ref = c;
      json_t *src = json_loadb(body, len, 0, NULL), *ub = NULL;
      px_tr_err_t es;
      memset(&es, 0, sizeof(es));
      if (src != NULL && (px_translate_request(&ref, src, &ub, &ls, &es) == 0 ||
                          !same_refusal(&ef, &es)))
        diff_fail("round refusal", &c, body, len, ef.message, es.message, ef.param,
                  es.param);
      json_decref(ub);
      json_decref(src);
    }
    if (rc == 0) {
      taken++;
      px_tr_ctx_t ref = c;
      json_t *src = json_loadb(body, len, 0, NULL), *ub = NULL;
      px_tr_err_t err;
      memset(&err, 0, sizeof(err));
      if (px_buf_append(&b, "", 1) < 0) abort();
      if (src == NULL || px_translate_request(&ref, src, &ub, &ls, &err) < 0)
        diff_fail("round (jansson refused)", &c, body, len, b.data, err.message, lf.buf,
                  "");
      char *so = json_dumps(ub, JSON_COMPACT);
      if (so == NULL) abort();
      check_json("round", &c, body, len, b.data, b.len - 1, so, strlen(so), &lf, &ls);
      free(so);
      json_decref(ub);
      json_decref(src);
    }
    px_buf_free(&b);
    px_arena_free(&a);
  }
  return taken;
}

/* A Gemini answer round: the fast decoder and encoder (a Gemini client)
 * against gemini.c's; 1 when the fast codec took it (or refused it as
 * gemini.c does). */
static unsigned long answer_round(const px_tr_ctx_t *c0, const char *body, size_t len) {
  px_json_req_t scan;
  if (px_json_request(body, len, &scan) < 0) return 0;
  px_tr_ctx_t c = *c0;
  c.in = c.out = PX_PROTO_GEMINI;
  px_arena_t a;
  px_arena_init(&a);
  px_fresp_t ir;
  memset(&ir, 0, sizeof(ir));
  ir.in = ir.out = ir.cache_read = ir.cache_creation = ir.reasoning = -1;
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t b;
  px_buf_init(&b, len * 4 + 65536);
  px_tr_err_t ef, es;
  memset(&ef, 0, sizeof(ef));
  memset(&es, 0, sizeof(es));
  int rc = px_gemini_fast.decode_response(&c, body, len, &ir, &a, &lf, &ef);
  if (rc == 0 && (px_fresp_uses(&ir) & ~px_gemini_fast.resp_encodes) != 0) rc = 1;
  if (rc == 0) rc = px_gemini_fast.encode_response(&c, &ir, &b, &a, &lf, &ef);
  const px_ref_ops_t *ops = px_ref_get(PX_PROTO_GEMINI);
  json_t *src = rc == 0 || rc == PX_FAST_REFUSE ? json_loadb(body, len, 0, NULL) : NULL;
  json_t *jir = NULL, *out = NULL;
  int rs = src == NULL ? -1 : ops->decode_response(&c, src, &jir, &ls, &es);
  if (rs == 0) rs = ops->encode_response(&c, jir, &out, &ls, &es);
  if (rc == PX_FAST_REFUSE && src != NULL && (rs == 0 || !same_refusal(&ef, &es)))
    diff_fail("answer round refusal", &c, body, len, ef.message, es.message, ef.param,
              es.param);
  if (rc == 0) {
    if (px_buf_append(&b, "", 1) < 0) abort();
    if (rs != 0)
      diff_fail("answer round (jansson refused)", &c, body, len, b.data, es.message,
                lf.buf, "");
    char *so = json_dumps(out, JSON_COMPACT);
    if (so == NULL) abort();
    check_json("answer round", &c, body, len, b.data, b.len - 1, so, strlen(so), &lf,
               &ls);
    free(so);
  }
  json_decref(src);
  json_decref(jir);
  json_decref(out);
  px_buf_free(&b);
  px_arena_free(&a);
  return rc == 0 || rc == PX_FAST_REFUSE;
}

/* every direction of one input; returns the bodies the fast path took
 * (five: the Gemini request is tried as generateContent and as
 * streamGenerateContent, request() in xlate_diff.h) */
static unsigned long run(int flags, const lines_t *l) {
  px_proto_t o = others[(flags & 3) % 3];
  int v = (flags >> 2) & 1;
  unsigned long r0, s0, r1, s1;
  px_translate_fast_counts(&r0, &s0);
  px_buf_t b;
  px_tr_ctx_t c;
  px_buf_init(&b, 1u << 20);
  if (flags & 32) { /* an agent's request: round, and to the other upstream */
    fill(&b, gem_agent[v], l);
    ctx_of(&c, PX_PROTO_GEMINI, o, flags);
    unsigned long rounds = round_trip(&c, b.data, b.len);
    request(&c, b.data, b.len);
    fill(&b, gem_agent_resp[v], l); /* its answer: round, and to the other client */
    rounds += answer_round(&c, b.data, b.len);
    ctx_of(&c, o, PX_PROTO_GEMINI, flags);
    response(&c, b.data, b.len);
    fill(&b, gem_resp[v], l);
    rounds += answer_round(&c, b.data, b.len);
    px_buf_free(&b);
    return rounds;
  }
  fill(&b, gem_req[v], l); /* Gemini client -> other upstream */
  ctx_of(&c, PX_PROTO_GEMINI, o, flags);
  request(&c, b.data, b.len);
  fill(&b, other_resp[o == PX_PROTO_CHAT ? 0 : o == PX_PROTO_RESPONSES ? 1 : 2], l);
  response(&c, b.data, b.len);
  fill(&b, other_req[o == PX_PROTO_CHAT ? 0 : o == PX_PROTO_RESPONSES ? 1 : 2], l);
  ctx_of(&c, o, PX_PROTO_GEMINI, flags); /* other client -> Gemini upstream */
  request(&c, b.data, b.len);
  fill(&b, gem_resp[v], l);
  response(&c, b.data, b.len);
  px_buf_free(&b);
  px_translate_fast_counts(&r1, &s1);
  return (r1 - r0) + (s1 - s0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int checked;
  if (!checked) {
    checked = 1;
    lines_t none = {.count = 0};
    for (int f = 0; f < 64; f++) {
      if ((f & 3) == 3) continue;
      unsigned long taken = run(f, &none), want = f & 32 ? 4 : 5;
      if (taken != want) {
        fprintf(stderr,
                "fuzz_gemini_fast: the fast path took %lu of %lu bodies (flags %d)\n",
                taken, want, f);
        abort();
      }
    }
  }
  if (size < 1) return 0;
  lines_t l = {.count = 0};
  const char *p = (const char *)data + 1, *end = (const char *)data + size;
  while (p <= end && l.count < MAX_LINES) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *e = nl ? nl : end;
    l.p[l.count] = p;
    l.n[l.count++] = (size_t)(e - p);
    if (nl == NULL) break;
    p = nl + 1;
  }
  if (size == 1) l.count = 0;
  run(data[0], &l);
  return 0;
}
