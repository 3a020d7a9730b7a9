/* test_responses_close.c - the closing events of a Responses stream hold
 * the text about once in memory (issue 11).
 *
 * The closing events of a translated Responses stream (output_text.done,
 * content_part.done, output_item.done, response.completed with the whole
 * output) carry a long text four times. They are written while the stream
 * translator handles one upstream event (message_stop), so without the
 * flush hook (px_tr_ctx_t.flush) the out buffer peaked at four times the
 * text on top of the encoder's own escaped copy: about 5x. With it, the
 * encoder hands each event to the client as it is written, and the out
 * buffer never holds much more than one copy of the text.
 *
 * The test translates an Anthropic stream with a 4 MiB text for a
 * Responses client, drains out the way the proxy does (after every feed,
 * and whenever the encoder flushes), and checks the out buffer's high-water
 * mark and that every closing event still carries the whole text. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proxai/buf.h"
#include "proxai/proto.h"
#include "proxai/sse.h"

#define TEXT_LEN (4u << 20)
#define CHUNK 8192u

typedef struct client {
  px_buf_t *out;
  px_sse_t sse;
  size_t peak;     /* out buffer high-water mark (bytes) */
  size_t written;  /* bytes handed to the client */
  int flushes;     /* mid-call flushes by the encoder */
  int text_done, part_done, item_done, completed; /* closing events whole */
  int seq_ok;
  long long next_seq;
} client_t;

static const char *expect_text; /* the text as the client must read it */

static int text_is(json_t *v) {
  return json_is_string(v) && json_string_length(v) == TEXT_LEN &&
         memcmp(json_string_value(v), expect_text, TEXT_LEN) == 0;
}

static int on_client_event(void *arg, const px_sse_event_t *ev) {
  client_t *c = arg;
  json_t *j = json_loadb(ev->data.ptr, ev->data.len, 0, NULL);
  if (j == NULL) return 0;
  const char *t = json_string_value(json_object_get(j, "type"));
  long long seq = json_integer_value(json_object_get(j, "sequence_number"));
  if (seq != c->next_seq) c->seq_ok = 0;
  c->next_seq = seq + 1;
  if (t && strcmp(t, "response.output_text.done") == 0)
    c->text_done = text_is(json_object_get(j, "text"));
  if (t && strcmp(t, "response.content_part.done") == 0)
    c->part_done = text_is(json_object_get(json_object_get(j, "part"), "text"));
  if (t && strcmp(t, "response.output_item.done") == 0) {
    json_t *p = json_array_get(json_object_get(json_object_get(j, "item"), "content"), 0);
    c->item_done = text_is(json_object_get(p, "text"));
  }
  if (t && strcmp(t, "response.completed") == 0) {
    json_t *out = json_object_get(json_object_get(j, "response"), "output");
    json_t *p = json_array_get(json_object_get(json_array_get(out, 0), "content"), 0);
    c->completed = text_is(json_object_get(p, "text"));
  }
  json_decref(j);
  return 0;
}

/* what the proxy does with out: the client reads it, out is emptied */
static void drain(client_t *c) {
  if (c->out->len > c->peak) c->peak = c->out->len;
  c->written += c->out->len;
  px_sse_feed(&c->sse, c->out->data, c->out->len);
  px_buf_reset(c->out);
}

static void on_flush(void *arg) {
  client_t *c = arg;
  c->flushes++;
  drain(c);
}

static int feed_failed;

static void feed(px_stream_tr_t *t, client_t *c, const char *s, size_t n) {
  if (px_stream_tr_feed(t, s, n) != 0) feed_failed++;
  drain(c);
}

static void feed_str(px_stream_tr_t *t, client_t *c, const char *s) {
  feed(t, c, s, strlen(s));
}

int main(void) {
  /* the text, with characters the JSON escaper has to handle */
  char *text = malloc(TEXT_LEN + 1);
  static const char pat[] = "lorem \"ipsum\"\n\tdolor \\ sit <amet> ";
  for (size_t i = 0; i < TEXT_LEN; i++) text[i] = pat[i % (sizeof(pat) - 1)];
  text[TEXT_LEN - 1] = '.';
  text[TEXT_LEN] = 0;
  expect_text = text;

  px_buf_t out;
  px_buf_init(&out, (size_t)5 * TEXT_LEN + (1u << 20));
  client_t c;
  memset(&c, 0, sizeof(c));
  c.out = &out;
  c.seq_ok = 1;
  px_sse_init(&c.sse, 64u << 20, on_client_event, &c);

  px_tr_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.in = PX_PROTO_RESPONSES;
  ctx.out = PX_PROTO_ANTHROPIC;
  ctx.stream = 1;
  ctx.created = 1700000000;
  ctx.client_model = "m";
  ctx.upstream_model = "m";
  ctx.max_accum = 64u << 20;
  ctx.flush = on_flush;
  ctx.flush_arg = &c;
  px_stream_tr_t *t = px_stream_tr_new(&ctx, &out);
  CHECK(t != NULL);
  if (t == NULL) return check_report("responses_close");

  feed_str(t, &c,
           "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"
           "\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\","
           "\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":5,"
           "\"output_tokens\":1}}}\n\n"
           "event: content_block_start\ndata: {\"type\":\"content_block_start\","
           "\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
  px_buf_t ev;
  px_buf_init(&ev, SIZE_MAX);
  for (size_t at = 0; at < TEXT_LEN; at += CHUNK) {
    size_t n = TEXT_LEN - at < CHUNK ? TEXT_LEN - at : CHUNK;
    px_buf_reset(&ev);
    px_buf_puts(&ev, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                     "\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"");
    px_buf_json_escape(&ev, text + at, n);
    px_buf_puts(&ev, "\"}}\n\n");
    feed(t, &c, ev.data, ev.len);
  }
  px_buf_free(&ev);
  size_t before_close = c.written;
  /* the closing events: all of them from these two upstream events */
  feed_str(t, &c,
           "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
           "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
           "\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n\n"
           "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
  CHECK(feed_failed == 0);
  CHECK(px_stream_tr_finish(t, 1, PX_ERR_BAD_GATEWAY, NULL) == 0);
  drain(&c);
  px_stream_tr_free(t);
  px_sse_feed(&c.sse, "\n\n", 2);

  /* the closing events carry the whole text four times, all of it sent */
  size_t closing = c.written - before_close;
  printf("text %u bytes; closing events %zu bytes; out peak %zu bytes; %d flushes\n",
         TEXT_LEN, closing, c.peak, c.flushes);
  CHECK(closing > (size_t)4 * TEXT_LEN);
  CHECK(c.text_done && c.part_done && c.item_done && c.completed);
  CHECK(c.seq_ok);
  /* out held about one event at a time: one escaped copy of the text and
   * the event around it, not four */
  CHECK(c.flushes >= 3);
  CHECK(c.peak < (size_t)TEXT_LEN * 3 / 2);

  px_sse_done(&c.sse);
  px_buf_free(&out);
  free(text);
  return check_report("responses_close");
}
