/**
 * jdoc.h - jansson documents read and written by the one scanner's rules
 * (src/base/jdoc.c), where a document is really built: the jansson codecs,
 * the response modes.
 *
 * px_jdoc_load is json_loadb: the text is read with json.h's string and
 * number checks (the same rules the request scan holds every client body
 * to) straight into jansson values, strings copied without a second UTF-8
 * pass; whatever it does not take (nesting past PX_JSON_MAX_DEPTH, a NUL
 * after a token, any refusal) goes to json_loadb itself, so the result
 * (and the error text) is always jansson's. px_jdoc_dump is json_dumps
 * with JSON_COMPACT (and JSON_ENCODE_ANY): the same bytes, plain runs of a
 * string copied whole; anything it does not write itself goes to
 * json_dumps. fuzz/fuzz_jdoc.c holds both equal to jansson's.
 */
#ifndef PROXAI_JDOC_H
#define PROXAI_JDOC_H

#include <jansson.h>
#include <stddef.h>

#include "proxai/buf.h"

/** json_loadb(p, n, flags, err): flags 0 or JSON_DECODE_ANY (others: jansson). */
json_t *px_jdoc_load(const char *p, size_t n, size_t flags, json_error_t *err);
/** json_loads(s, flags, err). */
json_t *px_jdoc_loads(const char *s, size_t flags, json_error_t *err);
/** json_dumps(v, flags): flags JSON_COMPACT, optionally | JSON_ENCODE_ANY
 *  (others: jansson). A malloc'd NUL-terminated text, or NULL. */
char *px_jdoc_dump(const json_t *v, size_t flags);
/** v (an object or an array) appended to out as json_dumps(v, JSON_COMPACT)
 *  writes it. 0, out's error (PX_ETOOBIG, PX_ENOMEM), or PX_EINVAL when
 *  jansson would not write it; out is as it was on failure. */
int px_jdoc_dump_buf(const json_t *v, px_buf_t *out);

#endif
