/**
 * json.h - the one JSON scanner (src/base/json.c): UTF-8 and JSON string syntax,
 * the validating request scanner of SPEC section 10, and the fast scanner
 * of the stream decoders. Every reader here accepts exactly what jansson
 * (json_loadb, flags 0) accepts, or less: jansson stays the arbiter and the
 * DOM builder where a DOM is worth it.
 *
 * No I/O, no allocation except where said (px_json_unescape's buffer).
 */
#ifndef PROXAI_JSON_H
#define PROXAI_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "proxai/buf.h"

/* ------------------------------------------------------------------------ */
/* UTF-8 and JSON string syntax                                             */

/* px_utf8_seq: buf.h */
/** Code points in the UTF-8 text s[0..n) (bytes that are not continuation
 *  bytes). */
size_t px_utf8_chars(const char *s, size_t n);
/** The byte offset of character ci of s[0..n) (clipped to n; a byte that
 *  starts no valid sequence counts as one character). */
size_t px_utf8_offset(const char *s, size_t n, int64_t ci);
/** Write code point cp (<= U+10FFFF) as UTF-8 at o (room for 4); its length. */
size_t px_utf8_put(char *o, unsigned long cp);
/** The 4 hex digits at p (all 4 readable) -> value, or -1. */
long px_hex4(const unsigned char *p);

/** First index >= i of p[0..n) that is not JSON whitespace. */
size_t px_json_ws_run(const unsigned char *p, size_t n, size_t i);
static inline size_t px_json_ws(const unsigned char *p, size_t n, size_t i) {
  return i < n && p[i] > ' ' ? i : px_json_ws_run(p, n, i); /* mostly: none */
}

/** Check the JSON string whose content starts at p[i] (just past its opening
 *  quote) exactly as strictly as jansson reads it: valid UTF-8, no raw
 *  control characters, valid escapes, no \u0000, surrogate escapes only as
 *  pairs. 0 with *end = index of the closing quote and *esc = whether it has
 *  escapes; -1 when jansson would reject it or it is unterminated. Reads
 *  64-byte blocks with vector masks (AVX2 when the CPU has it, else SSE2;
 *  px_json_simd), never a byte at or past n. */
int px_json_string_at(const unsigned char *p, size_t n, size_t i, size_t *end, int *esc);
/** The instructions px_json_string_at checks a string with: 2 AVX2 (with
 *  BMI1/2), 1 SSE2, 0 scalar; -1 (or more than the CPU has): the best the
 *  CPU has, which is the default. Returns the level before. For tests and
 *  benchmarks: every level accepts exactly the same strings. */
int px_json_simd(int level);
/** Non-zero when one of the 8 bytes of v is '"', '\\', below 0x20 or at or
 *  above 0x80 (the bytes that end a plain ASCII run of a JSON string); the
 *  lowest flagged byte is exact (borrows only run upwards from a hit). */
static inline uint64_t px_json_special8(uint64_t v) {
  const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
  return (((q - ones) & ~q) | ((b - ones) & ~b) | ((v - ones * 0x20) & ~v) | v) & high;
}
/** End of the plain ASCII run at p[i..n): the first '"', '\\', control or
 *  non-ASCII byte, or n. Sixteen bytes at a time with SSE2, else eight (the
 *  scanners spend most of their time inside strings). */
static inline size_t px_json_plain(const unsigned char *p, size_t n, size_t i) {
#if defined(__SSE2__)
  /* signed bytes: a control character and a non-ASCII byte are both
   * below 0x20 */
  const __m128i lo = _mm_set1_epi8(0x20), qt = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
    __m128i hit = _mm_or_si128(_mm_cmplt_epi8(v, lo),
                               _mm_or_si128(_mm_cmpeq_epi8(v, qt), _mm_cmpeq_epi8(v, bs)));
    unsigned m = (unsigned)_mm_movemask_epi8(hit);
    if (m) return i + (size_t)__builtin_ctz(m);
  }
#endif
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (i + 8 <= n) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    uint64_t m = px_json_special8(v);
    if (m) return i + ((size_t)__builtin_ctzll(m) >> 3);
    i += 8;
  }
#endif
  while (i < n && p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"' && p[i] != '\\') i++;
  return i;
}
/* the usual string (plain ASCII to its closing quote) inline; the rest in
 * px_json_string_at */
static inline int px_json_string(const unsigned char *p, size_t n, size_t i, size_t *end,
                                 int *esc) {
  size_t k = px_json_plain(p, n, i);
  if (k < n && p[k] == '"') {
    *end = k;
    *esc = 0;
    return 0;
  }
  return px_json_string_at(p, n, k, end, esc);
}
/** The value of the content s[0..n) of a string px_json_string accepted: a
 *  view of s itself without escapes, else unescaped into b (reset first).
 *  0, or b's error (PX_ETOOBIG / PX_ENOMEM). */
