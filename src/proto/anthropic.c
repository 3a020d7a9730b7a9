/* anthropic.c - the Anthropic Messages codec
 * (include/proxai/fastir.h), in its four roles: requests as clients send
 * them (system and text blocks with cache_control, system turns in the
 * conversation, thinking and redacted thinking, tool use and results with
 * their content blocks, images, documents, search results, tools, the
 * thinking and output configuration, metadata), what an Anthropic upstream
 * takes of any fast IR, Anthropic answers (refusals, citations, server
 * tools' blocks) and the answers Anthropic clients get. Read and written
 * without a jansson document; then the wire: errors, token counts, model
 * lists, the protocol table (streams: anthropic_stream.c). The jansson
 * codec in test/reference/anthropic.c is the reference: every rule here is
 * that codec's rule for the same shape, its lossy names included, in its
 * order, and its refusals in its words (PX_FAST_REFUSE); what this codec
 * cannot tell exactly as written (escaped keys, repeated members, a data
 * URL not in the plain spelling) declines to the hub's one reader's rule
 * (translate_fast.c: respelled, else refused); values that decide are
 * read by their value (px_fs_is). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/jdoc.h"
#include "proxai/protoutil.h"
#include "proxai/usage.h"

#define DECLINE PX_FAST_DECLINE
#define REFUSE PX_FAST_REFUSE
#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define PX_ANTH_DEFAULT_MAX_TOKENS 4096
/* the reference's refusal: err as px_tr_fail sets it */
#define FAIL(err, param, ...) (px_tr_fail((err), (param), __VA_ARGS__), REFUSE)

/* ======================================================================== */
/* Request decode                                                            */

/* The reference names what it drops in this order: system, then messages,
 * then the other members in body order; the walk here reads them in body
 * order, so each goes to its own list and the lists are joined at the end. */
typedef struct {
  px_lossy_t sys, msgs, rest;
} dec_lossy_t;

/* A string member the reference compares (px_jstr): 1 with *s set when it
 * is a string (compared by its value: px_fs_is), 0 when it is no string
 * (NULL there). f NULL: absent. */
static int plain_str(const px_fv_t *f, px_fstr_t *s) {
  if (f == NULL || f->kind != PX_FV_STR) return 0;
  *s = f->s;
  return 1;
}

/* a string's value for a message (NUL-ended, cut as the message is) */
static const char *cstr(px_fstr_t s, char *buf, size_t n) {
  px_fs_value(s, buf, n);
  return buf;
}

/* The value at the cursor skipped (a refusal's remaining bytes). */
static int skip_value(px_fw_t *w) {
  px_fv_t v;
  return px_fw_value(w, &v) < 0 ? DECLINE : 0;
}

/* Members read by name in a loop over an object: jansson keeps the last of
 * a repeated one (null or not), the walk would read each: a repeat
 * declines. The names seen so far, in the arena (objects are small). */
typedef struct key_seen {
  struct key_seen *next;
  px_fstr_t k;
} key_seen_t;

static int key_once(px_fstr_t k, key_seen_t **seen, px_arena_t *a) {
  for (key_seen_t *d = *seen; d; d = d->next)
    if (d->k.n == k.n && memcmp(d->k.p, k.p, k.n) == 0) return DECLINE;
  key_seen_t *d = px_arena_alloc(a, sizeof(*d));
  if (d == NULL) return DECLINE;
  d->k = k;
  d->next = *seen;
  *seen = d;
  return 0;
}

/* The path of a content block, made only for a refusal's words: the
 * reference's pathf steps (96-byte buffers, each cut where it cuts). */
typedef struct fpath {
  const struct fpath *up; /* NULL: messages[i].content[j] */
  int doc;                /* up: <up>.source.content[i] (1), <up>.content[i] (0) */
  size_t i, j;
} fpath_t;

/* the reference's pathf: a path cut at the buffer's size */
static void pathf(char *p, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pathf(char *p, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p, n, fmt, ap);
  va_end(ap);
}

static void path_of(const fpath_t *p, char out[96]) {
  char b[96];
  if (p->up == NULL) {
    pathf(out, 96, "messages[%zu].content[%zu]", p->i, p->j);
    return;
  }
  path_of(p->up, b);
  if (p->doc)
    pathf(out, 96, "%s.source.content[%zu]", b, p->i);
  else
    pathf(out, 96, "%s.content[%zu]", b, p->i);
}

/* path + suffix into out, for a refusal */
static void path_sfx(const fpath_t *p, const char *sfx, char out[96]) {
  char b[96];
  path_of(p, b);
  pathf(out, 96, "%s%s", b, sfx);
}

/* system blocks: {type:"text", text, cache_control?, citations?}; block i
 * of the system value at path */
enum { TB_TYPE, TB_TEXT, TB_CC, TB_CIT };
static const px_fkey_t text_block_keys[] = {PX_FK("type"), PX_FK("text"),
                                            PX_FK("cache_control"), PX_FK("citations")};

static int text_block(px_fw_t *w, const char *path, size_t i, px_arena_t *a,
                      px_lossy_t *lossy, px_fpart_t **out, px_tr_err_t *err) {
  px_fv_t f[NKEYS(text_block_keys)];
  unsigned seen = 0;
  px_fstr_t t;
#define HAS(x) (seen & (1u << (x)))
  if (px_fw_peek(w) != PX_FV_OBJ) {
    if (skip_value(w) != 0) return DECLINE;
    goto bad;
  }
  if (px_fw_kfields(w, text_block_keys, NKEYS(text_block_keys), f, &seen) != 0)
    return DECLINE;
  int rc = plain_str(HAS(TB_TYPE) ? &f[TB_TYPE] : NULL, &t);
  if (rc == 0 || !px_fs_is(t, "text") || !HAS(TB_TEXT) || f[TB_TEXT].kind != PX_FV_STR)
    goto bad;
  px_fpart_t *p = px_fpart_text(a, f[TB_TEXT].s);
  if (p == NULL) return DECLINE;
  if (HAS(TB_CC)) p->cache_control = f[TB_CC].raw;
  if (HAS(TB_CIT) && f[TB_CIT].kind != PX_FV_NULL)
    px_lossy_add(lossy, "messages[].content[].citations");
#undef HAS
  *out = p;
  return 0;
bad:;
  char pp[96];
  snprintf(pp, sizeof(pp), "%s[%zu].type", path, i);
  return FAIL(err, pp, "%s: system blocks must be text", pp);
}

/* a system value (the member, or a system turn's content) at the cursor:
 * its TEXT parts appended to *head .. *tail */
static int decode_system(px_fw_t *w, const char *path, px_fpart_t **head,
                         px_fpart_t **tail, px_arena_t *a, px_lossy_t *lossy,
                         px_tr_err_t *err) {
  px_fv_kind_t kind = px_fw_peek(w);
  if (kind == PX_FV_STR) {
    px_fv_t v;
    if (px_fw_value(w, &v) < 0) return DECLINE;
    if (v.s.n > 0) {
      px_fpart_t *p = px_fpart_text(a, v.s);
      if (p == NULL) return DECLINE;
      px_fpart_push(head, tail, p);
    }
    return 0;
  }
  if (kind != PX_FV_ARR) {
    if (skip_value(w) != 0) return DECLINE;
    return FAIL(err, path, "%s: must be a string or an array of text blocks", path);
  }
  int r;
  size_t i = 0;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(w)) == 1) {
    px_fpart_t *p;
    int rc = text_block(w, path, i++, a, lossy, &p, err);
    if (rc != 0) return rc;
    px_fpart_push(head, tail, p);
  }
  return r < 0 ? DECLINE : 0;
}

/* an image's source (base64 data with its media type, or a URL) -> an
 * IMAGE part; path: the block's */
static int image_part(const px_fv_t *src, const fpath_t *path, px_arena_t *a,
                      px_fpart_t **out, px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("media_type"), PX_FK("data"),
                                   PX_FK("url")};
  px_fv_t f[4];
  unsigned seen = 0;
  px_fstr_t st = {0};
  char p[96], b[300];
  if (src == NULL || src->kind != PX_FV_OBJ) {
    path_sfx(path, ".source", p);
    return FAIL(err, p, "%s: missing image source", p);
  }
  if (px_fv_kfields(src, keys, 4, f, &seen) != 0) return DECLINE;
  int rc = plain_str((seen & 1) ? &f[0] : NULL, &st);
  if (rc == 1 && px_fs_is(st, "base64")) {
    if (!(seen & 2) || f[1].kind != PX_FV_STR || !(seen & 4) || f[2].kind != PX_FV_STR) {
      path_sfx(path, ".source", p);
      return FAIL(err, p, "%s: base64 image needs media_type and data", p);
    }
    px_fpart_t *pt = px_fpart_new(a, PX_FP_IMAGE);
    if (pt == NULL) return DECLINE;
    pt->media_type = f[1].s;
    pt->data = f[2].s;
    *out = pt;
    return 0;
  }
  if (rc == 1 && px_fs_is(st, "url") && (seen & 8) && f[3].kind == PX_FV_STR) {
    px_fpart_t *pt = px_fpart_new(a, PX_FP_IMAGE);
    if (pt == NULL) return DECLINE;
    pt->url = f[3].s;
    *out = pt;
    return 0;
  }
  path_sfx(path, ".source.type", p);
  return FAIL(err, p, "%s: image source type '%s' cannot be translated", p,
              rc == 1 ? cstr(st, b, sizeof(b)) : "(none)");
}

/* A block's members (every block kind's, read once). */
enum {
  B_TYPE,
  B_TEXT,
  B_CC,
  B_CIT,
  B_ID,
  B_NAME,
  B_INPUT,
  B_TUID,
  B_CONTENT,
  B_ISERR,
  B_THINKING,
  B_SIG,
  B_DATA,
  B_SOURCE,
  B_TITLE,
  B_CONTEXT
};
static const px_fkey_t block_keys[] = {
    PX_FK("type"),    PX_FK("text"),     PX_FK("cache_control"), PX_FK("citations"),
    PX_FK("id"),      PX_FK("name"),     PX_FK("input"),         PX_FK("tool_use_id"),
    PX_FK("content"), PX_FK("is_error"), PX_FK("thinking"),      PX_FK("signature"),
    PX_FK("data"),    PX_FK("source"),   PX_FK("title"),         PX_FK("context")};

typedef struct {
  px_fv_t f[NKEYS(block_keys)];
  unsigned seen;
} block_t;
#define BHAS(b, x) ((b)->seen & (1u << (x)))

/* the block at the cursor read (no member when it is no object: skipped);
 * 0 or DECLINE */
static int read_block(px_fw_t *w, block_t *b) {
  b->seen = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) return skip_value(w);
  return px_fw_kfields(w, block_keys, NKEYS(block_keys), b->f, &b->seen) != 0 ? DECLINE
                                                                              : 0;
}

/* a part appended to the list *head .. *tail (NULL: out of memory) */
static int push_new(px_fpart_t **head, px_fpart_t **tail, px_fpart_t *p) {
  if (p == NULL) return DECLINE;
  px_fpart_push(head, tail, p);
  return 0;
}

/* a document block -> FILE or TEXT parts (text sources: the words are the
 * content) */
static int document(const block_t *blk, const fpath_t *path, px_fpart_t **head,
                    px_fpart_t **tail, px_arena_t *a, px_lossy_t *lossy,
                    px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("media_type"), PX_FK("data"),
                                   PX_FK("url"),  PX_FK("file_id"),    PX_FK("content")};
  enum { S_TYPE, S_MT, S_DATA, S_URL, S_FID, S_CONTENT };
  px_fv_t f[NKEYS(keys)];
  unsigned seen = 0;
  px_fstr_t st = {0};
  char p[96], b[300];
