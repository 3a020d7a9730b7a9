/*
 * fastmock - a fast HTTP/1.1 mock LLM upstream for the benchmark suite.
 *
 * libuv + llhttp, one thread, keep-alive, no allocation per non-streaming
 * request. The protocol is chosen by the request path:
 *
 *   .../chat/completions -> OpenAI Chat Completions
 *   .../responses        -> OpenAI Responses
 *   .../messages         -> Anthropic Messages
 *   .../models/M:generateContent, .../models/M:streamGenerateContent
 *                        -> Gemini generateContent (the model is in the path)
 *
 * A body containing "stream":true (Gemini: the streamGenerateContent
 * method) gets an SSE stream (chunked), otherwise a fixed JSON body. The
 * stream's shape comes from the model name, so the same
 * request works whether it reaches fastmock directly, through nginx or through
 * proxai (which keeps the model name): the model is split on '-' and tokens
 * of the form <letter><digits> set
 *
 *   n<N>   number of text delta events (default 20)
 *   p<MS>  pace: milliseconds between delta events (default 0 = as fast as
 *          the client reads; events are then batched into 64 KiB writes)
 *   c<B>   bytes of text per delta (default 16)
 *
 * e.g. "to_chat-n200-p10-c8". Start and end events come with the first and
 * last delta.
 *
 * Usage: fastmock [-l HOST] [-p PORT]   (prints "fastmock listening on PORT")
 */
#include <llhttp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define MAX_PATH 1024
#define MAX_BODY (1u << 20) /* bytes of request body kept for inspection */
#define BATCH (64u << 10)   /* unpaced streams: bytes per write */

enum { P_NONE, P_CHAT, P_RESP, P_ANTH, P_GEM, P_COUNT };

typedef struct obuf {
  char *p;
  size_t len, cap;
} obuf_t;

typedef struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_write_t wr;
  llhttp_t parser;
  int handles; /* open libuv handles; freed when 0 */
  int closing;
  int busy;       /* a response is in progress; input waits in pend */
  int writing;    /* wr in flight */
  int keep_alive; /* for the response being written */
  /* request */
  char path[MAX_PATH];
  size_t plen;
  obuf_t body;
  obuf_t pend; /* input received while busy */
  /* stream */
  int proto, streaming;
  unsigned n, sent, pace_ms, chunk, seq, done;
  obuf_t out, inflight;
  const char *static_p; /* static response being written */
} conn_t;

static uv_loop_t *loop;
static llhttp_settings_t settings;
static char text_src[4096];

/* ---- fixed non-streaming answers --------------------------------------- */

static const char chat_body[] =
    "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,"
    "\"model\":\"bench\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
    "\"content\":\"Hello from the benchmark mock. This is a short fixed answer.\","
    "\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{"
    "\"prompt_tokens\":25,\"completion_tokens\":14,\"total_tokens\":39},"
    "\"system_fingerprint\":null}";
static const char resp_body[] =
    "{\"id\":\"resp_bench\",\"object\":\"response\",\"created_at\":1700000000,\"status\":"
    "\"completed\",\"error\":null,\"incomplete_details\":null,\"instructions\":null,"
    "\"max_output_tokens\":null,\"model\":\"bench\",\"output\":[{\"id\":\"msg_bench\","
    "\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{"
    "\"type\":\"output_text\",\"text\":\"Hello from the benchmark mock. This is a short "
    "fixed answer.\",\"annotations\":[]}]}],\"parallel_tool_calls\":true,"
    "\"previous_response_id\":null,\"store\":false,\"temperature\":1.0,\"tool_choice\":"
    "\"auto\",\"tools\":[],\"top_p\":1.0,\"truncation\":\"disabled\",\"usage\":{"
    "\"input_tokens\":25,\"input_tokens_details\":{\"cached_tokens\":0},\"output_"
    "tokens\":14,"
    "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":39},"
    "\"metadata\":{}}";
static const char anth_body[] =
    "{\"id\":\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
    "\"bench\","
    "\"content\":[{\"type\":\"text\",\"text\":\"Hello from the benchmark mock. This is a "
    "short fixed "
    "answer.\"}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":"
    "{\"input_tokens\":25,\"output_tokens\":14}}";
