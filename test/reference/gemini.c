/*
 * gemini.c - Gemini generateContent <-> IR (SPEC section 11): request,
 * non-streaming response and errors. The stream half is gemini_stream.c.
 *
 * Gemini has no tool call ids. Toward the other protocols the gateway mints
 * them: in a request, the n-th functionCall of the conversation is "call_<n>"
 * (unless the client sent an id) and each functionResponse takes the id of
 * the earliest unanswered call of the same name; in a response, a call is
 * "call_<responseId>_<n>". Toward Gemini the ids are dropped and the calls
 * and responses keep their order.
 *
 * Gemini's thoughtSignature is opaque and belongs to Gemini: it is kept in
 * the IR as "thought_signature" of a reasoning part (a part with empty text
 * when the signature rode on a functionCall or text part), and written back
 * on the part that follows when the history returns to a Gemini upstream.
 * Toward Gemini clients the thoughtSignature also carries other families'
 * reasoning tokens behind their tags ("pxa1:sig:", "pxa1:red:", "pxo1:enc:";
 * px_rtok_* in protoutil.h), told back into their IR fields on replay.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "ref.h"

static json_t *jstr(const char *s) {
  return json_string(s ? s : "");
}

static int bad_gateway(px_tr_err_t *err, const char *param, const char *msg) {
  px_tr_fail(err, param, "%s", msg);
  if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
  return PX_EPROTO;
}

/* ---- schemas: Gemini's OpenAPI subset uses upper-case type names ---- */

/* A copy of schema s with every "type" string lower-cased (OBJECT -> object). */
static json_t *schema_lower(json_t *s) {
  if (json_is_array(s)) {
    json_t *a = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v) json_array_append_new(a, schema_lower(v));
    return a;
  }
  if (!json_is_object(s)) return json_deep_copy(s);
  json_t *o = json_object();
  const char *k;
  json_t *v;
  json_object_foreach(s, k, v) {
    if (strcmp(k, "type") == 0 && json_is_string(v)) {
      char t[32];
      snprintf(t, sizeof(t), "%s", json_string_value(v));
      for (char *p = t; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
      json_object_set_new(o, k, json_string(t));
    } else if (strcmp(k, "properties") == 0 && json_is_object(v)) {
      json_t *props = json_object();
      const char *pk;
      json_t *pv;
      json_object_foreach(v, pk, pv) json_object_set_new(props, pk, schema_lower(pv));
      json_object_set_new(o, k, props);
    } else {
      json_object_set_new(o, k, schema_lower(v));
    }
  }
  return o;
}

/* ---- request: Gemini -> IR ---- */

/* Ids minted for the calls of one conversation, matched by name and order. */
typedef struct call_ids {
  json_t *open; /* [{"id","name"}] calls not answered yet, in order */
  json_t *done; /* the answered ones (their ids stay valid) */
  int n;        /* calls seen */
} call_ids_t;

static const char *call_open(call_ids_t *c, const char *id, const char *name, char *buf,
                             size_t n) {
  c->n++;
  if (id == NULL || *id == 0) {
    snprintf(buf, n, "call_%d", c->n);
    id = buf;
  }
  json_array_append_new(c->open, json_pack("{s:s, s:s}", "id", id, "name", name));
  return id;
}

/* The id of the open call a functionResponse answers; the call is closed.
 * The entry moves to c->done so the returned id lives as long as c (an id of
 * any length, as the fast path keeps it). */
static const char *call_answer(call_ids_t *c, const char *id, const char *name) {
  size_t i;
  json_t *e;
  json_array_foreach(c->open, i, e) {
    const char *eid = px_jstr(e, "id");
    if (id != NULL && *id ? strcmp(eid, id) == 0
                          : strcmp(px_jstr(e, "name"), name) == 0) {
      if (json_array_append(c->done, e) < 0) return NULL;
      json_array_remove(c->open, i);
      return eid;
    }
  }
  return id != NULL && *id ? id : NULL;
}

static int decode_blob(json_t *blob, int is_file, const char *path, json_t *parts,
                       px_tr_err_t *err) {
  const char *mt = px_jstr(blob, "mimeType");
  const char *data = px_jstr(blob, is_file ? "fileUri" : "data");
  if (mt == NULL || data == NULL)
    return px_tr_fail(err, path, "%s needs mimeType and %s", path,
                      is_file ? "fileUri" : "data");
  int image = strncmp(mt, "image/", 6) == 0;
  json_t *p = json_pack("{s:s}", "type", image ? "image" : "file");
  if (is_file) {
    json_object_set_new(p, "url", json_string(data));
  } else {
    json_object_set_new(p, "media_type", json_string(mt));
    json_object_set_new(p, "data", json_string(data));
    if (!image) json_object_set_new(p, "filename", json_string("document.pdf"));
  }
  json_array_append_new(parts, p);
  return 0;
}

/* functionResponse.response -> tool_result content text: a lone "output" or
 * "content" string is the text itself, anything else its JSON. */
static json_t *response_text(json_t *resp) {
  json_t *out = json_object_get(resp, "output");
  if (!json_is_string(out)) out = json_object_get(resp, "content");
  if (json_is_string(out) && json_object_size(resp) == 1)
    return json_pack("[{s:s, s:O}]", "type", "text", "text", out);
  char *j = px_jdoc_dump(resp ? resp : json_null(), JSON_COMPACT | JSON_ENCODE_ANY);
  json_t *r = json_pack("[{s:s, s:s}]", "type", "text", "text", j ? j : "{}");
  free(j);
  return r;
}

