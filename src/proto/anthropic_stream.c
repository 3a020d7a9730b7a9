/* anthropic_stream.c - Anthropic Messages SSE: upstream decoder (SSE ->
 * px_ev_t) and client encoder (px_ev_t -> SSE).
 *
 * Decoder states (one function, sd_set, changes them):
 *
 *   INIT --message_start--> MESSAGE --content_block_start--> BLOCK
 *                             ^  |                             |  (deltas)
 *                             |  +--content_block_start(server tool)--> SKIP
 *                             +------content_block_stop--------+-------+
 *   MESSAGE --message_delta--> ENDING --message_delta--> ENDING
 *   ENDING --message_stop--> DONE
 *   any --error--> FAILED;  anything illegal --> FAILED (PX_EV_ERROR, 502)
 *
 * Encoder states (se_set):
 *
 *   INIT --(any event)--> STARTED (message_start written)
 *   STARTED --MESSAGE_DELTA--> ENDING --MESSAGE_STOP--> DONE
 *   any --ERROR--> DONE (event: error written)
 *
 * Anthropic clients expect one content block open at a time. Upstreams that
 * interleave blocks (two parallel Chat tool calls) have the later blocks
 * held back, their fragments accumulated (bounded by ctx->max_accum), and
 * written whole once the open block stops.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/fastir.h"
#include "proxai/proto.h"
#include "proxai/protoutil.h"
#include "proxai/sse.h"
#include "proxai/usage.h"

/* the citations a text block holds until its end (their annotations' heads
 * and tails): past this, the stream fails */
#define ANTH_MAX_CITATIONS (8u << 20)

/* ======================================================================== */
/* Decoder                                                                    */

typedef enum sd_state {
  SD_INIT,
  SD_MESSAGE,
  SD_BLOCK,
  SD_SKIP, /* inside a server-tool block we do not forward */
  SD_ENDING,
  SD_DONE,
  SD_FAILED,
} sd_state_t;

struct px_sdec {
  const px_tr_ctx_t *ctx;
  px_ev_sink_fn sink;
  void *arg;
  sd_state_t st;
  int64_t up_index;   /* upstream index of the open block */
  int cur;            /* our index of the open block */
  int next;           /* next index we hand out */
  px_block_t block;
  /* message_start usage, raw Anthropic numbers */
  int64_t in_raw, cache_read, cache_creation;
  int fast;           /* fast path on (differential tests turn it off) */
  long fast_hits;     /* events the fast path handled */
  px_buf_t scratch;   /* unescaped delta text of the fast path */
  /* the fast walk's head memo (see fast_event): the bytes of the last
   * walked head up to its delta object's '{', and what the walk had read */
  unsigned char *memo;
  size_t memo_len;
  uint32_t memo_seen, memo_strs, memo_nums;
  px_fj_str_t memo_type;
  int64_t memo_index;
  px_buf_t cits;      /* citations of the open text block (cit_hold) */
  int64_t chars;      /* characters of the open text block */
};

static void sd_set(px_sdec_t *d, sd_state_t st) { d->st = st; }

static int sd_fail(px_sdec_t *d, px_errkind_t kind, const char *msg, size_t len) {
  px_ev_t ev;
  px_ev_init(&ev, PX_EV_ERROR);
  ev.errkind = kind;
  ev.text = (px_str_t){msg, len};
  sd_set(d, SD_FAILED);
  int rc = d->sink(d->arg, &ev);
  return rc < 0 ? rc : PX_EPROTO;
}

static int sd_proto(px_sdec_t *d, const char *msg) {
  return sd_fail(d, PX_ERR_BAD_GATEWAY, msg, strlen(msg));
}

px_sdec_t *px_anthropic_sdec_new(const px_tr_ctx_t *ctx, px_ev_sink_fn sink, void *arg) {
  px_sdec_t *d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  d->ctx = ctx;
  d->sink = sink;
  d->arg = arg;
  d->in_raw = d->cache_read = d->cache_creation = -1;
  d->fast = 1;
  px_buf_init(&d->scratch, PX_MAX_SSE_EVENT);
  px_buf_init(&d->cits, ANTH_MAX_CITATIONS);
  sd_set(d, SD_INIT);
  return d;
}

void px_anthropic_sdec_free(px_sdec_t *d) {
  if (d == NULL) return;
  px_buf_free(&d->scratch);
  px_buf_free(&d->cits);
  free(d->memo);
  free(d);
}

/* For the differential test (fuzz/fuzz_anthropic_fast.c), not part of the
 * protocol table: turn the fast path on (1) or off (0), or leave it (<0);
 * returns how many events the fast path has handled so far. */
long px_anthropic_sdec_fast(px_sdec_t *d, int on) {
  if (on >= 0) d->fast = on;
  return d->fast_hits;
}

static int64_t sum_pos(int64_t a, int64_t b, int64_t c) {
  if (a < 0) return -1;
  return a + (b > 0 ? b : 0) + (c > 0 ? c : 0);
}

/* The general path: the event read with fastir.h's checked views, its
 * strings unescaped into the arena ar. */
/* What the general path reads of an event (each object in one walk,
 * px_jv_fields): its members, a content block's, a delta's (a block's or
 * the message's), a usage object's. */
enum { E_TYPE, E_INDEX, E_MESSAGE, E_BLOCK, E_DELTA, E_USAGE, E_ERROR, E_N };
static const px_fkey_t event_keys[] = {
    PX_FK("type"),  PX_FK("index"), PX_FK("message"), PX_FK("content_block"),
    PX_FK("delta"), PX_FK("usage"), PX_FK("error")};
enum {
  B_TYPE,
  B_TEXT,
  B_THINKING,
  B_SIGNATURE,
  B_DATA,
  B_ID,
  B_NAME,
  B_CITATIONS,
  B_INPUT,
  B_PARTIAL,
  B_CITATION,
  B_STOP_REASON,
  B_STOP_SEQ,
  B_STOP_DETAILS,
  B_N
};
static const px_fkey_t block_keys[] = {
    PX_FK("type"),          PX_FK("text"),        PX_FK("thinking"),
    PX_FK("signature"),     PX_FK("data"),        PX_FK("id"),
    PX_FK("name"),          PX_FK("citations"),   PX_FK("input"),
    PX_FK("partial_json"),  PX_FK("citation"),    PX_FK("stop_reason"),
    PX_FK("stop_sequence"), PX_FK("stop_details")};
enum { GU_IN, GU_CACHE_READ, GU_CACHE_CREATION, GU_OUT, GU_N };
static const px_fkey_t usage_keys[] = {
    PX_FK("input_tokens"), PX_FK("cache_read_input_tokens"),
    PX_FK("cache_creation_input_tokens"), PX_FK("output_tokens")};

/* the usage object u's counts (-1: not an integer there) */
static void read_usage(const px_fv_t *u, int64_t n[GU_N]) {
  px_fv_t f[GU_N];
  px_jv_fields(u, usage_keys, GU_N, f);
  for (int k = 0; k < GU_N; k++) {
    n[k] = -1;
    px_jv_int(&f[k], &n[k]);
  }
}

static px_str_t str_at(px_arena_t *ar, const px_fv_t *f, int k) {
  size_t n = 0;
  const char *s = px_jv_str(ar, &f[k], &n);
  return s ? (px_str_t){s, n} : PX_STR_NULL;
}

static int64_t index_of(const px_fv_t *f) {
  int64_t i = -1;
  px_jv_int(&f[E_INDEX], &i);
  return i;
}

static int sd_message_start(px_sdec_t *d, const px_fv_t *f, px_arena_t *ar) {
  static const px_fkey_t keys[] = {PX_FK("id"), PX_FK("model"), PX_FK("usage")};
  px_fv_t m[3];
  int64_t u[GU_N];
  px_jv_fields(&f[E_MESSAGE], keys, 3, m);
  read_usage(&m[2], u);
  px_ev_t ev;
  if (d->st != SD_INIT) return sd_proto(d, "upstream sent message_start twice");
  px_ev_init(&ev, PX_EV_MESSAGE_START);
  ev.id = str_at(ar, m, 0);
  ev.model = str_at(ar, m, 1);
  d->in_raw = u[GU_IN];
  d->cache_read = u[GU_CACHE_READ];
  d->cache_creation = u[GU_CACHE_CREATION];
  ev.usage.input_tokens = sum_pos(d->in_raw, d->cache_read, d->cache_creation);
  ev.usage.output_tokens = u[GU_OUT];
  ev.usage.cache_read_tokens = d->cache_read;
  ev.usage.cache_creation_tokens = d->cache_creation;
  sd_set(d, SD_MESSAGE);
  return d->sink(d->arg, &ev);
}

