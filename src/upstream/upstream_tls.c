/**
 * upstream_tls.c - TLS on OpenSSL for the built-in HTTP/1.1 lane, over an
 * in-memory BIO (no blocking, no socket of OpenSSL's): see upstream_tls.h.
 *
 * The BIO is our own rather than two BIO_s_mem(): OpenSSL reads the
 * ciphertext straight from the lane's read buffer (a partial record stays
 * in OpenSSL's record buffer), and writes into a px_buf_t sent and emptied
 * after every call. Memory BIOs would copy every byte once more and keep
 * their largest size (64 KiB after one full read) per idle connection;
 * with SSL_MODE_RELEASE_BUFFERS an idle connection holds no record buffer
 * either.
 *
 * Contexts (SSL_CTX, one per ca_file / tls_verify pair) and their session
 * caches belong to the px_uclient_t (c->h1.tls) and live until the client
 * closes. A px_tls_t belongs to its connection and is freed in the
 * connection's close callback, after libuv has cancelled our writes.
 */
#include "upstream_tls.h"

#include <arpa/inet.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxai/buf.h"
#include "upstream_lane.h"

/* Output kept allocated between flushes up to this size. */
#define PX_TLS_OUT_KEEP 65536
/* Requests up to this size are sealed as one record (a TLS record holds
 * 16 KiB of plaintext). */
#define PX_TLS_GATHER 16384
/* Sessions cached per context (one per host:port). */
#define PX_TLS_SESSIONS 64

typedef struct tls_sess {
  SSL_SESSION *sess;
  char key[280];
} tls_sess_t;

struct px_tls_ctx {
  px_tls_ctx_t *next; /* c->h1.tls */
  SSL_CTX *ssl;
  bool no_verify;
  size_t nsess;
  tls_sess_t sess[PX_TLS_SESSIONS];
  char ca_file[]; /* "" = default paths */
};

struct px_tls {
  px_tls_ctx_t *ctx;
  uv_stream_t *s;
  SSL *ssl;
  BIO *bio;       /* read and write side; owned by ssl */
  const char *in; /* ciphertext fed, not yet taken by OpenSSL */
  size_t in_len;
  px_buf_t out;     /* ciphertext OpenSSL wrote, not yet sent */
  unsigned nwrites; /* uv_writes in flight */
  int werr;         /* a write failed */
  bool up;          /* handshake done */
  bool fatal;       /* no SSL_shutdown after this */
  bool eof;         /* TCP EOF fed */
  bool drained;     /* the last read took every byte fed */
  char err[256];
  char key[280];
};

typedef struct tls_wr {
  uv_write_t req;
  px_tls_t *t;
  char data[];
} tls_wr_t;

/* ---- the BIO ---- */

static int bio_write_ex(BIO *b, const char *p, size_t n, size_t *done) {
  px_tls_t *t = BIO_get_data(b);
  if (px_buf_append(&t->out, p, n) < 0) return 0;
  *done = n;
  return 1;
}

static int bio_read_ex(BIO *b, char *p, size_t n, size_t *done) {
  px_tls_t *t = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  if (t->in_len == 0) {
    *done = 0;
    if (!t->eof) BIO_set_retry_read(b); /* else: EOF */
    return 0;
  }
  size_t k = n < t->in_len ? n : t->in_len;
  memcpy(p, t->in, k);
  t->in += k;
  t->in_len -= k;
  *done = k;
  return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  px_tls_t *t = BIO_get_data(b);
  (void)num, (void)ptr;
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;
    case BIO_CTRL_PENDING:
      return t ? (long)t->in_len : 0;
    case BIO_CTRL_WPENDING:
      return t ? (long)t->out.len : 0;
    case BIO_CTRL_EOF:
      return t && t->eof && t->in_len == 0;
    default:
      return 0;
  }
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static BIO_METHOD *bio_method(void) {
  static BIO_METHOD *m; /* process-wide, like OpenSSL's own methods */
  if (m) return m;
  BIO_METHOD *n = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "proxai uv");
  if (!n || !BIO_meth_set_write_ex(n, bio_write_ex) ||
      !BIO_meth_set_read_ex(n, bio_read_ex) || !BIO_meth_set_ctrl(n, bio_ctrl) ||
      !BIO_meth_set_create(n, bio_create)) {
    BIO_meth_free(n);
    return NULL;
  }
  return m = n;
}

/* ---- contexts and sessions ---- */

