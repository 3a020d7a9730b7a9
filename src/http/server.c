/* server.c - the client server's reading half: listeners, connections,
 * llhttp parsing, limits, timers, keep-alive and pipelining, lingering
 * close, early errors. The response writer is server_write.c
 * (px_resp_*, the write queue); both share server_int.h.
 *
 * Connection states:
 *
 *   IDLE --first byte--> READING --message complete--> BUSY --resp_end--> IDLE
 *     |                     |                            |
 *     +-- idle timeout      +-- header timeout / limit   +-- client EOF: handler
 *         close                 error response, linger       on_close, close
 *
 * One request at a time per connection: the parser pauses on each complete
 * message and pipelined bytes wait in `in` until the response has ended, so
 * answers leave in request order. When `in` is full, reading stops (the read
 * buffer offered to libuv is never larger than the room left) and resumes
 * once it has drained: no byte is ever dropped.
 *
 * One timer per job: t_read (header/body deadline of the request being read,
 * then the lingering-close deadline), t_idle (keep-alive idle: armed only
 * when nothing is queued), t_send (send timeout: armed while bytes are
 * queued), t_tick (0 ms: the deferred jobs of TICK_*).
 *
 * Closing after an error with input still unread is lingering (nginx's
 * lingering_close): shut down the write side, read and discard for at most
 * PX_LINGER_MS / PX_LINGER_MAX bytes, then close; a plain close() with unread
 * input sends a TCP RST that can destroy the error response in flight.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "proxai/log.h"
#include "proxai/metrics.h"
#include "server_int.h"

static llhttp_settings_t parser_settings;
static uint64_t rid_state;

static void conn_feed(px_conn_t *c, const char *p, size_t n, int buffered);
static void px_srv_close(px_conn_t *c);
static void px_srv_tick(px_conn_t *c, unsigned job);
static void px_srv_flushed(px_conn_t *c);
static void px_srv_request_done(px_conn_t *c);
static const px_srv_reader_t reader = {px_srv_close, px_srv_tick, px_srv_flushed,
                                       px_srv_request_done};
static size_t in_left(const px_conn_t *c) { return c->in.len - c->in_off; }
static void conn_error(px_conn_t *c, int status, const char *msg);

/* ---------------------------------------------------------------------- */
/* request ids                                                              */

