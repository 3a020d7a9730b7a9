/* fuzz_responses_fast.c - differential test of the Responses stream
 * decoder's fast path (src/proto/responses_stream.c) against its jansson
 * path: two decoders, one with the fast path on and one with it off, get
 * the same events; every event must give the same return code and the same
 * emitted events (types, indexes, kinds, text bytes, ids, usage, errors).
 *
 * Input: byte 0 picks the mode.
 *   even: the rest (after byte 1) is an upstream SSE body.
 *   odd:  a valid stream start is fed first (response.created and an open
 *         block whose kind is byte 1 % 4: output_text part, function_call
 *         item, reasoning item, custom_tool_call item), then every line of
 *         the rest is fed twice: as the raw JSON string content of the
 *         matching delta event (escapes, UTF-8, surrogates ...) and as an
 *         event's data as is.
 * The first call also checks, on a fixed stream, that the fast path does
 * handle the hot events (a differential test of a path never taken would
 * prove nothing). The scaffolding is in fast_diff.h. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fast_diff.h"
#include "proxai/protoutil.h" /* px_responses_sdec_fast */

static const char created[] =
    "{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":"
    "\"resp_1\",\"model\":\"m\",\"status\":\"in_progress\",\"output\":[]}}";
static const char *const starts[4][2] = {
    {"{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":"
     "\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}",
     "{\"type\":\"response.content_part.added\",\"item_id\":\"msg_1\",\"output_index\":"
     "0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\"}}"},
    {"{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":"
     "\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"f\","
     "\"arguments\":\"\"}}",
     NULL},
    {"{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":"
     "\"rs_1\",\"type\":\"reasoning\",\"summary\":[]}}",
     NULL},
    {"{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":"
     "\"ctc_1\",\"type\":\"custom_tool_call\",\"call_id\":\"call_2\",\"name\":\"p\","
     "\"input\":\"\"}}",
     NULL},
};
static const char *const heads[4] = {
    "{\"type\":\"response.output_text.delta\",\"sequence_number\":5,\"item_id\":"
    "\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"",
    "{\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\","
    "\"output_index\":0,\"delta\":\"",
    "{\"type\":\"response.reasoning_summary_text.delta\",\"item_id\":\"rs_1\","
    "\"output_index\":0,\"summary_index\":0,\"delta\":\"",
    "{\"type\":\"response.custom_tool_call_input.delta\",\"item_id\":\"ctc_1\","
    "\"output_index\":0,\"delta\":\"",
};

static void start(fd_pair_t *p, int kind) {
  p->kind = kind;
  fd_feed(p, created, sizeof(created) - 1);
  for (int k = 0; k < 2; k++)
    if (starts[kind][k] != NULL) fd_feed(p, starts[kind][k], strlen(starts[kind][k]));
}

/* Self check: the fast path handles response.created, the reasoning, arguments and
 * first text deltas and the text part's start (the tool and reasoning items go to
 * jansson); the text deltas after the first: the one repeating it read by its
 * memo, the one with a sequence_number walked, the next read by its memo (another
 * number, an escaped text), the one whose sequence_number is no integer by
 * jansson; the lone surrogate goes to jansson, which rejects the event, and the
 * restarted stream's created, message item and text part are the fast path's: 11 */
static const char self_body[] =
    "event: response.created\n"
    "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\"}}\n\n"
    "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":"
    "{\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[]}}\n\n"
    "data: {\"type\":\"response.reasoning_summary_text.delta\",\"item_id\":\"rs_1\","
    "\"output_index\":0,\"summary_index\":0,\"delta\":\"a\\u00e9\\ud83d\\ude00\\n\"}"
    "\n\n"
    "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":"
    "{\"id\":\"rs_1\",\"type\":\"reasoning\",\"encrypted_content\":\"e\"}}\n\n"
    "data: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":"
    "{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\"}}\n\n"
    "data: {\"type\": \"response.function_call_arguments.delta\", \"output_index\": "
    "1, \"delta\": \"{\\\"a\\\":1}\"}\n\n"
    "data: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":"
    "{\"id\":\"fc_1\",\"type\":\"function_call\",\"arguments\":\"{}\"}}\n\n"
    "data: {\"type\":\"response.content_part.added\",\"item_id\":\"m\","
    "\"output_index\":2,\"content_index\":0,\"part\":{\"type\":\"output_text\"}}\n\n"
    "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\","
    "\"output_index\":2,\"content_index\":0,\"delta\":\"hi \\\"x\\\"\","
    "\"logprobs\":[]}\n\n"
    "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\","
    "\"output_index\":2,\"content_index\":0,\"delta\":\"again\","
    "\"logprobs\":[]}\n\n"
    "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":7,"
    "\"item_id\":\"m\",\"output_index\":2,\"content_index\":0,\"delta\":\"s\"}\n\n"
    "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":18,"
    "\"item_id\":\"m\",\"output_index\":2,\"content_index\":0,\"delta\":\"\\t\"}\n\n"
    "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":9.5,"
    "\"item_id\":\"m\",\"output_index\":2,\"content_index\":0,\"delta\":\"f\"}\n\n"
    "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\","
    "\"output_index\":2,\"content_index\":0,\"delta\":\"lone \\ud800\"}\n\n";

