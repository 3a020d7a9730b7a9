/* passthru.c - same-protocol stream forwarding: complete events passed on,
 * the model written back when the route rewrites it, the usage-only chunk
 * dropped when the client did not ask for it, and the stream watched for
 * its terminal and error events and its usage (usage.c), all by the
 * protocol's watch descriptor.
 */
#include "proxai/passthru.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "proxai/json.h"
#include "proxai/scrub.h"
#include "proxai/usage.h"

/* Which of keys[0..PX_WATCH_KEYS) d[0..n) holds as "key" (bit k for
 * keys[k]; a key of length 0 is never held), as written or with escapes: a
 * quick test before a scan, one pass for all of them. With SSE2, sixteen
 * places at a time where a quote is followed by one of the keys' first
 * bytes; only those are compared (the last places in a block overlapping
 * the one before). The same pass notes whether "\u" occurs: only then may
 * a key be spelled with escapes (escaped_keys). */
#define PX_WATCH_KEYS 4
enum { PX_K_ERROR, PX_K_USAGE, PX_K_FINISH };
/* the keys held at the quote d[j] (j + 1 < n), as written */
static unsigned key_at(const char *d, size_t n, size_t j, const char *const *keys,
                       const unsigned char *kl) {
  unsigned found = 0;
  for (size_t k = 0; k < PX_WATCH_KEYS; k++)
    if (kl[k] > 0 && d[j + 1] == keys[k][0] && n - j > kl[k] + 1u &&
        d[j + kl[k] + 1] == '"' && px_mem_eq(d + j + 2, keys[k] + 1, kl[k] - 1u))
      found |= 1u << k;
  return found;
}

/* Whether the string at the quote d[j] names key (kl bytes), escapes
 * decoded: its closing quote within the 6 bytes an escape spells one byte
 * in at most (px_json_string_at: a string jansson would refuse names
 * nothing) */
static int escaped_key_at(const char *d, size_t n, size_t j, const char *key, size_t kl) {
  size_t e, lim = j + 2 + 6 * kl;
  int esc;
  if (px_json_string_at((const unsigned char *)d, lim < n ? lim : n, j + 1, &e, &esc) < 0)
    return 0;
  return px_json_name_is(d + j + 1, e - j - 1, key, kl);
}

/* The keys of want (bits) d[0..n) holds spelled with escapes: at every
 * quote, for a chunk with "\u" in it (the keys are letters and '_', which
 * only \u00XX escapes) */
__attribute__((noinline, cold)) static unsigned escaped_keys(const char *d, size_t n,
                                                             const char *const *keys,
                                                             const unsigned char *kl,
                                                             unsigned want) {
  unsigned found = 0;
  for (const char *q = d; (q = memchr(q, '"', (size_t)(d + n - q))) != NULL; q++) {
    size_t j = (size_t)(q - d);
    for (size_t k = 0; k < PX_WATCH_KEYS && j + 1 < n; k++)
      if ((want >> k & 1) && (d[j + 1] == keys[k][0] || d[j + 1] == '\\') &&
          escaped_key_at(d, n, j, keys[k], kl[k]))
        found |= 1u << k;
  }
  return found;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* keys_in's test thirty-two places at a time, where the CPU has AVX2 */
__attribute__((target("avx2"))) static unsigned keys_in_avx2(const char *d, size_t n,
                                                             const char *const *keys,
                                                             const unsigned char *kl,
                                                             unsigned all) {
  const __m256i qt = _mm256_set1_epi8('"'), bs = _mm256_set1_epi8('\\'),
                u = _mm256_set1_epi8('u');
  __m256i f[PX_WATCH_KEYS], bu = _mm256_setzero_si256();
  unsigned found = 0;
  for (size_t k = 0; k < PX_WATCH_KEYS; k++)
    f[k] = _mm256_set1_epi8(kl[k] ? keys[k][0] : 0);
  /* a quote at n - 1 opens no key: places up to n - 2 are tested */
  size_t i = 0, last = n - 33;
  for (int done = 0; !done && found != all; i += 32) {
    unsigned skip = 0;
    if (i >= last) { /* the last block, ending at n - 2 */
      skip = (unsigned)(i - last);
      i = last;
      done = 1;
    }
    __m256i r = _mm256_loadu_si256((const __m256i *)(d + i)),
            q = _mm256_cmpeq_epi8(r, qt);
    __m256i v = _mm256_loadu_si256((const __m256i *)(d + i + 1));
    __m256i b = _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpeq_epi8(v, f[0]), _mm256_cmpeq_epi8(v, f[1])),
        _mm256_or_si256(_mm256_cmpeq_epi8(v, f[2]), _mm256_cmpeq_epi8(v, f[3])));
    bu = _mm256_or_si256(
        bu, _mm256_and_si256(_mm256_cmpeq_epi8(r, bs), _mm256_cmpeq_epi8(v, u)));
    uint64_t m = (uint32_t)_mm256_movemask_epi8(_mm256_and_si256(q, b)) >> skip << skip;
    for (; m; m &= m - 1) found |= key_at(d, n, i + (size_t)__builtin_ctzll(m), keys, kl);
  }
  if (found != all && !_mm256_testz_si256(bu, bu))
    found |= escaped_keys(d, n, keys, kl, all & ~found);
  return found;
}
#define PX_HAVE_AVX2_KEYS 1
#endif

