/* test_fast_unesc.c - the codecs' reading of a deciding value with escapes
 * (fastir.h: px_fs_isn / px_fs_is, px_fs_same, px_fs_starts, px_fs_of,
 * px_fs_value, px_fs_plain, px_fs_data_url): the value is compared, as the
 * reference's strcmp compares jansson's string, whatever its spelling. Then,
 * per protocol, a request and an answer whose deciding values (a role, a
 * type, an enum, a finish reason, a MIME type) are escaped are taken by the
 * fast codecs as written (no respelling), into the same body as their plain
 * spelling and the reference's; a wrong value escaped is refused in the
 * words of its plain spelling and of the reference. And every fixture's
 * request and answer the fast path takes, with every letter of its string
 * values escaped (\u00XX), is taken as written into the same body. */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fast_pair.h"
#include "proxai/fastir.h"

#define CHAT PX_PROTO_CHAT
#define RESP PX_PROTO_RESPONSES
#define ANTH PX_PROTO_ANTHROPIC
#define GEM PX_PROTO_GEMINI

/* string content as written (escaped when it has a backslash) */
static px_fstr_t fs(const char *s) {
  return (px_fstr_t){s, strlen(s), strchr(s, '\\') != NULL};
}

static void mechanism(void) {
  /* a value compared whatever its spelling */
  CHECK(px_fs_is(fs("user"), "user"));
  CHECK(px_fs_is(fs("us\\u0065r"), "user"));
  CHECK(px_fs_is(fs("\\u0075\\u0073\\u0065\\u0072"), "user"));
  CHECK(px_fs_is(fs("image\\/png"), "image/png"));
  CHECK(px_fs_is(fs("caf\\u00e9"), "caf\xc3\xa9"));
  CHECK(px_fs_is(fs("\\ud83d\\ude00"), "\xf0\x9f\x98\x80"));
  CHECK(px_fs_is(fs("a\\\"b\\\\c\\n"), "a\"b\\c\n"));
  CHECK(PX_FS_IS(fs("t\\u0065xt"), "text"));
  /* and a wrong one refused, escaped or not */
  CHECK(!px_fs_is(fs("use"), "user"));
  CHECK(!px_fs_is(fs("us\\u0065rs"), "user"));
  CHECK(!px_fs_is(fs("us\\u0065"), "user"));
  CHECK(!px_fs_is(fs("user\\n"), "user"));
  CHECK(!px_fs_is(fs("\\u0055ser"), "user"));
  CHECK(!px_fs_is((px_fstr_t){0}, "user"));
  /* two values */
  CHECK(px_fs_same(fs("get_\\u0077eather"), fs("get_weather")));
  CHECK(px_fs_same(fs("\\u00e9"), fs("\xc3\xa9")));
  CHECK(!px_fs_same(fs("get_\\u0077eather"), fs("get_weathers")));
  CHECK(px_fs_same((px_fstr_t){0}, (px_fstr_t){0}));
  CHECK(!px_fs_same((px_fstr_t){0}, fs("")));
  /* a prefix, an enum */
  CHECK(px_fs_starts(fs("d\\u0061ta:image/png;base64,AA"), "data:", 5));
  CHECK(!px_fs_starts(fs("dat"), "data:", 5));
  CHECK(px_fs_ends(fs("web_search_tool_resul\\u0074"), "_tool_result", 12));
  CHECK(px_fs_ends(fs("x_tool_result"), "_tool_result", 12));
  CHECK(!px_fs_ends(fs("_tool_resul\\u0074s"), "_tool_result", 12));
  CHECK(!px_fs_ends(fs("\\u0074"), "_tool_result", 12));
  CHECK(px_fs_len(fs("a\\u00e9\\n")) == 4 && px_fs_len(fs("abc")) == 3);
  CHECK(px_fs_is(px_fs_after(fs("r\\u0065sp_x\\u0031"), 5), "x1"));
  CHECK(px_fs_is(px_fs_after(fs("resp_x1"), 5), "x1"));
  static const char *const efforts[] = {"low", "medium", "high"};
  CHECK(px_fs_of(fs("medium"), efforts, 3) == 1);
  CHECK(px_fs_of(fs("hi\\u0067h"), efforts, 3) == 2);
  CHECK(px_fs_of(fs("hi\\u0067her"), efforts, 3) == -1);
  /* the value as a C string, cut to its buffer */
  char b[8];
  CHECK(px_fs_value(fs("st\\u006fp\\n"), b, sizeof(b)) == 5 && strcmp(b, "stop\n") == 0);
  CHECK(px_fs_value(fs("\\u0061bcdefghij"), b, sizeof(b)) == sizeof(b) &&
        strcmp(b, "abcdefg") == 0);
  /* the plain spelling: escapes of a quote, a backslash, a control only */
  CHECK(px_fs_plain(fs("a/b")));
  CHECK(px_fs_plain(fs("a\\nb\\\"c\\\\d\\u001f")));
  CHECK(!px_fs_plain(fs("a\\/b")));
  CHECK(!px_fs_plain(fs("\\u0061")));
  /* a data URL: split as written when plain, declined when not */
  px_fstr_t mt, data;
  CHECK(px_fs_data_url(fs("data:image/png;base64,AAAA"), 64, &mt, &data) == 0 &&
        px_fs_is(mt, "image/png") && px_fs_is(data, "AAAA"));
  CHECK(px_fs_data_url(fs("data:image\\tpng;base64,A\\nA"), 64, &mt, &data) == 0 &&
        px_fs_is(mt, "image\tpng") && mt.esc && px_fs_is(data, "A\nA"));
  CHECK(px_fs_data_url(fs("data:image\\/png;base64,AAAA"), 64, &mt, &data) ==
        PX_FAST_DECLINE);
  CHECK(px_fs_data_url(fs("https://x/a.png"), 64, &mt, &data) == -1);
  CHECK(px_fs_data_url(fs("data:;base64,AAAA"), 64, &mt, &data) == -1);
  CHECK(px_fs_data_url(fs("data:\\u0001\\u0001;base64,AA"), 2, &mt, &data) == -1);
  CHECK(px_fs_data_url(fs("data:\\u0001;base64,AA"), 2, &mt, &data) == 0);
}

