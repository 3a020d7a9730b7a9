/* responses.c - the OpenAI Responses codec
 * (include/proxai/fastir.h) without a jansson document, in its four roles:
 * client requests (instructions; message, reasoning, function and custom
 * tool call and output items with text, images and files; function, custom
 * and hosted tools; reasoning, text, include, store, prompt_cache_key and
 * the sampling parameters), upstream requests from the whole fast IR,
 * upstream answers (message text with annotations, refusals, function and
 * custom tool calls, reasoning items with their tokens; other items and
 * parts dropped and named) and answers to Responses clients; then the
 * wire: errors, token counts, the protocol table (streams:
 * responses_stream.c, stored responses: responses_store.c). What the
 * reference (test/reference/responses.c) refuses is refused in its words
 * (PX_FAST_REFUSE); what this codec cannot tell exactly as written
 * (escaped member names, repeated members, an id or a data URL not in the
 * plain spelling: px_fs_plain) declines to the hub's one reader's rule (translate_fast.c: respelled, else refused); every
 * rule here is the reference's for the same shape, its lossy names added
 * in the same order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"
#include "proxai/usage.h"

#define DECLINE PX_FAST_DECLINE
#define REFUSE PX_FAST_REFUSE
#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define HAS(x) (seen & (1u << (x)))

static const px_fstr_t EMPTY = {"", 0, 0};

/* member x of f as a string, p NULL when absent or not a string (px_jstr) */
#define FSTR(x) (HAS(x) && f[x].kind == PX_FV_STR ? f[x].s : (px_fstr_t){0})

static int is_text_type(px_fstr_t t) {
  return px_fs_is(t, "input_text") || px_fs_is(t, "text") || px_fs_is(t, "output_text");
}

/* ======================================================================== */
/* Request decode                                                            */

/* what a content part may be (responses.c: dec_system_msg, dec_message's
 * assistant parts, dec_user_part) */
enum { PM_SYSTEM, PM_USER, PM_ASSISTANT };

enum {
  P_TYPE,
  P_TEXT,
  P_ANN,
  P_REFUSAL,
  P_IMAGE_URL,
  P_DETAIL,
  P_FILE_DATA,
  P_FILE_URL,
  P_FILE_ID,
  P_FILENAME
};
static const px_fkey_t part_keys[] = {
    PX_FK("type"),      PX_FK("text"),    PX_FK("annotations"), PX_FK("refusal"),
    PX_FK("image_url"), PX_FK("detail"),  PX_FK("file_data"),   PX_FK("file_url"),
    PX_FK("file_id"),   PX_FK("filename")};

/* The reference's refusal: px_tr_fail's words, PX_FAST_REFUSE. */
#define FAIL(err, param, ...) (px_tr_fail((err), (param), __VA_ARGS__), REFUSE)

/* An input item's path ("input[2]") for the reference's words, written
 * only when a refusal needs it. */
typedef struct {
  size_t i;
  char s[64];
} ipath_t;

static const char *ipath(ipath_t *ip) {
  if (ip->s[0] == 0) snprintf(ip->s, sizeof(ip->s), "input[%zu]", ip->i);
  return ip->s;
}

/* What a content list belongs to, for the parts' rules and the reference's
 * words: the item's path, the list's name ("content" or "output") and, for
 * a system message, its role. */
typedef struct {
  ipath_t *path;
  const char *list, *role;
} plist_t;

/* a user part's path ("input[1].content[0]"), for the reference's words */
static const char *part_path(char *sub, size_t n, const plist_t *pl, size_t j) {
  snprintf(sub, n, "%s.%s[%zu]", ipath(pl->path), pl->list, j);
  return sub;
}

/* an input_image part (part j of pl) -> an IMAGE part */
static int image_part(const px_fv_t *f, unsigned seen, const plist_t *pl, size_t j,
                      px_fpart_t **out, px_arena_t *a, px_lossy_t *lossy,
                      px_tr_err_t *err) {
  char pp[256], sub[128];
  px_fstr_t url = FSTR(P_IMAGE_URL), detail = FSTR(P_DETAIL), mt, data;
  if (detail.p != NULL && !px_fs_is(detail, "auto")) {
    px_lossy_add(lossy, "input[].content[].detail");
  }
  if (url.p == NULL) {
    part_path(sub, sizeof(sub), pl, j);
    if (FSTR(P_FILE_ID).p != NULL) {
      snprintf(pp, sizeof(pp), "%s.file_id", sub);
      return FAIL(err, pp,
                  "%s.file_id: image file ids cannot be sent to this upstream; send "
                  "image_url",
                  sub);
    }
    snprintf(pp, sizeof(pp), "%s.image_url", sub);
    return FAIL(err, pp, "%s.image_url is required", sub);
  }
  /* a data URL (px_data_url_split's media type buffer: 128) */
  int d = px_fs_data_url(url, 128, &mt, &data);
  if (d == DECLINE) return DECLINE;
  px_fpart_t *p = px_fpart_new(a, PX_FP_IMAGE);
  if (p == NULL) return DECLINE;
  if (d == 0) {
    p->media_type = mt;
    p->data = data;
  } else if (px_fs_starts(url, "data:", 5)) {
    part_path(sub, sizeof(sub), pl, j);
    snprintf(pp, sizeof(pp), "%s.image_url", sub);
    return FAIL(err, pp, "%s.image_url: not a base64 data URL", sub);
  } else {
    p->url = url;
  }
  *out = p;
  return 0;
}

/* an input_file part -> a FILE part */
static int file_part(const px_tr_ctx_t *ctx, const px_fv_t *f, unsigned seen,
                     const plist_t *pl, size_t j, px_fpart_t **out, px_arena_t *a,
                     px_tr_err_t *err) {
  char pp[256], sub[128];
  px_fstr_t fd = FSTR(P_FILE_DATA), fu = FSTR(P_FILE_URL), fid = FSTR(P_FILE_ID);
  px_fpart_t *p = px_fpart_new(a, PX_FP_FILE);
  if (p == NULL) return DECLINE;
  if (fd.p != NULL) {
    int d = px_fs_data_url(fd, 128, &p->media_type, &p->data);
    if (d == DECLINE) return DECLINE;
    if (d != 0) {
      /* raw base64 without a data URL: Responses documents PDFs */
      p->media_type = (px_fstr_t){"application/pdf", 15, 0};
      p->data = fd;
    }
    p->filename = FSTR(P_FILENAME);
  } else if (fu.p != NULL) {
    p->url = fu;
  } else if (fid.p != NULL) {
    if (!px_tr_out_can(ctx, PX_CAP_FILE_ID)) {
      snprintf(pp, sizeof(pp), "%s.file_id", part_path(sub, sizeof(sub), pl, j));
      px_file_id_check(ctx, pp, err);
      return REFUSE;
    }
    p->file_id = fid;
  } else {
    snprintf(pp, sizeof(pp), "%s.file_data", part_path(sub, sizeof(sub), pl, j));
    return FAIL(err, pp, "%s: input_file needs file_data, file_url or file_id", sub);
  }
  *out = p;
  return 0;
}

/* the content part j at the cursor -> a part appended to head .. tail
 * (responses.c: dec_system_msg, dec_message's assistant parts,
 * dec_user_part) */
static int dec_part(const px_tr_ctx_t *ctx, px_fw_t *w, int mode, const plist_t *pl,
                    size_t j, px_fpart_t **head, px_fpart_t **tail, px_arena_t *a,
                    px_lossy_t *lossy, px_tr_err_t *err) {
  char pp[256], sub[128];
  px_fv_t f[NKEYS(part_keys)];
  unsigned seen = 0;
  if (px_fw_peek(w) == PX_FV_OBJ) {
    if (px_fw_kfields(w, part_keys, NKEYS(part_keys), f, &seen) != 0) return DECLINE;
  } else if (px_fw_value(w, &f[0]) < 0) { /* not an object: no type */
    return DECLINE;
  }
  px_fstr_t type = FSTR(P_TYPE), text = FSTR(P_TEXT);
  px_fpart_t *p = NULL;
  int rc = 0;
  if (mode == PM_SYSTEM) {
    if (type.p == NULL || text.p == NULL || !is_text_type(type)) {
      snprintf(pp, sizeof(pp), "%s.content[%zu].type", ipath(pl->path), j);
      return FAIL(err, pp, "%s.content[%zu]: only text is allowed in %s messages",
                  ipath(pl->path), j, pl->role);
    }
    if ((p = px_fpart_text(a, text)) != NULL) p->developer = pl->role[0] == 'd';
  } else if (mode == PM_ASSISTANT) {
    /* the part's path (ipath: idempotent, any argument order gives the
     * same words) */
#define APP (snprintf(pp, sizeof(pp), "%s.content[%zu].type", ipath(pl->path), j), pp)
    if (type.p == NULL)
      return FAIL(err, APP, "%s.content[%zu] has no type", ipath(pl->path), j);
    if (is_text_type(type)) {
      if (text.p == NULL)
        return FAIL(err, APP, "%s.content[%zu].text is required", ipath(pl->path), j);
      if (HAS(P_ANN) && f[P_ANN].kind == PX_FV_ARR && !px_fw_empty(f[P_ANN].raw))
        px_lossy_add(lossy, "input[].content[].annotations");
      p = px_fpart_text(a, text);
    } else if (px_fs_is(type, "refusal")) {
      px_fstr_t r = FSTR(P_REFUSAL);
      if (r.p == NULL)
        return FAIL(err, APP, "%s.content[%zu].refusal is required", ipath(pl->path), j);
      if ((p = px_fpart_new(a, PX_FP_REFUSAL)) != NULL) p->text = r;
    } else {
      return FAIL(err, APP,
                  "%s.content[%zu].type: unsupported assistant content part '%s'",
                  ipath(pl->path), j, px_fs_msg(type));
    }
#undef APP
  } else { /* a user part, or a part of a tool output: its path sub */
#define SUB(field) \
  (snprintf(pp, sizeof(pp), "%s" field, part_path(sub, sizeof(sub), pl, j)), pp)
    if (type.p == NULL)
      return FAIL(err, SUB(".type"), "%s: content part without a type", sub);
    if (is_text_type(type)) {
      if (text.p == NULL) return FAIL(err, SUB(".text"), "%s.text must be a string", sub);
      p = px_fpart_text(a, text);
    } else if (px_fs_is(type, "input_image")) {
      rc = image_part(f, seen, pl, j, &p, a, lossy, err);
    } else if (px_fs_is(type, "input_file")) {
      rc = file_part(ctx, f, seen, pl, j, &p, a, err);
    } else if (px_fs_is(type, "input_audio")) {
      return FAIL(err, SUB(".type"), "%s: audio input is not supported", sub);
    } else {
      return FAIL(err, SUB(".type"), "%s.type: unsupported content part '%s'", sub,
                  px_fs_msg(type));
    }
#undef SUB
  }
  if (rc != 0) return rc;
  if (p == NULL) return DECLINE;
  px_fpart_push(head, tail, p);
  return 0;
}

/* a message's content (string or list) -> parts */
static int dec_content(const px_tr_ctx_t *ctx, const px_fv_t *c, int mode,
                       const plist_t *pl, px_fpart_t **head, px_fpart_t **tail,
                       px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  if (c->kind == PX_FV_STR) {
    px_fpart_t *p = px_fpart_text(a, c->s);
    if (p == NULL) return DECLINE;
    p->developer = mode == PM_SYSTEM && pl->role[0] == 'd';
    px_fpart_push(head, tail, p);
    return 0;
  }
  if (c->kind != PX_FV_ARR) {
    char pp[256];
    const char *path = ipath(pl->path);
    snprintf(pp, sizeof(pp), "%s.%s", path, pl->list);
    return FAIL(err, pp, "%s.%s must be a string or a list", path, pl->list);
  }
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  int r;
  size_t j = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    int rc = dec_part(ctx, &w, mode, pl, j++, head, tail, a, lossy, err);
    if (rc != 0) return rc;
  }
  return r < 0 ? DECLINE : 0;
}