static uint64_t splitmix(void) {
  uint64_t z = (rid_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void make_request_id(px_req_t *r) {
  const char *given = px_req_header(r, "x-request-id");
  if (given != NULL) {
    size_t n = strlen(given);
    int ok = n > 0 && n < sizeof(r->request_id);
    for (size_t i = 0; ok && i < n; i++)
      ok = given[i] > 0x20 && given[i] < 0x7f && given[i] != '"' && given[i] != '\\';
    if (ok) {
      memcpy(r->request_id, given, n + 1);
      return;
    }
  }
  if (rid_state == 0) rid_state = uv_hrtime() ^ ((uint64_t)getpid() << 32);
  /* "req_" + 16 + 8 hex digits, as "req_%016llx%08llx" (no printf per request) */
  static const char hex[] = "0123456789abcdef";
  uint64_t a = splitmix(), b = splitmix() >> 32;
  char *o = r->request_id;
  memcpy(o, "req_", 4);
  for (int i = 0; i < 16; i++) o[4 + i] = hex[(a >> (60 - 4 * i)) & 15];
  for (int i = 0; i < 8; i++) o[20 + i] = hex[(b >> (28 - 4 * i)) & 15];
  o[28] = 0;
}

const char *px_req_header(const px_req_t *r, const char *name) {
  for (size_t i = 0; i < r->nhdrs; i++)
    if (r->hdrs[i].name.len == strlen(name) &&
        strncasecmp(r->hdrs[i].name.ptr, name, r->hdrs[i].name.len) == 0)
      return r->hdrs[i].value.ptr;
  return NULL;
}

size_t px_conn_pending(const px_conn_t *c) { return c->pending; }
int px_conn_is_admin(const px_conn_t *c) { return c->admin; }

px_server_t *px_conn_server(const px_conn_t *c) { return c->srv; }
uint64_t px_conn_bytes_out(const px_conn_t *c) { return c->bytes_out; }

void px_conn_set_handler(px_conn_t *c, const px_conn_handler_t *h, void *arg) {
  c->handler = h;
  c->harg = arg;
}

/* ---------------------------------------------------------------------- */
/* connection lifecycle                                                     */

static void on_tick(uv_timer_t *t);

/* Run job on the next loop iteration (the poll does not block meanwhile). */
static void px_srv_tick(px_conn_t *c, unsigned job) {
  c->tick_jobs |= job;
  if (!uv_is_active((uv_handle_t *)&c->t_tick)) uv_timer_start(&c->t_tick, on_tick, 0, 0);
}

static void req_reset(px_conn_t *c) {
  px_req_t *r = &c->req;
  r->url.len = 0;
  r->path_len = 0;
  r->hbuf.len = 0;
  r->nhdrs = 0;
  r->body.len = 0;
  /* an idle keep-alive connection does not keep a large request's buffers */
  if (r->body.size > (64u << 10)) px_buf_free(&r->body);
  if (r->hbuf.size > (64u << 10)) px_buf_free(&r->hbuf);
  r->keep_alive = 0;
  r->request_id[0] = 0;
  c->noffs = 0;
  c->last_was_value = 0;
  c->trailers = 0;
  c->chunk_ext = 0;
  c->body_direct = 0;
  c->head_bytes = 0;
  c->err_status = 0;
  c->err_msg = NULL;
  c->resp_started = c->resp_chunked = 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_read_timer(uv_timer_t *t);

static void start_reading(px_conn_t *c) {
  if (c->reading || c->closing || c->failing) return;
  if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0) c->reading = 1;
  else px_srv_close(c);
}

static void stop_reading(px_conn_t *c) {
  if (c->reading) uv_read_stop(&c->h.stream);
  c->reading = 0;
}

static void on_idle_timer(uv_timer_t *t) {
  px_conn_t *c = t->data;
  if (!c->closing && !c->lingering && c->state == C_IDLE && c->pending == 0) px_srv_close(c);
}

static void start_idle_timer(px_conn_t *c) {
  uv_timer_start(&c->t_idle, on_idle_timer, c->srv->w->config->server.idle_timeout_ms, 0);
}

static void on_shutdown(uv_shutdown_t *r, int status) {
  (void)r;
  (void)status;
}

/* Close without destroying the last answer (see the top of the file). */
static void conn_linger(px_conn_t *c) {
  c->lingering = 1;
  uv_timer_stop(&c->t_idle);
  uv_timer_stop(&c->t_send);
  px_buf_free(&c->in);
  c->in_off = 0;
  if (uv_shutdown(&c->shut, &c->h.stream, on_shutdown) < 0) {
    px_srv_close(c);
    return;
  }
  uv_timer_start(&c->t_read, on_read_timer, PX_LINGER_MS, 0);
  start_reading(c);
}

/* The write queue is empty. */
static void px_srv_flushed(px_conn_t *c) {
  if (c->closing || c->failing || c->lingering || c->head_pending) return;
  if (c->close_after_flush) {
    if (c->linger) conn_linger(c);
    else px_srv_close(c);
    return;
  }
  /* keep-alive idle starts only now that the last answer is fully written */
  if (c->state == C_IDLE && in_left(c) == 0 && c->reading) start_idle_timer(c);
}

/* No request in flight and nothing buffered: read the next request, or, the
 * client having half-closed, close once the last answer is out. */
static void conn_wait(px_conn_t *c) {
  if (c->closing || c->failing) return;
  if (c->eof) {
    if (c->state != C_IDLE) { /* a request cut short by the client's EOF */
      px_srv_close(c);
      return;
    }
    c->close_after_flush = 1;
    if (c->pending == 0) px_srv_close(c);
    return;
  }
  start_reading(c);
  if (c->state == C_IDLE && c->pending == 0) start_idle_timer(c);
}

static void resume_pipeline(px_conn_t *c) {
  if (c->closing || c->failing || c->state == C_BUSY) return;
  /* fed in place: a pause only moves in_off (no copy per request) */
  if (in_left(c) > 0) conn_feed(c, c->in.data + c->in_off, in_left(c), 1);
  if (c->closing || c->failing || c->close_after_flush || c->state == C_BUSY) return;
  conn_wait(c);
}

static void on_tick(uv_timer_t *t) {
  px_conn_t *c = t->data;
  unsigned jobs = c->tick_jobs;
  c->tick_jobs = 0;
  if (c->closing) return;
  if (jobs & TICK_FAIL) {
    px_srv_close(c);
    return;
  }
  if ((jobs & TICK_FLUSH_HEAD) && c->head_pending && !c->failing) {
    px_srv_send(c, NULL, 0, NULL, 0);
    if (c->pending == 0) px_srv_flushed(c);
  }
  if (jobs & TICK_RESUME) resume_pipeline(c);
}

/* The response has ended (px_resp_end): the connection reads the next
 * request (pipelined bytes first), or closes once flushed. */
static void px_srv_request_done(px_conn_t *c) {
  c->state = C_IDLE;
  c->handler = NULL;
  c->harg = NULL;
  c->srv->active--;
  int keep = c->req.keep_alive && !c->srv->w->draining;
  req_reset(c);
  if (c->closing || c->failing) goto out;
  if (!keep) {
    stop_reading(c);
    c->linger = in_left(c) > 0; /* the client sent more than will be answered */
    c->close_after_flush = 1;
    if (c->pending == 0) px_srv_flushed(c);
    goto out;
  }
  llhttp_resume(&c->parser);
  if (in_left(c) > 0) px_srv_tick(c, TICK_RESUME);
  else conn_wait(c);
out:
  if (c->pending == 0) px_srv_log_emit(c);
  if (c->srv->w->draining && c->srv->active == 0 && c->srv->on_idle)
    c->srv->on_idle(c->srv);
}

/* ---------------------------------------------------------------------- */
/* parser callbacks                                                         */

static int parse_fail(px_conn_t *c, int status, const char *msg) {
  c->err_status = status;
  c->err_msg = msg;
  return -1;
}

static int head_add(px_conn_t *c, size_t n) {
  c->head_bytes += n;
  if (c->head_bytes > c->srv->w->config->server.max_header)
    return parse_fail(c, 431, "request header fields too large");
  return 0;
}

/* RFC 9112 section 5.2: a head line starting with SP or HTAB (obs-fold) is
 * a 400. llhttp 8 accepts it and joins the lines, and its callbacks do not
 * show the line breaks, so the raw head bytes are scanned (up to the empty
 * line that ends the head; the state carries over split reads). */
static int head_scan(px_conn_t *c, const char *p, size_t n) {
  int st = c->head_scan;
  for (size_t i = 0; i < n && st != HS_BODY; i++) {
    char ch = p[i];
    switch (st) {
    case HS_PRE:
      if (ch != '\r' && ch != '\n') st = HS_LINE;
      break;
    case HS_LINE: {
      const char *lf = memchr(p + i, '\n', n - i);
      if (lf == NULL) i = n;
      else {
        i = (size_t)(lf - p);
        st = HS_SOL;
      }
      break;
    }
    case HS_SOL:
      if (ch == ' ' || ch == '\t') return -1;
      st = ch == '\r' ? HS_CR : ch == '\n' ? HS_BODY : HS_LINE;
      break;
    case HS_CR:
      st = ch == '\n' ? HS_BODY : HS_LINE;
      break;
    }
  }
  c->head_scan = st;
  return 0;
}

static int on_message_begin(llhttp_t *p) {
  px_conn_t *c = p->data;
  if (c->state == C_IDLE) {
    c->state = C_READING;
    c->req.start_ns = uv_hrtime();
    uv_timer_stop(&c->t_idle);
    if (!uv_is_active((uv_handle_t *)&c->t_read))
      uv_timer_start(&c->t_read, on_read_timer, c->srv->w->config->server.header_timeout_ms, 0);
  }
  return 0;
}

/* The path of a request target: origin-form as is, absolute-form
 * (http://host/path?q, RFC 9112 section 3.2.2) without scheme and authority.
 * *plen: the length up to the query. */
static const char *target_path(const char *u, size_t n, size_t *plen) {
  if (u == NULL) {
    *plen = 0;
    return "";
  }
  size_t i = 0;
  if (n >= 7 && strncasecmp(u, "http://", 7) == 0) i = 7;
  else if (n >= 8 && strncasecmp(u, "https://", 8) == 0) i = 8;
  if (i > 0) {
    while (i < n && u[i] != '/' && u[i] != '?') i++;
    u += i;
    n -= i;
  }
  const char *q = memchr(u, '?', n);
  *plen = q ? (size_t)(q - u) : n;
  return u;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  px_conn_t *c = p->data;
  if (head_add(c, n) < 0) return -1;
  px_buf_t *u = &c->req.url;
  if (u->len + n >= PX_MAX_URL) { /* room for the NUL stays */
    /* keep what fits: the path decides the shape of the error */
    px_buf_append(u, at, PX_MAX_URL - 1 - u->len);
    return parse_fail(c, 414, "request target too long (limit 16383 bytes)");
  }
  if (px_buf_append(u, at, n) < 0) return parse_fail(c, 500, "out of memory");
  return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
  px_conn_t *c = p->data;
  if (head_add(c, n) < 0) return -1;
  if (c->trailers) return 0; /* counted against the head limit, never kept */
  if (c->noffs == 0 || c->last_was_value) {
    if (c->noffs == c->offs_size) {
      size_t ns = c->offs_size ? c->offs_size * 2 : 16;
      hdr_off_t *o = realloc(c->offs, ns * sizeof(*o));
      if (o == NULL) return parse_fail(c, 500, "out of memory");
      c->offs = o;
      c->offs_size = ns;
    }
    if (c->noffs > 0 && px_buf_append(&c->req.hbuf, "", 1) < 0) goto big;
    hdr_off_t *h = &c->offs[c->noffs++];
    h->no = c->req.hbuf.len;
    h->nl = 0;
    h->vo = h->vl = 0;
    c->last_was_value = 0;
  }
  if (px_buf_append(&c->req.hbuf, at, n) < 0) goto big;
  c->offs[c->noffs - 1].nl += n;
  return 0;
big:
  return parse_fail(c, 431, "request header fields too large");
}

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
  px_conn_t *c = p->data;
  if (head_add(c, n) < 0) return -1;
  if (c->trailers) return 0;
  hdr_off_t *h = &c->offs[c->noffs - 1];
  if (!c->last_was_value) {
    if (px_buf_append(&c->req.hbuf, "", 1) < 0) goto big;
    h->vo = c->req.hbuf.len;
    c->last_was_value = 1;
  }
  if (px_buf_append(&c->req.hbuf, at, n) < 0) goto big;
  h->vl += n;
  return 0;
big:
  return parse_fail(c, 431, "request header fields too large");
}

/* RFC 9110 7.2 / RFC 3986 3.2.2: uri-host [ ":" port ], where uri-host is
 * an IP-literal or a reg-name (unreserved, pct-encoded, sub-delims): no
 * userinfo, path, space or control character. Empty is allowed. */
static int host_ok(const char *v, size_t n) {
  size_t i = 0;
  if (n > 0 && v[0] == '[') {
    for (i = 1; i < n && v[i] != ']'; i++)
      if (!strchr("0123456789abcdefABCDEF:.vV-_~!$&'()*+,;=", v[i]) || v[i] == 0)
        return 0;
    if (i == n) return 0;
    i++;
  } else {
    for (; i < n && v[i] != ':'; i++) {
      unsigned char ch = (unsigned char)v[i];
      if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch >= '0' && ch <= '9') || (ch != 0 && strchr("-._~%!$&'()*+,;=", ch))))
        return 0;
    }
  }
  if (i < n && v[i++] != ':') return 0;
  for (; i < n; i++)
    if (v[i] < '0' || v[i] > '9') return 0;
  return 1;
}