int px_json_unescape(const char *s, size_t n, int esc, px_buf_t *b, px_str_t *out);

/* ------------------------------------------------------------------------ */
/* The validating fast JSON scanner of the stream decoders' fast paths.     */
/* It accepts only what it can prove jansson would accept and read the same */
/* way (see px_json_string; numbers: plain integers of at most 15 digits;   */
/* nesting at most PX_FJ_MAX_DEPTH); anything else fails, and the caller    */
/* falls back to jansson, which stays the arbiter.                          */

#define PX_FJ_MAX_DEPTH 32

typedef struct px_fj {
  const unsigned char *p;
  size_t n, i;
} px_fj_t;

/** A string member value remembered by the scanner: raw content p[s..e). */
typedef struct px_fj_str {
  size_t s, e;
  int esc, set;
} px_fj_str_t;

/** What px_fj_object reads. Keys named in keys[] are read: string values
 *  into strs[k] (a non-string value fails), except the key at obj_key (an
 *  object: obj_at gets its offset, then it is skipped) and the keys at
 *  int_key / int_key2 (integers into iv / iv2). Unused slots are -1. A
 *  repeated or escaped key fails. */
typedef struct px_fj_want {
  const char *const *keys;
  int nkeys;
  px_fj_str_t *strs;
  int int_key, int_key2, obj_key;
  int64_t iv, iv2;
  int iv_set, iv2_set;
  size_t obj_at;
  int obj_set;
  struct px_fj_want *sub; /**< non-NULL: the obj_key object is read with it
                               in the same walk (else only checked) */
} px_fj_want_t;

/** Skip whitespace at j->i. */
static inline void px_fj_ws(px_fj_t *j) {
  if (j->i < j->n && j->p[j->i] > ' ') return; /* the usual case: no blank */
  j->i = px_json_ws(j->p, j->n, j->i);
}
/** Walk and check the object at j->i (see px_fj_want_t); j->i moves past it.
 *  0, or -1 for anything not proven valid. */
int px_fj_object(px_fj_t *j, px_fj_want_t *w, int depth);
/** Check and skip the value at j->i (nesting counted from depth). 0, or -1
 *  for anything not proven valid. */
int px_fj_skip(px_fj_t *j, int depth);
/** The value of a string member px_fj_object read: see px_json_unescape. */
int px_fj_value(const px_fj_t *j, const px_fj_str_t *st, px_buf_t *scratch, px_str_t *out);

/* ------------------------------------------------------------------------ */
/* The request scanner (SPEC section 10): one pass over a client body that  */
/* validates it by jansson's rules and finds the members the gateway acts   */
/* on. The same rules hold on the fast path (the body is forwarded as is)   */
/* and on the translated path (jansson builds the DOM after this scan).     */

/** Deepest nesting of arrays and objects a request may have (the top-level
 *  object is 1). jansson's own limit (JSON_PARSER_MAX_DEPTH, 2048 in 2.14)
 *  is higher; this one holds on both paths, so no translator recursion ever
 *  sees more. */
#define PX_JSON_MAX_DEPTH 256

/** Output-token cap paths a scan can watch (px_json_request_caps). */
#define PX_JREQ_CAPS 2
/** Other top-level members a scan can hand over (px_json_request_watch). */
#define PX_JREQ_MEMBERS 3

/** Why px_json_request refused a body. */
typedef enum {
  PX_JREQ_OK = 0,
  PX_JREQ_SYNTAX,    /**< not JSON as jansson reads it */
  PX_JREQ_DEPTH,     /**< valid JSON nested deeper than PX_JSON_MAX_DEPTH */
  PX_JREQ_NOT_OBJECT,/**< valid JSON, not an object */
  PX_JREQ_DUPLICATE, /**< a member the gateway acts on appears twice */
} px_jreq_err_t;

/** The smallest container whose end the request walk records
 *  (px_json_jumps_t): a smaller one costs a decoder little to skip. */
#define PX_JSON_JUMP_MIN 64

/** Where the larger containers of a body the request walk accepted end
 *  (px_json_request_jumps): for each container of at least
 *  PX_JSON_JUMP_MIN bytes inside a top-level member (the walk's unwatched
 *  containers), its opening offset and the offset past its close, in
 *  opening order; the first cap of them (v: the caller's, cap entries). A
 *  container missing from it is simply not known (a reader skips it
 *  itself). base and len: the body walked.
 *  want (the caller's, or NULL: the walk records from the start): the walk
 *  records from the top-level `model` on, when want says 1 for its token (a
 *  string, with its quotes; want may set v and cap then), else nothing:
 *  what the gateway passes through pays no recording. */
