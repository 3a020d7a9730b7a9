/* test_upstream.c - upstream client against a tiny HTTP server in the same loop.
 *
 * The server listens on 127.0.0.1:0 and answers with hand-written responses;
 * each test scripts it through a handler. Every test ends with
 * px_uclient_close() and uv_loop_close() == 0.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "proxai/upstream.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* ---- tiny server ---- */

typedef struct srv srv_t;
typedef struct conn conn_t;

struct conn {
  uv_tcp_t tcp;
  srv_t *s;
  conn_t *next;
  char *buf;
  size_t len, cap;
  int closing;
};

typedef struct req {
  char method[16];
  char path[128];
  const char *head; /* request head, NUL-terminated copy */
  const char *body;
  size_t body_len;
} req_t;

struct srv {
  uv_loop_t *loop;
  uv_tcp_t tcp;
  int port;
  int nconns;  /* accepted */
  int ncloses; /* EOF or error seen */
  int nreqs;
  conn_t *conns;
  void (*handler)(srv_t *s, conn_t *c, const req_t *r);
  void (*on_close)(srv_t *s);
  void *ud;
};

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  srv_t *s = c->s;
  for (conn_t **pp = &s->conns; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  free(c->buf);
  free(c);
}

static void conn_close(conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_written(uv_write_t *w, int status) {
  free(w->data);
  free(w);
}

static void conn_write(conn_t *c, const void *p, size_t n) {
  if (c->closing) return;
  uv_write_t *w = malloc(sizeof(*w));
  char *d = malloc(n ? n : 1);
  CHECK(w && d);
  memcpy(d, p, n);
  w->data = d;
  uv_buf_t b = uv_buf_init(d, (unsigned)n);
  CHECK(uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_written) == 0);
}

static void conn_puts(conn_t *c, const char *s) {
  conn_write(c, s, strlen(s));
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  conn_t *c = h->data;
  if (c->cap - c->len < 65536) {
    c->cap = c->cap ? c->cap * 2 : 131072;
    c->buf = realloc(c->buf, c->cap);
    CHECK(c->buf);
  }
  *b = uv_buf_init(c->buf + c->len, (unsigned)(c->cap - c->len));
}

static size_t content_length(const char *head) {
  const char *p = head;
  while ((p = strchr(p, '\n'))) {
    p++;
    if (strncasecmp(p, "content-length:", 15) == 0) return strtoul(p + 15, NULL, 10);
  }
  return 0;
}

static void conn_parse(conn_t *c) {
  for (;;) {
    char *e = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!e) return;
    size_t hlen = (size_t)(e - c->buf) + 4;
    char *head = malloc(hlen + 1);
    CHECK(head);
    memcpy(head, c->buf, hlen);
    head[hlen] = 0;
    size_t blen = content_length(head);
    if (c->len < hlen + blen) {
      free(head);
      return;
    }
    req_t r = {.head = head, .body = c->buf + hlen, .body_len = blen};
    CHECK(sscanf(head, "%15s %127s", r.method, r.path) == 2);
    c->s->nreqs++;
    if (c->s->handler) c->s->handler(c->s, c, &r);
    free(head);
    memmove(c->buf, c->buf + hlen + blen, c->len - hlen - blen);
    c->len -= hlen + blen;
  }
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  conn_t *c = st->data;
  if (n < 0) {
    c->s->ncloses++;
    conn_close(c);
    if (c->s->on_close) c->s->on_close(c->s);
    return;
  }
  c->len += (size_t)n;
  conn_parse(c);
}

static void on_accept(uv_stream_t *l, int status) {
  srv_t *s = l->data;
  CHECK(status == 0);
  conn_t *c = calloc(1, sizeof(*c));
  CHECK(c);
  c->s = s;
  uv_tcp_init(s->loop, &c->tcp);
  c->tcp.data = c;
  CHECK(uv_accept(l, (uv_stream_t *)&c->tcp) == 0);
  uv_tcp_nodelay(&c->tcp, 1);
  c->next = s->conns;
  s->conns = c;
  s->nconns++;
  CHECK(uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0);
}

static void srv_start(srv_t *s, uv_loop_t *loop) {
  struct sockaddr_in a;
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  s->loop = loop;
  uv_tcp_init(loop, &s->tcp);
  s->tcp.data = s;
  uv_ip4_addr("127.0.0.1", 0, &a);
  CHECK(uv_tcp_bind(&s->tcp, (struct sockaddr *)&a, 0) == 0);
  CHECK(uv_listen((uv_stream_t *)&s->tcp, 64, on_accept) == 0);
  CHECK(uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&ss, &len) == 0);
  s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void srv_stop(srv_t *s) {
  if (!uv_is_closing((uv_handle_t *)&s->tcp)) uv_close((uv_handle_t *)&s->tcp, NULL);
  for (conn_t *c = s->conns; c; c = c->next) conn_close(c);
}

