/* chat.c - OpenAI Chat Completions translator: request/response <-> IR,
 * error bodies. Streams live in chat_stream.c.
 *
 * No I/O. Every field that is dropped on purpose is named with
 * px_lossy_add(); every field that cannot be represented is rejected with
 * px_tr_fail() naming it. docs/translation-chat.md lists both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "ref.h"

#define PATH_MAX_LEN 96
#define SUBPATH_LEN 128

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */

static void add_str(json_t *o, const char *k, const char *s) {
  json_object_set_new(o, k, json_string(s));
}

/* Parse "data:<media>;base64,<data>". Returns 0 and fills media/data views,
 * or <0 when url is not a base64 data URL. */
static int parse_data_url(const char *url, px_str_t *media, px_str_t *data) {
  if (strncmp(url, "data:", 5) != 0) return PX_EINVAL;
  const char *m = url + 5;
  const char *comma = strchr(m, ',');
  if (comma == NULL) return PX_EINVAL;
  const char *semi = memchr(m, ';', (size_t)(comma - m));
  if (semi == NULL) return PX_EINVAL;
  /* the parameter list must end with ;base64 */
  if ((size_t)(comma - m) < 7 || memcmp(comma - 7, ";base64", 7) != 0) return PX_EINVAL;
  media->ptr = m;
  media->len = (size_t)(semi - m);
  data->ptr = comma + 1;
  data->len = strlen(comma + 1);
  return 0;
}

static json_t *json_stringn_view(px_str_t s) {
  return json_stringn(s.ptr, s.len);
}

/* Join the "text" of every part of the given type in arr; NULL if none. */
static char *join_parts(json_t *arr, const char *type, int *count) {
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  size_t i;
  json_t *p;
  int n = 0;
  json_array_foreach(arr, i, p) {
    const char *t = px_jstr(p, "type");
    if (t == NULL || strcmp(t, type) != 0) continue;
    json_t *tx = json_object_get(p, "text");
    if (json_is_string(tx))
      px_buf_append(&b, json_string_value(tx), json_string_length(tx));
    n++;
  }
  if (count) *count = n;
  if (n == 0) {
    px_buf_free(&b);
    return NULL;
  }
  px_buf_append(&b, "", 1);
  return px_buf_steal(&b, NULL);
}

/* ------------------------------------------------------------------------ */
/* decode_request: Chat client body -> IR                                  */

/* Text-only content (system, developer, tool): string or array of text
 * parts. Appends {"type":"text","text":..} objects (plus extra fields) to
 * out. */
static int text_content(json_t *content, const char *path, json_t *out, const char *role,
                        px_tr_err_t *err) {
  char p[SUBPATH_LEN];
  if (json_is_string(content)) {
    json_t *part = json_pack("{s:s, s:O}", "type", "text", "text", content);
    if (role) add_str(part, "role", role);
    json_array_append_new(out, part);
    return 0;
  }
  if (!json_is_array(content))
    return px_tr_fail(err, path, "%s must be a string or an array of text parts", path);
  size_t i;
  json_t *c;
  json_array_foreach(content, i, c) {
    snprintf(p, sizeof(p), "%s[%zu]", path, i);
    const char *t = px_jstr(c, "type");
    json_t *tx = json_object_get(c, "text");
    if (t == NULL || strcmp(t, "text") != 0 || !json_is_string(tx))
      return px_tr_fail(err, p, "%s: only text parts are allowed here", p);
    json_t *part = json_pack("{s:s, s:O}", "type", "text", "text", tx);
    if (role) add_str(part, "role", role);
    json_array_append_new(out, part);
  }
  return 0;
}

/* One user content part -> IR part appended to out. */
static int user_part(const px_tr_ctx_t *ctx, json_t *c, const char *p, json_t *out,
                     px_lossy_t *lossy, px_tr_err_t *err) {
  char q[SUBPATH_LEN];
  const char *t = px_jstr(c, "type");
  if (t == NULL) return px_tr_fail(err, p, "%s.type is required", p);
  if (strcmp(t, "text") == 0) {
    json_t *tx = json_object_get(c, "text");
    if (!json_is_string(tx)) return px_tr_fail(err, p, "%s.text must be a string", p);
    json_array_append_new(out, json_pack("{s:s, s:O}", "type", "text", "text", tx));
    return 0;
  }
  if (strcmp(t, "image_url") == 0) {
    json_t *iu = json_object_get(c, "image_url");
    const char *url = json_is_string(iu) ? json_string_value(iu) : px_jstr(iu, "url");
    snprintf(q, sizeof(q), "%s.image_url.url", p);
    if (url == NULL) return px_tr_fail(err, q, "%s is required", q);
    const char *detail = px_jstr(iu, "detail");
    if (detail != NULL && strcmp(detail, "auto") != 0)
      px_lossy_add(lossy, "messages[].content[].image_url.detail");
    px_str_t media, data;
    if (strncmp(url, "data:", 5) == 0) {
      if (parse_data_url(url, &media, &data) < 0 || media.len == 0)
        return px_tr_fail(err, q, "%s: only base64 data URLs are supported", q);
      json_t *part = json_pack("{s:s}", "type", "image");
      json_object_set_new(part, "media_type", json_stringn_view(media));
      json_object_set_new(part, "data", json_stringn_view(data));
      json_array_append_new(out, part);
      return 0;
    }
    json_array_append_new(out, json_pack("{s:s, s:s}", "type", "image", "url", url));
    return 0;
  }
  if (strcmp(t, "input_audio") == 0)
    return px_tr_fail(err, p, "%s: audio parts cannot be translated to %s", p,
                      px_proto_get(ctx->out)->name);
  if (strcmp(t, "file") == 0) {
    json_t *f = json_object_get(c, "file");
    snprintf(q, sizeof(q), "%s.file", p);
    if (!json_is_object(f)) return px_tr_fail(err, q, "%s must be an object", q);
    const char *fd = px_jstr(f, "file_data");
    const char *fid = px_jstr(f, "file_id");
    const char *fname = px_jstr(f, "filename");
    json_t *part = json_pack("{s:s}", "type", "file");
    if (fd != NULL) {
      px_str_t media, data;
      if (strncmp(fd, "data:", 5) == 0) {
        if (parse_data_url(fd, &media, &data) < 0 || media.len == 0) {
          json_decref(part);
          snprintf(q, sizeof(q), "%s.file.file_data", p);
          return px_tr_fail(err, q, "%s: only base64 data URLs are supported", q);
        }
        json_object_set_new(part, "media_type", json_stringn_view(media));
        json_object_set_new(part, "data", json_stringn_view(data));
      } else {
        /* bare base64: OpenAI accepts PDFs only */
        add_str(part, "media_type", "application/pdf");
        add_str(part, "data", fd);
      }
    } else if (fid != NULL) {
      snprintf(q, sizeof(q), "%s.file.file_id", p);
      if (px_file_id_check(ctx, q, err) < 0) {
        json_decref(part);
        return PX_EINVAL;
      }
      add_str(part, "file_id", fid);
    } else {
      json_decref(part);
      return px_tr_fail(err, q, "%s needs file_data or file_id", q);
    }
    if (fname != NULL) add_str(part, "filename", fname);
    json_array_append_new(out, part);
    return 0;
  }
  snprintf(q, sizeof(q), "%s.type", p);
  return px_tr_fail(err, q, "%s: unknown content part type '%s'", q, t);
}

/* Validate tool-call arguments: JSON (an object toward an upstream without
 * PX_CAP_ANY_TOOL_ARGS). */
static int check_arguments(const px_tr_ctx_t *ctx, const char *args, const char *p,
                           px_tr_err_t *err) {
  json_error_t je;
  json_t *v = px_jdoc_loads(args, JSON_DECODE_ANY, &je);
  if (v == NULL) return px_tr_fail(err, p, "%s is not valid JSON: %s", p, je.text);
  int ok = json_is_object(v) || px_tr_out_can(ctx, PX_CAP_ANY_TOOL_ARGS);
  json_decref(v);
  if (!ok) return px_tr_fail(err, p, "%s must be a JSON object", p);
  return 0;
}

