/**
 * upstream_h1.c - the built-in lane: HTTP/1.1 over llhttp (the parser the
 * server uses), the default for http:// and https:// upstreams, as nginx,
 * Envoy and h2o keep their own upstream codecs. IP literals connect at once; host
 * names are resolved with uv_getaddrinfo and cached PX_H1_DNS_TTL_MS (the
 * addresses are tried in order). One uv_tcp_t per connection; keep-alive
 * connections are parked per "host:port" in c->h1.idle.
 *
 * It keeps curl's observable behaviour: the same callbacks, timeouts and
 * results; Host and Accept: * / * as curl sends them; a request that fails
 * on a reused connection before any response byte is sent once more on a
 * fresh one. Anything it does not take (HTTP/2, other methods, a URL it does
 * not parse) goes to the curl lane.
 *
 * https:// runs over TLS from upstream_tls.c on the same connection: after
 * the TCP connect, the handshake (covered by the connect deadline, as in
 * curl; its failure is a connect failure), then the request through
 * px_tls_write; h1_on_read decrypts and hands plaintext to h1_on_bytes,
 * the one response path of both transports. Idle TLS connections are kept
 * per "host:port" and TLS context.
 *
 * llhttp runs with c->in_lane raised, so that cancels, starts and resumes
 * from inside its callbacks are deferred as for curl callbacks. Error texts
 * are formatted only on error paths.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "upstream_lane.h"
#include "upstream_tls.h"

/* Most idle keep-alive connections kept. */
#define PX_H1_MAX_IDLE 256
/* How long a resolved name is used (curl's DNS cache lasts 60 s too). */
#define PX_H1_DNS_TTL_MS 60000
/* Most names cached. */
#define PX_H1_DNS_MAX 64
/* The read buffer shared by the connections, and its end where TLS
 * connections decrypt (one record's plaintext at most). */
#define H1_SLAB 65536
#define H1_TLS_PLAIN 16384

/* One connection. */
struct px_h1conn {
  px_uclient_t *c;
  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_write_t wreq;
  px_link_t idle;    /* c->h1.idle while idle */
  struct px_xfer *x; /* current transfer */
  char key[280];     /* "host:port" */
  px_tls_ctx_t *tctx; /* https: with tls, the transport (upstream_tls.c) */
  px_tls_t *tls;
  bool connected; /* and, with TLS, the handshake done */
  bool reused; /* carried an earlier response */
  bool reading;
  bool writing; /* a request write is in flight */
  bool dead;    /* not reusable (EOF, error, stray bytes) */
  bool closing;
};

/* A name being resolved for one transfer (x NULL once it let go). */
struct px_h1res {
  uv_getaddrinfo_t req;
  px_link_t link; /* c->h1.resolving */
  px_uclient_t *c;
  px_xfer_t *x;
  unsigned short port;
  char key[280];
};

/* A resolved name. */
typedef struct h1_dns {
  px_link_t link; /* c->h1.dns, oldest first */
  uint64_t expires;
  unsigned naddr;
  struct sockaddr_storage addr[PX_H1_MAX_ADDRS];
  char key[280];
} h1_dns_t;

static llhttp_settings_t h1_settings;

static int h1_begin(px_xfer_t *x);
static int h1_connect(px_xfer_t *x);
static void h1_close(px_h1conn_t *hc);
static void h1_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void h1_on_written(uv_write_t *w, int status);
static void h1_tls_start(px_h1conn_t *hc, px_xfer_t *x);

/* ---- URL ---- */

typedef struct h1_url {
  const char *host; /* without brackets */
  size_t host_len;
  const char *auth; /* authority as written, for Host */
  size_t auth_len;
  const char *path;
  unsigned port;
  bool v6, ip4, tls;
} h1_url_t;

static bool is_name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_';
}

/* "http[s]://HOST[:port][/path]" with HOST an IPv4 literal, [IPv6] or a
 * name. */
static bool parse_url(const char *url, h1_url_t *u) {
  bool tls = strncasecmp(url, "https://", 8) == 0;
  if (!tls && strncasecmp(url, "http://", 7) != 0) return false;
  const char *a = url + 7 + tls, *e = a + strcspn(a, "/?#");
  if (*e == '#' || strpbrk(url, "# \t\r\n@%\\") != NULL) return false;
  const char *pe;
  memset(u, 0, sizeof(*u));
  if (*a == '[') {
    const char *rb = memchr(a, ']', (size_t)(e - a));
    if (!rb || rb == a + 1 || rb - a - 1 > 45) return false;
    u->host = a + 1;
    u->host_len = (size_t)(rb - a - 1);
    u->v6 = true;
    pe = rb + 1;
  } else {
    pe = memchr(a, ':', (size_t)(e - a));
    if (!pe) pe = e;
    if (pe == a || pe - a > 253) return false;
    u->ip4 = true;
    for (const char *q = a; q < pe; q++) {
      if (!is_name_char(*q)) return false;
      if ((*q < '0' || *q > '9') && *q != '.') u->ip4 = false;
    }
    u->host = a;
    u->host_len = (size_t)(pe - a);
  }
  unsigned port = tls ? 443 : 80;
  if (pe < e) {
    if (*pe != ':' || pe + 1 == e) return false;
    port = 0;
    for (const char *q = pe + 1; q < e; q++) {
      if (*q < '0' || *q > '9' || port > 65535) return false;
      port = port * 10 + (unsigned)(*q - '0');
    }
    if (port < 1 || port > 65535) return false;
  }
  u->port = port;
  u->tls = tls;
  u->auth = a;
  /* curl leaves the default port out of Host */
  u->auth_len = port == (tls ? 443u : 80u) ? (size_t)(pe - a) : (size_t)(e - a);
  u->path = e;
  return true;
}

