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
#include "proxai/usage.h"

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

static int answer_eq(const px_answer_t *a, const px_answer_t *b) {
  return strcmp(a->id, b->id) == 0 && strcmp(a->model, b->model) == 0 &&
         strcmp(a->finish, b->finish) == 0 && a->id_len == b->id_len &&
         a->model_len == b->model_len && a->finish_len == b->finish_len;
}

/* Traces: the id, model and finish word a fast decoder notes of the
 * upstream's answer (ctx.answer) are what reading its body finds, and what
 * an encoder notes of the client's (ctx.client) what reading the body it
 * wrote finds. */
static void answer_noted(int in, int out, const char *body) {
  px_tr_ctx_t c;
  ctx_of(&c, in, out);
  px_answer_t up, cl, want;
  memset(&up, 0, sizeof(up));
  memset(&cl, 0, sizeof(cl));
  c.answer = &up;
  c.client = &cl;
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  px_lossy_t l;
  px_lossy_init(&l);
  CHECK(px_translate_response_fast(&c, body, strlen(body), &b, &l, NULL, NULL) == 0);
  memset(&want, 0, sizeof(want));
  px_answer_read(&px_proto_get((px_proto_t)out)->watch, body, strlen(body), NULL, &want);
  CHECK(want.finish[0] && answer_eq(&up, &want));
  if (!answer_eq(&up, &want))
    fprintf(stderr, "%d>%d upstream noted %s %s %s\n", in, out, up.id, up.model, up.finish);
  memset(&want, 0, sizeof(want));
  px_answer_read(&px_proto_get((px_proto_t)in)->watch, b.data, b.len, NULL, &want);
  CHECK(!cl.id[0] || (want.finish[0] && answer_eq(&cl, &want)));
  if (cl.id[0] && !answer_eq(&cl, &want))
    fprintf(stderr, "%d>%d client noted %s %s %s\n", in, out, cl.id, cl.model, cl.finish);
  /* the encoders the common small answers take note it */
  CHECK(cl.id[0] != 0);
  px_buf_free(&b);
}

/* protocol in's fast decoder declines body (for an upstream of out) */
static void decoder_declines(int in, int out, const char *body) {
  px_tr_ctx_t c;
  ctx_of(&c, in, out);
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_freq_init(&ir);
  px_lossy_t l;
  px_lossy_init(&l);
  int rc = px_proto_get((px_proto_t)in)->fast->decode_request(&c, body, strlen(body), &ir, &a, &l, NULL);
  CHECK(rc == PX_FAST_DECLINE);
  if (rc != PX_FAST_DECLINE) fprintf(stderr, "taken: %s\n", body);
  px_arena_free(&a);
}

