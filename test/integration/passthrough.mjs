// Same-protocol pass-through through the real proxai binary against the C mock
// upstream, driven by the official SDKs (openai, @anthropic-ai/sdk) and fetch:
// bodies forwarded byte-identical (or only `model` changed with a rewrite),
// credentials, forwarded headers, upstream errors as the SDK's typed errors,
// retries and fallbacks, client keys, gateway errors in the client's shape,
// /v1/models, /healthz, /readyz, /metrics.
import assert from 'node:assert/strict';
import http from 'node:http';
import { startMock, startProxai, test, run, parseSSE, waitFor } from './lib/harness.mjs';
import * as C from './lib/config.mjs';
import { post, rawClient, parseResponses } from './lib/client.mjs';

let OpenAI, Anthropic;
try {
  ({ default: OpenAI } = await import('openai'));
  ({ default: Anthropic } = await import('@anthropic-ai/sdk'));
} catch (e) {
  console.error(`cannot load the SDKs (run \`npm ci\` in test/): ${e.message}`);
  process.exit(1);
}

const CLIENT_SECRET = 'client-secret-never-upstream';
const mock = await startMock();

// A second upstream that records the raw request bytes (the mock records the
// parsed JSON only), to prove byte-identical forwarding.
const raw = [];
const rawServer = http.createServer((req, res) => {
  const parts = [];
  req.on('data', (d) => parts.push(d));
  req.on('end', () => {
    const body = Buffer.concat(parts);
    raw.push({ path: req.url, headers: req.headers, body });
    let model = 'x';
    try {
      model = JSON.parse(body).model;
    } catch {
      // not JSON
    }
    let out;
    if (req.url.endsWith('/chat/completions')) {
      out = { id: 'chatcmpl-raw', object: 'chat.completion', created: 1, model, choices: [{ index: 0, message: { role: 'assistant', content: 'raw ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } };
    } else if (req.url.endsWith('/responses')) {
      out = { id: 'resp_raw', object: 'response', created_at: 1, status: 'completed', model, output: [{ type: 'message', id: 'msg_raw', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: 'raw ok', annotations: [] }] }], usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 } };
    } else {
      out = { id: 'msg_raw', type: 'message', role: 'assistant', model, content: [{ type: 'text', text: 'raw ok' }], stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } };
    }
    const s = JSON.stringify(out);
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(s) });
    res.end(s);
  });
});
await new Promise((resolve) => rawServer.listen(0, '127.0.0.1', resolve));
const rawUrl = `http://127.0.0.1:${rawServer.address().port}`;

const px = await startProxai(
  C.server() +
  C.upstream('oc', 'chat', mock.url, { api_key: 'up-chat-key' }) +
  C.upstream('or', 'responses', mock.url, { api_key: 'up-resp-key' }) +
  C.upstream('an', 'anthropic', mock.url, { api_key: 'up-ant-key' }) +
  C.upstream('oc_retry', 'chat', mock.url, { api_key: 'up-chat-key', retries: 1 }) +
  C.upstream('oc_fb', 'chat', `${mock.url}/fb`, { api_key: 'up-fb-key' }) +
  C.upstream('raw_oc', 'chat', rawUrl, { api_key: 'raw-key' }) +
  C.upstream('raw_or', 'responses', rawUrl, { api_key: 'raw-key' }) +
  C.upstream('raw_an', 'anthropic', rawUrl, { api_key: 'raw-key' }) +
  C.route('raw-chat', { upstream: 'raw_oc' }) +
  C.route('raw-chat-rw', { upstream: 'raw_oc', model: 'raw-upstream-model' }) +
  C.route('raw-resp', { upstream: 'raw_or' }) +
  C.route('raw-resp-rw', { upstream: 'raw_or', model: 'raw-upstream-model' }) +
  C.route('raw-claude', { upstream: 'raw_an' }) +
  C.route('raw-claude-rw', { upstream: 'raw_an', model: 'raw-upstream-model' }) +
  C.route('chat-rw', { upstream: 'oc', model: 'up-chat-model' }) +
  C.route('resp-rw', { upstream: 'or', model: 'up-resp-model' }) +
  C.route('claude-rw', { upstream: 'an', model: 'up-claude-model' }) +
  C.route('retry-*', { upstream: 'oc_retry' }) +
  C.route('fb-*', { upstream: 'oc', fallback: 'oc_fb' }) +
  C.route('claude-*', { upstream: 'an' }) +
  C.route('resp-*', { upstream: 'or' }) +
  C.route('gpt-*', { upstream: 'oc' }));

const openai = new OpenAI({ baseURL: `${px.url}/v1`, apiKey: CLIENT_SECRET, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: px.url, apiKey: CLIENT_SECRET, maxRetries: 0 });
const msgs = [{ role: 'user', content: 'hi' }];

/** The client's credential must never reach the upstream, in any header. */
function assertNoClientSecret(rec) {
  for (const [k, v] of Object.entries(rec.headers)) {
    assert.ok(!String(v).includes(CLIENT_SECRET), `client secret forwarded upstream in ${k}: ${v}`);
  }
}

function assertOpenAIError(r, status, type) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && r.json.error, `not an OpenAI error body: ${r.text}`);
  assert.equal(r.json.error.type, type, r.text);
  assert.equal(typeof r.json.error.message, 'string');
  assert.ok(r.json.error.message.length > 0);
  assert.ok('param' in r.json.error && 'code' in r.json.error, r.text);
  assert.ok(r.headers.get('x-request-id'));
}

function assertAnthropicError(r, status, type) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json, r.text);
  assert.equal(r.json.type, 'error', r.text);
  assert.equal(r.json.error.type, type, r.text);
  assert.equal(typeof r.json.error.message, 'string');
  assert.ok(r.json.error.message.length > 0);
  assert.ok(r.headers.get('x-request-id'));
}