static int sd_delta(px_sdec_t *d, px_delta_t kind, px_str_t text) {
  px_ev_t ev;
  if (text.len == 0) return 0;
  if (kind == PX_DELTA_TEXT) d->chars += (int64_t)px_utf8_chars(text.ptr, text.len);
  px_ev_init(&ev, PX_EV_DELTA);
  ev.index = d->cur;
  ev.delta = kind;
  ev.text = text;
  return d->sink(d->arg, &ev);
}

/* A citation held to its text block's end (an annotation spans the block's
 * text, whose length is known only then): one record in d->cits, the
 * annotation's head (through its url) and tail (its title), each after its
 * length; a citation without a url holds an empty head (dropped). */
static int cit_hold(px_sdec_t *d, const px_fv_t *c, px_arena_t *ar) {
  px_buf_t *b = &d->cits;
  px_str_t url = px_jv_sget(ar, c, "url"), title = px_jv_sget(ar, c, "title");
  size_t at = b->len, l = 0;
  int rc = px_buf_append(b, &l, sizeof(l));
  if (rc == 0 && url.ptr != NULL) {
    rc = px_buf_puts(b, "{\"type\":\"url_citation\",\"url\":");
    if (rc == 0) rc = px_buf_json_str_as(b, url.ptr, url.len, PX_ESC_JANSSON);
    l = b->len - at - sizeof(l);
    memcpy(b->data + at, &l, sizeof(l));
  }
  size_t tat = b->len;
  l = 0;
  if (rc == 0) rc = px_buf_append(b, &l, sizeof(l));
  if (rc == 0 && url.ptr != NULL && title.ptr != NULL) {
    rc = px_buf_puts(b, ",\"title\":");
    if (rc == 0) rc = px_buf_json_str_as(b, title.ptr, title.len, PX_ESC_JANSSON);
    l = b->len - tat - sizeof(l);
    memcpy(b->data + tat, &l, sizeof(l));
  }
  if (rc < 0) b->len = at;
  return rc < 0 ? PX_ENOMEM : 0;
}

static int sd_block_start(px_sdec_t *d, const px_fv_t *f, px_arena_t *ar) {
  px_fv_t cb[B_N];
  px_jv_fields(&f[E_BLOCK], block_keys, B_N, cb);
  const char *t = px_jv_str(ar, &cb[B_TYPE], NULL);
  px_ev_t ev;
  int rc;
  if (d->st != SD_MESSAGE) return sd_proto(d, "upstream content_block_start out of order");
  d->up_index = index_of(f);
  if (t == NULL) return sd_proto(d, "upstream content block without a type");
  px_ev_init(&ev, PX_EV_BLOCK_START);
  if (strcmp(t, "text") == 0) {
    ev.block = PX_BLOCK_TEXT;
  } else if (strcmp(t, "thinking") == 0) {
    ev.block = PX_BLOCK_THINKING;
  } else if (strcmp(t, "redacted_thinking") == 0) {
    ev.block = PX_BLOCK_REDACTED_THINKING;
    ev.text = str_at(ar, cb, B_DATA);
  } else if (strcmp(t, "tool_use") == 0) {
    ev.block = PX_BLOCK_TOOL_CALL;
    ev.id = str_at(ar, cb, B_ID);
    ev.name = str_at(ar, cb, B_NAME);
  } else {
    /* server tool use / results and future block types: not forwarded
     * (the same names as the non-streaming decoder, anthropic.c) */
    size_t tl = strlen(t);
    if (strcmp(t, "server_tool_use") == 0 || strcmp(t, "mcp_tool_use") == 0)
      px_dropped(d->ctx, "content[].server_tool_use");
    else if (tl > 12 && strcmp(t + tl - 12, "_tool_result") == 0)
      px_dropped(d->ctx, "content[].server_tool_result");
    else
      px_dropped(d->ctx, "content[].unknown_block");
    sd_set(d, SD_SKIP);
    return 0;
  }
  d->cur = d->next++;
  d->block = ev.block;
  ev.index = d->cur;
  sd_set(d, SD_BLOCK);
  rc = d->sink(d->arg, &ev);
  if (rc < 0) return rc;
  /* initial content carried by the start event itself */
  if (ev.block == PX_BLOCK_TEXT) {
    d->chars = 0;
    px_buf_reset(&d->cits);
    px_fv_t x;
    px_jv_it_t it;
    px_jv_iter(&it, &cb[B_CITATIONS]);
    while (px_jv_is(&cb[B_CITATIONS], PX_FV_ARR) && px_jv_elem(&it, &x))
      if (cit_hold(d, &x, ar) < 0) return PX_ENOMEM;
    return sd_delta(d, PX_DELTA_TEXT, str_at(ar, cb, B_TEXT));
  }
  if (ev.block == PX_BLOCK_THINKING) {
    rc = sd_delta(d, PX_DELTA_THINKING, str_at(ar, cb, B_THINKING));
    if (rc == 0) rc = sd_delta(d, PX_DELTA_SIGNATURE, str_at(ar, cb, B_SIGNATURE));
    return rc;
  }
  if (ev.block == PX_BLOCK_TOOL_CALL) {
    const px_fv_t *in = &cb[B_INPUT];
    px_fv_t x;
    px_fstr_t k;
    px_jv_it_t it;
    px_jv_iter(&it, in);
    if (px_jv_is(in, PX_FV_OBJ) && px_jv_member(&it, &k, &x)) { /* not empty */
      px_buf_t s;
      px_buf_init(&s, PX_JV_GROWTH * (size_t)PX_MAX_SSE_EVENT);
      rc = px_fb_jdump(&s, in);
      if (rc == 0) rc = sd_delta(d, PX_DELTA_TOOL_ARGS, (px_str_t){s.data, s.len});
      px_buf_free(&s);
    }
  }
  return rc;
}

static int sd_block_delta(px_sdec_t *d, const px_fv_t *f, px_arena_t *ar) {
  px_fv_t dl[B_N];
  px_jv_fields(&f[E_DELTA], block_keys, B_N, dl);
  const char *t = px_jv_str(ar, &dl[B_TYPE], NULL);
  if (d->st == SD_SKIP) return 0;
  if (d->st != SD_BLOCK || index_of(f) != d->up_index)
    return sd_proto(d, "upstream content_block_delta out of order");
  if (t == NULL) return sd_proto(d, "upstream delta without a type");
  if (strcmp(t, "text_delta") == 0 && d->block == PX_BLOCK_TEXT)
    return sd_delta(d, PX_DELTA_TEXT, str_at(ar, dl, B_TEXT));
  if (strcmp(t, "thinking_delta") == 0 && d->block == PX_BLOCK_THINKING)
    return sd_delta(d, PX_DELTA_THINKING, str_at(ar, dl, B_THINKING));
  if (strcmp(t, "signature_delta") == 0 && d->block == PX_BLOCK_THINKING)
    return sd_delta(d, PX_DELTA_SIGNATURE, str_at(ar, dl, B_SIGNATURE));
  if (strcmp(t, "input_json_delta") == 0 && d->block == PX_BLOCK_TOOL_CALL)
    return sd_delta(d, PX_DELTA_TOOL_ARGS, str_at(ar, dl, B_PARTIAL));
  if (strcmp(t, "citations_delta") == 0) {
    if (!px_jv_is(&dl[B_CITATION], PX_FV_OBJ) || d->block != PX_BLOCK_TEXT) return 0;
    return cit_hold(d, &dl[B_CITATION], ar);
  }
  if (strcmp(t, "text_delta") == 0 || strcmp(t, "thinking_delta") == 0 ||
      strcmp(t, "signature_delta") == 0 || strcmp(t, "input_json_delta") == 0)
    return sd_proto(d, "upstream delta does not match its content block");
  return 0; /* future delta types */
}

