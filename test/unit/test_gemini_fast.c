/* test_gemini_fast.c - the fast path of non-streaming translation with a
 * Gemini client or a Gemini upstream (src/proto/gemini.c): it takes
 * the common shape of a generateContent request and answer toward and from
 * Chat, Responses and Anthropic, its body is JSON-equal to the jansson
 * path's (gemini.c) with the same lossy list, and it declines what it does
 * not know exactly (test_translate_fast.c holds thoughts, signatures,
 * blobs, thinking and JSON output against gemini.c). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fast_pair.h"
#include "proxai/fastir.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"

#define CHAT 0
#define RESP 1
#define ANTH 2
#define GEM 3

/* a Gemini client's request: system, text, a call and its response, a
 * function declaration with an upper-case schema, tool config, sampling */
static const char gem_request[] =
    "{\"systemInstruction\":{\"parts\":[{\"text\":\"Be brief.\"}]},\"contents\":["
    "{\"role\":\"user\",\"parts\":[{\"text\":\"Weather in \\u00e9 \\\"Paris\\\"?\"}]},"
    "{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"get_weather\","
    "\"args\":{\"city\":\"Paris\",\"days\":[1,2.5]}}}]},"
    "{\"role\":\"user\",\"parts\":[{\"functionResponse\":{\"name\":\"get_weather\","
    "\"response\":{\"temp\":21,\"sky\":\"clear\"}}}]},"
    "{\"role\":\"model\",\"parts\":[{\"text\":\"Clear, 21.\"}]},"
    "{\"role\":\"user\",\"parts\":[{\"text\":\"And tomorrow?\"}]}],"
    "\"tools\":[{\"functionDeclarations\":[{\"name\":\"get_weather\",\"description\":"
    "\"Weather\",\"parameters\":{\"type\":\"OBJECT\",\"properties\":{\"city\":{\"type\":"
    "\"STRING\"},\"type\":{\"type\":\"STRING\"}},\"required\":[\"city\"]}}]}],"
    "\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"AUTO\"}},"
    "\"generationConfig\":{\"maxOutputTokens\":256,\"temperature\":0.7,\"topP\":0.9,"
    "\"topK\":40,\"stopSequences\":[\"END\"],\"seed\":7},\"safetySettings\":[]}";

/* a Gemini upstream's answer: text and a call, usage with thoughts */
static const char gem_answer[] =
    "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Let me check.\"},"
    "{\"functionCall\":{\"name\":\"get_weather\",\"args\":{\"city\":\"Paris\"}}}],"
    "\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0,\"avgLogprobs\":-0.1}],"
    "\"usageMetadata\":{\"promptTokenCount\":25,\"candidatesTokenCount\":14,"
    "\"thoughtsTokenCount\":6,\"totalTokenCount\":45,\"promptTokensDetails\":[{"
    "\"modality\":\"TEXT\",\"tokenCount\":25}]},\"modelVersion\":\"gemini-2.5-flash\","
    "\"responseId\":\"abc\"}";

/* the other protocols' requests and answers */
static const char *const requests[3] = {
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,"
    "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
    "\"f\","
    "\"arguments\":\"{\\\"a\\\": "
    "1.5}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\","
    "\"content\":\"{\\\"ok\\\": "
    "true}\"}],\"tools\":[{\"type\":\"function\",\"function\":{"
    "\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":\"required\","
    "\"max_tokens\":256,\"stop\":\"END\",\"user\":\"u1\"}",
    "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"input\":[{\"role\":\"user\","
    "\"content\":\"Hi\"},{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\","
    "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"c1\","
    "\"output\":\"ok\"}],\"tools\":[{\"type\":\"function\",\"name\":\"f\","
    "\"parameters\":{\"type\":\"object\"}}],\"max_output_tokens\":256,\"temperature\":0."
    "7}",
    "{\"model\":\"m\",\"system\":\"Be brief.\",\"messages\":[{\"role\":\"user\","
    "\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
    "\"text\":\"Let me see.\"},{\"type\":\"tool_use\",\"id\":\"tu_1\",\"name\":\"f\","
    "\"input\":{\"a\":[1,2.5,\"x\"]}}]},{\"role\":\"user\",\"content\":[{\"type\":"
    "\"tool_result\",\"tool_use_id\":\"tu_1\",\"content\":\"failed\",\"is_error\":true},"
    "{\"type\":\"text\",\"text\":\"and?\"}]}],\"tools\":[{\"name\":\"f\","
    "\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"tool\","
    "\"name\":\"f\"},\"max_tokens\":256,\"top_k\":5}",
};