/* The request rules of RFC 9112 on a parsed head: Host exactly once (HTTP/1.1)
 * and valid (3.2); a Transfer-Encoding the gateway does not fully
 * understand refused (6.1, 6.3): with HTTP/1.0, empty or blank, chunked not
 * alone and last (400), an unknown coding (501). An error closes the
 * connection (conn_error): nothing behind a refused framing is read as a
 * request. */
static int head_rules(px_conn_t *c, llhttp_t *p) {
  px_req_t *r = &c->req;
  size_t hosts = 0, tes = 0;
  px_te_t te = {0};
  r->traceparent = r->tracestate = (px_str_t){NULL, 0};
  for (size_t i = 0; i < r->nhdrs; i++) {
    px_str_t nm = r->hdrs[i].name, v = r->hdrs[i].value;
    switch (nm.len) { /* the fields the gateway reads here, by length first */
    case 4:
      if (strncasecmp(nm.ptr, "host", 4) != 0) break;
      hosts++;
      if (!host_ok(v.ptr, v.len)) return parse_fail(c, 400, "invalid Host header");
      break;
    case 10:
      if (strncasecmp(nm.ptr, "tracestate", 10) == 0) r->tracestate = v;
      break;
    case 11:
      if (strncasecmp(nm.ptr, "traceparent", 11) == 0) r->traceparent = v;
      break;
    case 17:
      if (strncasecmp(nm.ptr, "transfer-encoding", 17) != 0) break;
      tes++;
      px_te_scan(&te, v.ptr, v.len);
      break;
    }
  }
  if (hosts > 1) return parse_fail(c, 400, "more than one Host header");
  int http11 = p->http_major == 1 && p->http_minor >= 1;
  if (hosts == 0 && http11) return parse_fail(c, 400, "missing Host header");
  if (tes == 0) return 0;
  if (!http11) return parse_fail(c, 400, "Transfer-Encoding in an HTTP/1.0 request");
  if (te.bad || te.chunked != 1 || te.after)
    return parse_fail(
        c, 400, "invalid Transfer-Encoding: chunked must be its only and last coding");
  if (te.other)
    return parse_fail(c, 501, "Transfer-Encoding other than chunked is not implemented");
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  px_conn_t *c = p->data;
  px_req_t *r = &c->req;
  if (px_buf_append(&r->hbuf, "", 1) < 0)
    return parse_fail(c, 431, "request header fields too large");
  /* absolute-form routes like origin-form: keep only the path and query */
  size_t plen;
  const char *path = target_path(r->url.data, r->url.len, &plen);
  if (r->url.data != NULL && path != r->url.data) {
    size_t skip = (size_t)(path - r->url.data);
    memmove(r->url.data, path, r->url.len - skip);
    r->url.len -= skip;
    if (r->url.len == 0 || r->url.data[0] != '/') { /* "http://h" or "http://h?q" */
      memmove(r->url.data + 1, r->url.data, r->url.len);
      r->url.data[0] = '/';
      r->url.len++;
    }
  }
  if (px_buf_append(&r->url, "", 1) < 0) return parse_fail(c, 500, "out of memory");
  r->url.len--;
  if (c->noffs > r->hdrs_size) {
    px_hdr_t *h = realloc(r->hdrs, c->noffs * sizeof(*h));
    if (h == NULL) return parse_fail(c, 500, "out of memory");
    r->hdrs = h;
    r->hdrs_size = c->noffs;
  }
  for (size_t i = 0; i < c->noffs; i++) {
    const char *name = r->hbuf.data + c->offs[i].no;
    size_t nl = c->offs[i].nl;
    /* RFC 9112 section 5.1: no whitespace between name and colon */
    if (nl > 0 && (name[nl - 1] == ' ' || name[nl - 1] == '\t'))
      return parse_fail(c, 400, "whitespace between a header field name and its colon");
    if (!px_srv_header_name_ok(name, nl)) return parse_fail(c, 400, "invalid character in a header field name");
    r->hdrs[i].name = (px_str_t){name, nl};
    if (c->offs[i].vo == 0) { /* header without value */
      r->hdrs[i].value = (px_str_t){r->hbuf.data + r->hbuf.len - 1, 0};
    } else {
      /* trailing whitespace is not part of the value (RFC 9110 5.5) */
      char *v = r->hbuf.data + c->offs[i].vo;
      size_t vl = c->offs[i].vl;
      while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) v[--vl] = 0;
      r->hdrs[i].value = (px_str_t){v, vl};
    }
  }
  r->nhdrs = c->noffs;
  if (head_rules(c, p) < 0) return -1;
  /* RFC 9110 7.8: an Upgrade (h2c, websocket) is ignored, the request is
   * answered in HTTP/1.1 and the connection goes on as HTTP/1.1; no CONNECT
   * tunnel either (llhttp would otherwise stop reading at the end of the
   * message) */
  p->upgrade = 0;
  /* RFC 9110 6.5: trailer fields are not headers. llhttp reports them with
   * the same callbacks after this one; appending them to hbuf would move the
   * block r->hdrs points into. They are read, bounded and dropped. */
  c->trailers = 1;
  const char *q = memchr(r->url.data, '?', r->url.len);
  r->path_len = q ? (size_t)(q - r->url.data) : r->url.len;
  r->method = llhttp_get_method(p);
  r->keep_alive = llhttp_should_keep_alive(p);
  make_request_id(r);
  uint64_t max_body = c->srv->w->config->server.max_body;
  if (p->content_length > max_body && p->content_length != UINT64_MAX &&
      (p->flags & F_CONTENT_LENGTH))
    return parse_fail(c, 413, "request body too large");
  /* a body of announced length: its buffer sized once (no copies while it
   * doubles; at most PX_BODY_PRESIZE before its bytes arrive) and read
   * into directly (on_alloc) */
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0 && !(p->flags & F_CHUNKED)) {
    uint64_t want =
        p->content_length < PX_BODY_PRESIZE ? p->content_length : PX_BODY_PRESIZE;
    if (px_buf_reserve(&r->body, (size_t)want + 1) == 0) c->body_direct = 1;
  }
  const char *expect = px_req_header(r, "expect");
  if (expect && strcasecmp(expect, "100-continue") == 0 &&
      (p->flags & (F_CONTENT_LENGTH | F_CHUNKED)))
    px_srv_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
  /* head is in: from here on the slow-body clock is the idle timeout */
  uv_timer_start(&c->t_read, on_read_timer, c->srv->w->config->server.idle_timeout_ms, 0);
  return 0;
}