static int is_blank(const char *s) {
  for (; *s; s++)
    if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return 0;
  return 1;
}

/* Chat custom tool format {type:text} | {type:grammar, grammar:{definition,
 * syntax}} -> the IR (Responses) shape {type:grammar, syntax, definition}. */
static json_t *format_in(json_t *f) {
  const char *t = px_jstr(f, "type");
  if (t == NULL) return NULL;
  if (strcmp(t, "grammar") == 0) {
    json_t *g = json_object_get(f, "grammar");
    return json_pack("{s:s, s:s?, s:s?}", "type", "grammar", "syntax",
                     px_jstr(g, "syntax"), "definition", px_jstr(g, "definition"));
  }
  return json_pack("{s:s}", "type", t);
}

/* IR custom tool format -> the Chat shape. */
static json_t *format_out(json_t *f) {
  const char *t = px_jstr(f, "type");
  if (t == NULL) return NULL;
  if (strcmp(t, "grammar") == 0)
    return json_pack("{s:s, s:{s:s?, s:s?}}", "type", "grammar", "grammar", "syntax",
                     px_jstr(f, "syntax"), "definition", px_jstr(f, "definition"));
  return json_pack("{s:s}", "type", t);
}

/* An assistant message's tool_calls -> IR tool_call parts (custom calls
 * only toward an upstream with PX_CAP_CUSTOM_TOOLS). */
static int assistant_tool_calls(const px_tr_ctx_t *ctx, json_t *tcs, size_t mi,
                                json_t *parts, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  snprintf(p, sizeof(p), "messages[%zu].tool_calls", mi);
  if (!json_is_array(tcs)) return px_tr_fail(err, p, "%s must be an array", p);
  size_t i;
  json_t *tc;
  json_array_foreach(tcs, i, tc) {
    const char *type = px_jstr(tc, "type");
    json_t *fn = json_object_get(tc, "function");
    const char *id = px_jstr(tc, "id");
    snprintf(p, sizeof(p), "messages[%zu].tool_calls[%zu]", mi, i);
    if (type != NULL && strcmp(type, "custom") == 0 &&
        px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS)) {
      /* a custom (freeform) tool call, for an upstream that can hold it */
      json_t *cu = json_object_get(tc, "custom");
      if (id == NULL || px_jstr(cu, "name") == NULL)
        return px_tr_fail(err, p, "%s needs id and custom.name", p);
      const char *in = px_jstr(cu, "input");
      json_array_append_new(
          parts,
          json_pack("{s:s, s:s, s:s, s:b, s:s}", "type", "tool_call", "id", id, "name",
                    px_jstr(cu, "name"), "custom", 1, "input", in ? in : ""));
      continue;
    }
    if (type != NULL && strcmp(type, "function") != 0)
      return px_tr_fail(err, p, "%s: %s tool calls cannot be translated", p, type);
    if (id == NULL || !json_is_object(fn) || px_jstr(fn, "name") == NULL)
      return px_tr_fail(err, p, "%s needs id, function.name and function.arguments", p);
    const char *args = px_jstr(fn, "arguments");
    if (args == NULL || is_blank(args)) {
      args = "{}"; /* a call without arguments, not invalid JSON */
    } else {
      snprintf(p, sizeof(p), "messages[%zu].tool_calls[%zu].function.arguments", mi, i);
      if (check_arguments(ctx, args, p, err) < 0) return PX_EINVAL;
    }
    json_array_append_new(
        parts, json_pack("{s:s, s:s, s:s, s:s}", "type", "tool_call", "id", id, "name",
                         px_jstr(fn, "name"), "arguments", args));
  }
  return 0;
}

/* An assistant message's content (string, text / refusal parts) -> IR parts */
static int assistant_content(json_t *m, size_t mi, json_t *parts, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  json_t *content = json_object_get(m, "content");
  snprintf(p, sizeof(p), "messages[%zu].content", mi);
  if (json_is_string(content)) {
    if (json_string_length(content) > 0)
      json_array_append_new(parts,
                            json_pack("{s:s, s:O}", "type", "text", "text", content));
  } else if (json_is_array(content)) {
    size_t i;
    json_t *c;
    json_array_foreach(content, i, c) {
      char q[PATH_MAX_LEN];
      snprintf(q, sizeof(q), "messages[%zu].content[%zu]", mi, i);
      const char *t = px_jstr(c, "type");
      if (t != NULL && strcmp(t, "text") == 0 &&
          json_is_string(json_object_get(c, "text")))
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text",
                                               json_object_get(c, "text")));
      else if (t != NULL && strcmp(t, "refusal") == 0 &&
               json_is_string(json_object_get(c, "refusal")))
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "refusal", "text",
                                               json_object_get(c, "refusal")));
      else
        return px_tr_fail(err, q, "%s: assistant content parts must be text or refusal",
                          q);
    }
  } else if (!json_is_null(content) && content != NULL) {
    return px_tr_fail(err, p, "%s must be a string, an array or null", p);
  }
  return 0;
}

static int assistant_msg(const px_tr_ctx_t *ctx, json_t *m, size_t mi, json_t *parts,
                         px_lossy_t *lossy, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  json_t *rc = json_object_get(m, "reasoning_content");
  if (json_is_string(rc) && json_string_length(rc) > 0)
    json_array_append_new(parts,
                          json_pack("{s:s, s:O}", "type", "reasoning", "text", rc));
  if (assistant_content(m, mi, parts, err) < 0) return PX_EINVAL;
  json_t *refusal = json_object_get(m, "refusal");
  int has_refusal_part = 0;
  size_t k;
  json_t *x;
  json_array_foreach(parts, k, x) {
    if (strcmp(px_jstr(x, "type"), "refusal") == 0) has_refusal_part = 1;
  }
  if (json_is_string(refusal) && json_string_length(refusal) > 0 && !has_refusal_part)
    json_array_append_new(parts,
                          json_pack("{s:s, s:O}", "type", "refusal", "text", refusal));
  if (json_object_get(m, "function_call") != NULL &&
      !json_is_null(json_object_get(m, "function_call"))) {
    snprintf(p, sizeof(p), "messages[%zu].function_call", mi);
    return px_tr_fail(err, p,
                      "%s: legacy function calls are not supported, use tool_calls", p);
  }
  if (json_object_get(m, "audio") != NULL && !json_is_null(json_object_get(m, "audio"))) {
    snprintf(p, sizeof(p), "messages[%zu].audio", mi);
    return px_tr_fail(err, p, "%s: audio cannot be translated", p);
  }
  json_t *tcs = json_object_get(m, "tool_calls");
  if (tcs != NULL && !json_is_null(tcs) &&
      assistant_tool_calls(ctx, tcs, mi, parts, err) < 0)
    return PX_EINVAL;
  (void)lossy;
  return 0;
}

/* The last IR message if it is a user message holding only tool results. */
static json_t *tool_result_tail(json_t *msgs) {
  size_t n = json_array_size(msgs);
  if (n == 0) return NULL;
  json_t *last = json_array_get(msgs, n - 1);
  if (strcmp(px_jstr(last, "role"), "user") != 0) return NULL;
  if (json_array_size(json_object_get(last, "content")) == 0) return NULL;
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(last, "content"), i, p) {
    if (strcmp(px_jstr(p, "type"), "tool_result") != 0) return NULL;
  }
  return last;
}

/* A user message's content (string or parts) -> an IR user message */
static int user_msg(const px_tr_ctx_t *ctx, json_t *content, size_t mi, const char *cp,
                    json_t *ir, json_t *out, px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *parts = json_array();
  json_object_set_new(ir, "_tmp", parts); /* freed with ir on failure */
  if (json_is_string(content)) {
    json_array_append_new(parts,
                          json_pack("{s:s, s:O}", "type", "text", "text", content));
  } else if (json_is_array(content)) {
    size_t i;
    json_t *c;
    json_array_foreach(content, i, c) {
      char q[PATH_MAX_LEN];
      snprintf(q, sizeof(q), "messages[%zu].content[%zu]", mi, i);
      if (user_part(ctx, c, q, parts, lossy, err) < 0) return PX_EINVAL;
    }
  } else {
    return px_tr_fail(err, cp, "%s must be a string or an array", cp);
  }
  json_array_append_new(out, json_pack("{s:s, s:O}", "role", "user", "content", parts));
  json_object_del(ir, "_tmp");
  return 0;
}

