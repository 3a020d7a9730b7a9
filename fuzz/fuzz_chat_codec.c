/* fuzz_chat_codec.c - Chat Completions' fast codec (src/proto/chat_fast.c)
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
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  px_tr_ctx_t d, e;
  memset(&d, 0, sizeof(d));
  d.in = PX_PROTO_CHAT;
  d.out = (px_proto_t)(data[0] & 3);
  if (d.out == PX_PROTO_CHAT) d.out = PX_PROTO_RESPONSES;
  d.client_model = d.upstream_model = "m";
  d.created = 1700000000;
  d.default_max_tokens = data[0] & 16 ? 1024 : 0;
  e = d;
  e.in = (px_proto_t)((data[0] >> 2) & 3);
  if (e.in == PX_PROTO_CHAT) e.in = PX_PROTO_RESPONSES;
  e.out = PX_PROTO_CHAT;
  px_json_req_t scan;
  if (px_json_request(body, len, &scan) == 0)
    halves_request(PX_PROTO_CHAT, body, len, &d, &e);
  /* an upstream answer is checked by the fast decoder itself */
  px_tr_ctx_t c = e;
  c.client_model = NULL;
  c.in = PX_PROTO_CHAT;
  halves_answer(PX_PROTO_CHAT, body, len, &c);
  return 0;
}