#define HAS(x) (seen & (1u << (x)))
  if (!BHAS(blk, B_SOURCE) || blk->f[B_SOURCE].kind != PX_FV_OBJ) {
    path_sfx(path, ".source", p);
    return FAIL(err, p, "%s: missing document source", p);
  }
  if (px_fv_kfields(&blk->f[B_SOURCE], keys, NKEYS(keys), f, &seen) != 0) return DECLINE;
  int rs = plain_str(HAS(S_TYPE) ? &f[S_TYPE] : NULL, &st);
  int titled = BHAS(blk, B_TITLE) && blk->f[B_TITLE].kind == PX_FV_STR;
  if (BHAS(blk, B_CONTEXT)) px_lossy_add(lossy, "messages[].content[].context");
  if (BHAS(blk, B_CIT)) px_lossy_add(lossy, "messages[].content[].citations");
  if (BHAS(blk, B_CC)) px_lossy_add(lossy, "cache_control");
  px_fpart_t *pt;
  if (rs == 1 && px_fs_is(st, "base64")) {
    if (!HAS(S_MT) || f[S_MT].kind != PX_FV_STR || !HAS(S_DATA) ||
        f[S_DATA].kind != PX_FV_STR) {
      path_sfx(path, ".source", p);
      return FAIL(err, p, "%s: base64 document needs media_type and data", p);
    }
    if ((pt = px_fpart_new(a, PX_FP_FILE)) == NULL) return DECLINE;
    pt->media_type = f[S_MT].s;
    pt->data = f[S_DATA].s;
    if (titled) pt->filename = blk->f[B_TITLE].s;
    px_fpart_push(head, tail, pt);
    return 0;
  }
  if (rs == 1 && px_fs_is(st, "url") && HAS(S_URL) && f[S_URL].kind == PX_FV_STR) {
    if ((pt = px_fpart_new(a, PX_FP_FILE)) == NULL) return DECLINE;
    pt->url = f[S_URL].s;
    px_fpart_push(head, tail, pt);
  } else if (rs == 1 && px_fs_is(st, "file") && HAS(S_FID) &&
             f[S_FID].kind == PX_FV_STR) {
    if ((pt = px_fpart_new(a, PX_FP_FILE)) == NULL) return DECLINE;
    pt->file_id = f[S_FID].s;
    px_fpart_push(head, tail, pt);
  } else if (rs == 1 && px_fs_is(st, "text") && HAS(S_DATA) &&
             f[S_DATA].kind == PX_FV_STR) {
    if (push_new(head, tail, px_fpart_text(a, f[S_DATA].s)) != 0) return DECLINE;
  } else if (rs == 1 && px_fs_is(st, "content")) {
    px_fv_t *c = HAS(S_CONTENT) ? &f[S_CONTENT] : NULL;
    if (c != NULL && c->kind == PX_FV_STR) {
      if (push_new(head, tail, px_fpart_text(a, c->s)) != 0) return DECLINE;
    } else if (c != NULL && c->kind == PX_FV_ARR) {
      px_fw_t cw = {c->raw.ptr, c->raw.len, 0};
      int r;
      size_t i = 0;
      if (px_fw_open(&cw, '[') < 0) return DECLINE;
      while ((r = px_fw_elem(&cw)) == 1) {
        block_t e;
        px_fstr_t et = {0};
        fpath_t q = {path, 1, i++, 0};
        if (read_block(&cw, &e) != 0) return DECLINE;
        int rt = plain_str(BHAS(&e, B_TYPE) ? &e.f[B_TYPE] : NULL, &et);
        if (rt == 1 && px_fs_is(et, "text") && BHAS(&e, B_TEXT) &&
            e.f[B_TEXT].kind == PX_FV_STR) {
          if (push_new(head, tail, px_fpart_text(a, e.f[B_TEXT].s)) != 0) return DECLINE;
        } else if (rt == 1 && px_fs_is(et, "image")) {
          int rc =
              image_part(BHAS(&e, B_SOURCE) ? &e.f[B_SOURCE] : NULL, &q, a, &pt, err);
          if (rc != 0) return rc;
          px_fpart_push(head, tail, pt);
        } else {
          path_sfx(&q, ".type", p);
          return FAIL(err, p, "%s: unsupported document content block", p);
        }
      }
      if (r < 0) return DECLINE;
    }
  } else {
    path_sfx(path, ".source.type", p);
    return FAIL(err, p, "%s: document source type '%s' cannot be translated", p,
                rs == 1 ? cstr(st, b, sizeof(b)) : "(none)");
  }
#undef HAS
  if (BHAS(blk, B_TITLE) && blk->f[B_TITLE].kind == PX_FV_STR)
    px_lossy_add(lossy, "messages[].content[].title");
  return 0;
}

/* a search_result block (RAG content with a source) -> its texts as TEXT
 * parts; the source, title and citations have no IR slot */
static int search_result(const block_t *blk, px_fpart_t **head, px_fpart_t **tail,
                         px_arena_t *a, px_lossy_t *lossy) {
  static const px_fkey_t keys[] = {PX_FK("text")};
  if (BHAS(blk, B_CONTENT) && blk->f[B_CONTENT].kind == PX_FV_ARR) {
    px_fw_t w = {blk->f[B_CONTENT].raw.ptr, blk->f[B_CONTENT].raw.len, 0};
    int r;
    if (px_fw_open(&w, '[') < 0) return DECLINE;
    while ((r = px_fw_elem(&w)) == 1) {
      px_fv_t f[1];
      unsigned seen = 0;
      if (px_fw_peek(&w) != PX_FV_OBJ) {
        if (skip_value(&w) != 0) return DECLINE;
        continue;
      }
      if (px_fw_kfields(&w, keys, 1, f, &seen) != 0) return DECLINE;
      if (seen && f[0].kind == PX_FV_STR &&
          push_new(head, tail, px_fpart_text(a, f[0].s)) != 0)
        return DECLINE;
    }
    if (r < 0) return DECLINE;
  }
  px_lossy_add(lossy, "messages[].content[].search_result");
  return 0;
}

/* tool_result content: absent/null, a string, or blocks (text, images,
 * documents, search results, tool references) */
static int tool_result_content(const block_t *blk, const fpath_t *path, px_fpart_t *part,
                               px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  const px_fv_t *c = BHAS(blk, B_CONTENT) ? &blk->f[B_CONTENT] : NULL;
  char p[96];
  if (c == NULL || c->kind == PX_FV_NULL) return 0;
  if (c->kind == PX_FV_STR) {
    part->content = px_fpart_text(a, c->s);
    return part->content ? 0 : DECLINE;
  }
  if (c->kind != PX_FV_ARR) {
    path_sfx(path, ".content", p);
    return FAIL(err, p, "%s: must be a string or an array of blocks", p);
  }
  px_fw_t w = {c->raw.ptr, c->raw.len, 0};
  px_fpart_t *tail = NULL;
  int r;
  size_t i = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(&w)) == 1) {
    block_t b;
    px_fstr_t t = {0};
    fpath_t q = {path, 0, i++, 0};
    px_fpart_t *pt = NULL;
    int rc;
    if (read_block(&w, &b) != 0) return DECLINE;
    int rt = plain_str(BHAS(&b, B_TYPE) ? &b.f[B_TYPE] : NULL, &t);
    if (rt == 1 && px_fs_is(t, "text") && BHAS(&b, B_TEXT) &&
        b.f[B_TEXT].kind == PX_FV_STR) {
      if ((pt = px_fpart_text(a, b.f[B_TEXT].s)) == NULL) return DECLINE;
      if (BHAS(&b, B_CIT)) px_lossy_add(lossy, "messages[].content[].citations");
    } else if (rt == 1 && px_fs_is(t, "image")) {
      rc = image_part(BHAS(&b, B_SOURCE) ? &b.f[B_SOURCE] : NULL, &q, a, &pt, err);
      if (rc != 0) return rc;
    } else if (rt == 1 && px_fs_is(t, "document")) {
      if ((rc = document(&b, &q, &part->content, &tail, a, lossy, err)) != 0) return rc;
    } else if (rt == 1 && px_fs_is(t, "search_result")) {
      if (search_result(&b, &part->content, &tail, a, lossy) != 0) return DECLINE;
    } else if (rt == 1 && px_fs_is(t, "tool_reference")) {
      /* every tool is always loaded at the target: only the marker goes */
      px_lossy_add(lossy, "messages[].content[].content[].tool_reference");
    } else {
      char pq[96], tq[112], tb[300];
      path_of(&q, pq);
      snprintf(tq, sizeof(tq), "%s.type", pq);
      return FAIL(err, tq, "%s: tool_result content type '%s' is not supported", tq,
                  rt == 1 ? cstr(t, tb, sizeof(tb)) : "(none)");
    }
    if (BHAS(&b, B_CC) && !px_fs_is(t, "document")) px_lossy_add(lossy, "cache_control");
    if (pt != NULL) px_fpart_push(&part->content, &tail, pt);
  }
  return r < 0 ? DECLINE : 0;
}

/* server-side tools' blocks: dropped and named there */
static int server_result_type(px_fstr_t t) {
  static const char suffix[] = "_tool_result";
  return !px_fs_is(t, suffix) && px_fs_ends(t, suffix, sizeof(suffix) - 1);
}

/* One content block of a message at the cursor -> 0..n parts of m. */
static int decode_block(px_fw_t *w, const fpath_t *path, px_fmsg_t *m, px_arena_t *a,
                        px_lossy_t *lossy, px_tr_err_t *err) {
  block_t blk;
  const px_fv_t *f = blk.f;
  px_fstr_t t = {0};
  char p[96], b[300];
  int rc, assistant = m->assistant;
  if (read_block(w, &blk) != 0) return DECLINE;
  rc = plain_str(BHAS(&blk, B_TYPE) ? &f[B_TYPE] : NULL, &t);
  if (rc == 0) {
    path_sfx(path, ".type", p);
    return FAIL(err, p, "%s: content block without a type", p);
  }
#define HAS(x) BHAS(&blk, x)
  px_fpart_t *pt;
  if (px_fs_is(t, "text")) {
    if (!HAS(B_TEXT) || f[B_TEXT].kind != PX_FV_STR) {
      path_sfx(path, ".text", p);
      return FAIL(err, p, "%s: text block without text", p);
    }
    pt = px_fpart_text(a, f[B_TEXT].s);
    if (pt == NULL) return DECLINE;
    if (HAS(B_CC)) pt->cache_control = f[B_CC].raw;
    if (HAS(B_CIT) && f[B_CIT].kind != PX_FV_NULL)
      px_lossy_add(lossy, "messages[].content[].citations");
  } else if (px_fs_is(t, "image")) {
    if ((rc = image_part(HAS(B_SOURCE) ? &f[B_SOURCE] : NULL, path, a, &pt, err)) != 0)
      return rc;
    if (HAS(B_CC)) px_lossy_add(lossy, "cache_control");
  } else if (px_fs_is(t, "document")) {
    return document(&blk, path, &m->parts, &m->last, a, lossy, err);
  } else if (px_fs_is(t, "search_result")) {
    return search_result(&blk, &m->parts, &m->last, a, lossy);
  } else if (px_fs_is(t, "tool_use")) {
    if (!assistant) {
      path_sfx(path, ".type", p);
      return FAIL(err, p, "%s: tool_use only in assistant turns", p);
    }
    if (!HAS(B_ID) || !HAS(B_NAME) || f[B_ID].kind != PX_FV_STR ||
        f[B_NAME].kind != PX_FV_STR) {
      path_sfx(path, ".id", p);
      return FAIL(err, p, "%s: tool_use needs id and name", p);
    }
    pt = px_fpart_new(a, PX_FP_TOOL_CALL);
    if (pt == NULL) return DECLINE;
    pt->id = f[B_ID].s;
    pt->name = f[B_NAME].s;
    if (!HAS(B_INPUT)) {
      pt->args = (px_fstr_t){"{}", 2, 0};
    } else {
      if (px_fast_dump_value(a, f[B_INPUT].raw, &pt->args) != 0) return DECLINE;
      if (f[B_INPUT].kind == PX_FV_OBJ) pt->input = f[B_INPUT].raw;
    }
    if (HAS(B_CC)) px_lossy_add(lossy, "cache_control");
  } else if (px_fs_is(t, "tool_result")) {
    if (assistant) {
      path_sfx(path, ".type", p);
      return FAIL(err, p, "%s: tool_result only in user turns", p);
    }
    if (!HAS(B_TUID) || f[B_TUID].kind != PX_FV_STR) {
      path_sfx(path, ".tool_use_id", p);
      return FAIL(err, p, "%s: tool_result needs tool_use_id", p);
    }
    pt = px_fpart_new(a, PX_FP_TOOL_RESULT);
    if (pt == NULL) return DECLINE;
    pt->id = f[B_TUID].s;
    if ((rc = tool_result_content(&blk, path, pt, a, lossy, err)) != 0) return rc;
    pt->is_error = HAS(B_ISERR) && f[B_ISERR].kind == PX_FV_TRUE;
    if (HAS(B_CC)) px_lossy_add(lossy, "cache_control");
  } else if (px_fs_is(t, "thinking")) {
    /* its signature back to its family's field (px_rtok_in) */
    pt = px_fpart_new(a, PX_FP_REASONING);
    if (pt == NULL) return DECLINE;
    pt->text = HAS(B_THINKING) && f[B_THINKING].kind == PX_FV_STR ? f[B_THINKING].s
                                                                  : (px_fstr_t){"", 0, 0};
    if (HAS(B_SIG) && f[B_SIG].kind == PX_FV_STR &&
        px_frtok_in(PX_PROTO_ANTHROPIC, pt, f[B_SIG].s) != 0)
      return DECLINE;
  } else if (px_fs_is(t, "redacted_thinking")) {
    int k = px_frtok_index("redacted_data");
    pt = px_fpart_new(a, PX_FP_REASONING);
    if (pt == NULL || k < 0) return DECLINE;
    pt->text = (px_fstr_t){"", 0, 0};
    pt->tok[k] =
        HAS(B_DATA) && f[B_DATA].kind == PX_FV_STR ? f[B_DATA].s : (px_fstr_t){"", 0, 0};
  } else if (px_fs_is(t, "server_tool_use") || px_fs_is(t, "mcp_tool_use")) {
    px_lossy_add(lossy, "messages[].content[].server_tool_use");
    return 0;
  } else if (server_result_type(t)) {
    px_lossy_add(lossy, "messages[].content[].server_tool_result");
    return 0;
  } else {
    path_sfx(path, ".type", p);
    return FAIL(err, p, "%s: content block type '%s' cannot be translated", p,
                cstr(t, b, sizeof(b)));
  }
#undef HAS
  px_fpart_push(&m->parts, &m->last, pt);
  return 0;
}