/* a body written with ' for " (no ' inside) */
static char *body_of(const char *q) {
  char *b = strdup(q);
  for (char *p = b; *p; p++)
    if (*p == '\'') *p = '"';
  return b;
}

/* the fast path's translation of a request body: its rc, *out (malloc'd) */
static int req_fast(int in, int out, const char *body, char **o, size_t *ol,
                    px_lossy_t *l, px_tr_err_t *e) {
  px_tr_ctx_t c;
  request_ctx(&c, in, out, body, strlen(body), -1);
  px_lossy_init(l);
  memset(e, 0, sizeof(*e));
  *o = NULL;
  *ol = 0;
  return px_translate_request_fast(&c, body, strlen(body), 0, o, ol, l, e);
}

/* The escaped spelling qe of a request is taken as written, into the body
 * of its plain spelling qp (JSON-equal, the same lossy list) and the
 * reference's. */
static void req_same(int in, int out, const char *qp, const char *qe) {
  char *bp = body_of(qp), *be = body_of(qe), *op, *oe, *os = NULL;
  size_t lp, le, ls = 0;
  px_lossy_t lfp, lfe, lsr;
  px_tr_err_t e;
  int rp = req_fast(in, out, bp, &op, &lp, &lfp, &e);
  int re = req_fast(in, out, be, &oe, &le, &lfe, &e);
  CHECK(rp == 0 && re == 0);
  int eq = rp == 0 && re == 0 && same_json(op, lp, oe, le) && !strcmp(lfp.buf, lfe.buf);
  CHECK(eq);
  px_tr_ctx_t c;
  request_ctx(&c, in, out, be, strlen(be), -1);
  px_lossy_init(&lsr);
  CHECK(px_translate_request_ref(&c, be, strlen(be), 0, &os, &ls, &lsr, &e) == 0);
  int ref =
      re == 0 && os != NULL && same_json(oe, le, os, ls) && !strcmp(lfe.buf, lsr.buf);
  CHECK(ref);
  if (!eq || !ref)
    fprintf(stderr, "%d -> %d: %s (%d)\n plain: %s [%s]\n escaped: %s [%s]\n ref: %s\n",
            in, out, be, re, op ? op : "", lfp.buf, oe ? oe : "", lfe.buf, os ? os : "");
  free(op);
  free(oe);
  free(os);
  free(bp);
  free(be);
}