static int has_header(const char *head, const char *name) {
  size_t n = strlen(name);
  for (const char *p = head; (p = strchr(p, '\n'));) {
    p++;
    if (strncasecmp(p, name, n) == 0 && p[n] == ':') return 1;
  }
  return 0;
}

/* ---- test context ---- */

typedef struct t {
  uv_loop_t loop;
  srv_t srv;
  px_uclient_t *c;
  px_xfer_t *x, *x2;
  uv_timer_t watchdog, aux;
  int aux_used;
  char url[128];
  /* client side observations */
  int nheaders, ndata, ndone, status;
  px_xfer_result_t res;
  char retry_after[32];
  int saw_x_test;
  char heads[2048]; /* "name: value\n" as on_headers saw them */
  int want_len;     /* t->x is the transfer: record its content length */
  int64_t clen;
  char *body;
  size_t body_len, body_cap;
  int closed_cb;
  int finished;
  /* per test */
  int step;
  int pauses;
  char order[64];
  const char *req_body;
  size_t req_len;
} t_t;

static void on_watchdog(uv_timer_t *h) {
  fprintf(stderr, "test timed out\n");
  exit(1);
}

static void on_client_closed(void *arg) {
  ((t_t *)arg)->closed_cb++;
}

/* The received body stays readable after the loop closed: freed by the next
 * t_init() or at exit. */
static char *g_body;

static void t_init(t_t *t) {
  free(g_body);
  g_body = NULL;
  memset(t, 0, sizeof(*t));
  CHECK(uv_loop_init(&t->loop) == 0);
  srv_start(&t->srv, &t->loop);
  t->srv.ud = t;
  snprintf(t->url, sizeof(t->url), "http://127.0.0.1:%d/v1/x", t->srv.port);
  t->c = px_uclient_new(&t->loop);
  CHECK(t->c);
  uv_timer_init(&t->loop, &t->watchdog);
  uv_timer_start(&t->watchdog, on_watchdog, 10000, 0);
  uv_unref((uv_handle_t *)&t->watchdog);
  uv_timer_init(&t->loop, &t->aux);
  t->aux.data = t;
}

/* Ends the test: close the client and the server; the loop then drains. */
static void t_finish(t_t *t) {
  if (t->finished) return;
  t->finished = 1;
  px_uclient_close(t->c, on_client_closed, t);
  srv_stop(&t->srv);
  uv_close((uv_handle_t *)&t->watchdog, NULL);
  uv_close((uv_handle_t *)&t->aux, NULL);
}

static void t_run_and_close(t_t *t) {
  uv_run(&t->loop, UV_RUN_DEFAULT);
  CHECK(t->finished);
  CHECK(t->closed_cb == 1);
  CHECK(uv_loop_close(&t->loop) == 0);
}

static void body_append(t_t *t, const char *p, size_t n) {
  if (t->body_len + n > t->body_cap) {
    t->body_cap = (t->body_len + n) * 2;
    t->body = realloc(t->body, t->body_cap);
    CHECK(t->body);
    g_body = t->body;
  }
  memcpy(t->body + t->body_len, p, n);
  t->body_len += n;
}

static int cb_headers(void *arg, int status, const px_hdr_t *h, size_t n) {
  t_t *t = arg;
  t->nheaders++;
  t->status = status;
  CHECK(t->ndata == 0);
  t->heads[0] = 0;
  if (t->want_len) t->clen = px_xfer_content_length(t->x);
  for (size_t i = 0; i < n; i++) {
    size_t k = strlen(t->heads);
    snprintf(t->heads + k, sizeof(t->heads) - k, "%.*s: %.*s\n", (int)h[i].name.len,
             h[i].name.ptr, (int)h[i].value.len, h[i].value.ptr);
    if (h[i].name.len == 11 && strncasecmp(h[i].name.ptr, "retry-after", 11) == 0) {
      CHECK(h[i].value.len < sizeof(t->retry_after));
      memcpy(t->retry_after, h[i].value.ptr, h[i].value.len);
      t->retry_after[h[i].value.len] = 0;
    }
    if (h[i].name.len == 6 && strncasecmp(h[i].name.ptr, "x-test", 6) == 0 &&
        h[i].value.len == 3 && memcmp(h[i].value.ptr, "yes", 3) == 0)
      t->saw_x_test = 1;
  }
  return 0;
}

static int cb_data(void *arg, const char *p, size_t n) {
  t_t *t = arg;
  CHECK(t->nheaders == 1);
  t->ndata++;
  body_append(t, p, n);
  return 0;
}

static void cb_done_finish(void *arg, px_xfer_result_t res, const char *msg) {
  t_t *t = arg;
  CHECK(msg != NULL);
  t->ndone++;
  t->res = res;
  t_finish(t);
}

