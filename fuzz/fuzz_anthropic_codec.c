/* fuzz_anthropic_codec.c - Anthropic's fast codec (src/proto/anthropic_fast.c)
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
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  px_tr_ctx_t d, e;
  memset(&d, 0, sizeof(d));
  d.in = PX_PROTO_ANTHROPIC;
  d.out = (px_proto_t)(data[0] & 3);
  if (d.out == PX_PROTO_ANTHROPIC) d.out = PX_PROTO_CHAT;
  d.client_model = d.upstream_model = "m";
  d.created = 1700000000;
  d.default_max_tokens = data[0] & 16 ? 1024 : 0;
  e = d;
  e.in = (px_proto_t)((data[0] >> 2) & 3);
  if (e.in == PX_PROTO_ANTHROPIC) e.in = PX_PROTO_CHAT;
  e.out = PX_PROTO_ANTHROPIC;
  px_json_req_t scan;
  if (px_json_request(body, len, &scan) == 0) halves_request(PX_PROTO_ANTHROPIC, body, len, &d, &e);
  /* an upstream answer is checked by the fast decoder itself */
  px_tr_ctx_t c = e;
  c.client_model = NULL;
  c.in = PX_PROTO_ANTHROPIC;
  halves_answer(PX_PROTO_ANTHROPIC, body, len, &c);
  return 0;
}