static int sd_block_stop(px_sdec_t *d, const px_fv_t *f) {
  px_ev_t ev;
  if (d->st == SD_SKIP) {
    sd_set(d, SD_MESSAGE);
    return 0;
  }
  if (d->st != SD_BLOCK || index_of(f) != d->up_index)
    return sd_proto(d, "upstream content_block_stop out of order");
  if (d->block == PX_BLOCK_TEXT && d->cits.len > 0) {
    /* the same rule as citations_to_annotations (anthropic.c): a citation
     * with a URL is a url_citation over the block's text */
    px_buf_t a;
    px_buf_init(&a, PX_JV_GROWTH * (size_t)PX_MAX_SSE_EVENT);
    int rc = 0;
    for (size_t at = 0; rc == 0 && at < d->cits.len;) {
      size_t hl, tl;
      memcpy(&hl, d->cits.data + at, sizeof(hl));
      const char *head = d->cits.data + at + sizeof(hl);
      at += sizeof(hl) + hl;
      memcpy(&tl, d->cits.data + at, sizeof(tl));
      const char *tail = d->cits.data + at + sizeof(tl);
      at += sizeof(tl) + tl;
      if (hl == 0) {
        px_dropped(d->ctx, "content[].citations");
        continue;
      }
      px_buf_reset(&a);
      rc = px_buf_append(&a, head, hl);
      if (rc == 0) rc = px_buf_puts(&a, ",\"start_index\":0,\"end_index\":");
      if (rc == 0) rc = px_buf_i64(&a, (long long)d->chars);
      if (rc == 0) rc = px_buf_append(&a, tail, tl);
      if (rc == 0) rc = px_buf_puts(&a, "}");
      if (rc < 0) break;
      px_ev_t av;
      px_ev_init(&av, PX_EV_DELTA);
      av.index = d->cur;
      av.delta = PX_DELTA_ANNOTATION;
      av.text = (px_str_t){a.data, a.len};
      rc = d->sink(d->arg, &av);
    }
    px_buf_free(&a);
    px_buf_reset(&d->cits);
    if (rc < 0) return rc;
  }
  px_ev_init(&ev, PX_EV_BLOCK_STOP);
  ev.index = d->cur;
  sd_set(d, SD_MESSAGE);
  return d->sink(d->arg, &ev);
}

static int sd_message_delta(px_sdec_t *d, const px_fv_t *f, px_arena_t *ar) {
  px_fv_t dl[B_N];
  int64_t u[GU_N];
  px_jv_fields(&f[E_DELTA], block_keys, B_N, dl);
  read_usage(&f[E_USAGE], u);
  px_ev_t ev;
  if (d->st != SD_MESSAGE && d->st != SD_ENDING)
    return sd_proto(d, "upstream message_delta out of order");
  px_ev_init(&ev, PX_EV_MESSAGE_DELTA);
  const char *sr = str_at(ar, dl, B_STOP_REASON).ptr;
  ev.stop = px_stop_parse(sr);
  ev.finish = px_str(sr);
  /* newer Anthropic reason with an existing IR equivalent */
  if (sr != NULL && strcmp(sr, "model_context_window_exceeded") == 0)
    ev.stop = PX_STOP_MAX_TOKENS;
  ev.stop_sequence = str_at(ar, dl, B_STOP_SEQ);
  ev.refusal_explanation = px_jv_sget(ar, &dl[B_STOP_DETAILS], "explanation");
  /* message_delta usage is cumulative; fields it omits keep message_start's */
  int64_t in = u[GU_IN], cr = u[GU_CACHE_READ], cc = u[GU_CACHE_CREATION];
  if (in < 0) in = d->in_raw;
  if (cr < 0) cr = d->cache_read;
  if (cc < 0) cc = d->cache_creation;
  ev.usage.input_tokens = sum_pos(in, cr, cc);
  ev.usage.output_tokens = u[GU_OUT];
  ev.usage.cache_read_tokens = cr;
  ev.usage.cache_creation_tokens = cc;
  sd_set(d, SD_ENDING);
  return d->sink(d->arg, &ev);
}

static int sd_error(px_sdec_t *d, const px_fv_t *f, px_arena_t *ar) {
  const char *type = px_jv_sget(ar, &f[E_ERROR], "type").ptr;
  px_str_t msg = px_jv_sget(ar, &f[E_ERROR], "message");
  if (msg.ptr == NULL) msg = PX_STR("upstream stream error");
  return sd_fail(d, px_errkind_from_type(type, 0), msg.ptr, msg.len);
}

/* ------------------------------------------------------------------------ */
/* Fast path. Nearly every upstream event is a content_block_delta carrying
 * one text / thinking / signature / partial_json fragment, or a ping.
 * Walking each whole, then looking its members up (the general path), costs
 * several passes, so those
 * events are read by a small validating scanner. It accepts only what it
 * can prove the general path would accept and read the same way: the whole event
 * must be one well-formed JSON object (strings: valid UTF-8, no raw control
 * characters, valid escapes, no \u0000, surrogate escapes only as pairs;
 * numbers: plain integers of at most 15 digits; nesting at most 32 deep;
 * the scanner is px_fj_* of json.h, shared with the other stream decoders),
 * with no escaped or repeated keys where the fields are read. Anything else
 * (other events, errors, unexpected states, odd shapes) returns "not
 * handled" and goes to the general path, which stays the arbiter. Nothing is
 * emitted before the whole event has been checked. */

/* The walk's levels and the members it reads, one bit each. */
enum { L_EV, L_DELTA, L_MSG, L_USAGE, L_MUSAGE, L_CB };
enum {
  /* the event */
  T_TYPE,
  T_INDEX,
  T_DELTA,
  T_MSG,
  T_USAGE,
  T_CB,
  /* its delta (content_block_delta, message_delta) */
  D_TYPE,
  D_TEXT,
  D_THINKING,
  D_SIGNATURE,
  D_JSON,
  D_SR,
  D_SS,
  D_SD,
  /* message_start's message */
  M_ID,
  M_MODEL,
  M_USAGE,
  /* usage (message_delta's), and the message's */
  U_IN,
  U_CR,
  U_CC,
  U_OUT,
  MU_IN,
  MU_CR,
  MU_CC,
  MU_OUT,
  /* content_block_start's block */
  C_TYPE,
  C_TEXT,
  C_THINKING,
  C_SIGNATURE,
  C_CITS,
  F_NONE
};
#define FB(f) (1u << (f))
/* the members that are objects (walked into), and the integers */
#define OBJ_FIELDS (FB(T_DELTA) | FB(T_MSG) | FB(T_USAGE) | FB(T_CB) | FB(M_USAGE))
#define STR_FIELDS (~(OBJ_FIELDS | INT_FIELDS | FB(C_CITS) | FB(D_SD)) & (FB(F_NONE) - 1))
#define INT_FIELDS                                                                    \
  (FB(T_INDEX) | FB(U_IN) | FB(U_CR) | FB(U_CC) | FB(U_OUT) | FB(MU_IN) | FB(MU_CR) | \
   FB(MU_CC) | FB(MU_OUT))

static int fast_field(int lv, const unsigned char *k, size_t kl) {
#define IS(lit) (kl == sizeof(lit) - 1 && memcmp(k, lit, sizeof(lit) - 1) == 0)
  switch (lv) {
    case L_EV:
      return IS("type")            ? T_TYPE
             : IS("index")         ? T_INDEX
             : IS("delta")         ? T_DELTA
             : IS("message")       ? T_MSG
             : IS("usage")         ? T_USAGE
             : IS("content_block") ? T_CB
                                   : F_NONE;
    case L_DELTA:
      return IS("type")            ? D_TYPE
             : IS("text")          ? D_TEXT
             : IS("partial_json")  ? D_JSON
             : IS("thinking")      ? D_THINKING
             : IS("signature")     ? D_SIGNATURE
             : IS("stop_reason")   ? D_SR
             : IS("stop_sequence") ? D_SS
             : IS("stop_details")  ? D_SD
                                   : F_NONE;
    case L_MSG:
      return IS("id") ? M_ID : IS("model") ? M_MODEL : IS("usage") ? M_USAGE : F_NONE;
    case L_USAGE:
    case L_MUSAGE: {
      int o = lv == L_USAGE ? 0 : MU_IN - U_IN;
      return IS("input_tokens")                  ? U_IN + o
             : IS("cache_read_input_tokens")     ? U_CR + o
             : IS("cache_creation_input_tokens") ? U_CC + o
             : IS("output_tokens")               ? U_OUT + o
                                                 : F_NONE;
    }
    default:
      return IS("type")        ? C_TYPE
             : IS("text")      ? C_TEXT
             : IS("thinking")  ? C_THINKING
             : IS("signature") ? C_SIGNATURE
             : IS("citations") ? C_CITS
                               : F_NONE;
  }
#undef IS
}

#define ANTH_MEMO_MAX 256 /* longest head kept */

static void memo_keep(px_sdec_t *d, const unsigned char *p, size_t len, uint32_t seen,
                      uint32_t strs, uint32_t nums, const px_fj_str_t *type,
                      int64_t index) {
  if (len > ANTH_MEMO_MAX) return;
  if (d->memo_len != len || memcmp(d->memo, p, len) != 0) {
    unsigned char *m = realloc(d->memo, len);
    if (m == NULL) return;
    memcpy(m, p, len);
    d->memo = m;
    d->memo_len = len;
  }
  d->memo_seen = seen, d->memo_strs = strs, d->memo_nums = nums;
  if (strs & FB(T_TYPE)) d->memo_type = *type;
  if (nums & FB(T_INDEX)) d->memo_index = index;
}

