/* anthropic.c - Anthropic Messages translator: request/response <-> IR,
 * error bodies. The stream half lives in anthropic_stream.c.
 *
 * Decoders read what a real client (Claude Code) sends and never reject a
 * field it may send: what the IR cannot hold is dropped and named in the
 * lossy list. Encoders produce what api.anthropic.com accepts: required
 * max_tokens, alternating roles, tool results first in their user turn,
 * only signed thinking blocks, no temperature with thinking. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "ref.h"

/* Reasoning effort -> thinking budget_tokens (documented in
 * docs/translation-anthropic.md). Anthropic's minimum budget is 1024. */
#define PX_ANTH_MIN_BUDGET 1024
#define PX_ANTH_DEFAULT_MAX_TOKENS 4096

/* field path for error messages; truncation is harmless there */
static void pathf(char *p, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pathf(char *p, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p, n, fmt, ap);
  va_end(ap);
}

static int is_type(json_t *o, const char *t) {
  const char *s = px_jstr(o, "type");
  return s != NULL && strcmp(s, t) == 0;
}

static void set_new(json_t *o, const char *k, json_t *v) {
  if (v != NULL) json_object_set_new(o, k, v);
}

static json_t *text_part(const char *text) {
  return px_ir_text(text);
}

/* ======================================================================== */
/* Request decode: Anthropic body -> IR                                      */

/* An Anthropic block type that records a server-side tool's work (history
 * of server tools, MCP connector, code execution ...): it cannot be replayed
 * to another provider, so it is dropped and named. */
static int server_use_type(const char *t) {
  return strcmp(t, "server_tool_use") == 0 || strcmp(t, "mcp_tool_use") == 0;
}
static int server_result_type(const char *t) {
  size_t n = strlen(t);
  if (strcmp(t, "tool_result") == 0) return 0;
  if (strcmp(t, "mcp_tool_result") == 0) return 1;
  return n > 12 && strcmp(t + n - 12, "_tool_result") == 0;
}

/* image/document source -> IR part fields. Returns 0 or fails. */
static int decode_image(json_t *blk, const char *path, json_t **out, px_tr_err_t *err) {
  json_t *src = json_object_get(blk, "source");
  char p[96];
  pathf(p, sizeof(p), "%s.source", path);
  if (!json_is_object(src)) return px_tr_fail(err, p, "%s: missing image source", p);
  const char *st = px_jstr(src, "type");
  if (st != NULL && strcmp(st, "base64") == 0) {
    const char *mt = px_jstr(src, "media_type"), *data = px_jstr(src, "data");
    if (mt == NULL || data == NULL)
      return px_tr_fail(err, p, "%s: base64 image needs media_type and data", p);
    *out = json_pack("{s:s,s:s,s:s}", "type", "image", "media_type", mt, "data", data);
    return 0;
  }
  if (st != NULL && strcmp(st, "url") == 0 && px_jstr(src, "url") != NULL) {
    *out = json_pack("{s:s,s:s}", "type", "image", "url", px_jstr(src, "url"));
    return 0;
  }
  pathf(p, sizeof(p), "%s.source.type", path);
  return px_tr_fail(err, p, "%s: image source type '%s' cannot be translated", p,
                    st ? st : "(none)");
}