static const char *const answers[3] = {
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"u\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello\","
    "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
    "\"f\","
    "\"arguments\":\"{\\\"a\\\":1}\"}}]},\"logprobs\":null,\"finish_reason\":\"tool_"
    "calls\"}],"
    "\"usage\":{\"prompt_tokens\":25,\"completion_tokens\":14,\"total_tokens\":39,"
    "\"prompt_tokens_details\":{\"cached_tokens\":5},\"completion_tokens_details\":{"
    "\"reasoning_tokens\":4}}}",
    "{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":"
    "\"completed\","
    "\"model\":\"u\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"role\":"
    "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hello\","
    "\"annotations\":[]}]}],\"usage\":{\"input_tokens\":25,\"output_tokens\":14}}",
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"u\","
    "\"content\":[{\"type\":\"text\",\"text\":\"Hello\"}],\"stop_reason\":\"max_tokens\","
    "\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":14}}",
};

/* a body gemini.c refuses: the fast path refuses it in the same words
 * (kind, param, message) */

static void declines(void) {
  /* a wrapped countTokens body: its inner request is read there */
  request_declined(GEM, ANTH,
                   "{\"generateContentRequest\":{\"contents\":[{\"parts\":[{\"text\":"
                   "\"x\"}]}]},\"contents\":[]}");
  /* an escaped member name, a repeated one */
  request_declined(GEM, CHAT, "{\"c\\u006fntents\":[{\"parts\":[{\"text\":\"x\"}]}]}");
  request_declined(GEM, CHAT,
                   "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],\"contents\":[]}");
}

/* what gemini.c refuses, refused in its words: the first refusal it meets
 * in its order of reading, wherever the body holds it */
