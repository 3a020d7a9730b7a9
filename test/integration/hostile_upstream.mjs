// The security boundary, upstream side (SPEC sections 5, 6, 7, 10): proxai
// against a raw-TCP fault upstream (lib/faultup.mjs) that answers with broken
// framing, bad headers, gzip, redirects, over-long or cut streams, huge error
// bodies and hostile retry-after values. Every case reads the client side with
// a strict HTTP/1.1 parser on one keep-alive connection and asserts the exact
// answer: status, protocol-shaped error, no injected or upstream framing
// header, and exactly one well-formed response per request (a healthy second
// request on the same connection gets its own answer, nothing more).
//
// Runs on the built-in HTTP/1.1 lane (the default for http:// upstreams) and
// the libcurl lane (PROXAI_UPSTREAM_CLIENT=curl, registered as
// hostile_upstream_curl).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { startProxai, test, run, parseSSE, waitFor } from './lib/harness.mjs';
import * as C from './lib/config.mjs';
import { startFaultUpstream, http, chunked, sse, post, exchange, openRaw } from './lib/faultup.mjs';

const NATIVE = process.env.PROXAI_UPSTREAM_CLIENT !== 'curl';
const up = await startFaultUpstream();
const logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-hostile-up-'));
const accessLog = path.join(logDir, 'access.log');
process.on('exit', () => fs.rmSync(logDir, { recursive: true, force: true }));

// upstream keys (plainly fake, not shaped like any provider's), echoed by the
// fault upstream the way providers do in their authentication errors. (ug:
// a path with '%' goes by curl, which does not read SSL_CERT_FILE: under
// hostile_upstream_tls its CA is named.)
const LEAK = {
  chat: 'fake-openai-test-only-not-a-real-key-placeholder-wxyz',
  ant: 'fake-anthropic-test-only-not-a-real-key-placeholder-mnop',
  gem: 'fake-gemini-test-only-not-a-real-key-placeholder-ghij',
};
// [upstream name] on the scripted upstream
const upstream = (name, proto, keys = {}) => C.upstream(name, proto, up.url, { api_key: 'up-key', ...keys });
const px = await startProxai(C.server({ access_log: accessLog })
  + upstream('uc', 'chat') + upstream('ur', 'responses') + upstream('ua', 'anthropic')
  + upstream('uc_retry', 'chat', { retries: 1 })
  + upstream('uc_org', 'chat', { header: C.each('OpenAI-Organization: org-gateway', 'user-agent: gateway-agent') })
  + C.route('chat-*', { upstream: 'uc' })
  + C.route('rw-*', { upstream: 'uc', model: 'up-model' })
  + C.route('resp-*', { upstream: 'ur' })
  + C.route('claude-*', { upstream: 'ua' })
  + C.route('xclaude-*', { upstream: 'ua' })
  + C.route('retry-*', { upstream: 'uc_retry' })
  + C.route('org-*', { upstream: 'uc_org' })
  + upstream('uc_leak', 'chat', { api_key: LEAK.chat })
  + upstream('ua_leak', 'anthropic', { api_key: LEAK.ant })
  + upstream('ug', 'gemini', { api_key: LEAK.gem, ca_file: process.env.SSL_CERT_FILE || undefined })
  + C.route('leak-*', { upstream: 'uc_leak' })
  + C.route('leakant-*', { upstream: 'ua_leak' })
  + C.route('gem-*', { upstream: 'ug' })
  + C.keys({ main: { secret: 'sk-main' }, metered: { secret: 'sk-metered', tpm: 100 } }));

const KEY = { authorization: 'Bearer sk-main' };
const AV = { 'anthropic-version': '2023-06-01' };
const PATH = { chat: '/v1/chat/completions', resp: '/v1/responses', claude: '/v1/messages' };
const msgs = [{ role: 'user', content: 'hi' }];
function reqBody(kind, model, extra = {}) {
  if (kind === 'chat') return { model, messages: msgs, ...extra };
  if (kind === 'resp') return { model, input: 'hi', ...extra };
  return { model, max_tokens: 16, messages: msgs, ...extra };
}
const JSON_CT = { 'content-type': 'application/json' };
const SSE_CT = { 'content-type': 'text/event-stream' };

// ---- upstream answers ----------------------------------------------------------

const chatJson = (text = 'fine', usage = { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 }) =>
  JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage });
const respJson = (text = 'fine') =>
  JSON.stringify({ id: 'resp_1', object: 'response', created_at: 1, status: 'completed', model: 'm', output: [{ type: 'message', id: 'msg_1', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text, annotations: [] }] }], usage: { input_tokens: 3, output_tokens: 1, total_tokens: 4 } });
const claudeJson = (text = 'fine') =>
  JSON.stringify({ id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [{ type: 'text', text }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } });
const okJson = { chat: chatJson, resp: respJson, claude: claudeJson };

const chatChunk = (delta, finish = null) => ({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] });
const chatUsageChunk = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 11, completion_tokens: 2, total_tokens: 13 } };
const chatEvents = () => [{ data: chatChunk({ role: 'assistant', content: 'Hi' }) }, { data: chatChunk({}, 'stop') }, { data: chatUsageChunk }, { data: '[DONE]' }];
const claudeStart = { event: 'message_start', data: { type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', model: 'm', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 500, output_tokens: 1 } } } };
const claudeEvents = () => [
  claudeStart,
  { event: 'content_block_start', data: { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } } },
  { event: 'content_block_delta', data: { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } } },
  { event: 'content_block_stop', data: { type: 'content_block_stop', index: 0 } },
  { event: 'message_delta', data: { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } } },
  { event: 'message_stop', data: { type: 'message_stop' } },
];
const respResponse = (status) => ({ id: 'resp_1', object: 'response', created_at: 1, status, model: 'm', output: [], usage: status === 'completed' ? { input_tokens: 5, output_tokens: 2, total_tokens: 7 } : null });
const respEvents = () => [
  { event: 'response.created', data: { type: 'response.created', sequence_number: 0, response: respResponse('in_progress') } },
  { event: 'response.output_text.delta', data: { type: 'response.output_text.delta', sequence_number: 1, item_id: 'msg_1', output_index: 0, content_index: 0, delta: 'Hi' } },
  { event: 'response.completed', data: { type: 'response.completed', sequence_number: 2, response: respResponse('completed') } },
];
const streamEvents = { chat: chatEvents, resp: respEvents, claude: claudeEvents };

/** A complete, healthy answer of protocol kind (stream or JSON), closing. */
const healthy = (kind = 'chat', stream = false) =>
  stream ? http(200, SSE_CT, sse(streamEvents[kind]())) : http(200, JSON_CT, okJson[kind]());

// ---- client side helpers -------------------------------------------------------

let rid = 0;
const nextId = () => `hostile-up-${++rid}`;

