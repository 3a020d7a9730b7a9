/* test_upstream_tls.c - the built-in lane's TLS (src/upstream/upstream_tls.c) through
 * the transfer interface, against a blocking OpenSSL server on a thread
 * (test/integration/tls/cert.pem: a self-signed certificate for localhost
 * and 127.0.0.1): verified with ca_file, refused without it (system store),
 * accepted with tls_no_verify, a host name verified against its DNS SAN,
 * one connection for sequential transfers, a TLS session resumed on a new
 * connection, and a loop that closes with no handle left. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "proxai/upstream.h"

/* ---- a blocking TLS server, one thread per connection ---- */

#define MAX_CONNS 16

static SSL_CTX *srv_ctx;
static int lfd;
static atomic_int accepts, resumed, requests;
static pthread_t conn_threads[MAX_CONNS];
static atomic_int nthreads;

static void *serve_conn(void *arg) {
  int fd = (int)(intptr_t)arg;
  SSL *ssl = SSL_new(srv_ctx);
  SSL_set_fd(ssl, fd);
  if (SSL_accept(ssl) == 1) {
    if (SSL_session_reused(ssl)) resumed++;
    char buf[8192];
    size_t len = 0;
    for (;;) {
      int n = SSL_read(ssl, buf + len, (int)(sizeof(buf) - 1 - len));
      if (n <= 0) break;
      len += (size_t)n;
      buf[len] = 0;
      char *he = strstr(buf, "\r\n\r\n");
      if (!he) continue;
      const char *cl = strcasestr(buf, "content-length:");
      size_t blen = cl && cl < he ? strtoul(cl + 15, NULL, 10) : 0;
      size_t need = (size_t)(he + 4 - buf) + blen;
      if (len < need) continue;
      requests++;
      bool close_after = strstr(buf, "/close") != NULL;
      const char *resp =
          close_after
              ? "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello"
              : "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
      SSL_write(ssl, resp, (int)strlen(resp));
      memmove(buf, buf + need, len - need);
      len -= need;
      if (close_after) break;
    }
    SSL_shutdown(ssl);
  }
  SSL_free(ssl);
  close(fd);
  ERR_clear_error();
  return NULL;
}

static void *serve(void *arg) {
  (void)arg;
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) break;
    int i = nthreads++;
    if (i >= MAX_CONNS) {
      close(fd);
      continue;
    }
    accepts++;
    pthread_create(&conn_threads[i], NULL, serve_conn, (void *)(intptr_t)fd);
  }
  return NULL;
}

/* ---- the client side ---- */

typedef struct {
  int status;
  int done;
  px_xfer_result_t res;
  char body[64];
  size_t blen;
} result_t;

static int on_headers(void *arg, int status, const px_hdr_t *h, size_t n) {
  (void)h, (void)n;
  ((result_t *)arg)->status = status;
  return 0;
}

static int on_data(void *arg, const char *p, size_t n) {
  result_t *r = arg;
  if (r->blen + n < sizeof(r->body)) {
    memcpy(r->body + r->blen, p, n);
    r->blen += n;
  }
  return 0;
}

static void on_done(void *arg, px_xfer_result_t res, const char *msg) {
  result_t *r = arg;
  (void)msg;
  r->res = res;
  r->done = 1;
}

static uv_loop_t loop;
static px_uclient_t *client;
static char ca[1024];
static int port;

static result_t fetch(const char *host, const char *path, const char *ca_file,
                      int no_verify) {
  static const px_xfer_cbs_t cbs = {on_headers, on_data, on_done};
  char url[256];
  snprintf(url, sizeof(url), "https://%s:%d%s", host, port, path);
  const char *hdrs[] = {"Content-Type: application/json", NULL};
  px_xfer_opts_t o = {
      .method = "POST",
      .url = url,
      .headers = hdrs,
      .body = "{}",
      .body_len = 2,
      .connect_timeout_ms = 10000,
      .first_byte_timeout_ms = 10000,
      .idle_timeout_ms = 10000,
      .ca_file = ca_file,
      .tls_no_verify = no_verify,
      .pool = "tls",
  };
  result_t r = {0};
  CHECK(px_xfer_start(client, &o, &cbs, &r) != NULL);
  for (int i = 0; i < 100000 && !r.done; i++) uv_run(&loop, UV_RUN_ONCE);
  CHECK(r.done);
  return r;
}

