/* fuzz_chat_fast.c - differential test of the Chat Completions stream
 * decoder's fast path (src/proto/chat_stream.c, fast_chunk) against its
 * general path (fastir.h checked views): two decoders, one with the fast path on and one
 * with it off, get the same chunks; every chunk must give the same return code and the
 * same emitted events (types, indexes, kinds, text bytes, ids, usage, errors).
 *
 * Input: byte 0 picks the mode.
 *   even: the rest (after byte 1) is an upstream SSE body.
 *   odd:  a valid stream start is fed first (a role chunk, and for kind 2 a
 *         tool call's first chunk; the kind is byte 1 % 3: content,
 *         reasoning_content, tool arguments), then every line of the rest
 *         is fed twice: as the raw JSON string content of the matching
 *         delta chunk (escapes, UTF-8, surrogates ...) and as a chunk as is.
 * The first call also checks, on a fixed stream, that the fast path does
 * handle the hot chunks. The scaffolding is in fast_diff.h. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fast_diff.h"
#include "proxai/protoutil.h" /* px_chat_sdec_fast */

#define PRE "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,"
static const char *const heads[3] = {
    PRE "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"",
    PRE "\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"",
    PRE "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
        "{\"arguments\":\"",
};
static const char *const tails[3] = {
    "\"},\"logprobs\":null,\"finish_reason\":null}]}",
    "\"},\"finish_reason\":null}]}",
    "\"}}]}}]}",
};

static void start(fd_pair_t *p, int kind) {
  static const char role[] =
      PRE "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
          "\"finish_reason\":null}]}";
  static const char call[] =
      PRE "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":"
          "\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
          "\"\"}}]},\"finish_reason\":null}]}";
  p->kind = kind;
  fd_feed(p, role, sizeof(role) - 1);
  if (kind == 2) fd_feed(p, call, sizeof(call) - 1);
}

/* Self check: the fast path handles the role chunk (first), the content,
 * reasoning and argument fragments, the finish and usage chunks, and the
 * role chunk that restarts the pair after the lone surrogate's failure (9
 * chunks); the escaped key, the lone surrogate and the tool call's first
 * chunk go to jansson */
static const char self_body[] =
    "data: " PRE "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n"
    "data: " PRE "\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"},"
    "\"logprobs\":null,\"finish_reason\":null}]}\n\n"
    "data: " PRE "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\\u00e9\\ud83d"
    "\\ude00\\n\"},\"finish_reason\":null}]}\n\n"
    "data: {\"choices\":[{\"delta\":{\"content\":\" b\"}}],\"obfuscation\":\"x\"}\n\n"
    "data: {\"choices\":[{\"delta\":{\"c\\u006fntent\":\"esc\"}}]}\n\n"
    "data: {\"choices\":[{\"delta\":{\"content\":\"lone \\ud800\"}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":"
    "\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}"
    "\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
    "\"function\":{\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
    "\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
    "data: [DONE]\n\n";

static const fd_ops_t ops = {
    .proto = &px_proto_chat,
    .out = PX_PROTO_CHAT,
    .fast = px_chat_sdec_fast,
    .start = start,
    .nkinds = 3,
    .heads = heads,
    .tails = tails,
    .self_body = self_body,
    .self_len = sizeof(self_body) - 1,
    .self_hits = 9,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return fd_fuzz_one(&ops, data, size);
}