/* A thoughtSignature on a call or text part of a client's model turn: a
 * reasoning part of its own, in its family's field (protoutil.h). Another
 * family's signature the stream encoder put on the part after the thought
 * text it signs (it came after that text) joins that thought again. */
static int sig_part(json_t *parts, const char *sig) {
  json_t *r = json_pack("{s:s, s:s}", "type", "reasoning", "text", "");
  if (r == NULL || px_rtok_in(PX_PROTO_GEMINI, r, sig) < 0) {
    json_decref(r);
    return PX_ENOMEM;
  }
  json_t *prev = json_array_get(parts, json_array_size(parts) - 1);
  const char *pt = px_jstr(prev, "text");
  if ((json_object_get(r, "signature") || json_object_get(r, "encrypted_content")) &&
      strcmp(px_jstr(prev, "type") ? px_jstr(prev, "type") : "", "reasoning") == 0 &&
      pt != NULL && *pt != 0 && json_object_size(prev) == 2) {
    json_object_del(r, "type");
    json_object_del(r, "text");
    json_object_update(prev, r);
    json_decref(r);
    return 0;
  }
  return json_array_append_new(parts, r) == 0 ? 0 : PX_ENOMEM;
}

static int decode_part(json_t *pt, int model, const char *path, json_t *parts,
                       call_ids_t *calls, px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *v;
  int rc;
  char idbuf[96], p2[128];
  const char *sig = px_jstr(pt, "thoughtSignature");
  int thought = json_is_true(json_object_get(pt, "thought"));
  if (!json_is_object(pt)) return px_tr_fail(err, path, "%s must be an object", path);
  if (sig != NULL && model && !thought && (rc = sig_part(parts, sig)) < 0) return rc;
  if ((v = json_object_get(pt, "text")) != NULL) {
    if (!json_is_string(v))
      return px_tr_fail(err, path, "%s.text must be a string", path);
    if (thought) {
      if (!model) return 0; /* thoughts belong to model turns */
      json_t *r = json_pack("{s:s, s:O}", "type", "reasoning", "text", v);
      if (r == NULL || px_rtok_in(PX_PROTO_GEMINI, r, sig) < 0) {
        json_decref(r);
        return PX_ENOMEM;
      }
      json_array_append_new(parts, r);
    } else {
      json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", v));
    }
    return 0;
  }
  if ((v = json_object_get(pt, "inlineData")) != NULL) {
    snprintf(p2, sizeof(p2), "%s.inlineData", path);
    return decode_blob(v, 0, p2, parts, err);
  }
  if ((v = json_object_get(pt, "fileData")) != NULL) {
    snprintf(p2, sizeof(p2), "%s.fileData", path);
    return decode_blob(v, 1, p2, parts, err);
  }
  if ((v = json_object_get(pt, "functionCall")) != NULL) {
    const char *name = px_jstr(v, "name");
    if (!model || name == NULL)
      return px_tr_fail(err, path, "%s.functionCall needs a name in a model turn", path);
    json_t *args = json_object_get(v, "args");
    char *a = json_is_object(args) ? px_jdoc_dump(args, JSON_COMPACT) : strdup("{}");
    const char *id = call_open(calls, px_jstr(v, "id"), name, idbuf, sizeof(idbuf));
    json_array_append_new(
        parts, json_pack("{s:s, s:s, s:s, s:s}", "type", "tool_call", "id", id, "name",
                         name, "arguments", a ? a : "{}"));
    free(a);
    return 0;
  }
  if ((v = json_object_get(pt, "functionResponse")) != NULL) {
    const char *name = px_jstr(v, "name");
    const char *id = call_answer(calls, px_jstr(v, "id"), name ? name : "");
    if (model || id == NULL)
      return px_tr_fail(err, path,
                        "%s.functionResponse does not answer a preceding functionCall",
                        path);
    json_array_append_new(
        parts, json_pack("{s:s, s:s, s:o}", "type", "tool_result", "tool_call_id", id,
                         "content", response_text(json_object_get(v, "response"))));
    return 0;
  }
  if (json_object_get(pt, "executableCode") ||
      json_object_get(pt, "codeExecutionResult")) {
    px_lossy_add(lossy, "contents[].parts[].executableCode");
    return 0;
  }
  if (sig != NULL) return 0; /* a signature-only part */
  return px_tr_fail(err, path, "%s: unsupported part", path);
}

static int decode_contents(json_t *contents, json_t *ir_msgs, px_lossy_t *lossy,
                           px_tr_err_t *err) {
  call_ids_t calls = {json_array(), json_array(), 0};
  size_t i, k;
  json_t *c, *pt;
  char path[96];
  int rc = 0;
  json_array_foreach(contents, i, c) {
    const char *role = px_jstr(c, "role");
    int model = role != NULL && strcmp(role, "model") == 0;
    json_t *ps = json_object_get(c, "parts");
    if ((role != NULL && !model && strcmp(role, "user") != 0) || !json_is_array(ps)) {
      snprintf(path, sizeof(path), "contents[%zu]", i);
      rc = px_tr_fail(err, path, "contents[%zu] needs role user or model and parts", i);
      break;
    }
    json_t *parts = json_array();
    json_array_foreach(ps, k, pt) {
      snprintf(path, sizeof(path), "contents[%zu].parts[%zu]", i, k);
      if ((rc = decode_part(pt, model, path, parts, &calls, lossy, err)) < 0) break;
    }
    if (rc < 0) {
      json_decref(parts);
      break;
    }
    json_array_append_new(
        ir_msgs,
        json_pack("{s:s, s:o}", "role", model ? "assistant" : "user", "content", parts));
  }
  json_decref(calls.open);
  json_decref(calls.done);
  return rc;
}