static void refusals(void) {
  request_refused(GEM, CHAT,
                  "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"functionCall\":{"
                  "\"name\":\"f\",\"args\":{}}}]}]}",
                  "contents[0].parts[0]");
  request_refused(GEM, RESP,
                  "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],\"generationConfig\":{"
                  "\"candidateCount\":2}}",
                  "generationConfig.candidateCount");
  request_refused(
      GEM, CHAT,
      "{\"contents\":[{\"parts\":[{\"text\":\"x\"}]}],\"cachedContent\":\"c\"}",
      "cachedContent");
  /* a response answering no call */
  request_refused(GEM, ANTH,
                  "{\"contents\":[{\"parts\":[{\"functionResponse\":{\"name\":\"f\","
                  "\"response\":{}}}]}]}",
                  "contents[0].parts[0]");
  /* tools before contents in the body: contents' refusal is gemini.c's first */
  request_refused(GEM, CHAT,
                  "{\"tools\":[{\"functionDeclarations\":[{\"description\":\"d\"}]}],"
                  "\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"a\"}]},"
                  "{\"role\":\"tool\",\"parts\":[]}]}",
                  "contents[1]");
  request_refused(GEM, CHAT,
                  "{\"contents\":[{\"parts\":[{\"text\":\"a\"}]}],\"tools\":[{"
                  "\"functionDeclarations\":[{\"description\":\"d\"}]}]}",
                  "tools[].functionDeclarations[].name");
  request_refused(GEM, RESP,
                  "{\"toolConfig\":{\"functionCallingConfig\":{\"mode\":\"ANY\","
                  "\"allowedFunctionNames\":[\"a\",\"b\"]}},\"contents\":[{\"parts\":[{"
                  "\"text\":\"a\"}]}]}",
                  "toolConfig.functionCallingConfig");
  request_refused(GEM, CHAT,
                  "{\"contents\":[{\"role\":\"model\",\"parts\":[{\"inlineData\":{"
                  "\"data\":\"AA==\"}}]}],\"systemInstruction\":{\"parts\":[{\"x\":1}]}}",
                  "systemInstruction.parts");
  request_refused(GEM, CHAT, "{\"contents\":{}}", "contents");
  request_refused(GEM, ANTH,
                  "{\"cachedContent\":\"c\",\"systemInstruction\":{\"parts\":[1]},"
                  "\"contents\":[{\"parts\":[{\"text\":\"a\"}]}]}",
                  "cachedContent");
  request_refused(
      GEM, CHAT,
      "{\"contents\":[{\"parts\":[{\"text\":\"a\"}]}],\"toolConfig\":{"
      "\"functionCallingConfig\":{\"mode\":\"AN\\u0059\",\"allowedFunctionNames\":"
      "[\"a\",\"b\"]}}}",
      "toolConfig.functionCallingConfig");
  request_refused(GEM, CHAT,
                  "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"inlineData\":{"
                  "\"mimeType\":\"image/png\"}}]}]}",
                  "contents[0].parts[0].inlineData");
  /* taken: other tools dropped by their names, an escaped role, what
   * gemini.c reads nothing of */
  request_pair(GEM, CHAT,
               "{\"contents\":[{\"parts\":[{\"text\":\"a\"}]},{\"role\":\"mod\\u0065l\","
               "\"parts\":[{\"text\":\"b\"},{\"executableCode\":{}}]}],\"tools\":[{"
               "\"googleSearch\":{}},{\"urlContext\":{},\"codeExecution\":{}},7,{"
               "\"functionDeclarations\":[{\"name\":\"f\"}],\"fileSearch\":{}}],"
               "\"generationConfig\":{\"candidateCount\":-3},\"toolConfig\":[],"
               "\"systemInstruction\":\"s\"}",
               "\"role\":\"assistant\"");
  /* an escaped MIME type and thinking level, read unescaped */
  request_pair(
      GEM, ANTH,
      "{\"contents\":[{\"parts\":[{\"inlineData\":{\"mimeType\":\"im\\u0061ge/png\","
      "\"data\":\"AA==\"}}]}],\"generationConfig\":{\"thinkingConfig\":{"
      "\"thinkingLevel\":\"L\\u004fW\"}}}",
      "\"type\":\"image\"");
  /* toward Gemini: a result answering no call, arguments that are no object */
  request_refused(
      CHAT, GEM,
      "{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"c9\","
      "\"content\":\"x\"}]}",
      "messages[].content[].tool_result");
  request_refused(
      ANTH, GEM,
      "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"assistant\","
      "\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":"
      "[1]}]}]}",
      "messages.content.input");
  /* a Gemini client: arguments of an upstream's call that are no object */
  answer_refused(
      GEM, CHAT,
      "{\"id\":\"c\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"u\","
      "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
      "\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
      "\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]},"
      "\"finish_reason\":\"tool_calls\"}]}");
}

/* A Gemini answer through Gemini's own fast halves (decode_response, then
 * encode_response for a Gemini client) against gemini.c's halves: the same
 * body and lossy list, or the same refusal; want (not NULL) in the body. */
static void gem_answer_halves(const char *body, const char *want) {
  sides_t r;
  sides_init(&r, GEM, GEM);
  int rc = fast_answer_halves(&r.c, &px_gemini_fast, &px_gemini_fast, body, strlen(body),
                              &r.b, &r.lf, &r.ef);
  const px_ref_ops_t *ops = px_ref_get(PX_PROTO_GEMINI);
  json_t *src = json_loadb(body, strlen(body), 0, NULL), *jir = NULL, *out = NULL;
  int rs = ops->decode_response(&r.c, src, &jir, &r.ls, &r.es);
  if (rs == 0) rs = ops->encode_response(&r.c, jir, &out, &r.ls, &r.es);
  CHECK(rc == 0 || rc == PX_FAST_REFUSE);
  if (rc == PX_FAST_REFUSE) {
    refusal_same("gemini halves refusal", &r, rs != 0, NULL, body);
  } else if (rc == 0) {
    char *s = out ? json_dumps(out, JSON_COMPACT) : NULL;
    fast_same("gemini halves", &r.b, &r.lf, rs == 0 ? s : NULL, &r.ls, want);
    free(s);
  }
  json_decref(src);
  json_decref(jir);
  json_decref(out);
  sides_free(&r);
}

