/* fuzz_gemini_stream.c - differential test of the Gemini stream decoder's
 * fast path (src/proto/gemini_stream.c) against its general path (fastir.h
 * checked views): two
 * decoders, one with the fast path on and one with it off, get the same
 * chunks; every chunk must give the same return code and the same emitted
 * events (types, indexes, kinds, text bytes, ids, usage, errors).
 *
 * Input: byte 0 picks the mode.
 *   even: the rest (after byte 1) is an upstream SSE body.
 *   odd:  a valid first chunk is fed (it starts the message and opens a
 *         text block), then every line of the rest is fed twice: as the raw
 *         JSON string content of a text part of the usual chunk shape (byte
 *         1 % 3: plain, with usageMetadata, with a finishReason) and as a
 *         chunk's data as is.
 * The first call also checks, on a fixed stream, that the fast path does
 * handle the hot chunks (a differential test of a path never taken would
 * prove nothing). The scaffolding is in fast_diff.h. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fast_diff.h"
#include "proxai/protoutil.h" /* px_gemini_sdec_fast */

#define HEAD "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\""
#define TAIL "\"}],\"role\":\"model\"}"
#define IDS ",\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r1\"}"

static const char *const heads[3] = {HEAD, HEAD, HEAD};
static const char *const tails[3] = {
    TAIL ",\"index\":0}]" IDS,
    TAIL
    ",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":7,\"candidatesTokenCount\":"
    "2,\"totalTokenCount\":9,\"promptTokensDetails\":[{\"modality\":\"TEXT\","
    "\"tokenCount\":7}]}" IDS,
    TAIL
    ",\"finishReason\":\"SAFETY\",\"index\":0}],\"usageMetadata\":{"
    "\"promptTokenCount\":7,\"candidatesTokenCount\":3,\"thoughtsTokenCount\":4,"
    "\"cachedContentTokenCount\":1}" IDS,
};

static void start(fd_pair_t *p, int kind) {
  p->kind = kind;
  static const char first[] =
      HEAD "Hi" TAIL
           ",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":7,"
           "\"totalTokenCount\":7}" IDS;
  fd_feed(p, first, sizeof(first) - 1);
}

/* Self check: the fast path handles the first, the two text and the finish
 * chunks; the thought part and the late usage go to the general path */
static const char self_body[] =
    "data: " HEAD "Hel" TAIL
    ",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3,"
    "\"totalTokenCount\":3},\"modelVersion\":\"gemini-2.5-flash\",\"responseId\":\"r9\"}"
    "\r\n\r\n"
    "data: " HEAD "lo \\\"x\\\"\\n\\u00e9\\ud83d\\ude00" TAIL ",\"index\":0}]" IDS
    "\r\n\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"hmm\", \"thought\": "
    "true}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"m\"}\r\n\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" "
    "there\"}],\"role\": "
    "\"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": "
    "\"r9\"}\r\n\r\n"
    "data: " HEAD "" TAIL
    ",\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{"
    "\"promptTokenCount\":3,\"candidatesTokenCount\":5,\"totalTokenCount\":8,"
    "\"promptTokensDetails\":[{\"modality\":\"TEXT\",\"tokenCount\":3}]}" IDS
    "\r\n\r\n"
    "data: "
    "{\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":6}}\r\n\r\n";

static const fd_ops_t ops = {
    .proto = &px_proto_gemini,
    .out = PX_PROTO_GEMINI,
    .fast = px_gemini_sdec_fast,
    .start = start,
    .nkinds = 3,
    .heads = heads,
    .tails = tails,
    .self_body = self_body,
    .self_len = sizeof(self_body) - 1,
    .self_hits = 4,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fd_fuzz_one(&ops, data, size);
}