// ---- the three pairs through the SDKs ---------------------------------------

test('chat: SDK non-streaming and streaming, upstream key, no client credential', async () => {
  await mock.reset();
  const c = await openai.chat.completions.create({ model: 'gpt-4o', messages: msgs });
  assert.equal(c.choices[0].message.content, 'Hello from mock');
  assert.equal(c.model, 'gpt-4o');
  const final = await openai.chat.completions.stream({ model: 'gpt-4o', messages: msgs }).finalChatCompletion();
  assert.equal(final.choices[0].message.content, 'Hello from mock');
  assert.equal(final.model, 'gpt-4o');
  const recs = await mock.requests();
  assert.equal(recs.length, 2);
  for (const rec of recs) {
    assert.equal(rec.path, '/v1/chat/completions');
    assert.equal(rec.headers.authorization, 'Bearer up-chat-key');
    assert.equal(rec.headers['x-api-key'], undefined);
    assertNoClientSecret(rec);
  }
  assert.equal(recs[1].body.stream, true);
});

test('responses: SDK non-streaming and streaming', async () => {
  await mock.reset();
  const r = await openai.responses.create({ model: 'resp-a', input: 'hi' });
  assert.equal(r.output_text, 'Hello from mock');
  assert.equal(r.model, 'resp-a');
  const final = await openai.responses.stream({ model: 'resp-a', input: 'hi' }).finalResponse();
  assert.equal(final.output_text, 'Hello from mock');
  assert.equal(final.status, 'completed');
  const recs = await mock.requests();
  assert.equal(recs.length, 2);
  for (const rec of recs) {
    assert.equal(rec.path, '/v1/responses');
    assert.equal(rec.headers.authorization, 'Bearer up-resp-key');
    assertNoClientSecret(rec);
  }
});

test('anthropic: SDK non-streaming and streaming, x-api-key + anthropic-version upstream', async () => {
  await mock.reset();
  const m = await anthropic.messages.create({ model: 'claude-x', max_tokens: 50, messages: msgs });
  assert.equal(m.content[0].text, 'Hello from mock');
  assert.equal(m.model, 'claude-x');
  const stream = anthropic.messages.stream({ model: 'claude-x', max_tokens: 50, messages: msgs });
  let text = '';
  stream.on('text', (t) => (text += t));
  const final = await stream.finalMessage();
  assert.equal(text, 'Hello from mock');
  assert.equal(final.content[0].text, 'Hello from mock');
  assert.equal(final.stop_reason, 'end_turn');
  const recs = await mock.requests();
  assert.equal(recs.length, 2);
  for (const rec of recs) {
    assert.equal(rec.path, '/v1/messages');
    assert.equal(rec.headers['x-api-key'], 'up-ant-key');
    assert.equal(rec.headers.authorization, undefined, 'no Authorization header to an Anthropic upstream');
    assert.ok(rec.headers['anthropic-version'], 'anthropic-version sent upstream');
    assertNoClientSecret(rec);
  }
  // Without a client anthropic-version, the upstream default is sent.
  await mock.reset();
  const r = await post(px.url, '/v1/messages', { model: 'claude-x', max_tokens: 5, messages: msgs }, { 'x-api-key': CLIENT_SECRET });
  assert.equal(r.status, 200, r.text);
  const [rec] = await mock.requests();
  assert.equal(rec.headers['anthropic-version'], '2023-06-01');
  assert.equal(rec.headers['x-api-key'], 'up-ant-key');
  assertNoClientSecret(rec);
});

// ---- byte-identical forwarding and model rewrite ----------------------------

// Odd whitespace, key order, escapes and non-ASCII: any re-serialisation shows.
const oddBodies = {
  chat: (model) => `{ "messages" : [ {"role":"user","content":"caf\\u00e9 \u00fc  \\"q\\""} ],\n  "temperature":0.50, "model" :"${model}",  "n":1 }`,
  resp: (model) => `{"input":"h\u00e9llo\\n  x","model":  "${model}","metadata":{"z":"1","a":"2"},"max_output_tokens":16}`,
  claude: (model) => `{"max_tokens":10 ,"model":"${model}","messages":[{"role":"user","content":[{"type":"text","text":"\\u2603  snow"}]}],"temperature":1.0}`,
};
const rawPaths = { chat: '/v1/chat/completions', resp: '/v1/responses', claude: '/v1/messages' };

for (const kind of ['chat', 'resp', 'claude']) {
  test(`${kind}: body forwarded byte-identical without rewrite, only model changed with rewrite`, async () => {
    raw.length = 0;
    const body = oddBodies[kind](`raw-${kind}`);
    const r1 = await post(px.url, rawPaths[kind], body, { authorization: `Bearer ${CLIENT_SECRET}`, 'anthropic-version': '2023-06-01' });
    assert.equal(r1.status, 200, r1.text);
    assert.equal(raw.length, 1);
    assert.equal(raw[0].body.toString('utf8'), body);
    assert.ok(raw[0].body.equals(Buffer.from(body, 'utf8')), 'bytes differ');
    assert.equal(r1.json.model, `raw-${kind}`);
    assert.equal(r1.headers.get('x-proxai-upstream'), `raw_${kind === 'chat' ? 'oc' : kind === 'resp' ? 'or' : 'an'}/raw-${kind}`);

    const body2 = oddBodies[kind](`raw-${kind}-rw`);
    const r2 = await post(px.url, rawPaths[kind], body2, { authorization: `Bearer ${CLIENT_SECRET}`, 'anthropic-version': '2023-06-01' });
    assert.equal(r2.status, 200, r2.text);
    assert.equal(raw.length, 2);
    assert.equal(raw[1].body.toString('utf8'), oddBodies[kind]('raw-upstream-model'), 'only the model value may change');
    // The response carried the upstream name; the client sees its own.
    assert.equal(r2.json.model, `raw-${kind}-rw`);
    assert.ok(!r2.text.includes('raw-upstream-model'), r2.text);
    assert.equal(r2.headers.get('x-proxai-upstream'), `raw_${kind === 'chat' ? 'oc' : kind === 'resp' ? 'or' : 'an'}/raw-upstream-model`);
    for (const rec of raw) assert.ok(!JSON.stringify(rec.headers).includes(CLIENT_SECRET));
  });
}

