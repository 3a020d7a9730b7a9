/* server_write.c - the response writer of the client server: the head
 * (status line, validated headers, framing), the body (chunked or not),
 * the write queue (uv_try_write first, then queued with water marks), the
 * send timeout, and the access log line written once the bytes are out.
 * Every byte to the client goes through px_srv_send. */
#include <linux/sockios.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "proxai/log.h"
#include "server_int.h"

/* ---------------------------------------------------------------------- */
/* access log: written once the response has left (or the connection died),
 * with the bytes actually written                                          */

void px_srv_log_emit(px_conn_t *c) {
  px_access_rec_t *r = c->log;
  if (r == NULL) return;
  c->log = NULL;
  r->bytes_out = c->bytes_out;
  px_access_log(r);
  free(r);
}

void px_conn_access_log(px_conn_t *c, const px_access_rec_t *r) {
  const char *const *src[] = {&r->request_id,     &r->key_name,   &r->method,   &r->path,
                              &r->inbound,        &r->route,      &r->upstream, &r->model,
                              &r->upstream_model, &r->error_type, &r->lossy,    &r->team,
                              &r->user,           &r->trace_id};
  size_t n = sizeof(src) / sizeof(src[0]), need = 0;
  for (size_t i = 0; i < n; i++) need += *src[i] ? strlen(*src[i]) + 1 : 0;
  px_srv_log_emit(c);
  px_access_rec_t *copy = malloc(sizeof(*copy) + need);
  if (copy == NULL || c->closing) {
    free(copy);
    px_access_rec_t now = *r;
    now.bytes_out = c->bytes_out;
    px_access_log(&now);
    return;
  }
  *copy = *r;
  const char **dst[] = {&copy->request_id, &copy->key_name, &copy->method,
                        &copy->path,       &copy->inbound,  &copy->route,
                        &copy->upstream,   &copy->model,    &copy->upstream_model,
                        &copy->error_type, &copy->lossy,    &copy->team,
                        &copy->user,       &copy->trace_id};
  char *o = (char *)(copy + 1);
  for (size_t i = 0; i < n; i++) {
    if (*src[i] == NULL) continue;
    size_t l = strlen(*src[i]) + 1;
    memcpy(o, *src[i], l);
    *dst[i] = o;
    o += l;
  }
  c->log = copy;
}

/* ---------------------------------------------------------------------- */
/* write queue                                                              */

static void on_send_timer(uv_timer_t *t);

/* A write failed while the request handler may be on the stack: closing now
 * would run its on_close (and free its state) under its feet, so the close
 * happens on the next loop iteration; later writes are dropped. */
static void conn_fail(px_conn_t *c) {
  if (c->closing || c->failing) return;
  c->failing = 1;
  c->head_pending = 0;
  uv_read_stop(&c->h.stream);
  c->reading = 0;
  c->rd->tick(c, TICK_FAIL);
}

/* Bytes of this connection the client has taken: handed to the kernel
 * (libuv's queue excluded) minus what still waits in the socket's send queue
 * (SIOCOUTQ; without it, what left libuv). Never decreases. */
static uint64_t bytes_taken(px_conn_t *c) {
  uint64_t w = c->queued - c->h.stream.write_queue_size;
  uv_os_fd_t fd;
  int q = 0;
  if (uv_fileno(&c->h.handle, &fd) == 0 && ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0 &&
      (uint64_t)q <= w)
    w -= (uint64_t)q;
  return w;
}

/* Send timeout (nginx's send_timeout, here the server idle_timeout): while
 * bytes are queued, a client that takes none for that long is dropped, which
 * also cancels its upstream transfer. Armed when a write is queued, pushed
 * back on every completed write, stopped when the queue is empty. */
static void send_timer(px_conn_t *c, int progress) {
  if (c->closing || c->failing) return;
  if (c->pending == 0) {
    uv_timer_stop(&c->t_send);
  } else if (progress || !uv_is_active((uv_handle_t *)&c->t_send)) {
    c->send_mark = bytes_taken(c);
    /* the loop's cached time can be far behind after a long piece of work
     * (a large body translated in this iteration): not a client stall */
    uv_update_time(c->srv->w->loop);
    uv_timer_start(&c->t_send, on_send_timer, c->srv->w->config->server.idle_timeout_ms, 0);
  }
}

static void on_send_timer(uv_timer_t *t) {
  px_conn_t *c = t->data;
  if (c->closing || c->pending == 0) return;
  /* one large write completes only at its end: bytes the client took
   * meanwhile are progress too */
  if (bytes_taken(c) > c->send_mark) {
    send_timer(c, 1);
    return;
  }
  px_log_warn("%s: client took no bytes for %llu ms: closing", c->req.request_id,
              (unsigned long long)c->srv->w->config->server.idle_timeout_ms);
  c->rd->close(c);
}