/* document block -> appends IR parts (file, or text for text sources). */
static int decode_document(json_t *blk, const char *path, json_t *parts,
                           px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *src = json_object_get(blk, "source");
  char p[96];
  pathf(p, sizeof(p), "%s.source", path);
  if (!json_is_object(src)) return px_tr_fail(err, p, "%s: missing document source", p);
  const char *st = px_jstr(src, "type");
  const char *title = px_jstr(blk, "title");
  if (json_object_get(blk, "context") != NULL)
    px_lossy_add(lossy, "messages[].content[].context");
  if (json_object_get(blk, "citations") != NULL)
    px_lossy_add(lossy, "messages[].content[].citations");
  if (json_object_get(blk, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
  if (st != NULL && strcmp(st, "base64") == 0) {
    const char *mt = px_jstr(src, "media_type"), *data = px_jstr(src, "data");
    if (mt == NULL || data == NULL)
      return px_tr_fail(err, p, "%s: base64 document needs media_type and data", p);
    json_t *f =
        json_pack("{s:s,s:s,s:s}", "type", "file", "media_type", mt, "data", data);
    if (title != NULL) json_object_set_new(f, "filename", json_string(title));
    json_array_append_new(parts, f);
    return 0;
  }
  if (st != NULL && strcmp(st, "url") == 0 && px_jstr(src, "url") != NULL) {
    json_array_append_new(
        parts, json_pack("{s:s,s:s}", "type", "file", "url", px_jstr(src, "url")));
    if (title != NULL) px_lossy_add(lossy, "messages[].content[].title");
    return 0;
  }
  if (st != NULL && strcmp(st, "file") == 0 && px_jstr(src, "file_id") != NULL) {
    json_array_append_new(parts, json_pack("{s:s,s:s}", "type", "file", "file_id",
                                           px_jstr(src, "file_id")));
    if (title != NULL) px_lossy_add(lossy, "messages[].content[].title");
    return 0;
  }
  /* plain-text documents become text parts: the words are the content */
  if (st != NULL && strcmp(st, "text") == 0 && px_jstr(src, "data") != NULL) {
    json_array_append_new(parts, text_part(px_jstr(src, "data")));
    if (title != NULL) px_lossy_add(lossy, "messages[].content[].title");
    return 0;
  }
  if (st != NULL && strcmp(st, "content") == 0) {
    json_t *c = json_object_get(src, "content");
    if (json_is_string(c)) {
      json_array_append_new(parts, text_part(json_string_value(c)));
    } else if (json_is_array(c)) {
      size_t i;
      json_t *b;
      json_array_foreach(c, i, b) {
        if (is_type(b, "text") && px_jstr(b, "text") != NULL) {
          json_array_append_new(parts, text_part(px_jstr(b, "text")));
        } else if (is_type(b, "image")) {
          char q[96];
          json_t *img = NULL;
          pathf(q, sizeof(q), "%s.source.content[%zu]", path, i);
          if (decode_image(b, q, &img, err) < 0) return PX_EINVAL;
          json_array_append_new(parts, img);
        } else {
          pathf(p, sizeof(p), "%s.source.content[%zu].type", path, i);
          return px_tr_fail(err, p, "%s: unsupported document content block", p);
        }
      }
    }
    if (title != NULL) px_lossy_add(lossy, "messages[].content[].title");
    return 0;
  }
  pathf(p, sizeof(p), "%s.source.type", path);
  return px_tr_fail(err, p, "%s: document source type '%s' cannot be translated", p,
                    st ? st : "(none)");
}

/* search_result block (RAG content with a source) -> its text as text parts;
 * the source/title/citation metadata has no IR slot. */
static void decode_search_result(json_t *b, json_t *parts, px_lossy_t *lossy) {
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(b, "content"), i, c) {
    if (px_jstr(c, "text") != NULL)
      json_array_append_new(parts, text_part(px_jstr(c, "text")));
  }
  px_lossy_add(lossy, "messages[].content[].search_result");
}

/* tool_result.content (string or blocks) -> IR parts */
static int decode_tool_result_content(json_t *c, const char *path, json_t *parts,
                                      px_lossy_t *lossy, px_tr_err_t *err) {
  char p[96];
  if (c == NULL || json_is_null(c)) return 0;
  if (json_is_string(c)) {
    json_array_append_new(parts, text_part(json_string_value(c)));
    return 0;
  }
  if (!json_is_array(c)) {
    pathf(p, sizeof(p), "%s.content", path);
    return px_tr_fail(err, p, "%s: must be a string or an array of blocks", p);
  }
  size_t i;
  json_t *b;
  json_array_foreach(c, i, b) {
    const char *t = px_jstr(b, "type");
    pathf(p, sizeof(p), "%s.content[%zu]", path, i);
    if (t != NULL && strcmp(t, "text") == 0 && px_jstr(b, "text") != NULL) {
      json_array_append_new(parts, text_part(px_jstr(b, "text")));
      if (json_object_get(b, "citations") != NULL)
        px_lossy_add(lossy, "messages[].content[].citations");
    } else if (t != NULL && strcmp(t, "image") == 0) {
      json_t *img = NULL;
      if (decode_image(b, p, &img, err) < 0) return PX_EINVAL;
      json_array_append_new(parts, img);
    } else if (t != NULL && strcmp(t, "document") == 0) {
      if (decode_document(b, p, parts, lossy, err) < 0) return PX_EINVAL;
    } else if (t != NULL && strcmp(t, "search_result") == 0) {
      decode_search_result(b, parts, lossy);
    } else if (t != NULL && strcmp(t, "tool_reference") == 0) {
      /* tool search: "this deferred tool is now loaded"; every tool is
       * always loaded at the target, so nothing is lost but the marker */
      px_lossy_add(lossy, "messages[].content[].content[].tool_reference");
    } else {
      char q[112];
      pathf(q, sizeof(q), "%s.type", p);
      return px_tr_fail(err, q, "%s: tool_result content type '%s' is not supported", q,
                        t ? t : "(none)");
    }
    if (json_object_get(b, "cache_control") != NULL && t != NULL &&
        strcmp(t, "document") != 0)
      px_lossy_add(lossy, "cache_control");
  }
  return 0;
}

/* tool_use block (assistant turns) -> IR tool_call */
static int decode_tool_use(json_t *b, int assistant, const char *path, json_t *parts,
                           px_lossy_t *lossy, px_tr_err_t *err) {
  char p[96];
  pathf(p, sizeof(p), "%s.type", path);
  const char *id = px_jstr(b, "id"), *name = px_jstr(b, "name");
  json_t *input = json_object_get(b, "input");
  if (!assistant) return px_tr_fail(err, p, "%s: tool_use only in assistant turns", p);
  if (id == NULL || name == NULL) {
    pathf(p, sizeof(p), "%s.id", path);
    return px_tr_fail(err, p, "%s: tool_use needs id and name", p);
  }
  char *args =
      input != NULL ? px_jdoc_dump(input, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{}");
  if (args == NULL) return PX_ENOMEM;
  json_array_append_new(parts, json_pack("{s:s,s:s,s:s,s:s}", "type", "tool_call", "id",
                                         id, "name", name, "arguments", args));
  free(args);
  if (json_object_get(b, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
  return 0;
}

/* tool_result block (user turns) -> IR tool_result */
static int decode_tool_result(json_t *b, int assistant, const char *path, json_t *parts,
                              px_lossy_t *lossy, px_tr_err_t *err) {
  char p[96];
  pathf(p, sizeof(p), "%s.type", path);
  const char *id = px_jstr(b, "tool_use_id");
  if (assistant) return px_tr_fail(err, p, "%s: tool_result only in user turns", p);
  if (id == NULL) {
    pathf(p, sizeof(p), "%s.tool_use_id", path);
    return px_tr_fail(err, p, "%s: tool_result needs tool_use_id", p);
  }
  json_t *content = json_array();
  if (decode_tool_result_content(json_object_get(b, "content"), path, content, lossy,
                                 err) < 0) {
    json_decref(content);
    return PX_EINVAL;
  }
  json_t *part = json_pack("{s:s,s:s,s:o}", "type", "tool_result", "tool_call_id", id,
                           "content", content);
  json_t *ie = json_object_get(b, "is_error");
  if (json_is_boolean(ie)) json_object_set(part, "is_error", ie);
  if (json_object_get(b, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
  json_array_append_new(parts, part);
  return 0;
}

/* thinking block -> IR reasoning (its signature back to its family's field) */
static int decode_thinking_block(json_t *b, json_t *parts) {
  const char *sig = px_jstr(b, "signature");
  json_t *part = json_pack("{s:s,s:s}", "type", "reasoning", "text",
                           px_jstr(b, "thinking") ? px_jstr(b, "thinking") : "");
  if (part == NULL) return PX_ENOMEM;
  /* a signature proxai tagged with another family (OpenAI encrypted_content,
   * a Gemini thoughtSignature) goes back to its field; any other signature
   * is Anthropic's own */
  if (px_rtok_in(PX_PROTO_ANTHROPIC, part, sig) < 0) {
    json_decref(part);
    return PX_ENOMEM;
  }
  json_array_append_new(parts, part);
  return 0;
}

/* One content block of a messages[] entry -> 0..n IR parts. */
static int decode_block(json_t *b, const char *role, const char *path, json_t *parts,
                        px_lossy_t *lossy, px_tr_err_t *err) {
  const char *t = px_jstr(b, "type");
  char p[96];
  pathf(p, sizeof(p), "%s.type", path);
  if (t == NULL) return px_tr_fail(err, p, "%s: content block without a type", p);
  int assistant = strcmp(role, "assistant") == 0;

  if (strcmp(t, "text") == 0) {
    const char *text = px_jstr(b, "text");
    if (text == NULL) {
      pathf(p, sizeof(p), "%s.text", path);
      return px_tr_fail(err, p, "%s: text block without text", p);
    }
    json_t *part = text_part(text);
    json_t *cc = json_object_get(b, "cache_control");
    if (cc != NULL) json_object_set(part, "cache_control", cc);
    if (json_object_get(b, "citations") != NULL &&
        !json_is_null(json_object_get(b, "citations")))
      px_lossy_add(lossy, "messages[].content[].citations");
    json_array_append_new(parts, part);
    return 0;
  }
  if (strcmp(t, "image") == 0) {
    json_t *img = NULL;
    if (decode_image(b, path, &img, err) < 0) return PX_EINVAL;
    if (json_object_get(b, "cache_control") != NULL) px_lossy_add(lossy, "cache_control");
    json_array_append_new(parts, img);
    return 0;
  }
  if (strcmp(t, "document") == 0) return decode_document(b, path, parts, lossy, err);
  if (strcmp(t, "search_result") == 0) {
    decode_search_result(b, parts, lossy);
    return 0;
  }
  if (strcmp(t, "tool_use") == 0)
    return decode_tool_use(b, assistant, path, parts, lossy, err);
  if (strcmp(t, "tool_result") == 0)
    return decode_tool_result(b, assistant, path, parts, lossy, err);
  if (strcmp(t, "thinking") == 0) return decode_thinking_block(b, parts);
  if (strcmp(t, "redacted_thinking") == 0) {
    json_array_append_new(
        parts, json_pack("{s:s,s:s,s:s}", "type", "reasoning", "text", "",
                         "redacted_data", px_jstr(b, "data") ? px_jstr(b, "data") : ""));
    return 0;
  }
  if (server_use_type(t)) {
    px_lossy_add(lossy, "messages[].content[].server_tool_use");
    return 0;
  }
  if (server_result_type(t)) {
    px_lossy_add(lossy, "messages[].content[].server_tool_result");
    return 0;
  }
  return px_tr_fail(err, p, "%s: content block type '%s' cannot be translated", p, t);
}

/* system (string | text blocks) -> IR system parts */
static int decode_system(json_t *sys, const char *path, json_t *out, px_lossy_t *lossy,
                         px_tr_err_t *err) {
  char p[96];
  if (json_is_string(sys)) {
    if (json_string_length(sys) > 0)
      json_array_append_new(
          out, json_pack("{s:s,s:O,s:s}", "type", "text", "text", sys, "role", "system"));
    return 0;
  }
  if (!json_is_array(sys))
    return px_tr_fail(err, path, "%s: must be a string or an array of text blocks", path);
  size_t i;
  json_t *b;
  json_array_foreach(sys, i, b) {
    pathf(p, sizeof(p), "%s[%zu].type", path, i);
    if (!is_type(b, "text") || px_jstr(b, "text") == NULL)
      return px_tr_fail(err, p, "%s: system blocks must be text", p);
    json_t *part = json_pack("{s:s,s:s,s:s}", "type", "text", "text", px_jstr(b, "text"),
                             "role", "system");
    json_t *cc = json_object_get(b, "cache_control");
    if (cc != NULL) json_object_set(part, "cache_control", cc);
    if (json_object_get(b, "citations") != NULL &&
        !json_is_null(json_object_get(b, "citations")))
      px_lossy_add(lossy, "messages[].content[].citations");
    json_array_append_new(out, part);
  }
  return 0;
}

/* Whether the last IR turn is an assistant turn with tool calls. */
static int after_tool_calls(json_t *ir_msgs) {
  json_t *last = json_array_get(ir_msgs, json_array_size(ir_msgs) - 1);
  const char *r = px_jstr(last, "role");
  if (r == NULL || strcmp(r, "assistant") != 0) return 0;
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(last, "content"), i, p) {
    if (is_type(p, "tool_call")) return 1;
  }
  return 0;
}

static int decode_messages(json_t *msgs, json_t *ir_msgs, json_t *ir_sys,
                           px_lossy_t *lossy, px_tr_err_t *err) {
  char p[96];
  if (!json_is_array(msgs))
    return px_tr_fail(err, "messages", "messages: must be an array");
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    const char *role = px_jstr(m, "role");
    json_t *c = json_object_get(m, "content");
    pathf(p, sizeof(p), "messages[%zu].role", i);
    if (role == NULL) return px_tr_fail(err, p, "%s: missing role", p);
    if (strcmp(role, "system") == 0) {
      /* some clients put a system turn in messages[]: before any turn it
       * joins system; later (Claude Code's mid-conversation reminders) it
       * keeps its place as a user turn marked system_note, which the
       * OpenAI encoders send as a system message where it was and the
       * Anthropic encoder as user text */
      pathf(p, sizeof(p), "messages[%zu].content", i);
      /* (also folded right after tool calls: their results must follow
       * them directly in the OpenAI protocols) */
      if (json_array_size(ir_msgs) == 0 || after_tool_calls(ir_msgs)) {
        if (decode_system(c, p, ir_sys, lossy, err) < 0) return PX_EINVAL;
        continue;
      }
      json_t *note = json_array();
      if (decode_system(c, p, note, lossy, err) < 0) {
        json_decref(note);
        return PX_EINVAL;
      }
      size_t k;
      json_t *np;
      json_array_foreach(note, k, np) json_object_del(np, "role");
      if (json_array_size(note) > 0)
        json_array_append_new(ir_msgs, json_pack("{s:s,s:o,s:b}", "role", "user",
                                                 "content", note, "system_note", 1));
      else
        json_decref(note);
      continue;
    }
    if (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)
      return px_tr_fail(err, p, "%s: role '%s' is not supported", p, role);
    json_t *parts = json_array();
    if (json_is_string(c)) {
      json_array_append_new(parts, text_part(json_string_value(c)));
    } else if (json_is_array(c)) {
      size_t j;
      json_t *b;
      json_array_foreach(c, j, b) {
        pathf(p, sizeof(p), "messages[%zu].content[%zu]", i, j);
        if (decode_block(b, role, p, parts, lossy, err) < 0) {
          json_decref(parts);
          return PX_EINVAL;
        }
      }
    } else {
      json_decref(parts);
      pathf(p, sizeof(p), "messages[%zu].content", i);
      return px_tr_fail(err, p, "%s: must be a string or an array of blocks", p);
    }
    json_array_append_new(ir_msgs,
                          json_pack("{s:s,s:o}", "role", role, "content", parts));
  }
  return 0;
}

static int decode_tools(json_t *tools, json_t **out, px_lossy_t *lossy,
                        px_tr_err_t *err) {
  char p[96];
  if (!json_is_array(tools)) return px_tr_fail(err, "tools", "tools: must be an array");
  json_t *arr = json_array();
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *type = px_jstr(t, "type");
    if (type != NULL && strcmp(type, "custom") != 0) {
      /* server tools (web_search_*, bash_*, text_editor_*, code_execution_*,
       * computer_*, web_fetch_*, memory_*, ...) run at Anthropic only */
      px_lossy_add(lossy, "tools[].server_tool");
      continue;
    }
    const char *name = px_jstr(t, "name");
    if (name == NULL) {
      json_decref(arr);
      pathf(p, sizeof(p), "tools[%zu].name", i);
      return px_tr_fail(err, p, "%s: missing tool name", p);
    }
    json_t *schema = json_object_get(t, "input_schema");
    json_t *o = json_pack("{s:s}", "name", name);
    if (px_jstr(t, "description") != NULL)
      json_object_set(o, "description", json_object_get(t, "description"));
    json_object_set_new(o, "parameters",
                        json_is_object(schema) ? json_incref(schema)
                                               : json_pack("{s:s}", "type", "object"));
    if (json_is_boolean(json_object_get(t, "strict")))
      json_object_set(o, "strict", json_object_get(t, "strict"));
    if (json_object_get(t, "cache_control") != NULL)
      json_object_set(o, "cache_control", json_object_get(t, "cache_control"));
    const char *k;
    json_t *v;
    json_object_foreach(t, k, v) {
      if (strcmp(k, "type") == 0 || strcmp(k, "name") == 0 ||
          strcmp(k, "description") == 0 || strcmp(k, "input_schema") == 0 ||
          strcmp(k, "strict") == 0 || strcmp(k, "cache_control") == 0)
        continue;
      if (strcmp(k, "defer_loading") == 0)
        px_lossy_add(lossy, "tools[].defer_loading");
      else if (strcmp(k, "input_examples") == 0)
        px_lossy_add(lossy, "tools[].input_examples");
      else if (strcmp(k, "eager_input_streaming") == 0)
        px_lossy_add(lossy, "tools[].eager_input_streaming");
      else if (strcmp(k, "allowed_callers") == 0)
        px_lossy_add(lossy, "tools[].allowed_callers");
      else
        px_lossy_add(lossy, "tools[].unknown_field");
    }
    json_array_append_new(arr, o);
  }
  *out = arr;
  return 0;
}

static int decode_tool_choice(json_t *tc, json_t *ir, px_tr_err_t *err) {
  const char *t = px_jstr(tc, "type");
  if (t == NULL) return px_tr_fail(err, "tool_choice.type", "tool_choice.type: missing");
  if (strcmp(t, "auto") == 0)
    json_object_set_new(ir, "tool_choice", json_pack("{s:s}", "type", "auto"));
  else if (strcmp(t, "any") == 0)
    json_object_set_new(ir, "tool_choice", json_pack("{s:s}", "type", "required"));
  else if (strcmp(t, "none") == 0)
    json_object_set_new(ir, "tool_choice", json_pack("{s:s}", "type", "none"));
  else if (strcmp(t, "tool") == 0 && px_jstr(tc, "name") != NULL)
    json_object_set_new(
        ir, "tool_choice",
        json_pack("{s:s,s:s}", "type", "tool", "name", px_jstr(tc, "name")));
  else
    return px_tr_fail(err, "tool_choice.type", "tool_choice.type: '%s' is not supported",
                      t);
  if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
    json_object_set_new(ir, "parallel_tool_calls", json_false());
  return 0;
}

/* Anthropic effort -> IR effort */
static const char *effort_from_anthropic(const char *e) {
  if (e == NULL) return NULL;
  if (strcmp(e, "max") == 0 || strcmp(e, "xhigh") == 0) return "xhigh";
  if (strcmp(e, "low") == 0 || strcmp(e, "medium") == 0 || strcmp(e, "high") == 0)
    return e;
  return NULL;
}

static int decode_json_format(json_t *fmt, const char *path, json_t *ir,
                              px_tr_err_t *err) {
  char p[96];
  pathf(p, sizeof(p), "%s.type", path);
  if (!is_type(fmt, "json_schema"))
    return px_tr_fail(err, p, "%s: only json_schema output formats are supported", p);
  json_t *schema = json_object_get(fmt, "schema");
  if (!json_is_object(schema)) {
    pathf(p, sizeof(p), "%s.schema", path);
    return px_tr_fail(err, p, "%s: must be an object", p);
  }
  /* OpenAI requires a schema name; Anthropic has none */
  json_object_set_new(ir, "response_format",
                      json_pack("{s:s,s:s,s:O}", "type", "json_schema", "name",
                                "response", "schema", schema));
  return 0;
}

/* The IR reasoning object, made when absent. */
static json_t *reasoning_of(json_t *ir) {
  json_t *r = json_object_get(ir, "reasoning");
  if (r == NULL) {
    r = json_object();
    json_object_set_new(ir, "reasoning", r);
  }
  return r;
}

/* thinking {type, budget_tokens, display} -> IR reasoning */
static int decode_thinking(json_t *v, json_t *ir, px_lossy_t *lossy, px_tr_err_t *err) {
  const char *t = px_jstr(v, "type");
  json_t *r = reasoning_of(ir);
  if (t != NULL && strcmp(t, "enabled") == 0) {
    json_t *b = json_object_get(v, "budget_tokens");
    json_object_set_new(r, "enabled", json_true());
    if (json_is_integer(b)) {
      json_object_set(r, "budget_tokens", b);
      if (json_object_get(r, "effort") == NULL)
        json_object_set_new(r, "effort",
                            json_string(px_effort_of_budget(json_integer_value(b))));
    }
  } else if (t != NULL && strcmp(t, "adaptive") == 0) {
    json_object_set_new(r, "enabled", json_true());
  } else if (t != NULL && strcmp(t, "disabled") == 0) {
    json_object_set_new(r, "enabled", json_false());
  } else {
    px_tr_fail(err, "thinking.type", "thinking.type: '%s' is not supported",
               t ? t : "(none)");
    return PX_EINVAL;
  }
  if (json_object_get(v, "display") != NULL) px_lossy_add(lossy, "thinking.display");
  return 0;
}

/* output_config {effort, format} -> IR reasoning effort, response_format */
static int decode_output_config(json_t *v, json_t *ir, px_lossy_t *lossy,
                                px_tr_err_t *err) {
  const char *ok;
  json_t *ov;
  json_object_foreach(v, ok, ov) {
    if (json_is_null(ov)) continue;
    if (strcmp(ok, "effort") == 0) {
      const char *e = effort_from_anthropic(json_string_value(ov));
      if (e == NULL) {
        px_tr_fail(err, "output_config.effort", "output_config.effort: unknown value");
        return PX_EINVAL;
      }
      json_t *r = reasoning_of(ir);
      /* the explicit effort wins over one derived from budget_tokens */
      json_object_set_new(r, "effort", json_string(e));
    } else if (strcmp(ok, "format") == 0) {
      if (decode_json_format(ov, "output_config.format", ir, err) < 0) return PX_EINVAL;
    } else {
      px_lossy_add(lossy, "output_config");
    }
  }
  return 0;
}

/* A sampling field (max_tokens, temperature, top_p, top_k, stop_sequences,
 * stream) -> IR: 0, <0 when invalid, 1 when k is not one of them. */
static int decode_sampling(const char *k, json_t *v, json_t *ir, px_tr_err_t *err) {
  if (strcmp(k, "max_tokens") == 0) {
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
      px_tr_fail(err, "max_tokens", "max_tokens: must be a positive integer");
      return PX_EINVAL;
    }
    if (json_integer_value(v) > PX_TOKENS_MAX)
      return px_tr_fail(err, "max_tokens",
                        "max_tokens: must be a positive integer of at most 18 digits");
    json_object_set(ir, "max_tokens", v);
  } else if (strcmp(k, "temperature") == 0 || strcmp(k, "top_p") == 0) {
    if (!json_is_number(v)) {
      px_tr_fail(err, k, "%s: must be a number", k);
      return PX_EINVAL;
    }
    json_object_set(ir, k, v);
  } else if (strcmp(k, "top_k") == 0) {
    if (!json_is_integer(v)) {
      px_tr_fail(err, "top_k", "top_k: must be an integer");
      return PX_EINVAL;
    }
    json_object_set(ir, "top_k", v);
  } else if (strcmp(k, "stop_sequences") == 0) {
    if (!json_is_array(v)) {
      px_tr_fail(err, "stop_sequences", "stop_sequences: must be an array of strings");
      return PX_EINVAL;
    }
    if (json_array_size(v) > 0) json_object_set(ir, "stop", v);
  } else if (strcmp(k, "stream") == 0) {
    json_object_set_new(ir, "stream", json_boolean(json_is_true(v)));
  } else {
    return 1;
  }
  return 0;
}

static int anth_decode_request(const px_tr_ctx_t *ctx, json_t *body, json_t **irp,
                               px_lossy_t *lossy, px_tr_err_t *err) {
  (void)ctx;
  if (!json_is_object(body))
    return px_tr_fail(err, "", "request body must be a JSON object");
  json_t *ir = json_object();
  json_t *sys = json_array(), *msgs = json_array();
  json_t *v;
  const char *k;
  int rc;

  if (px_jstr(body, "model") != NULL)
    json_object_set(ir, "model", json_object_get(body, "model"));
  v = json_object_get(body, "system");
  if (v != NULL && !json_is_null(v) && decode_system(v, "system", sys, lossy, err) < 0)
    goto fail;
  if (decode_messages(json_object_get(body, "messages"), msgs, sys, lossy, err) < 0)
    goto fail;

  json_object_foreach(body, k, v) {
    if (json_is_null(v)) continue;
    if (strcmp(k, "model") == 0 || strcmp(k, "system") == 0 ||
        strcmp(k, "messages") == 0) {
      continue;
    } else if ((rc = decode_sampling(k, v, ir, err)) <= 0) {
      if (rc < 0) goto fail;
    } else if (strcmp(k, "tools") == 0) {
      json_t *tools = NULL;
      if (decode_tools(v, &tools, lossy, err) < 0) goto fail;
      if (json_array_size(tools) > 0)
        json_object_set_new(ir, "tools", tools);
      else
        json_decref(tools);
    } else if (strcmp(k, "tool_choice") == 0) {
      if (decode_tool_choice(v, ir, err) < 0) goto fail;
    } else if (strcmp(k, "thinking") == 0) {
      if (decode_thinking(v, ir, lossy, err) < 0) goto fail;
    } else if (strcmp(k, "output_config") == 0) {
      if (decode_output_config(v, ir, lossy, err) < 0) goto fail;
    } else if (strcmp(k, "output_format") == 0) {
      if (decode_json_format(v, "output_format", ir, err) < 0) goto fail;
    } else if (strcmp(k, "metadata") == 0) {
      const char *mk;
      json_t *mv;
      json_object_foreach(v, mk, mv) {
        if (strcmp(mk, "user_id") == 0 && json_is_string(mv))
          json_object_set(ir, "user", mv);
        else if (!json_is_null(mv))
          px_lossy_add(lossy, "metadata");
      }
    } else if (strcmp(k, "context_management") == 0) {
      px_lossy_add(lossy, "context_management");
    } else if (strcmp(k, "service_tier") == 0) {
      px_lossy_add(lossy, "service_tier");
    } else if (strcmp(k, "container") == 0) {
      px_lossy_add(lossy, "container");
    } else if (strcmp(k, "mcp_servers") == 0) {
      px_lossy_add(lossy, "mcp_servers");
    } else if (strcmp(k, "inference_geo") == 0) {
      px_lossy_add(lossy, "inference_geo");
    } else {
      /* unknown top-level field: dropped, named by its own key */
      px_lossy_add(lossy, k);
    }
  }
  /* a thinking budget without an explicit effort keeps the derived one;
   * adaptive thinking without effort leaves the choice to the target */
  if (json_array_size(sys) > 0)
    json_object_set_new(ir, "system", sys);
  else
    json_decref(sys);
  json_object_set_new(ir, "messages", msgs);
  *irp = ir;
  return 0;
fail:
  json_decref(sys);
  json_decref(msgs);
  json_decref(ir);
  return PX_EINVAL;
}

/* ======================================================================== */
/* Request encode: IR -> Anthropic body                                      */

static int encode_image(json_t *part, json_t **out, px_tr_err_t *err) {
  const char *url = px_jstr(part, "url");
  if (url != NULL) {
    char mt[64];
    const char *data;
    if (px_data_url_split(url, mt, sizeof(mt), &data) == 0)
      *out = json_pack("{s:s,s:{s:s,s:s,s:s}}", "type", "image", "source", "type",
                       "base64", "media_type", mt, "data", data);
    else
      *out = json_pack("{s:s,s:{s:s,s:s}}", "type", "image", "source", "type", "url",
                       "url", url);
    return 0;
  }
  if (px_jstr(part, "data") != NULL && px_jstr(part, "media_type") != NULL) {
    *out = json_pack("{s:s,s:{s:s,s:s,s:s}}", "type", "image", "source", "type", "base64",
                     "media_type", px_jstr(part, "media_type"), "data",
                     px_jstr(part, "data"));
    return 0;
  }
  return px_tr_fail(err, "image", "image part without url or data");
}

static int encode_file(json_t *part, json_t **out, px_tr_err_t *err) {
  const char *url = px_jstr(part, "url"), *mt = px_jstr(part, "media_type");
  const char *data = px_jstr(part, "data"), *fname = px_jstr(part, "filename");
  char dmt[64];
  if (url != NULL && px_data_url_split(url, dmt, sizeof(dmt), &data) == 0) {
    mt = dmt;
    url = NULL;
  }
  if (url != NULL) {
    *out = json_pack("{s:s,s:{s:s,s:s}}", "type", "document", "source", "type", "url",
                     "url", url);
  } else if (data != NULL && mt != NULL && strcmp(mt, "application/pdf") == 0) {
    *out = json_pack("{s:s,s:{s:s,s:s,s:s}}", "type", "document", "source", "type",
                     "base64", "media_type", mt, "data", data);
  } else if (px_jstr(part, "file_id") != NULL) {
    return px_tr_fail(err, "file_id",
                      "file_id: uploaded file references cannot be sent to an Anthropic "
                      "upstream; send the file data");
  } else {
    return px_tr_fail(err, "file",
                      "file: only PDF data or URLs can be sent to an Anthropic "
                      "upstream (got %s)",
                      mt ? mt : "no media type");
  }
  if (fname != NULL) json_object_set_new(*out, "title", json_string(fname));
  return 0;
}

/* tool_result content parts -> string (one text part) or blocks */
static int encode_tool_result(json_t *part, json_t **out, px_tr_err_t *err) {
  json_t *c = json_object_get(part, "content");
  json_t *blk =
      json_pack("{s:s,s:s}", "type", "tool_result", "tool_use_id",
                px_jstr(part, "tool_call_id") ? px_jstr(part, "tool_call_id") : "");
  if (json_array_size(c) == 1 && is_type(json_array_get(c, 0), "text")) {
    json_object_set(blk, "content", json_object_get(json_array_get(c, 0), "text"));
  } else if (json_array_size(c) > 0) {
    json_t *arr = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
      json_t *o = NULL;
      if (is_type(p, "text")) {
        if (px_jstr(p, "text") == NULL || px_jstr(p, "text")[0] == 0) continue;
        o = text_part(px_jstr(p, "text"));
      } else if (is_type(p, "image")) {
        if (encode_image(p, &o, err) < 0) goto fail;
      } else if (is_type(p, "file")) {
        if (encode_file(p, &o, err) < 0) goto fail;
      } else {
        px_tr_fail(err, "tool_result.content", "tool_result.content: unsupported part");
        goto fail;
      }
      json_array_append_new(arr, o);
      continue;
    fail:
      json_decref(arr);
      json_decref(blk);
      return PX_EINVAL;
    }
    json_object_set_new(blk, "content", arr);
  }
  if (json_is_true(json_object_get(part, "is_error")))
    json_object_set_new(blk, "is_error", json_true());
  *out = blk;
  return 0;
}

/* IR part -> Anthropic block (NULL *out = dropped). */
static int encode_part(const px_tr_ctx_t *ctx, json_t *part, const char *role,
                       json_t **out, px_lossy_t *lossy, px_tr_err_t *err) {
  const char *t = px_jstr(part, "type");
  *out = NULL;
  if (t == NULL) return px_tr_fail(err, "content", "content part without type");
  if (strcmp(t, "text") == 0) {
    const char *text = px_jstr(part, "text");
    if (text == NULL || text[0] == 0) return 0; /* Anthropic rejects empty text blocks */
    *out = text_part(text);
    if (json_object_get(part, "cache_control") != NULL)
      json_object_set(*out, "cache_control", json_object_get(part, "cache_control"));
    return 0;
  }
  if (strcmp(t, "refusal") == 0) {
    /* no refusal block in Anthropic: the wording stays as assistant text */
    px_lossy_add(lossy, px_in_names(ctx)->refusal);
    if (px_jstr(part, "text") != NULL && px_jstr(part, "text")[0] != 0)
      *out = text_part(px_jstr(part, "text"));
    return 0;
  }
  if (strcmp(t, "image") == 0) return encode_image(part, out, err);
  if (strcmp(t, "file") == 0) return encode_file(part, out, err);
  if (strcmp(t, "reasoning") == 0) {
    if (strcmp(role, "assistant") != 0) return 0;
    if (px_jstr(part, "redacted_data") != NULL) {
      *out = json_pack("{s:s,s:s}", "type", "redacted_thinking", "data",
                       px_jstr(part, "redacted_data"));
    } else if (px_jstr(part, "signature") != NULL) {
      *out = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking",
                       px_jstr(part, "text") ? px_jstr(part, "text") : "", "signature",
                       px_jstr(part, "signature"));
    } else {
      /* Anthropic rejects thinking without a valid signature: another
       * family's token (named as the client spelled it), else the text */
      const px_lossy_names_t *n = px_in_names(ctx);
      if ((px_jstr(part, "encrypted_content") != NULL ||
           px_jstr(part, "thought_signature") != NULL) &&
          n->reasoning_token != NULL)
        px_lossy_add(lossy, n->reasoning_token);
      else
        px_lossy_add(lossy, n->reasoning_text);
    }
    return 0;
  }
  if (strcmp(t, "tool_call") == 0) {
    json_t *input = px_tool_args_object(ctx, part, err);
    if (input == NULL) return PX_EINVAL;
    *out = json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                     px_jstr(part, "id") ? px_jstr(part, "id") : "", "name",
                     px_jstr(part, "name") ? px_jstr(part, "name") : "", "input", input);
    return 0;
  }
  if (strcmp(t, "tool_result") == 0) return encode_tool_result(part, out, err);
  return px_tr_fail(err, "content", "content part type '%s' cannot be sent to Anthropic",
                    t);
}