static px_fmsg_t *asst_msg(px_freq_t *ir, px_arena_t *a) {
  if (ir->msgs_last != NULL && ir->msgs_last->assistant) return ir->msgs_last;
  return px_fmsg_push(ir, a, 1);
}

static int push_asst(px_freq_t *ir, px_arena_t *a, px_fpart_t *p) {
  px_fmsg_t *m = p != NULL ? asst_msg(ir, a) : NULL;
  if (m == NULL) return DECLINE;
  px_fpart_push(&m->parts, &m->last, p);
  return 0;
}

enum {
  I_TYPE,
  I_ROLE,
  I_CONTENT,
  I_CALL_ID,
  I_NAME,
  I_ARGS,
  I_OUTPUT,
  I_NS,
  I_INPUT,
  I_ID,
  I_SUMMARY,
  I_ENC
};
static const px_fkey_t item_keys[] = {
    PX_FK("type"),  PX_FK("role"),      PX_FK("content"), PX_FK("call_id"),
    PX_FK("name"),  PX_FK("arguments"), PX_FK("output"),  PX_FK("namespace"),
    PX_FK("input"), PX_FK("id"),        PX_FK("summary"), PX_FK("encrypted_content")};

static int dec_message(const px_tr_ctx_t *ctx, const px_fv_t *f, unsigned seen,
                       ipath_t *ip, px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy,
                       px_tr_err_t *err) {
  char pp[256];
  px_fstr_t role = FSTR(I_ROLE);
  px_fv_t none = {PX_FV_NULL, {0}, {NULL, 0}};
  const px_fv_t *c = HAS(I_CONTENT) ? &f[I_CONTENT] : &none;
  plist_t pl = {ip, "content", NULL};
  if (role.p == NULL) {
    snprintf(pp, sizeof(pp), "%s.role", ipath(ip));
    return FAIL(err, pp, "%s.role is required", ipath(ip));
  }
  int dev = px_fs_is(role, "developer");
  if (dev || px_fs_is(role, "system")) {
    pl.role = dev ? "developer" : "system";
    return dec_content(ctx, c, PM_SYSTEM, &pl, &ir->system, &ir->system_last, a, lossy,
                       err);
  }
  px_fmsg_t *m;
  int mode;
  if (px_fs_is(role, "user")) {
    m = px_fmsg_push(ir, a, 0);
    mode = PM_USER;
  } else if (px_fs_is(role, "assistant")) {
    m = asst_msg(ir, a);
    mode = PM_ASSISTANT;
  } else {
    snprintf(pp, sizeof(pp), "%s.role", ipath(ip));
    return FAIL(err, pp, "%s.role: unsupported role '%s'", ipath(ip), px_fs_msg(role));
  }
  if (m == NULL) return DECLINE;
  return dec_content(ctx, c, mode, &pl, &m->parts, &m->last, a, lossy, err);
}

/* The texts of the parts of list v whose type is want, joined by blank
 * lines (responses.c append_texts): *out, "" when none. */
static int join_texts(const px_fv_t *v, const char *want, px_fstr_t *out, px_arena_t *a) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text")};
  *out = EMPTY;
  if (v == NULL || v->kind != PX_FV_ARR) return 0;
  px_fw_t w = {v->raw.ptr, v->raw.len, 0};
  px_buf_t b; /* only when two or more texts are joined */
  px_buf_init(&b, SIZE_MAX);
  int r, rc = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while (rc == 0 && (r = px_fw_elem(&w)) == 1) {
    px_fv_t f[2];
    unsigned seen = 0;
    if (px_fw_peek(&w) != PX_FV_OBJ) { /* no type there: skipped */
      px_fv_t skip;
      if (px_fw_value(&w, &skip) < 0) rc = DECLINE;
      continue;
    }
    if (px_fw_kfields(&w, keys, 2, f, &seen) != 0) {
      rc = DECLINE;
      break;
    }
    px_fstr_t t = FSTR(0), s = FSTR(1);
    if (t.p == NULL || s.p == NULL) continue;
    if (!px_fs_is(t, want)) continue;
    if (out->n == 0) { /* the first text, or after empty ones */
      *out = s;
      continue;
    }
    if (b.len == 0) rc = px_buf_append(&b, out->p, out->n);
    if (rc == 0) rc = px_buf_append(&b, "\\n\\n", 4);
    if (rc == 0 && s.n > 0) rc = px_buf_append(&b, s.p, s.n);
  }
  if (rc == 0 && r < 0) rc = DECLINE;
  if (rc == 0 && b.len > 0) {
    char *copy = px_arena_alloc(a, b.len);
    if (copy == NULL)
      rc = DECLINE;
    else {
      memcpy(copy, b.data, b.len);
      *out = (px_fstr_t){copy, b.len, 1};
    }
  }
  px_buf_free(&b);
  return rc == 0 ? 0 : DECLINE;
}

/* a reasoning item: its text the reasoning_text contents joined, else the
 * summaries; encrypted_content to its field by its tag (px_frtok_in) */
static int dec_reasoning(const px_fv_t *f, unsigned seen, px_freq_t *ir, px_arena_t *a) {
  px_fpart_t *p = px_fpart_new(a, PX_FP_REASONING);
  if (p == NULL || join_texts(HAS(I_CONTENT) ? &f[I_CONTENT] : NULL, "reasoning_text",
                              &p->text, a) != 0)
    return DECLINE;
  if (p->text.n == 0 &&
      join_texts(HAS(I_SUMMARY) ? &f[I_SUMMARY] : NULL, "summary_text", &p->text, a) != 0)
    return DECLINE;
  if (px_frtok_in(PX_PROTO_RESPONSES, p, FSTR(I_ENC)) != 0) return DECLINE;
  p->id = FSTR(I_ID);
  return push_asst(ir, a, p);
}

/* Tool-call arguments as responses.c takes them: valid JSON text of any
 * kind (is_valid_json_text). An object is kept as input too; another value
 * stays a string (an upstream that takes only objects refuses it, naming
 * the client's field: px_tool_args_object). */
static int call_args(px_arena_t *a, px_fpart_t *p, ipath_t *ip, px_tr_err_t *err) {
  int rc = px_fast_args_object(a, p);
  if (rc != PX_FAST_ARGS_NONE) return rc == 0 ? 0 : DECLINE;
  /* no object: JSON of another kind stays a string, and what is no JSON
   * is refused (jansson's verdict on a value of any kind) */
  size_t n;
  const char *copy = px_fs_cstr(a, p->args, &n);
  if (copy == NULL) return DECLINE;
  json_t *j = px_jdoc_load(copy, n, JSON_DECODE_ANY, NULL);
  if (j != NULL) {
    int obj = json_is_object(j);
    json_decref(j);
    return obj ? DECLINE : 0; /* (an object px_fast_args_object declined) */
  }
  char pp[256];
  snprintf(pp, sizeof(pp), "%s.arguments", ipath(ip));
  return FAIL(err, pp, "%s.arguments is not valid JSON", ipath(ip));
}

static int dec_function_call(const px_fv_t *f, unsigned seen, ipath_t *ip, px_freq_t *ir,
                             px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  char pp[256];
  px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
  if (p == NULL) return DECLINE;
  p->id = FSTR(I_CALL_ID);
  p->name = FSTR(I_NAME);
  p->args = FSTR(I_ARGS);
  if (p->id.p == NULL) {
    snprintf(pp, sizeof(pp), "%s.call_id", ipath(ip));
    return FAIL(err, pp, "%s.call_id is required", ipath(ip));
  }
  if (p->name.p == NULL) {
    snprintf(pp, sizeof(pp), "%s.name", ipath(ip));
    return FAIL(err, pp, "%s.name is required", ipath(ip));
  }
  if (p->args.p == NULL) {
    snprintf(pp, sizeof(pp), "%s.arguments", ipath(ip));
    return FAIL(err, pp, "%s.arguments must be a JSON string", ipath(ip));
  }
  int rc = call_args(a, p, ip, err);
  if (rc != 0) return rc;
  if (FSTR(I_NS).p != NULL) px_lossy_add(lossy, "input[].namespace");
  return push_asst(ir, a, p);
}

/* custom_tool_call: a custom call for an upstream with freeform tools, else
 * a function call of arguments {"input": text}, as jansson dumps it */
static int dec_custom_call(const px_tr_ctx_t *ctx, const px_fv_t *f, unsigned seen,
                           ipath_t *ip, px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy,
                           px_tr_err_t *err) {
  px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
  px_fstr_t in = FSTR(I_INPUT);
  if (p == NULL) return DECLINE;
  p->id = FSTR(I_CALL_ID);
  p->name = FSTR(I_NAME);
  if (p->id.p == NULL || p->name.p == NULL || in.p == NULL) {
    char pp[256];
    snprintf(pp, sizeof(pp), "%s.%s", ipath(ip),
             p->id.p == NULL     ? "call_id"
             : p->name.p == NULL ? "name"
                                 : "input");
    return FAIL(err, pp, "%s is required (a string)", pp);
  }
  if (px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS)) {
    p->custom = 1;
    p->text = in;
    return push_asst(ir, a, p);
  }
  px_lossy_add(lossy, "input[].custom_tool_call");
  char *raw = px_arena_alloc(a, in.n + 13);
  if (raw == NULL) return DECLINE;
  memcpy(raw, "{\"input\":\"", 10);
  memcpy(raw + 10, in.p, in.n);
  memcpy(raw + 10 + in.n, "\"}", 2);
  if (px_fast_dump_value(a, (px_str_t){raw, in.n + 12}, &p->args) != 0 ||
      px_fast_args_object(a, p) != 0)
    return DECLINE;
  return push_asst(ir, a, p);
}

/* function_call_output / custom_tool_call_output: a tool result, joining
 * the user message whose last part is one */
static int dec_output(const px_tr_ctx_t *ctx, const px_fv_t *f, unsigned seen,
                      ipath_t *ip, px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy,
                      px_tr_err_t *err) {
  char pp[256];
  px_fpart_t *res = px_fpart_new(a, PX_FP_TOOL_RESULT), *tail = NULL;
  if (res == NULL) return DECLINE;
  if ((res->id = FSTR(I_CALL_ID)).p == NULL) {
    snprintf(pp, sizeof(pp), "%s.call_id", ipath(ip));
    return FAIL(err, pp, "%s.call_id is required", ipath(ip));
  }
  px_fv_t none = {PX_FV_NULL, {0}, {NULL, 0}};
  const px_fv_t *o = HAS(I_OUTPUT) ? &f[I_OUTPUT] : &none;
  plist_t pl = {ip, "output", NULL};
  if (o->kind == PX_FV_STR) {
    if (o->s.n > 0 && (res->content = px_fpart_text(a, o->s)) == NULL) return DECLINE;
  } else {
    int rc = dec_content(ctx, o, PM_USER, &pl, &res->content, &tail, a, lossy, err);
    if (rc != 0) return rc;
  }
  px_fmsg_t *m = ir->msgs_last;
  if (m == NULL || m->assistant || m->last == NULL || m->last->type != PX_FP_TOOL_RESULT)
    m = px_fmsg_push(ir, a, 0);
  if (m == NULL) return DECLINE;
  px_fpart_push(&m->parts, &m->last, res);
  return 0;
}