static void on_write_done(uv_write_t *w, int status) {
  wreq_t *wr = (wreq_t *)w;
  px_conn_t *c = wr->conn;
  c->pending -= wr->len;
  if (status == 0 && wr->gen == c->resp_gen) c->bytes_out += wr->len;
  free(wr->owned);
  free(wr);
  if (status < 0) {
    c->rd->close(c);
    return;
  }
  if (c->closing) return;
  if (c->above_high && c->pending < PX_WQ_LOW) {
    c->above_high = 0;
    if (c->handler && c->handler->on_drain) c->handler->on_drain(c->harg);
  }
  if (c->closing) return;
  send_timer(c, 1);
  if (c->pending == 0) {
    if (c->state != C_BUSY) px_srv_log_emit(c);
    c->rd->flushed(c);
  }
}

/* Queue what try_write left of bufs (its first done bytes went out). Every
 * piece is copied into the write request except the owned body (owned,
 * owned_len), which stays in place and is freed once written. */
static int conn_queue(px_conn_t *c, uv_buf_t *bufs, unsigned n, size_t done, char *owned,
                      size_t owned_len) {
  uv_buf_t rem[8];
  unsigned nr = 0;
  size_t skip = done, left = 0, copy = 0;
  for (unsigned i = 0; i < n && nr < 8; i++) {
    size_t l = bufs[i].len;
    if (skip >= l) {
      skip -= l;
      continue;
    }
    rem[nr++] = uv_buf_init(bufs[i].base + skip, (unsigned)(l - skip));
    skip = 0;
  }
  for (unsigned i = 0; i < nr; i++) {
    left += rem[i].len;
    if (!(owned && rem[i].base >= owned && rem[i].base < owned + owned_len)) copy += rem[i].len;
  }
  wreq_t *wr = malloc(sizeof(*wr) + copy);
  if (wr == NULL) {
    free(owned);
    conn_fail(c);
    return UV_ENOMEM;
  }
  size_t off = 0;
  for (unsigned i = 0; i < nr; i++) {
    if (owned && rem[i].base >= owned && rem[i].base < owned + owned_len) continue;
    memcpy(wr->data + off, rem[i].base, rem[i].len);
    rem[i].base = wr->data + off;
    off += rem[i].len;
  }
  if (owned == NULL && nr > 1) { /* all copied: one contiguous piece */
    rem[0] = uv_buf_init(wr->data, (unsigned)left);
    nr = 1;
  }
  wr->conn = c;
  wr->owned = owned;
  wr->len = left;
  wr->gen = c->resp_gen;
  int rc = uv_write(&wr->req, &c->h.stream, rem, nr, on_write_done);
  if (rc < 0) {
    free(owned);
    free(wr);
    conn_fail(c);
    return rc;
  }
  c->pending += left;
  c->queued += left;
  uv_timer_stop(&c->t_idle);
  send_timer(c, 0);
  if (c->pending > PX_WQ_HIGH) c->above_high = 1;
  return 0;
}

/* Write bufs (the held-back response head first, if any): what the socket
 * takes at once, then the rest queued. owned (may be NULL) is a malloc'd
 * buffer among bufs, freed once written. */
int px_srv_send(px_conn_t *c, uv_buf_t *bufs, unsigned n, char *owned,
                     size_t owned_len) {
  if (c->closing || c->failing) {
    free(owned);
    return UV_ECANCELED;
  }
  uv_buf_t all[8];
  if (c->head_pending) { /* head and body leave in one write */
    c->head_pending = 0;
    c->tick_jobs &= ~(unsigned)TICK_FLUSH_HEAD;
    if (n + 1 > sizeof(all) / sizeof(all[0])) return UV_EINVAL;
    all[0] = uv_buf_init(c->head.data, (unsigned)c->head.len);
    for (unsigned i = 0; i < n; i++) all[i + 1] = bufs[i];
    bufs = all;
    n++;
  }
  size_t total = 0, done = 0;
  for (unsigned i = 0; i < n; i++) total += bufs[i].len;
  if (c->pending == 0) {
    int rc = uv_try_write(&c->h.stream, bufs, n);
    if (rc > 0) done = (size_t)rc;
    else if (rc < 0 && rc != UV_EAGAIN && rc != UV_ENOSYS) {
      free(owned);
      conn_fail(c);
      return rc;
    }
    c->bytes_out += done;
    c->queued += done;
    if (done == total) {
      free(owned);
      return 0;
    }
  }
  return conn_queue(c, bufs, n, done, owned, owned_len);
}