/* Append blocks to the last message when it has the same role, else start a
 * new message: Anthropic needs alternating roles. In a user turn tool_result
 * blocks go first, as the API requires. */
static void push_turn(json_t *msgs, const char *role, json_t *blocks) {
  json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
  json_t *content;
  if (last != NULL && strcmp(px_jstr(last, "role"), role) == 0) {
    content = json_object_get(last, "content");
  } else {
    content = json_array();
    json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", role, "content", content));
  }
  json_array_extend(content, blocks);
  if (strcmp(role, "user") == 0) {
    json_t *sorted = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) if (is_type(b, "tool_result"))
        json_array_append(sorted, b);
    json_array_foreach(content, i, b) if (!is_type(b, "tool_result"))
        json_array_append(sorted, b);
    json_array_clear(content);
    json_array_extend(content, sorted);
    json_decref(sorted);
  }
}

/* With thinking on, Anthropic requires the assistant turn that a tool-use
 * loop continues (the last assistant message, answered only by tool
 * results) to start with a thinking block. History from OpenAI clients has
 * no signed thinking there, so thinking must stay off for that request. */
/* The IR forces a tool call (tool_choice required or a named tool) and
 * offers tools: Anthropic accepts only auto / none with thinking. */
static int forced_tool_choice(json_t *ir) {
  const char *t = px_jstr(json_object_get(ir, "tool_choice"), "type");
  return t != NULL && (strcmp(t, "required") == 0 || strcmp(t, "tool") == 0) &&
         json_array_size(json_object_get(ir, "tools")) > 0;
}