static int decode_tools(json_t *tools, json_t *ir, px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *out = json_array();
  size_t i, k;
  json_t *t, *fd;
  json_array_foreach(tools, i, t) {
    json_t *decls = json_object_get(t, "functionDeclarations");
    const char *key;
    json_t *v;
    json_object_foreach(t, key, v) if (strcmp(key, "functionDeclarations") != 0) {
      char p[64];
      snprintf(p, sizeof(p), "tools[].%s", key);
      px_lossy_add(lossy, p);
    }
    json_array_foreach(decls, k, fd) {
      const char *name = px_jstr(fd, "name");
      if (name == NULL) {
        json_decref(out);
        return px_tr_fail(err, "tools[].functionDeclarations[].name",
                          "a function declaration needs a name");
      }
      json_t *tool = json_pack("{s:s}", "name", name);
      if (px_jstr(fd, "description"))
        json_object_set(tool, "description", json_object_get(fd, "description"));
      json_t *js = json_object_get(fd, "parametersJsonSchema");
      json_t *ps = json_object_get(fd, "parameters");
      json_object_set_new(tool, "parameters",
                          js ? json_deep_copy(js)
                          : ps
                              ? schema_lower(ps)
                              : json_pack("{s:s, s:{}}", "type", "object", "properties"));
      json_array_append_new(out, tool);
    }
  }
  if (json_array_size(out) > 0)
    json_object_set_new(ir, "tools", out);
  else
    json_decref(out);
  return 0;
}

static int decode_tool_config(json_t *tc, json_t *ir, px_tr_err_t *err) {
  json_t *fc = json_object_get(tc, "functionCallingConfig");
  const char *mode = px_jstr(fc, "mode");
  if (mode == NULL) return 0;
  json_t *names = json_object_get(fc, "allowedFunctionNames");
  if (strcmp(mode, "AUTO") == 0 || strcmp(mode, "VALIDATED") == 0)
    json_object_set_new(ir, "tool_choice", json_pack("{s:s}", "type", "auto"));
  else if (strcmp(mode, "NONE") == 0)
    json_object_set_new(ir, "tool_choice", json_pack("{s:s}", "type", "none"));
  else if (strcmp(mode, "ANY") == 0 && json_array_size(names) == 1 &&
           json_is_string(json_array_get(names, 0)))
    json_object_set_new(
        ir, "tool_choice",
        json_pack("{s:s, s:O}", "type", "tool", "name", json_array_get(names, 0)));
  else if (strcmp(mode, "ANY") == 0 && json_array_size(names) <= 1)
    json_object_set_new(ir, "tool_choice", json_pack("{s:s}", "type", "required"));
  else
    return px_tr_fail(
        err, "toolConfig.functionCallingConfig",
        "function calling mode %s with several allowedFunctionNames cannot be "
        "translated",
        mode);
  return 0;
}

static const char *effort_of_level(const char *l) {
  if (l == NULL) return NULL;
  if (strcmp(l, "minimal") == 0 || strcmp(l, "MINIMAL") == 0) return "minimal";
  if (strcmp(l, "low") == 0 || strcmp(l, "LOW") == 0) return "low";
  if (strcmp(l, "medium") == 0 || strcmp(l, "MEDIUM") == 0) return "medium";
  return "high";
}

