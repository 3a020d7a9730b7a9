/* responses.c - OpenAI Responses (`openai_responses`) translator:
 * request decode/encode, response decode/encode, error bodies (item ids and
 * the Response object, shared with responses_stream.c: responses_common.c).
 *
 * Client side (decode_request / encode_response) is built for Codex: items
 * (message, function_call, function_call_output, reasoning), function tools,
 * hosted and namespace tools (dropped toward the other protocols and named in
 * x-proxai-lossy), reasoning items carrying encrypted_content.
 *
 * Anthropic thinking signatures and Gemini thought signatures have no
 * Responses field; they travel to a Responses client inside
 * reasoning.encrypted_content behind their family tag ("pxa1:sig:",
 * "pxa1:red:" for redacted thinking data, "pxg1:sig:"; px_rtok_* in
 * protoutil.h), so that Codex, which replays encrypted_content verbatim,
 * hands them back and the next request to that family carries them whole.
 * See docs/translation-responses.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"
#include "ref.h"

/* ---------------------------------------------------------------------- */
/* small helpers                                                           */

static int set_str(json_t *o, const char *k, const char *v) {
  return json_object_set_new(o, k, json_string(v));
}

static char *data_url(const char *mt, const char *data) {
  size_t n = strlen(mt) + strlen(data) + 16;
  char *s = malloc(n);
  if (s != NULL) snprintf(s, n, "data:%s;base64,%s", mt, data);
  return s;
}

static int is_valid_json_text(const char *s) {
  json_error_t e;
  json_t *v = px_jdoc_loads(s, JSON_DECODE_ANY, &e);
  if (v == NULL) return 0;
  json_decref(v);
  return 1;
}

/* ---------------------------------------------------------------------- */
/* decode_request: Responses client body -> IR                             */

typedef struct dec {
  const px_tr_ctx_t *ctx;
  json_t *ir;
  json_t *system;   /* IR system array */
  json_t *messages; /* IR messages array */
  px_lossy_t *lossy;
  px_tr_err_t *err;
} dec_t;

static json_t *text_part(const char *t) {
  return px_ir_text(t);
}

/* An input_image / input_file / input_text part of user content (also used
 * for function_call_output content lists). */
static int dec_user_part(dec_t *d, json_t *p, const char *path, json_t *out) {
  char pp[256];
  const char *type = px_jstr(p, "type");
  if (!json_is_object(p) || type == NULL) {
    snprintf(pp, sizeof(pp), "%s.type", path);
    return px_tr_fail(d->err, pp, "%s: content part without a type", path);
  }
  if (strcmp(type, "input_text") == 0 || strcmp(type, "output_text") == 0 ||
      strcmp(type, "text") == 0) {
    const char *t = px_jstr(p, "text");
    if (t == NULL) {
      snprintf(pp, sizeof(pp), "%s.text", path);
      return px_tr_fail(d->err, pp, "%s.text must be a string", path);
    }
    return json_array_append_new(out, text_part(t));
  }
  if (strcmp(type, "input_image") == 0) {
    const char *url = px_jstr(p, "image_url");
    const char *detail = px_jstr(p, "detail");
    if (detail != NULL && strcmp(detail, "auto") != 0)
      px_lossy_add(d->lossy, "input[].content[].detail");
    if (url == NULL) {
      snprintf(pp, sizeof(pp), "%s.file_id", path);
      if (px_jstr(p, "file_id") != NULL)
        return px_tr_fail(d->err, pp,
                          "%s.file_id: image file ids cannot be sent to this "
                          "upstream; send image_url",
                          path);
      snprintf(pp, sizeof(pp), "%s.image_url", path);
      return px_tr_fail(d->err, pp, "%s.image_url is required", path);
    }
    char mt[128];
    const char *data;
    if (px_data_url_split(url, mt, sizeof(mt), &data) == 0)
      return json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "type", "image",
                                                  "media_type", mt, "data", data));
    if (strncmp(url, "data:", 5) == 0) {
      snprintf(pp, sizeof(pp), "%s.image_url", path);
      return px_tr_fail(d->err, pp, "%s.image_url: not a base64 data URL", path);
    }
    return json_array_append_new(out,
                                 json_pack("{s:s, s:s}", "type", "image", "url", url));
  }
  if (strcmp(type, "input_file") == 0) {
    const char *fd = px_jstr(p, "file_data");
    const char *fu = px_jstr(p, "file_url");
    const char *fid = px_jstr(p, "file_id");
    const char *fname = px_jstr(p, "filename");
    json_t *f = NULL;
    if (fd != NULL) {
      char mt[128];
      const char *data;
      if (px_data_url_split(fd, mt, sizeof(mt), &data) == 0)
        f = json_pack("{s:s, s:s, s:s}", "type", "file", "media_type", mt, "data", data);
      else /* raw base64 without a data URL: Responses documents PDFs */
        f = json_pack("{s:s, s:s, s:s}", "type", "file", "media_type", "application/pdf",
                      "data", fd);
      if (f != NULL && fname != NULL) set_str(f, "filename", fname);
    } else if (fu != NULL) {
      f = json_pack("{s:s, s:s}", "type", "file", "url", fu);
    } else if (fid != NULL) {
      snprintf(pp, sizeof(pp), "%s.file_id", path);
      if (px_file_id_check(d->ctx, pp, d->err) < 0) return PX_EINVAL;
      f = json_pack("{s:s, s:s}", "type", "file", "file_id", fid);
    } else {
      snprintf(pp, sizeof(pp), "%s.file_data", path);
      return px_tr_fail(d->err, pp, "%s: input_file needs file_data, file_url or file_id",
                        path);
    }
    if (f == NULL) return PX_ENOMEM;
    return json_array_append_new(out, f);
  }
  if (strcmp(type, "input_audio") == 0) {
    snprintf(pp, sizeof(pp), "%s.type", path);
    return px_tr_fail(d->err, pp, "%s: audio input is not supported", path);
  }
  snprintf(pp, sizeof(pp), "%s.type", path);
  return px_tr_fail(d->err, pp, "%s.type: unsupported content part '%s'", path, type);
}

static json_t *last_msg(dec_t *d, const char *role) {
  size_t n = json_array_size(d->messages);
  if (n == 0) return NULL;
  json_t *m = json_array_get(d->messages, n - 1);
  const char *r = px_jstr(m, "role");
  return r && strcmp(r, role) == 0 ? m : NULL;
}

static json_t *new_msg(dec_t *d, const char *role) {
  json_t *m = json_pack("{s:s, s:[]}", "role", role, "content");
  if (m == NULL || json_array_append_new(d->messages, m) != 0) return NULL;
  return m;
}

static json_t *asst_content(dec_t *d) {
  json_t *m = last_msg(d, "assistant");
  if (m == NULL) m = new_msg(d, "assistant");
  return m ? json_object_get(m, "content") : NULL;
}

static int dec_system_msg(dec_t *d, json_t *item, const char *role, const char *path) {
  json_t *c = json_object_get(item, "content");
  char pp[256];
  if (json_is_string(c)) {
    json_t *p = json_pack("{s:s, s:s, s:s}", "type", "text", "text", json_string_value(c),
                          "role", role);
    return json_array_append_new(d->system, p);
  }
  if (!json_is_array(c)) {
    snprintf(pp, sizeof(pp), "%s.content", path);
    return px_tr_fail(d->err, pp, "%s.content must be a string or a list", path);
  }
  size_t i;
  json_t *p;
  json_array_foreach(c, i, p) {
    const char *t = px_jstr(p, "type");
    const char *txt = px_jstr(p, "text");
    if (t == NULL || txt == NULL ||
        (strcmp(t, "input_text") != 0 && strcmp(t, "text") != 0 &&
         strcmp(t, "output_text") != 0)) {
      snprintf(pp, sizeof(pp), "%s.content[%zu].type", path, i);
      return px_tr_fail(d->err, pp,
                        "%s.content[%zu]: only text is allowed in %s messages", path, i,
                        role);
    }
    if (json_array_append_new(d->system, json_pack("{s:s, s:s, s:s}", "type", "text",
                                                   "text", txt, "role", role)) != 0)
      return PX_ENOMEM;
  }
  return 0;
}

