/* responses_fast.c - the fast codec of OpenAI Responses bodies
 * (include/proxai/fastir.h): the common shape (instructions, message,
 * function_call and function_call_output items with text, function tools,
 * sampling parameters) without a jansson document. Anything else declines
 * to responses.c, the reference: every rule here is that codec's rule for
 * the same shape; the same for response bodies (message text and
 * function calls). */
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/protoutil.h"

#define DECLINE PX_FAST_DECLINE
#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define HAS(x) (seen & (1u << (x)))

static int is_text_type(px_fstr_t t) {
  return px_fs_is(t, "input_text") || px_fs_is(t, "text") || px_fs_is(t, "output_text");
}

/* content parts of text types only -> TEXT parts; assistant: annotations
 * must be empty (lossy there) */
static int text_parts(const px_fv_t *c, px_fpart_t **head, px_fpart_t **tail, int sys_role,
                      int assistant, px_arena_t *a) {
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  int r;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text"), PX_FK("annotations")};
    px_fv_t f[3];
    unsigned seen = 0;
    if (px_fw_kfields(&w, keys, 3, f, &seen) != 0 || !HAS(0) || f[0].kind != PX_FV_STR ||
        !is_text_type(f[0].s) || !HAS(1) || f[1].kind != PX_FV_STR)
      return DECLINE;
    if (assistant && HAS(2) && f[2].kind == PX_FV_ARR && !px_fw_empty(f[2].raw))
      return DECLINE;
    px_fpart_t *p = px_fpart_text(a, f[1].s);
    if (p == NULL) return DECLINE;
    p->developer = sys_role == 2;
    px_fpart_push(head, tail, p);
  }
  return r < 0 ? DECLINE : 0;
}

static px_fmsg_t *asst_msg(px_freq_t *ir, px_arena_t *a) {
  if (ir->msgs_last != NULL && ir->msgs_last->assistant) return ir->msgs_last;
  return px_fmsg_push(ir, a, 1);
}

enum { I_TYPE, I_ROLE, I_CONTENT, I_CALL_ID, I_NAME, I_ARGS, I_OUTPUT, I_NS };
static const px_fkey_t item_keys[] = {PX_FK("type"), PX_FK("role"), PX_FK("content"),
                                      PX_FK("call_id"), PX_FK("name"), PX_FK("arguments"),
                                      PX_FK("output"), PX_FK("namespace")};

