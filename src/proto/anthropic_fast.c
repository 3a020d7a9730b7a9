/* anthropic_fast.c - the fast codec of Anthropic Messages bodies
 * (include/proxai/fastir.h): the common shape of a request (text, tool
 * use and results, tools, sampling parameters) and of a response (text and
 * tool use), read and written without a jansson document. Anything else
 * declines to the jansson codec in anthropic.c, the reference: every rule
 * here is that codec's rule for the same shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/protoutil.h"

#define DECLINE PX_FAST_DECLINE
#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define PX_ANTH_DEFAULT_MAX_TOKENS 4096

/* ======================================================================== */
/* Request decode                                                            */

/* system blocks / tool_result content blocks: {type:"text", text, ...} */
enum { TB_TYPE, TB_TEXT, TB_CC, TB_CIT };
static const px_fkey_t text_block_keys[] = {PX_FK("type"), PX_FK("text"),
                                            PX_FK("cache_control"), PX_FK("citations")};

/* One text block; allow_cc: cache_control is kept (system), else it
 * declines (lossy in the jansson codec). Unknown keys are ignored there. */
static int text_block(px_fw_t *w, px_arena_t *a, int allow_cc, px_fpart_t **out) {
  px_fv_t f[NKEYS(text_block_keys)];
  unsigned seen = 0;
#define HAS(x) (seen & (1u << (x)))
  if (px_fw_kfields(w, text_block_keys, NKEYS(text_block_keys), f, &seen) != 0)
    return DECLINE;
  if (!HAS(TB_TYPE) || f[TB_TYPE].kind != PX_FV_STR || !px_fs_is(f[TB_TYPE].s, "text") ||
      !HAS(TB_TEXT) || f[TB_TEXT].kind != PX_FV_STR || (HAS(TB_CC) && !allow_cc) ||
      (HAS(TB_CIT) && f[TB_CIT].kind != PX_FV_NULL))
    return DECLINE;
  px_fpart_t *p = px_fpart_text(a, f[TB_TEXT].s);
  if (p == NULL) return DECLINE;
  if (HAS(TB_CC)) p->cache_control = f[TB_CC].raw;
#undef HAS
  *out = p;
  return 0;
}