/**
 * One hostile case: the upstream answers `fault` to a `kind` request (model,
 * stream as given), then `healthy()` to a second request sent on the SAME
 * client connection, which must get exactly its own 200. Returns the first
 * response (plus its request id).
 */
async function onePlusHealthy(kind, model, fault, { stream = false, extra = {}, headers = {}, follow = true } = {}) {
  up.reset();
  up.script(...(Array.isArray(fault) ? fault : [fault]));
  if (follow) up.script(healthy('chat'));
  const id = nextId();
  const body = reqBody(kind, model, stream ? { stream: true, ...extra } : extra);
  const reqs = [post(PATH[kind], body, { ...KEY, ...AV, 'x-request-id': id, ...headers }, { close: !follow })];
  if (follow) reqs.push(post(PATH.chat, reqBody('chat', 'chat-follow'), { ...KEY, 'x-request-id': `${id}-follow` }, { close: true }));
  const { responses, extra: trailing } = await exchange(px.port, reqs);
  assert.equal(responses.length, reqs.length);
  assert.equal(trailing.length, 0, `bytes after the last response: ${JSON.stringify(trailing.toString('latin1').slice(0, 200))}`);
  for (const r of responses) assertOurFraming(r);
  if (follow) {
    const f = responses[1];
    assert.equal(f.status, 200, f.text);
    assert.equal(f.json.choices[0].message.content, 'fine', 'the second request got its own answer');
    assert.equal(f.headers['x-request-id'], `${id}-follow`);
  }
  const r = responses[0];
  r.id = id;
  assert.equal(r.headers['x-request-id'], id);
  return r;
}

/** The gateway's own framing and header set: nothing of the upstream's. */
function assertOurFraming(r) {
  const names = r.list.map(([k]) => k);
  const framing = names.filter((k) => k === 'content-length' || k === 'transfer-encoding');
  assert.equal(framing.length, 1, `exactly one framing header: ${r.head}`);
  for (const bad of ['set-cookie', 'content-encoding', 'location', 'x-evil', 'trailer']) {
    assert.ok(!names.includes(bad), `${bad} reached the client: ${r.head}`);
  }
  // a header line of its own, never a value (an obs-fold may be joined into
  // the value it continues, RFC 9112 5.2)
  assert.ok(!/^(set-cookie|x-evil)/im.test(r.head), `injected header in the head: ${r.head}`);
}

/** An error in the client protocol's shape (the gateway's own, or an
 *  upstream error body of the client's protocol passed on as it came). */
function assertError(r, kind, status, type, msg, { own = true } = {}) {
  assert.equal(r.status, status, r.text);
  assert.match(r.headers['content-type'], /^application\/json/);
  assert.ok(r.json, `JSON error body: ${r.text.slice(0, 300)}`);
  let m;
  if (kind === 'claude') {
    assert.equal(r.json.type, 'error', r.text);
    assert.equal(r.json.error.type, type, r.text);
    m = r.json.error.message;
  } else {
    assert.equal(r.json.error.type, type, r.text);
    if (own) assert.ok('param' in r.json.error && 'code' in r.json.error, r.text);
    m = r.json.error.message;
  }
  assert.equal(typeof m, 'string');
  if (msg) assert.match(m, msg);
  return m;
}
const badGateway = (r, kind, msg) => assertError(r, kind, 502, 'api_error', msg);

/** The stream ended with the client protocol's error event, never cleanly. */
function assertStreamError(r, kind) {
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /^text\/event-stream/);
  const events = parseSSE(r.text);
  assert.ok(events.length >= 1, r.text);
  const last = events.at(-1);
  for (const ev of events) {
    if (ev.data !== undefined && ev.data !== '[DONE]') JSON.parse(ev.data); // every event whole
  }
  if (kind === 'chat') {
    assert.ok(!events.some((e) => e.data === '[DONE]'), 'no [DONE] after a failure');
    assert.ok(JSON.parse(last.data).error, `last event is the error frame: ${last.data}`);
  } else if (kind === 'claude') {
    assert.equal(last.event, 'error', r.text.slice(-400));
    assert.equal(JSON.parse(last.data).type, 'error');
    assert.ok(!events.some((e) => e.event === 'message_stop'));
  } else {
    assert.equal(last.event, 'response.failed', r.text.slice(-400));
    assert.equal(JSON.parse(last.data).response.status, 'failed');
  }
  return events;
}

function accessRecord(id) {
  if (!fs.existsSync(accessLog)) return undefined;
  for (const line of fs.readFileSync(accessLog, 'utf8').split('\n')) {
    if (!line) continue;
    const j = JSON.parse(line);
    if (j.request_id === id) return j;
  }
  return undefined;
}
const waitRecord = (id) => waitFor(() => accessRecord(id), { timeout: 10000, what: `access log record ${id}` });

const fdCount = () => fs.readdirSync(`/proc/${px.pid}/fd`).length;
let fdBaseline = 0;

test('warm-up: a healthy exchange; descriptor baseline', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', healthy('chat'));
  assert.equal(r.status, 200);
  await waitFor(() => {
    fdBaseline = fdCount();
    return true;
  });
});

// ---- framing (SPEC 10: the gateway frames every response itself) ------------

test('TE: chunked plus Content-Length upstream: one response, no smuggled second one', async () => {
  const smuggled = 'HTTP/1.1 200 OK\r\nX-Evil: 1\r\nContent-Length: 5\r\n\r\nevil!';
  const body = chatJson('abc');
  const fault = `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n\r\n` +
    chunked(body, smuggled).toString('latin1');
  const r = await onePlusHealthy('chat', 'chat-a', fault);
  if (r.status === 200) {
    // curl: chunked wins; the client gets the de-chunked bytes, framed by us
    assert.equal(r.text, body + smuggled);
    assert.equal(r.headers['content-length'], String(Buffer.byteLength(r.text)));
  } else {
    badGateway(r, 'chat'); // llhttp refuses the ambiguous framing
  }
  assert.ok(!NATIVE || r.status === 502, `native lane: ${r.status}`);
});

test('chunked upstream answer reaches the client with our Content-Length, bytes intact', async () => {
  const body = claudeJson('chunks');
  const r = await onePlusHealthy('claude', 'claude-a', http(200, { ...JSON_CT, 'Transfer-Encoding': 'chunked' }, chunked(body.slice(0, 10), body.slice(10))));
  assert.equal(r.status, 200);
  assert.equal(r.text, body);
  assert.equal(r.headers['content-length'], String(body.length));
});

test('upstream Content-Length shorter than what it sends: only the framed bytes, next request fine', async () => {
  const body = respJson('short');
  const r = await onePlusHealthy('resp', 'resp-a', http(200, { ...JSON_CT, 'Content-Length': body.length }, body + 'HTTP/1.1 200 OK\r\nX-Evil: 1\r\n\r\n'));
  assert.equal(r.status, 200);
  assert.equal(r.text, body);
});