/* A tool message -> an IR tool_result; consecutive ones share a user message */
static int tool_msg(json_t *m, json_t *content, size_t mi, const char *cp, json_t *ir,
                    json_t *out, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  const char *id = px_jstr(m, "tool_call_id");
  if (id == NULL) {
    snprintf(p, sizeof(p), "messages[%zu].tool_call_id", mi);
    return px_tr_fail(err, p, "%s is required", p);
  }
  json_t *tc = json_array();
  json_object_set_new(ir, "_tmp", tc);
  if (text_content(content, cp, tc, NULL, err) < 0) return PX_EINVAL;
  json_t *res = json_pack("{s:s, s:s, s:O}", "type", "tool_result", "tool_call_id", id,
                          "content", tc);
  json_object_del(ir, "_tmp");
  /* consecutive tool results share one IR user message */
  json_t *tail = tool_result_tail(out);
  if (tail != NULL) {
    json_array_append_new(json_object_get(tail, "content"), res);
  } else {
    json_t *um = json_pack("{s:s, s:[]}", "role", "user", "content");
    json_array_append_new(json_object_get(um, "content"), res);
    json_array_append_new(out, um);
  }
  return 0;
}

static int decode_messages(const px_tr_ctx_t *ctx, json_t *msgs, json_t *ir,
                           px_lossy_t *lossy, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  if (!json_is_array(msgs))
    return px_tr_fail(err, "messages", "messages must be an array");
  json_t *system = json_array();
  json_t *out = json_array();
  json_object_set_new(ir, "system", system);
  json_object_set_new(ir, "messages", out);
  size_t mi;
  json_t *m;
  json_array_foreach(msgs, mi, m) {
    snprintf(p, sizeof(p), "messages[%zu].role", mi);
    const char *role = px_jstr(m, "role");
    if (!json_is_object(m) || role == NULL)
      return px_tr_fail(err, p, "%s is required", p);
    if (json_object_get(m, "name") != NULL) px_lossy_add(lossy, "messages[].name");
    json_t *content = json_object_get(m, "content");
    char cp[PATH_MAX_LEN];
    snprintf(cp, sizeof(cp), "messages[%zu].content", mi);
    if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) {
      if (text_content(content, cp, system, role, err) < 0) return PX_EINVAL;
    } else if (strcmp(role, "user") == 0) {
      if (user_msg(ctx, content, mi, cp, ir, out, lossy, err) < 0) return PX_EINVAL;
    } else if (strcmp(role, "assistant") == 0) {
      json_t *parts = json_array();
      json_object_set_new(ir, "_tmp", parts);
      if (assistant_msg(ctx, m, mi, parts, lossy, err) < 0) return PX_EINVAL;
      json_array_append_new(
          out, json_pack("{s:s, s:O}", "role", "assistant", "content", parts));
      json_object_del(ir, "_tmp");
    } else if (strcmp(role, "tool") == 0) {
      if (tool_msg(m, content, mi, cp, ir, out, err) < 0) return PX_EINVAL;
    } else if (strcmp(role, "function") == 0) {
      return px_tr_fail(err, p,
                        "%s: the legacy 'function' role cannot be translated "
                        "(it has no tool_call_id); use 'tool'",
                        p);
    } else {
      return px_tr_fail(err, p, "%s: unknown role '%s'", p, role);
    }
  }
  if (json_array_size(system) == 0) json_object_del(ir, "system");
  return 0;
}

static int decode_tools(const px_tr_ctx_t *ctx, json_t *tools, json_t *ir,
                        px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  if (!json_is_array(tools)) return px_tr_fail(err, "tools", "tools must be an array");
  json_t *out = json_array();
  json_object_set_new(ir, "tools", out);
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *type = px_jstr(t, "type");
    snprintf(p, sizeof(p), "tools[%zu].type", i);
    if (type != NULL && strcmp(type, "custom") == 0 &&
        px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS)) {
      json_t *cu = json_object_get(t, "custom");
      const char *name = px_jstr(cu, "name");
      if (name == NULL) {
        snprintf(p, sizeof(p), "tools[%zu].custom.name", i);
        return px_tr_fail(err, p, "%s is required", p);
      }
      json_t *o = json_pack("{s:s, s:s}", "type", "custom", "name", name);
      if (px_jstr(cu, "description") != NULL)
        add_str(o, "description", px_jstr(cu, "description"));
      json_t *f = format_in(json_object_get(cu, "format"));
      if (f != NULL) json_object_set_new(o, "format", f);
      json_array_append_new(out, o);
      continue;
    }
    if (type != NULL && strcmp(type, "custom") == 0)
      return px_tr_fail(err, p,
                        "%s: custom (freeform text) tools cannot be translated to %s", p,
                        px_proto_get(ctx->out)->name);
    if (type == NULL || strcmp(type, "function") != 0)
      return px_tr_fail(err, p, "%s: unsupported tool type", p);
    json_t *fn = json_object_get(t, "function");
    const char *name = px_jstr(fn, "name");
    if (name == NULL) {
      snprintf(p, sizeof(p), "tools[%zu].function.name", i);
      return px_tr_fail(err, p, "%s is required", p);
    }
    json_t *o = json_pack("{s:s}", "name", name);
    json_t *v;
    if ((v = json_object_get(fn, "description")) != NULL && json_is_string(v))
      json_object_set(o, "description", v);
    v = json_object_get(fn, "parameters");
    if (json_is_object(v))
      json_object_set(o, "parameters", v);
    else
      json_object_set_new(o, "parameters",
                          json_pack("{s:s, s:{}}", "type", "object", "properties"));
    if ((v = json_object_get(fn, "strict")) != NULL && json_is_boolean(v))
      json_object_set(o, "strict", v);
    json_array_append_new(out, o);
  }
  return 0;
}

static int decode_tool_choice(const px_tr_ctx_t *ctx, json_t *tc, json_t *ir,
                              px_lossy_t *lossy, px_tr_err_t *err) {
  if (json_is_string(tc)) {
    const char *s = json_string_value(tc);
    if (strcmp(s, "auto") != 0 && strcmp(s, "none") != 0 && strcmp(s, "required") != 0)
      return px_tr_fail(err, "tool_choice", "tool_choice: unknown value '%s'", s);
    json_object_set_new(ir, "tool_choice", json_pack("{s:s}", "type", s));
    return 0;
  }
  const char *type = px_jstr(tc, "type");
  if (type != NULL && strcmp(type, "function") == 0) {
    const char *name = px_jstr(json_object_get(tc, "function"), "name");
    if (name == NULL)
      return px_tr_fail(err, "tool_choice.function.name",
                        "tool_choice.function.name is "
                        "required");
    json_object_set_new(ir, "tool_choice",
                        json_pack("{s:s, s:s}", "type", "tool", "name", name));
    return 0;
  }
  if (type != NULL && strcmp(type, "custom") == 0 &&
      px_tr_out_can(ctx, PX_CAP_CUSTOM_TOOLS)) {
    const char *name = px_jstr(json_object_get(tc, "custom"), "name");
    if (name == NULL)
      return px_tr_fail(err, "tool_choice.custom.name",
                        "tool_choice.custom.name is required");
    json_object_set_new(ir, "tool_choice",
                        json_pack("{s:s, s:s}", "type", "tool", "name", name));
    return 0;
  }
  if (type != NULL && strcmp(type, "allowed_tools") == 0) {
    /* the restriction to a subset cannot be carried; the mode can */
    const char *mode = px_jstr(json_object_get(tc, "allowed_tools"), "mode");
    px_lossy_add(lossy, "tool_choice.allowed_tools");
    json_object_set_new(
        ir, "tool_choice",
        json_pack("{s:s}", "type",
                  mode && strcmp(mode, "required") == 0 ? "required" : "auto"));
    return 0;
  }
  return px_tr_fail(err, "tool_choice", "tool_choice: type '%s' cannot be translated",
                    type ? type : "?");
}