/* Returns 1 when the event was handled, 0 to use the general path, <0 on a
 * sink error. Every event of a plain stream: message_start, the text and
 * thinking blocks' content_block_start, content_block_delta,
 * content_block_stop, message_delta, message_stop and ping.
 *
 * Head memo: a block's deltas repeat the same bytes up to their delta
 * object ({"type":"content_block_delta","index":N,"delta":{); the walk's
 * state there is a function of those bytes alone, so the decoder keeps the
 * last walked head and that state, and an event starting with the same
 * bytes resumes the walk there, validated as if walked again. */
static int fast_event(px_sdec_t *d, const char *data, size_t n) {
  /* one flat walk of the event and its objects (px_fj_key / px_fj_pass /
   * px_fj_next of json.h); the members read are checked as they are read:
   * strings (or null where the general path reads a missing one alike),
   * integers (or null), objects (or null) */
  const unsigned char *p = (const unsigned char *)data;
  px_fj_str_t st[F_NONE];
  int64_t num[F_NONE];
  uint32_t seen = 0, strs = 0, nums = 0; /* members met; strings and integers read */
  int lv = L_EV, r;
  size_t i, kl;
  if (d->memo_len > 0 && n > d->memo_len && memcmp(p, d->memo, d->memo_len) == 0) {
    /* the head of the last walk: resumed where its delta object opened */
    i = d->memo_len;
    seen = d->memo_seen, strs = d->memo_strs, nums = d->memo_nums;
    st[T_TYPE] = d->memo_type;
    num[T_INDEX] = d->memo_index;
    lv = L_DELTA;
    goto open;
  }
  i = px_json_ws(p, n, 0);
  if (i >= n || p[i] != '{') return 0;
  i++;
open:
  i = px_json_ws(p, n, i);
  if (i < n && p[i] == '}') {
    i++;
    goto close;
  }
member : {
  size_t ks = i + 1;
  if (px_fj_key(p, n, &i, &kl) < 0) return 0;
  int f = fast_field(lv, p + ks, kl);
  if (f == F_NONE) {
    if (px_fj_pass(p, n, &i, lv == L_EV ? 1 : lv == L_MUSAGE ? 3 : 2) < 0) return 0;
    goto after;
  }
  if (seen & FB(f)) return 0;
  seen |= FB(f);
  if (p[i] == '"' && (FB(f) & STR_FIELDS)) { /* the usual member: a string */
    px_fj_str_t *s = &st[f];
    if (px_json_string(p, n, i + 1, &s->e, &s->esc) < 0) return 0;
    s->s = i + 1;
    strs |= FB(f);
    i = s->e + 1;
    goto after;
  }
  if (p[i] == 'n') { /* null: the general path reads it as a missing member */
    if (n - i < 4 || memcmp(p + i, "null", 4) != 0) return 0;
    i += 4;
    goto after;
  }
  if (FB(f) & (FB(C_CITS) | FB(D_SD)))
    return 0; /* citations, stop details: the general path */
  if (FB(f) & OBJ_FIELDS) {
    if (p[i] != '{') return 0;
    i++;
    lv = f == T_DELTA   ? L_DELTA
         : f == T_MSG   ? L_MSG
         : f == T_USAGE ? L_USAGE
         : f == T_CB    ? L_CB
                        : L_MUSAGE;
    /* a head that read the type and the index at most is kept: the walk's
     * state where the delta opens is a function of its bytes alone */
    if (f == T_DELTA && !(strs & ~FB(T_TYPE)) && !(nums & ~FB(T_INDEX)))
      memo_keep(d, p, i, seen, strs, nums, &st[T_TYPE], num[T_INDEX]);
    goto open;
  }
  if (FB(f) & INT_FIELDS) {
    size_t e = px_fj_int_end(p, n, i);
    if (e == 0) return 0;
    num[f] = px_fj_int_value(p, i, e);
    nums |= FB(f);
    i = e;
    goto after;
  }
  return 0; /* a string member that is no string */
}
after:
  r = px_fj_next(p, n, &i, '}');
  if (r > 0) goto member;
  if (r < 0) return 0;
close:
  if (lv != L_EV) {
    lv = lv == L_MUSAGE ? L_MSG : L_EV;
    goto after;
  }
  if (px_json_ws(p, n, i) != n || !(strs & FB(T_TYPE)) || st[T_TYPE].esc) return 0;
  const char *tp = data + st[T_TYPE].s;
  size_t tl = st[T_TYPE].e - st[T_TYPE].s;
#define TYPE(lit) (tl == sizeof(lit) - 1 && memcmp(tp, lit, sizeof(lit) - 1) == 0)
#define NUM(f, dflt) (nums & FB(f) ? num[f] : (int64_t)(dflt))
  if (TYPE("ping")) return 1;
  if (TYPE("content_block_delta")) { /* the hot one: its text, unescaped */
    if (d->st == SD_SKIP) return 1;
    if (d->st != SD_BLOCK || !(nums & FB(T_INDEX)) || num[T_INDEX] != d->up_index ||
        !(strs & FB(D_TYPE)) || st[D_TYPE].esc)
      return 0;
    const char *dt = data + st[D_TYPE].s;
    size_t dtl = st[D_TYPE].e - st[D_TYPE].s;
#define DT(lit) (dtl == sizeof(lit) - 1 && memcmp(dt, lit, sizeof(lit) - 1) == 0)
    int field;
    px_delta_t dk;
    if (DT("text_delta") && d->block == PX_BLOCK_TEXT) {
      field = D_TEXT;
      dk = PX_DELTA_TEXT;
    } else if (DT("thinking_delta") && d->block == PX_BLOCK_THINKING) {
      field = D_THINKING;
      dk = PX_DELTA_THINKING;
    } else if (DT("signature_delta") && d->block == PX_BLOCK_THINKING) {
      field = D_SIGNATURE;
      dk = PX_DELTA_SIGNATURE;
    } else if (DT("input_json_delta") && d->block == PX_BLOCK_TOOL_CALL) {
      field = D_JSON;
      dk = PX_DELTA_TOOL_ARGS;
    } else {
      return 0;
    }
#undef DT
    if (!(strs & FB(field))) return 0;
    px_str_t text;
    const px_fj_str_t *fs = &st[field];
    if (px_json_unescape(data + fs->s, fs->e - fs->s, fs->esc, &d->scratch, &text) < 0)
      return 0; /* scratch too small: the general path decides */
    int rc = sd_delta(d, dk, text);
    return rc < 0 ? rc : 1;
  }
  /* the strings used, unescaped one after another into d->scratch (never
   * longer than their raw text: room reserved once) */
  uint32_t use;
  int kind = TYPE("content_block_stop")    ? 2
             : TYPE("message_delta")       ? 3
             : TYPE("message_stop")        ? 4
             : TYPE("message_start")       ? 5
             : TYPE("content_block_start") ? 6
                                           : 0;
#undef TYPE
  switch (kind) {
    case 3:
      use = FB(D_SR) | FB(D_SS);
      break;
    case 5:
      use = FB(M_ID) | FB(M_MODEL);
      break;
    case 6:
      use = FB(C_TYPE) | FB(C_TEXT) | FB(C_THINKING) | FB(C_SIGNATURE);
      break;
    case 2:
    case 4:
      use = 0;
      break;
    default:
      return 0;
  }
  use &= strs;
  px_str_t v[F_NONE];
  size_t room = 0, off = 0;
  for (uint32_t m = use; m != 0; m &= m - 1) {
    int k = __builtin_ctz(m);
    if (st[k].esc) room += st[k].e - st[k].s;
  }
  if (room > 0) {
    d->scratch.len = 0;
    if (px_buf_reserve(&d->scratch, room) < 0) return 0; /* the general path decides */
  }
  for (uint32_t m = use; m != 0; m &= m - 1) {
    int k = __builtin_ctz(m);
    size_t l = st[k].e - st[k].s;
    if (!st[k].esc) {
      v[k] = (px_str_t){data + st[k].s, l};
      continue;
    }
    px_buf_t part = {d->scratch.data + off, 0, l, l};
    if (px_json_unescape(data + st[k].s, l, 1, &part, &v[k]) < 0) return 0;
    off += v[k].len;
  }
#define VIEW(f) (use & FB(f) ? v[f] : PX_STR_NULL)
  px_ev_t ev;
  int rc;
  switch (kind) {
    case 2: /* content_block_stop */
      if (d->st == SD_SKIP) {
        sd_set(d, SD_MESSAGE);
        return 1;
      }
      if (d->st != SD_BLOCK || NUM(T_INDEX, -1) != d->up_index) return 0;
      if (d->block == PX_BLOCK_TEXT && d->cits.len > 0) return 0; /* its citations */
      px_ev_init(&ev, PX_EV_BLOCK_STOP);
      ev.index = d->cur;
      sd_set(d, SD_MESSAGE);
      rc = d->sink(d->arg, &ev);
      break;
    case 3: { /* message_delta, as sd_message_delta */
      if (d->st != SD_MESSAGE && d->st != SD_ENDING) return 0;
      char sr[64];
      px_str_t s = VIEW(D_SR);
      if (s.ptr && (s.len >= sizeof(sr) || memchr(s.ptr, 0, s.len))) return 0;
      if (s.ptr) {
        memcpy(sr, s.ptr, s.len);
        sr[s.len] = 0;
      }
      px_ev_init(&ev, PX_EV_MESSAGE_DELTA);
      ev.stop = px_stop_parse(s.ptr ? sr : NULL);
      ev.finish = s;
      if (s.ptr && strcmp(sr, "model_context_window_exceeded") == 0)
        ev.stop = PX_STOP_MAX_TOKENS;
      ev.stop_sequence = VIEW(D_SS);
      int64_t in = NUM(U_IN, -1), cr = NUM(U_CR, -1), cc = NUM(U_CC, -1);
      if (in < 0) in = d->in_raw;
      if (cr < 0) cr = d->cache_read;
      if (cc < 0) cc = d->cache_creation;
      ev.usage.input_tokens = sum_pos(in, cr, cc);
      ev.usage.output_tokens = NUM(U_OUT, -1);
      ev.usage.cache_read_tokens = cr;
      ev.usage.cache_creation_tokens = cc;
      sd_set(d, SD_ENDING);
      rc = d->sink(d->arg, &ev);
      break;
    }
    case 4: /* message_stop */
      if (d->st != SD_ENDING) return 0;
      px_ev_init(&ev, PX_EV_MESSAGE_STOP);
      sd_set(d, SD_DONE);
      rc = d->sink(d->arg, &ev);
      break;
    case 5: /* message_start, as sd_message_start */
      if (d->st != SD_INIT) return 0;
      px_ev_init(&ev, PX_EV_MESSAGE_START);
      ev.id = VIEW(M_ID);
      ev.model = VIEW(M_MODEL);
      d->in_raw = NUM(MU_IN, -1);
      d->cache_read = NUM(MU_CR, -1);
      d->cache_creation = NUM(MU_CC, -1);
      ev.usage.input_tokens = sum_pos(d->in_raw, d->cache_read, d->cache_creation);
      ev.usage.output_tokens = NUM(MU_OUT, -1);
      ev.usage.cache_read_tokens = d->cache_read;
      ev.usage.cache_creation_tokens = d->cache_creation;
      sd_set(d, SD_MESSAGE);
      rc = d->sink(d->arg, &ev);
      break;
    default: { /* content_block_start of a text or thinking block */
      if (d->st != SD_MESSAGE || !(use & FB(C_TYPE))) return 0;
      px_block_t bk;
      if (px_str_eq(v[C_TYPE], "text"))
        bk = PX_BLOCK_TEXT;
      else if (px_str_eq(v[C_TYPE], "thinking"))
        bk = PX_BLOCK_THINKING;
      else
        return 0;
      d->up_index = NUM(T_INDEX, -1);
      px_ev_init(&ev, PX_EV_BLOCK_START);
      ev.block = bk;
      d->cur = d->next++;
      d->block = bk;
      ev.index = d->cur;
      sd_set(d, SD_BLOCK);
      rc = d->sink(d->arg, &ev);
      if (rc < 0) break;
      if (bk == PX_BLOCK_TEXT) {
        d->chars = 0;
        px_buf_reset(&d->cits);
        rc = sd_delta(d, PX_DELTA_TEXT, VIEW(C_TEXT));
      } else {
        rc = sd_delta(d, PX_DELTA_THINKING, VIEW(C_THINKING));
        if (rc == 0) rc = sd_delta(d, PX_DELTA_SIGNATURE, VIEW(C_SIGNATURE));
      }
      break;
    }
  }
#undef VIEW
#undef NUM
  return rc < 0 ? rc : 1;
}