test('upstream Content-Length longer than the body, then close: 502 in shape, nothing half-sent', async () => {
  const body = chatJson('cut');
  const r = await onePlusHealthy('chat', 'chat-a', http(200, { ...JSON_CT, 'Content-Length': body.length + 50 }, body));
  badGateway(r, 'chat');
});

test('invalid chunk size from the upstream: 502 in shape (nothing was sent yet)', async () => {
  const r = await onePlusHealthy('claude', 'claude-a', `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"id"\r\nzz\r\nxx\r\n0\r\n\r\n`);
  badGateway(r, 'claude');
});

test('chunk data not followed by CRLF: 502 in shape', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"aXYZ\r\n0\r\n\r\n`);
  badGateway(r, 'chat');
});

test('chunked body cut before the last chunk: 502 in shape', async () => {
  const body = respJson('x');
  const r = await onePlusHealthy('resp', 'resp-a', `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n`);
  badGateway(r, 'resp');
});

test('chunk extensions are legal: 200 with the body', async () => {
  const body = chatJson('ext');
  const r = await onePlusHealthy('chat', 'chat-a', `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)};name=v\r\n${body}\r\n0\r\n\r\n`);
  assert.equal(r.status, 200);
  assert.equal(r.text, body);
});

test('HTTP/1.0 close-delimited upstream body: 200, framed by us', async () => {
  const body = claudeJson('ten');
  const r = await onePlusHealthy('claude', 'claude-a', `HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n${body}`);
  assert.equal(r.status, 200);
  assert.equal(r.text, body);
  assert.equal(r.headers['content-length'], String(body.length));
});

test('100 Continue before the answer: the final answer only', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', Buffer.concat([Buffer.from('HTTP/1.1 100 Continue\r\n\r\n'), http(200, JSON_CT, chatJson('after100'))]));
  assert.equal(r.status, 200);
  assert.equal(r.json.choices[0].message.content, 'after100');
});

test('upstream closes without a byte: 502 in shape', async () => {
  const r = await onePlusHealthy('claude', 'claude-a', { raw: [], close: true });
  badGateway(r, 'claude');
});

test('garbage status line: 502 in shape', async () => {
  const r = await onePlusHealthy('resp', 'resp-a', 'HTTP/1.1 2x0 What\r\nContent-Length: 2\r\n\r\n{}');
  badGateway(r, 'resp');
});

test('upstream framing and cookies never reach the client; x-request-id is renamed', async () => {
  const body = chatJson('hdrs');
  const r = await onePlusHealthy('chat', 'chat-a', http(200, { ...JSON_CT, 'Set-Cookie': 'evil=1', Connection: 'keep-alive', 'x-request-id': 'up-42', Trailer: 'x-evil', 'X-Ratelimit-Remaining-Requests': '7' }, body));
  assert.equal(r.status, 200);
  assert.equal(r.text, body);
  assert.equal(r.headers['x-upstream-request-id'], 'up-42');
  assert.equal(r.headers['x-ratelimit-remaining-requests'], '7');
});

test('a pass-through answer over the hold size goes on chunked by us, bytes and usage intact', async () => {
  const big = chatJson('y'.repeat(600 * 1024), { prompt_tokens: 21, completion_tokens: 22, total_tokens: 43 });
  const r = await onePlusHealthy('chat', 'chat-a', http(200, JSON_CT, big));
  assert.equal(r.status, 200);
  assert.equal(r.headers['transfer-encoding'], 'chunked');
  assert.equal(r.text, big);
  const rec = await waitRecord(r.id);
  assert.equal(rec.input_tokens, 21);
  assert.equal(rec.output_tokens, 22);
});

// ---- bad header values (SPEC 10: no CR, LF or NUL in any header) ---------------

test('upstream header value with a bare CR: dropped, never split into a client header', async () => {
  const body = chatJson('cr');
  const r = await onePlusHealthy('chat', 'chat-a', Buffer.from(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Ratelimit-Limit-Requests: 5\rSet-Cookie: evil=1\r\nContent-Length: ${body.length}\r\n\r\n${body}`, 'latin1'));
  if (r.status === 200) {
    assert.equal(r.text, body);
    assert.ok(!('x-ratelimit-limit-requests' in r.headers), r.head);
  } else {
    badGateway(r, 'chat');
  }
});

test('upstream header value with a NUL: dropped', async () => {
  const body = claudeJson('nul');
  const r = await onePlusHealthy('claude', 'claude-a', Buffer.from(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nanthropic-ratelimit-requests-limit: 5\0evil\r\nContent-Length: ${body.length}\r\n\r\n${body}`, 'latin1'));
  if (r.status === 200) {
    assert.equal(r.text, body);
    assert.ok(!('anthropic-ratelimit-requests-limit' in r.headers), r.head);
  } else {
    badGateway(r, 'claude');
  }
});

