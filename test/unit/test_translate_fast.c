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
      /* a document, a rare member, an escaped member name, a repeated member */
      {2, 0,
       "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
       "\"document\",\"source\":{\"type\":\"text\",\"data\":\"x\"}}]}],"
       "\"max_tokens\":4096}"},
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

/* ---- Anthropic Messages (Claude Code's shapes) -------------------------- */

/* An Anthropic body through the Anthropic fast decoder and encoder (the
 * hub's steps; it sends a same-protocol body through as it is) against the
 * jansson codecs: both directions of anthropic_fast.c at once. want: in
 * the fast body; lossy: the lossy list. */
static void anth_self(const char *body, const char *want, const char *lossy) {
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_ANTHROPIC, PX_PROTO_ANTHROPIC);
  size_t len = strlen(body);
  px_json_req_t scan;
  CHECK(px_json_request(body, len, &scan) == 0);
  c.stream = scan.stream;
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  memset(&ir, 0, sizeof(ir));
  ir.parallel = ir.reasoning_enabled = ir.rf_strict = -1;
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  int rc = px_anthropic_fast.decode_request(&c, body, len, &ir, &a, &lf);
  if (rc == 0) px_fit_fast_request(&c, &ir, &lf);
  CHECK(rc == 0 && (px_freq_uses(&ir) & ~px_anthropic_fast.encodes) == 0);
  if (rc == 0) rc = px_anthropic_fast.encode_request(&c, &ir, &b, &a, &lf);
  if (rc == 0 && c.stream) px_lossy_predict(&c, px_freq_reasoning_on(&ir), &lf);
  CHECK(rc == 0);
  px_arena_free(&a);
  px_tr_ctx_t ref = c;
  ref.reference = 1;
  char *so = NULL;
  size_t sl = 0;
  px_tr_err_t err;
  CHECK(px_translate_request_body(&ref, body, len, 0, &so, &sl, &ls, &err) == 0);
  if (rc == 0 && so != NULL) {
    int eq = same_json(b.data, b.len, so, sl) && strcmp(lf.buf, ls.buf) == 0;
    CHECK(eq);
    if (!eq)
      fprintf(stderr, "anthropic self\nfast: %.*s [%s]\nslow: %s [%s]\n", (int)b.len,
              b.data, lf.buf, so, ls.buf);
    CHECK(px_buf_append(&b, "", 1) == 0);
    if (want != NULL) CHECK(strstr(b.data, want) != NULL);
    if (lossy != NULL && strcmp(lf.buf, lossy) != 0) {
      fprintf(stderr, "anthropic self: lossy [%s], want [%s]\n", lf.buf, lossy);
      CHECK(0);
    }
  }
  free(so);
  px_buf_free(&b);
}

/* An Anthropic answer through the Anthropic fast response decoder and
 * encoder against the jansson codecs (as anth_self for requests). */
static void anth_self_answer(const char *body, const char *want) {
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_ANTHROPIC, PX_PROTO_ANTHROPIC);
  size_t len = strlen(body);
  px_arena_t a;
  px_arena_init(&a);
  px_fresp_t ir;
  memset(&ir, 0, sizeof(ir));
  ir.in = ir.out = ir.cache_read = ir.cache_creation = ir.reasoning = -1;
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  int rc = px_anthropic_fast.decode_response(&c, body, len, &ir, &a, &lf);
  CHECK(rc == 0 && (px_fresp_uses(&ir) & ~px_anthropic_fast.resp_encodes) == 0);
  if (rc == 0) rc = px_anthropic_fast.encode_response(&c, &ir, &b, &a, &lf);
  CHECK(rc == 0);
  px_arena_free(&a);
  json_t *up = json_loadb(body, len, 0, NULL), *cb = NULL;
  px_tr_err_t err;
  CHECK(up != NULL && px_translate_response(&c, up, &cb, &ls, &err) == 0);
  char *so = cb ? json_dumps(cb, JSON_COMPACT) : NULL;
  if (rc == 0 && so != NULL) {
    int eq = same_json(b.data, b.len, so, strlen(so)) && strcmp(lf.buf, ls.buf) == 0;
    CHECK(eq);
    if (!eq)
      fprintf(stderr, "anthropic answer\nfast: %.*s [%s]\nslow: %s [%s]\n", (int)b.len,
              b.data, lf.buf, so, ls.buf);
    CHECK(px_buf_append(&b, "", 1) == 0);
    if (want != NULL) CHECK(strstr(b.data, want) != NULL);
  }
  free(so);
  json_decref(cb);
  json_decref(up);
  px_buf_free(&b);
}

#define ANTH_TOOLS                                                                    \
  "\"tools\":[{\"name\":\"Bash\",\"description\":\"run\",\"input_schema\":{\"type\":" \
  "\"object\"},\"cache_control\":{\"type\":\"ephemeral\"}},{\"name\":\"Later\","      \
  "\"input_schema\":{\"type\":\"object\"},\"defer_loading\":true,\"strict\":true},"   \
  "{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]"