static int decode_item(px_fw_t *w, px_freq_t *ir, px_arena_t *a) {
  px_fv_t f[NKEYS(item_keys)];
  unsigned seen = 0;
  if (px_fw_kfields(w, item_keys, NKEYS(item_keys), f, &seen) != 0) return DECLINE;
  px_fstr_t type = HAS(I_TYPE) && f[I_TYPE].kind == PX_FV_STR ? f[I_TYPE].s : (px_fstr_t){0};
  if (type.p == NULL || px_fs_is(type, "message")) {
    if (!HAS(I_ROLE) || f[I_ROLE].kind != PX_FV_STR) return DECLINE;
    px_fstr_t role = f[I_ROLE].s;
    px_fv_t none = {PX_FV_NULL, {0}, {NULL, 0}};
    const px_fv_t *c = HAS(I_CONTENT) ? &f[I_CONTENT] : &none;
    int sys = px_fs_is(role, "system") ? 1 : px_fs_is(role, "developer") ? 2 : 0;
    px_fpart_t **head, **tail;
    px_fmsg_t *m = NULL;
    if (sys) {
      head = &ir->system;
      tail = &ir->system_last;
    } else if (px_fs_is(role, "user")) {
      if (c->kind != PX_FV_STR && c->kind != PX_FV_ARR) return DECLINE;
      m = px_fmsg_push(ir, a, 0);
    } else if (px_fs_is(role, "assistant")) {
      if (c->kind != PX_FV_STR && c->kind != PX_FV_ARR) return DECLINE;
      m = asst_msg(ir, a);
    } else {
      return DECLINE;
    }
    if (!sys) {
      if (m == NULL) return DECLINE;
      head = &m->parts;
      tail = &m->last;
    }
    if (c->kind == PX_FV_STR) {
      px_fpart_t *p = px_fpart_text(a, c->s);
      if (p == NULL) return DECLINE;
      p->developer = sys == 2;
      px_fpart_push(head, tail, p);
      return 0;
    }
    if (c->kind != PX_FV_ARR) return DECLINE;
    return text_parts(c, head, tail, sys, m != NULL && m->assistant, a);
  }
  if (px_fs_is(type, "function_call")) {
    if (!HAS(I_CALL_ID) || f[I_CALL_ID].kind != PX_FV_STR || !HAS(I_NAME) ||
        f[I_NAME].kind != PX_FV_STR || !HAS(I_ARGS) || f[I_ARGS].kind != PX_FV_STR)
      return DECLINE;
    if (HAS(I_NS) && f[I_NS].kind == PX_FV_STR) return DECLINE; /* lossy there */
    px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
    if (p == NULL) return DECLINE;
    p->id = f[I_CALL_ID].s;
    p->name = f[I_NAME].s;
    p->args = f[I_ARGS].s;
    /* valid JSON there; objects are the shape taken here */
    if (px_fast_args_object(a, p) != 0) return DECLINE;
    px_fmsg_t *m = asst_msg(ir, a);
    if (m == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, p);
    return 0;
  }
  if (px_fs_is(type, "function_call_output")) {
    if (!HAS(I_CALL_ID) || f[I_CALL_ID].kind != PX_FV_STR || !HAS(I_OUTPUT)) return DECLINE;
    px_fpart_t *res = px_fpart_new(a, PX_FP_TOOL_RESULT), *tail = NULL;
    if (res == NULL) return DECLINE;
    res->id = f[I_CALL_ID].s;
    const px_fv_t *o = &f[I_OUTPUT];
    if (o->kind == PX_FV_STR) {
      if (o->s.n > 0) {
        res->content = px_fpart_text(a, o->s);
        if (res->content == NULL) return DECLINE;
      }
    } else if (o->kind == PX_FV_ARR) {
      if (text_parts(o, &res->content, &tail, 0, 0, a) != 0) return DECLINE;
    } else {
      return DECLINE;
    }
    /* joins the user message whose last part is a tool result */
    px_fmsg_t *m = ir->msgs_last;
    if (m == NULL || m->assistant || m->last == NULL || m->last->type != PX_FP_TOOL_RESULT)
      m = px_fmsg_push(ir, a, 0);
    if (m == NULL) return DECLINE;
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
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("name"), PX_FK("description"),
                                     PX_FK("parameters"), PX_FK("strict"),
                                     PX_FK("defer_loading")};
    px_fv_t f[6];
    unsigned seen = 0;
    if (px_fw_kfields(&w, keys, 6, f, &seen) != 0 || !HAS(0) || f[0].kind != PX_FV_STR ||
        !px_fs_is(f[0].s, "function") || !HAS(1) || f[1].kind != PX_FV_STR)
      return DECLINE;
    if (HAS(5) && f[5].kind == PX_FV_TRUE) return DECLINE;
    if (px_ftool_push(ir, a, f[1].s, HAS(2) ? &f[2] : NULL, HAS(3) ? &f[3] : NULL,
                      HAS(4) ? &f[4] : NULL, PX_FAST_OPENAI_PARAMS) == NULL)
      return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

static int decode_tool_choice(const px_fv_t *v, px_freq_t *ir) {
  if (v->kind == PX_FV_STR) return px_fast_openai_tc(v->s, ir);
  if (v->kind != PX_FV_OBJ) return DECLINE;
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("name")};
  px_fv_t f[2];
  unsigned seen = 0;
  if (px_fv_kfields(v, keys, 2, f, &seen) != 0 || !HAS(0) || f[0].kind != PX_FV_STR ||
      !px_fs_is(f[0].s, "function") || !HAS(1) || f[1].kind != PX_FV_STR)
    return DECLINE;
  ir->tool_choice = PX_FTC_TOOL;
  ir->tc_name = f[1].s;
  return 0;
}

/* text: {format: {"type":"text"} | null, verbosity: null} */
static int decode_text(const px_fv_t *v, px_freq_t *ir) {
  if (v->kind != PX_FV_OBJ) return DECLINE;
  static const px_fkey_t keys[] = {PX_FK("format"), PX_FK("verbosity")};
  static const px_fkey_t fkeys[] = {PX_FK("type")};
  px_fv_t f[2], g[1];
  unsigned seen = 0, fseen = 0;
  if (px_fv_kfields(v, keys, 2, f, &seen) != 0) return DECLINE;
  if (HAS(1) && f[1].kind != PX_FV_NULL) return DECLINE;
  if (!HAS(0) || f[0].kind == PX_FV_NULL) return 0;
  if (f[0].kind != PX_FV_OBJ || px_fv_kfields(&f[0], fkeys, 1, g, &fseen) != 0 || !fseen ||
      g[0].kind != PX_FV_STR || !px_fs_is(g[0].s, "text"))
    return DECLINE;
  ir->rf_text = 1;
  return 0;
}

