/* fuzz_anthropic_fast.c - differential test of the Anthropic stream
 * decoder's fast path (src/proto/anthropic_stream.c) against its general
 * path (fastir.h checked views): two decoders, one with the fast path on and one with it
 * off, get the same events; every event must give the same return code and the same
 * emitted events (types, indexes, kinds, text bytes, ids, usage, errors).
 *
 * Input: byte 0 picks the mode.
 *   even: the rest (after byte 1) is an upstream SSE body.
 *   odd:  a valid stream start is fed first (message_start and a block
 *         whose kind is byte 1 % 3: text, thinking, tool_use), then every
 *         line of the rest is fed twice: as the raw JSON string content of
 *         the matching content_block_delta (escapes, UTF-8, surrogates ...)
 *         and as an event's data as is.
 * The first call also checks, on a fixed stream, that the fast path does
 * handle the hot events (a differential test of a path never taken would
 * prove nothing). The scaffolding is in fast_diff.h. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fast_diff.h"
#include "proxai/protoutil.h" /* px_anthropic_sdec_fast */

static const char *const starts[3] = {
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\","
    "\"text\":\"\"}}",
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
    "\"thinking\","
    "\"thinking\":\"\",\"signature\":\"\"}}",
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_"
    "use\","
    "\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{}}}",
};
static const char *const heads[3] = {
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
    "\"text\":\"",
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_"
    "delta\","
    "\"thinking\":\"",
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_"
    "delta\","
    "\"partial_json\":\"",
};

static void start(fd_pair_t *p, int kind) {
  p->kind = kind;
  static const char ms[] =
      "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\","
      "\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":"
      "3,"
      "\"output_tokens\":1}}}";
  fd_feed(p, ms, sizeof(ms) - 1);
  fd_feed(p, starts[kind], strlen(starts[kind]));
}

/* Self check: the fast path handles every event of the stream (message_start,
 * the blocks' starts, deltas and stops, ping, message_delta, message_stop)
 * but the lone surrogate, which goes to the general path and is rejected: the pair
 * restarts (message_start and a text block's start, fast) and ends the
 * message (14 events) */
static const char self_body[] =
    "event: message_start\n"
    "data: "
    "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\\u00e9\","
    "\"usage\":{\"input_tokens\":3,\"cache_read_input_tokens\":2}}}\n\n"
    "data: "
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
    "\"thinking\",\"thinking\":\"\"}}\n\n"
    "data: "
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_"
    "delta\",\"thinking\":\"a\\u00e9\\ud83d\\ude00\\n\"}}\n\n"
    "data: "
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_"
    "delta\",\"signature\":\"c2ln\"}}\n\n"
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "data: {\"type\": \"ping\"}\n\n"
    "data: "
    "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":"
    "\"text\",\"text\":\"\"}}\n\n"
    "data: "
    "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\","
    "\"text\":\"hi \\\"x\\\"\"}}\n\n"
    "data: "
    "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\","
    "\"text\":\"lone \\ud800\"}}\n\n"
    "data: "
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
    "\"text\":\"after\"}}\n\n"
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\","
    "\"stop_sequence\":\"\\n\\nEND\"},\"usage\":{\"output_tokens\":9}}\n\n"
    "data: {\"type\":\"message_stop\"}\n\n";

static const fd_ops_t ops = {
    .proto = &px_proto_anthropic,
    .out = PX_PROTO_ANTHROPIC,
    .fast = px_anthropic_sdec_fast,
    .start = start,
    .nkinds = 3,
    .heads = heads,
    .tail = "\"}}",
    .self_body = self_body,
    .self_len = sizeof(self_body) - 1,
    .self_hits = 14,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fd_fuzz_one(&ops, data, size);
}
