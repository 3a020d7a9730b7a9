/* fuzz_http_request.c - the inbound HTTP path of server.c (llhttp, the head
 * and body callbacks, limits, pipelining, the error path, the response
 * writer) on raw client bytes in arbitrary splits.
 *
 * The connection is one end of a socketpair adopted by the server
 * (px_server_adopt_fd); the target writes the input to the other end piece
 * by piece, runs the loop between pieces and reads what the server answers.
 *
 * Input: byte 0 seeds the split sizes and byte 1 picks how the test handler
 * answers (at once or on the next loop iteration, fixed length or chunked,
 * whether the client half-closes at the end) and what the stream starts
 * with: nothing, the head of a chunked request (the fuzzer's bytes are its
 * chunks, extensions and trailers), or that head and its last chunk (the
 * fuzzer's bytes are trailer fields and what follows them); the rest is the
 * client's byte stream. The handler reads every header of the table, so a
 * table that points into freed memory shows (trailers: fuzz_http_request.dict
 * holds the framing words). Properties checked: no crash, leak or UB; every response head
 * the server wrote is well formed (status line, no bare CR or LF, no NUL, each header
 * line "name: value"); the connection is gone once the client is. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxai/config.h"
#include "proxai/log.h"
#include "proxai/server.h"
#include "proxai/worker.h"

#define FAIL(why) (fprintf(stderr, "fuzz_http_request: %s (line %d)\n", why, __LINE__), abort())

static uv_loop_t loop;
static px_worker_t wctx;
static px_server_t srv = {.w = &wctx};
static int mode;
static px_conn_t *later_conn; /* answered on the next iteration */
static px_req_t *later_req;
static uv_timer_t later;

/* every name and value of the parsed table, read */
static unsigned touch_headers(const px_req_t *r) {
  unsigned sum = 0;
  for (size_t i = 0; i < r->nhdrs; i++) {
    for (size_t k = 0; k < r->hdrs[i].name.len; k++)
      sum += (unsigned char)r->hdrs[i].name.ptr[k];
    for (size_t k = 0; k < r->hdrs[i].value.len; k++)
      sum += (unsigned char)r->hdrs[i].value.ptr[k];
  }
  return sum;
}

static void answer(px_conn_t *c, px_req_t *r) {
  if (touch_headers(r) == 0xffffffffu) FAIL("unreachable");
  /* echo a request header into a response header: the writer must drop a
   * value it may not write */
  const char *echo = px_req_header(r, "x-echo");
  px_hdr_t h[2] = {{PX_STR("content-type"), PX_STR("text/plain")},
                   {PX_STR("x-echo"), px_str(echo ? echo : "-")}};
  if (mode & 2) {
    if (px_resp_start(c, 200, h, 2, -1) == 0) {
      px_resp_write(c, r->url.data, r->url.len, 0);
      size_t n = r->body.len;
      char *copy = malloc(n + 1);
      if (copy != NULL) {
        memcpy(copy, r->body.data ? r->body.data : "", n);
        px_resp_write(c, copy, n, PX_RESP_TAKE);
      }
    }
    px_resp_end(c);
  } else {
    px_resp_simple(c, r->path_len % 7 == 0 ? 404 : 200, "text/plain", r->url.data, r->url.len,
                   h + 1, 1);
  }
}

static void on_later(uv_timer_t *t) {
  (void)t;
  px_conn_t *c = later_conn;
  later_conn = NULL;
  if (c != NULL) answer(c, later_req);
}

static void on_gone(void *arg) {
  (void)arg;
  later_conn = NULL;
}
static const px_conn_handler_t handler = {NULL, on_gone};

static void on_request(px_worker_t *w, px_conn_t *c, px_req_t *r) {
  (void)w;
  if (mode & 1) {
    later_conn = c;
    later_req = r;
    px_conn_set_handler(c, &handler, NULL);
    uv_timer_start(&later, on_later, 0, 0);
    return;
  }
  answer(c, r);
}

/* Every response head in out[0..n) is well formed. Bodies are skipped by
 * their framing; a head cut by the end of the data is checked as far as it
 * goes. */