/* parse_url() of the last URL parsed, which comes back request after
 * request (an upstream's base URL and endpoint; one event loop per
 * process): a compare instead of a parse. */
static bool parse_url_cached(const char *url, h1_url_t *u) {
  static char last[512];
  static size_t last_len;
  static h1_url_t last_u; /* its pointers into last[] */
  size_t n = strlen(url);
  if (n == last_len && n > 0 && memcmp(url, last, n) == 0) {
    *u = last_u;
    u->host = url + (last_u.host - last);
    u->auth = url + (last_u.auth - last);
    u->path = url + (last_u.path - last);
    return true;
  }
  if (!parse_url(url, u)) return false;
  if (n < sizeof(last)) {
    memcpy(last, url, n + 1);
    last_len = n;
    last_u = *u;
    last_u.host = last + (u->host - url);
    last_u.auth = last + (u->auth - url);
    last_u.path = last + (u->path - url);
  }
  return true;
}

/* h (len bytes) is a line of header `name`; the byte after the name is
 * tested first, so most lines need no compare at all */
static bool hdr_named(const char *h, size_t len, const char *name, size_t n) {
  return len > n && (h[n] == ':' || h[n] == ';') && strncasecmp(h, name, n) == 0;
}
#define HDR_NAMED(h, len, lit) hdr_named((h), (len), (lit), sizeof(lit) - 1)

/* ---- prepare: the request head as curl would send it ---- */

/* What a caller's header line becomes: "Name: value" as is, "Name;" sent
 * empty, "Name:" (no value) removes it, as in curl. */
typedef enum { HL_SKIP, HL_ASIS, HL_EMPTY } hl_kind_t;

static hl_kind_t hl_kind(const char *h, size_t len, size_t *n, int checked) {
  if (!checked && !px_header_value_ok(h, len)) return HL_SKIP; /* never a second line */
  const char *colon = memchr(h, ':', len);
  const char *semi = memchr(h, ';', colon ? (size_t)(colon - h) : len);
  if (colon && !semi) {
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (*v == 0) return HL_SKIP;
    *n = len;
    return HL_ASIS;
  }
  if (semi) {
    *n = (size_t)(semi - h);
    return HL_EMPTY;
  }
  return HL_SKIP;
}

#define CPY(lit) (memcpy(w, (lit), sizeof(lit) - 1), w += sizeof(lit) - 1)