/* input item i at the cursor */
static int decode_item(const px_tr_ctx_t *ctx, px_fw_t *w, size_t i, px_freq_t *ir,
                       px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  char pp[256];
  ipath_t path; /* its text written on a refusal only */
  path.i = i;
  path.s[0] = 0;
  px_fv_t f[NKEYS(item_keys)];
  unsigned seen = 0;
  if (px_fw_peek(w) != PX_FV_OBJ)
    return FAIL(err, ipath(&path), "%s must be an object", ipath(&path));
  if (px_fw_kfields(w, item_keys, NKEYS(item_keys), f, &seen) != 0) return DECLINE;
  px_fstr_t type = FSTR(I_TYPE);
  if (type.p == NULL || px_fs_is(type, "message"))
    return dec_message(ctx, f, seen, &path, ir, a, lossy, err);
  if (px_fs_is(type, "function_call"))
    return dec_function_call(f, seen, &path, ir, a, lossy, err);
  if (px_fs_is(type, "function_call_output") || px_fs_is(type, "custom_tool_call_output"))
    return dec_output(ctx, f, seen, &path, ir, a, lossy, err);
  if (px_fs_is(type, "custom_tool_call"))
    return dec_custom_call(ctx, f, seen, &path, ir, a, lossy, err);
  if (px_fs_is(type, "reasoning")) return dec_reasoning(f, seen, ir, a);
  snprintf(pp, sizeof(pp), "%s.type", ipath(&path));
  return FAIL(err, pp, "%s.type: input item '%s' cannot be sent to this upstream", path.s,
              px_fs_msg(type));
}

/* a hosted tool, dropped and named (responses.c lossy_hosted_tool) */
static void lossy_hosted_tool(px_lossy_t *l, px_fstr_t type) {
  static const struct {
    const char *type, *lossy;
  } hosted[] = {
      {"web_search", "tools[].web_search"},
      {"file_search", "tools[].file_search"},
      {"code_interpreter", "tools[].code_interpreter"},
      {"image_generation", "tools[].image_generation"},
      {"computer_use_preview", "tools[].computer"},
      {"computer", "tools[].computer"},
      {"mcp", "tools[].mcp"},
      {"local_shell", "tools[].shell"},
      {"shell", "tools[].shell"},
      {"apply_patch", "tools[].apply_patch"},
      {"custom", "tools[].custom"},
      {"namespace", "tools[].namespace"},
  };
  if (px_fs_starts(type, "web_search_preview", 18)) {
    px_lossy_add(l, "tools[].web_search");
    return;
  }
  for (size_t i = 0; i < sizeof(hosted) / sizeof(hosted[0]); i++)
    if (px_fs_is(type, hosted[i].type)) {
      px_lossy_add(l, hosted[i].lossy);
      return;
    }
  px_lossy_add(l, "tools[].other");
}

/* the tools list at the cursor, read where it stands (its bulk, the
 * parameters schemas, walked once) */
static int decode_tools(const px_tr_ctx_t *ctx, px_fw_t *tw, px_freq_t *ir, px_arena_t *a,
                        px_lossy_t *lossy, px_tr_err_t *err) {
  px_fw_t w = *tw;
  int r;
  size_t i = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(&w)) == 1; i++) {
    enum { T_TYPE, T_NAME, T_DESC, T_PARAMS, T_STRICT, T_DEFER, T_FORMAT };
    static const px_fkey_t keys[] = {PX_FK("type"),        PX_FK("name"),
                                     PX_FK("description"), PX_FK("parameters"),
                                     PX_FK("strict"),      PX_FK("defer_loading"),
                                     PX_FK("format")};
    px_fv_t f[NKEYS(keys)];
    unsigned seen = 0;
    char pp[64];
    if (px_fw_peek(&w) == PX_FV_OBJ) {
      if (px_fw_kfields(&w, keys, NKEYS(keys), f, &seen) != 0) return DECLINE;
    } else if (px_fw_value(&w, &f[0]) < 0) {
      return DECLINE;
    }
    px_fstr_t type = FSTR(T_TYPE), name = FSTR(T_NAME);
    if (type.p == NULL) {
      snprintf(pp, sizeof(pp), "tools[%zu].type", i);
      return FAIL(err, pp, "%s is required", pp);
    }
    if (px_fs_is(type, "custom") && name.p != NULL &&
        px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS)) {
      /* freeform tool, for an upstream that has them */
      px_ftool_t *t = px_ftool_push(ir, a, name, HAS(T_DESC) ? &f[T_DESC] : NULL, NULL,
                                    NULL, PX_FAST_OPENAI_PARAMS);
      if (t == NULL) return DECLINE;
      t->custom = 1;
      if (HAS(T_FORMAT) && f[T_FORMAT].kind == PX_FV_OBJ) t->format = f[T_FORMAT].raw;
      continue;
    }
    if (!px_fs_is(type, "function")) {
      lossy_hosted_tool(lossy, type);
      continue;
    }
    if (name.p == NULL) {
      snprintf(pp, sizeof(pp), "tools[%zu].name", i);
      return FAIL(err, pp, "%s is required", pp);
    }
    if (px_ftool_push(ir, a, name, HAS(T_DESC) ? &f[T_DESC] : NULL,
                      HAS(T_PARAMS) ? &f[T_PARAMS] : NULL,
                      HAS(T_STRICT) ? &f[T_STRICT] : NULL, PX_FAST_OPENAI_PARAMS) == NULL)
      return DECLINE;
    if (HAS(T_DEFER) && f[T_DEFER].kind == PX_FV_TRUE)
      px_lossy_add(lossy, "tools[].defer_loading");
  }
  if (r < 0) return DECLINE;
  tw->i = w.i;
  return 0;
}

static int decode_tool_choice(const px_tr_ctx_t *ctx, const px_fv_t *v, px_freq_t *ir,
                              px_lossy_t *lossy, px_tr_err_t *err) {
  if (v->kind == PX_FV_STR) {
      if (px_fast_openai_tc(v->s, ir) == 0) return 0;
    return FAIL(err, "tool_choice", "tool_choice: unknown value '%s'",
                px_fs_msg(v->s));
  }
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("name")};
  px_fv_t f[2];
  unsigned seen = 0;
  if (v->kind == PX_FV_OBJ && px_fv_kfields(v, keys, 2, f, &seen) != 0) return DECLINE;
  px_fstr_t type = FSTR(0), name = FSTR(1);
  if (type.p != NULL && name.p != NULL &&
      (px_fs_is(type, "function") ||
       (px_fs_is(type, "custom") && px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS)))) {
    ir->tool_choice = PX_FTC_TOOL;
    ir->tc_name = name;
    return 0;
  }
  /* allowed_tools, hosted tool types, custom, mcp: no equivalent */
  px_lossy_add(lossy, "tool_choice");
  return 0;
}

/* text: {format, verbosity} */
static int decode_text(const px_fv_t *v, px_freq_t *ir, px_lossy_t *lossy,
                       px_tr_err_t *err) {
  enum { X_FORMAT, X_VERBOSITY };
  static const px_fkey_t keys[] = {PX_FK("format"), PX_FK("verbosity")};
  enum { F_TYPE, F_NAME, F_SCHEMA, F_STRICT, F_DESC };
  static const px_fkey_t fkeys[] = {PX_FK("type"), PX_FK("name"), PX_FK("schema"),
                                    PX_FK("strict"), PX_FK("description")};
  px_fv_t f[5];
  unsigned seen = 0;
  if (v->kind != PX_FV_OBJ) return FAIL(err, "text", "text must be an object");
  if (px_fv_kfields(v, keys, 2, f, &seen) != 0) return DECLINE;
  if (HAS(X_VERBOSITY) && f[X_VERBOSITY].kind != PX_FV_NULL) {
    if (f[X_VERBOSITY].kind == PX_FV_STR)
      ir->verbosity = f[X_VERBOSITY].s;
    else
      px_lossy_add(lossy, "text.verbosity");
  }
  if (!HAS(X_FORMAT) || f[X_FORMAT].kind == PX_FV_NULL) return 0;
  px_fv_t fmt = f[X_FORMAT];
  seen = 0;
  if (fmt.kind == PX_FV_OBJ && px_fv_kfields(&fmt, fkeys, 5, f, &seen) != 0)
    return DECLINE;
  px_fstr_t type = FSTR(F_TYPE);
  if (type.p == NULL)
    return FAIL(err, "text.format.type", "text.format.type is required");
  if (px_fs_is(type, "text")) {
    ir->rf_text = 1;
  } else if (px_fs_is(type, "json_object")) {
    ir->rf_json = 1;
  } else if (px_fs_is(type, "json_schema")) {
    if (!HAS(F_SCHEMA) || f[F_SCHEMA].kind != PX_FV_OBJ)
      return FAIL(err, "text.format.schema", "text.format.schema must be an object");
    ir->rf_schema = f[F_SCHEMA].raw;
    ir->rf_name = FSTR(F_NAME);
    if (ir->rf_name.p == NULL) ir->rf_name = (px_fstr_t){"response", 8, 0};
    if (HAS(F_STRICT) && f[F_STRICT].kind == PX_FV_TRUE) ir->rf_strict = 1;
    if (HAS(F_STRICT) && f[F_STRICT].kind == PX_FV_FALSE) ir->rf_strict = 0;
    ir->rf_desc = FSTR(F_DESC);
  } else {
    return FAIL(err, "text.format.type", "text.format.type: unsupported format '%s'",
                px_fs_msg(type));
  }
  return 0;
}

/* reasoning: {effort, summary (or generate_summary)} */
static int decode_reasoning_cfg(const px_fv_t *v, px_freq_t *ir, px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("effort"), PX_FK("summary"),
                                   PX_FK("generate_summary")};
  px_fv_t f[3];
  unsigned seen = 0;
  if (v->kind != PX_FV_OBJ) return FAIL(err, "reasoning", "reasoning must be an object");
  if (px_fv_kfields(v, keys, 3, f, &seen) != 0) return DECLINE;
  ir->effort = FSTR(0);
  ir->summary = FSTR(1);
  if (ir->summary.p == NULL) ir->summary = FSTR(2);
  /* values the encoders compare (px_fs_is: escapes read) */
  ir->has_reasoning = ir->effort.p != NULL || ir->summary.p != NULL;
  return 0;
}

/* the top-level members responses.c reads (decode_request and its
 * dec_settings, dec_stateful, dec_dropped); any other is dropped and named
 * as itself */
enum {
  K_MODEL,
  K_INPUT,
  K_TOOLS,
  K_TC,
  K_TEXT,
  K_REASONING,
  K_SAFETY,
  K_INSTR,
  K_PAR,
  K_MAX,
  K_TEMP,
  K_TOPP,
  K_USER,
  K_META,
  K_STREAM,
  K_STREAM_OPT,
  K_PREV,
  K_CONV,
  K_BG,
  K_PROMPT,
  K_STORE,
  K_INCLUDE,
  K_TRUNC,
  K_CACHE_KEY,
  K_CACHE_RET,
  K_TIER,
  K_CLIENT_META,
  K_MAX_CALLS,
  K_LOGPROBS
};
static const px_fkey_t top_keys[] = {PX_FK("model"),
                                     PX_FK("input"),
                                     PX_FK("tools"),
                                     PX_FK("tool_choice"),
                                     PX_FK("text"),
                                     PX_FK("reasoning"),
                                     PX_FK("safety_identifier"),
                                     PX_FK("instructions"),
                                     PX_FK("parallel_tool_calls"),
                                     PX_FK("max_output_tokens"),
                                     PX_FK("temperature"),
                                     PX_FK("top_p"),
                                     PX_FK("user"),
                                     PX_FK("metadata"),
                                     PX_FK("stream"),
                                     PX_FK("stream_options"),
                                     PX_FK("previous_response_id"),
                                     PX_FK("conversation"),
                                     PX_FK("background"),
                                     PX_FK("prompt"),
                                     PX_FK("store"),
                                     PX_FK("include"),
                                     PX_FK("truncation"),
                                     PX_FK("prompt_cache_key"),
                                     PX_FK("prompt_cache_retention"),
                                     PX_FK("service_tier"),
                                     PX_FK("client_metadata"),
                                     PX_FK("max_tool_calls"),
                                     PX_FK("top_logprobs")};