static int tool_loop_without_thinking(json_t *msgs) {
  size_t n = json_array_size(msgs);
  if (n < 2) return 0;
  json_t *last = json_array_get(msgs, n - 1), *prev = json_array_get(msgs, n - 2);
  if (strcmp(px_jstr(last, "role"), "user") != 0 ||
      strcmp(px_jstr(prev, "role"), "assistant") != 0)
    return 0;
  size_t i;
  json_t *b;
  json_array_foreach(json_object_get(last, "content"), i,
                     b) if (!is_type(b, "tool_result")) return 0;
  json_t *first = json_array_get(json_object_get(prev, "content"), 0);
  return !is_type(first, "thinking") && !is_type(first, "redacted_thinking");
}

static json_int_t budget_of_effort(const char *e) {
  if (e == NULL) return 8192;
  if (strcmp(e, "minimal") == 0 || strcmp(e, "low") == 0) return 1024;
  if (strcmp(e, "medium") == 0) return 8192;
  if (strcmp(e, "high") == 0) return 24576;
  if (strcmp(e, "xhigh") == 0) return 32768;
  return 8192;
}

/* system: a string for one plain part, blocks otherwise */
static void system_out(json_t *ir, json_t *body) {
  json_t *sys = json_object_get(ir, "system");
  json_t *sysb = json_array();
  size_t i;
  json_t *v;
  json_array_foreach(sys, i, v) {
    if (px_jstr(v, "text") == NULL || px_jstr(v, "text")[0] == 0) continue;
    json_t *b = text_part(px_jstr(v, "text"));
    if (json_object_get(v, "cache_control") != NULL)
      json_object_set(b, "cache_control", json_object_get(v, "cache_control"));
    json_array_append_new(sysb, b);
  }
  if (json_array_size(sysb) == 1 &&
      json_object_get(json_array_get(sysb, 0), "cache_control") == NULL)
    json_object_set(body, "system", json_object_get(json_array_get(sysb, 0), "text"));
  else if (json_array_size(sysb) > 0)
    json_object_set(body, "system", sysb);
  json_decref(sysb);
}