test('obs-folded upstream header: the continuation never becomes a client header', async () => {
  const body = respJson('fold');
  const r = await onePlusHealthy('resp', 'resp-a', `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Ratelimit-Limit-Tokens: 5\r\n Set-Cookie: evil=1\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  if (r.status === 200) assert.equal(r.text, body);
  else badGateway(r, 'resp');
});

for (const [kind, model] of [['chat', 'chat-a'], ['claude', 'claude-a'], ['resp', 'resp-a']]) {
  test(`${kind}: a model with CR LF never reaches a header: 400 naming model, nothing sent upstream`, async () => {
    const r = await onePlusHealthy(kind, `${model}\r\nSet-Cookie: evil=1`, healthy(kind), { follow: false });
    assertError(r, kind, 400, 'invalid_request_error', /model/);
    if (kind !== 'claude') assert.equal(r.json.error.param, 'model');
    assert.equal(up.requests.length, 0, 'nothing sent upstream');
    assert.ok(!('x-proxai-upstream' in r.headers));
  });
}

test('a model with an escaped NUL: 400 naming model', async () => {
  const r = await onePlusHealthy('chat', 'chat-a\u0000evil', healthy('chat'), { follow: false });
  assertError(r, 'chat', 400, 'invalid_request_error');
  assert.equal(up.requests.length, 0);
});

test('a model with raw (unescaped) CR LF bytes in the JSON: 400, no header injection', async () => {
  up.reset();
  const id = nextId();
  const raw = Buffer.from(`{"model":"chat-a\r\nSet-Cookie: evil=1","messages":[{"role":"user","content":"hi"}]}`, 'latin1');
  const { responses } = await exchange(px.port, [post(PATH.chat, raw, { ...KEY, 'x-request-id': id }, { close: true })]);
  assertOurFraming(responses[0]);
  assertError(responses[0], 'chat', 400, 'invalid_request_error');
  assert.equal(up.requests.length, 0);
});

test('a valid route model reaches x-proxai-upstream and the upstream body', async () => {
  const r = await onePlusHealthy('chat', 'rw-a', healthy('chat'));
  assert.equal(r.status, 200);
  assert.equal(r.headers['x-proxai-upstream'], 'uc/up-model');
  assert.equal(up.requests[0].json.model, 'up-model');
});

// ---- encodings, redirects, odd statuses ----------------------------------------

test('Content-Encoding: gzip upstream answer: 502 in shape, never gzip bytes', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', http(200, { ...JSON_CT, 'Content-Encoding': 'gzip' }, zlib.gzipSync(chatJson('zipped'))));
  badGateway(r, 'chat', /Content-Encoding/);
});

test('Content-Encoding: br on a stream: 502 in the Anthropic shape', async () => {
  const r = await onePlusHealthy('claude', 'claude-a', http(200, { ...SSE_CT, 'Content-Encoding': 'br' }, 'garbage'), { stream: true });
  badGateway(r, 'claude', /Content-Encoding/);
});

test('Content-Encoding: gzip on an upstream error: 502 in shape', async () => {
  const r = await onePlusHealthy('resp', 'resp-a', http(400, { ...JSON_CT, 'Content-Encoding': 'gzip' }, zlib.gzipSync('{"error":{"message":"x","type":"invalid_request_error"}}')));
  badGateway(r, 'resp');
});

test('Content-Encoding: identity is fine', async () => {
  const body = chatJson('plain');
  const r = await onePlusHealthy('chat', 'chat-a', http(200, { ...JSON_CT, 'Content-Encoding': 'identity' }, body));
  assert.equal(r.status, 200);
  assert.equal(r.text, body);
});

for (const [kind, model, st] of [['chat', 'chat-a', 302], ['claude', 'claude-a', 301], ['resp', 'resp-a', 307]]) {
  test(`${kind}: a ${st} redirect from the upstream is a 502 in shape, no Location`, async () => {
    const r = await onePlusHealthy(kind, model, http(st, { Location: 'http://evil.example/', ...JSON_CT }, '{"moved":true}'));
    badGateway(r, kind, /redirect/);
  });
}

test('a redirect on a stream request: 502 in shape', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', http(303, { Location: '/x' }, ''), { stream: true });
  badGateway(r, 'chat', /redirect/);
});

test('304 and 204 from the upstream: 502 in shape', async () => {
  let r = await onePlusHealthy('chat', 'chat-a', 'HTTP/1.1 304 Not Modified\r\n\r\n');
  badGateway(r, 'chat');
  r = await onePlusHealthy('claude', 'claude-a', 'HTTP/1.1 204 No Content\r\n\r\n');
  badGateway(r, 'claude');
});

test('a JSON answer to a stream request: 502 in shape, never a JSON body for a stream', async () => {
  const r = await onePlusHealthy('claude', 'claude-a', healthy('claude'), { stream: true });
  badGateway(r, 'claude', /Content-Type/);
});

// ---- error bodies (SPEC 6) ------------------------------------------------------

test('an error body over the 1 MiB cap keeps the upstream status, message truncated (Chat)', async () => {
  const err = JSON.stringify({ error: { message: 'too long: ' + 'A'.repeat(1536 * 1024), type: 'invalid_request_error', param: null, code: null } });
  const r = await onePlusHealthy('chat', 'chat-a', http(400, JSON_CT, err));
  const m = assertError(r, 'chat', 400, 'invalid_request_error', /^too long: AAAA/);
  assert.match(m, /truncated/);
  assert.ok(m.length < 4096, `message length ${m.length}`);
});

test('an error body over the cap keeps 529 and the Anthropic type', async () => {
  const err = JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'busy ' + 'B'.repeat(1200 * 1024) } });
  const r = await onePlusHealthy('claude', 'claude-a', http(529, JSON_CT, err));
  const m = assertError(r, 'claude', 529, 'overloaded_error', /^busy BBB/);
  assert.match(m, /truncated/);
});

test('an error body over the cap, chunked, 429: rate_limit_error (Responses)', async () => {
  const err = JSON.stringify({ error: { message: 'slow down ' + 'C'.repeat(1100 * 1024), type: 'rate_limit_error', code: 'rate_limit_exceeded' } });
  const r = await onePlusHealthy('resp', 'resp-a', http(429, { ...JSON_CT, 'Transfer-Encoding': 'chunked' }, chunked(err.slice(0, 70000), err.slice(70000))));
  assertError(r, 'resp', 429, 'rate_limit_error', /^slow down CCC/);
});

test('an HTML error page: 502 naming the upstream status', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', http(503, { 'content-type': 'text/html' }, '<html>down</html>'));
  badGateway(r, 'chat', /503/);
});

// ---- the same rules on the translated path (Chat client, Anthropic upstream) ---

test('translated: a redirect is a 502 in the client\'s (Chat) shape', async () => {
  const r = await onePlusHealthy('chat', 'xclaude-a', http(302, { Location: 'http://evil.example/' }, ''));
  badGateway(r, 'chat', /redirect/);
});

test('translated: a gzip answer is a 502 in the Chat shape', async () => {
  const r = await onePlusHealthy('chat', 'xclaude-a', http(200, { ...JSON_CT, 'Content-Encoding': 'gzip' }, zlib.gzipSync(claudeJson())));
  badGateway(r, 'chat', /Content-Encoding/);
});

test('translated: an Anthropic error body over the cap keeps 529, in the Chat shape', async () => {
  const err = JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'busy ' + 'D'.repeat(1100 * 1024) } });
  const r = await onePlusHealthy('chat', 'xclaude-a', http(529, JSON_CT, err));
  const m = assertError(r, 'chat', 529, 'api_error', /^busy DDD/); // SPEC 6: overloaded is api_error for OpenAI clients
  assert.match(m, /truncated/);
});

// the one reader's rule on answers (issue 21): names read unescaped, a
// member the codec reads given twice is a 502 naming it (no other reader)
test('translated: an answer\'s escaped member names are read unescaped', async () => {
  const body = claudeJson('plain text').replace('"content"', '"c\\u006fntent"').replace('"text":"plain', '"t\\u0065xt":"plain');
  const r = await onePlusHealthy('chat', 'xclaude-a', http(200, JSON_CT, body));
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.content, 'plain text');
});

test('translated: an answer with a member twice is a 502 naming it, in the Chat shape', async () => {
  const body = claudeJson('first').replace('"stop_reason"', '"content":[{"type":"text","text":"second"}],"stop_reason"');
  const r = await onePlusHealthy('chat', 'xclaude-a', http(200, JSON_CT, body));
  badGateway(r, 'chat', /'content' more than once/);
});

test('translated: an invalid chunk is a 502 in the Chat shape', async () => {
  const r = await onePlusHealthy('chat', 'xclaude-a', `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nq\r\n{}\r\n0\r\n\r\n`);
  badGateway(r, 'chat');
});

// ---- retry-after (SPEC 7): no UB, clamped ----------------------------------------

const r429 = (h) => http(429, { ...JSON_CT, ...h }, '{"error":{"message":"slow","type":"rate_limit_error"}}');
for (const [name, value, retried] of [
  ['retry-after-ms', '-5', true],
  ['retry-after-ms', '1e30', false],
  ['retry-after-ms', '18446744073709551621', false],
  ['retry-after', 'inf', false],
  ['retry-after', '1e30', false],
  ['retry-after', 'nan', true],
  ['retry-after', '-3', true],
  ['retry-after', '99999999999999999999999999', false],
]) {
  test(`${name}: ${value} is ${retried ? 'retried at once' : 'not waited for (the 429 goes to the client)'}`, async () => {
    const r = await onePlusHealthy('chat', 'retry-a', [r429({ [name]: value }), healthy('chat')], { follow: false });
    if (retried) {
      assert.equal(r.status, 200, r.text);
      assert.equal(up.requests.length, 2);
    } else {
      assertError(r, 'chat', 429, 'rate_limit_error', /^slow$/, { own: false });
      assert.equal(r.headers[name], value, 'the upstream retry-after is passed back');
      assert.equal(up.requests.length, 1);
    }
  });
}

// ---- pass-through streams (SPEC 5: never a clean end after a failure) ---------------

for (const [kind, model] of [['chat', 'chat-a'], ['claude', 'claude-a'], ['resp', 'resp-a']]) {
  test(`${kind}: an SSE line over the cap ends the stream with the protocol's error event`, async () => {
    const first = sse(streamEvents[kind]().slice(0, 1));
    const r = await onePlusHealthy(kind, model, { raw: [http(200, SSE_CT, '', { length: false }), first, 'data: {"x":"', 'z'.repeat(5 << 20)] }, { stream: true });
    const events = assertStreamError(r, kind);
    assert.ok(!r.text.includes('zzzz'), 'no byte of the over-long event');
    assert.equal(events.length, 2, r.text.slice(0, 500));
  });
}