/* The general path: the event checked whole, then read where it lies. Out
 * of line: its arena is no weight on the fast path's frame. */
__attribute__((noinline)) static int general_event(px_sdec_t *d, px_str_t data) {
  px_fv_t j, f[E_N];
  if (px_jv_parse(data.ptr, data.len, &j) < 0 || !px_jv_is(&j, PX_FV_OBJ))
    return sd_proto(d, "upstream sent an event that is not JSON");
  px_arena_t ar; /* the event's strings, unescaped */
  px_arena_init(&ar);
  px_jv_fields(&j, event_keys, E_N, f);
  const char *t = px_jv_str(&ar, &f[E_TYPE], NULL);
  int rc = 0;
  if (t == NULL) {
    rc = sd_proto(d, "upstream event without a type");
  } else if (strcmp(t, "message_start") == 0) {
    rc = sd_message_start(d, f, &ar);
  } else if (strcmp(t, "content_block_start") == 0) {
    rc = sd_block_start(d, f, &ar);
  } else if (strcmp(t, "content_block_delta") == 0) {
    rc = sd_block_delta(d, f, &ar);
  } else if (strcmp(t, "content_block_stop") == 0) {
    rc = sd_block_stop(d, f);
  } else if (strcmp(t, "message_delta") == 0) {
    rc = sd_message_delta(d, f, &ar);
  } else if (strcmp(t, "message_stop") == 0) {
    if (d->st != SD_ENDING) {
      rc = sd_proto(d, "upstream message_stop before message_delta");
    } else {
      px_ev_t ev;
      px_ev_init(&ev, PX_EV_MESSAGE_STOP);
      sd_set(d, SD_DONE);
      rc = d->sink(d->arg, &ev);
    }
  } else if (strcmp(t, "error") == 0) {
    rc = sd_error(d, f, &ar);
  }
  /* ping and future event types are ignored */
  px_arena_free(&ar);
  return rc;
}

int px_anthropic_sdec_feed(px_sdec_t *d, const struct px_sse_event *sse) {
  if (d->st == SD_FAILED) return PX_EPROTO;
  if (d->st == SD_DONE) return 0; /* the stream is complete; ignore trailers */
  if (sse->data.len == 0) return 0;
  if (d->fast) {
    int frc = fast_event(d, sse->data.ptr, sse->data.len);
    if (frc != 0) {
      d->fast_hits++;
      return frc < 0 ? frc : 0;
    }
  }
  return general_event(d, sse->data);
}

int px_anthropic_sdec_finish(px_sdec_t *d) {
  if (d->st == SD_DONE) return 0;
  if (d->st == SD_FAILED) return PX_EPROTO;
  return sd_proto(d, "upstream stream ended before message_stop");
}

/* ======================================================================== */
/* Encoder                                                                    */

typedef enum se_state { SE_INIT, SE_STARTED, SE_ENDING, SE_DONE } se_state_t;

#define SE_MAX_BLOCKS 256      /* blocks open at once */
#define SE_MAX_EXPLANATION 4096

typedef struct se_block {
  int ir_index;
  px_block_t kind;
  int out_index;  /* -1 until written */
  int stopped;    /* the IR block has stopped (held blocks) */
  char *id, *name;
  px_buf_t text;  /* held fragments (text / thinking / args / redacted data) */
  px_buf_t sig;   /* held signature */
  int sig_seen;   /* a signature fragment was written or held (tag once) */
  px_buf_t said;  /* text blocks: the last SE_SAID_WINDOW..2x bytes of the
                     text written (a citation's cited_text is its
                     annotation's span of it) */
  int64_t said_base; /* characters of the text before said */
  px_buf_t cits;  /* held citations, one JSON object per line */
} se_block_t;

/* Text kept per text block for cited_text: a window, so that a long
 * translated stream toward an Anthropic client holds no more than this
 * (annotations follow their span closely: Responses sends each right after
 * the text it cites). */
#define SE_SAID_WINDOW (32u << 10)

struct px_senc {
  const px_tr_ctx_t *ctx;
  px_buf_t *out;
  se_state_t st;
  int next_out;
  int active;          /* position in blocks[] of the block open on the wire, -1 */
  se_block_t *blocks;  /* open or held blocks in start order */
  int nblocks, capblocks;
  size_t held;         /* bytes held across blocks (max_accum) */
  int refusal;         /* a refusal block was seen */
  px_buf_t refusal_text;
  px_idset_t call_ids; /* tool_use ids written (unique, non-empty) */
  int ncalls;
};

static void se_set(px_senc_t *e, se_state_t st) { e->st = st; }

