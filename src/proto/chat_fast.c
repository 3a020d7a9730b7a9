/* chat_fast.c - the fast codec of OpenAI Chat Completions bodies
 * (include/proxai/fastir.h): the common shape of a request (system, user
 * and assistant text, tool calls and tool messages, function tools,
 * sampling parameters) and of a response (one choice: text and tool
 * calls), without a jansson document. Anything else declines to chat.c,
 * the reference: every rule here is that codec's rule for the same shape. */
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/protoutil.h"

#define DECLINE PX_FAST_DECLINE
#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define HAS(x) (seen & (1u << (x)))

/* ======================================================================== */
/* Request decode                                                            */

/* text-only content (system, developer, tool): a string or text parts */
static int text_content(const px_fv_t *c, px_fpart_t **head, px_fpart_t **tail,
                        int developer, px_arena_t *a) {
  if (c->kind == PX_FV_STR) {
    px_fpart_t *p = px_fpart_text(a, c->s);
    if (p == NULL) return DECLINE;
    p->developer = developer;
    px_fpart_push(head, tail, p);
    return 0;
  }
  if (c->kind != PX_FV_ARR) return DECLINE;
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  int r;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text")};
    px_fv_t f[2];
    unsigned seen = 0;
    if (px_fw_kfields(&w, keys, 2, f, &seen) != 0 || !HAS(0) || !HAS(1) ||
        f[0].kind != PX_FV_STR || !px_fs_is(f[0].s, "text") || f[1].kind != PX_FV_STR)
      return DECLINE;
    px_fpart_t *p = px_fpart_text(a, f[1].s);
    if (p == NULL) return DECLINE;
    p->developer = developer;
    px_fpart_push(head, tail, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* assistant content parts: text only here (refusal parts: jansson) */
static int assistant_parts(const px_fv_t *c, px_fmsg_t *m, px_arena_t *a) {
  /* parts: {type:"text", text} only (refusal parts: jansson) */
  if (c->kind == PX_FV_ARR) return text_content(c, &m->parts, &m->last, 0, a);
  if (c->kind == PX_FV_STR) {
    if (c->s.n == 0) return 0;
    px_fpart_t *p = px_fpart_text(a, c->s);
    if (p == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, p);
    return 0;
  }
  return c->kind == PX_FV_NULL ? 0 : DECLINE;
}

/* one entry of a tool_calls list (requests and responses): {type:
 * "function" or none, id, function: {name, arguments}} -> f (type, id,
 * function) and g (name, arguments), present as the bits of *seen, *gs */
static int call_fields(px_fw_t *w, px_fv_t f[3], unsigned *seen, px_fv_t g[2],
                       unsigned *gs) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("id"), PX_FK("function")};
  static const px_fkey_t fkeys[] = {PX_FK("name"), PX_FK("arguments")};
  if (px_fw_kfields(w, keys, 3, f, seen) != 0) return DECLINE;
  if ((*seen & 1) && !(f[0].kind == PX_FV_STR && px_fs_is(f[0].s, "function")))
    return DECLINE;
  if (!(*seen & 4) || f[2].kind != PX_FV_OBJ) return DECLINE;
  return px_fv_kfields(&f[2], fkeys, 2, g, gs);
}

