/* log.c - diagnostic log lines on stderr (text or JSON) and the JSON access
 * log (SPEC section 8).
 *
 * Each line, diagnostic or access, leaves in one write(): worker processes
 * share stderr and the access log file (opened O_APPEND), and a single write
 * keeps their lines from interleaving.
 */
#include "proxai/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxai/buf.h"
#include "proxai/scrub.h"

/** Longest error log line; longer messages are cut. */
#define PX_MAX_LOG_LINE 2048
/** Longest access log line; a record that does not fit is dropped. */
#define PX_MAX_ACCESS_LINE (64 * 1024)
/** Longest JSON diagnostic line (the message is cut at PX_MAX_LOG_LINE first;
 *  escaping can grow it sixfold, plus the request id and fields). */
#define PX_MAX_JSON_LOG_LINE (64 * 1024)
/** Longest request id or field value written to a JSON diagnostic line. */
#define PX_MAX_LOG_FIELD 1024

static px_log_level_t g_level = PX_LOG_INFO;
static px_log_format_t g_format = PX_LOG_TEXT;
static int g_access_fd = STDERR_FILENO; /* -1 = off */
static char *g_access_path;             /* owned; NULL unless a file */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* "2026-11-21T21:00:00.123Z" into out (at least 25 bytes). */
static size_t fmt_time(char *out, size_t n) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
  int m = snprintf(out + k, n - k, ".%03ldZ", ts.tv_nsec / 1000000L);
  return m > 0 ? k + (size_t)m : k;
}

/* write() the whole line, retrying EINTR and short writes (pipes). A short
 * write on a regular O_APPEND file does not happen short of a full disk. */
static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= (size_t)w;
  }
}

static int open_access(const char *path) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  return fd < 0 ? -errno : fd;
}

static void close_access(void) {
  if (g_access_fd > STDERR_FILENO) close(g_access_fd);
  g_access_fd = -1;
  free(g_access_path);
  g_access_path = NULL;
}

int px_log_init(px_log_level_t level, const char *access_log) {
  if (!access_log || strcmp(access_log, "stderr") == 0) {
    close_access();
    g_access_fd = STDERR_FILENO;
  } else if (strcmp(access_log, "stdout") == 0) {
    close_access();
    g_access_fd = STDOUT_FILENO;
  } else if (strcmp(access_log, "off") == 0) {
    close_access();
  } else {
    /* Open the new file before closing the old one: on failure the old
     * destination stays in force (reload keeps working). */
    char *path = strdup(access_log);
    if (!path) return PX_ENOMEM;
    int fd = open_access(path);
    if (fd < 0) {
      free(path);
      return fd;
    }
    close_access();
    g_access_fd = fd;
    g_access_path = path;
  }
  g_level = level;
  return 0;
}

void px_log_done(void) {
  close_access();
  g_access_fd = STDERR_FILENO;
}

