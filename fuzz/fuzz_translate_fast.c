/* fuzz_translate_fast.c - the fast path of translation (requests streaming
 * or not, non-streaming answers; src/proto/translate_fast.c) against the
 * jansson path, the arbiter.
 *
 * Input: byte 0 picks the pair among the four protocols, Gemini included
 * (in = (b & 15) >> 2, out = b & 3: the PX_PROTO_ values), bit 4
 * names an upstream model, bit 5 sets a route max_tokens; the rest is a
 * body, used both as a client request and as an upstream answer. Wherever
 * the fast path takes a body, the jansson path must succeed too, with a
 * JSON-equal body (json_equal of both parses) and the same lossy list,
 * and the usage it hands over must be what px_usage_scan reads;
 * else the target aborts. */
#include <stdint.h>
#include <string.h>

#include "xlate_diff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = (px_proto_t)((data[0] & 15) >> 2);
  ctx.out = (px_proto_t)(data[0] & 3);
  if (ctx.in == ctx.out) return 0;
  ctx.created = 1700000000;
  ctx.max_accum = 1 << 20;
  ctx.default_max_tokens = data[0] & 32 ? 1024 : 0;
  ctx.client_model = "client-model";
  ctx.upstream_model = data[0] & 16 ? "upstream-\"model\"" : NULL;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  request(&ctx, body, len);
  response(&ctx, body, len);
  return 0;
}