/* Self check of the lifecycle events' memo (a response.in_progress repeating
 * response.created's response, a response.completed repeating the output
 * the message items' output_item.done made, its usage read where it
 * differs): every event of the stream is the fast path's: 9 */
#define MEMO_RESP(status, output, usage)                                               \
  "{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"" status \
  "\",\"error\":null,\"model\":\"m\",\"output\":[" output "],\"tools\":[],"          \
  "\"usage\":" usage ",\"metadata\":{}}"
#define MEMO_ITEM                                                                      \
  "{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":"          \
  "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hi\","             \
  "\"annotations\":[]}]}"
static const char memo_body[] =
    "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":"
    MEMO_RESP("in_progress", "", "null") "}\n\n"
    "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":"
    MEMO_RESP("in_progress", "", "null") "}\n\n"
    "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":"
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n"
    "data: {\"type\":\"response.content_part.added\",\"item_id\":\"msg_1\","
    "\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\","
    "\"text\":\"\",\"annotations\":[]}}\n\n"
    "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\","
    "\"output_index\":0,\"content_index\":0,\"delta\":\"hi\"}\n\n"
    "data: {\"type\":\"response.output_text.done\",\"item_id\":\"msg_1\","
    "\"output_index\":0,\"content_index\":0,\"text\":\"hi\"}\n\n"
    "data: {\"type\":\"response.content_part.done\",\"item_id\":\"msg_1\","
    "\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\","
    "\"text\":\"hi\",\"annotations\":[]}}\n\n"
    "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":"
    MEMO_ITEM "}\n\n"
    "data: {\"type\":\"response.completed\",\"response\":"
    MEMO_RESP("completed", MEMO_ITEM, "{\"input_tokens\":3,\"output_tokens\":1}") "}\n\n";

static const fd_ops_t ops = {
    .proto = &px_proto_responses,
    .out = PX_PROTO_RESPONSES,
    .fast = px_responses_sdec_fast,
    .start = start,
    .nkinds = 4,
    .heads = heads,
    .tail = "\"}",
    .self_body = self_body,
    .self_len = sizeof(self_body) - 1,
    .self_hits = 11,
};

/* After memo_body, whose events the lifecycle templates keep: the same
 * events with other ids and numbers (the holes), an escaped model (read
 * from its hole as escaped: the jansson path's) and a text part that
 * starts with text where the template's was empty (the jansson path's):
 * the message item is the fast path's: 1 */
static const char tpl_body[] =
    "data: {\"type\":\"response.created\",\"sequence_number\":10,\"response\":"
    "{\"id\":\"resp_22\",\"object\":\"response\",\"created_at\":17,\"status\":"
    "\"in_progress\",\"error\":null,\"model\":\"m\\u0032\",\"output\":[],\"tools\":[],"
    "\"usage\":null,\"metadata\":{}}}\n\n"
    "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":"
    "{\"id\":\"msg_2\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n"
    "data: {\"type\":\"response.content_part.added\",\"item_id\":\"msg_2\","
    "\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\","
    "\"text\":\"abc\",\"annotations\":[]}}\n\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int memo_checked;
  if (!memo_checked) {
    memo_checked = 1;
    long hits = fd_sse_mode(&ops, memo_body, sizeof(memo_body) - 1, 0);
    long tpl_hits = fd_sse_mode(&ops, tpl_body, sizeof(tpl_body) - 1, 0);
    if (hits != 9 || tpl_hits != 1) {
      fprintf(stderr, "fast path handled %ld / %ld events of the memo checks, want 9 / 1\n",
              hits, tpl_hits);
      abort();
    }
  }
  return fd_fuzz_one(&ops, data, size);
}
