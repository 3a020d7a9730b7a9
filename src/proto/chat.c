/* chat.c - the OpenAI Chat Completions codec (include/proxai/fastir.h), in
 * its four roles, without a jansson document: requests (system, developer,
 * user and assistant turns with text, images, files, tool calls and tool
 * messages; function and custom tools; sampling, reasoning and output
 * settings) and answers (one choice: text, refusal, tool calls, reasoning),
 * read and written; then the wire: errors, model lists, the protocol table.
 * Streams live in chat_stream.c. Every rule is the reference's
 * (test/reference/chat.c) for the same shape, its refusals in its words
 * (PX_FAST_REFUSE); what it cannot tell exactly as written declines to the
 * hub's one reader's rule (translate_fast.c: respelled, else refused). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/protoutil.h"
#include "proxai/usage.h"

#define DECLINE PX_FAST_DECLINE
#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define HAS(x) (seen & (1u << (x)))
/* refused as chat.c refuses: its param and words (px_tr_fail) */
#define REFUSE(err, ...) (px_tr_fail((err), __VA_ARGS__), PX_FAST_REFUSE)
/* chat.c's path buffers (the same truncation) */
#define PATH_MAX_LEN 96
#define SUBPATH_LEN 128

/* the array element at the cursor (px_fw_elem left it there) is an
 * object */
#define AT_OBJ(w) ((w).i < (w).n && (w).p[(w).i] == '{')

/* The array element at the cursor: an object's members named in keys into
 * f (px_fw_kfields), another value passed (nothing seen). 0 or DECLINE. */
static int elem_fields(px_fw_t *w, const px_fkey_t *keys, int n, px_fv_t *f,
                       unsigned *seen) {
  px_fv_t skip;
  if (AT_OBJ(*w)) return px_fw_kfields(w, keys, n, f, seen);
  return px_fw_value(w, &skip) < 0 ? DECLINE : 0;
}

/* ======================================================================== */
/* Request decode                                                            */

/* "messages[mi].content" (chat.c's content path) into p */
static const char *content_path(char *p, size_t n, size_t mi) {
  snprintf(p, n, "messages[%zu].content", mi);
  return p;
}

/* "messages[mi].content[j]" (chat.c's part path) into p */
static const char *part_path(char *p, size_t n, size_t mi, size_t j) {
  snprintf(p, n, "messages[%zu].content[%zu]", mi, j);
  return p;
}

/* text-only content (system, developer, tool) of message mi: a string or
 * text parts (other members of a part ignored, as chat.c's text_content) */
static int text_content(const px_fv_t *c, px_fpart_t **head, px_fpart_t **tail,
                        int developer, size_t mi, px_arena_t *a, px_tr_err_t *err) {
  char cp[PATH_MAX_LEN], q[SUBPATH_LEN];
  if (c->kind == PX_FV_STR) {
    px_fpart_t *p = px_fpart_text(a, c->s);
    if (p == NULL) return DECLINE;
    p->developer = developer;
    px_fpart_push(head, tail, p);
    return 0;
  }
  if (c->kind != PX_FV_ARR) {
    content_path(cp, sizeof(cp), mi);
    return REFUSE(err, cp, "%s must be a string or an array of text parts", cp);
  }
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  int r;
  size_t i = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(&w)) == 1; i++) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text")};
    px_fv_t f[2];
    unsigned seen = 0;
    int obj = AT_OBJ(w);
    if (obj && px_fw_kfields(&w, keys, 2, f, &seen) != 0) return DECLINE;
    if (!obj || !HAS(0) || f[0].kind != PX_FV_STR || !px_fs_is(f[0].s, "text") ||
        !HAS(1) || f[1].kind != PX_FV_STR) {
      snprintf(q, sizeof(q), "%s[%zu]", content_path(cp, sizeof(cp), mi), i);
      return REFUSE(err, q, "%s: only text parts are allowed here", q);
    }
    px_fpart_t *p = px_fpart_text(a, f[1].s);
    if (p == NULL) return DECLINE;
    p->developer = developer;
    px_fpart_push(head, tail, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* "data:<media>;base64,<data>" (u begins with "data:" as it is: is_data)
 * -> media, data spans, as chat.c's parse_data_url (and a media type
 * required): 0; -1 when not one (chat.c names the error); DECLINE when
 * escapes in its header are not in the plain spelling (px_fs_plain: "\u003b"
 * may be its ';'; the respelled body has none). The media type keeps the
 * header's plain escapes (a control character: the reference carries it),
 * the data its own (base64's "\/"). */
static int data_url(px_fstr_t u, px_fstr_t *media, px_fstr_t *data) {
  const char *m = u.p + 5, *end = u.p + u.n;
  const char *comma = memchr(m, ',', (size_t)(end - m));
  if (u.esc && memchr(u.p, '\\', comma ? (size_t)(comma - u.p) : u.n) != NULL &&
      !px_fs_plain(u))
    return DECLINE;
  if (comma == NULL) return -1;
  const char *semi = memchr(m, ';', (size_t)(comma - m));
  if (semi == NULL || semi == m) return -1;
  if ((size_t)(comma - m) < 7 || memcmp(comma - 7, ";base64", 7) != 0) return -1;
  *media =
      (px_fstr_t){m, (size_t)(semi - m), u.esc && memchr(m, '\\', (size_t)(semi - m))};
  *data = (px_fstr_t){comma + 1, (size_t)(end - comma - 1), u.esc};
  return 0;
}

/* Whether the value of s begins with "data:": 1, 0, or -1 when it does
 * but escaped (the split at its header reads it as it is written) */
static int is_data(px_fstr_t s) {
  if (!px_fs_starts(s, "data:", 5)) return 0;
  return memcmp(s.p, "data:", 5) == 0 ? 1 : -1;
}

/* {type:"image_url", image_url: url | {url, detail}} (has: the member is
 * there) of part j of message mi -> an IMAGE part */
static int image_part(const px_fv_t *iu, int has, px_fpart_t *p, size_t mi, size_t j,
                      px_lossy_t *lossy, px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("url"), PX_FK("detail")};
  char pp[PATH_MAX_LEN], q[SUBPATH_LEN];
  px_fv_t f[2];
  unsigned seen = 0;
  px_fstr_t url = {NULL, 0, 0};
  if (has && iu->kind == PX_FV_STR) {
    url = iu->s;
  } else if (has && iu->kind == PX_FV_OBJ) {
    if (px_fv_kfields(iu, keys, 2, f, &seen) != 0) return DECLINE;
    if (HAS(0) && f[0].kind == PX_FV_STR) url = f[0].s;
  }
  snprintf(q, sizeof(q), "%s.image_url.url", part_path(pp, sizeof(pp), mi, j));
  if (url.p == NULL) return REFUSE(err, q, "%s is required", q);
  if (HAS(1) && f[1].kind == PX_FV_STR && !px_fs_is(f[1].s, "auto"))
    px_lossy_add(lossy, "messages[].content[].image_url.detail");
  int d = is_data(url);
  if (d < 0) return DECLINE;
  if (d) {
    int rc = data_url(url, &p->media_type, &p->data);
    return rc < 0 ? REFUSE(err, q, "%s: only base64 data URLs are supported", q) : rc;
  }
  p->url = url;
  return 0;
}

/* {type:"file", file:{file_data | file_id, filename}} of part j of message
 * mi -> a FILE part */
static int file_part(const px_tr_ctx_t *ctx, const px_fv_t *fv, int has, px_fpart_t *p,
                     size_t mi, size_t j, px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("file_data"), PX_FK("file_id"),
                                   PX_FK("filename")};
  char pp[PATH_MAX_LEN], q[SUBPATH_LEN];
  px_fv_t f[3];
  unsigned seen = 0;
  if (!has || fv->kind != PX_FV_OBJ) {
    snprintf(q, sizeof(q), "%s.file", part_path(pp, sizeof(pp), mi, j));
    return REFUSE(err, q, "%s must be an object", q);
  }
  if (px_fv_kfields(fv, keys, 3, f, &seen) != 0) return DECLINE;
  if (HAS(0) && f[0].kind == PX_FV_STR) {
    px_fstr_t fd = f[0].s;
    int d = is_data(fd);
    if (d < 0) return DECLINE;
    if (d) {
      int rc = data_url(fd, &p->media_type, &p->data);
      if (rc < 0) {
        snprintf(q, sizeof(q), "%s.file.file_data", part_path(pp, sizeof(pp), mi, j));
        return REFUSE(err, q, "%s: only base64 data URLs are supported", q);
      }
      if (rc != 0) return rc;
    } else { /* bare base64: OpenAI accepts PDFs only */
      p->media_type = (px_fstr_t){"application/pdf", 15, 0};
      p->data = fd;
    }
  } else if (HAS(1) && f[1].kind == PX_FV_STR) {
    if (!px_tr_out_can(ctx, PX_CAP_FILE_ID)) {
      snprintf(q, sizeof(q), "%s.file.file_id", part_path(pp, sizeof(pp), mi, j));
      px_file_id_check(ctx, q, err);
      return PX_FAST_REFUSE;
    }
    p->file_id = f[1].s;
  } else {
    snprintf(q, sizeof(q), "%s.file", part_path(pp, sizeof(pp), mi, j));
    return REFUSE(err, q, "%s needs file_data or file_id", q);
  }
  if (HAS(2) && f[2].kind == PX_FV_STR) p->filename = f[2].s;
  return 0;
}