static px_xfer_opts_t opts_for(t_t *t) {
  return (px_xfer_opts_t){.method = "GET",
                          .url = t->url,
                          .connect_timeout_ms = 2000,
                          .first_byte_timeout_ms = 5000,
                          .idle_timeout_ms = 5000};
}

static char pattern_at(size_t i) {
  return (char)('a' + (i * 7) % 26);
}

static char *make_pattern(size_t n) {
  char *p = malloc(n);
  CHECK(p);
  for (size_t i = 0; i < n; i++) p[i] = pattern_at(i);
  return p;
}

/* ---- 1. POST: body intact both ways, status and headers ---- */

static void h_echo(srv_t *s, conn_t *c, const req_t *r) {
  t_t *t = s->ud;
  char head[256];
  CHECK(strcmp(r->method, "POST") == 0);
  CHECK(strcmp(r->path, "/v1/x") == 0);
  CHECK(!has_header(r->head, "expect"));
  /* both lanes ask for the body as it is (SPEC section 10) */
  CHECK(strcasestr(r->head, "\r\naccept-encoding: identity\r\n"));
  CHECK(has_header(r->head, "x-custom"));
  CHECK(!has_header(r->head, "x-evil") && !has_header(r->head, "x-inject"));
  CHECK(r->body_len == t->req_len);
  CHECK(memcmp(r->body, t->req_body, t->req_len) == 0);
  snprintf(head, sizeof(head),
           "HTTP/1.1 200 OK\r\nX-Test: yes\r\nContent-Length: %zu\r\n\r\n", r->body_len);
  conn_puts(c, head);
  conn_write(c, r->body, r->body_len);
}

static void test_post(void) {
  t_t t;
  t_init(&t);
  size_t n = 300000; /* above curl's 1 MiB Expect threshold? no: plain large body */
  char *body = make_pattern(n);
  t.req_body = body;
  t.req_len = n;
  t.srv.handler = h_echo;
  /* a line with a CR LF never becomes a second header (SPEC section 10) */
  const char *hdrs[] = {"Content-Type: application/json", "X-Inject: a\r\nX-Evil: 1",
                        "X-Custom: 1", NULL};
  px_xfer_opts_t o = opts_for(&t);
  o.method = "POST";
  o.body = body;
  o.body_len = n;
  o.headers = hdrs;
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_finish};
  t.x = px_xfer_start(t.c, &o, &cbs, &t);
  CHECK(t.x);
  CHECK(px_uclient_active(t.c) == 1);
  t_run_and_close(&t);
  CHECK(t.ndone == 1);
  CHECK(t.res == PX_XFER_OK);
  CHECK(t.status == 200);
  CHECK(t.saw_x_test);
  CHECK(t.body_len == n);
  CHECK(memcmp(t.body, body, n) == 0);
  free(body);
}

/* A 3 MiB body echoed whole: in one piece, or in parts of every size */
static void post_big(int in_parts) {
  t_t t;
  t_init(&t);
  size_t n = 3 * 1024 * 1024, np = 0;
  char *body = make_pattern(n);
  t.req_body = body;
  t.req_len = n;
  t.srv.handler = h_echo;
  const char *hdrs[] = {"X-Custom: 1", NULL};
  px_xfer_opts_t o = opts_for(&t);
  o.method = "POST";
  o.body = body;
  o.body_len = n;
  o.headers = hdrs;
  px_str_t *parts = NULL;
  if (in_parts) {
    parts = malloc(n / 100 * sizeof(*parts));
    CHECK(parts);
    for (size_t at = 0, k = 0; at < n; k++) {
      size_t l = k % 7 == 3 ? 0 : 1 + (k * 131) % 2000;
      if (l > n - at) l = n - at;
      parts[np++] = (px_str_t){body + at, l};
      at += l;
    }
    CHECK(np > 2048);
    o.body = "";
    o.body_parts = parts;
    o.body_nparts = np;
  }
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_finish};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.res == PX_XFER_OK);
  CHECK(t.body_len == n && memcmp(t.body, body, n) == 0);
  free(parts);
  free(body);
}

/* Expect: is also suppressed above curl's 1 MiB threshold. */
static void test_post_big(void) { post_big(0); }

/* A body in parts (a translated body with spans of the client's): more
 * parts than one writev takes (IOV_MAX), of every size, some empty, above
 * curl's Expect threshold; the server gets them joined. */
static void test_post_parts(void) { post_big(1); }

/* ---- 2. connection reuse; empty body still fires on_headers ---- */