test('chat: a non-SSE body under text/event-stream: only the error event', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', http(200, SSE_CT, '<html><body>proxy error</body></html>'), { stream: true });
  const events = assertStreamError(r, 'chat');
  assert.equal(events.length, 1);
  assert.ok(!r.text.includes('html'));
});

test('anthropic: a stream cut inside an event: the whole events, then event: error', async () => {
  const evs = claudeEvents();
  const r = await onePlusHealthy('claude', 'claude-a', { raw: [http(200, SSE_CT, '', { length: false }), sse(evs.slice(0, 3)), 'event: content_block_delta\ndata: {"type":"content_bl'] }, { stream: true });
  const events = assertStreamError(r, 'claude');
  assert.equal(events.length, 4);
  assert.ok(!r.text.includes('"content_bl\n') && !r.text.includes('"content_blevent'), 'the cut event is not passed on');
});

test('responses: a stream without its terminal event ends with response.failed', async () => {
  const r = await onePlusHealthy('resp', 'resp-a', http(200, SSE_CT, sse(respEvents().slice(0, 2))), { stream: true });
  assertStreamError(r, 'resp');
});

test('anthropic: an upstream error event is passed on as the end, no second error', async () => {
  const evs = [claudeStart, { event: 'error', data: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } }];
  const r = await onePlusHealthy('claude', 'claude-a', http(200, SSE_CT, sse(evs)), { stream: true });
  const events = assertStreamError(r, 'claude');
  assert.equal(events.length, 2);
  assert.equal(JSON.parse(events[1].data).error.type, 'overloaded_error');
});

test('chat: CRLF line ends and comments: a complete stream passes whole', async () => {
  const text = sse(chatEvents()).replaceAll('\n', '\r\n');
  const r = await onePlusHealthy('chat', 'chat-a', http(200, SSE_CT, ': hello\r\n\r\n' + text), { stream: true, extra: { stream_options: { include_usage: true } } });
  assert.equal(r.status, 200);
  assert.equal(r.text, ': hello\r\n\r\n' + text);
});

/** A chunked SSE answer that breaks off inside a chunk: a transfer error. */
const cutChunked = (first) => ({
  raw: [http(200, { ...SSE_CT, 'Transfer-Encoding': 'chunked' }, '', { length: false }), chunked(first).subarray(0, -5), '400\r\nevent: content_bl'],
});

// ---- usage: asked for always, charged however the stream ends (SPEC 5, 7) -------

test('chat stream without include_usage: the upstream is asked for usage, the client does not see the chunk, tokens counted', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', http(200, SSE_CT, sse(chatEvents())), { stream: true });
  assert.equal(r.status, 200);
  const events = parseSSE(r.text);
  assert.equal(events.at(-1).data, '[DONE]');
  assert.ok(!events.some((e) => e.data !== '[DONE]' && JSON.parse(e.data).usage), r.text);
  assert.equal(events.length, 3);
  const sent = up.requests[0].json;
  assert.deepEqual(sent.stream_options, { include_usage: true });
  assert.equal(sent.stream, true);
  assert.deepEqual(sent.messages, msgs);
  const rec = await waitRecord(r.id);
  assert.equal(rec.input_tokens, 11);
  assert.equal(rec.output_tokens, 2);
});

test('chat stream with include_usage: false and another option: usage asked, the option kept, chunk stripped', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', http(200, SSE_CT, sse(chatEvents())), { stream: true, extra: { stream_options: { include_usage: false, include_obfuscation: false } } });
  assert.equal(r.status, 200);
  assert.deepEqual(up.requests[0].json.stream_options, { include_usage: true, include_obfuscation: false });
  assert.ok(!parseSSE(r.text).some((e) => e.data !== '[DONE]' && JSON.parse(e.data).usage));
});

test('chat stream with include_usage: false on a route that rewrites the model: both edits, before and after the model', async () => {
  for (const first of [false, true]) {
    up.reset();
    up.script(http(200, SSE_CT, sse(chatEvents())), healthy('chat'));
    const so = '"stream_options":{"include_obfuscation":false,"incl\\u0075de_usage":false}';
    const rest = `"messages":${JSON.stringify(msgs)},"stream":true`;
    const raw = first ? `{${so},"model":"rw-x",${rest}}` : `{"model":"rw-x",${rest},${so}}`;
    const { responses } = await exchange(px.port, [post(PATH.chat, raw, { ...KEY, 'x-request-id': nextId() }, { close: true })]);
    assert.equal(responses[0].status, 200, responses[0].text);
    const sent = up.requests[0];
    assert.equal(sent.json.model, 'up-model', sent.body);
    assert.deepEqual(sent.json.stream_options, { include_obfuscation: false, include_usage: true }, sent.body);
    assert.equal(sent.body.match(/incl(ude|\\u0075de)_usage/g).length, 1, sent.body);
    assert.deepEqual(sent.json.messages, msgs);
  }
});

