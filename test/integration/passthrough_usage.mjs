// Pass-through JSON answers: the usage the gateway counts (/metrics tokens,
// tpm) is the answer's top-level usage member, read back from the end of
// the body: never a member of that name nested in content, in a tool's
// input or inside a string, and when an upstream repeats it at the top, the
// last one (what the client's JSON parser keeps). And one keep-alive
// connection carrying answers of different kinds and sizes back to back:
// each one whole and its own (the gateway reuses a finished exchange's
// memory for the next request).
import assert from 'node:assert/strict';
import http from 'node:http';
import { startMock, startProxai, test, run, parseSSE } from './lib/harness.mjs';
import * as C from './lib/config.mjs';

const mock = await startMock();
const px = await startProxai(
  C.server() +
  C.upstream('oc', 'chat', mock.url, { api_key: undefined }) +
  C.upstream('or', 'responses', mock.url, { api_key: undefined }) +
  C.upstream('an', 'anthropic', mock.url, { api_key: undefined }) +
  C.upstream('ge', 'gemini', mock.url, { api_key: undefined }) +
  C.route('chat-*', { upstream: 'oc' }) +
  C.route('resp-*', { upstream: 'or' }) +
  C.route('claude-*', { upstream: 'an' }) +
  C.route('gem-*', { upstream: 'ge' }));

const CASES = [
  {
    name: 'chat', up: 'oc', path: '/v1/chat/completions', model: 'chat-m', in: 'prompt_tokens', out: 'completion_tokens',
    body: (m) => ({ model: m, messages: [{ role: 'user', content: 'hi' }] }),
    answer: (usage) => `{"id":"c1","object":"chat.completion","created":1,"model":"chat-m","choices":[{"index":0,"message":{"role":"assistant","content":"say \\"usage\\":{\\"prompt_tokens\\":900000}","usage":{"prompt_tokens":800000,"completion_tokens":800000}},"finish_reason":"stop"}],${usage},"system_fingerprint":null}`,
  },
  {
    name: 'responses', up: 'or', path: '/v1/responses', model: 'resp-m', in: 'input_tokens', out: 'output_tokens',
    body: (m) => ({ model: m, input: 'hi' }),
    answer: (usage) => `{"id":"r1","object":"response","created_at":1,"status":"completed","model":"resp-m","output":[{"type":"function_call","id":"fc","call_id":"c","name":"f","arguments":"{\\"usage\\":{\\"input_tokens\\":700000}}","status":"completed"},{"type":"x","usage":{"input_tokens":600000,"output_tokens":600000}}],${usage},"metadata":{"usage":"{}"}}`,
  },
  {
    name: 'anthropic', up: 'an', path: '/v1/messages', model: 'claude-m', in: 'input_tokens', out: 'output_tokens',
    headers: { 'anthropic-version': '2023-06-01' },
    body: (m) => ({ model: m, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }),
    answer: (usage) => `{"id":"m1","type":"message","role":"assistant","model":"claude-m","content":[{"type":"tool_use","id":"t","name":"f","input":{"usage":{"input_tokens":500000,"output_tokens":500000}}},{"type":"text","text":"}]}\\\\"}],"stop_reason":"tool_use","stop_sequence":null,${usage}}`,
  },
];

function tokens(text, up, dir) {
  const m = new RegExp(`proxai_tokens_total\\{key="none",upstream="${up}",direction="${dir}"\\} (\\d+)`).exec(text);
  return m ? Number(m[1]) : 0;
}

async function metrics() {
  return (await fetch(`${px.url}/metrics`)).text();
}

function rawAnswer(body) {
  return `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

for (const c of CASES) {
  test(`${c.name}: the top-level usage counts, not one nested in content, a tool's input or a string`, async () => {
    await mock.reset();
    const usage = `"usage":{"${c.in}":11,"${c.out}":22}`;
    const answer = c.answer(usage);
    JSON.parse(answer); // the upstream's answer is valid JSON
    await mock.script([{ raw: rawAnswer(answer) }]);
    const before = await metrics();
    const res = await fetch(`${px.url}${c.path}`, {
      method: 'POST', headers: { 'content-type': 'application/json', ...(c.headers || {}) }, body: JSON.stringify(c.body(c.model)),
    });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), answer); // passed through as is
    const after = await metrics();
    assert.equal(tokens(after, c.up, 'in') - tokens(before, c.up, 'in'), 11);
    assert.equal(tokens(after, c.up, 'out') - tokens(before, c.up, 'out'), 22);
  });

  test(`${c.name}: a top-level usage given twice counts the last one, as the client's JSON parser reads it`, async () => {
    await mock.reset();
    const answer = c.answer(`"usage":{"${c.in}":1000,"${c.out}":2000},"usage":{"${c.in}":3,"${c.out}":4}`);
    assert.equal(JSON.parse(answer).usage[c.out], 4); // what a client sees
    await mock.script([{ raw: rawAnswer(answer) }]);
    const before = await metrics();
    const res = await fetch(`${px.url}${c.path}`, {
      method: 'POST', headers: { 'content-type': 'application/json', ...(c.headers || {}) }, body: JSON.stringify(c.body(c.model)),
    });
    assert.equal(res.status, 200);
    assert.equal(JSON.parse(await res.text()).usage[c.out], 4);
    const after = await metrics();
    assert.equal(tokens(after, c.up, 'in') - tokens(before, c.up, 'in'), 3);
    assert.equal(tokens(after, c.up, 'out') - tokens(before, c.up, 'out'), 4);
  });

  test(`${c.name}: member names spelled with escapes count as the client's JSON parser reads them`, async () => {
    await mock.reset();
    // "usage" and a counter's name escaped, and an escaped usage after a plain one (the last)
    const esc = (name) => `\\u${name.charCodeAt(0).toString(16).padStart(4, '0')}${name.slice(1)}`;
    const answer = c.answer(`"usage":{"${c.in}":1000},"${esc('usage')}":{"${esc(c.in)}":5,"${c.out}":6}`);
    assert.equal(JSON.parse(answer).usage[c.in], 5); // what a client sees
    await mock.script([{ raw: rawAnswer(answer) }]);
    const before = await metrics();
    const res = await fetch(`${px.url}${c.path}`, {
      method: 'POST', headers: { 'content-type': 'application/json', ...(c.headers || {}) }, body: JSON.stringify(c.body(c.model)),
    });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), answer);
    const after = await metrics();
    assert.equal(tokens(after, c.up, 'in') - tokens(before, c.up, 'in'), 5);
    assert.equal(tokens(after, c.up, 'out') - tokens(before, c.up, 'out'), 6);
  });
}