static int dec_message(dec_t *d, json_t *item, const char *path) {
  const char *role = px_jstr(item, "role");
  char pp[256];
  if (role == NULL) {
    snprintf(pp, sizeof(pp), "%s.role", path);
    return px_tr_fail(d->err, pp, "%s.role is required", path);
  }
  if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0)
    return dec_system_msg(d, item, role, path);
  json_t *c = json_object_get(item, "content");
  if (strcmp(role, "user") == 0) {
    json_t *m = new_msg(d, "user");
    if (m == NULL) return PX_ENOMEM;
    json_t *out = json_object_get(m, "content");
    if (json_is_string(c))
      return json_array_append_new(out, text_part(json_string_value(c)));
    if (!json_is_array(c)) {
      snprintf(pp, sizeof(pp), "%s.content", path);
      return px_tr_fail(d->err, pp, "%s.content must be a string or a list", path);
    }
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
      char sub[128];
      snprintf(sub, sizeof(sub), "%s.content[%zu]", path, i);
      int rc = dec_user_part(d, p, sub, out);
      if (rc != 0) return rc;
    }
    return 0;
  }
  if (strcmp(role, "assistant") == 0) {
    json_t *out = asst_content(d);
    if (out == NULL) return PX_ENOMEM;
    if (json_is_string(c))
      return json_array_append_new(out, text_part(json_string_value(c)));
    if (!json_is_array(c)) {
      snprintf(pp, sizeof(pp), "%s.content", path);
      return px_tr_fail(d->err, pp, "%s.content must be a string or a list", path);
    }
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
      const char *t = px_jstr(p, "type");
      snprintf(pp, sizeof(pp), "%s.content[%zu].type", path, i);
      if (t == NULL)
        return px_tr_fail(d->err, pp, "%s.content[%zu] has no type", path, i);
      if (strcmp(t, "output_text") == 0 || strcmp(t, "input_text") == 0 ||
          strcmp(t, "text") == 0) {
        const char *txt = px_jstr(p, "text");
        if (txt == NULL)
          return px_tr_fail(d->err, pp, "%s.content[%zu].text is required", path, i);
        json_t *ann = json_object_get(p, "annotations");
        if (json_array_size(ann) > 0)
          px_lossy_add(d->lossy, "input[].content[].annotations");
        if (json_array_append_new(out, text_part(txt)) != 0) return PX_ENOMEM;
      } else if (strcmp(t, "refusal") == 0) {
        const char *txt = px_jstr(p, "refusal");
        if (txt == NULL)
          return px_tr_fail(d->err, pp, "%s.content[%zu].refusal is required", path, i);
        if (json_array_append_new(
                out, json_pack("{s:s, s:s}", "type", "refusal", "text", txt)) != 0)
          return PX_ENOMEM;
      } else {
        return px_tr_fail(d->err, pp,
                          "%s.content[%zu].type: unsupported assistant "
                          "content part '%s'",
                          path, i, t);
      }
    }
    return 0;
  }
  snprintf(pp, sizeof(pp), "%s.role", path);
  return px_tr_fail(d->err, pp, "%s.role: unsupported role '%s'", path, role);
}

static int dec_function_call(dec_t *d, json_t *item, const char *path) {
  char pp[256];
  const char *call_id = px_jstr(item, "call_id");
  const char *name = px_jstr(item, "name");
  const char *args = px_jstr(item, "arguments");
  if (call_id == NULL) {
    snprintf(pp, sizeof(pp), "%s.call_id", path);
    return px_tr_fail(d->err, pp, "%s.call_id is required", path);
  }
  if (name == NULL) {
    snprintf(pp, sizeof(pp), "%s.name", path);
    return px_tr_fail(d->err, pp, "%s.name is required", path);
  }
  if (args == NULL) {
    snprintf(pp, sizeof(pp), "%s.arguments", path);
    return px_tr_fail(d->err, pp, "%s.arguments must be a JSON string", path);
  }
  if (!is_valid_json_text(args)) {
    snprintf(pp, sizeof(pp), "%s.arguments", path);
    return px_tr_fail(d->err, pp, "%s.arguments is not valid JSON", path);
  }
  if (px_jstr(item, "namespace") != NULL) px_lossy_add(d->lossy, "input[].namespace");
  json_t *out = asst_content(d);
  if (out == NULL) return PX_ENOMEM;
  return json_array_append_new(
      out, json_pack("{s:s, s:s, s:s, s:s}", "type", "tool_call", "id", call_id, "name",
                     name, "arguments", args));
}

/* custom_tool_call: toward Chat a custom tool_call part; toward Anthropic
 * (no freeform tools) a function-style call with arguments {"input": text},
 * so that the history and its tool result still pair up. */
static int dec_custom_call(dec_t *d, json_t *item, const char *path) {
  char pp[256];
  const char *call_id = px_jstr(item, "call_id");
  const char *name = px_jstr(item, "name");
  const char *in = px_jstr(item, "input");
  if (call_id == NULL || name == NULL || in == NULL) {
    snprintf(pp, sizeof(pp), "%s.%s", path,
             call_id == NULL ? "call_id"
             : name == NULL  ? "name"
                             : "input");
    return px_tr_fail(d->err, pp, "%s is required (a string)", pp);
  }
  json_t *out = asst_content(d);
  if (out == NULL) return PX_ENOMEM;
  if (px_tr_out_can(d->ctx, PX_CAP_CUSTOM_TOOLS))
    return json_array_append_new(
        out, json_pack("{s:s, s:s, s:s, s:b, s:s}", "type", "tool_call", "id", call_id,
                       "name", name, "custom", 1, "input", in));
  px_lossy_add(d->lossy, "input[].custom_tool_call");
  json_t *args = json_pack("{s:s}", "input", in);
  char *a = args ? px_jdoc_dump(args, JSON_COMPACT) : NULL;
  json_decref(args);
  if (a == NULL) return PX_ENOMEM;
  int rc =
      json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s}", "type", "tool_call",
                                           "id", call_id, "name", name, "arguments", a));
  free(a);
  return rc;
}

static int dec_function_output(dec_t *d, json_t *item, const char *path) {
  char pp[256];
  const char *call_id = px_jstr(item, "call_id");
  if (call_id == NULL) {
    snprintf(pp, sizeof(pp), "%s.call_id", path);
    return px_tr_fail(d->err, pp, "%s.call_id is required", path);
  }
  json_t *o = json_object_get(item, "output");
  json_t *content = json_array();
  if (content == NULL) return PX_ENOMEM;
  int rc = 0;
  if (json_is_string(o)) {
    if (json_string_length(o) > 0)
      rc = json_array_append_new(content, text_part(json_string_value(o)));
  } else if (json_is_array(o)) {
    size_t i;
    json_t *p;
    json_array_foreach(o, i, p) {
      char sub[128];
      snprintf(sub, sizeof(sub), "%s.output[%zu]", path, i);
      rc = dec_user_part(d, p, sub, content);
      if (rc != 0) break;
    }
  } else {
    snprintf(pp, sizeof(pp), "%s.output", path);
    rc = px_tr_fail(d->err, pp, "%s.output must be a string or a list", path);
  }
  if (rc != 0) {
    json_decref(content);
    return rc;
  }
  json_t *m = last_msg(d, "user");
  json_t *mc = m ? json_object_get(m, "content") : NULL;
  json_t *lastp = mc ? json_array_get(mc, json_array_size(mc) - 1) : NULL;
  const char *lt = lastp ? px_jstr(lastp, "type") : NULL;
  if (lt == NULL || strcmp(lt, "tool_result") != 0) {
    m = new_msg(d, "user");
    if (m == NULL) {
      json_decref(content);
      return PX_ENOMEM;
    }
    mc = json_object_get(m, "content");
  }
  json_t *tr = json_pack("{s:s, s:s, s:o}", "type", "tool_result", "tool_call_id",
                         call_id, "content", content);
  if (tr == NULL) return PX_ENOMEM;
  return json_array_append_new(mc, tr);
}

static int append_texts(px_buf_t *b, json_t *arr, const char *want) {
  size_t i;
  json_t *p;
  json_array_foreach(arr, i, p) {
    const char *t = px_jstr(p, "type");
    const char *txt = px_jstr(p, "text");
    if (t == NULL || txt == NULL || strcmp(t, want) != 0) continue;
    if (b->len > 0 && px_buf_puts(b, "\n\n") != 0) return PX_ENOMEM;
    if (px_buf_puts(b, txt) != 0) return PX_ENOMEM;
  }
  return 0;
}