test('chat stream with stream_options under an escaped name: read as the scan reads it, never a second member (issue 21)', async () => {
  up.reset();
  up.script(http(200, SSE_CT, sse(chatEvents())), healthy('chat'));
  const id = nextId();
  const raw = JSON.stringify(reqBody('chat', 'chat-a', { stream: true })).replace(/}$/, ',"stream_optio\\u006es":{"include_obfuscation":false}}');
  const { responses } = await exchange(px.port, [post(PATH.chat, raw, { ...KEY, 'x-request-id': id }, { close: true })]);
  assert.equal(responses[0].status, 200, responses[0].text);
  const sent = up.requests[0].body;
  assert.equal(sent.match(/"stream_optio(ns|\\u006es)"/g).length, 1, sent);
  assert.deepEqual(up.requests[0].json.stream_options, { include_obfuscation: false, include_usage: true });
});

test('chat stream with include_usage: true: the client gets its usage chunk', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', http(200, SSE_CT, sse(chatEvents())), { stream: true, extra: { stream_options: { include_usage: true } } });
  assert.equal(r.text, sse(chatEvents()));
});

test('a stream cut after message_start is charged its input tokens (tpm, access log)', async () => {
  const id = nextId();
  up.reset();
  up.script(cutChunked(sse([claudeStart])));
  const { responses } = await exchange(px.port, [post(PATH.claude, reqBody('claude', 'claude-a', { stream: true }), { authorization: 'Bearer sk-metered', ...AV, 'x-request-id': id }, { close: true })]);
  assertStreamError(responses[0], 'claude');
  const rec = await waitRecord(id);
  assert.equal(rec.input_tokens, 500);
  // tpm = 100: the 500 tokens put the key in debt
  up.script(healthy('claude'));
  const { responses: r2 } = await exchange(px.port, [post(PATH.claude, reqBody('claude', 'claude-a'), { authorization: 'Bearer sk-metered', ...AV }, { close: true })]);
  assertError(r2[0], 'claude', 429, 'rate_limit_error');
  assert.equal(up.requests.length, 1, 'the limited request never went upstream');
});

test('a translated stream cut after message_start is charged too (Chat client, Anthropic upstream)', async () => {
  const r = await onePlusHealthy('chat', 'xclaude-a', cutChunked(sse([claudeStart])), { stream: true });
  assertStreamError(r, 'chat');
  const rec = await waitRecord(r.id);
  assert.equal(rec.input_tokens, 500);
});

test('a client that disconnects mid-stream is charged what was seen', async () => {
  up.reset();
  up.script({ raw: [http(200, SSE_CT, '', { length: false }), sse([claudeStart])], hang: true });
  const id = nextId();
  const c = await openRaw(px.port, post(PATH.claude, reqBody('claude', 'claude-a', { stream: true }), { ...KEY, ...AV, 'x-request-id': id }));
  await c.reader.until('message_start', 'message_start');
  c.sock.destroy();
  const rec = await waitRecord(id);
  assert.equal(rec.input_tokens, 500);
  assert.equal(rec.error_type, 'client_closed');
});

// ---- upstream headers (SPEC 10) -------------------------------------------------

test('OpenAI-Organization / Project dropped when the upstream sets its own; header = replaces the client header', async () => {
  const r = await onePlusHealthy('chat', 'org-a', healthy('chat'), { headers: { 'OpenAI-Organization': 'org-client', 'OpenAI-Project': 'proj-client', 'User-Agent': 'client-agent' } });
  assert.equal(r.status, 200);
  const h = up.requests[0].headers;
  assert.equal(h['openai-organization'], 'org-gateway');
  assert.equal(h['openai-project'], undefined);
  assert.equal(h['user-agent'], 'gateway-agent');
  assert.equal((up.requests[0].rawHead.match(/^user-agent:/gim) || []).length, 1);
  // without a configured one, the client's are forwarded
  const r2 = await onePlusHealthy('chat', 'chat-a', healthy('chat'), { headers: { 'OpenAI-Organization': 'org-client', 'OpenAI-Project': 'proj-client' } });
  assert.equal(r2.status, 200);
  assert.equal(up.requests[0].headers['openai-organization'], 'org-client');
  assert.equal(up.requests[0].headers['openai-project'], 'proj-client');
});

// ---- the process ----------------------------------------------------------------

// ---- configured secrets never reach a client (SPEC 10, issue 27) -----------------
// Providers echo the key in authentication errors: OpenAI "Incorrect API key
// provided: sk-proj-****...abcd" (a prefix and the last four), others the
// whole key or an ellipsis. Whatever the direction, nothing of it is relayed.

const ECHO = {
  masked: (k) => `${k.slice(0, 8)}${'*'.repeat(k.length - 12)}${k.slice(-4)}`,
  ellipsis: (k) => `${k.slice(0, 6)}...${k.slice(-4)}`,
  tail: (k) => `****${k.slice(-4)}`,
  whole: (k) => k,
};
/** Nothing recognisable of key in text (a client's bytes or a log). */
function assertNoSecret(text, key, what = 'response') {
  assert.ok(!text.includes(key), `${what} holds the whole key: ${text.slice(0, 400)}`);
  assert.ok(!text.includes(key.slice(-4)), `${what} holds the key's last four: ${text.slice(0, 400)}`);
  assert.ok(!text.includes(key.slice(0, 10)), `${what} holds the key's prefix: ${text.slice(0, 400)}`);
}
const openaiAuth = (shown) => JSON.stringify({ error: { message: `Incorrect API key provided: ${shown}. You can find your API key at https://platform.openai.com/account/api-keys.`, type: 'invalid_request_error', param: null, code: 'invalid_api_key' } });

for (const [shape, echo] of Object.entries(ECHO)) {
  for (const [kind, how] of [['chat', 'forwarded as is'], ['claude', 'translated'], ['resp', 'translated']]) {
    test(`an OpenAI 401 echoing the upstream key (${shape}), ${how} to ${kind}: 401, the message kept, no part of the key`, async () => {
      const r = await onePlusHealthy(kind, 'leak-a', http(401, JSON_CT, openaiAuth(echo(LEAK.chat))));
      assert.equal(r.status, 401, r.text);
      assertNoSecret(r.text, LEAK.chat);
      assert.match(r.json.error.message, /^Incorrect API key provided: \*+\. You can find your API key/);
    });
  }
}

test('an Anthropic error echoing the key, to an Anthropic client (as is) and a Chat client (translated)', async () => {
  const body = JSON.stringify({ type: 'error', error: { type: 'authentication_error', message: `invalid x-api-key ${LEAK.ant}` } });
  for (const kind of ['claude', 'chat']) {
    const r = await onePlusHealthy(kind, 'leakant-a', http(401, JSON_CT, body));
    assert.equal(r.status, 401, r.text);
    assertNoSecret(r.text, LEAK.ant);
    assert.match(r.json.error.message, /^invalid x-api-key \*+$/);
  }
});