/* A wrong value escaped (qe) is refused as its plain spelling qp is, in the
 * reference's words. */
static void req_refused(int in, int out, const char *qp, const char *qe) {
  char *bp = body_of(qp), *be = body_of(qe), *op, *oe, *os = NULL;
  size_t lp, le, ls = 0;
  px_lossy_t l;
  px_tr_err_t ep, ee, es;
  int rp = req_fast(in, out, bp, &op, &lp, &l, &ep);
  int re = req_fast(in, out, be, &oe, &le, &l, &ee);
  px_tr_ctx_t c;
  request_ctx(&c, in, out, be, strlen(be), -1);
  px_lossy_init(&l);
  memset(&es, 0, sizeof(es));
  int rs = px_translate_request_ref(&c, be, strlen(be), 0, &os, &ls, &l, &es);
  int ok = rp == PX_FAST_REFUSE && re == PX_FAST_REFUSE && rs != 0 &&
           same_words(&ep, &ee) && same_words(&ee, &es);
  CHECK(ok);
  if (!ok)
    fprintf(stderr, "%d -> %d: %s (%d %d %d)\n plain: %s\n escaped: %s\n ref: %s\n", in,
            out, be, rp, re, rs, ep.message, ee.message, es.message);
  free(op);
  free(oe);
  free(os);
  free(bp);
  free(be);
}

/* the fast path's translation of an answer of protocol up for a client of
 * protocol cl */
static int ans_fast(int cl, int up, const char *body, px_buf_t *b, px_lossy_t *l,
                    px_tr_err_t *e) {
  px_tr_ctx_t c;
  ctx_of(&c, cl, up);
  px_buf_init(b, 1 << 20);
  px_lossy_init(l);
  memset(e, 0, sizeof(*e));
  int rc = px_translate_response_fast(&c, body, strlen(body), b, l, NULL, e);
  return rc == PX_FAST_USAGE ? 0 : rc;
}

/* An answer's escaped spelling ae taken as written, into the client body of
 * its plain spelling ap and the reference's. */
static void ans_same(int cl, int up, const char *ap, const char *ae) {
  char *bp = body_of(ap), *be = body_of(ae);
  px_buf_t op, oe;
  px_lossy_t lp, le, ls;
  px_tr_err_t e;
  int rp = ans_fast(cl, up, bp, &op, &lp, &e);
  int re = ans_fast(cl, up, be, &oe, &le, &e);
  CHECK(rp == 0 && re == 0);
  int eq = rp == 0 && re == 0 && same_json(op.data, op.len, oe.data, oe.len) &&
           !strcmp(lp.buf, le.buf);
  CHECK(eq);
  px_tr_ctx_t c;
  ctx_of(&c, cl, up);
  json_t *ub = json_loads(be, 0, NULL), *cb = NULL;
  px_lossy_init(&ls);
  CHECK(ub != NULL && px_translate_response(&c, ub, &cb, &ls, &e) == 0);
  char *os = cb ? json_dumps(cb, JSON_COMPACT) : NULL;
  int ref = re == 0 && os != NULL && same_json(oe.data, oe.len, os, strlen(os)) &&
            !strcmp(le.buf, ls.buf);
  CHECK(ref);
  if (!eq || !ref)
    fprintf(stderr, "answer %d <- %d: %s (%d)\n plain: %.*s\n escaped: %.*s\n ref: %s\n",
            cl, up, be, re, (int)op.len, op.data ? op.data : "", (int)oe.len,
            oe.data ? oe.data : "", os ? os : "");
  free(os);
  json_decref(cb);
  json_decref(ub);
  px_buf_free(&op);
  px_buf_free(&oe);
  free(bp);
  free(be);
}

