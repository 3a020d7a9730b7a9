// Streams lose nothing silently (issue 11): what a translated stream can
// carry arrives (Anthropic citations as Chat delta.annotations and Responses
// annotation events), what it cannot is named in x-proxai-lossy at the start
// (predicted from the request) and in the access log line with what was
// actually dropped; an upstream 429 insufficient_quota reaches an Anthropic
// client as rate_limit_error.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startMock, startProxai, test, run, parseSSE, waitFor, jsonLines } from './lib/harness.mjs';
import { post } from './lib/client.mjs';
import * as S from './lib/scripts.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-lossless-'));
const logPath = path.join(dir, 'access.log');
const mock = await startMock();
const px = await startProxai(S.gatewayConfig(mock.url, { access_log: logPath }));

const ev = (type, data) => ({ event: type, data: { type, ...data } });

/* an Anthropic web search answer: server tool blocks, a cited text block,
 * thinking with a signature */
function citedAnswer() {
  return [
    ev('message_start', { message: { id: 'msg_cite1', type: 'message', role: 'assistant', model: 'up-ant-model', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 50, cache_read_input_tokens: 20, output_tokens: 1 } } }),
    ev('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }),
    ev('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'I should search.' } }),
    ev('content_block_delta', { index: 0, delta: { type: 'signature_delta', signature: 'EqQBCkYIBxgCKkB' } }),
    ev('content_block_stop', { index: 0 }),
    ev('content_block_start', { index: 1, content_block: { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} } }),
    ev('content_block_delta', { index: 1, delta: { type: 'input_json_delta', partial_json: '{"query":"weather"}' } }),
    ev('content_block_stop', { index: 1 }),
    ev('content_block_start', { index: 2, content_block: { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [{ type: 'web_search_result', title: 'Weather', url: 'https://example.com/w', encrypted_content: 'Eq', page_age: null }] } }),
    ev('content_block_stop', { index: 2 }),
    ev('content_block_start', { index: 3, content_block: { type: 'text', text: '', citations: [] } }),
    ev('content_block_delta', { index: 3, delta: { type: 'citations_delta', citation: { type: 'web_search_result_location', cited_text: 'Sunny', url: 'https://example.com/w', title: 'Weather', encrypted_index: 'Ep' } } }),
    ev('content_block_delta', { index: 3, delta: { type: 'text_delta', text: 'It is sunny.' } }),
    ev('content_block_stop', { index: 3 }),
    ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 30 } }),
    ev('message_stop', {}),
  ];
}

// a request of the client key, in both carriers
const send = (p, body) => post(px.url, p, body, { authorization: 'Bearer client-key', 'x-api-key': 'client-key' });

const logLines = () => jsonLines(logPath);

test('chat client: citations arrive as delta.annotations; signatures named at the start and in the access log', async () => {
  await mock.reset();
  await mock.script([{ path: S.UPSTREAM_PATH.anthropic, sse: citedAnswer() }]);
  const before = logLines().length;
  const r = await send('/v1/chat/completions', { model: 'to-anthropic-a', stream: true, reasoning_effort: 'low', messages: [{ role: 'user', content: 'weather?' }] });
  assert.equal(r.status, 200);
  const lossy = r.headers.get('x-proxai-lossy') || '';
  assert.match(lossy, /content\[\]\.signature/, `header: ${lossy}`);
  const events = parseSSE(r.text);
  const chunks = events.filter((e) => e.data && e.data !== '[DONE]').map((e) => JSON.parse(e.data));
  const anns = chunks.flatMap((c) => c.choices?.[0]?.delta?.annotations ?? []);
  assert.equal(anns.length, 1, JSON.stringify(chunks));
  assert.equal(anns[0].type, 'url_citation');
  assert.equal(anns[0].url_citation.url, 'https://example.com/w');
  assert.equal(anns[0].url_citation.start_index, 0);
  assert.equal(anns[0].url_citation.end_index, 'It is sunny.'.length);
  const text = chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('');
  assert.equal(text, 'It is sunny.');
  await waitFor(() => logLines().length > before, { what: 'access log line' });
  const line = logLines().slice(before).find((l) => l.path === '/v1/chat/completions');
  assert.ok(line, 'access log line');
  for (const f of ['content[].signature', 'content[].server_tool_use', 'content[].server_tool_result'])
    assert.ok((line.lossy || '').split(',').includes(f), `access log lossy ${line.lossy} lacks ${f}`);
  const m = await (await fetch(`${px.url}/metrics`, { headers: { authorization: 'Bearer client-key' } })).text();
  assert.match(m, /proxai_lossy_fields_total\{[^}]*field="content\[\]\.server_tool_use"\} 1/, m);
});

test('responses client: citations arrive as response.output_text.annotation.added and in the final part', async () => {
  await mock.reset();
  await mock.script([{ path: S.UPSTREAM_PATH.anthropic, sse: citedAnswer() }]);
  const r = await send('/v1/responses', { model: 'to-anthropic-a', stream: true, input: 'weather?' });
  assert.equal(r.status, 200);
  const events = parseSSE(r.text).map((e) => ({ event: e.event, data: JSON.parse(e.data) }));
  const added = events.filter((e) => e.event === 'response.output_text.annotation.added');
  assert.equal(added.length, 1);
  assert.equal(added[0].data.annotation.url, 'https://example.com/w');
  const done = events.find((e) => e.event === 'response.completed');
  const parts = done.data.response.output.filter((o) => o.type === 'message').flatMap((o) => o.content);
  assert.equal(parts.flatMap((p) => p.annotations).length, 1);
  /* no event for an item after its output_item.done */
  const closed = new Set();
  for (const e of events) {
    if (e.event === 'response.output_item.done') closed.add(e.data.item.id);
    else if (e.data.item_id) assert.ok(!closed.has(e.data.item_id), `${e.event} after its item was done`);
  }
});

test('anthropic client: a 429 insufficient_quota from a Responses upstream is rate_limit_error', async () => {
  await mock.reset();
  await mock.script([{ path: S.UPSTREAM_PATH.responses, status: 429, body: { error: { message: 'You exceeded your current quota, please check your plan and billing details.', type: 'insufficient_quota', param: null, code: 'insufficient_quota' } } }]);
  const r = await send('/v1/messages', { model: 'to-responses-a', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] });
  assert.equal(r.status, 429);
  const b = r.json;
  assert.equal(b.error.type, 'rate_limit_error');
});

await run();
await px.stop();
await mock.stop();
fs.rmSync(dir, { recursive: true, force: true });
