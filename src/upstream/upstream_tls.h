/**
 * upstream_tls.h - private to src/upstream*.c: TLS on OpenSSL under the
 * built-in HTTP/1.1 lane (https:// upstreams).
 *
 * A px_tls_t is one connection's TLS state: an SSL object over an in-memory
 * BIO. The lane owns the uv stream and its reads; it feeds the ciphertext
 * it reads (px_tls_feed) and takes plaintext out (px_tls_read). What OpenSSL
 * produces (handshake records, encrypted requests, close_notify) is written
 * to the stream by this module: uv_try_write first, the rest copied into a
 * uv_write it owns (freed in its callback, also when the stream is closed).
 *
 * Verification is curl's (OpenSSL backend, 7.88): the peer chain against
 * the upstream's `ca_file` plus the default CA directory, or OpenSSL's
 * default paths; partial chains accepted (a CA file may hold an
 * intermediate); the host name against the DNS names of the certificate
 * (subject CN only when it has none), no partial wildcards; an IP literal
 * against its IP address SANs. `tls_verify = false` checks neither. SNI for
 * names (never for IP literals), TLS 1.2 or later, ALPN http/1.1. Sessions
 * are kept per host:port and TLS context and offered to new connections.
 */
#ifndef PROXAI_UPSTREAM_TLS_H
#define PROXAI_UPSTREAM_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#include "proxai/upstream.h"

typedef struct px_tls_ctx px_tls_ctx_t;
typedef struct px_tls px_tls_t;

/** px_tls_read: the peer closed the TLS session cleanly (close_notify). */
#define PX_TLS_EOF (-1)
/** px_tls_read / px_tls_handshake / px_tls_write: a TLS error (text in
 *  px_tls_error), including a TCP close without close_notify. */
#define PX_TLS_ERR (-2)

/** The client's TLS context for (ca_file, no_verify), created on first use
 *  and kept until px_tls_client_close. NULL: OpenSSL could not set it up
 *  (e.g. an unreadable ca_file). */
px_tls_ctx_t *px_tls_ctx_get(px_uclient_t *c, const char *ca_file, bool no_verify);
/** Free the client's contexts and cached sessions (client close, after its
 *  connections stopped using TLS; px_tls_free may still follow). */
void px_tls_client_close(px_uclient_t *c);

/** TLS over stream s to key ("host:port", host without brackets; an IP
 *  literal host is verified against IP SANs and gets no SNI). A cached
 *  session for key is offered. NULL on allocation failure. */
px_tls_t *px_tls_new(px_tls_ctx_t *ctx, uv_stream_t *s, const char *key, size_t host_len);
/** Free after the stream is closed (its close callback). */
void px_tls_free(px_tls_t *t);

/** Drive the handshake, writing what it produces. 1: done; 0: needs more
 *  input; PX_TLS_ERR: failed (certificate, name, protocol, write). */
int px_tls_handshake(px_tls_t *t);
/** Ciphertext read from the stream, read by OpenSSL in place: p must stay
 *  valid until px_tls_handshake / px_tls_read took it all (returned 0, an
 *  error, or PX_TLS_EOF) or px_tls_unfeed. */
void px_tls_feed(px_tls_t *t, const char *p, size_t n);
/** Forget what is left of the fed bytes (the connection is being closed). */
void px_tls_unfeed(px_tls_t *t);
/** The peer closed the TCP connection: a later px_tls_read reports
 *  PX_TLS_EOF if close_notify came, else PX_TLS_ERR (truncation). */
void px_tls_feed_eof(px_tls_t *t);
/** Plaintext into buf: >0 bytes, 0 none yet (more input needed),
 *  PX_TLS_EOF or PX_TLS_ERR. */
ssize_t px_tls_read(px_tls_t *t, char *buf, size_t cap);
/** Encrypt and send nb buffers. 0 or PX_TLS_ERR. */
int px_tls_write(px_tls_t *t, const uv_buf_t *b, unsigned nb);
/** Writes of ours still in flight. */
bool px_tls_writing(const px_tls_t *t);
/** Send close_notify if the session is up (best effort, no waiting). */
void px_tls_shutdown(px_tls_t *t);
/** The last error, for logs ("certificate verify failed: ..."). */
const char *px_tls_error(const px_tls_t *t);
/** Whether the session was resumed (tests, debug logs). */
bool px_tls_resumed(const px_tls_t *t);

#endif