static void h_reuse(srv_t *s, conn_t *c, const req_t *r) {
  if (strcmp(r->path, "/a") == 0)
    conn_puts(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst");
  else
    conn_puts(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
}

static void cb_done_reuse(void *arg, px_xfer_result_t res, const char *msg) {
  t_t *t = arg;
  t->ndone++;
  CHECK(res == PX_XFER_OK);
  if (t->ndone == 1) {
    CHECK(t->nheaders == 1 && t->body_len == 5 && memcmp(t->body, "first", 5) == 0);
    /* second request started from on_done: same multi, same connection */
    t->nheaders = 0;
    t->ndata = 0;
    t->body_len = 0;
    snprintf(t->url, sizeof(t->url), "http://127.0.0.1:%d/b", t->srv.port);
    px_xfer_opts_t o = opts_for(t);
    px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_reuse};
    CHECK(px_xfer_start(t->c, &o, &cbs, t));
  } else {
    CHECK(t->nheaders == 1);
    CHECK(t->status == 200);
    CHECK(t->ndata == 0);
    t_finish(t);
  }
}

static void test_reuse(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_reuse;
  snprintf(t.url, sizeof(t.url), "http://127.0.0.1:%d/a", t.srv.port);
  px_xfer_opts_t o = opts_for(&t);
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_reuse};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.ndone == 2);
  CHECK(t.srv.nreqs == 2);
  CHECK(t.srv.nconns == 1);
}

/* ---- 3. chunked streaming arrives incrementally ---- */

#define NPARTS 5
static conn_t *g_stream_conn;

static void send_part(t_t *t) {
  char chunk[64];
  int n = snprintf(chunk, sizeof(chunk), "part%d;", t->step);
  char frame[96];
  int m = snprintf(frame, sizeof(frame), "%x\r\n%s\r\n", n, chunk);
  conn_write(g_stream_conn, frame, (size_t)m);
  t->step++;
  if (t->step == NPARTS) conn_puts(g_stream_conn, "0\r\n\r\n");
}

static void h_stream(srv_t *s, conn_t *c, const req_t *r) {
  t_t *t = s->ud;
  g_stream_conn = c;
  conn_puts(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
  send_part(t);
}

static int cb_data_stream(void *arg, const char *p, size_t n) {
  t_t *t = arg;
  cb_data(arg, p, n);
  /* the server sends the next part only once this one arrived */
  char want[128] = "";
  for (int i = 0; i < t->step; i++)
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "part%d;", i);
  if (t->body_len == strlen(want) && t->step < NPARTS) {
    CHECK(memcmp(t->body, want, t->body_len) == 0);
    send_part(t);
  }
  return 0;
}

static void test_stream(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_stream;
  px_xfer_opts_t o = opts_for(&t);
  px_xfer_cbs_t cbs = {cb_headers, cb_data_stream, cb_done_finish};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.res == PX_XFER_OK);
  CHECK(t.step == NPARTS);
  CHECK(t.ndata >= NPARTS);
  const char *want = "part0;part1;part2;part3;part4;";
  CHECK(t.body_len == strlen(want) && memcmp(t.body, want, t.body_len) == 0);
}

/* ---- 4. pause / resume: every byte once, in order ---- */

#define BIG (512 * 1024)

static void h_big(srv_t *s, conn_t *c, const req_t *r) {
  char head[128];
  snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", BIG);
  conn_puts(c, head);
  char *p = make_pattern(BIG);
  conn_write(c, p, BIG);
  free(p);
}

static void on_resume_timer(uv_timer_t *h) {
  t_t *t = h->data;
  CHECK(px_xfer_paused(t->x));
  px_xfer_resume(t->x);
}

static int cb_data_pause(void *arg, const char *p, size_t n) {
  t_t *t = arg;
  CHECK(!px_xfer_paused(t->x));
  t->ndata++;
  /* the first call, then every fourth; with step set also the call right
   * after, which is the re-delivery inside curl_easy_pause() */
  if (t->ndata % 4 == 1 || (t->step && t->ndata % 4 == 2)) {
    t->pauses++;
    uv_timer_start(&t->aux, on_resume_timer, 5, 0);
    return PX_XFER_PAUSE;
  }
  for (size_t i = 0; i < n; i++) CHECK(p[i] == pattern_at(t->body_len + i));
  t->body_len += n;
  return 0;
}

static void test_pause_resume(int twice) {
  t_t t;
  t_init(&t);
  t.step = twice;
  t.srv.handler = h_big;
  px_xfer_opts_t o = opts_for(&t);
  o.idle_timeout_ms = 1; /* paused time does not count as idle */
  px_xfer_cbs_t cbs = {cb_headers, cb_data_pause, cb_done_finish};
  CHECK((t.x = px_xfer_start(t.c, &o, &cbs, &t)));
  t_run_and_close(&t);
  CHECK(t.res == PX_XFER_OK);
  CHECK(t.pauses >= 2);
  CHECK(t.body_len == BIG);
}

/* ---- 4b. calls from inside curl callbacks: start, resume ---- */