static unsigned keys_in(const char *d, size_t n, const char *const *keys,
                        const unsigned char *kl) {
  size_t i = 0;
  unsigned all = 0, found = 0;
  int esc = 0; /* "\u" seen */
  for (size_t k = 0; k < PX_WATCH_KEYS; k++)
    if (kl[k] > 0) all |= 1u << k;
#if defined(PX_HAVE_AVX2_KEYS)
  if (n >= 33 && __builtin_cpu_supports("avx2")) return keys_in_avx2(d, n, keys, kl, all);
#endif
#if defined(__SSE2__)
  if (n >= 17) {
    const __m128i qt = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'),
                  u = _mm_set1_epi8('u');
    __m128i f[PX_WATCH_KEYS], bu = _mm_setzero_si128();
    for (size_t k = 0; k < PX_WATCH_KEYS; k++)
      f[k] = _mm_set1_epi8(kl[k] ? keys[k][0] : 0);
    /* a quote at n - 1 opens no key: places up to n - 2 are tested */
    for (size_t last = n - 17, done = 0; !done && found != all; i += 16) {
      unsigned skip = 0;
      if (i >= last) { /* the last block, ending at n - 2 */
        skip = (unsigned)(i - last);
        i = last;
        done = 1;
      }
      __m128i r = _mm_loadu_si128((const __m128i *)(d + i)), q = _mm_cmpeq_epi8(r, qt);
      __m128i v = _mm_loadu_si128((const __m128i *)(d + i + 1));
      __m128i b =
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, f[0]), _mm_cmpeq_epi8(v, f[1])),
                       _mm_or_si128(_mm_cmpeq_epi8(v, f[2]), _mm_cmpeq_epi8(v, f[3])));
      bu = _mm_or_si128(bu, _mm_and_si128(_mm_cmpeq_epi8(r, bs), _mm_cmpeq_epi8(v, u)));
      unsigned m = (unsigned)_mm_movemask_epi8(_mm_and_si128(q, b)) >> skip << skip;
      for (; m; m &= m - 1) found |= key_at(d, n, i + (size_t)__builtin_ctz(m), keys, kl);
    }
    esc = _mm_movemask_epi8(bu) != 0;
    i = n;
  }
#endif
  for (; i + 1 < n && found != all; i++) { /* a quote at n - 1 opens no key */
    if (d[i] == '"') found |= key_at(d, n, i, keys, kl);
    esc |= d[i] == '\\' && d[i + 1] == 'u';
  }
  if (esc && found != all) found |= escaped_keys(d, n, keys, kl, all & ~found);
  return found;
}

/* An error frame in data (its "error" key seen): a top-level "error"
 * member that is not null. */