typedef struct px_json_jumps {
  const char *base;
  size_t len;
  uint32_t (*v)[2];
  size_t n, cap;
  int (*want)(struct px_json_jumps *j, const char *tok, size_t len);
  void *arg; /**< want's */
} px_json_jumps_t;

/** What px_json_request found. Spans are byte ranges of the body; a
 *  member's len is 0 when it is absent. */
typedef struct px_json_req {
  size_t model_at, model_len;   /**< `model` value token (a string with its quotes) */
  int model_esc;                /**< the model string has escapes */
  size_t stream_at, stream_len; /**< `stream` value token */
  int stream;                   /**< `stream` is true */
  int include_usage;            /**< `stream_options.include_usage` is true */
  size_t so_at, so_len;         /**< `stream_options` value token (its first
                                     byte for a container; len 0: absent) */
  size_t cap_at[PX_JREQ_CAPS], cap_len[PX_JREQ_CAPS]; /**< value token of each
                                     watched output-token cap (caps[k]) */
  size_t mem_at[PX_JREQ_MEMBERS], mem_len[PX_JREQ_MEMBERS]; /**< value token
                                     of each watched top-level member
                                     (members[k]), a container whole */
  size_t user_at, user_len;     /**< the end user's string token (SPEC 13), 0 if
                                     none: `metadata.user_id`, else
                                     `safety_identifier`, else `user` (the
                                     last of a repeated member, as jansson) */
  size_t cost;                  /**< bytes jansson needs at most to hold the
                                     body as a document (before any parse) */
  px_jreq_err_t err;            /**< why the body was refused */
  size_t err_at;                /**< byte offset of the fault */
  const char *reason;           /**< static text for the client, with err */
  const char *key;              /**< PX_JREQ_DUPLICATE: the member name */
  const px_json_jumps_t *jumps; /**< px_json_request_jumps: its table, filled
                                     (NULL for the other scans) */
} px_json_req_t;

/**
 * Validate a request body p[0..n) and find `model`, `stream` and
 * `stream_options.include_usage` at the top level. 0 when the body is one
 * JSON object that jansson accepts, nested at most PX_JSON_MAX_DEPTH deep,
 * with each of `model`, `stream`, `stream_options` (and `include_usage`
 * inside it) at most once, whatever the escapes in the member names; else
 * -1 with r->err, r->err_at and r->reason set.
 * One deliberate difference: jansson 2.14 skips a NUL byte right after a
 * number or a literal ({"a":1<NUL>} parses); a NUL outside a string is not
 * JSON, and this scanner refuses it (on both paths, as it runs first).
 */
int px_json_request(const char *p, size_t n, px_json_req_t *r);

/**
 * px_json_request watching also the client protocol's output-token caps
 * (px_proto_ops_t.max_tokens_keys: up to PX_JREQ_CAPS paths of one or two
 * member names, NULL-padded; caps NULL: none). The rule for repeated
 * members is one for every member the gateway reads from a client body:
 * `model`, `stream`, `stream_options` and its `include_usage`, and each cap
 * (with the object holding it, e.g. Gemini's `generationConfig`) appearing
 * twice at its place, under any spelling of its name, refuses the body
 * (PX_JREQ_DUPLICATE). So admission, routing, the rate limiter's
 * reservation and the upstream (which gets the body as is, or translated by
 * a codec) all read the one value. Other repeated members are not read by
 * the gateway: passed through as they are, or read as jansson reads them
 * (the last one) when translated.
 */
int px_json_request_caps(const char *p, size_t n, const char *const (*caps)[2],
                         px_json_req_t *r);

/**
 * px_json_request_caps handing over also the spans of up to PX_JREQ_MEMBERS
 * top-level members (members: NULL-padded, or NULL), in r->mem_at/mem_len:
 * what a client protocol reads of every request (the stored responses'
 * previous_response_id, store and input) costs no walk of its own. They
 * are members the gateway reads, so the rule for repeated members holds for
 * them too (PX_JREQ_DUPLICATE). The names of caps and members are string
 * literals (a table is built once per set of name pointers and kept).
 */
int px_json_request_watch(const char *p, size_t n, const char *const (*caps)[2],
                          const char *const *members, px_json_req_t *r);

