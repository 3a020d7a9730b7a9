/* fuzz_anthropic_codec.c - Anthropic's fast codec (src/proto/anthropic.c)
 * against anthropic.c, in halves: a body the scanner accepts is decoded as
 * an Anthropic client's request for an upstream of protocol dout, fitted
 * and encoded toward an Anthropic upstream for a client of protocol ein, by
 * the fast codec and by the jansson codec; the same body is decoded as an
 * Anthropic answer and encoded for an Anthropic client. Wherever both fast
 * halves take the body, the jansson halves must succeed too, with a
 * JSON-equal body and the same lossy list; else the target aborts. The
 * halves reach what the hub's pairs do not yet (a pair takes the fast path
 * only when the other side's codec knows every part: thinking blocks, the
 * thinking configuration).
 *
 * Input: byte 0 picks dout (b & 3) and ein ((b >> 2) & 3), Anthropic
 * standing for Chat on either side, and bit 4 a route max_tokens; the rest
 * is the body. */
#include <stdint.h>

#include "codec_halves.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return halves_codec_target(PX_PROTO_ANTHROPIC, PX_PROTO_CHAT, data, size);
}