static void requests(void) {
  /* Chat: a role, a part type, tool_choice, response_format, effort */
  static const char *const chat[][2] = {
      {"{'model':'m','messages':[{'role':'system','content':'s'},{'role':'user',"
       "'content':'hi'}]}",
       "{'model':'m','messages':[{'role':'syst\\u0065m','content':'s'},{'role':"
       "'\\u0075ser','content':'hi'}]}"},
      {"{'model':'m','messages':[{'role':'user','content':[{'type':'text','text':'hi'}]}]"
       "}",
       "{'model':'m','messages':[{'role':'user','content':[{'type':'t\\u0065xt','text':"
       "'hi'}]}]}"},
      {"{'model':'m','messages':[{'role':'user','content':'hi'}],'tools':[{'type':"
       "'function','function':{'name':'f','parameters':{'type':'object'}}}],"
       "'tool_choice':'required'}",
       "{'model':'m','messages':[{'role':'user','content':'hi'}],'tools':[{'type':"
       "'functi\\u006fn','function':{'name':'f','parameters':{'type':'object'}}}],"
       "'tool_choice':'requir\\u0065d'}"},
      {"{'model':'m','messages':[{'role':'user','content':'hi'}],'response_format':"
       "{'type':'json_object'},'reasoning_effort':'high'}",
       "{'model':'m','messages':[{'role':'user','content':'hi'}],'response_format':"
       "{'type':'json_\\u006fbject'},'reasoning_effort':'hi\\u0067h'}"},
  };
  for (size_t i = 0; i < sizeof(chat) / sizeof(chat[0]); i++)
    for (int out = 0; out < PX_PROTO_COUNT; out++)
      if (out != CHAT) req_same(CHAT, out, chat[i][0], chat[i][1]);
  /* Responses: an item type, a role, a part type, effort, format, truncation */
  static const char *const resp[][2] = {
      {"{'model':'m','input':[{'type':'message','role':'developer','content':[{'type':"
       "'input_text','text':'s'}]},{'role':'user','content':'hi'}],'truncation':"
       "'disabled'}",
       "{'model':'m','input':[{'type':'m\\u0065ssage','role':'d\\u0065veloper','content':"
       "[{'type':'input_t\\u0065xt','text':'s'}]},{'role':'us\\u0065r','content':'hi'}],"
       "'truncation':'disabl\\u0065d'}"},
      {"{'model':'m','input':'hi','reasoning':{'effort':'none'},'text':{'format':{'type':"
       "'json_schema','name':'n','schema':{'type':'object'}}}}",
       "{'model':'m','input':'hi','reasoning':{'effort':'n\\u006fne'},'text':{'format':"
       "{'type':'json_sch\\u0065ma','name':'n','schema':{'type':'object'}}}}"},
      {"{'model':'m','input':'hi','tools':[{'type':'function','name':'f','parameters':"
       "{'type':'object'}}],'tool_choice':'auto'}",
       "{'model':'m','input':'hi','tools':[{'type':'fun\\u0063tion','name':'f',"
       "'parameters':{'type':'object'}}],'tool_choice':'\\u0061uto'}"},
  };
  for (size_t i = 0; i < sizeof(resp) / sizeof(resp[0]); i++)
    for (int out = 0; out < PX_PROTO_COUNT; out++)
      if (out != RESP) req_same(RESP, out, resp[i][0], resp[i][1]);
  /* Anthropic: a role, a block type, tool_choice, thinking */
  static const char *const anth[][2] = {
      {"{'model':'m','max_tokens':9,'messages':[{'role':'user','content':[{'type':'text',"
       "'text':'hi'}]}],'tools':[{'name':'f','input_schema':{'type':'object'}}],"
       "'tool_choice':{'type':'any'}}",
       "{'model':'m','max_tokens':9,'messages':[{'role':'\\u0075ser','content':[{'type':"
       "'te\\u0078t','text':'hi'}]}],'tools':[{'name':'f','input_schema':{'type':"
       "'object'}}],'tool_choice':{'type':'\\u0061ny'}}"},
      {"{'model':'m','max_tokens':4096,'messages':[{'role':'user','content':'hi'}],"
       "'thinking':{'type':'enabled','budget_tokens':2048}}",
       "{'model':'m','max_tokens':4096,'messages':[{'role':'user','content':'hi'}],"
       "'thinking':{'type':'\\u0065nabled','budget_tokens':2048}}"},
  };
  for (size_t i = 0; i < sizeof(anth) / sizeof(anth[0]); i++)
    for (int out = 0; out < PX_PROTO_COUNT; out++)
      if (out != ANTH) req_same(ANTH, out, anth[i][0], anth[i][1]);
  /* Gemini: a role, a call and its response matched by an escaped name, a
   * calling mode, a MIME type, a thinking level */
  static const char *const gem[][2] = {
      {"{'contents':[{'role':'user','parts':[{'text':'hi'}]},{'role':'model','parts':"
       "[{'functionCall':{'name':'get','args':{}}}]},{'role':'user','parts':"
       "[{'functionResponse':{'name':'get','response':{'x':1}}}]}],'toolConfig':"
       "{'functionCallingConfig':{'mode':'ANY'}},'tools':[{'functionDeclarations':"
       "[{'name':'get'}]}]}",
       "{'contents':[{'role':'user','parts':[{'text':'hi'}]},{'role':'m\\u006fdel','"
       "parts':"
       "[{'functionCall':{'name':'g\\u0065t','args':{}}}]},{'role':'user','parts':"
       "[{'functionResponse':{'name':'get','response':{'x':1}}}]}],'toolConfig':"
       "{'functionCallingConfig':{'mode':'AN\\u0059'}},'tools':[{'functionDeclarations':"
       "[{'name':'get'}]}]}"},
      {"{'contents':[{'role':'user','parts':[{'text':'hi'},{'inlineData':{'mimeType':"
       "'image/png','data':'AAAA'}}]}],'generationConfig':{'responseMimeType':"
       "'application/json','thinkingConfig':{'thinkingLevel':'LOW'}}}",
       "{'contents':[{'role':'user','parts':[{'text':'hi'},{'inlineData':{'mimeType':"
       "'im\\u0061ge/png','data':'AAAA'}}]}],'generationConfig':{'responseMimeType':"
       "'application\\/json','thinkingConfig':{'thinkingLevel':'L\\u004fW'}}}"},
  };
  for (size_t i = 0; i < sizeof(gem) / sizeof(gem[0]); i++)
    for (int out = 0; out < PX_PROTO_COUNT; out++)
      if (out != GEM) req_same(GEM, out, gem[i][0], gem[i][1]);
  /* a wrong value, escaped, is still refused (in its words) */
  req_refused(CHAT, ANTH, "{'model':'m','messages':[{'role':'robot','content':'hi'}]}",
              "{'model':'m','messages':[{'role':'r\\u006fbot','content':'hi'}]}");
  req_refused(ANTH, CHAT,
              "{'model':'m','max_tokens':9,'messages':[{'role':'user','content':[{'type':"
              "'video'}]}]}",
              "{'model':'m','max_tokens':9,'messages':[{'role':'user','content':[{'type':"
              "'vide\\u006f'}]}]}");
  /* the refusal of a call's arguments names its escaped id by value */
  req_refused(CHAT, ANTH,
              "{'model':'m','messages':[{'role':'assistant','content':null,'tool_calls':"
              "[{'id':'call_1','type':'function','function':{'name':'f','arguments':"
              "'[1]'}}]}]}",
              "{'model':'m','messages':[{'role':'assistant','content':null,'tool_calls':"
              "[{'id':'c\\u0061ll_1','type':'function','function':{'name':'f','arguments':"
              "'[1]'}}]}]}");
  req_refused(RESP, CHAT, "{'model':'m','input':[{'role':'usar','content':'hi'}]}",
              "{'model':'m','input':[{'role':'usa\\u0072','content':'hi'}]}");
  req_refused(RESP, GEM, "{'model':'m','input':[{'type':'video'}]}",
              "{'model':'m','input':[{'type':'v\\u0069deo'}]}");
}