static void h_big_or_small(srv_t *s, conn_t *c, const req_t *r) {
  if (strcmp(r->path, "/y") == 0)
    conn_puts(c, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nY");
  else
    h_big(s, c, r);
}

static int cb_headers_y(void *arg, int status, const px_hdr_t *h, size_t n) {
  t_t *t = arg;
  CHECK(px_xfer_paused(t->x));
  px_xfer_resume(t->x); /* inside Y's curl callback: deferred */
  CHECK(px_xfer_paused(t->x));
  t->step = 2;
  return 0;
}

static void cb_done_both(void *arg, px_xfer_result_t res, const char *msg) {
  t_t *t = arg;
  CHECK(res == PX_XFER_OK);
  if (++t->ndone == 2) t_finish(t);
}

static int cb_data_start_y(void *arg, const char *p, size_t n) {
  t_t *t = arg;
  t->ndata++;
  if (t->ndata == 1) {
    /* start Y from inside X's write callback, then pause X */
    char u[128];
    snprintf(u, sizeof(u), "http://127.0.0.1:%d/y", t->srv.port);
    px_xfer_opts_t o = opts_for(t);
    o.url = u;
    px_xfer_cbs_t cbs = {cb_headers_y, NULL, cb_done_both};
    CHECK((t->x2 = px_xfer_start(t->c, &o, &cbs, t)));
    CHECK(px_uclient_active(t->c) == 2);
    t->pauses++;
    return PX_XFER_PAUSE;
  }
  CHECK(t->step == 2); /* resumed only through Y */
  for (size_t i = 0; i < n; i++) CHECK(p[i] == pattern_at(t->body_len + i));
  t->body_len += n;
  return 0;
}

static void test_inside_callbacks(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_big_or_small;
  px_xfer_opts_t o = opts_for(&t);
  px_xfer_cbs_t cbs = {NULL, cb_data_start_y, cb_done_both};
  CHECK((t.x = px_xfer_start(t.c, &o, &cbs, &t)));
  t_run_and_close(&t);
  CHECK(t.ndone == 2);
  CHECK(t.body_len == BIG);
  CHECK(t.srv.nconns == 2);
}

/* ---- 5. cancel mid-body: no callback after, the server sees the close ---- */

static void h_partial(srv_t *s, conn_t *c, const req_t *r) {
  conn_puts(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n0123456789");
}

static void srv_closed_finish(srv_t *s) {
  t_finish(s->ud);
}

static void cb_done_never(void *arg, px_xfer_result_t res, const char *msg) {
  CHECK(!"on_done must not fire");
}

static int cb_data_cancel_inside(void *arg, const char *p, size_t n) {
  t_t *t = arg;
  t->ndata++;
  CHECK(t->ndata == 1);
  px_xfer_cancel(t->x);
  CHECK(px_uclient_active(t->c) == 0);
  return 0;
}

static void on_cancel_timer(uv_timer_t *h) {
  t_t *t = h->data;
  px_xfer_cancel(t->x);
  px_xfer_cancel(t->x); /* idempotent */
  CHECK(px_uclient_active(t->c) == 0);
}

static int cb_data_cancel_later(void *arg, const char *p, size_t n) {
  t_t *t = arg;
  t->ndata++;
  CHECK(t->step == 0);
  t->step = 1;
  uv_timer_start(&t->aux, on_cancel_timer, 1, 0);
  return t->pauses ? PX_XFER_PAUSE : 0;
}

static void test_cancel(int mode) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_partial;
  t.srv.on_close = srv_closed_finish;
  t.pauses = mode == 2; /* cancel a paused transfer */
  px_xfer_opts_t o = opts_for(&t);
  px_xfer_cbs_t cbs = {cb_headers,
                       mode == 0 ? cb_data_cancel_inside : cb_data_cancel_later,
                       cb_done_never};
  CHECK((t.x = px_xfer_start(t.c, &o, &cbs, &t)));
  t_run_and_close(&t);
  CHECK(t.srv.ncloses == 1);
  CHECK(t.ndata == 1);
}

/* ---- 6. connect failure ---- */

static void cb_done_record(void *arg, px_xfer_result_t res, const char *msg) {
  t_t *t = arg;
  CHECK(msg != NULL);
  t->ndone++;
  t->res = res;
}

static void test_connect_fail(void) {
  t_t t;
  t_init(&t);
  /* a port that was just free: bind, read, close */
  uv_tcp_t tmp;
  struct sockaddr_in a;
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  uv_tcp_init(&t.loop, &tmp);
  uv_ip4_addr("127.0.0.1", 0, &a);
  CHECK(uv_tcp_bind(&tmp, (struct sockaddr *)&a, 0) == 0);
  CHECK(uv_tcp_getsockname(&tmp, (struct sockaddr *)&ss, &len) == 0);
  int port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  uv_close((uv_handle_t *)&tmp, NULL);
  uv_run(&t.loop, UV_RUN_NOWAIT);
  snprintf(t.url, sizeof(t.url), "http://127.0.0.1:%d/", port);
  px_xfer_opts_t o = opts_for(&t);
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_finish};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.ndone == 1);
  CHECK(t.res == PX_XFER_ECONNECT);
  CHECK(t.nheaders == 0);
}

