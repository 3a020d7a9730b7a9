/*
 * mock_upstream - a scripted HTTP/1.1 upstream for proxai's integration tests
 * and benchmarks. Single-threaded, libuv + llhttp + jansson.
 *
 * It answers the three LLM wire protocols with protocol-correct default
 * responses, and can be scripted through a control API under /_mock/ to
 * return arbitrary statuses, bodies and SSE streams, paced, split into
 * pieces, or broken by faults (RST, FIN, stall). test/mock/README.md is the
 * reference for the control API.
 *
 * Connection life:
 *
 *   accept -> READING --request complete--> RESPONDING --all writes done--> READING
 *                 |  (parser paused while RESPONDING, input kept buffered)    |
 *                 +--EOF/error/fault/connection close--> CLOSING -> freed in last
 * close_cb
 *
 * Response pump phases: START -> ITEMS -> END -> DRAIN -> finished
 *                                  \-> FAULT (after draining writes) / STALLED
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <llhttp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define MOCK_MAX_HEAD (1u << 20)  /* request line + headers */
#define MOCK_MAX_BODY (64u << 20) /* request body */
#define MOCK_MAX_INBUF (MOCK_MAX_BODY + MOCK_MAX_HEAD)
#define MOCK_WRITE_HWM (256u << 10) /* max bytes handed to uv_write, not yet done */
#define MOCK_DEFAULT_MAX_RECORDS 10000

/* ---- small capped buffer -------------------------------------------------- */

typedef struct {
  char *p;
  size_t len, cap;
} sbuf_t;

static int sbuf_add(sbuf_t *b, const char *p, size_t n, size_t limit) {
  if (n == 0) return 0;
  if (b->len + n > limit) return -1;
  if (b->len + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + n + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) return -1;
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

static int sbuf_adds(sbuf_t *b, const char *s) {
  return sbuf_add(b, s, strlen(s), SIZE_MAX / 2);
}

static int sbuf_printf(sbuf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int sbuf_printf(sbuf_t *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof tmp) return -1;
  return sbuf_add(b, tmp, (size_t)n, SIZE_MAX / 2);
}

static void sbuf_free(sbuf_t *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* ---- global state --------------------------------------------------------- */

typedef struct conn conn_t;

static struct {
  uv_loop_t *loop;
  uv_tcp_t server;
  uv_signal_t sigterm, sigint;
  int shutting_down;
  json_t *queue;   /* array of scripted entries */
  json_t *records; /* array of recorded requests */
  size_t max_records;
  unsigned gen;  /* bumped by reset: connections count once per generation */
  conn_t *conns; /* all open connections */
  uint64_t seq;  /* id counter for default answers */
  struct {
    uint64_t connections_total, connections_closed_by_peer, requests, responses_aborted,
        responses_completed, stream_events_written, faults, records_dropped, tcp_accepted;
  } st;
} g;

/* ---- connection and response ---------------------------------------------- */

enum { F_NONE = 0, F_RESET, F_CLOSE, F_STALL };
enum { PH_START = 0, PH_ITEMS, PH_END, PH_DRAIN, PH_FAULT, PH_STALLED };

typedef struct {
  sbuf_t head; /* status line + headers (empty for raw) */
  sbuf_t body; /* non-SSE body or raw bytes */
  int sse, raw, close_after;
  int data;    /* answers a recorded request (not the control API) */
  sbuf_t *pre; /* SSE events before the repeat */
  size_t npre;
  sbuf_t rep; /* repeated event */
  uint64_t nrep;
  sbuf_t *tail; /* SSE events after the repeat */
  size_t ntail;
  int64_t headers_delay_ms, delay_ms, chunk, chunk_delay_ms;
  int fault;
  int64_t fault_after; /* <0: before headers */
  int phase;
  int delayed;  /* the delay for the next piece has been waited */
  uint64_t idx; /* SSE events fully written */
  size_t off;   /* offset in the current event / body */
} resp_t;

struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  int open_handles;
  int closing;
  conn_t *prev, *next;
  llhttp_t parser;
  sbuf_t in; /* received, not yet parsed */
  /* request being parsed */
  sbuf_t url, hfield, hval, body;
  json_t *headers;
  int in_value;
  size_t head_bytes;
  int req_too_big;
  int keep_alive;
  char method[24];
  /* response */
  resp_t *resp;
  size_t inflight;
  int is_data; /* carried a non-control request in generation data_gen */
  unsigned data_gen;
};

typedef struct {
  uv_write_t req;
  conn_t *c;
  size_t n;
  char data[];
} wreq_t;

static void conn_close(conn_t *c, int by_peer, int reset);
static void conn_drive(conn_t *c);
static void resp_pump(conn_t *c);

static void resp_free(resp_t *r) {
  if (!r) return;
  sbuf_free(&r->head);
  sbuf_free(&r->body);
  for (size_t i = 0; i < r->npre; i++) sbuf_free(&r->pre[i]);
  for (size_t i = 0; i < r->ntail; i++) sbuf_free(&r->tail[i]);
  free(r->pre);
  free(r->tail);
  sbuf_free(&r->rep);
  free(r);
}

static void req_reset(conn_t *c) {
  c->url.len = c->hfield.len = c->hval.len = c->body.len = 0;
  json_decref(c->headers);
  c->headers = json_object();
  c->in_value = 0;
  c->head_bytes = 0;
  c->req_too_big = 0;
  c->method[0] = '\0';
}

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  if (--c->open_handles > 0) return;
  if (c->prev)
    c->prev->next = c->next;
  else
    g.conns = c->next;
  if (c->next) c->next->prev = c->prev;
  resp_free(c->resp);
  sbuf_free(&c->in);
  sbuf_free(&c->url);
  sbuf_free(&c->hfield);
  sbuf_free(&c->hval);
  sbuf_free(&c->body);
  json_decref(c->headers);
  free(c);
}

static int conn_is_data(const conn_t *c) {
  return c->is_data && c->data_gen == g.gen;
}

static void conn_close(conn_t *c, int by_peer, int reset) {
  if (c->closing) return;
  c->closing = 1;
  if (by_peer && conn_is_data(c)) g.st.connections_closed_by_peer++;
  if (by_peer && c->resp) g.st.responses_aborted++;
  uv_read_stop((uv_stream_t *)&c->tcp);
  if (uv_is_active((uv_handle_t *)&c->timer)) uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
  if (!reset || uv_tcp_close_reset(&c->tcp, on_conn_closed) != 0)
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_write(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  conn_t *c = w->c;
  c->inflight -= w->n;
  free(w);
  if (c->closing) return;
  if (status < 0) {
    conn_close(c, 1, 0);
    return;
  }
  if (c->resp) resp_pump(c);
}

/* Hands bytes to libuv; with `frame` they become one HTTP chunk. */
static int conn_write2(conn_t *c, const char *a, size_t an, const char *b, size_t bn,
                       int frame) {
  char hdr[32] = "";
  size_t hn = 0;
  if (frame) hn = (size_t)snprintf(hdr, sizeof hdr, "%zx\r\n", an + bn);
  size_t n = hn + an + bn + (frame ? 2 : 0);
  wreq_t *w = malloc(sizeof *w + n);
  if (!w) return -1;
  w->c = c;
  w->n = n;
  memcpy(w->data, hdr, hn);
  if (an) memcpy(w->data + hn, a, an);
  if (bn) memcpy(w->data + hn + an, b, bn);
  if (frame) memcpy(w->data + hn + an + bn, "\r\n", 2);
  uv_buf_t buf = uv_buf_init(w->data, (unsigned)n);
  int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_write);
  if (rc < 0) {
    free(w);
    return rc;
  }
  c->inflight += n;
  return 0;
}

static int conn_write(conn_t *c, const char *p, size_t n, int frame) {
  return conn_write2(c, p, n, NULL, 0, frame);
}

static void on_timer(uv_timer_t *t) {
  conn_t *c = t->data;
  if (!c->closing && c->resp) resp_pump(c);
}