test('a 300 KB body sent in pieces, a second request pipelined after its last byte: both forwarded byte-identical', async () => {
  // the first read holds the head and the body's start; the rest is read
  // straight into the body buffer, never past the body (the next request)
  raw.length = 0;
  const big = JSON.stringify({
    model: 'raw-chat',
    messages: [{ role: 'user', content: 'caf\u00e9 "q" \\ line\n'.repeat(15000) }],
  });
  const small = oddBodies.chat('raw-chat');
  const head = (b) => `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${CLIENT_SECRET}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n`;
  const bytes = Buffer.concat([Buffer.from(head(big)), Buffer.from(big), Buffer.from(head(small)), Buffer.from(small)]);
  const bigEnd = Buffer.byteLength(head(big)) + Buffer.byteLength(big);
  const c = rawClient(Number(new URL(px.url).port));
  await c.connected;
  // cuts: inside the head, at 40 KB, at 130 KB, and the body's last bytes
  // with the next request's head in one write
  for (const [a, b] of [[0, 60], [60, 40000], [40000, 130000], [130000, bigEnd - 7], [bigEnd - 7, bytes.length]]) {
    c.sock.write(bytes.subarray(a, b));
    await new Promise((r) => setTimeout(r, 30));
  }
  await c.waitFor((d) => parseResponses(d).responses.length >= 2, 20000, 'two responses');
  const rs = parseResponses(c.st.data).responses;
  assert.deepEqual(rs.map((r) => r.status), [200, 200]);
  c.sock.destroy();
  assert.equal(raw.length, 2);
  assert.ok(raw[0].body.equals(Buffer.from(big, 'utf8')), 'the large body differs');
  assert.ok(raw[1].body.equals(Buffer.from(small, 'utf8')), 'the pipelined body differs');
});

test('model rewrite: mock sees only model changed; SDK sees requested name (3 pairs, stream and not)', async () => {
  await mock.reset();
  const c = await openai.chat.completions.create({ model: 'chat-rw', messages: msgs, temperature: 0.5 });
  assert.equal(c.model, 'chat-rw');
  const cs = await openai.chat.completions.stream({ model: 'chat-rw', messages: msgs }).finalChatCompletion();
  assert.equal(cs.model, 'chat-rw');
  const r = await openai.responses.create({ model: 'resp-rw', input: 'hi' });
  assert.equal(r.model, 'resp-rw');
  const rs = await openai.responses.stream({ model: 'resp-rw', input: 'hi' }).finalResponse();
  assert.equal(rs.model, 'resp-rw');
  const m = await anthropic.messages.create({ model: 'claude-rw', max_tokens: 9, messages: msgs });
  assert.equal(m.model, 'claude-rw');
  const ms = await anthropic.messages.stream({ model: 'claude-rw', max_tokens: 9, messages: msgs }).finalMessage();
  assert.equal(ms.model, 'claude-rw');
  const recs = await mock.requests();
  assert.deepEqual(
    recs.map((x) => x.body.model),
    ['up-chat-model', 'up-chat-model', 'up-resp-model', 'up-resp-model', 'up-claude-model', 'up-claude-model'],
  );
  assert.deepEqual(recs[0].body, { model: 'up-chat-model', messages: msgs, temperature: 0.5 });
  assert.deepEqual(recs[4].body, { model: 'up-claude-model', max_tokens: 9, messages: msgs });
});

const streamCases = [
  { kind: 'chat', path: '/v1/chat/completions', model: 'chat-rw', up: 'oc/up-chat-model', body: (model) => ({ model, messages: msgs, stream: true }) },
  { kind: 'responses', path: '/v1/responses', model: 'resp-rw', up: 'or/up-resp-model', body: (model) => ({ model, input: 'hi', stream: true }) },
  { kind: 'anthropic', path: '/v1/messages', model: 'claude-rw', up: 'an/up-claude-model', body: (model) => ({ model, max_tokens: 9, messages: msgs, stream: true }) },
];

/** Every `model` value found anywhere in an object tree. */
function modelsIn(v, out = []) {
  if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      if (k === 'model') out.push(x);
      else modelsIn(x, out);
    }
  }
  return out;
}