/* ---- 6b. connect timeout: a listener whose accept queue is full ---- */

static void test_connect_timeout(void) {
  t_t t;
  t_init(&t);
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  uv_ip4_addr("127.0.0.1", 0, &a);
  CHECK(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0);
  CHECK(listen(l, 0) == 0);
  CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
  /* fill the accept queue (never accepted) so further SYNs are dropped */
  int fill[8], nfill = 0;
  for (; nfill < 8; nfill++) {
    fill[nfill] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    connect(fill[nfill], (struct sockaddr *)&a, sizeof(a));
  }
  snprintf(t.url, sizeof(t.url), "http://127.0.0.1:%d/", ntohs(a.sin_port));
  px_xfer_opts_t o = opts_for(&t);
  o.connect_timeout_ms = 100;
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_finish};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  for (int i = 0; i < nfill; i++) close(fill[i]);
  close(l);
  CHECK(t.ndone == 1);
  CHECK(t.res == PX_XFER_ETIMEOUT_CONNECT);
}

/* ---- 7/8. first byte and idle timeouts ---- */

static void cb_done_then_wait_close(void *arg, px_xfer_result_t res, const char *msg) {
  t_t *t = arg;
  cb_done_record(arg, res, msg);
  if (t->srv.ncloses > 0) t_finish(t);
}

static void srv_closed_finish_if_done(srv_t *s) {
  t_t *t = s->ud;
  if (t->ndone) t_finish(t);
}

static void test_first_byte_timeout(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = NULL; /* never answers */
  t.srv.on_close = srv_closed_finish_if_done;
  px_xfer_opts_t o = opts_for(&t);
  o.first_byte_timeout_ms = 50;
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_then_wait_close};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.ndone == 1);
  CHECK(t.res == PX_XFER_ETIMEOUT_FIRST_BYTE);
  CHECK(t.nheaders == 0);
  CHECK(t.srv.nreqs == 1);
  CHECK(t.srv.ncloses == 1);
}

static void test_idle_timeout(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_partial; /* 10 of 100000 bytes, then stalls */
  t.srv.on_close = srv_closed_finish_if_done;
  px_xfer_opts_t o = opts_for(&t);
  o.idle_timeout_ms = 50;
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_then_wait_close};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.ndone == 1);
  CHECK(t.res == PX_XFER_ETIMEOUT_IDLE);
  CHECK(t.nheaders == 1);
  CHECK(t.body_len == 10 && memcmp(t.body, "0123456789", 10) == 0);
  CHECK(t.srv.ncloses == 1);
}

/* ---- 9. pool limit: the second transfer waits for the first ---- */

static conn_t *g_pool_conn;

static void on_pool_reply(uv_timer_t *h) {
  conn_puts(g_pool_conn, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nA");
}

static void h_pool(srv_t *s, conn_t *c, const req_t *r) {
  t_t *t = s->ud;
  strcat(t->order, strcmp(r->path, "/a") == 0 ? "qA " : "qB ");
  if (strcmp(r->path, "/a") == 0) {
    /* answer A late: without the limit B would reach us meanwhile */
    g_pool_conn = c;
    uv_timer_start(&t->aux, on_pool_reply, 30, 0);
  } else {
    conn_puts(c, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nB");
  }
}

static void cb_done_a(void *arg, px_xfer_result_t res, const char *msg) {
  t_t *t = arg;
  CHECK(res == PX_XFER_OK);
  strcat(t->order, "dA ");
}

static void cb_done_b(void *arg, px_xfer_result_t res, const char *msg) {
  t_t *t = arg;
  CHECK(res == PX_XFER_OK);
  strcat(t->order, "dB");
  t_finish(t);
}

static void test_pool_limit(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_pool;
  char ua[128], ub[128];
  snprintf(ua, sizeof(ua), "http://127.0.0.1:%d/a", t.srv.port);
  snprintf(ub, sizeof(ub), "http://127.0.0.1:%d/b", t.srv.port);
  px_xfer_opts_t o = opts_for(&t);
  o.pool = "p";
  o.max_connections = 1;
  px_xfer_cbs_t ca = {NULL, NULL, cb_done_a}, cb = {NULL, NULL, cb_done_b};
  o.url = ua;
  CHECK(px_xfer_start(t.c, &o, &ca, &t));
  o.url = ub;
  CHECK(px_xfer_start(t.c, &o, &cb, &t));
  CHECK(px_uclient_active(t.c) == 2);
  t_run_and_close(&t);
  CHECK(strcmp(t.order, "qA dA qB dB") == 0);
  CHECK(t.srv.nconns == 1);
}

/* ---- 10. status, headers, interim 100 skipped ---- */

static void h_429(srv_t *s, conn_t *c, const req_t *r) {
  conn_puts(c,
            "HTTP/1.1 100 Continue\r\n\r\n"
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\n"
            "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
}

static void test_status_headers(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_429;
  px_xfer_opts_t o = opts_for(&t);
  o.method = "POST";
  o.body = "{\"a\":1}";
  o.body_len = 7;
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_finish};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.res == PX_XFER_OK);
  CHECK(t.nheaders == 1);
  CHECK(t.status == 429);
  CHECK(strcmp(t.retry_after, "7") == 0);
  CHECK(t.body_len == 2 && memcmp(t.body, "{}", 2) == 0);
}

/* ---- 11. on_data < 0 aborts; on_headers != 0 cancels silently ---- */

static int cb_data_abort(void *arg, const char *p, size_t n) {
  ((t_t *)arg)->ndata++;
  return -1;
}

static int cb_headers_refuse(void *arg, int status, const px_hdr_t *h, size_t n) {
  ((t_t *)arg)->nheaders++;
  return 1;
}

static void test_abort(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_partial;
  px_xfer_opts_t o = opts_for(&t);
  px_xfer_cbs_t cbs = {cb_headers, cb_data_abort, cb_done_finish};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.ndone == 1);
  CHECK(t.res == PX_XFER_EOTHER);
  CHECK(t.ndata == 1);

  t_init(&t);
  t.srv.handler = h_partial;
  t.srv.on_close = srv_closed_finish;
  cbs = (px_xfer_cbs_t){cb_headers_refuse, cb_data, cb_done_never};
  o = opts_for(&t);
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.nheaders == 1);
  CHECK(t.ndata == 0);
  CHECK(t.srv.ncloses == 1);
}