static uint64_t resp_nevents(const resp_t *r) {
  return r->npre + r->nrep + r->ntail;
}

static const sbuf_t *resp_event(const resp_t *r, uint64_t i) {
  if (i < r->npre) return &r->pre[i];
  i -= r->npre;
  if (i < r->nrep) return &r->rep;
  i -= r->nrep;
  return &r->tail[i];
}

static void resp_finish(conn_t *c) {
  resp_t *r = c->resp;
  int close_after = r->close_after || !c->keep_alive;
  if (r->data) g.st.responses_completed++;
  resp_free(r);
  c->resp = NULL;
  if (close_after) {
    conn_close(c, 0, 0);
    return;
  }
  req_reset(c);
  llhttp_resume(&c->parser);
  conn_drive(c);
}

static int resp_wait(conn_t *c, int64_t ms) {
  resp_t *r = c->resp;
  if (ms <= 0 || r->delayed) return 0;
  r->delayed = 1;
  uv_timer_start(&c->timer, on_timer, (uint64_t)ms, 0);
  return 1;
}

static void resp_fault(conn_t *c) {
  resp_t *r = c->resp;
  if (c->inflight > 0) { /* let what was written reach the peer first */
    r->phase = PH_FAULT;
    return;
  }
  g.st.faults++;
  switch (r->fault) {
    case F_STALL:
      r->phase = PH_STALLED;
      break;
    case F_RESET:
      conn_close(c, 0, 1);
      break;
    default:
      conn_close(c, 0, 0);
      break;
  }
}

static void resp_pump(conn_t *c) {
  while (!c->closing && c->resp) {
    resp_t *r = c->resp;
    if (uv_is_active((uv_handle_t *)&c->timer)) return;
    if (c->inflight >= MOCK_WRITE_HWM) return;
    switch (r->phase) {
      case PH_START: {
        if (r->fault && r->fault_after < 0) {
          resp_fault(c);
          return;
        }
        if (resp_wait(c, r->headers_delay_ms)) return;
        r->delayed = 0;
        int simple = !r->sse && !r->raw && r->delay_ms == 0 && r->chunk == 0 && !r->fault;
        if (simple) {
          if (conn_write2(c, r->head.p, r->head.len, r->body.p, r->body.len, 0) < 0)
            goto fail;
          r->phase = PH_END;
        } else {
          if (r->head.len && conn_write(c, r->head.p, r->head.len, 0) < 0) goto fail;
          r->phase = PH_ITEMS;
        }
        break;
      }
      case PH_ITEMS: {
        const char *p;
        size_t len;
        if (r->sse) {
          if (r->off == 0 && r->fault && r->idx >= (uint64_t)r->fault_after) {
            resp_fault(c);
            return;
          }
          if (r->idx >= resp_nevents(r)) {
            if (r->fault) {
              resp_fault(c);
              return;
            }
            r->phase = PH_END;
            break;
          }
          const sbuf_t *ev = resp_event(r, r->idx);
          p = ev->p;
          len = ev->len;
        } else {
          p = r->body.p;
          len = r->body.len;
          if (r->fault && (uint64_t)r->fault_after < len) len = (size_t)r->fault_after;
          if (r->off >= len) {
            if (r->fault) {
              resp_fault(c);
              return;
            }
            r->phase = PH_END;
            break;
          }
        }
        if (resp_wait(c, r->off == 0 ? r->delay_ms : r->chunk_delay_ms)) return;
        r->delayed = 0;
        size_t n = len - r->off;
        if (r->chunk > 0 && n > (uint64_t)r->chunk) n = (size_t)r->chunk;
        if (n && conn_write(c, p + r->off, n, r->sse) < 0) goto fail;
        r->off += n;
        if (r->sse && r->off >= len) {
          r->off = 0;
          r->idx++;
          g.st.stream_events_written++;
        }
        break;
      }
      case PH_END:
        if (r->sse && conn_write(c, "0\r\n\r\n", 5, 0) < 0) goto fail;
        if (r->raw) r->close_after = 1;
        r->phase = PH_DRAIN;
        break;
      case PH_DRAIN:
        if (c->inflight > 0) return;
        resp_finish(c);
        return;
      case PH_FAULT:
        resp_fault(c);
        return;
      case PH_STALLED:
        return;
    }
  }
  return;
fail:
  conn_close(c, 1, 0);
}

/* ---- building responses --------------------------------------------------- */

static const char *reason_phrase(int s) {
  switch (s) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 529:
      return "Overloaded";
    default:
      return "Status";
  }
}

static int valid_header_text(const char *s, int name) {
  if (name && !*s) return 0;
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '\r' || ch == '\n' || ch == 0) return 0;
    if (name && (ch <= ' ' || ch == ':' || ch >= 127)) return 0;
  }
  return 1;
}

static int sse_event_text(json_t *ev, sbuf_t *out, char *err, size_t errlen) {
  if (json_is_string(ev))
    return sbuf_add(out, json_string_value(ev), json_string_length(ev), SIZE_MAX / 2);
  if (json_is_object(ev)) {
    json_t *name = json_object_get(ev, "event"), *data = json_object_get(ev, "data");
    const char *k;
    json_t *v;
    json_object_foreach(ev, k, v) {
      if (strcmp(k, "event") && strcmp(k, "data")) {
        snprintf(err, errlen, "sse event object: unknown key '%s'", k);
        return -1;
      }
    }
    if ((name && !json_is_string(name)) || !data) {
      snprintf(err, errlen, "sse event object needs \"data\" and a string \"event\"");
      return -1;
    }
    if (name) {
      sbuf_adds(out, "event: ");
      sbuf_adds(out, json_string_value(name));
      sbuf_adds(out, "\n");
    }
    sbuf_adds(out, "data: ");
    if (json_is_string(data)) {
      sbuf_adds(out, json_string_value(data));
    } else {
      char *s = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY);
      if (!s) return -1;
      sbuf_adds(out, s);
      free(s);
    }
    sbuf_adds(out, "\n\n");
    return 0;
  }
  snprintf(err, errlen, "sse events must be strings or {\"event\",\"data\"} objects");
  return -1;
}

static int get_nonneg(json_t *e, const char *key, int64_t *out, char *err,
                      size_t errlen) {
  json_t *v = json_object_get(e, key);
  *out = 0;
  if (!v) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 0) {
    snprintf(err, errlen, "\"%s\" must be a non-negative integer", key);
    return -1;
  }
  *out = json_integer_value(v);
  return 0;
}

static const char *const entry_keys[] = {"match",
                                         "path",
                                         "repeat",
                                         "status",
                                         "headers",
                                         "body",
                                         "sse",
                                         "sse_repeat",
                                         "sse_tail",
                                         "delay_ms",
                                         "headers_delay_ms",
                                         "chunk",
                                         "chunk_delay_ms",
                                         "fault",
                                         "fault_after",
                                         "raw",
                                         "default",
                                         "connection_close",
                                         "comment",
                                         NULL};