/* Gemini's answers the fast codec takes: thoughts and signatures, refusals
 * and their explanation, blocked prompts, dropped parts */
static void answers_taken(void) {
  /* thoughts with signatures, on text, on a call and alone */
  gem_answer_halves(
      "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"hm\",\"thought\":true,"
      "\"thoughtSignature\":\"s1\"},{\"text\":\"x\",\"thoughtSignature\":\"s2\"},"
      "{\"functionCall\":{\"name\":\"f\",\"args\":{}},\"thoughtSignature\":\"s3\"},"
      "{\"thoughtSignature\":\"s4\"},{\"thoughtSignature\":\"s5\"}],\"role\":\"model\"},"
      "\"finishReason\":\"STOP\"}],\"responseId\":\"r\",\"modelVersion\":\"g\"}",
      "{\"thoughtSignature\":\"s3\",\"functionCall\":{\"id\":\"call_r_0\"");
  /* a SAFETY finish with words and an explanation, safety ratings */
  gem_answer_halves(
      "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"no\"}]},\"finishReason\":"
      "\"SAFETY\",\"finishMessage\":\"blocked\",\"safetyRatings\":[]}],\"modelVersion\":"
      "\"g\"}",
      "\"finishMessage\":\"blocked\"");
  /* a blocked prompt: no candidate; its message is the only wording */
  gem_answer_halves(
      "{\"promptFeedback\":{\"blockReason\":\"PROHIBITED_CONTENT\","
      "\"blockReasonMessage\":"
      "\"not allowed\"},\"usageMetadata\":{\"promptTokenCount\":4}}",
      "\"parts\":[{\"text\":\"not allowed\"}]},\"finishReason\":\"SAFETY\"");
  /* a finish reason spelled with escapes, an explanation of no refusal */
  gem_answer_halves(
      "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]},"
      "\"finishReason\":\"M\\u0041X_TOKENS\",\"finishMessage\":\"m\"}]}",
      "\"MAX_TOKENS\"");
  /* code execution and blobs dropped, grounding and citations named */
  gem_answer_halves(
      "{\"candidates\":[{\"content\":{\"parts\":[{\"executableCode\":{\"code\":\"1\"}},"
      "{\"codeExecutionResult\":{\"output\":\"1\"}},{\"inlineData\":{\"mimeType\":"
      "\"image/"
      "png\",\"data\":\"AA==\"}},{\"text\":\"done\"},7]},\"finishReason\":\"STOP\","
      "\"groundingMetadata\":{},\"citationMetadata\":{}}]}",
      NULL);
  /* no single candidate: gemini.c's 502 */
  gem_answer_halves("{\"candidates\":[],\"modelVersion\":\"g\"}", NULL);
  gem_answer_halves("{\"candidates\":[{},{}]}", NULL);
  answer_refused(CHAT, GEM, "{\"candidates\":[],\"modelVersion\":\"g\"}");
  answer_refused(ANTH, GEM, "{\"usageMetadata\":{\"promptTokenCount\":3}}");
}

/* ---- a streamed call's partialArgs: a long run of string fragments is
 * joined once (linear), and the arguments held stay within max_accum ---- */
typedef struct {
  int errors;
  px_buf_t args;
} sink_t;

static int on_ev(void *arg, const px_ev_t *ev) {
  sink_t *s = arg;
  if (ev->type == PX_EV_ERROR) s->errors++;
  if (ev->type == PX_EV_DELTA && ev->delta == PX_DELTA_TOOL_ARGS)
    CHECK(px_buf_append(&s->args, ev->text.ptr, ev->text.len) == 0);
  return 0;
}

static void feed(px_sdec_t *d, const char *data) {
  px_sse_event_t e = {PX_STR_NULL, px_str(data), PX_STR_NULL};
  px_gemini_sdec_feed(d, &e);
}