/* ---- 12. closing the client with transfers running or queued ---- */

static void h_count_then_close(srv_t *s, conn_t *c, const req_t *r) {
  t_t *t = s->ud;
  if (s->nreqs == 2) { /* two run (limit 2), the third waits in the queue */
    CHECK(px_uclient_active(t->c) == 3);
    t_finish(t);
  }
}

static int cb_data_close_inside(void *arg, const char *p, size_t n) {
  t_t *t = arg;
  t->ndata++;
  CHECK(t->ndata == 1);
  t_finish(t); /* px_uclient_close from inside a curl callback */
  return 0;
}

static void test_close(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_count_then_close;
  px_xfer_opts_t o = opts_for(&t);
  o.pool = "q";
  o.max_connections = 2;
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_never};
  for (int i = 0; i < 3; i++) CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.srv.nreqs == 2);

  t_init(&t);
  t.srv.handler = h_big;
  o = opts_for(&t);
  cbs = (px_xfer_cbs_t){cb_headers, cb_data_close_inside, cb_done_never};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.ndata == 1);
}

/* ---- 13. the response head rules of SPEC section 10, in both lanes ---- */

static const char *g_reply; /* the raw response the next handler writes */
static size_t g_reply_len;

static void h_raw(srv_t *s, conn_t *c, const req_t *r) {
  conn_write(c, g_reply, g_reply_len);
}

static void run_raw(t_t *t, const char *reply, size_t len) {
  t_init(t);
  g_reply = reply;
  g_reply_len = len;
  t->srv.handler = h_raw;
  px_xfer_opts_t o = opts_for(t);
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_finish};
  t->clen = -2;
  t->want_len = 1;
  CHECK((t->x = px_xfer_start(t->c, &o, &cbs, t)));
  t_run_and_close(t);
  CHECK(t->ndone == 1);
}
#define RUN_RAW(t, lit) run_raw((t), (lit), sizeof(lit) - 1)

/* Framing and hop-by-hop headers never go up: the gateway frames the
 * response itself; Content-Encoding: identity is no encoding. */
static void test_head_framing(void) {
  t_t t;
  RUN_RAW(&t, "HTTP/1.1 200 OK\r\nX-Test: yes\r\nConnection: keep-alive, X-Hop\r\n"
              "X-Hop: 1\r\nKeep-Alive: timeout=5\r\nContent-Encoding: identity\r\n"
              "Trailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n"
              "5\r\nhello\r\n0\r\n\r\n");
  CHECK(t.res == PX_XFER_OK);
  CHECK(t.saw_x_test);
  CHECK(t.body_len == 5 && memcmp(t.body, "hello", 5) == 0);
  const char *gone[] = {"transfer-encoding", "connection", "keep-alive", "x-hop",
                        "content-encoding", "trailer", "content-length"};
  for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) CHECK(!strcasestr(t.heads, gone[i]));
  CHECK(t.clen == -1); /* chunked: no length to reuse */

  RUN_RAW(&t, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Test: yes\r\n\r\nhello");
  CHECK(t.res == PX_XFER_OK && t.saw_x_test);
  CHECK(!strcasestr(t.heads, "content-length"));
  CHECK(t.body_len == 5);
  CHECK(t.clen == 5); /* the length the lane enforced, as a number */
}