/* Validates a scripted entry and, with `out`, builds its response. */
static int entry_build(json_t *e, resp_t **out, char *err, size_t errlen) {
  resp_t *r = NULL;
  if (!json_is_object(e)) {
    snprintf(err, errlen, "each entry must be a JSON object");
    return -1;
  }
  const char *k;
  json_t *v;
  json_object_foreach(e, k, v) {
    int known = 0;
    for (int i = 0; entry_keys[i]; i++) known |= !strcmp(k, entry_keys[i]);
    if (!known) {
      snprintf(err, errlen, "unknown key '%s'", k);
      return -1;
    }
  }
  if ((v = json_object_get(e, "match")) && !json_is_string(v)) {
    snprintf(err, errlen, "\"match\" must be a string");
    return -1;
  }
  if ((v = json_object_get(e, "path")) && !json_is_string(v)) {
    snprintf(err, errlen, "\"path\" must be a string");
    return -1;
  }
  const char *bools[] = {"repeat", "default", "connection_close"};
  for (int i = 0; i < 3; i++) {
    if ((v = json_object_get(e, bools[i])) && !json_is_boolean(v)) {
      snprintf(err, errlen, "\"%s\" must be a boolean", bools[i]);
      return -1;
    }
  }
  int status = 200;
  if ((v = json_object_get(e, "status"))) {
    if (!json_is_integer(v) || json_integer_value(v) < 100 ||
        json_integer_value(v) > 999) {
      snprintf(err, errlen, "\"status\" must be an integer 100..999");
      return -1;
    }
    status = (int)json_integer_value(v);
  }
  json_t *headers = json_object_get(e, "headers");
  if (headers && !json_is_object(headers)) {
    snprintf(err, errlen, "\"headers\" must be an object");
    return -1;
  }
  json_object_foreach(headers, k, v) {
    if (!valid_header_text(k, 1) || !(json_is_string(v) || json_is_integer(v)) ||
        (json_is_string(v) && !valid_header_text(json_string_value(v), 0))) {
      snprintf(err, errlen,
               "bad header '%s' (values: strings without CR/LF, or integers)", k);
      return -1;
    }
  }
  r = calloc(1, sizeof *r);
  if (!r) goto fail_mem;
  if (get_nonneg(e, "delay_ms", &r->delay_ms, err, errlen) ||
      get_nonneg(e, "headers_delay_ms", &r->headers_delay_ms, err, errlen) ||
      get_nonneg(e, "chunk", &r->chunk, err, errlen) ||
      get_nonneg(e, "chunk_delay_ms", &r->chunk_delay_ms, err, errlen))
    goto fail;
  r->fault_after = -1;
  if ((v = json_object_get(e, "fault"))) {
    const char *f = json_is_string(v) ? json_string_value(v) : "";
    if (!strcmp(f, "reset"))
      r->fault = F_RESET;
    else if (!strcmp(f, "close"))
      r->fault = F_CLOSE;
    else if (!strcmp(f, "stall"))
      r->fault = F_STALL;
    else {
      snprintf(err, errlen, "\"fault\" must be \"reset\", \"close\" or \"stall\"");
      goto fail;
    }
  }
  if ((v = json_object_get(e, "fault_after"))) {
    if (!json_is_integer(v)) {
      snprintf(err, errlen, "\"fault_after\" must be an integer");
      goto fail;
    }
    r->fault_after = json_integer_value(v) < 0 ? -1 : json_integer_value(v);
  }
  json_t *sse = json_object_get(e, "sse"), *rep = json_object_get(e, "sse_repeat"),
         *tail = json_object_get(e, "sse_tail"), *body = json_object_get(e, "body"),
         *raw = json_object_get(e, "raw");
  r->sse = sse || rep || tail;
  if ((sse && !json_is_array(sse)) || (tail && !json_is_array(tail))) {
    snprintf(err, errlen, "\"sse\" and \"sse_tail\" must be arrays");
    goto fail;
  }
  if (raw && (!json_is_string(raw) || r->sse || body)) {
    snprintf(err, errlen, "\"raw\" must be a string and excludes body/sse");
    goto fail;
  }
  if (r->sse && body) {
    snprintf(err, errlen, "\"body\" and \"sse\" are exclusive");
    goto fail;
  }
  if (sse) {
    r->npre = json_array_size(sse);
    r->pre = calloc(r->npre + 1, sizeof *r->pre);
    if (!r->pre) goto fail_mem;
    for (size_t i = 0; i < r->npre; i++)
      if (sse_event_text(json_array_get(sse, i), &r->pre[i], err, errlen)) goto fail;
  }
  if (tail) {
    r->ntail = json_array_size(tail);
    r->tail = calloc(r->ntail + 1, sizeof *r->tail);
    if (!r->tail) goto fail_mem;
    for (size_t i = 0; i < r->ntail; i++)
      if (sse_event_text(json_array_get(tail, i), &r->tail[i], err, errlen)) goto fail;
  }
  if (rep) {
    json_t *cnt = json_object_get(rep, "count");
    if (!json_is_object(rep) || !json_object_get(rep, "event") || !json_is_integer(cnt) ||
        json_integer_value(cnt) < 0 || json_object_size(rep) != 2) {
      snprintf(err, errlen, "\"sse_repeat\" must be {\"event\": ..., \"count\": N>=0}");
      goto fail;
    }
    if (sse_event_text(json_object_get(rep, "event"), &r->rep, err, errlen)) goto fail;
    r->nrep = (uint64_t)json_integer_value(cnt);
    if (r->rep.len == 0) r->nrep = 0; /* an empty chunk would end the stream */
  }
  for (size_t i = 0; i < r->npre; i++)
    if (r->pre[i].len == 0) {
      snprintf(err, errlen, "empty SSE event");
      goto fail;
    }
  for (size_t i = 0; i < r->ntail; i++)
    if (r->tail[i].len == 0) {
      snprintf(err, errlen, "empty SSE event");
      goto fail;
    }
  if (raw) {
    r->raw = 1;
    sbuf_add(&r->body, json_string_value(raw), json_string_length(raw), SIZE_MAX / 2);
  } else if (json_is_string(body)) {
    sbuf_add(&r->body, json_string_value(body), json_string_length(body), SIZE_MAX / 2);
  } else if (body) {
    char *s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) goto fail_mem;
    sbuf_adds(&r->body, s);
    free(s);
  }
  r->close_after = r->raw || json_is_true(json_object_get(e, "connection_close"));
  if (!out) {
    resp_free(r);
    return 0;
  }
  if (!r->raw) {
    int has_ct = 0, has_cl = 0;
    sbuf_printf(&r->head, "HTTP/1.1 %d %s\r\n", status, reason_phrase(status));
    json_object_foreach(headers, k, v) {
      if (!strcasecmp(k, "content-type")) has_ct = 1;
      if (!strcasecmp(k, "content-length")) has_cl = 1;
      sbuf_adds(&r->head, k);
      sbuf_adds(&r->head, ": ");
      if (json_is_string(v))
        sbuf_adds(&r->head, json_string_value(v));
      else
        sbuf_printf(&r->head, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
      sbuf_adds(&r->head, "\r\n");
    }
    if (r->sse) {
      if (!has_ct) sbuf_adds(&r->head, "content-type: text/event-stream\r\n");
      sbuf_adds(&r->head, "cache-control: no-cache\r\ntransfer-encoding: chunked\r\n");
    } else {
      if (!has_ct && r->body.len)
        sbuf_adds(&r->head, "content-type: application/json\r\n");
      if (!has_cl) sbuf_printf(&r->head, "content-length: %zu\r\n", r->body.len);
    }
    sbuf_adds(&r->head, r->close_after ? "connection: close\r\n\r\n"
                                       : "connection: keep-alive\r\n\r\n");
  }
  *out = r;
  return 0;
fail_mem:
  snprintf(err, errlen, "out of memory");
fail:
  resp_free(r);
  return -1;
}

/* ---- default protocol answers --------------------------------------------- */

static const char *const hello_pieces[] = {"Hello", " from", " mock"};
#define HELLO_TEXT "Hello from mock"
#define USAGE_IN 5
#define USAGE_OUT 3

static void add_event(json_t *sse, const char *name, json_t *data) {
  char *s = json_dumps(data, JSON_COMPACT);
  json_decref(data);
  if (!s) return;
  sbuf_t b = {0};
  if (name) sbuf_printf(&b, "event: %s\n", name);
  sbuf_adds(&b, "data: ");
  sbuf_adds(&b, s);
  sbuf_adds(&b, "\n\n");
  free(s);
  json_array_append_new(sse, json_stringn(b.p, b.len));
  sbuf_free(&b);
}

