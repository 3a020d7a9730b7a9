/* log.c - error log lines on stderr and the JSON access log (SPEC section 8).
 *
 * Each line, error or access, leaves in one write(): worker processes share
 * stderr and the access log file (opened O_APPEND), and a single write keeps
 * their lines from interleaving.
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

/** Longest error log line; longer messages are cut. */
#define PX_MAX_LOG_LINE 2048
/** Longest access log line; a record that does not fit is dropped. */
#define PX_MAX_ACCESS_LINE (64 * 1024)

static px_log_level_t g_level = PX_LOG_INFO;
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

void px_log(px_log_level_t level, const char *fmt, ...) {
  if (!px_log_enabled(level)) return;
  char line[PX_MAX_LOG_LINE];
  size_t n = fmt_time(line, sizeof(line));
  unsigned li = (unsigned)level < 4 ? (unsigned)level : 3;
  int m =
      snprintf(line + n, sizeof(line) - n, " %s [%ld] ", level_names[li], (long)getpid());
  if (m > 0) n += (size_t)m;
  size_t start = n;
  va_list ap;
  va_start(ap, fmt);
  m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
  va_end(ap);
  if (m > 0) n += (size_t)m < sizeof(line) - n ? (size_t)m : sizeof(line) - n - 1;
  /* One entry is one line: control characters in the message would let a
   * peer-supplied string forge log lines. */
  for (size_t i = start; i < n; i++)
    if ((unsigned char)line[i] < 0x20) line[i] = ' ';
  if (n >= sizeof(line) - 1) n = sizeof(line) - 2;
  line[n++] = '\n';
  write_all(STDERR_FILENO, line, n);
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
  if (rc == 0) rc = put_ms(&b, "duration_ms", r->duration_ms, 0);
  if (rc == 0) rc = put_ms(&b, "ttfb_ms", r->ttfb_ms, 1);
  if (rc == 0) rc = put_int(&b, "attempts", r->attempts, 0);
  if (rc == 0) rc = put_str(&b, "error_type", r->error_type);
  if (rc == 0 && r->lossy != NULL) rc = put_str(&b, "lossy", r->lossy);
  if (rc == 0) rc = px_buf_append(&b, "}\n", 2);
  if (rc < 0) {
    px_log_warn("access log record dropped (%d)", rc);
    return;
  }
  write_all(g_access_fd, b.data, b.len);
}