static int decode_system(px_fw_t *w, px_freq_t *ir, px_arena_t *a) {
  px_fv_kind_t kind = px_fw_peek(w);
  if (kind == PX_FV_STR) {
    px_fv_t v;
    if (px_fw_value(w, &v) < 0) return DECLINE;
    if (v.s.n > 0) {
      px_fpart_t *p = px_fpart_text(a, v.s);
      if (p == NULL) return DECLINE;
      px_fpart_push(&ir->system, &ir->system_last, p);
    }
    return 0;
  }
  if (kind != PX_FV_ARR || px_fw_open(w, '[') < 0) return DECLINE;
  int r;
  while ((r = px_fw_elem(w)) == 1) {
    px_fpart_t *p;
    if (text_block(w, a, 1, &p) != 0) return DECLINE;
    px_fpart_push(&ir->system, &ir->system_last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* tool_result content: absent/null, a string, or text blocks */
static int tool_result_content(px_fv_t *c, px_fpart_t *part, px_arena_t *a) {
  if (c->kind == PX_FV_NULL) return 0;
  if (c->kind == PX_FV_STR) {
    part->content = px_fpart_text(a, c->s);
    return part->content ? 0 : DECLINE;
  }
  if (c->kind != PX_FV_ARR) return DECLINE;
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  px_fpart_t *tail = NULL;
  int r;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    px_fpart_t *p;
    if (text_block(&w, a, 0, &p) != 0) return DECLINE;
    px_fpart_push(&part->content, &tail, p);
  }
  return r < 0 ? DECLINE : 0;
}

enum { B_TYPE, B_TEXT, B_CC, B_CIT, B_ID, B_NAME, B_INPUT, B_TUID, B_CONTENT, B_ISERR };
static const px_fkey_t block_keys[] = {PX_FK("type"), PX_FK("text"), PX_FK("cache_control"),
                                       PX_FK("citations"), PX_FK("id"), PX_FK("name"),
                                       PX_FK("input"), PX_FK("tool_use_id"),
                                       PX_FK("content"), PX_FK("is_error")};

static int decode_block(px_fw_t *w, int assistant, px_fmsg_t *m, px_arena_t *a) {
  px_fv_t f[NKEYS(block_keys)];
  unsigned seen = 0;
  /* the jansson codec reads only the keys above */
  if (px_fw_kfields(w, block_keys, NKEYS(block_keys), f, &seen) != 0 ||
      !(seen & (1u << B_TYPE)) || f[B_TYPE].kind != PX_FV_STR)
    return DECLINE;
  px_fstr_t t = f[B_TYPE].s;
#define HAS(x) (seen & (1u << (x)))
  px_fpart_t *p;
  if (px_fs_is(t, "text")) {
    if (!HAS(B_TEXT) || f[B_TEXT].kind != PX_FV_STR) return DECLINE;
    if (HAS(B_CIT) && f[B_CIT].kind != PX_FV_NULL) return DECLINE;
    p = px_fpart_text(a, f[B_TEXT].s);
    if (p == NULL) return DECLINE;
    if (HAS(B_CC)) p->cache_control = f[B_CC].raw;
  } else if (px_fs_is(t, "tool_use")) {
    if (!assistant || HAS(B_CC)) return DECLINE;
    if (!HAS(B_ID) || !HAS(B_NAME) || f[B_ID].kind != PX_FV_STR ||
        f[B_NAME].kind != PX_FV_STR)
      return DECLINE;
    p = px_fpart_new(a, PX_FP_TOOL_CALL);
    if (p == NULL) return DECLINE;
    p->id = f[B_ID].s;
    p->name = f[B_NAME].s;
    if (!HAS(B_INPUT)) {
      p->args = (px_fstr_t){"{}", 2, 0};
    } else {
      if (px_fast_dump_value(a, f[B_INPUT].raw, &p->args) != 0) return DECLINE;
      if (f[B_INPUT].kind == PX_FV_OBJ) p->input = f[B_INPUT].raw;
    }
  } else if (px_fs_is(t, "tool_result")) {
    if (assistant || HAS(B_CC)) return DECLINE;
    if (!HAS(B_TUID) || f[B_TUID].kind != PX_FV_STR) return DECLINE;
    p = px_fpart_new(a, PX_FP_TOOL_RESULT);
    if (p == NULL) return DECLINE;
    p->id = f[B_TUID].s;
    if (HAS(B_CONTENT) && tool_result_content(&f[B_CONTENT], p, a) != 0) return DECLINE;
    if (HAS(B_ISERR)) {
      if (f[B_ISERR].kind == PX_FV_TRUE) p->is_error = 1;
      else if (f[B_ISERR].kind != PX_FV_FALSE) return DECLINE;
    }
  } else {
    return DECLINE;
  }
#undef HAS
  px_fpart_push(&m->parts, &m->last, p);
  return 0;
}

static int decode_messages(px_fw_t *w, px_freq_t *ir, px_arena_t *a) {
  int r;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(w)) == 1) {
    static const px_fkey_t keys[] = {PX_FK("role"), PX_FK("content")};
    px_fv_t f[2];
    unsigned seen = 0;
    if (px_fw_kfields(w, keys, 2, f, &seen) != 0 || seen != 3 || f[0].kind != PX_FV_STR)
      return DECLINE;
    px_fstr_t role = f[0].s;
    px_fv_t content = f[1];
    int assistant;
    if (px_fs_is(role, "user")) assistant = 0;
    else if (px_fs_is(role, "assistant")) assistant = 1;
    else return DECLINE; /* system turns: the jansson codec folds them */
    px_fmsg_t *m = px_fmsg_push(ir, a, assistant);
    if (m == NULL) return DECLINE;
    if (content.kind == PX_FV_STR) {
      px_fpart_t *p = px_fpart_text(a, content.s);
      if (p == NULL) return DECLINE;
      px_fpart_push(&m->parts, &m->last, p);
    } else if (content.kind == PX_FV_ARR) {
      px_fw_t cw = {content.raw.ptr, content.raw.len, 0};
      int rc;
      if (px_fw_open(&cw, '[') < 0) return DECLINE;
      while ((rc = px_fw_elem(&cw)) == 1)
        if (decode_block(&cw, assistant, m, a) != 0) return DECLINE;
      if (rc < 0) return DECLINE;
    } else {
      return DECLINE;
    }
  }
  return r < 0 ? DECLINE : 0;
}

enum { T_TYPE, T_NAME, T_DESC, T_SCHEMA, T_STRICT, T_CC };
static const px_fkey_t tool_keys[] = {PX_FK("type"), PX_FK("name"), PX_FK("description"),
                                      PX_FK("input_schema"), PX_FK("strict"),
                                      PX_FK("cache_control")};

