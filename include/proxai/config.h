/**
 * config.h - proxai.conf -> immutable configuration (SPEC sections 2, 3).
 *
 * A px_config_t is built once by px_config_load() and never modified; it is
 * reference counted so in-flight requests keep the configuration they started
 * with across a SIGHUP reload. All strings are owned by the config.
 */
#ifndef PROXAI_CONFIG_H
#define PROXAI_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proxai/proto.h"

typedef struct px_upstream_conf {
  char *name;
  px_proto_t protocol;
  char *base_url;           /**< without trailing slash */
  char *api_key;            /**< may be NULL (no key sent) */
  char **headers;           /**< "Name: value" lines, repeatable `header` */
  size_t nheaders;
  char *anthropic_version;  /**< default "2023-06-01" */
  uint64_t connect_timeout_ms;    /**< default 5000 */
  uint64_t first_byte_timeout_ms; /**< default 120000 */
  uint64_t idle_timeout_ms;       /**< default 120000 */
  unsigned max_connections;       /**< default 256 */
  unsigned retries;               /**< default 2 */
  int http2;                      /**< default 0 */
  char *ca_file;                  /**< CA bundle for HTTPS; NULL = system default */
  int tls_verify;                 /**< default 1: verify peer and host name */
  int client;                     /**< lane: 0 auto (built-in for http://), 1 curl,
                                       2 builtin (px_xfer_client_t) */
} px_upstream_conf_t;

typedef struct px_route_conf {
  char *pattern;            /**< exact model name or glob (* ?) */
  size_t upstream;          /**< index into px_config_t.upstreams */
  char *model;              /**< rewrite; NULL = keep the requested name */
  size_t *fallbacks;        /**< indexes into upstreams, in order */
  size_t nfallbacks;
  int64_t max_tokens;       /**< 0 = unset */
} px_route_conf_t;

typedef struct px_key_conf {
  char *name;
  char *secret;
  char **models;            /**< globs; nmodels == 0 means all */
  size_t nmodels;
  uint64_t rpm;             /**< 0 = unlimited */
  uint64_t tpm;             /**< 0 = unlimited */
} px_key_conf_t;

typedef enum px_log_level {
  PX_LOG_ERROR, PX_LOG_WARN, PX_LOG_INFO, PX_LOG_DEBUG
} px_log_level_t;

typedef struct px_server_conf {
  char *listen;             /**< "host:port", "[v6]:port" or "unix:/path" */
  unsigned workers;         /**< default 1; 0 = one per core */
  unsigned max_connections; /**< default 10000 */
  uint64_t max_body;        /**< default 16m */
  uint64_t max_header;      /**< default 64k */
  uint64_t header_timeout_ms;   /**< default 10s */
  uint64_t idle_timeout_ms;     /**< default 75s */
  uint64_t shutdown_timeout_ms; /**< default 30s */
  char *access_log;         /**< "stderr" | "off" | path */
  px_log_level_t log_level; /**< default info */
} px_server_conf_t;

typedef struct px_config {
  int refs;
  char *path;               /**< file it came from; NULL for the default */
  px_server_conf_t server;
  px_upstream_conf_t *upstreams;
  size_t nupstreams;
  px_route_conf_t *routes;
  size_t nroutes;
  px_key_conf_t *keys;
  size_t nkeys;
  /** When no upstream exists (embedded default without keys): the message
   *  every model request gets with a 503. NULL otherwise. */
  char *unconfigured_message;
} px_config_t;

/**
 * Load a configuration. path NULL: ./proxai.conf if present, else the
 * embedded default built from the environment (SPEC section 2).
 * On failure returns NULL and writes "FILE:LINE: message" (no "proxai: "
 * prefix) into err.
 */
px_config_t *px_config_load(const char *path, char *err, size_t errlen);
/** Load from an in-memory INI text; name is used in error messages. */
px_config_t *px_config_parse(const char *text, const char *name, char *err,
                             size_t errlen);
px_config_t *px_config_ref(px_config_t *c);
/** Drop a reference; frees at zero. */
void px_config_unref(px_config_t *c);
/** Print the resolved routes and upstreams (never secrets) for --check. */
void px_config_print(const px_config_t *c, FILE *out);

/** Parse "5s", "150ms", "2m", "10" (seconds). 0 or -1. */
int px_parse_duration_ms(const char *s, uint64_t *out);
/** Parse "16m", "64k", "1g", "1000". 0 or -1. */
int px_parse_size(const char *s, uint64_t *out);
/** Glob match with * and ?. */
int px_glob_match(const char *pattern, const char *s);

/** First route matching model (file order), or NULL. */
const px_route_conf_t *px_config_route(const px_config_t *c, const char *model);
/** Key whose secret equals the presented one (constant-time compare). */
const px_key_conf_t *px_config_key(const px_config_t *c, const char *secret,
                                   size_t len);
/** Whether key k may use model. */
int px_key_allows(const px_key_conf_t *k, const char *model);

#endif