static int h1_prepare(px_xfer_t *x, const px_xfer_opts_t *o) {
  h1_url_t u;
  memset(&x->u.h1, 0, offsetof(px_xfer_t, u.h1.parser) - offsetof(px_xfer_t, u.h1));
  if (!parse_url_cached(o->url, &u)) return -1;
  const char *m = o->method ? o->method : (o->body ? "POST" : "GET");
  bool post = strcmp(m, "POST") == 0;
  /* pool and cache key "host:port" */
  char num[24];
  size_t kl = u.host_len, j = sizeof(num);
  if (kl + 7 >= sizeof(x->u.h1.key)) return -1;
  memcpy(x->u.h1.key, u.host, kl);
  x->u.h1.host_len = kl;
  x->u.h1.key[kl++] = ':';
  for (unsigned v = u.port; j == sizeof(num) || v; v /= 10)
    num[--j] = (char)('0' + v % 10);
  memcpy(x->u.h1.key + kl, num + j, sizeof(num) - j);
  x->u.h1.key[kl + sizeof(num) - j] = 0;
  x->u.h1.port = (unsigned short)u.port;
  /* an unusable ca_file: curl's lane reports it as curl does */
  if (u.tls && !(x->u.h1.tctx = px_tls_ctx_get(x->c, o->ca_file, o->tls_no_verify != 0)))
    return -1;
  /* the last literal converted: an upstream's address comes back request
   * after request (one event loop per process) */
  static char last_ip[48];
  static size_t last_len;
  static unsigned last_port;
  static struct sockaddr_storage last_addr;
  if ((u.v6 || u.ip4) && u.host_len == last_len && u.port == last_port &&
      memcmp(u.host, last_ip, u.host_len) == 0) {
    x->u.h1.addr[0] = last_addr;
    x->u.h1.naddr = 1;
  } else if (u.v6 || u.ip4) {
    char ip[48];
    memcpy(ip, u.host, u.host_len);
    ip[u.host_len] = 0;
    int rc = u.v6 ? uv_ip6_addr(ip, (int)u.port, (struct sockaddr_in6 *)&x->u.h1.addr[0])
                  : uv_ip4_addr(ip, (int)u.port, (struct sockaddr_in *)&x->u.h1.addr[0]);
    if (rc == 0) {
      memcpy(last_ip, ip, u.host_len + 1);
      last_len = u.host_len;
      last_port = u.port;
      last_addr = x->u.h1.addr[0];
    }
    if (rc != 0) {
      if (u.v6) return -1;
      /* digits and dots but not an address ("1.2.3"): a name for the resolver */
    } else {
      x->u.h1.naddr = 1;
    }
  }

  /* one pass to size the head (and spot the headers curl would add), one
   * to write it: no printf, one allocation */
  bool has_host = false, has_accept = false, has_ctype = false, has_clen = false;
  size_t ml = strlen(m), pl = strlen(u.path), total = ml + 2 + pl + 11 + 2;
  /* the first lines' kinds and lengths, kept for the writing pass */
  enum { KEEP = 32 };
  unsigned char kinds[KEEP];
  size_t lens[KEEP], hi = 0;
  for (const char *const *h = o->headers; h && *h; h++, hi++) {
    size_t n = 0, len = strlen(*h);
    hl_kind_t k = hl_kind(*h, len, &n, o->headers_checked);
    switch ((*h)[0] | 0x20) { /* most lines start with none of these */
      case 'h':
        has_host = has_host || HDR_NAMED(*h, len, "host");
        break;
      case 'a':
        has_accept = has_accept || HDR_NAMED(*h, len, "accept");
        if (HDR_NAMED(*h, len, "accept-encoding")) k = HL_SKIP;
        break;
      case 'c':
        has_ctype = has_ctype || HDR_NAMED(*h, len, "content-type");
        has_clen = has_clen || HDR_NAMED(*h, len, "content-length");
        break;
    }
    if (k != HL_SKIP) total += n + 3;
    if (hi < KEEP) kinds[hi] = (unsigned char)k, lens[hi] = n;
  }
  j = sizeof(num);
  for (size_t v = o->body_len; j == sizeof(num) || v; v /= 10)
    num[--j] = (char)('0' + v % 10);
  /* the trace line's room always (its CRLF too): no test for it here */
  total += 8 + u.auth_len + 2 + 13 + 27 + 16 + (sizeof(num) - j) + 2 + 50 +
           PX_XFER_TRACE_LINE_LEN + 2;
  char *head = malloc(total), *w = head;
  if (!head) return -1;
  memcpy(w, m, ml), w += ml;
  if (*u.path == '/')
    CPY(" ");
  else
    CPY(" /");
  memcpy(w, u.path, pl), w += pl;
  CPY(" HTTP/1.1\r\n");
  if (!has_host) {
    CPY("Host: ");
    memcpy(w, u.auth, u.auth_len), w += u.auth_len;
    CPY("\r\n");
  }
  if (!has_accept) CPY("Accept: */*\r\n");
  /* the gateway passes bodies as they are: never a compressed one */
  CPY("Accept-Encoding: identity\r\n");
  hi = 0;
  for (const char *const *h = o->headers; h && *h; h++, hi++) {
    size_t n = hi < KEEP ? lens[hi] : 0;
    hl_kind_t k = hi < KEEP ? (hl_kind_t)kinds[hi]
                            : hl_kind(*h, strlen(*h), &n, o->headers_checked);
    if (k == HL_SKIP || (hi >= KEEP && HDR_NAMED(*h, strlen(*h), "accept-encoding"))) continue;
    memcpy(w, *h, n), w += n;
    if (k == HL_EMPTY) *w++ = ':';
    CPY("\r\n");
  }
  if (o->trace_line) { /* the caller's, of its known length */
    memcpy(w, o->trace_line, PX_XFER_TRACE_LINE_LEN), w += PX_XFER_TRACE_LINE_LEN;
    CPY("\r\n");
  }
  if (post) {
    if (!has_clen) {
      CPY("Content-Length: ");
      memcpy(w, num + j, sizeof(num) - j), w += sizeof(num) - j;
      CPY("\r\n");
    }
    if (!has_ctype) CPY("Content-Type: application/x-www-form-urlencoded\r\n");
  }
  CPY("\r\n");
  x->u.h1.reqhead = head;
  x->u.h1.reqhead_len = (size_t)(w - head);
  x->u.h1.body = post ? (o->body ? o->body : "") : NULL;
  x->u.h1.body_len = post ? o->body_len : 0;
  x->u.h1.parts = post && o->body_parts ? o->body_parts : NULL;
  x->u.h1.nparts = x->u.h1.parts ? o->body_nparts : 0;
  px_buf_init(&x->u.h1.pend, 1u << 20);
  return 0;
}

/* ---- connections ---- */

static void h1_on_closed(uv_handle_t *h) {
  px_h1conn_t *hc = h->data;
  px_uclient_t *c = hc->c;
  px_tls_free(hc->tls); /* after libuv cancelled its writes */
  free(hc);
  px_up_handle_closed(c);
}