/* what the fast path must leave to the jansson codecs */
static void declines(void) {
  static const struct {
    int in, out;
    const char *body;
  } cases[] = {
      /* an escaped member name, a repeated member (the reference's
       * refusals: chat_refusals, anth_complete) */
      {0, 2, "{\"model\":\"m\",\"messages\":[],\"\\u0074emperature\":1}"},
      {0, 2, "{\"model\":\"m\",\"messages\":[],\"temperature\":1,\"temperature\":0}"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    request_declined(cases[i].in, cases[i].out, cases[i].body);
  /* an answer with reasoning: a Chat client takes its text (the signature
   * named) */
  const char *think =
      "{\"id\":\"msg_1\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\","
      "\"signature\":\"s\"},{\"type\":\"text\",\"text\":\"x\"}],\"stop_reason\":\"end_turn\"}";
  answer_pair(0, 2, think, "\"reasoning_content\":\"hm\"");
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
  px_freq_init(&ir);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  int rc = px_fast_request_steps(&c, &c, &px_anthropic_fast, &px_anthropic_fast, body, len,
                                 &ir, &a, &b, &lf, NULL);
  CHECK(rc == 0);
  px_arena_free(&a);
  px_tr_ctx_t ref = c;
  char *so = NULL;
  size_t sl = 0;
  px_tr_err_t err;
  CHECK(px_translate_request_ref(&ref, body, len, 0, &so, &sl, &ls, &err) == 0);
  if (rc == 0 && so != NULL) {
    fast_same("anthropic self", &b, &lf, so, &ls, want);
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
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  int rc = fast_answer_halves(&c, &px_anthropic_fast, &px_anthropic_fast, body, len, &b,
                              &lf, NULL);
  CHECK(rc == 0);
  json_t *up = json_loadb(body, len, 0, NULL), *cb = NULL;
  px_tr_err_t err;
  CHECK(up != NULL && px_translate_response(&c, up, &cb, &ls, &err) == 0);
  char *so = cb ? json_dumps(cb, JSON_COMPACT) : NULL;
  if (rc == 0 && so != NULL) fast_same("anthropic answer", &b, &lf, so, &ls, want);
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

static void anth_complete(void);
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

  /* what the fast path cannot read as the reference does declines (the
   * reference's refusals: anth_complete) */
  static const char *const bad[] = {
      /* a repeated member read by name: jansson keeps the last, null or not */
      "{\"model\":\"m\",\"messages\":[],\"x\":1,\"x\":null}",
      "{\"model\":\"m\",\"messages\":[],\"metadata\":{\"k\":1,\"k\":null}}",
      "{\"model\":\"m\",\"messages\":[],\"output_config\":{\"effort\":\"high\","
      "\"effort\":null}}",
      /* a dropped member whose name the lossy list would split */
      "{\"model\":\"m\",\"messages\":[],\"a,b\":1}",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    decoder_declines(PX_PROTO_ANTHROPIC, PX_PROTO_ANTHROPIC, bad[i]);
  anth_complete();
}

static void chat_clients(void);
static void responses_codec(void);
static void responses_encoder(void);
static void gemini_codec(void);
static void responses_refusals(void);
static void responses_answers(void);
static void responses_encoder_refusals(void);
static void memory_budget(void);

/* ------------------------------------------------------------------------ */
/* The one reader's rule (issue 21): what the codecs decline as written is
 * read in its plain spelling, and what they still decline is a refusal in
 * words, never another reader's guess                                      */

static void one_reader(void) {
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_CHAT, PX_PROTO_ANTHROPIC);
  px_lossy_t l;
  px_tr_err_t err;
  char *out = NULL;
  size_t n = 0;
  /* escaped member names and enum values: read unescaped, translated as
   * their plain spelling is (the reference's body) */
  const char *esc =
      "{\"model\":\"m\",\"m\\u0065ssages\":[{\"r\\u006fle\":\"us\\u0065r\","
      "\"content\":\"caf\\u00e9\"}],\"temp\\u0065rature\":0.5}";
  const char *plain =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
      "\"content\":\"caf\xc3\xa9\"}],\"temperature\":0.5}";
  px_lossy_init(&l);
  CHECK(px_translate_request_body(&c, esc, strlen(esc), 0, &out, &n, &l, &err) == 0);
  char *want = NULL;
  size_t wn = 0;
  px_lossy_t lw;
  px_lossy_init(&lw);
  CHECK(px_translate_request_body(&c, plain, strlen(plain), 0, &want, &wn, &lw, &err) ==
        0);
  CHECK(out && want && n == wn && memcmp(out, want, n) == 0 &&
        strcmp(l.buf, lw.buf) == 0);
  free(out);
  free(want);
  /* a member a codec reads, twice: a 400 naming it where it stands */
  const char *twice =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\","
      "\"r\\u006fle\":\"assistant\"}]}";
  memset(&err, 0, sizeof(err));
  out = NULL;
  CHECK(px_translate_request_body(&c, twice, strlen(twice), 0, &out, &n, &l, &err) < 0);
  CHECK(out == NULL && err.kind == PX_ERR_INVALID &&
        strcmp(err.param, "messages[0].role") == 0 &&
        strstr(err.message, "'messages[0].role' more than once") != NULL);
  /* a member name no codec reads (a quote in it) where a name decides */
  const char *odd =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
      "\"text\",\"text\":\"a\",\"x\\\"y\":1}]}]}";
  memset(&err, 0, sizeof(err));
  int rc = px_translate_request_body(&c, odd, strlen(odd), 0, &out, &n, &l, &err);
  if (rc == 0) free(out);
  CHECK(rc == 0 || (err.kind == PX_ERR_INVALID && err.message[0]));
  /* an output-token cap past 18 digits: refused by the codec, as by the
   * reference */
  const char *big =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
      "\"max_tokens\":1000000000000000000}";
  memset(&err, 0, sizeof(err));
  CHECK(px_translate_request_body(&c, big, strlen(big), 0, &out, &n, &l, &err) < 0);
  CHECK(strcmp(err.param, "max_tokens") == 0 && strstr(err.message, "at most 18 digits"));
  px_tr_ctx_t r = c;
  memset(&err, 0, sizeof(err));
  CHECK(px_translate_request_ref(&r, big, strlen(big), 0, &out, &n, &l, &err) < 0);
  CHECK(strcmp(err.param, "max_tokens") == 0 && strstr(err.message, "at most 18 digits"));
  /* answers: an escaped name is read unescaped; a member twice is a 502
   * naming it; invalid JSON is a 502 */
  ctx_of(&c, PX_PROTO_ANTHROPIC, PX_PROTO_CHAT);
  const char *ans =
      "{\"id\":\"c1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"u\","
      "\"ch\\u006fices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
      "\"content\":\"Hello\"},\"finish_reason\":\"stop\"}]}";
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  px_lossy_init(&l);
  rc = px_translate_response_body(&c, ans, strlen(ans), &b, &l, NULL, &err);
  CHECK(rc == 0 && b.len > 0 && px_buf_append(&b, "", 1) == 0 && strstr(b.data, "Hello"));
  const char *ans2 =
      "{\"id\":\"c1\",\"object\":\"chat.completion\",\"created\":1,"
      "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
      "\"content\":\"Hello\",\"content\":\"Bye\"},\"finish_reason\":\"stop\"}]}";
  px_buf_reset(&b);
  memset(&err, 0, sizeof(err));
  CHECK(px_translate_response_body(&c, ans2, strlen(ans2), &b, &l, NULL, &err) ==
        PX_FAST_REFUSE);
  CHECK(b.len == 0 && err.kind == PX_ERR_BAD_GATEWAY &&
        strstr(err.message, "'choices[0].message.content' more than once") != NULL);
  memset(&err, 0, sizeof(err));
  CHECK(px_translate_response_body(&c, "{\"id\":", 6, &b, &l, NULL, &err) ==
        PX_FAST_REFUSE);
  CHECK(err.kind == PX_ERR_BAD_GATEWAY && strstr(err.message, "invalid JSON") != NULL);
  px_buf_free(&b);
}

int main(void) {
  for (int in = 0; in < 3; in++)
    for (int out = 0; out < 3; out++)
      if (in != out) {
        request_pair(in, out, requests[in], NULL);
        answer_pair(in, out, answers[out], NULL);
        answer_noted(in, out, answers[out]);
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
  chat_clients();
  responses_codec();
  responses_encoder();
  gemini_codec();
  responses_refusals();
  responses_answers();
  responses_encoder_refusals();
  one_reader();
  memory_budget();
  return check_report("translate_fast");
}

/* ------------------------------------------------------------------------ */
/* The memory budget of a request's decoded form (px_tr_ctx_t.ir_budget)     */

/* n tiny messages {"role":..,"content":"a"} in the client protocol in's
 * shape (Gemini: contents with one text part each) */
static char *tiny_messages(int in, int n, size_t *len) {
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  const char *open = in == PX_PROTO_GEMINI      ? "{\"contents\":["
                     : in == PX_PROTO_RESPONSES ? "{\"model\":\"m\",\"input\":["
                                                : "{\"model\":\"m\",\"max_tokens\":16,"
                                                  "\"messages\":[";
  CHECK(px_buf_puts(&b, open) == 0);
  for (int i = 0; i < n; i++) {
    const char *m = in == PX_PROTO_GEMINI
                        ? (i % 2 ? "{\"role\":\"model\",\"parts\":[{\"text\":\"a\"}]}"
                                 : "{\"role\":\"user\",\"parts\":[{\"text\":\"a\"}]}")
                        : (i % 2 ? "{\"role\":\"assistant\",\"content\":\"a\"}"
                                 : "{\"role\":\"user\",\"content\":\"a\"}");
    CHECK(px_buf_puts(&b, i ? "," : "") == 0 && px_buf_puts(&b, m) == 0);
  }
  CHECK(px_buf_puts(&b, "]}") == 0);
  *len = b.len;
  return px_buf_steal(&b, NULL);
}

/* 100,000 tiny messages decode into far more than 4 times their body: under
 * the default budget every client protocol's body is refused as too large
 * (413), toward every other upstream, the error saying why; the same body
 * without a budget is translated (the budget is what refuses it), and so
 * is a body of a few of them under the budget's floor. */
static void memory_budget(void) {
  for (int in = 0; in < PX_PROTO_COUNT; in++) {
    size_t len, small_len;
    char *body = tiny_messages(in, 100000, &len);
    char *small = tiny_messages(in, 200, &small_len);
    for (int out = 0; out < PX_PROTO_COUNT; out++) {
      if (out == in) continue;
      px_tr_ctx_t c;
      request_ctx(&c, in, out, body, len, 0);
      c.ir_budget = (size_t)PX_TR_IR_FACTOR * len + PX_TR_IR_BASE;
      char *o = NULL;
      size_t ol = 0;
      px_lossy_t l;
      px_lossy_init(&l);
      px_tr_err_t err;
      memset(&err, 0, sizeof(err));
      int rc = px_translate_request_body(&c, body, len, 0, &o, &ol, &l, &err);
      CHECK(rc != 0 && o == NULL && err.kind == PX_ERR_TOO_LARGE);
      CHECK(strstr(err.message, "memory budget") != NULL);
      if (rc == 0 || err.kind != PX_ERR_TOO_LARGE)
        fprintf(stderr, "memory_budget: %d -> %d: rc %d, %s\n", in, out, rc, err.message);
      free(o);
      o = NULL;
      if (out == (in + 1) % PX_PROTO_COUNT) { /* unbounded: taken */
        c.ir_budget = 0;
        CHECK(px_translate_request_body(&c, body, len, 0, &o, &ol, &l, &err) == 0);
        free(o);
        o = NULL;
      }
      request_ctx(&c, in, out, small, small_len, 0);
      c.ir_budget = (size_t)PX_TR_IR_FACTOR * small_len + PX_TR_IR_BASE;
      CHECK(px_translate_request_body(&c, small, small_len, 0, &o, &ol, &l, &err) == 0);
      free(o);
    }
    free(body);
    free(small);
  }
}

/* ------------------------------------------------------------------------ */
/* Chat clients: the fast Chat codec (src/proto/chat.c) against chat.c   */

/* a body written with ' for " (readability), made JSON */
static char *chat_body(const char *q) {
  char *b = strdup(q);
  for (char *p = b; *p; p++)
    if (*p == '\'') *p = '"';
  return b;
}

/* A codec's fast decoder and encoder (ops, protocol p on both sides of the
 * IR), one after the other, against its jansson codec's decode_request and
 * encode_request (px_translate_request from p to p): every part and setting
 * the wire holds goes both ways; want (when not NULL) is in the fast body.
 * stream: the context's. */
static void codec_round(int p, const px_fast_ops_t *ops, const char *q, int stream,
                        const char *want) {
  char *body = chat_body(q);
  size_t len = strlen(body);
  px_json_req_t scan;
  CHECK(px_json_request(body, len, &scan) == 0);
  px_tr_ctx_t c;
  ctx_of(&c, p, p);
  c.stream = stream;
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_freq_init(&ir);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  CHECK(px_fast_request_steps(&c, &c, ops, ops, body, len, &ir, &a, &b, &lf, NULL) == 0);
  px_tr_ctx_t ref = c;
  json_t *src = json_loadb(body, len, 0, NULL), *ub = NULL;
  px_tr_err_t err;
  CHECK(px_translate_request(&ref, src, &ub, &ls, &err) == 0);
  char *so = ub ? json_dumps(ub, JSON_COMPACT) : NULL;
  fast_same(px_proto_get(p)->name, &b, &lf, so, &ls, want);
  free(so);
  json_decref(ub);
  json_decref(src);
  px_buf_free(&b);
  px_arena_free(&a);
  free(body);
}

/* The fast Chat decoder and encoder, one after the other, against chat.c's
 * decode_request and encode_request (a Chat-shaped codec on both sides of
 * the IR: every part and setting the Chat wire holds goes both ways). */
static void chat_round(const char *q, const char *want) {
  codec_round(PX_PROTO_CHAT, &px_chat_fast, q, 0, want);
}

/* A client's body (a Chat, Gemini ... codec's, dec its fast decoder)
 * toward every other upstream: the fast path takes it (equal to the
 * reference), or declines because the upstream's fast encoder does not list
 * a part the body uses, or the reference refuses it too. stream: the
 * context's (-1: the body's `stream`). */
static void client_pairs(int in, const px_fast_ops_t *dec, const char *q, int stream) {
  char *body = chat_body(q);
  size_t len = strlen(body);
  for (int out = 0; out < PX_PROTO_COUNT; out++) {
    if (out == in) continue;
    px_tr_ctx_t c;
    request_ctx(&c, in, out, body, len, stream);
    char *fo = NULL, *so = NULL;
    size_t fl = 0, sl = 0;
    px_lossy_t lf, ls;
    px_tr_err_t err;
    px_lossy_init(&lf);
    px_lossy_init(&ls);
    int rc = px_translate_request_fast(&c, body, len, 0, &fo, &fl, &lf, NULL);
    px_tr_ctx_t ref = c;
    int rr = px_translate_request_ref(&ref, body, len, 0, &so, &sl, &ls, &err);
    if (rc == 0) {
      int eq = rr == 0 && same_json(fo, fl, so, sl) && strcmp(lf.buf, ls.buf) == 0;
      CHECK(eq);
      if (!eq)
        fprintf(stderr, "%d -> %d\nfast: %s [%s]\nslow: %s [%s]\n", in, out, fo, lf.buf,
                so ? so : "", ls.buf);
    } else if (rr == 0) {
      /* declined: only for a part the upstream's encoder does not write */
      px_arena_t a;
      px_arena_init(&a);
      px_freq_t ir;
      px_freq_init(&ir);
      px_lossy_t l;
      px_lossy_init(&l);
      CHECK(dec->decode_request(&c, body, len, &ir, &a, &l, NULL) == 0);
      px_fit_fast_request(&c, &ir, &l);
      int unknown = (px_freq_uses(&ir) & ~px_proto_get(out)->fast->encodes) != 0;
      CHECK(unknown);
      if (!unknown) fprintf(stderr, "%d -> %d declined: %s\n", in, out, body);
      px_arena_free(&a);
    }
    free(fo);
    free(so);
  }
  free(body);
}

static void chat_pairs(const char *q) {
  client_pairs(PX_PROTO_CHAT, &px_chat_fast, q, -1);
}

/* What other clients' decoders put in the IR and a Chat client never
 * sends (opaque reasoning tokens, a thinking budget or adaptive thinking,
 * a reasoning summary, images in tool results): the fast Chat encoder
 * writes from the fast IR what chat.c writes from the same IR, with the
 * Anthropic client's lossy names. */
static void chat_encode_ir(int adaptive) {
  static const char *const doc =
      "{'model':'m','messages':[{'role':'assistant','content':[{'type':'reasoning',"
      "'text':'hm','signature':'sig'},{'type':'reasoning','text':'','redacted_data':"
      "'red'},{'type':'text','text':'x'},{'type':'tool_call','id':'c1','name':'f',"
      "'arguments':'{}'}]},{'role':'user','content':[{'type':'tool_result',"
      "'tool_call_id':'c1','content':[{'type':'text','text':'r'},{'type':'image',"
      "'url':'https://i'}],'is_error':true}]}],'reasoning':{'budget_tokens':5000,"
      "'summary':'auto'}}";
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_ANTHROPIC, PX_PROTO_CHAT);
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_freq_init(&ir);
  px_fmsg_t *m = px_fmsg_push(&ir, &a, 1);
  px_fpart_t *r1 = px_fpart_new(&a, PX_FP_REASONING),
             *r2 = px_fpart_new(&a, PX_FP_REASONING);
  px_fpart_t *tx = px_fpart_text(&a, (px_fstr_t){"x", 1, 0});
  px_fpart_t *call = px_fpart_new(&a, PX_FP_TOOL_CALL);
  CHECK(m && r1 && r2 && tx && call);
  if (!(m && r1 && r2 && tx && call)) return;
  r1->text = (px_fstr_t){"hm", 2, 0};
  r1->tok[px_frtok_index("signature")] = (px_fstr_t){"sig", 3, 0};
  r2->text = (px_fstr_t){"", 0, 0};
  r2->tok[px_frtok_index("redacted_data")] = (px_fstr_t){"red", 3, 0};
  call->id = (px_fstr_t){"c1", 2, 0};
  call->name = (px_fstr_t){"f", 1, 0};
  call->args = (px_fstr_t){"{}", 2, 0};
  call->input = (px_str_t){"{}", 2};
  px_fpart_push(&m->parts, &m->last, r1);
  px_fpart_push(&m->parts, &m->last, r2);
  px_fpart_push(&m->parts, &m->last, tx);
  px_fpart_push(&m->parts, &m->last, call);
  px_fmsg_t *u = px_fmsg_push(&ir, &a, 0);
  px_fpart_t *res = px_fpart_new(&a, PX_FP_TOOL_RESULT),
             *img = px_fpart_new(&a, PX_FP_IMAGE),
             *rt = px_fpart_text(&a, (px_fstr_t){"r", 1, 0}), *tail = NULL;
  CHECK(u && res && img && rt);
  if (!(u && res && img && rt)) return;
  res->id = (px_fstr_t){"c1", 2, 0};
  res->is_error = 1;
  img->url = (px_fstr_t){"https://i", 9, 0};
  px_fpart_push(&res->content, &tail, rt);
  px_fpart_push(&res->content, &tail, img);
  px_fpart_push(&u->parts, &u->last, res);
  ir.has_reasoning = 1;
  char *q = chat_body(doc);
  json_t *jir = json_loads(q, 0, NULL);
  free(q);
  CHECK(jir != NULL);
  if (adaptive) { /* adaptive thinking: enabled, no budget, no summary */
    ir.reasoning_enabled = 1;
    json_object_set_new(jir, "reasoning", json_pack("{s:b}", "enabled", 1));
  } else {
    ir.budget = (px_str_t){"5000", 4};
    ir.budget_v = 5000;
    ir.summary = (px_fstr_t){"auto", 4, 0};
  }
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  encoder_same("chat encode", &c, &ir, jir, &lf, &ls, NULL);
  CHECK(strstr(lf.buf, adaptive ? "thinking" : "reasoning.summary") != NULL);
  json_decref(jir);
  px_arena_free(&a);
}

static void chat_refusals(void);
static void chat_answers(void);

static void chat_clients(void) {
  chat_refusals();
  chat_answers();
  chat_encode_ir(0);
  chat_encode_ir(1);
  /* settings: reasoning effort, cache key, verbosity, structured output,
   * metadata, user, developer instructions, tool choice, streaming */
  static const char *const settings[] = {
      "{'model':'m','messages':[{'role':'developer','content':'Be brief.'},"
      "{'role':'system','content':[{'type':'text','text':'A'},{'type':'text','text':'B'}]"
      "},"
      "{'role':'user','content':'Hi'}],'reasoning_effort':'high',"
      "'prompt_cache_key':'k-1','verbosity':'low','metadata':{'a':'b'},'user':'u-1',"
      "'response_format':{'type':'json_schema','json_schema':{'name':'out',"
      "'description':'d','strict':true,'schema':{'type':'object','properties':{}}}},"
      "'max_completion_tokens':100,'max_tokens':5,'stream':true,"
      "'stream_options':{'include_usage':true}}",
      "{'model':'m','messages':[{'role':'user','content':'Hi','name':'ann'}],"
      "'response_format':{'type':'json_object'},'seed':7,'logprobs':true,'x_extra':1,"
      "'y_null':null,'safety_identifier':'s-1','store':false,'n':1,"
      "'modalities':['text'],'stream_options':{'include_obfuscation':false}}",
      "{'model':'m','messages':[{'role':'user','content':'Hi'}],'user':'u',"
      "'safety_identifier':'s','reasoning_effort':'minimal','verbosity':null,"
      "'prompt_cache_key':5,'response_format':{'type':'json_schema','json_schema':"
      "{'schema':{'type':'object'}}}}",
      "{'model':'m','messages':[{'role':'user','content':'Hi'}],'tools':[{'type':"
      "'function','function':{'name':'f','description':'F','strict':false}}],"
      "'tool_choice':{'type':'allowed_tools','allowed_tools':{'mode':'required',"
      "'tools':[]}},'parallel_tool_calls':false}",
      "{'model':'m','messages':[{'role':'user','content':'Hi'}],'tools':[{'type':"
      "'function','function':{'name':'f','parameters':{'type':'object'}}}],"
      "'tool_choice':{'type':'function','function':{'name':'f'}},'stop':['a','b']}",
      /* a stream: what it may drop is named before what the encoder names */
      "{'model':'m','messages':[{'role':'system','content':'S'},{'role':'user',"
      "'content':'Hi'}],'user':'u','metadata':{'a':'b'},'stop':'x','seed':1,"
      "'stream':true}",
  };
  /* content: images (by URL, with detail, as data), files (data URL, bare
   * base64, file id), assistant history with refusals, reasoning text,
   * tool calls and custom (freeform) tools and calls */
  static const char *const content[] = {
      "{'model':'m','messages':[{'role':'user','content':[{'type':'text','text':'see'},"
      "{'type':'image_url','image_url':{'url':'https://x/y.png','detail':'high'}},"
      "{'type':'image_url','image_url':{'url':'data:image/png;base64,iVBORw0K'}},"
      "{'type':'file','file':{'file_data':'data:application/pdf;base64,JVBERi0x',"
      "'filename':'a.pdf'}},{'type':'file','file':{'file_data':'JVBERi0y'}}]}]}",
      "{'model':'m','messages':[{'role':'user','content':[{'type':'image_url',"
      "'image_url':'https://x/z.png'}]}]}",
      "{'model':'m','messages':[{'role':'user','content':[{'type':'file','file':"
      "{'file_id':'file-1','filename':'b.txt'}}]}]}",
      "{'model':'m','messages':[{'role':'user','content':'Hi'},{'role':'assistant',"
      "'content':null,'refusal':'I cannot.'},{'role':'user','content':'Why?'},"
      "{'role':'assistant','content':[{'type':'text','text':'Because '},"
      "{'type':'refusal','refusal':'no.'}],'refusal':'dropped'},{'role':'user',"
      "'content':'Go on'},{'role':'assistant','reasoning_content':'think \\u00e9',"
      "'content':'ok','tool_calls':[{'id':'c1','type':'function','function':{'name':'f',"
      "'arguments':'{\\'a\\':1}'}},{'id':'c2','type':'custom','custom':{'name':'g',"
      "'input':'raw text'}}]},{'role':'tool','tool_call_id':'c1','content':'r1'},"
      "{'role':'tool','tool_call_id':'c2','content':[{'type':'text','text':'r2'}]}],"
      "'tools':[{'type':'function','function':{'name':'f','parameters':{'type':'object'}}"
      "},"
      "{'type':'custom','custom':{'name':'g','description':'G','format':{'type':'grammar'"
      ","
      "'grammar':{'syntax':'lark','definition':'start: WORD'}}}},{'type':'custom',"
      "'custom':{'name':'h','format':{'type':'text'}}},{'type':'custom','custom':"
      "{'name':'i'}}],'tool_choice':{'type':'custom','custom':{'name':'g'}}}",
  };
  for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
    chat_round(settings[i], NULL);
    chat_pairs(settings[i]);
  }
  for (size_t i = 0; i < sizeof(content) / sizeof(content[0]); i++) {
    chat_round(content[i], NULL);
    chat_pairs(content[i]);
  }
  /* what the fields become on the Chat wire */
  chat_round(settings[0], "\"reasoning_effort\":\"high\"");
  chat_round(settings[0], "\"max_completion_tokens\":100");
  chat_round(content[0], "\"url\":\"data:image/png;base64,iVBORw0K\"");
  chat_round(content[0], "\"filename\":\"document.pdf\"");
  chat_round(content[3], "\"refusal\":\"I cannot.\"");
  chat_round(content[3], "\"reasoning_content\":\"think \\u00e9\"");
  chat_round(content[3], "\"grammar\":{\"syntax\":\"lark\"");
  chat_round(content[3], "\"tool_choice\":{\"type\":\"custom\"");
}
/* ---- Responses (responses_fast.c), in halves ----
 * Its decoder and its encoder each against responses.c's, chained through
 * each other: a Responses client body decoded for an upstream of protocol
 * dout (what the decoder keeps depends on it), fitted and encoded toward a
 * Responses upstream for a client of protocol ein (the encoder's lossy
 * names and its store/include depend on it). Both halves must take the
 * body; the body and the lossy list must equal the jansson halves'. */
static void resp_halves(const char *body, size_t len, int dout, int ein,
                        const char *want) {
  px_tr_ctx_t d, e;
  ctx_of(&d, PX_PROTO_RESPONSES, dout);
  ctx_of(&e, ein, PX_PROTO_RESPONSES);
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_freq_init(&ir);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t b;
  px_buf_init(&b, 64u << 20);
  int rc = px_fast_request_steps(&d, &e, &px_responses_fast, &px_responses_fast, body, len,
                                 &ir, &a, &b, &lf, NULL);
  CHECK(rc == 0);
  json_t *src = json_loadb(body, len, 0, NULL), *jir = NULL, *out = NULL;
  px_tr_err_t err;
  const px_ref_ops_t *ops = px_ref_get(PX_PROTO_RESPONSES);
  CHECK(src != NULL && ops->decode_request(&d, src, &jir, &ls, &err) == 0);
  if (jir != NULL) {
    json_object_set_new(jir, "model", json_string(e.upstream_model));
    px_ir_fit_request(&e, jir, &ls);
    CHECK(ops->encode_request(&e, jir, &out, &ls, &err) == 0);
  }
  char *so = out ? json_dumps(out, JSON_COMPACT) : NULL;
  if (rc == 0 && so != NULL) {
    char what[64];
    snprintf(what, sizeof(what), "responses halves, for %d, from %d:", dout, ein);
    fast_same(what, &b, &lf, so, &ls, want);
  }
  free(so);
  json_decref(src);
  json_decref(jir);
  json_decref(out);
  px_buf_free(&b);
  px_arena_free(&a);
}

static void resp_halves_all(const char *body, size_t len, const char *want) {
  for (int dout = 0; dout < PX_PROTO_COUNT; dout++)
    for (int ein = 0; ein < PX_PROTO_COUNT; ein++)
      if (dout != PX_PROTO_RESPONSES && ein != PX_PROTO_RESPONSES)
        resp_halves(body, len, dout, ein, want);
}

/* Codex's requests (test/agents/captured) and the shapes around them */
static void responses_codec(void) {
  const char *src = getenv("PROXAI_TEST_SRCDIR");
  static const char *const files[] = {"codex-0.169.0-gpt-5.1-codex.json",
                                      "codex-0.169.0-gpt-5.5.json"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/test/agents/captured/%s", src ? src : ".", files[i]);
    json_t *caps = json_load_file(path, 0, NULL);
    CHECK(json_is_array(caps));
    size_t k;
    json_t *r;
    json_array_foreach(caps, k, r) {
      char *body = json_dumps(json_object_get(r, "body"), JSON_COMPACT);
      CHECK(body != NULL);
      if (body != NULL) resp_halves_all(body, strlen(body), NULL);
      free(body);
    }
    json_decref(caps);
  }
  static const struct {
    const char *body, *want;
  } cases[] = {
      /* reasoning items: content texts first, else the summaries joined;
       * tagged tokens of other families; a reasoning item without a token */
      {"{\"model\":\"m\",\"reasoning\":{\"effort\":\"high\",\"summary\":\"auto\"},"
       "\"input\":[{\"role\":\"user\",\"content\":\"hi\"},{\"type\":\"reasoning\",\"id\":"
       "\"rs_1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"a\"},{\"type\":"
       "\"summary_text\",\"text\":\"\"},{\"type\":\"summary_text\",\"text\":\"b\\n\"}],"
       "\"encrypted_content\":\"enc1\"},{\"type\":\"reasoning\",\"summary\":[],"
       "\"content\":"
       "[{\"type\":\"reasoning_text\",\"text\":\"\"},{\"type\":\"reasoning_text\","
       "\"text\":"
       "\"t\"},7],\"encrypted_content\":\"pxa1:sig:abc\"},{\"type\":\"reasoning\","
       "\"summary\":"
       "[{\"type\":\"summary_text\",\"text\":\"x\"}]},{\"role\":\"assistant\","
       "\"content\":"
       "\"done\"}]}",
       "\"encrypted_content\":\"enc1\""},
      /* custom tools and calls, hosted and namespace tools, defer_loading,
       * a namespaced call, tool_choice of a custom tool */
      {"{\"model\":\"m\",\"input\":[{\"type\":\"custom_tool_call\",\"call_id\":\"c1\","
       "\"name\":\"apply_patch\",\"input\":\"*** Begin \\\"x\\\"\\n\"},{\"type\":"
       "\"custom_tool_call_output\",\"call_id\":\"c1\",\"output\":\"ok\"},{\"type\":"
       "\"function_call\",\"call_id\":\"c2\",\"name\":\"f\",\"namespace\":\"ns\","
       "\"arguments\":\"{\\\"a\\\":1}\"},{\"type\":\"function_call_output\",\"call_id\":"
       "\"c2\",\"output\":[{\"type\":\"input_text\",\"text\":\"r\"}]}],\"tools\":[{"
       "\"type\":"
       "\"custom\",\"name\":\"apply_patch\",\"description\":\"d\",\"format\":{\"type\":"
       "\"grammar\",\"syntax\":\"lark\",\"definition\":\"start: x\"}},{\"type\":"
       "\"function\",\"name\":\"f\",\"strict\":true,\"defer_loading\":true},{\"type\":"
       "\"namespace\",\"name\":\"n\",\"tools\":[{\"type\":\"function\",\"name\":\"g\"}]},"
       "{\"type\":\"web_search_preview_2025\"},{\"type\":\"tool_search\"},{\"type\":"
       "\"mcp\"}],\"tool_choice\":{\"type\":\"custom\",\"name\":\"apply_patch\"},"
       "\"parallel_tool_calls\":false}",
       NULL},
      /* images and files; assistant refusals and annotations; developer
       * and system messages */
      {"{\"model\":\"m\",\"instructions\":\"sys\",\"input\":[{\"type\":\"message\","
       "\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"dev\"}]},"
       "{\"role\":\"system\",\"content\":\"s2\"},{\"role\":\"user\",\"content\":[{"
       "\"type\":"
       "\"input_text\",\"text\":\"see\"},{\"type\":\"input_image\",\"image_url\":"
       "\"data:image/jpeg;base64,AAAA\",\"detail\":\"high\"},{\"type\":\"input_image\","
       "\"image_url\":\"https://x/y.png\"},{\"type\":\"input_file\",\"file_data\":"
       "\"data:text/plain;base64,QQ==\"},{\"type\":\"input_file\",\"file_data\":\"JVBE\","
       "\"filename\":\"a.pdf\"},{\"type\":\"input_file\",\"file_url\":\"https://x/f\"}]},"
       "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"t\","
       "\"annotations\":[{\"type\":\"url_citation\"}]},{\"type\":\"refusal\",\"refusal\":"
       "\"no\"}]},{\"type\":\"function_call\",\"call_id\":\"c3\",\"name\":\"f\","
       "\"arguments\":\"{}\"},{\"type\":\"function_call_output\",\"call_id\":\"c3\","
       "\"output\":[{\"type\":\"input_text\",\"text\":\"r\"},{\"type\":\"input_image\","
       "\"image_url\":\"https://x/z.png\"}]}],\"tools\":[{\"type\":\"function\",\"name\":"
       "\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}]}",
       NULL},
      /* text format and verbosity, the members dropped by name, an unknown
       * member, safety_identifier, tool_choice without tools */
      {"{\"model\":\"m\",\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\","
       "\"name\":\"out\",\"schema\":{\"type\":\"object\"},\"strict\":true,"
       "\"description\":"
       "\"d\"},\"verbosity\":\"low\"},\"store\":true,\"include\":[\"x\"],\"truncation\":"
       "\"auto\",\"prompt_cache_key\":\"k\",\"service_tier\":\"flex\",\"client_"
       "metadata\":"
       "{\"a\":\"b\"},\"max_tool_calls\":3,\"top_logprobs\":2,\"stream_options\":"
       "{\"include_obfuscation\":false},\"x_future\":1,\"safety_identifier\":\"s\","
       "\"tools\":[{\"type\":\"web_search\"}],\"tool_choice\":\"required\",\"metadata\":"
       "{\"k\":\"v\"},\"max_output_tokens\":100,\"temperature\":0.5,\"top_p\":1,"
       "\"stream\":"
       "true,\"reasoning\":{\"effort\":\"none\"}}",
       "\"store\":false"},
      {"{\"input\":[],\"text\":{\"format\":{\"type\":\"json_object\"},\"verbosity\":3},"
       "\"user\":\"u\",\"safety_identifier\":\"s\",\"prompt_cache_key\":5,\"reasoning\":"
       "{\"generate_summary\":\"concise\"}}",
       "\"include\":[\"reasoning.encrypted_content\"]"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    resp_halves_all(cases[i].body, strlen(cases[i].body), cases[i].want);
  /* declined: a repeated member of an item (jansson keeps the last), a
   * member the reference refuses repeated with a value it takes (an
   * escaped role or effort is read by its value: test_fast_unesc) */
  static const char *const declined[] = {
      "{\"model\":\"m\",\"top_p\":\"x\",\"input\":\"hi\",\"top_p\":1}",
      "{\"model\":\"m\",\"input\":[{\"type\":\"x\"}],\"input\":\"hi\"}",
      "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"a\",\"content\":"
      "\"b\"}]}",
  };
  for (size_t i = 0; i < sizeof(declined) / sizeof(declined[0]); i++)
    decoder_declines(PX_PROTO_RESPONSES, PX_PROTO_ANTHROPIC, declined[i]);
}

/* Responses' fast encoder on what other clients' decoders fill (cache
 * controls, thinking budgets and switches, signed and redacted thinking,
 * images and files in tool results): the fast IR built by hand, the same
 * IR as a document, both encoded for an Anthropic client. */
static px_fstr_t fs(const char *s) {
  return (px_fstr_t){s, strlen(s), 0};
}

static void resp_encode_case(px_freq_t *ir, const char *doc, const char *want) {
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_ANTHROPIC, PX_PROTO_RESPONSES);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  json_t *jir = json_loads(doc, 0, NULL);
  encoder_same("responses encoder:", &c, ir, jir, &lf, &ls, want);
  json_decref(jir);
}

static void responses_encoder(void) {
  static const px_str_t cc = {"{\"type\":\"ephemeral\"}", 20};
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_freq_init(&ir);
  px_fpart_t *s1 = px_fpart_text(&a, fs("a")), *s2 = px_fpart_text(&a, fs("b"));
  s1->cache_control = cc;
  px_fpart_push(&ir.system, &ir.system_last, s1);
  px_fpart_push(&ir.system, &ir.system_last, s2);
  px_fmsg_t *u = px_fmsg_push(&ir, &a, 0);
  px_fpart_t *t = px_fpart_text(&a, fs("hi")), *img = px_fpart_new(&a, PX_FP_IMAGE);
  t->cache_control = cc;
  img->media_type = fs("image/jpeg");
  img->data = fs("AAAA");
  px_fpart_push(&u->parts, &u->last, t);
  px_fpart_push(&u->parts, &u->last, img);
  px_fmsg_t *m = px_fmsg_push(&ir, &a, 1);
  px_fpart_t *r1 = px_fpart_new(&a, PX_FP_REASONING),
             *r2 = px_fpart_new(&a, PX_FP_REASONING),
             *r3 = px_fpart_new(&a, PX_FP_REASONING);
  r1->text = fs("th");
  r1->tok[px_frtok_index("signature")] = fs("sig");
  r2->text = fs("");
  r2->tok[px_frtok_index("redacted_data")] = fs("rd");
  r3->text = fs("t2");
  r3->tok[px_frtok_index("encrypted_content")] = fs("enc");
  px_fpart_t *tx = px_fpart_text(&a, fs("ok")), *call = px_fpart_new(&a, PX_FP_TOOL_CALL);
  call->id = fs("c1");
  call->name = fs("f");
  call->input = (px_str_t){"{\"a\": 1}", 8};
  px_fpart_t *parts[] = {r1, tx, r2, r3, call};
  for (size_t i = 0; i < 5; i++) px_fpart_push(&m->parts, &m->last, parts[i]);
  px_fmsg_t *u2 = px_fmsg_push(&ir, &a, 0);
  px_fpart_t *res = px_fpart_new(&a, PX_FP_TOOL_RESULT), *rt = px_fpart_text(&a, fs("r")),
             *f1 = px_fpart_new(&a, PX_FP_FILE), *f2 = px_fpart_new(&a, PX_FP_FILE),
             *tail = NULL;
  res->id = fs("c1");
  res->is_error = 1;
  f1->file_id = fs("file_1");
  f2->media_type = fs("text/plain");
  f2->data = fs("QQ==");
  px_fpart_push(&res->content, &tail, rt);
  px_fpart_push(&res->content, &tail, f1);
  px_fpart_push(&res->content, &tail, f2);
  px_fpart_push(&u2->parts, &u2->last, res);
  px_ftool_t *tool =
      px_ftool_push(&ir, &a, fs("f"), NULL, NULL, NULL, PX_FAST_OPENAI_PARAMS);
  tool->cache_control = cc;
  ir.tool_choice = PX_FTC_TOOL;
  ir.tc_name = fs("f");
  ir.has_reasoning = 1;
  ir.reasoning_enabled = 1;
  ir.budget = (px_str_t){"5000", 4};
  ir.budget_v = 5000;
  ir.top_k = (px_str_t){"3", 1};
  ir.stop1 = fs("x");
  ir.stream_true = 1;
  const char *doc =
      "{\"system\":[{\"type\":\"text\",\"text\":\"a\",\"cache_control\":{\"type\":"
      "\"ephemeral\"}},{\"type\":\"text\",\"text\":\"b\"}],\"messages\":[{\"role\":"
      "\"user\","
      "\"content\":[{\"type\":\"text\",\"text\":\"hi\",\"cache_control\":{\"type\":"
      "\"ephemeral\"}},{\"type\":\"image\",\"media_type\":\"image/"
      "jpeg\",\"data\":\"AAAA\"}]},"
      "{\"role\":\"assistant\",\"content\":[{\"type\":\"reasoning\",\"text\":\"th\","
      "\"signature\":\"sig\"},{\"type\":\"text\",\"text\":\"ok\"},{\"type\":"
      "\"reasoning\","
      "\"text\":\"\",\"redacted_data\":\"rd\"},{\"type\":\"reasoning\",\"text\":\"t2\","
      "\"encrypted_content\":\"enc\"},{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":"
      "\"f\","
      "\"arguments\":\"{\\\"a\\\":1}\"}]},{\"role\":\"user\",\"content\":[{\"type\":"
      "\"tool_result\",\"tool_call_id\":\"c1\",\"is_error\":true,\"content\":[{\"type\":"
      "\"text\",\"text\":\"r\"},{\"type\":\"file\",\"file_id\":\"file_1\"},{\"type\":"
      "\"file\","
      "\"media_type\":\"text/plain\",\"data\":\"QQ==\"}]}]}],\"tools\":[{\"name\":\"f\","
      "\"parameters\":{\"type\":\"object\",\"properties\":{}},\"cache_control\":{"
      "\"type\":"
      "\"ephemeral\"}}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},\"reasoning\":"
      "{\"enabled\":true,\"budget_tokens\":5000},\"top_k\":3,\"stop\":[\"x\"],\"stream\":"
      "true}";
  resp_encode_case(&ir, doc, "\"effort\":\"medium\"");
  /* thinking on without a budget (adaptive): summaries, the setting named */
  ir.budget = (px_str_t){NULL, 0};
  const char *adaptive = "{\"messages\":[],\"reasoning\":{\"enabled\":true}}";
  px_freq_t ir2;
  memset(&ir2, 0, sizeof(ir2));
  ir2.parallel = ir2.rf_strict = -1;
  ir2.has_reasoning = ir2.reasoning_enabled = 1;
  resp_encode_case(&ir2, adaptive, "\"summary\":\"auto\"");
  /* thinking off: no reasoning, no include */
  ir2.reasoning_enabled = 0;
  ir2.budget = (px_str_t){"5000", 4};
  ir2.budget_v = 5000;
  resp_encode_case(
      &ir2, "{\"messages\":[],\"reasoning\":{\"enabled\":false,\"budget_tokens\":5000}}",
      "\"store\":false}");
  px_arena_free(&a);
}

/* ------------------------------------------------------------------------ */
/* Gemini clients and upstreams: the fast Gemini codec against gemini.c      */

/* The fast Gemini decoder and encoder, one after the other, against
 * gemini.c's: thoughts and signatures, blobs, minted ids, the thinking and
 * JSON output settings go both ways. */
static void gem_round(const char *q, int stream, const char *want) {
  codec_round(PX_PROTO_GEMINI, &px_gemini_fast, q, stream, want);
}

/* the fast Gemini decoder's IR of a body, with a fresh arena and lossy */
static int gem_decode(const px_tr_ctx_t *c, const char *body, size_t len, px_freq_t *ir,
                      px_arena_t *a, px_lossy_t *l) {
  px_arena_init(a);
  px_freq_init(ir);
  px_lossy_init(l);
  return px_gemini_fast.decode_request(c, body, len, ir, a, l, NULL);
}

/* What other clients' decoders put in the IR and a Gemini client never
 * sends (Anthropic signatures and redacted thinking, OpenAI encrypted
 * reasoning, file ids, refusals, images in tool results, an effort or a
 * budget, a summary, a JSON schema): the fast Gemini encoder writes from
 * the fast IR what gemini.c writes from the same IR. */
static void gem_encode_ir(int variant) {
  static const char *const doc =
      "{'model':'m','messages':[{'role':'assistant','content':[{'type':'reasoning',"
      "'text':'hm','signature':'sig'},{'type':'reasoning','text':'','redacted_data':"
      "'red'},{'type':'reasoning','text':'own','thought_signature':'ts1'},{'type':"
      "'reasoning','text':'','thought_signature':'ts2'},{'type':'refusal','text':'no'},"
      "{'type':'tool_call','id':'c1','name':'f','arguments':' \\n'}]},{'role':'user',"
      "'content':[{'type':'tool_result','tool_call_id':'c1','content':[{'type':'text',"
      "'text':' {\\'a\\': 1}'},{'type':'image','url':'https://i'}],'is_error':true},"
      "{'type':'image','url':'data:image/png;base64,QUFB'},{'type':'file','url':"
      "'https://x/doc.PDF?x=1'},{'type':'file','file_id':'file-1'},{'type':'image',"
      "'media_type':'image/gif','data':'R0lG'}]}]}";
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_ANTHROPIC, PX_PROTO_GEMINI);
  px_arena_t a;
  px_arena_init(&a);
  px_freq_t ir;
  px_freq_init(&ir);
  px_fmsg_t *m = px_fmsg_push(&ir, &a, 1), *u = px_fmsg_push(&ir, &a, 0);
  CHECK(m && u);
  if (!(m && u)) return;
  static const struct {
    const char *text, *field, *tok;
  } rs[] = {{"hm", "signature", "sig"},
            {"", "redacted_data", "red"},
            {"own", "thought_signature", "ts1"},
            {"", "thought_signature", "ts2"}};
  for (size_t i = 0; i < 4; i++) {
    px_fpart_t *r = px_fpart_new(&a, PX_FP_REASONING);
    if (r == NULL) return;
    r->text = (px_fstr_t){rs[i].text, strlen(rs[i].text), 0};
    r->tok[px_frtok_index(rs[i].field)] = (px_fstr_t){rs[i].tok, strlen(rs[i].tok), 0};
    px_fpart_push(&m->parts, &m->last, r);
  }
  px_fpart_t *ref = px_fpart_new(&a, PX_FP_REFUSAL),
             *call = px_fpart_new(&a, PX_FP_TOOL_CALL);
  px_fpart_t *res = px_fpart_new(&a, PX_FP_TOOL_RESULT), *tail = NULL;
  px_fpart_t *rt = px_fpart_text(&a, (px_fstr_t){" {\\\"a\\\": 1}", 11, 1});
  px_fpart_t *ri = px_fpart_new(&a, PX_FP_IMAGE), *i1 = px_fpart_new(&a, PX_FP_IMAGE);
  px_fpart_t *f1 = px_fpart_new(&a, PX_FP_FILE), *f2 = px_fpart_new(&a, PX_FP_FILE);
  px_fpart_t *i2 = px_fpart_new(&a, PX_FP_IMAGE);
  CHECK(ref && call && res && rt && ri && i1 && f1 && f2 && i2);
  if (!(ref && call && res && rt && ri && i1 && f1 && f2 && i2)) return;
  ref->text = (px_fstr_t){"no", 2, 0};
  call->id = (px_fstr_t){"c1", 2, 0};
  call->name = (px_fstr_t){"f", 1, 0};
  call->args = (px_fstr_t){" \\n", 3, 1};
  px_fpart_push(&m->parts, &m->last, ref);
  px_fpart_push(&m->parts, &m->last, call);
  res->id = (px_fstr_t){"c1", 2, 0};
  res->is_error = 1;
  ri->url = (px_fstr_t){"https://i", 9, 0};
  px_fpart_push(&res->content, &tail, rt);
  px_fpart_push(&res->content, &tail, ri);
  i1->url = (px_fstr_t){"data:image/png;base64,QUFB", 26, 0};
  f1->url = (px_fstr_t){"https://x/doc.PDF?x=1", 21, 0};
  f2->file_id = (px_fstr_t){"file-1", 6, 0};
  i2->media_type = (px_fstr_t){"image/gif", 9, 0};
  i2->data = (px_fstr_t){"R0lG", 4, 0};
  px_fpart_t *up[] = {res, i1, f1, f2, i2};
  for (size_t i = 0; i < 5; i++) px_fpart_push(&u->parts, &u->last, up[i]);
  char *q = chat_body(doc);
  json_t *jir = json_loads(q, 0, NULL);
  free(q);
  CHECK(jir != NULL);
  ir.has_reasoning = 1;
  if (variant == 0) { /* a budget, a summary, a JSON schema */
    ir.budget = (px_str_t){"5000", 4};
    ir.budget_v = 5000;
    ir.summary = (px_fstr_t){"auto", 4, 0};
    ir.rf_schema = (px_str_t){"{\"type\":\"object\"}", 17};
    ir.rf_name = (px_fstr_t){"out", 3, 0};
    json_object_set_new(
        jir, "reasoning",
        json_pack("{s:i, s:s}", "budget_tokens", 5000, "summary", "auto"));
    json_object_set_new(jir, "response_format",
                        json_pack("{s:s, s:s, s:{s:s}}", "type", "json_schema", "name",
                                  "out", "schema", "type", "object"));
  } else if (variant == 1) { /* no thinking; JSON */
    ir.effort = (px_fstr_t){"none", 4, 0};
    ir.rf_json = 1;
    json_object_set_new(jir, "reasoning", json_pack("{s:s}", "effort", "none"));
    json_object_set_new(jir, "response_format",
                        json_pack("{s:s}", "type", "json_object"));
  } else { /* an effort, enabled */
    ir.effort = (px_fstr_t){"medium", 6, 0};
    ir.reasoning_enabled = 1;
    json_object_set_new(jir, "reasoning",
                        json_pack("{s:s, s:b}", "effort", "medium", "enabled", 1));
  }
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  /* Gemini's own signature rides on the part after it; the others drop */
  encoder_same("gemini encode", &c, &ir, jir, &lf, &ls,
               "{\"thoughtSignature\":\"ts2\",\"text\":\"no\"}");
  CHECK(strstr(lf.buf, "reasoning.signature") != NULL);
  json_decref(jir);
  px_arena_free(&a);
}

/* whether a fast string is the literal lit */
static int gem_is(px_fstr_t s, const char *lit) {
  return s.p != NULL && s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

/* The IR the fast decoder reads from a Gemini client's history: minted ids
 * answered by name in order, another family's signature joined to the
 * thought before it (Anthropic's, OpenAI's) or a part of its own (redacted
 * thinking), thoughts of user turns dropped. */
static void gem_decode_ir(const char *q) {
  char *body = chat_body(q);
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_GEMINI, PX_PROTO_CHAT);
  px_arena_t a;
  px_freq_t ir;
  px_lossy_t l;
  CHECK(gem_decode(&c, body, strlen(body), &ir, &a, &l) == 0);
  int ks = px_frtok_index("signature"), kr = px_frtok_index("redacted_data"),
      ke = px_frtok_index("encrypted_content");
  const px_fmsg_t *m = ir.msgs;
  CHECK(m != NULL && !m->assistant && m->parts == m->last && gem_is(m->parts->text, "q"));
  m = m ? m->next : NULL;
  const px_fpart_t *p = m ? m->parts : NULL;
  CHECK(m != NULL && m->assistant && p != NULL && p->type == PX_FP_REASONING &&
        gem_is(p->text, "hm") && gem_is(p->tok[ks], "S1"));
  p = p ? p->next : NULL;
  CHECK(p != NULL && p->type == PX_FP_TEXT && gem_is(p->text, "a"));
  p = p ? p->next : NULL;
  CHECK(p != NULL && p->type == PX_FP_TOOL_CALL && gem_is(p->id, "call_1"));
  p = p ? p->next : NULL;
  CHECK(p != NULL && p->type == PX_FP_TOOL_CALL && gem_is(p->id, "call_2"));
  p = p ? p->next : NULL;
  CHECK(p != NULL && p->type == PX_FP_REASONING && p->text.n == 0 &&
        gem_is(p->tok[kr], "R1") && p->next == NULL);
  m = m ? m->next : NULL;
  p = m ? m->parts : NULL;
  CHECK(p != NULL && p->type == PX_FP_TOOL_RESULT && gem_is(p->id, "call_1") &&
        p->next != NULL && gem_is(p->next->id, "call_2"));
  m = m ? m->next : NULL;
  p = m ? m->parts : NULL;
  CHECK(p != NULL && p->type == PX_FP_REASONING && gem_is(p->tok[ke], "E1") &&
        p->next != NULL && p->next->type == PX_FP_TEXT);
  CHECK(strcmp(l.buf, "contents[].parts[].executableCode,generationConfig.seed") == 0);
  px_arena_free(&a);
  free(body);
}

static void gemini_codec(void) {
  gem_encode_ir(0);
  gem_encode_ir(1);
  gem_encode_ir(2);
  /* Gemini CLI's shape: thought signatures on calls and text, a thought,
   * ids of its own, a JSON schema declaration and an OpenAPI one */
  static const char *const bodies[] = {
      "{'contents':[{'role':'user','parts':[{'text':'Hi \\u00e9'}]},{'role':'model',"
      "'parts':[{'text':'plan','thought':true,'thoughtSignature':'c2ln'},{'text':'ok'},"
      "{'functionCall':{'id':'run_1','name':'sh','args':{'cmd':'ls','n':[1,2.5]}},"
      "'thoughtSignature':'c2ln2'}]},{'role':'user','parts':[{'functionResponse':{"
      "'id':'run_1','name':'sh','response':{'output':'a b'}}}]}],'systemInstruction':"
      "{'role':'user','parts':[{'text':'Be brief.'}]},'tools':[{'functionDeclarations':["
      "{'name':'sh','description':'Shell','parametersJsonSchema':{'type':'object',"
      "'properties':{'cmd':{'type':'string'}}}},{'name':'g','parameters':{'type':"
      "'OBJECT','properties':{'x':{'type':'STRING'}}}},{'name':'h'}]}],"
      "'generationConfig':{'temperature':1,'topP':0.95,'topK':64,'thinkingConfig':"
      "{'includeThoughts':true,'thinkingBudget':8192}}}",
      /* minted ids: calls without ids, results by name; roles after parts;
       * a signature-only part, a code execution part; a thought in a user
       * turn; another family's signatures after a thought (joined) and
       * redacted (a part of its own) */
      "{'contents':[{'parts':[{'text':'q'},{'text':'t','thought':true}]},{'parts':["
      "{'text':'hm','thought':true},{'text':'a','thoughtSignature':'pxa1:sig:S1'},"
      "{'functionCall':{'name':'f','args':{}}},{'functionCall':{'name':'f'}},"
      "{'thoughtSignature':'pxa1:red:R1'},{'executableCode':{'code':'1'}}],'role':"
      "'model'},{'role':'user','parts':[{'functionResponse':{'name':'f','response':"
      "{'content':'r1'}}},{'functionResponse':{'name':'f','response':{'a':1,'b':'x'}}}]},"
      "{'role':'model','parts':[{'text':'x','thought':true},{'text':'y',"
      "'thoughtSignature':'pxo1:enc:E1'}]}],'generationConfig':{'thinkingConfig':"
      "{'thinkingBudget':0},'responseMimeType':'application/json','responseSchema':"
      "{'type':'OBJECT','properties':{'a':{'type':'INTEGER'}}},'seed':1}}",
      /* blobs; a thinking level; JSON output without a schema */
      "{'contents':[{'role':'user','parts':[{'inlineData':{'mimeType':'image/png',"
      "'data':'QUFB'}},{'inlineData':{'mimeType':'application/pdf','data':'JVBE'}},"
      "{'fileData':{'mimeType':'image/jpeg','fileUri':'https://x/a.jpg'}},{'text':"
      "'see'}]}],'generationConfig':{'thinkingConfig':{'thinkingLevel':'LOW',"
      "'thinkingBudget':-1},'responseMimeType':'application/json',"
      "'responseJsonSchema':null,'maxOutputTokens':100},'safetySettings':[]}",
      /* other MIME types are dropped; a level of its own is high */
      "{'contents':[{'role':'user','parts':[{'text':'x'}]}],'generationConfig':{"
      "'responseMimeType':'text/x.enum','thinkingConfig':{'thinkingLevel':'max'}}}",
  };
  for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
    for (int stream = 0; stream < 2; stream++) {
      gem_round(bodies[i], stream, NULL);
      client_pairs(PX_PROTO_GEMINI, &px_gemini_fast, bodies[i], stream);
    }
  gem_decode_ir(bodies[1]);
  /* what they become on the Gemini wire */
  gem_round(bodies[0], 1, "\"thoughtSignature\":\"c2ln2\",\"functionCall\"");
  gem_round(bodies[0], 0, "\"thought\":true,\"thoughtSignature\":\"c2ln\"");
  gem_round(bodies[0], 0, "\"thinkingBudget\":8192");
  gem_round(bodies[1], 0, "{\"thinkingBudget\":0}");
  gem_round(bodies[1], 0, "\"responseJsonSchema\":{\"type\":\"object\"");
  gem_round(bodies[2], 0, "{\"fileData\":{\"mimeType\":\"image/jpeg\"");
  gem_round(bodies[2], 0, "\"thinkingBudget\":1024");
}

/* ------------------------------------------------------------------------ */
/* Chat clients' bodies the reference refuses: the fast decoder refuses them
 * in the same words (kind, param, message), or declines where the words
 * could move (a member repeated after the refusal) */

/* body (' for ") toward upstream out: refused as chat.c refuses it (1), or
 * declined by the fast path and left to the reference (0) */
static void chat_refusal(int out, const char *q, int refused) {
  char *body = chat_body(q);
  if (refused)
    request_refused(PX_PROTO_CHAT, out, body, NULL);
  else
    request_declined(PX_PROTO_CHAT, out, body);
  free(body);
}

static void chat_refusals(void) {
#define M "{'model':'m','messages':"
#define U "[{'role':'user','content':"
  static const char *const refused[] = {
      M "[],'n':2}",
      M "[],'n':1.0}",
      M "[],'stream':true,'functions':[{'name':'f'}]}",
      M "[],'function_call':'auto'}",
      M "[],'audio':{'voice':'x'}}",
      M "[],'modalities':['text','audio']}",
      "{'model':'m'}",
      "{'model':5,'messages':[]}",
      M "{}}",
      M "[5]}",
      M "[{'content':'x'}]}",
      M "[{'role':'function','name':'f','content':'x'}]}",
      M "[{'role':'b\\u00f6t','content':'x'}]}",
      M "[{'role':'system','content':5}]}",
      M "[{'role':'system','content':[{'type':'image_url'}]}]}",
      M "[{'role':'user'}]}",
      M U "[{'type':'input_audio','input_audio':{}}]}]}",
      M U "[{'type':'x\\\"y'}]}]}",
      M U "[{'text':'x'}]}]}",
      M U "[1]}]}",
      M U "[{'type':'text','text':1}]}]}",
      M U "[{'type':'image_url'}]}]}",
      M U "[{'type':'image_url','image_url':{'url':'data:image/png,abc'}}]}]}",
      M U "[{'type':'file'}]}]}",
      M U "[{'type':'file','file':{}}]}]}",
      M U "[{'type':'file','file':{'file_data':'data:;base64,x'}}]}]}",
      M "[{'role':'assistant','content':5}]}",
      M "[{'role':'assistant','content':[{'type':'image_url'}]}]}",
      M "[{'role':'assistant','content':null,'function_call':{'name':'f'}}]}",
      M "[{'role':'assistant','content':null,'audio':{'id':'a'}}]}",
      M "[{'role':'assistant','tool_calls':{}}]}",
      M "[{'role':'assistant','tool_calls':[{'type':'custom','id':'c','custom':{}}]}]}",
      M
      "[{'role':'assistant','tool_calls':[{'id':'c','type':'function','function':"
      "{'name':'f','arguments':'{\\\"a\\\":'}}]}]}",
      M "[{'role':'assistant','tool_calls':[{'id':'c','function':{}}]}]}",
      M "[{'role':'assistant','tool_calls':[5]}]}",
      M "[{'role':'tool','content':'x'}]}",
      M "[{'role':'tool','tool_call_id':'c','content':[{'type':'text'}]}]}",
      M "[],'tools':{}}",
      M "[],'tools':[{'type':'web_search'}]}",
      M "[],'tools':[{'type':'function','function':{}}]}",
      M "[],'tools':[5]}",
      /* refused mid-list (read in place): the rest skipped, the members
       * after it looked at for repeats */
      M "[],'tools':[{'type':'function','function':{'name':'f','parameters':{'a':[{}]}}},"
        "{'type':'web_search'},{'type':'function'}],'n':2}",
      M "[],'tool_choice':'any'}",
      M "[],'tool_choice':{'type':'web'}}",
      M "[],'tool_choice':5}",
      M "[],'tool_choice':{'type':'function','function':{}}}",
      M "[],'max_tokens':0}",
      M "[],'max_completion_tokens':1.5}",
      M "[],'max_tokens':-3,'max_completion_tokens':4}",
      M "[],'stop':5}",
      M "[],'stop':['a',1]}",
      M "[],'response_format':{}}",
      M "[],'response_format':{'type':'xml'}}",
      M "[],'response_format':{'type':'json_schema','json_schema':{}}}",
      /* the first refusal in body order wins */
      M "[{'role':'tool','content':'x'}],'n':2}",
      "{'n':3,'model':'m','messages':[{'role':'tool','content':'x'}]}",
      /* a member repeated after the refusal but only seen there */
      M "[],'n':2,'seed':1,'seed':2}",
  };
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
    for (int out = 1; out < PX_PROTO_COUNT; out++) chat_refusal(out, refused[i], 1);
  /* escaped values decide as their value does */
  chat_refusal(2, M "[{'role':'user','content':[{'type':'t\\u0065xt','text':1}]}]}", 1);
  chat_refusal(2, M "[{'role':'\\u0075ser','content':[{'type':'inp\\u0075t_audio'}]}]}",
               1);
  /* uploaded files, custom tools and any JSON as arguments go to Responses
   * only */
  for (int out = 2; out < PX_PROTO_COUNT; out++) {
    chat_refusal(out, M U "[{'type':'file','file':{'file_id':'file-1'}}]}]}", 1);
    chat_refusal(out, M "[],'tools':[{'type':'custom','custom':{'name':'c'}}]}", 1);
  }
  chat_refusal(2,
               M
               "[{'role':'assistant','tool_calls':[{'id':'c','function':{'name':'f',"
               "'arguments':'[1]'}}]}]}",
               1);
  char *any = chat_body(M
                        "[{'role':'assistant','tool_calls':[{'id':'c','function':{"
                        "'name':'f','arguments':'[1]'}}]}]}");
  request_pair(PX_PROTO_CHAT, PX_PROTO_RESPONSES, any, "\"arguments\":\"[1]\"");
  free(any);
  /* base64 data with escaped slashes (some serializers write "\/") is
   * taken as it is */
  char *esc =
      chat_body(M
                "[{'role':'user','content':[{'type':'image_url','image_url':{'url':"
                "'data:image/png;base64,ab\\/"
                "c'}},{'type':'file','file':{'file_data':'x\\/y'}}]}]}");
  for (int out = 1; out < PX_PROTO_COUNT; out++)
    request_pair(PX_PROTO_CHAT, out, esc, NULL);
  free(esc);
  /* where a repeated member would move the reference's refusal */
  chat_refusal(2, M "[],'n':2,'n':1}", 0);
  chat_refusal(2, "{'n':2,'messages':[],'messages':{}}", 1); /* it stands after */
  chat_refusal(2, M "[{'role':'tool','content':'x'}],'messages':[]}", 0);
#undef M
#undef U
}

/* ------------------------------------------------------------------------ */
/* Chat answers: the fast decoder of a Chat upstream's answer and the fast
 * encoder of a Chat client's, against chat.c */

/* a Chat answer (' for ") the reference refuses, toward client in: the
 * fast path refuses it in the same words */
static void chat_answer_refused(int in, const char *q) {
  char *body = chat_body(q);
  answer_refused(in, PX_PROTO_CHAT, body);
  free(body);
}

/* an answer IR in both forms (jir: the document IR, ' for ") through the
 * Chat client's encoders, for an upstream out: JSON-equal, the same lossy
 * list; want: in the fast body */
static void chat_answer_ir(int out, const px_fresp_t *ir, const char *jir_q,
                           const char *want) {
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_CHAT, out);
  char *q = chat_body(jir_q);
  json_t *jir = json_loads(q, 0, NULL);
  free(q);
  answer_encoder_same("chat answer", PX_PROTO_CHAT, &c, ir, jir, want);
  json_decref(jir);
}

static px_fpart_t *fpart(px_arena_t *a, px_fresp_t *ir, px_fpart_type_t t,
                         const char *text) {
  px_fpart_t *p = px_fpart_new(a, t);
  if (p == NULL) abort();
  if (text) p->text = (px_fstr_t){text, strlen(text), strchr(text, '\\') != NULL};
  px_fpart_push(&ir->content, &ir->last, p);
  return p;
}

static void chat_answer_irs(void) {
  px_arena_t a;
  px_arena_init(&a);
  px_fresp_t ir;
  /* reasoning with its tokens, texts with annotations (shifted by the code
   * points before: escapes, a surrogate pair), a refusal, calls with ids
   * missing and repeated */
  fresp_init(&ir);
  ir.id = (px_fstr_t){"msg_1", 5, 0};
  ir.stop = PX_STOP_TOOL_USE;
  px_fpart_t *r = fpart(&a, &ir, PX_FP_REASONING, "hm");
  r->tok[px_frtok_index("signature")] = (px_fstr_t){"sig", 3, 0};
  r = fpart(&a, &ir, PX_FP_REASONING, "");
  r->tok[px_frtok_index("redacted_data")] = (px_fstr_t){"red", 3, 0};
  fpart(&a, &ir, PX_FP_TEXT, "a\\u00e9\\ud83d\\ude00\\n\xc3\xa9");
  px_fpart_t *t = fpart(&a, &ir, PX_FP_TEXT, "see");
  static const char anns[] =
      "[{\"type\":\"url_citation\",\"url\":\"https://x\",\"title\":\"X\","
      "\"start_index\":0,\"end_index\":3},{\"type\":\"file_citation\",\"file_id\":\"f\"},"
      "{\"type\":\"url_citation\",\"start_index\":1},5]";
  t->annotations = (px_str_t){anns, sizeof(anns) - 1};
  fpart(&a, &ir, PX_FP_REFUSAL, "no");
  px_fpart_t *c1 = fpart(&a, &ir, PX_FP_TOOL_CALL, NULL),
             *c2 = fpart(&a, &ir, PX_FP_TOOL_CALL, NULL),
             *c3 = fpart(&a, &ir, PX_FP_TOOL_CALL, NULL);
  c1->id = c2->id = (px_fstr_t){"c", 1, 0};
  c1->name = c2->name = c3->name = (px_fstr_t){"f", 1, 0};
  c1->args = c2->args = (px_fstr_t){"{}", 2, 0};
  c3->custom = 1;
  c3->text = (px_fstr_t){"x = 1", 5, 0};
  ir.has_usage = 1;
  ir.in = 3;
  ir.out = 4;
  ir.reasoning = 2;
  static const char doc[] =
      "{'id':'msg_1','stop_reason':'tool_use','content':[{'type':'reasoning','text':'hm',"
      "'signature':'sig'},{'type':'reasoning','text':'','redacted_data':'red'},"
      "{'type':'text','text':'a\\u00e9\\ud83d\\ude00\\n\xc3\xa9'},{'type':'text','text':'"
      "see',"
      "'annotations':[{'type':'url_citation','url':'https://x','title':'X',"
      "'start_index':0,'end_index':3},{'type':'file_citation','file_id':'f'},"
      "{'type':'url_citation','start_index':1},5]},{'type':'refusal','text':'no'},"
      "{'type':'tool_call','id':'c','name':'f','arguments':'{}'},{'type':'tool_call',"
      "'id':'c','name':'f','arguments':'{}'},{'type':'tool_call','name':'f','custom':"
      "true,"
      "'input':'x = "
      "1'}],'usage':{'input_tokens':3,'output_tokens':4,'reasoning_tokens':2}}";
  for (int out = 1; out < PX_PROTO_COUNT; out++)
    chat_answer_ir(out, &ir, doc, "\"start_index\":5,\"end_index\":8");
  /* a refusal explanation: the refusal when nothing else words it, else
   * named; a refusal with nothing to show is content_filter */
  memset(&ir, 0, sizeof(ir));
  ir.stop = PX_STOP_REFUSAL;
  ir.refusal_explanation = (px_fstr_t){"policy \\\"x\\\"", 12, 1};
  chat_answer_ir(
      2, &ir,
      "{'stop_reason':'refusal','refusal_explanation':'policy \\\"x\\\"','content':[]}",
      "\"refusal\":\"policy");
  fpart(&a, &ir, PX_FP_TEXT, "partial");
  chat_answer_ir(2, &ir,
                 "{'stop_reason':'refusal','refusal_explanation':'policy \\\"x\\\"',"
                 "'content':[{'type':'text','text':'partial'}]}",
                 NULL);
  memset(&ir, 0, sizeof(ir));
  ir.stop = PX_STOP_REFUSAL;
  chat_answer_ir(3, &ir, "{'stop_reason':'refusal','content':[]}", "content_filter");
  px_arena_free(&a);
}

/* a Chat answer (' for ") through both fast halves of chat_fast.c (the
 * upstream's decoder, the client's encoder) against chat.c's */
static void chat_self_answer(const char *q) {
  char *body = chat_body(q);
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_CHAT, PX_PROTO_CHAT);
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  px_buf_t b;
  px_buf_init(&b, 1 << 20);
  CHECK(fast_answer_halves(&c, &px_chat_fast, &px_chat_fast, body, strlen(body), &b, &lf,
                           NULL) == 0);
  const px_ref_ops_t *ops = px_ref_get(PX_PROTO_CHAT);
  json_t *up = json_loads(body, 0, NULL), *jir = NULL, *cb = NULL;
  px_tr_err_t err;
  CHECK(up != NULL && ops->decode_response(&c, up, &jir, &ls, &err) == 0 &&
        ops->encode_response(&c, jir, &cb, &ls, &err) == 0);
  char *so = cb ? json_dumps(cb, JSON_COMPACT) : NULL;
  fast_same("chat answer", &b, &lf, so, &ls, NULL);
  free(so);
  json_decref(cb);
  json_decref(jir);
  json_decref(up);
  px_buf_free(&b);
  free(body);
}

