/* responses_stream.c - OpenAI Responses stream decoder (upstream SSE ->
 * px_ev_t) and encoder (px_ev_t -> client SSE).
 *
 * Decoder states:
 *
 *   INIT --response.created--> RUNNING --response.completed|incomplete|failed--> DONE
 *     |                          |
 *     +----------error / bad event / failed with error--------------------> ERROR
 *
 *   In RUNNING, output items map to blocks: a message's content parts
 *   (output_text, refusal) and each function_call / reasoning item are one
 *   block each. Finishing without DONE emits PX_EV_ERROR.
 *
 * Encoder states:
 *
 *   INIT --MESSAGE_START--> OPEN --MESSAGE_STOP--> DONE
 *                             |
 *                             +--ERROR--> DONE (response.failed)
 *
 *   The final response object (response.completed / incomplete / failed)
 *   carries the whole output; it is accumulated as items finish, bounded by
 *   ctx->max_accum.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "proxai/fastir.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"

#define MAX_BLOCKS 4096
#define DEFAULT_ACCUM (64u << 20)
#define MEMO_HOLES 4
#define UP_ID_MAX 159 /* bytes of the upstream's id kept for the ids */

/* ====================================================================== */
/* Decoder                                                                 */

typedef enum { D_INIT, D_RUNNING, D_DONE, D_ERROR } dstate_t;

typedef struct dblock {
  int output_index;
  int content_index; /* -1 for item-level blocks */
  int index;         /* event block index */
  px_block_t kind;
  int got_delta;
  int open;
  int nsummary; /* reasoning: summary parts seen */
} dblock_t;

struct px_sdec {
  px_tr_ctx_t ctx;
  px_ev_sink_fn sink;
  void *arg;
  dstate_t state;
  int next_index;
  int has_tool;
  dblock_t *blocks; /* open/known blocks (bounded by MAX_BLOCKS) */
  size_t nblocks, cap;
  int fast;         /* fast path on (differential tests turn it off) */
  long fast_hits;   /* events the fast path handled */
  px_buf_t scratch; /* unescaped delta text of the fast path */
  /* the last delta the fast walk read, for the next of its block, which
   * repeats its bytes but for the integers skipped (sequence_number) and
   * the delta text: those are holes [s, e) (str: a string's content) */
  px_buf_t memo;
  struct {
    size_t s, e;
    int str;
  } hole[MEMO_HOLES];
  int nholes, memo_ok, memo_oi, memo_ci;
  px_delta_t memo_kind;
  /* what the lifecycle events repeat, as checked before: the response
   * object of the first event (response.in_progress repeats it; kept until
   * another event comes) and the output array the message items'
   * output_item.done make (the terminal response repeats it); a value
   * equal to one is compared, not walked */
  px_buf_t seen_resp, seen_out;
};

static void dset(px_sdec_t *d, dstate_t s) {
  d->state = s;
}

static int demit(px_sdec_t *d, const px_ev_t *ev) {
  return d->sink(d->arg, ev);
}

static int derror(px_sdec_t *d, px_errkind_t kind, const char *msg) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_ERROR);
  ev.errkind = kind;
  ev.text = px_str(msg);
  dset(d, D_ERROR);
  int rc = demit(d, &ev);
  return rc < 0 ? rc : PX_EPROTO;
}

static dblock_t *dfind(px_sdec_t *d, int oi, int ci) {
  for (size_t i = d->nblocks; i > 0; i--) {
    dblock_t *b = &d->blocks[i - 1];
    if (b->output_index == oi && b->content_index == ci) return b;
  }
  return NULL;
}

static dblock_t *dstart(px_sdec_t *d, int oi, int ci, px_block_t kind, const char *id,
                        const char *name, int custom) {
  if (d->nblocks >= MAX_BLOCKS) return NULL;
  if (d->nblocks == d->cap) {
    size_t nc = d->cap ? d->cap * 2 : 2; /* most streams hold one or two */
    dblock_t *nb = realloc(d->blocks, nc * sizeof(*nb));
    if (nb == NULL) return NULL;
    d->blocks = nb;
    d->cap = nc;
  }
  dblock_t *b = &d->blocks[d->nblocks++];
  memset(b, 0, sizeof(*b));
  b->output_index = oi;
  b->content_index = ci;
  b->kind = kind;
  b->index = d->next_index++;
  b->open = 1;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_BLOCK_START);
  ev.index = b->index;
  ev.block = kind;
  ev.id = px_str(id);
  ev.name = px_str(name);
  ev.custom = custom;
  if (demit(d, &ev) < 0) return NULL;
  return b;
}

static int ddelta(px_sdec_t *d, dblock_t *b, px_delta_t kind, const char *s, size_t n) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_DELTA);
  ev.index = b->index;
  ev.delta = kind;
  ev.text = (px_str_t){s, n};
  b->got_delta = 1;
  return demit(d, &ev);
}

static int dstop(px_sdec_t *d, dblock_t *b) {
  if (!b->open) return 0;
  b->open = 0;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_BLOCK_STOP);
  ev.index = b->index;
  return demit(d, &ev);
}