static void h1_close(px_h1conn_t *hc) {
  if (hc->closing) return;
  hc->closing = true;
  if (dl_linked(&hc->idle)) {
    dl_del(&hc->idle);
    hc->c->h1.nidle--;
  }
  if (hc->x) hc->x->u.h1.hc = NULL;
  hc->x = NULL;
  if (hc->tls) px_tls_shutdown(hc->tls);
  uv_close((uv_handle_t *)&hc->tcp, h1_on_closed);
}

static void h1_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  px_h1conn_t *hc = h->data;
  (void)suggested;
  if (!hc->c->h1.slab) hc->c->h1.slab = malloc(H1_SLAB);
  buf->base = hc->c->h1.slab;
  /* TLS decrypts into the slab's end (h1_tls_read) */
  buf->len = hc->c->h1.slab ? H1_SLAB - (hc->tls ? H1_TLS_PLAIN : 0) : 0;
}

static void h1_read_start(px_h1conn_t *hc) {
  if (hc->reading || hc->closing) return;
  if (uv_read_start((uv_stream_t *)&hc->tcp, h1_alloc, h1_on_read) == 0)
    hc->reading = true;
}

static void h1_read_stop(px_h1conn_t *hc) {
  if (!hc->reading) return;
  uv_read_stop((uv_stream_t *)&hc->tcp);
  hc->reading = false;
}

/* Park the connection when the response completed and the connection may
 * carry another one, else close it. */
static void h1_detach(px_xfer_t *x) {
  px_h1conn_t *hc = x->u.h1.hc;
  if (!hc) return;
  px_uclient_t *c = x->c;
  x->u.h1.hc = NULL;
  hc->x = NULL;
  if (!x->u.h1.ok || !x->u.h1.keep || hc->dead || hc->writing || c->closing ||
      c->closed || (hc->tls && px_tls_writing(hc->tls))) {
    h1_close(hc);
    return;
  }
  hc->reused = true;
  dl_push(&c->h1.idle, &hc->idle);
  if (++c->h1.nidle > PX_H1_MAX_IDLE)
    h1_close(PX_CONTAINER(c->h1.idle.next, px_h1conn_t, idle));
  h1_read_start(hc); /* an idle connection's EOF closes it */
}

/* Writes the request's buffers (libuv copies a queued write's buffer
 * list: b may go when this returns). */
static int h1_write(px_h1conn_t *hc, uv_buf_t *b, unsigned nb) {
  if (hc->tls) {
    int trc = px_tls_write(hc->tls, b, nb);
    h1_read_start(hc);
    return trc < 0 ? UV_EPROTO : 0;
  }
  /* most requests leave in one writev, without a write request */
  int rc = uv_try_write((uv_stream_t *)&hc->tcp, b, nb);
  if (rc < 0 && rc != UV_EAGAIN) return rc;
  size_t done = rc > 0 ? (size_t)rc : 0;
  uv_buf_t *rest = b;
  while (nb > 0 && done >= rest->len) {
    done -= rest->len;
    rest++;
    nb--;
  }
  h1_read_start(hc);
  if (nb == 0) return 0;
  rest->base += done;
  rest->len -= done;
  hc->wreq.data = hc;
  rc = uv_write(&hc->wreq, (uv_stream_t *)&hc->tcp, rest, nb, h1_on_written);
  if (rc < 0) return rc;
  hc->writing = true;
  return 0;
}

static int h1_send(px_xfer_t *x) {
  px_h1conn_t *hc = x->u.h1.hc;
  llhttp_init(&x->u.h1.parser, HTTP_RESPONSE, &h1_settings);
  x->u.h1.parser.data = x;
  x->u.h1.got = false;
  x->u.h1.val = false;
  x->status = 0;
  px_buf_reset(&x->hbuf);
  /* the head and the body (or its parts) in one gather */
  uv_buf_t two[2], *b = two;
  unsigned nb = 1;
  if (x->u.h1.parts && x->u.h1.nparts > 1 &&
      !(b = malloc((x->u.h1.nparts + 1) * sizeof(*b))))
    return UV_ENOMEM;
  b[0] = uv_buf_init(x->u.h1.reqhead, (unsigned)x->u.h1.reqhead_len);
  if (x->u.h1.parts) {
    for (size_t i = 0; i < x->u.h1.nparts; i++)
      if (x->u.h1.parts[i].len)
        b[nb++] =
            uv_buf_init((char *)x->u.h1.parts[i].ptr, (unsigned)x->u.h1.parts[i].len);
  } else if (x->u.h1.body_len) {
    b[nb++] = uv_buf_init((char *)x->u.h1.body, (unsigned)x->u.h1.body_len);
  }
  int rc = h1_write(hc, b, nb);
  if (b != two) free(b);
  return rc;
}

/* The connection failed under x (EOF, reset, write error). A reused
 * connection that failed before any response byte gets one fresh retry. */
static void h1_conn_failed(px_xfer_t *x, int err) {
  px_h1conn_t *hc = x->u.h1.hc;
  if (hc) {
    hc->dead = true;
    if (hc->reused && !x->u.h1.got && !x->u.h1.retried) {
      x->u.h1.retried = true;
      h1_close(hc);
      if (h1_connect(x) == 0) return;
      px_up_finish(x, PX_XFER_ECONNECT, "cannot open a connection", true);
      return;
    }
  }
  snprintf(x->errbuf, sizeof(x->errbuf), "%s (%s)",
           x->u.h1.got ? "connection closed before the response was complete"
                       : "empty reply from upstream",
           uv_strerror(err));
  px_up_finish(x, PX_XFER_ERECV, x->errbuf, true);
}