enum { K_MODEL, K_INSTR, K_INPUT, K_TOOLS, K_TC, K_PAR, K_MAX, K_TEMP, K_TOPP, K_TEXT,
       K_USER, K_META, K_STREAM, K_STORE, K_INCLUDE, K_TRUNC };
static const px_fkey_t top_keys[] = {PX_FK("model"), PX_FK("instructions"), PX_FK("input"),
                                     PX_FK("tools"), PX_FK("tool_choice"),
                                     PX_FK("parallel_tool_calls"),
                                     PX_FK("max_output_tokens"), PX_FK("temperature"),
                                     PX_FK("top_p"), PX_FK("text"), PX_FK("user"),
                                     PX_FK("metadata"), PX_FK("stream"), PX_FK("store"),
                                     PX_FK("include"), PX_FK("truncation")};

static int resp_fast_decode_request(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                    px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy) {
  (void)ctx;
  (void)lossy;
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  px_fv_t f[NKEYS(top_keys)];
  unsigned seen = 0, any = 0; /* any: also the null ones (repeats) */
  int r;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    int ki = px_fk_of(k, top_keys, NKEYS(top_keys));
    px_fv_t v;
    if (px_fw_value(&w, &v) < 0 || k.esc) return DECLINE;
    if (ki >= 0 && px_fw_seen_twice(&any, ki)) return DECLINE;
    if (v.kind == PX_FV_NULL) continue; /* null = not given, for every field */
    if (ki < 0) return DECLINE;
    seen |= 1u << ki;
    f[ki] = v;
  }
  if (r < 0 || !HAS(K_INPUT)) return DECLINE;
  if (HAS(K_MODEL) && f[K_MODEL].kind != PX_FV_STR) return DECLINE;
  if (HAS(K_INSTR)) {
    if (f[K_INSTR].kind != PX_FV_STR) return DECLINE;
    if (f[K_INSTR].s.n > 0) {
      px_fpart_t *p = px_fpart_text(a, f[K_INSTR].s);
      if (p == NULL) return DECLINE;
      px_fpart_push(&ir->system, &ir->system_last, p);
    }
  }
  if (HAS(K_TOOLS) && decode_tools(&f[K_TOOLS], ir, a) != 0) return DECLINE;
  if (HAS(K_TC) && decode_tool_choice(&f[K_TC], ir) != 0) return DECLINE;
  ir->parallel = -1;
  if (HAS(K_PAR) && f[K_PAR].kind == PX_FV_TRUE) ir->parallel = 1;
  if (HAS(K_PAR) && f[K_PAR].kind == PX_FV_FALSE) ir->parallel = 0;
  if (HAS(K_MAX)) {
    if (f[K_MAX].kind != PX_FV_NUM || px_fw_uint(f[K_MAX].raw, &ir->max_tokens_v) < 0 ||
        ir->max_tokens_v < 1)
      return DECLINE;
    ir->max_tokens = f[K_MAX].raw;
  }
  if (HAS(K_TEMP)) {
    if (f[K_TEMP].kind != PX_FV_NUM) return DECLINE;
    ir->temperature = f[K_TEMP].raw;
  }
  if (HAS(K_TOPP)) {
    if (f[K_TOPP].kind != PX_FV_NUM) return DECLINE;
    ir->top_p = f[K_TOPP].raw;
  }
  if (HAS(K_TEXT) && decode_text(&f[K_TEXT], ir) != 0) return DECLINE;
  if (HAS(K_USER) && f[K_USER].kind == PX_FV_STR) ir->user = f[K_USER].s;
  if (HAS(K_META) && f[K_META].kind == PX_FV_OBJ && !px_fw_empty(f[K_META].raw))
    ir->metadata = f[K_META].raw;
  if (HAS(K_STREAM)) {
    if (f[K_STREAM].kind == PX_FV_TRUE) ir->stream_true = 1;
    if (f[K_STREAM].kind == PX_FV_FALSE) ir->stream_false = 1;
  }
  if (HAS(K_STORE) && f[K_STORE].kind == PX_FV_TRUE) return DECLINE;
  if (HAS(K_INCLUDE) && f[K_INCLUDE].kind == PX_FV_ARR && !px_fw_empty(f[K_INCLUDE].raw))
    return DECLINE;
  if (HAS(K_TRUNC) && f[K_TRUNC].kind == PX_FV_STR && !px_fs_is(f[K_TRUNC].s, "disabled"))
    return DECLINE;
  if (ir->tools == NULL) {
    /* tool_choice and parallel_tool_calls mean nothing without tools */
    if (ir->tool_choice == PX_FTC_REQUIRED || ir->tool_choice == PX_FTC_TOOL) return DECLINE;
    ir->tool_choice = PX_FTC_UNSET;
    ir->parallel = -1;
  }
  const px_fv_t *in = &f[K_INPUT];
  if (in->kind == PX_FV_STR) {
    px_fmsg_t *m = px_fmsg_push(ir, a, 0);
    px_fpart_t *p = px_fpart_text(a, in->s);
    if (m == NULL || p == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, p);
    return 0;
  }
  if (in->kind != PX_FV_ARR) return DECLINE;
  px_fw_t iw = {in->raw.ptr, in->raw.len, 0};
  if (px_fw_open(&iw, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&iw)) == 1)
    if (decode_item(&iw, ir, a) != 0) return DECLINE;
  return r < 0 ? DECLINE : 0;
}