static int tool_calls(const px_fv_t *c, px_fmsg_t *m, px_arena_t *a) {
  if (c->kind == PX_FV_NULL) return 0;
  if (c->kind != PX_FV_ARR) return DECLINE;
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  int r;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    px_fv_t f[3], g[2];
    unsigned seen = 0, fseen = 0;
    if (call_fields(&w, f, &seen, g, &fseen) != 0 || !HAS(1) || f[1].kind != PX_FV_STR ||
        !(fseen & 1) || g[0].kind != PX_FV_STR)
      return DECLINE;
    px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
    if (p == NULL) return DECLINE;
    p->id = f[1].s;
    p->name = g[0].s;
    if (!(fseen & 2) || g[1].kind != PX_FV_STR || px_fs_blank_value(g[1].s) == 1) {
      p->args = (px_fstr_t){"{}", 2, 0}; /* a call without arguments */
      p->input = (px_str_t){"{}", 2};
    } else {
      p->args = g[1].s;
      /* the jansson codec checks them as JSON (an object toward
       * Anthropic); objects are the shape taken here */
      if (px_fast_args_object(a, p) != 0) return DECLINE;
    }
    px_fpart_push(&m->parts, &m->last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* the last message if it is a user message of tool results only */
static px_fmsg_t *tool_result_tail(px_freq_t *ir) {
  px_fmsg_t *m = ir->msgs_last;
  if (m == NULL || m->assistant || m->parts == NULL) return NULL;
  for (px_fpart_t *p = m->parts; p; p = p->next)
    if (p->type != PX_FP_TOOL_RESULT) return NULL;
  return m;
}

enum { M_ROLE, M_CONTENT, M_NAME, M_TCID, M_TC, M_RC, M_REFUSAL, M_FC, M_AUDIO };
static const px_fkey_t msg_keys[] = {PX_FK("role"), PX_FK("content"), PX_FK("name"),
                                     PX_FK("tool_call_id"), PX_FK("tool_calls"),
                                     PX_FK("reasoning_content"), PX_FK("refusal"),
                                     PX_FK("function_call"), PX_FK("audio")};

static int decode_message(px_fw_t *w, px_freq_t *ir, px_arena_t *a) {
  px_fv_t f[NKEYS(msg_keys)];
  unsigned seen = 0;
  if (px_fw_kfields(w, msg_keys, NKEYS(msg_keys), f, &seen) != 0) return DECLINE;
  if (!HAS(M_ROLE) || f[M_ROLE].kind != PX_FV_STR || HAS(M_NAME)) return DECLINE;
  px_fstr_t role = f[M_ROLE].s;
  px_fv_t none = {PX_FV_NULL, {0}, {NULL, 0}};
  const px_fv_t *content = HAS(M_CONTENT) ? &f[M_CONTENT] : &none;
  px_fmsg_t *m;
  if (px_fs_is(role, "system") || px_fs_is(role, "developer")) {
    return text_content(content, &ir->system, &ir->system_last,
                        px_fs_is(role, "developer"), a);
  }
  if (px_fs_is(role, "user")) {
    if (content->kind == PX_FV_STR) {
      if ((m = px_fmsg_push(ir, a, 0)) == NULL) return DECLINE;
      px_fpart_t *p = px_fpart_text(a, content->s);
      if (p == NULL) return DECLINE;
      px_fpart_push(&m->parts, &m->last, p);
      return 0;
    }
    if (content->kind != PX_FV_ARR) return DECLINE;
    if ((m = px_fmsg_push(ir, a, 0)) == NULL) return DECLINE;
    /* user parts: text only here (images, files, audio: jansson) */
    return text_content(content, &m->parts, &m->last, 0, a);
  }
  if (px_fs_is(role, "assistant")) {
    if (HAS(M_RC) && f[M_RC].kind == PX_FV_STR && f[M_RC].s.n > 0) return DECLINE;
    if (HAS(M_REFUSAL) && f[M_REFUSAL].kind == PX_FV_STR && f[M_REFUSAL].s.n > 0)
      return DECLINE;
    if (HAS(M_FC) && f[M_FC].kind != PX_FV_NULL) return DECLINE;
    if (HAS(M_AUDIO) && f[M_AUDIO].kind != PX_FV_NULL) return DECLINE;
    if ((m = px_fmsg_push(ir, a, 1)) == NULL) return DECLINE;
    if (assistant_parts(content, m, a) != 0) return DECLINE;
    if (HAS(M_TC) && tool_calls(&f[M_TC], m, a) != 0) return DECLINE;
    return 0;
  }
  if (px_fs_is(role, "tool")) {
    if (!HAS(M_TCID) || f[M_TCID].kind != PX_FV_STR) return DECLINE;
    px_fpart_t *res = px_fpart_new(a, PX_FP_TOOL_RESULT), *tail = NULL;
    if (res == NULL) return DECLINE;
    res->id = f[M_TCID].s;
    if (text_content(content, &res->content, &tail, 0, a) != 0) return DECLINE;
    /* consecutive tool results share one user message */
    m = tool_result_tail(ir);
    if (m == NULL && (m = px_fmsg_push(ir, a, 0)) == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, res);
    return 0;
  }
  return DECLINE;
}

static int decode_tools(const px_fv_t *tv, px_freq_t *ir, px_arena_t *a) {
  if (tv->kind != PX_FV_ARR) return DECLINE;
  px_fw_t w = {tv->raw.ptr, tv->raw.len, 0};
  int r;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("function")};
    static const px_fkey_t fkeys[] = {PX_FK("name"), PX_FK("description"),
                                      PX_FK("parameters"), PX_FK("strict")};
    px_fv_t f[2], g[4];
    unsigned seen = 0, fseen = 0;
    if (px_fw_kfields(&w, keys, 2, f, &seen) != 0 || !HAS(0) || f[0].kind != PX_FV_STR ||
        !px_fs_is(f[0].s, "function") || !HAS(1) || f[1].kind != PX_FV_OBJ)
      return DECLINE;
    if (px_fv_kfields(&f[1], fkeys, 4, g, &fseen) != 0 || !(fseen & 1) ||
        g[0].kind != PX_FV_STR)
      return DECLINE;
    if (px_ftool_push(ir, a, g[0].s, (fseen & 2) ? &g[1] : NULL,
                      (fseen & 4) ? &g[2] : NULL, (fseen & 8) ? &g[3] : NULL,
                      PX_FAST_OPENAI_PARAMS) == NULL)
      return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

static int decode_tool_choice(const px_fv_t *v, px_freq_t *ir) {
  if (v->kind == PX_FV_STR) return px_fast_openai_tc(v->s, ir);
  if (v->kind != PX_FV_OBJ) return DECLINE;
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("function")};
  static const px_fkey_t fkeys[] = {PX_FK("name")};
  px_fv_t f[2], g[1];
  unsigned seen = 0, fseen = 0;
  if (px_fv_kfields(v, keys, 2, f, &seen) != 0 || !HAS(0) || f[0].kind != PX_FV_STR ||
      !px_fs_is(f[0].s, "function") || !HAS(1) || f[1].kind != PX_FV_OBJ)
    return DECLINE;
  if (px_fv_kfields(&f[1], fkeys, 1, g, &fseen) != 0 || !fseen || g[0].kind != PX_FV_STR)
    return DECLINE;
  ir->tool_choice = PX_FTC_TOOL;
  ir->tc_name = g[0].s;
  return 0;
}

/* an array of strings, checked */
static int strings_only(const px_fv_t *v) {
  px_fw_t w = {v->raw.ptr, v->raw.len, 0};
  int r;
  if (px_fw_open(&w, '[') < 0) return 0;
  while ((r = px_fw_elem(&w)) == 1) {
    px_fv_t x;
    if (px_fw_value(&w, &x) < 0 || x.kind != PX_FV_STR) return 0;
  }
  return r == 0;
}

/* response_format {"type":"text"} (the others: jansson) */
static int format_text(const px_fv_t *v) {
  static const px_fkey_t keys[] = {PX_FK("type")};
  px_fv_t f[1];
  unsigned seen = 0;
  return v->kind == PX_FV_OBJ && px_fv_kfields(v, keys, 1, f, &seen) == 0 && seen &&
         f[0].kind == PX_FV_STR && px_fs_is(f[0].s, "text");
}

enum { K_MODEL, K_MESSAGES, K_TOOLS, K_TC, K_PAR, K_MAX, K_MCT, K_TEMP, K_TOPP, K_STOP,
       K_USER, K_META, K_STREAM, K_N, K_LOGPROBS, K_RF, K_SO };
static const px_fkey_t top_keys[] = {PX_FK("model"), PX_FK("messages"), PX_FK("tools"),
                                     PX_FK("tool_choice"), PX_FK("parallel_tool_calls"),
                                     PX_FK("max_tokens"), PX_FK("max_completion_tokens"),
                                     PX_FK("temperature"), PX_FK("top_p"), PX_FK("stop"),
                                     PX_FK("user"), PX_FK("metadata"), PX_FK("stream"),
                                     PX_FK("n"), PX_FK("logprobs"), PX_FK("response_format"),
                                     PX_FK("stream_options")};

static int chat_fast_decode_request(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                    px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy) {
  (void)ctx;
  (void)lossy;
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  px_fv_t f[NKEYS(top_keys)];
  unsigned seen = 0;
  int r;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    int ki = px_fk_of(k, top_keys, NKEYS(top_keys));
    if (ki == K_MESSAGES) {
      /* messages are read in place, in body order */
      if (px_fw_seen_twice(&seen, ki)) return DECLINE;
      int re;
      if (px_fw_peek(&w) != PX_FV_ARR || px_fw_open(&w, '[') < 0) return DECLINE;
      while ((re = px_fw_elem(&w)) == 1)
        if (decode_message(&w, ir, a) != 0) return DECLINE;
      if (re < 0) return DECLINE;
      continue;
    }
    px_fv_t v;
    if (px_fw_value(&w, &v) < 0) return DECLINE;
    if (ki < 0) {
      /* an unknown or rare member: null is no member there, else lossy or
       * special (jansson) */
      if (k.esc || v.kind != PX_FV_NULL) return DECLINE;
      continue;
    }
    if (px_fw_seen_twice(&seen, ki)) return DECLINE;
    f[ki] = v;
  }
  if (r < 0 || !HAS(K_MESSAGES)) return DECLINE;
  if (!HAS(K_MODEL) || f[K_MODEL].kind != PX_FV_STR) return DECLINE;
  if (HAS(K_TOOLS) && f[K_TOOLS].kind != PX_FV_NULL && decode_tools(&f[K_TOOLS], ir, a) != 0)
    return DECLINE;
  if (HAS(K_TC) && f[K_TC].kind != PX_FV_NULL && decode_tool_choice(&f[K_TC], ir) != 0)
    return DECLINE;
  ir->parallel = -1;
  if (HAS(K_PAR) && f[K_PAR].kind == PX_FV_TRUE) ir->parallel = 1;
  if (HAS(K_PAR) && f[K_PAR].kind == PX_FV_FALSE) ir->parallel = 0;
  /* max_completion_tokens wins over the deprecated max_tokens */
  for (int i = K_MAX; i <= K_MCT; i++) {
    if (!HAS(i) || f[i].kind == PX_FV_NULL) continue;
    int64_t n;
    if (f[i].kind != PX_FV_NUM || px_fw_uint(f[i].raw, &n) < 0 || n < 1) return DECLINE;
    ir->max_tokens = f[i].raw;
    ir->max_tokens_v = n;
  }
  if (HAS(K_TEMP) && f[K_TEMP].kind == PX_FV_NUM) ir->temperature = f[K_TEMP].raw;
  if (HAS(K_TOPP) && f[K_TOPP].kind == PX_FV_NUM) ir->top_p = f[K_TOPP].raw;
  if (HAS(K_STOP)) {
    if (f[K_STOP].kind == PX_FV_STR) ir->stop1 = f[K_STOP].s;
    else if (f[K_STOP].kind == PX_FV_ARR) {
      if (!strings_only(&f[K_STOP])) return DECLINE;
      if (!px_fw_empty(f[K_STOP].raw)) ir->stop = f[K_STOP].raw;
    } else if (f[K_STOP].kind != PX_FV_NULL)
      return DECLINE;
  }
  if (HAS(K_USER) && f[K_USER].kind == PX_FV_STR) ir->user = f[K_USER].s;
  if (HAS(K_META) && f[K_META].kind == PX_FV_OBJ) {
    ir->metadata = f[K_META].raw;
    ir->metadata_empty = px_fw_empty(f[K_META].raw);
  }
  if (HAS(K_STREAM) && f[K_STREAM].kind == PX_FV_TRUE) ir->stream_true = 1;
  if (HAS(K_SO) && f[K_SO].kind == PX_FV_OBJ) {
    /* include_usage is the context's (the encoder always asks for usage);
     * include_obfuscation is lossy: the jansson codec names it */
    static const px_fkey_t so_keys[] = {PX_FK("include_obfuscation")};
    px_fv_t so[1];
    unsigned so_seen = 0;
    if (px_fv_kfields(&f[K_SO], so_keys, 1, so, &so_seen) != 0 || so_seen) return DECLINE;
  }
  if (HAS(K_STREAM) && f[K_STREAM].kind == PX_FV_FALSE) ir->stream_false = 1;
  if (HAS(K_RF) && f[K_RF].kind != PX_FV_NULL) {
    if (!format_text(&f[K_RF])) return DECLINE;
    ir->rf_text = 1;
  }
  if (HAS(K_N) && f[K_N].kind != PX_FV_NULL &&
      !(f[K_N].kind == PX_FV_NUM && f[K_N].raw.len == 1 && f[K_N].raw.ptr[0] == '1'))
    return DECLINE;
  if (HAS(K_LOGPROBS) && f[K_LOGPROBS].kind == PX_FV_TRUE) return DECLINE;
  return 0;
}