static int dec_reasoning(dec_t *d, json_t *item, const char *path) {
  px_buf_t b;
  px_buf_init(&b, 64u << 20);
  int rc = append_texts(&b, json_object_get(item, "content"), "reasoning_text");
  if (rc == 0 && b.len == 0)
    rc = append_texts(&b, json_object_get(item, "summary"), "summary_text");
  if (rc != 0) {
    px_buf_free(&b);
    return rc;
  }
  json_t *part =
      json_pack("{s:s, s:s#}", "type", "reasoning", "text", b.data ? b.data : "", b.len);
  px_buf_free(&b);
  if (part == NULL) return PX_ENOMEM;
  const char *enc = px_jstr(item, "encrypted_content");
  const char *id = px_jstr(item, "id");
  /* tagged tokens of other families go back to their fields (protoutil.h) */
  if (enc != NULL && *enc != 0 && px_rtok_in(PX_PROTO_RESPONSES, part, enc) < 0) {
    json_decref(part);
    return PX_ENOMEM;
  }
  if (id != NULL) set_str(part, "id", id);
  (void)path;
  json_t *out = asst_content(d);
  if (out == NULL) {
    json_decref(part);
    return PX_ENOMEM;
  }
  return json_array_append_new(out, part);
}

static int dec_input(dec_t *d, json_t *input) {
  if (json_is_string(input)) {
    json_t *m = new_msg(d, "user");
    if (m == NULL) return PX_ENOMEM;
    return json_array_append_new(json_object_get(m, "content"),
                                 text_part(json_string_value(input)));
  }
  if (!json_is_array(input))
    return px_tr_fail(d->err, "input", "input must be a string or a list");
  size_t i;
  json_t *item;
  json_array_foreach(input, i, item) {
    char path[64];
    snprintf(path, sizeof(path), "input[%zu]", i);
    if (!json_is_object(item))
      return px_tr_fail(d->err, path, "%s must be an object", path);
    const char *type = px_jstr(item, "type");
    int rc;
    if (type == NULL || strcmp(type, "message") == 0)
      rc = dec_message(d, item, path);
    else if (strcmp(type, "function_call") == 0)
      rc = dec_function_call(d, item, path);
    else if (strcmp(type, "function_call_output") == 0 ||
             strcmp(type, "custom_tool_call_output") == 0)
      rc = dec_function_output(d, item, path);
    else if (strcmp(type, "custom_tool_call") == 0)
      rc = dec_custom_call(d, item, path);
    else if (strcmp(type, "reasoning") == 0)
      rc = dec_reasoning(d, item, path);
    else {
      char pp[256];
      snprintf(pp, sizeof(pp), "%s.type", path);
      rc = px_tr_fail(d->err, pp,
                      "%s.type: input item '%s' cannot be sent to this "
                      "upstream",
                      path, type);
    }
    if (rc != 0) return rc;
  }
  return 0;
}

static void lossy_hosted_tool(px_lossy_t *l, const char *type) {
  if (strcmp(type, "web_search") == 0 || strncmp(type, "web_search_preview", 18) == 0)
    px_lossy_add(l, "tools[].web_search");
  else if (strcmp(type, "file_search") == 0)
    px_lossy_add(l, "tools[].file_search");
  else if (strcmp(type, "code_interpreter") == 0)
    px_lossy_add(l, "tools[].code_interpreter");
  else if (strcmp(type, "image_generation") == 0)
    px_lossy_add(l, "tools[].image_generation");
  else if (strcmp(type, "computer_use_preview") == 0 || strcmp(type, "computer") == 0)
    px_lossy_add(l, "tools[].computer");
  else if (strcmp(type, "mcp") == 0)
    px_lossy_add(l, "tools[].mcp");
  else if (strcmp(type, "local_shell") == 0 || strcmp(type, "shell") == 0)
    px_lossy_add(l, "tools[].shell");
  else if (strcmp(type, "apply_patch") == 0)
    px_lossy_add(l, "tools[].apply_patch");
  else if (strcmp(type, "custom") == 0)
    px_lossy_add(l, "tools[].custom");
  else if (strcmp(type, "namespace") == 0)
    px_lossy_add(l, "tools[].namespace");
  else
    px_lossy_add(l, "tools[].other");
}

static int dec_tools(dec_t *d, json_t *tools) {
  if (!json_is_array(tools)) return px_tr_fail(d->err, "tools", "tools must be a list");
  json_t *out = json_array();
  if (out == NULL) return PX_ENOMEM;
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *type = px_jstr(t, "type");
    char pp[64];
    snprintf(pp, sizeof(pp), "tools[%zu].type", i);
    if (type == NULL) {
      json_decref(out);
      return px_tr_fail(d->err, pp, "%s is required", pp);
    }
    if (strcmp(type, "custom") == 0 && px_tr_out_can(d->ctx, PX_CAP_CUSTOM_TOOLS) &&
        px_jstr(t, "name") != NULL) {
      /* freeform tool, for an upstream that has them */
      json_t *o = json_pack("{s:s, s:s}", "type", "custom", "name", px_jstr(t, "name"));
      if (px_jstr(t, "description") != NULL)
        set_str(o, "description", px_jstr(t, "description"));
      json_t *f = json_object_get(t, "format");
      if (json_is_object(f)) json_object_set(o, "format", f);
      json_array_append_new(out, o);
      continue;
    }
    if (strcmp(type, "function") != 0) {
      lossy_hosted_tool(d->lossy, type);
      continue;
    }
    const char *name = px_jstr(t, "name");
    if (name == NULL) {
      json_decref(out);
      snprintf(pp, sizeof(pp), "tools[%zu].name", i);
      return px_tr_fail(d->err, pp, "%s is required", pp);
    }
    json_t *o = json_pack("{s:s}", "name", name);
    const char *desc = px_jstr(t, "description");
    if (desc != NULL) set_str(o, "description", desc);
    json_t *params = json_object_get(t, "parameters");
    if (json_is_object(params))
      json_object_set(o, "parameters", params);
    else
      json_object_set_new(o, "parameters",
                          json_pack("{s:s, s:{}}", "type", "object", "properties"));
    json_t *strict = json_object_get(t, "strict");
    if (json_is_boolean(strict)) json_object_set(o, "strict", strict);
    if (json_is_true(json_object_get(t, "defer_loading")))
      px_lossy_add(d->lossy, "tools[].defer_loading");
    json_array_append_new(out, o);
  }
  if (json_array_size(out) > 0)
    json_object_set_new(d->ir, "tools", out);
  else
    json_decref(out);
  return 0;
}

static int dec_tool_choice(dec_t *d, json_t *tc) {
  if (json_is_string(tc)) {
    const char *s = json_string_value(tc);
    if (strcmp(s, "auto") == 0 || strcmp(s, "none") == 0 || strcmp(s, "required") == 0)
      return json_object_set_new(d->ir, "tool_choice", json_pack("{s:s}", "type", s));
    return px_tr_fail(d->err, "tool_choice", "tool_choice: unknown value '%s'", s);
  }
  const char *type = px_jstr(tc, "type");
  if (type != NULL && px_jstr(tc, "name") != NULL &&
      (strcmp(type, "function") == 0 ||
       (strcmp(type, "custom") == 0 && px_tr_out_can(d->ctx, PX_CAP_CUSTOM_TOOLS))))
    return json_object_set_new(
        d->ir, "tool_choice",
        json_pack("{s:s, s:s}", "type", "tool", "name", px_jstr(tc, "name")));
  /* allowed_tools, hosted tool types, custom, mcp: no equivalent */
  px_lossy_add(d->lossy, "tool_choice");
  return 0;
}