static void chat_answers(void) {
  chat_answer_irs();
#define A \
  "{'id':'chatcmpl-1','object':'chat.completion','created':1,'model':'u','choices':"
  /* what a Chat upstream answers, to every client */
  static const char *const ok[] = {
      A
      "[{'index':0,'message':{'role':'assistant','reasoning_content':'hm','content':"
      "'Hi','refusal':null,'tool_calls':[{'id':'c1','type':'function','function':"
      "{'name':'f','arguments':' '}}]},'logprobs':{'content':[]},'finish_reason':"
      "'tool_calls'}],'usage':{'prompt_tokens':5,'completion_tokens':3,"
      "'completion_tokens_details':{'reasoning_tokens':2}}}",
      A
      "[{'index':0,'message':{'role':'assistant','content':[{'type':'text','text':'a'},"
      "{'type':'text'},{'type':'image'},5,{'type':'text','text':'b\\u00e9'}],"
      "'annotations':[{'type':'url_citation','url_citation':{'url':'https://x',"
      "'title':'X','start_index':0,'end_index':2}},{'type':'file'}],"
      "'audio':{'id':'a'}},'finish_reason':'stop'}]}",
      A
      "[{'index':0,'message':{'role':'assistant','content':null,'annotations':"
      "[{'type':'url_citation','url_citation':{'url':'u'}}]},'finish_reason':'stop'}]}",
      A
      "[{'index':0,'message':{'role':'assistant','content':[{'type':'text','text':''}],"
      "'refusal':'I cannot.'},'finish_reason':'stop'}]}",
      A
      "[{'index':0,'message':{'role':'assistant','content':'','tool_calls':[{'id':'c',"
      "'function':{'name':'f','arguments':'{}'}},{'function':{'arguments':5}}]},"
      "'finish_reason':'tool_calls'}]}",
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) chat_self_answer(ok[i]);
  /* a custom tool call, for a client that holds it */
  chat_self_answer(
      A
      "[{'index':0,'message':{'role':'assistant','content':null,'tool_calls':[{'id':'c',"
      "'type':'custom','custom':{'name':'g','input':'x'}}]},'finish_reason':'tool_calls'}"
      "]}");
  /* what chat.c refuses (502): not one choice, no message, a tool call of
   * another kind (custom toward a client without custom tools) */
  for (int in = 1; in < PX_PROTO_COUNT; in++) {
    chat_answer_refused(in, A "[]}");
    chat_answer_refused(in, "{'id':'x'}");
    chat_answer_refused(in,
                        A "[{'message':{'content':'a'}},{'message':{'content':'b'}}]}");
    chat_answer_refused(in, A "[5]}");
    chat_answer_refused(in, A "[{'message':'x'}]}");
    chat_answer_refused(in, A "[{'message':{'tool_calls':[{'id':'c','type':'web'}]}}]}");
    chat_answer_refused(in, A "[{'message':{'tool_calls':[{'id':'c'}]}}]}");
  }
  chat_answer_refused(PX_PROTO_ANTHROPIC, A
                      "[{'message':{'tool_calls':[{'id':'c','type':'custom','custom':"
                      "{'name':'g'}}]}}]}");
#undef A
}

