// A translated request's long strings go upstream as spans of the client's
// body (the body sent in parts: writev on the built-in lane, sealed records
// on TLS, curl's read callback): the upstream gets every byte of them, on a
// retry of the same target too, and after a kept connection closed unanswered
// (sent again on a fresh one), and a fallback of another protocol gets its
// own translation of the client's body (which stays whole meanwhile). The
// texts carry escapes, quotes, non-ASCII and long runs, so a part out of
// place or cut shows in the JSON the mock reads back.
import assert from 'node:assert/strict';
import { startMock, test, run } from './lib/harness.mjs';
import { post, withProxai } from './lib/client.mjs';
import * as C from './lib/config.mjs';

const [ma, mb] = [await startMock(), await startMock()];

// a long text: prose with escapes, code with quotes and backslashes, non-ASCII
function text(seed, kb) {
  const words = ['alpha', '"quoted"', 'back\\slash', 'tab\there', 'line\nbreak', 'café', 'naïve', '日本語', '{"json": [1, 2]}', 'emoji 🙂'];
  let s = `#${seed} `;
  for (let i = 0; s.length < kb * 1024; i++) s += words[(i * 7 + seed) % words.length] + (i % 13 === 0 ? '\n' : ' ');
  return s;
}

const texts = { system: text(1, 20), user1: text(2, 60), tool: text(3, 90), user2: text(4, 30), args: text(5, 8) };
const chatBody = (model, stream = false) => ({
  model,
  stream,
  max_tokens: 64,
  messages: [
    { role: 'system', content: texts.system },
    { role: 'user', content: texts.user1 },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'read_file', arguments: JSON.stringify({ path: 'a.txt', note: texts.args }) } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: texts.tool },
    { role: 'user', content: texts.user2 },
  ],
  tools: [{ type: 'function', function: { name: 'read_file', description: 'Reads a file', parameters: { type: 'object', properties: { path: { type: 'string' }, note: { type: 'string' } } } } }],
});

// every string of a parsed body, depth first
function strings(v, out = []) {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) v.forEach((e) => strings(e, out));
  else if (v && typeof v === 'object') Object.values(v).forEach((e) => strings(e, out));
  return out;
}

// the long texts are in the upstream's body, each whole, wherever its
// protocol puts them
function hasTexts(body, what) {
  const all = strings(body).join('\u0000');
  for (const [k, t] of Object.entries(texts)) {
    if (k === 'args') continue; // an argument inside the tool call's arguments
    assert.ok(all.includes(t), `${what}: the ${k} text is not whole`);
  }
  assert.ok(JSON.stringify(body).includes(JSON.stringify(texts.args).slice(1, -1)) || all.includes(texts.args),
    `${what}: the tool call's argument is not whole`);
}

const config = (routes) =>
  C.server({ max_body: 4 << 20 }) +
  C.upstream('claude', 'anthropic', ma.url, { api_key: 'k-claude', retries: 1 }) +
  C.upstream('gem', 'gemini', mb.url, { api_key: 'k-gem' }) +
  routes;

test('a long translated body reaches the upstream whole, streamed or not', async () => {
  await Promise.all([ma.reset(), mb.reset()]);
  await withProxai(config(C.route('big', { upstream: 'claude/claude-big' })), async (px) => {
    for (const stream of [false, true]) {
      const r = await post(px.url, '/v1/chat/completions', chatBody('big', stream));
      assert.equal(r.status, 200, r.text);
    }
    const got = await ma.requests();
    assert.equal(got.length, 2);
    for (const g of got) {
      assert.equal(g.path, '/v1/messages');
      assert.equal(g.body.model, 'claude-big');
      hasTexts(g.body, 'anthropic');
    }
    assert.equal(got[1].body.stream, true);
  });
});

test('a retry resends the body whole; a fallback of another protocol gets its own', async () => {
  await Promise.all([ma.reset(), mb.reset()]);
  const down = { status: 503, body: { type: 'error', error: { type: 'overloaded_error', message: 'down' } } };
  await ma.script([down, down]);
  await withProxai(config(C.route('big', { upstream: 'claude/claude-big', fallback: 'gem/gemini-big' })), async (px) => {
    const r = await post(px.url, '/v1/chat/completions', chatBody('big'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-proxai-upstream'), 'gem/gemini-big');
    const a = await ma.requests();
    assert.equal(a.length, 2); // the attempt and its retry
    assert.deepEqual(a[1].body, a[0].body);
    hasTexts(a[0].body, 'anthropic');
    const b = await mb.requests();
    assert.equal(b.length, 1);
    assert.match(b[0].path, /gemini-big:generateContent/);
    hasTexts(b[0].body, 'gemini');
  });
});

test('a kept connection closed before the answer: the body is sent again whole', async () => {
  await Promise.all([ma.reset(), mb.reset()]);
  await withProxai(config(C.route('big', { upstream: 'claude/claude-big' })), async (px) => {
    const r1 = await post(px.url, '/v1/chat/completions', chatBody('big'));
    assert.equal(r1.status, 200, r1.text);
    // the next request goes on the kept connection, which closes unanswered:
    // the lane sends it again on a fresh one (curl rewinds the parts)
    await ma.script([{ fault: 'close' }]);
    const r2 = await post(px.url, '/v1/chat/completions', chatBody('big'));
    assert.equal(r2.status, 200, r2.text);
    const got = await ma.requests();
    assert.equal(got.length, 3);
    for (const g of got) hasTexts(g.body, 'anthropic');
    assert.deepEqual(got[2].body, got[1].body);
  });
});

await run();