static int dec_text(dec_t *d, json_t *text) {
  if (!json_is_object(text)) return px_tr_fail(d->err, "text", "text must be an object");
  json_t *verb = json_object_get(text, "verbosity");
  if (verb != NULL && !json_is_null(verb)) {
    if (json_is_string(verb)) /* px_ir_fit_request */
      json_object_set(d->ir, "verbosity", verb);
    else
      px_lossy_add(d->lossy, "text.verbosity");
  }
  json_t *f = json_object_get(text, "format");
  if (f == NULL || json_is_null(f)) return 0;
  const char *type = px_jstr(f, "type");
  if (type == NULL)
    return px_tr_fail(d->err, "text.format.type", "text.format.type is required");
  if (strcmp(type, "text") == 0 || strcmp(type, "json_object") == 0)
    return json_object_set_new(d->ir, "response_format",
                               json_pack("{s:s}", "type", type));
  if (strcmp(type, "json_schema") == 0) {
    json_t *schema = json_object_get(f, "schema");
    if (!json_is_object(schema))
      return px_tr_fail(d->err, "text.format.schema",
                        "text.format.schema must be an object");
    json_t *rf =
        json_pack("{s:s, s:s, s:O}", "type", "json_schema", "name",
                  px_jstr(f, "name") ? px_jstr(f, "name") : "response", "schema", schema);
    if (rf == NULL) return PX_ENOMEM;
    json_t *strict = json_object_get(f, "strict");
    if (json_is_boolean(strict)) json_object_set(rf, "strict", strict);
    if (px_jstr(f, "description") != NULL)
      set_str(rf, "description", px_jstr(f, "description"));
    return json_object_set_new(d->ir, "response_format", rf);
  }
  return px_tr_fail(d->err, "text.format.type",
                    "text.format.type: unsupported format '%s'", type);
}

static int dec_reasoning_cfg(dec_t *d, json_t *r) {
  if (json_is_null(r)) return 0;
  if (!json_is_object(r))
    return px_tr_fail(d->err, "reasoning", "reasoning must be an object");
  json_t *o = json_object();
  if (o == NULL) return PX_ENOMEM;
  const char *effort = px_jstr(r, "effort");
  const char *summary = px_jstr(r, "summary");
  if (summary == NULL) summary = px_jstr(r, "generate_summary");
  if (effort != NULL) set_str(o, "effort", effort);
  if (summary != NULL) set_str(o, "summary", summary);
  if (json_object_size(o) > 0) return json_object_set_new(d->ir, "reasoning", o);
  json_decref(o);
  return 0;
}

/* instructions, generation settings, user, metadata, stream -> IR: 0, <0
 * when invalid, 1 when key is none of them. */
static int dec_settings(dec_t *d, const char *key, json_t *v) {
  if (strcmp(key, "instructions") == 0) {
    if (json_is_string(v)) {
      if (json_string_length(v) > 0)
        return json_array_append_new(d->system,
                                     json_pack("{s:s, s:s, s:s}", "type", "text", "text",
                                               json_string_value(v), "role", "system"));
    } else if (!json_is_null(v)) {
      return px_tr_fail(d->err, "instructions", "instructions must be a string");
    }
  } else if (strcmp(key, "parallel_tool_calls") == 0) {
    if (json_is_boolean(v)) json_object_set(d->ir, "parallel_tool_calls", v);
  } else if (strcmp(key, "max_output_tokens") == 0) {
    if (json_is_integer(v) &&
        (json_integer_value(v) < 1 || json_integer_value(v) > PX_TOKENS_MAX))
      return px_tr_fail(
          d->err, "max_output_tokens",
          "max_output_tokens must be a positive integer of at most 18 digits");
    if (json_is_integer(v))
      json_object_set(d->ir, "max_tokens", v);
    else if (!json_is_null(v))
      return px_tr_fail(d->err, "max_output_tokens",
                        "max_output_tokens must be an integer");
  } else if (strcmp(key, "temperature") == 0 || strcmp(key, "top_p") == 0) {
    if (json_is_number(v))
      json_object_set(d->ir, key, v);
    else if (!json_is_null(v))
      return px_tr_fail(d->err, key, "%s must be a number", key);
  } else if (strcmp(key, "user") == 0) {
    if (json_is_string(v)) json_object_set(d->ir, "user", v);
  } else if (strcmp(key, "metadata") == 0) {
    if (json_is_object(v) && json_object_size(v) > 0)
      json_object_set(d->ir, "metadata", v);
  } else if (strcmp(key, "stream") == 0) {
    if (json_is_boolean(v)) json_object_set(d->ir, "stream", v);
  } else if (strcmp(key, "stream_options") == 0) {
    if (json_object_size(v) > 0) px_lossy_add(d->lossy, "stream_options");
  } else {
    return 1;
  }
  return 0;
}

/* Fields that need an openai_responses upstream (stored state, background,
 * prompt templates): <0 when used, 0 when not, 1 when key is none of them. */
static int dec_stateful(const char *key, json_t *v, px_tr_err_t *err) {
  if (strcmp(key, "previous_response_id") == 0) {
    if (!json_is_null(v))
      return px_tr_fail(err, "previous_response_id",
                        "previous_response_id needs an openai_responses upstream or "
                        "[responses] store = on (it is off); send the full "
                        "conversation in input");
  } else if (strcmp(key, "conversation") == 0) {
    if (!json_is_null(v))
      return px_tr_fail(err, "conversation",
                        "conversation needs an openai_responses upstream; send "
                        "the full conversation in input");
  } else if (strcmp(key, "background") == 0) {
    if (json_is_true(v))
      return px_tr_fail(err, "background",
                        "background mode needs an openai_responses upstream");
  } else if (strcmp(key, "prompt") == 0) {
    if (!json_is_null(v))
      return px_tr_fail(err, "prompt",
                        "prompt templates need an openai_responses upstream");
  } else {
    return 1;
  }
  return 0;
}

/* Fields dropped by name (and prompt_cache_key, which the hub may keep:
 * px_ir_fit_request): 0, or 1 when key is none of them. */
static int dec_dropped(dec_t *d, const char *key, json_t *v) {
  if (strcmp(key, "store") == 0) {
    if (json_is_true(v) && d->ctx->resp_id == NULL) px_lossy_add(d->lossy, "store");
  } else if (strcmp(key, "include") == 0) {
    if (json_array_size(v) > 0) px_lossy_add(d->lossy, "include");
  } else if (strcmp(key, "truncation") == 0) {
    if (json_is_string(v) && strcmp(json_string_value(v), "disabled") != 0)
      px_lossy_add(d->lossy, "truncation");
  } else if (strcmp(key, "prompt_cache_key") == 0) {
    if (json_is_string(v))
      json_object_set(d->ir, "prompt_cache_key", v); /* px_ir_fit_request */
    else
      px_lossy_add(d->lossy, "prompt_cache_key");
  } else if (strcmp(key, "prompt_cache_retention") == 0) {
    if (!json_is_null(v)) px_lossy_add(d->lossy, "prompt_cache_retention");
  } else if (strcmp(key, "service_tier") == 0) {
    if (!json_is_null(v)) px_lossy_add(d->lossy, "service_tier");
  } else if (strcmp(key, "client_metadata") == 0) {
    if (!json_is_null(v)) px_lossy_add(d->lossy, "client_metadata");
  } else if (strcmp(key, "max_tool_calls") == 0) {
    if (!json_is_null(v)) px_lossy_add(d->lossy, "max_tool_calls");
  } else if (strcmp(key, "top_logprobs") == 0) {
    if (!json_is_null(v)) px_lossy_add(d->lossy, "top_logprobs");
  } else {
    return 1;
  }
  return 0;
}

/* Only hosted/namespace tools (all dropped): OpenAI rejects tool_choice and
 * parallel_tool_calls without tools, and they mean nothing then. */
static void drop_toolless_choice(dec_t *d) {
  if (json_object_get(d->ir, "tools") != NULL) return;
  json_t *tc = json_object_get(d->ir, "tool_choice");
  const char *tct = px_jstr(tc, "type");
  if (tct != NULL && strcmp(tct, "auto") != 0 && strcmp(tct, "none") != 0)
    px_lossy_add(d->lossy, "tool_choice");
  json_object_del(d->ir, "tool_choice");
  json_object_del(d->ir, "parallel_tool_calls");
}