/* A chunk that cannot fit is refused at its size line, not after its bytes
 * (or the body timeout) arrived. */
static int on_chunk_header(llhttp_t *p) {
  px_conn_t *c = p->data;
  uint64_t max = c->srv->w->config->server.max_body;
  if (p->content_length > max || c->req.body.len > max - p->content_length)
    return parse_fail(c, 413, "request body too large");
  return 0;
}

/* Chunk extensions (RFC 9112 7.1.1) carry nothing the gateway reads: their
 * bytes are counted, never kept, and bounded per request. */
static int on_chunk_ext(llhttp_t *p, const char *at, size_t n) {
  px_conn_t *c = p->data;
  (void)at;
  c->chunk_ext += n;
  if (c->chunk_ext > PX_MAX_CHUNK_EXT)
    return parse_fail(c, 400, "chunk extensions too long (limit 4096 bytes a request)");
  return 0;
}

/* each extension counts, empty ones (";;;;") too */
static int on_chunk_ext_done(llhttp_t *p) {
  return on_chunk_ext(p, NULL, 1);
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  px_conn_t *c = p->data;
  px_buf_t *b = &c->req.body;
  if (b->len + n > c->srv->w->config->server.max_body) goto large;
  if (b->data != NULL && at == b->data + b->len && n <= b->size - b->len) {
    b->len += n; /* read in place (on_alloc) */
    return 0;
  }
  if (px_buf_append(b, at, n) < 0) goto large;
  return 0;
large:
  return parse_fail(c, 413, "request body too large");
}