static int data_error(const char *d, size_t n) {
  static const char *const err[] = {"error"};
  size_t s, l;
  return px_json_find(d, n, err, 1, &s, &l) == PX_JSON_FOUND && d[s] != 'n';
}

/* Usage on a data chunk, read as in a whole body (from its end, where it
 * sits; a repeated name: the last, as jansson). Read back from the end, the
 * answer depends on the bytes from the usage member's name on alone (and
 * the byte before it, not a backslash: the quote opens the name) in any
 * object (d[0] == '{'): a chunk ending in the bytes the last read depended
 * on reads the same and is not read again (Gemini repeats its usage on
 * every chunk). */
#define PX_USAGE_TAIL_MAX 256
static void chunk_usage(px_passthru_t *pt, const char *d, size_t n) {
  px_buf_t *t = &pt->utail;
  if (t->len > 0 && n >= t->len && d[0] == '{' &&
      memcmp(d + n - t->len, t->data, t->len) == 0)
    return;
  px_buf_reset(t);
  size_t at;
  if (!px_usage_scan_at(pt->proto, d, n, &pt->usage, &at)) return;
  if (at != PX_JSON_NPOS && at > 0 && at < n && d[at - 1] != '\\' && d[0] == '{' &&
      n - at < PX_USAGE_TAIL_MAX)
    (void)px_buf_append(t, d + at - 1, n - at + 1); /* none kept if it fails */
}

/* a is the name lit of length len (NULL: no such name); the lengths are
 * taken once per stream (px_passthru_init), not per event */
static int name_is(px_str_t a, const char *lit, size_t len) {
  return lit != NULL && a.len == len && memcmp(a.ptr, lit, len) == 0;
}

/* A traced answer's id, model and finish reason on one event: where its
 * start, delta and terminal events keep them (outer: the object that holds
 * them), as px_answer_event reads them */
static void answer_in(px_passthru_t *pt, const char *d, size_t n, const char *outer) {
  if (n > 0 && d[0] == '{') px_answer_read(pt->w, d, n, outer, pt->answer);
}

/* ... or on a data chunk, where every chunk says it all: the id and the
 * model from the first that has them; the finish reason of a chunk that
 * holds its name (has: the keys the scan found, when the name is one of
 * them) and does not end in it being null ("finish_reason":null}]}: the
 * last one, as the read back from the end meets it first, says none) */
static void chunk_answer(px_passthru_t *pt, const char *d, size_t n, unsigned has) {
  px_answer_t *a = pt->answer;
  if (n == 0 || d[0] != '{') return; /* [DONE] and the like */
  if (!a->id[0] || !a->model[0]) px_answer_ids(pt->w, d, n, a);
  if (pt->fin_bit && !(has & pt->fin_bit)) return;
  size_t e = n, nl = pt->fin_null_len;
  if (n > 4 && memcmp(d + n - 3, "}]}", 3) == 0 && d[n - 4] != '}' && d[n - 4] != ']')
    e = n - 3; /* a choice's end, as Chat's chunks end */
  else
    while (e > 0 && (d[e - 1] == '}' || d[e - 1] == ']')) e--;
  if (e > nl && d[e - nl - 1] != '\\' && px_mem_eq(d + e - nl, pt->fin_null, nl)) return;
  px_answer_finish(pt->w, d, n, a);
}

/* One event, judged by the protocol's watch descriptor: terminal, error,
 * finish and usage (and a traced answer's id, model and finish reason). */