static int decode_tools(px_fw_t *w, px_freq_t *ir, px_arena_t *a) {
  int r;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(w)) == 1) {
    px_fstr_t k;
    px_fv_t f[NKEYS(tool_keys)];
    unsigned seen = 0;
    int rm;
    if (px_fw_open(w, '{') < 0) return DECLINE;
    while ((rm = px_fw_member(w, &k)) == 1) {
      int ki = px_fk_of(k, tool_keys, NKEYS(tool_keys));
      px_fv_t v;
      if (ki < 0 || px_fw_value(w, &v) < 0) return DECLINE; /* lossy there */
      if (px_fw_seen_twice(&seen, ki)) return DECLINE;
      f[ki] = v;
    }
#define HAS(x) (seen & (1u << (x)))
    if (rm < 0) return DECLINE;
    if (HAS(T_TYPE) && f[T_TYPE].kind == PX_FV_STR && !px_fs_is(f[T_TYPE].s, "custom"))
      return DECLINE; /* a server tool */
    if (HAS(T_TYPE) && f[T_TYPE].kind != PX_FV_STR) return DECLINE;
    if (!HAS(T_NAME) || f[T_NAME].kind != PX_FV_STR) return DECLINE;
    px_ftool_t *t = px_ftool_push(ir, a, f[T_NAME].s, HAS(T_DESC) ? &f[T_DESC] : NULL,
                                  HAS(T_SCHEMA) ? &f[T_SCHEMA] : NULL,
                                  HAS(T_STRICT) ? &f[T_STRICT] : NULL,
                                  (px_str_t){"{\"type\":\"object\"}", 17});
    if (t == NULL) return DECLINE;
    if (HAS(T_CC)) t->cache_control = f[T_CC].raw;
#undef HAS
  }
  return r < 0 ? DECLINE : 0;
}

static int decode_tool_choice(px_fw_t *w, px_freq_t *ir) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("name"),
                                   PX_FK("disable_parallel_tool_use")};
  px_fv_t f[3];
  unsigned seen = 0;
  if (px_fw_kfields(w, keys, 3, f, &seen) != 0) return DECLINE;
  if ((seen & 1) && f[0].kind != PX_FV_STR) return DECLINE;
  px_fstr_t type = (seen & 1) ? f[0].s : (px_fstr_t){0};
  px_fstr_t name = (seen & 2) && f[1].kind == PX_FV_STR ? f[1].s : (px_fstr_t){0};
  int disable = (seen & 4) && f[2].kind == PX_FV_TRUE;
  if (px_fs_is(type, "auto")) ir->tool_choice = PX_FTC_AUTO;
  else if (px_fs_is(type, "any")) ir->tool_choice = PX_FTC_REQUIRED;
  else if (px_fs_is(type, "none")) ir->tool_choice = PX_FTC_NONE;
  else if (px_fs_is(type, "tool") && name.p != NULL) {
    ir->tool_choice = PX_FTC_TOOL;
    ir->tc_name = name;
  } else
    return DECLINE;
  if (disable) ir->parallel = 0;
  return 0;
}

static int decode_metadata(px_fw_t *w, px_freq_t *ir) {
  px_fstr_t k;
  px_fv_t v;
  int r, nu = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) return px_fw_value(w, &v) < 0 ? DECLINE : 0;
  if (px_fw_open(w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    if (px_fw_value(w, &v) < 0 || k.esc) return DECLINE;
    if (px_fs_is(k, "user_id") && nu++) return DECLINE; /* the last one counts there */
    if (px_fs_is(k, "user_id") && v.kind == PX_FV_STR) {
      ir->user = v.s;
    } else if (v.kind != PX_FV_NULL) {
      return DECLINE; /* lossy "metadata" there */
    }
  }
  return r < 0 ? DECLINE : 0;
}

enum { K_MODEL, K_SYSTEM, K_MESSAGES, K_MAX, K_TEMP, K_TOPP, K_TOPK, K_STOP, K_STREAM,
       K_TOOLS, K_TC, K_META };
static const px_fkey_t top_keys[] = {PX_FK("model"), PX_FK("system"), PX_FK("messages"),
                                     PX_FK("max_tokens"), PX_FK("temperature"),
                                     PX_FK("top_p"), PX_FK("top_k"),
                                     PX_FK("stop_sequences"), PX_FK("stream"),
                                     PX_FK("tools"), PX_FK("tool_choice"), PX_FK("metadata")};