static json_t *chat_default(const char *model, int stream, int include_usage,
                            uint64_t n) {
  char id[64];
  snprintf(id, sizeof id, "chatcmpl-mock%" PRIu64, n);
  json_int_t created = (json_int_t)time(NULL);
  json_t *usage =
      json_pack("{s:i,s:i,s:i}", "prompt_tokens", USAGE_IN, "completion_tokens",
                USAGE_OUT, "total_tokens", USAGE_IN + USAGE_OUT);
  if (!stream) {
    return json_pack(
        "{s:i,s:{s:s},s:{s:s,s:s,s:I,s:s,s:[{s:i,s:{s:s,s:s,s:n},s:n,s:s}],s:o,s:n}}",
        "status", 200, "headers", "x-request-id", id, "body", "id", id, "object",
        "chat.completion", "created", created, "model", model, "choices", "index", 0,
        "message", "role", "assistant", "content", HELLO_TEXT, "refusal", "logprobs",
        "finish_reason", "stop", "usage", usage, "system_fingerprint");
  }
  json_t *sse = json_array();
  for (int i = 0; i < 5; i++) {
    json_t *delta;
    const char *finish = NULL;
    if (i == 0)
      delta = json_pack("{s:s,s:s,s:n}", "role", "assistant", "content", "", "refusal");
    else if (i < 4)
      delta = json_pack("{s:s}", "content", hello_pieces[i - 1]);
    else
      delta = json_object(), finish = "stop";
    json_t *ch =
        json_pack("{s:s,s:s,s:I,s:s,s:n,s:[{s:i,s:o,s:n,s:o}]}", "id", id, "object",
                  "chat.completion.chunk", "created", created, "model", model,
                  "system_fingerprint", "choices", "index", 0, "delta", delta, "logprobs",
                  "finish_reason", finish ? json_string(finish) : json_null());
    if (include_usage) json_object_set_new(ch, "usage", json_null());
    add_event(sse, NULL, ch);
  }
  if (include_usage)
    add_event(sse, NULL,
              json_pack("{s:s,s:s,s:I,s:s,s:n,s:[],s:O}", "id", id, "object",
                        "chat.completion.chunk", "created", created, "model", model,
                        "system_fingerprint", "choices", "usage", usage));
  json_decref(usage);
  json_array_append_new(sse, json_string("data: [DONE]\n\n"));
  return json_pack("{s:i,s:{s:s},s:o}", "status", 200, "headers", "x-request-id", id,
                   "sse", sse);
}

static json_t *anthropic_default(const char *model, int stream, uint64_t n) {
  char id[64], rid[64];
  snprintf(id, sizeof id, "msg_mock%" PRIu64, n);
  snprintf(rid, sizeof rid, "req_mock%" PRIu64, n);
  if (!stream)
    return json_pack(
        "{s:i,s:{s:s},s:{s:s,s:s,s:s,s:s,s:[{s:s,s:s}],s:s,s:n,s:{s:i,s:i}}}", "status",
        200, "headers", "request-id", rid, "body", "id", id, "type", "message", "role",
        "assistant", "model", model, "content", "type", "text", "text", HELLO_TEXT,
        "stop_reason", "end_turn", "stop_sequence", "usage", "input_tokens", USAGE_IN,
        "output_tokens", USAGE_OUT);
  json_t *sse = json_array();
  add_event(
      sse, "message_start",
      json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}}", "type",
                "message_start", "message", "id", id, "type", "message", "role",
                "assistant", "model", model, "content", "stop_reason", "stop_sequence",
                "usage", "input_tokens", USAGE_IN, "output_tokens", 1));
  add_event(sse, "content_block_start",
            json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0,
                      "content_block", "type", "text", "text", ""));
  add_event(sse, "ping", json_pack("{s:s}", "type", "ping"));
  for (int i = 0; i < 3; i++)
    add_event(sse, "content_block_delta",
              json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
                        0, "delta", "type", "text_delta", "text", hello_pieces[i]));
  add_event(sse, "content_block_stop",
            json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
  add_event(sse, "message_delta",
            json_pack("{s:s,s:{s:s,s:n},s:{s:i}}", "type", "message_delta", "delta",
                      "stop_reason", "end_turn", "stop_sequence", "usage",
                      "output_tokens", USAGE_OUT));
  add_event(sse, "message_stop", json_pack("{s:s}", "type", "message_stop"));
  return json_pack("{s:i,s:{s:s},s:o}", "status", 200, "headers", "request-id", rid,
                   "sse", sse);
}

static json_t *responses_object(const char *id, const char *msg_id, const char *model,
                                json_int_t created, int done) {
  json_t *output = json_array(), *usage = json_null();
  if (done) {
    json_array_append_new(
        output,
        json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:s,s:[],s:[]}]}", "id", msg_id, "type",
                  "message", "status", "completed", "role", "assistant", "content",
                  "type", "output_text", "text", HELLO_TEXT, "annotations", "logprobs"));
    usage = json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", USAGE_IN,
                      "input_tokens_details", "cached_tokens", 0, "output_tokens",
                      USAGE_OUT, "output_tokens_details", "reasoning_tokens", 0,
                      "total_tokens", USAGE_IN + USAGE_OUT);
  }
  return json_pack(
      "{s:s,s:s,s:I,s:s,s:n,s:n,s:n,s:n,s:s,s:o,s:b,s:n,s:{s:n,s:n},s:b,s:f,s:{s:{s:s}},"
      "s:s,s:[],s:f,s:s,s:o,s:n,s:{}}",
      "id", id, "object", "response", "created_at", created, "status",
      done ? "completed" : "in_progress", "error", "incomplete_details", "instructions",
      "max_output_tokens", "model", model, "output", output, "parallel_tool_calls", 1,
      "previous_response_id", "reasoning", "effort", "summary", "store", 1, "temperature",
      1.0, "text", "format", "type", "text", "tool_choice", "auto", "tools", "top_p", 1.0,
      "truncation", "disabled", "usage", usage, "user", "metadata");
}

static json_t *responses_default(const char *model, int stream, uint64_t n) {
  char id[64], msg_id[64];
  snprintf(id, sizeof id, "resp_mock%" PRIu64, n);
  snprintf(msg_id, sizeof msg_id, "msg_mock%" PRIu64, n);
  json_int_t created = (json_int_t)time(NULL);
  if (!stream)
    return json_pack("{s:i,s:{s:s},s:o}", "status", 200, "headers", "x-request-id", id,
                     "body", responses_object(id, msg_id, model, created, 1));
  json_t *sse = json_array();
  int seq = 0;
  add_event(
      sse, "response.created",
      json_pack("{s:s,s:i,s:o}", "type", "response.created", "sequence_number", seq++,
                "response", responses_object(id, msg_id, model, created, 0)));
  add_event(
      sse, "response.in_progress",
      json_pack("{s:s,s:i,s:o}", "type", "response.in_progress", "sequence_number", seq++,
                "response", responses_object(id, msg_id, model, created, 0)));
  add_event(sse, "response.output_item.added",
            json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:s,s:s,s:[]}}", "type",
                      "response.output_item.added", "sequence_number", seq++,
                      "output_index", 0, "item", "id", msg_id, "type", "message",
                      "status", "in_progress", "role", "assistant", "content"));
  add_event(sse, "response.content_part.added",
            json_pack("{s:s,s:i,s:s,s:i,s:i,s:{s:s,s:s,s:[],s:[]}}", "type",
                      "response.content_part.added", "sequence_number", seq++, "item_id",
                      msg_id, "output_index", 0, "content_index", 0, "part", "type",
                      "output_text", "text", "", "annotations", "logprobs"));
  for (int i = 0; i < 3; i++)
    add_event(
        sse, "response.output_text.delta",
        json_pack("{s:s,s:i,s:s,s:i,s:i,s:s,s:[]}", "type", "response.output_text.delta",
                  "sequence_number", seq++, "item_id", msg_id, "output_index", 0,
                  "content_index", 0, "delta", hello_pieces[i], "logprobs"));
  add_event(
      sse, "response.output_text.done",
      json_pack("{s:s,s:i,s:s,s:i,s:i,s:s,s:[]}", "type", "response.output_text.done",
                "sequence_number", seq++, "item_id", msg_id, "output_index", 0,
                "content_index", 0, "text", HELLO_TEXT, "logprobs"));
  add_event(sse, "response.content_part.done",
            json_pack("{s:s,s:i,s:s,s:i,s:i,s:{s:s,s:s,s:[],s:[]}}", "type",
                      "response.content_part.done", "sequence_number", seq++, "item_id",
                      msg_id, "output_index", 0, "content_index", 0, "part", "type",
                      "output_text", "text", HELLO_TEXT, "annotations", "logprobs"));
  add_event(sse, "response.output_item.done",
            json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:s,s:s,s:[{s:s,s:s,s:[],s:[]}]}}", "type",
                      "response.output_item.done", "sequence_number", seq++,
                      "output_index", 0, "item", "id", msg_id, "type", "message",
                      "status", "completed", "role", "assistant", "content", "type",
                      "output_text", "text", HELLO_TEXT, "annotations", "logprobs"));
  add_event(
      sse, "response.completed",
      json_pack("{s:s,s:i,s:o}", "type", "response.completed", "sequence_number", seq++,
                "response", responses_object(id, msg_id, model, created, 1)));
  return json_pack("{s:i,s:{s:s},s:o}", "status", 200, "headers", "x-request-id", id,
                   "sse", sse);
}