/**
 * px_json_request_watch recording also where its containers end (j: the
 * caller's table, j->v and j->cap set; its base, len and n set here), for a
 * decoder to skip a container without reading it again (fastir.h's
 * px_fw_jumps). r->jumps = j on success when it recorded (want NULL, or
 * saying 1). A body of 4 GiB or more records nothing.
 */
int px_json_request_jumps(const char *p, size_t n, const char *const (*caps)[2],
                          const char *const *members, px_json_jumps_t *j,
                          px_json_req_t *r);

/** The model of a scanned request as a NUL-terminated malloc'd string
 *  (unescaped), or NULL: absent, not a string, or out of memory. */
char *px_json_req_model(const char *p, const px_json_req_t *r);

/** Append p[0..n) to out with the token p[at..at+len) replaced by the JSON
 *  string `value` (escaped). 0 or a px_buf error. */
int px_json_splice_str(px_buf_t *out, const char *p, size_t n, size_t at, size_t len,
                       const char *value);

/** The JSON text p[0..n) (one value px_json_request or the checked reads
 *  accepted) with every string, member names included, written in its
 *  plain spelling (json_dumps' escapes: quote, backslash and control
 *  characters only; everything else as its UTF-8 bytes), appended to out:
 *  the same document, its names and values comparable byte for byte (the
 *  one reader's rule: names compared unescaped). 1 when a string changed,
 *  0 when the text was plain already (out then holds a copy), <0 on a px_buf
 *  error. */
int px_json_respell(const char *p, size_t n, px_buf_t *out);

/** A JSON number at p[*i] checked as jansson reads it (grammar; an integer
 *  must fit int64, a real must not overflow); *i moves past it. 0 or -1.
 *  For the fast codecs' validating reads (src/proto/fast.c). */
int px_json_number(const char *p, size_t n, size_t *i);

/* ------------------------------------------------------------------------ */
/* The fast scanner's member walk, inline, for the stream decoders' hot     */
/* loops (one flat walk per event, no call per member). Same rules as       */
/* px_fj_object / px_fj_skip: what they refuse, these refuse.               */

/** End of the integer px_fj_skip accepts at p[i] (a '-' or a digit: at most
 *  15 digits, no leading zero, no fraction or exponent), or 0 when there is
 *  none (the number is not proven: the caller falls back). */
static inline size_t px_fj_int_end(const unsigned char *p, size_t n, size_t i) {
  if (i < n && p[i] == '-') i++;
  size_t d0 = i;
  while (i < n && (unsigned)(p[i] - '0') < 10) i++;
  size_t nd = i - d0;
  if (nd == 0 || nd > 15 || (nd > 1 && p[d0] == '0')) return 0;
  if (i < n && (p[i] == '.' || p[i] == 'e' || p[i] == 'E')) return 0;
  return i;
}

/** The value of the integer p[s..e) that px_fj_int_end accepted. */
static inline int64_t px_fj_int_value(const unsigned char *p, size_t s, size_t e) {
  int neg = p[s] == '-';
  int64_t v = 0;
  for (size_t i = s + (size_t)neg; i < e; i++) v = v * 10 + (p[i] - '0');
  return neg ? -v : v;
}

/** Check and skip the value at p[*ip] (*ip < n) as px_fj_skip(depth) does,
 *  strings, literals and integers without a call. 0, or -1. */
static inline int px_fj_pass(const unsigned char *p, size_t n, size_t *ip, int depth) {
  size_t i = *ip, e;
  int esc;
  switch (p[i]) {
    case '"':
      if (px_json_string(p, n, i + 1, &e, &esc) < 0) return -1;
      *ip = e + 1;
      return 0;
    case 'n':
      if (n - i < 4 || memcmp(p + i, "null", 4) != 0) return -1;
      *ip = i + 4;
      return 0;
    case 't':
      if (n - i < 4 || memcmp(p + i, "true", 4) != 0) return -1;
      *ip = i + 4;
      return 0;
    case 'f':
      if (n - i < 5 || memcmp(p + i, "false", 5) != 0) return -1;
      *ip = i + 5;
      return 0;
    case '{':
    case '[': {
      px_fj_t j = {p, n, i};
      if (px_fj_skip(&j, depth) < 0) return -1;
      *ip = j.i;
      return 0;
    }
    default:
      if ((e = px_fj_int_end(p, n, i)) == 0) return -1;
      *ip = e;
      return 0;
  }
}

/** The member name at p[*ip] (its opening quote): its raw content is
 *  p[*ip + 1 .. *ip + 1 + *kl); *ip moves onto the value (past ':' and
 *  blanks, *ip < n). -1 when it is not a valid name without escapes (an
 *  escaped name might spell one the caller reads) followed by ':' and more
 *  bytes. */