static int dstop_all(px_sdec_t *d, int oi) {
  for (size_t i = 0; i < d->nblocks; i++) {
    dblock_t *b = &d->blocks[i];
    if (b->open && (oi < 0 || b->output_index == oi)) {
      int rc = dstop(d, b);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

/* The general path reads an event checked whole (px_jv_parse), members
 * looked up where they lie (fastir.h's checked views: the last of a
 * repeated name), strings unescaped into the event's arena. */
static const char *jstr(px_arena_t *ar, const px_fv_t *o, const char *key) {
  return px_jv_sget(ar, o, key).ptr;
}

static int oindex(const px_fv_t *j) {
  return (int)px_jv_iget(j, "output_index", -1);
}

static int cindex(const px_fv_t *j) {
  return (int)px_jv_iget(j, "content_index", 0);
}

static int d_item_added(px_sdec_t *d, const px_fv_t *j, px_arena_t *ar) {
  px_fv_t item;
  px_jv_get(j, "item", &item);
  const char *t = jstr(ar, &item, "type");
  int oi = oindex(j);
  if (t == NULL || oi < 0)
    return derror(d, PX_ERR_BAD_GATEWAY, "upstream sent a malformed output item");
  if (strcmp(t, "function_call") == 0) {
    d->has_tool = 1;
    dblock_t *b = dstart(d, oi, -1, PX_BLOCK_TOOL_CALL, jstr(ar, &item, "call_id"),
                         jstr(ar, &item, "name"), 0);
    if (b == NULL) return PX_ENOMEM;
    px_str_t a = px_jv_sget(ar, &item, "arguments");
    if (a.len > 0) return ddelta(d, b, PX_DELTA_TOOL_ARGS, a.ptr, a.len);
    return 0;
  }
  if (strcmp(t, "custom_tool_call") == 0 && px_tr_in_can(&d->ctx, PX_CAP_CUSTOM_TOOLS)) {
    /* freeform tool call, for a client that has custom tools too */
    d->has_tool = 1;
    dblock_t *b = dstart(d, oi, -1, PX_BLOCK_TOOL_CALL, jstr(ar, &item, "call_id"),
                         jstr(ar, &item, "name"), 1);
    if (b == NULL) return PX_ENOMEM;
    px_str_t a = px_jv_sget(ar, &item, "input");
    if (a.len > 0) return ddelta(d, b, PX_DELTA_TOOL_ARGS, a.ptr, a.len);
    return 0;
  }
  if (strcmp(t, "reasoning") == 0) {
    dblock_t *b = dstart(d, oi, -1, PX_BLOCK_THINKING, jstr(ar, &item, "id"), NULL, 0);
    return b ? 0 : PX_ENOMEM;
  }
  /* message: its parts open blocks; hosted tool items are not carried
   * (named as by the non-streaming decoder) */
  if (strcmp(t, "message") != 0 && d->ctx.dropped != NULL &&
      !(strcmp(t, "custom_tool_call") == 0 && px_tr_in_can(&d->ctx, PX_CAP_CUSTOM_TOOLS)))
    px_responses_lossy_item(d->ctx.dropped, t);
  return 0;
}

/* response.output_text.annotation.added: an annotation of a text part,
 * handed on re-written as json_dumps wrote jansson's document of it */
static int d_annotation(px_sdec_t *d, const px_fv_t *j, size_t n) {
  px_fv_t a;
  px_jv_get(j, "annotation", &a);
  dblock_t *b = dfind(d, oindex(j), cindex(j));
  if (!px_jv_is(&a, PX_FV_OBJ) || b == NULL || !b->open || b->kind != PX_BLOCK_TEXT)
    return 0;
  px_buf_t o;
  px_buf_init(&o, PX_JV_GROWTH * n + 64);
  int rc = px_fb_jdump(&o, &a) == 0 ? 0 : PX_ENOMEM;
  if (rc == 0) {
    px_ev_t ev;
    px_ev_init(&ev, PX_EV_DELTA);
    ev.index = b->index;
    ev.delta = PX_DELTA_ANNOTATION;
    ev.text = (px_str_t){o.data, o.len};
    rc = demit(d, &ev);
  }
  px_buf_free(&o);
  return rc;
}

static int d_part_added(px_sdec_t *d, const px_fv_t *j, px_arena_t *ar) {
  px_fv_t part;
  px_jv_get(j, "part", &part);
  const char *t = jstr(ar, &part, "type");
  int oi = oindex(j), ci = cindex(j);
  if (t == NULL) return 0;
  px_block_t kind;
  if (strcmp(t, "output_text") == 0)
    kind = PX_BLOCK_TEXT;
  else if (strcmp(t, "refusal") == 0)
    kind = PX_BLOCK_REFUSAL;
  else
    return 0; /* reasoning_text parts belong to the reasoning block */
  dblock_t *b = dstart(d, oi, ci, kind, NULL, NULL, 0);
  if (b == NULL) return PX_ENOMEM;
  px_str_t init = px_jv_sget(ar, &part, kind == PX_BLOCK_TEXT ? "text" : "refusal");
  if (init.len > 0)
    return ddelta(d, b, kind == PX_BLOCK_TEXT ? PX_DELTA_TEXT : PX_DELTA_REFUSAL,
                  init.ptr, init.len);
  return 0;
}

static int d_item_done(px_sdec_t *d, const px_fv_t *j, px_arena_t *ar) {
  px_fv_t item;
  px_jv_get(j, "item", &item);
  const char *t = jstr(ar, &item, "type");
  int oi = oindex(j);
  if (t == NULL) return 0;
  dblock_t *b = dfind(d, oi, -1);
  int custom = strcmp(t, "custom_tool_call") == 0;
  if ((strcmp(t, "function_call") == 0 || custom) && b != NULL) {
    px_str_t a = px_jv_sget(ar, &item, custom ? "input" : "arguments");
    if (!b->got_delta && a.len > 0) {
      int rc = ddelta(d, b, PX_DELTA_TOOL_ARGS, a.ptr, a.len);
      if (rc < 0) return rc;
    }
    return dstop(d, b);
  }
  if (strcmp(t, "reasoning") == 0 && b != NULL) {
    if (!b->got_delta) {
      /* no deltas streamed: take the text from the finished item */
      px_fv_t arr, p;
      px_jv_get(&item, "summary", &arr);
      px_jv_it_t it;
      px_jv_iter(&it, &arr);
      int first = 1;
      while (px_jv_elem(&it, &p)) {
        px_str_t s = px_jv_sget(ar, &p, "text");
        if (s.ptr == NULL) continue;
        if (!first) ddelta(d, b, PX_DELTA_THINKING, "\n\n", 2);
        first = 0;
        int rc = ddelta(d, b, PX_DELTA_THINKING, s.ptr, s.len);
        if (rc < 0) return rc;
      }
    }
    px_str_t enc = px_jv_sget(ar, &item, "encrypted_content");
    if (enc.len > 0) {
      int rc = ddelta(d, b, PX_DELTA_SIGNATURE, enc.ptr, enc.len);
      if (rc < 0) return rc;
    }
    return dstop(d, b);
  }
  return dstop_all(d, oi);
}

/* element i of array a (absent past its end or when a is no array) */
static void jv_at(const px_fv_t *a, size_t i, px_fv_t *out) {
  px_jv_it_t it;
  px_jv_iter(&it, a);
  while (px_jv_elem(&it, out))
    if (i-- == 0) return;
  memset(out, 0, sizeof(*out));
}

static int d_terminal(px_sdec_t *d, const px_fv_t *j, const char *type, px_arena_t *ar) {
  enum { R_STATUS, R_ERROR, R_OUTPUT, R_INCOMPLETE, R_USAGE, R_N };
  static const px_fkey_t rkeys[] = {PX_FK("status"), PX_FK("error"), PX_FK("output"),
                                    PX_FK("incomplete_details"), PX_FK("usage")};
  px_fv_t r, f[R_N];
  px_jv_get(j, "response", &r);
  px_jv_fields(&r, rkeys, R_N, f);
  const char *status = px_jv_str(ar, &f[R_STATUS], NULL);
  if (status == NULL) {
    if (strcmp(type, "response.completed") == 0)
      status = "completed";
    else if (strcmp(type, "response.incomplete") == 0)
      status = "incomplete";
    else
      status = "failed";
  }
  if (strcmp(status, "failed") == 0 && px_jv_is(&f[R_ERROR], PX_FV_OBJ)) {
    const char *code = jstr(ar, &f[R_ERROR], "code");
    const char *msg = jstr(ar, &f[R_ERROR], "message");
    px_errkind_t k = px_errkind_from_type(code, 0);
    return derror(d, k, msg ? msg : "upstream response failed");
  }
  /* a reasoning item whose output_item.done never came: its opaque
   * reasoning is in the final output (as the body path reads it) */
  for (size_t i = 0; i < d->nblocks; i++) {
    dblock_t *b = &d->blocks[i];
    if (!b->open || b->kind != PX_BLOCK_THINKING) continue;
    px_fv_t it;
    jv_at(&f[R_OUTPUT], (size_t)b->output_index, &it);
    px_str_t enc = px_jv_sget(ar, &it, "encrypted_content");
    if (enc.len > 0) {
      int rc = ddelta(d, b, PX_DELTA_SIGNATURE, enc.ptr, enc.len);
      if (rc < 0) return rc;
    }
  }
  int rc = dstop_all(d, -1);
  if (rc < 0) return rc;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_DELTA);
  ev.finish = px_str(status);
  ev.stop =
      px_stop_from_responses(status, jstr(ar, &f[R_INCOMPLETE], "reason"), d->has_tool);
  if (ev.stop == PX_STOP_NONE)
    return derror(d, PX_ERR_BAD_GATEWAY,
                  "upstream ended the response without a final status");
  if (px_jv_is(&f[R_USAGE], PX_FV_OBJ)) {
    static const px_fkey_t ukeys[] = {PX_FK("input_tokens"), PX_FK("output_tokens"),
                                      PX_FK("input_tokens_details"),
                                      PX_FK("output_tokens_details")};
    px_fv_t u[4];
    px_jv_fields(&f[R_USAGE], ukeys, 4, u);
    px_jv_int(&u[0], &ev.usage.input_tokens);
    px_jv_int(&u[1], &ev.usage.output_tokens);
    ev.usage.cache_read_tokens =
        px_jv_iget(&u[2], "cached_tokens", ev.usage.cache_read_tokens);
    ev.usage.reasoning_tokens =
        px_jv_iget(&u[3], "reasoning_tokens", ev.usage.reasoning_tokens);
  }
  rc = demit(d, &ev);
  if (rc < 0) return rc;
  dset(d, D_DONE);
  px_ev_init(&ev, PX_EV_MESSAGE_STOP);
  return demit(d, &ev);
}

static int d_delta(px_sdec_t *d, const px_fv_t *j, px_delta_t kind, int item_level,
                   px_arena_t *ar) {
  px_str_t s = px_jv_sget(ar, j, "delta");
  if (s.ptr == NULL) return 0;
  dblock_t *b = dfind(d, oindex(j), item_level ? -1 : cindex(j));
  if (b == NULL && !item_level && oindex(j) >= 0) {
    /* a server that skips response.content_part.added: the part starts
     * with its first delta */
    b = dstart(d, oindex(j), cindex(j),
               kind == PX_DELTA_TEXT ? PX_BLOCK_TEXT : PX_BLOCK_REFUSAL, NULL, NULL, 0);
    if (b == NULL) return PX_ENOMEM;
  }
  if (b == NULL || !b->open)
    return derror(d, PX_ERR_BAD_GATEWAY,
                  "upstream sent a delta for an unknown output item");
  return ddelta(d, b, kind, s.ptr, s.len);
}

/* Fast path. Nearly every upstream event is a text / arguments / reasoning
 * delta: response.output_text.delta, response.refusal.delta,
 * response.function_call_arguments.delta,
 * response.custom_tool_call_input.delta, response.reasoning_summary_text.delta,
 * response.reasoning_text.delta. Reading each checked whole (the general
 * path) dominates the translation, so those events are read by the validating scanner of
 * json.h (px_fj_*, shared with the other stream decoders): it accepts only what it
 * can prove jansson would accept and read the same way, with no escaped or
 * repeated keys where the fields are read. Anything else (other events,
 * errors, unexpected states, odd shapes) returns "not handled" and goes to
 * the general path, which stays the arbiter. Nothing is emitted before the
 * whole event has been checked. */

/* Returns 1 when the event was handled, 0 to use the general path, <0 on a
 * sink error. Only a delta for a block that is open is handled here; the
 * general path decides everything else (unknown items, a part that starts
 * with its first delta, errors). */
/* A delta that repeats the memo's bytes, its holes aside: an integer where
 * the memo skipped one, the delta's string where the memo's was (both
 * checked as the walk checks them), the same bytes between (what the walk
 * checked and read there: the type, the indexes, the other members). 1
 * when handled, 0 to walk it, <0 on a sink error. */
static int memo_event(px_sdec_t *d, const char *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  const unsigned char *m = (const unsigned char *)d->memo.data;
  size_t mi = 0, i = 0, ts = 0, te = 0;
  int esc = 0;
  for (int h = 0;; h++) {
    size_t ms = h < d->nholes ? d->hole[h].s : d->memo.len;
    if (n - i < ms - mi || memcmp(p + i, m + mi, ms - mi) != 0) return 0;
    i += ms - mi;
    if (h == d->nholes) break;
    size_t e;
    if (d->hole[h].str) {
      if (px_json_string(p, n, i, &e, &esc) < 0) return 0;
      ts = i, te = e;
    } else if ((e = px_fj_int_end(p, n, i)) == 0) {
      return 0;
    }
    i = e;
    mi = d->hole[h].e;
  }
  if (i != n) return 0;
  dblock_t *b = dfind(d, d->memo_oi, d->memo_ci);
  if (b == NULL || !b->open) return 0;
  px_str_t text;
  if (px_json_unescape(data + ts, te - ts, esc, &d->scratch, &text) < 0) return 0;
  int rc = ddelta(d, b, d->memo_kind, text.ptr, text.len);
  return rc < 0 ? rc : 1;
}

static int fast_event(px_sdec_t *d, const char *data, size_t n) {
  if (d->state != D_RUNNING) return 0;
  if (d->memo_ok) {
    int mrc = memo_event(d, data, n);
    if (mrc != 0) return mrc;
  }
  /* one flat walk of the event's members (px_fj_key / px_fj_pass / px_fj_next
   * of json.h); the members read are checked as they are read */
  const unsigned char *p = (const unsigned char *)data;
  px_fj_str_t type = {0, 0, 0, 0}, dl = {0, 0, 0, 0};
  int64_t oi = 0, ci = 0;
  int oi_set = 0, ci_set = 0, r, nh = 0;
  size_t i = px_json_ws(p, n, 0), kl, hs[MEMO_HOLES], he[MEMO_HOLES];
  int hstr[MEMO_HOLES];
  if (i >= n || p[i] != '{') return 0;
  i = px_json_ws(p, n, i + 1);
  do {
    size_t ks = i + 1;
    if (px_fj_key(p, n, &i, &kl) < 0) return 0;
    const unsigned char *k = p + ks;
    px_fj_str_t *s = NULL;
    int64_t *iv = NULL;
    int *iv_set = NULL;
    if (kl == 4 && memcmp(k, "type", 4) == 0)
      s = &type;
    else if (kl == 5 && memcmp(k, "delta", 5) == 0)
      s = &dl;
    else if (kl == 12 && memcmp(k, "output_index", 12) == 0)
      iv = &oi, iv_set = &oi_set;
    else if (kl == 13 && memcmp(k, "content_index", 13) == 0)
      iv = &ci, iv_set = &ci_set;
    if (s != NULL) {
      if (s->set || p[i] != '"' || px_json_string(p, n, i + 1, &s->e, &s->esc) < 0)
        return 0;
      s->s = i + 1;
      s->set = 1;
      i = s->e + 1;
      if (s == &dl && nh < MEMO_HOLES) hs[nh] = dl.s, he[nh] = dl.e, hstr[nh] = 1;
      if (s == &dl) nh++;
      /* a type that is no delta's (every delta type ends so): not handled
       * here, known before the rest of a lifecycle event is walked twice */
      if (s == &type &&
          (type.esc || type.e - type.s < 6 || memcmp(p + type.e - 6, ".delta", 6) != 0))
        return 0;
    } else if (iv != NULL) {
      size_t e = px_fj_int_end(p, n, i);
      if (*iv_set || e == 0) return 0;
      *iv = px_fj_int_value(p, i, e);
      *iv_set = 1;
      i = e;
    } else {
      size_t vs = i;
      if (px_fj_pass(p, n, &i, 1) < 0) return 0;
      if (p[vs] == '-' || (p[vs] >= '0' && p[vs] <= '9')) { /* an integer */
        if (nh < MEMO_HOLES) hs[nh] = vs, he[nh] = i, hstr[nh] = 0;
        nh++;
      }
    }
  } while ((r = px_fj_next(p, n, &i, '}')) > 0);
  if (r < 0 || px_json_ws(p, n, i) != n) return 0;
  if (!type.set || type.esc || !dl.set || !oi_set) return 0;
  const char *tp = data + type.s;
  size_t tl = type.e - type.s;
#define FT(lit) (tl == sizeof(lit) - 1 && memcmp(tp, lit, sizeof(lit) - 1) == 0)
  px_delta_t kind;
  int item_level;
  if (FT("response.output_text.delta")) {
    kind = PX_DELTA_TEXT, item_level = 0;
  } else if (FT("response.function_call_arguments.delta")) {
    kind = PX_DELTA_TOOL_ARGS, item_level = 1;
  } else if (FT("response.reasoning_summary_text.delta") ||
             FT("response.reasoning_text.delta")) {
    kind = PX_DELTA_THINKING, item_level = 1;
  } else if (FT("response.refusal.delta")) {
    kind = PX_DELTA_REFUSAL, item_level = 0;
  } else if (FT("response.custom_tool_call_input.delta")) {
    if (!px_tr_in_can(&d->ctx, PX_CAP_CUSTOM_TOOLS)) return 1; /* not carried: ignored */
    kind = PX_DELTA_TOOL_ARGS, item_level = 1;
  } else {
    return 0;
  }
#undef FT
  /* the same int conversions as oindex() / cindex() */
  int oi_ = (int)oi;
  int ci_ = item_level ? -1 : (ci_set ? (int)ci : 0);
  dblock_t *b = dfind(d, oi_, ci_);
  if (b == NULL || !b->open) return 0;
  px_str_t text;
  if (px_json_unescape(data + dl.s, dl.e - dl.s, dl.esc, &d->scratch, &text) < 0)
    return 0;
  /* the memo for the block's next delta */
  d->memo_ok = 0;
  if (nh <= MEMO_HOLES) {
    px_buf_reset(&d->memo);
    if (px_buf_append(&d->memo, data, n) == 0) {
      for (int h = 0; h < nh; h++)
        d->hole[h].s = hs[h], d->hole[h].e = he[h], d->hole[h].str = hstr[h];
      d->nholes = nh, d->memo_oi = oi_, d->memo_ci = ci_, d->memo_kind = kind;
      d->memo_ok = 1;
    }
  }
  int rc = ddelta(d, b, kind, text.ptr, text.len);
  return rc < 0 ? rc : 1;
}

/* The lifecycle events (response.created, output_item.added / .done of a
 * message, content_part.added / .done, response.completed, the .done
 * echoes) repeat the response, its items and texts: read by the checked
 * reads of the fast codecs (fastir.h px_fc_*: every byte checked by
 * jansson's rules, any number), without a document, in one walk of the
 * event: the members read below (the response's id, model, status,
 * incomplete reason and usage; an item's or a part's type and text) are
 * read where they stand, every other value checked and skipped. The shapes
 * read here are the common ones; the others (tool and reasoning items, a
 * text part that starts with text, failures, errors, annotations) go to
 * the general path, the arbiter. Returns 1 when handled, 0 to use the
 * general path, <0 on a sink error. */

/* the members read, one slot each (bit of the seen mask): the event's; the
 * item's; the part's; the response's, its incomplete_details' and usage's,
 * the usage details' */
enum {
  L_TYPE,
  L_OI,
  L_CI,
  L_ITEM,
  L_PART,
  L_RESP,
  I_TYPE,
  P_TYPE,
  P_TEXT,
  P_REFUSAL,
  R_ID,
  R_MODEL,
  R_STATUS,
  R_INC,
  R_USAGE,
  INC_REASON,
  U_IN,
  U_OUT,
  U_ITD,
  U_OTD,
  D_CACHED,
  D_REASONING,
  NSLOTS
};

static const px_fkey_t k_det_c[] = {PX_FK("cached_tokens")};
static const px_fkey_t k_det_r[] = {PX_FK("reasoning_tokens")};
static const px_ftab_t t_det_c = {k_det_c, 1, D_CACHED, NULL};
static const px_ftab_t t_det_r = {k_det_r, 1, D_REASONING, NULL};
static const px_fkey_t k_usage[] = {PX_FK("input_tokens"), PX_FK("output_tokens"),
                                    PX_FK("input_tokens_details"),
                                    PX_FK("output_tokens_details")};
static const px_ftab_t *const s_usage[] = {NULL, NULL, &t_det_c, &t_det_r};
static const px_ftab_t t_usage = {k_usage, 4, U_IN, s_usage};
static const px_fkey_t k_inc[] = {PX_FK("reason")};
static const px_ftab_t t_inc = {k_inc, 1, INC_REASON, NULL};
static const px_fkey_t k_resp[] = {PX_FK("id"), PX_FK("model"), PX_FK("status"),
                                   PX_FK("incomplete_details"), PX_FK("usage")};
static const px_ftab_t *const s_resp[] = {NULL, NULL, NULL, &t_inc, &t_usage};
static const px_ftab_t t_resp = {k_resp, 5, R_ID, s_resp};
static const px_fkey_t k_item[] = {PX_FK("type")};
static const px_ftab_t t_item = {k_item, 1, I_TYPE, NULL};
static const px_fkey_t k_part[] = {PX_FK("type"), PX_FK("text"), PX_FK("refusal")};
static const px_ftab_t t_part = {k_part, 3, P_TYPE, NULL};
static const px_fkey_t k_life[] = {PX_FK("type"),          PX_FK("output_index"),
                                   PX_FK("content_index"), PX_FK("item"),
                                   PX_FK("part"),          PX_FK("response")};
static const px_ftab_t *const s_life[] = {NULL, NULL, NULL, &t_item, &t_part, &t_resp};
static const px_ftab_t t_life = {k_life, 6, L_TYPE, s_life};
/* a running stream's events but the terminal ones: the response not read */
static const px_ftab_t *const s_run[] = {NULL, NULL, NULL, &t_item, &t_part, NULL};
static const px_ftab_t t_run = {k_life, 6, L_TYPE, s_run};

/* slot k's string value when it is one, unescaped bytes (escapes:
 * unknown, -1); absent or another kind: p NULL */
static int life_str(const px_fv_t *f, unsigned seen, int k, px_fstr_t *out) {
  static const px_fstr_t none = {NULL, 0, 0};
  *out = none;
  if (!(seen & (1u << k)) || f[k].kind != PX_FV_STR) return 0;
  if (f[k].s.esc) return -1;
  *out = f[k].s;
  return 0;
}

/* slot k as oindex() / cindex() read it (dflt when not an integer) */
static int life_int(const px_fv_t *f, unsigned seen, int k, int64_t dflt, int *out) {
  int64_t v = dflt;
  if ((seen & (1u << k)) && px_fw_jint(&f[k], dflt, &v) != 0) return -1;
  if (v > INT32_MAX) return -1;
  *out = (int)v;
  return 0;
}

/* response.completed / incomplete that ends well: stop and usage as
 * d_terminal reads them */
static int life_terminal(px_sdec_t *d, const px_fv_t *f, unsigned seen, int incomplete) {
  px_fstr_t status, reason;
  if (life_str(f, seen, R_STATUS, &status) < 0 ||
      life_str(f, seen, INC_REASON, &reason) < 0)
    return 0;
  if (status.p == NULL)
    status =
        incomplete ? (px_fstr_t){"incomplete", 10, 0} : (px_fstr_t){"completed", 9, 0};
  if (!PX_FS_IS(status, "completed") && !PX_FS_IS(status, "incomplete")) return 0;
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_MESSAGE_DELTA);
  /* the counts (px_jint's integers); the details' counts where their
   * objects had them */
  static const int slot[4] = {U_IN, U_OUT, D_CACHED, D_REASONING};
  int64_t *dst[4] = {&ev.usage.input_tokens, &ev.usage.output_tokens,
                     &ev.usage.cache_read_tokens, &ev.usage.reasoning_tokens};
  for (int k = 0; k < 4; k++) {
    int64_t v = -1;
    if ((seen & (1u << slot[k])) && px_fw_jint(&f[slot[k]], -1, &v) != 0) return 0;
    if (v >= 0) *dst[k] = v;
  }
  /* an open reasoning block may find its opaque reasoning in the output */
  for (size_t i = 0; i < d->nblocks; i++)
    if (d->blocks[i].open && d->blocks[i].kind == PX_BLOCK_THINKING) return 0;
  char st[16], rs[64];
  if (reason.p != NULL && reason.n >= sizeof(rs)) return 0;
  memcpy(st, status.p, status.n);
  st[status.n] = 0;
  if (reason.p != NULL) {
    memcpy(rs, reason.p, reason.n);
    rs[reason.n] = 0;
  }
  ev.stop = px_stop_from_responses(st, reason.p ? rs : NULL, d->has_tool);
  ev.finish = (px_str_t){st, status.n};
  if (ev.stop == PX_STOP_NONE) return 0;
  int rc = dstop_all(d, -1);
  if (rc == 0) rc = demit(d, &ev);
  if (rc < 0) return rc;
  dset(d, D_DONE);
  px_ev_init(&ev, PX_EV_MESSAGE_STOP);
  rc = demit(d, &ev);
  return rc < 0 ? rc : 1;
}

/* Whether a running stream's event is certainly not a terminal one (its
 * first member names another type), so its response is not read. */
static int life_not_terminal(const char *data, size_t n) {
  static const char head[] = "{\"type\":\"response.";
  const size_t hl = sizeof(head) - 1;
  if (n < hl || memcmp(data, head, hl) != 0) return 0;
  const char *t = data + hl;
  size_t l = n - hl;
  return !(l >= 10 && memcmp(t, "completed\"", 10) == 0) &&
         !(l >= 11 && memcmp(t, "incomplete\"", 11) == 0);
}

/* The message item's output_item.done (item: its span) joins the output
 * array the terminal response will repeat. */
static void seen_item(px_sdec_t *d, px_str_t item) {
  px_buf_t *o = &d->seen_out;
  if (o->len == 0 ? px_buf_append(o, "[", 1) < 0 : (o->len--, px_buf_append(o, ",", 1) < 0))
    goto drop;
  if (px_buf_append(o, item.ptr, item.len) < 0 || px_buf_append(o, "]", 1) < 0) goto drop;
  return;
drop:
  px_buf_free(o);
}

/* Templates of the lifecycle events. A stream's lifecycle events are the
 * same bytes as the last stream's but for their ids, numbers and texts: an
 * event the walk read (and the rules below took) is kept, per thread, with
 * its holes (every integer, and every string value but those the rules
 * decide on: the types, the status, the incomplete reason) and where the
 * walk found its members. An event equal to a template but for its holes,
 * each checked as the walk checks it (px_json_string, px_fj_int_end), has
 * the same structure, keys and nesting, so it is valid as the template was
 * and reads the same members, at places shifted by the holes' lengths: it
 * is compared, not walked. */
#define TPL_N 12
#define TPL_HOLES 40
#define TPL_MAX 4096 /* larger events are walked */

typedef struct tpl {
  const px_ftab_t *tab; /* the table it was read with (NULL: unused) */
  size_t len;
  unsigned seen;
  int nh;
  uint16_t hs[TPL_HOLES], he[TPL_HOLES]; /* holes [hs, he): string content or integer */
  uint8_t hstr[TPL_HOLES];
  px_fv_t f[NSLOTS]; /* spans as offsets into b (ptr - NULL) */
  /* where each slot's raw and string spans start and end: after hole
   * at[k][j] (-1: before every hole), or at its start (start[k][j]) */
  int8_t at[NSLOTS][4];
  uint8_t start[NSLOTS][4];
  char b[TPL_MAX];
} tpl_t;

/* The place of a template position at, a span's start or its end (a
 * token boundary): the last hole ending at or before it (-1: none), or,
 * for a start, the hole starting there (*start set; an empty string's
 * start is its hole's start, its end the hole's end). */
static int tpl_hole(const tpl_t *t, size_t at, int end, uint8_t *start) {
  int last = -1;
  *start = 0;
  for (int h = 0; h < t->nh; h++) {
    if (!end && t->hs[h] == at) {
      *start = 1;
      return h;
    }
    if (t->he[h] > at) break;
    last = h;
  }
  return last;
}

static __thread tpl_t *tpls; /* TPL_N of them, allocated once per thread */
static __thread unsigned tpl_next;

/* A template from an event the walk read and the rules took (none when
 * it is too large or has too many holes). */
static void tpl_keep(const px_ftab_t *tab, const char *data, size_t n, const px_fv_t *f,
                     unsigned seen) {
  if (n > TPL_MAX) return;
  if (tpls == NULL && (tpls = calloc(TPL_N, sizeof(*tpls))) == NULL) return;
  tpl_t *t = &tpls[tpl_next++ % TPL_N];
  t->tab = NULL;
  /* the strings the rules decide on stay bytes of the template */
  static const int fixed[] = {L_TYPE, I_TYPE, P_TYPE, R_STATUS, INC_REASON};
  const char *keep[sizeof(fixed) / sizeof(fixed[0])];
  for (size_t k = 0; k < sizeof(fixed) / sizeof(fixed[0]); k++)
    keep[k] = (seen & (1u << fixed[k])) && f[fixed[k]].kind == PX_FV_STR
                  ? f[fixed[k]].s.p
                  : NULL;
  const unsigned char *p = (const unsigned char *)data;
  int nh = 0;
  for (size_t i = 0; i < n;) {
    if (p[i] == '"') {
      size_t e;
      int esc;
      if (px_json_string(p, n, i + 1, &e, &esc) < 0) return;
      size_t j = px_json_ws(p, n, e + 1);
      int value = j >= n || p[j] != ':', hole = value;
      for (size_t k = 0; hole && k < sizeof(keep) / sizeof(keep[0]); k++)
        if (keep[k] == data + i + 1) hole = 0;
      if (hole) {
        if (nh == TPL_HOLES) return;
        t->hs[nh] = (uint16_t)(i + 1), t->he[nh] = (uint16_t)e, t->hstr[nh++] = 1;
      }
      i = e + 1;
    } else if (p[i] == '-' || (p[i] >= '0' && p[i] <= '9')) {
      size_t e = px_fj_int_end(p, n, i);
      if (e != 0) {
        if (nh == TPL_HOLES) return;
        t->hs[nh] = (uint16_t)i, t->he[nh] = (uint16_t)e, t->hstr[nh++] = 0;
        i = e;
      } else {
        while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ']') i++;
      }
    } else {
      i++;
    }
  }
  memcpy(t->b, data, n);
  t->len = n;
  t->nh = nh;
  t->seen = seen;
  for (int k = 0; k < NSLOTS; k++) {
    if (!(seen & (1u << k))) continue;
    t->f[k] = f[k];
    size_t pos[4] = {(size_t)(f[k].raw.ptr - data), (size_t)(f[k].raw.ptr - data) + f[k].raw.len,
                     0, 0};
    if (f[k].s.p != NULL) pos[2] = (size_t)(f[k].s.p - data), pos[3] = pos[2] + f[k].s.n;
    for (int j = 0; j < 4; j++)
      t->at[k][j] = (int8_t)tpl_hole(t, pos[j], j & 1, &t->start[k][j]);
    t->f[k].raw.ptr = (const char *)(uintptr_t)pos[0];
    if (f[k].s.p != NULL) t->f[k].s.p = (const char *)(uintptr_t)pos[2];
  }
  t->tab = tab;
}