/* message i's content at the cursor: a string, or blocks decoded where
 * they stand */
static int message_content(px_fw_t *w, size_t i, px_fmsg_t *m, px_arena_t *a,
                           px_lossy_t *lossy, px_tr_err_t *err) {
  px_fv_kind_t kind = px_fw_peek(w);
  if (kind == PX_FV_STR) {
    px_fv_t v;
    px_fpart_t *p = px_fw_value(w, &v) < 0 ? NULL : px_fpart_text(a, v.s);
    if (p == NULL) return DECLINE;
    px_fpart_push(&m->parts, &m->last, p);
    return 0;
  }
  int r;
  if (kind != PX_FV_ARR) {
    char p[96];
    if (skip_value(w) != 0) return DECLINE;
    snprintf(p, sizeof(p), "messages[%zu].content", i);
    return FAIL(err, p, "%s: must be a string or an array of blocks", p);
  }
  fpath_t path = {NULL, 0, i, 0};
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fw_elem(w)) == 1) {
    int rc = decode_block(w, &path, m, a, lossy, err);
    if (rc != 0) return rc;
    path.j++;
  }
  return r < 0 ? DECLINE : 0;
}

/* Whether the last message is an assistant turn with tool calls (a system
 * turn after it joins the system: the results must follow the calls). */
static int after_tool_calls(const px_freq_t *ir) {
  const px_fmsg_t *m = ir->msgs_last;
  if (m == NULL || !m->assistant) return 0;
  for (const px_fpart_t *p = m->parts; p; p = p->next)
    if (p->type == PX_FP_TOOL_CALL) return 1;
  return 0;
}

/* A message's content at the cursor for its role (0 user, 1 assistant, 2
 * system: into *sys .. *sys_last). */
static int role_content(px_fw_t *w, size_t i, int role, px_fmsg_t *m, px_fpart_t **sys,
                        px_fpart_t **sys_last, px_arena_t *a, px_lossy_t *lossy,
                        px_tr_err_t *err) {
  if (role < 2) return message_content(w, i, m, a, lossy, err);
  char p[96];
  snprintf(p, sizeof(p), "messages[%zu].content", i);
  return decode_system(w, p, sys, sys_last, a, lossy, err);
}

/* messages: {role, content} (other members ignored there); the content is
 * decoded where it stands once the role is known (one walk of the body),
 * else kept and decoded at the role. A system turn before any other, or
 * right after tool calls, joins the system (*fold); elsewhere it stays in
 * place as a system note. A refusal waits for the message's end (a
 * repeated member there declines). */
static int decode_messages(px_fw_t *w, px_freq_t *ir, px_fpart_t **fold,
                           px_fpart_t **fold_last, px_arena_t *a, px_lossy_t *lossy,
                           px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("role"), PX_FK("content")};
  int r;
  size_t i = 0;
  if (px_fw_peek(w) != PX_FV_ARR) {
    if (skip_value(w) != 0) return DECLINE;
    return FAIL(err, "messages", "messages: must be an array");
  }
  if (px_fw_open(w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(w)) == 1; i++) {
    char p[96];
    if (px_fw_peek(w) != PX_FV_OBJ) {
      if (skip_value(w) != 0) return DECLINE;
      snprintf(p, sizeof(p), "messages[%zu].role", i);
      return FAIL(err, p, "%s: missing role", p);
    }
    px_fstr_t k;
    px_fv_t v, content;
    px_fmsg_t *m = NULL;
    px_fpart_t *sys = NULL, *sys_last = NULL;
    unsigned seen = 0;
    int rm, role = -1, refused = 0;
    if (px_fw_open(w, '{') < 0) return DECLINE;
    while ((rm = px_fw_member(w, &k)) == 1) {
      int ki = px_fk_of(k, keys, 2);
      if (k.esc) return DECLINE;
      if (ki < 0) {
        if (px_fw_value(w, &v) < 0) return DECLINE;
        continue;
      }
      if (px_fw_seen_twice(&seen, ki)) return DECLINE;
      if (ki == 1) {
        size_t at = w->i;
        int rc = role >= 0 && !refused
                     ? role_content(w, i, role, m, &sys, &sys_last, a, lossy, err)
                     : (px_fw_value(w, &content) < 0 ? DECLINE : 0);
        if (rc == REFUSE) {
          refused = 1;
          w->i = at;
          rc = skip_value(w);
        }
        if (rc != 0) return DECLINE;
        continue;
      }
      if (px_fw_value(w, &v) < 0) return DECLINE;
      px_fstr_t rs;
      int rc = plain_str(&v, &rs);
      if (rc == 1 && px_fs_is(rs, "user")) {
        role = 0;
      } else if (rc == 1 && px_fs_is(rs, "assistant")) {
        role = 1;
      } else if (rc == 1 && px_fs_is(rs, "system")) {
        role = 2;
      } else {
        char b[300];
        snprintf(p, sizeof(p), "messages[%zu].role", i);
        if (rc == 1)
          px_tr_fail(err, p, "%s: role '%s' is not supported", p, cstr(rs, b, sizeof(b)));
        else
          px_tr_fail(err, p, "%s: missing role", p);
        refused = 1;
        continue;
      }
      if (role < 2 && (m = px_fmsg_push(ir, a, role)) == NULL) return DECLINE;
      if (seen & 2) { /* the content came first */
        px_fw_t cw = {content.raw.ptr, content.raw.len, 0};
        int rc2 = role_content(&cw, i, role, m, &sys, &sys_last, a, lossy, err);
        if (rc2 == REFUSE)
          refused = 1;
        else if (rc2 != 0)
          return DECLINE;
      }
    }
    if (rm < 0) return DECLINE;
    if (refused) return REFUSE;
    if (role < 0) {
      snprintf(p, sizeof(p), "messages[%zu].role", i);
      return FAIL(err, p, "%s: missing role", p);
    }
    if (!(seen & 2)) {
      snprintf(p, sizeof(p), "messages[%zu].content", i);
      return role == 2
                 ? FAIL(err, p, "%s: must be a string or an array of text blocks", p)
                 : FAIL(err, p, "%s: must be a string or an array of blocks", p);
    }
    if (role < 2 || sys == NULL) continue;
    if (ir->msgs == NULL || after_tool_calls(ir)) {
      if (*fold_last)
        (*fold_last)->next = sys;
      else
        *fold = sys;
      *fold_last = sys_last;
    } else {
      px_fmsg_t *note = px_fmsg_push(ir, a, 0);
      if (note == NULL) return DECLINE;
      note->system_note = 1;
      note->parts = sys;
      note->last = sys_last;
    }
  }
  return r < 0 ? DECLINE : 0;
}

enum { T_TYPE, T_NAME, T_DESC, T_SCHEMA, T_STRICT, T_CC };
static const px_fkey_t tool_keys[] = {PX_FK("type"), PX_FK("name"), PX_FK("description"),
                                      PX_FK("input_schema"), PX_FK("strict"),
                                      PX_FK("cache_control")};

/* the members of a tool the IR has no slot for, named as the reference
 * names them, in member order */
static int tool_extra_lossy(px_str_t raw, px_lossy_t *lossy) {
  static const px_fkey_t named[] = {PX_FK("defer_loading"), PX_FK("input_examples"),
                                    PX_FK("eager_input_streaming"),
                                    PX_FK("allowed_callers")};
  static const char *const names[] = {"tools[].defer_loading", "tools[].input_examples",
                                      "tools[].eager_input_streaming",
                                      "tools[].allowed_callers"};
  px_fw_t w = {raw.ptr, raw.len, 0};
  px_fstr_t k;
  px_fv_t v;
  int r;
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    if (px_fw_value(&w, &v) < 0) return DECLINE;
    if (px_fk_of(k, tool_keys, NKEYS(tool_keys)) >= 0) continue;
    int i = px_fk_of(k, named, NKEYS(named));
    px_lossy_add(lossy, i >= 0 ? names[i] : "tools[].unknown_field");
  }
  return r < 0 ? DECLINE : 0;
}

static int decode_tools(px_fw_t *w, px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy,
                        px_tr_err_t *err) {
  int r;
  size_t i = 0;
  char p[96];
  if (px_fw_peek(w) != PX_FV_ARR) {
    if (skip_value(w) != 0) return DECLINE;
    return FAIL(err, "tools", "tools: must be an array");
  }
  if (px_fw_open(w, '[') < 0) return DECLINE;
  for (; (r = px_fw_elem(w)) == 1; i++) {
    px_fstr_t k;
    px_fv_t f[NKEYS(tool_keys)];
    unsigned seen = 0;
    int rm, extra = 0;
    size_t start = w->i;
    if (px_fw_peek(w) != PX_FV_OBJ) {
      if (skip_value(w) != 0) return DECLINE;
      snprintf(p, sizeof(p), "tools[%zu].name", i);
      return FAIL(err, p, "%s: missing tool name", p);
    }
    if (px_fw_open(w, '{') < 0) return DECLINE;
    while ((rm = px_fw_member(w, &k)) == 1) {
      int ki = px_fk_of(k, tool_keys, NKEYS(tool_keys));
      px_fv_t v;
      if (k.esc || px_fw_value(w, &v) < 0) return DECLINE;
      if (ki < 0) {
        extra = 1;
        continue;
      }
      if (px_fw_seen_twice(&seen, ki)) return DECLINE;
      f[ki] = v;
    }
#define HAS(x) (seen & (1u << (x)))
    if (rm < 0) return DECLINE;
    if (HAS(T_TYPE) && f[T_TYPE].kind == PX_FV_STR) {
      if (!px_fs_is(f[T_TYPE].s, "custom")) { /* a server tool, run at Anthropic */
        px_lossy_add(lossy, "tools[].server_tool");
        continue;
      }
    }
    if (!HAS(T_NAME) || f[T_NAME].kind != PX_FV_STR) {
      snprintf(p, sizeof(p), "tools[%zu].name", i);
      return FAIL(err, p, "%s: missing tool name", p);
    }
    px_ftool_t *t = px_ftool_push(ir, a, f[T_NAME].s, HAS(T_DESC) ? &f[T_DESC] : NULL,
                                  HAS(T_SCHEMA) ? &f[T_SCHEMA] : NULL,
                                  HAS(T_STRICT) ? &f[T_STRICT] : NULL,
                                  (px_str_t){"{\"type\":\"object\"}", 17});
    if (t == NULL) return DECLINE;
    if (HAS(T_CC)) t->cache_control = f[T_CC].raw;
#undef HAS
    if (extra && tool_extra_lossy((px_str_t){w->p + start, w->i - start}, lossy) != 0)
      return DECLINE;
  }
  return r < 0 ? DECLINE : 0;
}

static int decode_tool_choice(px_fw_t *w, px_freq_t *ir, px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("name"),
                                   PX_FK("disable_parallel_tool_use")};
  px_fv_t f[3];
  unsigned seen = 0;
  px_fstr_t type = {0};
  char b[300];
  int rt = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) {
    if (skip_value(w) != 0) return DECLINE;
  } else if (px_fw_kfields(w, keys, 3, f, &seen) != 0) {
    return DECLINE;
  } else {
    rt = plain_str((seen & 1) ? &f[0] : NULL, &type);
  }
  if (rt == 0) return FAIL(err, "tool_choice.type", "tool_choice.type: missing");
  px_fstr_t name = (seen & 2) && f[1].kind == PX_FV_STR ? f[1].s : (px_fstr_t){0};
  int disable = (seen & 4) && f[2].kind == PX_FV_TRUE;
  if (px_fs_is(type, "auto")) ir->tool_choice = PX_FTC_AUTO;
  else if (px_fs_is(type, "any")) ir->tool_choice = PX_FTC_REQUIRED;
  else if (px_fs_is(type, "none")) ir->tool_choice = PX_FTC_NONE;
  else if (px_fs_is(type, "tool") && name.p != NULL) {
    ir->tool_choice = PX_FTC_TOOL;
    ir->tc_name = name;
  } else
    return FAIL(err, "tool_choice.type", "tool_choice.type: '%s' is not supported",
                cstr(type, b, sizeof(b)));
  if (disable) ir->parallel = 0;
  return 0;
}

/* The members of the object at the cursor as jansson's foreach reads them
 * (a value that is no object: none), each to fn; escaped or repeated names
 * decline (key_once). fn's first refusal is the answer once the object is
 * read whole (a repeated member after it declines). */
typedef int (*member_fn)(px_fstr_t k, const px_fv_t *v, px_freq_t *ir, px_lossy_t *lossy,
                         px_tr_err_t *err);