static int on_message_complete(llhttp_t *p) {
  px_conn_t *c = p->data;
  c->body_direct = 0;
  if (px_buf_reserve(&c->req.body, 1) == 0) c->req.body.data[c->req.body.len] = 0;
  uv_timer_stop(&c->t_read);
  c->head_scan = HS_PRE;
  c->state = C_BUSY;
  c->srv->active++;
  return HPE_PAUSED;
}

/* ---------------------------------------------------------------------- */
/* connection I/O                                                           */

/* Feed client bytes to the parser; buffered: p points into `in`. */
static void conn_feed(px_conn_t *c, const char *p, size_t n, int buffered) {
  if (n == 0 || c->closing) return;
  if (head_scan(c, p, n) < 0) {
    conn_error(c, 400, "obsolete line folding (obs-fold) in the request head");
    return;
  }
  llhttp_errno_t err = llhttp_execute(&c->parser, p, n);
  if (err == HPE_OK) {
    if (buffered) {
      px_buf_reset(&c->in);
      c->in_off = 0;
    }
    return;
  }
  if (err == HPE_PAUSED) {
    const char *pos = llhttp_get_error_pos(&c->parser);
    size_t used = pos ? (size_t)(pos - p) : n;
    if (used > n) used = n;
    if (buffered) {
      c->in_off += used;
    } else {
      px_buf_reset(&c->in);
      c->in_off = 0;
      /* n never exceeds the cap of `in` (see on_alloc) */
      if (n - used > 0 && px_buf_append(&c->in, p + used, n - used) < 0) {
        px_srv_close(c);
        return;
      }
    }
    if (in_left(c) == 0) {
      px_buf_reset(&c->in);
      c->in_off = 0;
    }
    c->srv->on_request(c->srv->w, c, &c->req);
    return;
  }
  int st = c->err_status ? c->err_status : 400;
  const char *msg = c->err_msg;
  if (msg == NULL) msg = llhttp_get_error_reason(&c->parser);
  if (msg == NULL || *msg == 0) msg = llhttp_errno_name(err);
  conn_error(c, st, msg);
}