/* The event's position for template position at whose place is (h, st)
 * (tpl_hole), the holes' new starts and ends ns[], ne[] known. */
static inline size_t tpl_map(const tpl_t *t, const size_t *ns, const size_t *ne, size_t at,
                             int h, int st) {
  if (h < 0) return at;
  return st ? ns[h] : ne[h] + (at - t->he[h]);
}

/* The event read by a template of table tab: 1 with f and *seen, else 0. */
static int tpl_read(const px_ftab_t *tab, const char *data, size_t n, px_fv_t *f,
                    unsigned *seen) {
  if (tpls == NULL) return 0;
  const unsigned char *p = (const unsigned char *)data;
  size_t ns[TPL_HOLES], ne[TPL_HOLES], nesc[TPL_HOLES];
  for (int k = 0; k < TPL_N; k++) {
    const tpl_t *t = &tpls[k];
    if (t->tab != tab) continue;
    size_t mi = 0, i = 0;
    int h, ok = 1;
    for (h = 0; ok; h++) {
      size_t ms = h < t->nh ? t->hs[h] : t->len;
      if (n - i < ms - mi || memcmp(p + i, t->b + mi, ms - mi) != 0) {
        ok = 0;
        break;
      }
      i += ms - mi;
      if (h == t->nh) break;
      size_t e;
      int esc = 0;
      if (t->hstr[h] ? px_json_string(p, n, i, &e, &esc) < 0
                     : (e = px_fj_int_end(p, n, i)) == 0) {
        ok = 0;
        break;
      }
      ns[h] = i, ne[h] = e, nesc[h] = (size_t)esc;
      i = e;
      mi = t->he[h];
    }
    if (!ok || i != n) continue;
    *seen = t->seen;
    for (int s = 0; s < NSLOTS; s++) {
      if (!(t->seen & (1u << s))) continue;
      f[s] = t->f[s];
      const int8_t *h = t->at[s];
      const uint8_t *st = t->start[s];
      size_t rs = (size_t)(uintptr_t)t->f[s].raw.ptr, re = rs + t->f[s].raw.len;
      size_t a = tpl_map(t, ns, ne, rs, h[0], st[0]), b = tpl_map(t, ns, ne, re, h[1], st[1]);
      f[s].raw.ptr = data + a;
      f[s].raw.len = b - a;
      if (t->f[s].s.p != NULL) {
        size_t ss = (size_t)(uintptr_t)t->f[s].s.p, se = ss + t->f[s].s.n;
        size_t c = tpl_map(t, ns, ne, ss, h[2], st[2]), e = tpl_map(t, ns, ne, se, h[3], st[3]);
        f[s].s.p = data + c;
        f[s].s.n = e - c;
        if (st[2] && t->hstr[h[2]]) f[s].s.esc = (int)nesc[h[2]]; /* a string hole */
      }
    }
    return 1;
  }
  return 0;
}

static int life_act(px_sdec_t *d, const px_fv_t *f, unsigned seen);

static int life_event(px_sdec_t *d, const char *data, size_t n) {
  px_fv_t f[NSLOTS];
  unsigned seen = 0;
  const px_ftab_t *tab =
      d->state == D_RUNNING && life_not_terminal(data, n) ? &t_run : &t_life;
  if (tpl_read(tab, data, n, f, &seen)) return life_act(d, f, seen);
  px_fw_t w = {data, n, 0};
  px_str_t spans[2] = {{d->seen_resp.data, d->seen_resp.len},
                       {d->seen_out.data, d->seen_out.len}};
  px_fmemo_t memo = {spans, 2};
  if (px_fc_tree_memo(&w, tab, f, &seen, &memo) != 0 || px_fc_end(&w) < 0) return 0;
  int rc = life_act(d, f, seen);
  if (rc == 1) tpl_keep(tab, data, n, f, seen);
  return rc;
}