/* one top-level member (not null) as responses.c's decode_request takes it */
static int decode_top(const px_tr_ctx_t *ctx, int ki, const px_fv_t *v, px_freq_t *ir,
                      px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  switch (ki) {
    case K_MODEL:
      return v->kind == PX_FV_STR ? 0 : FAIL(err, "model", "model must be a string");
    case K_INPUT:
    case K_SAFETY:
      return 0; /* after the other members */
    case K_TOOLS: /* a list is read in place (the caller) */
      return FAIL(err, "tools", "tools must be a list");
    case K_TC:
      return decode_tool_choice(ctx, v, ir, lossy, err);
    case K_TEXT:
      return decode_text(v, ir, lossy, err);
    case K_REASONING:
      return decode_reasoning_cfg(v, ir, err);
    case K_INSTR: /* the caller puts it first */
      return v->kind == PX_FV_STR
                 ? 0
                 : FAIL(err, "instructions", "instructions must be a string");
    case K_PAR:
      if (v->kind == PX_FV_TRUE || v->kind == PX_FV_FALSE)
        ir->parallel = v->kind == PX_FV_TRUE;
      return 0;
    case K_MAX: /* an integer; the positive ones taken here */
      if (v->kind != PX_FV_NUM || !px_fw_is_int(v->raw))
        return FAIL(err, "max_output_tokens", "max_output_tokens must be an integer");
      if (px_fw_uint(v->raw, &ir->max_tokens_v) < 0 || ir->max_tokens_v < 1)
        return FAIL(err, "max_output_tokens",
                    "max_output_tokens must be a positive integer of at most 18 digits");
      ir->max_tokens = v->raw;
      return 0;
    case K_TEMP:
    case K_TOPP:
      if (v->kind != PX_FV_NUM)
        return FAIL(err, top_keys[ki].s, "%s must be a number", top_keys[ki].s);
      *(ki == K_TEMP ? &ir->temperature : &ir->top_p) = v->raw;
      return 0;
    case K_USER:
      if (v->kind == PX_FV_STR) ir->user = v->s;
      return 0;
    case K_META:
      if (v->kind == PX_FV_OBJ && !px_fw_empty(v->raw)) ir->metadata = v->raw;
      return 0;
    case K_STREAM:
      if (v->kind == PX_FV_TRUE) ir->stream_true = 1;
      if (v->kind == PX_FV_FALSE) ir->stream_false = 1;
      return 0;
    case K_STREAM_OPT:
      if (v->kind == PX_FV_OBJ && !px_fw_empty(v->raw))
        px_lossy_add(lossy, "stream_options");
      return 0;
    /* a Responses upstream's (stored state, background, prompt templates) */
    case K_PREV:
      return FAIL(
          err, "previous_response_id",
          "previous_response_id needs an openai_responses upstream or [responses] "
          "store = on (it is off); send the full conversation in input");
    case K_CONV:
      return FAIL(err, "conversation",
                  "conversation needs an openai_responses upstream; send the full "
                  "conversation in input");
    case K_BG:
      return v->kind == PX_FV_TRUE ? FAIL(err, "background",
                                          "background mode needs an openai_responses "
                                          "upstream")
                                   : 0;
    case K_PROMPT:
      return FAIL(err, "prompt", "prompt templates need an openai_responses upstream");
    case K_STORE:
      if (v->kind == PX_FV_TRUE && ctx->resp_id == NULL) px_lossy_add(lossy, "store");
      return 0;
    case K_INCLUDE:
      if (v->kind == PX_FV_ARR && !px_fw_empty(v->raw)) px_lossy_add(lossy, "include");
      return 0;
    case K_TRUNC:
      if (v->kind == PX_FV_STR && !px_fs_is(v->s, "disabled"))
        px_lossy_add(lossy, "truncation");
      return 0;
    case K_CACHE_KEY: /* kept for the hub's fit (px_fit_fast_request) */
      if (v->kind == PX_FV_STR)
        ir->prompt_cache_key = v->s;
      else
        px_lossy_add(lossy, "prompt_cache_key");
      return 0;
    default: /* dropped by name */
      px_lossy_add(lossy, top_keys[ki].s);
      return 0;
  }
}

/* the input list at the cursor, read where it stands (no second walk of
 * the body's bulk): its items' lossy names go to in_lossy, which the
 * caller adds after the other members' (responses.c reads input last) */
static int decode_input(const px_tr_ctx_t *ctx, px_fw_t *w, px_freq_t *ir, px_arena_t *a,
                        px_lossy_t *in_lossy, px_tr_err_t *err) {
  int r;
  size_t i = 0;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(w)) == 1) {
    int rc = decode_item(ctx, w, i++, ir, a, in_lossy, err);
    if (rc != 0) return rc;
  }
  return r < 0 ? DECLINE : 0;
}

static int resp_fast_decode_request(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                    px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy,
                                    px_tr_err_t *err) {
  px_fw_t w = {body, len, 0};
  px_fstr_t k, unknown[32];
  px_fv_t in = {PX_FV_NULL, {0}, {NULL, 0}}, sid = in, instr = in;
  px_lossy_t in_lossy;
  /* A refusal is told once the whole body is read: a member repeated
   * later (jansson keeps its last value, in the first one's place) would
   * change what the reference sees. The input's comes after every other
   * member's (the reference reads input last). */
  px_tr_err_t top_err, in_err;
  unsigned seen = 0; /* also the null ones (repeats) */
  int r, nunknown = 0, input_read = 0, input_refused = 0, refused = 0;
  px_lossy_init(&in_lossy);
  ir->parallel = -1;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    int ki = px_fk_of(k, top_keys, NKEYS(top_keys)), rc;
    px_fv_t v;
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == K_INPUT && !refused && px_fw_peek(&w) == PX_FV_ARR) {
      size_t at = w.i;
      rc = decode_input(ctx, &w, ir, a, &in_lossy, &in_err);
      if (rc == REFUSE) { /* the rest of the list skipped */
        w.i = at;
        if (px_fw_value(&w, &v) < 0) return DECLINE;
        input_refused = 1;
      } else if (rc != 0) {
        return DECLINE;
      }
      input_read = 1;
      continue;
    }
    if (ki == K_TOOLS && !refused && px_fw_peek(&w) == PX_FV_ARR) {
      rc = decode_tools(ctx, &w, ir, a, lossy, &top_err);
      if (rc == REFUSE) { /* the rest of the list skipped (w at its start) */
        if (px_fw_value(&w, &v) < 0) return DECLINE;
        refused = 1;
      } else if (rc != 0) {
        return DECLINE;
      }
      continue;
    }
    if (px_fw_value(&w, &v) < 0) return DECLINE;
    if (refused) continue; /* only the repeats looked for */
    if (ki < 0) { /* named as itself when not null; a repeat would keep its place */
      for (int i = 0; i < nunknown; i++)
        if (unknown[i].n == k.n && memcmp(unknown[i].p, k.p, k.n) == 0) return DECLINE;
      if (nunknown == NKEYS(unknown)) return DECLINE;
      unknown[nunknown++] = k;
      if (v.kind == PX_FV_NULL) continue;
      if (px_fast_lossy_key(lossy, k) != 0) return DECLINE;
      continue;
    }
    if (ki == K_INPUT) input_read = -1; /* given, not a list */
    if (v.kind == PX_FV_NULL) continue; /* null = not given, for every field */
    if (ki == K_INPUT) in = v;
    if (ki == K_SAFETY) sid = v;
    if (ki == K_INSTR) instr = v;
    rc = decode_top(ctx, ki, &v, ir, a, lossy, &top_err);
    if (rc == REFUSE)
      refused = 1;
    else if (rc != 0)
      return DECLINE;
  }
  if (r < 0) return DECLINE;
  if (refused || input_refused) {
    if (err != NULL) *err = refused ? top_err : in_err;
    return REFUSE;
  }
  if (input_read == 0) return FAIL(err, "input", "input is required");
  if (input_read < 0 && in.kind != PX_FV_STR)
    return FAIL(err, "input", "input must be a string or a list");
  if (sid.kind == PX_FV_STR) { /* user wins when both are given */
    if (ir->user.p == NULL)
      ir->user = sid.s;
    else
      px_lossy_add(lossy, "safety_identifier");
  }
  if (ir->tools == NULL) {
    /* only hosted tools (dropped): tool_choice and parallel_tool_calls
     * mean nothing without tools */
    if (ir->tool_choice == PX_FTC_REQUIRED || ir->tool_choice == PX_FTC_TOOL)
      px_lossy_add(lossy, "tool_choice");
    ir->tool_choice = PX_FTC_UNSET;
    ir->parallel = -1;
  }
  /* the instructions before the input's system and developer messages */
  if (instr.kind == PX_FV_STR && instr.s.n > 0) {
    px_fpart_t *p = px_fpart_text(a, instr.s);
    if (p == NULL) return DECLINE;
    p->next = ir->system;
    ir->system = p;
    if (ir->system_last == NULL) ir->system_last = p;
  }
  if (input_read > 0) {
    px_lossy_merge(lossy, &in_lossy);
    return 0;
  }
  px_fmsg_t *m = px_fmsg_push(ir, a, 0);
  px_fpart_t *p = px_fpart_text(a, in.s);
  if (m == NULL || p == NULL) return DECLINE;
  px_fpart_push(&m->parts, &m->last, p);
  return 0;
}

/* ======================================================================== */
/* Request encode                                                            */

/* Whether the first tool call of the request with this id is a custom one
 * (responses.c custom_call_id; ids compared by value) */
static int custom_call_id(const px_freq_t *ir, px_fstr_t id) {
  if (id.p == NULL) return 0;
  for (const px_fmsg_t *m = ir->msgs; m; m = m->next)
    for (const px_fpart_t *p = m->parts; p; p = p->next)
      if (p->type == PX_FP_TOOL_CALL && p->id.p != NULL && px_fs_same(p->id, id))
        return p->custom;
  return 0;
}

/* "data:<mt>;base64,<data>" as one string */
static int put_data_url(px_buf_t *b, px_fstr_t mt, const char *dflt, px_fstr_t data) {
  int rc = px_fb_lit(b, "\"data:");
  if (rc == 0) rc = mt.p ? px_fb_put(b, mt.p, mt.n) : px_fb_lit(b, dflt);
  if (rc == 0) rc = px_fb_lit(b, ";base64,");
  if (rc == 0) rc = px_fb_put(b, data.p, data.n);
  if (rc == 0) rc = px_fb_lit(b, "\"");
  return rc;
}

/* What responses.c's enc_user_part cannot write (it refuses the request):
 * put_user_part's answer, the caller's words. */
#define UNWRITABLE 2

/* The IR name of a part kind (the reference's error quotes it). */
static const char *ir_type(px_fpart_type_t t) {
  static const char *const names[] = {"text",  "tool_call", "tool_result", "reasoning",
                                      "image", "file",      "refusal"};
  return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "";
}

/* a user part (text, image, file) -> its input item part (responses.c
 * enc_user_part); UNWRITABLE for what it cannot write */
