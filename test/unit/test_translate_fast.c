/* test_translate_fast.c - the fast path of non-streaming translation
 * (include/proxai/fastir.h, src/proto/translate_fast.c): it takes the common
 * shape of a request and of an answer for every pair among Chat, Anthropic
 * and Responses, its body is JSON-equal to the jansson path's with the
 * same lossy list, and it declines what it does not know exactly (the
 * jansson path then answers as before). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fast_pair.h"
#include "proxai/fastir.h"

static const char *const requests[] = {
    /* chat */
    "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Hi \\u00e9 \\\"q\\\"\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
    "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1.5}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"ok\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
    "{\"type\":\"object\"}}}],\"max_tokens\":256,\"temperature\":0.7,\"stop\":\"END\"}",
    /* responses */
    "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"input\":[{\"role\":\"user\","
    "\"content\":\"Hi\"},{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\","
    "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"c1\","
    "\"output\":\"ok\"}],\"tools\":[{\"type\":\"function\",\"name\":\"f\","
    "\"parameters\":{\"type\":\"object\"}}],\"max_output_tokens\":256,\"temperature\":0.7}",
    /* anthropic */
    "{\"model\":\"m\",\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\","
    "\"cache_control\":{\"type\":\"ephemeral\"}}],\"messages\":[{\"role\":\"user\","
    "\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
    "\"text\":\"Let me see.\"},{\"type\":\"tool_use\",\"id\":\"tu_1\",\"name\":\"f\","
    "\"input\":{\"a\":[1,2.5,\"x\"]}}]},{\"role\":\"user\",\"content\":[{\"type\":"
    "\"tool_result\",\"tool_use_id\":\"tu_1\",\"content\":\"ok\",\"is_error\":true},"
    "{\"type\":\"text\",\"text\":\"and?\"}]}],\"tools\":[{\"name\":\"f\","
    "\"input_schema\":{\"type\":\"object\"}}],\"max_tokens\":256,\"top_k\":5}",
};

static const char *const answers[] = {
    /* chat */
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"u\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello\","
    "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"arguments\":\"{\\\"a\\\":1}\"}}]},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],"
    "\"usage\":{\"prompt_tokens\":25,\"completion_tokens\":14,\"total_tokens\":39,"
    "\"prompt_tokens_details\":{\"cached_tokens\":5}}}",
    /* responses */
    "{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"completed\","
    "\"model\":\"u\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"role\":"
    "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hello\","
    "\"annotations\":[]}]},{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\","
    "\"arguments\":\"{}\"}],\"usage\":{\"input_tokens\":25,\"output_tokens\":14}}",
    /* anthropic */
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"u\","
    "\"content\":[{\"type\":\"text\",\"text\":\"Hello\"},{\"type\":\"tool_use\",\"id\":"
    "\"tu_1\",\"name\":\"f\",\"input\":{\"a\":1}}],\"stop_reason\":\"tool_use\","
    "\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":14,"
    "\"cache_read_input_tokens\":3}}",
};

/* what the fast path must leave to the jansson codecs */
static void declines(void) {
  static const struct {
    int in, out;
    const char *body;
  } cases[] = {
      /* thinking, a rare member, an escaped member name, a repeated member */
      {2, 0,
       "{\"model\":\"m\",\"messages\":[],\"thinking\":{\"type\":\"enabled\","
       "\"budget_tokens\":2048},\"max_tokens\":4096}"},
      {0, 2, "{\"model\":\"m\",\"messages\":[],\"seed\":1}"},
      {0, 2, "{\"model\":\"m\",\"messages\":[],\"\\u0074emperature\":1}"},
      {0, 2, "{\"model\":\"m\",\"messages\":[],\"temperature\":1,\"temperature\":0}"},
      /* stream options beyond include_usage (lossy) */
      {0, 2,
       "{\"model\":\"m\",\"messages\":[],\"stream\":true,\"stream_options\":"
       "{\"include_usage\":true,\"include_obfuscation\":false}}"},
      /* an image part */
      {0, 1,
       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
       "\"image_url\",\"image_url\":{\"url\":\"https://x/y.png\"}}]}]}"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    px_tr_ctx_t c;
    ctx_of(&c, cases[i].in, cases[i].out);
    if (strstr(cases[i].body, "\"stream\":true")) c.stream = 1;
    char *o = NULL;
    size_t ol = 0;
    px_lossy_t l;
    px_lossy_init(&l);
    CHECK(px_translate_request_fast(&c, cases[i].body, strlen(cases[i].body), 0, &o, &ol,
                                    &l) == PX_FAST_DECLINE);
    CHECK(o == NULL && l.len == 0);
    free(o);
  }
  /* an answer with reasoning */
  const char *think =
      "{\"id\":\"msg_1\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","
      "\"signature\":\"s\"},{\"type\":\"text\",\"text\":\"x\"}],\"stop_reason\":\"end_turn\"}";
  px_tr_ctx_t c;
  ctx_of(&c, 0, 2);
  px_buf_t b;
  px_buf_init(&b, 4096);
  px_lossy_t l;
  px_lossy_init(&l);
  CHECK(px_translate_response_fast(&c, think, strlen(think), &b, &l, NULL) == PX_FAST_DECLINE);
  CHECK(b.len == 0);
  px_buf_free(&b);
}

int main(void) {
  for (int in = 0; in < 3; in++)
    for (int out = 0; out < 3; out++)
      if (in != out) {
        request_pair(in, out, requests[in], NULL);
        answer_pair(in, out, answers[out], NULL);
      }
  /* streaming requests take the same codecs (issue 21): the upstream body
   * streams, a Chat upstream always asks for the usage */
  static const char *const streaming[] = {
      ",\"stream\":true,\"stream_options\":{\"include_usage\":false}}",
      ",\"stream\":true}", ",\"stream\":true}"};
  static const char *const want[] = {"\"stream_options\":{\"include_usage\":true}",
                                     "\"stream\":true", "\"stream\":true"};
  for (int in = 0; in < 3; in++)
    for (int out = 0; out < 3; out++)
      if (in != out) {
        char body[4096];
        size_t n = strlen(requests[in]) - 1; /* without its closing brace */
        snprintf(body, sizeof(body), "%.*s%s", (int)n, requests[in], streaming[in]);
        request_pair(in, out, body, want[out]);
      }
  declines();
  return check_report("translate_fast");
}