static void answers(void) {
  /* Chat: a finish reason */
  const char *chat_p =
      "{'id':'chatcmpl-1','object':'chat.completion','created':1,'model':'u','choices':"
      "[{'index':0,'message':{'role':'assistant','content':'Hi'},'finish_reason':"
      "'length'}],'usage':{'prompt_tokens':3,'completion_tokens':1,'total_tokens':4}}";
  const char *chat_e =
      "{'id':'chatcmpl-1','object':'chat.completion','created':1,'model':'u','choices':"
      "[{'index':0,'message':{'role':'assistant','content':'Hi'},'finish_reason':"
      "'l\\u0065ngth'}],'usage':{'prompt_tokens':3,'completion_tokens':1,"
      "'total_tokens':4}}";
  /* Anthropic: a block type, a stop reason, an id (the Responses encoder
   * reads its prefix by value) */
  const char *anth_p =
      "{'id':'msg_1','type':'message','role':'assistant','model':'u','content':[{'type':"
      "'text','text':'Hi'}],'stop_reason':'max_tokens','usage':{'input_tokens':3,"
      "'output_tokens':1}}";
  const char *anth_e =
      "{'id':'msg_\\u0031','type':'message','role':'assistant','model':'u','content':"
      "[{'type':'t\\u0065xt','text':'Hi'}],'stop_reason':'max_t\\u006fkens','usage':"
      "{'input_tokens':3,'output_tokens':1}}";
  /* Responses: a status, its reason, an item and a part type */
  const char *resp_p =
      "{'id':'resp_1','object':'response','created_at':1,'status':'incomplete',"
      "'incomplete_details':{'reason':'content_filter'},'model':'u','output':[{'id':"
      "'msg_1','type':'message','role':'assistant','content':[{'type':'output_text',"
      "'text':'Hi','annotations':[]}]}],'usage':{'input_tokens':3,'output_tokens':1}}";
  const char *resp_e =
      "{'id':'resp_1','object':'response','created_at':1,'status':'inc\\u006fmplete',"
      "'incomplete_details':{'reason':'content_filt\\u0065r'},'model':'u','output':[{'id'"
      ":"
      "'msg_1','type':'m\\u0065ssage','role':'assistant','content':[{'type':"
      "'output_t\\u0065xt','text':'Hi','annotations':[]}]}],'usage':{'input_tokens':3,"
      "'output_tokens':1}}";
  /* Gemini: a finish reason */
  const char *gem_p =
      "{'candidates':[{'content':{'role':'model','parts':[{'text':'Hi'}]},'finishReason':"
      "'MAX_TOKENS'}],'usageMetadata':{'promptTokenCount':3,'candidatesTokenCount':1}}";
  const char *gem_e =
      "{'candidates':[{'content':{'role':'model','parts':[{'text':'Hi'}]},'finishReason':"
      "'MAX_T\\u004fKENS'}],'usageMetadata':{'promptTokenCount':3,"
      "'candidatesTokenCount':1}}";
  /* Responses: its id and a call's, escaped (prefixes read by value) */
  const char *chat_call_p =
      "{'id':'resp_9','object':'chat.completion','created':1,'model':'u','choices':"
      "[{'index':0,'message':{'role':'assistant','content':null,'tool_calls':[{'id':"
      "'fc_1','type':'function','function':{'name':'f','arguments':'{}'}}]},"
      "'finish_reason':'tool_calls'}]}";
  const char *chat_call_e =
      "{'id':'r\\u0065sp_9','object':'chat.completion','created':1,'model':'u','choices':"
      "[{'index':0,'message':{'role':'assistant','content':null,'tool_calls':[{'id':"
      "'f\\u0063_1','type':'function','function':{'name':'f','arguments':'{}'}}]},"
      "'finish_reason':'tool_c\\u0061lls'}]}";
  ans_same(RESP, CHAT, chat_call_p, chat_call_e);
  /* ids longer than the reference's buffers: cut as it cuts them (a
   * response id to 159 bytes, a call's item id to 199) */
  char *long_id = malloc(8192), x[400];
  memset(x, 'a', 300);
  x[300] = 0;
  snprintf(long_id, 8192,
           "{'id':'%.150s','object':'chat.completion','created':1,'model':'u','choices':"
           "[{'index':0,'message':{'role':'assistant','content':'x','tool_calls':[{'id':"
           "'%s','type':'function','function':{'name':'f','arguments':'{}'}}]},"
           "'finish_reason':'tool_calls'}]}",
           x, x);
  ans_same(RESP, CHAT, long_id, long_id);
  /* the same, the ids with escapes: cut by their value's bytes (an escape
   * is one byte of the value, not six of the id) */
  char *long_esc = malloc(8192), y[1000];
  int k = 0;
  for (int j = 0; j < 100; j++) k += snprintf(y + k, sizeof(y) - (size_t)k, "\\u0061a");
  const char *calls =
      "{'id':'%s','object':'chat.completion','created':1,'model':'u','choices':"
      "[{'index':0,'message':{'role':'assistant','content':'x','tool_calls':[{'id':"
      "'%s','type':'function','function':{'name':'f','arguments':'{}'}}]},"
      "'finish_reason':'tool_calls'}]}";
  snprintf(long_esc, 8192, calls, y, y); /* 200 bytes of value each */
  x[200] = 0;
  snprintf(long_id, 8192, calls, x, x);
  ans_same(RESP, CHAT, long_id, long_esc);
  free(long_esc);
  free(long_id);
  for (int cl = 0; cl < PX_PROTO_COUNT; cl++) {
    if (cl != CHAT) ans_same(cl, CHAT, chat_p, chat_e);
    if (cl != ANTH) ans_same(cl, ANTH, anth_p, anth_e);
    if (cl != RESP) ans_same(cl, RESP, resp_p, resp_e);
    if (cl != GEM) ans_same(cl, GEM, gem_p, gem_e);
  }
  /* a value that keeps an escape in every spelling (a control character)
   * is an unknown one, taken as the reference takes it */
  const char *anth_odd =
      "{'id':'msg_1','type':'message','role':'assistant','model':'u','content':[{'type':"
      "'text','text':'Hi'}],'stop_reason':'end_turn\\n','usage':{'input_tokens':3,"
      "'output_tokens':1}}";
  for (int cl = 0; cl < PX_PROTO_COUNT; cl++)
    if (cl != ANTH) ans_same(cl, ANTH, anth_odd, anth_odd);
}