static int on_event(void *arg, const px_sse_event_t *ev) {
  px_passthru_t *pt = arg;
  const px_wire_watch_t *w = pt->w;
  const char *d = ev->data.ptr;
  size_t n = ev->data.len;
  const unsigned char *nl = pt->name_len;
  for (size_t k = 0; k < 3 && w->terminal_events[k]; k++)
    if (name_is(ev->event, w->terminal_events[k], nl[PX_N_TERMINAL + k])) {
      pt->terminal = 1;
      px_usage_read(w, d, n, w->terminal_outer, &pt->usage);
      if (pt->answer) answer_in(pt, d, n, w->terminal_outer);
      return 0;
    }
  /* the keys this protocol's data chunks are tested for, in one pass
   * (their lengths set at init: 0 for a key not tested) */
  const char *keys[PX_WATCH_KEYS] = {"error", w->usage_obj, w->finish_keys[0],
                                     w->finish_keys[1]};
  unsigned has = 0;
  if (n > 0 && pt->keys) {
    unsigned char kl[PX_WATCH_KEYS];
    memcpy(kl, pt->klen, sizeof(kl));
    if (n <= 9 || d[0] != '{') kl[PX_K_ERROR] = 0;
    has = keys_in(d, n, keys, kl);
  }
  if (name_is(ev->event, w->error_event, nl[PX_N_ERROR])) {
    pt->upstream_error = 1;
  } else if (name_is(ev->event, w->start_event, nl[PX_N_START])) {
    px_usage_read(w, d, n, w->start_outer, &pt->usage);
    if (pt->answer) answer_in(pt, d, n, w->start_outer);
  } else if (name_is(ev->event, w->delta_event, nl[PX_N_DELTA])) {
    px_usage_t u = pt->usage;
    px_usage_read(w, d, n, NULL, &u);
    pt->usage.output_tokens = u.output_tokens;
    if (pt->answer) answer_in(pt, d, n, w->delta_outer);
  } else if (name_is(ev->data, w->terminal_data, nl[PX_N_DATA])) {
    pt->terminal = 1;
  } else if ((has >> PX_K_ERROR & 1) && data_error(d, n)) {
    pt->upstream_error = 1;
  } else if (has >> PX_K_USAGE & 1) {
    chunk_usage(pt, d, n);
  }
  if (has >> PX_K_FINISH) pt->terminal = 1;
  if (pt->fin_null_len) chunk_answer(pt, d, n, has);
  return 0;
}

void px_passthru_answer(px_passthru_t *pt, px_answer_t *a) {
  /* a data-only stream's "name":null and the finish reason's bit when its
   * name is one of the keys the scan tests for (then a chunk without it
   * has none): the protocol's, made at its first traced stream */
  static struct {
    char null_text[40];
    unsigned char len, bit, made;
  } fin[PX_PROTO_COUNT];
  const px_wire_watch_t *w = pt->w;
  pt->answer = a;
  if (a == NULL || w->start_event || w->terminal_events[0] || !w->finish_key) return;
  if (!fin[pt->proto].made) {
    size_t fl = strlen(w->finish_key);
    if (fl + 7 > sizeof(fin[0].null_text)) return; /* never: the names are short */
    char *t = fin[pt->proto].null_text;
    t[0] = '"';
    memcpy(t + 1, w->finish_key, fl);
    memcpy(t + 1 + fl, "\":null", 6);
    fin[pt->proto].len = (unsigned char)(fl + 7);
    for (size_t k = 0; k < 2 && w->finish_keys[k]; k++)
      if (strcmp(w->finish_keys[k], w->finish_key) == 0)
        fin[pt->proto].bit = (unsigned char)(1u << (PX_K_FINISH + k));
    fin[pt->proto].made = 1;
  }
  pt->fin_null = fin[pt->proto].null_text;
  pt->fin_null_len = fin[pt->proto].len;
  pt->fin_bit = fin[pt->proto].bit;
}

static int on_event_end(void *arg, size_t end);

