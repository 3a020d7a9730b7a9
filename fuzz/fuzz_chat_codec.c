/* fuzz_chat_codec.c - Chat Completions' fast codec (src/proto/chat.c)
 * against chat.c, in halves: a body the scanner accepts is decoded as a
 * Chat client's request for an upstream of protocol dout, fitted and
 * encoded toward a Chat upstream for a client of protocol ein, by the fast
 * codec and by the jansson codec; the same body is decoded as a Chat
 * answer and encoded for a Chat client. Wherever both fast halves take the
 * body, the jansson halves must succeed too, with a JSON-equal body and
 * the same lossy list; a fast refusal must be the jansson halves' own, word
 * for word; else the target aborts. The halves reach what the hub's pairs
 * do not yet (a pair takes the fast path only when the other side's codec
 * knows every part: annotations, refusals, custom tool calls).
 *
 * Input: byte 0 picks dout (b & 3) and ein ((b >> 2) & 3), Chat standing
 * for Responses on either side, and bit 4 a route max_tokens; the rest is
 * the body. */
#include <stdint.h>

#include "codec_halves.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return halves_codec_target(PX_PROTO_CHAT, PX_PROTO_RESPONSES, data, size);
}
