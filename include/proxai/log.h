/**
 * log.h - diagnostic log (stderr; text or JSON lines) and JSON access log
 * (SPEC section 8).
 *
 * Never prompt or completion content, never secrets: callers pass only the
 * fields of px_access_rec_t.
 */
#ifndef PROXAI_LOG_H
#define PROXAI_LOG_H

#include <stdint.h>

#include "proxai/config.h"

/** Configure level and access log destination ("stderr" | "stdout" | "off" |
 *  path).
 *  Returns 0 or -errno (path could not be opened). Can be called again on
 *  reload. */
int px_log_init(px_log_level_t level, const char *access_log);
/** Close the access log file, if any. */
void px_log_done(void);
/** Reopen the access log (after SIGHUP / logrotate). */
int px_log_reopen(void);
/** Whether messages at this level are printed. */
int px_log_enabled(px_log_level_t level);
/** Shape of diagnostic log lines (log_format): text (default) or JSON. */
void px_log_set_format(px_log_format_t format);
/** Diagnostic log line to stderr. Text: "TIME LEVEL [pid] message". JSON: one
 *  object per line, {"time","level","pid","message"}. */
void px_log(px_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/**
 * The same with the request it concerns and structured fields.
 * request_id (may be NULL): text lines read "rid: message", JSON lines carry
 * "request_id". fields (may be NULL): name/value string pairs ending with a
 * NULL name, copies of values the message names, for log collectors; JSON
 * lines carry them as a "fields" object, text lines leave them out.
 */
void px_log_ctx(px_log_level_t level, const char *request_id, const char *const *fields,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define px_log_error(...) px_log(PX_LOG_ERROR, __VA_ARGS__)
#define px_log_warn(...) px_log(PX_LOG_WARN, __VA_ARGS__)
#define px_log_info(...)                                               \
  do {                                                                 \
    if (px_log_enabled(PX_LOG_INFO)) px_log(PX_LOG_INFO, __VA_ARGS__); \
  } while (0)
#define px_log_debug(...)                                                \
  do {                                                                   \
    if (px_log_enabled(PX_LOG_DEBUG)) px_log(PX_LOG_DEBUG, __VA_ARGS__); \
  } while (0)
/** Level-checked px_log_ctx for one request: px_log_req(PX_LOG_WARN, rid, ...). */
#define px_log_req(level, rid, ...)                                       \
  do {                                                                    \
    if (px_log_enabled(level)) px_log_ctx(level, rid, NULL, __VA_ARGS__); \
  } while (0)

/** One finished request. NULL strings are written as null. */
typedef struct px_access_rec {
  const char *request_id;
  const char *key_name; /**< client key name, never its secret */
  const char *method;
  const char *path;     /**< without query string */
  const char *inbound;  /**< protocol config name, or NULL */
  const char *route;    /**< route pattern */
  const char *upstream; /**< upstream name */
  const char *model;    /**< requested model */
  const char *upstream_model;
  int stream;
  int status;
  uint64_t bytes_in;
  uint64_t bytes_out;
  int64_t input_tokens;  /**< -1 unknown */
  int64_t output_tokens; /**< -1 unknown */
  double duration_ms;
  double ttfb_ms; /**< -1 when no byte was sent */
  unsigned attempts;
  const char *error_type;    /**< NULL when none */
  const char *lossy;         /**< fields dropped in translation (comma list:
                                  x-proxai-lossy plus what a stream dropped),
                                  NULL when none */
  int64_t cost_nano;         /**< cost_usd in nano-USD; -1: null (no price) */
  const char *team;          /**< the key's team, NULL when none */
  const char *user;          /**< the end user (the client's field or
                                  x-proxai-user), NULL when none */
  const char *trace_id;      /**< 32 hex digits with [trace]; NULL without */
} px_access_rec_t;

/** Whether the access log is on (a caller can skip building a record). */
int px_access_log_on(void);

/** Write one JSON line to the access log (no-op when off). */
void px_access_log(const px_access_rec_t *r);

#endif
