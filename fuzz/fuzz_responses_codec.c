/* fuzz_responses_codec.c - Responses' fast request codec
 * (src/proto/responses.c) against the reference (test/reference/responses.c), in halves: a body the
 * scanner accepts is decoded as a Responses client's request for an
 * upstream of protocol dout, fitted and encoded toward a Responses upstream
 * for a client of protocol ein, by the fast codec and by the jansson codec.
 * Wherever both fast halves take the body, the jansson halves must succeed
 * too, with a JSON-equal body and the same lossy list; else the target
 * aborts. The halves reach what the hub's pairs do not yet (a pair takes
 * the fast path only when the other side's codec knows every part).
 *
 * With bit 5 of byte 0 set, the body is an upstream's answer instead,
 * decoded and encoded for a Responses client (halves_answer: a refusal of
 * the answer in the reference's words).
 *
 * Input: byte 0 picks dout (b & 3) and ein ((b >> 2) & 3), Responses
 * standing for Chat on either side, bit 4 a stored-responses context (a
 * response id: store is kept) and bit 5 an answer; the rest is the body. The member names
 * and values of fuzz_responses_codec.dict (-dict=) reach the items' kinds
 * quickly. */
#include <stdint.h>

#include "codec_halves.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  if (data[0] & 32) { /* an answer: the decoder checks the body itself */
    px_tr_ctx_t c;
    memset(&c, 0, sizeof(c));
    c.in = c.out = PX_PROTO_RESPONSES;
    c.client_model = "m";
    c.created = 1700000000;
    if (data[0] & 16) c.resp_id = "resp_kept";
    halves_answer(PX_PROTO_RESPONSES, body, len, &c);
    return 0;
  }
  px_json_req_t scan;
  if (px_json_request(body, len, &scan) < 0) return 0; /* as the hub reads bodies */
  px_tr_ctx_t d, e;
  memset(&d, 0, sizeof(d));
  d.in = PX_PROTO_RESPONSES;
  d.out = (px_proto_t)(data[0] & 3);
  if (d.out == PX_PROTO_RESPONSES) d.out = PX_PROTO_CHAT;
  d.client_model = d.upstream_model = "m";
  d.created = 1700000000;
  if (data[0] & 16) d.resp_id = "resp_kept";
  e = d;
  e.in = (px_proto_t)((data[0] >> 2) & 3);
  if (e.in == PX_PROTO_RESPONSES) e.in = PX_PROTO_CHAT;
  e.out = PX_PROTO_RESPONSES;

  halves_request(PX_PROTO_RESPONSES, body, len, &d, &e);
  return 0;
}