static int decode_response_format(json_t *rf, json_t *ir, px_tr_err_t *err) {
  const char *type = px_jstr(rf, "type");
  if (type == NULL)
    return px_tr_fail(err, "response_format", "response_format.type is required");
  if (strcmp(type, "text") == 0 || strcmp(type, "json_object") == 0) {
    json_object_set_new(ir, "response_format", json_pack("{s:s}", "type", type));
    return 0;
  }
  if (strcmp(type, "json_schema") != 0)
    return px_tr_fail(err, "response_format.type", "response_format.type '%s' is unknown",
                      type);
  json_t *js = json_object_get(rf, "json_schema");
  if (!json_is_object(js) || !json_is_object(json_object_get(js, "schema")))
    return px_tr_fail(err, "response_format.json_schema.schema",
                      "response_format.json_schema.schema is required");
  json_t *o = json_pack("{s:s, s:O}", "type", "json_schema", "schema",
                        json_object_get(js, "schema"));
  const char *s;
  if ((s = px_jstr(js, "name")) != NULL) add_str(o, "name", s);
  if ((s = px_jstr(js, "description")) != NULL) add_str(o, "description", s);
  json_t *st = json_object_get(js, "strict");
  if (json_is_boolean(st)) json_object_set(o, "strict", st);
  json_object_set_new(ir, "response_format", o);
  return 0;
}

/* max_tokens / max_completion_tokens, temperature, top_p, stop -> IR: 0,
 * <0 when invalid, 1 when key is none of them. */
static int decode_limits(const char *key, json_t *v, json_t *body, json_t *ir,
                         px_tr_err_t *err) {
  if (strcmp(key, "max_tokens") == 0 || strcmp(key, "max_completion_tokens") == 0) {
    if (json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
      px_tr_fail(err, key, "%s must be a positive integer", key);
      return PX_EINVAL;
    }
    if (json_integer_value(v) > PX_TOKENS_MAX)
      return px_tr_fail(err, key, "%s must be a positive integer of at most 18 digits",
                        key);
    /* max_completion_tokens wins over the deprecated max_tokens */
    if (strcmp(key, "max_completion_tokens") == 0 ||
        json_object_get(body, "max_completion_tokens") == NULL ||
        json_is_null(json_object_get(body, "max_completion_tokens")))
      json_object_set(ir, "max_tokens", v);
  } else if (strcmp(key, "temperature") == 0 || strcmp(key, "top_p") == 0) {
    if (json_is_number(v)) json_object_set(ir, key, v);
  } else if (strcmp(key, "stop") == 0) {
    if (json_is_string(v)) {
      json_object_set_new(ir, "stop", json_pack("[O]", v));
    } else if (json_is_array(v)) {
      size_t i;
      json_t *s;
      json_array_foreach(v, i, s) {
        if (!json_is_string(s)) {
          px_tr_fail(err, "stop", "stop must be a string or an array of strings");
          return PX_EINVAL;
        }
      }
      if (json_array_size(v) > 0) json_object_set(ir, "stop", v);
    } else if (!json_is_null(v)) {
      px_tr_fail(err, "stop", "stop must be a string or an array of strings");
      return PX_EINVAL;
    }
  } else {
    return 1;
  }
  return 0;
}

/* Fields whose use cannot be translated (n > 1, audio, legacy functions):
 * <0 when used, 0 when unused, 1 when key is none of them. */
static int decode_refused(const px_tr_ctx_t *ctx, const char *key, json_t *v,
                          px_tr_err_t *err) {
  if (strcmp(key, "n") == 0) {
    if (json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) != 1) {
      px_tr_fail(err, "n", "n: only one choice can be translated to %s",
                 px_proto_get(ctx->out)->name);
      return PX_EINVAL;
    }
  } else if (strcmp(key, "modalities") == 0) {
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
      if (!json_is_string(s) || strcmp(json_string_value(s), "text") != 0) {
        px_tr_fail(err, "modalities", "modalities: only text output can be translated");
        return PX_EINVAL;
      }
    }
  } else if (strcmp(key, "audio") == 0) {
    if (json_is_null(v)) return 0;
    return px_tr_fail(err, "audio", "audio: audio output cannot be translated");
  } else if (strcmp(key, "functions") == 0 || strcmp(key, "function_call") == 0) {
    if (json_is_null(v)) return 0;
    return px_tr_fail(err, key, "%s: legacy function calling is not supported, use tools",
                      key);
  } else {
    return 1;
  }
  return 0;
}

/* Fields dropped by name (and the two the hub may keep, px_ir_fit_request):
 * 0, or 1 when key is none of them. */
static int decode_dropped(const char *key, json_t *v, json_t *ir, px_lossy_t *lossy) {
  /* dropped when set (not null) */
  static const char *const when_set[] = {
      PX_LOSSY("top_logprobs"),
      PX_LOSSY("logit_bias"),
      PX_LOSSY("seed"),
      PX_LOSSY("presence_penalty"),
      PX_LOSSY("frequency_penalty"),
      PX_LOSSY("service_tier"),
      PX_LOSSY("prediction"),
      PX_LOSSY("store"),
      PX_LOSSY("prompt_cache_retention"),
      PX_LOSSY("web_search_options"),
  };
  for (size_t i = 0; i < sizeof(when_set) / sizeof(when_set[0]); i++)
    if (strcmp(key, when_set[i]) == 0) {
      if (!json_is_null(v)) px_lossy_add(lossy, when_set[i]);
      return 0;
    }
  if (strcmp(key, "logprobs") == 0) {
    if (json_is_true(v)) px_lossy_add(lossy, "logprobs");
  } else if (strcmp(key, "prompt_cache_key") == 0) {
    if (json_is_string(v))
      json_object_set(ir, "prompt_cache_key", v); /* px_ir_fit_request */
    else if (!json_is_null(v))
      px_lossy_add(lossy, "prompt_cache_key");
  } else if (strcmp(key, "verbosity") == 0) {
    if (json_is_string(v))
      json_object_set(ir, "verbosity", v); /* px_ir_fit_request */
    else if (!json_is_null(v))
      px_lossy_add(lossy, "verbosity");
  } else {
    return 1;
  }
  return 0;
}