/* ---- Responses clients: what responses.c refuses, the fast decoder
 * refuses in the same words (kind, param, message), for every upstream;
 * the first refusal in the body's order, the input's after every other
 * member's (the reference reads input last). Arguments that are valid JSON
 * but no object are taken (an upstream taking only objects refuses them). */
static void resp_refuses(const char *body) {
  for (int out = 0; out < PX_PROTO_COUNT; out++) {
    if (out == PX_PROTO_RESPONSES) continue;
    sides_t r;
    sides_init(&r, PX_PROTO_RESPONSES, out);
    px_arena_t a;
    px_arena_init(&a);
    px_freq_t ir;
    px_freq_init(&ir);
    int rc =
        px_responses_fast.decode_request(&r.c, body, strlen(body), &ir, &a, &r.lf, &r.ef);
    px_arena_free(&a);
    json_t *src = json_loads(body, 0, NULL), *jir = NULL;
    int sr =
        px_ref_get(PX_PROTO_RESPONSES)->decode_request(&r.c, src, &jir, &r.ls, &r.es);
    if (sr == 0) { /* an upstream that takes it (a file id) */
      CHECK(rc == 0);
      if (rc != 0)
        fprintf(stderr, "responses for %d: %s refused: %s\n", out, body, r.ef.message);
    } else {
      refusal_same("responses refusal", &r, rc == PX_FAST_REFUSE, NULL, body);
    }
    json_decref(src);
    json_decref(jir);
    sides_free(&r);
  }
}