/* ======================================================================== */
/* Request encode                                                            */

static int put_tool_msg(px_buf_t *b, const px_fpart_t *p) {
  int rc = px_fb_lit(b, "{\"role\":\"tool\",\"tool_call_id\":");
  if (rc == 0) rc = px_fb_str(b, p->id);
  if (rc == 0) rc = px_fb_lit(b, ",\"content\":\"");
  if (rc == 0) rc = px_fb_texts(b, p->content);
  if (rc == 0) rc = px_fb_lit(b, "\"}");
  return rc;
}

static int put_call(px_buf_t *b, const px_fpart_t *p) {
  int rc = px_fb_lit(b, "{\"id\":");
  if (rc == 0) rc = px_fb_str(b, p->id);
  if (rc == 0) rc = px_fb_lit(b, ",\"type\":\"function\",\"function\":{\"name\":");
  if (rc == 0) rc = px_fb_str(b, p->name);
  if (rc == 0) rc = px_fb_lit(b, ",\"arguments\":");
  if (rc == 0) rc = px_fb_str(b, p->args.p ? p->args : (px_fstr_t){"{}", 2, 0});
  if (rc == 0) rc = px_fb_lit(b, "}}");
  return rc;
}

/* consecutive assistant messages [m, end) -> one Chat message */
static int put_assistant(px_buf_t *b, const px_fmsg_t *m, const px_fmsg_t *end,
                         px_lossy_t *lossy) {
  int ntext = 0, ncalls = 0;
  for (const px_fmsg_t *x = m; x != end; x = x->next)
    for (const px_fpart_t *p = x->parts; p; p = p->next) {
      if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
      if (p->type == PX_FP_TEXT) ntext++;
      else if (p->type == PX_FP_TOOL_CALL) ncalls++;
      else return DECLINE;
    }
  int rc = px_fb_lit(b, "{\"role\":\"assistant\",\"content\":");
  if (rc == 0 && ntext > 0) {
    rc = px_fb_lit(b, "\"");
    for (const px_fmsg_t *x = m; x != end && rc == 0; x = x->next)
      rc = px_fb_texts(b, x->parts);
    if (rc == 0) rc = px_fb_lit(b, "\"");
  } else if (rc == 0) {
    rc = px_fb_lit(b, ncalls ? "null" : "\"\"");
  }
  if (rc == 0 && ncalls) {
    rc = px_fb_lit(b, ",\"tool_calls\":[");
    int first = 1;
    for (const px_fmsg_t *x = m; x != end && rc == 0; x = x->next)
      for (const px_fpart_t *p = x->parts; p && rc == 0; p = p->next) {
        if (p->type != PX_FP_TOOL_CALL) continue;
        if (!first) rc = px_fb_lit(b, ",");
        first = 0;
        if (rc == 0) rc = put_call(b, p);
      }
    if (rc == 0) rc = px_fb_lit(b, "]");
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

static int put_user(px_buf_t *b, const px_fmsg_t *m, int *first, px_lossy_t *lossy) {
  int ntext = 0, rc = 0;
  const px_fpart_t *one = NULL;
  for (const px_fpart_t *p = m->parts; p; p = p->next) {
    if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
    if (p->type == PX_FP_TOOL_RESULT) {
      for (const px_fpart_t *c = p->content; c; c = c->next)
        if (c->type != PX_FP_TEXT) return DECLINE;
      if (p->is_error) px_lossy_add(lossy, "messages[].content[].is_error");
      if (!*first) rc = px_fb_lit(b, ",");
      *first = 0;
      if (rc == 0) rc = put_tool_msg(b, p);
      if (rc != 0) return rc;
    } else if (p->type == PX_FP_TEXT) {
      ntext++;
      one = p;
    } else {
      return DECLINE;
    }
  }
  if (ntext == 0) return 0;
  if (!*first) rc = px_fb_lit(b, ",");
  *first = 0;
  if (rc == 0) rc = px_fb_lit(b, "{\"role\":\"user\",\"content\":");
  if (rc == 0 && ntext == 1) {
    rc = px_fb_str(b, one->text);
  } else if (rc == 0) {
    rc = px_fb_lit(b, "[");
    int f = 1;
    for (const px_fpart_t *p = m->parts; p && rc == 0; p = p->next) {
      if (p->type != PX_FP_TEXT) continue;
      rc = px_fb_lit(b, f ? "{\"type\":\"text\",\"text\":" : ",{\"type\":\"text\",\"text\":");
      f = 0;
      if (rc == 0) rc = px_fb_str(b, p->text);
      if (rc == 0) rc = px_fb_lit(b, "}");
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

static int chat_fast_encode_request(const px_tr_ctx_t *ctx, const px_freq_t *ir,
                                    px_buf_t *b, px_arena_t *a, px_lossy_t *lossy) {
  (void)a;
  int rc = px_fb_lit(b, "{\"model\":");
  if (rc == 0) rc = px_buf_json_str(b, ctx->upstream_model, strlen(ctx->upstream_model));
  if (rc == 0) rc = px_fb_lit(b, ",\"messages\":[");
  int first = 1;
  for (const px_fpart_t *p = ir->system; p && rc == 0; p = p->next) {
    if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
    rc = px_fb_lit(b, first ? "{\"role\":" : ",{\"role\":");
    first = 0;
    if (rc == 0) rc = px_fb_lit(b, p->developer ? "\"developer\"" : "\"system\"");
    if (rc == 0) rc = px_fb_lit(b, ",\"content\":");
    if (rc == 0) rc = px_fb_str(b, p->text);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  const px_fmsg_t *m = ir->msgs;
  while (rc == 0 && m != NULL) {
    if (m->assistant) {
      const px_fmsg_t *end = m->next;
      while (end != NULL && end->assistant) end = end->next;
      if (!first) rc = px_fb_lit(b, ",");
      first = 0;
      if (rc == 0) rc = put_assistant(b, m, end, lossy);
      m = end;
    } else {
      rc = put_user(b, m, &first, lossy);
      m = m->next;
    }
  }
  if (rc == 0) rc = px_fb_lit(b, "]");
  if (rc != 0) return rc;
  if (ir->tools != NULL) {
    rc = px_fb_lit(b, ",\"tools\":[");
    for (const px_ftool_t *t = ir->tools; t && rc == 0; t = t->next) {
      rc = px_fb_lit(b, t == ir->tools ? "{\"type\":\"function\",\"function\":{\"name\":"
                                       : ",{\"type\":\"function\",\"function\":{\"name\":");
      if (rc == 0) rc = px_fb_str(b, t->name);
      if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", t->desc);
      if (rc == 0) rc = px_fb_lit(b, ",\"parameters\":");
      if (rc == 0) rc = px_fb_raw(b, t->params);
      if (rc == 0 && t->strict >= 0)
        rc = px_fb_lit(b, t->strict ? ",\"strict\":true" : ",\"strict\":false");
      if (rc == 0) rc = px_fb_lit(b, "}}");
      if (t->cache_control.ptr) px_lossy_add(lossy, "cache_control");
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
    if (rc == 0 && ir->tool_choice == PX_FTC_TOOL) {
      rc = px_fb_lit(b, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":");
      if (rc == 0) rc = px_fb_str(b, ir->tc_name);
      if (rc == 0) rc = px_fb_lit(b, "}}");
    }
    if (rc == 0) rc = px_fb_openai_tc(b, ir->tool_choice, ir->parallel);
  } else if (ir->tool_choice == PX_FTC_REQUIRED || ir->tool_choice == PX_FTC_TOOL) {
    px_lossy_add(lossy, "tool_choice");
  }
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"max_completion_tokens\":", ir->max_tokens);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"temperature\":", ir->temperature);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"top_p\":", ir->top_p);
  if (ir->top_k.ptr) px_lossy_add(lossy, "top_k");
  if (rc == 0 && ir->stop1.p) {
    rc = px_fb_lit(b, ",\"stop\":[");
    if (rc == 0) rc = px_fb_str(b, ir->stop1);
    if (rc == 0) rc = px_fb_lit(b, "]");
  } else if (rc == 0) {
    rc = px_fb_opt_raw(b, ",\"stop\":", ir->stop);
  }
  if (rc == 0 && ir->rf_text) rc = px_fb_lit(b, ",\"response_format\":{\"type\":\"text\"}");
  if (rc == 0) rc = px_fb_opt_str(b, ",\"user\":", ir->user);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"metadata\":", ir->metadata);
  /* a stream always asks for its usage (SPEC 5: the final usage is real) */
  if (rc == 0 && (ctx->stream || ir->stream_true))
    rc = px_fb_lit(b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* ======================================================================== */
/* Response decode                                                           */

static int decode_message_out(const px_fv_t *mv, px_fresp_t *ir, px_arena_t *a) {
  static const px_fkey_t keys[] = {PX_FK("content"), PX_FK("refusal"),
                                   PX_FK("reasoning_content"), PX_FK("tool_calls"),
                                   PX_FK("annotations"), PX_FK("audio")};
  px_fv_t f[6];
  unsigned seen = 0;
  int r;
  if (px_fv_kfields(mv, keys, 6, f, &seen) != 0) return DECLINE;
  if (HAS(2) && f[2].kind == PX_FV_STR && f[2].s.n > 0) return DECLINE;
  if (HAS(0) && f[0].kind == PX_FV_ARR) return DECLINE;
  if (HAS(4) && f[4].kind == PX_FV_ARR && !px_fw_empty(f[4].raw)) return DECLINE;
  if (HAS(1) && f[1].kind == PX_FV_STR && f[1].s.n > 0) return DECLINE;
  if (HAS(5) && f[5].kind != PX_FV_NULL) return DECLINE;
  if (HAS(0) && f[0].kind == PX_FV_STR && f[0].s.n > 0) {
    px_fpart_t *p = px_fpart_text(a, f[0].s);
    if (p == NULL) return DECLINE;
    px_fpart_push(&ir->content, &ir->last, p);
  }
  if (!HAS(3) || f[3].kind != PX_FV_ARR) return 0;
  px_fw_t tw = {f[3].raw.ptr, f[3].raw.len, 0};
  if (px_fw_open(&tw, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&tw)) == 1) {
    px_fv_t g[3], h[2];
    unsigned gs = 0, hs = 0;
    if (call_fields(&tw, g, &gs, h, &hs) != 0) return DECLINE;
    px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
    if (p == NULL) return DECLINE;
    p->id = (gs & 2) && g[1].kind == PX_FV_STR ? g[1].s : (px_fstr_t){"", 0, 0};
    p->name = (hs & 1) && h[0].kind == PX_FV_STR ? h[0].s : (px_fstr_t){"", 0, 0};
    if (!(hs & 2) || h[1].kind != PX_FV_STR) {
      p->args = (px_fstr_t){"{}", 2, 0};
    } else {
      int blank = px_fs_blank_value(h[1].s);
      if (blank < 0) return DECLINE;
      p->args = blank ? (px_fstr_t){"{}", 2, 0} : h[1].s;
    }
    px_fpart_push(&ir->content, &ir->last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* The body is read once and checked as it is read (px_fc_*: the hub scans
 * nothing before); the one choice's message is walked again from its span
 * (checked by then), the usage is read where it stands. */
enum { C_ID, C_MODEL, C_CREATED, C_CHOICES, C_USAGE };
static const px_fkey_t resp_keys[] = {PX_FK("id"), PX_FK("model"), PX_FK("created"),
                                      PX_FK("choices"), PX_FK("usage")};

/* choices at the cursor: exactly one choice -> *msg, ir->stop */
static int decode_choices(px_fw_t *w, px_fresp_t *ir, px_fv_t *msg) {
  static const px_fkey_t ckeys[] = {PX_FK("message"), PX_FK("finish_reason"),
                                    PX_FK("logprobs")};
  px_fv_t g[3];
  unsigned gs = 0;
  int first = 1;
  if (px_fw_open(w, '[') < 0 || px_fc_elem(w, &first) != 1 ||
      px_fc_fields(w, ckeys, 3, g, &gs) != 0 || px_fc_elem(w, &first) != 0)
    return DECLINE;
  if (!(gs & 1) || g[0].kind != PX_FV_OBJ) return DECLINE;
  if ((gs & 4) && g[2].kind != PX_FV_NULL) return DECLINE;
  ir->stop = PX_STOP_NONE;
  if ((gs & 2) && g[1].kind == PX_FV_STR) {
    char fr[40];
    if (g[1].s.esc) return DECLINE;
    if (g[1].s.n >= sizeof(fr)) {
      ir->stop = PX_STOP_END_TURN;
    } else {
      memcpy(fr, g[1].s.p, g[1].s.n);
      fr[g[1].s.n] = 0;
      ir->stop = px_stop_from_chat(fr);
    }
  }
  *msg = g[0];
  return 0;
}

static int chat_fast_decode_response(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                     px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy) {
  (void)ctx;
  (void)lossy;
  px_fv_t f[NKEYS(resp_keys)], msg;
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  int r, first = 1;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fc_member(&w, &k, &first)) == 1) {
    int ki = px_fk_of(k, resp_keys, NKEYS(resp_keys));
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == C_CHOICES) {
      if (w.p[w.i] != '[' || decode_choices(&w, ir, &msg) != 0) return DECLINE;
    } else if (ki == C_USAGE && w.p[w.i] == '{') {
      static const px_fkey_t ukeys[] = {PX_FK("prompt_tokens"), PX_FK("completion_tokens"),
                                        PX_FK("prompt_tokens_details"),
                                        PX_FK("completion_tokens_details")};
      if (px_fc_openai_usage(&w, ukeys, ir) != 0) return DECLINE;
    } else {
      px_fv_t v;
      if (px_fc_value(&w, &v) < 0) return DECLINE;
      if (ki >= 0) f[ki] = v;
    }
  }
  if (r < 0 || px_fc_end(&w) < 0 || !HAS(C_CHOICES)) return DECLINE;
  if (!HAS(C_USAGE)) ir->usage_known = 1, ir->usage_in = ir->usage_out = -1;
  if (HAS(C_ID) && f[C_ID].kind == PX_FV_STR) ir->id = f[C_ID].s;
  if (HAS(C_MODEL) && f[C_MODEL].kind == PX_FV_STR) ir->model = f[C_MODEL].s;
  if (px_fast_created(HAS(C_CREATED) ? &f[C_CREATED] : NULL, ir) != 0) return DECLINE;
  return decode_message_out(&msg, ir, a);
}

/* ======================================================================== */
/* Response encode                                                           */

static int chat_fast_encode_response(const px_tr_ctx_t *ctx, const px_fresp_t *ir,
                                     px_buf_t *b, px_arena_t *a, px_lossy_t *lossy) {
  (void)a;
  if (ir->id.esc || !px_fast_ids_plain(ir->content)) return DECLINE;
  int rc = px_fb_lit(b, "{\"id\":\"");
  if (rc == 0 && ir->id.p == NULL)
    rc = px_fb_lit(b, "chatcmpl-proxai");
  else if (rc == 0) {
    if (!(ir->id.n >= 9 && memcmp(ir->id.p, "chatcmpl-", 9) == 0))
      rc = px_fb_lit(b, "chatcmpl-");
    if (rc == 0 && ir->id.n) rc = px_fb_put(b, ir->id.p, ir->id.n);
  }
  if (rc == 0) rc = px_fb_lit(b, "\",\"object\":\"chat.completion\",\"created\":");
  if (rc == 0) rc = px_fb_i64(b, ir->has_created ? ir->created : ctx->created);
  if (rc == 0 && (ctx->client_model || ir->model.p)) {
    rc = px_fb_lit(b, ",\"model\":");
    if (rc == 0 && ctx->client_model)
      rc = px_buf_json_str(b, ctx->client_model, strlen(ctx->client_model));
    else if (rc == 0)
      rc = px_fb_str(b, ir->model);
  }
  if (rc == 0) rc = px_fb_lit(b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                                 "\"assistant\",\"content\":");
  int ntext = 0, ncalls = 0;
  for (const px_fpart_t *p = ir->content; p; p = p->next) {
    if (p->type == PX_FP_TEXT) ntext++;
    else ncalls++;
  }
  if (rc == 0 && ntext) {
    rc = px_fb_lit(b, "\"");
    if (rc == 0) rc = px_fb_texts(b, ir->content);
    if (rc == 0) rc = px_fb_lit(b, "\"");
  } else if (rc == 0) {
    rc = px_fb_lit(b, "null");
  }
  if (rc == 0 && ncalls) {
    rc = px_fb_lit(b, ",\"tool_calls\":[");
    int first = 1;
    for (const px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
      if (p->type != PX_FP_TOOL_CALL) continue;
      if (!first) rc = px_fb_lit(b, ",");
      first = 0;
      if (rc == 0) rc = put_call(b, p);
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
  }
  px_stop_t st = ir->stop == PX_STOP_NONE ? PX_STOP_END_TURN : ir->stop;
  if (ir->stop_sequence.p) px_lossy_add(lossy, "stop_sequence");
  if (rc == 0) rc = px_fb_lit(b, "},\"logprobs\":null,\"finish_reason\":\"");
  if (rc == 0) rc = px_fb_lit(b, px_stop_to_chat(st));
  if (rc == 0) rc = px_fb_lit(b, "\"}]");
  if (rc == 0 && ir->has_usage) {
    int64_t in = ir->in < 0 ? 0 : ir->in, out = ir->out < 0 ? 0 : ir->out;
    rc = px_fb_lit(b, ",\"usage\":{\"prompt_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, in);
    if (rc == 0) rc = px_fb_lit(b, ",\"completion_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, out);
    if (rc == 0) rc = px_fb_lit(b, ",\"total_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, in + out);
    if (rc == 0) rc = px_fb_lit(b, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, ir->cache_read < 0 ? 0 : ir->cache_read);
    if (rc == 0) rc = px_fb_lit(b, "},\"completion_tokens_details\":{\"reasoning_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, ir->reasoning < 0 ? 0 : ir->reasoning);
    if (rc == 0) rc = px_fb_lit(b, "}}");
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

const px_fast_ops_t px_chat_fast = {
    .decode_request = chat_fast_decode_request,
    .encode_request = chat_fast_encode_request,
    .decode_response = chat_fast_decode_response,
    .encode_response = chat_fast_encode_response,
    .response_checked = 1,
};