static inline int px_fj_key(const unsigned char *p, size_t n, size_t *ip, size_t *kl) {
  size_t i = *ip, e;
  int esc;
  if (i >= n || p[i] != '"') return -1;
  if (px_json_string(p, n, i + 1, &e, &esc) < 0 || esc) return -1;
  *kl = e - i - 1;
  i = px_json_ws(p, n, e + 1);
  if (i >= n || p[i] != ':') return -1;
  i = px_json_ws(p, n, i + 1);
  if (i >= n) return -1;
  *ip = i;
  return 0;
}

/** After a value inside a container closed by `close`: 1 on ',' (*ip on
 *  what follows it, blanks skipped), 0 on `close` (*ip past it), -1 else. */
static inline int px_fj_next(const unsigned char *p, size_t n, size_t *ip,
                             unsigned char close) {
  size_t i = px_json_ws(p, n, *ip);
  if (i >= n) return -1;
  if (p[i] == ',') {
    *ip = px_json_ws(p, n, i + 1);
    return 1;
  }
  if (p[i] != close) return -1;
  *ip = i + 1;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* the path finder: members located in raw JSON text without parsing it   */

enum { PX_JSON_FOUND = 1, PX_JSON_ABSENT = 0, PX_JSON_BAD = -1, PX_JSON_MORE = -2 };

/** Whether the raw content s[0..n) of a member name (escaped as written;
 *  s[n] its closing quote) names lit (ln bytes), escapes decoded: the one
 *  reader's comparison of names. An escaped name (longer than what it
 *  spells, with lit's first byte or a backslash first) is told out of line
 *  (px_json_name_esc: checked first, a name jansson would refuse names
 *  nothing). */
int px_json_name_esc(const char *s, size_t n, const char *lit, size_t ln);
static inline int px_json_name_is(const char *s, size_t n, const char *lit, size_t ln) {
  if (n == ln) return px_mem_eq(s, lit, n); /* an escape makes a name longer */
  /* (a longer name that begins with lit's bytes is another one) */
  if (n < ln || (s[0] != lit[0] && s[0] != '\\') || px_mem_eq(s, lit, ln)) return 0;
  return px_json_name_esc(s, n, lit, ln);
}

/**
 * Locate the value of member path[0], path[1], ... (objects only) in the JSON
 * text p of length n: names compared unescaped (px_json_name_is), the last
 * member of a repeated name at each level (as jansson keeps it). On
 * PX_JSON_FOUND sets *start and *len to the value token (a string includes
 * its quotes). PX_JSON_MORE: the text ended first (a prefix).
 */
int px_json_find(const char *p, size_t n, const char *const *path, size_t depth,
                 size_t *start, size_t *len);

/** Append p with the string value at path replaced by `value` (escaped) to
 *  out. Returns PX_JSON_FOUND when replaced, else appends p unchanged and
 *  returns the px_json_find result; <0 only for buffer errors. */
int px_json_replace_str(px_buf_t *out, const char *p, size_t n, const char *const *path,
                        size_t depth, const char *value);

/** Positions of the finder: not there (or broken), and cut short. */
#define PX_JSON_NPOS ((size_t)-1)
#define PX_JSON_CUT ((size_t)-2)

/** Up to PX_JSON_PICK_MAX member names looked for in one walk of an object:
 *  px_json_pick_add each name, then px_json_pick. */
#define PX_JSON_PICK_MAX 6
typedef struct px_json_pick {
  const char *name[PX_JSON_PICK_MAX];
  size_t nlen[PX_JSON_PICK_MAX];
  size_t n;
  size_t at[PX_JSON_PICK_MAX],
      len[PX_JSON_PICK_MAX]; /* value spans; at == NPOS: absent */
  int until_found;           /**< 1: the walk stops once every name is found */
} px_json_pick_t;

static inline void px_json_pick_add(px_json_pick_t *pk, const char *name) {
  pk->name[pk->n] = name;
  pk->nlen[pk->n] = strlen(name);
  pk->at[pk->n] = PX_JSON_NPOS;
  pk->len[pk->n++] = 0;
}
/** One walk over the object at p[i] ('{'): the value span of the first
 *  member named like each of pk's names (compared unescaped). Returns
 *  the index after the closing brace (with until_found, after the value of
 *  the last name found, when all are: the rest is not walked), PX_JSON_CUT
 *  (cut short) or PX_JSON_NPOS (not an object, or broken). */
size_t px_json_pick(const char *p, size_t n, size_t i, px_json_pick_t *pk);

#endif