for (const sc of streamCases) {
  test(`${sc.kind}: raw SSE with model rewrite carries the requested name in every event; headers`, async () => {
    await mock.reset();
    const r = await post(px.url, sc.path, sc.body(sc.model), { 'x-request-id': 'client-req-42', 'anthropic-version': '2023-06-01' });
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers.get('content-type'), /text\/event-stream/);
    assert.equal(r.headers.get('x-proxai-upstream'), sc.up);
    assert.equal(r.headers.get('x-request-id'), 'client-req-42');
    assert.equal(r.headers.get('cache-control'), 'no-cache');
    assert.equal(r.headers.get('x-accel-buffering'), 'no');
    assert.ok(!r.text.includes('up-chat-model') && !r.text.includes('up-resp-model') && !r.text.includes('up-claude-model'), r.text);
    const events = parseSSE(r.text);
    let withModel = 0;
    let text = '';
    for (const ev of events) {
      if (ev.data === '[DONE]') continue;
      const j = JSON.parse(ev.data);
      const models = modelsIn(j);
      for (const mm of models) assert.equal(mm, sc.model, `event ${ev.data}`);
      if (models.length) withModel++;
      if (sc.kind === 'chat') text += j.choices?.[0]?.delta?.content ?? '';
      if (sc.kind === 'responses' && j.type === 'response.output_text.delta') text += j.delta;
      if (sc.kind === 'anthropic' && j.type === 'content_block_delta') text += j.delta.text;
    }
    assert.equal(text, 'Hello from mock');
    if (sc.kind === 'chat') {
      assert.equal(withModel, events.length - 1); // every chunk but [DONE]
      assert.equal(events.at(-1).data, '[DONE]');
    }
    if (sc.kind === 'responses') assert.ok(withModel >= 2, 'created + completed carry response.model');
    if (sc.kind === 'anthropic') assert.ok(withModel >= 1, 'message_start carries the model');
    const [rec] = await mock.requests();
    assert.equal(rec.headers['x-request-id'], 'client-req-42', 'client x-request-id forwarded');
  });
}

test('x-request-id: minted when absent, echoed when sent (non-streaming)', async () => {
  const a = await post(px.url, '/v1/chat/completions', { model: 'gpt-4o', messages: msgs });
  assert.equal(a.status, 200);
  assert.ok(a.headers.get('x-request-id'));
  assert.equal(a.headers.get('x-proxai-upstream'), 'oc/gpt-4o');
  const b = await post(px.url, '/v1/chat/completions', { model: 'gpt-4o', messages: msgs }, { 'x-request-id': 'mine-1' });
  assert.equal(b.headers.get('x-request-id'), 'mine-1');
  const c = await post(px.url, '/v1/messages', { model: 'claude-x', max_tokens: 5, messages: msgs }, { 'x-request-id': 'mine-2' });
  assert.equal(c.headers.get('x-request-id'), 'mine-2');
  assert.equal(c.headers.get('x-proxai-upstream'), 'an/claude-x');
});

test('anthropic-beta and openai-organization forwarded; ?beta=true and paths without /v1 work', async () => {
  await mock.reset();
  const m = await anthropic.messages.create(
    { model: 'claude-x', max_tokens: 5, messages: msgs },
    { headers: { 'anthropic-beta': 'tools-2024-04-04' } },
  );
  assert.equal(m.content[0].text, 'Hello from mock');
  await openai.chat.completions.create({ model: 'gpt-4o', messages: msgs }, { headers: { 'openai-organization': 'org-abc', 'openai-project': 'proj-1' } });
  const q = await post(px.url, '/v1/messages?beta=true', { model: 'claude-x', max_tokens: 5, messages: msgs }, { 'anthropic-version': '2023-06-01' });
  assert.equal(q.status, 200, q.text);
  assert.equal(q.json.content[0].text, 'Hello from mock');
  const p1 = await post(px.url, '/chat/completions', { model: 'gpt-4o', messages: msgs });
  assert.equal(p1.status, 200, p1.text);
  assert.equal(p1.json.choices[0].message.content, 'Hello from mock');
  const p2 = await post(px.url, '/responses', { model: 'resp-a', input: 'x' });
  assert.equal(p2.status, 200, p2.text);
  assert.equal(p2.json.status, 'completed');
  const p3 = await post(px.url, '/messages', { model: 'claude-x', max_tokens: 5, messages: msgs });
  assert.equal(p3.status, 200, p3.text);
  assert.equal(p3.json.type, 'message');
  const recs = await mock.requests();
  assert.equal(recs.length, 6);
  assert.equal(recs[0].headers['anthropic-beta'], 'tools-2024-04-04');
  assert.equal(recs[1].headers['openai-organization'], 'org-abc');
  assert.equal(recs[1].headers['openai-project'], 'proj-1');
  assert.deepEqual(recs.slice(2).map((x) => x.path), ['/v1/messages', '/v1/chat/completions', '/v1/responses', '/v1/messages']);
});

test('anthropic count_tokens is forwarded to an Anthropic upstream (with and without model rewrite)', async () => {
  await mock.reset();
  const body = { model: 'claude-x', messages: msgs };
  const r = await post(px.url, '/v1/messages/count_tokens', body, { 'anthropic-version': '2023-06-01', 'x-api-key': CLIENT_SECRET });
  assert.equal(r.status, 200, r.text);
  assert.ok(Number.isInteger(r.json.input_tokens) && r.json.input_tokens > 0, r.text);
  const r2 = await post(px.url, '/v1/messages/count_tokens', { model: 'claude-rw', messages: msgs }, { 'anthropic-version': '2023-06-01' });
  assert.equal(r2.status, 200, r2.text);
  assert.ok(Number.isInteger(r2.json.input_tokens), r2.text);
  const sdk = await anthropic.messages.countTokens({ model: 'claude-x', messages: msgs });
  assert.ok(sdk.input_tokens > 0);
  const recs = await mock.requests();
  assert.equal(recs.length, 3);
  assert.deepEqual(recs.map((x) => x.path), ['/v1/messages/count_tokens', '/v1/messages/count_tokens', '/v1/messages/count_tokens']);
  assert.deepEqual(recs[0].body, body);
  assert.equal(recs[1].body.model, 'up-claude-model');
  assert.equal(recs[0].headers['x-api-key'], 'up-ant-key');
  for (const rec of recs) assertNoClientSecret(rec);
});