/* ---- every fixture, its values' letters escaped ------------------------ */

/* the body b[0..n) with every ASCII letter of its string values written
 * \u00XX (keys kept). Kept as written, as a codec must split them at a
 * place (px_fs_plain, the hub's respelling): data URLs, and, for a Gemini
 * client, schema types (lowered in place). *o malloc'd. */
static char *escape_values(const char *b, size_t n, int gemini) {
  char *o = malloc(n * 6 + 1), *w = o;
  char key[32] = "";
  for (size_t i = 0; i < n;) {
    if (b[i] != '"') {
      *w++ = b[i++];
      continue;
    }
    size_t j = i + 1; /* the string's end quote */
    while (b[j] != '"') j += b[j] == '\\' ? 2 : 1;
    size_t k = j + 1;
    while (k < n && (b[k] == ' ' || b[k] == '\n' || b[k] == '\t' || b[k] == '\r')) k++;
    int is_key = k < n && b[k] == ':';
    int keep = is_key || (j - i > 5 && memcmp(b + i + 1, "data:", 5) == 0) ||
               (gemini && strcmp(key, "type") == 0);
    if (is_key) snprintf(key, sizeof(key), "%.*s", (int)(j - i - 1), b + i + 1);
    *w++ = '"';
    for (size_t x = i + 1; x < j; x++) {
      char c = b[x];
      if (c == '\\') { /* an escape as it is */
        size_t l = b[x + 1] == 'u' ? 6 : 2;
        memcpy(w, b + x, l);
        w += l;
        x += l - 1;
      } else if (!keep && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
        w += sprintf(w, "\\u%04x", (unsigned)c);
      } else {
        *w++ = c;
      }
    }
    *w++ = '"';
    i = j + 1;
  }
  *w = 0;
  return o;
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *b = malloc(1 << 22);
  *n = b ? fread(b, 1, (1 << 22) - 1, f) : 0;
  fclose(f);
  if (b) b[*n] = 0;
  return b;
}