/* ======================================================================== */
/* Request encode                                                            */

static int put_output(px_buf_t *b, const px_fpart_t *p, px_lossy_t *lossy) {
  if (p->is_error) px_lossy_add(lossy, "messages[].content[].is_error");
  int rc = px_fb_lit(b, "{\"type\":\"function_call_output\",\"call_id\":");
  if (rc == 0) rc = px_fb_str(b, p->id);
  if (rc == 0) rc = px_fb_lit(b, ",\"output\":\"");
  if (rc == 0) rc = px_fb_texts(b, p->content);
  if (rc == 0) rc = px_fb_lit(b, "\"}");
  return rc;
}

static int put_call(px_buf_t *b, const px_fpart_t *p) {
  int rc = px_fb_lit(b, "{\"type\":\"function_call\",\"call_id\":");
  if (rc == 0) rc = px_fb_str(b, p->id);
  if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
  if (rc == 0) rc = px_fb_str(b, p->name);
  if (rc == 0) rc = px_fb_lit(b, ",\"arguments\":");
  if (rc == 0) rc = px_fb_str(b, p->args.p ? p->args : (px_fstr_t){"{}", 2, 0});
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* a run of text parts [from, to) -> one message item */
static int put_text_msg(px_buf_t *b, int assistant, const px_fpart_t *from,
                        const px_fpart_t *to, int *first, px_lossy_t *lossy) {
  int rc = px_fb_lit(b, *first ? "{\"type\":\"message\",\"role\":"
                               : ",{\"type\":\"message\",\"role\":");
  *first = 0;
  if (rc == 0) rc = px_fb_lit(b, assistant ? "\"assistant\",\"content\":["
                                           : "\"user\",\"content\":[");
  for (const px_fpart_t *p = from; p != to && rc == 0; p = p->next) {
    if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
    if (p != from) rc = px_fb_lit(b, ",");
    if (rc == 0)
      rc = px_fb_lit(b, assistant ? "{\"type\":\"output_text\",\"text\":"
                                  : "{\"type\":\"input_text\",\"text\":");
    if (rc == 0) rc = px_fb_str(b, p->text);
    if (rc == 0) rc = px_fb_lit(b, assistant ? ",\"annotations\":[]}" : "}");
  }
  if (rc == 0) rc = px_fb_lit(b, "]}");
  return rc;
}

static int resp_fast_encode_request(const px_tr_ctx_t *ctx, const px_freq_t *ir,
                                    px_buf_t *b, px_arena_t *a, px_lossy_t *lossy) {
  (void)a;
  int rc = px_fb_lit(b, "{\"model\":");
  if (rc == 0) rc = px_buf_json_str(b, ctx->upstream_model, strlen(ctx->upstream_model));
  if (rc == 0 && ir->system != NULL) {
    rc = px_fb_lit(b, ",\"instructions\":\"");
    for (const px_fpart_t *p = ir->system; p && rc == 0; p = p->next) {
      if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
      if (p != ir->system) rc = px_fb_lit(b, "\\n\\n");
      if (rc == 0 && p->text.n) rc = px_fb_put(b, p->text.p, p->text.n);
    }
    if (rc == 0) rc = px_fb_lit(b, "\"");
  }
  if (rc == 0) rc = px_fb_lit(b, ",\"input\":[");
  int first = 1;
  for (const px_fmsg_t *m = ir->msgs; m && rc == 0; m = m->next) {
    const px_fpart_t *run = NULL; /* pending text parts */
    for (const px_fpart_t *p = m->parts; p && rc == 0; p = p->next) {
      if (p->type == PX_FP_TEXT) {
        if (run == NULL) run = p;
        continue;
      }
      if (run != NULL) rc = put_text_msg(b, m->assistant, run, p, &first, lossy);
      run = NULL;
      if (rc != 0) break;
      if (p->type == PX_FP_TOOL_RESULT)
        for (const px_fpart_t *c = p->content; c; c = c->next)
          if (c->type != PX_FP_TEXT) return DECLINE;
      if (!first) rc = px_fb_lit(b, ",");
      first = 0;
      if (rc == 0)
        rc = p->type == PX_FP_TOOL_RESULT ? put_output(b, p, lossy) : put_call(b, p);
    }
    if (rc == 0 && run != NULL) rc = put_text_msg(b, m->assistant, run, NULL, &first, lossy);
  }
  if (rc == 0) rc = px_fb_lit(b, "]");
  if (rc == 0 && ir->tools != NULL) {
    rc = px_fb_lit(b, ",\"tools\":[");
    for (const px_ftool_t *t = ir->tools; t && rc == 0; t = t->next) {
      rc = px_fb_lit(b, t == ir->tools ? "{\"type\":\"function\",\"name\":"
                                       : ",{\"type\":\"function\",\"name\":");
      if (rc == 0) rc = px_fb_str(b, t->name);
      if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", t->desc);
      if (rc == 0) rc = px_fb_lit(b, ",\"parameters\":");
      if (rc == 0) rc = px_fb_raw(b, t->params);
      if (rc == 0) rc = px_fb_lit(b, t->strict == 1 ? ",\"strict\":true}" : ",\"strict\":false}");
      if (t->cache_control.ptr) px_lossy_add(lossy, "cache_control");
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
  }
  if (rc == 0 && ir->tool_choice == PX_FTC_TOOL) {
    rc = px_fb_lit(b, ",\"tool_choice\":{\"type\":\"function\",\"name\":");
    if (rc == 0) rc = px_fb_str(b, ir->tc_name);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (rc == 0) rc = px_fb_openai_tc(b, ir->tool_choice, ir->parallel);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"max_output_tokens\":", ir->max_tokens);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"temperature\":", ir->temperature);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"top_p\":", ir->top_p);
  if (ir->top_k.ptr) px_lossy_add(lossy, "top_k");
  if (ir->stop.ptr || ir->stop1.p)
    px_lossy_add(lossy, px_in_names(ctx)->stop);
  if (rc == 0 && ir->rf_text) rc = px_fb_lit(b, ",\"text\":{\"format\":{\"type\":\"text\"}}");
  if (rc == 0) rc = px_fb_opt_str(b, ",\"user\":", ir->user);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"metadata\":", ir->metadata);
  if (rc == 0 && ir->stream_false) rc = px_fb_lit(b, ",\"stream\":false");
  if (rc == 0 && ir->stream_true) rc = px_fb_lit(b, ",\"stream\":true");
  /* stateless toward Responses (no reasoning in this shape: no include) */
  if (rc == 0 && !px_tr_in_can(ctx, PX_CAP_STORED_RESPONSES))
    rc = px_fb_lit(b, ",\"store\":false");
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* ======================================================================== */
/* Response decode                                                           */