static int ends_with(const char *s, size_t n, const char *suffix) {
  size_t m = strlen(suffix);
  return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Gemini generateContent: the model is in the path. The mock rejects what
 * the real API rejects: unknown top-level fields (another protocol's
 * `model`, `messages`, `stream` ...), roles other than user/model, empty
 * contents, and a functionResponse turn that does not follow a functionCall
 * turn. */
static json_t *gemini_error(int status, const char *st, const char *msg) {
  return json_pack("{s:i,s:{s:{s:i,s:s,s:s}}}", "status", status, "body", "error", "code",
                   status, "message", msg, "status", st);
}

static const char *gemini_invalid(json_t *req) {
  static const char *const known[] = {"contents", "systemInstruction", "tools", "toolConfig",
                                      "generationConfig", "safetySettings", "cachedContent",
                                      "labels"};
  if (!json_is_object(req)) return "Invalid JSON payload received.";
  const char *k;
  json_t *v;
  json_object_foreach(req, k, v) {
    size_t i = 0;
    while (i < sizeof known / sizeof known[0] && strcmp(k, known[i])) i++;
    if (i == sizeof known / sizeof known[0]) return "Invalid JSON payload received. Unknown name.";
  }
  json_t *contents = json_object_get(req, "contents");
  if (json_array_size(contents) == 0) return "* GenerateContentRequest.contents: contents is not specified";
  size_t i;
  json_t *c;
  int prev_call = 0;
  json_array_foreach(contents, i, c) {
    const char *role = json_string_value(json_object_get(c, "role"));
    json_t *parts = json_object_get(c, "parts");
    if (role && strcmp(role, "user") && strcmp(role, "model"))
      return "Please use a valid role: user, model.";
    if (json_array_size(parts) == 0) return "* GenerateContentRequest.contents.parts: contents.parts must not be empty.";
    int has_call = 0, has_resp = 0;
    size_t k2;
    json_t *pt;
    json_array_foreach(parts, k2, pt) {
      if (json_object_get(pt, "functionCall")) has_call = 1;
      if (json_object_get(pt, "functionResponse")) has_resp = 1;
    }
    if (has_call && (role == NULL || strcmp(role, "model")))
      return "functionCall parts belong to model turns.";
    if (has_resp && !prev_call)
      return "Please ensure that function response turn comes immediately after a function call turn.";
    prev_call = has_call;
  }
  return NULL;
}

static json_t *gemini_chunk(const char *model, const char *id, const char *text,
                            const char *finish) {
  json_t *cand = json_pack("{s:{s:s,s:[{s:s}]},s:i}", "content", "role", "model", "parts",
                           "text", text, "index", 0);
  json_t *o = json_pack("{s:[o],s:s,s:s}", "candidates", cand, "modelVersion", model,
                        "responseId", id);
  if (finish) {
    json_object_set_new(cand, "finishReason", json_string(finish));
    json_object_set_new(o, "usageMetadata",
                        json_pack("{s:i,s:i,s:i}", "promptTokenCount", USAGE_IN,
                                  "candidatesTokenCount", USAGE_OUT, "totalTokenCount",
                                  USAGE_IN + USAGE_OUT));
  }
  return o;
}

/* What the real API does beyond plain text, asked for by a word in the
 * request body (a test's prompt): a blocked prompt (promptFeedback, no
 * candidates), a SAFETY finish, a function call of the first declared
 * function with a thought signature (Gemini 2.5 and later sign unasked),
 * and, Vertex-style, that call's arguments streamed (partialArgs /
 * willContinue). A turn answering a call gets the default text. */
enum { GEM_TEXT, GEM_BLOCK, GEM_SAFETY, GEM_TOOL, GEM_STREAM_ARGS };

static int gemini_kind(json_t *req, const char *body, size_t len) {
  json_t *contents = json_object_get(req, "contents");
  json_t *last = json_array_get(contents, json_array_size(contents) - 1);
  size_t i;
  json_t *pt;
  json_array_foreach(json_object_get(last, "parts"), i, pt) {
    if (json_object_get(pt, "functionResponse")) return GEM_TEXT;
  }
  if (memmem(body, len, "mock:block", 10)) return GEM_BLOCK;
  if (memmem(body, len, "mock:safety", 11)) return GEM_SAFETY;
  json_t *fd = json_object_get(json_array_get(json_object_get(req, "tools"), 0),
                               "functionDeclarations");
  if (json_array_size(fd) == 0) return GEM_TEXT;
  if (memmem(body, len, "mock:stream-args", 16)) return GEM_STREAM_ARGS;
  if (memmem(body, len, "mock:tool", 9)) return GEM_TOOL;
  return GEM_TEXT;
}

static json_t *gemini_usage(void) {
  return json_pack("{s:i,s:i,s:i}", "promptTokenCount", USAGE_IN, "candidatesTokenCount",
                   USAGE_OUT, "totalTokenCount", USAGE_IN + USAGE_OUT);
}

/* One chunk: candidate content (stolen; NULL: none) and finish (NULL: none);
 * the finish chunk carries usageMetadata. */
static json_t *gemini_cand(const char *model, const char *id, json_t *content,
                           const char *finish) {
  json_t *cand = json_pack("{s:i}", "index", 0);
  if (content) json_object_set_new(cand, "content", content);
  if (finish) json_object_set_new(cand, "finishReason", json_string(finish));
  if (finish && strcmp(finish, "SAFETY") == 0)
    json_object_set_new(
        cand, "safetyRatings",
        json_pack("[{s:s,s:s,s:b}]", "category", "HARM_CATEGORY_DANGEROUS_CONTENT",
                  "probability", "HIGH", "blocked", 1));
  json_t *o = json_pack("{s:[o],s:s,s:s}", "candidates", cand, "modelVersion", model,
                        "responseId", id);
  if (finish) json_object_set_new(o, "usageMetadata", gemini_usage());
  return o;
}

static json_t *gemini_parts(json_t *parts) {
  return json_pack("{s:s,s:o}", "role", "model", "parts", parts);
}

/* The chunks of one answer (a body is their merge: gemini_merge). */
static json_t *gemini_chunks(int kind, json_t *req, const char *model, const char *id) {
  json_t *out = json_array();
  const char *fn = json_string_value(json_object_get(
      json_array_get(json_object_get(json_array_get(json_object_get(req, "tools"), 0),
                                     "functionDeclarations"),
                     0),
      "name"));
  switch (kind) {
    case GEM_BLOCK:
      json_array_append_new(
          out, json_pack("{s:{s:s,s:[{s:s,s:s}]},s:o,s:s,s:s}", "promptFeedback",
                         "blockReason", "SAFETY", "safetyRatings", "category",
                         "HARM_CATEGORY_DANGEROUS_CONTENT", "probability", "HIGH",
                         "usageMetadata",
                         json_pack("{s:i,s:i}", "promptTokenCount", USAGE_IN,
                                   "totalTokenCount", USAGE_IN),
                         "modelVersion", model, "responseId", id));
      break;
    case GEM_SAFETY:
      json_array_append_new(
          out, gemini_cand(model, id, gemini_parts(json_pack("[{s:s}]", "text", "Hello")),
                           NULL));
      json_array_append_new(
          out, gemini_cand(model, id, gemini_parts(json_pack("[{s:s}]", "text", "")),
                           "SAFETY"));
      break;
    case GEM_TOOL:
      json_array_append_new(
          out,
          gemini_cand(model, id,
                      gemini_parts(json_pack("[{s:{s:s,s:{s:s}},s:s}]", "functionCall",
                                             "name", fn, "args", "location", "Paris",
                                             "thoughtSignature", "bW9jay1zaWduYXR1cmU=")),
                      NULL));
      json_array_append_new(
          out, gemini_cand(model, id, json_pack("{s:s}", "role", "model"), "STOP"));
      break;
    case GEM_STREAM_ARGS:
      json_array_append_new(
          out, gemini_cand(model, id,
                           gemini_parts(json_pack("[{s:{s:s,s:b}}]", "functionCall",
                                                  "name", fn, "willContinue", 1)),
                           NULL));
      json_array_append_new(
          out, gemini_cand(model, id,
                           gemini_parts(json_pack(
                               "[{s:{s:[{s:s,s:s,s:b}],s:b}}]", "functionCall",
                               "partialArgs", "jsonPath", "$.location", "stringValue",
                               "Pa", "willContinue", 1, "willContinue", 1)),
                           NULL));
      json_array_append_new(
          out,
          gemini_cand(model, id,
                      gemini_parts(json_pack("[{s:{s:[{s:s,s:s}],s:b}}]", "functionCall",
                                             "partialArgs", "jsonPath", "$.location",
                                             "stringValue", "ris", "willContinue", 1)),
                      NULL));
      json_array_append_new(
          out, gemini_cand(model, id, gemini_parts(json_pack("[{s:{}}]", "functionCall")),
                           NULL));
      json_array_append_new(
          out, gemini_cand(model, id, json_pack("{s:s}", "role", "model"), "STOP"));
      break;
    default:
      for (int i = 0; i < 3; i++)
        json_array_append_new(
            out, gemini_chunk(model, id, hello_pieces[i], i == 2 ? "STOP" : NULL));
  }
  return out;
}

static json_t *gemini_default(const char *path, size_t plen, json_t *req,
                              const char *body, size_t body_len, uint64_t n) {
  const char *m = memmem(path, plen, "/models/", 8);
  const char *colon = m ? memchr(m + 8, ':', (size_t)(path + plen - m - 8)) : NULL;
  if (colon == NULL) return gemini_error(404, "NOT_FOUND", "mock: no model in the path");
  char model[256], id[64];
  snprintf(model, sizeof model, "%.*s", (int)(colon - m - 8), m + 8);
  snprintf(id, sizeof id, "gem_mock%" PRIu64, n);
  const char *bad = gemini_invalid(req);
  if (ends_with(path, plen, ":countTokens"))
    return json_pack("{s:i,s:{s:i}}", "status", 200, "body", "totalTokens", USAGE_IN);
  if (bad) return gemini_error(400, "INVALID_ARGUMENT", bad);
  int kind = gemini_kind(req, body, body_len);
  if (ends_with(path, plen, ":generateContent")) {
    if (kind == GEM_TEXT)
      return json_pack("{s:i,s:o}", "status", 200, "body",
                       gemini_chunk(model, id, HELLO_TEXT, "STOP"));
    /* a body: the chunks merged (parts joined, the last finish and usage);
     * streamed arguments come whole, as the API sends them without a stream */
    json_t *chunks =
        gemini_chunks(kind == GEM_STREAM_ARGS ? GEM_TOOL : kind, req, model, id);
    json_t *last = json_incref(json_array_get(chunks, json_array_size(chunks) - 1));
    json_t *cand = json_array_get(json_object_get(last, "candidates"), 0);
    if (cand != NULL) {
      json_t *parts = json_array();
      size_t i, k;
      json_t *ch, *pt;
      json_array_foreach(chunks, i, ch) {
        json_t *c = json_array_get(json_object_get(ch, "candidates"), 0);
        json_array_foreach(json_object_get(json_object_get(c, "content"), "parts"), k,
                           pt) {
          const char *t = json_string_value(json_object_get(pt, "text"));
          if (t == NULL || *t) json_array_append(parts, pt);
        }
      }
      json_object_set_new(cand, "content", gemini_parts(parts));
    }
    json_decref(chunks);
    return json_pack("{s:i,s:o}", "status", 200, "body", last);
  }
  json_t *sse = json_array(), *chunks = gemini_chunks(kind, req, model, id);
  size_t ci;
  json_t *ch;
  json_array_foreach(chunks, ci, ch) {
    char *s = json_dumps(ch, JSON_COMPACT);
    sbuf_t b = {0};
    sbuf_adds(&b, "data: ");
    sbuf_adds(&b, s);
    sbuf_adds(&b, "\r\n\r\n");
    free(s);
    json_array_append_new(sse, json_stringn(b.p, b.len));
    sbuf_free(&b);
  }
  json_decref(chunks);
  return json_pack("{s:i,s:o}", "status", 200, "sse", sse);
}

/* The default answer for a request, as a script entry (NULL: out of memory). */
static json_t *default_entry(const char *method, const char *path, size_t plen,
                             json_t *req, const char *body, size_t body_len,
                             json_t *headers) {
  const char *model = json_string_value(json_object_get(req, "model"));
  if (!model) model = "mock-model";
  int stream = json_is_true(json_object_get(req, "stream"));
  int incl = json_is_true(
      json_object_get(json_object_get(req, "stream_options"), "include_usage"));
  uint64_t n = ++g.seq;
  int post = !strcmp(method, "POST");
  json_int_t approx = (json_int_t)(body_len / 4 + 1);
  if (ends_with(path, plen, "/models") && (post || !strcmp(method, "GET"))) {
    if (json_object_get(headers, "anthropic-version"))
      return json_pack("{s:i,s:{s:[{s:s,s:s,s:s,s:s}],s:b,s:s,s:s}}", "status", 200,
                       "body", "data", "type", "model", "id", "mock-model",
                       "display_name", "Mock Model", "created_at", "2025-01-01T00:00:00Z",
                       "has_more", 0, "first_id", "mock-model", "last_id", "mock-model");
    return json_pack("{s:i,s:{s:s,s:[{s:s,s:s,s:i,s:s}]}}", "status", 200, "body",
                     "object", "list", "data", "id", "mock-model", "object", "model",
                     "created", 0, "owned_by", "mock");
  }
  if (memmem(path, plen, "/models/", 8) && memchr(path, ':', plen)) {
    if (!post)
      return gemini_error(405, "INVALID_ARGUMENT", "mock: method not allowed");
    return gemini_default(path, plen, req, body, body_len, n);
  }
  int known = ends_with(path, plen, "/chat/completions") ||
              ends_with(path, plen, "/responses") ||
              ends_with(path, plen, "/v1/messages") ||
              ends_with(path, plen, "/messages/count_tokens") ||
              ends_with(path, plen, "/responses/input_tokens");
  if (known && !post)
    return json_pack("{s:i,s:{s:{s:s,s:s}}}", "status", 405, "body", "error", "type",
                     "invalid_request_error", "message", "mock: method not allowed");
  (void)body;
  if (ends_with(path, plen, "/chat/completions"))
    return chat_default(model, stream, incl, n);
  if (ends_with(path, plen, "/responses")) return responses_default(model, stream, n);
  if (ends_with(path, plen, "/v1/messages")) return anthropic_default(model, stream, n);
  if (ends_with(path, plen, "/messages/count_tokens"))
    return json_pack("{s:i,s:{s:I}}", "status", 200, "body", "input_tokens", approx);
  if (ends_with(path, plen, "/responses/input_tokens"))
    return json_pack("{s:i,s:{s:s,s:I}}", "status", 200, "body", "object",
                     "response.input_tokens", "input_tokens", approx);
  return json_pack("{s:i,s:{s:{s:s,s:s}}}", "status", 404, "body", "error", "type",
                   "not_found_error", "message", "mock: no default answer for this path");
}

/* ---- request handling ----------------------------------------------------- */

static void send_simple(conn_t *c, int status, json_t *body, int close_after) {
  json_t *e = json_pack("{s:i,s:o,s:b}", "status", status, "body",
                        body ? body : json_null(), "connection_close", close_after);
  char err[256];
  resp_t *r = NULL;
  if (!e || entry_build(e, &r, err, sizeof err) < 0) {
    json_decref(e);
    conn_close(c, 0, 0);
    return;
  }
  json_decref(e);
  c->resp = r;
  resp_pump(c);
}

static json_t *stats_json(void) {
  json_int_t open = 0;
  for (conn_t *c = g.conns; c; c = c->next)
    if (!c->closing && conn_is_data(c)) open++;
  json_int_t tcp_open = 0;
  for (conn_t *c = g.conns; c; c = c->next)
    if (!c->closing) tcp_open++;
  return json_pack(
      "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "connections_open", open,
      "connections_total", (json_int_t)g.st.connections_total,
      "connections_closed_by_peer", (json_int_t)g.st.connections_closed_by_peer,
      "requests", (json_int_t)g.st.requests, "responses_aborted",
      (json_int_t)g.st.responses_aborted, "responses_completed",
      (json_int_t)g.st.responses_completed, "stream_events_written",
      (json_int_t)g.st.stream_events_written, "faults", (json_int_t)g.st.faults,
      "queue_length", (json_int_t)json_array_size(g.queue), "records_dropped",
      (json_int_t)g.st.records_dropped, "tcp_open", tcp_open, "tcp_accepted",
      (json_int_t)g.st.tcp_accepted);
}

static void handle_control(conn_t *c, const char *path, json_t *req) {
  const char *m = c->method;
  if (!strcmp(path, "/_mock/script") && !strcmp(m, "POST")) {
    json_t *list = json_is_array(req)    ? json_incref(req)
                   : json_is_object(req) ? json_pack("[O]", req)
                                         : NULL;
    char err[256] = "body must be a JSON array of entries";
    size_t i;
    json_t *e;
    int ok = list != NULL;
    if (ok) {
      json_array_foreach(list, i, e) {
        char e2[200];
        if (entry_build(e, NULL, e2, sizeof e2) < 0) {
          snprintf(err, sizeof err, "entry %zu: %s", i, e2);
          ok = 0;
          break;
        }
      }
    }
    if (ok) json_array_extend(g.queue, list);
    json_decref(list);
    if (!ok) {
      send_simple(c, 400, json_pack("{s:s}", "error", err), 0);
      return;
    }
    send_simple(c, 200,
                json_pack("{s:I}", "queued", (json_int_t)json_array_size(g.queue)), 0);
  } else if (!strcmp(path, "/_mock/requests") && !strcmp(m, "GET")) {
    send_simple(c, 200, json_incref(g.records), 0);
  } else if (!strcmp(path, "/_mock/queue") && !strcmp(m, "GET")) {
    send_simple(c, 200, json_incref(g.queue), 0);
  } else if (!strcmp(path, "/_mock/stats") && !strcmp(m, "GET")) {
    send_simple(c, 200, stats_json(), 0);
  } else if (!strcmp(path, "/_mock/reset") && !strcmp(m, "POST")) {
    json_array_clear(g.queue);
    json_array_clear(g.records);
    memset(&g.st, 0, sizeof g.st);
    g.gen++;
    send_simple(c, 200, json_pack("{s:b}", "ok", 1), 0);
  } else {
    send_simple(c, 404, json_pack("{s:s}", "error", "unknown control endpoint or method"),
                0);
  }
}

static void handle_request(conn_t *c) {
  char err[256];
  const char *url = c->url.p ? c->url.p : "/";
  size_t plen = strcspn(url, "?");
  char *path = strndup(url, plen);
  json_t *req =
      c->body.len ? json_loadb(c->body.p, c->body.len, JSON_DECODE_ANY, NULL) : NULL;
  if (!path) {
    conn_close(c, 0, 0);
    goto done;
  }
  if (!strncmp(path, "/_mock/", 7)) {
    handle_control(c, path, req);
    goto done;
  }
  if (!conn_is_data(c)) {
    c->is_data = 1;
    c->data_gen = g.gen;
    g.st.connections_total++;
  }
  g.st.requests++;
  if (json_array_size(g.records) < g.max_records) {
    json_t *body = req ? json_incref(req) : NULL;
    if (!body && c->body.len) body = json_stringn(c->body.p, c->body.len);
    if (!body && c->body.len) body = json_string("<non-utf8 body>");
    if (!body) body = json_null();
    json_t *rec =
        json_pack("{s:s,s:s,s:s?,s:O,s:o}", "method", c->method, "path", path, "query",
                  url[plen] ? url + plen + 1 : NULL, "headers", c->headers, "body", body);
    if (rec) json_array_append_new(g.records, rec);
  } else {
    g.st.records_dropped++;
  }
  /* first fitting scripted entry */
  json_t *entry = NULL;
  size_t i;
  json_t *e;
  json_array_foreach(g.queue, i, e) {
    const char *match = json_string_value(json_object_get(e, "match"));
    const char *psuf = json_string_value(json_object_get(e, "path"));
    if (match && *match &&
        (!c->body.len || !memmem(c->body.p, c->body.len, match, strlen(match))))
      continue;
    if (psuf && !ends_with(path, plen, psuf)) continue;
    entry = json_incref(e);
    if (!json_is_true(json_object_get(e, "repeat"))) json_array_remove(g.queue, i);
    break;
  }
  if (!entry || json_is_true(json_object_get(entry, "default"))) {
    json_t *d =
        default_entry(c->method, path, plen, req, c->body.p, c->body.len, c->headers);
    if (d && entry) { /* overlay the scripted options on the default answer */
      const char *k;
      json_t *v;
      json_object_foreach(entry, k, v) {
        if (!strcmp(k, "headers")) {
          json_t *h = json_object_get(d, "headers");
          if (!h) json_object_set_new(d, "headers", h = json_object());
          json_object_update(h, v);
        } else if (strcmp(k, "match") && strcmp(k, "path") && strcmp(k, "repeat") &&
                   strcmp(k, "default")) {
          json_object_set(d, k, v);
        }
      }
    }
    json_decref(entry);
    entry = d;
  }
  resp_t *r = NULL;
  if (!entry || entry_build(entry, &r, err, sizeof err) < 0) {
    json_decref(entry);
    send_simple(c, 500, json_pack("{s:s}", "error", "mock: could not build response"), 1);
    goto done;
  }
  json_decref(entry);
  r->data = 1;
  c->resp = r;
  resp_pump(c);
done:
  free(path);
  json_decref(req);
}

/* ---- llhttp callbacks ----------------------------------------------------- */

static int on_url(llhttp_t *p, const char *at, size_t n) {
  conn_t *c = p->data;
  c->head_bytes += n;
  if (c->head_bytes > MOCK_MAX_HEAD) return -1;
  return sbuf_add(&c->url, at, n, MOCK_MAX_HEAD);
}

static void commit_header(conn_t *c) {
  if (!c->hfield.len) return;
  for (size_t i = 0; i < c->hfield.len; i++)
    c->hfield.p[i] =
        (char)(c->hfield.p[i] >= 'A' && c->hfield.p[i] <= 'Z' ? c->hfield.p[i] + 32
                                                              : c->hfield.p[i]);
  json_t *val = json_stringn(c->hval.p ? c->hval.p : "", c->hval.len);
  if (!val) val = json_string("<non-utf8 value>");
  json_t *old = json_object_get(c->headers, c->hfield.p);
  if (old && json_is_string(old) && val) {
    sbuf_t b = {0};
    sbuf_add(&b, json_string_value(old), json_string_length(old), SIZE_MAX / 2);
    sbuf_adds(&b, ", ");
    sbuf_add(&b, json_string_value(val), json_string_length(val), SIZE_MAX / 2);
    json_decref(val);
    val = json_stringn(b.p, b.len);
    sbuf_free(&b);
  }
  json_object_set_new(c->headers, c->hfield.p, val);
  c->hfield.len = c->hval.len = 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
  conn_t *c = p->data;
  if (c->in_value) {
    commit_header(c);
    c->in_value = 0;
  }
  c->head_bytes += n;
  if (c->head_bytes > MOCK_MAX_HEAD) return -1;
  return sbuf_add(&c->hfield, at, n, MOCK_MAX_HEAD);
}

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
  conn_t *c = p->data;
  c->in_value = 1;
  c->head_bytes += n;
  if (c->head_bytes > MOCK_MAX_HEAD) return -1;
  return sbuf_add(&c->hval, at, n, MOCK_MAX_HEAD);
}