static int decode_generation(json_t *gc, json_t *ir, px_lossy_t *lossy,
                             px_tr_err_t *err) {
  json_t *v;
  if ((v = json_object_get(gc, "temperature")) && json_is_number(v))
    json_object_set(ir, "temperature", v);
  if ((v = json_object_get(gc, "topP")) && json_is_number(v))
    json_object_set(ir, "top_p", v);
  if ((v = json_object_get(gc, "topK")) && json_is_number(v))
    json_object_set_new(ir, "top_k", json_integer((json_int_t)json_number_value(v)));
  if ((v = json_object_get(gc, "maxOutputTokens")) && json_is_integer(v)) {
    if (json_integer_value(v) < 1 || json_integer_value(v) > PX_TOKENS_MAX)
      return px_tr_fail(
          err, "generationConfig.maxOutputTokens",
          "maxOutputTokens must be a positive integer of at most 18 digits");
    json_object_set(ir, "max_tokens", v);
  }
  if ((v = json_object_get(gc, "stopSequences")) && json_is_array(v))
    json_object_set(ir, "stop", v);
  if ((v = json_object_get(gc, "candidateCount")) && json_integer_value(v) > 1)
    return px_tr_fail(err, "generationConfig.candidateCount",
                      "candidateCount above 1 cannot be translated");
  const char *mime = px_jstr(gc, "responseMimeType");
  json_t *schema = json_object_get(gc, "responseJsonSchema");
  if (schema == NULL) schema = json_object_get(gc, "responseSchema");
  if (mime != NULL && strcmp(mime, "application/json") == 0) {
    if (json_is_object(schema))
      json_object_set_new(ir, "response_format",
                          json_pack("{s:s, s:s, s:o}", "type", "json_schema", "name",
                                    "response", "schema", schema_lower(schema)));
    else
      json_object_set_new(ir, "response_format",
                          json_pack("{s:s}", "type", "json_object"));
  } else if (mime != NULL && strcmp(mime, "text/plain") != 0) {
    px_lossy_add(lossy, "generationConfig.responseMimeType");
  }
  json_t *tc = json_object_get(gc, "thinkingConfig");
  if (json_is_object(tc)) {
    json_t *budget = json_object_get(tc, "thinkingBudget");
    const char *level = effort_of_level(px_jstr(tc, "thinkingLevel"));
    json_t *r = json_object();
    if (json_is_integer(budget) && json_integer_value(budget) == 0) {
      json_object_set_new(r, "effort", json_string("none"));
    } else {
      json_object_set_new(r, "enabled", json_true());
      if (json_is_integer(budget) && json_integer_value(budget) > 0) {
        json_object_set(r, "budget_tokens", budget);
        json_object_set_new(r, "effort",
                            json_string(px_effort_of_budget(json_integer_value(budget))));
      } else if (level != NULL) {
        json_object_set_new(r, "effort", json_string(level));
      }
    }
    json_object_set_new(ir, "reasoning", r);
  }
  static const char *const dropped[] = {
      "presencePenalty", "frequencyPenalty", "seed",         "responseLogprobs",
      "logprobs",        "mediaResolution",  "speechConfig", "responseModalities"};
  for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
    if (json_object_get(gc, dropped[i]) != NULL) {
      char p[64];
      snprintf(p, sizeof(p), "generationConfig.%s", dropped[i]);
      px_lossy_add(lossy, p);
    }
  return 0;
}

static int gem_decode_request(const px_tr_ctx_t *ctx, json_t *body, json_t **irp,
                              px_lossy_t *lossy, px_tr_err_t *err) {
  if (!json_is_object(body))
    return px_tr_fail(err, "", "the request body must be an object");
  json_t *wrapped = json_object_get(body, "generateContentRequest"); /* countTokens */
  if (json_is_object(wrapped)) body = wrapped;
  json_t *contents = json_object_get(body, "contents");
  if (!json_is_array(contents))
    return px_tr_fail(err, "contents", "contents must be an array");
  if (json_object_get(body, "cachedContent") != NULL)
    return px_tr_fail(err, "cachedContent", "cachedContent cannot be translated");
  json_t *ir = json_object(), *msgs = json_array(), *sys = json_array();
  json_object_set_new(ir, "model", jstr(ctx->client_model));
  json_object_set_new(ir, "messages", msgs);
  json_object_set_new(ir, "stream", json_boolean(ctx->stream));
  json_t *si = json_object_get(body, "systemInstruction");
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(si, "parts"), i, p) {
    if (!json_is_string(json_object_get(p, "text"))) {
      json_decref(sys);
      json_decref(ir);
      return px_tr_fail(err, "systemInstruction.parts", "system parts must be text");
    }
    json_array_append_new(sys, json_pack("{s:s, s:O, s:s}", "type", "text", "text",
                                         json_object_get(p, "text"), "role", "system"));
  }
  if (json_array_size(sys) > 0)
    json_object_set_new(ir, "system", sys);
  else
    json_decref(sys);
  int rc = decode_contents(contents, msgs, lossy, err);
  if (rc == 0) rc = decode_tools(json_object_get(body, "tools"), ir, lossy, err);
  if (rc == 0) rc = decode_tool_config(json_object_get(body, "toolConfig"), ir, err);
  if (rc == 0)
    rc = decode_generation(json_object_get(body, "generationConfig"), ir, lossy, err);
  if (rc < 0) {
    json_decref(ir);
    return rc;
  }
  if (json_object_get(body, "safetySettings") != NULL)
    px_lossy_add(lossy, "safetySettings");
  if (json_object_get(body, "labels") != NULL) px_lossy_add(lossy, "labels");
  *irp = ir;
  return 0;
}

/* ---- request: IR -> Gemini ---- */

static const char *tool_name_of(json_t *msgs, const char *id) {
  size_t i, k;
  json_t *m, *p;
  json_array_foreach(msgs, i, m) json_array_foreach(json_object_get(m, "content"), k, p) {
    const char *pid = px_jstr(p, "id");
    if (pid != NULL && id != NULL && strcmp(pid, id) == 0 && px_jstr(p, "name") != NULL)
      return px_jstr(p, "name");
  }
  return NULL;
}

static json_t *result_response(json_t *part, px_lossy_t *lossy) {
  json_t *content = json_object_get(part, "content");
  px_buf_t text;
  px_buf_init(&text, (size_t)1 << 30);
  size_t i;
  json_t *c;
  json_array_foreach(content, i, c) {
    const char *t = px_jstr(c, "text");
    if (t != NULL)
      px_buf_append(&text, t, strlen(t));
    else
      px_lossy_add(lossy, "messages[].content[].tool_result.content[].image");
  }
  json_t *parsed = text.len ? px_jdoc_load(text.data, text.len, 0, NULL) : NULL;
  json_t *r;
  if (json_is_object(parsed)) {
    r = parsed;
  } else {
    json_decref(parsed);
    r = json_object();
    json_object_set_new(
        r, json_is_true(json_object_get(part, "is_error")) ? "error" : "output",
        json_stringn(text.data ? text.data : "", text.len));
  }
  px_buf_free(&text);
  return r;
}