static int each_member(px_fw_t *w, member_fn fn, px_freq_t *ir, px_arena_t *a,
                       px_lossy_t *lossy, px_tr_err_t *err) {
  px_fstr_t k;
  px_fv_t v;
  key_seen_t *seen = NULL;
  int r, refused = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) return skip_value(w);
  if (px_fw_open(w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(w, &k)) == 1) {
    if (px_fw_value(w, &v) < 0 || k.esc || key_once(k, &seen, a) != 0) return DECLINE;
    if (refused) continue;
    int rc = fn(k, &v, ir, lossy, err);
    if (rc == REFUSE)
      refused = 1;
    else if (rc != 0)
      return DECLINE;
  }
  return r < 0 ? DECLINE : refused ? REFUSE : 0;
}

/* metadata: user_id -> the IR user; anything else named */
static int metadata_member(px_fstr_t k, const px_fv_t *v, px_freq_t *ir,
                           px_lossy_t *lossy, px_tr_err_t *err) {
  (void)err;
  if (px_fs_is(k, "user_id") && v->kind == PX_FV_STR)
    ir->user = v->s;
  else if (v->kind != PX_FV_NULL)
    px_lossy_add(lossy, "metadata");
  return 0;
}

/* thinking {type, budget_tokens, display} -> the IR reasoning */
static int decode_thinking(px_fw_t *w, px_freq_t *ir, px_lossy_t *lossy,
                           px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("budget_tokens"),
                                   PX_FK("display")};
  px_fv_t f[3];
  unsigned seen = 0;
  px_fstr_t t = {0};
  char b[300];
  int rt = 0;
  if (px_fw_peek(w) != PX_FV_OBJ) {
    if (skip_value(w) != 0) return DECLINE;
  } else if (px_fw_kfields(w, keys, 3, f, &seen) != 0) {
    return DECLINE;
  } else {
    rt = plain_str((seen & 1) ? &f[0] : NULL, &t);
  }
  if (rt == 1 && px_fs_is(t, "enabled")) {
    ir->reasoning_enabled = 1;
    if ((seen & 2) && f[1].kind == PX_FV_NUM && px_fw_is_int(f[1].raw)) {
      if (px_fw_uint(f[1].raw, &ir->budget_v) < 0) return DECLINE; /* negative, huge */
      ir->budget = f[1].raw;
      if (ir->effort.p == NULL) {
        const char *e = px_effort_of_budget(ir->budget_v);
        ir->effort = (px_fstr_t){e, strlen(e), 0};
      }
    }
  } else if (rt == 1 && px_fs_is(t, "adaptive")) {
    ir->reasoning_enabled = 1;
  } else if (rt == 1 && px_fs_is(t, "disabled")) {
    ir->reasoning_enabled = 0;
  } else {
    return FAIL(err, "thinking.type", "thinking.type: '%s' is not supported",
                rt == 1 ? cstr(t, b, sizeof(b)) : "(none)");
  }
  ir->has_reasoning = 1;
  if (seen & 4) px_lossy_add(lossy, "thinking.display");
  return 0;
}

/* output_config.format / output_format (at path): a JSON schema -> the IR
 * response_format (named "response": OpenAI needs a name) */
static int decode_json_format(const px_fv_t *v, const char *path, px_freq_t *ir,
                              px_tr_err_t *err) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("schema")};
  px_fv_t f[2];
  unsigned seen = 0;
  px_fstr_t t = {0};
  char p[96];
  int rt = 0;
  if (v->kind == PX_FV_OBJ) {
    if (px_fv_kfields(v, keys, 2, f, &seen) != 0) return DECLINE;
    rt = plain_str((seen & 1) ? &f[0] : NULL, &t);
  }
  if (rt == 0 || !px_fs_is(t, "json_schema")) {
    snprintf(p, sizeof(p), "%s.type", path);
    return FAIL(err, p, "%s: only json_schema output formats are supported", p);
  }
  if (!(seen & 2) || f[1].kind != PX_FV_OBJ) {
    snprintf(p, sizeof(p), "%s.schema", path);
    return FAIL(err, p, "%s: must be an object", p);
  }
  ir->rf_schema = f[1].raw;
  ir->rf_name = (px_fstr_t){"response", 8, 0};
  return 0;
}

/* output_config {effort, format} -> the IR reasoning effort, response_format */
static int output_config_member(px_fstr_t k, const px_fv_t *v, px_freq_t *ir,
                                px_lossy_t *lossy, px_tr_err_t *err) {
  static const char *const efforts[] = {"low", "medium", "high", "max", "xhigh"};
  if (v->kind == PX_FV_NULL) return 0;
  if (px_fs_is(k, "effort")) {
    int e = v->kind == PX_FV_STR ? px_fs_of(v->s, efforts, 5) : -1;
    if (e < 0)
      return FAIL(err, "output_config.effort", "output_config.effort: unknown value");
    const char *ie = e >= 3 ? "xhigh" : efforts[e];
    /* the explicit effort wins over one derived from budget_tokens */
    ir->effort = (px_fstr_t){ie, strlen(ie), 0};
    ir->has_reasoning = 1;
    return 0;
  }
  if (px_fs_is(k, "format"))
    return decode_json_format(v, "output_config.format", ir, err);
  px_lossy_add(lossy, "output_config");
  return 0;
}

enum {
  K_MODEL,
  K_SYSTEM,
  K_MESSAGES,
  K_MAX,
  K_TEMP,
  K_TOPP,
  K_TOPK,
  K_STOP,
  K_STREAM,
  K_TOOLS,
  K_TC,
  K_META,
  K_THINKING,
  K_OUTCFG,
  K_OUTFMT
};
static const px_fkey_t top_keys[] = {
    PX_FK("model"),      PX_FK("system"),         PX_FK("messages"),
    PX_FK("max_tokens"), PX_FK("temperature"),    PX_FK("top_p"),
    PX_FK("top_k"),      PX_FK("stop_sequences"), PX_FK("stream"),
    PX_FK("tools"),      PX_FK("tool_choice"),    PX_FK("metadata"),
    PX_FK("thinking"),   PX_FK("output_config"),  PX_FK("output_format")};

/* a sampling member's value (max_tokens, temperature, top_p, top_k,
 * stop_sequences, stream) -> the IR */
static int decode_sampling(int ki, const px_fv_t *v, px_freq_t *ir, px_tr_err_t *err) {
  switch (ki) {
    case K_MAX:
      if (v->kind == PX_FV_NUM && px_fw_uint(v->raw, &ir->max_tokens_v) == 0) {
        if (ir->max_tokens_v < 1)
          return FAIL(err, "max_tokens", "max_tokens: must be a positive integer");
        ir->max_tokens = v->raw;
        return 0;
      }
      /* a huge positive integer: no upstream takes it */
      if (v->kind == PX_FV_NUM && px_fw_is_int(v->raw) && v->raw.ptr[0] != '-')
        return FAIL(err, "max_tokens",
                    "max_tokens: must be a positive integer of at most 18 digits");
      return FAIL(err, "max_tokens", "max_tokens: must be a positive integer");
    case K_TEMP:
    case K_TOPP:
      if (v->kind != PX_FV_NUM)
        return FAIL(err, ki == K_TEMP ? "temperature" : "top_p", "%s: must be a number",
                    ki == K_TEMP ? "temperature" : "top_p");
      if (ki == K_TEMP)
        ir->temperature = v->raw;
      else
        ir->top_p = v->raw;
      return 0;
    case K_TOPK:
      if (v->kind != PX_FV_NUM || !px_fw_is_int(v->raw))
        return FAIL(err, "top_k", "top_k: must be an integer");
      ir->top_k = v->raw;
      return 0;
    case K_STOP:
      if (v->kind != PX_FV_ARR)
        return FAIL(err, "stop_sequences", "stop_sequences: must be an array of strings");
      if (!px_fw_empty(v->raw)) ir->stop = v->raw;
      return 0;
    case K_STREAM:
      if (v->kind == PX_FV_TRUE)
        ir->stream_true = 1;
      else
        ir->stream_false = 1;
      return 0;
  }
  return 0;
}

static int anth_fast_decode_request(const px_tr_ctx_t *ctx, const char *body, size_t len,
                                    px_freq_t *ir, px_arena_t *a, px_lossy_t *lossy,
                                    px_tr_err_t *err) {
  (void)ctx;
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  key_seen_t *others = NULL;
  dec_lossy_t l;
  /* the reference's first refusal: system's, then messages', then the
   * first of the other members' in body order */
  enum { E_SYS, E_MSGS, E_REST };
  px_tr_err_t e[3], ce;
  int bad[3] = {0, 0, 0};
  px_fpart_t *fold = NULL, *fold_last = NULL;
  int r;
  px_lossy_init(&l.sys);
  px_lossy_init(&l.msgs);
  px_lossy_init(&l.rest);
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fw_member(&w, &k)) == 1) {
    if (k.esc) return DECLINE;
    int ki = px_fk_of(k, top_keys, NKEYS(top_keys));
    if (ki >= 0 ? px_fw_seen_twice(&seen, ki) : key_once(k, &others, a) != 0)
      return DECLINE;
    px_fv_t v;
    if (px_fw_peek(&w) == PX_FV_NULL && ki != K_MESSAGES) {
      if (px_fw_value(&w, &v) < 0) return DECLINE;
      continue; /* a null member is no member there */
    }
    int cat = ki == K_SYSTEM ? E_SYS : ki == K_MESSAGES ? E_MSGS : E_REST;
    size_t at = w.i;
    int rc = 0;
    switch (ki) {
      case K_SYSTEM:
        rc = decode_system(&w, "system", &ir->system, &ir->system_last, a, &l.sys, &ce);
        break;
      case K_MESSAGES:
        rc = decode_messages(&w, ir, &fold, &fold_last, a, &l.msgs, &ce);
        break;
      case K_TOOLS:
        rc = decode_tools(&w, ir, a, &l.rest, &ce);
        break;
      case K_TC:
        rc = decode_tool_choice(&w, ir, &ce);
        break;
      case K_META:
        rc = each_member(&w, metadata_member, ir, a, &l.rest, &ce);
        break;
      case K_THINKING:
        rc = decode_thinking(&w, ir, &l.rest, &ce);
        break;
      case K_OUTCFG:
        rc = each_member(&w, output_config_member, ir, a, &l.rest, &ce);
        break;
      default:
        if (px_fw_value(&w, &v) < 0) return DECLINE;
        if (ki < 0)
          rc = px_fast_lossy_key(&l.rest, k); /* dropped, named by its own key */
        else if (ki == K_OUTFMT)
          rc = decode_json_format(&v, "output_format", ir, &ce);
        else if (ki != K_MODEL)
          rc = decode_sampling(ki, &v, ir, &ce);
    }
    if (rc == REFUSE) {
      if (!bad[cat]) e[cat] = ce; /* the first of its slot */
      bad[cat] = 1;
      w.i = at;
      if (skip_value(&w) != 0) return DECLINE;
    } else if (rc != 0) {
      return DECLINE;
    }
  }
  if (r < 0) return DECLINE;
  if (!(seen & (1u << K_MESSAGES)) && !bad[E_MSGS]) {
    px_tr_fail(&e[E_MSGS], "messages", "messages: must be an array");
    bad[E_MSGS] = 1;
  }
  for (int c = E_SYS; c <= E_REST; c++)
    if (bad[c]) {
      if (err != NULL) *err = e[c];
      return REFUSE;
    }
  /* system turns joined to the system follow its own parts */
  if (fold != NULL) {
    if (ir->system_last)
      ir->system_last->next = fold;
    else
      ir->system = fold;
    ir->system_last = fold_last;
  }
  /* joined exactly while none of them is cut short ("...") */
  if (l.sys.len + l.msgs.len + l.rest.len + 8 >= sizeof(l.rest.buf)) return DECLINE;
  px_lossy_merge(lossy, &l.sys);
  px_lossy_merge(lossy, &l.msgs);
  px_lossy_merge(lossy, &l.rest);
  return 0;
}

/* ======================================================================== */
/* Request encode                                                            */

/* Reasoning effort -> thinking budget_tokens, as the reference maps it
 * (docs/translation-anthropic.md); Anthropic's minimum budget is 1024. */
#define PX_ANTH_MIN_BUDGET 1024

typedef struct {
  const px_tr_ctx_t *ctx;
  px_arena_t *a;
  int sig, red, enc, tsig; /* px_fpart_t.tok indices of the token fields */
  /* the turns written so far: the last two's role, the last one's blocks
   * all tool results, the one before's first block thinking */
  int nturns, last_user, last_results, prev_thinking, cur_thinking;
} enc_t;

static int tok_set(const px_fpart_t *p, int k) {
  return k >= 0 && p->tok[k].p != NULL;
}

/* whether part p writes a block in a turn of its message's role (the
 * reference writes none for empty texts and unsigned reasoning) */
static int writes_block(const enc_t *e, const px_fpart_t *p, int asst) {
  switch (p->type) {
    case PX_FP_TEXT:
    case PX_FP_REFUSAL:
      return p->text.n > 0;
    case PX_FP_REASONING:
      return asst && (tok_set(p, e->red) || tok_set(p, e->sig));
    default:
      return 1;
  }
}