static int proto_of(const char *name, size_t n) {
  static const char *const names[] = {"chat", "responses", "anthropic", "gemini"};
  for (int p = 0; p < 4; p++)
    if (strlen(names[p]) == n && memcmp(names[p], name, n) == 0) return p;
  return -1;
}

static int taken_as_written, fixture_bodies;

/* a fixture's request (in -> out) and answer (of out, for in) */
static void fixture_escaped(const char *dir, int in, int out) {
  char path[2048];
  size_t n;
  snprintf(path, sizeof(path), "%s/client_request.json", dir);
  char *b = slurp(path, &n);
  px_json_req_t scan;
  if (b != NULL && px_json_request(b, n, &scan) == 0) {
    char *e = escape_values(b, n, in == GEM);
    char *op, *oe;
    size_t lp, le;
    px_lossy_t lfp, lfe;
    px_tr_err_t er;
    if (req_fast(in, out, b, &op, &lp, &lfp, &er) == 0) {
      fixture_bodies++;
      int re = req_fast(in, out, e, &oe, &le, &lfe, &er);
      int eq = re == 0 && same_json(op, lp, oe, le) && !strcmp(lfp.buf, lfe.buf);
      CHECK(eq);
      if (!eq) fprintf(stderr, "%s: escaped request (%d): %s\n", dir, re, e);
      taken_as_written += eq;
      free(oe);
    }
    free(op);
    free(e);
  }
  free(b);
  snprintf(path, sizeof(path), "%s/upstream_response.json", dir);
  if ((b = slurp(path, &n)) != NULL) {
    char *e = escape_values(b, n, 0);
    px_buf_t op, oe;
    px_lossy_t lp, le;
    px_tr_err_t er;
    if (ans_fast(in, out, b, &op, &lp, &er) == 0) {
      fixture_bodies++;
      int re = ans_fast(in, out, e, &oe, &le, &er);
      int eq = re == 0 && same_json(op.data, op.len, oe.data, oe.len) && !strcmp(lp.buf, le.buf);
      CHECK(eq);
      if (!eq) fprintf(stderr, "%s: escaped answer (%d): %s\n", dir, re, e);
      taken_as_written += eq;
      px_buf_free(&oe);
    }
    px_buf_free(&op);
    free(e);
  }
  free(b);
}