static int on_headers_complete(llhttp_t *p) {
  conn_t *c = p->data;
  if (c->in_value || c->hfield.len) commit_header(c);
  c->in_value = 0;
  snprintf(c->method, sizeof c->method, "%s",
           llhttp_method_name((llhttp_method_t)p->method));
  const char *expect = json_string_value(json_object_get(c->headers, "expect"));
  if (expect && !strcasecmp(expect, "100-continue")) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    conn_write(c, cont, sizeof cont - 1, 0);
  }
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  conn_t *c = p->data;
  return sbuf_add(&c->body, at, n, MOCK_MAX_BODY);
}

static int on_message_complete(llhttp_t *p) {
  conn_t *c = p->data;
  c->keep_alive = llhttp_should_keep_alive(p);
  return HPE_PAUSED;
}

static llhttp_settings_t g_settings;

/* Parses buffered input while no response is in progress. */
static void conn_drive(conn_t *c) {
  while (!c->closing && !c->resp && c->in.len > 0) {
    enum llhttp_errno e = llhttp_execute(&c->parser, c->in.p, c->in.len);
    if (e == HPE_OK) {
      c->in.len = 0;
      return;
    }
    if (e == HPE_PAUSED) {
      const char *pos = llhttp_get_error_pos(&c->parser);
      size_t used = pos && pos >= c->in.p && pos <= c->in.p + c->in.len
                        ? (size_t)(pos - c->in.p)
                        : c->in.len;
      memmove(c->in.p, c->in.p + used, c->in.len - used);
      c->in.len -= used;
      handle_request(c);
      continue;
    }
    c->in.len = 0;
    int too_big = c->head_bytes > MOCK_MAX_HEAD || c->body.len >= MOCK_MAX_BODY;
    send_simple(c, too_big ? 413 : 400,
                json_pack("{s:s}", "error",
                          too_big ? "mock: request too large" : llhttp_errno_name(e)),
                1);
    return;
  }
}