test('hop-by-hop headers are not forwarded; the upstream request id comes back', async () => {
  await mock.reset();
  const body = JSON.stringify({ model: 'claude-x', max_tokens: 5, messages: msgs });
  const res = await new Promise((resolve, reject) => {
    const q = http.request(`${px.url}/v1/messages`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'content-length': Buffer.byteLength(body),
        'proxy-authorization': 'Basic c2VjcmV0', te: 'trailers', connection: 'keep-alive, x-hop-named', 'x-hop-named': '1',
        'keep-alive': 'timeout=5', upgrade: 'h2c', 'x-api-key': CLIENT_SECRET,
      },
    }, (r) => {
      let t = '';
      r.setEncoding('utf8');
      r.on('data', (d) => (t += d));
      r.on('end', () => resolve({ status: r.statusCode, headers: r.headers, text: t }));
    });
    q.on('error', reject);
    q.end(body);
  });
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers['request-id'] || '', /^req_mock\d+$/, 'upstream request-id passed back');
  assert.ok(res.headers['x-request-id']);
  assert.equal(res.headers['content-length'], String(Buffer.byteLength(res.text)));
  const [rec] = await mock.requests();
  for (const h of ['proxy-authorization', 'te', 'x-hop-named', 'keep-alive', 'upgrade']) {
    assert.equal(rec.headers[h], undefined, `hop-by-hop header forwarded: ${h}`);
  }
  assert.notEqual((rec.headers.connection || '').toLowerCase().includes('x-hop-named'), true);
  assertNoClientSecret(rec);
});

for (const sc of [
  { kind: 'chat', path: '/v1/chat/completions', body: { model: 'gpt-4o', messages: msgs, stream: true }, up: '/chat/completions' },
  { kind: 'responses', path: '/v1/responses', body: { model: 'resp-a', input: 'hi', stream: true }, up: '/responses' },
  { kind: 'anthropic', path: '/v1/messages', body: { model: 'claude-rw', max_tokens: 5, messages: msgs, stream: true }, up: '/v1/messages' },
]) {
  test(`${sc.kind}: stream events are forwarded as they arrive (first event before the upstream finished)`, async () => {
    await mock.reset();
    await mock.script([{ default: true, path: sc.up, delay_ms: 250 }]);
    const res = await fetch(px.url + sc.path, { method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }, body: JSON.stringify(sc.body) });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    let text = '';
    while (!text.includes('\n\n')) {
      const { value, done } = await reader.read();
      assert.ok(!done, 'stream ended before the first event');
      text += Buffer.from(value).toString();
    }
    const st = await mock.stats();
    assert.equal(st.responses_completed, 0, 'the client got its first event only after the upstream had finished');
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
    assert.ok(parseSSE(text).length >= 5, text);
    assert.equal((await mock.stats()).responses_completed, 1);
  });
}

// ---- upstream errors ---------------------------------------------------------