static void h1_on_written(uv_write_t *w, int status) {
  px_h1conn_t *hc = w->data;
  hc->writing = false;
  if (status == 0 || status == UV_ECANCELED || hc->closing || !hc->x) return;
  px_xfer_t *x = hc->x;
  px_uclient_t *c = hc->c;
  if (!px_up_live(x)) return;
  px_up_enter(c);
  h1_conn_failed(x, status);
  px_up_after(c);
  px_up_leave(c);
}

static void h1_on_connect(uv_connect_t *req, int status) {
  px_h1conn_t *hc = req->data;
  if (status == UV_ECANCELED || hc->closing) return;
  px_xfer_t *x = hc->x;
  px_uclient_t *c = hc->c;
  if (!x) {
    h1_close(hc);
    return;
  }
  if (!px_up_live(x)) return;
  px_up_enter(c);
  if (status < 0) {
    hc->dead = true;
    if (x->u.h1.addr_i + 1 < x->u.h1.naddr) { /* the name's next address */
      x->u.h1.addr_i++;
      h1_close(hc);
      if (h1_connect(x) < 0)
        px_up_finish(x, PX_XFER_ECONNECT, "cannot open a connection", true);
    } else {
      snprintf(x->errbuf, sizeof(x->errbuf), "Failed to connect to %.200s: %s",
               x->u.h1.key, uv_strerror(status));
      px_up_finish(x, PX_XFER_ECONNECT, x->errbuf, true);
    }
  } else if (hc->tctx) {
    h1_tls_start(hc, x); /* the request follows the handshake */
  } else {
    hc->connected = true;
    int rc = h1_send(x);
    if (rc < 0) {
      hc->dead = true;
      h1_conn_failed(x, rc);
    }
  }
  px_up_after(c);
  px_up_leave(c);
}

static int h1_connect(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  px_h1conn_t *hc = calloc(1, sizeof(*hc));
  if (!hc) return -1;
  hc->c = c;
  dl_init(&hc->idle);
  memcpy(hc->key, x->u.h1.key, sizeof(hc->key));
  hc->tctx = x->u.h1.tctx;
  if (uv_tcp_init(c->loop, &hc->tcp) < 0) {
    free(hc);
    return -1;
  }
  hc->tcp.data = hc;
  c->nhandles++;
  uv_tcp_nodelay(&hc->tcp, 1); /* applied when the socket is created */
  hc->x = x;
  x->u.h1.hc = hc;
  hc->creq.data = hc;
  const struct sockaddr *sa = (const struct sockaddr *)&x->u.h1.addr[x->u.h1.addr_i];
  if (uv_tcp_connect(&hc->creq, &hc->tcp, sa, h1_on_connect) < 0) {
    h1_close(hc);
    return -1;
  }
  return 0;
}

static int h1_begin(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  for (px_link_t *l = c->h1.idle.prev; l != &c->h1.idle; l = l->prev) {
    px_h1conn_t *hc = PX_CONTAINER(l, px_h1conn_t, idle);
    if (hc->tctx != x->u.h1.tctx || strcmp(hc->key, x->u.h1.key) != 0) continue;
    dl_del(&hc->idle);
    c->h1.nidle--;
    hc->x = x;
    x->u.h1.hc = hc;
    if (h1_send(x) == 0) return 0;
    hc->dead = true;
    h1_close(hc);
    break;
  }
  return h1_connect(x);
}

/* ---- names ---- */

static h1_dns_t *dns_find(px_uclient_t *c, const char *key) {
  uint64_t now = uv_now(c->loop);
  for (px_link_t *l = c->h1.dns.next; l != &c->h1.dns; l = l->next) {
    h1_dns_t *d = PX_CONTAINER(l, h1_dns_t, link);
    if (strcmp(d->key, key) != 0) continue;
    if (d->expires > now) return d;
    dl_del(&d->link);
    c->h1.ndns--;
    free(d);
    return NULL;
  }
  return NULL;
}