int px_log_reopen(void) {
  if (!g_access_path) return 0;
  int fd = open_access(g_access_path);
  if (fd < 0) return fd;
  /* dup2 swaps the file under the same descriptor number atomically. */
  if (dup2(fd, g_access_fd) < 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  close(fd);
  return 0;
}

int px_log_enabled(px_log_level_t level) {
  return level <= g_level;
}

void px_log_set_format(px_log_format_t format) {
  g_format = format;
}

/* s as a quoted JSON string, at most max bytes of it, never cut inside a
 * character; invalid UTF-8 becomes U+FFFD (px_buf_json_escape): a JSON
 * line with raw invalid bytes is rejected by strict collectors. */
static int put_json_text(px_buf_t *b, const char *s, size_t n, size_t max) {
  return px_buf_json_str(b, s, (size_t)px_utf8_cut(s, n, max));
}

/* {"time","level","pid","request_id"?,"message","fields"?} and a newline. */
static int json_line(px_buf_t *b, const char *ts, size_t tn, unsigned li, const char *rid,
                     const char *const *fields, const char *msg, size_t mlen) {
  int rc = px_buf_puts(b, "{\"time\":");
  if (rc == 0) rc = px_buf_json_str(b, ts, tn);
  if (rc == 0)
    rc = px_buf_printf(b, ",\"level\":\"%s\",\"pid\":%ld", level_names[li],
                       (long)getpid());
  if (rc == 0 && rid) {
    rc = px_buf_puts(b, ",\"request_id\":");
    if (rc == 0) rc = put_json_text(b, rid, strlen(rid), PX_MAX_LOG_FIELD);
  }
  if (rc == 0) rc = px_buf_puts(b, ",\"message\":");
  if (rc == 0) rc = put_json_text(b, msg, mlen, mlen);
  if (rc == 0 && fields && fields[0]) {
    rc = px_buf_puts(b, ",\"fields\":{");
    for (size_t i = 0; rc == 0 && fields[i]; i += 2) {
      const char *v = fields[i + 1];
      if (i > 0) rc = px_buf_append(b, ",", 1);
      if (rc == 0) rc = put_json_text(b, fields[i], strlen(fields[i]), PX_MAX_LOG_FIELD);
      if (rc == 0) rc = px_buf_append(b, ":", 1);
      if (rc == 0)
        rc =
            v ? put_json_text(b, v, strlen(v), PX_MAX_LOG_FIELD) : px_buf_puts(b, "null");
    }
    if (rc == 0) rc = px_buf_append(b, "}", 1);
  }
  if (rc == 0) rc = px_buf_append(b, "}\n", 2);
  return rc;
}

static void vlog(px_log_level_t level, const char *rid, const char *const *fields,
                 const char *fmt, va_list ap) {
  char line[PX_MAX_LOG_LINE];
  unsigned li = (unsigned)level < 4 ? (unsigned)level : 3;
  if (rid != NULL && *rid == '\0') rid = NULL;
  if (g_format == PX_LOG_JSON) {
    /* Reused between calls (one event loop per process). */
    static px_buf_t b = {NULL, 0, 0, PX_MAX_JSON_LOG_LINE};
    char ts[40];
    size_t tn = fmt_time(ts, sizeof(ts));
    int m = vsnprintf(line, sizeof(line), fmt, ap);
    size_t mlen = m < 0 ? 0 : (size_t)m < sizeof(line) ? (size_t)m : sizeof(line) - 1;
    px_scrub(line, mlen); /* no configured secret in a log line (SPEC 10) */
    px_buf_reset(&b);
    if (json_line(&b, ts, tn, li, rid, fields, line, mlen) < 0) {
      px_buf_reset(&b); /* too long with its fields: keep the message */
      if (json_line(&b, ts, tn, li, rid, NULL, line, mlen) < 0) return;
    }
    write_all(STDERR_FILENO, b.data, b.len);
    return;
  }
  size_t n = fmt_time(line, sizeof(line));
  int m =
      snprintf(line + n, sizeof(line) - n, " %s [%ld] ", level_names[li], (long)getpid());
  if (m > 0) n += (size_t)m;
  size_t start = n;
  if (rid) {
    m = snprintf(line + n, sizeof(line) - n, "%s: ", rid);
    if (m > 0) n += (size_t)m < sizeof(line) - n ? (size_t)m : sizeof(line) - n - 1;
  }
  m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
  if (m > 0) n += (size_t)m < sizeof(line) - n ? (size_t)m : sizeof(line) - n - 1;
  px_scrub(line + start, n - start); /* no configured secret in a log line (SPEC 10) */
  /* One entry is one line: control characters in the message would let a
   * peer-supplied string forge log lines. */
  for (size_t i = start; i < n; i++)
    if ((unsigned char)line[i] < 0x20) line[i] = ' ';
  if (n >= sizeof(line) - 1) n = sizeof(line) - 2;
  line[n++] = '\n';
  write_all(STDERR_FILENO, line, n);
}

void px_log(px_log_level_t level, const char *fmt, ...) {
  if (!px_log_enabled(level)) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, NULL, NULL, fmt, ap);
  va_end(ap);
}

void px_log_ctx(px_log_level_t level, const char *request_id, const char *const *fields,
                const char *fmt, ...) {
  if (!px_log_enabled(level)) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, request_id, fields, fmt, ap);
  va_end(ap);
}

static int put_key(px_buf_t *b, const char *k, int first) {
  int rc = first ? 0 : px_buf_append(b, ",", 1);
  if (rc == 0) rc = px_buf_json_str(b, k, strlen(k));
  if (rc == 0) rc = px_buf_append(b, ":", 1);
  return rc;
}

