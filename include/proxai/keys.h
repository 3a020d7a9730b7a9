/**
 * keys.h - keys and teams made at runtime (SPEC section 13): created,
 * changed, revoked and rotated through the admin API, kept in the state
 * backend beside the spend (the persistent store, store.h), never in the
 * configuration. `[key]` and `[team]` sections stay as static ones; a name
 * is either static or runtime, never both.
 *
 * A runtime key's secret is shown once, when it is made; what is kept is
 * its SHA-256 (hex), the record's name, settings and timestamps. Every
 * request looks the key up in the backend: a change or a revocation holds
 * for the next request on every worker, with no cache to expire.
 *
 * Records are JSON (jansson) in the store's KEYS and TEAMS databases; the
 * KEYHASH database maps a secret's hash to the key's name (a rotated key's
 * old hash with the grace period as its expiry).
 */
#ifndef PROXAI_KEYS_H
#define PROXAI_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "proxai/buf.h"
#include "proxai/config.h"

/** The runtime key whose secret this is, at unix time now_s: NULL when
 *  there is none (unknown, revoked, expired, rotated and out of grace) or
 *  no store. The local store only (with Redis: px_redis_key_lookup, one
 *  round trip, then px_keys_from_records). The key (and its runtime team) belong to the
 * caller: px_keys_free(). */
px_key_conf_t *px_keys_find(const px_config_t *cfg, const char *secret, size_t len,
                            int64_t now_s);
/** The hex SHA-256 of a secret (what is stored). */
void px_keys_hash(const char *secret, size_t len, char hex[65]);
/** The runtime key of records read from Redis (px_redis_key_lookup): the
 *  key's record and its team's (empty when none), checked against the hash
 *  of the secret presented; NULL when they do not open. */
px_key_conf_t *px_keys_from_records(const px_config_t *cfg, const char *hex, px_str_t rec,
                                    px_str_t team, int64_t now);
/** Free what px_keys_find returned (NULL is fine). */
void px_keys_free(px_key_conf_t *k);
/** Whether runtime keys can exist (an admin token and a store). */
int px_keys_on(const px_config_t *cfg);

/**
 * The admin API (SPEC 13) for one request: method (llhttp's), path (without
 * query), body. Writes the JSON answer (OpenAI's error shape on errors) to
 * out and returns the HTTP status. The caller has checked the admin token.
 */
int px_keys_admin(const px_config_t *cfg, int method, const char *path, size_t plen,
                  const char *body, size_t blen, px_buf_t *out);

#endif