static void responses_refusals(void) {
  static const char *const bodies[] = {
      /* what needs a Responses upstream */
      "{'model':'m','previous_response_id':'resp_1','input':'hi'}",
      "{'model':'m','conversation':{'id':'c'},'input':'hi'}",
      "{'model':'m','background':true,'input':'hi'}",
      "{'model':'m','prompt':{'id':'p'},'input':'hi'}",
      /* top-level members of the wrong kind */
      "{'model':5,'input':'hi'}",
      "{'model':'m','input':'hi','tools':{}}",
      "{'model':'m','input':'hi','tools':[{'type':'function','name':'f'},7]}",
      "{'model':'m','input':'hi','tools':[{'type':'function'}]}",
      "{'model':'m','input':'hi','tool_choice':'sometimes'}",
      "{'model':'m','input':'hi','text':[]}",
      "{'model':'m','input':'hi','text':{'format':{'name':'x'}}}",
      "{'model':'m','input':'hi','text':{'format':'json'}}",
      "{'model':'m','input':'hi','text':{'format':{'type':'json_schema','schema':1}}}",
      "{'model':'m','input':'hi','text':{'format':{'type':'yaml'}}}",
      "{'model':'m','input':'hi','reasoning':'high'}",
      "{'model':'m','input':'hi','instructions':['a']}",
      "{'model':'m','input':'hi','max_output_tokens':1.5}",
      "{'model':'m','input':'hi','max_output_tokens':'9'}",
      "{'model':'m','input':'hi','temperature':'hot'}",
      "{'model':'m','input':'hi','top_p':true}",
      "{'model':'m'}",
      "{'model':'m','input':null}",
      "{'model':'m','input':{}}",
      /* items */
      "{'model':'m','input':[1]}",
      "{'model':'m','input':[{'type':'item_reference','id':'x'}]}",
      "{'model':'m','input':[{'content':'hi'}]}",
      "{'model':'m','input':[{'role':'tool','content':'hi'}]}",
      "{'model':'m','input':[{'role':'user'}]}",
      "{'model':'m','input':[{'role':'assistant','content':7}]}",
      "{'model':'m','input':[{'role':'system','content':[{'type':'input_image'}]}]}",
      "{'model':'m','input':[{'role':'developer','content':[{'type':'text'}]}]}",
      "{'model':'m','input':[{'role':'system','content':['x']}]}",
      "{'model':'m','input':[{'role':'user','content':[{'text':'x'}]}]}",
      "{'model':'m','input':[{'role':'user','content':['x']}]}",
      "{'model':'m','input':[{'role':'user','content':[{'type':'input_text'}]}]}",
      "{'model':'m','input':[{'role':'user','content':[{'type':'input_image','file_id':'"
      "f'}]}]}",
      "{'model':'m','input':[{'role':'user','content':[{'type':'input_image'}]}]}",
      "{'model':'m','input':[{'role':'user','content':[{'type':'input_image','image_url':"
      "'data:image/png,AAAA'}]}]}",
      "{'model':'m','input':[{'role':'user','content':[{'type':'input_file','file_id':'f'"
      "}]}]}",
      "{'model':'m','input':[{'role':'user','content':[{'type':'input_file'}]}]}",
      "{'model':'m','input':[{'role':'user','content':[{'type':'input_audio'}]}]}",
      "{'model':'m','input':[{'role':'user','content':[{'type':'video'}]}]}",
      "{'model':'m','input':[{'role':'assistant','content':[{}]}]}",
      "{'model':'m','input':[{'role':'assistant','content':[5]}]}",
      "{'model':'m','input':[{'role':'assistant','content':[{'type':'output_text'}]}]}",
      "{'model':'m','input':[{'role':'assistant','content':[{'type':'refusal'}]}]}",
      "{'model':'m','input':[{'role':'assistant','content':[{'type':'input_image'}]}]}",
      "{'model':'m','input':[{'type':'function_call','name':'f','arguments':'{}'}]}",
      "{'model':'m','input':[{'type':'function_call','call_id':'c','arguments':'{}'}]}",
      "{'model':'m','input':[{'type':'function_call','call_id':'c','name':'f'}]}",
      "{'model':'m','input':[{'type':'function_call','call_id':'c','name':'f',"
      "'arguments':'{city: 1}'}]}",
      "{'model':'m','input':[{'type':'function_call','call_id':'c','name':'f',"
      "'arguments':''}]}",
      "{'model':'m','input':[{'type':'custom_tool_call','name':'f','input':'x'}]}",
      "{'model':'m','input':[{'type':'custom_tool_call','call_id':'c','input':'x'}]}",
      "{'model':'m','input':[{'type':'custom_tool_call','call_id':'c','name':'f'}]}",
      "{'model':'m','input':[{'type':'function_call_output','output':'x'}]}",
      "{'model':'m','input':[{'type':'function_call_output','call_id':'c'}]}",
      "{'model':'m','input':[{'type':'function_call_output','call_id':'c','output':"
      "[{'type':'input_file'}]}]}",
      /* the first refusal in order, the input's last */
      "{'model':'m','input':[{'type':'item_reference'}],'tools':5}",
      "{'model':'m','text':5,'input':[{'type':'item_reference'}],'tools':5}",
      "{'model':'m','input':[{'role':'user','content':'a'},{'type':'x'},{'type':'y'}]}",
      /* a tools list refused mid-way (read in place): the rest of it
       * skipped, the members after it still read, its refusal the first */
      "{'model':'m','tools':[{'type':'function','name':'f','parameters':{'a':[{}]}},"
      "{'type':'function'},{'type':'function','name':'g'}],'temperature':'hot',"
      "'input':'hi'}",
      "{'model':'m','text':5,'tools':[{'type':'function'}],'input':'hi'}",
  };
  for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
    char body[512];
    snprintf(body, sizeof(body), "%s", bodies[i]);
    for (char *q = body; *q; q++)
      if (*q == '\'') *q = '"';
    resp_refuses(body);
  }
  /* arguments that are JSON but no object: taken, the text kept as it is */
  const char *arr =
      "{\"model\":\"m\",\"input\":[{\"type\":\"function_call\",\"call_id\":"
      "\"c\",\"name\":\"f\",\"arguments\":\"[1, 2]\"}]}";
  request_pair(PX_PROTO_RESPONSES, PX_PROTO_CHAT, arr, "\"arguments\":\"[1, 2]\"");
  /* an image URL written with "\/" (no data URL: its first bytes say) */
  const char *esc =
      "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
      "\"input_image\",\"image_url\":\"https:\\/\\/x\\/y.png\"}]}]}";
  request_pair(PX_PROTO_RESPONSES, PX_PROTO_CHAT, esc, "https:");
}