test('gemini: an answer too large to hold counts the usageMetadata at its end', async () => {
  await mock.reset();
  const text = 'g'.repeat(400 * 1024); // past what the gateway holds: streamed on, its tail read
  const answer = `{"candidates":[{"content":{"parts":[{"text":"${text}"}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":31,"candidatesTokenCount":41,"totalTokenCount":72},"modelVersion":"gem-m"}`;
  await mock.script([{ raw: rawAnswer(answer) }]);
  const before = await metrics();
  const res = await fetch(`${px.url}/v1beta/models/gem-m:generateContent`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }),
  });
  assert.equal(res.status, 200);
  assert.equal(await res.text(), answer);
  const after = await metrics();
  assert.equal(tokens(after, 'ge', 'in') - tokens(before, 'ge', 'in'), 31);
  assert.equal(tokens(after, 'ge', 'out') - tokens(before, 'ge', 'out'), 41);
});

// one connection, several requests in a row, through node's http with a
// keep-alive agent of one socket
function post(agent, path, body, headers = {}) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request(`${px.url}${path}`, {
      method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data), ...headers },
    }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(parts).toString(), socket: res.socket }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(10000, () => req.destroy(new Error('timeout')));
    req.end(data);
  });
}

test('one keep-alive connection: small, large, error, stream and small answers back to back, each whole', async () => {
  await mock.reset();
  const chat = (content) => ({ id: 'c', object: 'chat.completion', created: 1, model: 'chat-m', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: content.length, total_tokens: 1 + content.length } });
  const big = 'b'.repeat(20000); // more than the buffers a reused exchange keeps
  await mock.script([
    { body: chat('first') },
    { body: chat(big) },
    { status: 400, body: { error: { message: 'bad thing', type: 'invalid_request_error' } } },
    { sse: [{ data: { id: 's', object: 'chat.completion.chunk', created: 1, model: 'chat-m', choices: [{ index: 0, delta: { content: 'streamed' }, finish_reason: null }] } }, { data: { id: 's', object: 'chat.completion.chunk', created: 1, model: 'chat-m', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] } }, { data: '[DONE]' }] },
    { body: chat('last') },
  ]);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const req = { model: 'chat-m', messages: [{ role: 'user', content: 'hi' }] };
    const sockets = new Set();
    const a = await post(agent, '/v1/chat/completions', req);
    sockets.add(a.socket);
    assert.equal(a.status, 200);
    assert.equal(JSON.parse(a.text).choices[0].message.content, 'first');
    const b = await post(agent, '/v1/chat/completions', req);
    sockets.add(b.socket);
    assert.equal(b.status, 200);
    assert.equal(JSON.parse(b.text).choices[0].message.content, big);
    assert.equal(Number(b.headers['content-length']), Buffer.byteLength(b.text));
    const e = await post(agent, '/v1/chat/completions', req);
    sockets.add(e.socket);
    assert.equal(e.status, 400);
    assert.match(JSON.parse(e.text).error.message, /bad thing/);
    const s = await post(agent, '/v1/chat/completions', { ...req, stream: true });
    sockets.add(s.socket);
    assert.equal(s.status, 200);
    const evs = parseSSE(s.text);
    assert.equal(evs.at(-1).data, '[DONE]');
    assert.equal(JSON.parse(evs[0].data).choices[0].delta.content, 'streamed');
    const l = await post(agent, '/v1/chat/completions', req);
    sockets.add(l.socket);
    assert.equal(l.status, 200);
    assert.equal(JSON.parse(l.text).choices[0].message.content, 'last');
    assert.equal(Number(l.headers['content-length']), Buffer.byteLength(l.text));
    assert.equal(sockets.size, 1, 'the five requests shared one connection');
    // every answer carried its own request id
    const ids = [a, b, e, s, l].map((r) => r.headers['x-request-id']);
    assert.equal(new Set(ids).size, 5, ids.join(' '));
  } finally {
    agent.destroy();
  }
});

await run();