/* the content parts of user message mi (chat.c's user_part) */
static int user_parts(const px_tr_ctx_t *ctx, const px_fv_t *c, px_fmsg_t *m, size_t mi,
                      px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  char pp[PATH_MAX_LEN], q[SUBPATH_LEN];
  int r, rc;
  size_t j = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(&w)) == 1; j++) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text"), PX_FK("image_url"),
                                     PX_FK("file")};
    px_fv_t f[4];
    unsigned seen = 0;
    int obj = AT_OBJ(w);
    if (obj && px_fw_kfields(&w, keys, 4, f, &seen) != 0) return DECLINE;
    if (!obj || !HAS(0) || f[0].kind != PX_FV_STR) {
      part_path(pp, sizeof(pp), mi, j);
      return REFUSE(err, pp, "%s.type is required", pp);
    }
    px_fstr_t t = f[0].s;
    px_fpart_t *p;
    if (px_fs_is(t, "text")) {
      if (!HAS(1) || f[1].kind != PX_FV_STR) {
        part_path(pp, sizeof(pp), mi, j);
        return REFUSE(err, pp, "%s.text must be a string", pp);
      }
      if ((p = px_fpart_text(a, f[1].s)) == NULL) return DECLINE;
    } else if (px_fs_is(t, "image_url")) {
      if ((p = px_fpart_new(a, PX_FP_IMAGE)) == NULL) return DECLINE;
      if ((rc = image_part(&f[2], HAS(2), p, mi, j, lossy, err)) != 0) return rc;
    } else if (px_fs_is(t, "input_audio")) {
      part_path(pp, sizeof(pp), mi, j);
      return REFUSE(err, pp, "%s: audio parts cannot be translated to %s", pp,
                    px_proto_get(ctx->out)->name);
    } else if (px_fs_is(t, "file")) {
      if ((p = px_fpart_new(a, PX_FP_FILE)) == NULL) return DECLINE;
      if ((rc = file_part(ctx, &f[3], HAS(3), p, mi, j, err)) != 0) return rc;
    } else {
      const char *tv = px_fs_cstr(a, t, NULL);
      if (tv == NULL) return DECLINE;
      snprintf(q, sizeof(q), "%s.type", part_path(pp, sizeof(pp), mi, j));
      return REFUSE(err, q, "%s: unknown content part type '%s'", q, tv);
    }
    px_fpart_push(&m->parts, &m->last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* the content of assistant message mi: a string, text and refusal parts,
 * or null */
static int assistant_parts(const px_fv_t *c, px_fmsg_t *m, size_t mi, px_arena_t *a,
                           px_tr_err_t *err) {
  char q[PATH_MAX_LEN];
  if (c->kind == PX_FV_STR) {
    if (c->s.n == 0) return 0;
    px_fpart_t *p = px_fpart_text(a, c->s);
    if (p == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, p);
    return 0;
  }
  if (c->kind == PX_FV_NULL) return 0;
  if (c->kind != PX_FV_ARR) {
    content_path(q, sizeof(q), mi);
    return REFUSE(err, q, "%s must be a string, an array or null", q);
  }
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  int r;
  size_t j = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(&w)) == 1; j++) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text"), PX_FK("refusal")};
    px_fv_t f[3];
    unsigned seen = 0;
    int obj = AT_OBJ(w);
    if (obj && px_fw_kfields(&w, keys, 3, f, &seen) != 0) return DECLINE;
    px_fpart_t *p;
    int t = !obj || !HAS(0) || f[0].kind != PX_FV_STR ? 0
            : px_fs_is(f[0].s, "text")                ? 1
            : px_fs_is(f[0].s, "refusal")             ? 2
                                                      : 0;
    if (t == 1 && HAS(1) && f[1].kind == PX_FV_STR) {
      p = px_fpart_text(a, f[1].s);
    } else if (t == 2 && HAS(2) && f[2].kind == PX_FV_STR) {
      if ((p = px_fpart_new(a, PX_FP_REFUSAL)) != NULL) p->text = f[2].s;
    } else {
      part_path(q, sizeof(q), mi, j);
      return REFUSE(err, q, "%s: assistant content parts must be text or refusal", q);
    }
    if (p == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* arguments px_fast_args_object did not take (path: theirs), as chat.c's
 * check_arguments judges them (jansson's own words on invalid JSON: the
 * error path, and JSON that is no object): 0 when taken (JSON of another
 * kind toward an upstream that holds any: args only, no input), a refusal,
 * or a decline (an object the scanner's limits keep out) */
static int args_check(const px_tr_ctx_t *ctx, px_fstr_t args, const char *path,
                      px_arena_t *a, px_tr_err_t *err) {
  const char *s = px_fs_cstr(a, args, NULL);
  if (s == NULL) return DECLINE;
  json_error_t je;
  json_t *v = px_jdoc_loads(s, JSON_DECODE_ANY, &je);
  if (v == NULL) return REFUSE(err, path, "%s is not valid JSON: %s", path, je.text);
  int obj = json_is_object(v);
  json_decref(v);
  if (obj) return DECLINE;
  if (!px_tr_out_can(ctx, PX_CAP_ANY_TOOL_ARGS))
    return REFUSE(err, path, "%s must be a JSON object", path);
  return 0;
}

/* the tool_calls of assistant message mi (chat.c's assistant_tool_calls) */
static int tool_calls(const px_tr_ctx_t *ctx, const px_fv_t *c, px_fmsg_t *m, size_t mi,
                      px_arena_t *a, px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("id"), PX_FK("function"),
                                   PX_FK("custom")};
  static const px_fkey_t fkeys[] = {PX_FK("name"), PX_FK("arguments")};
  static const px_fkey_t ckeys[] = {PX_FK("name"), PX_FK("input")};
  char p[PATH_MAX_LEN];
  if (c->kind == PX_FV_NULL) return 0;
  if (c->kind != PX_FV_ARR) {
    snprintf(p, sizeof(p), "messages[%zu].tool_calls", mi);
    return REFUSE(err, p, "%s must be an array", p);
  }
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  int r, custom_ok = px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS);
  size_t j = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(&w)) == 1; j++) {
    px_fv_t f[4], g[2];
    unsigned seen = 0, gs = 0;
    if (elem_fields(&w, keys, 4, f, &seen) != 0) return DECLINE;
    px_fstr_t t = HAS(0) && f[0].kind == PX_FV_STR ? f[0].s : (px_fstr_t){NULL, 0, 0};
    px_fpart_t *pt = px_fpart_new(a, PX_FP_TOOL_CALL);
    if (pt == NULL) return DECLINE;
    if (t.p != NULL && custom_ok && px_fs_is(t, "custom")) {
      /* a custom (freeform) tool call, for an upstream that can hold it */
      if (HAS(3) && f[3].kind == PX_FV_OBJ && px_fv_kfields(&f[3], ckeys, 2, g, &gs) != 0)
        return DECLINE;
      if (!HAS(1) || f[1].kind != PX_FV_STR || !(gs & 1) || g[0].kind != PX_FV_STR) {
        snprintf(p, sizeof(p), "messages[%zu].tool_calls[%zu]", mi, j);
        return REFUSE(err, p, "%s needs id and custom.name", p);
      }
      pt->custom = 1;
      pt->id = f[1].s;
      pt->name = g[0].s;
      pt->text = (gs & 2) && g[1].kind == PX_FV_STR ? g[1].s : (px_fstr_t){"", 0, 0};
      px_fpart_push(&m->parts, &m->last, pt);
      continue;
    }
    if (t.p != NULL && !px_fs_is(t, "function")) {
      const char *tv = px_fs_cstr(a, t, NULL);
      if (tv == NULL) return DECLINE;
      snprintf(p, sizeof(p), "messages[%zu].tool_calls[%zu]", mi, j);
      return REFUSE(err, p, "%s: %s tool calls cannot be translated", p, tv);
    }
    if (HAS(2) && f[2].kind == PX_FV_OBJ && px_fv_kfields(&f[2], fkeys, 2, g, &gs) != 0)
      return DECLINE;
    if (!HAS(1) || f[1].kind != PX_FV_STR || !(gs & 1) || g[0].kind != PX_FV_STR) {
      snprintf(p, sizeof(p), "messages[%zu].tool_calls[%zu]", mi, j);
      return REFUSE(err, p, "%s needs id, function.name and function.arguments", p);
    }
    pt->id = f[1].s;
    pt->name = g[0].s;
    int blank = (gs & 2) && g[1].kind == PX_FV_STR ? px_fs_blank_value(g[1].s) : 1;
    if (blank < 0) return DECLINE;
    if (blank) {
      pt->args = (px_fstr_t){"{}", 2, 0}; /* a call without arguments */
      pt->input = (px_str_t){"{}", 2};
    } else {
      pt->args = g[1].s;
      /* the jansson codec checks them as JSON (an object toward
       * Anthropic); objects are the shape taken here */
      if (px_fast_args_object(a, pt) != 0) {
        snprintf(p, sizeof(p), "messages[%zu].tool_calls[%zu].function.arguments", mi, j);
        int rc = args_check(ctx, g[1].s, p, a, err);
        if (rc != 0) return rc;
      }
    }
    px_fpart_push(&m->parts, &m->last, pt);
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

static int decode_assistant(const px_tr_ctx_t *ctx, const px_fv_t *f, unsigned seen,
                            const px_fv_t *content, size_t mi, px_freq_t *ir,
                            px_arena_t *a, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  int rc;
  px_fmsg_t *m = px_fmsg_push(ir, a, 1);
  if (m == NULL) return DECLINE;
  if (HAS(M_RC) && f[M_RC].kind == PX_FV_STR && f[M_RC].s.n > 0) {
    px_fpart_t *p = px_fpart_new(a, PX_FP_REASONING);
    if (p == NULL) return DECLINE;
    p->text = f[M_RC].s;
    px_fpart_push(&m->parts, &m->last, p);
  }
  if ((rc = assistant_parts(content, m, mi, a, err)) != 0) return rc;
  if (HAS(M_REFUSAL) && f[M_REFUSAL].kind == PX_FV_STR && f[M_REFUSAL].s.n > 0) {
    int has = 0;
    for (const px_fpart_t *p = m->parts; p; p = p->next) has |= p->type == PX_FP_REFUSAL;
    if (!has) {
      px_fpart_t *p = px_fpart_new(a, PX_FP_REFUSAL);
      if (p == NULL) return DECLINE;
      p->text = f[M_REFUSAL].s;
      px_fpart_push(&m->parts, &m->last, p);
    }
  }
  if (HAS(M_FC) && f[M_FC].kind != PX_FV_NULL) {
    snprintf(p, sizeof(p), "messages[%zu].function_call", mi);
    return REFUSE(err, p, "%s: legacy function calls are not supported, use tool_calls",
                  p);
  }
  if (HAS(M_AUDIO) && f[M_AUDIO].kind != PX_FV_NULL) {
    snprintf(p, sizeof(p), "messages[%zu].audio", mi);
    return REFUSE(err, p, "%s: audio cannot be translated", p);
  }
  return HAS(M_TC) ? tool_calls(ctx, &f[M_TC], m, mi, a, err) : 0;
}

/* message mi at the cursor (chat.c's decode_messages, one turn) */
static int decode_message(const px_tr_ctx_t *ctx, px_fw_t *w, size_t mi, px_freq_t *ir,
                          px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  px_fv_t f[NKEYS(msg_keys)];
  unsigned seen = 0;
  int obj = AT_OBJ(*w), rc;
  if (obj && px_fw_kfields(w, msg_keys, NKEYS(msg_keys), f, &seen) != 0) return DECLINE;
  if (!obj && px_fw_value(w, &f[0]) < 0)
    return DECLINE; /* past it (the caller goes on) */
  if (!obj || !HAS(M_ROLE) || f[M_ROLE].kind != PX_FV_STR) {
    snprintf(p, sizeof(p), "messages[%zu].role", mi);
    return REFUSE(err, p, "%s is required", p);
  }
  if (HAS(M_NAME)) px_lossy_add(lossy, "messages[].name");
  px_fstr_t role = f[M_ROLE].s;
  px_fv_t none = {PX_FV_NULL, {0}, {NULL, 0}};
  const px_fv_t *content = HAS(M_CONTENT) ? &f[M_CONTENT] : &none;
  px_fmsg_t *m;
  int dev = px_fs_is(role, "developer");
  if (dev || px_fs_is(role, "system"))
    return text_content(content, &ir->system, &ir->system_last, dev, mi, a, err);
  if (px_fs_is(role, "user")) {
    if (content->kind != PX_FV_STR && content->kind != PX_FV_ARR) {
      content_path(p, sizeof(p), mi);
      return REFUSE(err, p, "%s must be a string or an array", p);
    }
    if ((m = px_fmsg_push(ir, a, 0)) == NULL) return DECLINE;
    if (content->kind == PX_FV_ARR) return user_parts(ctx, content, m, mi, a, lossy, err);
    px_fpart_t *pt = px_fpart_text(a, content->s);
    if (pt == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, pt);
    return 0;
  }
  if (px_fs_is(role, "assistant"))
    return decode_assistant(ctx, f, seen, content, mi, ir, a, err);
  if (px_fs_is(role, "tool")) {
    if (!HAS(M_TCID) || f[M_TCID].kind != PX_FV_STR) {
      snprintf(p, sizeof(p), "messages[%zu].tool_call_id", mi);
      return REFUSE(err, p, "%s is required", p);
    }
    px_fpart_t *res = px_fpart_new(a, PX_FP_TOOL_RESULT), *tail = NULL;
    if (res == NULL) return DECLINE;
    res->id = f[M_TCID].s;
    if ((rc = text_content(content, &res->content, &tail, 0, mi, a, err)) != 0) return rc;
    /* consecutive tool results share one user message */
    m = tool_result_tail(ir);
    if (m == NULL && (m = px_fmsg_push(ir, a, 0)) == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, res);
    return 0;
  }
  snprintf(p, sizeof(p), "messages[%zu].role", mi);
  if (px_fs_is(role, "function"))
    return REFUSE(err, p,
                  "%s: the legacy 'function' role cannot be translated "
                  "(it has no tool_call_id); use 'tool'",
                  p);
  const char *rv = px_fs_cstr(a, role, NULL);
  return rv == NULL ? DECLINE : REFUSE(err, p, "%s: unknown role '%s'", p, rv);
}

/* a string or null JSON value as raw JSON ("null" when absent), into b */
static int put_str_or_null(px_buf_t *b, const px_fv_t *v, int has) {
  return has && v->kind == PX_FV_STR ? px_fb_str(b, v->s) : px_fb_lit(b, "null");
}

/* a Chat custom tool's format -> the IR shape (chat.c's format_in), built
 * in the arena; *out ptr NULL when it has no type */
static int format_in(const px_fv_t *fv, px_str_t *out, px_arena_t *a) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("grammar")};
  static const px_fkey_t gkeys[] = {PX_FK("syntax"), PX_FK("definition")};
  px_fv_t f[2], g[2];
  unsigned seen = 0, gs = 0;
  out->ptr = NULL;
  if (fv->kind != PX_FV_OBJ) return 0;
  if (px_fv_kfields(fv, keys, 2, f, &seen) != 0) return DECLINE;
  if (!HAS(0) || f[0].kind != PX_FV_STR) return 0;
  int grammar = px_fs_is(f[0].s, "grammar");
  if (grammar && HAS(1) && f[1].kind == PX_FV_OBJ &&
      px_fv_kfields(&f[1], gkeys, 2, g, &gs) != 0)
    return DECLINE;
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  int rc = px_fb_lit(&b, "{\"type\":");
  if (rc == 0) rc = px_fb_str(&b, f[0].s);
  if (rc == 0 && grammar) {
    rc = px_fb_lit(&b, ",\"syntax\":");
    if (rc == 0) rc = put_str_or_null(&b, &g[0], (int)(gs & 1));
    if (rc == 0) rc = px_fb_lit(&b, ",\"definition\":");
    if (rc == 0) rc = put_str_or_null(&b, &g[1], (int)(gs & 2));
  }
  if (rc == 0) rc = px_fb_lit(&b, "}");
  char *s = rc == 0 ? px_arena_alloc(a, b.len) : NULL;
  if (s != NULL) {
    memcpy(s, b.data, b.len);
    *out = (px_str_t){s, b.len};
  }
  px_buf_free(&b);
  return s != NULL ? 0 : DECLINE;
}

