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

#include "proxai/json.h"
#include "proxai/scrub.h"
#include "proxai/usage.h"

/* Which of keys[0..PX_WATCH_KEYS) d[0..n) holds as "key" (bit k for
 * keys[k]; a NULL key is never held): a quick test before a scan, one pass
 * for all of them. With SSE2, sixteen places at a time where a quote is
 * followed by one of the keys' first bytes; only those are compared. */
#define PX_WATCH_KEYS 4
static unsigned key_at(const char *d, size_t n, size_t j, const char *const *keys,
                       const size_t *kl) {
  unsigned found = 0;
  for (size_t k = 0; k < PX_WATCH_KEYS; k++)
    if (kl[k] > 0 && n - j > kl[k] + 1 && d[j + kl[k] + 1] == '"' &&
        memcmp(d + j + 1, keys[k], kl[k]) == 0)
      found |= 1u << k;
  return found;
}

static unsigned keys_in(const char *d, size_t n, const char *const *keys) {
  size_t kl[PX_WATCH_KEYS], i = 0;
  unsigned all = 0, found = 0;
  for (size_t k = 0; k < PX_WATCH_KEYS; k++) {
    kl[k] = keys[k] ? strlen(keys[k]) : 0;
    if (kl[k] > 0) all |= 1u << k;
  }
#if defined(__SSE2__)
  const __m128i qt = _mm_set1_epi8('"');
  __m128i f[PX_WATCH_KEYS];
  for (size_t k = 0; k < PX_WATCH_KEYS; k++) f[k] = _mm_set1_epi8(kl[k] ? keys[k][0] : 0);
  for (; i + 17 <= n && found != all; i += 16) {
    __m128i q = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(d + i)), qt);
    __m128i v = _mm_loadu_si128((const __m128i *)(d + i + 1));
    __m128i b =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, f[0]), _mm_cmpeq_epi8(v, f[1])),
                     _mm_or_si128(_mm_cmpeq_epi8(v, f[2]), _mm_cmpeq_epi8(v, f[3])));
    for (unsigned m = (unsigned)_mm_movemask_epi8(_mm_and_si128(q, b)); m; m &= m - 1)
      found |= key_at(d, n, i + (size_t)__builtin_ctz(m), keys, kl);
  }
#endif
  for (; i < n && found != all; i++)
    if (d[i] == '"') found |= key_at(d, n, i, keys, kl);
  return found;
}

/* An error frame in data (its "error" key seen): a top-level "error"
 * member that is not null. */
static int data_error(const char *d, size_t n) {
  static const char *const err[] = {"error"};
  size_t s, l;
  return px_json_find(d, n, err, 1, &s, &l) == PX_JSON_FOUND && d[s] != 'n';
}

/* One event, judged by the protocol's watch descriptor: terminal, error,
 * finish and usage. */
static int on_event(void *arg, const px_sse_event_t *ev) {
  px_passthru_t *pt = arg;
  const px_wire_watch_t *w = &px_proto_get(pt->proto)->watch;
  const char *d = ev->data.ptr;
  size_t n = ev->data.len;
  if (pt->answer) px_answer_event(w, ev->event, d, n, pt->answer);
  for (size_t k = 0; k < 3 && w->terminal_events[k]; k++)
    if (px_str_eq(ev->event, w->terminal_events[k])) {
      pt->terminal = 1;
      px_usage_read(w, d, n, w->terminal_outer, &pt->usage);
      return 0;
    }
  /* the keys this protocol's data chunks are tested for, in one pass */
  enum { K_ERROR, K_USAGE, K_FINISH };
  const char *keys[PX_WATCH_KEYS] = {NULL};
  unsigned has = 0;
  if (n > 0) {
    if (w->error_data && n > 9 && d[0] == '{') keys[K_ERROR] = "error";
    if (!w->start_event && !w->terminal_events[0]) keys[K_USAGE] = w->usage_obj;
    for (size_t k = 0; k < 2 && w->finish_keys[k]; k++)
      keys[K_FINISH + k] = w->finish_keys[k];
    if (keys[K_ERROR] || keys[K_USAGE] || keys[K_FINISH]) has = keys_in(d, n, keys);
  }
  if (w->error_event && px_str_eq(ev->event, w->error_event)) {
    pt->upstream_error = 1;
  } else if (w->start_event && px_str_eq(ev->event, w->start_event)) {
    px_usage_read(w, d, n, w->start_outer, &pt->usage);
  } else if (w->delta_event && px_str_eq(ev->event, w->delta_event)) {
    px_usage_t u = pt->usage;
    px_usage_read(w, d, n, NULL, &u);
    pt->usage.output_tokens = u.output_tokens;
  } else if (w->terminal_data && px_str_eq(ev->data, w->terminal_data)) {
    pt->terminal = 1;
  } else if ((has >> K_ERROR & 1) && data_error(d, n)) {
    pt->upstream_error = 1;
  } else if (has >> K_USAGE & 1) {
    /* usage rides on a data chunk: read as in a whole body (from its end,
     * where it sits; a repeated name: the last, as jansson) */
    px_usage_from_body(pt->proto, d, n, &pt->usage);
  }
  if (has >> K_FINISH) pt->terminal = 1;
  return 0;
}