static int partial_args(size_t fragments, size_t max_accum, sink_t *s) {
  px_tr_ctx_t c;
  ctx_of(&c, CHAT, GEM);
  c.max_accum = max_accum;
  memset(s, 0, sizeof(*s));
  px_buf_init(&s->args, 64u << 20);
  px_sdec_t *d = px_gemini_sdec_new(&c, on_ev, s);
  feed(d,
       "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":"
       "{\"name\":\"w\",\"willContinue\":true}}]}}],\"responseId\":\"r\"}");
  for (size_t i = 0; i < fragments; i++)
    feed(d,
         "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":"
         "{\"partialArgs\":[{\"jsonPath\":\"$.code\",\"stringValue\":\"0123456789\","
         "\"willContinue\":true}],\"willContinue\":true}}]}}]}");
  feed(d,
       "{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":"
       "{}}]},\"finishReason\":\"STOP\"}]}");
  px_gemini_sdec_finish(d);
  px_gemini_sdec_free(d);
  return s->errors;
}

static void streamed_partial_args(void) {
  sink_t s;
  /* 20,000 fragments (200 KB): one string of them all */
  CHECK(partial_args(20000, 1u << 20, &s) == 0);
  CHECK(s.args.len == 200000 + strlen("{\"code\":\"\"}"));
  px_buf_free(&s.args);
  /* past max_accum: an error event, not a growing document */
  CHECK(partial_args(20000, 64u << 10, &s) > 0);
  CHECK(s.args.len == 0);
  px_buf_free(&s.args);
}

/* ---- the stream decoder's tail memo: a chunk whose tail repeats the
 * last one's bytes around other integers is read from the memo as the walk
 * reads it; anything else in the tail is walked (the fast path against the
 * general one, event by event) ---- */
static int ev_log(void *arg, const px_ev_t *ev) {
  px_buf_t *b = arg;
  char line[256];
  snprintf(line, sizeof(line), "%d %d %d %d %d %lld %lld %lld %lld|", (int)ev->type,
           ev->index, (int)ev->block, (int)ev->delta, (int)ev->stop,
           (long long)ev->usage.input_tokens, (long long)ev->usage.output_tokens,
           (long long)ev->usage.reasoning_tokens, (long long)ev->usage.cache_read_tokens);
  const px_str_t s[] = {ev->text, ev->id, ev->model, ev->finish};
  int rc = px_buf_puts(b, line);
  for (size_t i = 0; rc == 0 && i < sizeof(s) / sizeof(s[0]); i++) {
    if (s[i].len) rc = px_buf_append(b, s[i].ptr, s[i].len);
    if (rc == 0) rc = px_buf_puts(b, "|");
  }
  CHECK(rc == 0);
  return 0;
}

/* chunks fed to a decoder with the fast path and one without: the same
 * return codes and events; the fast path handles `hits` of them */
static void memo_stream(const char *const *chunks, size_t n, long hits) {
  px_tr_ctx_t c;
  ctx_of(&c, CHAT, GEM);
  px_buf_t log[2];
  px_sdec_t *d[2];
  for (int k = 0; k < 2; k++) {
    px_buf_init(&log[k], 1u << 20);
    d[k] = px_gemini_sdec_new(&c, ev_log, &log[k]);
  }
  px_gemini_sdec_fast(d[1], 0);
  for (size_t i = 0; i < n; i++) {
    px_sse_event_t e = {PX_STR_NULL, px_str(chunks[i]), PX_STR_NULL};
    int r0 = px_gemini_sdec_feed(d[0], &e), r1 = px_gemini_sdec_feed(d[1], &e);
    CHECK(r0 == r1);
    CHECK(log[0].len == log[1].len && memcmp(log[0].data, log[1].data, log[0].len) == 0);
  }
  CHECK(px_gemini_sdec_finish(d[0]) == px_gemini_sdec_finish(d[1]));
  CHECK(log[0].len == log[1].len && memcmp(log[0].data, log[1].data, log[0].len) == 0);
  CHECK(px_gemini_sdec_fast(d[0], -1) == hits);
  for (int k = 0; k < 2; k++) {
    px_gemini_sdec_free(d[k]);
    px_buf_free(&log[k]);
  }
}

#define MHEAD "{\"candidates\": [{\"content\": {\"parts\": [{\"text\": \""
#define MPART "\"}],\"role\": \"model\"},\"index\": 0}],"
#define MIDS ",\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"r1\"}"
#define MUSAGE(c, t)                                                          \
  "\"usageMetadata\": {\"promptTokenCount\": 18,\"candidatesTokenCount\": " c \
  ",\"totalTokenCount\": " t                                                  \
  ",\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 18}]}"