/* The lifecycle event read into f (see life_event): 1 when handled, 0 to
 * use the general path, <0 on a sink error. */
static int life_act(px_sdec_t *d, const px_fv_t *f, unsigned seen) {
  px_fstr_t type, t;
  int oi, ci;
  if (life_str(f, seen, L_TYPE, &type) < 0 || type.p == NULL ||
      life_int(f, seen, L_OI, -1, &oi) < 0 || life_int(f, seen, L_CI, 0, &ci) < 0)
    return 0;
  if (d->state == D_INIT) {
    if (!PX_FS_IS(type, "response.created") && !PX_FS_IS(type, "response.in_progress") &&
        !PX_FS_IS(type, "response.queued"))
      return 0;
    px_fstr_t id, model;
    if (life_str(f, seen, R_ID, &id) < 0 || life_str(f, seen, R_MODEL, &model) < 0)
      return 0;
    px_ev_t ev;
    px_ev_init(&ev, PX_EV_MESSAGE_START);
    ev.id = (px_str_t){id.p, id.n};
    ev.model = (px_str_t){model.p, model.n};
    dset(d, D_RUNNING);
    int rc = demit(d, &ev);
    if (rc == 0 && (seen & (1u << L_RESP)) && f[L_RESP].kind == PX_FV_OBJ &&
        px_buf_append(&d->seen_resp, f[L_RESP].raw.ptr, f[L_RESP].raw.len) < 0)
      px_buf_free(&d->seen_resp);
    return rc < 0 ? rc : 1;
  }
  if (d->state != D_RUNNING) return 0;
  /* only response.in_progress repeats response.created's response: not
   * kept for the rest of the stream */
  if (d->seen_resp.data != NULL && !PX_FS_IS(type, "response.in_progress"))
    px_buf_free(&d->seen_resp);
  if (PX_FS_IS(type, "response.output_item.added")) {
    /* a message: its parts open the blocks */
    if (life_str(f, seen, I_TYPE, &t) < 0 || !PX_FS_IS(t, "message") || oi < 0) return 0;
    return 1;
  }
  if (PX_FS_IS(type, "response.content_part.added")) {
    if (life_str(f, seen, P_TYPE, &t) < 0) return 0;
    int text = PX_FS_IS(t, "output_text");
    if (!text && !PX_FS_IS(t, "refusal")) return t.p != NULL && t.n > 0 ? 0 : 1;
    px_fstr_t init;
    if (life_str(f, seen, text ? P_TEXT : P_REFUSAL, &init) < 0 || init.n > 0) return 0;
    dblock_t *b =
        dstart(d, oi, ci, text ? PX_BLOCK_TEXT : PX_BLOCK_REFUSAL, NULL, NULL, 0);
    return b != NULL ? 1 : PX_ENOMEM;
  }
  if (PX_FS_IS(type, "response.content_part.done")) {
    dblock_t *b = dfind(d, oi, ci);
    int rc = b != NULL ? dstop(d, b) : 0;
    return rc < 0 ? rc : 1;
  }
  if (PX_FS_IS(type, "response.output_item.done")) {
    if (life_str(f, seen, I_TYPE, &t) < 0 || t.p == NULL ||
        PX_FS_IS(t, "function_call") || PX_FS_IS(t, "custom_tool_call") ||
        PX_FS_IS(t, "reasoning"))
      return 0;
    if (PX_FS_IS(t, "message") && f[L_ITEM].kind == PX_FV_OBJ) seen_item(d, f[L_ITEM].raw);
    int rc = dstop_all(d, oi);
    return rc < 0 ? rc : 1;
  }
  if (PX_FS_IS(type, "response.completed") || PX_FS_IS(type, "response.incomplete"))
    return life_terminal(d, f, seen, PX_FS_IS(type, "response.incomplete"));
  /* what the general path acts on (the deltas: when fast_event left them) */
  static const px_fkey_t acted[] = {PX_FK("error"),
                                    PX_FK("response.created"),
                                    PX_FK("response.failed"),
                                    PX_FK("response.output_text.delta"),
                                    PX_FK("response.refusal.delta"),
                                    PX_FK("response.function_call_arguments.delta"),
                                    PX_FK("response.custom_tool_call_input.delta"),
                                    PX_FK("response.reasoning_summary_text.delta"),
                                    PX_FK("response.reasoning_text.delta"),
                                    PX_FK("response.reasoning_summary_part.added"),
                                    PX_FK("response.output_text.annotation.added")};
  if (type.n == 0 || px_fk_of(type, acted, sizeof(acted) / sizeof(acted[0])) >= 0) return 0;
  /* the .done echoes, in_progress, hosted tool progress: nothing to carry */
  return 1;
}

px_sdec_t *px_responses_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg) {
  px_sdec_t *d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  d->ctx = *ctx;
  d->sink = sink;
  d->arg = arg;
  d->fast = 1;
  px_buf_init(&d->scratch, 64u << 20);
  px_buf_init(&d->memo, 64u << 20);
  px_buf_init(&d->seen_resp, 64u << 20);
  px_buf_init(&d->seen_out, 64u << 20);
  dset(d, D_INIT);
  return d;
}

/* For the differential test (fuzz/fuzz_responses_fast.c), not part of the
 * protocol table: turn the fast path on (1) or off (0), or leave it (<0);
 * returns how many events the fast path has handled so far. */
long px_responses_sdec_fast(px_sdec_t *d, int on) {
  if (on >= 0) d->fast = on;
  return d->fast_hits;
}

/* The general path: the event checked whole, then read where it lies. Out
 * of line: its arena is no weight on the fast path's frame. */
__attribute__((noinline)) static int general_event(px_sdec_t *d,
                                                   const px_sse_event_t *sse) {
  px_fv_t j;
  if (px_jv_parse(sse->data.ptr, sse->data.len, &j) < 0 || !px_jv_is(&j, PX_FV_OBJ))
    return derror(d, PX_ERR_BAD_GATEWAY, "upstream sent a non-JSON event");
  px_arena_t ar; /* the event's strings, unescaped */
  px_arena_init(&ar);
  const char *type = jstr(&ar, &j, "type");
  char tbuf[96];
  if (type == NULL && sse->event.len > 0 && sse->event.len < sizeof(tbuf)) {
    memcpy(tbuf, sse->event.ptr, sse->event.len);
    tbuf[sse->event.len] = 0;
    type = tbuf;
  }
  int rc = 0;
  if (type == NULL) {
    rc = derror(d, PX_ERR_BAD_GATEWAY, "upstream sent an event without a type");
  } else if (strcmp(type, "error") == 0) {
    const char *msg = jstr(&ar, &j, "message");
    const char *code = jstr(&ar, &j, "code");
    px_fv_t inner;
    if (msg == NULL && px_jv_get(&j, "error", &inner) && px_jv_is(&inner, PX_FV_OBJ)) {
      msg = jstr(&ar, &inner, "message");
      code = jstr(&ar, &inner, "code") ? jstr(&ar, &inner, "code")
                                       : jstr(&ar, &inner, "type");
    }
    px_errkind_t k = PX_ERR_API;
    if (code != NULL && (strcmp(code, "rate_limit_exceeded") == 0 ||
                         strcmp(code, "rate_limit_error") == 0))
      k = PX_ERR_RATE_LIMIT;
    else if (code != NULL)
      k = px_errkind_from_type(code, 0);
    rc = derror(d, k, msg ? msg : "upstream stream error");
  } else if (d->state == D_INIT) {
    if (strcmp(type, "response.created") == 0 ||
        strcmp(type, "response.in_progress") == 0 ||
        strcmp(type, "response.queued") == 0) {
      px_fv_t r;
      px_jv_get(&j, "response", &r);
      px_ev_t ev;
      px_ev_init(&ev, PX_EV_MESSAGE_START);
      ev.id = px_str(jstr(&ar, &r, "id"));
      ev.model = px_str(jstr(&ar, &r, "model"));
      dset(d, D_RUNNING);
      rc = demit(d, &ev);
    } else {
      rc = derror(d, PX_ERR_BAD_GATEWAY,
                  "upstream stream did not start with response.created");
    }
  } else if (strcmp(type, "response.output_item.added") == 0) {
    rc = d_item_added(d, &j, &ar);
  } else if (strcmp(type, "response.content_part.added") == 0) {
    rc = d_part_added(d, &j, &ar);
  } else if (strcmp(type, "response.output_text.delta") == 0) {
    rc = d_delta(d, &j, PX_DELTA_TEXT, 0, &ar);
  } else if (strcmp(type, "response.refusal.delta") == 0) {
    rc = d_delta(d, &j, PX_DELTA_REFUSAL, 0, &ar);
  } else if (strcmp(type, "response.function_call_arguments.delta") == 0) {
    rc = d_delta(d, &j, PX_DELTA_TOOL_ARGS, 1, &ar);
  } else if (strcmp(type, "response.custom_tool_call_input.delta") == 0) {
    /* not carried toward clients without freeform tools: ignored */
    if (px_tr_in_can(&d->ctx, PX_CAP_CUSTOM_TOOLS))
      rc = d_delta(d, &j, PX_DELTA_TOOL_ARGS, 1, &ar);
  } else if (strcmp(type, "response.reasoning_summary_text.delta") == 0 ||
             strcmp(type, "response.reasoning_text.delta") == 0) {
    rc = d_delta(d, &j, PX_DELTA_THINKING, 1, &ar);
  } else if (strcmp(type, "response.reasoning_summary_part.added") == 0) {
    dblock_t *b = dfind(d, oindex(&j), -1);
    if (b != NULL && b->nsummary++ > 0 && b->got_delta)
      rc = ddelta(d, b, PX_DELTA_THINKING, "\n\n", 2);
  } else if (strcmp(type, "response.output_text.annotation.added") == 0) {
    rc = d_annotation(d, &j, sse->data.len);
  } else if (strcmp(type, "response.content_part.done") == 0) {
    dblock_t *b = dfind(d, oindex(&j), cindex(&j));
    if (b != NULL) rc = dstop(d, b);
  } else if (strcmp(type, "response.output_item.done") == 0) {
    rc = d_item_done(d, &j, &ar);
  } else if (strcmp(type, "response.completed") == 0 ||
             strcmp(type, "response.incomplete") == 0 ||
             strcmp(type, "response.failed") == 0) {
    rc = d_terminal(d, &j, type, &ar);
  } else if (strcmp(type, "response.created") == 0) {
    rc = derror(d, PX_ERR_BAD_GATEWAY, "upstream sent response.created twice");
  }
  /* everything else (.done echoes, in_progress, annotations, hosted tool
   * progress) carries nothing the event model needs */
  px_arena_free(&ar);
  return rc < 0 ? rc : 0;
}

int px_responses_sdec_feed(px_sdec_t *d, const px_sse_event_t *sse) {
  if (d->state == D_DONE || d->state == D_ERROR) return 0;
  if (px_str_eq(sse->data, "[DONE]") || sse->data.len == 0) return 0;
  if (d->fast) {
    int frc = fast_event(d, sse->data.ptr, sse->data.len);
    if (frc == 0) frc = life_event(d, sse->data.ptr, sse->data.len);
    if (frc != 0) {
      d->fast_hits++;
      return frc < 0 ? frc : 0;
    }
  }
  return general_event(d, sse);
}

int px_responses_sdec_finish(px_sdec_t *d) {
  if (d->state == D_DONE || d->state == D_ERROR) return 0;
  return derror(d, PX_ERR_BAD_GATEWAY, "upstream stream ended before response.completed");
}

void px_responses_sdec_free(px_sdec_t *d) {
  if (d == NULL) return;
  free(d->blocks);
  px_buf_free(&d->scratch);
  px_buf_free(&d->memo);
  px_buf_free(&d->seen_resp);
  px_buf_free(&d->seen_out);
  free(d);
}

/* ====================================================================== */
/* Encoder                                                                 */

typedef enum { E_INIT, E_OPEN, E_DONE } estate_t;

typedef struct eblock {
  int used;
  px_block_t kind;
  int output_index;
  int content_index;
  int summary_open;
  int suspended; /* text/refusal whose message item another block closed */
  int custom;    /* a custom (freeform) tool call */
  int tix;       /* its text slot (escaped text / arguments), see etext() */
  px_buf_t dpre; /* delta event head: before the sequence number (dseq
                    bytes), then after it */
  size_t dseq;
  char *item_id;
  char *call_id;
  char *name;
  px_buf_t enc; /* reasoning encrypted content */
  px_buf_t anns; /* text: annotations so far (Responses shape), comma-separated */
  int nanns;
} eblock_t;

/* An output item of the response: its bytes as written (text placeholders,
 * see below) once it is done, repeated by the terminal response. */
typedef struct eitem {
  int done;
  px_buf_t b;
} eitem_t;

struct px_senc {
  px_tr_ctx_t ctx;
  px_buf_t *out;
  estate_t state;
  int64_t seq;
  /* the ids, each allocated to its length (a stream idles holding them):
   * the response's (NULL: none yet, see eresp_id), the upstream's the item
   * ids derive from (at most UP_ID_MAX bytes of it), the open message's */
  char *resp_id;
  char *up_id;
  int next_oi;
  int nmsg;
  /* open message item */
  int msg_oi;
  char *msg_id;
  px_buf_t msg_parts; /* its content parts so far, comma-separated */
  int msg_nparts;
  int has_refusal;
  int any_output;
  eitem_t *items; /* the output array; open items not done yet */
  size_t nitems, capitems;
  eblock_t *blocks;
  size_t nblocks;
  size_t accum;
  px_stop_t stop;
  px_usage_t usage;
  char *explanation;
  px_buf_t scratch;
  /* Text slots: the text of every block, JSON-escaped once as its deltas
   * go out. Events, items and the final response are written with a
   * placeholder string for a slot (the rare events' too);
   * ewrite() splices the escaped bytes in while writing, so a text is never
   * copied nor escaped again (the closing events repeat it four times). */
  px_buf_t *texts;
  size_t ntexts, captexts;
  char marker[48];        /* placeholder prefix as dumped: \u0001pxtx<hex>_ */
  px_senc_t *next, *prev; /* live encoders of this thread (see below) */
};