/* ---- Responses answers: responses_fast.c's decoder and encoder, chained
 * (a Responses client of a Responses upstream, the context the halves
 * share), against responses.c's halves on the same body: reasoning items
 * with their tokens, refusals, annotations, custom tool calls, the items
 * and parts only Responses has (dropped and named); expl, when set, is an
 * IR refusal_explanation of a refused answer (the fast IR's and the
 * document's). A refusal of the body: the same words. */
static void resp_answer(const char *q, const char *expl, const char *want) {
  char body[2048];
  snprintf(body, sizeof(body), "%s", q);
  for (char *x = body; *x; x++)
    if (*x == '\'') *x = '"';
  sides_t r;
  sides_init(&r, PX_PROTO_RESPONSES, PX_PROTO_RESPONSES);
  size_t len = strlen(body);
  px_arena_t a;
  px_arena_init(&a);
  px_fresp_t ir;
  fresp_init(&ir);
  const px_ref_ops_t *ops = px_ref_get(PX_PROTO_RESPONSES);
  int rc = px_responses_fast.decode_response(&r.c, body, len, &ir, &a, &r.lf, &r.ef);
  json_t *up = json_loadb(body, len, 0, NULL), *jir = NULL, *cb = NULL;
  int sr = up != NULL ? ops->decode_response(&r.c, up, &jir, &r.ls, &r.es) : -1;
  if (sr < 0) { /* refused: in the same words */
    refusal_same("responses answer refusal", &r, rc == PX_FAST_REFUSE, NULL, body);
    goto done;
  }
  if (expl != NULL) {
    ir.stop = PX_STOP_REFUSAL;
    ir.refusal_explanation = (px_fstr_t){expl, strlen(expl), 0};
    json_object_set_new(jir, "stop_reason", json_string("refusal"));
    json_object_set_new(jir, "refusal_explanation", json_string(expl));
  }
  CHECK(rc == 0 && (px_fresp_uses(&ir) & ~px_responses_fast.resp_encodes) == 0);
  if (rc == 0) rc = px_responses_fast.encode_response(&r.c, &ir, &r.b, &a, &r.lf, NULL);
  CHECK(rc == 0);
  CHECK(ops->encode_response(&r.c, jir, &cb, &r.ls, &r.es) == 0);
  char *so = cb ? json_dumps(cb, JSON_COMPACT) : NULL;
  if (rc == 0 && so != NULL) fast_same("responses answer", &r.b, &r.lf, so, &r.ls, want);
  free(so);
done:
  px_arena_free(&a);
  json_decref(cb);
  json_decref(jir);
  json_decref(up);
  sides_free(&r);
}