/* fileData needs a concrete mimeType: guessed from the URL's extension. */
static const char *mime_of_url(const char *url, int image) {
  static const char *const ext[][2] = {
      {".png", "image/png"},      {".jpg", "image/jpeg"}, {".jpeg", "image/jpeg"},
      {".webp", "image/webp"},    {".gif", "image/gif"},  {".heic", "image/heic"},
      {".pdf", "application/pdf"}};
  size_t n = strcspn(url, "?#");
  for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
    size_t el = strlen(ext[i][0]);
    if (n > el && strncasecmp(url + n - el, ext[i][0], el) == 0) return ext[i][1];
  }
  return image ? "image/jpeg" : "application/pdf";
}

static json_t *blob_out(json_t *part, px_lossy_t *lossy) {
  const char *url = px_jstr(part, "url");
  if (url != NULL) {
    char mt[64];
    const char *data;
    if (px_data_url_split(url, mt, sizeof(mt), &data) == 0)
      return json_pack("{s:{s:s, s:s}}", "inlineData", "mimeType", mt, "data", data);
    return json_pack("{s:{s:s, s:s}}", "fileData", "mimeType",
                     mime_of_url(url, strcmp(px_jstr(part, "type"), "image") == 0),
                     "fileUri", url);
  }
  if (px_jstr(part, "data") != NULL)
    return json_pack("{s:{s:s, s:s}}", "inlineData", "mimeType",
                     px_jstr(part, "media_type") ? px_jstr(part, "media_type")
                                                 : "application/octet-stream",
                     "data", px_jstr(part, "data"));
  px_lossy_add(lossy, "messages[].content[].file_id");
  return NULL;
}

/* One IR part -> Gemini part(s) appended to out. *sig carries a Gemini
 * thought signature to put on the next part. */
static int part_out(const px_tr_ctx_t *ctx, json_t *msgs, json_t *part, int model,
                    json_t *out, const char **sig, px_lossy_t *lossy, px_tr_err_t *err) {
  const char *type = px_jstr(part, "type");
  json_t *o = NULL;
  if (type == NULL) return 0;
  if (strcmp(type, "reasoning") == 0) {
    const char *ts = px_jstr(part, "thought_signature");
    const char *text = px_jstr(part, "text");
    if (ts == NULL) {
      if (px_jstr(part, "signature") || px_jstr(part, "encrypted_content") ||
          px_jstr(part, "redacted_data"))
        px_lossy_add(lossy, "messages[].content[].reasoning.signature");
      return 0; /* thoughts of another family mean nothing to Gemini */
    }
    if (text == NULL || *text == 0) {
      *sig = ts;
      return 0;
    }
    o = json_pack("{s:s, s:b, s:s}", "text", text, "thought", 1, "thoughtSignature", ts);
    json_array_append_new(out, o);
    return 0;
  }
  if (strcmp(type, "text") == 0 || strcmp(type, "refusal") == 0) {
    o = json_pack("{s:s}", "text", px_jstr(part, "text") ? px_jstr(part, "text") : "");
  } else if (strcmp(type, "image") == 0 || strcmp(type, "file") == 0) {
    if ((o = blob_out(part, lossy)) == NULL) return 0;
  } else if (strcmp(type, "tool_call") == 0) {
    if (json_is_true(json_object_get(part, "custom")))
      return px_tr_fail(err, "tools", "custom tools cannot be sent to a Gemini upstream");
    json_t *args = px_tool_args_object(ctx, part, err);
    if (args == NULL) return PX_EINVAL;
    o = json_pack("{s:{s:s, s:o}}", "functionCall", "name", px_jstr(part, "name"), "args",
                  args);
  } else if (strcmp(type, "tool_result") == 0) {
    const char *name = tool_name_of(msgs, px_jstr(part, "tool_call_id"));
    if (name == NULL)
      return px_tr_fail(err, "messages[].content[].tool_result",
                        "a tool result has no preceding tool call");
    o = json_pack("{s:{s:s, s:o}}", "functionResponse", "name", name, "response",
                  result_response(part, lossy));
  } else {
    return 0;
  }
  if (*sig != NULL && model) {
    json_object_set_new(o, "thoughtSignature", json_string(*sig));
    *sig = NULL;
  }
  json_array_append_new(out, o);
  return 0;
}

static int contents_out(const px_tr_ctx_t *ctx, json_t *msgs, json_t *contents,
                        px_lossy_t *lossy, px_tr_err_t *err) {
  size_t i, k;
  json_t *m, *p;
  json_array_foreach(msgs, i, m) {
    int model = strcmp(px_jstr(m, "role") ? px_jstr(m, "role") : "", "assistant") == 0;
    json_t *parts = json_array();
    const char *sig = NULL;
    json_array_foreach(json_object_get(m, "content"), k, p) {
      if (px_jstr(p, "cache_control") || json_object_get(p, "cache_control"))
        px_lossy_add(lossy, "messages[].content[].cache_control");
      if (part_out(ctx, msgs, p, model, parts, &sig, lossy, err) < 0) {
        json_decref(parts);
        return PX_EINVAL;
      }
    }
    if (json_array_size(parts) == 0) {
      json_decref(parts);
      continue;
    }
    /* Gemini wants alternating turns: merge into the previous turn of the same role */
    json_t *last = json_array_get(contents, json_array_size(contents) - 1);
    const char *role = model ? "model" : "user";
    if (last != NULL && strcmp(px_jstr(last, "role"), role) == 0)
      json_array_extend(json_object_get(last, "parts"), parts), json_decref(parts);
    else
      json_array_append_new(contents,
                            json_pack("{s:s, s:o}", "role", role, "parts", parts));
  }
  return 0;
}