#define ANTH_HISTORY                                                                     \
  "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"fix it\","              \
  "\"citations\":null,\"cache_control\":{\"type\":\"ephemeral\"}},{\"type\":\"image\","  \
  "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"iVBO\"}}]},"  \
  "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","     \
  "\"signature\":\"EqQBsig\"},{\"type\":\"redacted_thinking\",\"data\":\"EmwKred\"},"    \
  "{\"type\":\"text\",\"text\":\"Running.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\"," \
  "\"name\":\"Bash\",\"input\":{\"command\":\"ls\"},\"cache_control\":{\"type\":"        \
  "\"ephemeral\"}},{\"type\":\"server_tool_use\",\"id\":\"srv_1\",\"name\":"             \
  "\"web_search\",\"input\":{}}]},"                                                      \
  "{\"role\":\"user\",\"content\":[{\"type\":\"web_search_tool_result\","                \
  "\"tool_use_id\":"                                                                     \
  "\"srv_1\",\"content\":[]},{\"tool_use_id\":\"toolu_1\",\"type\":\"tool_result\","     \
  "\"content\":[{\"type\":\"text\",\"text\":\"a\\nb\"},{\"type\":\"image\",\"source\":"  \
  "{\"type\":\"url\",\"url\":\"https://x/y.png\"},\"cache_control\":{\"type\":"          \
  "\"ephemeral\"}},{\"type\":\"tool_reference\",\"tool_name\":\"Later\"}],"              \
  "\"is_error\":false,\"cache_control\":{\"type\":\"ephemeral\"}}]}"