/* Gateway-made bytes (head, chunk terminator, 100 Continue, early error):
 * conn_send with one piece, copied if it cannot leave at once. */
int px_srv_write(px_conn_t *c, const char *p, size_t n) {
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
  return px_srv_send(c, &b, 1, NULL, 0);
}

static const char *status_text(int st) {
  switch (st) {
  case 100: return "Continue";
  case 200: return "OK";
  case 201: return "Created";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 413: return "Payload Too Large";
  case 414: return "URI Too Long";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 529: return "Overloaded";
  default: return st < 300 ? "OK" : st < 500 ? "Client Error" : "Server Error";
  }
}

/* RFC 9110 token characters: what a header name may hold. */
/* RFC 9110 tchar: digits, letters and !#$%&'*+-.^_`|~ */
#define TC4(c) [c] = 1, [c + 1] = 1, [c + 2] = 1, [c + 3] = 1
#define TC8(c) TC4(c), TC4(c + 4)
static const unsigned char tchar[256] = {
    TC8('0'),  ['8'] = 1, ['9'] = 1, TC8('A'),  TC8('I'),   TC8('Q'),  ['Y'] = 1,
    ['Z'] = 1, TC8('a'),  TC8('i'),  TC8('q'),  ['y'] = 1,  ['z'] = 1, ['!'] = 1,
    ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1,  ['|'] = 1, ['~'] = 1};
#undef TC8
#undef TC4

int px_srv_header_name_ok(const char *p, size_t n) {
  if (n == 0) return 0;
  unsigned ok = 1;
  for (size_t i = 0; i < n; i++) ok &= tchar[(unsigned char)p[i]];
  return (int)ok;
}

/* The head's writer: bytes go to d while they fit; len counts them all, so
 * a head that did not fit is written again into a buffer of that size. */
typedef struct head_w {
  char *d;
  size_t len, cap;
} head_w_t;

static inline void put(head_w_t *w, const char *p, size_t n) {
  if (n <= w->cap - w->len && w->len <= w->cap) memcpy(w->d + w->len, p, n);
  w->len += n;
}
#define PUT_LIT(w, lit) put((w), (lit), sizeof(lit) - 1)

static void write_head(const px_conn_t *c, head_w_t *w, int status, const px_hdr_t *hdrs,
                       size_t n, const unsigned char *drop, int64_t content_length) {
  char sl[16] = "HTTP/1.1 ";
  sl[9] = (char)('0' + status / 100);
  sl[10] = (char)('0' + status / 10 % 10);
  sl[11] = (char)('0' + status % 10);
  sl[12] = ' ';
  put(w, sl, 13);
  const char *st = status_text(status);
  put(w, st, strlen(st));
  PUT_LIT(w, "\r\n");
  for (size_t i = 0; i < n; i++) {
    if (drop[i / 8] & (1u << (i % 8))) continue;
    put(w, hdrs[i].name.ptr, hdrs[i].name.len);
    PUT_LIT(w, ": ");
    put(w, hdrs[i].value.ptr, hdrs[i].value.len);
    PUT_LIT(w, "\r\n");
  }
  PUT_LIT(w, "x-request-id: ");
  put(w, c->req.request_id, strlen(c->req.request_id));
  PUT_LIT(w, "\r\n");
  if (content_length >= 0) {
    char num[24];
    size_t k = sizeof(num);
    uint64_t v = (uint64_t)content_length;
    do {
      num[--k] = (char)('0' + v % 10);
    } while ((v /= 10) != 0);
    PUT_LIT(w, "content-length: ");
    put(w, num + k, sizeof(num) - k);
    PUT_LIT(w, "\r\n");
  } else {
    PUT_LIT(w, "transfer-encoding: chunked\r\n");
  }
  if (!c->req.keep_alive || c->srv->w->draining) PUT_LIT(w, "connection: close\r\n");
  PUT_LIT(w, "\r\n");
}