static int put_user_part(px_buf_t *b, const px_fpart_t *p, px_lossy_t *lossy) {
  int rc;
  if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
  switch (p->type) {
    case PX_FP_TEXT:
      rc = px_fb_lit(b, "{\"type\":\"input_text\",\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : EMPTY);
      break;
    case PX_FP_IMAGE:
      rc = px_fb_lit(b, "{\"type\":\"input_image\",\"image_url\":");
      if (rc == 0 && p->url.p)
        rc = px_fb_str(b, p->url);
      else if (rc == 0 && p->data.p)
        rc = put_data_url(b, p->media_type, "image/png", p->data);
      else if (rc == 0)
        rc = UNWRITABLE;
      break;
    case PX_FP_FILE:
      rc = px_fb_lit(b, "{\"type\":\"input_file\",");
      if (rc == 0 && p->data.p) {
        rc = px_fb_lit(b, "\"file_data\":");
        if (rc == 0) rc = put_data_url(b, p->media_type, "application/pdf", p->data);
        /* OpenAI rejects inline file data without a filename */
        if (rc == 0) rc = px_fb_lit(b, ",\"filename\":");
        if (rc == 0 && p->filename.n > 0)
          rc = px_fb_str(b, p->filename);
        else if (rc == 0)
          rc = px_fb_lit(b, px_fs_is(p->media_type, "text/plain") ? "\"document.txt\""
                                                                  : "\"document.pdf\"");
      } else if (rc == 0 && p->url.p) {
        rc = px_fb_lit(b, "\"file_url\":");
        if (rc == 0) rc = px_fb_str(b, p->url);
      } else if (rc == 0 && p->file_id.p) {
        rc = px_fb_lit(b, "\"file_id\":");
        if (rc == 0) rc = px_fb_str(b, p->file_id);
      } else if (rc == 0) {
        rc = UNWRITABLE;
      }
      break;
    default:
      return UNWRITABLE;
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* A tool result -> function_call_output or custom_tool_call_output: its
 * output the texts joined, or a list when it holds other parts. */
/* an IR part's path ("messages[i].content[j]"), for the reference's words */
static const char *msg_path(char *path, size_t n, size_t i, size_t j) {
  snprintf(path, n, "messages[%zu].content[%zu]", i, j);
  return path;
}

static int put_output(px_buf_t *b, const px_freq_t *ir, const px_fpart_t *p, size_t i,
                      size_t j, px_lossy_t *lossy, px_tr_err_t *err) {
  char path[64];
  if (p->id.p == NULL)
    return FAIL(err, msg_path(path, sizeof(path), i, j),
                "%s: tool result without a call id", path);
  int custom = custom_call_id(ir, p->id), only_text = 1, rc;
  if (p->is_error) px_lossy_add(lossy, "messages[].content[].is_error");
  for (const px_fpart_t *c = p->content; c; c = c->next)
    if (c->type != PX_FP_TEXT) only_text = 0;
  rc = px_fb_lit(b, custom ? "{\"type\":\"custom_tool_call_output\",\"call_id\":"
                           : "{\"type\":\"function_call_output\",\"call_id\":");
  if (rc == 0) rc = px_fb_str(b, p->id);
  if (only_text) {
    if (rc == 0) rc = px_fb_lit(b, ",\"output\":\"");
    if (rc == 0) rc = px_fb_texts(b, p->content);
    if (rc == 0) rc = px_fb_lit(b, "\"}");
    return rc;
  }
  if (rc == 0) rc = px_fb_lit(b, ",\"output\":[");
  for (const px_fpart_t *c = p->content; c && rc == 0; c = c->next) {
    if (c != p->content) rc = px_fb_lit(b, ",");
    if (rc == 0) rc = put_user_part(b, c, lossy);
  }
  if (rc == UNWRITABLE)
    return FAIL(err, msg_path(path, sizeof(path), i, j),
                "%s: unsupported tool result content", path);
  if (rc == 0) rc = px_fb_lit(b, "]}");
  return rc;
}

static int put_call(px_buf_t *b, const px_fpart_t *p, px_arena_t *a) {
  int rc;
  if (p->custom) {
    rc = px_fb_lit(b, "{\"type\":\"custom_tool_call\",\"call_id\":");
    if (rc == 0) rc = px_fb_str(b, p->id.p ? p->id : EMPTY);
    if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
    if (rc == 0) rc = px_fb_str(b, p->name.p ? p->name : EMPTY);
    if (rc == 0) rc = px_fb_lit(b, ",\"input\":");
    if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : EMPTY);
    if (rc == 0) rc = px_fb_lit(b, "}");
    return rc;
  }
  px_fstr_t args = p->args;
  if (args.p == NULL && p->input.ptr != NULL &&
      px_fast_dump_value(a, p->input, &args) != 0)
    return DECLINE;
  rc = px_fb_lit(b, "{\"type\":\"function_call\",\"call_id\":");
  if (rc == 0) rc = px_fb_str(b, p->id.p ? p->id : EMPTY);
  if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
  if (rc == 0) rc = px_fb_str(b, p->name.p ? p->name : EMPTY);
  if (rc == 0) rc = px_fb_lit(b, ",\"arguments\":");
  if (rc == 0) rc = px_fb_str(b, args.p ? args : (px_fstr_t){"{}", 2, 0});
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* a reasoning part with encrypted_content -> a reasoning item (its text
 * the one summary, its id kept) */
static int put_reasoning(px_buf_t *b, const px_fpart_t *p, px_fstr_t enc) {
  int rc = px_fb_lit(b, "{\"type\":\"reasoning\",\"summary\":[");
  if (rc == 0 && p->text.n > 0) {
    rc = px_fb_lit(b, "{\"type\":\"summary_text\",\"text\":");
    if (rc == 0) rc = px_fb_str(b, p->text);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (rc == 0) rc = px_fb_lit(b, "],\"encrypted_content\":");
  if (rc == 0) rc = px_fb_str(b, enc);
  if (rc == 0 && p->id.p) {
    rc = px_fb_lit(b, ",\"id\":");
    if (rc == 0) rc = px_fb_str(b, p->id);
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* The IR messages -> input items (responses.c enc_messages): a message's
 * content parts gather into one message item, which a call, a result or a
 * reasoning item ends. *reasoning_items: whether one was written. */
static int put_input(const px_tr_ctx_t *ctx, const px_freq_t *ir, px_buf_t *b,
                     px_arena_t *a, px_lossy_t *lossy, int *reasoning_items,
                     px_tr_err_t *err) {
  static int k_enc = -2, k_red;
  if (k_enc == -2) {
    k_red = px_frtok_index("redacted_data");
    k_enc = px_frtok_index("encrypted_content");
  }
  if (k_enc < 0) return DECLINE;
  const px_lossy_names_t *names = px_in_names(ctx);
  int first = 1, rc = 0;
  size_t i = 0;
  for (const px_fmsg_t *m = ir->msgs; m && rc == 0; m = m->next, i++) {
    int open = 0; /* a message item is open, its content being written */
    size_t j = 0;
    char path[64];
    for (const px_fpart_t *p = m->parts; p && rc == 0; p = p->next, j++) {
      int item = p->type == PX_FP_TOOL_RESULT || p->type == PX_FP_TOOL_CALL;
      if (p->type == PX_FP_REASONING) {
        if (p->tok[k_enc].p == NULL) { /* dropped: named as the client spells it */
          px_lossy_add(lossy,
                       k_red >= 0 && p->tok[k_red].p != NULL && names->reasoning_redacted
                           ? names->reasoning_redacted
                           : names->reasoning_text);
          continue;
        }
        item = 1;
      }
      if (item) {
        if (open) rc = px_fb_lit(b, "]}");
        open = 0;
        if (rc == 0 && !first) rc = px_fb_lit(b, ",");
        first = 0;
        if (rc != 0) break;
        if (p->type == PX_FP_TOOL_RESULT) {
          rc = put_output(b, ir, p, i, j, lossy, err);
        } else if (p->type == PX_FP_TOOL_CALL) {
          rc = put_call(b, p, a);
        } else {
          rc = put_reasoning(b, p, p->tok[k_enc]);
          *reasoning_items = 1;
        }
        continue;
      }
      /* a content part of the pending message */
      if (!open) {
        rc = px_fb_lit(b, first ? "{\"type\":\"message\",\"role\":"
                                : ",{\"type\":\"message\",\"role\":");
        if (rc == 0)
          rc = px_fb_lit(b, m->assistant     ? "\"assistant\",\"content\":["
                            : m->system_note ? "\"system\",\"content\":[" /* in place */
                                             : "\"user\",\"content\":[");
        first = 0;
        open = 1;
      } else {
        rc = px_fb_lit(b, ",");
      }
      if (rc != 0) break;
      if (!m->assistant) {
        rc = put_user_part(b, p, lossy);
      } else if (p->type == PX_FP_TEXT) {
        if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
        rc = px_fb_lit(b, "{\"type\":\"output_text\",\"text\":");
        if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : EMPTY);
        if (rc == 0) rc = px_fb_lit(b, ",\"annotations\":[]}");
      } else if (p->type == PX_FP_REFUSAL) {
        rc = px_fb_lit(b, "{\"type\":\"refusal\",\"refusal\":");
        if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : EMPTY);
        if (rc == 0) rc = px_fb_lit(b, "}");
      } else {
        rc = UNWRITABLE;
      }
      if (rc == UNWRITABLE)
        return FAIL(err, msg_path(path, sizeof(path), i, j),
                    "%s: unsupported content part '%s'", path, ir_type(p->type));
    }
    if (rc == 0 && open) rc = px_fb_lit(b, "]}");
  }
  return rc;
}

static int put_tools(const px_freq_t *ir, px_buf_t *b, px_lossy_t *lossy) {
  int rc = px_fb_lit(b, ",\"tools\":[");
  for (const px_ftool_t *t = ir->tools; t && rc == 0; t = t->next) {
    if (t != ir->tools) rc = px_fb_lit(b, ",");
    if (rc == 0)
      rc = px_fb_lit(b, t->custom ? "{\"type\":\"custom\",\"name\":"
                                  : "{\"type\":\"function\",\"name\":");
    if (rc == 0) rc = px_fb_str(b, t->name.p ? t->name : EMPTY);
    if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", t->desc);
    if (t->custom) {
      if (rc == 0) rc = px_fb_opt_raw(b, ",\"format\":", t->format);
      if (rc == 0) rc = px_fb_lit(b, "}");
      continue;
    }
    if (rc == 0) rc = px_fb_lit(b, ",\"parameters\":");
    if (rc == 0) rc = px_fb_raw(b, t->params.ptr ? t->params : PX_FAST_OPENAI_PARAMS);
    /* Responses defaults strict to true, which rejects most schemas: false
     * unless the client asked for strict */
    if (rc == 0)
      rc = px_fb_lit(b, t->strict == 1 ? ",\"strict\":true}" : ",\"strict\":false}");
    if (t->cache_control.ptr) px_lossy_add(lossy, "cache_control");
  }
  if (rc == 0) rc = px_fb_lit(b, "]");
  return rc;
}

/* text {format, verbosity} from the IR response format and verbosity */
static int put_text(const px_freq_t *ir, px_buf_t *b) {
  int has_rf = ir->rf_text || ir->rf_json || ir->rf_schema.ptr != NULL;
  if (!has_rf && ir->verbosity.p == NULL) return 0;
  int rc = px_fb_lit(b, ",\"text\":{");
  if (rc == 0 && has_rf) {
    if (ir->rf_schema.ptr != NULL) {
      rc = px_fb_lit(b, "\"format\":{\"type\":\"json_schema\",\"schema\":");
      if (rc == 0) rc = px_fb_raw(b, ir->rf_schema);
      if (rc == 0) rc = px_fb_opt_str(b, ",\"name\":", ir->rf_name);
      if (rc == 0 && ir->rf_strict >= 0)
        rc = px_fb_lit(b, ir->rf_strict ? ",\"strict\":true" : ",\"strict\":false");
      if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", ir->rf_desc);
      if (rc == 0) rc = px_fb_lit(b, "}");
    } else {
      rc = px_fb_lit(b, ir->rf_json ? "\"format\":{\"type\":\"json_object\"}"
                                    : "\"format\":{\"type\":\"text\"}");
    }
  }
  if (rc == 0 && ir->verbosity.p != NULL) {
    rc = px_fb_lit(b, has_rf ? ",\"verbosity\":" : "\"verbosity\":");
    if (rc == 0) rc = px_fb_str(b, ir->verbosity);
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* IR reasoning -> reasoning {effort, summary} (responses.c reasoning_out);
 * *possible: it asks for reasoning (an effort other than none) */
static int put_reasoning_cfg(const px_tr_ctx_t *ctx, const px_freq_t *ir, px_buf_t *b,
                             px_lossy_t *lossy, int *possible) {
  px_fstr_t effort = ir->effort, summary = ir->summary;
  if (effort.p == NULL && ir->reasoning_enabled != 0 && ir->budget.ptr != NULL) {
    const char *e = px_effort_of_budget(ir->budget_v);
    effort = (px_fstr_t){e, strlen(e), 0};
  }
  if (effort.p == NULL && summary.p == NULL && ir->reasoning_enabled == 1) {
    /* Anthropic adaptive thinking: the model's own effort, its reasoning
     * shown; the setting itself is declared */
    summary = (px_fstr_t){"auto", 4, 0};
    px_lossy_add(lossy, px_in_names(ctx)->reasoning_config);
  }
  if (effort.p == NULL && summary.p == NULL) return 0;
  *possible = !px_fs_is(effort, "none");
  int rc = px_fb_lit(b, ",\"reasoning\":{");
  if (rc == 0 && effort.p) {
    rc = px_fb_lit(b, "\"effort\":");
    if (rc == 0) rc = px_fb_str(b, effort);
  }
  if (rc == 0 && summary.p) {
    rc = px_fb_lit(b, effort.p ? ",\"summary\":" : "\"summary\":");
    if (rc == 0) rc = px_fb_str(b, summary);
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

static int resp_fast_encode_request(const px_tr_ctx_t *ctx, const px_freq_t *ir,
                                    px_buf_t *b, px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
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
  int reasoning_items = 0, possible = 0;
  if (rc == 0) rc = px_fb_lit(b, ",\"input\":[");
  if (rc == 0) rc = put_input(ctx, ir, b, a, lossy, &reasoning_items, err);
  if (rc == REFUSE) return rc;
  if (rc == 0) rc = px_fb_lit(b, "]");
  if (rc == 0 && ir->tools != NULL) rc = put_tools(ir, b, lossy);
  if (rc == 0 && ir->tool_choice == PX_FTC_TOOL) {
    int custom = px_ftool_custom(ir, ir->tc_name);
    rc = px_fb_lit(b, custom ? ",\"tool_choice\":{\"type\":\"custom\",\"name\":"
                             : ",\"tool_choice\":{\"type\":\"function\",\"name\":");
    if (rc == 0) rc = px_fb_str(b, ir->tc_name.p ? ir->tc_name : EMPTY);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (rc == 0) rc = px_fb_openai_tc(b, ir->tool_choice, ir->parallel);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"max_output_tokens\":", ir->max_tokens);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"temperature\":", ir->temperature);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"top_p\":", ir->top_p);
  if (ir->top_k.ptr) px_lossy_add(lossy, "top_k");
  if (ir->stop.ptr || ir->stop1.p) px_lossy_add(lossy, px_in_names(ctx)->stop);
  if (rc == 0) rc = put_text(ir, b);
  if (rc == 0) rc = px_fb_opt_str(b, ",\"prompt_cache_key\":", ir->prompt_cache_key);
  if (rc == 0 && ir->has_reasoning) rc = put_reasoning_cfg(ctx, ir, b, lossy, &possible);
  if (rc == 0) rc = px_fb_opt_str(b, ",\"user\":", ir->user);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"metadata\":", ir->metadata);
  if (rc == 0 && ir->stream_false) rc = px_fb_lit(b, ",\"stream\":false");
  if (rc == 0 && ir->stream_true) rc = px_fb_lit(b, ",\"stream\":true");
  /* A client that cannot name a stored response makes the gateway
   * stateless toward Responses: never store, and ask for the encrypted
   * reasoning whenever reasoning can occur (responses.c encode_request) */
  if (rc == 0 && !px_tr_in_can(ctx, PX_CAP_STORED_RESPONSES)) {
    rc = px_fb_lit(b, ",\"store\":false");
    if (rc == 0 && (possible || reasoning_items))
      rc = px_fb_lit(b, ",\"include\":[\"reasoning.encrypted_content\"]");
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* ======================================================================== */
/* Response decode                                                           */

/* a message item's content array at the cursor (checked reads): output
 * text (its annotations kept), refusals; other parts dropped and named */
static int decode_message_content(px_fw_t *w, px_fresp_t *ir, px_arena_t *a,
                                  px_lossy_t *lossy) {
  int r, first = 1;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fc_elem(w, &first)) == 1) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text"), PX_FK("annotations"),
                                     PX_FK("logprobs"), PX_FK("refusal")};
    px_fv_t f[5];
    unsigned seen = 0;
    if (px_fw_peek(w) != PX_FV_OBJ) { /* no type: skipped there */
      if (px_fc_value(w, &f[0]) < 0) return DECLINE;
      continue;
    }
    if (px_fc_fields(w, keys, 5, f, &seen) != 0) return DECLINE;
    px_fstr_t type = FSTR(0);
    if (type.p == NULL) continue; /* skipped there */
    px_fpart_t *p;
    if (px_fs_is(type, "output_text")) {
      if ((p = px_fpart_text(a, FSTR(1).p ? FSTR(1) : EMPTY)) == NULL) return DECLINE;
      if (HAS(2) && f[2].kind == PX_FV_ARR && !px_fw_empty(f[2].raw))
        p->annotations = f[2].raw;
      if (HAS(3) && f[3].kind == PX_FV_ARR && !px_fw_empty(f[3].raw))
        px_lossy_add(lossy, "output[].content[].logprobs");
    } else if (px_fs_is(type, "refusal")) {
      if ((p = px_fpart_new(a, PX_FP_REFUSAL)) == NULL) return DECLINE;
      p->text = FSTR(4).p ? FSTR(4) : EMPTY;
    } else {
      px_lossy_add(lossy, "output[].content[].other");
      continue;
    }
    px_fpart_push(&ir->content, &ir->last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* An output item no other protocol carries, named (px_responses_lossy_item). */
static int lossy_item(px_lossy_t *lossy, px_fstr_t type) {
  char t[32];
  /* the names it knows are short: a longer one is "other" there too */
  px_responses_lossy_item(lossy, px_fs_value(type, t, sizeof(t)) < sizeof(t) ? t : "");
  return 0;
}

/* the output array at the cursor, checked as it is read; a message's
 * content is decoded where it stands when its type came first (as
 * OpenAI writes it), else from its span after the item */
enum {
  O_TYPE,
  O_CONTENT,
  O_CALL_ID,
  O_NAME,
  O_ARGS,
  O_NS,
  O_INPUT,
  O_ID,
  O_SUMMARY,
  O_ENC
};
static const px_fkey_t out_keys[] = {
    PX_FK("type"),      PX_FK("content"),          PX_FK("call_id"), PX_FK("name"),
    PX_FK("arguments"), PX_FK("namespace"),        PX_FK("input"),   PX_FK("id"),
    PX_FK("summary"),   PX_FK("encrypted_content")};

static int decode_output(const px_tr_ctx_t *ctx, px_fw_t *w, px_fresp_t *ir,
                         px_arena_t *a, px_lossy_t *lossy, int *has_tool) {
  int r, first = 1;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fc_elem(w, &first)) == 1) {
    px_fv_t f[NKEYS(out_keys)];
    px_fstr_t k;
    unsigned seen = 0;
    int ri, ifirst = 1, content_done = 0;
    if (px_fw_peek(w) != PX_FV_OBJ) { /* no type: skipped there */
      if (px_fc_value(w, &f[0]) < 0) return DECLINE;
      continue;
    }
    if (px_fw_open(w, '{') < 0) return DECLINE;
    while ((ri = px_fc_member(w, &k, &ifirst)) == 1) {
      int ki = px_fk_of(k, out_keys, NKEYS(out_keys));
      if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
      if (ki == O_CONTENT && FSTR(O_TYPE).p != NULL && px_fs_is(f[O_TYPE].s, "message") &&
          w->p[w->i] == '[') {
        if (decode_message_content(w, ir, a, lossy) != 0) return DECLINE;
        content_done = 1;
        continue;
      }
      px_fv_t v;
      if (px_fc_value(w, &v) < 0) return DECLINE;
      if (ki >= 0) f[ki] = v;
    }
    if (ri < 0) return DECLINE;
    px_fstr_t type = FSTR(O_TYPE);
    if (type.p == NULL) continue; /* skipped there */
    if (px_fs_is(type, "message")) {
      if (HAS(O_CONTENT) && !content_done && f[O_CONTENT].kind == PX_FV_ARR) {
        px_fw_t cw = {f[O_CONTENT].raw.ptr, f[O_CONTENT].raw.len, 0};
        if (decode_message_content(&cw, ir, a, lossy) != 0) return DECLINE;
      }
      continue;
    }
    int fc = px_fs_is(type, "function_call");
    if (fc ||
        (px_fs_is(type, "custom_tool_call") && px_tr_in_can(ctx, PX_CAP_CUSTOM_TOOLS))) {
      px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
      if (p == NULL) return DECLINE;
      p->id = FSTR(O_CALL_ID).p ? FSTR(O_CALL_ID) : EMPTY;
      p->name = FSTR(O_NAME).p ? FSTR(O_NAME) : EMPTY;
      if (fc) {
        p->args = FSTR(O_ARGS).p ? FSTR(O_ARGS) : EMPTY;
      } else { /* for a client that has custom tools too */
        p->custom = 1;
        p->text = FSTR(O_INPUT).p ? FSTR(O_INPUT) : EMPTY;
      }
      *has_tool = 1;
      px_fpart_push(&ir->content, &ir->last, p);
      if (fc && FSTR(O_NS).p != NULL) px_lossy_add(lossy, "output[].namespace");
    } else if (px_fs_is(type, "reasoning")) {
      /* the reasoning_text contents joined, else the summaries; its token
       * and id as they are */
      static int k_enc = -2;
      if (k_enc == -2) k_enc = px_frtok_index("encrypted_content");
      px_fpart_t *p = px_fpart_new(a, PX_FP_REASONING);
      if (p == NULL || k_enc < 0 ||
          join_texts(HAS(O_CONTENT) ? &f[O_CONTENT] : NULL, "reasoning_text", &p->text,
                     a) != 0)
        return DECLINE;
      if (p->text.n == 0 && join_texts(HAS(O_SUMMARY) ? &f[O_SUMMARY] : NULL,
                                       "summary_text", &p->text, a) != 0)
        return DECLINE;
      p->tok[k_enc] = FSTR(O_ENC);
      p->id = FSTR(O_ID);
      px_fpart_push(&ir->content, &ir->last, p);
    } else if (lossy_item(lossy, type) != 0) {
      return DECLINE;
    }
  }
  return r < 0 ? DECLINE : 0;
}

/* responses.c bad_gateway: the upstream's answer is no answer */
static int bad_gateway(px_tr_err_t *err, const char *fmt, px_fstr_t arg) {
  px_tr_fail(err, "", fmt, px_fs_msg(arg));
  if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
  return REFUSE;
}

/* The body is read once and checked as it is read (px_fc_*: the hub scans
 * nothing before): output and usage are decoded where they stand, every
 * other member is checked and skipped. */
enum { R_ID, R_MODEL, R_CREATED, R_STATUS, R_OUTPUT, R_USAGE, R_INCOMPLETE, R_ERROR };
static const px_fkey_t resp_keys[] = {
    PX_FK("id"),     PX_FK("model"), PX_FK("created_at"),         PX_FK("status"),
    PX_FK("output"), PX_FK("usage"), PX_FK("incomplete_details"), PX_FK("error")};

static int resp_fast_decode_response(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                     px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy,
                                     px_tr_err_t *err) {
  px_fv_t f[NKEYS(resp_keys)];
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  int r, first = 1, has_tool = 0, output = 0;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fc_member(&w, &k, &first)) == 1) {
    int ki = px_fk_of(k, resp_keys, NKEYS(resp_keys));
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == R_OUTPUT && px_fw_peek(&w) == PX_FV_ARR) {
      if (decode_output(ctx, &w, ir, a, lossy, &has_tool) != 0) return DECLINE;
      output = 1;
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
  if (r < 0 || px_fc_end(&w) < 0) return DECLINE;
  /* the whole body read and valid: the reference's refusals */
  if (!output) return bad_gateway(err, "upstream response has no output%s", EMPTY);
  px_fstr_t status = FSTR(R_STATUS);
  if (status.p == NULL) status = (px_fstr_t){"completed", 9, 0};
  if (px_fs_is(status, "failed") && HAS(R_ERROR) && f[R_ERROR].kind == PX_FV_OBJ) {
    static const px_fkey_t ekeys[] = {PX_FK("message")};
    px_fv_t g[1];
    unsigned es = 0;
    if (px_fv_kfields(&f[R_ERROR], ekeys, 1, g, &es) != 0) return DECLINE;
    px_fstr_t msg =
        es && g[0].kind == PX_FV_STR ? g[0].s : (px_fstr_t){"(no message)", 12, 0};
    return bad_gateway(err, "upstream response failed: %s", msg);
  }
  if (!px_fs_is(status, "completed") && !px_fs_is(status, "incomplete") &&
      !px_fs_is(status, "failed"))
    return bad_gateway(err, "upstream response is not finished (status %s)", status);
  if (!HAS(R_USAGE)) ir->usage_known = 1, ir->usage_in = ir->usage_out = -1;
  ir->id = FSTR(R_ID).p ? FSTR(R_ID) : EMPTY;
  if (FSTR(R_MODEL).p != NULL) ir->model = f[R_MODEL].s;
  if (px_fast_created(HAS(R_CREATED) ? &f[R_CREATED] : NULL, ir) != 0) return DECLINE;
  ir->finish = status;
  if (px_fs_is(status, "incomplete")) {
    /* the reason decides content_filter / max_tokens */
    static const px_fkey_t dkeys[] = {PX_FK("reason")};
    px_fstr_t reason = {0};
    px_fv_t g[1];
    unsigned ds = 0;
    if (HAS(R_INCOMPLETE) && f[R_INCOMPLETE].kind == PX_FV_OBJ) {
      if (px_fv_kfields(&f[R_INCOMPLETE], dkeys, 1, g, &ds) != 0) return DECLINE;
      if (ds && g[0].kind == PX_FV_STR) reason = g[0].s;
    }
    ir->stop = px_fs_is(reason, "content_filter") ? PX_STOP_CONTENT_FILTER
                                                  : PX_STOP_MAX_TOKENS;
  } else if (px_fs_is(status, "failed")) {
    ir->stop = PX_STOP_REFUSAL;
  } else {
    ir->stop = has_tool ? PX_STOP_TOOL_USE : PX_STOP_END_TURN;
  }
  return 0;
}

/* ======================================================================== */
/* Response encode                                                           */

/* The reference's buffers of the ids it makes (encode_response: rid, mid
 * 160 bytes, iid 200) */
#define RID_SIZE 160
#define IID_SIZE 200

/* An id as responses_common.c's id_cat makes it: pfx, the id, and "_" +
 * num (with_num), cut to size - 1 bytes. An id that fits is written as it
 * is (escapes kept); one cut is cut by its value's bytes (one with escapes
 * unescaped, cut, written escaped); one cut inside a UTF-8 character (the
 * reference's string would not be one) declines. */
static int put_id(px_buf_t *b, const char *pfx, px_fstr_t id, int with_num, int num,
                  size_t size) {
  char d[24];
  size_t dl = with_num ? (size_t)snprintf(d, sizeof(d), "_%d", num) : 0;
  size_t pl = strlen(pfx), room = size - 1;
  int rc = px_fb_lit(b, pfx);
  if (pl + px_fs_len(id) + dl <= room) {
    if (rc == 0 && id.n) rc = px_fb_put(b, id.p, id.n);
    if (rc == 0 && dl) rc = px_fb_put(b, d, dl);
    return rc;
  }
  /* cut by the value's bytes: an id with escapes unescaped first (its
   * first room - pl bytes and the one after them) and written escaped */
  char v[IID_SIZE + 1];
  const char *ip = id.p;
  size_t iv = id.n;
  if (id.esc) {
    iv = px_fs_value(id, v, room - pl + 2 <= sizeof(v) ? room - pl + 2 : sizeof(v));
    ip = v;
  }
  size_t in = iv < room - pl ? iv : room - pl; /* pfx is short: it fits */
  if (in < iv && ((unsigned char)ip[in] & 0xC0) == 0x80) return DECLINE;
  if (rc == 0)
    rc = id.esc ? (px_buf_json_escape_as(b, ip, in, PX_ESC_JANSSON) < 0 ? -1 : 0)
                : px_fb_put(b, ip, in);
  size_t left = room - pl - in;
  if (rc == 0 && dl && left) rc = px_fb_put(b, d, dl < left ? dl : left);
  return rc;
}

/* ids as responses.c makes them: prefix + id unless its value has it
 * already (px_id_prefix), cut to size - 1 bytes */
static int put_prefixed(px_buf_t *b, const char *prefix, px_fstr_t id, size_t size) {
  return put_id(b, px_fs_starts(id, prefix, strlen(prefix)) ? "" : prefix, id, 0, 0, size);
}

/* A text part's annotations in the Responses shape (responses_common.c
 * px_responses_annotations): the kinds Responses has as they are, others
 * dropped and named; Chat's nested url_citation declines (the IR's are
 * flat). */
static int put_annotations(px_buf_t *b, px_str_t ann, px_lossy_t *lossy) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("url_citation")};
  int r, rc = px_fb_lit(b, "["), n = 0;
  px_fw_t w = {ann.ptr, ann.len, 0};
  if (ann.ptr == NULL) return rc == 0 ? px_fb_lit(b, "]") : rc;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while (rc == 0 && (r = px_fw_elem(&w)) == 1) {
    px_fv_t f[2], el;
    unsigned seen = 0;
    size_t at = w.i;
    if (px_fw_peek(&w) != PX_FV_OBJ) { /* no type: skipped */
      if (px_fw_value(&w, &el) < 0) return DECLINE;
      continue;
    }
    if (px_fw_kfields(&w, keys, 2, f, &seen) != 0) return DECLINE;
    px_fstr_t t = FSTR(0);
    if (t.p == NULL) continue;
    int url = px_fs_is(t, "url_citation");
    if (url && HAS(1) && f[1].kind == PX_FV_OBJ) return DECLINE;
    if (url || px_fs_is(t, "file_citation") || px_fs_is(t, "container_file_citation") ||
        px_fs_is(t, "file_path")) {
      if (n++ > 0) rc = px_fb_lit(b, ",");
      if (rc == 0) rc = px_fb_raw(b, (px_str_t){ann.ptr + at, w.i - at});
    } else {
      px_lossy_add(lossy, "output[].content[].annotations");
    }
  }
  if (rc == 0 && r < 0) return DECLINE;
  return rc == 0 ? px_fb_lit(b, "]") : rc;
}

/* a message item's head: its id the n-th message's (responses_common.c
 * px_responses_msg_id) */
static int put_msg_head(px_buf_t *b, px_fstr_t base, int n) {
  int rc = px_fb_lit(b, "{\"id\":\"");
  if (rc == 0)
    rc = put_id(b, px_fs_starts(base, "msg_", 4) ? "" : "msg_", base, n != 0, n, RID_SIZE);
  if (rc == 0)
    rc = px_fb_lit(b,
                   "\",\"type\":\"message\",\"status\":\"completed\",\"role\":"
                   "\"assistant\",\"content\":[");
  return rc;
}

/* a call's item id: prefix + its call id, or prefix + base + "_" + the
 * output index when it has none (px_responses_fc_id, _ctc_id) */
static int put_call_id(px_buf_t *b, const char *prefix, px_fstr_t id, px_fstr_t base,
                       int oi) {
  if (id.n) return put_prefixed(b, prefix, id, IID_SIZE);
  return put_id(b, prefix, base, 1, oi, IID_SIZE);
}

/* a tool call -> a function_call or custom_tool_call item */
static int put_call_item(px_buf_t *b, const px_fpart_t *p, px_fstr_t base, int oi) {
  int rc = px_fb_lit(b, "{\"id\":\"");
  if (rc == 0) rc = put_call_id(b, p->custom ? "ctc_" : "fc_", p->id, base, oi);
  if (rc == 0)
    rc = px_fb_lit(b, p->custom
                          ? "\",\"type\":\"custom_tool_call\",\"status\":\"completed\","
                            "\"call_id\":"
                          : "\",\"type\":\"function_call\",\"status\":\"completed\","
                            "\"call_id\":");
  if (rc == 0) rc = px_fb_str(b, p->id.p ? p->id : EMPTY);
  if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
  if (rc == 0) rc = px_fb_str(b, p->name.p ? p->name : EMPTY);
  if (rc == 0) rc = px_fb_lit(b, p->custom ? ",\"input\":" : ",\"arguments\":");
  if (rc == 0)
    rc = px_fb_str(
        b, p->custom ? (p->text.p ? p->text : EMPTY) : (p->args.p ? p->args : EMPTY));
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* a reasoning part -> a reasoning item: its id the upstream's, else "rs_"
 * + base + output index (px_responses_rs_id); its text the one summary;
 * the token it carries for a Responses client (px_rtok_out) */
static int put_reasoning_item(px_buf_t *b, const px_fpart_t *p, px_fstr_t base, int oi) {
  int rc = px_fb_lit(b, "{\"id\":\"");
  if (rc == 0) rc = p->id.n ? put_id(b, "", p->id, 0, 0, IID_SIZE)
                            : put_id(b, "rs_", base, 1, oi, IID_SIZE);
  if (rc == 0) rc = px_fb_lit(b, "\"");
  if (rc == 0) rc = px_fb_lit(b, ",\"type\":\"reasoning\",\"summary\":[");
  if (rc == 0 && p->text.n > 0) {
    rc = px_fb_lit(b, "{\"type\":\"summary_text\",\"text\":");
    if (rc == 0) rc = px_fb_str(b, p->text);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (rc == 0) rc = px_fb_lit(b, "]");
  if (rc == 0) {
    size_t at = b->len;
    rc = px_fb_lit(b, ",\"encrypted_content\":");
    int t = rc == 0 ? px_fb_rtok(b, PX_PROTO_RESPONSES, p) : rc;
    if (t == 1) b->len = at; /* none for a Responses client */
    rc = t < 0 ? t : 0;
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

static int resp_fast_encode_response(const px_tr_ctx_t *ctx, const px_fresp_t *ir,
                                     px_buf_t *b, px_arena_t *a, px_lossy_t *lossy,
                                     px_tr_err_t *err) {
  (void)a;
  (void)err;
  /* ids go through fixed buffers there (long ones are cut as there:
   * put_id; their prefixes, "resp_", "fc_", compared by value) */
  px_fstr_t uid = ir->id.p && ir->id.n ? ir->id : (px_fstr_t){"proxai", 6, 0};
  /* item ids: the id without "resp_" (one longer than it) */
  px_fstr_t base = uid;
  if (px_fs_starts(uid, "resp_", 5) && px_fs_len(uid) > 5) base = px_fs_after(uid, 5);
  int has_refusal = 0;
  for (const px_fpart_t *p = ir->content; p; p = p->next)
    if (p->type == PX_FP_REFUSAL) has_refusal = 1;
  px_stop_t stop = ir->stop == PX_STOP_NONE ? PX_STOP_END_TURN : ir->stop;
  const char *reason = NULL;
  const char *status = px_stop_to_responses(stop, has_refusal, &reason);
  int rc = px_fb_lit(b, "{\"id\":\"");
  size_t id_at = b->len; /* traces: the id and the model as written */
  if (rc == 0 && ctx->resp_id != NULL) /* ids of kept responses are plain */
    rc = px_fb_lit(b, ctx->resp_id);
  else if (rc == 0)
    rc = put_prefixed(b, "resp_", uid, RID_SIZE);
  size_t id_end = b->len;
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
  size_t model_at = b->len;
  /* the client's model, else the upstream's (as the hub's pipeline sets it) */
  if (rc == 0)
    rc = ctx->client_model ? px_buf_json_str(b, ctx->client_model, strlen(ctx->client_model))
         : ir->model.p     ? px_fb_str(b, ir->model)
                           : px_fb_lit(b, "\"\"");
  size_t model_end = b->len;
  if (rc == 0) rc = px_fb_lit(b, ",\"output\":[");
  int oi = 0, nmsg = 0, in_msg = 0;
  for (const px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
    if (p->type == PX_FP_TEXT || p->type == PX_FP_REFUSAL) {
      if (!in_msg) { /* a message item, open until a call or reasoning */
        if (oi > 0) rc = px_fb_lit(b, ",");
        if (rc == 0) rc = put_msg_head(b, base, nmsg++);
        in_msg = 1;
        oi++;
      } else {
        rc = px_fb_lit(b, ",");
      }
      if (rc == 0 && p->type == PX_FP_REFUSAL) {
        rc = px_fb_lit(b, "{\"type\":\"refusal\",\"refusal\":");
        if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : EMPTY);
        if (rc == 0) rc = px_fb_lit(b, "}");
        continue;
      }
      if (rc == 0) rc = px_fb_lit(b, "{\"type\":\"output_text\",\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : EMPTY);
      if (rc == 0) rc = px_fb_lit(b, ",\"annotations\":");
      if (rc == 0) rc = put_annotations(b, p->annotations, lossy);
      if (rc == 0) rc = px_fb_lit(b, "}");
      continue;
    }
    if (in_msg) rc = px_fb_lit(b, "]}"); /* any other part ends the message */
    in_msg = 0;
    if (p->type != PX_FP_TOOL_CALL && p->type != PX_FP_REASONING)
      continue; /* not there */
    if (rc == 0 && oi > 0) rc = px_fb_lit(b, ",");
    if (rc == 0)
      rc = p->type == PX_FP_TOOL_CALL ? put_call_item(b, p, base, oi)
                                      : put_reasoning_item(b, p, base, oi);
    oi++;
  }
  if (rc == 0 && in_msg) rc = px_fb_lit(b, "]}");
  if (rc == 0 && px_stop_refused(stop) && ir->refusal_explanation.p != NULL) {
    if (!has_refusal) {
      /* a refusal with no visible wording: the explanation is the only
       * wording there is */
      if (oi > 0) rc = px_fb_lit(b, ",");
      if (rc == 0) rc = put_msg_head(b, base, nmsg++);
      if (rc == 0) rc = px_fb_lit(b, "{\"type\":\"refusal\",\"refusal\":");
      if (rc == 0) rc = px_fb_str(b, ir->refusal_explanation);
      if (rc == 0) rc = px_fb_lit(b, "}]}");
    } else {
      px_lossy_add(lossy, px_out_names(ctx)->refusal_explanation);
    }
  }
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
  if (rc == 0) px_answer_wrote(ctx->client, b, id_at, id_end, model_at, model_end, status);
  return rc;
}

/* responses.c's responses_count_request: the members a count does not take */
static int resp_fast_count(px_buf_t *b, size_t start, const char *model) {
  static const px_fkey_t drop[] = {PX_FK("stream"), PX_FK("max_output_tokens"),
                                   PX_FK("stream_options")};
  (void)model;
  return px_fb_drop_members(b, start, drop, (int)(sizeof(drop) / sizeof(drop[0])));
}

const px_fast_ops_t px_responses_fast = {
    .count_request = resp_fast_count,
    .decode_request = resp_fast_decode_request,
    .encode_request = resp_fast_encode_request,
    .decode_response = resp_fast_decode_response,
    .encode_response = resp_fast_encode_response,
    .encodes = PX_FU_ALL | PX_FU_SYSTEM_NOTE,
    .response_checked = 1,
    .resp_encodes = PX_FU_REASONING | PX_FU_REFUSAL | PX_FU_CUSTOM | PX_FU_ANNOTATIONS |
                    PX_FU_REFUSAL_EXPL,
};

/* ======================================================================== */
/* The wire: errors, token counts, model lists, the protocol table          */

/* ---------------------------------------------------------------------- */
/* errors                                                                  */

static int decode_error(int status, const char *body, size_t len,
                        px_upstream_err_t *out) {
  json_error_t e;
  json_t *j = px_jdoc_load(body, len, 0, &e);
  if (j == NULL) return PX_EINVAL;
  json_t *er = json_object_get(j, "error");
  if (!json_is_object(er)) {
    json_decref(j);
    return PX_EINVAL;
  }
  const char *type = px_jstr(er, "type");
  const char *code = px_jstr(er, "code");
  const char *msg = px_jstr(er, "message");
  out->kind = px_errkind_from_type(type, status);
  /* OpenAI sends 401/403/404/429 with type invalid_request_error (the code
   * says invalid_api_key, ...): the status is the better witness then. */
  if (out->kind == PX_ERR_INVALID && status != 400 && status != 422 && status >= 400)
    out->kind = px_errkind_from_type(NULL, status);
  snprintf(out->type, sizeof(out->type), "%s", type ? type : (code ? code : ""));
  snprintf(out->message, sizeof(out->message), "%s", msg ? msg : "");
  json_decref(j);
  return 0;
}

static int encode_error(px_buf_t *out, px_errkind_t kind, const char *type,
                        const char *message, const char *param, const char *request_id) {
  (void)request_id;
  if (type == NULL) type = px_errkind_openai(kind);
  return px_openai_error_body(out, type, message, param);
}

static int encode_stream_error(px_buf_t *out, px_errkind_t kind, const char *message) {
  if (px_responses_stream_error(out, kind, message) == 0) return 0;
  px_buf_t d;
  px_buf_init(&d, 64u << 10);
  int rc =
      px_buf_puts(&d,
                  "{\"type\":\"response.failed\",\"sequence_number\":0,\"response\":{"
                  "\"id\":\"resp_proxai_error\",\"object\":\"response\","
                  "\"created_at\":0,\"status\":\"failed\",\"error\":{\"code\":");
  const char *code = kind == PX_ERR_RATE_LIMIT ? "rate_limit_exceeded" : "server_error";
  if (rc == 0) rc = px_buf_json_str(&d, code, strlen(code));
  if (rc == 0) rc = px_buf_puts(&d, ",\"message\":");
  if (rc == 0)
    rc = px_buf_json_str(&d, message ? message : "upstream error",
                         message ? strlen(message) : 14);
  if (rc == 0)
    rc = px_buf_puts(&d,
                     "},\"incomplete_details\":null,\"instructions\":null,"
                     "\"metadata\":{},\"model\":\"\",\"output\":[],"
                     "\"parallel_tool_calls\":true,\"temperature\":null,"
                     "\"tool_choice\":\"auto\",\"tools\":[],\"top_p\":null}}");
  if (rc == 0) rc = px_sse_write(out, "response.failed", d.data, d.len);
  px_buf_free(&d);
  return rc;
}

/* ---- token counting: POST /responses/input_tokens ---- */

static int responses_count_encode(px_buf_t *out, int64_t n) {
  return px_count_body(out, "{\"object\":\"response.input_tokens\",\"input_tokens\":", n);
}

const px_proto_ops_t px_proto_responses = {
    .id = PX_PROTO_RESPONSES,
    .name = "openai_responses",
    .otel_provider = "openai",
    .otel_operation = "chat",
    .inbound_path = "/responses",
    .upstream_path = "/responses",
    .decode_error = decode_error,
    .encode_error = encode_error,
    .encode_stream_error = encode_stream_error,
    .sdec_new = px_responses_sdec_new,
    .sdec_feed = px_responses_sdec_feed,
    .sdec_finish = px_responses_sdec_finish,
    .sdec_free = px_responses_sdec_free,
    .senc_new = px_responses_senc_new,
    .senc_event = px_responses_senc_event,
    .senc_free = px_responses_senc_free,
    .count_upstream_path = "/responses/input_tokens",
    .count_decode = px_count_input_tokens,
    .count_encode = responses_count_encode,
    .forward_headers = px_openai_forward_headers,
    .tenancy_headers = px_openai_tenancy_headers,
    .auth_header = "Authorization: Bearer ",
    .error_type = px_errkind_openai,
    .encode_models = px_openai_models,
    .rtoks = {{"encrypted_content", "pxo1:enc:"}},
    .store = &px_responses_store,
    .caps = PX_CAP_CUSTOM_TOOLS | PX_CAP_PROMPT_CACHE_KEY | PX_CAP_VERBOSITY |
            PX_CAP_FILE_ID | PX_CAP_ANY_TOOL_ARGS | PX_CAP_REASONING_TOKENS |
            PX_CAP_STORED_RESPONSES,
    .names = {.refusal = PX_LOSSY("input[].content[].refusal"),
              .reasoning_text = PX_LOSSY("input[].summary"),
              .reasoning_token = PX_LOSSY("input[].encrypted_content"),
              .reasoning_redacted = PX_LOSSY("input[].encrypted_content"),
              .reasoning_config = PX_LOSSY("reasoning"),
              .tool_result_image = PX_LOSSY("input[].output[].image"),
              .tool_result_file = PX_LOSSY("input[].output[].file"),
              .prompt_cache_key = PX_LOSSY("prompt_cache_key"),
              .verbosity = PX_LOSSY("text.verbosity"),
              .tool_args_param = "input.arguments",
              .annotations = PX_LOSSY("output[].content[].annotations"),
              .opaque_reasoning = PX_LOSSY("output[].encrypted_content")},
    .fast = &px_responses_fast,
    .max_tokens_keys = {{"max_output_tokens", NULL}},
    .watch = {.usage_obj = "usage",
              .usage_in = "input_tokens",
              .usage_out = "output_tokens",
              .terminal_events = {"response.completed", "response.incomplete",
                                  "response.failed"},
              .terminal_outer = "response",
              .error_event = "error",
              .model_path = {"response", "model"},
              .model_depth = 2,
              .finish_key = "status"},
};