px_senc_t *px_anthropic_senc_new(const px_tr_ctx_t *ctx, px_buf_t *out) {
  px_senc_t *e = calloc(1, sizeof(*e));
  if (e == NULL) return NULL;
  /* blocks[] grows on demand (most streams hold one or two blocks) */
  e->ctx = ctx;
  e->out = out;
  e->active = -1;
  px_buf_init(&e->refusal_text, SE_MAX_EXPLANATION);
  se_set(e, SE_INIT);
  return e;
}

static void blk_free(se_block_t *b) {
  free(b->id);
  free(b->name);
  px_buf_free(&b->text);
  px_buf_free(&b->sig);
  px_buf_free(&b->said);
  px_buf_free(&b->cits);
}

void px_anthropic_senc_free(px_senc_t *e) {
  if (e == NULL) return;
  for (int i = 0; i < e->nblocks; i++) blk_free(&e->blocks[i]);
  free(e->blocks);
  px_buf_free(&e->refusal_text);
  px_idset_free(&e->call_ids);
  free(e);
}

/* ---- writers ---- */

static int w(px_senc_t *e, const char *s) { return px_buf_puts(e->out, s); }
/* a string literal, its length known at compile time */
#define W(e, lit) px_buf_append((e)->out, lit, sizeof(lit) - 1)
static int wstr(px_senc_t *e, px_str_t s) {
  return px_buf_json_str(e->out, s.ptr ? s.ptr : "", s.ptr ? s.len : 0);
}

static int write_usage_num(px_senc_t *e, const char *key, int64_t v, int first) {
  int rc = first ? 0 : w(e, ",");
  if (rc == 0) rc = w(e, "\"");
  if (rc == 0) rc = w(e, key);
  if (rc == 0) rc = w(e, "\":");
  if (rc == 0) rc = px_buf_i64(e->out, v > 0 ? v : 0);
  return rc;
}

static int write_message_start(px_senc_t *e, const px_ev_t *ev) {
  const char *model = e->ctx->client_model ? e->ctx->client_model : "";
  px_str_t id = ev ? ev->id : PX_STR_NULL;
  int rc = w(e, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"
                "{\"id\":\"");
  size_t id_at = e->out->len; /* traces: the id and the model as written */
  if (rc == 0) rc = px_buf_mint_id(e->out, "msg_", id);
  size_t id_end = e->out->len;
  if (rc == 0) rc = w(e, "\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
                         "\"model\":");
  size_t model_at = e->out->len;
  if (rc == 0) rc = px_buf_json_str(e->out, model, strlen(model));
  if (rc == 0)
    px_answer_wrote(e->ctx->client, e->out, id_at, id_end, model_at, e->out->len, NULL);
  if (rc == 0) rc = w(e, ",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{");
  int64_t in = -1, out = -1, cr = -1, cc = -1;
  if (ev != NULL) {
    in = ev->usage.input_tokens;
    out = ev->usage.output_tokens;
    cr = ev->usage.cache_read_tokens;
    cc = ev->usage.cache_creation_tokens;
  }
  in -= (cr > 0 ? cr : 0) + (cc > 0 ? cc : 0);
  if (rc == 0) rc = write_usage_num(e, "input_tokens", in, 1);
  if (rc == 0) rc = write_usage_num(e, "output_tokens", out, 0);
  if (rc == 0) rc = write_usage_num(e, "cache_creation_input_tokens", cc, 0);
  if (rc == 0) rc = write_usage_num(e, "cache_read_input_tokens", cr, 0);
  if (rc == 0) rc = w(e, "}}}\n\n");
  if (rc == 0) se_set(e, SE_STARTED);
  return rc;
}

static int ensure_started(px_senc_t *e) {
  return e->st == SE_INIT ? write_message_start(e, NULL) : 0;
}

static int write_block_start(px_senc_t *e, se_block_t *b, px_str_t id, px_str_t name,
                             px_str_t data) {
  b->out_index = e->next_out++;
  int rc = W(e, "event: content_block_start\ndata: {\"type\":\"content_block_start\","
                "\"index\":");
  if (rc == 0) rc = px_buf_i64(e->out, b->out_index);
  if (rc == 0) rc = W(e, ",\"content_block\":");
  if (rc < 0) return rc;
  switch (b->kind) {
  case PX_BLOCK_TEXT:
  case PX_BLOCK_REFUSAL: rc = w(e, "{\"type\":\"text\",\"text\":\"\"}"); break;
  case PX_BLOCK_THINKING:
    rc = w(e, "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}");
    break;
  case PX_BLOCK_REDACTED_THINKING:
    rc = w(e, "{\"type\":\"redacted_thinking\",\"data\":");
    if (rc == 0) rc = wstr(e, data);
    if (rc == 0) rc = w(e, "}");
    break;
  case PX_BLOCK_TOOL_CALL: {
    /* tool_result blocks name their call: an empty or repeated upstream
     * id becomes a minted one (the rule of every client encoder) */
    const char *uid = px_idset_unique(&e->call_ids, id, e->ncalls++);
    if (uid == NULL) return PX_ENOMEM;
    rc = w(e, "{\"type\":\"tool_use\",\"id\":");
    if (rc == 0) rc = wstr(e, px_str(uid));
    if (rc == 0) rc = w(e, ",\"name\":");
    if (rc == 0) rc = wstr(e, name);
    if (rc == 0) rc = w(e, ",\"input\":{}}");
    break;
  }
  }
  if (rc == 0) rc = w(e, "}\n\n");
  return rc;
}

/* pre: raw bytes written before p inside the same delta string (the
 * signature tag), NULL for none */