/* the tools array at the cursor, read where it stands (its bulk, the
 * parameters schemas, not skipped whole first); the cursor moves past it
 * on success only */
static int decode_tools(const px_tr_ctx_t *ctx, px_fw_t *tw, px_freq_t *ir, px_arena_t *a,
                        px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  px_fw_t w = *tw;
  int r, custom_ok = px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS);
  size_t i = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(&w)) == 1; i++) {
    static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("function"), PX_FK("custom")};
    static const px_fkey_t fkeys[] = {PX_FK("name"), PX_FK("description"),
                                      PX_FK("parameters"), PX_FK("strict")};
    static const px_fkey_t ckeys[] = {PX_FK("name"), PX_FK("description"),
                                      PX_FK("format")};
    px_fv_t f[3], g[4];
    unsigned seen = 0, fseen = 0;
    int obj = AT_OBJ(w);
    if (obj && px_fw_kfields(&w, keys, 3, f, &seen) != 0) return DECLINE;
    px_fstr_t t =
        obj && HAS(0) && f[0].kind == PX_FV_STR ? f[0].s : (px_fstr_t){NULL, 0, 0};
    int custom = px_fs_is(t, "custom");
    if (custom && custom_ok) {
      if (HAS(2) && f[2].kind == PX_FV_OBJ &&
          px_fv_kfields(&f[2], ckeys, 3, g, &fseen) != 0)
        return DECLINE;
      if (!(fseen & 1) || g[0].kind != PX_FV_STR) {
        snprintf(p, sizeof(p), "tools[%zu].custom.name", i);
        return REFUSE(err, p, "%s is required", p);
      }
      px_ftool_t *tl = px_ftool_push(ir, a, g[0].s, (fseen & 2) ? &g[1] : NULL, NULL,
                                     NULL, PX_FAST_OPENAI_PARAMS);
      if (tl == NULL) return DECLINE;
      tl->custom = 1;
      if ((fseen & 4) && format_in(&g[2], &tl->format, a) != 0) return DECLINE;
      continue;
    }
    snprintf(p, sizeof(p), "tools[%zu].type", i);
    if (custom)
      return REFUSE(err, p, "%s: custom (freeform text) tools cannot be translated to %s",
                    p, px_proto_get(ctx->out)->name);
    if (!px_fs_is(t, "function")) return REFUSE(err, p, "%s: unsupported tool type", p);
    if (HAS(1) && f[1].kind == PX_FV_OBJ &&
        px_fv_kfields(&f[1], fkeys, 4, g, &fseen) != 0)
      return DECLINE;
    if (!(fseen & 1) || g[0].kind != PX_FV_STR) {
      snprintf(p, sizeof(p), "tools[%zu].function.name", i);
      return REFUSE(err, p, "%s is required", p);
    }
    if (px_ftool_push(ir, a, g[0].s, (fseen & 2) ? &g[1] : NULL,
                      (fseen & 4) ? &g[2] : NULL, (fseen & 8) ? &g[3] : NULL,
                      PX_FAST_OPENAI_PARAMS) == NULL)
      return DECLINE;
  }
  if (r < 0) return DECLINE;
  tw->i = w.i;
  return 0;
}

static int decode_tool_choice(const px_tr_ctx_t *ctx, const px_fv_t *v, px_freq_t *ir,
                              px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  if (v->kind == PX_FV_STR) {
    if (px_fs_is(v->s, "auto") || px_fs_is(v->s, "none") || px_fs_is(v->s, "required"))
      return px_fast_openai_tc(v->s, ir);
    const char *s = px_fs_cstr(a, v->s, NULL);
    return s ? REFUSE(err, "tool_choice", "tool_choice: unknown value '%s'", s) : DECLINE;
  }
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("function"), PX_FK("custom"),
                                   PX_FK("allowed_tools")};
  static const px_fkey_t nkeys[] = {PX_FK("name")};
  static const px_fkey_t akeys[] = {PX_FK("mode")};
  px_fv_t f[4], g[1];
  unsigned seen = 0, gs = 0;
  if (v->kind == PX_FV_OBJ && px_fv_kfields(v, keys, 4, f, &seen) != 0) return DECLINE;
  px_fstr_t t = HAS(0) && f[0].kind == PX_FV_STR ? f[0].s : (px_fstr_t){NULL, 0, 0};
  int k = px_fs_is(t, "function")                                            ? 1
          : px_fs_is(t, "custom") && px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS) ? 2
          : px_fs_is(t, "allowed_tools")                                     ? 3
                                                                             : -1;
  if (k < 0) {
    const char *s = t.p ? px_fs_cstr(a, t, NULL) : "?";
    return s ? REFUSE(err, "tool_choice", "tool_choice: type '%s' cannot be translated",
                      s)
             : DECLINE;
  }
  if (HAS(k) && f[k].kind == PX_FV_OBJ &&
      px_fv_kfields(&f[k], k == 3 ? akeys : nkeys, 1, g, &gs) != 0)
    return DECLINE;
  if (k == 3) {
    /* the restriction to a subset cannot be carried; the mode can */
    px_lossy_add(lossy, "tool_choice.allowed_tools");
    ir->tool_choice = gs && g[0].kind == PX_FV_STR && px_fs_is(g[0].s, "required")
                          ? PX_FTC_REQUIRED
                          : PX_FTC_AUTO;
    return 0;
  }
  if (!gs || g[0].kind != PX_FV_STR)
    return k == 1 ? REFUSE(err, "tool_choice.function.name",
                           "tool_choice.function.name is required")
                  : REFUSE(err, "tool_choice.custom.name",
                           "tool_choice.custom.name is required");
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

/* modalities: a list of "text" only (anything else than an array: no
 * list, as chat.c reads it) */
static int text_modalities(const px_fv_t *v) {
  if (v->kind != PX_FV_ARR) return 1;
  px_fw_t w = {v->raw.ptr, v->raw.len, 0};
  int r;
  if (px_fw_open(&w, '[') < 0) return 0;
  while ((r = px_fw_elem(&w)) == 1) {
    px_fv_t x;
    if (px_fw_value(&w, &x) < 0 || x.kind != PX_FV_STR || !px_fs_is(x.s, "text"))
      return 0;
  }
  return r == 0;
}

/* response_format: text, json_object, json_schema {name?, description?,
 * schema, strict?} (chat.c's decode_response_format) */
static int response_format(const px_fv_t *v, px_freq_t *ir, px_arena_t *a,
                           px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("json_schema")};
  static const px_fkey_t skeys[] = {PX_FK("schema"), PX_FK("name"), PX_FK("description"),
                                    PX_FK("strict")};
  px_fv_t f[2], g[4];
  unsigned seen = 0, gs = 0;
  if (v->kind == PX_FV_OBJ && px_fv_kfields(v, keys, 2, f, &seen) != 0) return DECLINE;
  if (!HAS(0) || f[0].kind != PX_FV_STR)
    return REFUSE(err, "response_format", "response_format.type is required");
  if (px_fs_is(f[0].s, "text")) {
    ir->rf_text = 1;
    return 0;
  }
  if (px_fs_is(f[0].s, "json_object")) {
    ir->rf_json = 1;
    return 0;
  }
  if (!px_fs_is(f[0].s, "json_schema")) {
    const char *s = px_fs_cstr(a, f[0].s, NULL);
    return s ? REFUSE(err, "response_format.type", "response_format.type '%s' is unknown",
                      s)
             : DECLINE;
  }
  if (HAS(1) && f[1].kind == PX_FV_OBJ && px_fv_kfields(&f[1], skeys, 4, g, &gs) != 0)
    return DECLINE;
  if (!(gs & 1) || g[0].kind != PX_FV_OBJ)
    return REFUSE(err, "response_format.json_schema.schema",
                  "response_format.json_schema.schema is required");
  ir->rf_schema = g[0].raw;
  if ((gs & 2) && g[1].kind == PX_FV_STR) ir->rf_name = g[1].s;
  if ((gs & 4) && g[2].kind == PX_FV_STR) ir->rf_desc = g[2].s;
  if ((gs & 8) && g[3].kind == PX_FV_TRUE) ir->rf_strict = 1;
  if ((gs & 8) && g[3].kind == PX_FV_FALSE) ir->rf_strict = 0;
  return 0;
}

enum {
  K_MODEL,
  K_MESSAGES,
  K_TOOLS,
  K_TC,
  K_PAR,
  K_MAX,
  K_MCT,
  K_TEMP,
  K_TOPP,
  K_STOP,
  K_USER,
  K_META,
  K_STREAM,
  K_N,
  K_LOGPROBS,
  K_RF,
  K_SO,
  K_EFFORT,
  K_SAFETY,
  K_PCK,
  K_VERB,
  K_MODALITIES,
  K_AUDIO,
  K_FUNCS,
  K_FCALL,
  K_DROPPED
};
static const px_fkey_t top_keys[] = {
    PX_FK("model"), PX_FK("messages"), PX_FK("tools"), PX_FK("tool_choice"),
    PX_FK("parallel_tool_calls"), PX_FK("max_tokens"), PX_FK("max_completion_tokens"),
    PX_FK("temperature"), PX_FK("top_p"), PX_FK("stop"), PX_FK("user"), PX_FK("metadata"),
    PX_FK("stream"), PX_FK("n"), PX_FK("logprobs"), PX_FK("response_format"),
    PX_FK("stream_options"), PX_FK("reasoning_effort"), PX_FK("safety_identifier"),
    PX_FK("prompt_cache_key"), PX_FK("verbosity"), PX_FK("modalities"), PX_FK("audio"),
    PX_FK("functions"), PX_FK("function_call"),
    /* dropped when set (chat.c's decode_dropped), named by themselves */
    PX_FK("top_logprobs"), PX_FK("logit_bias"), PX_FK("seed"), PX_FK("presence_penalty"),
    PX_FK("frequency_penalty"), PX_FK("service_tier"), PX_FK("prediction"),
    PX_FK("store"), PX_FK("prompt_cache_retention"), PX_FK("web_search_options")};

/* an unknown member, named by itself when set (chat.c: never silently
 * dropped); a repeated one declines (jansson names it where it first
 * stood, with its last value) */