/* shaped like a real generateContent answer (gemini-2.5 family) */
static const char gem_body[] =
    "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hello from the benchmark "
    "mock. This is a short fixed answer.\"}],\"role\":\"model\"},\"finishReason\":"
    "\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":25,"
    "\"candidatesTokenCount\":14,\"totalTokenCount\":39,\"promptTokensDetails\":[{"
    "\"modality\":\"TEXT\",\"tokenCount\":25}]},\"modelVersion\":\"bench\","
    "\"responseId\":\"gem_bench\"}";
static const char notfound_body[] =
    "{\"error\":{\"type\":\"not_found_error\",\"message\":\"fastmock: unknown path\"}}";

static char *resp_static[P_COUNT][2]; /* [proto][keep_alive] full HTTP response */
static size_t resp_static_len[P_COUNT][2];

static void build_static(int proto, const char *status, const char *body) {
  for (int ka = 0; ka < 2; ka++) {
    char *s = malloc(strlen(body) + 256);
    if (!s) exit(1);
    int n = sprintf(s,
                    "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n%s\r\n%s",
                    status, strlen(body), ka ? "" : "Connection: close\r\n", body);
    resp_static[proto][ka] = s;
    resp_static_len[proto][ka] = (size_t)n;
  }
}

/* ---- buffers ------------------------------------------------------------ */

static int ob_reserve(obuf_t *b, size_t n) {
  if (b->len + n <= b->cap) return 0;
  size_t nc = b->cap ? b->cap : 1024;
  while (nc < b->len + n) nc *= 2;
  char *p = realloc(b->p, nc);
  if (!p) return -1;
  b->p = p;
  b->cap = nc;
  return 0;
}

static void ob_add(obuf_t *b, const char *p, size_t n) {
  if (ob_reserve(b, n) == 0) {
    memcpy(b->p + b->len, p, n);
    b->len += n;
  }
}

static void ob_free(obuf_t *b) {
  free(b->p);
  memset(b, 0, sizeof(*b));
}

/* ---- connection life ---------------------------------------------------- */

static void on_close(uv_handle_t *h) {
  conn_t *c = h->data;
  if (--c->handles > 0) return;
  ob_free(&c->body);
  ob_free(&c->pend);
  ob_free(&c->out);
  ob_free(&c->inflight);
  free(c);
}

static void conn_close(conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  uv_close((uv_handle_t *)&c->timer, on_close);
  uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void feed(conn_t *c, const char *p, size_t n);

static void response_done(conn_t *c) {
  c->busy = 0;
  c->streaming = 0;
  if (!c->keep_alive) {
    conn_close(c);
    return;
  }
  llhttp_resume(&c->parser);
  if (c->pend.len) {
    /* Pipelined input that arrived while answering. */
    obuf_t in = c->pend;
    memset(&c->pend, 0, sizeof(c->pend));
    feed(c, in.p, in.len);
    free(in.p);
  }
}

static void stream_fill(conn_t *c);
static void flush(conn_t *c);

static void on_write(uv_write_t *w, int status) {
  conn_t *c = w->data;
  c->writing = 0;
  c->inflight.len = 0;
  if (status < 0 || c->closing) {
    conn_close(c);
    return;
  }
  if (c->static_p) {
    c->static_p = NULL;
    response_done(c);
    return;
  }
  if (c->streaming) {
    if (!c->pace_ms && !c->done) stream_fill(c);
    if (c->out.len) {
      flush(c);
      return;
    }
    if (c->done) response_done(c);
  }
}

/* Hand pending stream bytes to libuv (one write in flight at a time). */
static void flush(conn_t *c) {
  if (c->writing || !c->out.len || c->closing) return;
  obuf_t t = c->inflight;
  c->inflight = c->out;
  c->out = t;
  c->out.len = 0;
  uv_buf_t b = uv_buf_init(c->inflight.p, (unsigned)c->inflight.len);
  c->writing = 1;
  c->wr.data = c;
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
    c->writing = 0;
    conn_close(c);
  }
}

static void write_static(conn_t *c, const char *p, size_t n) {
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
  int w = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (w == (int)n) {
    response_done(c);
    return;
  }
  if (w < 0 && w != UV_EAGAIN) {
    conn_close(c);
    return;
  }
  if (w > 0) b = uv_buf_init((char *)p + w, (unsigned)(n - (size_t)w));
  c->static_p = p;
  c->writing = 1;
  c->wr.data = c;
  if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
    c->writing = 0;
    conn_close(c);
  }
}

/* ---- SSE events --------------------------------------------------------- */

