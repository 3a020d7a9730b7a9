/**
 * scrub.h - configured secrets never leave the gateway (SPEC section 10).
 *
 * The set of secrets is process-wide: every configuration loaded in this
 * process adds its own (upstream api_keys, credentials in configured
 * upstream headers, client key secrets, the state backend's password), and
 * none is ever removed, because a request started under a replaced
 * configuration may still see its upstream echo the old key. Only what
 * carries an upstream's error text is scrubbed (error bodies, stream error
 * events, log lines): the normal path never pays for it.
 */
#ifndef PROXAI_SCRUB_H
#define PROXAI_SCRUB_H

#include <stddef.h>

/** Adds a secret (copied; duplicates and secrets under 6 bytes ignored). */
void px_scrub_add(const char *secret, size_t n);

/**
 * Overwrites with '*', in place, every configured secret in p[0..n): whole,
 * or as the part a provider echoes in an error message: a word with a mask
 * ("sk-abc1****wxyz", "sk-abc...wxyz") whose visible head (3+ bytes) starts
 * a secret or whose visible tail (4+ bytes) ends one, or a word of 8+ bytes
 * found inside a secret. Length-preserving (JSON stays JSON, a
 * Content-Length stays right). Returns how many places were overwritten.
 */
size_t px_scrub(char *p, size_t n);

#endif