/* While input waits in `in`, libuv is never offered more room than `in` has
 * left: nothing read is ever dropped; a full `in` stops reading (UV_ENOBUFS
 * in on_read) until the pipeline has drained. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char slab[65536];
  px_conn_t *c = h->data;
  size_t room = sizeof(slab);
  (void)suggested;
  if (c->in_off > 0 && c->in_off >= c->in.len / 2) { /* amortised compaction */
    px_buf_consume(&c->in, c->in_off);
    c->in_off = 0;
  }
  if (!c->lingering && (c->state == C_BUSY || in_left(c) > 0) && c->in.cap - c->in.len < room)
    room = c->in.cap - c->in.len;
  /* a new request's first read: its head, and a small body whole; a large
   * body's rest then goes straight into its buffer (below), so little of it
   * is copied out of the slab */
  if (c->state == C_IDLE && in_left(c) == 0 && room > PX_HEAD_READ) room = PX_HEAD_READ;
  buf->base = slab;
  buf->len = room;
  /* the rest of a Content-Length body, and nothing after it, read straight
   * into the body buffer: on_body then only counts it (no copy) */
  px_buf_t *b = &c->req.body;
  uint64_t left = c->parser.content_length;
  if (c->body_direct && !c->lingering && c->state == C_READING && in_left(c) == 0 &&
      left > 0 && left != UINT64_MAX) {
    /* as much as the buffer already holds room for (fewer reads), at least
     * a slab's worth (the buffer grows by that much at most) */
    size_t want = b->size > b->len + 1 ? b->size - b->len - 1 : 0;
    if (want < room) want = room;
    if (want > left) want = (size_t)left;
    if (px_buf_reserve(b, want + 1) == 0) { /* + 1: the terminating NUL */
      buf->base = b->data + b->len;
      buf->len = want;
    }
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  px_conn_t *c = s->data;
  if (c->lingering) {
    if (nread < 0 || (c->linger_bytes += (size_t)nread) > PX_LINGER_MAX) px_srv_close(c);
    return;
  }
  if (nread == UV_ENOBUFS) { /* `in` is full: resumed when it drains */
    stop_reading(c);
    return;
  }
  if (nread == UV_EOF && c->state == C_IDLE && (in_left(c) > 0 || c->pending > 0)) {
    /* half-close: answer what was sent, then close */
    c->eof = 1;
    stop_reading(c);
    if (in_left(c) == 0) conn_wait(c);
    return;
  }
  if (nread < 0) {
    px_srv_close(c);
    return;
  }
  if (nread == 0) return;
  if (c->state == C_IDLE) {
    uv_timer_stop(&c->t_idle);
    if (!uv_is_active((uv_handle_t *)&c->t_read))
      uv_timer_start(&c->t_read, on_read_timer, c->srv->w->config->server.header_timeout_ms, 0);
  }
  if (c->state == C_BUSY || in_left(c) > 0) {
    if (px_buf_append(&c->in, buf->base, (size_t)nread) < 0) {
      px_srv_close(c); /* out of memory: on_alloc offered no more than the room */
      return;
    }
    if (c->in.len >= c->in.cap) stop_reading(c);
    return;
  }
  conn_feed(c, buf->base, (size_t)nread, 0);
}

static void on_conn_handle_closed(uv_handle_t *h) {
  px_conn_t *c = h->data;
  if (--c->open_handles > 0) return;
  px_server_t *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->nconns--;
  px_metrics_gauge_add(PX_G_CONNECTIONS, -1);
  px_buf_free(&c->req.url);
  px_buf_free(&c->req.hbuf);
  px_buf_free(&c->req.body);
  px_buf_free(&c->in);
  px_buf_free(&c->head);
  free(c->req.hdrs);
  free(c->offs);
  free(c);
}

static void px_srv_close(px_conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  c->head_pending = 0;
  px_srv_log_emit(c);
  if (c->state == C_BUSY) {
    const px_conn_handler_t *h = c->handler;
    c->handler = NULL;
    if (h && h->on_close) h->on_close(c->harg);
    /* the handler is gone; the request no longer counts as in flight */
    if (c->state == C_BUSY) {
      c->state = C_IDLE;
      c->srv->active--;
      if (c->srv->w->draining && c->srv->active == 0 && c->srv->on_idle)
        c->srv->on_idle(c->srv);
    }
  }
  uv_close((uv_handle_t *)&c->t_read, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->t_idle, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->t_send, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->t_tick, on_conn_handle_closed);
  uv_close(&c->h.handle, on_conn_handle_closed);
}

/* The client's x-request-id from a head that never completed (a limit or a
 * timeout hit first): read from the raw header offsets. */
static void early_request_id(px_conn_t *c) {
  const char *hb = c->req.hbuf.data;
  for (size_t i = 0; hb && i < c->noffs; i++) {
    const hdr_off_t *h = &c->offs[i];
    if (h->nl != 12 || h->vo == 0 || strncasecmp(hb + h->no, "x-request-id", 12) != 0) continue;
    size_t n = h->vl;
    int ok = n > 0 && n < sizeof(c->req.request_id);
    for (size_t k = 0; ok && k < n; k++) {
      char ch = hb[h->vo + k];
      ok = ch > 0x20 && ch < 0x7f && ch != '"' && ch != '\\';
    }
    if (ok) {
      memcpy(c->req.request_id, hb + h->vo, n);
      c->req.request_id[n] = 0;
    }
    return;
  }
}

/* A gateway-level error before any handler exists, in the shape the
 * request handler's early-error callback gives it (the error shape of the
 * protocol the path names), a plain text line without one; then a
 * lingering close. */
static void conn_error(px_conn_t *c, int status, const char *msg) {
  if (c->req.request_id[0] == 0 && c->req.nhdrs == 0) early_request_id(c);
  if (c->req.request_id[0] == 0) make_request_id(&c->req);
  px_buf_t b;
  px_buf_init(&b, 4096);
  const char *ctype = "application/json";
  size_t plen;
  const char *path = target_path(c->req.url.data, c->req.url.len, &plen);
  int rc = -1;
  if (c->srv->on_early_error)
    rc = c->srv->on_early_error(&b, (px_str_t){path, plen}, status, msg, c->req.request_id);
  if (rc < 0) {
    px_buf_reset(&b);
    ctype = "text/plain";
    rc = px_buf_printf(&b, "%s\n", msg);
  }
  c->req.keep_alive = 0;
  if (c->state != C_BUSY) {
    c->state = C_BUSY;
    c->srv->active++;
  }
  uv_timer_stop(&c->t_read);
  stop_reading(c);
  px_hdr_t h[1] = {{px_str("content-type"), px_str(ctype)}};
  if (rc == 0 && px_resp_start(c, status, h, 1, (int64_t)b.len) == 0)
    px_srv_write(c, b.data, b.len);
  px_buf_free(&b);
  c->resp_started = 0;
  c->state = C_IDLE;
  c->srv->active--;
  c->linger = 1;
  c->close_after_flush = 1;
  if (c->pending == 0) px_srv_flushed(c);
}