static void responses_answers(void) {
  /* reasoning: the contents joined, else the summaries; its token and id */
  resp_answer(
      "{'id':'resp_1','status':'completed','output':[{'type':'reasoning','id':'rs_a',"
      "'summary':[{'type':'summary_text','text':'a'},{'type':'summary_text',"
      "'text':'b'}],'encrypted_content':'gAAA'},{'type':'reasoning','summary':[],"
      "'content':[{'type':'reasoning_text','text':'t1'},7,{'type':'reasoning_text',"
      "'text':'t2'}]},{'type':'message','content':[{'type':'output_text','text':"
      "'hi','annotations':[]}]}],'usage':{'input_tokens':3,'output_tokens':4,"
      "'output_tokens_details':{'reasoning_tokens':2}}}",
      NULL, "\"encrypted_content\":\"gAAA\"");
  /* refusals beside texts, annotations (kept, dropped and named, skipped),
   * logprobs and other parts, a namespaced call, a custom call, items only
   * Responses has; the content before the type */
  resp_answer(
      "{'id':'r','output':[{'content':[{'type':'output_text','text':'x',"
      "'annotations':[{'type':'url_citation','url':'https://a','title':'A',"
      "'start_index':0,'end_index':1},{'type':'file_path','file_id':'f'},"
      "{'type':'other'},{'x':1},3],'logprobs':[{'token':'x'}]},{'type':'refusal',"
      "'refusal':'no'},{'type':'audio'},{'text':'untyped'}],'type':'message'},"
      "{'type':'function_call','call_id':'c1','name':'f','arguments':'{}',"
      "'namespace':'ns'},{'type':'custom_tool_call','call_id':'c2','name':'p',"
      "'input':'*** x'},{'type':'web_search_call'},{'type':'image_generation_call'},"
      "{'type':'mcp_call'},{'no':'type'},5,{'type':'message','content':"
      "[{'type':'refusal'}]}]}",
      NULL, "\"type\":\"custom_tool_call\"");
  /* incomplete answers, a failed one without an error object */
  resp_answer(
      "{'id':'r','status':'incomplete','incomplete_details':{'reason':"
      "'content_filter'},'output':[]}",
      NULL, "\"reason\":\"content_filter\"");
  resp_answer(
      "{'id':'r','status':'incomplete','output':[{'type':'message','content':"
      "[{'type':'output_text','text':'cut'}]}]}",
      NULL, "\"reason\":\"max_output_tokens\"");
  resp_answer("{'id':'r','status':'failed','error':null,'output':[]}", NULL,
              "\"status\":\"failed\"");
  /* a refusal's explanation: the only wording, or dropped and named */
  resp_answer("{'id':'r','output':[]}", "not allowed", "\"refusal\":\"not allowed\"");
  resp_answer(
      "{'id':'r','output':[{'type':'message','content':[{'type':'refusal',"
      "'refusal':'no'}]}]}",
      "not allowed", NULL);
  /* no answer: refused as the reference refuses */
  resp_answer("{'id':'r','status':'completed'}", NULL, NULL);
  resp_answer("{'id':'r','output':{}}", NULL, NULL);
  resp_answer("{'id':'r','status':'failed','error':{'message':'boom'},'output':[]}", NULL,
              NULL);
  resp_answer("{'id':'r','status':'failed','error':{},'output':[]}", NULL, NULL);
  resp_answer("{'id':'r','status':'in_progress','output':[]}", NULL, NULL);
}

/* ---- a Responses upstream: what responses.c's encoder refuses (a part a
 * message of that role cannot hold, a tool result it cannot write), the
 * fast encoder refuses in its words; the fast IR built by hand, the same
 * IR as a document */
static void responses_encoder_refusals(void) {
  px_arena_t a;
  px_arena_init(&a);
  for (int k = 0; k < 3; k++) {
    px_freq_t ir;
    px_freq_init(&ir);
    px_fmsg_t *u = px_fmsg_push(&ir, &a, 0), *m = px_fmsg_push(&ir, &a, 1);
    px_fpart_push(&u->parts, &u->last, px_fpart_text(&a, fs("hi")));
    px_fpart_t *p;
    const char *doc;
    if (k == 0) { /* an image in an assistant message */
      p = px_fpart_new(&a, PX_FP_IMAGE);
      p->url = fs("https://x/y.png");
      px_fpart_push(&m->parts, &m->last, px_fpart_text(&a, fs("see")));
      px_fpart_push(&m->parts, &m->last, p);
      doc =
          "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
          "\"hi\"}]},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":"
          "\"see\"},{\"type\":\"image\",\"url\":\"https://x/y.png\"}]}]}";
    } else if (k == 1) { /* a refusal in a user message */
      p = px_fpart_new(&a, PX_FP_REFUSAL);
      p->text = fs("no");
      px_fpart_push(&u->parts, &u->last, p);
      doc =
          "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
          "\"hi\"},{\"type\":\"refusal\",\"text\":\"no\"}]},{\"role\":\"assistant\","
          "\"content\":[]}]}";
    } else { /* a tool result holding a refusal, one without its call id */
      px_fmsg_t *r = px_fmsg_push(&ir, &a, 0);
      px_fpart_t *res = px_fpart_new(&a, PX_FP_TOOL_RESULT),
                 *bad = px_fpart_new(&a, PX_FP_TOOL_RESULT);
      res->id = fs("c1");
      res->content = px_fpart_new(&a, PX_FP_REFUSAL);
      res->content->text = fs("no");
      px_fpart_push(&r->parts, &r->last, res);
      px_fpart_push(&r->parts, &r->last, bad);
      doc =
          "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
          "\"hi\"}]},{\"role\":\"assistant\",\"content\":[]},{\"role\":\"user\","
          "\"content\":"
          "[{\"type\":\"tool_result\",\"tool_call_id\":\"c1\",\"content\":[{\"type\":"
          "\"refusal\",\"text\":\"no\"}]},{\"type\":\"tool_result\",\"content\":[]}]}]}";
      encoder_refused(&ir, PX_PROTO_ANTHROPIC, PX_PROTO_RESPONSES, doc, NULL);
      res->content = NULL; /* then the one without an id */
      doc =
          "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
          "\"hi\"}]},{\"role\":\"assistant\",\"content\":[]},{\"role\":\"user\","
          "\"content\":"
          "[{\"type\":\"tool_result\",\"tool_call_id\":\"c1\",\"content\":[]},{\"type\":"
          "\"tool_result\",\"content\":[]}]}]}";
    }
    encoder_refused(&ir, PX_PROTO_ANTHROPIC, PX_PROTO_RESPONSES, doc, NULL);
  }
  px_arena_free(&a);
}
/* ------------------------------------------------------------------------ */
/* Anthropic, complete (issue 21): documents, search results, system turns,  */
/* refusals in the reference's words, answers with refusals and citations    */

/* A request (' for ") of an Anthropic client toward an upstream of out:
 * the fast path refuses it as the jansson path does (kind, param, message),
 * param the one expected. */
static void anth_refuses(int out, const char *q, const char *param) {
  char *body = chat_body(q);
  px_json_req_t scan;
  CHECK(px_json_request(body, strlen(body), &scan) == 0);
  request_refused(PX_PROTO_ANTHROPIC, out, body, param);
  free(body);
}

/* An answer (' for ") of an upstream of protocol out for an Anthropic
 * client: refused as the jansson path refuses it (kind and message). */
static void anth_answer_refused(int out, const char *q) {
  char *body = chat_body(q);
  answer_refused(PX_PROTO_ANTHROPIC, out, body);
  free(body);
}