/* a message item's content array at the cursor (checked reads) */
static int decode_message_content(px_fw_t *w, px_fresp_t *ir, px_arena_t *a) {
  int r, first = 1;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fc_elem(w, &first)) == 1) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text"), PX_FK("annotations"),
                                     PX_FK("logprobs")};
    px_fv_t f[4];
    unsigned seen = 0;
    if (px_fc_fields(w, keys, 4, f, &seen) != 0) return DECLINE;
    if (!HAS(0) || f[0].kind != PX_FV_STR) continue; /* no type: skipped there */
    if (!px_fs_is(f[0].s, "output_text")) return DECLINE; /* refusal, others */
    if (HAS(2) && f[2].kind == PX_FV_ARR && !px_fw_empty(f[2].raw)) return DECLINE;
    if (HAS(3) && f[3].kind == PX_FV_ARR && !px_fw_empty(f[3].raw)) return DECLINE;
    px_fpart_t *p = px_fpart_text(
        a, HAS(1) && f[1].kind == PX_FV_STR ? f[1].s : (px_fstr_t){"", 0, 0});
    if (p == NULL) return DECLINE;
    px_fpart_push(&ir->content, &ir->last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* the output array at the cursor, checked as it is read; a message's
 * content is decoded where it stands when its type came first (as
 * OpenAI writes it), else from its span after the item */
enum { O_TYPE, O_CONTENT, O_CALL_ID, O_NAME, O_ARGS, O_NS };
static const px_fkey_t out_keys[] = {PX_FK("type"),    PX_FK("content"),
                                     PX_FK("call_id"), PX_FK("name"),
                                     PX_FK("arguments"), PX_FK("namespace")};

static int decode_output(px_fw_t *w, px_fresp_t *ir, px_arena_t *a, int *has_tool) {
  int r, first = 1;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fc_elem(w, &first)) == 1) {
    px_fv_t f[NKEYS(out_keys)];
    px_fstr_t k;
    unsigned seen = 0;
    int ri, ifirst = 1, content_done = 0;
    if (px_fw_open(w, '{') < 0) return DECLINE;
    while ((ri = px_fc_member(w, &k, &ifirst)) == 1) {
      int ki = px_fk_of(k, out_keys, NKEYS(out_keys));
      if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
      if (ki == O_CONTENT && HAS(O_TYPE) && f[O_TYPE].kind == PX_FV_STR &&
          px_fs_is(f[O_TYPE].s, "message") && w->p[w->i] == '[') {
        if (decode_message_content(w, ir, a) != 0) return DECLINE;
        content_done = 1;
        continue;
      }
      px_fv_t v;
      if (px_fc_value(w, &v) < 0) return DECLINE;
      if (ki >= 0) f[ki] = v;
    }
    if (ri < 0) return DECLINE;
    if (!HAS(O_TYPE) || f[O_TYPE].kind != PX_FV_STR) continue;
    if (px_fs_is(f[O_TYPE].s, "message")) {
      if (HAS(O_CONTENT) && !content_done && f[O_CONTENT].kind == PX_FV_ARR) {
        px_fw_t cw = {f[O_CONTENT].raw.ptr, f[O_CONTENT].raw.len, 0};
        if (decode_message_content(&cw, ir, a) != 0) return DECLINE;
      }
    } else if (px_fs_is(f[O_TYPE].s, "function_call")) {
      if (HAS(O_NS) && f[O_NS].kind == PX_FV_STR) return DECLINE; /* lossy there */
      px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
      if (p == NULL) return DECLINE;
      px_fstr_t empty = {"", 0, 0};
      p->id = HAS(O_CALL_ID) && f[O_CALL_ID].kind == PX_FV_STR ? f[O_CALL_ID].s : empty;
      p->name = HAS(O_NAME) && f[O_NAME].kind == PX_FV_STR ? f[O_NAME].s : empty;
      p->args = HAS(O_ARGS) && f[O_ARGS].kind == PX_FV_STR ? f[O_ARGS].s : empty;
      *has_tool = 1;
      px_fpart_push(&ir->content, &ir->last, p);
    } else {
      return DECLINE; /* reasoning, hosted tools ...: the jansson codec */
    }
  }
  return r < 0 ? DECLINE : 0;
}