void px_passthru_init(px_passthru_t *pt, px_proto_t proto, const char *model) {
  memset(pt, 0, sizeof(*pt));
  pt->proto = proto;
  pt->model = model;
  pt->usage.input_tokens = pt->usage.output_tokens = -1;
  const px_wire_watch_t *w = pt->w = &px_proto_get(proto)->watch;
  /* error frames, usage on data chunks (no event carries it), finish keys */
  if (w->error_data) pt->klen[PX_K_ERROR] = 5;
  if (!w->start_event && !w->terminal_events[0])
    pt->klen[PX_K_USAGE] = (unsigned char)strlen(w->usage_obj);
  for (size_t k = 0; k < 2 && w->finish_keys[k]; k++)
    pt->klen[PX_K_FINISH + k] = (unsigned char)strlen(w->finish_keys[k]);
  for (size_t k = 0; k < PX_WATCH_KEYS; k++) pt->keys |= pt->klen[k] > 0;
  const char *names[PX_N_COUNT] = {
      w->terminal_events[0], w->terminal_events[1], w->terminal_events[2], w->error_event,
      w->start_event,        w->delta_event,        w->terminal_data};
  for (size_t k = 0; k < PX_N_COUNT; k++)
    pt->name_len[k] = names[k] ? (unsigned char)strlen(names[k]) : 0;
  px_sse_init(&pt->sse, PX_MAX_SSE_EVENT, on_event, pt);
  pt->sse.on_end = on_event_end;
  px_buf_init(&pt->utail, PX_USAGE_TAIL_MAX);
  px_buf_init(&pt->raw, PX_MAX_SSE_EVENT);
}

/* The usage-only chunk a Chat upstream sends when asked for
 * stream_options.include_usage: usage is an object and choices is empty (or
 * absent). data is the event's data text. */
static int usage_only_chunk(const char *d, size_t n) {
  static const char *const usage[] = {"usage"};
  static const char *const choices[] = {"choices"};
  size_t s, l;
  if (px_json_find(d, n, usage, 1, &s, &l) != PX_JSON_FOUND || d[s] != '{') return 0;
  int rc = px_json_find(d, n, choices, 1, &s, &l);
  if (rc == PX_JSON_ABSENT) return 1;
  if (rc != PX_JSON_FOUND || d[s] != '[') return 0;
  for (size_t i = s + 1; i < s + l; i++)
    if (d[i] != ' ' && d[i] != '\t' && d[i] != '\r' && d[i] != '\n') return d[i] == ']';
  return 0;
}

/* One complete raw event: rewrite the model, or drop it (the usage chunk
 * the client did not ask for), and append it to out. 1: dropped. */
static int emit_event(px_passthru_t *pt, const char *p, size_t n, px_buf_t *out) {
  const px_wire_watch_t *w = &px_proto_get(pt->proto)->watch;
  const char *dl = NULL;
  for (size_t i = 0; i + 5 <= n; i++) {
    if ((i == 0 || p[i - 1] == '\n' || p[i - 1] == '\r') && memcmp(p + i, "data:", 5) == 0) {
      dl = p + i;
      break;
    }
  }
  if (dl == NULL) return px_buf_append(out, p, n);
  size_t ds = (size_t)(dl - p) + 5;
  if (ds < n && p[ds] == ' ') ds++;
  size_t de = ds;
  while (de < n && p[de] != '\n' && p[de] != '\r') de++;
  if (ds >= de || p[ds] != '{') return px_buf_append(out, p, n);
  if (pt->strip_usage && usage_only_chunk(p + ds, de - ds)) return 1; /* dropped */
  if (pt->model == NULL) return px_buf_append(out, p, n);
  int rc = px_buf_append(out, p, ds);
  if (rc < 0) return rc;
  rc = px_json_replace_str(out, p + ds, de - ds, w->model_path, (size_t)w->model_depth,
                           pt->model);
  /* data that is not a JSON object went out as it came (PX_JSON_BAD or
   * MORE): only a buffer error breaks the stream */
  if (rc < PX_JSON_MORE) return rc;
  return px_buf_append(out, p + de, n - de);
}

static int fail(px_passthru_t *pt, int rc) {
  pt->failed = rc;
  px_buf_free(&pt->raw);
  return rc;
}

/* One feed: its piece, where the bytes go, the first byte of the piece not
 * passed on yet (start) and where the current event began (ev_start; raw:
 * before the piece). per_event: each event rewritten or dropped on its
 * own, else the complete events go out in one piece. */
struct px_pt_feed {
  const char *p;
  size_t n;
  px_buf_t *out;
  size_t start, ev_start;
  int per_event;
};