static void anth_complete_requests(void) {
  /* documents: PDF data (its title the file name), plain text (its words),
   * a URL, an uploaded file, content blocks; search results (their texts);
   * in a tool result too */
  char *q = chat_body(
      "{'model':'m','max_tokens':10,'messages':[{'role':'user','content':["
      "{'type':'document','source':{'type':'base64','media_type':'application/pdf',"
      "'data':'JVBE'},'title':'r.pdf','cache_control':{'type':'ephemeral'}},"
      "{'type':'document','source':{'type':'text','media_type':'text/"
      "plain','data':'notes'},"
      "'title':'n','context':'c','citations':{'enabled':true}},"
      "{'type':'document','source':{'type':'url','url':'https://x/a.pdf'}},"
      "{'type':'document','source':{'type':'content','content':[{'type':'text','text':"
      "'one'},{'type':'image','source':{'type':'url','url':'https://x/i.png'}}]}},"
      "{'type':'search_result','source':'https://s','title':'t','content':[{'type':"
      "'text','text':'found'},7]},"
      "{'type':'text','text':'Summarize'}]},"
      "{'role':'assistant','content':[{'type':'tool_use','id':'t1','name':'f','input':{}}"
      "]},"
      "{'role':'user','content':[{'type':'tool_result','tool_use_id':'t1','content':["
      "{'type':'document','source':{'type':'base64','media_type':'application/pdf',"
      "'data':'JVBE'}},{'type':'search_result','content':[{'text':'r'}],"
      "'cache_control':{'type':'ephemeral'}}]}]}]}");
  anth_self(q, "\"title\":\"r.pdf\"",
            "cache_control,messages[].content[].context,messages[].content[].citations,"
            "messages[].content[].title,messages[].content[].search_result");
  free(q);
  /* ... toward the other upstreams (which take no uploaded file or URL) */
  q = chat_body(
      "{'model':'m','max_tokens':10,'messages':[{'role':'user','content':["
      "{'type':'document','source':{'type':'base64','media_type':'application/pdf',"
      "'data':'JVBE'},'title':'r.pdf'},{'type':'document','source':{'type':'text',"
      "'data':'notes'},'title':'n'},{'type':'search_result','content':[{'type':'text',"
      "'text':'found'}]}]}]}");
  for (int out = 0; out < PX_PROTO_COUNT; out++)
    if (out != PX_PROTO_ANTHROPIC) request_pair(PX_PROTO_ANTHROPIC, out, q, NULL);
  free(q);
  /* system turns: before any other and right after tool calls they join
   * the system (after its own blocks, wherever messages stand); elsewhere
   * a system note in place (a user turn toward Anthropic and Gemini) */
  q = chat_body(
      "{'model':'m','max_tokens':10,'messages':[{'role':'system','content':'first'},"
      "{'role':'user','content':'hi'},{'content':[{'type':'text','text':'note',"
      "'cache_control':{'type':'ephemeral'}}],'role':'system'},"
      "{'role':'assistant','content':[{'type':'tool_use','id':'t1','name':'f'}]},"
      "{'role':'system','content':[{'type':'text','text':'late'}]},"
      "{'role':'user','content':[{'type':'tool_result','tool_use_id':'t1'}]},"
      "{'role':'system','content':''}],"
      "'system':[{'type':'text','text':'own','cache_control':{'type':'ephemeral'}}]}");
  anth_self(q, "\"text\":\"note\",\"cache_control\":{\"type\":\"ephemeral\"}", "");
  free(q);

  /* the reference's refusals, in its words: each member's own ... */
  static const struct {
    const char *q, *param;
  } bad[] = {
      {"{'model':'m','messages':[],'thinking':{'type':'sometimes'}}", "thinking.type"},
      {"{'model':'m','messages':[],'thinking':5}", "thinking.type"},
      {"{'model':'m','messages':[],'output_config':{'effort':'extreme'}}",
       "output_config.effort"},
      {"{'model':'m','messages':[],'output_format':{'type':'json_object'}}",
       "output_format.type"},
      {"{'model':'m','messages':[],'output_config':{'format':{'type':'json_schema'}}}",
       "output_config.format.schema"},
      {"{'model':'m','messages':{}}", "messages"},
      {"{'model':'m'}", "messages"},
      {"{'model':'m','messages':[5]}", "messages[0].role"},
      {"{'model':'m','messages':[{'content':'x'}]}", "messages[0].role"},
      {"{'model':'m','messages':[{'role':'developer','content':'x'}]}",
       "messages[0].role"},
      {"{'model':'m','messages':[{'role':'user'}]}", "messages[0].content"},
      {"{'model':'m','messages':[{'role':'system','content':5}]}", "messages[0].content"},
      {"{'model':'m','messages':[{'role':'system','content':[{'type':'image'}]}]}",
       "messages[0].content[0].type"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'video'}]}]}",
       "messages[0].content[0].type"},
      {"{'model':'m','messages':[{'role':'user','content':[{'text':'a'}]}]}",
       "messages[0].content[0].type"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'text'}]}]}",
       "messages[0].content[0].text"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'image','source':"
       "{'type':'file','file_id':'f'}}]}]}",
       "messages[0].content[0].source.type"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'image','source':"
       "{'type':'base64','data':'x'}}]}]}",
       "messages[0].content[0].source"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'document'}]}]}",
       "messages[0].content[0].source"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'document','source':"
       "{'type':'content','content':[{'type':'video'}]}}]}]}",
       "messages[0].content[0].source.content[0].type"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'tool_use','id':'t',"
       "'name':'f'}]}]}",
       "messages[0].content[0].type"},
      {"{'model':'m','messages':[{'role':'assistant','content':[{'type':'tool_use',"
       "'id':'t'}]}]}",
       "messages[0].content[0].id"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'tool_result'}]}]}",
       "messages[0].content[0].tool_use_id"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'tool_result',"
       "'tool_use_id':'t','content':[{'type':'thinking'}]}]}]}",
       "messages[0].content[0].content[0].type"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'tool_result',"
       "'tool_use_id':'t','content':5}]}]}",
       "messages[0].content[0].content"},
      {"{'model':'m','messages':[],'max_tokens':0}", "max_tokens"},
      {"{'model':'m','messages':[],'max_tokens':1.5}", "max_tokens"},
      {"{'model':'m','messages':[],'temperature':'hot'}", "temperature"},
      {"{'model':'m','messages':[],'top_k':0.5}", "top_k"},
      {"{'model':'m','messages':[],'stop_sequences':'END'}", "stop_sequences"},
      {"{'model':'m','messages':[],'tools':{}}", "tools"},
      {"{'model':'m','messages':[],'tools':[{'type':'custom','description':'d'}]}",
       "tools[0].name"},
      {"{'model':'m','messages':[],'tool_choice':{}}", "tool_choice.type"},
      {"{'model':'m','messages':[],'tool_choice':{'type':'tool'}}", "tool_choice.type"},
      {"{'model':'m','system':{},'messages':[]}", "system"},
      {"{'model':'m','system':[{'type':'text'}],'messages':[]}", "system[0].type"},
      /* ... and their order: system's, then messages', then the first
       * other member's in body order */
      {"{'model':'m','thinking':{},'messages':[5],'system':5}", "system"},
      {"{'model':'m','thinking':{},'top_k':'x','messages':[5]}", "messages[0].role"},
      {"{'model':'m','top_k':'x','thinking':{},'messages':[]}", "top_k"},
      /* within a message, its role first */
      {"{'model':'m','messages':[{'content':[{'type':'video'}],'role':'robot'}]}",
       "messages[0].role"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    for (int out = 0; out < PX_PROTO_COUNT; out++)
      if (out != PX_PROTO_ANTHROPIC) anth_refuses(out, bad[i].q, bad[i].param);
  /* what the reference might read otherwise declines: a member repeated
   * after the refused one (jansson keeps the last); an escaped type is
   * read by its value (test_fast_unesc) */
  static const char *const unsure[] = {
      "{'model':'m','messages':[{'role':'user','content':[{'type':'video'}],'content':'x'"
      "}]}",
      "{'model':'m','messages':[],'output_config':{'effort':'extreme','effort':'high'}}",
  };
  for (size_t i = 0; i < sizeof(unsure) / sizeof(unsure[0]); i++) {
    char *b = chat_body(unsure[i]);
    decoder_declines(PX_PROTO_ANTHROPIC, PX_PROTO_CHAT, b);
    free(b);
  }
}

/* IRs the Anthropic encoder refuses as the reference does: its kind,
 * param and message (the reference's encode_request of the same IR). */
static void anth_complete_encoder(void) {
  px_arena_t a;
  px_arena_init(&a);
  /* an uploaded file, a file the API cannot take, arguments that are no
   * object: the first in the messages' order */
  for (int v = 0; v < 3; v++) {
    px_freq_t ir;
    px_freq_init(&ir);
    px_fmsg_t *u = px_fmsg_push(&ir, &a, 0), *m = px_fmsg_push(&ir, &a, 1);
    px_fpart_t *f = px_fpart_new(&a, PX_FP_FILE), *t = px_fpart_new(&a, PX_FP_TOOL_CALL);
    if (v == 0)
      f->file_id = (px_fstr_t){"file-1", 6, 0};
    else
      f->media_type = (px_fstr_t){"text/csv", 8, 0}, f->data = (px_fstr_t){"YQ==", 4, 0};
    t->id = (px_fstr_t){"c1", 2, 0};
    t->name = (px_fstr_t){"f", 1, 0};
    t->args = (px_fstr_t){"[1]", 3, 0};
    if (v < 2) px_fpart_push(&u->parts, &u->last, f);
    px_fpart_push(&m->parts, &m->last, t);
    static const char *const docs[] = {
        "{'messages':[{'role':'user','content':[{'type':'file','file_id':'file-1'}]},"
        "{'role':'assistant','content':[{'type':'tool_call','id':'c1','name':'f',"
        "'arguments':'[1]'}]}]}",
        "{'messages':[{'role':'user','content':[{'type':'file','media_type':'text/csv',"
        "'data':'YQ=='}]},{'role':'assistant','content':[{'type':'tool_call','id':'c1',"
        "'name':'f','arguments':'[1]'}]}]}",
        "{'messages':[{'role':'assistant','content':[{'type':'tool_call','id':'c1',"
        "'name':'f','arguments':'[1]'}]}]}"};
    static const char *const params[] = {"file_id", "file",
                                         "messages.tool_calls.function.arguments"};
    char *doc = chat_body(docs[v]);
    encoder_refused(&ir, PX_PROTO_CHAT, PX_PROTO_ANTHROPIC, doc, params[v]);
    free(doc);
  }
  px_arena_free(&a);
}

/* Custom (freeform) tools and calls, which only a decoder for an upstream
 * that has them makes: the Anthropic encoder writes them as the reference
 * does (a function tool without parameters, the call's input {}), the
 * request and the answer. */
static void anth_complete_custom(void) {
  px_arena_t a;
  px_arena_init(&a);
  px_tr_ctx_t c;
  ctx_of(&c, PX_PROTO_CHAT, PX_PROTO_ANTHROPIC);
  px_freq_t ir;
  px_freq_init(&ir);
  px_fmsg_t *u = px_fmsg_push(&ir, &a, 0), *m = px_fmsg_push(&ir, &a, 1);
  px_fpart_push(&u->parts, &u->last, px_fpart_text(&a, (px_fstr_t){"hi", 2, 0}));
  px_fpart_t *call = px_fpart_new(&a, PX_FP_TOOL_CALL);
  call->custom = 1;
  call->id = (px_fstr_t){"c1", 2, 0};
  call->name = (px_fstr_t){"grep", 4, 0};
  call->text = (px_fstr_t){"pattern", 7, 0};
  px_fpart_push(&m->parts, &m->last, call);
  px_fv_t desc = {PX_FV_STR, {"d", 1, 0}, {"\"d\"", 3}};
  px_ftool_t *t = px_ftool_push(&ir, &a, (px_fstr_t){"grep", 4, 0}, &desc, NULL, NULL,
                                PX_FAST_OPENAI_PARAMS);
  t->custom = 1;
  t->format = (px_str_t){"{\"type\":\"text\"}", 15};
  px_lossy_t lf, ls;
  px_lossy_init(&lf);
  px_lossy_init(&ls);
  char *doc = chat_body(
      "{'messages':[{'role':'user','content':[{'type':'text','text':'hi'}]},{'role':"
      "'assistant','content':[{'type':'tool_call','id':'c1','name':'grep','custom':true,"
      "'input':'pattern'}]}],'tools':[{'type':'custom','name':'grep','description':'d',"
      "'format':{'type':'text'}}]}");
  json_t *jir = json_loads(doc, 0, NULL);
  encoder_same("custom request", &c, &ir, jir, &lf, &ls, NULL);
  json_decref(jir);
  free(doc);
  /* the answer */
  px_fresp_t ans;
  fresp_init(&ans);
  ans.id = (px_fstr_t){"r1", 2, 0};
  ans.stop = PX_STOP_TOOL_USE;
  px_fpart_t *ac = px_fpart_new(&a, PX_FP_TOOL_CALL);
  *ac = *call;
  ac->next = NULL;
  ac->input = (px_str_t){NULL, 0};
  ans.content = ans.last = ac;
  doc = chat_body(
      "{'id':'r1','stop_reason':'tool_use','content':[{'type':'tool_call','id':'c1',"
      "'name':'grep','custom':true,'input':'pattern'}]}");
  jir = json_loads(doc, 0, NULL);
  answer_encoder_same("custom answer", PX_PROTO_ANTHROPIC, &c, &ans, jir, NULL);
  json_decref(jir);
  free(doc);
  px_arena_free(&a);
}

static void anth_complete_answers(void) {
  /* a refusal: its texts the wording, the explanation kept, the category
   * named; citations as annotations (those without a URL named); server
   * tools' and unknown blocks named */
  anth_self_answer(
      "{\"id\":\"msg_1\",\"model\":\"u\",\"content\":[{\"type\":\"text\",\"text\":\"No."
      "\","
      "\"citations\":[{\"type\":\"char_location\"}]}],\"stop_reason\":\"refusal\","
      "\"stop_details\":{\"type\":\"refusal\",\"category\":\"cyber\",\"explanation\":"
      "\"policy\"},\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}",
      "\"explanation\":\"policy\"");
  anth_self_answer(
      "{\"id\":\"msg_1\",\"model\":\"u\",\"content\":[],\"stop_reason\":\"refusal\"}",
      "\"stop_details\":{\"type\":\"refusal\",\"category\":null,\"explanation\":null}");
  anth_self_answer(
      "{\"id\":\"msg_1\",\"model\":\"u\",\"content\":[{\"type\":\"server_tool_use\","
      "\"id\":"
      "\"s\",\"name\":\"web_search\",\"input\":{}},{\"type\":\"web_search_tool_result\","
      "\"tool_use_id\":\"s\",\"content\":[]},{\"type\":\"text\",\"text\":\"Caf\\u00e9 "
      "\\ud83d"
      "\\ude00 rained.\",\"citations\":[{\"type\":\"web_search_result_location\",\"url\":"
      "\"https://n/a\",\"title\":\"Rain\",\"cited_text\":\"rained\"},{\"type\":"
      "\"char_location\",\"cited_text\":\"x\"},{\"url\":\"https://n/b\"}]},{\"type\":"
      "\"container_upload\"},5,{\"type\":7}],\"stop_reason\":\"end_turn\"}",
      "\"citations\":[{\"type\":\"web_search_result_location\",\"url\":\"https://n/a\"");
  /* tool-use ids made unique as the reference mints them */
  anth_self_answer(
      "{\"id\":\"m\",\"content\":[{\"type\":\"tool_use\",\"id\":\"\",\"name\":\"f\"},"
      "{\"type\":\"tool_use\",\"id\":\"call_proxai_0\",\"name\":\"f\",\"input\":{}},"
      "{\"type\":\"tool_use\",\"id\":\"call_proxai_0\",\"name\":\"g\",\"input\":{}}],"
      "\"stop_reason\":\"tool_use\"}",
      "\"id\":\"call_proxai_1\"");
  /* ... toward the other clients, and from the others' answers */
  answer_pair(
      PX_PROTO_ANTHROPIC, PX_PROTO_CHAT,
      "{\"id\":\"c\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"u\","
      "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
      "\"Partial\"},\"finish_reason\":\"content_filter\"}]}",
      "\"stop_reason\":\"refusal\"");
  /* the reference's refusals of answers: no message; arguments no object */
  anth_answer_refused(PX_PROTO_ANTHROPIC, "{'id':'m','content':{}}");
  anth_answer_refused(PX_PROTO_ANTHROPIC, "{'id':'m','type':'message'}");
  anth_answer_refused(PX_PROTO_CHAT,
                      "{'id':'c','object':'chat.completion','created':1,'model':'u',"
                      "'choices':[{'index':0,'message':{'role':'assistant','tool_calls':"
                      "[{'id':'c1','type':'function','function':{'name':'f','arguments':"
                      "'[1]'}}]},'finish_reason':'tool_calls'}]}");
}

static void anth_complete(void) {
  anth_complete_requests();
  anth_complete_encoder();
  anth_complete_custom();
  anth_complete_answers();
}