static int decode_request(const px_tr_ctx_t *ctx, json_t *body, json_t **ir,
                          px_lossy_t *lossy, px_tr_err_t *err) {
  if (!json_is_object(body))
    return px_tr_fail(err, "", "request body must be a JSON object");
  dec_t d = {.ctx = ctx, .lossy = lossy, .err = err};
  d.ir = json_object();
  d.system = json_array();
  d.messages = json_array();
  int rc = PX_ENOMEM;
  if (d.ir == NULL || d.system == NULL || d.messages == NULL) goto fail;

  const char *key;
  json_t *v;
  json_object_foreach(body, key, v) {
    rc = 0;
    if (json_is_null(v)) continue; /* null = not given, for every field */
    if (strcmp(key, "model") == 0) {
      if (!json_is_string(v)) {
        rc = px_tr_fail(err, "model", "model must be a string");
      } else {
        json_object_set(d.ir, "model", v);
      }
    } else if (strcmp(key, "input") == 0) {
      /* handled after the loop so that instructions come first */
    } else if (strcmp(key, "tools") == 0) {
      rc = dec_tools(&d, v);
    } else if (strcmp(key, "tool_choice") == 0) {
      rc = dec_tool_choice(&d, v);
    } else if (strcmp(key, "text") == 0) {
      rc = dec_text(&d, v);
    } else if (strcmp(key, "reasoning") == 0) {
      rc = dec_reasoning_cfg(&d, v);
    } else if (strcmp(key, "safety_identifier") == 0) {
      /* user wins when both are given; handled below */
    } else {
      rc = dec_settings(&d, key, v);
      if (rc == 1) rc = dec_stateful(key, v, err);
      if (rc == 1) rc = dec_dropped(&d, key, v);
      if (rc == 1) {
        /* unknown top-level field: dropped, named as itself */
        px_lossy_add(lossy, key);
        rc = 0;
      }
    }
    if (rc != 0) goto fail;
  }
  const char *sid = px_jstr(body, "safety_identifier");
  if (sid != NULL) {
    if (json_object_get(d.ir, "user") == NULL)
      set_str(d.ir, "user", sid);
    else
      px_lossy_add(lossy, "safety_identifier");
  }
  drop_toolless_choice(&d);
  json_t *input = json_object_get(body, "input");
  if (input == NULL) {
    rc = px_tr_fail(err, "input", "input is required");
    goto fail;
  }
  rc = dec_input(&d, input);
  if (rc != 0) goto fail;
  if (json_array_size(d.system) > 0) json_object_set(d.ir, "system", d.system);
  json_object_set(d.ir, "messages", d.messages);
  json_decref(d.system);
  json_decref(d.messages);
  *ir = d.ir;
  return 0;
fail:
  json_decref(d.ir);
  json_decref(d.system);
  json_decref(d.messages);
  return rc < 0 ? rc : PX_EINVAL;
}

/* ---------------------------------------------------------------------- */
/* encode_request: IR -> Responses upstream body                           */