/* ---- libuv plumbing ------------------------------------------------------- */

static char g_readbuf[65536];

static void on_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  (void)h;
  (void)size;
  *buf = uv_buf_init(g_readbuf, sizeof g_readbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = s->data;
  (void)buf;
  if (c->closing) return;
  if (nread < 0) {
    conn_close(c, 1, 0);
    return;
  }
  if (nread == 0) return;
  if (sbuf_add(&c->in, buf->base, (size_t)nread, MOCK_MAX_INBUF) < 0) {
    conn_close(c, 0, 1);
    return;
  }
  conn_drive(c);
}

static void on_connection(uv_stream_t *server, int status) {
  if (status < 0 || g.shutting_down) return;
  conn_t *c = calloc(1, sizeof *c);
  if (!c) return;
  uv_tcp_init(g.loop, &c->tcp);
  c->tcp.data = c;
  c->open_handles = 1;
  c->next = g.conns;
  if (g.conns) g.conns->prev = c;
  g.conns = c;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    return;
  }
  uv_timer_init(g.loop, &c->timer);
  c->timer.data = c;
  c->open_handles = 2;
  g.st.tcp_accepted++;
  c->headers = json_object();
  llhttp_init(&c->parser, HTTP_REQUEST, &g_settings);
  c->parser.data = c;
  uv_tcp_nodelay(&c->tcp, 1);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) conn_close(c, 0, 0);
}