static void stream_memo(void) {
  static const char *const live[] = {
      MHEAD "One" MPART MUSAGE("9", "27") MIDS,
      /* the counts grow (a digit more), the text has escapes */
      MHEAD " \\\"two\\\" \\u00e9\\ud83d\\ude00" MPART MUSAGE("10", "28") MIDS,
      MHEAD "3" MPART MUSAGE("11", "-29") MIDS,
      /* the same tail but another id (bytes, not a count): walked */
      MHEAD "4" MPART MUSAGE("12", "30") ",\"modelVersion\": \"gemini-2.5-flash\","
                                        "\"responseId\": \"r2\"}",
      /* compact, a count where none was, the cached count */
      "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"5\"}],\"role\":\"model\"},"
      "\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":18,"
      "\"cachedContentTokenCount\":4,\"thoughtsTokenCount\":7}}",
      "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"6\"}],\"role\":\"model\"},"
      "\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":180,"
      "\"cachedContentTokenCount\":0,\"thoughtsTokenCount\":70}}",
      MHEAD "" "\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],"
            MUSAGE("13", "31") MIDS};
  memo_stream(live, sizeof(live) / sizeof(live[0]), 7);
  static const char *const bad[] = {
      MHEAD "a" MPART MUSAGE("9", "27") MIDS,
      /* where the memo has an integer: a leading zero, a fraction, none */
      MHEAD "b" MPART MUSAGE("09", "27") MIDS,
      MHEAD "b" MPART MUSAGE("9.5", "27") MIDS,
      MHEAD "b" MPART MUSAGE("\"9\"", "27") MIDS,
      /* the memo's bytes, then more */
      MHEAD "b" MPART MUSAGE("9", "27") MIDS "}",
  };
  for (size_t k = 1; k < sizeof(bad) / sizeof(bad[0]); k++) {
    const char *pair[2] = {bad[0], bad[k]};
    memo_stream(pair, 2, 1);
  }
  /* a tail with more to it than the memo: walked, and what it reads counts */
  static const char *const more[] = {
      MHEAD "a" MPART MUSAGE("9", "27") MIDS,
      MHEAD "b" MPART MUSAGE("9", "27") MIDS " ",
      MHEAD "c" MPART MUSAGE("9", "27") ",\"modelVersion\": \"gemini-2.5-flash\","
                                        "\"responseId\": \"r1\",\"responseId\": \"r1\"}",
      MHEAD "d\"}],\"role\": \"model\"},\"safetyRatings\": [],\"index\": 0}],"
            MUSAGE("9", "27") MIDS,
      MHEAD "e\"}],\"role\": \"model\"},\"finishReason\": \"SAFETY\",\"index\": 0}]" MIDS};
  memo_stream(more, sizeof(more) / sizeof(more[0]), 4);
}

int main(void) {
  stream_memo();
  streamed_partial_args();
  for (int o = 0; o < 3; o++) {
    /* a Gemini client: its request out, the other's answer back */
    request_pair(GEM, o, gem_request, NULL);
    /* streamGenerateContent: the same codecs, the upstream body streams */
    request_pair_s(GEM, o, gem_request, "\"stream\":true", 1);
    answer_pair(GEM, o, answers[o], "\"finishReason\"");
    /* a Gemini upstream: the other's request out, Gemini's answer back */
    request_pair(o, GEM, requests[o], "\"role\":\"model\"");
    answer_pair(o, GEM, gem_answer, NULL);
  }
  /* the tool result answers its call by name; an object result is kept */
  request_pair(CHAT, GEM, requests[CHAT],
               "{\"functionResponse\":{\"name\":\"f\",\"response\":{\"ok\": true}}}");
  request_pair(ANTH, GEM, requests[ANTH], "\"response\":{\"error\":\"failed\"}");
  /* Gemini's call ids are minted from the response id */
  answer_pair(CHAT, GEM, gem_answer, "\"call_abc_0\"");
  declines();
  refusals();
  answers_taken();
  return check_report("gemini_fast");
}
