/* sse.c - incremental Server-Sent Events parser and writer (no I/O).
 *
 * Follows the WHATWG event-stream rules: lines end with LF, CRLF or CR (a CR
 * at the end of one feed and an LF at the start of the next are one line
 * end); a line starting with ':' is a comment; "field:value" drops one
 * optional space after the colon; a line without a colon is a field with an
 * empty value; a blank line dispatches the event, but only if at least one
 * data line was seen (an `event:`-only block is discarded). Unlike the
 * browser's "last event id", `id` here belongs to the event it appears in.
 *
 * Zero copy when possible: a single-line `data:` whose line lies wholly in
 * the fed chunk is handed to the callback as a view into that chunk; only
 * partial lines and multi-line data are copied.
 *
 * After PX_ETOOBIG the parser stays broken (every later feed returns
 * PX_ETOOBIG): the stream it belonged to is no longer trustworthy.
 */
#include "proxai/sse.h"

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PX_SSE_AVX2 1
#endif

#if defined(PX_SSE_AVX2)
/* eol thirty-two bytes at a time, where the CPU has AVX2 (end - s >= 32):
 * one pass for both bytes, the last block overlapping the one before */
__attribute__((target("avx2"))) static const char *eol_avx2(const char *s,
                                                            const char *end) {
  const __m256i lf = _mm256_set1_epi8('\n'), cr = _mm256_set1_epi8('\r');
  const char *b = s;
  for (;;) {
    int last = end - b <= 32;
    if (last) b = end - 32; /* its first places were tested: no CR or LF there */
    __m256i v = _mm256_loadu_si256((const __m256i *)b);
    uint32_t m = (uint32_t)_mm256_movemask_epi8(
        _mm256_or_si256(_mm256_cmpeq_epi8(v, lf), _mm256_cmpeq_epi8(v, cr)));
    if (m) return b + __builtin_ctz(m);
    if (last) return end;
    b += 32;
  }
}
#endif

/* The first CR or LF in [s, end), else end: two memchr passes beat a byte
 * loop (CR is rare in practice), one AVX2 pass beats both. */
static const char *eol(const char *s, const char *end) {
#if defined(PX_SSE_AVX2)
  if (end - s >= 32 && __builtin_cpu_supports("avx2")) return eol_avx2(s, end);
#endif
  const char *lf = memchr(s, '\n', (size_t)(end - s));
  if (lf == NULL) lf = end;
  const char *cr = memchr(s, '\r', (size_t)(lf - s));
  return cr ? cr : lf;
}

/* The data of the event being built: either a view into the current chunk
 * (active) or p->data. Lives for one px_sse_feed call. */
typedef struct {
  const char *ptr;
  size_t len;
  int active;
  int stop; /* the callback returned non-zero */
} dview_t;

void px_sse_init(px_sse_t *p, size_t cap, px_sse_cb cb, void *arg) {
  memset(p, 0, sizeof(*p));
  px_buf_init(&p->line, cap);
  px_buf_init(&p->data, cap);
  px_buf_init(&p->event, cap < 4096 ? cap : 4096);
  px_buf_init(&p->id, cap < 4096 ? cap : 4096);
  p->cb = cb;
  p->arg = arg;
}

void px_sse_done(px_sse_t *p) {
  px_buf_free(&p->line);
  px_buf_free(&p->data);
  px_buf_free(&p->event);
  px_buf_free(&p->id);
}

static void reset_event(px_sse_t *p, dview_t *v) {
  p->data.len = 0;
  p->event.len = 0;
  p->id.len = 0;
  p->has_data = 0;
  v->active = 0;
}

static int materialize(px_sse_t *p, dview_t *v) {
  if (!v->active) return 0;
  v->active = 0;
  return px_buf_append(&p->data, v->ptr, v->len);
}

static int dispatch(px_sse_t *p, dview_t *v) {
  if (!p->has_data) {
    reset_event(p, v);
    return 0;
  }
  px_sse_event_t ev;
  ev.event.ptr = p->event.data;
  ev.event.len = p->event.len;
  ev.id.ptr = p->id.data;
  ev.id.len = p->id.len;
  if (v->active) {
    ev.data.ptr = v->ptr;
    ev.data.len = v->len;
  } else {
    ev.data.ptr = p->data.len ? p->data.data : "";
    ev.data.len = p->data.len;
  }
  if (ev.event.ptr == NULL) ev.event.ptr = "";
  if (ev.id.ptr == NULL) ev.id.ptr = "";
  int rc = p->cb ? p->cb(p->arg, &ev) : 0;
  reset_event(p, v);
  if (rc != 0) v->stop = 1;
  return rc;
}

/* One complete line (without its terminator). in_chunk: the line lives in
 * the caller's chunk (a view on it may be kept until the feed returns). */