static void fixtures(void) {
  const char *src = getenv("PROXAI_TEST_SRCDIR");
  char root[512], pair[1024], dir[1536];
  snprintf(root, sizeof(root), "%s/test/fixtures", src ? src : ".");
  DIR *d = opendir(root);
  CHECK(d != NULL);
  for (struct dirent *p; d && (p = readdir(d));) {
    const char *sep = strstr(p->d_name, "__");
    if (sep == NULL) continue;
    int in = proto_of(p->d_name, (size_t)(sep - p->d_name)), out = proto_of(sep + 2, strlen(sep + 2));
    if (in < 0 || out < 0 || in == out) continue;
    snprintf(pair, sizeof(pair), "%s/%s", root, p->d_name);
    DIR *c = opendir(pair);
    for (struct dirent *q; c && (q = readdir(c));) {
      if (q->d_name[0] == '.') continue;
      snprintf(dir, sizeof(dir), "%s/%s", pair, q->d_name);
      fixture_escaped(dir, in, out);
    }
    if (c) closedir(c);
  }
  if (d) closedir(d);
  /* a check that checks: most fixtures take the fast path */
  CHECK(fixture_bodies > 200);
  printf("fast_unesc: %d fixture bodies escaped, %d taken as written\n", fixture_bodies,
         taken_as_written);
}

int main(void) {
  mechanism();
  requests();
  answers();
  fixtures();
  return check_report("fast_unesc");
}