static void dns_put(px_uclient_t *c, const px_h1res_t *r, const struct addrinfo *ai) {
  h1_dns_t *d = calloc(1, sizeof(*d));
  if (!d) return;
  for (; ai && d->naddr < PX_H1_MAX_ADDRS; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(struct sockaddr_in)) {
      struct sockaddr_in *s = (struct sockaddr_in *)&d->addr[d->naddr++];
      memcpy(s, ai->ai_addr, sizeof(*s));
      s->sin_port = htons(r->port);
    } else if (ai->ai_family == AF_INET6 &&
               ai->ai_addrlen >= sizeof(struct sockaddr_in6)) {
      struct sockaddr_in6 *s = (struct sockaddr_in6 *)&d->addr[d->naddr++];
      memcpy(s, ai->ai_addr, sizeof(*s));
      s->sin6_port = htons(r->port);
    }
  }
  if (d->naddr == 0) {
    free(d);
    return;
  }
  memcpy(d->key, r->key, sizeof(d->key));
  d->expires = uv_now(c->loop) + PX_H1_DNS_TTL_MS;
  h1_dns_t *old = dns_find(c, d->key);
  if (old) {
    dl_del(&old->link);
    c->h1.ndns--;
    free(old);
  }
  dl_push(&c->h1.dns, &d->link);
  if (++c->h1.ndns > PX_H1_DNS_MAX) {
    h1_dns_t *o = PX_CONTAINER(c->h1.dns.next, h1_dns_t, link);
    dl_del(&o->link);
    c->h1.ndns--;
    free(o);
  }
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *ai) {
  px_h1res_t *r = req->data;
  px_uclient_t *c = r->c;
  dl_del(&r->link);
  px_up_enter(c);
  if (status == 0 && !c->closed) dns_put(c, r, ai);
  px_xfer_t *x = r->x;
  if (x) {
    x->u.h1.res = NULL;
    if (px_up_live(x)) {
      h1_dns_t *d = status == 0 ? dns_find(c, r->key) : NULL;
      if (!d) {
        snprintf(x->errbuf, sizeof(x->errbuf), "Could not resolve host: %.*s (%s)",
                 (int)x->u.h1.host_len, x->u.h1.key,
                 status < 0 ? uv_strerror(status) : "no address");
        px_up_finish(x, PX_XFER_ECONNECT, x->errbuf, true);
      } else {
        memcpy(x->u.h1.addr, d->addr, sizeof(d->addr[0]) * d->naddr);
        x->u.h1.naddr = d->naddr;
        x->u.h1.addr_i = 0;
        if (h1_begin(x) < 0)
          px_up_finish(x, PX_XFER_ECONNECT, "cannot open a connection", true);
      }
    }
  }
  if (ai) uv_freeaddrinfo(ai);
  free(r);
  px_up_after(c);
  px_up_leave(c);
  px_up_handle_closed(c); /* may free c */
}

static int h1_resolve(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  px_h1res_t *r = calloc(1, sizeof(*r));
  if (!r) return -1;
  r->c = c;
  r->x = x;
  r->port = x->u.h1.port;
  memcpy(r->key, x->u.h1.key, sizeof(r->key));
  char host[256];
  memcpy(host, x->u.h1.key, x->u.h1.host_len);
  host[x->u.h1.host_len] = 0;
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  r->req.data = r;
  if (uv_getaddrinfo(c->loop, &r->req, on_resolved, host, NULL, &hints) < 0) {
    free(r);
    return -1;
  }
  dl_push(&c->h1.resolving, &r->link);
  c->nhandles++;
  x->u.h1.res = r;
  return 0;
}

/* ---- the response ---- */

static bool h1_bytes_waiting(px_xfer_t *x) {
  px_h1conn_t *hc = x->u.h1.hc;
  uv_os_fd_t fd;
  char b;
  if (!hc || !hc->connected || !hc->reading ||
      uv_fileno((uv_handle_t *)&hc->tcp, &fd) != 0)
    return false;
  return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
}

/* Response complete and every byte delivered. */
static void h1_complete(px_xfer_t *x) {
  x->u.h1.ok = true;
  px_up_finish(x, PX_XFER_OK, "ok", true);
}

/* Plaintext (or the end of it) from the connection. */
static void h1_on_bytes(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  px_h1conn_t *hc = s->data;
  px_uclient_t *c = hc->c;
  if (hc->closing) return;
  px_xfer_t *x = hc->x;
  if (!x) { /* idle: the server closed it (or sent stray bytes) */
    if (nread != 0) h1_close(hc);
    return;
  }
  if (nread == 0) return;
  if (!px_up_live(x)) return;
  px_up_enter(c);
  if (nread < 0) {
    hc->dead = true;
    llhttp_errno_t fe = HPE_OK;
    if (nread == UV_EOF && x->u.h1.got) {
      c->in_lane++;
      fe = llhttp_finish(&x->u.h1.parser); /* completes a body delimited by the close */
      c->in_lane--;
    }
    if (px_up_live(x)) {
      if (x->u.h1.msg_done && !x->paused)
        h1_complete(x);
      else if (!x->u.h1.msg_done)
        h1_conn_failed(x, (int)nread);
      (void)fe;
    }
    px_up_after(c);
    px_up_leave(c);
    return;
  }
  x->u.h1.got = true;
  c->in_lane++;
  llhttp_errno_t e = llhttp_execute(&x->u.h1.parser, buf->base, (size_t)nread);
  c->in_lane--;
  if (px_up_live(x) && x->u.h1.hc == hc) {
    if (x->u.h1.msg_done) {
      const char *pos = llhttp_get_error_pos(&x->u.h1.parser);
      if (e != HPE_PAUSED || (pos && pos != buf->base + nread)) hc->dead = true;
      if (x->paused)
        h1_read_stop(hc);
      else
        h1_complete(x);
    } else if (e != HPE_OK) {
      hc->dead = true;
      if (x->aborted)
        px_up_finish(x, PX_XFER_EOTHER, "aborted by on_data", true);
      else if (x->fail)
        px_up_finish(x, x->fail_res, x->fail, true);
      else {
        /* the upstream broke HTTP/1.1: a bad chunk, both Content-Length and
         * Transfer-Encoding, a malformed head */
        snprintf(x->errbuf, sizeof(x->errbuf), "bad upstream response: %s (%s)",
                 llhttp_errno_name(e), llhttp_get_error_reason(&x->u.h1.parser));
        px_up_finish(x, PX_XFER_EPROTO, x->errbuf, true);
      }
    } else if (x->paused) {
      h1_read_stop(hc);
    }
  }
  px_up_after(c);
  px_up_leave(c);
}