/* A non-identity Content-Encoding is reported; the bytes come as they are
 * (never decoded or passed as plain by the lane). */
static void test_head_encoding(void) {
  t_t t;
  RUN_RAW(&t, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n"
              "\x1f\x8b\x08\x00");
  CHECK(t.res == PX_XFER_OK);
  CHECK(strcasestr(t.heads, "content-encoding: gzip\n"));
  CHECK(t.body_len == 4 && memcmp(t.body, "\x1f\x8b\x08\x00", 4) == 0);
}

/* A header whose value holds a bare CR or a NUL never reaches on_headers
 * (dropped, or the response refused as malformed), nor what follows the CR. */
static void test_head_bad_values(void) {
  static const char cr[] = "HTTP/1.1 200 OK\r\nX-Evil: a\rSet-Cookie: s=1\r\n"
                           "X-Test: yes\r\nContent-Length: 2\r\n\r\nok";
  static const char nul[] = "HTTP/1.1 200 OK\r\nX-Nul: a\0b\r\nX-Test: yes\r\n"
                            "Content-Length: 2\r\n\r\nok";
  const char *replies[] = {cr, nul};
  size_t lens[] = {sizeof(cr) - 1, sizeof(nul) - 1};
  for (int i = 0; i < 2; i++) {
    t_t t;
    run_raw(&t, replies[i], lens[i]);
    CHECK(t.res == PX_XFER_OK || t.res == PX_XFER_EPROTO);
    if (t.res == PX_XFER_OK) {
      CHECK(t.nheaders == 1 && t.saw_x_test);
      CHECK(t.body_len == 2);
    }
    CHECK(!strcasestr(t.heads, "set-cookie"));
    CHECK(!strcasestr(t.heads, "x-evil"));
    CHECK(!strcasestr(t.heads, "x-nul"));
    CHECK(!strchr(t.heads, '\r'));
  }
}

/* Broken framing is PX_XFER_EPROTO, distinct from a reset. */
static void test_bad_framing(void) {
  t_t t;
  RUN_RAW(&t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
              "5\r\nhello\r\nzz\r\nmore\r\n0\r\n\r\n");
  CHECK(t.res == PX_XFER_EPROTO);
  CHECK(t.nheaders == 1);

  RUN_RAW(&t, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
              "5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n");
  CHECK(t.res == PX_XFER_EPROTO);
  CHECK(t.nheaders == 0);
  CHECK(t.body_len == 0);
}

/* ---- 14. host names: resolved (libuv's resolver in the built-in lane),
 * every address tried, the answer cached for the next request ---- */

static void cb_done_name(void *arg, px_xfer_result_t res, const char *msg) {
  t_t *t = arg;
  t->ndone++;
  CHECK(res == PX_XFER_OK);
  if (t->ndone == 1) {
    px_xfer_opts_t o = opts_for(t);
    px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_name};
    CHECK(px_xfer_start(t->c, &o, &cbs, t));
  } else {
    t_finish(t);
  }
}

static void test_host_name(void) {
  t_t t;
  t_init(&t);
  t.srv.handler = h_reuse;
  /* the server listens on 127.0.0.1 only: "localhost" may name ::1 first */
  snprintf(t.url, sizeof(t.url), "http://localhost:%d/b", t.srv.port);
  px_xfer_opts_t o = opts_for(&t);
  px_xfer_cbs_t cbs = {cb_headers, cb_data, cb_done_name};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.ndone == 2);
  CHECK(t.status == 200);
  CHECK(t.srv.nconns == 1);

  /* a name that does not resolve is a connect failure */
  t_init(&t);
  snprintf(t.url, sizeof(t.url), "http://no-such-host.invalid:%d/b", t.srv.port);
  o = opts_for(&t);
  cbs = (px_xfer_cbs_t){cb_headers, cb_data, cb_done_finish};
  CHECK(px_xfer_start(t.c, &o, &cbs, &t));
  t_run_and_close(&t);
  CHECK(t.res == PX_XFER_ECONNECT);
  CHECK(t.nheaders == 0);
}

int main(void) {
  CHECK(curl_global_init(CURL_GLOBAL_DEFAULT) == 0);
  test_post();
  test_post_big();
  test_post_parts();
  test_reuse();
  test_stream();
  test_pause_resume(0);
  test_pause_resume(1);
  test_inside_callbacks();
  test_cancel(0);
  test_cancel(1);
  test_cancel(2);
  test_connect_fail();
  test_connect_timeout();
  test_first_byte_timeout();
  test_idle_timeout();
  test_pool_limit();
  test_status_headers();
  test_abort();
  test_close();
  test_head_framing();
  test_head_encoding();
  test_head_bad_values();
  test_bad_framing();
  test_host_name();
  free(g_body);
  curl_global_cleanup();
  printf("test_upstream: ok\n");
  return 0;
}