static void on_read_timer(uv_timer_t *t) {
  px_conn_t *c = t->data;
  if (c->closing) return;
  if (c->lingering) {
    px_srv_close(c);
    return;
  }
  if (c->state == C_BUSY || c->close_after_flush) return;
  /* headers resolved means the body was the slow part */
  conn_error(c, 408, c->req.nhdrs > 0 ? "request body timeout" : "request header timeout");
}

/* Set up an accepted (or adopted) client connection whose stream handle is
 * initialised: timers, parser, buffers, first deadline, reading. */
static void conn_start(px_server_t *s, px_conn_t *c, int is_pipe) {
  uv_timer_t *timers[] = {&c->t_read, &c->t_idle, &c->t_send, &c->t_tick};
  for (size_t i = 0; i < sizeof(timers) / sizeof(timers[0]); i++) {
    uv_timer_init(s->w->loop, timers[i]);
    timers[i]->data = c;
  }
  c->open_handles = 5;
  if (!is_pipe) uv_tcp_nodelay(&c->h.tcp, 1);
  llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
  c->parser.data = c;
  c->rd = &reader;
  px_buf_init(&c->req.url, PX_MAX_URL);
  px_buf_init(&c->req.hbuf, s->w->config->server.max_header + 1024);
  px_buf_init(&c->req.body, s->w->config->server.max_body + 1);
  px_buf_init(&c->in, PX_MAX_PIPELINED);
  px_buf_init(&c->head, 16384);
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  px_metrics_gauge_add(PX_G_CONNECTIONS, 1);
  /* a connection that sends nothing is closed after header_timeout */
  uv_timer_start(&c->t_idle, on_idle_timer, s->w->config->server.header_timeout_ms, 0);
  c->state = C_IDLE;
  start_reading(c);
}

static void on_connection(uv_stream_t *ls, int status) {
  px_server_t *s = ls->data;
  if (status < 0) return;
  px_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return;
  int is_pipe = ls->type == UV_NAMED_PIPE;
  if (is_pipe) uv_pipe_init(s->w->loop, &c->h.pipe, 0);
  else uv_tcp_init(s->w->loop, &c->h.tcp);
  c->h.handle.data = c;
  c->srv = s;
  c->admin = ls == (uv_stream_t *)s->admin;
  c->open_handles = 1;
  if (uv_accept(ls, &c->h.stream) < 0 || s->w->draining ||
      s->nconns >= s->w->config->server.max_connections) {
    c->closing = 1;
    /* not counted yet: close the single handle and free */
    s->nconns++;
    px_metrics_gauge_add(PX_G_CONNECTIONS, 1);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    uv_close(&c->h.handle, on_conn_handle_closed);
    return;
  }
  conn_start(s, c, is_pipe);
}

static void parser_settings_init(void) {
  static int ready;
  if (ready) return;
  llhttp_settings_init(&parser_settings);
  parser_settings.on_message_begin = on_message_begin;
  parser_settings.on_url = on_url;
  parser_settings.on_header_field = on_header_field;
  parser_settings.on_header_value = on_header_value;
  parser_settings.on_headers_complete = on_headers_complete;
  parser_settings.on_chunk_header = on_chunk_header;
  parser_settings.on_chunk_extension_name = on_chunk_ext;
  parser_settings.on_chunk_extension_value = on_chunk_ext;
  parser_settings.on_chunk_extension_name_complete = on_chunk_ext_done;
  parser_settings.on_body = on_body;
  parser_settings.on_message_complete = on_message_complete;
  ready = 1;
}

int px_server_adopt_fd(px_server_t *s, int fd) {
  parser_settings_init();
  px_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return UV_ENOMEM;
  uv_pipe_init(s->w->loop, &c->h.pipe, 0);
  int rc = uv_pipe_open(&c->h.pipe, fd);
  if (rc < 0) {
    free(c); /* uv_pipe_init allocates nothing; the handle was never active */
    return rc;
  }
  c->h.handle.data = c;
  c->srv = s;
  conn_start(s, c, 1);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* listener                                                                 */

static int tcp_socket(const struct sockaddr *sa, socklen_t len, int reuseport) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (sa->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(fd, sa, len) < 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  return fd;
}

/* Unix listeners bound once by the master before it forks (workers > 1):
 * each worker binding the path itself would unlink its siblings' socket. */
static struct {
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  int fd;
} g_prebound[2];
static int g_nprebound;

static int prebound_fd(const char *path) {
  for (int i = 0; i < g_nprebound; i++)
    if (strcmp(g_prebound[i].path, path) == 0) return g_prebound[i].fd;
  return -1;
}

/* A listening unix socket at path with the given mode. It is bound and set
 * listening under a temporary name and renamed into place, so the path
 * never names a socket that refuses connections or has the umask's mode
 * (a client polling for the file may connect the moment it appears).
 * Returns the fd or -errno. */
static int unix_listener(const char *path, unsigned mode) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.%ld~", path, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) return -ENAMETOOLONG;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  unlink(sa.sun_path);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0 ||
      chmod(sa.sun_path, mode) < 0 || rename(sa.sun_path, path) < 0) {
    int e = -errno;
    unlink(sa.sun_path);
    close(fd);
    return e;
  }
  return fd;
}