/* The SSE parser's blank line hook: an event (dispatched to on_event, or
 * comments only) ends at p[end - 1], its bytes p[start..end) after those
 * of pt->raw (its first bytes, from an earlier piece). Framing and watching
 * are one pass over the bytes. */
static int on_event_end(void *arg, size_t end) {
  px_passthru_t *pt = arg;
  px_pt_feed_t *f = pt->feed;
  const char *p = f->p;
  /* a CRLF's LF is counted with the next event in the size (as CR alone) */
  size_t size = pt->raw.len + (end - f->ev_start) -
                (end >= 2 && p[end - 1] == '\n' && p[end - 2] == '\r');
  if (size > PX_MAX_SSE_EVENT) return PX_ETOOBIG;
  int cr = p[end - 1] == '\r' && end == f->n; /* its LF may open the next piece */
  int rc = 0;
  f->ev_start = end;
  if (!f->per_event) {
    pt->cr_end = cr;
    if (pt->raw.len > 0) { /* its first bytes came in an earlier piece */
      rc = px_buf_append(f->out, pt->raw.data, pt->raw.len);
      px_buf_reset(&pt->raw);
    }
    return rc; /* p[start..ev_start) goes out in one piece at the end */
  }
  if (pt->raw.len > 0) {
    rc = px_buf_append(&pt->raw, p + f->start, end - f->start);
    if (rc == 0) rc = emit_event(pt, pt->raw.data, pt->raw.len, f->out);
    px_buf_reset(&pt->raw);
  } else {
    rc = emit_event(pt, p + f->start, end - f->start, f->out);
  }
  f->start = end;
  if (rc < 0) return rc;
  pt->cr_end = cr ? 1 + rc : 0; /* dropped: its LF too */
  return 0;
}

/* Only complete events are passed on: the client's stream always stands at
 * an event boundary, so an error event can end it at any time. The bytes of
 * an unfinished event wait in pt->raw; an event over PX_MAX_SSE_EVENT
 * breaks the stream (none of its bytes are passed on). */
int px_passthru_feed(px_passthru_t *pt, const char *p, size_t n, px_buf_t *out) {
  if (pt->failed) return pt->failed;
  size_t out0 = out->len;
  px_pt_feed_t f = {p, n, out, 0, 0, pt->model != NULL || pt->strip_usage};
  int rc = 0;
  if (pt->cr_end && n > 0 && p[0] == '\n') {
    /* the LF of an event's closing CRLF goes with that event: passed on
     * (or dropped) with it, never left over for the next one */
    if (f.per_event && pt->cr_end == 1) rc = px_buf_append(out, "\n", 1);
    f.ev_start = 1; /* watch-only: inside the region passed on below */
    if (f.per_event) f.start = 1;
  }
  if (n > 0) pt->cr_end = 0;
  pt->feed = &f;
  if (rc == 0) rc = px_sse_feed(&pt->sse, p, n);
  pt->feed = NULL;
  /* watch-only: the complete events of this piece (also before a failure) */
  if (!f.per_event && f.ev_start > f.start) {
    int e = px_buf_append(out, p + f.start, f.ev_start - f.start);
    if (rc == 0) rc = e;
    f.start = f.ev_start;
  }
  if (rc == 0 && f.start < n) rc = px_buf_append(&pt->raw, p + f.start, n - f.start);
  /* an upstream error event is passed on in the piece that completes it:
   * from that piece on, what is passed on holds no configured secret (SPEC
   * 10; the events of a stream without an error are never scanned) */
  if (pt->upstream_error && out->len > out0) px_scrub(out->data + out0, out->len - out0);
  return rc < 0 ? fail(pt, rc) : 0;
}

int px_passthru_finish(const px_passthru_t *pt) {
  /* an unfinished last event is dropped (SSE: it is never dispatched) */
  return !pt->failed && (pt->terminal || pt->upstream_error);
}

void px_passthru_done(px_passthru_t *pt) {
  px_sse_done(&pt->sse);
  px_buf_free(&pt->raw);
  px_buf_free(&pt->utail);
}