/* messages: IR parts -> blocks, roles alternating */
static int messages_out(const px_tr_ctx_t *ctx, json_t *ir, json_t *body,
                        px_lossy_t *lossy, px_tr_err_t *err) {
  size_t i;
  json_t *v;
  json_t *msgs = json_array();
  json_object_set_new(body, "messages", msgs);
  json_array_foreach(json_object_get(ir, "messages"), i, v) {
    const char *role = px_jstr(v, "role");
    if (role == NULL || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)) {
      px_tr_fail(err, "messages", "messages: role '%s' cannot be sent to Anthropic",
                 role ? role : "(none)");
      return PX_EINVAL;
    }
    json_t *blocks = json_array();
    size_t j;
    json_t *part;
    json_array_foreach(json_object_get(v, "content"), j, part) {
      json_t *o = NULL;
      if (encode_part(ctx, part, role, &o, lossy, err) < 0) {
        json_decref(blocks);
        return PX_EINVAL;
      }
      if (o != NULL) json_array_append_new(blocks, o);
    }
    if (json_array_size(blocks) > 0) push_turn(msgs, role, blocks);
    json_decref(blocks);
  }
  return 0;
}

/* max_tokens (required) and thinking; returns whether thinking is on */
static int thinking_out(const px_tr_ctx_t *ctx, json_t *ir, json_t *body,
                        px_lossy_t *lossy) {
  json_int_t max_tokens = json_integer_value(json_object_get(ir, "max_tokens"));
  int defaulted = 0;
  if (max_tokens <= 0) {
    max_tokens = ctx->default_max_tokens > 0 ? ctx->default_max_tokens
                                             : PX_ANTH_DEFAULT_MAX_TOKENS;
    defaulted = 1;
    px_lossy_add(lossy, "max_tokens");
  }
  json_t *r = json_object_get(ir, "reasoning");
  int thinking = 0;
  if (json_is_object(r)) {
    const char *effort = px_jstr(r, "effort");
    json_t *en = json_object_get(r, "enabled");
    json_t *bt = json_object_get(r, "budget_tokens");
    if (json_is_false(en) || (effort != NULL && strcmp(effort, "none") == 0)) {
      json_object_set_new(body, "thinking", json_pack("{s:s}", "type", "disabled"));
    } else if ((json_is_true(en) || effort != NULL || json_is_integer(bt)) &&
               (tool_loop_without_thinking(json_object_get(body, "messages")) ||
                forced_tool_choice(ir))) {
      /* Anthropic rejects thinking with tool_choice any / tool: the forced
       * call is the client's contract (structured output through a tool),
       * so the call is kept and thinking stays off, named lossy */
      px_lossy_add(lossy, px_in_names(ctx)->reasoning_config);
    } else if (json_is_true(en) || effort != NULL || json_is_integer(bt)) {
      json_int_t budget =
          json_is_integer(bt) ? json_integer_value(bt) : budget_of_effort(effort);
      if (budget < PX_ANTH_MIN_BUDGET) budget = PX_ANTH_MIN_BUDGET;
      /* Anthropic needs max_tokens > budget_tokens. A defaulted max_tokens
       * is raised to budget + default; a client's own limit is kept and the
       * budget lowered, unless that would go below the minimum budget. */
      if (max_tokens <= budget) {
        if (!defaulted && max_tokens - 1 >= PX_ANTH_MIN_BUDGET) {
          budget = max_tokens - 1;
        } else {
          if (!defaulted) {
            budget = PX_ANTH_MIN_BUDGET;
            px_lossy_add(lossy, "max_tokens");
          }
          max_tokens += budget;
        }
      }
      json_object_set_new(
          body, "thinking",
          json_pack("{s:s,s:I}", "type", "enabled", "budget_tokens", budget));
      thinking = 1;
    }
  }
  json_object_set_new(body, "max_tokens", json_integer(max_tokens));
  return thinking;
}