static void anthropic_cases(void) {
  /* Claude Code: adaptive thinking with an effort, kept with the tool loop
   * that starts with thinking; what the IR has no slot for named */
  anth_self(
      "{\"model\":\"claude-opus-4-6\",\"messages\":[" ANTH_HISTORY
      "],"
      "\"system\":[{\"type\":\"text\",\"text\":\"x-billing\"},{\"type\":\"text\","
      "\"text\":\"You are Claude "
      "Code.\",\"cache_control\":{\"type\":\"ephemeral\"}}]," ANTH_TOOLS
      ",\"metadata\":{\"user_id\":\"{\\\"session_id\\\":\\\"s1\\\"}\"},"
      "\"max_tokens\":64000,\"thinking\":{\"type\":\"adaptive\",\"display\":"
      "\"omitted\"},\"context_management\":{\"edits\":[{\"type\":"
      "\"clear_thinking_20251015\",\"keep\":\"all\"}]},\"output_config\":{\"effort\":"
      "\"high\"},\"stream\":true,\"temperature\":1,\"top_k\":5,\"top_p\":0.5}",
      "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":24576}",
      "cache_control,messages[].content[].server_tool_use,"
      "messages[].content[].server_tool_result,"
      "messages[].content[].content[].tool_reference,"
      "tools[].defer_loading,tools[].server_tool,thinking.display,context_management,"
      "temperature,top_p,top_k");
  /* a budget above a client's max_tokens is lowered to fit it */
  anth_self(
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
      "\"max_tokens\":1500,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2000}}",
      "\"budget_tokens\":1499", "");
  /* ... or max_tokens raised when the budget cannot go lower, named */
  anth_self(
      "{\"model\":\"m\",\"output_config\":{\"effort\":\"max\",\"task_budget\":1},"
      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1000,"
      "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":5000}}",
      "\"max_tokens\":2024", "output_config,max_tokens");
  /* a tool loop whose assistant turn has no thinking, a forced tool: thinking
   * stays off, named */
  anth_self(
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
      "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\","
      "\"name\":\"f\"}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
      "\"tool_use_id\":\"t1\"}]}],\"max_tokens\":100,\"thinking\":{\"type\":"
      "\"enabled\",\"budget_tokens\":2048},\"tools\":[{\"name\":\"f\"}]}",
      NULL, "thinking");
  anth_self(
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
      "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
      "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
      "\"thinking\":{\"type\":\"adaptive\"}}",
      "\"disable_parallel_tool_use\":true", "max_tokens,thinking");
  /* thinking off; structured output; unknown and null members */
  anth_self(
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
      "\"max_tokens\":10,\"thinking\":{\"type\":\"disabled\"},\"service_tier\":"
      "\"auto\",\"x_new\":1,\"system\":null,\"output_format\":{\"type\":\"json_schema\","
      "\"schema\":{\"type\":\"object\"}},\"metadata\":{\"user_id\":\"u\",\"k\":1},"
      "\"stop_sequences\":[\"END\"]}",
      "\"thinking\":{\"type\":\"disabled\"}", "service_tier,x_new,metadata");
  /* a message's content before its role, members the reference ignores */
  anth_self(
      "{\"model\":\"m\",\"messages\":[{\"content\":\"hi\",\"id\":1,\"role\":\"user\"},"
      "{\"content\":[{\"type\":\"text\",\"text\":\"a\",\"x\":[1]}],\"role\":"
      "\"assistant\"},{\"role\":\"user\",\"name\":\"n\",\"content\":[{\"type\":"
      "\"text\",\"text\":\"b\",\"citations\":[{\"type\":\"char_location\"}]}]}],"
      "\"max_tokens\":10}",
      "\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]",
      "messages[].content[].citations");
  /* a signature another family's token was carried in goes back to it:
   * without an Anthropic signature the block is dropped, named */
  anth_self(
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
      "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"a\","
      "\"signature\":\"pxo1:enc:gAAA\"},{\"type\":\"text\",\"text\":\"b\"}]},"
      "{\"role\":\"user\",\"content\":\"c\"}],\"max_tokens\":10}",
      NULL, "messages[].content[].signature");

  /* answers with thinking: signed, redacted, unsigned with text (shown
   * with an empty signature), unsigned without (dropped) */
  anth_self_answer(
      "{\"id\":\"msg_1\",\"model\":\"u\",\"content\":[{\"type\":\"thinking\","
      "\"thinking\":\"hm\",\"signature\":\"EqQB\"},{\"type\":"
      "\"redacted_thinking\",\"data\":\"EmwK\"},{\"type\":\"thinking\","
      "\"thinking\":\"plain\",\"signature\":\"\"},{\"type\":\"thinking\","
      "\"thinking\":\"\"},{\"type\":\"text\",\"text\":\"x\"},{\"type\":"
      "\"tool_use\",\"id\":\"tu_1\",\"name\":\"f\",\"input\":{}}],"
      "\"stop_reason\":\"tool_use\",\"usage\":{\"input_tokens\":3,"
      "\"output_tokens\":9}}",
      "{\"type\":\"thinking\",\"thinking\":\"plain\",\"signature\":\"\"}");

  /* toward the other upstreams: what Claude Code sends beside its thinking */
  for (int out = 0; out < PX_PROTO_COUNT; out++) {
    if (out == PX_PROTO_ANTHROPIC) continue;
    request_pair(
        PX_PROTO_ANTHROPIC, out,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\","
        "\"name\":\"f\",\"input\":{}}]},{\"role\":\"user\",\"content\":[{\"type\":"
        "\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"ok\",\"is_error\":false,"
        "\"cache_control\":{\"type\":\"ephemeral\"}}]}],\"tools\":[{\"name\":\"f\","
        "\"input_schema\":{\"type\":\"object\"},\"defer_loading\":true}],"
        "\"metadata\":{\"user_id\":\"u\"},\"context_management\":{\"edits\":[]},"
        "\"max_tokens\":100,\"stream\":true}",
        NULL);
  }

  /* the hub: a stream's predicted names come before the encoder's, as in
   * the jansson pipeline (a Chat client cannot hold Gemini's signatures;
   * the Gemini encoder drops `user`) */
  request_pair_s(PX_PROTO_CHAT, PX_PROTO_GEMINI,
                 "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"user\":\"u\",\"stream\":true}",
                 NULL, 1);

  /* the reference's errors stay the reference's (the fast path declines) */
  static const char *const bad[] = {
      "{\"model\":\"m\",\"messages\":[],\"thinking\":{\"type\":\"sometimes\"}}",
      "{\"model\":\"m\",\"messages\":[],\"output_config\":{\"effort\":\"extreme\"}}",
      "{\"model\":\"m\",\"messages\":[],\"output_format\":{\"type\":\"json_object\"}}",
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
      "\"image\","
      "\"source\":{\"type\":\"file\",\"file_id\":\"f\"}}]}]}",
      /* a repeated member read by name: jansson keeps the last, null or not */
      "{\"model\":\"m\",\"messages\":[],\"x\":1,\"x\":null}",
      "{\"model\":\"m\",\"messages\":[],\"metadata\":{\"k\":1,\"k\":null}}",
      "{\"model\":\"m\",\"messages\":[],\"output_config\":{\"effort\":\"high\","
      "\"effort\":null}}",
      /* a dropped member whose name the lossy list would split */
      "{\"model\":\"m\",\"messages\":[],\"a,b\":1}",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    px_tr_ctx_t c;
    ctx_of(&c, PX_PROTO_ANTHROPIC, PX_PROTO_ANTHROPIC);
    px_arena_t a;
    px_arena_init(&a);
    px_freq_t ir;
    memset(&ir, 0, sizeof(ir));
    px_lossy_t l;
    px_lossy_init(&l);
    CHECK(px_anthropic_fast.decode_request(&c, bad[i], strlen(bad[i]), &ir, &a, &l) ==
          PX_FAST_DECLINE);
    px_arena_free(&a);
  }
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
  anthropic_cases();
  declines();
  return check_report("translate_fast");
}