static int process_line(px_sse_t *p, dview_t *v, const char *line, size_t n,
                        int in_chunk) {
  if (n == 0) return dispatch(p, v);
  size_t flen;
  const char *val;
  /* the usual lines first, without looking for their colon */
  if (n >= 5 && memcmp(line, "data:", 5) == 0) {
    flen = 4;
    val = line + 5;
  } else if (n >= 6 && memcmp(line, "event:", 6) == 0) {
    flen = 5;
    val = line + 6;
  } else {
    if (line[0] == ':') return 0; /* comment */
    const char *colon = memchr(line, ':', n);
    flen = colon ? (size_t)(colon - line) : n;
    val = colon ? colon + 1 : line + n;
  }
  size_t vlen = (size_t)(line + n - val);
  if (vlen > 0 && val[0] == ' ') {
    val++;
    vlen--;
  }
  if (flen == 4 && memcmp(line, "data", 4) == 0) {
    if (!p->has_data) {
      p->has_data = 1;
      if (vlen > p->data.cap) return PX_ETOOBIG;
      if (in_chunk) {
        v->ptr = val;
        v->len = vlen;
        v->active = 1;
        return 0;
      }
      return px_buf_append(&p->data, val, vlen);
    }
    int rc = materialize(p, v);
    if (rc == 0) rc = px_buf_append(&p->data, "\n", 1);
    if (rc == 0) rc = px_buf_append(&p->data, val, vlen);
    return rc;
  }
  if (flen == 5 && memcmp(line, "event", 5) == 0) {
    p->event.len = 0;
    return px_buf_append(&p->event, val, vlen);
  }
  if (flen == 2 && memcmp(line, "id", 2) == 0) {
    if (memchr(val, 0, vlen) != NULL) return 0; /* ignored per spec */
    p->id.len = 0;
    return px_buf_append(&p->id, val, vlen);
  }
  return 0; /* retry and unknown fields: ignored */
}

static int broken(px_sse_t *p, dview_t *v) {
  reset_event(p, v);
  p->line.len = 0;
  p->saw_cr = 0;
  p->err = PX_ETOOBIG; /* sticky: see the file comment */
  return PX_ETOOBIG;
}

int px_sse_feed(px_sse_t *p, const char *d, size_t n) {
  dview_t v = {NULL, 0, 0, 0};
  int rc = 0;
  if (p->err) return p->err;
  const char *s = d, *end = d + n;
  if (p->saw_cr && s < end) {
    p->saw_cr = 0;
    if (*s == '\n') s++;
  }
  while (s < end) {
    const char *e = eol(s, end);
    if (e == end) { /* partial line: keep it */
      rc = px_buf_append(&p->line, s, (size_t)(end - s));
      if (rc < 0) return broken(p, &v);
      break;
    }
    int blank = 0;
    if (p->line.len > 0) {
      rc = px_buf_append(&p->line, s, (size_t)(e - s));
      if (rc < 0) return broken(p, &v);
      rc = process_line(p, &v, p->line.data, p->line.len, 0);
      p->line.len = 0;
    } else {
      /* same limit as for a line carried between feeds, so that the result
       * never depends on how the stream was chunked */
      if ((size_t)(e - s) > p->line.cap) return broken(p, &v);
      rc = process_line(p, &v, s, (size_t)(e - s), 1);
      blank = e == s && !v.stop && rc == 0;
    }
    s = e + 1;
    if (*e == '\r') {
      if (s < end) {
        if (*s == '\n') s++;
      } else {
        p->saw_cr = 1;
      }
    }
    if (blank && p->on_end) {
      rc = p->on_end(p->arg, (size_t)(s - d));
      if (rc != 0) v.stop = 1;
    }
    if (v.stop) {
      /* the callback asked to stop: its code is returned as is; the parser
       * stays consistent for a later feed (the rest of this chunk is
       * dropped) */
      reset_event(p, &v);
      return rc;
    }
    if (rc < 0) return broken(p, &v); /* PX_ETOOBIG / PX_ENOMEM */
    if (p->data.len + (v.active ? v.len : 0) + p->event.len > p->data.cap)
      return broken(p, &v);
  }
  if (materialize(p, &v) < 0) return broken(p, &v);
  return 0;
}

int px_sse_write(px_buf_t *out, const char *event, const char *data, size_t len) {
  size_t elen = event ? strlen(event) : 0;
  size_t need = (event ? 8 + elen : 0) + 6 + len + 2;
  int rc = px_buf_reserve(out, need);
  if (rc < 0) return rc;
  char *w = out->data + out->len;
  if (event) {
    memcpy(w, "event: ", 7);
    w += 7;
    memcpy(w, event, elen);
    w += elen;
    *w++ = '\n';
  }
  memcpy(w, "data: ", 6);
  w += 6;
  memcpy(w, data, len);
  w += len;
  *w++ = '\n';
  *w++ = '\n';
  out->len = (size_t)(w - out->data);
  return 0;
}