static json_int_t budget_of_effort(const char *e) {
  if (e == NULL) return -1; /* dynamic */
  if (strcmp(e, "minimal") == 0 || strcmp(e, "low") == 0) return 1024;
  if (strcmp(e, "medium") == 0) return 8192;
  return 24576;
}

static void generation_out(const px_tr_ctx_t *ctx, json_t *ir, json_t *body,
                           px_lossy_t *lossy) {
  json_t *gc = json_object(), *v;
  if ((v = json_object_get(ir, "max_tokens")))
    json_object_set(gc, "maxOutputTokens", v);
  else if (ctx->default_max_tokens > 0)
    json_object_set_new(gc, "maxOutputTokens", json_integer(ctx->default_max_tokens));
  if ((v = json_object_get(ir, "temperature"))) json_object_set(gc, "temperature", v);
  if ((v = json_object_get(ir, "top_p"))) json_object_set(gc, "topP", v);
  if ((v = json_object_get(ir, "top_k"))) json_object_set(gc, "topK", v);
  if ((v = json_object_get(ir, "stop"))) json_object_set(gc, "stopSequences", v);
  json_t *rf = json_object_get(ir, "response_format");
  const char *rft = px_jstr(rf, "type");
  if (rft != NULL && strcmp(rft, "text") != 0) {
    json_object_set_new(gc, "responseMimeType", json_string("application/json"));
    if (strcmp(rft, "json_schema") == 0 && json_object_get(rf, "schema"))
      json_object_set(gc, "responseJsonSchema", json_object_get(rf, "schema"));
  }
  json_t *r = json_object_get(ir, "reasoning");
  if (json_is_object(r)) {
    const char *effort = px_jstr(r, "effort");
    json_int_t budget = px_jint(r, "budget_tokens", -2);
    if (effort != NULL && strcmp(effort, "none") == 0)
      json_object_set_new(gc, "thinkingConfig", json_pack("{s:i}", "thinkingBudget", 0));
    else
      json_object_set_new(gc, "thinkingConfig",
                          json_pack("{s:b, s:I}", "includeThoughts", 1, "thinkingBudget",
                                    budget > 0 ? budget : budget_of_effort(effort)));
    if (px_jstr(r, "summary")) px_lossy_add(lossy, "reasoning.summary");
  }
  if (json_object_size(gc) > 0)
    json_object_set_new(body, "generationConfig", gc);
  else
    json_decref(gc);
}

static void tools_out(json_t *ir, json_t *body) {
  json_t *decls = json_array();
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(ir, "tools"), i, t) {
    json_t *d = json_pack("{s:s}", "name", px_jstr(t, "name") ? px_jstr(t, "name") : "");
    if (px_jstr(t, "description"))
      json_object_set(d, "description", json_object_get(t, "description"));
    if (json_object_get(t, "parameters"))
      json_object_set(d, "parametersJsonSchema", json_object_get(t, "parameters"));
    json_array_append_new(decls, d);
  }
  if (json_array_size(decls) > 0)
    json_object_set_new(body, "tools",
                        json_pack("[{s:o}]", "functionDeclarations", decls));
  else
    json_decref(decls);
  json_t *tc = json_object_get(ir, "tool_choice");
  const char *tct = px_jstr(tc, "type");
  if (tct == NULL) return;
  json_t *fc;
  if (strcmp(tct, "tool") == 0)
    fc = json_pack("{s:s, s:[s]}", "mode", "ANY", "allowedFunctionNames",
                   px_jstr(tc, "name") ? px_jstr(tc, "name") : "");
  else
    fc = json_pack("{s:s}", "mode",
                   strcmp(tct, "required") == 0 ? "ANY"
                   : strcmp(tct, "none") == 0   ? "NONE"
                                                : "AUTO");
  json_object_set_new(body, "toolConfig",
                      json_pack("{s:o}", "functionCallingConfig", fc));
}

static int gem_encode_request(const px_tr_ctx_t *ctx, json_t *ir, json_t **bodyp,
                              px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *body = json_object(), *contents = json_array();
  json_object_set_new(body, "contents", contents);
  if (contents_out(ctx, json_object_get(ir, "messages"), contents, lossy, err) < 0) {
    json_decref(body);
    return PX_EINVAL;
  }
  json_t *sp = json_array();
  size_t i;
  json_t *s;
  json_array_foreach(json_object_get(ir, "system"), i, s) json_array_append_new(
      sp, json_pack("{s:s}", "text", px_jstr(s, "text") ? px_jstr(s, "text") : ""));
  if (json_array_size(sp) > 0)
    json_object_set_new(body, "systemInstruction", json_pack("{s:o}", "parts", sp));
  else
    json_decref(sp);
  tools_out(ir, body);
  generation_out(ctx, ir, body, lossy);
  static const char *const dropped[] = {"user",
                                        "metadata",
                                        "parallel_tool_calls",
                                        "previous_response_id",
                                        "prompt_cache_key",
                                        "verbosity"};
  for (size_t k = 0; k < sizeof(dropped) / sizeof(dropped[0]); k++)
    if (json_object_get(ir, dropped[k]) != NULL) px_lossy_add(lossy, dropped[k]);
  *bodyp = body;
  return 0;
}