test('a Gemini error echoing the key (ellipsis), to a Chat client: no part of it', async () => {
  const body = JSON.stringify({ error: { code: 400, message: `API key not valid: ${ECHO.ellipsis(LEAK.gem)}. Please pass a valid API key.`, status: 'INVALID_ARGUMENT' } });
  const r = await onePlusHealthy('chat', 'gem-a', http(400, JSON_CT, body));
  assert.equal(r.status, 400, r.text);
  assertNoSecret(r.text, LEAK.gem);
  assert.equal(up.requests[0].headers['x-goog-api-key'], LEAK.gem, 'the key still goes upstream');
});

test('a client key secret in an upstream error body is scrubbed too', async () => {
  const r = await onePlusHealthy('chat', 'chat-a', http(403, JSON_CT, JSON.stringify({ error: { message: 'key sk-metered is not allowed', type: 'permission_error', param: null, code: null } })));
  assert.equal(r.status, 403);
  assert.ok(!r.text.includes('sk-metered'), r.text);
});

test('an error body over the cap echoing the key: truncated message, no part of the key', async () => {
  const body = JSON.stringify({ error: { message: `Incorrect API key provided: ${ECHO.masked(LEAK.chat)}. ${'x'.repeat(1100 * 1024)}`, type: 'invalid_request_error' } });
  const r = await onePlusHealthy('chat', 'leak-a', http(401, JSON_CT, body));
  assert.equal(r.status, 401);
  assertNoSecret(r.text, LEAK.chat);
});

const chatErrEvent = (shown) => ({ data: { error: { message: `Incorrect API key provided: ${shown}.`, type: 'invalid_request_error', code: 'invalid_api_key' } } });
for (const [kind, how] of [['chat', 'pass-through'], ['claude', 'translated'], ['resp', 'translated']]) {
  test(`a Chat stream error event echoing the key, ${how} to ${kind}: the error event, no part of the key`, async () => {
    const evs = [{ data: chatChunk({ role: 'assistant', content: 'Hi' }) }, chatErrEvent(ECHO.masked(LEAK.chat))];
    const r = await onePlusHealthy(kind, 'leak-a', http(200, SSE_CT, sse(evs)), { stream: true });
    assertStreamError(r, kind);
    assertNoSecret(r.text, LEAK.chat);
  });
}

for (const kind of ['claude', 'chat']) {
  test(`an Anthropic stream error event with the whole key, to ${kind}: no part of it`, async () => {
    const evs = [claudeStart, { event: 'error', data: { type: 'error', error: { type: 'authentication_error', message: `invalid x-api-key ${LEAK.ant}` } } }];
    const r = await onePlusHealthy(kind, 'leakant-a', http(200, SSE_CT, sse(evs)), { stream: true });
    assertStreamError(r, kind);
    assertNoSecret(r.text, LEAK.ant);
  });
}

// ---- one header-value rule (RFC 9110 5.5: no control character) -------------------