static int has_blocks(const enc_t *e, const px_fmsg_t *m) {
  for (const px_fpart_t *p = m->parts; p; p = p->next)
    if (writes_block(e, p, m->assistant)) return 1;
  return 0;
}

/* what the messages drop, named in their order (the blocks are written by
 * turns, tool results first: the names are not) */
static void messages_lossy(const enc_t *e, const px_freq_t *ir, px_lossy_t *lossy) {
  const px_lossy_names_t *n = px_in_names(e->ctx);
  for (const px_fmsg_t *m = ir->msgs; m; m = m->next)
    for (const px_fpart_t *p = m->parts; p; p = p->next) {
      if (p->type == PX_FP_REFUSAL) {
        px_lossy_add(lossy, n->refusal); /* no refusal block: the wording stays */
      } else if (p->type == PX_FP_REASONING && m->assistant && !tok_set(p, e->red) &&
                 !tok_set(p, e->sig)) {
        /* Anthropic rejects thinking without a valid signature */
        px_lossy_add(lossy, (tok_set(p, e->enc) || tok_set(p, e->tsig)) &&
                                    n->reasoning_token != NULL
                                ? n->reasoning_token
                                : n->reasoning_text);
      }
    }
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

static int put_source(px_buf_t *b, const char *type, px_fstr_t mt, px_fstr_t data,
                      px_fstr_t url) {
  int rc = px_fb_lit(b, type);
  if (rc == 0 && url.p != NULL) {
    rc = px_fb_lit(b, ",\"source\":{\"type\":\"url\",\"url\":");
    if (rc == 0) rc = px_fb_str(b, url);
  } else if (rc == 0) {
    rc = px_fb_lit(b, ",\"source\":{\"type\":\"base64\",\"media_type\":");
    if (rc == 0) rc = px_fb_str(b, mt);
    if (rc == 0) rc = px_fb_lit(b, ",\"data\":");
    if (rc == 0) rc = px_fb_str(b, data);
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* an IMAGE part -> an image block; a FILE part -> a document block (PDF
 * data or a URL; the others are the reference's errors) */
static int put_media(px_buf_t *b, const px_fpart_t *p) {
  px_fstr_t mt = p->media_type, data = p->data, url = p->url;
  if (url.p != NULL) { /* a data URL: its pieces (the reference's buffer: 64) */
    int d = px_fs_data_url(url, 64, &mt, &data);
    if (d == DECLINE) return DECLINE;
    if (d == 0) url = (px_fstr_t){0};
  }
  int rc;
  if (p->type == PX_FP_IMAGE) {
    if (url.p == NULL && (data.p == NULL || mt.p == NULL)) return DECLINE;
    rc = put_source(b, "{\"type\":\"image\"", mt, data, url);
  } else {
    if (url.p == NULL && (data.p == NULL || !px_fs_is(mt, "application/pdf")))
      return DECLINE;
    rc = put_source(b, "{\"type\":\"document\"", mt, data, url);
    if (rc == 0) rc = px_fb_opt_str(b, ",\"title\":", p->filename);
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* ---- the reference's refusals, in its order (every part of every
 * message, before a block is written) ---- */

/* An IMAGE / FILE part the reference refuses (encode_image, encode_file). */
static int check_media(const px_fpart_t *p, px_tr_err_t *err) {
  px_fstr_t mt = p->media_type, data = p->data, url = p->url;
  char b[300];
  if (url.p != NULL) { /* a data URL: its pieces (the reference's buffer: 64) */
    int d = px_fs_data_url(url, 64, &mt, &data);
    if (d == DECLINE) return DECLINE;
    if (d == 0) url = (px_fstr_t){0};
  }
  if (url.p != NULL) return 0;
  if (p->type == PX_FP_IMAGE)
    return data.p != NULL && mt.p != NULL
               ? 0
               : FAIL(err, "image", "image part without url or data");
  if (data.p != NULL && px_fs_is(mt, "application/pdf")) return 0;
  if (p->file_id.p != NULL)
    return FAIL(err, "file_id",
                "file_id: uploaded file references cannot be sent to an Anthropic "
                "upstream; send the file data");
  return FAIL(err, "file",
              "file: only PDF data or URLs can be sent to an Anthropic upstream (got %s)",
              mt.p != NULL ? cstr(mt, b, sizeof(b)) : "no media type");
}

/* A tool call's input made (an object), or the reference's refusal. */
static int call_input(px_fpart_t *p, px_arena_t *a) {
  if (p->input.ptr != NULL) return 0;
  int blank = px_fs_blank_value(p->args); /* also no arguments (args.p NULL) */
  if (blank == 1) {
    p->input = (px_str_t){"{}", 2};
    return 0;
  }
  if (blank < 0) return DECLINE;
  int rc = px_fast_args_object(a, p); /* no object as the reference reads it: */
  if (rc == 0) return 0;              /* refused, naming the call by its id */
  return rc == PX_FAST_ARGS_NONE ? REFUSE : DECLINE;
}

static int check_parts(const enc_t *e, const px_freq_t *ir, px_tr_err_t *err) {
  char id[300];
  for (const px_fmsg_t *m = ir->msgs; m; m = m->next)
    for (px_fpart_t *p = m->parts; p; p = p->next) {
      int rc = 0;
      if (p->type == PX_FP_IMAGE || p->type == PX_FP_FILE) {
        rc = check_media(p, err);
      } else if (p->type == PX_FP_TOOL_CALL) {
        if ((rc = call_input(p, e->a)) == REFUSE) {
          const char *n = px_in_names(e->ctx)->tool_args_param;
          px_tr_fail(err, n, "%s: arguments of tool call '%s' are not a JSON object", n,
                     p->id.p ? cstr(p->id, id, sizeof(id)) : "");
        }
      } else if (p->type == PX_FP_TOOL_RESULT) {
        const px_fpart_t *c = p->content;
        if (c != NULL && c->next == NULL && c->type == PX_FP_TEXT) continue;
        for (; c && rc == 0; c = c->next)
          if (c->type == PX_FP_IMAGE || c->type == PX_FP_FILE)
            rc = check_media(c, err);
          else if (c->type != PX_FP_TEXT)
            rc =
                FAIL(err, "tool_result.content", "tool_result.content: unsupported part");
      }
      if (rc != 0) return rc;
    }
  return 0;
}

static int put_tool_result(px_buf_t *b, const px_fpart_t *p) {
  int rc = px_fb_lit(b, "{\"type\":\"tool_result\",\"tool_use_id\":");
  if (rc == 0) rc = px_fb_str(b, p->id.p ? p->id : (px_fstr_t){"", 0, 0});
  const px_fpart_t *c = p->content;
  if (rc == 0 && c != NULL && c->next == NULL && c->type == PX_FP_TEXT) {
    rc = px_fb_lit(b, ",\"content\":");
    if (rc == 0) rc = px_fb_str(b, c->text);
  } else if (rc == 0 && c != NULL) {
    rc = px_fb_lit(b, ",\"content\":[");
    int f = 1;
    for (; c && rc == 0; c = c->next) {
      if (c->type == PX_FP_TEXT && c->text.n == 0) continue;
      if (!f) rc = px_fb_lit(b, ",");
      f = 0;
      if (rc != 0) break;
      if (c->type == PX_FP_TEXT) {
        rc = px_fb_lit(b, "{\"type\":\"text\",\"text\":");
        if (rc == 0) rc = px_fb_str(b, c->text);
        if (rc == 0) rc = px_fb_lit(b, "}");
      } else if (c->type == PX_FP_IMAGE || c->type == PX_FP_FILE) {
        rc = put_media(b, c);
      } else {
        return DECLINE; /* the reference's error */
      }
    }
    if (rc == 0) rc = px_fb_lit(b, "]");
  }
  if (rc == 0 && p->is_error) rc = px_fb_lit(b, ",\"is_error\":true");
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

static int put_block(px_buf_t *b, enc_t *e, px_fpart_t *p, int asst, int *first) {
  if (!writes_block(e, p, asst)) return 0;
  int rc = *first ? 0 : px_fb_lit(b, ",");
  if (rc < 0) return rc;
  if (*first) e->cur_thinking = p->type == PX_FP_REASONING;
  *first = 0;
  if (p->type != PX_FP_TOOL_RESULT) e->last_results = 0;
  switch (p->type) {
    case PX_FP_TEXT:
      return put_text_block(b, p);
    case PX_FP_REFUSAL:
      rc = px_fb_lit(b, "{\"type\":\"text\",\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text);
      if (rc == 0) rc = px_fb_lit(b, "}");
      return rc;
    case PX_FP_REASONING:
      if (tok_set(p, e->red)) {
        rc = px_fb_lit(b, "{\"type\":\"redacted_thinking\",\"data\":");
        if (rc == 0) rc = px_fb_str(b, p->tok[e->red]);
      } else {
        rc = px_fb_lit(b, "{\"type\":\"thinking\",\"thinking\":");
        if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : (px_fstr_t){"", 0, 0});
        if (rc == 0) rc = px_fb_lit(b, ",\"signature\":");
        if (rc == 0) rc = px_fb_str(b, p->tok[e->sig]);
      }
      if (rc == 0) rc = px_fb_lit(b, "}");
      return rc;
    case PX_FP_TOOL_CALL:
      return put_tool_use(b, p, e->a);
    case PX_FP_TOOL_RESULT:
      return put_tool_result(b, p);
    case PX_FP_IMAGE:
    case PX_FP_FILE:
      return put_media(b, p);
  }
  return DECLINE;
}

static int encode_messages(px_buf_t *b, enc_t *e, const px_freq_t *ir) {
  int rc = px_fb_lit(b, ",\"messages\":[");
  const px_fmsg_t *m = ir->msgs;
  while (rc == 0 && m != NULL) {
    if (!has_blocks(e, m)) {
      m = m->next;
      continue;
    }
    /* one turn: this message and the following ones of the same role (the
     * ones without blocks in between change nothing) */
    int asst = m->assistant;
    const px_fmsg_t *end = m->next;
    while (end != NULL && (end->assistant == asst || !has_blocks(e, end)))
      end = end->next;
    rc = px_fb_lit(b, e->nturns ? ",{\"role\":" : "{\"role\":");
    if (rc == 0) rc = px_fb_lit(b, asst ? "\"assistant\",\"content\":[" : "\"user\",\"content\":[");
    e->prev_thinking = e->cur_thinking;
    e->last_results = 1;
    e->nturns++;
    e->last_user = !asst;
    int first = 1;
    /* a user turn: tool results first, as the API requires */
    for (int pass = asst ? 1 : 0; pass < 2 && rc == 0; pass++)
      for (const px_fmsg_t *x = m; x != end && rc == 0; x = x->next)
        for (px_fpart_t *p = x->parts; p && rc == 0; p = p->next) {
          if (!asst && (pass == 0) != (p->type == PX_FP_TOOL_RESULT)) continue;
          rc = put_block(b, e, p, x->assistant, &first);
        }
    if (rc == 0) rc = px_fb_lit(b, "]}");
    m = end;
  }
  if (rc == 0) rc = px_fb_lit(b, "]");
  return rc;
}

static int64_t budget_of_effort(px_fstr_t e) {
  if (px_fs_is(e, "minimal") || px_fs_is(e, "low")) return 1024;
  if (px_fs_is(e, "high")) return 24576;
  if (px_fs_is(e, "xhigh")) return 32768;
  return 8192;
}

/* max_tokens (required) and thinking, as the reference's thinking_out:
 * *thinking set when thinking is on */
static int thinking_out(px_buf_t *b, const enc_t *e, const px_freq_t *ir, int *thinking,
                        px_lossy_t *lossy) {
  const px_tr_ctx_t *ctx = e->ctx;
  int64_t max_tokens = ir->max_tokens.ptr ? ir->max_tokens_v : 0;
  int defaulted = 0, rc = 0;
  *thinking = 0;
  if (max_tokens <= 0) {
    max_tokens = ctx->default_max_tokens > 0 ? ctx->default_max_tokens
                                             : PX_ANTH_DEFAULT_MAX_TOKENS;
    defaulted = 1;
    px_lossy_add(lossy, "max_tokens");
  }
  int64_t max_in = max_tokens;
  if (ir->has_reasoning) {
    int asks =
        ir->reasoning_enabled == 1 || ir->effort.p != NULL || ir->budget.ptr != NULL;
    /* with thinking on, Anthropic wants the assistant turn a tool loop
     * continues to start with thinking, and no forced tool choice */
    int loop = e->nturns >= 2 && e->last_user && e->last_results && !e->prev_thinking;
    int forced = (ir->tool_choice == PX_FTC_REQUIRED || ir->tool_choice == PX_FTC_TOOL) &&
                 ir->tools != NULL;
    if (ir->reasoning_enabled == 0 || px_fs_is(ir->effort, "none")) {
      rc = px_fb_lit(b, ",\"thinking\":{\"type\":\"disabled\"}");
    } else if (asks && (loop || forced)) {
      px_lossy_add(lossy, px_in_names(ctx)->reasoning_config);
    } else if (asks) {
      int64_t budget = ir->budget.ptr ? ir->budget_v : budget_of_effort(ir->effort);
      if (budget < PX_ANTH_MIN_BUDGET) budget = PX_ANTH_MIN_BUDGET;
      /* Anthropic needs max_tokens > budget_tokens (the reference's rule) */
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
      rc = px_fb_lit(b, ",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":");
      if (rc == 0) rc = px_fb_i64(b, budget);
      if (rc == 0) rc = px_fb_lit(b, "}");
      *thinking = 1;
    }
  }
  if (rc == 0) rc = px_fb_lit(b, ",\"max_tokens\":");
  if (rc == 0 && !defaulted && max_tokens == max_in)
    rc = px_fb_raw(b, ir->max_tokens);
  else if (rc == 0)
    rc = px_fb_i64(b, max_tokens);
  return rc;
}

/* a raw number token below limit (json_number_value) */
static int num_below(px_str_t raw, double limit, int *below) {
  char tmp[64];
  if (raw.len >= sizeof(tmp)) return DECLINE;
  memcpy(tmp, raw.ptr, raw.len);
  tmp[raw.len] = 0;
  *below = strtod(tmp, NULL) < limit;
  return 0;
}

/* sampling: what thinking allows, and the stop sequences */
static int sampling_out(px_buf_t *b, const px_freq_t *ir, int thinking,
                        px_lossy_t *lossy) {
  int rc = 0, low = 0;
  if (ir->temperature.ptr && thinking)
    px_lossy_add(lossy, "temperature"); /* rejected with thinking */
  else
    rc = px_fb_opt_raw(b, ",\"temperature\":", ir->temperature);
  if (rc == 0 && ir->top_p.ptr && thinking && num_below(ir->top_p, 0.95, &low) != 0)
    return DECLINE;
  if (low)
    px_lossy_add(lossy, "top_p"); /* thinking allows only 0.95..1 */
  else if (rc == 0)
    rc = px_fb_opt_raw(b, ",\"top_p\":", ir->top_p);
  if (ir->top_k.ptr && px_fw_is_int(ir->top_k)) {
    if (thinking)
      px_lossy_add(lossy, "top_k");
    else if (rc == 0)
      rc = px_fb_opt_raw(b, ",\"top_k\":", ir->top_k);
  }
  if (rc == 0 && ir->stop1.p) {
    rc = px_fb_lit(b, ",\"stop_sequences\":[");
    if (rc == 0) rc = px_fb_str(b, ir->stop1);
    if (rc == 0) rc = px_fb_lit(b, "]");
  } else if (rc == 0) {
    rc = px_fb_opt_raw(b, ",\"stop_sequences\":", ir->stop);
  }
  return rc;
}

static int tools_out(px_buf_t *b, const px_freq_t *ir, px_lossy_t *lossy) {
  int rc = 0;
  if (ir->tools == NULL) {
    if (ir->tool_choice == PX_FTC_REQUIRED || ir->tool_choice == PX_FTC_TOOL)
      px_lossy_add(lossy, "tool_choice");
    return 0;
  }
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
    case PX_FTC_AUTO:
      atc = ir->parallel == 0 ? "{\"type\":\"auto\"" : NULL;
      break;
    case PX_FTC_REQUIRED:
      atc = "{\"type\":\"any\"";
      break;
    case PX_FTC_NONE:
      atc = "{\"type\":\"none\"";
      break;
    case PX_FTC_TOOL:
      atc = "{\"type\":\"tool\",\"name\":";
      break;
  }
  if (rc == 0 && atc != NULL) {
    rc = px_fb_lit(b, ",\"tool_choice\":");
    if (rc == 0) rc = px_fb_lit(b, atc);
    if (rc == 0 && ir->tool_choice == PX_FTC_TOOL) rc = px_fb_str(b, ir->tc_name);
    if (rc == 0 && ir->parallel == 0 && ir->tool_choice != PX_FTC_NONE)
      rc = px_fb_lit(b, ",\"disable_parallel_tool_use\":true");
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  return rc;
}

/* structured output, user, metadata, stream */
static int output_out(px_buf_t *b, const px_freq_t *ir, px_lossy_t *lossy) {
  int rc = 0;
  if (ir->rf_schema.ptr != NULL) {
    rc = px_fb_lit(
        b, ",\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":");
    if (rc == 0) rc = px_fb_raw(b, ir->rf_schema);
    if (rc == 0) rc = px_fb_lit(b, "}}");
  } else if (ir->rf_json) {
    px_lossy_add(lossy, "response_format");
  }
  if (rc == 0 && ir->user.p) {
    rc = px_fb_lit(b, ",\"metadata\":{\"user_id\":");
    if (rc == 0) rc = px_fb_str(b, ir->user);
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
  if (ir->metadata.ptr && !ir->metadata_empty) px_lossy_add(lossy, "metadata");
  if (rc == 0 && ir->stream_true) rc = px_fb_lit(b, ",\"stream\":true");
  return rc;
}

static int anth_fast_encode_request(const px_tr_ctx_t *ctx, const px_freq_t *ir,
                                    px_buf_t *b, px_arena_t *a, px_lossy_t *lossy, px_tr_err_t *err) {
  enc_t e = {.ctx = ctx,
             .a = a,
             .sig = px_frtok_index("signature"),
             .red = px_frtok_index("redacted_data"),
             .enc = px_frtok_index("encrypted_content"),
             .tsig = px_frtok_index("thought_signature")};
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
  int refused = check_parts(&e, ir, err);
  if (refused != 0) return refused;
  messages_lossy(&e, ir, lossy);
  if (rc == 0) rc = encode_messages(b, &e, ir);
  int thinking = 0;
  if (rc == 0) rc = thinking_out(b, &e, ir, &thinking, lossy);
  if (rc == 0) rc = sampling_out(b, ir, thinking, lossy);
  if (rc == 0) rc = tools_out(b, ir, lossy);
  if (rc == 0) rc = output_out(b, ir, lossy);
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
  for (int i = 0; i < 4; i++) {
    if ((seen & (1u << i)) && px_fw_jint(&f[i], -1, &val[i]) != 0) return DECLINE;
    px_fast_usage_count((seen & (1u << i)) ? &f[i] : NULL, &cnt[i]);
  }
  int64_t in = val[0], out = val[1], cr = val[2], cc = val[3];
  /* as px_usage_scan counts: input with the cache counts added */
  ir->usage_known = 1;
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

/* whether a string's value is "" as a C string reads it (px_jstr: an
 * escaped NUL first ends it) */
static int cempty(px_fstr_t s) {
  return s.n == 0 || (s.esc && s.n >= 6 && memcmp(s.p, "\\u0000", 6) == 0);
}

/* The C string a string's value is (the reference's px_jstr: cut at a
 * NUL): a view of s, or unescaped into b. 0 or -1. */
static int cvalue(px_fstr_t s, px_buf_t *b, px_str_t *v) {
  if (px_json_unescape(s.p, s.n, s.esc, b, v) < 0) return -1;
  const char *z = memchr(v->ptr, 0, v->len);
  if (z != NULL) v->len = (size_t)(z - v->ptr);
  return 0;
}

/* A text block's citations (a non-empty array) -> the IR annotations, raw
 * JSON in the arena: a citation with a URL spans the whole text, the
 * others are named (citations_to_annotations). ann->ptr NULL: none. */
static int citations_in(const px_fv_t *cits, px_fstr_t text, px_arena_t *a,
                        px_lossy_t *lossy, px_str_t *ann) {
  static const px_fkey_t keys[] = {PX_FK("url"), PX_FK("title")};
  px_fw_t w = {cits->raw.ptr, cits->raw.len, 0};
  px_buf_t b;
  int r, rc = 0;
  size_t chars = 0;
  int counted = 0;
  ann->ptr = NULL;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  px_buf_init(&b, SIZE_MAX);
  while (rc == 0 && (r = px_fw_elem(&w)) == 1) {
    px_fv_t f[2];
    unsigned seen = 0;
    if (px_fw_peek(&w) != PX_FV_OBJ) {
      rc = skip_value(&w);
      px_lossy_add(lossy, "content[].citations");
      continue;
    }
    if (px_fw_kfields(&w, keys, 2, f, &seen) != 0) {
      rc = DECLINE;
      break;
    }
    if (!(seen & 1) || f[0].kind != PX_FV_STR) {
      px_lossy_add(lossy, "content[].citations");
      continue;
    }
    if (!counted) {
      px_buf_t tb;
      px_str_t tv;
      px_buf_init(&tb, text.n + 1);
      if (cvalue(text, &tb, &tv) < 0)
        rc = DECLINE;
      else
        chars = px_utf8_chars(tv.ptr, tv.len);
      px_buf_free(&tb);
      counted = 1;
    }
    if (rc == 0)
      rc = px_fb_lit(&b, b.len ? ",{\"type\":\"url_citation\",\"url\":"
                               : "[{\"type\":\"url_citation\",\"url\":");
    if (rc == 0) rc = px_fb_str(&b, f[0].s);
    if (rc == 0) rc = px_fb_lit(&b, ",\"start_index\":0,\"end_index\":");
    if (rc == 0) rc = px_fb_i64(&b, (int64_t)chars);
    if (rc == 0 && (seen & 2) && f[1].kind == PX_FV_STR) {
      rc = px_fb_lit(&b, ",\"title\":");
      if (rc == 0) rc = px_fb_str(&b, f[1].s);
    }
    if (rc == 0) rc = px_fb_lit(&b, "}");
  }
  if (rc == 0 && r < 0) rc = DECLINE;
  if (rc == 0 && b.len > 0 && (rc = px_fb_lit(&b, "]")) == 0) {
    char *copy = px_arena_alloc(a, b.len);
    if (copy == NULL)
      rc = DECLINE;
    else
      memcpy(copy, b.data, b.len);
    *ann = (px_str_t){copy, b.len};
  }
  px_buf_free(&b);
  return rc == 0 ? 0 : DECLINE;
}

/* The content array at the cursor (checked reads). What is dropped is
 * named in *lossy; a citation without a URL only in *cited (named unless
 * the answer is a refusal: its texts keep no citations). */
static int decode_content(px_fw_t *w, px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy,
                          px_lossy_t *cited) {
  static const px_fkey_t keys[] = {
      PX_FK("type"),  PX_FK("text"),     PX_FK("citations"), PX_FK("id"),  PX_FK("name"),
      PX_FK("input"), PX_FK("thinking"), PX_FK("signature"), PX_FK("data")};
  int r, first = 1;
  if (px_fw_open(w, '[') < 0) return DECLINE;
  while ((r = px_fc_elem(w, &first)) == 1) {
    px_fv_t f[NKEYS(keys)];
    unsigned seen = 0;
    if (w->p[w->i] != '{') { /* no type: skipped there */
      if (px_fc_value(w, f) < 0) return DECLINE;
      continue;
    }
    if (px_fc_fields(w, keys, NKEYS(keys), f, &seen) != 0) return DECLINE;
#define HAS(x) (seen & (1u << (x)))
#define STR_OR_EMPTY(x) \
  (HAS(x) && f[x].kind == PX_FV_STR ? f[x].s : (px_fstr_t){"", 0, 0})
    if (!HAS(0) || f[0].kind != PX_FV_STR) continue; /* no type: skipped there */
    px_fstr_t t = f[0].s;
    px_fpart_t *p;
    if (px_fs_is(t, "text")) {
      p = px_fpart_text(a, STR_OR_EMPTY(1));
      if (p == NULL) return DECLINE;
      if (HAS(2) && f[2].kind == PX_FV_ARR && !px_fw_empty(f[2].raw) &&
          citations_in(&f[2], p->text, a, cited, &p->annotations) != 0)
        return DECLINE;
    } else if (px_fs_is(t, "tool_use")) {
      p = px_fpart_new(a, PX_FP_TOOL_CALL);
      if (p == NULL) return DECLINE;
      p->id = STR_OR_EMPTY(3);
      p->name = STR_OR_EMPTY(4);
      if (!HAS(5)) p->args = (px_fstr_t){"{}", 2, 0};
      else if (px_fast_dump_value(a, f[5].raw, &p->args) != 0) return DECLINE;
      if (HAS(5) && f[5].kind == PX_FV_OBJ) p->input = f[5].raw;
    } else if (px_fs_is(t, "thinking") || px_fs_is(t, "redacted_thinking")) {
      /* reasoning: a signature (as it is: no family tag read here) or the
       * redacted data */
      int red = !px_fs_is(t, "thinking"),
          k = px_frtok_index(red ? "redacted_data" : "signature");
      p = px_fpart_new(a, PX_FP_REASONING);
      if (p == NULL || k < 0) return DECLINE;
      p->text = red ? (px_fstr_t){"", 0, 0} : STR_OR_EMPTY(6);
      if (red)
        p->tok[k] = STR_OR_EMPTY(8);
      else if (HAS(7) && f[7].kind == PX_FV_STR && !cempty(f[7].s))
        p->tok[k] = f[7].s;
    } else {
      /* server tools' blocks (their history cannot be replayed elsewhere),
       * and blocks of kinds this gateway does not know */
      const char *drop = px_fs_is(t, "server_tool_use") || px_fs_is(t, "mcp_tool_use")
                             ? "content[].server_tool_use"
                         : server_result_type(t) ? "content[].server_tool_result"
                                                 : "content[].unknown_block";
      px_lossy_add(lossy, drop);
      px_lossy_add(cited, drop);
      continue;
    }
#undef STR_OR_EMPTY
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
                                     px_fresp_t *ir, px_arena_t *a, px_lossy_t *lossy,
                                     px_tr_err_t *err) {
  (void)ctx;
  px_fv_t f[NKEYS(resp_keys)];
  px_fw_t w = {body, len, 0};
  px_fstr_t k;
  unsigned seen = 0;
  int r, first = 1, not_array = 0;
  /* what the content drops, named as for a refusal (l) and otherwise (lc:
   * with the citations the texts could not keep) */
  px_lossy_t l, lc;
  px_lossy_init(&l);
  px_lossy_init(&lc);
#define HAS(x) (seen & (1u << (x)))
  if (px_fw_open(&w, '{') < 0) return DECLINE;
  while ((r = px_fc_member(&w, &k, &first)) == 1) {
    int ki = px_fk_of(k, resp_keys, NKEYS(resp_keys));
    if (k.esc || (ki >= 0 && px_fw_seen_twice(&seen, ki))) return DECLINE;
    if (ki == R_CONTENT && w.p[w.i] == '[') {
      if (decode_content(&w, ir, a, &l, &lc) != 0) return DECLINE;
    } else if (ki == R_USAGE && w.p[w.i] == '{') {
      if (decode_usage(&w, ir) != 0) return DECLINE;
    } else {
      px_fv_t v;
      if (px_fc_value(&w, &v) < 0) return DECLINE;
      if (ki >= 0) f[ki] = v;
      if (ki == R_CONTENT) not_array = 1;
    }
  }
  if (r < 0 || px_fc_end(&w) < 0) return DECLINE;
  if (!HAS(R_CONTENT) || not_array) {
    px_tr_fail(err, "content", "upstream response is not an Anthropic message");
    if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
    return REFUSE;
  }
  if (!HAS(R_USAGE)) ir->usage_known = 1, ir->usage_in = ir->usage_out = -1;
  if (HAS(R_ID) && f[R_ID].kind == PX_FV_STR) ir->id = f[R_ID].s;
  if (HAS(R_MODEL) && f[R_MODEL].kind == PX_FV_STR) ir->model = f[R_MODEL].s;
  ir->stop = PX_STOP_NONE;
  int refusal = 0;
  if (HAS(R_STOP) && f[R_STOP].kind == PX_FV_STR) {
    char sr[40];
    px_fstr_t s = f[R_STOP].s;
    ir->finish = s;
    if (px_fs_value(s, sr, sizeof(sr)) == sizeof(sr)) {
      ir->stop = PX_STOP_END_TURN;
    } else {
      ir->stop = strcmp(sr, "model_context_window_exceeded") == 0 ? PX_STOP_MAX_TOKENS
                                                                   : px_stop_parse(sr);
      refusal = strcmp(sr, "refusal") == 0;
    }
  }
  if (refusal) /* the texts are the refusal's wording, without citations */
    for (px_fpart_t *p = ir->content; p; p = p->next)
      if (p->type == PX_FP_TEXT) {
        p->type = PX_FP_REFUSAL;
        p->annotations = (px_str_t){NULL, 0};
      }
  px_lossy_merge(lossy, refusal ? &l : &lc);
  if (HAS(R_STOPSEQ) && f[R_STOPSEQ].kind == PX_FV_STR) ir->stop_sequence = f[R_STOPSEQ].s;
  if (HAS(R_STOPDET) && f[R_STOPDET].kind == PX_FV_OBJ) {
    static const px_fkey_t dkeys[] = {PX_FK("explanation"), PX_FK("category")};
    px_fv_t d[2];
    unsigned ds = 0;
    if (px_fv_kfields(&f[R_STOPDET], dkeys, 2, d, &ds) != 0) return DECLINE;
    if ((ds & 1) && d[0].kind == PX_FV_STR) ir->refusal_explanation = d[0].s;
    if ((ds & 2) && d[1].kind == PX_FV_STR) px_lossy_add(lossy, "stop_details.category");
  }
#undef HAS
  return 0;
}

/* ======================================================================== */
/* Response encode                                                           */

/* whether a reasoning part writes a block: redacted data, a token the
 * client carries (px_rtok_out), or text shown with an empty signature */
static int reasoning_block(const px_fpart_t *p) {
  const char *tag;
  px_fstr_t tok;
  int red = px_frtok_index("redacted_data");
  return (red >= 0 && p->tok[red].p != NULL) ||
         px_frtok_out(PX_PROTO_ANTHROPIC, p, &tag, &tok) || !cempty(p->text);
}

/* a reasoning part -> a redacted_thinking block, or a thinking block with
 * its signature: another family's token travels tagged in it, so that the
 * client replays it; unsigned reasoning with an empty one */
static int put_reasoning(px_buf_t *b, const px_fpart_t *p) {
  int red = px_frtok_index("redacted_data"), rc;
  if (red >= 0 && p->tok[red].p != NULL) {
    rc = px_fb_lit(b, "{\"type\":\"redacted_thinking\",\"data\":");
    if (rc == 0) rc = px_fb_str(b, p->tok[red]);
    if (rc == 0) rc = px_fb_lit(b, "}");
    return rc;
  }
  rc = px_fb_lit(b, "{\"type\":\"thinking\",\"thinking\":");
  if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : (px_fstr_t){"", 0, 0});
  if (rc == 0) rc = px_fb_lit(b, ",\"signature\":");
  if (rc == 0) {
    rc = px_fb_rtok(b, PX_PROTO_ANTHROPIC, p);
    if (rc == 1) rc = px_fb_lit(b, "\"\"");
  }
  if (rc == 0) rc = px_fb_lit(b, "}");
  return rc;
}

/* A tool call's id as the reference makes it unique (px_idset_unique):
 * its own when non-empty and not taken by an earlier call of the answer,
 * else call_proxai_<n>[_<k>] (the call's id made so: the next calls
 * compare with it). Ids are compared by value (px_fs_same). */
static int id_taken(const px_fpart_t *parts, const px_fpart_t *call, px_fstr_t id) {
  for (const px_fpart_t *q = parts; q != call; q = q->next)
    if (q->type == PX_FP_TOOL_CALL && px_fs_same(q->id, id)) return 1;
  return 0;
}

static int unique_id(px_arena_t *a, const px_fpart_t *parts, px_fpart_t *call, int n) {
  if (call->id.n > 0 && !id_taken(parts, call, call->id)) return 0;
  char minted[48];
  for (int k = 0;; k++) {
    if (k == 0)
      snprintf(minted, sizeof(minted), "call_proxai_%d", n);
    else
      snprintf(minted, sizeof(minted), "call_proxai_%d_%d", n, k);
    if (!id_taken(parts, call, (px_fstr_t){minted, strlen(minted), 0})) break;
  }
  size_t len = strlen(minted);
  char *c = px_arena_alloc(a, len + 1);
  if (c == NULL) return DECLINE;
  memcpy(c, minted, len);
  call->id = (px_fstr_t){c, len, 0};
  return 0;
}

/* The byte offset of character ci of s[0..n) (clipped to n). */
static size_t utf8_offset(const char *s, size_t n, int64_t ci) {
  size_t at = 0;
  for (int64_t k = 0; k < ci && at < n; k++) {
    size_t l = px_utf8_seq((const unsigned char *)s + at, n - at);
    at += l ? l : 1;
  }
  return at;
}

/* whether an escaped string may hold a NUL (a C string cuts it there) */
static int esc_nul(px_fstr_t s) {
  return s.esc && s.n >= 6 && memmem(s.p, s.n, "\\u0000", 6) != NULL;
}

/* A text part's IR annotations -> ,"citations":[...] (web search result
 * locations, the cited text cut from the text by the annotation's
 * characters); what has no citation form is named (annotations_to_citations,
 * px_anthropic_citation). Nothing written when none maps. */
static int put_citations(px_buf_t *b, const px_tr_ctx_t *ctx, const px_fpart_t *p,
                         px_lossy_t *lossy) {
  static const px_fkey_t keys[] = {PX_FK("type"), PX_FK("url"), PX_FK("title"),
                                   PX_FK("start_index"), PX_FK("end_index")};
  px_fw_t w = {p->annotations.ptr, p->annotations.len, 0};
  px_buf_t tb;
  px_str_t tv = {NULL, 0};
  int r, rc = 0, first = 1, have_text = 0;
  if (px_fw_open(&w, '[') < 0) return DECLINE;
  px_buf_init(&tb, p->text.n + 1);
  while (rc == 0 && (r = px_fw_elem(&w)) == 1) {
    px_fv_t f[NKEYS(keys)];
    unsigned seen = 0;
    px_fstr_t t = {0};
    if (px_fw_peek(&w) != PX_FV_OBJ) {
      rc = skip_value(&w);
      px_lossy_add(lossy, px_lossy_annotations(ctx));
      continue;
    }
    if (px_fw_kfields(&w, keys, NKEYS(keys), f, &seen) != 0) {
      rc = DECLINE;
      break;
    }
    int rt = plain_str((seen & 1) ? &f[0] : NULL, &t);
    if ((seen & 2) && f[1].kind == PX_FV_STR && esc_nul(f[1].s)) {
      rc = DECLINE;
      break;
    }
    if (rt == 0 || !px_fs_is(t, "url_citation") || !(seen & 2) ||
        f[1].kind != PX_FV_STR || cempty(f[1].s)) {
      px_lossy_add(lossy, px_lossy_annotations(ctx));
      continue;
    }
    int64_t si = 0, ei = -1;
    if (((seen & 8) && px_fw_jint(&f[3], 0, &si) != 0) ||
        ((seen & 16) && px_fw_jint(&f[4], -1, &ei) != 0)) {
      rc = DECLINE;
      break;
    }
    if (!have_text) {
      if (cvalue(p->text.p ? p->text : (px_fstr_t){"", 0, 0}, &tb, &tv) < 0) {
        rc = DECLINE;
        break;
      }
      have_text = 1;
    }
    size_t from = si > 0 ? utf8_offset(tv.ptr, tv.len, si) : 0;
    size_t to = ei >= 0 ? utf8_offset(tv.ptr, tv.len, ei) : tv.len;
    if (to < from) to = from;
    rc = px_fb_lit(
        b, first ? ",\"citations\":[{\"type\":\"web_search_result_location\",\"url\":"
                 : ",{\"type\":\"web_search_result_location\",\"url\":");
    first = 0;
    if (rc == 0) rc = px_fb_str(b, f[1].s);
    if (rc == 0) rc = px_fb_lit(b, ",\"title\":");
    if (rc == 0)
      rc = (seen & 4) && f[2].kind == PX_FV_STR ? px_fb_str(b, f[2].s)
                                                : px_fb_lit(b, "null");
    if (rc == 0) rc = px_fb_lit(b, ",\"cited_text\":");
    if (rc == 0) rc = px_buf_json_str(b, tv.ptr + from, to - from);
    if (rc == 0) rc = px_fb_lit(b, ",\"encrypted_index\":\"\"}");
  }
  if (rc == 0 && r < 0) rc = DECLINE;
  if (rc == 0 && !first) rc = px_fb_lit(b, "]");
  px_buf_free(&tb);
  return rc;
}

static int anth_fast_encode_response(const px_tr_ctx_t *ctx, const px_fresp_t *ir,
                                     px_buf_t *b, px_arena_t *a, px_lossy_t *lossy,
                                     px_tr_err_t *err) {
  /* the id's value (px_buf_mint_id escapes it) */
  px_str_t idv = {ir->id.p, ir->id.n};
  if (ir->id.esc && (idv.ptr = px_fs_cstr(a, ir->id, &idv.len)) == NULL) return DECLINE;
  const px_fpart_t *refusal = NULL; /* the first refusal: its wording */
  int rc = px_fb_lit(b, "{\"id\":\"");
  size_t id_at = b->len; /* traces: the id and the model as written */
  if (rc == 0) rc = px_buf_mint_id(b, "msg_", idv);
  size_t id_end = b->len;
  if (rc == 0) rc = px_fb_lit(b, "\",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
  size_t model_at = b->len;
  if (rc == 0 && ctx->client_model)
    rc = px_buf_json_str(b, ctx->client_model, strlen(ctx->client_model));
  else if (rc == 0)
    rc = px_fb_str(b, ir->model.p ? ir->model : (px_fstr_t){"", 0, 0});
  size_t model_end = b->len;
  if (rc == 0) rc = px_fb_lit(b, ",\"content\":[");
  int first = 1, n = 0;
  for (px_fpart_t *p = ir->content; p && rc == 0; p = p->next) {
    if (p->type == PX_FP_REASONING && !reasoning_block(p)) continue;
    if (p->type == PX_FP_IMAGE || p->type == PX_FP_FILE) continue; /* no block there */
    if (p->type == PX_FP_TOOL_CALL) {
      /* the reference's refusal: arguments that are no object (what was
       * written is dropped with it) */
      if ((rc = call_input(p, a)) == REFUSE) {
        char id[300];
        px_tr_fail(err, "tool_calls.arguments",
                   "upstream tool call '%s' has arguments that are not a JSON object",
                   p->id.p ? cstr(p->id, id, sizeof(id)) : "");
        if (err != NULL) err->kind = PX_ERR_BAD_GATEWAY;
        return REFUSE;
      }
      if (rc != 0 || unique_id(a, ir->content, p, n++) != 0) return DECLINE;
    }
    if (p->type == PX_FP_REFUSAL && refusal == NULL) refusal = p;
    if (!first) rc = px_fb_lit(b, ",");
    first = 0;
    if (rc != 0) break;
    if (p->type == PX_FP_TEXT || p->type == PX_FP_REFUSAL) {
      rc = px_fb_lit(b, "{\"type\":\"text\",\"text\":");
      if (rc == 0) rc = px_fb_str(b, p->text.p ? p->text : (px_fstr_t){"", 0, 0});
      if (rc == 0 && p->type == PX_FP_TEXT && p->annotations.ptr != NULL)
        rc = put_citations(b, ctx, p, lossy);
      if (rc == 0) rc = px_fb_lit(b, "}");
    } else if (p->type == PX_FP_REASONING) {
      rc = put_reasoning(b, p);
    } else if (p->type == PX_FP_TOOL_CALL) {
      rc = px_fb_lit(b, "{\"type\":\"tool_use\",\"id\":");
      if (rc == 0) rc = px_fb_str(b, p->id);
      if (rc == 0) rc = px_fb_lit(b, ",\"name\":");
      if (rc == 0) rc = px_fb_str(b, p->name.p ? p->name : (px_fstr_t){"", 0, 0});
      if (rc == 0) rc = px_fb_lit(b, ",\"input\":");
      if (rc == 0) rc = px_fb_raw(b, p->input);
      if (rc == 0) rc = px_fb_lit(b, "}");
    } else {
      rc = DECLINE; /* not in a fast answer (px_fast_ops_t.resp_encodes) */
    }
  }
  px_stop_t st = ir->stop == PX_STOP_NONE ? PX_STOP_END_TURN : ir->stop;
  if (refusal != NULL) st = PX_STOP_REFUSAL;
  const char *sr = px_stop_to_anthropic(st);
  if (rc == 0) rc = px_fb_lit(b, "],\"stop_reason\":\"");
  if (rc == 0) rc = px_fb_lit(b, sr);
  if (rc == 0) rc = px_fb_lit(b, "\",\"stop_sequence\":");
  if (rc == 0) rc = ir->stop_sequence.p ? px_fb_str(b, ir->stop_sequence) : px_fb_lit(b, "null");
  if (rc == 0 && strcmp(sr, "refusal") == 0) {
    /* why: the upstream's explanation, else the refusal's wording */
    px_fstr_t expl = ir->refusal_explanation.p ? ir->refusal_explanation
                     : refusal != NULL         ? refusal->text
                                               : (px_fstr_t){0};
    rc = px_fb_lit(b,
                   ",\"stop_details\":{\"type\":\"refusal\",\"category\":null,"
                   "\"explanation\":");
    if (rc == 0) rc = expl.p ? px_fb_str(b, expl) : px_fb_lit(b, "null");
    if (rc == 0) rc = px_fb_lit(b, "}");
  }
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
  if (rc == 0) px_answer_wrote(ctx->client, b, id_at, id_end, model_at, model_end, sr);
  return rc;
}

/* anthropic.c's anth_count_request: the members a count does not take */
static int anth_fast_count(px_buf_t *b, size_t start, const char *model) {
  static const px_fkey_t drop[] = {
      PX_FK("stream"), PX_FK("max_tokens"),     PX_FK("temperature"), PX_FK("top_p"),
      PX_FK("top_k"),  PX_FK("stop_sequences"), PX_FK("metadata")};
  (void)model;
  return px_fb_drop_members(b, start, drop, (int)(sizeof(drop) / sizeof(drop[0])));
}

const px_fast_ops_t px_anthropic_fast = {
    .count_request = anth_fast_count,
    .decode_request = anth_fast_decode_request,
    .encode_request = anth_fast_encode_request,
    .decode_response = anth_fast_decode_response,
    .encode_response = anth_fast_encode_response,
    /* custom tools and calls as the reference writes them (a function
     * tool, input {}); prompt_cache_key and verbosity never reach it (the
     * fit drops them: no caps) and are not written */
    .encodes = PX_FU_ALL | PX_FU_SYSTEM_NOTE,
    .resp_encodes = PX_FU_REASONING | PX_FU_REFUSAL | PX_FU_CUSTOM | PX_FU_MEDIA |
                    PX_FU_ANNOTATIONS | PX_FU_REFUSAL_EXPL,
    .response_checked = 1,
};

/* ======================================================================== */
/* The wire: errors, token counts, model lists, the protocol table          */

/* ======================================================================== */
/* Errors                                                                     */

static int anth_decode_error(int status, const char *body, size_t len,
                             px_upstream_err_t *out) {
  json_t *j = px_jdoc_load(body, len, 0, NULL);
  json_t *e = json_object_get(j, "error");
  const char *jt = px_jstr(j, "type");
  if (!json_is_object(e) || jt == NULL || strcmp(jt, "error") != 0) {
    json_decref(j);
    return PX_EINVAL;
  }
  const char *type = px_jstr(e, "type"), *msg = px_jstr(e, "message");
  memset(out, 0, sizeof(*out));
  out->kind = px_errkind_from_type(type, status);
  snprintf(out->type, sizeof(out->type), "%s", type ? type : "");
  snprintf(out->message, sizeof(out->message), "%s", msg ? msg : "");
  json_decref(j);
  return 0;
}

/* An Anthropic error type string, or NULL when type belongs to another family. */
static const char *anthropic_type(const char *type) {
  static const char *const known[] = {
      "invalid_request_error", "authentication_error",
      "billing_error",         "permission_error",
      "not_found_error",       "request_too_large",
      "rate_limit_error",      "api_error",
      "overloaded_error",      "timeout_error",
  };
  if (type == NULL) return NULL;
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
    if (strcmp(type, known[i]) == 0) return known[i];
  return NULL;
}

static int error_object(px_buf_t *out, px_errkind_t kind, const char *type,
                        const char *message) {
  const char *t = anthropic_type(type);
  if (t == NULL) t = px_errkind_anthropic(kind);
  if (message == NULL) message = "";
  int rc = px_buf_puts(out, "{\"type\":\"error\",\"error\":{\"type\":");
  if (rc == 0) rc = px_buf_json_str(out, t, strlen(t));
  if (rc == 0) rc = px_buf_puts(out, ",\"message\":");
  if (rc == 0) rc = px_buf_json_str(out, message, strlen(message));
  if (rc == 0) rc = px_buf_puts(out, "}");
  return rc;
}

static int anth_encode_error(px_buf_t *out, px_errkind_t kind, const char *type,
                             const char *message, const char *param,
                             const char *request_id) {
  (void)param; /* Anthropic errors have no param; messages name the field */
  int rc = error_object(out, kind, type, message);
  if (rc == 0) rc = px_buf_puts(out, ",\"request_id\":");
  if (rc == 0)
    rc = request_id ? px_buf_json_str(out, request_id, strlen(request_id))
                    : px_buf_puts(out, "null");
  if (rc == 0) rc = px_buf_puts(out, "}");
  return rc;
}

static int anth_encode_stream_error(px_buf_t *out, px_errkind_t kind,
                                    const char *message) {
  int rc = px_buf_puts(out, "event: error\ndata: ");
  if (rc == 0) rc = error_object(out, kind, NULL, message);
  if (rc == 0) rc = px_buf_puts(out, "}\n\n");
  return rc;
}

/* ---- the wire: count_tokens, the model list, forwarded headers ---- */

static int anth_count_encode(px_buf_t *out, int64_t n) {
  return px_count_body(out, "{\"input_tokens\":", n);
}

static int anth_models(px_buf_t *out, const char *const *ids, const char *const *owners,
                       size_t n) {
  (void)owners;
  int rc = px_buf_puts(out, "{\"data\":[");
  for (size_t i = 0; i < n && rc == 0; i++) {
    rc = px_buf_puts(out,
                     i ? ",{\"type\":\"model\",\"id\":" : "{\"type\":\"model\",\"id\":");
    if (rc == 0) rc = px_buf_json_str(out, ids[i], strlen(ids[i]));
    if (rc == 0) rc = px_buf_puts(out, ",\"display_name\":");
    if (rc == 0) rc = px_buf_json_str(out, ids[i], strlen(ids[i]));
    if (rc == 0) rc = px_buf_puts(out, ",\"created_at\":\"1970-01-01T00:00:00Z\"}");
  }
  if (rc == 0) rc = px_buf_puts(out, "],\"has_more\":false,\"first_id\":");
  if (rc == 0)
    rc = n ? px_buf_json_str(out, ids[0], strlen(ids[0])) : px_buf_puts(out, "null");
  if (rc == 0) rc = px_buf_puts(out, ",\"last_id\":");
  if (rc == 0)
    rc = n ? px_buf_json_str(out, ids[n - 1], strlen(ids[n - 1]))
           : px_buf_puts(out, "null");
  if (rc == 0) rc = px_buf_puts(out, "}");
  return rc;
}

static const char *const anth_forward[] = {"anthropic-beta", NULL};

const px_proto_ops_t px_proto_anthropic = {
    .id = PX_PROTO_ANTHROPIC,
    .name = "anthropic_messages",
    .otel_provider = "anthropic",
    .otel_operation = "chat",
    .inbound_path = "/messages",
    .upstream_path = "/v1/messages",
    .decode_error = anth_decode_error,
    .encode_error = anth_encode_error,
    .encode_stream_error = anth_encode_stream_error,
    .sdec_new = px_anthropic_sdec_new,
    .sdec_feed = px_anthropic_sdec_feed,
    .sdec_finish = px_anthropic_sdec_finish,
    .sdec_free = px_anthropic_sdec_free,
    .senc_new = px_anthropic_senc_new,
    .senc_event = px_anthropic_senc_event,
    .senc_free = px_anthropic_senc_free,
    .count_inbound_path = "/messages/count_tokens",
    .count_upstream_path = "/v1/messages/count_tokens",
    .count_decode = px_count_input_tokens,
    .count_encode = anth_count_encode,
    .encode_models = anth_models,
    .models_marker_header = "anthropic-version",
    .forward_headers = anth_forward,
    .auth_header = "x-api-key: ",
    .version_header = "anthropic-version",
    .error_type = px_errkind_anthropic,
    .env_key = "ANTHROPIC_API_KEY",
    .env_base = "ANTHROPIC_BASE_URL",
    .default_base = "https://api.anthropic.com",
    .default_name = "anthropic",
    .default_glob = "claude-*",
    .rtoks = {{"signature", "pxa1:sig:"}, {"redacted_data", "pxa1:red:"}},
    .caps = PX_CAP_REASONING_TOKENS,
    .names = {.reasoning_text = PX_LOSSY("messages[].content[].thinking"),
              .reasoning_token = PX_LOSSY("messages[].content[].signature"),
              .reasoning_redacted = PX_LOSSY("messages[].content[].redacted_thinking"),
              .reasoning_config = PX_LOSSY("thinking"),
              .stop = PX_LOSSY("stop_sequences"),
              .tool_result_image = PX_LOSSY("messages[].content[].content[].image"),
              .tool_result_file = PX_LOSSY("messages[].content[].content[].document"),
              .tool_args_param = "messages.content.input",
              .annotations = PX_LOSSY("content[].citations"),
              .opaque_reasoning = PX_LOSSY("content[].signature"),
              .refusal_explanation = PX_LOSSY("stop_details.explanation"),
              .redacted_reasoning = PX_LOSSY("content[].redacted_thinking")},
    .fast = &px_anthropic_fast,
    .max_tokens_keys = {{"max_tokens", NULL}},
    .watch = {.usage_obj = "usage",
              .usage_in = "input_tokens",
              .usage_out = "output_tokens",
              .usage_in_extra = {"cache_read_input_tokens",
                                 "cache_creation_input_tokens"},
              .start_event = "message_start",
              .start_outer = "message",
              .delta_event = "message_delta",
              .terminal_events = {"message_stop"},
              .error_event = "error",
              .model_path = {"message", "model"},
              .model_depth = 2,
              .finish_key = "stop_reason",
              .finish_last = 1,
              .delta_outer = "delta"},
};