/* ---- response: Gemini -> IR ---- */

static int gem_decode_response(const px_tr_ctx_t *ctx, json_t *body, json_t **irp,
                               px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *cands = json_object_get(body, "candidates");
  json_t *fb = json_object_get(body, "promptFeedback");
  if (!json_is_object(body) ||
      (json_array_size(cands) != 1 && !px_jstr(fb, "blockReason")))
    return bad_gateway(err, "candidates", "upstream returned no single candidate");
  json_t *cand = json_array_get(cands, 0);
  const char *rid = px_jstr(body, "responseId");
  json_t *ir = json_object(), *content = json_array();
  json_object_set_new(ir, "id", jstr(rid ? rid : "gemini"));
  json_object_set_new(ir, "model",
                      jstr(px_jstr(body, "modelVersion") ? px_jstr(body, "modelVersion")
                                                         : ctx->upstream_model));
  json_object_set_new(ir, "content", content);
  int calls = 0, refused;
  const char *fr = cand ? px_jstr(cand, "finishReason") : px_jstr(fb, "blockReason");
  refused = px_stop_refused(px_gemini_stop(fr ? fr : "STOP", 0));
  size_t i;
  json_t *pt;
  json_array_foreach(json_object_get(json_object_get(cand, "content"), "parts"), i, pt) {
    const char *sig = px_jstr(pt, "thoughtSignature");
    json_t *fc = json_object_get(pt, "functionCall");
    const char *text = px_jstr(pt, "text");
    if (json_is_true(json_object_get(pt, "thought"))) {
      json_t *r = json_pack("{s:s, s:s}", "type", "reasoning", "text", text ? text : "");
      if (sig) json_object_set_new(r, "thought_signature", json_string(sig));
      json_array_append_new(content, r);
      continue;
    }
    if (sig != NULL)
      json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type", "reasoning",
                                               "text", "", "thought_signature", sig));
    if (text != NULL) {
      json_array_append_new(
          content,
          json_pack("{s:s, s:s}", "type", refused ? "refusal" : "text", "text", text));
    } else if (json_is_object(fc)) {
      char id[160];
      const char *cid = px_jstr(fc, "id");
      if (cid == NULL) px_gemini_call_id(rid, calls, id, sizeof(id));
      calls++;
      json_t *args = json_object_get(fc, "args");
      char *a = json_is_object(args) ? px_jdoc_dump(args, JSON_COMPACT) : strdup("{}");
      json_array_append_new(
          content,
          json_pack("{s:s, s:s, s:s, s:s}", "type", "tool_call", "id", cid ? cid : id,
                    "name", px_jstr(fc, "name") ? px_jstr(fc, "name") : "", "arguments",
                    a ? a : "{}"));
      free(a);
    } else if (json_object_get(pt, "inlineData") || json_object_get(pt, "fileData")) {
      px_lossy_add(lossy, "candidates[].content.parts[].inlineData");
    } else if (json_object_get(pt, "executableCode") ||
               json_object_get(pt, "codeExecutionResult")) {
      px_lossy_add(lossy, "candidates[].content.parts[].executableCode");
    }
  }
  if (json_object_get(cand, "safetyRatings"))
    px_lossy_add(lossy, "candidates[].safetyRatings");
  if (json_object_get(cand, "groundingMetadata"))
    px_lossy_add(lossy, "candidates[].groundingMetadata");
  if (json_object_get(cand, "citationMetadata"))
    px_lossy_add(lossy, "candidates[].citationMetadata");
  px_stop_t st = px_gemini_stop(fr ? fr : "STOP", calls > 0);
  json_object_set_new(ir, "stop_reason", json_string(px_stop_name(st)));
  /* a refusal's own words (Vertex: promptFeedback.blockReasonMessage) */
  const char *fm =
      cand ? px_jstr(cand, "finishMessage") : px_jstr(fb, "blockReasonMessage");
  if (fm != NULL && *fm && px_stop_refused(st))
    json_object_set_new(ir, "refusal_explanation", json_string(fm));
  json_t *um = json_object_get(body, "usageMetadata");
  if (json_is_object(um)) {
    px_usage_t u;
    px_gemini_usage_in(um, &u);
    json_t *iu =
        json_pack("{s:I, s:I}", "input_tokens",
                  (json_int_t)(u.input_tokens > 0 ? u.input_tokens : 0), "output_tokens",
                  (json_int_t)(u.output_tokens > 0 ? u.output_tokens : 0));
    if (u.cache_read_tokens >= 0)
      json_object_set_new(iu, "cache_read_tokens", json_integer(u.cache_read_tokens));
    if (u.reasoning_tokens >= 0)
      json_object_set_new(iu, "reasoning_tokens", json_integer(u.reasoning_tokens));
    json_object_set_new(ir, "usage", iu);
  }
  *irp = ir;
  return 0;
}

/* ---- response: IR -> Gemini ---- */