/* sampling: what thinking allows, and the stop sequences */
static void sampling_out(json_t *ir, json_t *body, int thinking, px_lossy_t *lossy) {
  json_t *v = json_object_get(ir, "temperature");
  if (json_is_number(v)) {
    if (thinking)
      px_lossy_add(lossy, "temperature"); /* rejected with thinking */
    else
      json_object_set(body, "temperature", v);
  }
  v = json_object_get(ir, "top_p");
  if (json_is_number(v)) {
    if (thinking && json_number_value(v) < 0.95)
      px_lossy_add(lossy, "top_p"); /* thinking allows only 0.95..1 */
    else
      json_object_set(body, "top_p", v);
  }
  v = json_object_get(ir, "top_k");
  if (json_is_integer(v)) {
    if (thinking)
      px_lossy_add(lossy, "top_k");
    else
      json_object_set(body, "top_k", v);
  }
  v = json_object_get(ir, "stop");
  if (json_is_string(v))
    json_object_set_new(body, "stop_sequences", json_pack("[O]", v));
  else if (json_array_size(v) > 0)
    json_object_set(body, "stop_sequences", v);
}

/* tools and tool_choice */
static int tools_out(json_t *ir, json_t *body, px_lossy_t *lossy, px_tr_err_t *err) {
  size_t i;
  json_t *v;
  json_t *tools = json_object_get(ir, "tools");
  if (json_array_size(tools) > 0) {
    json_t *arr = json_array();
    json_object_set_new(body, "tools", arr);
    json_array_foreach(tools, i, v) {
      json_t *params = json_object_get(v, "parameters");
      json_t *o = json_pack("{s:s?}", "name", px_jstr(v, "name"));
      if (px_jstr(v, "description") != NULL)
        json_object_set(o, "description", json_object_get(v, "description"));
      json_object_set_new(o, "input_schema",
                          json_is_object(params)
                              ? json_incref(params)
                              : json_pack("{s:s,s:{}}", "type", "object", "properties"));
      if (json_is_true(json_object_get(v, "strict")))
        json_object_set_new(o, "strict", json_true());
      if (json_object_get(v, "cache_control") != NULL)
        json_object_set(o, "cache_control", json_object_get(v, "cache_control"));
      json_array_append_new(arr, o);
    }
    json_t *tc = json_object_get(ir, "tool_choice");
    const char *tct = px_jstr(tc, "type");
    json_t *atc = NULL;
    if (tct == NULL || strcmp(tct, "auto") == 0)
      atc = json_is_false(json_object_get(ir, "parallel_tool_calls"))
                ? json_pack("{s:s}", "type", "auto")
                : NULL;
    else if (strcmp(tct, "required") == 0)
      atc = json_pack("{s:s}", "type", "any");
    else if (strcmp(tct, "none") == 0)
      atc = json_pack("{s:s}", "type", "none");
    else if (strcmp(tct, "tool") == 0)
      atc = json_pack("{s:s,s:s?}", "type", "tool", "name", px_jstr(tc, "name"));
    else {
      px_tr_fail(err, "tool_choice", "tool_choice: '%s' cannot be sent to Anthropic",
                 tct);
      return PX_EINVAL;
    }
    if (atc != NULL && json_is_false(json_object_get(ir, "parallel_tool_calls")) &&
        !is_type(atc, "none"))
      json_object_set_new(atc, "disable_parallel_tool_use", json_true());
    set_new(body, "tool_choice", atc);
  } else if (json_object_get(ir, "tool_choice") != NULL) {
    const char *tct = px_jstr(json_object_get(ir, "tool_choice"), "type");
    if (tct != NULL && strcmp(tct, "none") != 0 && strcmp(tct, "auto") != 0)
      px_lossy_add(lossy, "tool_choice");
  }
  return 0;
}