static int anth_fast_decode_request(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                    px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy) {
  (void)ctx;
  (void)lossy;
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  int r;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    int ki = px_fk_of(k, top_keys, NKEYS(top_keys));
    if (ki < 0 || px_fw_seen_twice(&seen, ki)) return DECLINE;
    px_fv_t v;
    if (px_fw_peek(&w) == PX_FV_NULL && ki != K_MESSAGES) {
      if (px_fw_value(&w, &v) < 0) return DECLINE;
      continue; /* a null member is no member there */
    }
    int rc = 0;
    switch (ki) {
      case K_SYSTEM: rc = decode_system(&w, ir, a); break;
      case K_MESSAGES: rc = decode_messages(&w, ir, a); break;
      case K_TOOLS: rc = decode_tools(&w, ir, a); break;
      case K_TC: rc = decode_tool_choice(&w, ir); break;
      case K_META: rc = decode_metadata(&w, ir); break;
      default:
        if (px_fw_value(&w, &v) < 0) return DECLINE;
        if (ki == K_MAX) {
          if (v.kind != PX_FV_NUM || px_fw_uint(v.raw, &ir->max_tokens_v) < 0 ||
              ir->max_tokens_v < 1)
            return DECLINE;
          ir->max_tokens = v.raw;
        } else if (ki == K_TEMP || ki == K_TOPP) {
          if (v.kind != PX_FV_NUM) return DECLINE;
          if (ki == K_TEMP) ir->temperature = v.raw;
          else ir->top_p = v.raw;
        } else if (ki == K_TOPK) {
          if (v.kind != PX_FV_NUM || !px_fw_is_int(v.raw)) return DECLINE;
          ir->top_k = v.raw;
        } else if (ki == K_STOP) {
          if (v.kind != PX_FV_ARR) return DECLINE;
          if (!px_fw_empty(v.raw)) ir->stop = v.raw;
        } else if (ki == K_STREAM) {
          if (v.kind == PX_FV_TRUE)
            ir->stream_true = 1;
          else
            ir->stream_false = 1;
        }
    }
    if (rc != 0) return DECLINE;
  }
  if (r < 0 || !(seen & (1u << K_MESSAGES))) return DECLINE;
  return 0;
}

/* ======================================================================== */
/* Request encode                                                            */

/* whether an IR message writes any block */
static int has_blocks(const px_fmsg_t *m) {
  for (const px_fpart_t *p = m->parts; p; p = p->next)
    if (p->type != PX_FP_TEXT || p->text.n > 0) return 1;
  return 0;
}