int px_server_prebind(const px_config_t *cfg, char *errmsg, size_t elen) {
  const char *addrs[2] = {cfg->server.listen, cfg->server.admin_listen};
  for (int i = 0; i < 2; i++) {
    const char *a = addrs[i];
    if (!a || strncmp(a, "unix:", 5) != 0 || prebound_fd(a + 5) >= 0) continue;
    if (strlen(a + 5) >= sizeof(g_prebound[0].path)) {
      snprintf(errmsg, elen, "unix socket path too long: %s", a + 5);
      return UV_ENAMETOOLONG;
    }
    int fd = unix_listener(a + 5, cfg->server.socket_mode);
    if (fd < 0) {
      snprintf(errmsg, elen, "cannot listen on %s: %s", a, strerror(-fd));
      return fd;
    }
    strcpy(g_prebound[g_nprebound].path, a + 5);
    g_prebound[g_nprebound++].fd = fd;
  }
  return 0;
}

/* Listen on address l; *out gets the handle (also on failure, to be closed). */
static int listen_on(px_server_t *s, const char *l, uv_handle_t **out, char *errmsg,
                     size_t elen) {
  int rc;
  if (strncmp(l, "unix:", 5) == 0) {
    uv_pipe_t *p = calloc(1, sizeof(*p));
    uv_pipe_init(s->w->loop, p, 0);
    /* bound by the master for every worker, else here; the mode is the
     * operator's (default 0660: a proxy in the group can connect) */
    int fd = prebound_fd(l + 5);
    if (fd < 0) fd = unix_listener(l + 5, s->w->config->server.socket_mode);
    rc = fd < 0 ? fd : uv_pipe_open(p, fd);
    if (rc < 0 && fd >= 0 && prebound_fd(l + 5) < 0) close(fd);
    *out = (uv_handle_t *)p;
  } else {
    char host[256];
    const char *colon = strrchr(l, ':');
    if (colon == NULL) {
      snprintf(errmsg, elen, "bad listen address '%s'", l);
      return UV_EINVAL;
    }
    int port = atoi(colon + 1);
    size_t hl = (size_t)(colon - l);
    if (hl >= sizeof(host)) hl = sizeof(host) - 1;
    memcpy(host, l, hl);
    host[hl] = 0;
    struct sockaddr_storage ss;
    socklen_t slen;
    if (host[0] == '[') {
      char h6[256];
      snprintf(h6, sizeof(h6), "%.*s", (int)(hl > 2 ? hl - 2 : 0), host + 1);
      rc = uv_ip6_addr(h6, port, (struct sockaddr_in6 *)&ss);
      slen = sizeof(struct sockaddr_in6);
    } else {
      if (strcmp(host, "localhost") == 0 || host[0] == 0)
        snprintf(host, sizeof(host), "%s", host[0] ? "127.0.0.1" : "0.0.0.0");
      rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
      slen = sizeof(struct sockaddr_in);
    }
    if (rc < 0) {
      snprintf(errmsg, elen, "bad listen address '%s'", l);
      return rc;
    }
    int fd = tcp_socket((struct sockaddr *)&ss, slen, s->w->config->server.workers != 1);
    if (fd < 0) {
      snprintf(errmsg, elen, "cannot bind %s: %s", l, strerror(-fd));
      return fd;
    }
    uv_tcp_t *t = calloc(1, sizeof(*t));
    uv_tcp_init(s->w->loop, t);
    rc = uv_tcp_open(t, fd);
    *out = (uv_handle_t *)t;
  }
  (*out)->data = s;
  if (rc == 0) rc = uv_listen((uv_stream_t *)*out, 1024, on_connection);
  if (rc < 0) snprintf(errmsg, elen, "cannot listen on %s: %s", l, uv_strerror(rc));
  return rc;
}

int px_server_listen(px_server_t *s, char *errmsg, size_t elen) {
  parser_settings_init();
  int rc = listen_on(s, s->w->config->server.listen, &s->listener, errmsg, elen);
  if (rc == 0 && s->w->config->server.admin_listen)
    rc = listen_on(s, s->w->config->server.admin_listen, &s->admin, errmsg, elen);
  return rc;
}

static void free_handle(uv_handle_t *h) { free(h); }

void px_server_drain(px_server_t *s) {
  if (s->w->draining) return;
  s->w->draining = 1;
  if (s->listener) {
    uv_close(s->listener, free_handle);
    s->listener = NULL;
  }
  if (s->admin) {
    uv_close(s->admin, free_handle);
    s->admin = NULL;
  }
  /* Idle keep-alive connections stay open while requests are in flight, so
   * that a load balancer polling /readyz on one sees 503; every response now
   * carries `connection: close`, and on_idle closes whatever is left. */
  if (s->active == 0 && s->on_idle) s->on_idle(s);
}

void px_server_close_all(px_server_t *s, int graceful) {
  s->w->draining = 1;
  if (s->listener) {
    uv_close(s->listener, free_handle);
    s->listener = NULL;
  }
  if (s->admin) {
    uv_close(s->admin, free_handle);
    s->admin = NULL;
  }
  for (px_conn_t *c = s->conns, *n; c; c = n) {
    n = c->next;
    /* graceful: idle connections still flushing a last response close
     * once their writes are done */
    if (graceful && c->state != C_BUSY && c->pending > 0) c->close_after_flush = 1;
    else px_srv_close(c);
  }
}