/* structured output, user, metadata, stream */
static void output_out(json_t *ir, json_t *body, px_lossy_t *lossy) {
  json_t *rf = json_object_get(ir, "response_format");
  if (is_type(rf, "json_schema")) {
    json_t *schema = json_object_get(rf, "schema");
    json_object_set_new(
        body, "output_config",
        json_pack("{s:{s:s,s:o}}", "format", "type", "json_schema", "schema",
                  json_is_object(schema) ? json_incref(schema) : json_object()));
  } else if (is_type(rf, "json_object")) {
    px_lossy_add(lossy, "response_format");
  }

  if (px_jstr(ir, "user") != NULL)
    json_object_set_new(body, "metadata",
                        json_pack("{s:O}", "user_id", json_object_get(ir, "user")));
  if (json_object_size(json_object_get(ir, "metadata")) > 0)
    px_lossy_add(lossy, "metadata");
  if (json_is_true(json_object_get(ir, "stream")))
    json_object_set_new(body, "stream", json_true());
}

static int anth_encode_request(const px_tr_ctx_t *ctx, json_t *ir, json_t **bodyp,
                               px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *body = json_object();
  const char *model = ctx->upstream_model ? ctx->upstream_model : px_jstr(ir, "model");

  if (json_object_get(ir, "previous_response_id") != NULL) {
    px_tr_fail(err, "previous_response_id",
               "previous_response_id: stored responses exist only at an OpenAI Responses "
               "upstream; send the full conversation");
    goto fail;
  }
  if (model != NULL) json_object_set_new(body, "model", json_string(model));

  system_out(ir, body);
  if (messages_out(ctx, ir, body, lossy, err) < 0) goto fail;
  int thinking = thinking_out(ctx, ir, body, lossy);
  sampling_out(ir, body, thinking, lossy);
  if (tools_out(ir, body, lossy, err) < 0) goto fail;
  output_out(ir, body, lossy);
  *bodyp = body;
  return 0;
fail:
  json_decref(body);
  return PX_EINVAL;
}

/* ======================================================================== */
/* Response decode: Anthropic message -> IR                                  */

/* Anthropic citation -> IR annotation (url_citation) when it has a URL. */
static json_t *citations_to_annotations(json_t *cits, const char *text,
                                        px_lossy_t *lossy) {
  json_t *arr = json_array();
  size_t i, chars = px_utf8_chars(text, strlen(text));
  json_t *c;
  json_array_foreach(cits, i, c) {
    if (px_jstr(c, "url") != NULL) {
      json_t *a =
          json_pack("{s:s,s:s,s:I,s:I}", "type", "url_citation", "url", px_jstr(c, "url"),
                    "start_index", (json_int_t)0, "end_index", (json_int_t)chars);
      if (px_jstr(c, "title") != NULL)
        json_object_set(a, "title", json_object_get(c, "title"));
      json_array_append_new(arr, a);
    } else {
      px_lossy_add(lossy, "content[].citations");
    }
  }
  return arr;
}

static int anth_decode_response(const px_tr_ctx_t *ctx, json_t *body, json_t **irp,
                                px_lossy_t *lossy, px_tr_err_t *err) {
  (void)ctx;
  if (!json_is_object(body) || !json_is_array(json_object_get(body, "content"))) {
    px_tr_fail(err, "content", "upstream response is not an Anthropic message");
    err->kind = PX_ERR_BAD_GATEWAY;
    return PX_EINVAL;
  }
  json_t *ir = json_object();
  json_t *content = json_array();
  const char *sr = px_jstr(body, "stop_reason");
  int refusal = sr != NULL && strcmp(sr, "refusal") == 0;
  size_t i;
  json_t *b;

  if (px_jstr(body, "id") != NULL) json_object_set(ir, "id", json_object_get(body, "id"));
  if (px_jstr(body, "model") != NULL)
    json_object_set(ir, "model", json_object_get(body, "model"));
  json_object_set_new(ir, "content", content);
  json_array_foreach(json_object_get(body, "content"), i, b) {
    const char *t = px_jstr(b, "type");
    if (t == NULL) continue;
    if (strcmp(t, "text") == 0) {
      const char *text = px_jstr(b, "text") ? px_jstr(b, "text") : "";
      json_t *part =
          json_pack("{s:s,s:s}", "type", refusal ? "refusal" : "text", "text", text);
      json_t *cits = json_object_get(b, "citations");
      if (json_array_size(cits) > 0 && !refusal) {
        json_t *ann = citations_to_annotations(cits, text, lossy);
        if (json_array_size(ann) > 0)
          json_object_set_new(part, "annotations", ann);
        else
          json_decref(ann);
      }
      json_array_append_new(content, part);
    } else if (strcmp(t, "thinking") == 0) {
      json_t *part = json_pack("{s:s,s:s}", "type", "reasoning", "text",
                               px_jstr(b, "thinking") ? px_jstr(b, "thinking") : "");
      if (px_jstr(b, "signature") != NULL && px_jstr(b, "signature")[0] != 0)
        json_object_set(part, "signature", json_object_get(b, "signature"));
      json_array_append_new(content, part);
    } else if (strcmp(t, "redacted_thinking") == 0) {
      json_array_append_new(
          content,
          json_pack("{s:s,s:s,s:s}", "type", "reasoning", "text", "", "redacted_data",
                    px_jstr(b, "data") ? px_jstr(b, "data") : ""));
    } else if (strcmp(t, "tool_use") == 0) {
      json_t *input = json_object_get(b, "input");
      /* no input: a no-argument call ("{}") */
      char *args = input != NULL ? px_jdoc_dump(input, JSON_COMPACT | JSON_ENCODE_ANY)
                                 : strdup("{}");
      if (args == NULL) {
        json_decref(ir);
        return PX_ENOMEM;
      }
      json_array_append_new(
          content,
          json_pack("{s:s,s:s,s:s,s:s}", "type", "tool_call", "id",
                    px_jstr(b, "id") ? px_jstr(b, "id") : "", "name",
                    px_jstr(b, "name") ? px_jstr(b, "name") : "", "arguments", args));
      free(args);
    } else if (server_use_type(t)) {
      px_lossy_add(lossy, "content[].server_tool_use");
    } else if (server_result_type(t)) {
      px_lossy_add(lossy, "content[].server_tool_result");
    } else {
      px_lossy_add(lossy, "content[].unknown_block");
    }
  }
  if (sr != NULL) {
    px_stop_t st = px_stop_parse(sr);
    /* newer Anthropic reasons with an existing IR equivalent */
    if (strcmp(sr, "model_context_window_exceeded") == 0) st = PX_STOP_MAX_TOKENS;
    json_object_set_new(ir, "stop_reason", json_string(px_stop_name(st)));
  }
  if (px_jstr(body, "stop_sequence") != NULL)
    json_object_set(ir, "stop_sequence", json_object_get(body, "stop_sequence"));
  json_t *sd = json_object_get(body, "stop_details");
  if (json_is_object(sd)) {
    if (px_jstr(sd, "explanation") != NULL)
      json_object_set(ir, "refusal_explanation", json_object_get(sd, "explanation"));
    if (px_jstr(sd, "category") != NULL) px_lossy_add(lossy, "stop_details.category");
  }
  json_t *u = json_object_get(body, "usage");
  if (json_is_object(u)) {
    int64_t in = px_jint(u, "input_tokens", -1), out = px_jint(u, "output_tokens", -1);
    int64_t cr = px_jint(u, "cache_read_input_tokens", -1),
            cc = px_jint(u, "cache_creation_input_tokens", -1);
    json_t *iu = json_object();
    json_object_set_new(
        iu, "input_tokens",
        json_integer((in > 0 ? in : 0) + (cr > 0 ? cr : 0) + (cc > 0 ? cc : 0)));
    json_object_set_new(iu, "output_tokens", json_integer(out > 0 ? out : 0));
    if (cr >= 0) json_object_set_new(iu, "cache_read_tokens", json_integer(cr));
    if (cc >= 0) json_object_set_new(iu, "cache_creation_tokens", json_integer(cc));
    json_object_set_new(ir, "usage", iu);
  }
  *irp = ir;
  return 0;
}

