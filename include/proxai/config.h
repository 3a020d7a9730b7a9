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
  uint64_t retry_after_max_ms;    /**< default 10000: a longer retry-after moves on */
  unsigned eject_after;           /**< default 5 consecutive failures; 0 = never eject */
  uint64_t eject_for_ms;          /**< default 30000; doubles per repeat, capped at 5m */
  unsigned weight;                /**< default 1, for balance = weighted */
  int client;                     /**< lane: 0 auto (built-in for http:// and
                                       https://, curl for http2), 1 curl, 2 builtin
                                       (px_xfer_client_t) */
} px_upstream_conf_t;

/** Longest ejection of an upstream, whatever eject_for and its repeats. */
#define PX_EJECT_MAX_MS 300000u
/** Deployments per route (a retry tracks the tried ones in a 64-bit set). */
#define PX_MAX_DEPLOYMENTS 64

/** One place a route sends requests to: `NAME[/MODEL]`. */
typedef struct px_target {
  size_t upstream;          /**< index into px_config_t.upstreams */
  char *model;              /**< model sent there; NULL = the route's model, else
                                 the requested name */
} px_target_t;

typedef enum px_balance {
  PX_BALANCE_LEAST_BUSY,    /**< power of two choices: in-flight, then latency */
  PX_BALANCE_ROUND_ROBIN,
  PX_BALANCE_WEIGHTED,      /**< smooth weighted round robin on `weight` */
} px_balance_t;

typedef struct px_route_conf {
  char *pattern;            /**< exact model name or glob (* ?) */
  size_t upstream;          /**< the first deployment's upstream (= deployments[0]) */
  char *model;              /**< rewrite; NULL = keep the requested name */
  px_target_t *deployments; /**< `upstream = A, B/model`: at least one */
  size_t ndeployments;
  px_balance_t balance;     /**< default least_busy */
  px_target_t *fallbacks;   /**< `fallback = NAME[/MODEL]`, in order */
  size_t nfallbacks;
  int64_t max_tokens;       /**< 0 = unset */
  char **models;            /**< `models =`: concrete names /v1/models lists for a glob route */
  size_t nmodels;
} px_route_conf_t;

/** Money is counted in nano-dollars (10^-9 USD) in signed 64-bit integers:
 *  exact sums, no float drift; 9.2 billion USD at most. */
#define PX_NANO_PER_USD 1000000000LL
/** The largest budget and price accepted (USD). */
#define PX_BUDGET_MAX_USD 1000000000LL
#define PX_PRICE_MAX_USD 1000000LL

/** budget_window: UTC calendar day or month, or never reset. */
typedef enum px_window { PX_WINDOW_MONTH, PX_WINDOW_DAY, PX_WINDOW_TOTAL } px_window_t;

/** [team NAME] (SPEC 3, 12): keys that share a budget. Runtime teams (the
 *  admin API) have the same shape. */
typedef struct px_team_conf {
  char *name;
  int64_t budget;     /**< nano-USD per window; 0 = none */
  px_window_t window; /**< default month */
} px_team_conf_t;

typedef struct px_key_conf {
  char *name;
  char *secret;             /**< static keys; NULL for a runtime key */
  char **models;            /**< globs; nmodels == 0 means all */
  size_t nmodels;
  uint64_t rpm;             /**< 0 = unlimited */
  uint64_t tpm;             /**< 0 = unlimited */
  char *team_name;          /**< `team =`; NULL = none */
  const px_team_conf_t *team; /**< resolved team (static: in px_config_t.teams) */
  int64_t budget;             /**< nano-USD per window; 0 = none */
  px_window_t window;         /**< default month */
} px_key_conf_t;

/** [price PATTERN]: nano-USD per million tokens of the upstream model. */
typedef struct px_price_conf {
  char *pattern; /**< exact model name or glob, file order */
  int64_t input, output, cache_read, cache_write;
} px_price_conf_t;

typedef enum px_log_level {
  PX_LOG_ERROR, PX_LOG_WARN, PX_LOG_INFO, PX_LOG_DEBUG
} px_log_level_t;

/** log_format: shape of the diagnostic log lines. */
typedef enum px_log_format { PX_LOG_TEXT, PX_LOG_JSON } px_log_format_t;

typedef struct px_server_conf {
  char *listen;             /**< "host:port", "[v6]:port" or "unix:/path" */
  unsigned workers;         /**< default 1; 0 = one per core */
  unsigned max_connections; /**< default 10000 */
  uint64_t max_body;        /**< default 16m */
  unsigned translate_memory;      /**< a translated request's decoded form may
                                       take this many times its body ... */
  uint64_t translate_memory_base; /**< ... plus this many bytes (default 4
                                       and 1m; translate_memory 0: no bound) */
  uint64_t max_header;      /**< default 64k */
  uint64_t header_timeout_ms;   /**< default 10s */
  uint64_t idle_timeout_ms;     /**< default 75s */
  uint64_t shutdown_timeout_ms; /**< default 30s */
  char *access_log;         /**< "stderr" | "stdout" | "off" | path */
  px_log_level_t log_level; /**< default info */
  px_log_format_t log_format; /**< default text */
  /* team-state: admin listener and unix socket permissions */
  char *admin_listen;       /**< NULL: /metrics served on listen */
  unsigned socket_mode;     /**< for unix: listeners; default 0660 */
} px_server_conf_t;