const rl429 = (type) => ({
  status: 429,
  headers: { 'retry-after': '7', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-limit-requests': '100', 'anthropic-ratelimit-requests-remaining': '0' },
  body: type === 'anthropic'
    ? { type: 'error', error: { type: 'rate_limit_error', message: 'slow down please' } }
    : { error: { message: 'slow down please', type: 'rate_limit_error', param: null, code: 'rate_limit_exceeded' } },
});
const e500 = (type) => ({
  status: 500,
  body: type === 'anthropic'
    ? { type: 'error', error: { type: 'api_error', message: 'upstream exploded' } }
    : { error: { message: 'upstream exploded', type: 'server_error', param: null, code: null } },
});

async function expectError(p, Cls, status) {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof Cls, `expected ${Cls.name}, got ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
    assert.equal(e.status, status);
    return e;
  }
  assert.fail(`expected ${Cls.name}`);
}

test('chat: upstream 429 and 500 surface as openai.RateLimitError / InternalServerError', async () => {
  await mock.reset();
  await mock.script([rl429('openai'), e500('openai'), { ...rl429('openai'), match: '"stream":true' }]);
  const e1 = await expectError(openai.chat.completions.create({ model: 'gpt-4o', messages: msgs }), OpenAI.RateLimitError, 429);
  assert.match(e1.message, /slow down please/);
  assert.equal(e1.headers.get('retry-after'), '7');
  assert.equal(e1.headers.get('x-ratelimit-remaining-requests'), '0');
  assert.equal(e1.headers.get('x-ratelimit-limit-requests'), '100');
  assert.ok(e1.headers.get('x-request-id'));
  const e2 = await expectError(openai.chat.completions.create({ model: 'gpt-4o', messages: msgs }), OpenAI.InternalServerError, 500);
  assert.match(e2.message, /upstream exploded/);
  const e3 = await expectError(openai.chat.completions.stream({ model: 'gpt-4o', messages: msgs }).finalChatCompletion(), OpenAI.RateLimitError, 429);
  assert.match(e3.message, /slow down please/);
  assert.equal((await mock.stats()).requests, 3, 'retries = 0: one upstream request each');
});

test('responses: upstream 429 and 500 surface as typed errors', async () => {
  await mock.reset();
  await mock.script([rl429('openai'), e500('openai')]);
  const e1 = await expectError(openai.responses.create({ model: 'resp-a', input: 'x' }), OpenAI.RateLimitError, 429);
  assert.match(e1.message, /slow down please/);
  assert.equal(e1.headers.get('retry-after'), '7');
  assert.equal(e1.headers.get('x-ratelimit-limit-requests'), '100');
  const e2 = await expectError(openai.responses.stream({ model: 'resp-a', input: 'x' }).finalResponse(), OpenAI.InternalServerError, 500);
  assert.match(e2.message, /upstream exploded/);
});

test('anthropic: upstream 429 and 500 surface as Anthropic.RateLimitError / InternalServerError', async () => {
  await mock.reset();
  await mock.script([rl429('anthropic'), e500('anthropic'), { status: 529, body: { type: 'error', error: { type: 'overloaded_error', message: 'busy busy' } } }]);
  const e1 = await expectError(anthropic.messages.create({ model: 'claude-x', max_tokens: 5, messages: msgs }), Anthropic.RateLimitError, 429);
  assert.match(e1.message, /slow down please/);
  assert.equal(e1.headers.get('retry-after'), '7');
  assert.equal(e1.headers.get('anthropic-ratelimit-requests-remaining'), '0');
  assert.equal(e1.error.type, 'error');
  assert.equal(e1.error.error.type, 'rate_limit_error');
  const e2 = await expectError(anthropic.messages.stream({ model: 'claude-x', max_tokens: 5, messages: msgs }).finalMessage(), Anthropic.InternalServerError, 500);
  assert.match(e2.message, /upstream exploded/);
  const e3 = await expectError(anthropic.messages.create({ model: 'claude-x', max_tokens: 5, messages: msgs }), Anthropic.APIError, 529);
  assert.match(e3.message, /busy busy/);
});

test('retries = 1: a 500 then a 200 succeeds, the mock saw 2 requests', async () => {
  await mock.reset();
  await mock.script([e500('openai')]);
  const c = await openai.chat.completions.create({ model: 'retry-1', messages: msgs });
  assert.equal(c.choices[0].message.content, 'Hello from mock');
  const recs = await mock.requests();
  assert.equal(recs.length, 2);
  assert.deepEqual(recs[0].body, recs[1].body);
  // streaming too
  await mock.reset();
  await mock.script([e500('openai')]);
  const s = await openai.chat.completions.stream({ model: 'retry-1', messages: msgs }).finalChatCompletion();
  assert.equal(s.choices[0].message.content, 'Hello from mock');
  assert.equal((await mock.requests()).length, 2);
});

test('fallback upstream is used when the first keeps failing', async () => {
  // primary: ${mock}/v1 (retries 0), fallback: ${mock}/fb/v1 (different path and key).
  await mock.reset();
  await mock.script([{ ...e500('openai'), repeat: true, match: 'fb-model' }]);
  // All requests for fb-model fail -> both fail: the client sees the fallback's 500.
  const bad = await post(px.url, '/v1/chat/completions', { model: 'fb-model', messages: msgs });
  assert.equal(bad.status, 500, bad.text);
  let recs = await mock.requests();
  assert.deepEqual(recs.map((r) => r.path), ['/v1/chat/completions', '/fb/v1/chat/completions']);
  assert.equal(recs[1].headers.authorization, 'Bearer up-fb-key');
  // Primary fails, fallback answers.
  await mock.reset();
  await mock.script([{ ...e500('openai'), match: 'fb-model' }]);
  const good = await openai.chat.completions.create({ model: 'fb-model', messages: msgs });
  assert.equal(good.choices[0].message.content, 'Hello from mock');
  assert.equal(good.model, 'fb-model');
  recs = await mock.requests();
  assert.deepEqual(recs.map((r) => r.path), ['/v1/chat/completions', '/fb/v1/chat/completions']);
  assert.deepEqual(recs[0].body, recs[1].body);
});

test('retries honour retry-after: a 429 (retry-after: 1) then a 200 succeeds on the retry', async () => {
  await mock.reset();
  await mock.script([{ ...rl429('openai'), headers: { 'retry-after': '1' } }]);
  const c = await openai.chat.completions.create({ model: 'retry-2', messages: msgs });
  assert.equal(c.choices[0].message.content, 'Hello from mock');
  assert.equal((await mock.requests()).length, 2);
});

test('upstream connections are reused across requests', async () => {
  await mock.reset();
  for (let i = 0; i < 4; i++) await openai.chat.completions.create({ model: 'gpt-4o', messages: msgs });
  await openai.chat.completions.stream({ model: 'gpt-4o', messages: msgs }).finalChatCompletion();
  const st = await mock.stats();
  assert.equal(st.requests, 5);
  assert.equal(st.connections_total, 1, JSON.stringify(st));
});

test('a client that disconnects before the upstream answered cancels the upstream request', async () => {
  await mock.reset();
  await mock.script([{ path: '/chat/completions', headers_delay_ms: 5000, body: { never: true } }]);
  const ac = new AbortController();
  const p = fetch(`${px.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'gpt-4o', messages: msgs }), signal: ac.signal });
  await waitFor(async () => (await mock.stats()).requests === 1, { what: 'request upstream' });
  ac.abort();
  await assert.rejects(p);
  const st = await waitFor(async () => {
    const x = await mock.stats();
    return x.connections_closed_by_peer >= 1 ? x : null;
  }, { timeout: 4000, what: 'upstream connection closed by proxai' });
  assert.equal(st.responses_completed, 0);
});

// ---- gateway-generated errors and endpoints -----------------------------------

test('no route -> 404 in the client protocol shape', async () => {
  assertOpenAIError(await post(px.url, '/v1/chat/completions', { model: 'nothing-matches', messages: msgs }), 404, 'not_found_error');
  assertOpenAIError(await post(px.url, '/v1/responses', { model: 'nothing-matches', input: 'x' }), 404, 'not_found_error');
  assertAnthropicError(await post(px.url, '/v1/messages', { model: 'nothing-matches', max_tokens: 5, messages: msgs }), 404, 'not_found_error');
  await expectError(openai.chat.completions.create({ model: 'nothing-matches', messages: msgs }), OpenAI.NotFoundError, 404);
  await expectError(anthropic.messages.create({ model: 'nothing-matches', max_tokens: 5, messages: msgs }), Anthropic.NotFoundError, 404);
});