static void ok(result_t r) {
  CHECK(r.res == PX_XFER_OK);
  CHECK(r.status == 200);
  CHECK(r.blen == 5 && memcmp(r.body, "hello", 5) == 0);
}

static int closed;
static void on_client_closed(void *arg) {
  (void)arg;
  closed = 1;
}

int main(void) {
  const char *src = getenv("PROXAI_TEST_SRCDIR");
  char cert[1024], key[1024];
  snprintf(cert, sizeof(cert), "%s/test/integration/tls/cert.pem", src ? src : ".");
  snprintf(key, sizeof(key), "%s/test/integration/tls/key.pem", src ? src : ".");
  snprintf(ca, sizeof(ca), "%s", cert);
  /* the system store must not hold the test certificate */
  unsetenv("SSL_CERT_FILE");
  unsetenv("SSL_CERT_DIR");
  unsetenv("PROXAI_UPSTREAM_CLIENT");
  signal(SIGPIPE, SIG_IGN); /* as proxai's main does */

  srv_ctx = SSL_CTX_new(TLS_server_method());
  CHECK(srv_ctx && SSL_CTX_use_certificate_chain_file(srv_ctx, cert) == 1 &&
        SSL_CTX_use_PrivateKey_file(srv_ctx, key, SSL_FILETYPE_PEM) == 1);
  lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof(sa);
  CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 16) == 0 &&
        getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
  port = ntohs(sa.sin_port);
  pthread_t acceptor;
  pthread_create(&acceptor, NULL, serve, NULL);

  uv_loop_init(&loop);
  client = px_uclient_new(&loop);
  CHECK(client != NULL);

  /* verified through ca_file; the second transfer rides the same connection */
  ok(fetch("127.0.0.1", "/v1/a", ca, 0));
  ok(fetch("127.0.0.1", "/v1/b", ca, 0));
  CHECK(accepts == 1);
  CHECK(requests == 2);

  /* the server closes: the next connection resumes the session */
  ok(fetch("127.0.0.1", "/v1/close", ca, 0));
  ok(fetch("127.0.0.1", "/v1/c", ca, 0));
  CHECK(accepts == 2);
  CHECK(resumed == 1);

  /* self-signed, not in the system store: a connect failure, no request */
  int before = requests;
  result_t r = fetch("127.0.0.1", "/v1/d", NULL, 0);
  CHECK(r.res == PX_XFER_ECONNECT);
  CHECK(r.status == 0);
  CHECK(requests == before);

  /* tls_no_verify accepts it */
  ok(fetch("127.0.0.1", "/v1/e", NULL, 1));

  /* a host name checked against the DNS SAN (and sent as SNI) */
  ok(fetch("localhost", "/v1/f", ca, 0));

  /* an unreadable ca_file: the transfer fails (as curl's would) */
  r = fetch("127.0.0.1", "/v1/g", "/nonexistent/ca.pem", 0);
  CHECK(r.res == PX_XFER_ECONNECT);

  px_uclient_close(client, on_client_closed, NULL);
  for (int i = 0; i < 1000 && !closed; i++) uv_run(&loop, UV_RUN_ONCE);
  CHECK(closed);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&loop) == 0);

  shutdown(lfd, SHUT_RDWR);
  close(lfd);
  pthread_join(acceptor, NULL);
  int n = nthreads < MAX_CONNS ? nthreads : MAX_CONNS;
  for (int i = 0; i < n; i++) pthread_join(conn_threads[i], NULL);
  SSL_CTX_free(srv_ctx);
  return check_report("upstream_tls");
}