/* Append one event, framed as its own HTTP chunk unless raw (batched). */
static void ev(obuf_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ev(obuf_t *o, const char *fmt, ...) {
  va_list ap;
  if (ob_reserve(o, 512 + 4096) < 0) return;
  va_start(ap, fmt);
  int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= o->cap - o->len) {
    if (ob_reserve(o, (size_t)n + 1) < 0) return;
    va_start(ap, fmt);
    vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
  }
  o->len += (size_t)n;
}

#define RESP_OBJ(status, output, usage)                                              \
  "{\"id\":\"resp_bench\",\"object\":\"response\",\"created_at\":1700000000,"        \
  "\"status\":\"" status                                                             \
  "\",\"error\":null,\"incomplete_details\":null,"                                   \
  "\"instructions\":null,\"max_output_tokens\":null,\"model\":\"bench\",\"output\":" \
  "[" output                                                                         \
  "],\"parallel_tool_calls\":true,\"previous_response_id\":null,\"store\":false,"    \
  "\"temperature\":1.0,\"tool_choice\":\"auto\",\"tools\":[],\"top_p\":1.0,"         \
  "\"truncation\":\"disabled\",\"usage\":" usage ",\"metadata\":{}}"
#define RESP_ITEM_DONE                                                            \
  "{\"id\":\"msg_bench\",\"type\":\"message\",\"status\":\"completed\",\"role\":" \
  "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"%s\","         \
  "\"annotations\":[]}]}"
#define RESP_USAGE                                                                \
  "{\"input_tokens\":25,\"input_tokens_details\":{\"cached_tokens\":0},\"output_" \
  "tokens\":"                                                                     \
  "%u,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%u}"

/* one streamGenerateContent chunk: text, then the rest of the candidate */
#define GEM_CHUNK(text, tail, usage)                                                   \
  "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"" text                   \
  "\"}],\"role\":\"model\"}" tail ",\"index\":0}],\"usageMetadata\":" usage            \
  ",\"modelVersion\":\"bench\",\"responseId\":\"gem_bench\"}\r\n\r\n"