static int chat_decode_request(const px_tr_ctx_t *ctx, json_t *body, json_t **irp,
                               px_lossy_t *lossy, px_tr_err_t *err) {
  if (!json_is_object(body))
    return px_tr_fail(err, "", "request body must be a JSON object");
  json_t *ir = json_object();
  const char *key;
  json_t *v;
  int rc;
  json_object_foreach(body, key, v) {
    if (strcmp(key, "model") == 0) {
      if (!json_is_string(v)) {
        px_tr_fail(err, "model", "model must be a string");
        goto fail;
      }
      json_object_set(ir, "model", v);
    } else if (strcmp(key, "messages") == 0) {
      if (decode_messages(ctx, v, ir, lossy, err) < 0) goto fail;
    } else if (strcmp(key, "tools") == 0) {
      if (!json_is_null(v) && decode_tools(ctx, v, ir, err) < 0) goto fail;
    } else if (strcmp(key, "tool_choice") == 0) {
      if (!json_is_null(v) && decode_tool_choice(ctx, v, ir, lossy, err) < 0) goto fail;
    } else if (strcmp(key, "parallel_tool_calls") == 0) {
      if (json_is_boolean(v)) json_object_set(ir, "parallel_tool_calls", v);
    } else if ((rc = decode_limits(key, v, body, ir, err)) <= 0) {
      if (rc < 0) goto fail;
    } else if (strcmp(key, "response_format") == 0) {
      if (!json_is_null(v) && decode_response_format(v, ir, err) < 0) goto fail;
    } else if (strcmp(key, "reasoning_effort") == 0) {
      if (json_is_string(v))
        json_object_set_new(ir, "reasoning", json_pack("{s:O}", "effort", v));
    } else if (strcmp(key, "user") == 0) {
      if (json_is_string(v)) json_object_set(ir, "user", v);
    } else if (strcmp(key, "safety_identifier") == 0) {
      if (!json_is_string(v)) continue;
      if (px_jstr(body, "user") == NULL)
        json_object_set(ir, "user", v);
      else
        px_lossy_add(lossy, "safety_identifier");
    } else if (strcmp(key, "metadata") == 0) {
      if (json_is_object(v)) json_object_set(ir, "metadata", v);
    } else if (strcmp(key, "stream") == 0) {
      if (json_is_boolean(v)) json_object_set(ir, "stream", v);
    } else if (strcmp(key, "stream_options") == 0) {
      json_t *iu = json_object_get(v, "include_usage");
      if (json_is_boolean(iu)) json_object_set(ir, "include_usage", iu);
      if (json_object_get(v, "include_obfuscation") != NULL)
        px_lossy_add(lossy, "stream_options.include_obfuscation");
    } else if ((rc = decode_refused(ctx, key, v, err)) <= 0) {
      if (rc < 0) goto fail;
    } else if (decode_dropped(key, v, ir, lossy) != 0 && !json_is_null(v)) {
      px_lossy_add(lossy, key); /* unknown field: named, never silently dropped */
    }
  }
  if (json_object_get(ir, "messages") == NULL) {
    px_tr_fail(err, "messages", "messages is required");
    goto fail;
  }
  *irp = ir;
  return 0;
fail:
  json_decref(ir);
  return PX_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* encode_request: IR -> Chat upstream body                                 */

/* A replayed opaque reasoning token Chat cannot carry, named as the CLIENT
 * spelled it. */
static void lossy_reasoning_tokens(const px_tr_ctx_t *ctx, json_t *part,
                                   px_lossy_t *lossy) {
  const px_lossy_names_t *n = px_in_names(ctx);
  if (px_jstr(part, "signature") != NULL || px_jstr(part, "encrypted_content") != NULL ||
      px_jstr(part, "thought_signature") != NULL)
    px_lossy_add(lossy, n->reasoning_token);
  if (px_jstr(part, "redacted_data") != NULL) px_lossy_add(lossy, n->reasoning_redacted);
}

static json_t *image_part_out(json_t *p, const char *path, px_tr_err_t *err) {
  const char *url = px_jstr(p, "url");
  if (url != NULL)
    return json_pack("{s:s, s:{s:s}}", "type", "image_url", "image_url", "url", url);
  const char *mt = px_jstr(p, "media_type"), *data = px_jstr(p, "data");
  if (mt == NULL || data == NULL) {
    px_tr_fail(err, path, "%s: image needs url or media_type and data", path);
    return NULL;
  }
  json_t *s = json_sprintf("data:%s;base64,%s", mt, data);
  return json_pack("{s:s, s:{s:o}}", "type", "image_url", "image_url", "url", s);
}

static json_t *file_part_out(json_t *p, const char *path, px_tr_err_t *err) {
  const char *fid = px_jstr(p, "file_id"), *mt = px_jstr(p, "media_type"),
             *data = px_jstr(p, "data"), *fname = px_jstr(p, "filename");
  json_t *f = json_object();
  if (fid != NULL) {
    add_str(f, "file_id", fid);
  } else if (mt != NULL && data != NULL) {
    json_object_set_new(f, "file_data", json_sprintf("data:%s;base64,%s", mt, data));
    /* OpenAI wants a filename with inline file data */
    add_str(f, "filename", px_inline_filename(p));
  } else {
    json_decref(f);
    px_tr_fail(err, path, "%s: files by URL cannot be sent to openai_chat_completions",
               path);
    return NULL;
  }
  if (fid != NULL && fname != NULL) add_str(f, "filename", fname);
  return json_pack("{s:s, s:o}", "type", "file", "file", f);
}

/* IR tool_result -> {"role":"tool",...}. Tool messages hold text only. */
static json_t *tool_msg_out(const px_tr_ctx_t *ctx, json_t *p, px_lossy_t *lossy) {
  json_t *c = json_object_get(p, "content");
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  if (json_is_string(c)) {
    px_buf_append(&b, json_string_value(c), json_string_length(c));
  } else {
    size_t i;
    json_t *q;
    json_array_foreach(c, i, q) {
      const char *t = px_jstr(q, "type");
      json_t *tx = json_object_get(q, "text");
      int file = t != NULL && strcmp(t, "file") == 0;
      if (t != NULL && strcmp(t, "text") == 0 && json_is_string(tx))
        px_buf_append(&b, json_string_value(tx), json_string_length(tx));
      else /* named as the client spelled it */
        px_lossy_add(lossy, file ? px_in_names(ctx)->tool_result_file
                                 : px_in_names(ctx)->tool_result_image);
    }
  }
  if (json_is_true(json_object_get(p, "is_error")))
    px_lossy_add(lossy, "messages[].content[].is_error");
  json_t *m = json_pack("{s:s, s:s}", "role", "tool", "tool_call_id",
                        px_jstr(p, "tool_call_id") ? px_jstr(p, "tool_call_id") : "");
  /* the texts of a document, joined: valid UTF-8 already */
  if (m != NULL &&
      json_object_set_new_nocheck(
          m, "content", json_stringn_nocheck(b.data ? b.data : "", b.len)) < 0) {
    json_decref(m);
    m = NULL;
  }
  px_buf_free(&b);
  return m;
}

static int encode_user(const px_tr_ctx_t *ctx, json_t *im, size_t mi, json_t *out,
                       px_lossy_t *lossy, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  json_t *parts = json_array();
  size_t i;
  json_t *c;
  int only_text = 1;
  json_array_foreach(json_object_get(im, "content"), i, c) {
    const char *t = px_jstr(c, "type");
    snprintf(p, sizeof(p), "messages[%zu].content[%zu]", mi, i);
    if (t == NULL) t = "";
    if (json_object_get(c, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    json_t *o = NULL;
    if (strcmp(t, "tool_result") == 0) {
      json_array_append_new(out, tool_msg_out(ctx, c, lossy));
      continue;
    } else if (strcmp(t, "text") == 0) {
      o = json_pack("{s:s, s:O}", "type", "text", "text", json_object_get(c, "text"));
    } else if (strcmp(t, "image") == 0) {
      o = image_part_out(c, p, err);
      only_text = 0;
    } else if (strcmp(t, "file") == 0) {
      o = file_part_out(c, p, err);
      only_text = 0;
    } else {
      px_tr_fail(err, p, "%s: part type '%s' cannot be sent to openai_chat_completions",
                 p, t);
    }
    if (o == NULL) {
      json_decref(parts);
      return PX_EINVAL;
    }
    json_array_append_new(parts, o);
  }
  if (json_array_size(parts) == 0) {
    json_decref(parts);
    return 0;
  }
  json_t *content = parts;
  if (only_text && json_array_size(parts) == 1) {
    content = json_incref(json_object_get(json_array_get(parts, 0), "text"));
    json_decref(parts);
  }
  json_array_append_new(out, json_pack("{s:s, s:o}", "role", "user", "content", content));
  return 0;
}

/* An IR system note (a system turn in the middle of the conversation) ->
 * a system message at its place. */
static int system_note_out(json_t *m, json_t *out, px_lossy_t *lossy) {
  px_buf_t b;
  px_buf_init(&b, SIZE_MAX);
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(m, "content"), i, p) {
    const char *tx = px_jstr(p, "text");
    if (json_object_get(p, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    if (tx == NULL) continue;
    if ((b.len > 0 && px_buf_puts(&b, "\n\n") < 0) || px_buf_puts(&b, tx) < 0) {
      px_buf_free(&b);
      return PX_ENOMEM;
    }
  }
  json_array_append_new(out, json_pack("{s:s, s:s%}", "role", "system", "content",
                                       b.data ? b.data : "", b.len));
  px_buf_free(&b);
  return 0;
}

/* IR tool_call part -> Chat tool call (function, or custom with free input). */
static json_t *tool_call_out(json_t *c) {
  const char *id = px_jstr(c, "id") ? px_jstr(c, "id") : "";
  const char *name = px_jstr(c, "name") ? px_jstr(c, "name") : "";
  if (json_is_true(json_object_get(c, "custom")))
    return json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "custom", "custom",
                     "name", name, "input",
                     px_jstr(c, "input") ? px_jstr(c, "input") : "");
  const char *args = px_jstr(c, "arguments");
  return json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                   "name", name, "arguments", args ? args : "{}");
}

static int encode_assistant(const px_tr_ctx_t *ctx, json_t *im, size_t mi, json_t *out,
                            px_lossy_t *lossy, px_tr_err_t *err) {
  char p[PATH_MAX_LEN];
  px_buf_t text, refusal, reasoning;
  px_buf_init(&text, SIZE_MAX);
  px_buf_init(&refusal, SIZE_MAX);
  px_buf_init(&reasoning, SIZE_MAX);
  int ntext = 0, nref = 0, nreason = 0, rc = 0;
  json_t *tcs = json_array();
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(im, "content"), i, c) {
    const char *t = px_jstr(c, "type");
    json_t *tx = json_object_get(c, "text");
    snprintf(p, sizeof(p), "messages[%zu].content[%zu]", mi, i);
    if (t == NULL) t = "";
    if (json_object_get(c, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    if (strcmp(t, "text") == 0) {
      if (json_is_string(tx))
        px_buf_append(&text, json_string_value(tx), json_string_length(tx));
      ntext++;
    } else if (strcmp(t, "refusal") == 0) {
      if (json_is_string(tx))
        px_buf_append(&refusal, json_string_value(tx), json_string_length(tx));
      nref++;
    } else if (strcmp(t, "reasoning") == 0) {
      if (json_is_string(tx) && json_string_length(tx) > 0) {
        px_buf_append(&reasoning, json_string_value(tx), json_string_length(tx));
        nreason++;
      }
      lossy_reasoning_tokens(ctx, c, lossy);
    } else if (strcmp(t, "tool_call") == 0) {
      json_array_append_new(tcs, tool_call_out(c));
    } else {
      rc = px_tr_fail(
          err, p, "%s: part type '%s' cannot be sent to openai_chat_completions", p, t);
      goto done;
    }
  }
  json_t *m = json_pack("{s:s}", "role", "assistant");
  if (ntext > 0)
    json_object_set_new(m, "content", json_stringn(text.data ? text.data : "", text.len));
  else
    json_object_set_new(m, "content",
                        json_array_size(tcs) ? json_null() : json_string(""));
  if (nref > 0)
    json_object_set_new(m, "refusal",
                        json_stringn(refusal.data ? refusal.data : "", refusal.len));
  if (nreason > 0)
    json_object_set_new(m, "reasoning_content",
                        json_stringn(reasoning.data, reasoning.len));
  if (json_array_size(tcs) > 0) json_object_set(m, "tool_calls", tcs);
  json_array_append_new(out, m);
done:
  json_decref(tcs);
  px_buf_free(&text);
  px_buf_free(&refusal);
  px_buf_free(&reasoning);
  return rc;
}

/* system and conversation messages, in order */
static int messages_out(const px_tr_ctx_t *ctx, json_t *ir, json_t *msgs,
                        px_lossy_t *lossy, px_tr_err_t *err) {
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(ir, "system"), i, c) {
    const char *role = px_jstr(c, "role");
    if (role == NULL || strcmp(role, "developer") != 0) role = "system";
    if (json_object_get(c, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", role, "content",
                                          json_object_get(c, "text")));
  }
  json_t *irm = json_object_get(ir, "messages");
  for (i = 0; i < json_array_size(irm); i++) {
    c = json_array_get(irm, i);
    const char *role = px_jstr(c, "role");
    int rc;
    if (role && strcmp(role, "assistant") == 0) {
      /* consecutive assistant turns become ONE Chat message: tool calls split
       * over several would each need their tool messages right after */
      json_t *merged = json_pack("{s:s, s:[]}", "role", "assistant", "content");
      size_t first = i;
      for (; i < json_array_size(irm); i++) {
        json_t *m = json_array_get(irm, i);
        if (px_jstr(m, "role") == NULL || strcmp(px_jstr(m, "role"), "assistant") != 0)
          break;
        json_array_extend(json_object_get(merged, "content"),
                          json_object_get(m, "content"));
      }
      i--;
      rc = encode_assistant(ctx, merged, first, msgs, lossy, err);
      json_decref(merged);
    } else if (json_is_true(json_object_get(c, "system_note"))) {
      rc = system_note_out(c, msgs, lossy);
    } else {
      rc = encode_user(ctx, c, i, msgs, lossy, err);
    }
    if (rc < 0) return PX_EINVAL;
  }
  return 0;
}

/* IR tools -> function and custom tools */
static void tools_out(json_t *v, json_t *body, px_lossy_t *lossy) {
  size_t i;
  json_t *c;
  json_t *tools = json_array();
  json_object_set_new(body, "tools", tools);
  json_array_foreach(v, i, c) {
    if (px_jstr(c, "type") != NULL && strcmp(px_jstr(c, "type"), "custom") == 0) {
      json_t *cu = json_pack("{s:O?}", "name", json_object_get(c, "name"));
      json_t *x;
      if ((x = json_object_get(c, "description")) != NULL)
        json_object_set(cu, "description", x);
      if ((x = format_out(json_object_get(c, "format"))) != NULL)
        json_object_set_new(cu, "format", x);
      json_array_append_new(tools,
                            json_pack("{s:s, s:o}", "type", "custom", "custom", cu));
      continue;
    }
    json_t *fn = json_pack("{s:O?}", "name", json_object_get(c, "name"));
    json_t *x;
    if ((x = json_object_get(c, "description")) != NULL)
      json_object_set(fn, "description", x);
    if ((x = json_object_get(c, "parameters")) != NULL)
      json_object_set(fn, "parameters", x);
    if ((x = json_object_get(c, "strict")) != NULL) json_object_set(fn, "strict", x);
    if (json_object_get(c, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    json_array_append_new(tools,
                          json_pack("{s:s, s:o}", "type", "function", "function", fn));
  }
}

/* tool_choice and parallel_tool_calls (OpenAI rejects both without tools) */
static void tool_choice_out(json_t *ir, json_t *body, px_lossy_t *lossy) {
  json_t *v;
  int has_tools = json_object_get(body, "tools") != NULL;
  if ((v = json_object_get(ir, "tool_choice")) != NULL && !has_tools) {
    const char *t = px_jstr(v, "type");
    if (t != NULL && strcmp(t, "auto") != 0 && strcmp(t, "none") != 0)
      px_lossy_add(lossy, "tool_choice");
  } else if (v != NULL) {
    const char *t = px_jstr(v, "type");
    if (t != NULL && strcmp(t, "tool") == 0 &&
        px_ir_is_custom_tool(json_object_get(ir, "tools"), px_jstr(v, "name")))
      json_object_set_new(body, "tool_choice",
                          json_pack("{s:s, s:{s:O?}}", "type", "custom", "custom", "name",
                                    json_object_get(v, "name")));
    else if (t != NULL && strcmp(t, "tool") == 0)
      json_object_set_new(body, "tool_choice",
                          json_pack("{s:s, s:{s:O?}}", "type", "function", "function",
                                    "name", json_object_get(v, "name")));
    else if (t != NULL)
      add_str(body, "tool_choice", t);
  }
  if ((v = json_object_get(ir, "parallel_tool_calls")) != NULL && has_tools)
    json_object_set(body, "parallel_tool_calls", v);
}

static void response_format_out(json_t *v, json_t *body) {
  const char *t = px_jstr(v, "type");
  if (t != NULL && strcmp(t, "json_schema") == 0) {
    json_t *js = json_pack("{s:s, s:O?}", "name",
                           px_jstr(v, "name") ? px_jstr(v, "name") : "response", "schema",
                           json_object_get(v, "schema"));
    json_t *x;
    if ((x = json_object_get(v, "description")) != NULL)
      json_object_set(js, "description", x);
    if ((x = json_object_get(v, "strict")) != NULL) json_object_set(js, "strict", x);
    json_object_set_new(
        body, "response_format",
        json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
  } else if (t != NULL) {
    json_object_set_new(body, "response_format", json_pack("{s:s}", "type", t));
  }
}

/* reasoning effort (from a budget when only that is given) */
static void reasoning_out(const px_tr_ctx_t *ctx, json_t *v, json_t *body,
                          px_lossy_t *lossy) {
  const char *effort = px_jstr(v, "effort");
  json_t *budget = json_object_get(v, "budget_tokens");
  if (effort == NULL && json_is_integer(budget))
    effort = px_effort_of_budget(json_integer_value(budget));
  if (effort == NULL && json_is_false(json_object_get(v, "enabled"))) effort = NULL;
  if (effort != NULL) add_str(body, "reasoning_effort", effort);
  /* Anthropic adaptive thinking (on, no budget): the model's default
   * effort is the adaptive one, but Chat cannot ask for visible thinking */
  if (effort == NULL && json_is_true(json_object_get(v, "enabled")))
    px_lossy_add(lossy, px_in_names(ctx)->reasoning_config);
  if (px_jstr(v, "summary") != NULL) px_lossy_add(lossy, "reasoning.summary");
}

static int chat_encode_request(const px_tr_ctx_t *ctx, json_t *ir, json_t **bodyp,
                               px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *body = json_object();
  json_t *msgs = json_array();
  json_t *v;
  const char *model = ctx->upstream_model ? ctx->upstream_model : px_jstr(ir, "model");
  if (model) add_str(body, "model", model);
  json_object_set_new(body, "messages", msgs);

  if (px_jstr(ir, "previous_response_id") != NULL) {
    px_tr_fail(
        err, "previous_response_id",
        "previous_response_id cannot be sent to an openai_chat_completions upstream");
    goto fail;
  }
  if (messages_out(ctx, ir, msgs, lossy, err) < 0) goto fail;
  if ((v = json_object_get(ir, "tools")) != NULL && json_array_size(v) > 0)
    tools_out(v, body, lossy);
  tool_choice_out(ir, body, lossy);
  if ((v = json_object_get(ir, "max_tokens")) != NULL)
    json_object_set(body, "max_completion_tokens", v);
  if ((v = json_object_get(ir, "temperature")) != NULL)
    json_object_set(body, "temperature", v);
  if ((v = json_object_get(ir, "top_p")) != NULL) json_object_set(body, "top_p", v);
  if (json_object_get(ir, "top_k") != NULL) px_lossy_add(lossy, "top_k");
  if ((v = json_object_get(ir, "stop")) != NULL && json_array_size(v) > 0)
    json_object_set(body, "stop", v);
  if ((v = json_object_get(ir, "response_format")) != NULL) response_format_out(v, body);
  if ((v = json_object_get(ir, "reasoning")) != NULL) reasoning_out(ctx, v, body, lossy);
  if ((v = json_object_get(ir, "user")) != NULL) json_object_set(body, "user", v);
  if ((v = json_object_get(ir, "metadata")) != NULL) json_object_set(body, "metadata", v);
  if ((v = json_object_get(ir, "prompt_cache_key")) != NULL)
    json_object_set(body, "prompt_cache_key", v);
  if ((v = json_object_get(ir, "verbosity")) != NULL)
    json_object_set(body, "verbosity", v);
  if (ctx->stream || json_is_true(json_object_get(ir, "stream"))) {
    json_object_set_new(body, "stream", json_true());
    /* always: the final usage must be real whatever the client asked */
    json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
  }
  *bodyp = body;
  return 0;
fail:
  json_decref(body);
  return PX_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* decode_response: Chat upstream body -> IR                                */

/* Chat url_citation {type, url_citation:{...}} -> flat IR annotation. */
static json_t *annotations_in(json_t *anns, px_lossy_t *lossy) {
  json_t *out = json_array();
  size_t i;
  json_t *a;
  json_array_foreach(anns, i, a) {
    json_t *uc = json_object_get(a, "url_citation");
    const char *t = px_jstr(a, "type");
    if (t == NULL || strcmp(t, "url_citation") != 0 || !json_is_object(uc)) {
      px_lossy_add(lossy, "choices[].message.annotations");
      continue;
    }
    json_t *o = json_pack("{s:s}", "type", "url_citation");
    const char *k;
    json_t *x;
    json_object_foreach(uc, k, x) json_object_set(o, k, x);
    json_array_append_new(out, o);
  }
  return out;
}

static int chat_decode_response(const px_tr_ctx_t *ctx, json_t *body, json_t **irp,
                                px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *choices = json_object_get(body, "choices");
  if (!json_is_object(body) || !json_is_array(choices) || json_array_size(choices) != 1) {
    px_tr_fail(err, "choices",
               "upstream returned %zu choices; exactly one can be translated to %s",
               json_array_size(choices), px_proto_get(ctx->in)->name);
    if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
    return PX_EPROTO;
  }
  json_t *ch = json_array_get(choices, 0);
  json_t *msg = json_object_get(ch, "message");
  if (!json_is_object(msg)) {
    px_tr_fail(err, "choices[0].message", "upstream choice has no message");
    if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
    return PX_EPROTO;
  }
  json_t *ir = json_object();
  json_t *content = json_array();
  json_t *v;
  if ((v = json_object_get(body, "id")) != NULL && json_is_string(v))
    json_object_set(ir, "id", v);
  if ((v = json_object_get(body, "model")) != NULL && json_is_string(v))
    json_object_set(ir, "model", v);
  if ((v = json_object_get(body, "created")) != NULL && json_is_integer(v))
    json_object_set(ir, "created", v);
  json_object_set_new(ir, "content", content);

  v = json_object_get(msg, "reasoning_content");
  if (json_is_string(v) && json_string_length(v) > 0)
    json_array_append_new(content,
                          json_pack("{s:s, s:O}", "type", "reasoning", "text", v));
  v = json_object_get(msg, "content");
  json_t *text = NULL;
  if (json_is_string(v) && json_string_length(v) > 0) {
    text = json_pack("{s:s, s:O}", "type", "text", "text", v);
  } else if (json_is_array(v)) {
    char *j = join_parts(v, "text", NULL);
    if (j != NULL && *j) text = json_pack("{s:s, s:s}", "type", "text", "text", j);
    free(j);
  }
  json_t *anns = json_object_get(msg, "annotations");
  if (json_array_size(anns) > 0) {
    if (text == NULL) text = json_pack("{s:s, s:s}", "type", "text", "text", "");
    json_object_set_new(text, "annotations", annotations_in(anns, lossy));
  }
  if (text != NULL) json_array_append_new(content, text);
  v = json_object_get(msg, "refusal");
  if (json_is_string(v) && json_string_length(v) > 0)
    json_array_append_new(content, json_pack("{s:s, s:O}", "type", "refusal", "text", v));
  size_t i;
  json_t *tc;
  json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) {
    json_t *fn = json_object_get(tc, "function");
    const char *type = px_jstr(tc, "type");
    json_t *cu = json_object_get(tc, "custom");
    if (type != NULL && strcmp(type, "custom") == 0 &&
        px_tr_in_can(ctx, PX_CAP_CUSTOM_TOOLS) && json_is_object(cu)) {
      /* a custom tool call, for a client that can hold it */
      json_array_append_new(
          content, json_pack("{s:s, s:s, s:s, s:b, s:s}", "type", "tool_call", "id",
                             px_jstr(tc, "id") ? px_jstr(tc, "id") : "", "name",
                             px_jstr(cu, "name") ? px_jstr(cu, "name") : "", "custom", 1,
                             "input", px_jstr(cu, "input") ? px_jstr(cu, "input") : ""));
      continue;
    }
    if ((type != NULL && strcmp(type, "function") != 0) || !json_is_object(fn)) {
      px_tr_fail(err, "choices[0].message.tool_calls",
                 "upstream returned a tool call that cannot be translated");
      if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
      goto fail;
    }
    const char *args = px_jstr(fn, "arguments");
    json_array_append_new(
        content, json_pack("{s:s, s:s, s:s, s:s}", "type", "tool_call", "id",
                           px_jstr(tc, "id") ? px_jstr(tc, "id") : "", "name",
                           px_jstr(fn, "name") ? px_jstr(fn, "name") : "", "arguments",
                           args && !is_blank(args) ? args : "{}"));
  }
  if (json_object_get(msg, "audio") != NULL &&
      !json_is_null(json_object_get(msg, "audio")))
    px_lossy_add(lossy, "choices[].message.audio");
  v = json_object_get(ch, "logprobs");
  if (v != NULL && !json_is_null(v)) px_lossy_add(lossy, "choices[].logprobs");

  px_stop_t st = px_stop_from_chat(px_jstr(ch, "finish_reason"));
  if (st != PX_STOP_NONE) add_str(ir, "stop_reason", px_stop_name(st));

  json_t *u = json_object_get(body, "usage");
  if (json_is_object(u)) {
    json_t *iu = json_pack("{s:I, s:I}", "input_tokens",
                           (json_int_t)px_jint(u, "prompt_tokens", 0), "output_tokens",
                           (json_int_t)px_jint(u, "completion_tokens", 0));
    int64_t cached =
        px_jint(json_object_get(u, "prompt_tokens_details"), "cached_tokens", -1);
    int64_t reason =
        px_jint(json_object_get(u, "completion_tokens_details"), "reasoning_tokens", -1);
    if (cached >= 0) json_object_set_new(iu, "cache_read_tokens", json_integer(cached));
    if (reason >= 0) json_object_set_new(iu, "reasoning_tokens", json_integer(reason));
    json_object_set_new(ir, "usage", iu);
  }
  *irp = ir;
  return 0;
fail:
  json_decref(ir);
  return PX_EPROTO;
}

/* ------------------------------------------------------------------------ */
/* encode_response: IR -> Chat client body                                  */

static int chat_encode_response(const px_tr_ctx_t *ctx, json_t *ir, json_t **bodyp,
                                px_lossy_t *lossy, px_tr_err_t *err) {
  (void)err;
  json_t *content = json_object_get(ir, "content");
  px_buf_t text, reasoning;
  px_buf_init(&text, SIZE_MAX);
  px_buf_init(&reasoning, SIZE_MAX);
  int ntext = 0, nreason = 0;
  json_t *tcs = json_array(), *anns = json_array();
  px_idset_t ids = {0};
  size_t i;
  json_t *c;
  json_array_foreach(content, i, c) {
    const char *t = px_jstr(c, "type");
    json_t *tx = json_object_get(c, "text");
    if (t == NULL) continue;
    if (strcmp(t, "text") == 0) {
      json_int_t shift = (json_int_t)px_utf8_chars(text.data, text.len);
      if (json_is_string(tx))
        px_buf_append(&text, json_string_value(tx), json_string_length(tx));
      ntext++;
      json_t *a = json_object_get(c, "annotations");
      if (json_array_size(a) > 0) {
        json_t *conv = px_chat_annotations(ctx, a, shift, lossy);
        json_array_extend(anns, conv);
        json_decref(conv);
      }
    } else if (strcmp(t, "reasoning") == 0) {
      if (json_is_string(tx) && json_string_length(tx) > 0) {
        px_buf_append(&reasoning, json_string_value(tx), json_string_length(tx));
        nreason++;
      }
      int sig = px_jstr(c, "signature") != NULL ||
                px_jstr(c, "encrypted_content") != NULL ||
                px_jstr(c, "thought_signature") != NULL;
      int red = px_jstr(c, "redacted_data") != NULL;
      if (sig) px_lossy_add(lossy, px_lossy_opaque_reasoning(ctx, 0));
      if (red) px_lossy_add(lossy, px_lossy_opaque_reasoning(ctx, 1));
    } else if (strcmp(t, "tool_call") == 0) {
      json_t *tc = tool_call_out(c);
      const char *uid =
          px_idset_unique(&ids, px_str(px_jstr(c, "id")), (int)json_array_size(tcs));
      if (tc != NULL && uid != NULL) json_object_set_new(tc, "id", json_string(uid));
      json_array_append_new(tcs, tc);
    }
  }
  px_idset_free(&ids);
  int nref = 0;
  char *refusal = join_parts(content, "refusal", &nref);
  json_t *msg = json_pack("{s:s}", "role", "assistant");
  if (ntext > 0)
    json_object_set_new(msg, "content",
                        json_stringn(text.data ? text.data : "", text.len));
  else
    json_object_set_new(msg, "content", json_null());
  const char *expl = px_jstr(ir, "refusal_explanation");
  int worded = refusal != NULL || ntext > 0; /* seed 000: text words a refusal */
  if (refusal == NULL && expl != NULL && ntext == 0) {
    add_str(msg, "refusal", expl); /* Anthropic refusal without visible wording */
    worded = 1;
  } else if (expl != NULL) {
    px_lossy_add(lossy, px_out_names(ctx)->refusal_explanation);
  }
  if (refusal != NULL) add_str(msg, "refusal", refusal);
  free(refusal);
  if (nreason > 0)
    json_object_set_new(msg, "reasoning_content",
                        json_stringn(reasoning.data, reasoning.len));
  if (json_array_size(tcs) > 0) json_object_set(msg, "tool_calls", tcs);
  if (json_array_size(anns) > 0) json_object_set(msg, "annotations", anns);
  px_buf_free(&text);
  px_buf_free(&reasoning);
  json_decref(tcs);
  json_decref(anns);

  px_stop_t st = px_stop_parse(px_jstr(ir, "stop_reason"));
  /* a refusal with nothing at all to show (no text, no refusal, no
   * explanation) must not read as a normal stop */
  const char *fr =
      px_stop_to_chat(st == PX_STOP_NONE                 ? PX_STOP_END_TURN
                      : st == PX_STOP_REFUSAL && !worded ? PX_STOP_CONTENT_FILTER
                                                         : st);
  if (px_jstr(ir, "stop_sequence") != NULL) px_lossy_add(lossy, "stop_sequence");

  const char *id = px_jstr(ir, "id");
  json_t *jid = id == NULL                         ? json_string("chatcmpl-proxai")
                : strncmp(id, "chatcmpl-", 9) == 0 ? json_string(id)
                                                   : json_sprintf("chatcmpl-%s", id);
  json_t *created = json_object_get(ir, "created");
  json_t *body = json_pack(
      "{s:o, s:s, s:I, s:s?, s:[{s:i, s:o, s:n, s:s}]}", "id", jid, "object",
      "chat.completion", "created",
      (json_int_t)(json_is_integer(created) ? json_integer_value(created) : ctx->created),
      "model", ctx->client_model ? ctx->client_model : px_jstr(ir, "model"), "choices",
      "index", 0, "message", msg, "logprobs", "finish_reason", fr);
  json_t *u = json_object_get(ir, "usage");
  if (json_is_object(u)) {
    int64_t in = px_jint(u, "input_tokens", 0), out = px_jint(u, "output_tokens", 0);
    json_object_set_new(
        body, "usage",
        json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens", (json_int_t)in,
                  "completion_tokens", (json_int_t)out, "total_tokens",
                  (json_int_t)(in + out), "prompt_tokens_details", "cached_tokens",
                  (json_int_t)px_jint(u, "cache_read_tokens", 0),
                  "completion_tokens_details", "reasoning_tokens",
                  (json_int_t)px_jint(u, "reasoning_tokens", 0)));
  }
  *bodyp = body;
  return 0;
}

/* The reference table (test/reference/ref.h). */
const px_ref_ops_t px_ref_chat = {chat_decode_request, chat_encode_request,
                                  chat_decode_response, chat_encode_response, NULL};