/* The hub reports a broken stream through the stateless
 * encode_stream_error(out, ...). A Responses client needs that error inside
 * the stream it already has (same response id, next sequence_number, the
 * output so far), so live encoders are listed by their out buffer and
 * encode_stream_error asks px_responses_stream_error() first. */
static __thread px_senc_t *live;

static void eset(px_senc_t *e, estate_t s) {
  e->state = s;
}

/* The response id: none before the stream starts (an error then names the
 * response resp_proxai_error). */
static const char *eresp_id(const px_senc_t *e) {
  return e->resp_id != NULL ? e->resp_id : "resp_proxai_error";
}

/* The upstream id the item ids derive from ("" when there is none yet). */
static const char *eup_id(const px_senc_t *e) {
  return e->up_id != NULL ? e->up_id : "";
}

/* Accumulated text is bounded by max_accum. The closing events repeat a
 * text four times (.done, content_part.done, output_item.done, the terminal
 * response), each spliced from the one escaped copy of its slot and handed
 * to the client as it is written (eflush); if one does not fit the out
 * buffer the write fails cleanly and the stream ends with response.failed
 * (see e_error). */
static int eaccum(px_senc_t *e, size_t n) {
  size_t cap = e->ctx.max_accum ? e->ctx.max_accum : DEFAULT_ACCUM;
  if (e->accum + n > cap) return PX_ETOOBIG;
  e->accum += n;
  return 0;
}

/* A new text slot; its index, or <0. */
static int etext_new(px_senc_t *e) {
  if (e->ntexts == e->captexts) {
    size_t nc = e->captexts ? e->captexts * 2 : 2; /* most streams hold one or two */
    px_buf_t *n = realloc(e->texts, nc * sizeof(*n));
    if (n == NULL) return PX_ENOMEM;
    e->texts = n;
    e->captexts = nc;
  }
  px_buf_init(&e->texts[e->ntexts], SIZE_MAX);
  return (int)e->ntexts++;
}

/* Event members, items and the response are written by hand, as jansson's
 * dump writes them (keys in their order, no spaces, strings escaped as
 * jansson does); the writers return nonzero on failure. */
static int wlit(px_buf_t *b, const char *s) {
  return px_buf_puts(b, s) != 0;
}

static int wstr(px_buf_t *b, const char *s) {
  return s == NULL || px_buf_json_str_as(b, s, strlen(s), PX_ESC_JANSSON) != 0;
}

static int wint(px_buf_t *b, long long v) {
  return px_buf_i64(b, v) != 0;
}

/* The placeholder string of a text slot, as dumped: "\u0001pxtx<hex>_N\u0001" */
static int wtext(px_senc_t *e, px_buf_t *b, int tix) {
  return wlit(b, "\"") || wlit(b, e->marker) || wint(b, tix) || wlit(b, "\\u0001\"");
}

/* The real text of a slot (slow path: error output), re-written as
 * json_dumps writes a string (the slot holds it escaped as its deltas went
 * out): 0, 1 when it does not read as one string (left out), <0 on failure. */
static int wtext_value(px_senc_t *e, px_buf_t *o, int tix) {
  px_buf_t *t = &e->texts[tix];
  px_buf_t q;
  px_buf_init(&q, SIZE_MAX);
  px_fv_t a, v;
  px_jv_it_t it;
  int rc = 1;
  if (px_buf_append(&q, "[\"", 2) == 0 && px_buf_append(&q, t->data, t->len) == 0 &&
      px_buf_append(&q, "\"]", 2) == 0 && px_jv_parse(q.data, q.len, &a) == 0 &&
      px_jv_size(&a) == 1) {
    px_jv_iter(&it, &a);
    if (px_jv_elem(&it, &v) && px_jv_is(&v, PX_FV_STR))
      rc = px_fb_jdump(o, &v) != 0 ? PX_ENOMEM : 0;
  }
  px_buf_free(&q);
  return rc;
}

/* The first place of the marker m (ml bytes) in p[0..n), or NULL: its
 * first byte (a backslash: a dump has few) found by memchr, the rest
 * compared there. */
static const char *find_marker(const char *p, size_t n, const char *m, size_t ml) {
  const char *end = p + n;
  while ((size_t)(end - p) >= ml) {
    const char *b = memchr(p, m[0], (size_t)(end - p) - ml + 1);
    if (b == NULL || memcmp(b, m, ml) == 0) return b;
    p = b + 1;
  }
  return NULL;
}

/* Copy a dumped event to out, replacing each quoted placeholder with the
 * escaped text of its slot. */
static int esplice(px_senc_t *e, const char *p, size_t n) {
  size_t ml = strlen(e->marker);
  while (n > 0) {
    const char *m = find_marker(p, n, e->marker, ml);
    if (m == NULL) return px_buf_append(e->out, p, n);
    size_t head = (size_t)(m - p);
    const char *q = m + ml;
    const char *end = p + n;
    size_t ix = 0;
    int nd = 0;
    while (q < end && *q >= '0' && *q <= '9' && nd < 9)
      ix = ix * 10 + (size_t)(*q++ - '0'), nd++;
    if (head == 0 || p[head - 1] != '"' || nd == 0 || end - q < 7 ||
        memcmp(q, "\\u0001\"", 7) != 0 || ix >= e->ntexts) {
      /* not a placeholder after all: copy through the marker */
      int rc = px_buf_append(e->out, p, head + ml);
      if (rc < 0) return rc;
      p += head + ml;
      n -= head + ml;
      continue;
    }
    px_buf_t *t = &e->texts[ix];
    int rc = px_buf_append(e->out, p, head); /* up to and with the quote */
    if (rc == 0 && t->len) rc = px_buf_append(e->out, t->data, t->len);
    if (rc < 0) return rc;
    q += 6; /* the closing quote stays */
    n -= (size_t)(q - p);
    p = q;
  }
  return 0;
}

/* Between the events of one call (the closing events repeat a text four
 * times), hand what is written to the client, so that out holds about one
 * event, not four copies of the text. Not once the stream is done: the
 * terminal event is the call's last, and the hub's error path measures out
 * around the call that ends the stream. */
static void eflush(px_senc_t *e) {
  if (e->ctx.flush != NULL && e->state == E_OPEN && e->out->len >= PX_FLUSH_AT)
    e->ctx.flush(e->ctx.flush_arg);
}

