/* test_rtok.c - reasoning tokens across protocol families (protoutil.h's
 * rules, through the reference's px_rtok_in / _out): every family's token
 * reaches every other non-Chat client tagged and comes back, on replay, into
 * its own IR field (SPEC 5). */
#include <jansson.h>
#include <string.h>

#include "check.h"
#include "proxai/protoutil.h"
#include "ref.h"

static const char *const fields[] = {"signature", "redacted_data", "encrypted_content",
                                     "thought_signature"};
static const px_proto_t clients[] = {PX_PROTO_ANTHROPIC, PX_PROTO_RESPONSES,
                                     PX_PROTO_GEMINI};

/* the token a client gets for a part holding only `field`, as a string */
static const char *out_of(px_proto_t c, const char *field, json_t **keep) {
  json_t *p = json_pack("{s:s, s:s, s:s}", "type", "reasoning", "text", "", field, "T0k+/=");
  *keep = px_rtok_out(c, p);
  json_decref(p);
  return json_string_value(*keep);
}

int main(void) {
  /* the tags */
  CHECK(strcmp(px_rtok_tag(PX_PROTO_ANTHROPIC, "thought_signature"), "pxg1:sig:") == 0);
  CHECK(strcmp(px_rtok_tag(PX_PROTO_ANTHROPIC, "encrypted_content"), "pxo1:enc:") == 0);
  CHECK(strcmp(px_rtok_tag(PX_PROTO_RESPONSES, "thought_signature"), "pxg1:sig:") == 0);
  CHECK(strcmp(px_rtok_tag(PX_PROTO_RESPONSES, "signature"), "pxa1:sig:") == 0);
  CHECK(strcmp(px_rtok_tag(PX_PROTO_RESPONSES, "redacted_data"), "pxa1:red:") == 0);
  CHECK(strcmp(px_rtok_tag(PX_PROTO_GEMINI, "signature"), "pxa1:sig:") == 0);
  CHECK(strcmp(px_rtok_tag(PX_PROTO_GEMINI, "redacted_data"), "pxa1:red:") == 0);
  CHECK(strcmp(px_rtok_tag(PX_PROTO_GEMINI, "encrypted_content"), "pxo1:enc:") == 0);
  CHECK(strcmp(px_rtok_tag(PX_PROTO_GEMINI, "thought_signature"), "") == 0);
  CHECK(px_rtok_tag(PX_PROTO_ANTHROPIC, "redacted_data") == NULL); /* own block */
  CHECK(px_rtok_tag(PX_PROTO_CHAT, "signature") == NULL);
  /* streams: the family of a signature delta is the upstream's */
  CHECK(strcmp(px_rtok_stream_tag(PX_PROTO_ANTHROPIC, PX_PROTO_GEMINI), "pxg1:sig:") == 0);
  CHECK(strcmp(px_rtok_stream_tag(PX_PROTO_RESPONSES, PX_PROTO_GEMINI), "pxg1:sig:") == 0);
  CHECK(strcmp(px_rtok_stream_tag(PX_PROTO_GEMINI, PX_PROTO_RESPONSES), "pxo1:enc:") == 0);
  CHECK(strcmp(px_rtok_stream_tag(PX_PROTO_GEMINI, PX_PROTO_ANTHROPIC), "pxa1:sig:") == 0);
  CHECK(strcmp(px_rtok_stream_tag(PX_PROTO_GEMINI, PX_PROTO_GEMINI), "") == 0);
  CHECK(px_rtok_stream_tag(PX_PROTO_CHAT, PX_PROTO_GEMINI) == NULL);

  /* every family through every client and back into its own field */
  for (size_t c = 0; c < sizeof(clients) / sizeof(clients[0]); c++) {
    for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
      json_t *keep;
      const char *tok = out_of(clients[c], fields[f], &keep);
      if (clients[c] == PX_PROTO_ANTHROPIC && strcmp(fields[f], "redacted_data") == 0) {
        CHECK(tok == NULL); /* a redacted_thinking block of its own */
        continue;
      }
      CHECK(tok != NULL);
      json_t *back = json_object();
      CHECK(px_rtok_in(clients[c], back, tok) == 0);
      CHECK(json_object_size(back) == 1);
      CHECK(json_is_string(json_object_get(back, fields[f])) &&
            strcmp(json_string_value(json_object_get(back, fields[f])), "T0k+/=") == 0);
      json_decref(back);
      json_decref(keep);
    }
    /* an untagged token is the client's own; an empty tag body sets nothing */
    json_t *p = json_object();
    CHECK(px_rtok_in(clients[c], p, "raw") == 0);
    CHECK(strcmp(json_string_value(json_object_get(p, px_rtok_field(clients[c]))), "raw") == 0);
    json_decref(p);
    p = json_object();
    CHECK(px_rtok_in(clients[c], p, "pxg1:sig:") == 0 && json_object_size(p) ==
          (clients[c] == PX_PROTO_GEMINI ? 1u : 0u));
    CHECK(px_rtok_in(clients[c], p, "") == 0);
    json_decref(p);
  }
  /* the client's own family first when a part holds two */
  json_t *two = json_pack("{s:s, s:s}", "signature", "A", "thought_signature", "G");
  json_t *t = px_rtok_out(PX_PROTO_GEMINI, two);
  CHECK(t != NULL && strcmp(json_string_value(t), "G") == 0);
  json_decref(t);
  t = px_rtok_out(PX_PROTO_RESPONSES, two);
  CHECK(t != NULL && strcmp(json_string_value(t), "pxa1:sig:A") == 0);
  json_decref(t);
  CHECK(px_rtok_out(PX_PROTO_CHAT, two) == NULL);
  json_decref(two);
  return check_report("rtok");
}