/* ======================================================================== */
/* Response encode: IR -> Anthropic message                                   */

/* IR annotations of a text part -> the text block's citations; what has
 * no citation form is named lossy. NULL when none maps. */
static json_t *annotations_to_citations(const px_tr_ctx_t *ctx, json_t *p,
                                        px_lossy_t *lossy) {
  json_t *cits = NULL, *a;
  size_t i;
  const char *text = px_jstr(p, "text") ? px_jstr(p, "text") : "";
  json_array_foreach(json_object_get(p, "annotations"), i, a) {
    json_t *c = px_anthropic_citation(a, text, strlen(text), 0);
    if (c == NULL) {
      px_lossy_add(lossy, px_lossy_annotations(ctx));
      continue;
    }
    if (cits == NULL) cits = json_array();
    json_array_append_new(cits, c);
  }
  return cits;
}

static int anth_encode_response(const px_tr_ctx_t *ctx, json_t *ir, json_t **bodyp,
                                px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *content = json_array();
  json_t *refusal_text = NULL; /* first refusal wording */
  px_idset_t ids = {0};        /* tool_use ids: non-empty, unique */
  int ncalls = 0;
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(ir, "content"), i, p) {
    const char *t = px_jstr(p, "type");
    if (t == NULL) continue;
    if (strcmp(t, "text") == 0) {
      json_t *blk = text_part(px_jstr(p, "text") ? px_jstr(p, "text") : "");
      json_t *cits = annotations_to_citations(ctx, p, lossy);
      if (cits != NULL) json_object_set_new(blk, "citations", cits);
      json_array_append_new(content, blk);
    } else if (strcmp(t, "refusal") == 0) {
      json_array_append_new(content,
                            text_part(px_jstr(p, "text") ? px_jstr(p, "text") : ""));
      if (refusal_text == NULL) refusal_text = json_object_get(p, "text");
    } else if (strcmp(t, "reasoning") == 0) {
      json_t *sig;
      if (px_jstr(p, "redacted_data") != NULL) {
        json_array_append_new(content, json_pack("{s:s,s:s}", "type", "redacted_thinking",
                                                 "data", px_jstr(p, "redacted_data")));
      } else if ((sig = px_rtok_out(PX_PROTO_ANTHROPIC, p)) != NULL) {
        /* signed reasoning; another family's token (OpenAI encrypted_content,
         * a Gemini thoughtSignature) travels tagged in the signature (even
         * without summary text) so the client replays it */
        const char *text = px_jstr(p, "text") ? px_jstr(p, "text") : "";
        json_array_append_new(content, json_pack("{s:s,s:s,s:o}", "type", "thinking",
                                                 "thinking", text, "signature", sig));
      } else if (px_jstr(p, "text") != NULL && px_jstr(p, "text")[0] != 0) {
        /* unsigned reasoning (Chat reasoning_content, Responses summaries
         * without encrypted_content) is shown with an empty signature so
         * the client keeps it */
        json_array_append_new(content,
                              json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking",
                                        px_jstr(p, "text"), "signature", ""));
      }
    } else if (strcmp(t, "tool_call") == 0) {
      const char *args = px_jstr(p, "arguments");
      json_t *input;
      if (args == NULL || args[strspn(args, " \t\r\n")] == 0) {
        input = json_object();
      } else {
        input = px_jdoc_loads(args, JSON_DECODE_ANY, NULL);
        if (!json_is_object(input)) {
          json_decref(input);
          json_decref(content);
          px_idset_free(&ids);
          px_tr_fail(err, "tool_calls.arguments",
                     "upstream tool call '%s' has arguments that are not a JSON object",
                     px_jstr(p, "id") ? px_jstr(p, "id") : "");
          err->kind = PX_ERR_BAD_GATEWAY;
          return PX_EINVAL;
        }
      }
      const char *uid = px_idset_unique(&ids, px_str(px_jstr(p, "id")), ncalls++);
      json_array_append_new(
          content,
          json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", uid ? uid : "", "name",
                    px_jstr(p, "name") ? px_jstr(p, "name") : "", "input", input));
    }
  }
  px_idset_free(&ids);

  px_stop_t st = px_stop_parse(px_jstr(ir, "stop_reason"));
  if (st == PX_STOP_NONE) st = PX_STOP_END_TURN;
  if (refusal_text != NULL) st = PX_STOP_REFUSAL;
  const char *sr = px_stop_to_anthropic(st);
  json_t *body = json_object();
  json_object_set_new(body, "id", px_mint_id("msg_", px_jstr(ir, "id")));
  json_object_set_new(body, "type", json_string("message"));
  json_object_set_new(body, "role", json_string("assistant"));
  json_object_set_new(body, "model",
                      json_string(ctx->client_model      ? ctx->client_model
                                  : px_jstr(ir, "model") ? px_jstr(ir, "model")
                                                         : ""));
  json_object_set_new(body, "content", content);
  json_object_set_new(body, "stop_reason", json_string(sr));
  json_object_set_new(body, "stop_sequence",
                      px_jstr(ir, "stop_sequence")
                          ? json_string(px_jstr(ir, "stop_sequence"))
                          : json_null());
  if (strcmp(sr, "refusal") == 0) {
    json_t *expl = json_object_get(ir, "refusal_explanation");
    if (!json_is_string(expl)) expl = refusal_text;
    json_object_set_new(body, "stop_details",
                        json_pack("{s:s,s:n,s:O?}", "type", "refusal", "category",
                                  "explanation", json_is_string(expl) ? expl : NULL));
    if (json_object_get(json_object_get(body, "stop_details"), "explanation") == NULL)
      json_object_set_new(json_object_get(body, "stop_details"), "explanation",
                          json_null());
  }
  json_t *u = json_object_get(ir, "usage");
  int64_t in = px_jint(u, "input_tokens", -1), out = px_jint(u, "output_tokens", -1);
  int64_t cr = px_jint(u, "cache_read_tokens", -1),
          cc = px_jint(u, "cache_creation_tokens", -1);
  if (cr < 0) cr = 0;
  if (cc < 0) cc = 0;
  if (in < 0) in = 0;
  in -= cr + cc;
  if (in < 0) in = 0;
  json_object_set_new(
      body, "usage",
      json_pack("{s:I,s:I,s:I,s:I}", "input_tokens", (json_int_t)in, "output_tokens",
                (json_int_t)(out > 0 ? out : 0), "cache_creation_input_tokens",
                (json_int_t)cc, "cache_read_input_tokens", (json_int_t)cr));
  *bodyp = body;
  return 0;
}

/* count_tokens takes the request minus generation controls */
static void anth_count_request(json_t *body, const char *model) {
  static const char *const drop[] = {"stream", "max_tokens",     "temperature", "top_p",
                                     "top_k",  "stop_sequences", "metadata"};
  (void)model;
  for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
    json_object_del(body, drop[i]);
}

/* The reference table (test/reference/ref.h). */
const px_ref_ops_t px_ref_anthropic = {anth_decode_request, anth_encode_request,
                                       anth_decode_response, anth_encode_response,
                                       anth_count_request};