typedef struct unknown_key {
  struct unknown_key *next;
  px_fstr_t k;
} unknown_key_t;

static int unknown_member(px_fstr_t k, const px_fv_t *v, unknown_key_t **seen_keys,
                          px_arena_t *a, px_lossy_t *lossy) {
  if (px_fast_lossy_key(NULL, k) != 0) return DECLINE; /* one a list cannot hold */
  for (const unknown_key_t *u = *seen_keys; u; u = u->next)
    if (u->k.n == k.n && memcmp(u->k.p, k.p, k.n) == 0) return DECLINE;
  unknown_key_t *u = px_arena_alloc(a, sizeof(*u));
  if (u == NULL) return DECLINE;
  u->k = k;
  u->next = *seen_keys;
  *seen_keys = u;
  if (v->kind == PX_FV_NULL) return 0;
  return px_fast_lossy_key(lossy, k);
}

/* max_tokens / max_completion_tokens (key: its name): a positive integer
 * (chat.c's decode_limits) -> *v; null: nothing */
static int limit(const char *key, const px_fv_t *v, int64_t *n, px_tr_err_t *err) {
  *n = 0;
  if (v->kind == PX_FV_NULL) return 0;
  if (v->kind == PX_FV_NUM && px_fw_is_int(v->raw) && v->raw.ptr[0] != '-' &&
      px_fw_uint(v->raw, n) < 0)
    return REFUSE(err, key, "%s must be a positive integer of at most 18 digits", key);
  if (*n < 1) return REFUSE(err, key, "%s must be a positive integer", key);
  return 0;
}

/* One top-level member, as chat.c's decode_request reads it where it
 * stands (its lossy names in the body's order). */
static int decode_member(const px_tr_ctx_t *ctx, int ki, const px_fv_t *v, px_freq_t *ir,
                         px_arena_t *a, px_lossy_t *lossy, int *user_from_safety,
                         px_tr_err_t *err) {
  switch (ki) {
    case K_MODEL:
      return v->kind == PX_FV_STR ? 0 : REFUSE(err, "model", "model must be a string");
    case K_TOOLS: /* an array is read in place (the caller) */
      return v->kind == PX_FV_NULL ? 0 : REFUSE(err, "tools", "tools must be an array");
    case K_TC:
      return v->kind == PX_FV_NULL ? 0 : decode_tool_choice(ctx, v, ir, a, lossy, err);
    case K_PAR:
      if (v->kind == PX_FV_TRUE || v->kind == PX_FV_FALSE)
        ir->parallel = v->kind == PX_FV_TRUE;
      return 0;
    case K_MAX:
    case K_MCT: {
      int64_t n;
      int rc = limit(top_keys[ki].s, v, &n, err);
      /* max_completion_tokens wins over the deprecated max_tokens */
      if (rc == 0 && n > 0 && (ki == K_MCT || ir->max_tokens.ptr == NULL)) {
        ir->max_tokens = v->raw;
        ir->max_tokens_v = n;
      }
      return rc;
    }
    case K_TEMP:
      if (v->kind == PX_FV_NUM) ir->temperature = v->raw;
      return 0;
    case K_TOPP:
      if (v->kind == PX_FV_NUM) ir->top_p = v->raw;
      return 0;
    case K_STOP:
      if (v->kind == PX_FV_STR) {
        ir->stop1 = v->s;
      } else if (v->kind == PX_FV_ARR && strings_only(v)) {
        if (!px_fw_empty(v->raw)) ir->stop = v->raw;
      } else if (v->kind != PX_FV_NULL) {
        return REFUSE(err, "stop", "stop must be a string or an array of strings");
      }
      return 0;
    case K_USER:
      if (v->kind != PX_FV_STR) return 0;
      if (*user_from_safety) return DECLINE; /* named where safety_identifier stood */
      ir->user = v->s;
      return 0;
    case K_SAFETY:
      if (v->kind != PX_FV_STR) return 0;
      if (ir->user.p != NULL) {
        px_lossy_add(lossy, "safety_identifier");
      } else {
        ir->user = v->s;
        *user_from_safety = 1;
      }
      return 0;
    case K_META:
      if (v->kind == PX_FV_OBJ) {
        ir->metadata = v->raw;
        ir->metadata_empty = px_fw_empty(v->raw);
      }
      return 0;
    case K_STREAM:
      if (v->kind == PX_FV_TRUE) ir->stream_true = 1;
      if (v->kind == PX_FV_FALSE) ir->stream_false = 1;
      return 0;
    case K_SO:
      if (v->kind == PX_FV_OBJ) {
        /* include_usage is the context's (the encoders ask for usage) */
        static const px_fkey_t so_keys[] = {PX_FK("include_obfuscation")};
        px_fv_t so[1];
        unsigned so_seen = 0;
        if (px_fv_kfields(v, so_keys, 1, so, &so_seen) != 0) return DECLINE;
        if (so_seen) px_lossy_add(lossy, "stream_options.include_obfuscation");
      }
      return 0;
    case K_RF:
      return v->kind == PX_FV_NULL ? 0 : response_format(v, ir, a, err);
    case K_EFFORT:
      if (v->kind == PX_FV_STR) {
        ir->has_reasoning = 1;
        ir->effort = v->s;
      }
      return 0;
    case K_PCK:
    case K_VERB:
      if (v->kind == PX_FV_STR)
        *(ki == K_PCK ? &ir->prompt_cache_key : &ir->verbosity) = v->s;
      else if (v->kind != PX_FV_NULL)
        px_lossy_add(lossy, ki == K_PCK ? "prompt_cache_key" : "verbosity");
      return 0;
    case K_N:
      return v->kind == PX_FV_NULL ||
                     (v->kind == PX_FV_NUM && v->raw.len == 1 && v->raw.ptr[0] == '1')
                 ? 0
                 : REFUSE(err, "n", "n: only one choice can be translated to %s",
                          px_proto_get(ctx->out)->name);
    case K_LOGPROBS:
      if (v->kind == PX_FV_TRUE) px_lossy_add(lossy, "logprobs");
      return 0;
    case K_MODALITIES:
      return text_modalities(v)
                 ? 0
                 : REFUSE(err, "modalities",
                          "modalities: only text output can be translated");
    case K_AUDIO:
      return v->kind == PX_FV_NULL
                 ? 0
                 : REFUSE(err, "audio", "audio: audio output cannot be translated");
    case K_FUNCS:
    case K_FCALL:
      return v->kind == PX_FV_NULL
                 ? 0
                 : REFUSE(err, top_keys[ki].s,
                          "%s: legacy function calling is not supported, use tools",
                          top_keys[ki].s);
    default: /* dropped when set */
      if (v->kind != PX_FV_NULL) px_lossy_add(lossy, top_keys[ki].s);
      return 0;
  }
}

/* After a refusal at a member: the rest of the object read for what would
 * move it (jansson keeps a repeated member where it first stood, with its
 * last value): a repeated member seen up to the refusal (or an escaped
 * key, which might spell one) declines. */
static int refused_rest(px_fw_t *w, uint64_t seen) {
  px_fstr_t k;
  px_fv_t v;
  int r;
  while ((r = px_fw_member(w, &k)) == 1) {
    int ki = px_fk_of(k, top_keys, NKEYS(top_keys));
    if (k.esc || (ki >= 0 && (seen & ((uint64_t)1 << ki))) || px_fw_value(w, &v) < 0)
      return DECLINE;
  }
  return r < 0 ? DECLINE : PX_FAST_REFUSE;
}

static int chat_fast_decode_request(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                    px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy,
                                    px_tr_err_t *err) {
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unknown_key_t *unknown = NULL;
  uint64_t seen = 0;
  int r, rc, user_from_safety = 0;
  if (px_fw_open(&w, '{') < 0)
    return REFUSE(err, "", "request body must be a JSON object");
  while ((r = px_fw_member(&w, &k)) == 1) {
    int ki = px_fk_of(k, top_keys, NKEYS(top_keys));
    if (ki >= 0) {
      if (seen & ((uint64_t)1 << ki)) return DECLINE; /* jansson keeps the last */
      seen |= (uint64_t)1 << ki;
    }
    if (ki == K_MESSAGES) {
      /* messages are read in place, in body order */
      int re;
      size_t mi = 0;
      if (px_fw_peek(&w) != PX_FV_ARR) {
        rc = REFUSE(err, "messages", "messages must be an array");
        if (px_fw_value(&w, &(px_fv_t){0}) < 0) return DECLINE;
        return refused_rest(&w, seen);
      }
      if (px_fw_open(&w, '[') < 0) return DECLINE;
      while ((re = px_fw_elem(&w)) == 1) {
        rc = decode_message(ctx, &w, mi++, ir, a, lossy, err);
        if (rc == PX_FAST_REFUSE) {
          px_fv_t skip; /* the rest of the messages, to the members after */
          while ((re = px_fw_elem(&w)) == 1)
            if (px_fw_value(&w, &skip) < 0) return DECLINE;
          return re < 0 ? DECLINE : refused_rest(&w, seen);
        }
        if (rc != 0) return DECLINE;
      }
      if (re < 0) return DECLINE;
      continue;
    }
    px_fv_t v;
    if (ki == K_TOOLS && px_fw_peek(&w) == PX_FV_ARR) {
      rc = decode_tools(ctx, &w, ir, a, err);
      if (rc == 0) continue;
      if (rc != PX_FAST_REFUSE || px_fw_value(&w, &v) < 0) return DECLINE;
      return refused_rest(&w, seen); /* w was at the array's start */
    }
    if (px_fw_value(&w, &v) < 0) return DECLINE;
    if (ki < 0) {
      if (unknown_member(k, &v, &unknown, a, lossy) != 0) return DECLINE;
    } else if ((rc = decode_member(ctx, ki, &v, ir, a, lossy, &user_from_safety, err)) !=
               0) {
      return rc == PX_FAST_REFUSE ? refused_rest(&w, seen) : DECLINE;
    }
  }
  if (r < 0) return DECLINE;
  if (!(seen & ((uint64_t)1 << K_MESSAGES)))
    return REFUSE(err, "messages", "messages is required");
  return 0;
}

/* ======================================================================== */
/* Request encode                                                            */

/* the texts of the parts of type t in a list, one after the other */
static int put_texts_of(px_buf_t *b, const px_fpart_t *p, px_fpart_type_t t) {
  int rc = 0;
  for (; p && rc == 0; p = p->next)
    if (p->type == t && p->text.n) rc = px_fb_put(b, p->text.p, p->text.n);
  return rc;
}

/* an IR tool result -> a tool message: its texts joined (images and files
 * named as the client spelled them) */
static int put_tool_msg(const px_tr_ctx_t *ctx, px_buf_t *b, const px_fpart_t *p,
                        px_lossy_t *lossy) {
  for (const px_fpart_t *c = p->content; c; c = c->next) {
    if (c->type == PX_FP_IMAGE)
      px_lossy_add(lossy, px_in_names(ctx)->tool_result_image);
    else if (c->type == PX_FP_FILE)
      px_lossy_add(lossy, px_in_names(ctx)->tool_result_file);
    else if (c->type != PX_FP_TEXT)
      return DECLINE;
  }
  if (p->is_error) px_lossy_add(lossy, "messages[].content[].is_error");
  int rc = px_fb_lit(b, "{\"role\":\"tool\",\"tool_call_id\":");
  if (rc == 0) rc = px_fb_str(b, p->id.p ? p->id : (px_fstr_t){"", 0, 0});
  if (rc == 0) rc = px_fb_lit(b, ",\"content\":\"");
  if (rc == 0) rc = px_fb_texts(b, p->content);
  if (rc == 0) rc = px_fb_lit(b, "\"}");
  return rc;
}