/* The body is read once and checked as it is read (px_fc_*: the hub scans
 * nothing before): output and usage are decoded where they stand, every
 * other member is checked and skipped. */
enum { R_ID, R_MODEL, R_CREATED, R_STATUS, R_OUTPUT, R_USAGE, R_INCOMPLETE };
static const px_fkey_t resp_keys[] = {PX_FK("id"),     PX_FK("model"), PX_FK("created_at"),
                                      PX_FK("status"), PX_FK("output"), PX_FK("usage"),
                                      PX_FK("incomplete_details")};

static int resp_fast_decode_response(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                     px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy) {
  (void)ctx;
  (void)lossy;
  px_fv_t f[NKEYS(resp_keys)];
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  int r, first = 1, has_tool = 0;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fc_member(&w, &k, &first)) == 1) {
    int ki = px_fk_of(k, resp_keys, NKEYS(resp_keys));
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == R_OUTPUT) {
      if (px_fw_peek(&w) != PX_FV_ARR || decode_output(&w, ir, a, &has_tool) != 0)
        return DECLINE;
    } else if (ki == R_USAGE && px_fw_peek(&w) == PX_FV_OBJ) {
      static const px_fkey_t ukeys[] = {PX_FK("input_tokens"), PX_FK("output_tokens"),
                                        PX_FK("input_tokens_details"),
                                        PX_FK("output_tokens_details")};
      if (px_fc_openai_usage(&w, ukeys, ir) != 0) return DECLINE;
    } else {
      px_fv_t v;
      if (px_fc_value(&w, &v) < 0) return DECLINE;
      if (ki >= 0) f[ki] = v;
    }
  }
  if (r < 0 || px_fc_end(&w) < 0 || !HAS(R_OUTPUT)) return DECLINE;
  if (!HAS(R_USAGE)) ir->usage_known = 1, ir->usage_in = ir->usage_out = -1;
  /* finished answers only: completed, or incomplete with a reason */
  int incomplete = 0;
  if (HAS(R_STATUS) && f[R_STATUS].kind == PX_FV_STR) {
    if (px_fs_is(f[R_STATUS].s, "incomplete")) incomplete = 1;
    else if (!px_fs_is(f[R_STATUS].s, "completed")) return DECLINE;
  }
  ir->id = HAS(R_ID) && f[R_ID].kind == PX_FV_STR ? f[R_ID].s : (px_fstr_t){"", 0, 0};
  if (HAS(R_MODEL) && f[R_MODEL].kind == PX_FV_STR) ir->model = f[R_MODEL].s;
  if (px_fast_created(HAS(R_CREATED) ? &f[R_CREATED] : NULL, ir) != 0) return DECLINE;
  if (incomplete) {
    /* the reason decides content_filter / max_tokens */
    static const px_fkey_t dkeys[] = {PX_FK("reason")};
    px_fstr_t reason = {0};
    px_fv_t g[1];
    unsigned ds = 0;
    if (HAS(R_INCOMPLETE) && f[R_INCOMPLETE].kind == PX_FV_OBJ) {
      if (px_fv_kfields(&f[R_INCOMPLETE], dkeys, 1, g, &ds) != 0) return DECLINE;
      if (ds && g[0].kind == PX_FV_STR) reason = g[0].s;
      if (reason.esc) return DECLINE;
    }
    ir->stop = px_fs_is(reason, "content_filter") ? PX_STOP_CONTENT_FILTER
                                                  : PX_STOP_MAX_TOKENS;
  } else {
    ir->stop = has_tool ? PX_STOP_TOOL_USE : PX_STOP_END_TURN;
  }
  return 0;
}