/* ---- TLS under the same connection (upstream_tls.c) ---- */

/* A handshake that failed is a connect failure, as in curl's lane. */
static void h1_tls_failed(px_h1conn_t *hc, px_xfer_t *x) {
  hc->dead = true;
  snprintf(x->errbuf, sizeof(x->errbuf), "TLS with %.200s: %s", hc->key,
           hc->tls ? px_tls_error(hc->tls) : "cannot set up");
  px_up_finish(x, PX_XFER_ECONNECT, x->errbuf, true);
}

/* TCP is up: say hello (called inside px_up_enter). */
static void h1_tls_start(px_h1conn_t *hc, px_xfer_t *x) {
  hc->tls = px_tls_new(hc->tctx, (uv_stream_t *)&hc->tcp, hc->key, x->u.h1.host_len);
  if (!hc->tls || px_tls_handshake(hc->tls) < 0) {
    h1_tls_failed(hc, x);
    return;
  }
  h1_read_start(hc);
}

/* Ciphertext in: finish the handshake (then send the request), and hand
 * every byte of plaintext to h1_on_bytes, also while the transfer is
 * paused (h1_on_body keeps it), as a plain read would. */
static void h1_tls_read(px_h1conn_t *hc, ssize_t nread, const uv_buf_t *buf) {
  px_uclient_t *c = hc->c;
  px_xfer_t *x = hc->x;
  if (nread == 0) return;
  if (nread < 0 && nread != UV_EOF && hc->connected) { /* reset, ... */
    h1_on_bytes((uv_stream_t *)&hc->tcp, nread, buf);
    return;
  }
  if (nread < 0)
    px_tls_feed_eof(hc->tls);
  else if (!c->h1.slab)
    nread = UV_ENOMEM;
  else
    px_tls_feed(hc->tls, buf->base, (size_t)nread); /* read in place */
  if (!hc->connected) {
    if (!x) {
      h1_close(hc);
      return;
    }
    if (!px_up_live(x)) return;
    int rc = nread == UV_ENOMEM ? PX_TLS_ERR : px_tls_handshake(hc->tls);
    if (rc == 0) return;
    px_up_enter(c);
    if (rc < 0) {
      h1_tls_failed(hc, x);
    } else {
      hc->connected = true;
      if ((rc = h1_send(x)) < 0) {
        hc->dead = true;
        h1_conn_failed(x, rc);
      }
    }
    px_up_after(c);
    px_up_leave(c);
    if (rc < 0) return;
  }
  /* the ciphertext is at the start of the slab, plaintext goes after it */
  char *plain = c->h1.slab + H1_SLAB - H1_TLS_PLAIN;
  while (!hc->closing) {
    ssize_t n =
        nread == UV_ENOMEM ? PX_TLS_ERR : px_tls_read(hc->tls, plain, H1_TLS_PLAIN);
    if (n == 0) return;
    /* close_notify ends the stream as EOF does; a close without it, or a
     * broken record, is not an end a body may rely on */
    uv_buf_t b = uv_buf_init(plain, n > 0 ? (unsigned)n : 0);
    ssize_t got = n > 0 ? n : n == PX_TLS_EOF ? UV_EOF : UV_EPROTO;
    h1_on_bytes((uv_stream_t *)&hc->tcp, got, &b);
    if (n < 0) return;
  }
}

static void h1_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  px_h1conn_t *hc = s->data;
  if (hc->tls && !hc->closing) {
    h1_tls_read(hc, nread, buf);
    px_tls_unfeed(hc->tls); /* the slab is the next read's */
  } else {
    h1_on_bytes(s, nread, buf);
  }
}

static px_xfer_t *h1_x(llhttp_t *p) {
  px_xfer_t *x = p->data;
  return px_up_live(x) ? x : NULL;
}

static int hdr_append(px_xfer_t *x, const char *p, size_t n) {
  if (px_buf_append(&x->hbuf, p, n) < 0) {
    x->fail = "upstream response headers too large";
    return -1;
  }
  return 0;
}

static int h1_on_header_field(llhttp_t *p, const char *at, size_t n) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  if (x->u.h1.val) { /* a header without a value-complete callback */
    if (hdr_append(x, "\n", 1) < 0) return -1;
    x->u.h1.val = false;
  }
  return hdr_append(x, at, n);
}

static int h1_on_header_field_complete(llhttp_t *p) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  x->u.h1.val = true;
  return hdr_append(x, ":", 1);
}