static int put_str(px_buf_t *b, const char *k, const char *v) {
  int rc = put_key(b, k, 0);
  if (rc < 0) return rc;
  return v ? px_buf_json_str(b, v, strlen(v)) : px_buf_puts(b, "null");
}

static int put_int(px_buf_t *b, const char *k, int64_t v, int null_if_neg) {
  int rc = put_key(b, k, 0);
  if (rc < 0) return rc;
  if (null_if_neg && v < 0) return px_buf_puts(b, "null");
  return px_buf_printf(b, "%" PRId64, v);
}

static int put_ms(px_buf_t *b, const char *k, double v, int null_if_neg) {
  int rc = put_key(b, k, 0);
  if (rc < 0) return rc;
  if ((null_if_neg && v < 0) || v != v) return px_buf_puts(b, "null");
  return px_buf_printf(b, "%.3f", v);
}

int px_access_log_on(void) { return g_access_fd >= 0; }

void px_access_log(const px_access_rec_t *r) {
  if (g_access_fd < 0 || !r) return;
  /* Reused between calls: no allocation per request once warm. */
  static px_buf_t b = {NULL, 0, 0, PX_MAX_ACCESS_LINE};
  char ts[40];
  size_t tn = fmt_time(ts, sizeof(ts));
  px_buf_reset(&b);
  int rc = px_buf_append(&b, "{", 1);
  if (rc == 0) rc = put_key(&b, "time", 1);
  if (rc == 0) rc = px_buf_json_str(&b, ts, tn);
  if (rc == 0) rc = put_str(&b, "request_id", r->request_id);
  if (rc == 0) rc = put_str(&b, "key", r->key_name);
  if (rc == 0) rc = put_str(&b, "team", r->team);
  if (rc == 0) rc = put_str(&b, "user", r->user);
  if (rc == 0) rc = put_str(&b, "method", r->method);
  if (rc == 0) rc = put_str(&b, "path", r->path);
  if (rc == 0) rc = put_str(&b, "inbound", r->inbound);
  if (rc == 0) rc = put_str(&b, "route", r->route);
  if (rc == 0) rc = put_str(&b, "upstream", r->upstream);
  if (rc == 0) rc = put_str(&b, "model", r->model);
  if (rc == 0) rc = put_str(&b, "upstream_model", r->upstream_model);
  if (rc == 0) rc = put_key(&b, "stream", 0);
  if (rc == 0) rc = px_buf_puts(&b, r->stream ? "true" : "false");
  if (rc == 0) rc = put_int(&b, "status", r->status, 0);
  if (rc == 0) rc = put_int(&b, "bytes_in", (int64_t)r->bytes_in, 0);
  if (rc == 0) rc = put_int(&b, "bytes_out", (int64_t)r->bytes_out, 0);
  if (rc == 0) rc = put_int(&b, "input_tokens", r->input_tokens, 1);
  if (rc == 0) rc = put_int(&b, "output_tokens", r->output_tokens, 1);
  if (rc == 0) rc = put_key(&b, "cost_usd", 0);
  if (rc == 0) {
    char usd[32];
    rc = px_buf_puts(
        &b, r->cost_nano < 0 ? "null" : px_usd_str(r->cost_nano, usd, sizeof(usd)));
  }
  if (rc == 0) rc = put_ms(&b, "duration_ms", r->duration_ms, 0);
  if (rc == 0) rc = put_ms(&b, "ttfb_ms", r->ttfb_ms, 1);
  if (rc == 0) rc = put_int(&b, "attempts", r->attempts, 0);
  if (rc == 0) rc = put_str(&b, "error_type", r->error_type);
  if (rc == 0 && r->lossy != NULL) rc = put_str(&b, "lossy", r->lossy);
  if (rc == 0 && r->trace_id != NULL) rc = put_str(&b, "trace_id", r->trace_id);
  if (rc == 0) rc = px_buf_append(&b, "}\n", 2);
  if (rc < 0) {
    px_log_warn("access log record dropped (%d)", rc);
    return;
  }
  write_all(g_access_fd, b.data, b.len);
}