static int put_text_block(px_buf_t *b, const px_fpart_t *p) {
  int rc = px_fb_lit(b, "{\"type\":\"text\",\"text\":");
  if (rc == 0) rc = px_fb_str(b, p->text);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"cache_control\":", p->cache_control);
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* a tool call -> a tool_use block; its input an object (declines otherwise:
 * the jansson codec's error) */
static int put_tool_use(px_buf_t *b, px_fpart_t *p, px_arena_t *a) {
  if (p->input.ptr == NULL) {
    if (px_fs_blank_value(p->args) == 1) /* also no arguments (args.p NULL) */
      p->input = (px_str_t){"{}", 2};
    else if (px_fast_args_object(a, p) != 0)
      return DECLINE;
  }
  int rc = px_fb_lit(b, "{\"type\":\"tool_use\",\"id\":");
  if (rc == 0) rc = px_fb_str(b, p->id);
  if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
  if (rc == 0) rc = px_fb_str(b, p->name);
  if (rc == 0) rc = px_fb_lit(b, ",\"input\":");
  if (rc == 0) rc = px_fb_raw(b, p->input);
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

static int put_block(px_buf_t *b, px_fpart_t *p, px_arena_t *a, int *first) {
  int rc = 0;
  if (p->type == PX_FP_TEXT && p->text.n == 0) return 0; /* Anthropic rejects them */
  if (!*first) rc = px_fb_lit(b, ",");
  *first = 0;
  if (rc < 0) return rc;
  switch (p->type) {
    case PX_FP_TEXT:
      return put_text_block(b, p);
    case PX_FP_TOOL_CALL:
      return put_tool_use(b, p, a);
    case PX_FP_TOOL_RESULT: {
      rc = px_fb_lit(b, "{\"type\":\"tool_result\",\"tool_use_id\":");
      if (rc == 0) rc = px_fb_str(b, p->id);
      if (rc == 0 && p->content != NULL && p->content->next == NULL) {
        rc = px_fb_lit(b, ",\"content\":");
        if (rc == 0) rc = px_fb_str(b, p->content->text);
      } else if (rc == 0 && p->content != NULL) {
        rc = px_fb_lit(b, ",\"content\":[");
        int f = 1;
        for (const px_fpart_t *c = p->content; c && rc == 0; c = c->next) {
          if (c->text.n == 0) continue;
          if (!f) rc = px_fb_lit(b, ",");
          f = 0;
          if (rc == 0) rc = px_fb_lit(b, "{\"type\":\"text\",\"text\":");
          if (rc == 0) rc = px_fb_str(b, c->text);
          if (rc == 0) rc = px_fb_lit(b, "}");
        }
        if (rc == 0) rc = px_fb_lit(b, "]");
      }
      if (rc == 0 && p->is_error) rc = px_fb_lit(b, ",\"is_error\":true");
      if (rc == 0) rc = px_fb_lit(b, "}");
      return rc;
    }
    default: /* not written by this encoder yet (px_fast_ops_t.encodes) */
      break;
  }
  return DECLINE;
}

static int encode_messages(px_buf_t *b, const px_freq_t *ir, px_arena_t *a) {
  int rc = px_fb_lit(b, ",\"messages\":[");
  int firstmsg = 1;
  const px_fmsg_t *m = ir->msgs;
  while (rc == 0 && m != NULL) {
    if (!has_blocks(m)) {
      m = m->next;
      continue;
    }
    /* one turn: this message and the following ones of the same role (the
     * ones without blocks in between change nothing) */
    int asst = m->assistant;
    const px_fmsg_t *end = m->next;
    while (end != NULL && (end->assistant == asst || !has_blocks(end))) end = end->next;
    rc = px_fb_lit(b, firstmsg ? "{\"role\":" : ",{\"role\":");
    firstmsg = 0;
    if (rc == 0) rc = px_fb_lit(b, asst ? "\"assistant\",\"content\":[" : "\"user\",\"content\":[");
    int first = 1;
    /* a user turn: tool results first, as the API requires */
    for (int pass = asst ? 1 : 0; pass < 2 && rc == 0; pass++)
      for (const px_fmsg_t *x = m; x != end && rc == 0; x = x->next)
        for (px_fpart_t *p = x->parts; p && rc == 0; p = p->next) {
          if (!asst && (pass == 0) != (p->type == PX_FP_TOOL_RESULT)) continue;
          rc = put_block(b, p, a, &first);
        }
    if (rc == 0) rc = px_fb_lit(b, "]}");
    m = end;
  }
  if (rc == 0) rc = px_fb_lit(b, "]");
  return rc;
}

static int anth_fast_encode_request(const px_tr_ctx_t *ctx, const px_freq_t *ir,
                                    px_buf_t *b, px_arena_t *a, px_lossy_t *lossy) {
  int rc = px_fb_lit(b, "{\"model\":");
  if (rc == 0) rc = px_buf_json_str(b, ctx->upstream_model, strlen(ctx->upstream_model));
  /* system: a string for one plain part, blocks otherwise */
  int nsys = 0, cc = 0;
  const px_fpart_t *one = NULL;
  for (const px_fpart_t *p = ir->system; p; p = p->next)
    if (p->text.n > 0) {
      nsys++;
      one = p;
      if (p->cache_control.ptr) cc = 1;
    }
  if (rc == 0 && nsys == 1 && !cc) {
    rc = px_fb_lit(b, ",\"system\":");
    if (rc == 0) rc = px_fb_str(b, one->text);
  } else if (rc == 0 && nsys > 0) {
    rc = px_fb_lit(b, ",\"system\":[");
    int f = 1;
    for (const px_fpart_t *p = ir->system; p && rc == 0; p = p->next) {
      if (p->text.n == 0) continue;
      if (!f) rc = px_fb_lit(b, ",");
      f = 0;
      if (rc == 0) rc = put_text_block(b, p);
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
  }
  if (rc == 0) rc = encode_messages(b, ir, a);
  if (rc != 0) return rc;
  rc = px_fb_lit(b, ",\"max_tokens\":");
  if (rc == 0 && ir->max_tokens.ptr != NULL) {
    rc = px_fb_raw(b, ir->max_tokens);
  } else if (rc == 0) {
    rc = px_fb_i64(b, ctx->default_max_tokens > 0 ? ctx->default_max_tokens
                                                : PX_ANTH_DEFAULT_MAX_TOKENS);
    px_lossy_add(lossy, "max_tokens");
  }
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"temperature\":", ir->temperature);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"top_p\":", ir->top_p);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"top_k\":", ir->top_k);
  if (rc == 0 && ir->stop1.p) {
    rc = px_fb_lit(b, ",\"stop_sequences\":[");
    if (rc == 0) rc = px_fb_str(b, ir->stop1);
    if (rc == 0) rc = px_fb_lit(b, "]");
  } else if (rc == 0) {
    rc = px_fb_opt_raw(b, ",\"stop_sequences\":", ir->stop);
  }
  if (rc == 0 && ir->tools != NULL) {
    rc = px_fb_lit(b, ",\"tools\":[");
    for (const px_ftool_t *t = ir->tools; t && rc == 0; t = t->next) {
      rc = px_fb_lit(b, t == ir->tools ? "{\"name\":" : ",{\"name\":");
      if (rc == 0) rc = px_fb_str(b, t->name);
      if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", t->desc);
      if (rc == 0) rc = px_fb_lit(b, ",\"input_schema\":");
      if (rc == 0) rc = px_fb_raw(b, t->params);
      if (rc == 0 && t->strict == 1) rc = px_fb_lit(b, ",\"strict\":true");
      if (rc == 0) rc = px_fb_opt_raw(b, ",\"cache_control\":", t->cache_control);
      if (rc == 0) rc = px_fb_lit(b, "}");
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
    const char *atc = NULL;
    switch (ir->tool_choice) {
      case PX_FTC_UNSET:
      case PX_FTC_AUTO: atc = ir->parallel == 0 ? "{\"type\":\"auto\"" : NULL; break;
      case PX_FTC_REQUIRED: atc = "{\"type\":\"any\""; break;
      case PX_FTC_NONE: atc = "{\"type\":\"none\""; break;
      case PX_FTC_TOOL: atc = "{\"type\":\"tool\",\"name\":"; break;
    }
    if (rc == 0 && atc != NULL) {
      rc = px_fb_lit(b, ",\"tool_choice\":");
      if (rc == 0) rc = px_fb_lit(b, atc);
      if (rc == 0 && ir->tool_choice == PX_FTC_TOOL) rc = px_fb_str(b, ir->tc_name);
      if (rc == 0 && ir->parallel == 0 && ir->tool_choice != PX_FTC_NONE)
        rc = px_fb_lit(b, ",\"disable_parallel_tool_use\":true");
      if (rc == 0) rc = px_fb_lit(b, "}");
    }
  } else if (ir->tool_choice == PX_FTC_REQUIRED || ir->tool_choice == PX_FTC_TOOL) {
    px_lossy_add(lossy, "tool_choice");
  }
  if (rc == 0 && ir->user.p) {
    rc = px_fb_lit(b, ",\"metadata\":{\"user_id\":");
    if (rc == 0) rc = px_fb_str(b, ir->user);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (ir->metadata.ptr && !ir->metadata_empty) px_lossy_add(lossy, "metadata");
  if (rc == 0 && ir->stream_true) rc = px_fb_lit(b, ",\"stream\":true");
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* ======================================================================== */
/* Response decode                                                           */

/* the usage object at the cursor (checked reads) */
static int decode_usage(px_fw_t *w, px_fresp_t *ir) {
  static const px_fkey_t keys[] = {PX_FK("input_tokens"), PX_FK("output_tokens"),
                                   PX_FK("cache_read_input_tokens"),
                                   PX_FK("cache_creation_input_tokens")};
  int64_t val[4] = {-1, -1, -1, -1};
  px_fv_t f[4];
  unsigned seen = 0;
  if (px_fc_fields(w, keys, 4, f, &seen) != 0) return DECLINE;
  int64_t cnt[4];
  int known = 1;
  for (int i = 0; i < 4; i++) {
    if ((seen & (1u << i)) && px_fw_jint(&f[i], -1, &val[i]) != 0) return DECLINE;
    known &= px_fast_usage_count((seen & (1u << i)) ? &f[i] : NULL, &cnt[i]);
  }
  int64_t in = val[0], out = val[1], cr = val[2], cc = val[3];
  /* as px_usage_scan counts: input with the cache counts added */
  ir->usage_known = known;
  ir->usage_in = cnt[0] < 0 ? -1 : cnt[0] + (cnt[2] > 0 ? cnt[2] : 0) + (cnt[3] > 0 ? cnt[3] : 0);
  ir->usage_out = cnt[1];
  ir->has_usage = 1;
  ir->in = (in > 0 ? in : 0) + (cr > 0 ? cr : 0) + (cc > 0 ? cc : 0);
  ir->out = out > 0 ? out : 0;
  ir->cache_read = cr >= 0 ? cr : -1;
  ir->cache_creation = cc >= 0 ? cc : -1;
  ir->reasoning = -1;
  return 0;
}

/* the content array at the cursor (checked reads) */
static int decode_content(px_fw_t *w, px_fresp_t *ir, px_arena_t *a) {
  int r, first = 1;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fc_elem(w, &first)) == 1) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text"), PX_FK("citations"),
                                     PX_FK("id"),   PX_FK("name"), PX_FK("input")};
    px_fv_t f[6];
    unsigned seen = 0;
    if (px_fc_fields(w, keys, 6, f, &seen) != 0) return DECLINE;
#define HAS(x) (seen & (1u << (x)))
    if (!HAS(0) || f[0].kind != PX_FV_STR) continue; /* no type: skipped there */
    px_fpart_t *p;
    if (px_fs_is(f[0].s, "text")) {
      if (HAS(2) && f[2].kind == PX_FV_ARR && !px_fw_empty(f[2].raw)) return DECLINE;
      p = px_fpart_text(
          a, HAS(1) && f[1].kind == PX_FV_STR ? f[1].s : (px_fstr_t){"", 0, 0});
      if (p == NULL) return DECLINE;
    } else if (px_fs_is(f[0].s, "tool_use")) {
      p = px_fpart_new(a, PX_FP_TOOL_CALL);
      if (p == NULL) return DECLINE;
      p->id = HAS(3) && f[3].kind == PX_FV_STR ? f[3].s : (px_fstr_t){"", 0, 0};
      p->name = HAS(4) && f[4].kind == PX_FV_STR ? f[4].s : (px_fstr_t){"", 0, 0};
      if (!HAS(5)) p->args = (px_fstr_t){"{}", 2, 0};
      else if (px_fast_dump_value(a, f[5].raw, &p->args) != 0) return DECLINE;
      if (HAS(5) && f[5].kind == PX_FV_OBJ) p->input = f[5].raw;
    } else {
      return DECLINE; /* thinking, server tools ...: the jansson codec */
    }
#undef HAS
    px_fpart_push(&ir->content, &ir->last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* The body is read once and checked as it is read (px_fc_*: the hub scans
 * nothing before); content and usage are decoded where they stand. */
enum { R_ID, R_MODEL, R_CONTENT, R_STOP, R_STOPSEQ, R_STOPDET, R_USAGE };
static const px_fkey_t resp_keys[] = {
    PX_FK("id"),            PX_FK("model"),        PX_FK("content"), PX_FK("stop_reason"),
    PX_FK("stop_sequence"), PX_FK("stop_details"), PX_FK("usage")};

static int anth_fast_decode_response(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                     px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy) {
  (void)ctx;
  (void)lossy;
  px_fv_t f[NKEYS(resp_keys)];
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  int r, first = 1;
#define HAS(x) (seen & (1u << (x)))
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fc_member(&w, &k, &first)) == 1) {
    int ki = px_fk_of(k, resp_keys, NKEYS(resp_keys));
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == R_CONTENT) {
      if (w.p[w.i] != '[' || decode_content(&w, ir, a) != 0) return DECLINE;
    } else if (ki == R_USAGE && w.p[w.i] == '{') {
      if (decode_usage(&w, ir) != 0) return DECLINE;
    } else {
      px_fv_t v;
      if (px_fc_value(&w, &v) < 0) return DECLINE;
      if (ki >= 0) f[ki] = v;
    }
  }
  if (r < 0 || px_fc_end(&w) < 0 || !HAS(R_CONTENT)) return DECLINE;
  if (!HAS(R_USAGE)) ir->usage_known = 1, ir->usage_in = ir->usage_out = -1;
  if (HAS(R_ID) && f[R_ID].kind == PX_FV_STR) ir->id = f[R_ID].s;
  if (HAS(R_MODEL) && f[R_MODEL].kind == PX_FV_STR) ir->model = f[R_MODEL].s;
  ir->stop = PX_STOP_NONE;
  if (HAS(R_STOP) && f[R_STOP].kind == PX_FV_STR) {
    char sr[40];
    px_fstr_t s = f[R_STOP].s;
    if (s.esc) return DECLINE;
    if (px_fs_is(s, "refusal")) return DECLINE;
    if (s.n >= sizeof(sr)) {
      ir->stop = PX_STOP_END_TURN;
    } else {
      memcpy(sr, s.p, s.n);
      sr[s.n] = 0;
      ir->stop = strcmp(sr, "model_context_window_exceeded") == 0 ? PX_STOP_MAX_TOKENS
                                                                   : px_stop_parse(sr);
    }
  }
  if (HAS(R_STOPSEQ) && f[R_STOPSEQ].kind == PX_FV_STR) ir->stop_sequence = f[R_STOPSEQ].s;
  if (HAS(R_STOPDET) && f[R_STOPDET].kind == PX_FV_OBJ) return DECLINE;