int px_resp_start(px_conn_t *c, int status, const px_hdr_t *hdrs, size_t n,
                  int64_t content_length) {
  if (c->closing || c->failing || c->resp_started) return UV_ECANCELED;
  if (status < 100 || status > 999) status = 500;
  /* SPEC section 10: a header that could split the head is never written */
  unsigned char drop_stack[8], *drop = drop_stack;
  if (n > 8 * sizeof(drop_stack) && (drop = calloc((n + 7) / 8, 1)) == NULL)
    return PX_ENOMEM;
  memset(drop_stack, 0, sizeof(drop_stack));
  for (size_t i = 0; i < n; i++) {
    if (px_srv_header_name_ok(hdrs[i].name.ptr, hdrs[i].name.len) &&
        px_header_value_ok(hdrs[i].value.ptr, hdrs[i].value.len))
      continue;
    drop[i / 8] |= (unsigned char)(1u << (i % 8));
    px_log_warn("%s: response header '%.*s' dropped: invalid name or value",
                c->req.request_id, (int)(hdrs[i].name.len > 64 ? 64 : hdrs[i].name.len),
                hdrs[i].name.ptr ? hdrs[i].name.ptr : "");
  }
  char head[8192];
  head_w_t w = {head, 0, sizeof(head)};
  write_head(c, &w, status, hdrs, n, drop, content_length);
  char *big = NULL;
  if (w.len > sizeof(head)) { /* a large head: written again, into its size */
    if (w.len > (1u << 20) || (big = malloc(w.len)) == NULL) {
      if (drop != drop_stack) free(drop);
      return w.len > (1u << 20) ? PX_ETOOBIG : PX_ENOMEM;
    }
    w = (head_w_t){big, 0, w.len};
    write_head(c, &w, status, hdrs, n, drop, content_length);
  }
  if (drop != drop_stack) free(drop);
  px_buf_t ob = {w.d, w.len, w.cap, w.cap}, *out = &ob;
  int rc;
  /* a new response: written bytes count from here (the previous response's
   * queued writes still complete under their own generation) */
  px_srv_log_emit(c); /* a previous response still flushing: what it got so far */
  c->resp_gen++;
  c->bytes_out = 0;
  c->resp_started = 1;
  c->resp_chunked = content_length < 0;
  px_buf_reset(&c->head);
  if (content_length != 0 && px_buf_append(&c->head, out->data, out->len) == 0) {
    /* A body (or a chunked stream) follows: the head waits for its first
     * bytes, so both leave in one write, at most until the next loop
     * iteration. */
    c->head_pending = 1;
    c->rd->tick(c, TICK_FLUSH_HEAD);
    free(big);
    return 0;
  }
  rc = px_srv_write(c, out->data, out->len);
  free(big);
  return rc;
}

/* "<n in lower-case hex>\r\n" into sz (room for any size_t); its length.
 * Written by hand: snprintf showed in every stream's profile. */
static int chunk_size_line(char *sz, size_t n) {
  static const char hex[] = "0123456789abcdef";
  int d = 1;
  for (size_t v = n >> 4; v; v >>= 4) d++;
  for (int k = d - 1; k >= 0; k--, n >>= 4) sz[k] = hex[n & 15];
  sz[d] = '\r';
  sz[d + 1] = '\n';
  return d + 2;
}

int px_resp_write(px_conn_t *c, const char *p, size_t n, unsigned flags) {
  char *owned = (flags & PX_RESP_TAKE) ? (char *)p : NULL;
  if (c->closing || c->failing || !c->resp_started) {
    free(owned);
    return UV_ECANCELED;
  }
  if (n == 0 || c->req.method == HTTP_HEAD) { /* HEAD: headers only */
    free(owned);
    return 0;
  }
  char sz[24];
  int l = c->resp_chunked ? chunk_size_line(sz, n) : 0;
  uv_buf_t bufs[3];
  unsigned nb = 0;
  if (l) bufs[nb++] = uv_buf_init(sz, (unsigned)l);
  bufs[nb++] = uv_buf_init((char *)p, (unsigned)n);
  if (l) bufs[nb++] = uv_buf_init("\r\n", 2);
  return px_srv_send(c, bufs, nb, owned, owned ? n : 0);
}

void px_resp_end(px_conn_t *c) {
  if (c->state != C_BUSY) return;
  if (c->head_pending && !c->closing && !c->failing) px_srv_send(c, NULL, 0, NULL, 0);
  c->head_pending = 0;
  if (c->resp_started && c->resp_chunked && !c->closing && !c->failing &&
      c->req.method != HTTP_HEAD)
    px_srv_write(c, "0\r\n\r\n", 5);
  c->rd->request_done(c);
}

void px_resp_abort(px_conn_t *c) {
  c->handler = NULL;
  c->head_pending = 0;
  c->rd->close(c);
}

int px_resp_simple(px_conn_t *c, int status, const char *content_type,
                   const char *body, size_t len, const px_hdr_t *hdrs, size_t n) {
  px_hdr_t all[32];
  size_t k = 0;
  if (content_type) all[k++] = (px_hdr_t){px_str("content-type"), px_str(content_type)};
  for (size_t i = 0; i < n && k < 32; i++) all[k++] = hdrs[i];
  int rc = px_resp_start(c, status, all, k, (int64_t)len);
  if (rc == 0) rc = px_resp_write(c, body, len, 0);
  px_resp_end(c);
  return rc;
}