/* ======================================================================== */
/* Response encode                                                           */

/* ids as responses.c makes them: prefix + id unless id has it already */
static int put_prefixed(px_buf_t *b, const char *prefix, px_fstr_t id) {
  size_t pl = strlen(prefix);
  int rc = 0;
  if (!(id.n >= pl && memcmp(id.p, prefix, pl) == 0)) rc = px_fb_lit(b, prefix);
  if (rc == 0 && id.n) rc = px_fb_put(b, id.p, id.n);
  return rc;
}

static int resp_fast_encode_response(const px_tr_ctx_t *ctx, const px_fresp_t *ir,
                                     px_buf_t *b, px_arena_t *a, px_lossy_t *lossy) {
  (void)a;
  /* ids go through fixed buffers there (long ones are cut): short plain ones here */
  px_fstr_t uid = ir->id.p && ir->id.n ? ir->id : (px_fstr_t){"proxai", 6, 0};
  if (uid.esc || uid.n > 100) return DECLINE;
  for (const px_fpart_t *p = ir->content; p; p = p->next)
    if (p->type == PX_FP_TOOL_CALL && (p->id.esc || p->id.n > 100)) return DECLINE;
  px_fstr_t base = uid; /* item ids: the id without "resp_" */
  if (base.n > 5 && memcmp(base.p, "resp_", 5) == 0) {
    base.p += 5;
    base.n -= 5;
  }
  px_stop_t stop = ir->stop == PX_STOP_NONE ? PX_STOP_END_TURN : ir->stop;
  const char *reason = NULL;
  const char *status = px_stop_to_responses(stop, 0, &reason);
  int rc = px_fb_lit(b, "{\"id\":\"");
  if (rc == 0 && ctx->resp_id != NULL) /* ids of kept responses are plain */
    rc = px_fb_lit(b, ctx->resp_id);
  else if (rc == 0)
    rc = put_prefixed(b, "resp_", uid);
  if (rc == 0) rc = px_fb_lit(b, "\",\"object\":\"response\",\"created_at\":");
  if (rc == 0) rc = px_fb_i64(b, ir->has_created ? ir->created : ctx->created);
  if (rc == 0) rc = px_fb_lit(b, ",\"status\":\"");
  if (rc == 0) rc = px_fb_lit(b, status);
  if (rc == 0) rc = px_fb_lit(b, "\",\"error\":null,\"incomplete_details\":");
  if (rc == 0 && reason != NULL) {
    rc = px_fb_lit(b, "{\"reason\":\"");
    if (rc == 0) rc = px_fb_lit(b, reason);
    if (rc == 0) rc = px_fb_lit(b, "\"}");
  } else if (rc == 0) {
    rc = px_fb_lit(b, "null");
  }
  if (rc == 0) rc = px_fb_lit(b, ",\"instructions\":null,\"max_output_tokens\":null,\"model\":");
  /* the client's model, else the upstream's (as the hub's pipeline sets it) */
  if (rc == 0)
    rc = ctx->client_model ? px_buf_json_str(b, ctx->client_model, strlen(ctx->client_model))
         : ir->model.p     ? px_fb_str(b, ir->model)
                           : px_fb_lit(b, "\"\"");
  if (rc == 0) rc = px_fb_lit(b, ",\"output\":[");
  int oi = 0, nmsg = 0, in_msg = 0;
  for (const px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
    if (p->type == PX_FP_TEXT) {
      if (!in_msg) {
        if (oi > 0) rc = px_fb_lit(b, "]}");
        if (rc == 0 && oi > 0) rc = px_fb_lit(b, ",");
        if (rc == 0) rc = px_fb_lit(b, "{\"id\":\"");
        if (rc == 0) rc = put_prefixed(b, "msg_", base);
        if (rc == 0 && nmsg > 0) {
          rc = px_fb_lit(b, "_");
          if (rc == 0) rc = px_fb_i64(b, nmsg);
        }
        nmsg++;
        if (rc == 0)
          rc = px_fb_lit(b, "\",\"type\":\"message\",\"status\":\"completed\",\"role\":"
                            "\"assistant\",\"content\":[");
        in_msg = 1;
        oi++;
      } else {
        rc = px_fb_lit(b, ",");
      }
      if (rc == 0) rc = px_fb_lit(b, "{\"type\":\"output_text\",\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text);
      if (rc == 0) rc = px_fb_lit(b, ",\"annotations\":[]}");
      continue;
    }
    if (in_msg) rc = px_fb_lit(b, "]}");
    in_msg = 0;
    if (rc == 0 && oi > 0) rc = px_fb_lit(b, ",");
    if (rc == 0) rc = px_fb_lit(b, "{\"id\":\"");
    if (rc == 0 && p->id.n) {
      rc = put_prefixed(b, "fc_", p->id);
    } else if (rc == 0) {
      rc = px_fb_lit(b, "fc_");
      if (rc == 0) rc = px_fb_put(b, base.p, base.n);
      if (rc == 0) rc = px_fb_lit(b, "_");
      if (rc == 0) rc = px_fb_i64(b, oi);
    }
    if (rc == 0)
      rc = px_fb_lit(b, "\",\"type\":\"function_call\",\"status\":\"completed\",\"call_id\":");
    if (rc == 0) rc = px_fb_str(b, p->id);
    if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
    if (rc == 0) rc = px_fb_str(b, p->name);
    if (rc == 0) rc = px_fb_lit(b, ",\"arguments\":");
    if (rc == 0) rc = px_fb_str(b, p->args.p ? p->args : (px_fstr_t){"", 0, 0});
    if (rc == 0) rc = px_fb_lit(b, "}");
    oi++;
  }
  if (rc == 0 && in_msg) rc = px_fb_lit(b, "]}");
  if (rc == 0)
    rc = px_fb_lit(b, "],\"parallel_tool_calls\":true,\"previous_response_id\":");
  if (rc == 0 && ctx->prev_id != NULL &&
      ctx->prev_id[0]) { /* plain: checked at admission */
    rc = px_fb_lit(b, "\"");
    if (rc == 0) rc = px_fb_lit(b, ctx->prev_id);
    if (rc == 0) rc = px_fb_lit(b, "\"");
  } else if (rc == 0) {
    rc = px_fb_lit(b, "null");
  }
  if (rc == 0 && ctx->resp_id != NULL) rc = px_fb_lit(b, ",\"store\":true");
  if (rc == 0)
    rc = px_fb_lit(b,
                   ",\"temperature\":null,\"tool_choice\":\"auto\",\"tools\":[],"
                   "\"top_p\":null,\"metadata\":{}");
  if (rc == 0 && ir->has_usage) {
    int64_t in = ir->in < 0 ? 0 : ir->in, out = ir->out < 0 ? 0 : ir->out;
    int64_t cr = ir->cache_read < 0 ? 0 : ir->cache_read;
    int64_t rt = ir->reasoning < 0 ? 0 : ir->reasoning;
    rc = px_fb_lit(b, ",\"usage\":{\"input_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, in);
    if (rc == 0) rc = px_fb_lit(b, ",\"input_tokens_details\":{\"cached_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, cr);
    if (rc == 0) rc = px_fb_lit(b, "},\"output_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, out);
    if (rc == 0) rc = px_fb_lit(b, ",\"output_tokens_details\":{\"reasoning_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, rt);
    if (rc == 0) rc = px_fb_lit(b, "},\"total_tokens\":");
    if (rc == 0) rc = px_fb_i64(b, in + out);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (ir->stop_sequence.p) px_lossy_add(lossy, "stop_sequence");
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

const px_fast_ops_t px_responses_fast = {
    .decode_request = resp_fast_decode_request,
    .encode_request = resp_fast_encode_request,
    .decode_response = resp_fast_decode_response,
    .encode_response = resp_fast_encode_response,
    .response_checked = 1,
};