static int write_delta_pre(px_senc_t *e, se_block_t *b, px_delta_t kind, const char *pre,
                           const char *p, size_t n) {
  if (n == 0) return 0;
  int rc = W(e, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                "\"index\":");
  if (rc == 0) rc = px_buf_i64(e->out, b->out_index);
  if (rc < 0) return rc;
  switch (kind) {
  case PX_DELTA_TEXT:
  case PX_DELTA_REFUSAL: rc = W(e, ",\"delta\":{\"type\":\"text_delta\",\"text\":\""); break;
  case PX_DELTA_THINKING:
    rc = W(e, ",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"");
    break;
  case PX_DELTA_SIGNATURE:
    rc = W(e, ",\"delta\":{\"type\":\"signature_delta\",\"signature\":\"");
    break;
  default: rc = W(e, ",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\""); break;
  }
  if (rc == 0 && pre != NULL) rc = w(e, pre);
  if (rc == 0) rc = px_buf_json_escape(e->out, p, n);
  if (rc == 0) rc = W(e, "\"}}\n\n");
  return rc;
}

static int write_delta(px_senc_t *e, se_block_t *b, px_delta_t kind, const char *p,
                       size_t n) {
  return write_delta_pre(e, b, kind, NULL, p, n);
}

/* The first byte at or after at that starts a UTF-8 sequence. */
static size_t utf8_start(const char *p, size_t n, size_t at) {
  while (at < n && ((unsigned char)p[at] & 0xC0) == 0x80) at++;
  return at;
}

/* A text block's text as written, for the cited_text of its citations:
 * the last SE_SAID_WINDOW bytes at least (2x at most), and the characters
 * before them counted. */
static void keep_said(se_block_t *b, const char *p, size_t n) {
  if (b->kind != PX_BLOCK_TEXT || n == 0) return;
  if (b->said.cap == 0) px_buf_init(&b->said, 2 * SE_SAID_WINDOW + 4);
  if (n > SE_SAID_WINDOW) { /* only a long delta's tail can stay */
    size_t skip = utf8_start(p, n, n - SE_SAID_WINDOW);
    b->said_base += (int64_t)(px_utf8_chars(b->said.data, b->said.len) + px_utf8_chars(p, skip));
    px_buf_reset(&b->said);
    p += skip;
    n -= skip;
  }
  if (b->said.len + n > 2 * SE_SAID_WINDOW) {
    size_t cut = utf8_start(b->said.data, b->said.len, b->said.len + n - SE_SAID_WINDOW);
    b->said_base += (int64_t)px_utf8_chars(b->said.data, cut);
    px_buf_consume(&b->said, cut);
  }
  if (px_buf_append(&b->said, p, n) < 0) { /* no memory: forget, keep counting */
    b->said_base += (int64_t)(px_utf8_chars(b->said.data, b->said.len) + px_utf8_chars(p, n));
    px_buf_reset(&b->said);
  }
}

/* content_block_delta citations_delta with one citation (compact JSON). */
static int write_citation(px_senc_t *e, se_block_t *b, const char *cit, size_t n) {
  int rc = px_buf_printf(e->out,
                         "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                         "\"index\":%d,\"delta\":{\"type\":\"citations_delta\",\"citation\":",
                         b->out_index);
  if (rc == 0) rc = px_buf_append(e->out, cit, n);
  if (rc == 0) rc = w(e, "}}\n\n");
  return rc;
}

static int write_block_stop(px_senc_t *e, se_block_t *b) {
  int rc = W(e, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\","
                "\"index\":");
  if (rc == 0) rc = px_buf_i64(e->out, b->out_index);
  if (rc == 0) rc = W(e, "}\n\n");
  return rc;
}

/* ---- block bookkeeping ---- */

static int find_block(px_senc_t *e, int ir_index) {
  for (int i = 0; i < e->nblocks; i++)
    if (e->blocks[i].ir_index == ir_index) return i;
  return -1;
}

static void drop_block(px_senc_t *e, int pos) {
  se_block_t *b = &e->blocks[pos];
  e->held -= b->text.len + b->sig.len + b->cits.len;
  blk_free(b);
  memmove(&e->blocks[pos], &e->blocks[pos + 1],
          (size_t)(e->nblocks - pos - 1) * sizeof(*b));
  e->nblocks--;
  if (e->active > pos) e->active--;
}

static px_delta_t main_delta(px_block_t k) {
  switch (k) {
  case PX_BLOCK_THINKING: return PX_DELTA_THINKING;
  case PX_BLOCK_TOOL_CALL: return PX_DELTA_TOOL_ARGS;
  default: return PX_DELTA_TEXT;
  }
}

/* Write a held block (start + held fragments) and, if it has stopped, its
 * stop. Returns 1 when it became the open block. */
static int release_block(px_senc_t *e, int pos) {
  se_block_t *b = &e->blocks[pos];
  px_str_t data = {b->text.data, b->text.len};
  int rc = write_block_start(e, b, px_str(b->id), px_str(b->name), data);
  if (rc == 0 && b->kind != PX_BLOCK_REDACTED_THINKING)
    rc = write_delta(e, b, main_delta(b->kind), b->text.data, b->text.len);
  if (rc == 0) rc = write_delta(e, b, PX_DELTA_SIGNATURE, b->sig.data, b->sig.len);
  for (size_t at = 0; rc == 0 && at < b->cits.len;) {
    const char *nl = memchr(b->cits.data + at, '\n', b->cits.len - at);
    size_t n = nl ? (size_t)(nl - (b->cits.data + at)) : b->cits.len - at;
    rc = write_citation(e, b, b->cits.data + at, n);
    at += n + 1;
  }
  if (rc < 0) return rc;
  keep_said(b, b->text.data, b->text.len);
  e->held -= b->text.len + b->sig.len + b->cits.len;
  px_buf_free(&b->text);
  px_buf_free(&b->sig);
  px_buf_free(&b->cits);
  if (b->stopped) {
    rc = write_block_stop(e, b);
    drop_block(e, pos);
    return rc;
  }
  e->active = pos;
  return 1;
}

/* The open block stopped: write held blocks until one stays open. */
static int release_held(px_senc_t *e) {
  while (e->active < 0 && e->nblocks > 0) {
    int rc = release_block(e, 0);
    if (rc < 0) return rc;
  }
  return 0;
}

static int hold(px_senc_t *e, px_buf_t *b, const char *p, size_t n) {
  if (e->ctx->max_accum > 0 && e->held + n > e->ctx->max_accum) return PX_ETOOBIG;
  if (b->cap == 0) px_buf_init(b, e->ctx->max_accum ? e->ctx->max_accum : (64u << 20));
  int rc = px_buf_append(b, p, n);
  if (rc == 0) e->held += n;
  return rc;
}

static char *dupstr(px_str_t s) {
  char *p = malloc(s.len + 1);
  if (p == NULL) return NULL;
  if (s.len) memcpy(p, s.ptr, s.len);
  p[s.len] = 0;
  return p;
}

static int se_block_start(px_senc_t *e, const px_ev_t *ev) {
  if (find_block(e, ev->index) >= 0 || e->nblocks >= SE_MAX_BLOCKS) return PX_EINVAL;
  if (e->nblocks == e->capblocks) {
    int nc = e->capblocks ? e->capblocks * 2 : 2;
    se_block_t *nb = realloc(e->blocks, sizeof(*nb) * (size_t)nc);
    if (nb == NULL) return PX_ENOMEM;
    e->blocks = nb;
    e->capblocks = nc;
  }
  se_block_t *b = &e->blocks[e->nblocks];
  memset(b, 0, sizeof(*b));
  b->ir_index = ev->index;
  b->kind = ev->block;
  b->out_index = -1;
  if (ev->block == PX_BLOCK_REFUSAL) e->refusal = 1;
  if (e->active >= 0) {
    /* another block is open: hold this one */
    b->id = dupstr(ev->id);
    b->name = dupstr(ev->name);
    if (b->id == NULL || b->name == NULL) {
      blk_free(b);
      return PX_ENOMEM;
    }
    e->nblocks++;
    if (ev->block == PX_BLOCK_REDACTED_THINKING)
      return hold(e, &b->text, ev->text.ptr, ev->text.len);
    return 0;
  }
  e->nblocks++;
  e->active = e->nblocks - 1;
  return write_block_start(e, b, ev->id, ev->name, ev->text);
}

/* An annotation of a text block: a url_citation becomes a citations_delta
 * (web_search_result_location, the rule of the non-streaming encoder:
 * px_anthropic_citation), its cited_text the span of the text written so
 * far, as far as it lies in the kept window (of a held block, its held
 * text); a held block holds it until it is written. Other kinds are
 * dropped under the body path's name. */
/* Whether s[0..n) is UTF-8 as jansson takes a string's bytes. */
static int utf8_whole(const char *s, size_t n) {
  for (size_t at = 0, l; at < n; at += l)
    if ((l = px_utf8_seq((const unsigned char *)s + at, n - at)) == 0) return 0;
  return 1;
}

/* An IR annotation (the event's compact JSON) -> its citation in o, as the
 * non-streaming encoder makes it (anthropic.c's px_anthropic_citation): a
 * url_citation with a url is a web_search_result_location whose cited_text
 * is the span of text[0..n) (text starts at character base of the block).
 * 1 written, 0 when it has no citation form, <0 on memory. */
static int citation_of(px_buf_t *o, px_str_t js, const char *text, size_t n,
                       int64_t base) {
  px_fv_t a, tv, uv, x;
  if (js.len == 0 || px_jv_parse(js.ptr, js.len, &a) < 0 || !px_jv_is(&a, PX_FV_OBJ) ||
      !px_jv_get(&a, "type", &tv) || !px_jv_is(&tv, PX_FV_STR) ||
      !px_jv_get(&a, "url", &uv))
    return 0;
  px_arena_t ar;
  px_arena_init(&ar);
  size_t ul = 0;
  const char *t = px_jv_str(&ar, &tv, NULL), *url = px_jv_str(&ar, &uv, &ul);
  int rc = 0;
  if (t == NULL || strcmp(t, "url_citation") != 0 || url == NULL || ul == 0) goto done;
  int64_t si = 0, ei = -1;
  px_jv_get(&a, "start_index", &x);
  px_jv_int(&x, &si);
  px_jv_get(&a, "end_index", &x);
  px_jv_int(&x, &ei);
  si -= base;
  if (ei >= 0) ei = ei > base ? ei - base : 0;
  size_t s0 = si > 0 ? px_utf8_offset(text, n, si) : 0;
  size_t s1 = ei >= 0 ? px_utf8_offset(text, n, ei) : n;
  if (s1 < s0) s1 = s0;
  if (!utf8_whole(text + s0, s1 - s0)) s1 = s0; /* a span cutting a sequence: "" */
  rc = px_buf_puts(o, "{\"type\":\"web_search_result_location\",\"url\":");
  if (rc == 0) rc = px_buf_json_str_as(o, url, ul, PX_ESC_JANSSON);
  if (rc == 0) rc = px_buf_puts(o, ",\"title\":");
  if (rc == 0)
    rc = px_jv_get(&a, "title", &x) && px_jv_is(&x, PX_FV_STR) ? px_fb_jdump(o, &x)
                                                               : px_buf_puts(o, "null");
  if (rc == 0) rc = px_buf_puts(o, ",\"cited_text\":");
  if (rc == 0) rc = px_buf_json_str_as(o, text + s0, s1 - s0, PX_ESC_JANSSON);
  if (rc == 0) rc = px_buf_puts(o, ",\"encrypted_index\":\"\"}");
  rc = rc < 0 ? PX_ENOMEM : 1;
done:
  px_arena_free(&ar);
  return rc;
}

/* An annotation of a text block: a url_citation becomes a citations_delta
 * (web_search_result_location, the rule of the non-streaming encoder:
 * citation_of), its cited_text the span of the text written so far, as far
 * as it lies in the kept window (of a held block, its held text); a held
 * block holds it until it is written. Other kinds are dropped under the
 * body path's name. */
static int se_annotation(px_senc_t *e, int pos, px_str_t js) {
  se_block_t *b = &e->blocks[pos];
  if (b->kind != PX_BLOCK_TEXT) return PX_EINVAL;
  const px_buf_t *src = pos == e->active ? &b->said : &b->text;
  int64_t base = pos == e->active ? b->said_base : 0;
  px_buf_t c;
  px_buf_init(&c, PX_MAX_SSE_EVENT + src->len * 6);
  int rc = citation_of(&c, js, src->data ? src->data : "", src->len, base);
  if (rc == 0) px_dropped(e->ctx, px_lossy_annotations(e->ctx));
  if (rc == 1) {
    if (pos == e->active) {
      rc = write_citation(e, b, c.data, c.len);
    } else {
      rc = hold(e, &b->cits, c.data, c.len);
      if (rc == 0) rc = hold(e, &b->cits, "\n", 1);
    }
  }
  px_buf_free(&c);
  return rc < 0 ? rc : 0;
}

static int se_delta(px_senc_t *e, const px_ev_t *ev) {
  int pos = find_block(e, ev->index);
  if (pos < 0) return PX_EINVAL;
  se_block_t *b = &e->blocks[pos];
  int ok;
  if (ev->delta == PX_DELTA_ANNOTATION) return se_annotation(e, pos, ev->text);
  switch (ev->delta) {
  case PX_DELTA_TEXT:
  case PX_DELTA_REFUSAL: ok = b->kind == PX_BLOCK_TEXT || b->kind == PX_BLOCK_REFUSAL; break;
  case PX_DELTA_THINKING:
  case PX_DELTA_SIGNATURE: ok = b->kind == PX_BLOCK_THINKING; break;
  default: ok = b->kind == PX_BLOCK_TOOL_CALL; break;
  }
  if (!ok) return PX_EINVAL;
  if (b->kind == PX_BLOCK_REFUSAL || ev->delta == PX_DELTA_REFUSAL) {
    e->refusal = 1;
    size_t room = e->refusal_text.cap - e->refusal_text.len;
    px_buf_append(&e->refusal_text, ev->text.ptr, ev->text.len < room ? ev->text.len : room);
  }
  const char *tag = NULL;
  if (ev->delta == PX_DELTA_SIGNATURE && ev->text.len > 0) {
    /* a signature from another family's upstream (OpenAI encrypted_content,
     * a Gemini thoughtSignature) is tagged with its family (protoutil.h) so
     * the request decoder (anthropic.c) can tell it back */
    if (!b->sig_seen) tag = px_rtok_stream_tag(PX_PROTO_ANTHROPIC, e->ctx->out);
    if (tag != NULL && *tag == 0) tag = NULL;
    b->sig_seen = 1;
  }
  if (pos == e->active) {
    if (ev->delta == PX_DELTA_TEXT) keep_said(b, ev->text.ptr, ev->text.len);
    return write_delta_pre(e, b, ev->delta, tag, ev->text.ptr, ev->text.len);
  }
  if (tag != NULL) {
    int rc = hold(e, &b->sig, tag, strlen(tag));
    if (rc < 0) return rc;
  }
  return hold(e, ev->delta == PX_DELTA_SIGNATURE ? &b->sig : &b->text, ev->text.ptr,
              ev->text.len);
}

static int se_block_stop(px_senc_t *e, const px_ev_t *ev) {
  int pos = find_block(e, ev->index);
  if (pos < 0) return PX_EINVAL;
  if (pos != e->active) {
    e->blocks[pos].stopped = 1;
    return 0;
  }
  int rc = write_block_stop(e, &e->blocks[pos]);
  if (rc < 0) return rc;
  e->active = -1;
  drop_block(e, pos);
  return release_held(e);
}

/* Close everything still open or held (the message is ending). */
static int close_all(px_senc_t *e) {
  while (e->nblocks > 0) {
    int rc;
    if (e->active >= 0) {
      rc = write_block_stop(e, &e->blocks[e->active]);
      if (rc < 0) return rc;
      int pos = e->active;
      e->active = -1;
      drop_block(e, pos);
    }
    if (e->nblocks > 0) {
      e->blocks[0].stopped = 1;
      rc = release_block(e, 0);
      if (rc < 0) return rc;
    }
  }
  return 0;
}

static int se_message_delta(px_senc_t *e, const px_ev_t *ev) {
  px_stop_t stop = ev ? ev->stop : PX_STOP_END_TURN;
  if (stop == PX_STOP_NONE) stop = PX_STOP_END_TURN;
  if (e->refusal) stop = PX_STOP_REFUSAL;
  const char *sr = px_stop_to_anthropic(stop);
  int rc = close_all(e);
  if (rc == 0) rc = w(e, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":"
                         "{\"stop_reason\":");
  if (rc == 0) rc = px_buf_json_str(e->out, sr, strlen(sr));
  if (rc == 0) px_answer_wrote(e->ctx->client, e->out, 0, 0, 0, 0, sr);
  if (rc == 0) rc = w(e, ",\"stop_sequence\":");
  if (rc == 0)
    rc = ev && ev->stop_sequence.len ? wstr(e, ev->stop_sequence) : w(e, "null");
  if (rc == 0 && strcmp(sr, "refusal") == 0) {
    rc = w(e, ",\"stop_details\":{\"type\":\"refusal\",\"category\":null,\"explanation\":");
    if (rc == 0) {
      if (ev && ev->refusal_explanation.len)
        rc = wstr(e, ev->refusal_explanation);
      else if (e->refusal_text.len)
        rc = px_buf_json_str(e->out, e->refusal_text.data, e->refusal_text.len);
      else
        rc = w(e, "null");
    }
    if (rc == 0) rc = w(e, "}");
  }
  if (rc == 0) rc = w(e, "},\"usage\":{");
  const px_usage_t *u = ev ? &ev->usage : NULL;
  int64_t out = u ? u->output_tokens : -1;
  if (rc == 0) rc = write_usage_num(e, "output_tokens", out, 1);
  if (rc == 0 && u && u->input_tokens >= 0) {
    int64_t cr = u->cache_read_tokens > 0 ? u->cache_read_tokens : 0;
    int64_t cc = u->cache_creation_tokens > 0 ? u->cache_creation_tokens : 0;
    rc = write_usage_num(e, "input_tokens", u->input_tokens - cr - cc, 0);
    if (rc == 0) rc = write_usage_num(e, "cache_creation_input_tokens", cc, 0);
    if (rc == 0) rc = write_usage_num(e, "cache_read_input_tokens", cr, 0);
  }
  if (rc == 0) rc = w(e, "}}\n\n");
  if (rc == 0) se_set(e, SE_ENDING);
  return rc;
}

static int se_error(px_senc_t *e, const px_ev_t *ev) {
  char msg[1024];
  size_t n = ev->text.len < sizeof(msg) - 1 ? ev->text.len : sizeof(msg) - 1;
  if (n) memcpy(msg, ev->text.ptr, n);
  msg[n] = 0;
  se_set(e, SE_DONE);
  return px_proto_anthropic.encode_stream_error(e->out, ev->errkind,
                                                n ? msg : "upstream stream failed");
}

int px_anthropic_senc_event(px_senc_t *e, const px_ev_t *ev) {
  int rc;
  if (e->st == SE_DONE) return ev->type == PX_EV_ERROR ? 0 : PX_EINVAL;
  if (ev->type == PX_EV_ERROR) return se_error(e, ev);
  if (ev->type == PX_EV_MESSAGE_START) {
    if (e->st != SE_INIT) return 0; /* a repeated start adds nothing */
    return write_message_start(e, ev);
  }
  rc = ensure_started(e);
  if (rc < 0) return rc;
  if (e->st == SE_ENDING && ev->type != PX_EV_MESSAGE_STOP &&
      ev->type != PX_EV_MESSAGE_DELTA)
    return PX_EINVAL;
  switch (ev->type) {
  case PX_EV_BLOCK_START: return se_block_start(e, ev);
  case PX_EV_DELTA: return se_delta(e, ev);
  case PX_EV_BLOCK_STOP: return se_block_stop(e, ev);
  case PX_EV_MESSAGE_DELTA:
    if (e->st == SE_ENDING) return 0; /* Anthropic sends one message_delta */
    return se_message_delta(e, ev);
  case PX_EV_MESSAGE_STOP:
    if (e->st != SE_ENDING) {
      rc = se_message_delta(e, NULL);
      if (rc < 0) return rc;
    }
    se_set(e, SE_DONE);
    return w(e, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
  default: return PX_EINVAL;
  }
}