test('upstream x-ratelimit-* / anthropic-ratelimit-* values with ESC or BEL are dropped, clean ones kept', async () => {
  const body = chatJson('ctl');
  const r = await onePlusHealthy('chat', 'chat-a', Buffer.from(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Ratelimit-Remaining-Requests: 5\x1b[31m\r\n` +
    `X-Ratelimit-Limit-Tokens: 9\x07\r\nanthropic-ratelimit-requests-limit: 1\x7f\r\nX-Ratelimit-Limit-Requests: 10\r\nretry-after: 1\x01\r\nContent-Length: ${body.length}\r\n\r\n${body}`, 'latin1'));
  if (r.status !== 200) { // the built-in lane's parser refuses the head: also fine
    badGateway(r, 'chat');
    return;
  }
  assert.equal(r.text, body);
  for (const h of ['x-ratelimit-remaining-requests', 'x-ratelimit-limit-tokens', 'anthropic-ratelimit-requests-limit', 'retry-after'])
    assert.ok(!(h in r.headers), `${h} passed back: ${r.head}`);
  assert.equal(r.headers['x-ratelimit-limit-requests'], '10');
  assert.ok(!/[\x00-\x08\x0a-\x1f\x7f]/.test(r.head.replaceAll('\r\n', '')), 'no control character in the head');
});

for (const [what, model] of [['ESC', 'chat-a\u001b[31m'], ['BEL', 'chat-a\u0007'], ['DEL', 'chat-a\u007f'], ['a vertical tab', 'chat\u000ba']]) {
  test(`a model with ${what} never reaches x-proxai-upstream: 400 naming model, nothing sent upstream`, async () => {
    const r = await onePlusHealthy('chat', model, healthy('chat'), { follow: false });
    assertError(r, 'chat', 400, 'invalid_request_error', /model/);
    assert.equal(r.json.error.param, 'model');
    assert.equal(up.requests.length, 0);
    assert.ok(!('x-proxai-upstream' in r.headers));
  });
}

// ---- transfer codings the lanes do not decode (SPEC 10) -------------------------

for (const te of ['gzip, chunked', 'gzip', 'chunked, chunked', '']) {
  for (const [kind, model] of [['chat', 'chat-a'], ['claude', 'chat-a']]) {
    test(`upstream Transfer-Encoding "${te}" (gzip body) to ${kind}: 502 in shape, never the coded bytes`, async () => {
      const z = zlib.gzipSync(chatJson('zipped'));
      const wire = te.includes('chunked') ? chunked(z) : z;
      const r = await onePlusHealthy(kind, model, http(200, { ...JSON_CT, 'Transfer-Encoding': te }, wire, { length: false }));
      badGateway(r, kind);
      assert.ok(!r.text.includes('\x1f'), 'no gzip byte');
    });
  }
}

test('Content-Encoding: gzip on a chunked answer, translated: 502 in shape', async () => {
  const r = await onePlusHealthy('claude', 'chat-a', http(200, { ...JSON_CT, 'Transfer-Encoding': 'chunked', 'Content-Encoding': 'gzip' }, chunked(zlib.gzipSync(chatJson('z'))), { length: false }));
  badGateway(r, 'claude', /Content-Encoding/);
});

// ---- memory on upstream answers (SPEC 10: a small multiple of its size) ------------

const hwm = () => Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync(`/proc/${px.pid}/status`, 'utf8'))[1]) * 1024;
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${px.pid}/status`, 'utf8'))[1]) * 1024;
const SANITIZED = !!process.env.PROXAI_SANITIZED;

test('a translated 8 MB answer of a million small objects: bounded memory (502 in shape, or the answer)', async () => {
  const objs = '{},'.repeat(1 << 20).slice(0, -1) + '';
  const body = chatJson('many').replace('"choices":', `"x":[${objs.slice(0, (8 << 20) - 400)}{}],"choices":`);
  const before = Math.max(hwm(), rss());
  const r = await onePlusHealthy('claude', 'chat-a', http(200, JSON_CT, body));
  if (r.status !== 200) badGateway(r, 'claude');
  const grew = hwm() - before;
  if (!SANITIZED) assert.ok(grew < 64 << 20, `peak RSS grew by ${grew >> 20} MB for an 8 MB answer`);
}, { timeout: 120000 });

test('a translated stream with a 3.9 MB event of small objects: bounded memory, the stream ends in error', async () => {
  const objs = '[1],'.repeat(1000000).slice(0, -1);
  const big = JSON.stringify(chatChunk({ content: 'x' })).replace('"choices":', `"x":[${objs}],"choices":`);
  const evs = [{ data: chatChunk({ role: 'assistant', content: 'Hi' }) }, { data: big }, { data: chatChunk({}, 'stop') }, { data: '[DONE]' }];
  const before = Math.max(hwm(), rss());
  const r = await onePlusHealthy('claude', 'chat-a', http(200, SSE_CT, sse(evs)), { stream: true });
  assertStreamError(r, 'claude');
  const grew = hwm() - before;
  if (!SANITIZED) assert.ok(grew < 64 << 20, `peak RSS grew by ${grew >> 20} MB for a 3.9 MB event`);
}, { timeout: 120000 });

// ---- valid UTF-8 in every JSON the gateway writes; Gemini's path model ---------------

const utf8 = new TextDecoder('utf-8', { fatal: true });

test('a Gemini path model of invalid UTF-8 (%FF): 400 in the Gemini shape, valid UTF-8 everywhere', async () => {
  // the bad bytes first, and after a run of ASCII (read eight bytes at a time)
  for (const model of ['gem-%FF%FE', 'gem-long-ascii-run-%FF', 'gem-long-ascii-run-%C3']) {
    up.reset();
    const id = nextId();
    const body = { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] };
    const { responses } = await exchange(px.port, [post(`/v1beta/models/${model}:generateContent`, body, { ...KEY, 'x-request-id': id }, { close: true })]);
    const r = responses[0];
    assert.equal(r.status, 400, `${model}: ${r.text}`);
    assert.equal(r.json.error.status, 'INVALID_ARGUMENT');
    assert.match(r.json.error.message, /model/);
    assert.equal(up.requests.length, 0);
    utf8.decode(r.body);
    await waitRecord(id);
    utf8.decode(fs.readFileSync(accessLog));
  }
});

test('a Gemini path model with %C3%A9 (valid UTF-8) is served, percent-encoded upstream', async () => {
  const gemJson = JSON.stringify({ candidates: [{ content: { role: 'model', parts: [{ text: 'fine' }] }, finishReason: 'STOP', index: 0 }], usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 1, totalTokenCount: 2 }, modelVersion: 'up' });
  up.reset();
  up.script(http(200, JSON_CT, gemJson));
  const id = nextId();
  const { responses } = await exchange(px.port, [post('/v1beta/models/gem-%C3%A9:generateContent', { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }, { ...KEY, 'x-request-id': id }, { close: true })]);
  assert.equal(responses[0].status, 200, responses[0].text);
  assert.equal(up.requests[0].path, '/v1beta/models/gem-%C3%A9:generateContent');
  // an unreserved run, then bytes the upstream path percent-encodes ('%', ' ', '/', '~' kept)
  up.reset();
  up.script(http(200, JSON_CT, gemJson));
  const r2 = await exchange(px.port, [post('/v1beta/models/gem-a.b_c~d%25e%20f%2Fg%C3%A9h:generateContent', { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }, { ...KEY, 'x-request-id': nextId() }, { close: true })]);
  assert.equal(r2.responses[0].status, 200, r2.responses[0].text);
  assert.equal(up.requests[0].path, '/v1beta/models/gem-a.b_c~d%25e%20f%2Fg%C3%A9h:generateContent');
});

test('an error message with a long multibyte model is cut at a character, valid UTF-8 (body and access log)', async () => {
  const model = `nowhere-${'é'.repeat(150)}`;
  const r = await onePlusHealthy('chat', model, healthy('chat'), { follow: false });
  assert.equal(r.status, 404, r.text);
  const msg = JSON.parse(utf8.decode(r.body)).error.message;
  assert.ok(!msg.includes('\ufffd'), `cut inside a character: ${msg}`);
  assert.match(msg, /^no route for model 'nowhere-é+'$/);
  await waitRecord(r.id);
  utf8.decode(fs.readFileSync(accessLog));
});

test('Gemini countTokens with a long model: the URL model and generateContentRequest.model agree', async () => {
  for (const model of [`gem-${'m'.repeat(400)}`, `gem-${'é'.repeat(200)}`]) {
    up.reset();
    up.script(http(200, JSON_CT, '{"totalTokens":7}'));
    const body = { model, messages: [{ role: 'user', content: 'hi' }] };
    const { responses } = await exchange(px.port, [post('/v1/messages/count_tokens', body, { ...KEY, ...AV }, { close: true })]);
    assert.equal(responses[0].status, 200, responses[0].text);
    assert.equal(responses[0].json.input_tokens, 7);
    const req = up.requests[0];
    const m = /^\/v1beta\/models\/(.+):countTokens$/.exec(req.path);
    assert.ok(m, req.path);
    assert.equal(decodeURIComponent(m[1]), model);
    assert.equal(req.json.generateContentRequest.model, `models/${model}`);
  }
});

test('no configured secret in the gateway\'s log lines', async () => {
  const { stderr } = px.logs();
  for (const k of Object.values(LEAK)) assertNoSecret(stderr, k, 'stderr');
  assertNoSecret(fs.readFileSync(accessLog, 'latin1'), LEAK.chat, 'access log');
});

test('the gateway still serves, with its descriptors back to the baseline', async () => {
  const r = await onePlusHealthy('claude', 'claude-a', healthy('claude'));
  assert.equal(r.status, 200);
  up.reset(); // no upstream connection left open
  await waitFor(() => fdCount() <= fdBaseline, { timeout: 10000, what: `descriptors back to ${fdBaseline} (now ${fdCount()})` });
});

test('the gateway exits cleanly without a sanitizer report', async () => {
  const res = await fetch(`${px.url}/healthz`);
  assert.equal(res.status, 200);
  await res.arrayBuffer();
  const info = await px.stop('SIGTERM');
  assert.equal(info.code, 0, px.logs().stderr.slice(-2000));
  const err = px.logs().stderr;
  assert.ok(!/AddressSanitizer|LeakSanitizer|runtime error/.test(err), err.slice(-4000));
  await up.close();
});

await run();