static json_t *enc_user_part(json_t *p, px_lossy_t *lossy) {
  const char *t = px_jstr(p, "type");
  if (t == NULL) return NULL;
  if (json_object_get(p, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
  if (strcmp(t, "text") == 0)
    return json_pack("{s:s, s:s}", "type", "input_text", "text",
                     px_jstr(p, "text") ? px_jstr(p, "text") : "");
  if (strcmp(t, "image") == 0) {
    if (px_jstr(p, "url") != NULL)
      return json_pack("{s:s, s:s}", "type", "input_image", "image_url",
                       px_jstr(p, "url"));
    if (px_jstr(p, "data") != NULL) {
      char *u =
          data_url(px_jstr(p, "media_type") ? px_jstr(p, "media_type") : "image/png",
                   px_jstr(p, "data"));
      if (u == NULL) return NULL;
      json_t *o = json_pack("{s:s, s:s}", "type", "input_image", "image_url", u);
      free(u);
      return o;
    }
    return NULL;
  }
  if (strcmp(t, "file") == 0) {
    json_t *o = NULL;
    if (px_jstr(p, "data") != NULL) {
      char *u = data_url(
          px_jstr(p, "media_type") ? px_jstr(p, "media_type") : "application/pdf",
          px_jstr(p, "data"));
      if (u == NULL) return NULL;
      o = json_pack("{s:s, s:s}", "type", "input_file", "file_data", u);
      free(u);
      /* OpenAI rejects inline file data without a filename */
      if (o != NULL) set_str(o, "filename", px_inline_filename(p));
    } else if (px_jstr(p, "url") != NULL) {
      o = json_pack("{s:s, s:s}", "type", "input_file", "file_url", px_jstr(p, "url"));
    } else if (px_jstr(p, "file_id") != NULL) {
      o = json_pack("{s:s, s:s}", "type", "input_file", "file_id", px_jstr(p, "file_id"));
    }
    return o;
  }
  return NULL;
}

static int flush_msg(json_t *input, const char *role, json_t **content) {
  if (*content == NULL) return 0;
  int rc = 0;
  if (json_array_size(*content) > 0)
    rc = json_array_append_new(input, json_pack("{s:s, s:s, s:O}", "type", "message",
                                                "role", role, "content", *content));
  json_decref(*content);
  *content = NULL;
  return rc;
}

/* Whether an earlier IR tool_call part with this id was a custom call. */
static int custom_call_id(json_t *msgs, const char *id) {
  size_t i, j;
  json_t *m, *p;
  json_array_foreach(msgs, i, m) {
    json_array_foreach(json_object_get(m, "content"), j, p) {
      const char *t = px_jstr(p, "type"), *pid = px_jstr(p, "id");
      if (t != NULL && pid != NULL && strcmp(t, "tool_call") == 0 && strcmp(pid, id) == 0)
        return json_is_true(json_object_get(p, "custom"));
    }
  }
  return 0;
}

static int enc_tool_output(json_t *input, json_t *p, const char *path, px_lossy_t *lossy,
                           px_tr_err_t *err, int custom) {
  const char *id = px_jstr(p, "tool_call_id");
  if (id == NULL) return px_tr_fail(err, path, "%s: tool result without a call id", path);
  if (json_is_true(json_object_get(p, "is_error")))
    px_lossy_add(lossy, "messages[].content[].is_error");
  json_t *c = json_object_get(p, "content");
  int only_text = 1;
  size_t i;
  json_t *q;
  json_array_foreach(c, i, q) {
    const char *t = px_jstr(q, "type");
    if (t == NULL || strcmp(t, "text") != 0) only_text = 0;
  }
  json_t *out;
  if (only_text) {
    px_buf_t b;
    px_buf_init(&b, 64u << 20);
    json_array_foreach(c, i, q) {
      if (px_buf_puts(&b, px_jstr(q, "text") ? px_jstr(q, "text") : "") != 0) {
        px_buf_free(&b);
        return PX_ENOMEM;
      }
    }
    out = json_stringn(b.data ? b.data : "", b.len);
    px_buf_free(&b);
  } else {
    out = json_array();
    json_array_foreach(c, i, q) {
      json_t *e = enc_user_part(q, lossy);
      if (e == NULL) {
        json_decref(out);
        return px_tr_fail(err, path, "%s: unsupported tool result content", path);
      }
      json_array_append_new(out, e);
    }
  }
  if (out == NULL) return PX_ENOMEM;
  return json_array_append_new(
      input, json_pack("{s:s, s:s, s:o}", "type",
                       custom ? "custom_tool_call_output" : "function_call_output",
                       "call_id", id, "output", out));
}

/* An IR reasoning part: a reasoning item when it carries encrypted_content
 * (the pending message is flushed first), else dropped and named as the
 * client spelled it. */
static int enc_reasoning(json_t *input, const char *role, json_t **content, json_t *p,
                         const px_lossy_names_t *names, px_lossy_t *lossy) {
  const char *enc = px_jstr(p, "encrypted_content");
  if (enc == NULL) {
    if (px_jstr(p, "redacted_data") != NULL && names->reasoning_redacted != NULL)
      px_lossy_add(lossy, names->reasoning_redacted);
    else
      px_lossy_add(lossy, names->reasoning_text);
    return 0;
  }
  int rc = flush_msg(input, role, content);
  json_t *r = json_pack("{s:s, s:[], s:s}", "type", "reasoning", "summary",
                        "encrypted_content", enc);
  if (r == NULL) return PX_ENOMEM;
  const char *txt = px_jstr(p, "text");
  if (txt != NULL && *txt != 0)
    json_array_append_new(json_object_get(r, "summary"),
                          json_pack("{s:s, s:s}", "type", "summary_text", "text", txt));
  if (px_jstr(p, "id") != NULL) set_str(r, "id", px_jstr(p, "id"));
  if (rc == 0)
    rc = json_array_append_new(input, r);
  else
    json_decref(r);
  return rc;
}

/* A text / refusal (assistant) or user part -> the pending message content */
static int enc_content_part(json_t **content, json_t *p, const char *t, int asst,
                            const char *path, px_lossy_t *lossy, px_tr_err_t *err) {
  if (*content == NULL && (*content = json_array()) == NULL) return PX_ENOMEM;
  json_t *e = NULL;
  if (asst && strcmp(t, "text") == 0) {
    if (json_object_get(p, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    e = json_pack("{s:s, s:s, s:[]}", "type", "output_text", "text",
                  px_jstr(p, "text") ? px_jstr(p, "text") : "", "annotations");
  } else if (asst && strcmp(t, "refusal") == 0) {
    e = json_pack("{s:s, s:s}", "type", "refusal", "refusal",
                  px_jstr(p, "text") ? px_jstr(p, "text") : "");
  } else if (!asst) {
    e = enc_user_part(p, lossy);
  }
  if (e == NULL) /* the caller frees the pending content */
    return px_tr_fail(err, path, "%s: unsupported content part '%s'", path, t);
  return json_array_append_new(*content, e);
}

/* names: the client's, for what Responses cannot hold */
static int enc_messages(json_t *msgs, json_t *input, const px_lossy_names_t *names,
                        px_lossy_t *lossy, px_tr_err_t *err) {
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    const char *role = px_jstr(m, "role");
    if (json_is_true(json_object_get(m, "system_note"))) role = "system"; /* in place */
    int asst = role != NULL && strcmp(role, "assistant") == 0;
    json_t *content = NULL; /* pending message content parts */
    size_t j;
    json_t *p;
    json_array_foreach(json_object_get(m, "content"), j, p) {
      char path[64];
      snprintf(path, sizeof(path), "messages[%zu].content[%zu]", i, j);
      const char *t = px_jstr(p, "type");
      if (t == NULL) return px_tr_fail(err, path, "%s has no type", path);
      int rc = 0;
      if (strcmp(t, "tool_result") == 0) {
        rc = flush_msg(input, role, &content);
        if (rc == 0)
          rc = enc_tool_output(input, p, path, lossy, err,
                               px_jstr(p, "tool_call_id") != NULL &&
                                   custom_call_id(msgs, px_jstr(p, "tool_call_id")));
      } else if (strcmp(t, "tool_call") == 0 &&
                 json_is_true(json_object_get(p, "custom"))) {
        rc = flush_msg(input, role, &content);
        if (rc == 0)
          rc = json_array_append_new(
              input, json_pack("{s:s, s:s, s:s, s:s}", "type", "custom_tool_call",
                               "call_id", px_jstr(p, "id") ? px_jstr(p, "id") : "",
                               "name", px_jstr(p, "name") ? px_jstr(p, "name") : "",
                               "input", px_jstr(p, "input") ? px_jstr(p, "input") : ""));
      } else if (strcmp(t, "tool_call") == 0) {
        rc = flush_msg(input, role, &content);
        if (rc == 0)
          rc = json_array_append_new(
              input, json_pack("{s:s, s:s, s:s, s:s}", "type", "function_call", "call_id",
                               px_jstr(p, "id") ? px_jstr(p, "id") : "", "name",
                               px_jstr(p, "name") ? px_jstr(p, "name") : "", "arguments",
                               px_jstr(p, "arguments") ? px_jstr(p, "arguments") : "{}"));
      } else if (strcmp(t, "reasoning") == 0) {
        rc = enc_reasoning(input, role, &content, p, names, lossy);
      } else {
        rc = enc_content_part(&content, p, t, asst, path, lossy, err);
      }
      if (rc != 0) {
        json_decref(content);
        return rc;
      }
    }
    int rc = flush_msg(input, role ? role : "user", &content);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Reasoning can occur: reasoning controls that do not switch it off, or
 * reasoning items replayed in the input. */
static int reasoning_possible(json_t *b) {
  json_t *r = json_object_get(b, "reasoning");
  const char *effort = px_jstr(r, "effort");
  if (json_object_size(r) > 0 && (effort == NULL || strcmp(effort, "none") != 0))
    return 1;
  size_t i;
  json_t *it;
  json_array_foreach(json_object_get(b, "input"), i, it) {
    const char *t = px_jstr(it, "type");
    if (t != NULL && strcmp(t, "reasoning") == 0) return 1;
  }
  return 0;
}

/* IR system -> instructions (joined by blank lines) */
static int instructions_out(json_t *sys, json_t *b, px_lossy_t *lossy) {
  px_buf_t sb;
  px_buf_init(&sb, 64u << 20);
  size_t i;
  json_t *p;
  json_array_foreach(sys, i, p) {
    if (json_object_get(p, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    if ((i > 0 && px_buf_puts(&sb, "\n\n") != 0) ||
        px_buf_puts(&sb, px_jstr(p, "text") ? px_jstr(p, "text") : "") != 0) {
      px_buf_free(&sb);
      return PX_ENOMEM;
    }
  }
  json_object_set_new(b, "instructions", json_stringn(sb.data ? sb.data : "", sb.len));
  px_buf_free(&sb);
  return 0;
}

/* IR tools -> function and custom tools */
static void tools_out(json_t *tools, json_t *b, px_lossy_t *lossy) {
  json_t *ot = json_array();
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    if (px_jstr(t, "type") != NULL && strcmp(px_jstr(t, "type"), "custom") == 0) {
      json_t *o = json_pack("{s:s, s:s}", "type", "custom", "name",
                            px_jstr(t, "name") ? px_jstr(t, "name") : "");
      if (px_jstr(t, "description") != NULL)
        set_str(o, "description", px_jstr(t, "description"));
      json_t *f = json_object_get(t, "format");
      if (json_is_object(f)) json_object_set(o, "format", f);
      json_array_append_new(ot, o);
      continue;
    }
    json_t *o = json_pack("{s:s, s:s}", "type", "function", "name",
                          px_jstr(t, "name") ? px_jstr(t, "name") : "");
    if (px_jstr(t, "description") != NULL)
      set_str(o, "description", px_jstr(t, "description"));
    json_t *params = json_object_get(t, "parameters");
    json_object_set_new(o, "parameters",
                        params
                            ? json_incref(params)
                            : json_pack("{s:s, s:{}}", "type", "object", "properties"));
    /* Responses defaults strict to true, which rejects most schemas: say
     * false unless the client asked for strict. */
    json_t *strict = json_object_get(t, "strict");
    json_object_set_new(o, "strict", json_boolean(json_is_true(strict)));
    if (json_object_get(t, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    json_array_append_new(ot, o);
  }
  json_object_set_new(b, "tools", ot);
}

static void tool_choice_out(json_t *tc, json_t *tools, json_t *b) {
  const char *t = px_jstr(tc, "type");
  if (t != NULL && strcmp(t, "tool") == 0)
    json_object_set_new(
        b, "tool_choice",
        json_pack(
            "{s:s, s:s}", "type",
            px_ir_is_custom_tool(tools, px_jstr(tc, "name")) ? "custom" : "function",
            "name", px_jstr(tc, "name") ? px_jstr(tc, "name") : ""));
  else if (t != NULL)
    set_str(b, "tool_choice", t);
}

/* IR reasoning -> reasoning {effort, summary} */
static void reasoning_out(const px_tr_ctx_t *ctx, json_t *r, json_t *b,
                          px_lossy_t *lossy) {
  json_t *o = json_object();
  const char *effort = px_jstr(r, "effort");
  json_t *bt = json_object_get(r, "budget_tokens");
  if (effort != NULL)
    set_str(o, "effort", effort);
  else if (json_is_false(json_object_get(r, "enabled")))
    ; /* thinking disabled: leave the model default */
  else if (json_is_integer(bt))
    set_str(o, "effort", px_effort_of_budget(json_integer_value(bt)));
  if (px_jstr(r, "summary") != NULL) set_str(o, "summary", px_jstr(r, "summary"));
  /* Anthropic adaptive thinking (on, no budget): the model's own effort,
   * with its reasoning shown (summaries, as Anthropic shows thinking);
   * Responses has no adaptive mode (the model reasons at its default
   * effort whatever the prompt), so the setting itself is declared */
  if (json_object_size(o) == 0 && json_is_true(json_object_get(r, "enabled"))) {
    set_str(o, "summary", "auto");
    px_lossy_add(lossy, px_in_names(ctx)->reasoning_config);
  }
  if (json_object_size(o) > 0)
    json_object_set_new(b, "reasoning", o);
  else
    json_decref(o);
}

static int encode_request(const px_tr_ctx_t *ctx, json_t *ir, json_t **body,
                          px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *b = json_object();
  json_t *input = json_array();
  int rc = PX_ENOMEM;
  if (b == NULL || input == NULL) goto fail;
  set_str(b, "model",
          ctx->upstream_model ? ctx->upstream_model
                              : (px_jstr(ir, "model") ? px_jstr(ir, "model") : ""));
  json_t *sys = json_object_get(ir, "system");
  if (json_array_size(sys) > 0 && instructions_out(sys, b, lossy) < 0) goto fail;
  rc = enc_messages(json_object_get(ir, "messages"), input, px_in_names(ctx), lossy, err);
  if (rc != 0) goto fail;
  json_object_set(b, "input", input);

  json_t *tools = json_object_get(ir, "tools");
  if (json_array_size(tools) > 0) tools_out(tools, b, lossy);
  json_t *tc = json_object_get(ir, "tool_choice");
  if (json_is_object(tc)) tool_choice_out(tc, tools, b);
  json_t *v;
  if ((v = json_object_get(ir, "parallel_tool_calls")) != NULL)
    json_object_set(b, "parallel_tool_calls", v);
  if ((v = json_object_get(ir, "max_tokens")) != NULL)
    json_object_set(b, "max_output_tokens", v);
  if ((v = json_object_get(ir, "temperature")) != NULL)
    json_object_set(b, "temperature", v);
  if ((v = json_object_get(ir, "top_p")) != NULL) json_object_set(b, "top_p", v);
  if (json_object_get(ir, "top_k") != NULL) px_lossy_add(lossy, "top_k");
  if (json_array_size(json_object_get(ir, "stop")) > 0)
    px_lossy_add(lossy, px_in_names(ctx)->stop);
  json_t *rf = json_object_get(ir, "response_format");
  json_t *verb = json_object_get(ir, "verbosity");
  if (json_is_object(rf) || json_is_string(verb)) {
    json_t *text = json_object();
    if (json_is_object(rf)) json_object_set_new(text, "format", json_deep_copy(rf));
    if (json_is_string(verb)) json_object_set(text, "verbosity", verb);
    json_object_set_new(b, "text", text);
  }
  if ((v = json_object_get(ir, "prompt_cache_key")) != NULL)
    json_object_set(b, "prompt_cache_key", v);
  json_t *r = json_object_get(ir, "reasoning");
  if (json_is_object(r)) reasoning_out(ctx, r, b, lossy);
  if ((v = json_object_get(ir, "user")) != NULL) json_object_set(b, "user", v);
  if ((v = json_object_get(ir, "metadata")) != NULL) json_object_set(b, "metadata", v);
  if ((v = json_object_get(ir, "stream")) != NULL) json_object_set(b, "stream", v);
  if ((v = json_object_get(ir, "previous_response_id")) != NULL)
    json_object_set(b, "previous_response_id", v);
  if (!px_tr_in_can(ctx, PX_CAP_STORED_RESPONSES)) {
    /* A client that cannot name a stored response (no previous_response_id)
     * makes the gateway stateless toward Responses: never store, and ask for
     * the encrypted reasoning whenever reasoning can occur, so the next turn
     * can replay it (Anthropic clients carry it as a pxo1:enc: tagged
     * thinking signature; Chat clients cannot hold it). */
    json_object_set_new(b, "store", json_false());
    if (reasoning_possible(b))
      json_object_set_new(b, "include", json_pack("[s]", "reasoning.encrypted_content"));
  }
  json_decref(input);
  *body = b;
  return 0;
fail:
  json_decref(b);
  json_decref(input);
  return rc < 0 ? rc : PX_EINVAL;
}

/* ---------------------------------------------------------------------- */
/* decode_response: Responses upstream body -> IR                          */

static int bad_gateway(px_tr_err_t *err, const char *fmt, const char *arg) {
  px_tr_fail(err, "", fmt, arg);
  if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
  return PX_EPROTO;
}

static int decode_response(const px_tr_ctx_t *ctx, json_t *body, json_t **ir,
                           px_lossy_t *lossy, px_tr_err_t *err) {
  if (!json_is_object(body) || !json_is_array(json_object_get(body, "output")))
    return bad_gateway(err, "upstream response has no output%s", "");
  const char *status = px_jstr(body, "status");
  if (status == NULL) status = "completed";
  json_t *error = json_object_get(body, "error");
  if (strcmp(status, "failed") == 0 && json_is_object(error)) {
    const char *msg = px_jstr(error, "message");
    return bad_gateway(err, "upstream response failed: %s", msg ? msg : "(no message)");
  }
  if (strcmp(status, "completed") != 0 && strcmp(status, "incomplete") != 0 &&
      strcmp(status, "failed") != 0)
    return bad_gateway(err, "upstream response is not finished (status %s)", status);
  json_t *out = json_object();
  json_t *content = json_array();
  if (out == NULL || content == NULL) goto nomem;
  set_str(out, "id", px_jstr(body, "id") ? px_jstr(body, "id") : "");
  if (px_jstr(body, "model") != NULL) set_str(out, "model", px_jstr(body, "model"));
  json_t *ca = json_object_get(body, "created_at");
  if (json_is_integer(ca)) json_object_set(out, "created", ca);
  int has_tool = 0;
  size_t i;
  json_t *it;
  json_array_foreach(json_object_get(body, "output"), i, it) {
    const char *type = px_jstr(it, "type");
    if (type == NULL) continue;
    if (strcmp(type, "message") == 0) {
      size_t j;
      json_t *p;
      json_array_foreach(json_object_get(it, "content"), j, p) {
        const char *pt = px_jstr(p, "type");
        if (pt == NULL) continue;
        if (strcmp(pt, "output_text") == 0) {
          json_t *tp = text_part(px_jstr(p, "text") ? px_jstr(p, "text") : "");
          json_t *ann = json_object_get(p, "annotations");
          if (json_array_size(ann) > 0) json_object_set(tp, "annotations", ann);
          if (json_array_size(json_object_get(p, "logprobs")) > 0)
            px_lossy_add(lossy, "output[].content[].logprobs");
          json_array_append_new(content, tp);
        } else if (strcmp(pt, "refusal") == 0) {
          json_array_append_new(
              content, json_pack("{s:s, s:s}", "type", "refusal", "text",
                                 px_jstr(p, "refusal") ? px_jstr(p, "refusal") : ""));
        } else {
          px_lossy_add(lossy, "output[].content[].other");
        }
      }
    } else if (strcmp(type, "function_call") == 0) {
      has_tool = 1;
      json_array_append_new(
          content, json_pack("{s:s, s:s, s:s, s:s}", "type", "tool_call", "id",
                             px_jstr(it, "call_id") ? px_jstr(it, "call_id") : "", "name",
                             px_jstr(it, "name") ? px_jstr(it, "name") : "", "arguments",
                             px_jstr(it, "arguments") ? px_jstr(it, "arguments") : ""));
      if (px_jstr(it, "namespace") != NULL) px_lossy_add(lossy, "output[].namespace");
    } else if (strcmp(type, "custom_tool_call") == 0 &&
               px_tr_in_can(ctx, PX_CAP_CUSTOM_TOOLS)) {
      /* for a client that has custom tools too */
      has_tool = 1;
      json_array_append_new(
          content, json_pack("{s:s, s:s, s:s, s:b, s:s}", "type", "tool_call", "id",
                             px_jstr(it, "call_id") ? px_jstr(it, "call_id") : "", "name",
                             px_jstr(it, "name") ? px_jstr(it, "name") : "", "custom", 1,
                             "input", px_jstr(it, "input") ? px_jstr(it, "input") : ""));
    } else if (strcmp(type, "reasoning") == 0) {
      px_buf_t b;
      px_buf_init(&b, 64u << 20);
      int rc = append_texts(&b, json_object_get(it, "content"), "reasoning_text");
      if (rc == 0 && b.len == 0)
        rc = append_texts(&b, json_object_get(it, "summary"), "summary_text");
      if (rc != 0) {
        px_buf_free(&b);
        goto nomem;
      }
      json_t *rp = json_pack("{s:s, s:s#}", "type", "reasoning", "text",
                             b.data ? b.data : "", b.len);
      px_buf_free(&b);
      if (rp == NULL) goto nomem;
      if (px_jstr(it, "encrypted_content") != NULL)
        set_str(rp, "encrypted_content", px_jstr(it, "encrypted_content"));
      if (px_jstr(it, "id") != NULL) set_str(rp, "id", px_jstr(it, "id"));
      json_array_append_new(content, rp);
    } else {
      px_responses_lossy_item(lossy, type);
    }
  }
  json_object_set_new(out, "content", content);
  content = NULL;
  const char *reason = px_jstr(json_object_get(body, "incomplete_details"), "reason");
  px_stop_t stop = px_stop_from_responses(status, reason, has_tool);
  set_str(out, "stop_reason", px_stop_name(stop));
  json_t *u = json_object_get(body, "usage");
  if (json_is_object(u)) {
    json_t *iu =
        json_pack("{s:I, s:I}", "input_tokens",
                  json_integer_value(json_object_get(u, "input_tokens")), "output_tokens",
                  json_integer_value(json_object_get(u, "output_tokens")));
    json_t *c =
        json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens");
    if (json_is_integer(c)) json_object_set(iu, "cache_read_tokens", c);
    json_t *r =
        json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens");
    if (json_is_integer(r)) json_object_set(iu, "reasoning_tokens", r);
    json_object_set_new(out, "usage", iu);
  }
  *ir = out;
  return 0;
nomem:
  json_decref(out);
  json_decref(content);
  return PX_ENOMEM;
}

/* ---------------------------------------------------------------------- */
/* encode_response: IR -> Responses client body                            */

static int encode_response(const px_tr_ctx_t *ctx, json_t *ir, json_t **body,
                           px_lossy_t *lossy, px_tr_err_t *err) {
  (void)err;
  const char *uid = px_jstr(ir, "id");
  char rid[160], mid[160], iid[200];
  if (ctx->resp_id != NULL)
    snprintf(rid, sizeof(rid), "%s", ctx->resp_id);
  else
    px_responses_resp_id(uid, rid, sizeof(rid));
  json_t *content = json_object_get(ir, "content");
  px_stop_t stop = px_stop_parse(px_jstr(ir, "stop_reason"));
  if (stop == PX_STOP_NONE) stop = PX_STOP_END_TURN;
  int has_refusal = 0;
  size_t i;
  json_t *p;
  json_array_foreach(content, i, p) {
    const char *t = px_jstr(p, "type");
    if (t != NULL && strcmp(t, "refusal") == 0) has_refusal = 1;
  }
  const char *reason = NULL;
  const char *status = px_stop_to_responses(stop, has_refusal, &reason);
  json_t *created = json_object_get(ir, "created");
  int64_t ts =
      json_is_integer(created) ? (int64_t)json_integer_value(created) : ctx->created;
  json_t *o = px_responses_object(ctx, rid, ts, status, reason);
  if (o == NULL) return PX_ENOMEM;
  json_t *output = json_object_get(o, "output");
  json_t *msg = NULL; /* current message item content */
  int nmsg = 0;
  const char *expl = px_jstr(ir, "refusal_explanation");
  json_array_foreach(content, i, p) {
    const char *t = px_jstr(p, "type");
    if (t == NULL) continue;
    int oi = (int)json_array_size(output);
    if (strcmp(t, "text") == 0 || strcmp(t, "refusal") == 0) {
      if (msg == NULL) {
        px_responses_msg_id(uid, nmsg++, mid, sizeof(mid));
        json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", mid, "type", "message",
                              "status", "completed", "role", "assistant", "content");
        json_array_append_new(output, m);
        msg = json_object_get(m, "content");
      }
      if (strcmp(t, "text") == 0) {
        json_t *ann = px_responses_annotations(json_object_get(p, "annotations"), lossy);
        json_array_append_new(
            msg,
            json_pack("{s:s, s:s, s:o}", "type", "output_text", "text",
                      px_jstr(p, "text") ? px_jstr(p, "text") : "", "annotations", ann));
      } else {
        json_array_append_new(msg,
                              json_pack("{s:s, s:s}", "type", "refusal", "refusal",
                                        px_jstr(p, "text") ? px_jstr(p, "text") : ""));
      }
      continue;
    }
    msg = NULL;
    if (strcmp(t, "tool_call") == 0 && json_is_true(json_object_get(p, "custom"))) {
      px_responses_ctc_id(uid, px_jstr(p, "id"), oi, iid, sizeof(iid));
      json_array_append_new(
          output, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", iid, "type",
                            "custom_tool_call", "status", "completed", "call_id",
                            px_jstr(p, "id") ? px_jstr(p, "id") : "", "name",
                            px_jstr(p, "name") ? px_jstr(p, "name") : "", "input",
                            px_jstr(p, "input") ? px_jstr(p, "input") : ""));
    } else if (strcmp(t, "tool_call") == 0) {
      px_responses_fc_id(uid, px_jstr(p, "id"), oi, iid, sizeof(iid));
      json_array_append_new(
          output, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", iid, "type",
                            "function_call", "status", "completed", "call_id",
                            px_jstr(p, "id") ? px_jstr(p, "id") : "", "name",
                            px_jstr(p, "name") ? px_jstr(p, "name") : "", "arguments",
                            px_jstr(p, "arguments") ? px_jstr(p, "arguments") : ""));
    } else if (strcmp(t, "reasoning") == 0) {
      px_responses_rs_id(uid, px_jstr(p, "id"), oi, iid, sizeof(iid));
      json_t *r =
          json_pack("{s:s, s:s, s:[]}", "id", iid, "type", "reasoning", "summary");
      const char *txt = px_jstr(p, "text");
      if (txt != NULL && *txt != 0)
        json_array_append_new(
            json_object_get(r, "summary"),
            json_pack("{s:s, s:s}", "type", "summary_text", "text", txt));
      json_t *enc = px_rtok_out(PX_PROTO_RESPONSES, p);
      if (enc != NULL) json_object_set_new(r, "encrypted_content", enc);
      json_array_append_new(output, r);
    }
  }
  if (px_stop_refused(stop) && expl != NULL) {
    if (!has_refusal) {
      /* an Anthropic refusal with no visible wording: the explanation is the
       * only wording there is */
      px_responses_msg_id(uid, nmsg++, mid, sizeof(mid));
      json_array_append_new(
          output, json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s}]}", "id", mid, "type",
                            "message", "status", "completed", "role", "assistant",
                            "content", "type", "refusal", "refusal", expl));
    } else {
      px_lossy_add(lossy, px_out_names(ctx)->refusal_explanation);
    }
  }
  json_t *u = json_object_get(ir, "usage");
  if (json_is_object(u)) {
    px_usage_t us = {
        .input_tokens = json_integer_value(json_object_get(u, "input_tokens")),
        .output_tokens = json_integer_value(json_object_get(u, "output_tokens")),
        .cache_read_tokens = json_integer_value(json_object_get(u, "cache_read_tokens")),
        .cache_creation_tokens = 0,
        .reasoning_tokens = json_integer_value(json_object_get(u, "reasoning_tokens")),
    };
    json_object_set_new(o, "usage", px_responses_usage(&us));
  }
  if (px_jstr(ir, "stop_sequence") != NULL) px_lossy_add(lossy, "stop_sequence");
  *body = o;
  return 0;
}

/* input_tokens takes the request minus generation controls */
static void responses_count_request(json_t *body, const char *model) {
  (void)model;
  json_object_del(body, "stream");
  json_object_del(body, "max_output_tokens");
  json_object_del(body, "stream_options");
}

/* The reference table (test/reference/ref.h). */
const px_ref_ops_t px_ref_responses = {decode_request, encode_request, decode_response,
                                       encode_response, responses_count_request};