typedef enum px_state_backend { PX_STATE_LOCAL, PX_STATE_REDIS } px_state_backend_t;

/** [state] on_error: what an admission that needs Redis gets while Redis is
 *  unreachable (SPEC section 7). */
typedef enum px_on_error {
  PX_ON_ERROR_ALLOW, /**< served without the shared limits */
  PX_ON_ERROR_DENY,  /**< 503 */
  PX_ON_ERROR_LOCAL, /**< this host's shared memory, at the instance's share */
} px_on_error_t;

/** [state]: where rate-limit buckets live (SPEC section 3). */
typedef struct px_state_conf {
  px_state_backend_t backend; /**< default local (this host's shared memory) */
  char *redis;                /**< "redis://[[user]:pass@]host:port[/db]" or "unix:/path" */
  char *prefix;               /**< default "proxai:" */
  px_on_error_t on_error;     /**< Redis unreachable: default allow */
  uint64_t timeout_ms;        /**< a Redis reply slower than this = unreachable; 250 */
  char *dir;                  /**< local: the persistent store's directory; NULL = none */
} px_state_conf_t;

/** [trace]: OpenTelemetry spans over OTLP/HTTP (SPEC section 15). */
typedef struct px_trace_conf {
  char *endpoint; /**< the URL spans are POSTed to; NULL = no tracing */
  double sample;  /**< ratio of traces kept, 0..1 (default 1) */
  char **headers; /**< "Name: value" lines sent with each export */
  size_t nheaders;
} px_trace_conf_t;
/** [responses]: Responses the gateway stores for upstreams that cannot
 *  (SPEC section 14). */
typedef struct px_responses_conf {
  int store;         /**< store = on (default) | off */
  uint64_t ttl_ms;   /**< kept this long from creation; default 30d */
  uint64_t max_size; /**< bytes of all stored responses; default 1g */
  uint64_t timeout_ms; /**< a stored turn's write or a chain's read on Redis
                            (up to max_body bytes); default 5s */
} px_responses_conf_t;

typedef struct px_config {
  int refs;
  char *path;               /**< file it came from; NULL for the default */
  px_server_conf_t server;
  px_state_conf_t state;
  px_responses_conf_t responses;
  px_trace_conf_t trace;
  px_upstream_conf_t *upstreams;
  size_t nupstreams;
  px_route_conf_t *routes;
  size_t nroutes;
  px_key_conf_t *keys;
  size_t nkeys;
  px_team_conf_t *teams;
  size_t nteams;
  px_price_conf_t *prices;
  size_t nprices;
  char *admin_token; /**< [admin] token: the admin API; NULL = off */
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
/** Replace server.listen (--listen / PROXAI_LISTEN) on a configuration not
 *  shared yet. 0, or -1 with "invalid listen address ..." in err. */
int px_config_set_listen(px_config_t *c, const char *listen, char *err, size_t errlen);
/** --check warnings, one "warning: ..." line each to out: upstreams no route
 *  uses, routes an earlier route shadows, keys whose models match no route.
 *  Returns how many. */
size_t px_config_warn(const px_config_t *c, FILE *out);
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

/** The model sent to target t of route r for a client that asked for
 *  `requested`: the target's own, else the route's, else the requested one. */
const char *px_target_model(const px_route_conf_t *r, const px_target_t *t,
                            const char *requested);
/** "least_busy", "round_robin" or "weighted". */
const char *px_balance_name(px_balance_t b);

/** First route matching model (file order), or NULL. */
const px_route_conf_t *px_config_route(const px_config_t *c, const char *model);
/** Key whose secret equals the presented one (constant-time compare). */
const px_key_conf_t *px_config_key(const px_config_t *c, const char *secret,
                                   size_t len);
/** Whether key k may use model. */
int px_key_allows(const px_key_conf_t *k, const char *model);
/** Whether client keys are required: static keys, or the admin API (keys
 *  handed out at runtime). */
int px_config_keyed(const px_config_t *c);
/** The static team of that name, or NULL. */
const px_team_conf_t *px_config_team(const px_config_t *c, const char *name);
/** The first [price] matching the upstream model (file order), or NULL. */
const px_price_conf_t *px_config_price(const px_config_t *c, const char *model);
/** "month", "day" or "total"; px_window_parse: 0 or -1. */
const char *px_window_name(px_window_t w);
int px_window_parse(const char *s, px_window_t *out);
/** A decimal USD amount ("12", "2.50", "0.000001": at most 9 decimals, no
 *  sign, no exponent) in nano-USD, at most max_usd. 0 or -1. */
int px_parse_usd(const char *s, int64_t max_usd, int64_t *nano);
/** nano-USD as a JSON number ("12.5", "0.000000001", "0"). buf >= 32. */
const char *px_usd_str(int64_t nano, char *buf, size_t len);

#endif