static void check_output(const char *out, size_t n) {
  size_t i = 0;
  while (i < n) {
    const char *end = memmem(out + i, n - i, "\r\n\r\n", 4);
    size_t he = end ? (size_t)(end - out) : n;
    if (n - i < 12) return;
    if (memcmp(out + i, "HTTP/1.1 ", 9) != 0) FAIL("no status line where a response starts");
    long clen = -1;
    int chunked = 0;
    for (size_t k = i; k < he; k++) {
      if (out[k] == 0) FAIL("NUL in a response head");
      if (out[k] == '\r' && out[k + 1] != '\n') FAIL("bare CR in a response head");
      if (out[k] == '\n' && out[k - 1] != '\r') FAIL("bare LF in a response head");
    }
    const char *line = memchr(out + i, '\n', he - i);
    while (line != NULL && (size_t)(line - out) < he) {
      const char *ls = line + 1;
      const char *le = memchr(ls, '\r', (size_t)(out + he - ls));
      if (le == NULL) le = out + he;
      const char *colon = memchr(ls, ':', (size_t)(le - ls));
      if (colon == NULL || colon == ls || colon[1] != ' ') FAIL("malformed header line");
      if (strncmp(ls, "content-length: ", 16) == 0) clen = strtol(ls + 16, NULL, 10);
      if (strncmp(ls, "transfer-encoding: chunked", 26) == 0) chunked = 1;
      line = memchr(ls, '\n', (size_t)(out + he - ls));
    }
    if (end == NULL) return;
    i = he + 4;
    if (clen >= 0) {
      /* a HEAD answer announces a length and carries no body */
      size_t nb = i + (size_t)clen;
      if (!(n - i >= 9 && memcmp(out + i, "HTTP/1.1 ", 9) == 0 &&
            (nb >= n || n - nb < 9 || memcmp(out + nb, "HTTP/1.1 ", 9) != 0)))
        i = nb;
    } else if (chunked && !(n - i >= 9 && memcmp(out + i, "HTTP/1.1 ", 9) == 0)) {
      for (;;) {
        if (i >= n) return;
        unsigned long sz = strtoul(out + i, NULL, 16);
        const char *crlf = memmem(out + i, n - i, "\r\n", 2);
        if (crlf == NULL) return;
        i = (size_t)(crlf - out) + 2 + sz + 2;
        if (sz == 0) break;
      }
    }
  }
}

static void setup(void) {
  static int done;
  if (done) return;
  done = 1;
  px_log_init(PX_LOG_ERROR, "off");
  char err[256];
  px_config_t *cfg = px_config_parse("[server]\nlisten = 127.0.0.1:1\nmax_body = 4k\n"
                                     "max_header = 2k\nheader_timeout = 10s\n"
                                     "idle_timeout = 10s\naccess_log = off\n"
                                     "[upstream u]\nprotocol = openai_chat_completions\n"
                                     "base_url = http://127.0.0.1:1/v1\napi_key = k\n"
                                     "[route *]\nupstream = u\n",
                                     "fuzz", err, sizeof(err));
  if (cfg == NULL) {
    fprintf(stderr, "config: %s\n", err);
    abort();
  }
  uv_loop_init(&loop);
  uv_timer_init(&loop, &later);
  wctx.loop = &loop;
  wctx.config = cfg;
  srv.on_request = on_request;
}

static size_t drain(int fd, char *out, size_t *n, size_t cap) {
  size_t got = 0;
  for (;;) {
    char tmp[65536];
    ssize_t r = read(fd, tmp, sizeof(tmp));
    if (r <= 0) return r == 0 ? (size_t)-1 : got;
    size_t k = (size_t)r;
    if (*n + k > cap) k = cap - *n;
    memcpy(out + *n, tmp, k);
    *n += k;
    got += (size_t)r;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  setup();
  uint32_t seed = data[0] * 2654435761u + 1;
  mode = data[1];
  data += 2;
  size -= 2;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) FAIL("socketpair");
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  if (px_server_adopt_fd(&srv, sv[0]) < 0) FAIL("adopt");
  static char out[1 << 20];
  size_t on = 0;
  int peer_closed = 0;
  size_t off = 0;
  static const char chunked_head[] =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Echo: e\r\n"
      "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n";
  if (mode & 0x18) { /* a framing prefix: the fuzzer's bytes start in the body */
    if (send(sv[1], chunked_head, sizeof(chunked_head) - 1, MSG_NOSIGNAL) < 0)
      FAIL("send");
    if ((mode & 0x10) && send(sv[1], "0\r\n", 3, MSG_NOSIGNAL) < 0) FAIL("send");
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  while (off < size) {
    seed = seed * 1103515245u + 12345u;
    size_t piece = 1 + (seed >> 16) % 97;
    if ((seed >> 8) % 5 == 0) piece = size - off;
    if (piece > size - off) piece = size - off;
    ssize_t w = send(sv[1], data + off, piece, MSG_NOSIGNAL);
    if (w > 0) off += (size_t)w;
    uv_run(&loop, UV_RUN_NOWAIT);
    if (drain(sv[1], out, &on, sizeof(out)) == (size_t)-1) {
      peer_closed = 1;
      break;
    }
    if (w < 0 && errno != EAGAIN) break; /* the server closed: EPIPE */
  }
  if (mode & 4) shutdown(sv[1], SHUT_WR);
  for (int i = 0; i < 8 && !peer_closed; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    if (drain(sv[1], out, &on, sizeof(out)) == (size_t)-1) peer_closed = 1;
  }
  close(sv[1]);
  /* the client is gone: the server must let go of the connection */
  for (int i = 0; i < 64 && srv.nconns > 0; i++) uv_run(&loop, UV_RUN_NOWAIT);
  if (srv.nconns > 0) {
    /* a connection waiting on a timer (lingering, header timeout): close it */
    px_server_close_all(&srv, 0);
    wctx.draining = 0;
    for (int i = 0; i < 16 && srv.nconns > 0; i++) uv_run(&loop, UV_RUN_NOWAIT);
    if (srv.nconns > 0) FAIL("connection not closed");
  }
  uv_timer_stop(&later);
  later_conn = NULL;
  if (srv.active != 0) FAIL("request still counted in flight");
  check_output(out, on);
  return 0;
}