static void on_signal(uv_signal_t *s, int signum) {
  (void)s;
  (void)signum;
  if (g.shutting_down) return;
  g.shutting_down = 1;
  uv_close((uv_handle_t *)&g.server, NULL);
  for (conn_t *c = g.conns; c; c = c->next) conn_close(c, 0, 0);
  uv_close((uv_handle_t *)&g.sigterm, NULL);
  uv_close((uv_handle_t *)&g.sigint, NULL);
}

static int write_port_file(const char *file, int port) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", file, (long)getpid()) >= (int)sizeof tmp)
    return -1;
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "%d\n", port);
  if (fclose(f) != 0 || rename(tmp, file) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: mock_upstream [--port N] [--port-file F] [--host 127.0.0.1] "
          "[--max-records N]\n"
          "A scripted HTTP/1.1 LLM upstream; see test/mock/README.md.\n");
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *port_file = NULL;
  long port = 0;
  g.max_records = MOCK_DEFAULT_MAX_RECORDS;
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!v) {
      usage(stderr);
      return 2;
    }
    char *end;
    if (!strcmp(a, "--port")) {
      port = strtol(v, &end, 10);
      if (*end || port < 0 || port > 65535) {
        fprintf(stderr, "mock_upstream: bad port '%s'\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--port-file")) {
      port_file = v;
    } else if (!strcmp(a, "--host")) {
      host = v;
    } else if (!strcmp(a, "--max-records")) {
      long long n = strtoll(v, &end, 10);
      if (*end || n < 0) {
        fprintf(stderr, "mock_upstream: bad --max-records '%s'\n", v);
        return 2;
      }
      g.max_records = (size_t)n;
    } else {
      usage(stderr);
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  llhttp_settings_init(&g_settings);
  g_settings.on_url = on_url;
  g_settings.on_header_field = on_header_field;
  g_settings.on_header_value = on_header_value;
  g_settings.on_headers_complete = on_headers_complete;
  g_settings.on_body = on_body;
  g_settings.on_message_complete = on_message_complete;

  g.loop = uv_default_loop();
  g.queue = json_array();
  g.records = json_array();
  struct sockaddr_storage addr;
  if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&addr) != 0 &&
      uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&addr) != 0) {
    fprintf(stderr, "mock_upstream: bad host '%s'\n", host);
    return 2;
  }
  uv_tcp_init(g.loop, &g.server);
  int rc = uv_tcp_bind(&g.server, (struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&g.server, 4096, on_connection);
  if (rc != 0) {
    fprintf(stderr, "mock_upstream: cannot listen on %s:%ld: %s\n", host, port,
            uv_strerror(rc));
    return 1;
  }
  struct sockaddr_storage bound;
  int blen = sizeof bound;
  uv_tcp_getsockname(&g.server, (struct sockaddr *)&bound, &blen);
  int bport =
      ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                        : ((struct sockaddr_in *)&bound)->sin_port);
  if (port_file && write_port_file(port_file, bport) != 0) {
    fprintf(stderr, "mock_upstream: cannot write port file %s: %s\n", port_file,
            strerror(errno));
    return 1;
  }
  uv_signal_init(g.loop, &g.sigterm);
  uv_signal_init(g.loop, &g.sigint);
  uv_signal_start(&g.sigterm, on_signal, SIGTERM);
  uv_signal_start(&g.sigint, on_signal, SIGINT);
  printf("listening %d\n", bport);
  fflush(stdout);

  uv_run(g.loop, UV_RUN_DEFAULT);
  json_decref(g.queue);
  json_decref(g.records);
  rc = uv_loop_close(g.loop);
  if (rc != 0) fprintf(stderr, "mock_upstream: loop close: %s\n", uv_strerror(rc));
  return rc == 0 ? 0 : 1;
}