#undef HAS
  return 0;
}

/* ======================================================================== */
/* Response encode                                                           */

static int anth_fast_encode_response(const px_tr_ctx_t *ctx, const px_fresp_t *ir,
                                     px_buf_t *b, px_arena_t *a, px_lossy_t *lossy) {
  (void)lossy;
  if (ir->id.esc || !px_fast_ids_plain(ir->content)) return DECLINE;
  px_stop_t st = ir->stop == PX_STOP_NONE ? PX_STOP_END_TURN : ir->stop;
  const char *sr = px_stop_to_anthropic(st);
  if (strcmp(sr, "refusal") == 0) return DECLINE;
  int rc = px_fb_lit(b, "{\"id\":\"");
  if (rc == 0) rc = px_buf_mint_id(b, "msg_", (px_str_t){ir->id.p, ir->id.n});
  if (rc == 0) rc = px_fb_lit(b, "\",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
  if (rc == 0 && ctx->client_model)
    rc = px_buf_json_str(b, ctx->client_model, strlen(ctx->client_model));
  else if (rc == 0)
    rc = px_fb_str(b, ir->model.p ? ir->model : (px_fstr_t){"", 0, 0});
  if (rc == 0) rc = px_fb_lit(b, ",\"content\":[");
  int first = 1;
  for (px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
    if (!first) rc = px_fb_lit(b, ",");
    first = 0;
    if (rc != 0) break;
    if (p->type == PX_FP_TEXT) {
      rc = px_fb_lit(b, "{\"type\":\"text\",\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text);
      if (rc == 0) rc = px_fb_lit(b, "}");
      continue;
    }
    rc = put_tool_use(b, p, a);
  }
  if (rc == 0) rc = px_fb_lit(b, "],\"stop_reason\":\"");
  if (rc == 0) rc = px_fb_lit(b, sr);
  if (rc == 0) rc = px_fb_lit(b, "\",\"stop_sequence\":");
  if (rc == 0) rc = ir->stop_sequence.p ? px_fb_str(b, ir->stop_sequence) : px_fb_lit(b, "null");
  int64_t in = ir->has_usage ? ir->in : -1, out = ir->has_usage ? ir->out : -1;
  int64_t cr = ir->has_usage ? ir->cache_read : -1, cc = ir->has_usage ? ir->cache_creation : -1;
  if (cr < 0) cr = 0;
  if (cc < 0) cc = 0;
  if (in < 0) in = 0;
  in -= cr + cc;
  if (in < 0) in = 0;
  if (rc == 0) rc = px_fb_lit(b, ",\"usage\":{\"input_tokens\":");
  if (rc == 0) rc = px_fb_i64(b, in);
  if (rc == 0) rc = px_fb_lit(b, ",\"output_tokens\":");
  if (rc == 0) rc = px_fb_i64(b, out > 0 ? out : 0);
  if (rc == 0) rc = px_fb_lit(b, ",\"cache_creation_input_tokens\":");
  if (rc == 0) rc = px_fb_i64(b, cc);
  if (rc == 0) rc = px_fb_lit(b, ",\"cache_read_input_tokens\":");
  if (rc == 0) rc = px_fb_i64(b, cr);
  if (rc == 0) rc = px_fb_lit(b, "}}");
  return rc;
}

const px_fast_ops_t px_anthropic_fast = {
    .decode_request = anth_fast_decode_request,
    .encode_request = anth_fast_encode_request,
    .decode_response = anth_fast_decode_response,
    .encode_response = anth_fast_encode_response,
    .response_checked = 1,
};