test('malformed JSON -> 400 in the client shape, nothing sent upstream', async () => {
  await mock.reset();
  assertOpenAIError(await post(px.url, '/v1/chat/completions', '{"model": "gpt-4o", '), 400, 'invalid_request_error');
  assertOpenAIError(await post(px.url, '/v1/responses', '[1,'), 400, 'invalid_request_error');
  assertAnthropicError(await post(px.url, '/v1/messages', '{bad'), 400, 'invalid_request_error');
  assertAnthropicError(await post(px.url, '/v1/messages?beta=true', 'not json'), 400, 'invalid_request_error');
  assert.equal((await mock.stats()).requests, 0);
});

test('GET /v1/models: OpenAI list, and Anthropic list with anthropic-version', async () => {
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  // exact route names; glob routes are not model ids (SPEC section 4)
  assert.ok(ids.includes('chat-rw') && !ids.some((i) => /[*?]/.test(i)), JSON.stringify(ids));
  const o = await fetch(`${px.url}/v1/models`);
  const oj = await o.json();
  assert.equal(o.status, 200);
  assert.equal(oj.object, 'list');
  assert.equal(oj.data[0].object, 'model');
  const a = await fetch(`${px.url}/v1/models`, { headers: { 'anthropic-version': '2023-06-01' } });
  const aj = await a.json();
  assert.equal(a.status, 200);
  assert.equal(aj.data[0].type, 'model');
  assert.equal(typeof aj.has_more, 'boolean');
  assert.equal(aj.first_id, aj.data[0].id);
  assert.equal(aj.last_id, aj.data.at(-1).id);
  const listed = [];
  for await (const m of anthropic.models.list()) listed.push(m.id);
  assert.deepEqual(listed, aj.data.map((d) => d.id));
});

test('/healthz and /readyz 200; unknown path 404 and wrong method 405 in OpenAI shape', async () => {
  assert.equal((await fetch(`${px.url}/healthz`)).status, 200);
  assert.equal((await fetch(`${px.url}/readyz`)).status, 200);
  const nf = await fetch(`${px.url}/v1/nope`);
  assertOpenAIError({ status: nf.status, headers: nf.headers, text: '', json: await nf.json() }, 404, 'not_found_error');
  const get = await fetch(`${px.url}/v1/chat/completions`);
  const gj = await get.json();
  assert.equal(get.status, 405);
  assert.ok(gj.error && typeof gj.error.message === 'string' && 'type' in gj.error, JSON.stringify(gj));
  const del = await fetch(`${px.url}/healthz`, { method: 'DELETE' });
  assert.equal(del.status, 405);
  assert.ok((await del.json()).error);
});

test('early errors on Anthropic paths carry the x-request-id as request_id (issue 26)', async () => {
  const get = await fetch(`${px.url}/v1/messages`);
  const gj = await get.json();
  assert.equal(get.status, 405);
  assert.equal(gj.type, 'error');
  assert.ok(get.headers.get('x-request-id'));
  assert.equal(gj.request_id, get.headers.get('x-request-id'));
  const mine = await fetch(`${px.url}/v1/messages/count_tokens`, { headers: { 'x-request-id': 'req-early-1' } });
  const mj = await mine.json();
  assert.equal(mine.status, 405);
  assert.equal(mj.request_id, 'req-early-1');
  assert.equal(mine.headers.get('x-request-id'), 'req-early-1');
});