static int h1_on_header_value(llhttp_t *p, const char *at, size_t n) {
  px_xfer_t *x = h1_x(p);
  return x ? hdr_append(x, at, n) : -1;
}

static int h1_on_header_value_complete(llhttp_t *p) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  x->u.h1.val = false;
  return hdr_append(x, "\n", 1);
}

static int h1_on_headers_complete(llhttp_t *p) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  if (x->u.h1.val && hdr_append(x, "\n", 1) < 0) return -1;
  x->u.h1.val = false;
  x->status = p->status_code;
  if (x->status >= 100 && x->status < 200) { /* interim */
    px_buf_reset(&x->hbuf);
    return 0;
  }
  return px_up_head_done(x) ? 0 : -1;
}

static int h1_on_body(llhttp_t *p, const char *at, size_t n) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  if (!x->paused && x->u.h1.pend.len == 0) {
    int rc = px_up_deliver(x, at, n);
    if (rc == 0) return 0;
    if (rc != PX_XFER_PAUSE) return -1;
  }
  /* paused: kept until px_xfer_resume (reading stops after this buffer) */
  return px_buf_append(&x->u.h1.pend, at, n) < 0 ? -1 : 0;
}

static int h1_on_message_complete(llhttp_t *p) {
  px_xfer_t *x = h1_x(p);
  if (!x) return -1;
  if (!x->hdrs_done) return 0; /* end of an interim response */
  x->u.h1.msg_done = true;
  x->u.h1.keep = llhttp_should_keep_alive(p);
  return HPE_PAUSED;
}

static void h1_settings_init(void) {
  static bool done;
  if (done) return;
  llhttp_settings_init(&h1_settings);
  h1_settings.on_header_field = h1_on_header_field;
  h1_settings.on_header_field_complete = h1_on_header_field_complete;
  h1_settings.on_header_value = h1_on_header_value;
  h1_settings.on_header_value_complete = h1_on_header_value_complete;
  h1_settings.on_headers_complete = h1_on_headers_complete;
  h1_settings.on_body = h1_on_body;
  h1_settings.on_message_complete = h1_on_message_complete;
  done = true;
}

/* ---- the lane ---- */

static int h1_run(px_xfer_t *x) {
  h1_settings_init();
  if (x->u.h1.naddr) return h1_begin(x);
  h1_dns_t *d = dns_find(x->c, x->u.h1.key);
  if (!d) return h1_resolve(x);
  memcpy(x->u.h1.addr, d->addr, sizeof(d->addr[0]) * d->naddr);
  x->u.h1.naddr = d->naddr;
  return h1_begin(x);
}

/* Deliver what waited, then read on. */
static void h1_resume(px_xfer_t *x) {
  px_uclient_t *c = x->c;
  size_t n = x->u.h1.pend.len;
  if (n) {
    c->in_lane++;
    int rc = px_up_deliver(x, x->u.h1.pend.data, n); /* may pause again */
    c->in_lane--;
    if (rc == 0) px_buf_reset(&x->u.h1.pend);
  }
  if (px_up_live(x) && !x->paused) {
    if (x->aborted)
      px_up_finish(x, PX_XFER_EOTHER, "aborted by on_data", true);
    else if (x->u.h1.msg_done)
      h1_complete(x);
    else if (x->u.h1.hc)
      h1_read_start(x->u.h1.hc);
  }
}

static void h1_release(px_xfer_t *x) {
  if (x->u.h1.res) {
    x->u.h1.res->x = NULL;
    uv_cancel((uv_req_t *)&x->u.h1.res->req);
    x->u.h1.res = NULL;
  }
  h1_detach(x);
  px_buf_free(&x->u.h1.pend);
  free(x->u.h1.reqhead);
  x->u.h1.reqhead = NULL;
}

static bool h1_connecting(px_xfer_t *x) {
  return !x->u.h1.hc || !x->u.h1.hc->connected;
}


static void h1_client_close(px_uclient_t *c) {
  while (!dl_empty(&c->h1.idle))
    h1_close(PX_CONTAINER(c->h1.idle.next, px_h1conn_t, idle));
  for (px_link_t *l = c->h1.resolving.next; l != &c->h1.resolving; l = l->next) {
    px_h1res_t *r = PX_CONTAINER(l, px_h1res_t, link);
    r->x = NULL;
    uv_cancel((uv_req_t *)&r->req); /* its callback still runs, then frees it */
  }
  while (!dl_empty(&c->h1.dns)) {
    h1_dns_t *d = PX_CONTAINER(c->h1.dns.next, h1_dns_t, link);
    dl_del(&d->link);
    free(d);
  }
  c->h1.ndns = 0;
  px_tls_client_close(c);
}

static int h1_client_init(px_uclient_t *c) {
  dl_init(&c->h1.idle);
  dl_init(&c->h1.dns);
  dl_init(&c->h1.resolving);
  return 0;
}

const px_lane_t px_lane_h1 = {
    .name = "builtin",
    .prepare = h1_prepare,
    .run = h1_run,
    .resume = h1_resume,
    .release = h1_release,
    .connecting = h1_connecting,
    .bytes_waiting = h1_bytes_waiting,
    .client_init = h1_client_init,
    .client_close = h1_client_close,
};