void px_passthru_init(px_passthru_t *pt, px_proto_t proto, const char *model) {
  memset(pt, 0, sizeof(*pt));
  pt->proto = proto;
  pt->model = model;
  pt->usage.input_tokens = pt->usage.output_tokens = -1;
  px_sse_init(&pt->sse, PX_MAX_SSE_EVENT, on_event, pt);
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

/* Only complete events are passed on: the client's stream always stands at
 * an event boundary, so an error event can end it at any time. The bytes of
 * an unfinished event wait in pt->raw; an event over PX_MAX_SSE_EVENT
 * breaks the stream (none of its bytes are passed on). */
int px_passthru_feed(px_passthru_t *pt, const char *p, size_t n, px_buf_t *out) {
  if (pt->failed) return pt->failed;
  size_t out0 = out->len;
  int per_event = pt->model != NULL || pt->strip_usage;
  size_t start = 0;    /* first byte of p not passed on yet */
  size_t ev_start = 0; /* where the current event began in p (raw: before) */
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c != '\n' && c != '\r') { /* the rest of the line in one step */
      size_t e = (size_t)(px_sse_eol(p + i, p + n) - p);
      pt->cr_end = 0;
      pt->last_cr = 0;
      pt->line_len += e - i;
      i = e - 1;
      continue;
    }
    if (c == '\n' && pt->last_cr) {
      pt->last_cr = 0;
      /* the LF of an event's closing CRLF goes with that event: passed on
       * (or dropped) with it, never left over for the next one */
      if (pt->cr_end == 1 && per_event) rc = px_buf_append(out, "\n", 1);
      if (pt->cr_end) {
        ev_start = i + 1; /* watch-only: inside the region passed on below */
        if (per_event) start = i + 1;
      }
      pt->cr_end = 0;
      if (rc < 0) break;
      continue; /* second half of CRLF */
    }
    pt->cr_end = 0;
    pt->last_cr = c == '\r';
    if (pt->line_len > 0) {
      pt->line_len = 0;
      continue;
    }
    /* blank line: the event ends here */
    if (pt->raw.len + (i + 1 - ev_start) > PX_MAX_SSE_EVENT) {
      rc = PX_ETOOBIG;
      break;
    }
    ev_start = i + 1;
    pt->cr_end = c == '\r';
    if (!per_event) {
      if (pt->raw.len > 0) { /* its first bytes came in an earlier piece */
        rc = px_buf_append(out, pt->raw.data, pt->raw.len);
        px_buf_reset(&pt->raw);
        if (rc < 0) break;
      }
      continue; /* p[start..ev_start) goes out in one piece below */
    }
    if (pt->raw.len > 0) {
      rc = px_buf_append(&pt->raw, p + start, i + 1 - start);
      if (rc == 0) rc = emit_event(pt, pt->raw.data, pt->raw.len, out);
      px_buf_reset(&pt->raw);
    } else {
      rc = emit_event(pt, p + start, i + 1 - start, out);
    }
    if (rc < 0) break;
    if (rc == 1 && pt->cr_end) pt->cr_end = 2; /* dropped: its LF too */
    rc = 0;
    start = i + 1;
  }
  /* watch-only: the complete events of this piece (also before a failure) */
  if (!per_event && ev_start > start) {
    int e = px_buf_append(out, p + start, ev_start - start);
    if (rc == 0) rc = e;
    start = ev_start;
  }
  if (rc == 0 && start < n) rc = px_buf_append(&pt->raw, p + start, n - start);
  if (rc == 0) rc = px_sse_feed(&pt->sse, p, n);
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
}