static int on_new_session(SSL *ssl, SSL_SESSION *sess) {
  px_tls_t *t = SSL_get_app_data(ssl);
  if (!t) return 0;
  px_tls_ctx_t *x = t->ctx;
  tls_sess_t *slot = NULL;
  for (size_t i = 0; i < x->nsess; i++)
    if (strcmp(x->sess[i].key, t->key) == 0) slot = &x->sess[i];
  if (!slot) {
    if (x->nsess < PX_TLS_SESSIONS) {
      slot = &x->sess[x->nsess++];
    } else { /* full: drop the oldest */
      SSL_SESSION_free(x->sess[0].sess);
      memmove(&x->sess[0], &x->sess[1], sizeof(x->sess[0]) * (PX_TLS_SESSIONS - 1));
      slot = &x->sess[PX_TLS_SESSIONS - 1];
    }
    memcpy(slot->key, t->key, sizeof(slot->key));
  } else {
    SSL_SESSION_free(slot->sess);
  }
  slot->sess = sess;
  return 1; /* the reference is ours */
}

static SSL_CTX *ctx_new(const char *ca_file, bool no_verify) {
  static const unsigned char alpn[] = "\x08http/1.1";
  SSL_CTX *s = SSL_CTX_new(TLS_client_method());
  if (!s) return NULL;
  if (!SSL_CTX_set_min_proto_version(s, TLS1_2_VERSION)) goto fail;
  if (no_verify) {
    SSL_CTX_set_verify(s, SSL_VERIFY_NONE, NULL);
  } else {
    SSL_CTX_set_verify(s, SSL_VERIFY_PEER, NULL);
    if (ca_file) {
      /* curl: CURLOPT_CAINFO, and its build's CA path beside it */
      if (!SSL_CTX_load_verify_file(s, ca_file)) goto fail;
      (void)SSL_CTX_load_verify_dir(s, X509_get_default_cert_dir());
    } else if (!SSL_CTX_set_default_verify_paths(s)) {
      goto fail;
    }
    /* as curl does: a CA file may hold an intermediate as trust anchor */
    X509_STORE_set_flags(SSL_CTX_get_cert_store(s),
                         X509_V_FLAG_PARTIAL_CHAIN | X509_V_FLAG_TRUSTED_FIRST);
  }
  /* an idle kept-alive connection holds no record buffer */
  SSL_CTX_set_mode(s, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_session_cache_mode(
      s, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(s, on_new_session);
  if (SSL_CTX_set_alpn_protos(s, alpn, sizeof(alpn) - 1) != 0) goto fail;
  return s;
fail:
  SSL_CTX_free(s);
  ERR_clear_error();
  return NULL;
}

px_tls_ctx_t *px_tls_ctx_get(px_uclient_t *c, const char *ca_file, bool no_verify) {
  const char *cf = ca_file && !no_verify ? ca_file : "";
  for (px_tls_ctx_t *x = c->h1.tls; x; x = x->next)
    if (x->no_verify == no_verify && strcmp(x->ca_file, cf) == 0) return x;
  size_t n = strlen(cf);
  px_tls_ctx_t *x = calloc(1, sizeof(*x) + n + 1);
  if (!x) return NULL;
  memcpy(x->ca_file, cf, n + 1);
  x->no_verify = no_verify;
  if (!(x->ssl = ctx_new(n ? cf : NULL, no_verify))) {
    free(x);
    return NULL;
  }
  x->next = c->h1.tls;
  c->h1.tls = x;
  return x;
}

void px_tls_client_close(px_uclient_t *c) {
  while (c->h1.tls) {
    px_tls_ctx_t *x = c->h1.tls;
    c->h1.tls = x->next;
    for (size_t i = 0; i < x->nsess; i++) SSL_SESSION_free(x->sess[i].sess);
    SSL_CTX_free(x->ssl); /* live SSL objects keep their own reference */
    free(x);
  }
}

/* ---- one connection ---- */

/* SSL_get_error() needs an empty error queue before the call it explains
 * (another user of OpenSSL on this thread, libcurl, may leave one behind);
 * clearing an empty queue costs more than looking at it. */
static inline void err_reset(void) {
  if (ERR_peek_error()) ERR_clear_error();
}

px_tls_t *px_tls_new(px_tls_ctx_t *ctx, uv_stream_t *s, const char *key,
                     size_t host_len) {
  char host[256];
  unsigned char ipbuf[16];
  if (host_len >= sizeof(host) || strlen(key) >= sizeof(((px_tls_t *)0)->key))
    return NULL;
  px_tls_t *t = calloc(1, sizeof(*t));
  if (!t) return NULL;
  t->ctx = ctx;
  t->s = s;
  px_buf_init(&t->out, SIZE_MAX);
  strcpy(t->key, key);
  memcpy(host, key, host_len);
  host[host_len] = 0;
  bool ip = inet_pton(AF_INET, host, ipbuf) == 1 || inet_pton(AF_INET6, host, ipbuf) == 1;
  BIO_METHOD *m = bio_method();
  if (!m || !(t->ssl = SSL_new(ctx->ssl))) goto fail;
  if (!(t->bio = BIO_new(m))) goto fail;
  BIO_set_data(t->bio, t);
  SSL_set_bio(t->ssl, t->bio, t->bio); /* one reference for both sides */
  SSL_set_connect_state(t->ssl);
  SSL_set_app_data(t->ssl, t);
  if (!ctx->no_verify) {
    if (ip) {
      if (!X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), host)) goto fail;
    } else {
      SSL_set_hostflags(t->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (!SSL_set1_host(t->ssl, host)) goto fail;
    }
  }
  if (!ip && !SSL_set_tlsext_host_name(t->ssl, host)) goto fail;
  for (size_t i = 0; i < ctx->nsess; i++) {
    if (strcmp(ctx->sess[i].key, key) != 0) continue;
    if (SSL_SESSION_is_resumable(ctx->sess[i].sess))
      (void)SSL_set_session(t->ssl, ctx->sess[i].sess);
    break;
  }
  return t;
fail:
  SSL_free(t->ssl);
  free(t);
  ERR_clear_error();
  return NULL;
}

void px_tls_free(px_tls_t *t) {
  if (!t) return;
  SSL_set_app_data(t->ssl, NULL);
  SSL_free(t->ssl);
  px_buf_free(&t->out);
  free(t);
}

static void on_tls_written(uv_write_t *req, int status) {
  tls_wr_t *w = PX_CONTAINER(req, tls_wr_t, req);
  px_tls_t *t = w->t;
  t->nwrites--;
  if (status < 0 && status != UV_ECANCELED && !t->werr) t->werr = status;
  free(w);
}

static int fail_text(px_tls_t *t, const char *what) {
  unsigned long e = ERR_peek_last_error();
  char eb[120];
  if (e) {
    ERR_error_string_n(e, eb, sizeof(eb));
    snprintf(t->err, sizeof(t->err), "%s: %s", what, eb);
  } else {
    snprintf(t->err, sizeof(t->err), "%s", what);
  }
  ERR_clear_error();
  t->fatal = true;
  return PX_TLS_ERR;
}

/* Send what OpenSSL wrote (t->out): most of it at once, the rest in a
 * write of ours. */
static int flush(px_tls_t *t, bool queue) {
  char *p = t->out.data;
  size_t n = t->out.len;
  if (n == 0) return 0;
  int rc = 0;
  if (t->werr) {
    rc = t->werr;
  } else {
    uv_buf_t b = uv_buf_init(p, (unsigned)n);
    rc = uv_try_write(t->s, &b, 1);
    if (rc == UV_EAGAIN || rc == UV_ENOSYS) rc = 0;
    if (rc >= 0 && (size_t)rc < n && queue) {
      size_t left = (size_t)(n - rc);
      tls_wr_t *w = malloc(sizeof(*w) + left);
      if (!w) {
        rc = UV_ENOMEM;
      } else {
        memcpy(w->data, p + rc, left);
        w->t = t;
        b = uv_buf_init(w->data, (unsigned)left);
        rc = uv_write(&w->req, t->s, &b, 1, on_tls_written);
        if (rc < 0)
          free(w);
        else
          t->nwrites++;
      }
    }
  }
  if (t->out.size > PX_TLS_OUT_KEEP)
    px_buf_free(&t->out); /* a large body went out: do not keep its size */
  else
    px_buf_reset(&t->out);
  if (rc < 0) {
    if (!t->werr) t->werr = rc;
    snprintf(t->err, sizeof(t->err), "TLS write failed: %s", uv_strerror(rc));
    t->fatal = true;
    return PX_TLS_ERR;
  }
  return 0;
}

int px_tls_handshake(px_tls_t *t) {
  if (t->up) return 1;
  err_reset();
  int rc = SSL_do_handshake(t->ssl);
  int e = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(t->ssl, rc);
  if (flush(t, true) < 0) return PX_TLS_ERR;
  if (rc == 1) {
    t->up = true;
    return 1;
  }
  if (e == SSL_ERROR_WANT_READ && !t->eof) return 0;
  long v = SSL_get_verify_result(t->ssl);
  if (v != X509_V_OK) {
    snprintf(t->err, sizeof(t->err), "certificate verify failed: %s",
             X509_verify_cert_error_string(v));
    ERR_clear_error();
    t->fatal = true;
    return PX_TLS_ERR;
  }
  return fail_text(t, t->eof && !ERR_peek_last_error()
                          ? "connection closed during the TLS handshake"
                          : "TLS handshake failed");
}

void px_tls_feed(px_tls_t *t, const char *p, size_t n) {
  t->drained = false;
  t->in = p;
  t->in_len = n;
}

void px_tls_unfeed(px_tls_t *t) {
  t->in = NULL;
  t->in_len = 0;
}

void px_tls_feed_eof(px_tls_t *t) {
  t->eof = true;
  t->drained = false;
}

ssize_t px_tls_read(px_tls_t *t, char *buf, size_t cap) {
  if (t->drained) {
    t->drained = false;
    return 0;
  }
  if (t->fatal) return PX_TLS_ERR;
  if (t->werr) {
    snprintf(t->err, sizeof(t->err), "TLS write failed: %s", uv_strerror(t->werr));
    t->fatal = true;
    return PX_TLS_ERR;
  }
  err_reset();
  int n = SSL_read(t->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
  if (n > 0) {
    /* nothing left to decrypt: the next call need not ask OpenSSL */
    t->drained = !t->eof && t->in_len == 0 && SSL_pending(t->ssl) == 0;
    return n;
  }
  int e = SSL_get_error(t->ssl, n);
  /* a post-handshake message may want an answer (key update) */
  if (flush(t, true) < 0) return PX_TLS_ERR;
  if (e == SSL_ERROR_WANT_READ && !t->eof) return 0;
  if (e == SSL_ERROR_ZERO_RETURN) return PX_TLS_EOF;
  /* a TCP close without close_notify: the body may be truncated */
  return fail_text(
      t, t->eof ? "connection closed without TLS close_notify" : "TLS read failed");
}

int px_tls_write(px_tls_t *t, const uv_buf_t *b, unsigned nb) {
  if (t->fatal) return PX_TLS_ERR;
  err_reset();
  /* small buffers gathered into full records (a small request, head and
   * body, is one seal, not two; a body in many parts is not a record a
   * part); a long one sealed from where it is. Into t->out: the whole
   * buffer or an error. */
  char one[PX_TLS_GATHER];
  size_t fill = 0;
  for (unsigned i = 0; i < nb; i++) {
    const char *p = b[i].base;
    size_t n = b[i].len;
    while (n > 0) {
      if (fill == 0 && n >= PX_TLS_GATHER) {
        if (SSL_write(t->ssl, p, (int)n) <= 0) return fail_text(t, "TLS write failed");
        break;
      }
      size_t k = n < PX_TLS_GATHER - fill ? n : PX_TLS_GATHER - fill;
      memcpy(one + fill, p, k);
      fill += k, p += k, n -= k;
      if (fill == PX_TLS_GATHER) {
        if (SSL_write(t->ssl, one, (int)fill) <= 0)
          return fail_text(t, "TLS write failed");
        fill = 0;
      }
    }
  }
  if (fill > 0 && SSL_write(t->ssl, one, (int)fill) <= 0)
    return fail_text(t, "TLS write failed");
  return flush(t, true);
}

bool px_tls_writing(const px_tls_t *t) {
  return t->nwrites > 0;
}

void px_tls_shutdown(px_tls_t *t) {
  if (!t->up || t->fatal || t->werr) return;
  ERR_clear_error();
  (void)SSL_shutdown(t->ssl);
  ERR_clear_error();
  (void)flush(t, false); /* the stream is being closed: no queued write */
  t->fatal = true;
}

const char *px_tls_error(const px_tls_t *t) {
  return t->err[0] ? t->err : "TLS error";
}

bool px_tls_resumed(const px_tls_t *t) {
  return SSL_session_reused(t->ssl) == 1;
}