static char *utoa(char *end, unsigned long long v) {
  *--end = 0;
  do {
    *--end = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  return end;
}

/* Write the event dumped in e->scratch into the out buffer: type and
 * sequence_number first (written here: no wrapper object), then its
 * members with the text placeholders spliced. On failure the out buffer
 * is left as it was. The caller flushes (eflush) once scratch is free. */
static int ewrite(px_senc_t *e, const char *type) {
  char num[24];
  const char *ns = utoa(num + sizeof(num), (unsigned long long)e->seq);
  size_t mark = e->out->len, n = e->scratch.len, tl = strlen(type);
  size_t nl = (size_t)(num + sizeof(num) - 1 - ns);
  /* room for the event but its spliced texts at once (out is emptied, and
   * freed when large, after each feed: no doubling from a few bytes up);
   * its head written there */
  int rc = px_buf_reserve(e->out, 2 * tl + nl + n + 64);
  if (rc < 0) return rc;
  char *w = e->out->data + e->out->len;
  memcpy(w, "event: ", 7), w += 7;
  memcpy(w, type, tl), w += tl;
  memcpy(w, "\ndata: {\"type\":\"", 16), w += 16;
  memcpy(w, type, tl), w += tl;
  memcpy(w, "\",\"sequence_number\":", 20), w += 20;
  memcpy(w, ns, nl), w += nl;
  /* the members, between the dumped object's braces */
  if (n > 2) *w++ = ',';
  e->out->len = (size_t)(w - e->out->data);
  if (rc == 0 && n > 2) rc = esplice(e, e->scratch.data + 1, n - 2);
  if (rc == 0) rc = px_buf_puts(e->out, "}\n\n");
  if (rc < 0) {
    e->out->len = mark;
    return rc;
  }
  e->seq++;
  return 0;
}

/* Write the event whose members are in scratch (fail: writing them failed). */
static int esend(px_senc_t *e, const char *type, int fail) {
  int rc = fail ? PX_ENOMEM : 0;
  if (rc == 0) rc = ewrite(e, type);
  px_buf_reset(&e->scratch); /* kept for the IR event's next one, then freed */
  if (rc == 0) eflush(e);
  return rc;
}

/* The scratch emptied for an event's members, with room for a usual one
 * (it is freed after each IR event: one allocation, not a doubling from a
 * few bytes up). */
static px_buf_t *escratch(px_senc_t *e) {
  px_buf_t *s = &e->scratch;
  px_buf_reset(s);
  if (s->size == 0) (void)px_buf_reserve(s, 2048); /* else: grows as it goes */
  return s;
}

/* Start an event's members in scratch: {"item_id":..,"output_index":N */
static int ehead(px_senc_t *e, const char *item_id, int oi) {
  px_buf_t *s = escratch(e);
  return wlit(s, "{\"item_id\":") || wstr(s, item_id) || wlit(s, ",\"output_index\":") ||
         wint(s, oi);
}

/* Start an output item event's members in scratch: {"output_index":N,"item": */
static int eitem_head(px_senc_t *e, int oi) {
  px_buf_t *s = escratch(e);
  return wlit(s, "{\"output_index\":") || wint(s, oi) || wlit(s, ",\"item\":");
}

/* The delta event type of a block. */
static const char *edelta_type(const eblock_t *b) {
  switch (b->kind) {
    case PX_BLOCK_TEXT: return "response.output_text.delta";
    case PX_BLOCK_REFUSAL: return "response.refusal.delta";
    case PX_BLOCK_TOOL_CALL:
      return b->custom ? "response.custom_tool_call_input.delta"
                       : "response.function_call_arguments.delta";
    default: return "response.reasoning_summary_text.delta";
  }
}

/* The delta event head of a block, written once: event: T\ndata:
 * {"type":"T","sequence_number": then, after the number,
 * ,"item_id":..,"output_index":N[,"content_index":M][,"summary_index":S],"delta":" */
static int edelta_head(eblock_t *b, int ci, int summary) {
  px_buf_t *h = &b->dpre;
  const char *type = edelta_type(b);
  px_buf_reset(h);
  int rc = px_buf_puts(h, "event: ");
  if (rc == 0) rc = px_buf_puts(h, type);
  if (rc == 0) rc = px_buf_puts(h, "\ndata: {\"type\":\"");
  if (rc == 0) rc = px_buf_puts(h, type);
  if (rc == 0) rc = px_buf_puts(h, "\",\"sequence_number\":");
  b->dseq = h->len;
  if (rc == 0) rc = px_buf_puts(h, ",\"item_id\":");
  if (rc == 0) rc = px_buf_json_str(h, b->item_id, strlen(b->item_id));
  if (rc == 0) rc = px_buf_puts(h, ",\"output_index\":");
  if (rc == 0) rc = px_buf_i64(h, b->output_index);
  if (rc == 0 && ci >= 0) rc = px_buf_puts(h, ",\"content_index\":");
  if (rc == 0 && ci >= 0) rc = px_buf_i64(h, ci);
  if (rc == 0 && summary >= 0) rc = px_buf_puts(h, ",\"summary_index\":");
  if (rc == 0 && summary >= 0) rc = px_buf_i64(h, summary);
  if (rc == 0) rc = px_buf_puts(h, ",\"delta\":\"");
  return rc;
}

/* Emit a block's delta event (its type: edelta_type) by hand, escaping the
 * text once, straight into the out buffer, and append the escaped bytes to
 * the block's text slot. */
static int edelta(px_senc_t *e, eblock_t *b, const char *s, size_t n) {
  px_buf_t *o = e->out;
  size_t mark = o->len;
  char num[24];
  const char *ns = utoa(num + sizeof(num), (unsigned long long)e->seq);
  size_t nl = (size_t)(num + sizeof(num) - 1 - ns);
  int lp = b->kind == PX_BLOCK_TEXT;
  size_t need = nl + b->dpre.len + n + 24;
  int rc = o->size - o->len >= need ? 0 : px_buf_reserve(o, need);
  if (rc < 0) return rc;
  char *w = o->data + o->len;
  memcpy(w, b->dpre.data, b->dseq), w += b->dseq;
  for (size_t k = 0; k < nl; k++) *w++ = ns[k]; /* a few digits: no call */
  memcpy(w, b->dpre.data + b->dseq, b->dpre.len - b->dseq), w += b->dpre.len - b->dseq;
  o->len = (size_t)(w - o->data);
  size_t es = o->len;
  /* the usual text has nothing to escape (px_json_plain stops where the
   * escaping writer would act): copied into the room reserved */
  if (px_json_plain((const unsigned char *)s, n, 0) == n) {
    if (n) memcpy(w, s, n);
    o->len += n;
  } else {
    rc = px_buf_json_escape(o, s, n);
  }
  size_t ee = o->len;
  if (rc == 0) rc = px_buf_append(&e->texts[b->tix], o->data + es, ee - es);
  if (rc == 0)
    rc = lp ? px_buf_append(o, "\",\"logprobs\":[]}\n\n", 18)
            : px_buf_append(o, "\"}\n\n", 4);
  if (rc < 0) {
    o->len = mark;
    return rc;
  }
  e->seq++;
  return 0;
}

/* {"response":{...} of an event in scratch: the Response object, with the
 * finished items and the usage when with_output. */
static int wresponse(px_senc_t *e, const char *status, const char *reason,
                     int with_output) {
  px_buf_t *s = escratch(e);
  if (wlit(s, "{\"response\":") ||
      px_responses_object_head(s, &e->ctx, eresp_id(e), e->ctx.created, status, reason))
    return 1;
  int first = 1;
  for (size_t i = 0; with_output && i < e->nitems; i++) {
    if (!e->items[i].done) continue; /* an item that never finished */
    if ((!first && wlit(s, ",")) ||
        px_buf_append(s, e->items[i].b.data, e->items[i].b.len))
      return 1;
    first = 0;
  }
  if (px_responses_object_tail(s, &e->ctx) || wlit(s, ",\"usage\":")) return 1;
  if (with_output ? px_responses_usage_write(s, &e->usage) != 0 : wlit(s, "null"))
    return 1;
  return wlit(s, "}}");
}

/* A finished output item (its bytes written in e->items[oi].b): announced
 * (response.output_item.done) and kept for the terminal response. */
static int eitem_done(px_senc_t *e, int oi) {
  eitem_t *it = &e->items[oi];
  it->done = 1;
  int fail = eitem_head(e, oi) || px_buf_append(&e->scratch, it->b.data, it->b.len) ||
             wlit(&e->scratch, "}");
  return esend(e, "response.output_item.done", fail);
}

/* A message item: {"id":..,"type":"message","status":..,"role":"assistant",
 * "content":[<parts>]} */
static int wmsg_item(px_senc_t *e, px_buf_t *b, const char *status,
                     const px_buf_t *parts) {
  return wlit(b, "{\"id\":") || wstr(b, e->msg_id) ||
         wlit(b, ",\"type\":\"message\",\"status\":") || wstr(b, status) ||
         wlit(b, ",\"role\":\"assistant\",\"content\":[") ||
         (parts != NULL && px_buf_append(b, parts->data, parts->len)) || wlit(b, "]}");
}

static int eclose_part(px_senc_t *e, eblock_t *b);

/* Close the open message item. A text or refusal block still open in it
 * (another block started while it streamed: Responses cannot interleave
 * content parts with other items) gets its closing events first and is
 * suspended; a later delta continues it in a new message item (never an
 * event for an item after its output_item.done). */
static int eclose_msg(px_senc_t *e) {
  if (e->msg_oi < 0) return 0;
  for (size_t i = 0; i < e->nblocks; i++) {
    eblock_t *b = &e->blocks[i];
    if (!b->used || b->suspended || b->output_index != e->msg_oi ||
        (b->kind != PX_BLOCK_TEXT && b->kind != PX_BLOCK_REFUSAL))
      continue;
    int rc = eclose_part(e, b);
    if (rc < 0) return rc;
    b->suspended = 1;
  }
  int oi = e->msg_oi;
  px_buf_reset(&e->items[oi].b);
  int rc = wmsg_item(e, &e->items[oi].b, "completed", &e->msg_parts) ? PX_ENOMEM
                                                                     : eitem_done(e, oi);
  px_buf_free(&e->msg_parts);
  e->msg_oi = -1;
  return rc;
}

/* A new output item: its slot and the start of its output_item.added event
 * in scratch (the caller writes the item and sends it); its index, or <0. */
static int enew_item(px_senc_t *e) {
  if (e->nitems == e->capitems) {
    size_t nc = e->capitems ? e->capitems * 2 : 2; /* most streams hold one or two */
    eitem_t *n = realloc(e->items, nc * sizeof(*n));
    if (n == NULL) return PX_ENOMEM;
    e->items = n;
    e->capitems = nc;
  }
  int oi = e->next_oi++;
  e->items[e->nitems].done = 0;
  px_buf_init(&e->items[e->nitems++].b, SIZE_MAX);
  e->any_output = 1;
  return eitem_head(e, oi) ? PX_ENOMEM : oi;
}

/* Send the output_item.added event enew_item started (fail: writing the item
 * failed); the item's index, or <0. */
static int eitem_added(px_senc_t *e, int oi, int fail) {
  fail = fail || wlit(&e->scratch, "}");
  return esend(e, "response.output_item.added", fail) < 0 ? PX_ENOMEM : oi;
}

static int eopen_msg(px_senc_t *e) {
  if (e->msg_oi >= 0) return 0;
  char id[200];
  px_responses_msg_id(eup_id(e), e->nmsg++, id, sizeof(id));
  free(e->msg_id);
  if ((e->msg_id = strdup(id)) == NULL) return PX_ENOMEM;
  px_buf_init(&e->msg_parts, SIZE_MAX);
  e->msg_nparts = 0;
  int oi = enew_item(e);
  if (oi < 0) return PX_ENOMEM;
  oi = eitem_added(e, oi, wmsg_item(e, &e->scratch, "in_progress", NULL));
  if (oi < 0) return PX_ENOMEM;
  e->msg_oi = oi;
  return 0;
}

static eblock_t *eblock(px_senc_t *e, int index) {
  if (index < 0 || index >= MAX_BLOCKS) return NULL;
  if ((size_t)index >= e->nblocks) {
    /* most streams use one or two blocks: exact, then doubling */
    size_t n = e->nblocks * 2 > (size_t)index ? e->nblocks * 2 : (size_t)index + 1;
    if (n > MAX_BLOCKS) n = MAX_BLOCKS;
    eblock_t *nb = realloc(e->blocks, n * sizeof(*nb));
    if (nb == NULL) return NULL;
    memset(nb + e->nblocks, 0, (n - e->nblocks) * sizeof(*nb));
    e->blocks = nb;
    e->nblocks = n;
  }
  return &e->blocks[index];
}

static char *dupn(px_str_t s) {
  char *p = malloc(s.len + 1);
  if (p == NULL) return NULL;
  if (s.len) memcpy(p, s.ptr, s.len);
  p[s.len] = 0;
  return p;
}

static void efree_block(eblock_t *b) {
  free(b->item_id);
  free(b->call_id);
  free(b->name);
  px_buf_free(&b->dpre);
  px_buf_free(&b->enc);
  px_buf_free(&b->anns);
  memset(b, 0, sizeof(*b));
}

/* A text or refusal block's content part (text: the slot's placeholder, or
 * empty): {"type":"output_text","text":..,"annotations":[..]} or
 * {"type":"refusal","refusal":..} */
static int wpart(px_senc_t *e, px_buf_t *o, const eblock_t *b, int empty) {
  if (wlit(o, b->kind == PX_BLOCK_TEXT ? "{\"type\":\"output_text\",\"text\":"
                                       : "{\"type\":\"refusal\",\"refusal\":") ||
      (empty ? wlit(o, "\"\"") : wtext(e, o, b->tix)))
    return 1;
  if (b->kind != PX_BLOCK_TEXT) return wlit(o, "}");
  if (wlit(o, ",\"annotations\":")) return 1;
  if (wlit(o, "[") || (!empty && px_buf_append(o, b->anns.data, b->anns.len)) ||
      wlit(o, "]"))
    return 1;
  return wlit(o, "}");
}

/* A text or refusal block's content part in the open message item (opened
 * when there is none). */
static int eopen_part(px_senc_t *e, eblock_t *b) {
  int rc = eopen_msg(e);
  if (rc < 0) return rc;
  b->output_index = e->msg_oi;
  b->content_index = e->msg_nparts++;
  free(b->item_id);
  b->item_id = strdup(e->msg_id);
  if (b->item_id == NULL) return PX_ENOMEM;
  px_buf_t *s = &e->scratch;
  int fail = ehead(e, b->item_id, b->output_index) || wlit(s, ",\"content_index\":") ||
             wint(s, b->content_index) || wlit(s, ",\"part\":") || wpart(e, s, b, 1) ||
             wlit(s, "}");
  rc = esend(e, "response.content_part.added", fail);
  if (rc == 0) rc = edelta_head(b, b->content_index, -1);
  return rc;
}

/* A tool call item (arguments: the slot's placeholder, or empty):
 * {"id":..,"type":"function_call","status":..,"call_id":..,"name":..,
 * "arguments":..} (a custom one: "custom_tool_call", "input") */
static int wcall_item(px_senc_t *e, px_buf_t *o, const eblock_t *b, const char *status,
                      int empty) {
  return wlit(o, "{\"id\":") || wstr(o, b->item_id) ||
         wlit(o, b->custom ? ",\"type\":\"custom_tool_call\",\"status\":"
                           : ",\"type\":\"function_call\",\"status\":") ||
         wstr(o, status) || wlit(o, ",\"call_id\":") || wstr(o, b->call_id) ||
         wlit(o, ",\"name\":") || wstr(o, b->name) ||
         wlit(o, b->custom ? ",\"input\":" : ",\"arguments\":") ||
         (empty ? wlit(o, "\"\"") : wtext(e, o, b->tix)) || wlit(o, "}");
}

static int e_block_start(px_senc_t *e, const px_ev_t *ev) {
  eblock_t *b = eblock(e, ev->index);
  if (b == NULL || b->used) return PX_EPROTO;
  b->used = 1;
  b->kind = ev->block;
  px_buf_init(&b->enc, SIZE_MAX);
  px_buf_init(&b->anns, SIZE_MAX);
  px_buf_init(&b->dpre, 1024);
  b->tix = etext_new(e);
  if (b->tix < 0) return PX_ENOMEM;
  char id[200];
  int rc;
  switch (ev->block) {
    case PX_BLOCK_TEXT:
    case PX_BLOCK_REFUSAL:
      if (ev->block == PX_BLOCK_REFUSAL) e->has_refusal = 1;
      rc = eopen_part(e, b);
      if (rc == 0 && ev->text.len > 0) {
        rc = eaccum(e, ev->text.len);
        if (rc == 0)
          rc = edelta(e, b, ev->text.ptr, ev->text.len);
      }
      return rc;
    case PX_BLOCK_THINKING:
    case PX_BLOCK_REDACTED_THINKING: {
      rc = eclose_msg(e);
      if (rc < 0) return rc;
      char *rid = dupn(ev->id);
      px_responses_rs_id(eup_id(e), rid, e->next_oi, id, sizeof(id));
      free(rid);
      b->item_id = strdup(id);
      b->content_index = -1;
      if (ev->block == PX_BLOCK_REDACTED_THINKING && ev->text.len > 0) {
        rc = px_buf_puts(&b->enc, px_rtok_tag(PX_PROTO_RESPONSES, "redacted_data"));
        if (rc == 0) rc = px_buf_append(&b->enc, ev->text.ptr, ev->text.len);
        if (rc < 0) return rc;
      }
      int oi = enew_item(e);
      if (oi < 0) return PX_ENOMEM;
      oi = eitem_added(e, oi,
                       wlit(&e->scratch, "{\"id\":") || wstr(&e->scratch, id) ||
                           wlit(&e->scratch, ",\"type\":\"reasoning\",\"summary\":[]}"));
      if (oi < 0) return PX_ENOMEM;
      b->output_index = oi;
      return edelta_head(b, -1, 0);
    }
    case PX_BLOCK_TOOL_CALL: {
      rc = eclose_msg(e);
      if (rc < 0) return rc;
      b->call_id = dupn(ev->id);
      b->name = dupn(ev->name);
      if (b->call_id == NULL || b->name == NULL) return PX_ENOMEM;
      b->custom = ev->custom;
      if (b->custom)
        px_responses_ctc_id(eup_id(e), b->call_id, e->next_oi, id, sizeof(id));
      else
        px_responses_fc_id(eup_id(e), b->call_id, e->next_oi, id, sizeof(id));
      b->item_id = strdup(id);
      b->content_index = -1;
      int oi = enew_item(e);
      if (oi < 0) return PX_ENOMEM;
      oi = eitem_added(e, oi, wcall_item(e, &e->scratch, b, "in_progress", 1));
      if (oi < 0) return PX_ENOMEM;
      b->output_index = oi;
      return edelta_head(b, -1, -1);
    }
  }
  return PX_EPROTO;
}

/* The IR annotation a in the Responses shape (flat), as the non-streaming
 * reference codec's px_responses_annotations (responses_common.c) makes it, written into
 * o: a url_citation's nested object with its type (set in its place, else last); the
 * other citation kinds as they are. 0, 1 when it has none (named in the lossy list), <0
 * on failure. */
static int wannotation(px_senc_t *e, px_buf_t *o, const px_fv_t *a, const char *t,
                       px_arena_t *ar) {
  px_fv_t nested, x;
  px_fstr_t k;
  px_jv_get(a, t, &nested);
  if (strcmp(t, "url_citation") == 0 && px_jv_is(&nested, PX_FV_OBJ)) {
    px_jv_it_t it;
    px_jv_iter(&it, &nested);
    int rc = wlit(o, "{") ? PX_ENOMEM : 0, first = 1, typed = 0;
    while (rc == 0 && px_jv_member(&it, &k, &x)) {
      px_fv_t kv = {.kind = PX_FV_STR, .s = k, .raw = {k.p, k.n}};
      const char *ks = px_jv_str(ar, &kv, NULL);
      if (ks == NULL) return PX_ENOMEM;
      int type = strcmp(ks, "type") == 0;
      typed |= type;
      if ((!first && wlit(o, ",")) || wstr(o, ks) || wlit(o, ":") ||
          (type ? wlit(o, "\"url_citation\"") : px_fb_jdump(o, &x) != 0))
        rc = PX_ENOMEM;
      first = 0;
    }
    if (rc == 0 && !typed &&
        wlit(o, first ? "\"type\":\"url_citation\"" : ",\"type\":\"url_citation\""))
      rc = PX_ENOMEM;
    return rc == 0 && wlit(o, "}") ? PX_ENOMEM : rc;
  }
  if (strcmp(t, "url_citation") == 0 || strcmp(t, "file_citation") == 0 ||
      strcmp(t, "container_file_citation") == 0 || strcmp(t, "file_path") == 0)
    return px_fb_jdump(o, a) != 0 ? PX_ENOMEM : 0;
  px_lossy_t scratch;
  px_lossy_init(&scratch);
  px_lossy_add(e->ctx.dropped ? e->ctx.dropped : &scratch,
               "output[].content[].annotations");
  return 1;
}

/* An annotation of a text part: response.output_text.annotation.added, and
 * kept for the part's closing events (as the non-streaming encoder). The
 * IR annotation is read with the checked views, re-written (px_fb_jdump). */
static int eannotation(px_senc_t *e, eblock_t *b, px_str_t text) {
  if (b->kind != PX_BLOCK_TEXT) return PX_EPROTO;
  px_fv_t a;
  if (text.ptr == NULL || text.len == 0 || px_jv_parse(text.ptr, text.len, &a) < 0 ||
      !px_jv_is(&a, PX_FV_OBJ))
    return 0;
  px_arena_t ar;
  px_arena_init(&ar);
  const char *t = jstr(&ar, &a, "type");
  int rc = 0;
  if (t != NULL) {
    px_buf_t *s = escratch(e);
    int fail = ehead(e, b->item_id, b->output_index) || wlit(s, ",\"content_index\":") ||
               wint(s, b->content_index) || wlit(s, ",\"annotation_index\":") ||
               wint(s, b->nanns) || wlit(s, ",\"annotation\":");
    size_t at = s->len;
    rc = fail ? PX_ENOMEM : wannotation(e, s, &a, t, &ar);
    if (rc == 0 && (wlit(s, "}") || (b->nanns > 0 && wlit(&b->anns, ",")) ||
                    px_buf_append(&b->anns, s->data + at, s->len - at - 1)))
      rc = PX_ENOMEM;
    if (rc == 0) {
      b->nanns++;
      rc = esend(e, "response.output_text.annotation.added", 0);
    } else {
      px_buf_free(&e->scratch);
    }
  }
  px_arena_free(&ar);
  return rc < 0 ? rc : 0;
}

static int e_delta(px_senc_t *e, const px_ev_t *ev) {
  eblock_t *b = eblock(e, ev->index);
  if (b == NULL || !b->used) return PX_EPROTO;
  int rc;
  if (ev->delta == PX_DELTA_SIGNATURE) {
    if (b->kind != PX_BLOCK_THINKING && b->kind != PX_BLOCK_REDACTED_THINKING)
      return PX_EPROTO;
    rc = eaccum(e, ev->text.len);
    /* OpenAI encrypted_content arrives whole; another family's signature
     * (Anthropic, Gemini) is tagged so that it finds its way back */
    const char *tag = px_rtok_stream_tag(PX_PROTO_RESPONSES, e->ctx.out);
    if (rc == 0 && b->enc.len == 0 && tag != NULL && *tag != 0)
      rc = px_buf_puts(&b->enc, tag);
    if (rc == 0) rc = px_buf_append(&b->enc, ev->text.ptr, ev->text.len);
    return rc;
  }
  if (ev->text.len == 0) return 0;
  rc = eaccum(e, ev->text.len);
  if (rc < 0) return rc;
  if (b->suspended) {
    /* continued after its message item closed: a new part in a new item */
    b->suspended = 0;
    b->tix = etext_new(e);
    if (b->tix < 0) return PX_ENOMEM;
    rc = eopen_part(e, b);
    if (rc < 0) return rc;
  }
  if (ev->delta == PX_DELTA_ANNOTATION) return eannotation(e, b, ev->text);
  switch (b->kind) {
    case PX_BLOCK_TEXT:
    case PX_BLOCK_REFUSAL:
    case PX_BLOCK_TOOL_CALL:
      return edelta(e, b, ev->text.ptr, ev->text.len);
    case PX_BLOCK_THINKING:
    case PX_BLOCK_REDACTED_THINKING:
      if (!b->summary_open) {
        b->summary_open = 1;
        rc = esend(e, "response.reasoning_summary_part.added",
                   ehead(e, b->item_id, b->output_index) ||
                       wlit(&e->scratch,
                            ",\"summary_index\":0,\"part\":{\"type\":"
                            "\"summary_text\",\"text\":\"\"}}"));
        if (rc < 0) return rc;
      }
      return edelta(e, b, ev->text.ptr, ev->text.len);
  }
  return PX_EPROTO;
}

/* The closing events of a text or refusal part; the part joins the open
 * message item's content. */
static int eclose_part(px_senc_t *e, eblock_t *b) {
  int is_text = b->kind == PX_BLOCK_TEXT;
  px_buf_t *s = &e->scratch;
  int fail = ehead(e, b->item_id, b->output_index) || wlit(s, ",\"content_index\":") ||
             wint(s, b->content_index) ||
             wlit(s, is_text ? ",\"text\":" : ",\"refusal\":") || wtext(e, s, b->tix) ||
             wlit(s, is_text ? ",\"logprobs\":[]}" : "}");
  int rc =
      esend(e, is_text ? "response.output_text.done" : "response.refusal.done", fail);
  if (rc == 0) {
    fail = ehead(e, b->item_id, b->output_index) || wlit(s, ",\"content_index\":") ||
           wint(s, b->content_index) || wlit(s, ",\"part\":") || wpart(e, s, b, 0) ||
           wlit(s, "}");
    rc = esend(e, "response.content_part.done", fail);
  }
  if (e->msg_oi >= 0 && b->output_index == e->msg_oi) {
    px_buf_t *m = &e->msg_parts;
    if ((m->len > 0 && wlit(m, ",")) || wpart(e, m, b, 0)) return PX_ENOMEM;
  }
  return rc;
}

/* A reasoning item: {"id":..,"type":"reasoning","summary":[..]} and its
 * encrypted_content if any (left out if not UTF-8, as jansson would). */
static int wreasoning_item(px_senc_t *e, px_buf_t *o, const eblock_t *b) {
  if (wlit(o, "{\"id\":") || wstr(o, b->item_id) ||
      wlit(o, ",\"type\":\"reasoning\",\"summary\":[") ||
      (b->summary_open && (wlit(o, "{\"type\":\"summary_text\",\"text\":") ||
                           wtext(e, o, b->tix) || wlit(o, "}"))) ||
      wlit(o, "]"))
    return 1;
  if (b->enc.len > 0) {
    size_t mark = o->len;
    if (wlit(o, ",\"encrypted_content\":\"") ||
        px_buf_json_escape_as(o, b->enc.data, b->enc.len, PX_ESC_JANSSON) != 0 ||
        wlit(o, "\""))
      o->len = mark;
  }
  return wlit(o, "}");
}

static int e_block_stop(px_senc_t *e, const px_ev_t *ev) {
  eblock_t *b = eblock(e, ev->index);
  if (b == NULL || !b->used) return PX_EPROTO;
  int rc = 0;
  if (b->suspended) { /* its part was closed with its message item */
    efree_block(b);
    return 0;
  }
  px_buf_t *s = &e->scratch;
  switch (b->kind) {
    case PX_BLOCK_TEXT:
    case PX_BLOCK_REFUSAL:
      rc = eclose_part(e, b);
      break;
    case PX_BLOCK_THINKING:
    case PX_BLOCK_REDACTED_THINKING: {
      if (b->summary_open) {
        rc = esend(e, "response.reasoning_summary_text.done",
                   ehead(e, b->item_id, b->output_index) ||
                       wlit(s, ",\"summary_index\":0,\"text\":") || wtext(e, s, b->tix) ||
                       wlit(s, "}"));
        if (rc == 0)
          rc = esend(e, "response.reasoning_summary_part.done",
                     ehead(e, b->item_id, b->output_index) ||
                         wlit(s,
                              ",\"summary_index\":0,\"part\":{\"type\":"
                              "\"summary_text\",\"text\":") ||
                         wtext(e, s, b->tix) || wlit(s, "}}"));
      }
      px_buf_t *it = &e->items[b->output_index].b;
      px_buf_reset(it);
      if (wreasoning_item(e, it, b)) rc = PX_ENOMEM;
      if (rc == 0) rc = eitem_done(e, b->output_index);
      break;
    }
    case PX_BLOCK_TOOL_CALL: {
      if (b->custom)
        rc = esend(e, "response.custom_tool_call_input.done",
                   ehead(e, b->item_id, b->output_index) || wlit(s, ",\"input\":") ||
                       wtext(e, s, b->tix) || wlit(s, "}"));
      else
        rc = esend(e, "response.function_call_arguments.done",
                   ehead(e, b->item_id, b->output_index) || wlit(s, ",\"name\":") ||
                       wstr(s, b->name) || wlit(s, ",\"arguments\":") ||
                       wtext(e, s, b->tix) || wlit(s, "}"));
      px_buf_t *it = &e->items[b->output_index].b;
      px_buf_reset(it);
      if (wcall_item(e, it, b, "completed", 0)) rc = PX_ENOMEM;
      if (rc == 0) rc = eitem_done(e, b->output_index);
      break;
    }
  }
  efree_block(b);
  return rc;
}

static int e_start(px_senc_t *e, const px_ev_t *ev) {
  char idb[UP_ID_MAX + 1], rid[UP_ID_MAX + 1];
  size_t n = ev->id.len < UP_ID_MAX ? ev->id.len : UP_ID_MAX;
  if (n) memcpy(idb, ev->id.ptr, n);
  idb[n] = 0;
  if (e->ctx.resp_id != NULL)
    snprintf(rid, sizeof(rid), "%s", e->ctx.resp_id);
  else
    px_responses_resp_id(idb, rid, sizeof(rid));
  if ((e->up_id = strdup(idb)) == NULL || (e->resp_id = strdup(rid)) == NULL)
    return PX_ENOMEM;
  if (ev->usage.input_tokens >= 0) e->usage.input_tokens = ev->usage.input_tokens;
  if (ev->usage.cache_read_tokens >= 0)
    e->usage.cache_read_tokens = ev->usage.cache_read_tokens;
  eset(e, E_OPEN);
  /* the two events carry the same response: written once */
  int rc = wresponse(e, "in_progress", NULL, 0) ? PX_ENOMEM : 0;
  if (rc == 0) rc = ewrite(e, "response.created");
  if (rc == 0) rc = ewrite(e, "response.in_progress");
  px_buf_free(&e->scratch);
  if (rc == 0) eflush(e); /* after both: the flush may call back into the encoder */
  return rc;
}

/* Close whatever is open: message item; blocks are closed by the decoder. */
static int e_finish_items(px_senc_t *e) {
  return eclose_msg(e);
}

/* An Anthropic refusal is known only at its end, after its wording went out
 * as output_text deltas, which cannot be taken back. The terminal response
 * object still tells the truth: the wording becomes refusal parts there, as
 * in the non-streaming translation. */
static void erefusal_parts(px_senc_t *e) {
  px_buf_t o;
  px_buf_init(&o, SIZE_MAX);
  for (size_t i = 0; i < e->nitems; i++) {
    px_buf_t *ib = &e->items[i].b;
    if (!e->items[i].done) continue;
    px_fv_t it, c, p, tv;
    px_arena_t ar;
    px_arena_init(&ar);
    const char *t = NULL;
    if (px_jv_parse(ib->data, ib->len, &it) == 0) t = jstr(&ar, &it, "type");
    px_arena_free(&ar);
    if (t == NULL || strcmp(t, "message") != 0) continue;
    /* the item is as its writer wrote it; its content array re-written */
    px_buf_reset(&o);
    int fail = 0;
    if (px_jv_get(&it, "content", &c) && px_jv_is(&c, PX_FV_ARR)) {
      size_t head = (size_t)(c.raw.ptr - ib->data);
      fail = px_buf_append(&o, ib->data, head) != 0 || wlit(&o, "[");
      px_jv_it_t el;
      px_jv_iter(&el, &c);
      for (int n = 0; !fail && px_jv_elem(&el, &p); n++) {
        if (n > 0 && wlit(&o, ",")) fail = 1;
        px_arena_init(&ar);
        const char *pt = jstr(&ar, &p, "type");
        int text = pt != NULL && strcmp(pt, "output_text") == 0;
        px_arena_free(&ar);
        if (text) e->has_refusal = 1;
        if (!fail && text && px_jv_get(&p, "text", &tv))
          fail = wlit(&o, "{\"type\":\"refusal\",\"refusal\":") ||
                 px_fb_jdump(&o, &tv) != 0 || wlit(&o, "}");
        else if (!fail)
          fail = px_fb_jdump(&o, &p) != 0;
      }
      size_t tail = head + c.raw.len;
      fail = fail || wlit(&o, "]") || px_buf_append(&o, ib->data + tail, ib->len - tail);
    } else {
      fail = px_fb_jdump(&o, &it) != 0;
    }
    if (!fail) {
      px_buf_reset(ib);
      if (px_buf_append(ib, o.data, o.len) != 0) ib->len = 0;
    }
  }
  px_buf_free(&o);
}

static int e_stop(px_senc_t *e) {
  int rc = 0;
  /* a refusal without any visible wording: the explanation is the wording */
  if (px_stop_refused(e->stop) && !e->has_refusal && e->explanation != NULL &&
      !e->any_output) {
    px_ev_t ev;
    px_ev_init(&ev, PX_EV_BLOCK_START);
    ev.index = (int)e->nblocks; /* a fresh block index */
    ev.block = PX_BLOCK_REFUSAL;
    rc = e_block_start(e, &ev);
    if (rc == 0) {
      px_ev_t dv;
      px_ev_init(&dv, PX_EV_DELTA);
      dv.index = ev.index;
      dv.delta = PX_DELTA_REFUSAL;
      dv.text = px_str(e->explanation);
      rc = e_delta(e, &dv);
    }
    if (rc == 0) {
      px_ev_t sv;
      px_ev_init(&sv, PX_EV_BLOCK_STOP);
      sv.index = ev.index;
      rc = e_block_stop(e, &sv);
    }
  }
  if (rc == 0) rc = e_finish_items(e);
  if (rc < 0) return rc;
  const char *reason = NULL;
  px_stop_t st = e->stop == PX_STOP_NONE ? PX_STOP_END_TURN : e->stop;
  if (st == PX_STOP_REFUSAL) erefusal_parts(e);
  const char *status = px_stop_to_responses(st, e->has_refusal, &reason);
  const char *type = strcmp(status, "completed") == 0    ? "response.completed"
                     : strcmp(status, "incomplete") == 0 ? "response.incomplete"
                                                         : "response.failed";
  eset(e, E_DONE);
  return esend(e, type, wresponse(e, status, reason, 1));
}

/* An item that has not finished, as far as it got (status incomplete),
 * written into o: 0, 1 when there is none, <0 on failure. As its jansson
 * document was: a part or an item whose text does not read as a string is
 * left out, so is one whose names or ids are no UTF-8. */
static int wpartial_item(px_senc_t *e, px_buf_t *o, int oi) {
  enum { NONE, MESSAGE, OTHER } item = NONE;
  size_t start = o->len;
  int nparts = 0, rc = 0;
  if (oi == e->msg_oi) {
    /* the parts closed so far as written, placeholders and all */
    if (wlit(o, "{\"id\":") || wstr(o, e->msg_id) ||
        wlit(o,
             ",\"type\":\"message\",\"status\":\"incomplete\",\"role\":\"assistant\","
             "\"content\":[") ||
        px_buf_append(o, e->msg_parts.data, e->msg_parts.len))
      return PX_ENOMEM;
    nparts = e->msg_parts.len > 0;
    item = MESSAGE;
  }
  px_buf_t tv;
  px_buf_init(&tv, SIZE_MAX);
  for (size_t i = 0; rc >= 0 && i < e->nblocks; i++) {
    eblock_t *b = &e->blocks[i];
    if (!b->used || b->output_index != oi) continue;
    px_buf_reset(&tv);
    int r = wtext_value(e, &tv, b->tix);
    if (r != 0) {
      rc = r < 0 ? r : rc;
      continue;
    }
    size_t mark = o->len;
    int fail;
    int part = b->kind == PX_BLOCK_TEXT || b->kind == PX_BLOCK_REFUSAL;
    if (part && item == MESSAGE) {
      fail = (nparts > 0 && wlit(o, ",")) ||
             wlit(o, b->kind == PX_BLOCK_TEXT ? "{\"type\":\"output_text\",\"text\":"
                                              : "{\"type\":\"refusal\",\"refusal\":") ||
             px_buf_append(o, tv.data, tv.len) ||
             wlit(o, b->kind == PX_BLOCK_TEXT ? ",\"annotations\":[]}" : "}");
      if (!fail) nparts++;
    } else if (item != NONE) {
      continue; /* one item: a part of another item is left out */
    } else if (b->kind == PX_BLOCK_TOOL_CALL) {
      fail =
          wlit(o, "{\"id\":") || wstr(o, b->item_id) ||
          wlit(o, b->custom ? ",\"type\":\"custom_tool_call\",\"status\":\"incomplete\""
                            : ",\"type\":\"function_call\",\"status\":\"incomplete\"") ||
          wlit(o, ",\"call_id\":") || wstr(o, b->call_id) || wlit(o, ",\"name\":") ||
          wstr(o, b->name) || wlit(o, b->custom ? ",\"input\":" : ",\"arguments\":") ||
          px_buf_append(o, tv.data, tv.len) || wlit(o, "}");
    } else {
      fail = wlit(o, "{\"id\":") || wstr(o, b->item_id) ||
             wlit(o, ",\"type\":\"reasoning\",\"status\":\"incomplete\",\"summary\":[") ||
             (tv.len > 2 && (wlit(o, "{\"type\":\"summary_text\",\"text\":") ||
                             px_buf_append(o, tv.data, tv.len) || wlit(o, "}"))) ||
             wlit(o, "]");
      if (!fail && b->enc.len > 0) {
        size_t em = o->len; /* left out when it is no UTF-8 */
        if (wlit(o, ",\"encrypted_content\":") ||
            px_buf_json_str_as(o, b->enc.data, b->enc.len, PX_ESC_JANSSON) != 0)
          o->len = em;
      }
      fail = fail || wlit(o, "}");
    }
    if (fail)
      o->len = mark;
    else if (item == NONE)
      item = OTHER;
  }
  px_buf_free(&tv);
  if (rc >= 0 && item == MESSAGE && wlit(o, "]}")) rc = PX_ENOMEM;
  if (rc < 0) o->len = start;
  return rc < 0 ? rc : item == NONE;
}

/* The skeleton's "error":null (px_responses_object_head, in s from head on)
 * given the error {"code":..,"message":..}; left null when the message is
 * no UTF-8, as jansson's document left it. */
static int werror_member(px_buf_t *s, size_t head, const char *code, px_str_t msg) {
  static const char nul[] = ",\"error\":null,";
  const char *at = memmem(s->data + head, s->len - head, nul, sizeof(nul) - 1);
  if (at == NULL) return 1;
  px_buf_t x;
  px_buf_init(&x, SIZE_MAX);
  size_t pos = (size_t)(at - s->data) + 9; /* at the null */
  int fail = wlit(&x, "{\"code\":") || wstr(&x, code) || wlit(&x, ",\"message\":");
  if (!fail &&
      px_buf_json_str_as(&x, msg.ptr ? msg.ptr : "", msg.len, PX_ESC_JANSSON) != 0)
    x.len = 0; /* no UTF-8: null stays */
  else
    fail = fail || wlit(&x, "}");
  if (!fail && x.len > 0)
    fail = px_buf_append(&x, s->data + pos + 4, s->len - pos - 4) != 0;
  if (!fail && x.len > 0) {
    s->len = pos;
    fail = px_buf_append(s, x.data, x.len) != 0;
  }
  px_buf_free(&x);
  return fail;
}

static int e_error(px_senc_t *e, px_errkind_t kind, px_str_t msg) {
  int rc = 0;
  if (e->state == E_INIT) {
    free(e->resp_id); /* eresp_id: resp_proxai_error */
    e->resp_id = NULL;
    rc = esend(e, "response.created", wresponse(e, "in_progress", NULL, 0));
    if (rc < 0) return rc;
  }
  eset(e, E_DONE);
  const char *code = kind == PX_ERR_RATE_LIMIT ? "rate_limit_exceeded" : "server_error";
  /* the output so far, unfinished items included; if that does not fit
   * the out buffer, the error alone */
  for (int with_output = 1; with_output >= 0; with_output--) {
    px_buf_t *s = escratch(e);
    int fail = wlit(s, "{\"response\":") ||
               px_responses_object_head(s, &e->ctx, eresp_id(e), e->ctx.created, "failed",
                                        NULL) ||
               werror_member(s, 0, code, msg);
    int first = 1;
    for (size_t i = 0; !fail && with_output && i < e->nitems; i++) {
      size_t mark = s->len;
      if (!first && wlit(s, ",")) fail = 1;
      int r =
          fail ? 0
          : e->items[i].done
              ? (px_buf_append(s, e->items[i].b.data, e->items[i].b.len) != 0 ? -1 : 0)
              : wpartial_item(e, s, (int)i);
      if (r < 0) fail = 1;
      if (r == 1) s->len = mark; /* none: not even its comma */
      if (r == 0) first = 0;
    }
    fail = fail || px_responses_object_tail(s, &e->ctx) || wlit(s, ",\"usage\":") ||
           px_responses_usage_write(s, &e->usage) != 0 || wlit(s, "}}");
    if (fail) {
      px_buf_free(&e->scratch);
      return PX_ENOMEM;
    }
    rc = esend(e, "response.failed", 0);
    if (rc != PX_ETOOBIG) break;
  }
  return rc;
}

/** 0 when a live encoder writing to out took the error (or had already
 *  ended its stream), <0 when no encoder writes to out. */
int px_responses_stream_error(px_buf_t *out, px_errkind_t kind, const char *message) {
  for (px_senc_t *e = live; e != NULL; e = e->next) {
    if (e->out != out) continue;
    if (e->state == E_DONE) return 0;
    int rc = e_error(e, kind, px_str(message ? message : "upstream error"));
    px_buf_free(&e->scratch); /* as after px_responses_senc_event */
    return rc;
  }
  return PX_EINVAL;
}

px_senc_t *px_responses_senc_new(const px_tr_ctx_t *ctx, px_buf_t *out) {
  px_senc_t *e = calloc(1, sizeof(*e));
  if (e == NULL) return NULL;
  e->ctx = *ctx;
  e->out = out;
  e->msg_oi = -1;
  e->usage.input_tokens = e->usage.output_tokens = -1;
  e->usage.cache_read_tokens = e->usage.cache_creation_tokens = -1;
  e->usage.reasoning_tokens = -1;
  px_buf_init(&e->scratch, SIZE_MAX);
  /* placeholder prefix: not guessable from the content (a random key per
   * process, one draw; the address mix only if the kernel has none) and
   * different for every stream */
  static unsigned long long key, n;
  if (key == 0 && getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key))
    key = (unsigned long long)(uintptr_t)&live * 0xC2B2AE3D27D4EB4Full ^
          (unsigned long long)ctx->created * 0x165667B19E3779F9ull;
  unsigned long long h = key ^ (++n * 0x9E3779B97F4A7C15ull) ^ (uintptr_t)e;
  static const char hex[] = "0123456789abcdef";
  char *mk = e->marker;
  _Static_assert(sizeof(e->marker) >= 10 + 16 + 2, "the marker fits");
  memcpy(mk, "\\u0001pxtx", 10); /* then h as %016llx, and '_' */
  for (int k = 0; k < 16; k++) mk[10 + k] = hex[(h >> (60 - 4 * k)) & 15];
  mk[26] = '_';
  mk[27] = 0;
  eset(e, E_INIT);
  e->next = live;
  if (live != NULL) live->prev = e;
  live = e;
  return e;
}