test('/metrics counts requests by inbound protocol, upstream and status', async () => {
  const before = await (await fetch(`${px.url}/metrics`)).text();
  assert.match(before, /# TYPE proxai_requests_total counter/);
  const line = /proxai_requests_total\{inbound="openai_chat_completions",upstream="oc",status="200"\} (\d+)/;
  const n0 = Number((line.exec(before) || [0, 0])[1]);
  await openai.chat.completions.create({ model: 'gpt-4o', messages: msgs });
  await openai.chat.completions.create({ model: 'gpt-4o', messages: msgs });
  const after = await (await fetch(`${px.url}/metrics`)).text();
  const m = line.exec(after);
  assert.ok(m, after);
  assert.equal(Number(m[1]), n0 + 2);
  assert.match(after, /proxai_requests_total\{inbound="anthropic_messages",upstream="an",status="200"\} \d+/);
});

test('/metrics counts the tokens of a large pass-through answer (usage at the end of a 200 KB body)', async () => {
  await mock.reset();
  const tok = (txt) => {
    const m = /proxai_tokens_total\{key="none",upstream="oc",direction="out"\} (\d+)/.exec(txt);
    return m ? Number(m[1]) : 0;
  };
  const before = tok(await (await fetch(`${px.url}/metrics`)).text());
  const body = { id: 'c', object: 'chat.completion', created: 1, model: 'gpt-4o', choices: [{ index: 0, message: { role: 'assistant', content: 'y'.repeat(200000) }, finish_reason: 'stop' }], usage: { prompt_tokens: 17, completion_tokens: 4242, total_tokens: 4259 } };
  await mock.script([{ body }]);
  const r = await openai.chat.completions.create({ model: 'gpt-4o', messages: msgs });
  assert.equal(r.choices[0].message.content.length, 200000);
  const after = await (await fetch(`${px.url}/metrics`)).text();
  assert.equal(tok(after) - before, 4242, after.split('\n').filter((l) => l.includes('tokens_total')).join('\n'));
});

// ---- client keys -----------------------------------------------------------

test('client keys: 401, 403, success with Bearer and x-api-key, rpm 429, in each shape', async () => {
  const pk = await startProxai(
    C.server() +
    C.upstream('oc', 'chat', mock.url, { api_key: 'up-chat-key' }) +
    C.upstream('an', 'anthropic', mock.url, { api_key: 'up-ant-key' }) +
    C.route('claude-*', { upstream: 'an' }) +
    C.route('*', { upstream: 'oc' }) +
    C.key('team-a', { secret: 'ka-secret-1234', models: 'gpt-*, claude-*' }) +
    C.key('slow', { secret: 'kslow-secret-5678', rpm: 2 }));
  try {
    await mock.reset();
    const chat = (h, model = 'gpt-4o') => post(pk.url, '/v1/chat/completions', { model, messages: msgs }, h);
    const resp = (h, model = 'gpt-4o') => post(pk.url, '/v1/responses', { model, input: 'x' }, h);
    const msg = (h, model = 'claude-x') => post(pk.url, '/v1/messages', { model, max_tokens: 5, messages: msgs }, { 'anthropic-version': '2023-06-01', ...h });
    assertOpenAIError(await chat({}), 401, 'authentication_error');
    assertOpenAIError(await chat({ authorization: 'Bearer wrong' }), 401, 'authentication_error');
    assertOpenAIError(await resp({ authorization: 'Bearer ka-secret-123' }), 401, 'authentication_error');
    assertAnthropicError(await msg({}), 401, 'authentication_error');
    assertAnthropicError(await msg({ 'x-api-key': 'ka-secret-12345' }), 401, 'authentication_error');
    assertOpenAIError(await chat({ authorization: 'Bearer ka-secret-1234' }, 'mistral-x'), 403, 'permission_error');
    assertAnthropicError(await msg({ 'x-api-key': 'ka-secret-1234' }, 'mistral-x'), 403, 'permission_error');
    assert.equal((await mock.stats()).requests, 0, 'nothing reached the upstream');

    const ok1 = await chat({ authorization: 'Bearer ka-secret-1234' });
    assert.equal(ok1.status, 200, ok1.text);
    const ok2 = await chat({ 'x-api-key': 'ka-secret-1234' });
    assert.equal(ok2.status, 200, ok2.text);
    const ok3 = await msg({ 'x-api-key': 'ka-secret-1234' });
    assert.equal(ok3.status, 200, ok3.text);
    const ok4 = await msg({ authorization: 'Bearer ka-secret-1234' });
    assert.equal(ok4.status, 200, ok4.text);
    const recs = await mock.requests();
    assert.equal(recs.length, 4);
    for (const r of recs) assert.ok(!JSON.stringify(r.headers).includes('ka-secret-1234'), 'client key forwarded upstream');

    // SDKs with keys
    const okc = new OpenAI({ baseURL: `${pk.url}/v1`, apiKey: 'ka-secret-1234', maxRetries: 0 });
    assert.equal((await okc.chat.completions.create({ model: 'gpt-4o', messages: msgs })).choices[0].message.content, 'Hello from mock');
    const badc = new OpenAI({ baseURL: `${pk.url}/v1`, apiKey: 'nope', maxRetries: 0 });
    await expectError(badc.chat.completions.create({ model: 'gpt-4o', messages: msgs }), OpenAI.AuthenticationError, 401);
    await expectError(okc.chat.completions.create({ model: 'llama', messages: msgs }), OpenAI.PermissionDeniedError, 403);
    const bada = new Anthropic({ baseURL: pk.url, apiKey: 'nope', maxRetries: 0 });
    await expectError(bada.messages.create({ model: 'claude-x', max_tokens: 5, messages: msgs }), Anthropic.AuthenticationError, 401);

    // rpm = 2: the third request within a minute is limited
    const s1 = await chat({ authorization: 'Bearer kslow-secret-5678' });
    const s2 = await chat({ authorization: 'Bearer kslow-secret-5678' });
    assert.equal(s1.status, 200, s1.text);
    assert.equal(s2.status, 200, s2.text);
    const s3 = await chat({ authorization: 'Bearer kslow-secret-5678' });
    assertOpenAIError(s3, 429, 'rate_limit_error');
    const ra = Number(s3.headers.get('retry-after'));
    assert.ok(Number.isFinite(ra) && ra >= 1, `retry-after: ${s3.headers.get('retry-after')}`);
    const s4 = await msg({ 'x-api-key': 'kslow-secret-5678' });
    assertAnthropicError(s4, 429, 'rate_limit_error');
    assert.ok(s4.headers.get('retry-after'));
    // the other key is not affected
    assert.equal((await chat({ authorization: 'Bearer ka-secret-1234' })).status, 200);
  } finally {
    await pk.stop();
  }
});

test('upstream max_connections = 1: concurrent requests queue and all succeed over one connection', async () => {
  const pq = await startProxai(
    C.server() +
    C.upstream('oc', 'chat', mock.url, { api_key: 'k', max_connections: 1 }) +
    C.route('*', { upstream: 'oc' }));
  try {
    await mock.reset();
    await mock.script([{ path: '/chat/completions', default: true, headers_delay_ms: 200, repeat: true }]);
    const c = new OpenAI({ baseURL: `${pq.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const all = await Promise.all([1, 2, 3, 4].map((i) => c.chat.completions.create({ model: `gpt-q${i}`, messages: msgs })));
    assert.deepEqual(all.map((x) => x.model), ['gpt-q1', 'gpt-q2', 'gpt-q3', 'gpt-q4']);
    const st = await mock.stats();
    assert.equal(st.requests, 4);
    assert.equal(st.connections_total, 1, `more than one upstream connection: ${JSON.stringify(st)}`);
  } finally {
    await mock.reset();
    await pq.stop();
  }
});

test('shutdown: proxai exits 0 on SIGTERM', async () => {
  const r = await px.stop();
  assert.equal(r.code, 0, JSON.stringify(r));
  rawServer.close();
});

await run();
