/**
 * store.h - the host's persistent store ([state] dir, SPEC sections 3, 12,
 * 13, 14): what must survive a restart on one host (spend, runtime keys
 * and teams, stored Responses), in one LMDB environment in that directory.
 *
 * LMDB: one memory-mapped file shared by every process of the host, one
 * writer at a time (a cross-process lock), readers that never block, every
 * commit crash-safe (copy-on-write pages; a process killed mid-transaction
 * leaves the last committed state). Commits are not fsynced one by one
 * (MDB_NOSYNC): a process crash loses nothing, a machine crash at most the
 * last second (px_store_sync() runs once a second in every worker).
 *
 * LMDB's fork rule: an environment must not be used across fork(). Every
 * process opens its own with px_store_open() after it is forked (the
 * workers; the master never opens one). A process killed while reading
 * leaves a stale reader slot, cleared by the next px_store_open().
 *
 * Data is in named sub-databases (px_store_db_t). Keys are bytes (at most
 * PX_STORE_KEY_MAX); values are bytes. A record carries its creation time
 * and an optional expiry (unix seconds): an expired record reads as absent
 * and px_store_trim() deletes it. Databases marked capped (RESPONSES) keep
 * an age index and their total size, so px_store_trim() can delete the
 * oldest first down to a byte cap.
 *
 * Single-threaded use per process (the worker's loop). Functions return
 * 0 or a negative code; reads say found (1) or absent (0).
 */
#ifndef PROXAI_STORE_H
#define PROXAI_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "proxai/buf.h"

/** The sub-databases. A new one: one enumerator and one line in
 *  store_lmdb.c's table (its name and whether it is capped). */
typedef enum px_store_db {
  PX_STORE_SPEND,     /**< spend counters: "k:NAME|WINDOW" / "t:NAME|WINDOW" */
  PX_STORE_KEYS,      /**< runtime keys by name (settings, hashes, never secrets) */
  PX_STORE_KEYHASH,   /**< SHA-256 of a runtime key's secret -> its name */
  PX_STORE_TEAMS,     /**< runtime teams by name */
  PX_STORE_RESPONSES, /**< stored Responses (capped: oldest first) */
  PX_STORE_DB_COUNT
} px_store_db_t;

#define PX_STORE_KEY_MAX 400 /* LMDB's default key limit is 511 bytes */

/** Flags of px_store_put. */
enum {
  PX_STORE_NEW = 1, /**< fail with PX_STORE_EEXIST when the key is present (and live) */
};

enum {
  PX_STORE_EEXIST = -20101, /**< PX_STORE_NEW and the key is taken */
  PX_STORE_EFULL = -20102,  /**< the map is full (raise its size) */
  PX_STORE_EOFF = -20103,   /**< no store is open */
  PX_STORE_EIO = -20104,    /**< any other LMDB failure (logged once) */
};

/** Open (creating dir and the file when missing) this process's
 *  environment. map_size: the most the file may grow to, bytes (0: 1 GiB).
 *  Call after fork. 0, or <0 with a message in err. */
int px_store_open(const char *dir, uint64_t map_size, char *err, size_t errlen);
/** Sync and close (idempotent). */
void px_store_close(void);
/** Whether a store is open in this process. */
int px_store_on(void);
/** Flush committed data to disk (fdatasync). */
void px_store_sync(void);

/** Read key's value into out (replacing its contents). 1 found, 0 absent or
 *  expired, <0 error. now_s: unix seconds, for the expiry. */
int px_store_get(px_store_db_t db, const void *key, size_t klen, px_buf_t *out,
                 uint64_t now_s);
/** Write key = val. expires_s: unix seconds after which it is absent, 0 =
 *  never. flags: PX_STORE_NEW. */
int px_store_put(px_store_db_t db, const void *key, size_t klen, const void *val,
                 size_t vlen, uint64_t expires_s, unsigned flags);
/** Delete key. 1 deleted, 0 absent, <0 error. */
int px_store_del(px_store_db_t db, const void *key, size_t klen);
/** Add delta to the signed 64-bit counter at key (absent = 0), in one write
 *  transaction: concurrent adds from any process never lose one. *result
 *  (may be NULL): the new value. */
int px_store_add(px_store_db_t db, const void *key, size_t klen, int64_t delta,
                 int64_t *result);
/** Read a counter: 0 when absent. */
int px_store_counter(px_store_db_t db, const void *key, size_t klen, int64_t *value);

/** Called for each live record whose key starts with the prefix, in key
 *  order; views valid during the call only; return non-zero to stop. */
typedef int (*px_store_each_fn)(void *arg, px_str_t key, px_str_t val);
/** Walk the records of db with that prefix (NULL/0: all). 0 or <0. */
int px_store_each(px_store_db_t db, const void *prefix, size_t plen, uint64_t now_s,
                  px_store_each_fn fn, void *arg);

/** A capped database: delete the expired records, then the oldest until its
 *  records hold at most max_bytes (keys and values). *deleted (may be NULL):
 *  how many went. 0 or <0. */
int px_store_trim(px_store_db_t db, uint64_t max_bytes, uint64_t now_s, size_t *deleted);
/** A capped database's current size in bytes (keys and values). */
uint64_t px_store_bytes(px_store_db_t db);

#endif