int px_responses_senc_event(px_senc_t *e, const px_ev_t *ev) {
  if (e->state == E_DONE) return 0;
  int rc;
  if (ev->type == PX_EV_ERROR) {
    rc = e_error(e, ev->errkind, ev->text);
    px_buf_free(&e->scratch);
    return rc;
  }
  if (e->state == E_INIT && ev->type != PX_EV_MESSAGE_START) {
    rc = PX_EPROTO;
    goto fail;
  }
  switch (ev->type) {
    case PX_EV_MESSAGE_START:
      if (e->state != E_INIT) {
        rc = PX_EPROTO;
        break;
      }
      rc = e_start(e, ev);
      break;
    case PX_EV_BLOCK_START:
      rc = e_block_start(e, ev);
      break;
    case PX_EV_DELTA:
      rc = e_delta(e, ev);
      break;
    case PX_EV_BLOCK_STOP:
      rc = e_block_stop(e, ev);
      break;
    case PX_EV_MESSAGE_DELTA:
      if (ev->stop != PX_STOP_NONE) e->stop = ev->stop;
      if (ev->usage.input_tokens >= 0) e->usage.input_tokens = ev->usage.input_tokens;
      if (ev->usage.output_tokens >= 0) e->usage.output_tokens = ev->usage.output_tokens;
      if (ev->usage.cache_read_tokens >= 0)
        e->usage.cache_read_tokens = ev->usage.cache_read_tokens;
      if (ev->usage.reasoning_tokens >= 0)
        e->usage.reasoning_tokens = ev->usage.reasoning_tokens;
      if (ev->refusal_explanation.len > 0) {
        free(e->explanation);
        e->explanation = dupn(ev->refusal_explanation);
      }
      rc = 0;
      break;
    case PX_EV_MESSAGE_STOP:
      rc = e_stop(e);
      break;
    default:
      rc = PX_EPROTO;
      break;
  }
  /* the lifecycle events of one IR event share the scratch; none is kept
   * between IR events (a stream idles between them; a delta used none) */
  if (e->scratch.data != NULL) px_buf_free(&e->scratch);
  if (rc >= 0) return 0;
fail:
  if (rc == PX_ETOOBIG)
    e_error(e, PX_ERR_BAD_GATEWAY,
            PX_STR("response too large to accumulate for the final event"));
  else
    e_error(e, PX_ERR_BAD_GATEWAY, PX_STR("stream translation failed"));
  px_buf_free(&e->scratch);
  return rc;
}

void px_responses_senc_free(px_senc_t *e) {
  if (e == NULL) return;
  if (e->prev != NULL)
    e->prev->next = e->next;
  else if (live == e)
    live = e->next;
  if (e->next != NULL) e->next->prev = e->prev;
  for (size_t i = 0; i < e->nblocks; i++)
    if (e->blocks[i].used) efree_block(&e->blocks[i]);
  free(e->blocks);
  for (size_t i = 0; i < e->ntexts; i++) px_buf_free(&e->texts[i]);
  free(e->texts);
  for (size_t i = 0; i < e->nitems; i++) px_buf_free(&e->items[i].b);
  free(e->items);
  px_buf_free(&e->msg_parts);
  free(e->explanation);
  px_buf_free(&e->scratch);
  free(e->resp_id);
  free(e->up_id);
  free(e->msg_id);
  free(e);
}