static void ev_head(conn_t *c, obuf_t *o) {
  switch (c->proto) {
    case P_GEM: /* Gemini has no start event: the first chunk is a delta */
      break;
    case P_CHAT:
      ev(o,
         "data: "
         "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":"
         "1700000000,\"model\":\"bench\",\"system_fingerprint\":null,\"choices\":[{"
         "\"index\":"
         "0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},"
         "\"logprobs\":null,\"finish_reason\":null}]}\n\n");
      break;
    case P_ANTH:
      ev(o,
         "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"
         "\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"bench\","
         "\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{"
         "\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
         "event: content_block_start\ndata: "
         "{\"type\":\"content_block_start\",\"index\":0,"
         "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
      break;
    case P_RESP:
      ev(o,
         "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":"
         "0,\"response\":" RESP_OBJ("in_progress", "", "null") "}\n\n"
         "event: response.in_progress\ndata: {\"type\":\"response.in_progress\","
         "\"sequence_number\":1,\"response\":" RESP_OBJ("in_progress", "", "null") "}\n\n"
         "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\","
         "\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_bench\",\"type\":"
         "\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n\n"
         "event: response.content_part.added\ndata: {\"type\":"
         "\"response.content_part.added\",\"sequence_number\":3,\"item_id\":\"msg_bench\","
         "\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":"
         "\"\",\"annotations\":[]}}\n\n");
      c->seq = 4;
      break;
  }
}

static void ev_delta(conn_t *c, obuf_t *o) {
  unsigned k = c->chunk < sizeof(text_src) - 1 ? c->chunk : sizeof(text_src) - 1;
  unsigned off = (c->sent * 7) % 64; /* vary the text a little */
  const char *t = text_src + off;
  switch (c->proto) {
    case P_GEM:
      ev(o, GEM_CHUNK("%.*s", "", "{\"promptTokenCount\":25,\"totalTokenCount\":25}"),
         (int)k, t);
      break;
    case P_CHAT:
      ev(o,
         "data: "
         "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":"
         "1700000000,\"model\":\"bench\",\"system_fingerprint\":null,\"choices\":[{"
         "\"index\":"
         "0,\"delta\":{\"content\":\"%.*s\"},\"logprobs\":null,\"finish_reason\":null}]}"
         "\n\n",
         (int)k, t);
      break;
    case P_ANTH:
      ev(o,
         "event: content_block_delta\ndata: "
         "{\"type\":\"content_block_delta\",\"index\":0,"
         "\"delta\":{\"type\":\"text_delta\",\"text\":\"%.*s\"}}\n\n",
         (int)k, t);
      break;
    case P_RESP:
      ev(o,
         "event: response.output_text.delta\ndata: "
         "{\"type\":\"response.output_text.delta\","
         "\"sequence_number\":%u,\"item_id\":\"msg_bench\",\"output_index\":0,"
         "\"content_index\":0,\"delta\":\"%.*s\",\"logprobs\":[]}\n\n",
         c->seq++, (int)k, t);
      break;
  }
  c->sent++;
}

static void ev_tail(conn_t *c, obuf_t *o) {
  unsigned out = c->n;
  /* The full text would be n * chunk bytes; the final events carry a short
   * stand-in so that long throughput streams do not end in one huge event. */
  const char *full = "(benchmark text)";
  switch (c->proto) {
    case P_GEM:
      ev(o,
         GEM_CHUNK("", ",\"finishReason\":\"STOP\"",
                   "{\"promptTokenCount\":25,\"candidatesTokenCount\":%u,"
                   "\"totalTokenCount\":%u}"),
         out, out + 25);
      break;
    case P_CHAT:
      ev(o,
         "data: "
         "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":"
         "1700000000,\"model\":\"bench\",\"system_fingerprint\":null,\"choices\":[{"
         "\"index\":"
         "0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n"
         "data: "
         "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":"
         "1700000000,\"model\":\"bench\",\"system_fingerprint\":null,\"choices\":[],"
         "\"usage\":{\"prompt_tokens\":25,\"completion_tokens\":%u,\"total_tokens\":%u}}"
         "\n\n"
         "data: [DONE]\n\n",
         out, out + 25);
      break;
    case P_ANTH:
      ev(o,
         "event: content_block_stop\ndata: "
         "{\"type\":\"content_block_stop\",\"index\":0}\n\n"
         "event: message_delta\ndata: "
         "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
         "\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%u}}\n\n"
         "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
         out);
      break;
    case P_RESP:
      ev(o,
         "event: response.output_text.done\ndata: "
         "{\"type\":\"response.output_text.done\","
         "\"sequence_number\":%u,\"item_id\":\"msg_bench\",\"output_index\":0,"
         "\"content_index\":0,\"text\":\"%s\",\"logprobs\":[]}\n\n"
         "event: response.content_part.done\ndata: "
         "{\"type\":\"response.content_part.done\","
         "\"sequence_number\":%u,\"item_id\":\"msg_bench\",\"output_index\":0,"
         "\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"%s\","
         "\"annotations\":[]}}\n\n"
         "event: response.output_item.done\ndata: "
         "{\"type\":\"response.output_item.done\","
         "\"sequence_number\":%u,\"output_index\":0,\"item\":" RESP_ITEM_DONE
         "}\n\n"
         "event: response.completed\ndata: {\"type\":\"response.completed\","
         "\"sequence_number\":%u,\"response\":" RESP_OBJ("completed", RESP_ITEM_DONE,
                                                         RESP_USAGE) "}\n\n",
         c->seq, full, c->seq + 1, full, c->seq + 2, full, c->seq + 3, full, out,
         out + 25);
      break;
  }
}

/* Append the events from `from` to the end of `o` as one HTTP chunk. */
static void chunk_wrap(obuf_t *o, size_t from) {
  size_t n = o->len - from;
  if (n == 0) return;
  char hdr[24];
  int h = snprintf(hdr, sizeof(hdr), "%zx\r\n", n);
  if (ob_reserve(o, (size_t)h + 2) < 0) return;
  memmove(o->p + from + h, o->p + from, n);
  memcpy(o->p + from, hdr, (size_t)h);
  o->len += (size_t)h;
  memcpy(o->p + o->len, "\r\n", 2);
  o->len += 2;
}

static void stream_end(conn_t *c, obuf_t *o) {
  size_t from = o->len;
  ev_tail(c, o);
  chunk_wrap(o, from);
  ob_add(o, "0\r\n\r\n", 5);
  c->done = 1;
}

/* Unpaced: one batch of events per write. */
static void stream_fill(conn_t *c) {
  size_t from = c->out.len;
  while (c->sent < c->n && c->out.len - from < BATCH) ev_delta(c, &c->out);
  chunk_wrap(&c->out, from);
  if (c->sent >= c->n) stream_end(c, &c->out);
}

static void on_tick(uv_timer_t *t) {
  conn_t *c = t->data;
  if (c->closing || !c->streaming) return;
  size_t from = c->out.len;
  ev_delta(c, &c->out);
  chunk_wrap(&c->out, from);
  if (c->sent >= c->n) {
    uv_timer_stop(&c->timer);
    stream_end(c, &c->out);
  }
  flush(c);
}

static void parse_model_tokens(conn_t *c, const char *s, const char *m) {
  while (s < m) {
    const char *tok = s;
    while (s < m && *s != '-') s++;
    if (s - tok >= 2) {
      unsigned long v = 0;
      int ok = 1;
      for (const char *q = tok + 1; q < s; q++) {
        if (*q < '0' || *q > '9')
          ok = 0;
        else
          v = v * 10 + (unsigned long)(*q - '0');
      }
      if (ok && v < 100000000UL) {
        if (*tok == 'n') c->n = (unsigned)v;
        if (*tok == 'p') c->pace_ms = (unsigned)v;
        if (*tok == 'c') c->chunk = (unsigned)v;
      }
    }
    if (s < m) s++;
  }
}

static void parse_model(conn_t *c) {
  c->n = 20;
  c->pace_ms = 0;
  c->chunk = 16;
  const char *b = c->body.p, *e = b + c->body.len;
  const char *m = b ? memmem(b, c->body.len, "\"model\"", 7) : NULL;
  if (!m) return;
  m += 7;
  while (m < e && (*m == ' ' || *m == ':')) m++;
  if (m >= e || *m != '"') return;
  const char *s = ++m;
  while (m < e && *m != '"') m++;
  parse_model_tokens(c, s, m);
}

/* Gemini: .../models/<model>:<method> */
static void parse_model_path(conn_t *c, size_t pl) {
  c->n = 20;
  c->pace_ms = 0;
  c->chunk = 16;
  const char *m = memmem(c->path, pl, "/models/", 8);
  const char *colon = m ? memchr(m + 8, ':', pl - (size_t)(m + 8 - c->path)) : NULL;
  if (colon) parse_model_tokens(c, m + 8, colon);
}

static int ends_with(const char *s, size_t n, const char *suf) {
  size_t m = strlen(suf);
  return n >= m && memcmp(s + n - m, suf, m) == 0;
}

static void respond(conn_t *c) {
  size_t pl = c->plen;
  char *q = memchr(c->path, '?', pl);
  if (q) pl = (size_t)(q - c->path);
  int proto = P_NONE, gem_stream = 0;
  if (ends_with(c->path, pl, ":generateContent"))
    proto = P_GEM;
  else if (ends_with(c->path, pl, ":streamGenerateContent"))
    proto = P_GEM, gem_stream = 1;
  else if (ends_with(c->path, pl, "/chat/completions"))
    proto = P_CHAT;
  else if (ends_with(c->path, pl, "/responses"))
    proto = P_RESP;
  else if (ends_with(c->path, pl, "/messages"))
    proto = P_ANTH;
  int stream = gem_stream || (proto != P_GEM && c->body.p && (memmem(c->body.p, c->body.len, "\"stream\":true", 13) ||
                             memmem(c->body.p, c->body.len, "\"stream\": true", 14)));
  c->busy = 1;
  c->proto = proto;
  if (proto == P_NONE || !stream) {
    write_static(c, resp_static[proto][c->keep_alive],
                 resp_static_len[proto][c->keep_alive]);
    return;
  }
  if (proto == P_GEM)
    parse_model_path(c, pl);
  else
    parse_model(c);
  c->streaming = 1;
  c->sent = c->done = 0;
  c->out.len = 0;
  static const char head[] =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "Transfer-Encoding: chunked\r\n";
  ob_add(&c->out, head, sizeof(head) - 1);
  if (!c->keep_alive) ob_add(&c->out, "Connection: close\r\n", 19);
  ob_add(&c->out, "\r\n", 2);
  size_t from = c->out.len;
  ev_head(c, &c->out);
  if (c->pace_ms == 0) {
    chunk_wrap(&c->out, from);
    stream_fill(c);
  } else {
    if (c->n > 0) ev_delta(c, &c->out);
    chunk_wrap(&c->out, from);
    if (c->sent >= c->n)
      stream_end(c, &c->out);
    else
      uv_timer_start(&c->timer, on_tick, c->pace_ms, c->pace_ms);
  }
  flush(c);
}

/* ---- llhttp ------------------------------------------------------------- */

static int on_message_begin(llhttp_t *p) {
  conn_t *c = p->data;
  c->plen = 0;
  c->body.len = 0;
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  conn_t *c = p->data;
  if (c->plen + n > MAX_PATH) n = MAX_PATH - c->plen;
  memcpy(c->path + c->plen, at, n);
  c->plen += n;
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  conn_t *c = p->data;
  if (c->body.len + n <= MAX_BODY) ob_add(&c->body, at, n);
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  conn_t *c = p->data;
  c->keep_alive = llhttp_should_keep_alive(p);
  return HPE_PAUSED; /* answered from feed() once the parser has stopped */
}

static void feed(conn_t *c, const char *p, size_t n) {
  while (n > 0 && !c->closing) {
    if (c->busy) {
      ob_add(&c->pend, p, n);
      return;
    }
    llhttp_errno_t e = llhttp_execute(&c->parser, p, n);
    if (e == HPE_OK) return;
    if (e != HPE_PAUSED) {
      conn_close(c);
      return;
    }
    const char *stop = llhttp_get_error_pos(&c->parser);
    size_t used = stop ? (size_t)(stop - p) : n;
    p += used;
    n -= used;
    respond(c); /* may finish at once and resume the parser */
    if (c->busy) {
      if (n) ob_add(&c->pend, p, n);
      return;
    }
  }
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  static char buf[65536];
  (void)h;
  (void)sz;
  *b = uv_buf_init(buf, sizeof(buf));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  conn_t *c = s->data;
  if (n < 0) {
    conn_close(c);
    return;
  }
  feed(c, b->base, (size_t)n);
}

static void on_conn(uv_stream_t *srv, int status) {
  if (status < 0) return;
  conn_t *c = calloc(1, sizeof(*c));
  if (!c) return;
  uv_tcp_init(loop, &c->tcp);
  uv_timer_init(loop, &c->timer);
  c->handles = 2;
  c->tcp.data = c->timer.data = c;
  if (uv_accept(srv, (uv_stream_t *)&c->tcp) < 0) {
    conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  llhttp_init(&c->parser, HTTP_REQUEST, &settings);
  c->parser.data = c;
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_signal(uv_signal_t *s, int signum) {
  (void)signum;
  uv_stop(s->loop);
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1";
  int port = 0;
  int opt;
  while ((opt = getopt(argc, argv, "l:p:")) != -1) {
    if (opt == 'l')
      host = optarg;
    else if (opt == 'p')
      port = atoi(optarg);
    else {
      fprintf(stderr, "usage: fastmock [-l HOST] [-p PORT]\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  static const char words[] =
      "lorem ipsum dolor sit amet consectetur adipiscing elit sed ";
  for (size_t i = 0; i < sizeof(text_src) - 1; i++)
    text_src[i] = words[i % (sizeof(words) - 1)];

  build_static(P_NONE, "404 Not Found", notfound_body);
  build_static(P_CHAT, "200 OK", chat_body);
  build_static(P_RESP, "200 OK", resp_body);
  build_static(P_ANTH, "200 OK", anth_body);
  build_static(P_GEM, "200 OK", gem_body);

  llhttp_settings_init(&settings);
  settings.on_message_begin = on_message_begin;
  settings.on_url = on_url;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;

  loop = uv_default_loop();
  uv_tcp_t srv;
  struct sockaddr_in addr;
  uv_tcp_init(loop, &srv);
  if (uv_ip4_addr(host, port, &addr) < 0 ||
      uv_tcp_bind(&srv, (const struct sockaddr *)&addr, 0) < 0 ||
      uv_listen((uv_stream_t *)&srv, 8192, on_conn) < 0) {
    fprintf(stderr, "fastmock: cannot listen on %s:%d\n", host, port);
    return 1;
  }
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  uv_tcp_getsockname(&srv, (struct sockaddr *)&ss, &len);
  printf("fastmock listening on %d\n", ntohs(((struct sockaddr_in *)&ss)->sin_port));
  fflush(stdout);
  uv_signal_t sig_int, sig_term;
  uv_signal_init(loop, &sig_int);
  uv_signal_init(loop, &sig_term);
  uv_signal_start(&sig_int, on_signal, SIGINT);
  uv_signal_start(&sig_term, on_signal, SIGTERM);
  uv_run(loop, UV_RUN_DEFAULT);
  return 0;
}