static int put_call(px_buf_t *b, const px_fpart_t *p) {
  static const px_fstr_t none = {"", 0, 0};
  int rc = px_fb_lit(b, "{\"id\":");
  if (rc == 0) rc = px_fb_str(b, p->id.p ? p->id : none);
  if (p->custom) {
    if (rc == 0) rc = px_fb_lit(b, ",\"type\":\"custom\",\"custom\":{\"name\":");
    if (rc == 0) rc = px_fb_str(b, p->name.p ? p->name : none);
    if (rc == 0) rc = px_fb_lit(b, ",\"input\":");
    if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : none);
    if (rc == 0) rc = px_fb_lit(b, "}}");
    return rc;
  }
  if (rc == 0) rc = px_fb_lit(b, ",\"type\":\"function\",\"function\":{\"name\":");
  if (rc == 0) rc = px_fb_str(b, p->name.p ? p->name : none);
  if (rc == 0) rc = px_fb_lit(b, ",\"arguments\":");
  if (rc == 0) rc = px_fb_str(b, p->args.p ? p->args : (px_fstr_t){"{}", 2, 0});
  if (rc == 0) rc = px_fb_lit(b, "}}");
  return rc;
}

/* Which opaque tokens reasoning part p carries, as chat.c reads them:
 * *sig a signature, encrypted_content or thought_signature, *red redacted
 * data (the fields' indexes found once) */
static void reasoning_tokens(const px_fpart_t *p, int *sig, int *red) {
  static int k[4] = {-2, -2, -2, -2};
  if (k[0] == -2) {
    k[0] = px_frtok_index("signature");
    k[1] = px_frtok_index("encrypted_content");
    k[2] = px_frtok_index("thought_signature");
    k[3] = px_frtok_index("redacted_data");
  }
  *sig = 0;
  for (int i = 0; i < 3; i++) *sig |= k[i] >= 0 && p->tok[k[i]].p != NULL;
  *red = k[3] >= 0 && p->tok[k[3]].p != NULL;
}

/* the IR's name of a part kind (chat.c's words name it) */
static const char *part_name(px_fpart_type_t t) {
  static const char *const names[] = {"text",  "tool_call", "tool_result", "reasoning",
                                      "image", "file",      "refusal"};
  return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "";
}

/* part j of IR message mi that a Chat message cannot hold: chat.c's
 * refusal (an image without its data, a file by URL, a part of another
 * kind); 0 when it can */
static int cannot_send(const px_fpart_t *p, size_t mi, size_t j, int user,
                       px_tr_err_t *err) {
  char q[PATH_MAX_LEN];
  const char *why = NULL;
  if (p->type == PX_FP_IMAGE && user && !p->url.p && !(p->media_type.p && p->data.p))
    why = "%s: image needs url or media_type and data";
  else if (p->type == PX_FP_FILE && user && !p->file_id.p &&
           !(p->media_type.p && p->data.p))
    why = "%s: files by URL cannot be sent to openai_chat_completions";
  else if (user ? p->type != PX_FP_TEXT && p->type != PX_FP_IMAGE &&
                      p->type != PX_FP_FILE && p->type != PX_FP_TOOL_RESULT
                : p->type != PX_FP_TEXT && p->type != PX_FP_TOOL_CALL &&
                      p->type != PX_FP_REFUSAL && p->type != PX_FP_REASONING) {
    snprintf(q, sizeof(q), "messages[%zu].content[%zu]", mi, j);
    return REFUSE(err, q, "%s: part type '%s' cannot be sent to openai_chat_completions",
                  q, part_name(p->type));
  }
  if (why == NULL) return 0;
  snprintf(q, sizeof(q), "messages[%zu].content[%zu]", mi, j);
  return REFUSE(err, q, why, q);
}

/* consecutive assistant messages [m, end) -> one Chat message: texts,
 * refusals and reasoning texts joined, tool calls; opaque reasoning tokens
 * named as the client spelled them */