static int gem_encode_response(const px_tr_ctx_t *ctx, json_t *ir, json_t **bodyp,
                               px_lossy_t *lossy, px_tr_err_t *err) {
  json_t *parts = json_array();
  size_t i;
  json_t *p;
  json_t *sig = NULL; /* a signature waiting for the next part */
  int refused = 0;    /* a refusal part (a Chat refusal stops end_turn) */
  int texted = 0;     /* any text or refusal part */
  json_array_foreach(json_object_get(ir, "content"), i, p) {
    const char *type = px_jstr(p, "type");
    if (type == NULL) continue;
    if (strcmp(type, "reasoning") == 0) {
      /* Gemini's own signature as is, another family's behind its tag */
      json_t *ts = px_rtok_out(PX_PROTO_GEMINI, p);
      const char *text = px_jstr(p, "text");
      if (text != NULL && *text) {
        json_t *o = json_pack("{s:s, s:b}", "text", text, "thought", 1);
        if (ts) json_object_set_new(o, "thoughtSignature", ts); /* takes ts, o or not */
        json_array_append_new(parts, o);
      } else if (ts != NULL) {
        if (sig != NULL) /* two signatures in a row: the first on an empty part */
          json_array_append_new(
              parts, json_pack("{s:s, s:o}", "text", "", "thoughtSignature", sig));
        sig = ts;
      }
      continue;
    }
    json_t *o = NULL;
    if (strcmp(type, "text") == 0 || strcmp(type, "refusal") == 0) {
      if (type[0] == 'r') refused = 1;
      texted = 1;
      o = json_pack("{s:s}", "text", px_jstr(p, "text") ? px_jstr(p, "text") : "");
      if (json_array_size(json_object_get(p, "annotations")) > 0)
        px_lossy_add(lossy, px_lossy_annotations(ctx));
    } else if (strcmp(type, "tool_call") == 0) {
      const char *a = px_jstr(p, "arguments");
      json_t *args = a ? px_jdoc_loads(a, 0, NULL) : NULL;
      if (!json_is_object(args)) {
        json_decref(args);
        json_decref(parts);
        json_decref(sig);
        return bad_gateway(err, "content[].arguments",
                           "upstream tool call arguments are not a JSON object");
      }
      o = json_pack("{s:{s:s, s:s, s:o}}", "functionCall", "id",
                    px_jstr(p, "id") ? px_jstr(p, "id") : "", "name",
                    px_jstr(p, "name") ? px_jstr(p, "name") : "", "args", args);
    }
    if (o == NULL) continue;
    if (sig != NULL) {
      json_object_set_new(o, "thoughtSignature", sig);
      sig = NULL;
    }
    json_array_append_new(parts, o);
  }
  if (sig != NULL) /* a signature nothing followed: an empty part holds it */
    json_array_append_new(parts,
                          json_pack("{s:s, s:o}", "text", "", "thoughtSignature", sig));
  px_stop_t st = px_stop_parse(px_jstr(ir, "stop_reason"));
  /* SPEC 11: toward Gemini clients any refusal is SAFETY, its wording a
   * text part, an explanation its finishMessage (and the only text part
   * when there is no other wording) */
  const char *expl = px_jstr(ir, "refusal_explanation");
  if (refused && !px_stop_refused(st)) st = PX_STOP_REFUSAL;
  if (px_stop_refused(st) && expl != NULL && !texted)
    json_array_append_new(parts, json_pack("{s:s}", "text", expl));
  json_t *cand = json_pack(
      "{s:{s:s, s:o}, s:s, s:i}", "content", "role", "model", "parts", parts,
      "finishReason", px_gemini_finish(st) ? px_gemini_finish(st) : "STOP", "index", 0);
  if (expl != NULL) json_object_set_new(cand, "finishMessage", json_string(expl));
  json_t *body = json_pack("{s:[o]}", "candidates", cand);
  json_t *u = json_object_get(ir, "usage");
  if (json_is_object(u)) {
    px_usage_t pu = {px_jint(u, "input_tokens", 0), px_jint(u, "output_tokens", 0),
                     px_jint(u, "cache_read_tokens", -1),
                     px_jint(u, "cache_creation_tokens", -1),
                     px_jint(u, "reasoning_tokens", -1)};
    json_object_set_new(body, "usageMetadata", px_gemini_usage_out(&pu));
  }
  json_object_set_new(body, "modelVersion", jstr(ctx->client_model));
  json_object_set_new(body, "responseId", jstr(px_jstr(ir, "id")));
  *bodyp = body;
  return 0;
}

/* countTokens takes {"generateContentRequest": {"model": "models/X", ...}} */
static void gem_count_request(json_t *body, const char *model) {
  json_t *inner = json_deep_copy(body);
  json_object_clear(body);
  /* the model of the URL, whole: any length (no fixed buffer) */
  size_t ml = model ? strlen(model) : 0;
  char *m = malloc(ml + 8);
  if (m != NULL) {
    memcpy(m, "models/", 7);
    memcpy(m + 7, model ? model : "", ml + 1);
    json_object_set_new(inner, "model", json_stringn(m, ml + 7));
    free(m);
  }
  json_object_set_new(body, "generateContentRequest", inner);
}

/* The reference table (test/reference/ref.h). */
const px_ref_ops_t px_ref_gemini = {gem_decode_request, gem_encode_request,
                                    gem_decode_response, gem_encode_response,
                                    gem_count_request};