static int put_assistant(const px_tr_ctx_t *ctx, px_buf_t *b, const px_fmsg_t *m,
                         const px_fmsg_t *end, size_t mi, px_lossy_t *lossy,
                         px_tr_err_t *err) {
  const px_lossy_names_t *n = px_in_names(ctx);
  int ntext = 0, ncalls = 0, nref = 0, nreason = 0;
  size_t j = 0; /* the index in the merged message */
  for (const px_fmsg_t *x = m; x != end; x = x->next)
    for (const px_fpart_t *p = x->parts; p; p = p->next, j++) {
      if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
      if (p->type == PX_FP_TEXT) {
        ntext++;
      } else if (p->type == PX_FP_TOOL_CALL) {
        ncalls++;
      } else if (p->type == PX_FP_REFUSAL) {
        nref++;
      } else if (p->type == PX_FP_REASONING) {
        nreason += p->text.n > 0;
        int sig, red;
        reasoning_tokens(p, &sig, &red);
        if (sig) px_lossy_add(lossy, n->reasoning_token);
        if (red) px_lossy_add(lossy, n->reasoning_redacted);
      } else {
        return cannot_send(p, mi, j, 0, err);
      }
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
  if (rc == 0 && nref > 0) {
    rc = px_fb_lit(b, ",\"refusal\":\"");
    for (const px_fmsg_t *x = m; x != end && rc == 0; x = x->next)
      rc = put_texts_of(b, x->parts, PX_FP_REFUSAL);
    if (rc == 0) rc = px_fb_lit(b, "\"");
  }
  if (rc == 0 && nreason > 0) {
    rc = px_fb_lit(b, ",\"reasoning_content\":\"");
    for (const px_fmsg_t *x = m; x != end && rc == 0; x = x->next)
      rc = put_texts_of(b, x->parts, PX_FP_REASONING);
    if (rc == 0) rc = px_fb_lit(b, "\"");
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

/* "data:<media type>;base64,<data>" as a quoted string (the parts'
 * escaped contents one after the other: the value is theirs joined) */
static int put_data_url(px_buf_t *b, px_fstr_t mt, px_fstr_t data) {
  int rc = px_fb_lit(b, "\"data:");
  if (rc == 0) rc = px_fb_put(b, mt.p, mt.n);
  if (rc == 0) rc = px_fb_lit(b, ";base64,");
  if (rc == 0) rc = px_fb_put(b, data.p, data.n);
  if (rc == 0) rc = px_fb_lit(b, "\"");
  return rc;
}

/* an IR image or file part (cannot_send let it through) -> a Chat
 * content part */
static int put_media(px_buf_t *b, const px_fpart_t *p) {
  int rc;
  if (p->type == PX_FP_IMAGE) {
    rc = px_fb_lit(b, "{\"type\":\"image_url\",\"image_url\":{\"url\":");
    if (rc == 0 && p->url.p)
      rc = px_fb_str(b, p->url);
    else if (rc == 0 && p->media_type.p && p->data.p)
      rc = put_data_url(b, p->media_type, p->data);
    else if (rc == 0)
      return DECLINE; /* cannot_send refused it */
    return rc == 0 ? px_fb_lit(b, "}}") : rc;
  }
  rc = px_fb_lit(b, "{\"type\":\"file\",\"file\":{");
  if (rc == 0 && p->file_id.p) {
    rc = px_fb_lit(b, "\"file_id\":");
    if (rc == 0) rc = px_fb_str(b, p->file_id);
    if (rc == 0) rc = px_fb_opt_str(b, ",\"filename\":", p->filename);
  } else if (rc == 0 && p->media_type.p && p->data.p) {
    rc = px_fb_lit(b, "\"file_data\":");
    if (rc == 0) rc = put_data_url(b, p->media_type, p->data);
    /* OpenAI wants a filename with inline file data (px_inline_filename) */
    if (rc == 0) rc = px_fb_lit(b, ",\"filename\":");
    if (rc == 0 && p->filename.p && p->filename.n > 0)
      rc = px_fb_str(b, p->filename);
    else if (rc == 0)
      rc = px_fb_lit(b, px_fs_is(p->media_type, "text/plain") ? "\"document.txt\""
                                                              : "\"document.pdf\"");
  } else if (rc == 0) {
    return DECLINE; /* a file by URL: cannot_send refused it */
  }
  return rc == 0 ? px_fb_lit(b, "}}") : rc;
}

/* a system turn met mid-conversation -> a system message in place: its
 * texts joined by blank lines (chat.c's system_note_out) */
static int put_system_note(px_buf_t *b, const px_fmsg_t *m, int *first,
                           px_lossy_t *lossy) {
  int rc = px_fb_lit(b, *first ? "{\"role\":\"system\",\"content\":\""
                               : ",{\"role\":\"system\",\"content\":\"");
  int any = 0;
  *first = 0;
  for (const px_fpart_t *p = m->parts; p && rc == 0; p = p->next) {
    if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
    if (p->type != PX_FP_TEXT) return DECLINE;
    if (any) rc = px_fb_lit(b, "\\n\\n"); /* after anything written */
    if (rc == 0 && p->text.n > 0) rc = px_fb_put(b, p->text.p, p->text.n);
    any |= p->text.n > 0;
  }
  return rc == 0 ? px_fb_lit(b, "\"}") : rc;
}

static int put_user(const px_tr_ctx_t *ctx, px_buf_t *b, const px_fmsg_t *m, size_t mi,
                    int *first, px_lossy_t *lossy, px_tr_err_t *err) {
  if (m->system_note) return put_system_note(b, m, first, lossy);
  int nparts = 0, only_text = 1, rc = 0;
  const px_fpart_t *one = NULL;
  size_t j = 0;
  for (const px_fpart_t *p = m->parts; p; p = p->next, j++) {
    if (p->cache_control.ptr) px_lossy_add(lossy, "cache_control");
    if ((rc = cannot_send(p, mi, j, 1, err)) != 0) return rc;
    if (p->type == PX_FP_TOOL_RESULT) {
      if (!*first) rc = px_fb_lit(b, ",");
      *first = 0;
      if (rc == 0) rc = put_tool_msg(ctx, b, p, lossy);
      if (rc != 0) return rc;
    } else if (p->type == PX_FP_TEXT || p->type == PX_FP_IMAGE || p->type == PX_FP_FILE) {
      nparts++;
      only_text &= p->type == PX_FP_TEXT;
      one = p;
    } else {
      return DECLINE;
    }
  }
  if (nparts == 0) return 0;
  if (!*first) rc = px_fb_lit(b, ",");
  *first = 0;
  if (rc == 0) rc = px_fb_lit(b, "{\"role\":\"user\",\"content\":");
  if (rc == 0 && nparts == 1 && only_text) {
    rc = px_fb_str(b, one->text);
  } else if (rc == 0) {
    rc = px_fb_lit(b, "[");
    int f = 1;
    for (const px_fpart_t *p = m->parts; p && rc == 0; p = p->next) {
      if (p->type == PX_FP_TOOL_RESULT) continue;
      if (!f) rc = px_fb_lit(b, ",");
      f = 0;
      if (rc == 0 && p->type != PX_FP_TEXT) {
        rc = put_media(b, p);
        continue;
      }
      if (rc == 0) rc = px_fb_lit(b, "{\"type\":\"text\",\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text);
      if (rc == 0) rc = px_fb_lit(b, "}");
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* an IR custom tool format -> the Chat shape ({"type":"grammar","grammar":
 * {syntax, definition}} or {"type": t}), as chat.c's format_out */
static int put_format(px_buf_t *b, px_str_t raw) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("syntax"), PX_FK("definition")};
  px_fv_t v = {PX_FV_OBJ, {0}, raw}, f[3];
  unsigned seen = 0;
  if (px_fv_kfields(&v, keys, 3, f, &seen) != 0) return DECLINE;
  if (!HAS(0) || f[0].kind != PX_FV_STR) return 0; /* no type: no format */
  int rc = px_fb_lit(b, ",\"format\":{\"type\":");
  if (rc == 0) rc = px_fb_str(b, f[0].s);
  if (rc == 0 && px_fs_is(f[0].s, "grammar")) {
    rc = px_fb_lit(b, ",\"grammar\":{\"syntax\":");
    for (int i = 1; i <= 2 && rc == 0; i++) {
      if (i == 2) rc = px_fb_lit(b, ",\"definition\":");
      if (rc == 0 && HAS(i) && f[i].kind == PX_FV_STR)
        rc = px_fb_str(b, f[i].s);
      else if (rc == 0)
        rc = px_fb_lit(b, "null");
    }
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

static int put_tools(px_buf_t *b, const px_freq_t *ir, px_lossy_t *lossy) {
  int rc = px_fb_lit(b, ",\"tools\":[");
  for (const px_ftool_t *t = ir->tools; t && rc == 0; t = t->next) {
    if (t != ir->tools) rc = px_fb_lit(b, ",");
    if (rc == 0 && t->custom) {
      rc = px_fb_lit(b, "{\"type\":\"custom\",\"custom\":{\"name\":");
      if (rc == 0) rc = px_fb_str(b, t->name);
      if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", t->desc);
      if (rc == 0 && t->format.ptr) rc = put_format(b, t->format);
      if (rc == 0) rc = px_fb_lit(b, "}}");
      continue; /* chat.c names no cache_control of a custom tool */
    }
    if (rc == 0) rc = px_fb_lit(b, "{\"type\":\"function\",\"function\":{\"name\":");
    if (rc == 0) rc = px_fb_str(b, t->name);
    if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", t->desc);
    if (rc == 0) rc = px_fb_opt_raw(b, ",\"parameters\":", t->params);
    if (rc == 0 && t->strict >= 0)
      rc = px_fb_lit(b, t->strict ? ",\"strict\":true" : ",\"strict\":false");
    if (rc == 0) rc = px_fb_lit(b, "}}");
    if (t->cache_control.ptr) px_lossy_add(lossy, "cache_control");
  }
  if (rc == 0) rc = px_fb_lit(b, "]");
  if (rc == 0 && ir->tool_choice == PX_FTC_TOOL) {
    int cu = px_ftool_custom(ir, ir->tc_name);
    rc = px_fb_lit(
        b, cu ? ",\"tool_choice\":{\"type\":\"custom\",\"custom\":{\"name\":"
              : ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":");
    if (rc == 0) rc = px_fb_str(b, ir->tc_name);
    if (rc == 0) rc = px_fb_lit(b, "}}");
  }
  if (rc == 0) rc = px_fb_openai_tc(b, ir->tool_choice, ir->parallel);
  return rc;
}

/* response_format as chat.c's response_format_out writes it */
static int put_response_format(px_buf_t *b, const px_freq_t *ir) {
  if (ir->rf_schema.ptr) {
    int rc = px_fb_lit(b,
                       ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                       "{\"name\":");
    if (rc == 0)
      rc = px_fb_str(b, ir->rf_name.p ? ir->rf_name : (px_fstr_t){"response", 8, 0});
    if (rc == 0) rc = px_fb_opt_raw(b, ",\"schema\":", ir->rf_schema);
    if (rc == 0) rc = px_fb_opt_str(b, ",\"description\":", ir->rf_desc);
    if (rc == 0 && ir->rf_strict >= 0)
      rc = px_fb_lit(b, ir->rf_strict ? ",\"strict\":true" : ",\"strict\":false");
    return rc == 0 ? px_fb_lit(b, "}}") : rc;
  }
  if (ir->rf_json) return px_fb_lit(b, ",\"response_format\":{\"type\":\"json_object\"}");
  if (ir->rf_text) return px_fb_lit(b, ",\"response_format\":{\"type\":\"text\"}");
  return 0;
}

/* the reasoning effort (from a budget when only that is given), as chat.c's
 * reasoning_out */
static int put_reasoning(const px_tr_ctx_t *ctx, px_buf_t *b, const px_freq_t *ir,
                         px_lossy_t *lossy) {
  if (!ir->has_reasoning) return 0;
  int rc = 0;
  if (ir->effort.p) {
    rc = px_fb_lit(b, ",\"reasoning_effort\":");
    if (rc == 0) rc = px_fb_str(b, ir->effort);
  } else if (ir->budget.ptr) {
    rc = px_fb_lit(b, ",\"reasoning_effort\":\"");
    if (rc == 0) rc = px_fb_lit(b, px_effort_of_budget(ir->budget_v));
    if (rc == 0) rc = px_fb_lit(b, "\"");
  } else if (ir->reasoning_enabled == 1) {
    /* Anthropic adaptive thinking: Chat cannot ask for visible thinking */
    px_lossy_add(lossy, px_in_names(ctx)->reasoning_config);
  }
  if (ir->summary.p) px_lossy_add(lossy, "reasoning.summary");
  return rc;
}

static int chat_fast_encode_request(const px_tr_ctx_t *ctx, const px_freq_t *ir,
                                    px_buf_t *b, px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
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
  size_t mi = 0; /* the IR message's index (chat.c's words name it) */
  while (rc == 0 && m != NULL) {
    if (m->assistant) {
      const px_fmsg_t *end = m->next;
      size_t n = 1;
      for (; end != NULL && end->assistant; end = end->next) n++;
      if (!first) rc = px_fb_lit(b, ",");
      first = 0;
      if (rc == 0) rc = put_assistant(ctx, b, m, end, mi, lossy, err);
      m = end;
      mi += n;
    } else {
      rc = put_user(ctx, b, m, mi++, &first, lossy, err);
      m = m->next;
    }
  }
  if (rc == 0) rc = px_fb_lit(b, "]");
  if (rc != 0) return rc;
  if (ir->tools != NULL) {
    rc = put_tools(b, ir, lossy);
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
  if (rc == 0) rc = put_response_format(b, ir);
  if (rc == 0) rc = put_reasoning(ctx, b, ir, lossy);
  if (rc == 0) rc = px_fb_opt_str(b, ",\"user\":", ir->user);
  if (rc == 0) rc = px_fb_opt_raw(b, ",\"metadata\":", ir->metadata);
  if (rc == 0) rc = px_fb_opt_str(b, ",\"prompt_cache_key\":", ir->prompt_cache_key);
  if (rc == 0) rc = px_fb_opt_str(b, ",\"verbosity\":", ir->verbosity);
  /* a stream always asks for its usage (SPEC 5: the final usage is real) */
  if (rc == 0 && (ctx->stream || ir->stream_true))
    rc = px_fb_lit(b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* ======================================================================== */
/* Response decode                                                           */

/* A string built in the arena from b (escaped content) */
static int arena_fstr(px_arena_t *a, const px_buf_t *b, int esc, px_fstr_t *out) {
  char *s = px_arena_alloc(a, b->len + 1);
  if (s == NULL) return DECLINE;
  if (b->len) memcpy(s, b->data, b->len);
  *out = (px_fstr_t){s, b->len, esc};
  return 0;
}

/* The members of object v written into b after what b holds (",k":v each,
 * raw), as jansson's json_object_set of each would leave them: an escaped
 * key, a repeated one or one named skip (jansson would replace the one
 * written before) declines. */
static int copy_members(px_buf_t *b, const px_fv_t *v, const char *skip) {
  px_fw_t w = {v->raw.ptr, v->raw.len, 0};
  px_fstr_t k, keys[32];
  px_fv_t x;
  int r, n = 0;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    if (k.esc || n == 32 || px_fs_is(k, skip) || px_fw_value(&w, &x) < 0) return DECLINE;
    for (int i = 0; i < n; i++)
      if (keys[i].n == k.n && memcmp(keys[i].p, k.p, k.n) == 0) return DECLINE;
    keys[n++] = k;
    if (px_fb_lit(b, ",\"") < 0 || px_fb_put(b, k.p, k.n) < 0 ||
        px_fb_lit(b, "\":") < 0 || px_fb_raw(b, x.raw) < 0)
      return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

/* Chat url_citation {type, url_citation:{...}} -> the flat IR annotations
 * (chat.c's annotations_in) as raw JSON in the arena (ptr NULL when none
 * is kept); others named */
static int annotations_in(const px_fv_t *anns, px_str_t *out, px_arena_t *a,
                          px_lossy_t *lossy) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("url_citation")};
  px_fw_t w = {anns->raw.ptr, anns->raw.len, 0};
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  int r, rc = px_fb_lit(&b, "["), n = 0;
  if (px_fw_open(&w, '[') < 0) rc = DECLINE;
  while (rc == 0 && (r = px_fw_elem(&w)) == 1) {
    px_fv_t f[2];
    unsigned seen = 0;
    if ((rc = elem_fields(&w, keys, 2, f, &seen)) != 0) break;
    if (!HAS(0) || f[0].kind != PX_FV_STR || !px_fs_is(f[0].s, "url_citation") ||
        !HAS(1) || f[1].kind != PX_FV_OBJ) {
      px_lossy_add(lossy, "choices[].message.annotations");
      continue;
    }
    rc =
        px_fb_lit(&b, n++ ? ",{\"type\":\"url_citation\"" : "{\"type\":\"url_citation\"");
    if (rc == 0) rc = copy_members(&b, &f[1], "type");
    if (rc == 0) rc = px_fb_lit(&b, "}");
  }
  if (rc == 0 && r < 0) rc = DECLINE;
  if (rc == 0) rc = px_fb_lit(&b, "]");
  px_fstr_t s;
  /* none kept: none (an empty IR list writes nothing anywhere) */
  if (rc == 0 && n > 0) rc = arena_fstr(a, &b, 0, &s);
  if (rc == 0 && n > 0) *out = (px_str_t){s.p, s.n};
  px_buf_free(&b);
  return rc == 0 ? 0 : DECLINE;
}

/* content parts: the texts of the "text" ones joined (chat.c's join_parts)
 * -> *out (p NULL: none) */
static int join_texts(const px_fv_t *c, px_fstr_t *out, px_arena_t *a) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("text")};
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  int r, rc = 0, n = 0, esc = 0;
  out->p = NULL;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while (rc == 0 && (r = px_fw_elem(&w)) == 1) {
    px_fv_t f[2];
    unsigned seen = 0;
    if (!AT_OBJ(w)) {
      rc = px_fw_value(&w, &f[0]) < 0 ? DECLINE : 0;
      continue;
    }
    if (px_fw_kfields(&w, keys, 2, f, &seen) != 0) rc = DECLINE;
    if (rc != 0 || !HAS(0) || f[0].kind != PX_FV_STR || !px_fs_is(f[0].s, "text"))
      continue;
    n++;
    if (HAS(1) && f[1].kind == PX_FV_STR) {
      rc = px_fb_put(&b, f[1].s.p, f[1].s.n);
      esc |= f[1].s.esc;
    }
  }
  if (rc == 0 && r < 0) rc = DECLINE;
  if (rc == 0 && n > 0) rc = arena_fstr(a, &b, esc, out);
  px_buf_free(&b);
  return rc;
}

/* the tool calls of an answer (chat.c's decode_response): function calls,
 * custom ones for a client that holds them; another kind refuses */
static int calls_out(const px_tr_ctx_t *ctx, const px_fv_t *tv, px_fresp_t *ir,
                     px_arena_t *a, px_tr_err_t *err, int *refused) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("id"), PX_FK("function"),
                                   PX_FK("custom")};
  static const px_fkey_t fkeys[] = {PX_FK("name"), PX_FK("arguments")};
  static const px_fkey_t ckeys[] = {PX_FK("name"), PX_FK("input")};
  static const px_fstr_t none = {"", 0, 0};
  px_fw_t w = {tv->raw.ptr, tv->raw.len, 0};
  int r;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    px_fv_t f[4], g[2];
    unsigned seen = 0, gs = 0;
    if (elem_fields(&w, keys, 4, f, &seen) != 0) return DECLINE;
    px_fstr_t t = HAS(0) && f[0].kind == PX_FV_STR ? f[0].s : (px_fstr_t){NULL, 0, 0};
    int custom = t.p && px_fs_is(t, "custom") && px_tr_in_can(ctx, PX_CAP_CUSTOM_TOOLS) &&
                 HAS(3) && f[3].kind == PX_FV_OBJ;
    int k = custom ? 3 : 2;
    if (!custom &&
        ((t.p && !px_fs_is(t, "function")) || !HAS(2) || f[2].kind != PX_FV_OBJ)) {
      px_tr_fail(err, "choices[0].message.tool_calls",
                 "upstream returned a tool call that cannot be translated");
      if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
      *refused = 1;
      return PX_FAST_REFUSE;
    }
    if (px_fv_kfields(&f[k], custom ? ckeys : fkeys, 2, g, &gs) != 0) return DECLINE;
    px_fpart_t *p = px_fpart_new(a, PX_FP_TOOL_CALL);
    if (p == NULL) return DECLINE;
    p->id = HAS(1) && f[1].kind == PX_FV_STR ? f[1].s : none;
    p->name = (gs & 1) && g[0].kind == PX_FV_STR ? g[0].s : none;
    if (custom) {
      p->custom = 1;
      p->text = (gs & 2) && g[1].kind == PX_FV_STR ? g[1].s : none;
    } else if (!(gs & 2) || g[1].kind != PX_FV_STR) {
      p->args = (px_fstr_t){"{}", 2, 0};
    } else {
      int blank = px_fs_blank_value(g[1].s);
      if (blank < 0) return DECLINE;
      p->args = blank ? (px_fstr_t){"{}", 2, 0} : g[1].s;
    }
    px_fpart_push(&ir->content, &ir->last, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* the one choice's message (chat.c's decode_response, in its order):
 * reasoning, text (with annotations), refusal, tool calls */
static int decode_message_out(const px_tr_ctx_t *ctx, const px_fv_t *mv, px_fresp_t *ir,
                              px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("content"),           PX_FK("refusal"),
                                   PX_FK("reasoning_content"), PX_FK("tool_calls"),
                                   PX_FK("annotations"),       PX_FK("audio")};
  px_fv_t f[6];
  unsigned seen = 0;
  int refused = 0;
  px_fpart_t *p;
  if (px_fv_kfields(mv, keys, 6, f, &seen) != 0) return DECLINE;
  if (HAS(2) && f[2].kind == PX_FV_STR && f[2].s.n > 0) {
    if ((p = px_fpart_new(a, PX_FP_REASONING)) == NULL) return DECLINE;
    p->text = f[2].s;
    px_fpart_push(&ir->content, &ir->last, p);
  }
  px_fstr_t text = {NULL, 0, 0};
  if (HAS(0) && f[0].kind == PX_FV_STR && f[0].s.n > 0)
    text = f[0].s;
  else if (HAS(0) && f[0].kind == PX_FV_ARR && join_texts(&f[0], &text, a) != 0)
    return DECLINE;
  if (text.p != NULL && text.n == 0) text.p = NULL; /* joined, empty: none */
  px_str_t anns = {NULL, 0};
  if (HAS(4) && f[4].kind == PX_FV_ARR && !px_fw_empty(f[4].raw)) {
    if (text.p == NULL) text = (px_fstr_t){"", 0, 0};
    if (annotations_in(&f[4], &anns, a, lossy) != 0) return DECLINE;
  }
  if (text.p != NULL) {
    if ((p = px_fpart_text(a, text)) == NULL) return DECLINE;
    p->annotations = anns;
    px_fpart_push(&ir->content, &ir->last, p);
  }
  if (HAS(1) && f[1].kind == PX_FV_STR && f[1].s.n > 0) {
    if ((p = px_fpart_new(a, PX_FP_REFUSAL)) == NULL) return DECLINE;
    p->text = f[1].s;
    px_fpart_push(&ir->content, &ir->last, p);
  }
  if (HAS(3) && f[3].kind == PX_FV_ARR) {
    int rc = calls_out(ctx, &f[3], ir, a, err, &refused);
    if (rc != 0) return rc;
  }
  if (HAS(5) && f[5].kind != PX_FV_NULL) px_lossy_add(lossy, "choices[].message.audio");
  return 0;
}

/* The body is read once and checked as it is read (px_fc_*: the hub scans
 * nothing before); the one choice's message is walked again from its span
 * (checked by then), the usage is read where it stands. */
enum { C_ID, C_MODEL, C_CREATED, C_CHOICES, C_USAGE };
static const px_fkey_t resp_keys[] = {PX_FK("id"), PX_FK("model"), PX_FK("created"),
                                      PX_FK("choices"), PX_FK("usage")};

/* what decode_choices read */
typedef struct {
  size_t n;        /* choices */
  int has_msg;     /* the first one's message is an object */
  px_fv_t msg, fr; /* its message and finish_reason (kind NULL: absent) */
  int logprobs;    /* its logprobs are set (not null) */
} choices_t;

/* choices at the cursor, checked: how many, and the first one's message,
 * finish_reason and logprobs */
static int decode_choices(px_fw_t *w, choices_t *ch) {
  static const px_fkey_t ckeys[] = {PX_FK("message"), PX_FK("finish_reason"),
                                    PX_FK("logprobs")};
  px_fv_t g[3], v;
  int first = 1, r;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fc_elem(w, &first)) == 1) {
    unsigned gs = 0;
    if (ch->n++ > 0 || w->p[w->i] != '{') {
      if (px_fc_value(w, &v) < 0) return DECLINE;
      continue;
    }
    if (px_fc_fields(w, ckeys, 3, g, &gs) != 0) return DECLINE;
    ch->has_msg = (gs & 1) && g[0].kind == PX_FV_OBJ;
    if (ch->has_msg) ch->msg = g[0];
    if (gs & 2) ch->fr = g[1];
    ch->logprobs = (gs & 4) && g[2].kind != PX_FV_NULL;
  }
  return r < 0 ? DECLINE : 0;
}

/* finish_reason -> ir->stop (chat.c: px_stop_from_chat of the string) */
static int finish(const px_fv_t *fr, px_fresp_t *ir) {
  char buf[40];
  ir->stop = PX_STOP_NONE;
  if (fr->kind != PX_FV_STR) return 0;
  ir->finish = fr->s;
  ir->stop = px_fs_value(fr->s, buf, sizeof(buf)) == sizeof(buf) ? PX_STOP_END_TURN
                                                                 : px_stop_from_chat(buf);
  return 0;
}

static int chat_fast_decode_response(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                     px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy,
                                     px_tr_err_t *err) {
  px_fv_t f[NKEYS(resp_keys)];
  choices_t ch;
  memset(&ch, 0, sizeof(ch));
  ch.fr.kind = PX_FV_NULL;
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  int r, first = 1;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fc_member(&w, &k, &first)) == 1) {
    int ki = px_fk_of(k, resp_keys, NKEYS(resp_keys));
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == C_CHOICES && w.p[w.i] == '[') {
      if (decode_choices(&w, &ch) != 0) return DECLINE;
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
  if (r < 0 || px_fc_end(&w) < 0) return DECLINE;
  /* one JSON object, as jansson reads it: chat.c's refusals */
  if (ch.n != 1) {
    px_tr_fail(err, "choices",
               "upstream returned %zu choices; exactly one can be translated to %s", ch.n,
               px_proto_get(ctx->in)->name);
    if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
    return PX_FAST_REFUSE;
  }
  if (!ch.has_msg) {
    px_tr_fail(err, "choices[0].message", "upstream choice has no message");
    if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
    return PX_FAST_REFUSE;
  }
  if (!HAS(C_USAGE)) ir->usage_known = 1, ir->usage_in = ir->usage_out = -1;
  if (HAS(C_ID) && f[C_ID].kind == PX_FV_STR) ir->id = f[C_ID].s;
  if (HAS(C_MODEL) && f[C_MODEL].kind == PX_FV_STR) ir->model = f[C_MODEL].s;
  if (px_fast_created(HAS(C_CREATED) ? &f[C_CREATED] : NULL, ir) != 0) return DECLINE;
  int rc = decode_message_out(ctx, &ch.msg, ir, a, lossy, err);
  if (rc != 0) return rc;
  if (ch.logprobs) px_lossy_add(lossy, "choices[].logprobs");
  return finish(&ch.fr, ir);
}

/* ======================================================================== */
/* Response encode                                                           */

/* Code points of the value of string content s (px_utf8_chars of its
 * unescaped text; escapes as the scanner checked them: surrogates in
 * pairs). */
static size_t esc_chars(px_fstr_t s) {
  if (!s.esc) return px_utf8_chars(s.p, s.n);
  size_t n = 0, i = 0;
  while (i < s.n) {
    unsigned char c = (unsigned char)s.p[i];
    if (c != '\\') {
      n += (c & 0xC0) != 0x80;
      i++;
    } else if (s.p[i + 1] == 'u') {
      long cp = px_hex4((const unsigned char *)s.p + i + 2);
      i += cp >= 0xD800 && cp <= 0xDBFF ? 12 : 6; /* a pair: one code point */
      n++;
    } else {
      i += 2;
      n++;
    }
  }
  return n;
}

/* IR annotations (raw array) -> Chat's, after the *nann written to b
 * (chat.c's px_chat_annotations): a url_citation with a url as {type,
 * url_citation: its other members, start_index / end_index shifted by the
 * code points of the texts before}; others named (px_lossy_annotations) */
static int put_annotations(const px_tr_ctx_t *ctx, px_buf_t *b, px_str_t raw,
                           int64_t shift, int *nann, px_lossy_t *lossy) {
  px_fw_t w = {raw.ptr, raw.len, 0};
  int r;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    px_fstr_t keys[32];
    px_fv_t vals[32], x;
    int n = 0, type = -1, url = -1, rm;
    if (!AT_OBJ(w)) {
      if (px_fw_value(&w, &x) < 0) return DECLINE;
      px_lossy_add(lossy, px_lossy_annotations(ctx));
      continue;
    }
    px_fw_open(&w, '{');
    while ((rm = px_fw_member(&w, &keys[n])) == 1) {
      /* jansson keeps one of a repeated member: not this walk */
      if (keys[n].esc || n == 31 || px_fw_value(&w, &vals[n]) < 0) return DECLINE;
      for (int i = 0; i < n; i++)
        if (keys[i].n == keys[n].n && memcmp(keys[i].p, keys[n].p, keys[n].n) == 0)
          return DECLINE;
      if (px_fs_is(keys[n], "type")) type = n;
      if (px_fs_is(keys[n], "url")) url = n;
      n++;
    }
    if (rm < 0) return DECLINE;
    if (type < 0 || vals[type].kind != PX_FV_STR ||
        !px_fs_is(vals[type].s, "url_citation") || url < 0 ||
        vals[url].kind != PX_FV_STR) {
      px_lossy_add(lossy, px_lossy_annotations(ctx));
      continue;
    }
    int rc = px_fb_lit(b, (*nann)++ ? ",{\"type\":\"url_citation\",\"url_citation\":{"
                                    : "{\"type\":\"url_citation\",\"url_citation\":{");
    for (int i = 0, f = 1; i < n && rc == 0; i++) {
      if (i == type) continue;
      rc = px_fb_lit(b, f ? "\"" : ",\"");
      f = 0;
      if (rc == 0) rc = px_fb_put(b, keys[i].p, keys[i].n);
      if (rc == 0) rc = px_fb_lit(b, "\":");
      if (rc == 0 && vals[i].kind == PX_FV_NUM && px_fw_is_int(vals[i].raw) &&
          (px_fs_is(keys[i], "start_index") || px_fs_is(keys[i], "end_index"))) {
        int64_t v;
        if (vals[i].raw.ptr[0] == '-' || px_fw_uint(vals[i].raw, &v) < 0) return DECLINE;
        rc = px_fb_i64(b, v + shift);
      } else if (rc == 0) {
        rc = px_fb_raw(b, vals[i].raw);
      }
    }
    if (rc == 0) rc = px_fb_lit(b, "}}");
    if (rc != 0) return rc;
  }
  return r < 0 ? DECLINE : 0;
}

/* a tool call of an answer, its id made unique among the message's
 * (px_idset_unique, the nth call) */
static int put_answer_call(px_buf_t *b, const px_fpart_t *p, px_idset_t *ids, int nth,
                           px_arena_t *a) {
  if (ids == NULL) return put_call(b, p);
  const char *id = p->id.p ? px_fs_cstr(a, p->id, NULL) : "";
  if (id == NULL || (id = px_idset_unique(ids, px_str(id), nth)) == NULL) return DECLINE;
  px_fpart_t q = *p;
  q.id = (px_fstr_t){NULL, 0, 0};
  px_buf_t idb;
  px_buf_init(&idb, SIZE_MAX);
  int rc = px_buf_json_escape(&idb, id, strlen(id));
  px_fstr_t s;
  if (rc == 0) rc = arena_fstr(a, &idb, 1, &s);
  px_buf_free(&idb);
  if (rc != 0) return DECLINE;
  q.id = s;
  return put_call(b, &q);
}

static int chat_fast_encode_response(const px_tr_ctx_t *ctx, const px_fresp_t *ir,
                                     px_buf_t *b, px_arena_t *a, px_lossy_t *lossy,
                                     px_tr_err_t *err) {
  (void)err;
  /* what chat.c's encoder reads of the content, in order (the lossy names
   * of annotations and opaque reasoning as it meets them) */
  int ntext = 0, ncalls = 0, nref = 0, nreason = 0, nann = 0, rc = 0;
  size_t chars = 0;
  px_buf_t anns;
  px_buf_init(&anns, SIZE_MAX);
  const px_fpart_t *last_ann = NULL; /* the texts before it are counted */
  for (const px_fpart_t *p = ir->content; p; p = p->next)
    if (p->type == PX_FP_TEXT && p->annotations.ptr != NULL) last_ann = p;
  for (const px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
    if (p->type == PX_FP_TEXT) {
      ntext++;
      if (p->annotations.ptr != NULL)
        rc = put_annotations(ctx, &anns, p->annotations, (int64_t)chars, &nann, lossy);
      if (last_ann != NULL) chars += esc_chars(p->text);
      if (p == last_ann) last_ann = NULL;
    } else if (p->type == PX_FP_REASONING) {
      nreason += p->text.n > 0;
      int sig, red;
      reasoning_tokens(p, &sig, &red);
      if (sig) px_lossy_add(lossy, px_lossy_opaque_reasoning(ctx, 0));
      if (red) px_lossy_add(lossy, px_lossy_opaque_reasoning(ctx, 1));
    } else if (p->type == PX_FP_TOOL_CALL) {
      ncalls++;
    } else if (p->type == PX_FP_REFUSAL) {
      nref++;
    } /* other parts: not in a Chat message (chat.c skips them) */
  }
  px_fstr_t expl = ir->refusal_explanation;
  int worded = nref > 0 || ntext > 0; /* text words a refusal */
  int expl_as_refusal = nref == 0 && expl.p != NULL && ntext == 0;
  if (expl_as_refusal) /* Anthropic refusal without visible wording */
    worded = 1;
  else if (expl.p != NULL)
    px_lossy_add(lossy, px_out_names(ctx)->refusal_explanation);
  if (ir->stop_sequence.p) px_lossy_add(lossy, "stop_sequence");
  if (rc == 0) rc = px_fb_lit(b, "{\"id\":\"");
  size_t id_at = b->len; /* traces: the id and the model as written */
  if (rc == 0 && ir->id.p == NULL)
    rc = px_fb_lit(b, "chatcmpl-proxai");
  else if (rc == 0) {
    if (!px_fs_starts(ir->id, "chatcmpl-", 9)) rc = px_fb_lit(b, "chatcmpl-");
    if (rc == 0 && ir->id.n) rc = px_fb_put(b, ir->id.p, ir->id.n);
  }
  size_t id_end = b->len;
  if (rc == 0) rc = px_fb_lit(b, "\",\"object\":\"chat.completion\",\"created\":");
  if (rc == 0) rc = px_fb_i64(b, ir->has_created ? ir->created : ctx->created);
  if (rc == 0) rc = px_fb_lit(b, ",\"model\":"); /* null when nothing names it */
  size_t model_at = b->len;
  if (rc == 0 && ctx->client_model)
    rc = px_buf_json_str(b, ctx->client_model, strlen(ctx->client_model));
  else if (rc == 0)
    rc = ir->model.p ? px_fb_str(b, ir->model) : px_fb_lit(b, "null");
  size_t model_end = b->len;
  if (rc == 0)
    rc = px_fb_lit(b,
                   ",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                   "\"assistant\",\"content\":");
  if (rc == 0 && ntext) {
    rc = px_fb_lit(b, "\"");
    if (rc == 0) rc = px_fb_texts(b, ir->content);
    if (rc == 0) rc = px_fb_lit(b, "\"");
  } else if (rc == 0) {
    rc = px_fb_lit(b, "null");
  }
  if (rc == 0 && expl_as_refusal) {
    rc = px_fb_lit(b, ",\"refusal\":");
    if (rc == 0) rc = px_fb_str(b, expl);
  } else if (rc == 0 && nref > 0) {
    rc = px_fb_lit(b, ",\"refusal\":\"");
    if (rc == 0) rc = put_texts_of(b, ir->content, PX_FP_REFUSAL);
    if (rc == 0) rc = px_fb_lit(b, "\"");
  }
  if (rc == 0 && nreason > 0) {
    rc = px_fb_lit(b, ",\"reasoning_content\":\"");
    if (rc == 0) rc = put_texts_of(b, ir->content, PX_FP_REASONING);
    if (rc == 0) rc = px_fb_lit(b, "\"");
  }
  if (rc == 0 && ncalls) {
    /* ids unique in the message: a missing or repeated one minted */
    px_idset_t set = {0};
    px_idset_t *ids = px_fast_ids_plain(ir->content) ? NULL : &set;
    rc = px_fb_lit(b, ",\"tool_calls\":[");
    int nth = 0;
    for (const px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
      if (p->type != PX_FP_TOOL_CALL) continue;
      if (nth) rc = px_fb_lit(b, ",");
      if (rc == 0) rc = put_answer_call(b, p, ids, nth, a);
      nth++;
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
    px_idset_free(&set);
  }
  if (rc == 0 && nann > 0) {
    rc = px_fb_lit(b, ",\"annotations\":[");
    if (rc == 0) rc = px_fb_put(b, anns.data, anns.len);
    if (rc == 0) rc = px_fb_lit(b, "]");
  }
  px_buf_free(&anns);
  /* a refusal with nothing at all to show (no text, no refusal, no
   * explanation) must not read as a normal stop */
  px_stop_t st = ir->stop == PX_STOP_NONE                 ? PX_STOP_END_TURN
                 : ir->stop == PX_STOP_REFUSAL && !worded ? PX_STOP_CONTENT_FILTER
                                                          : ir->stop;
  if (rc == 0) rc = px_fb_lit(b, "},\"logprobs\":null,\"finish_reason\":\"");
  const char *fr = px_stop_to_chat(st);
  if (rc == 0) rc = px_fb_lit(b, fr);
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
  if (rc == 0) px_answer_wrote(ctx->client, b, id_at, id_end, model_at, model_end, fr);
  return rc;
}

const px_fast_ops_t px_chat_fast = {
    .decode_request = chat_fast_decode_request,
    .encode_request = chat_fast_encode_request,
    .decode_response = chat_fast_decode_response,
    .encode_response = chat_fast_encode_response,
    .encodes = PX_FU_ALL | PX_FU_SYSTEM_NOTE,
    .response_checked = 1,
    .resp_encodes = PX_FU_REASONING | PX_FU_REFUSAL | PX_FU_CUSTOM | PX_FU_MEDIA |
                    PX_FU_ANNOTATIONS | PX_FU_REFUSAL_EXPL,
};

/* ======================================================================== */
/* The wire: errors, token counts, model lists, the protocol table          */

/* ------------------------------------------------------------------------ */
/* errors                                                                    */

static int chat_decode_error(int status, const char *body, size_t len,
                             px_upstream_err_t *out) {
  json_t *root = px_jdoc_load(body, len, 0, NULL);
  if (root == NULL) return PX_EINVAL;
  json_t *e = json_object_get(root, "error");
  const char *msg = NULL, *type = NULL;
  int rc = PX_EINVAL;
  if (px_jstr(root, "type") != NULL && strcmp(px_jstr(root, "type"), "error") == 0)
    goto done; /* Anthropic's shape */
  if (json_is_object(e)) {
    msg = px_jstr(e, "message");
    type = px_jstr(e, "type");
    if (type == NULL) type = px_jstr(e, "code");
  } else if (json_is_string(e)) {
    msg = json_string_value(e);
  }
  if (msg == NULL) goto done;
  memset(out, 0, sizeof(*out));
  out->kind = px_errkind_from_type(type, status);
  /* OpenAI says invalid_request_error for bad keys (401) and more: the
   * status is the better witness then */
  if (out->kind == PX_ERR_INVALID && status != 400 && status >= 401 && status < 500)
    out->kind = px_errkind_from_type(NULL, status);
  snprintf(out->type, sizeof(out->type), "%s", type ? type : "");
  snprintf(out->message, sizeof(out->message), "%s", msg);
  rc = 0;
done:
  json_decref(root);
  return rc;
}

static int chat_encode_error(px_buf_t *out, px_errkind_t kind, const char *type,
                             const char *message, const char *param,
                             const char *request_id) {
  (void)request_id;
  if (type == NULL || *type == 0) type = px_errkind_openai(kind);
  return px_openai_error_body(out, type, message, param);
}

static int chat_encode_stream_error(px_buf_t *out, px_errkind_t kind,
                                    const char *message) {
  int rc = px_buf_puts(out, "data: ");
  if (rc == 0) rc = px_openai_error_body(out, px_errkind_openai(kind), message, NULL);
  if (rc == 0) rc = px_buf_puts(out, "\n\n");
  return rc;
}

const px_proto_ops_t px_proto_chat = {
    .id = PX_PROTO_CHAT,
    .name = "openai_chat_completions",
    .otel_provider = "openai",
    .otel_operation = "chat",
    .inbound_path = "/chat/completions",
    .upstream_path = "/chat/completions",
    .decode_error = chat_decode_error,
    .encode_error = chat_encode_error,
    .encode_stream_error = chat_encode_stream_error,
    .sdec_new = px_chat_sdec_new,
    .sdec_feed = px_chat_sdec_feed,
    .sdec_finish = px_chat_sdec_finish,
    .sdec_free = px_chat_sdec_free,
    .senc_new = px_chat_senc_new,
    .senc_event = px_chat_senc_event,
    .senc_free = px_chat_senc_free,
    .stream_usage_opt_in = 1,
    .forward_headers = px_openai_forward_headers,
    .tenancy_headers = px_openai_tenancy_headers,
    .auth_header = "Authorization: Bearer ",
    .error_type = px_errkind_openai,
    .encode_models = px_openai_models,
    .env_key = "OPENAI_API_KEY",
    .env_base = "OPENAI_BASE_URL",
    .default_base = "https://api.openai.com/v1",
    .default_name = "openai",
    .caps = PX_CAP_CUSTOM_TOOLS | PX_CAP_PROMPT_CACHE_KEY | PX_CAP_VERBOSITY |
            PX_CAP_FILE_ID | PX_CAP_ANY_TOOL_ARGS,
    .names = {.refusal = PX_LOSSY("messages[].refusal"),
              .reasoning_text = PX_LOSSY("messages[].reasoning_content"),
              .reasoning_config = PX_LOSSY("reasoning_effort"),
              .stop = PX_LOSSY("stop"),
              .prompt_cache_key = PX_LOSSY("prompt_cache_key"),
              .verbosity = PX_LOSSY("verbosity"),
              .tool_args_param = "messages.tool_calls.function.arguments",
              .annotations = PX_LOSSY("choices[].message.annotations")},
    .fast = &px_chat_fast,
    .max_tokens_keys = {{"max_completion_tokens", NULL}, {"max_tokens", NULL}},
    .watch = {.usage_obj = "usage",
              .usage_in = "prompt_tokens",
              .usage_out = "completion_tokens",
              .terminal_data = "[DONE]",
              .error_data = 1,
              .model_path = {"model"},
              .model_depth = 1,
              .finish_list = "choices",
              .finish_key = "finish_reason"},
};
