// The libcurl lane (`client = curl`) under many concurrent translated
// streams: the lane spreads its transfers over several curl multi handles
// (256 each, src/upstream/upstream_curl.c), so these run more than two of them at
// once. Every stream is live at the same time and gets its events, cancels
// reach the upstream from every multi, streams finish from every multi, and
// the connections they leave behind are reused afterwards.
import assert from 'node:assert/strict';
import http from 'node:http';
import { startMock, startProxai, test, run, waitFor } from './lib/harness.mjs';
import * as C from './lib/config.mjs';

const STREAMS = 600; // > 2 x 256 transfers per multi handle

const mock = await startMock();
const px = await startProxai(
  C.server({ max_connections: 4000 }) +
  C.upstream('oc', 'chat', mock.url, { api_key: 'k', client: 'curl', max_connections: 2000 }) +
  C.route('*', { upstream: 'oc' }));

const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const body = (model) =>
  JSON.stringify({ model, max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'hi' }] });

/** One streaming Anthropic request (translated to the Chat upstream):
 *  {req, done: Promise<{status, text}>, text()}; onData(text so far). */
function stream(model, onData) {
  let text = '';
  let req;
  const done = new Promise((resolve, reject) => {
    req = http.request(
      `${px.url}/v1/messages`,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' } },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (d) => {
          text += d;
          if (onData) onData(text);
        });
        res.on('end', () => resolve({ status: res.statusCode, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body(model));
  });
  return { req, done, text: () => text };
}

test(`${STREAMS} concurrent streams are live at once, and their cancels reach the upstream`, async () => {
  await mock.reset();
  // headers and the first two chunks (role, "Hello"), then nothing until the
  // peer goes away
  await mock.script([{ path: '/chat/completions', default: true, fault: 'stall', fault_after: 2, repeat: true }]);
  let live = 0;
  const all = [];
  for (let i = 0; i < STREAMS; i++) {
    let seen = false;
    const s = stream(`gpt-live-${i}`, (t) => {
      if (!seen && t.includes('"text":"Hello"')) {
        seen = true;
        live++;
      }
    });
    s.done.catch(() => {}); // destroyed below
    all.push(s);
  }
  await waitFor(() => live === STREAMS, { timeout: 60000, what: `${STREAMS} live streams (${live})` });
  const st = await mock.stats();
  assert.equal(st.requests, STREAMS, JSON.stringify(st));
  assert.equal(st.connections_open, STREAMS, JSON.stringify(st));
  for (const s of all) s.req.destroy();
  await waitFor(async () => (await mock.stats()).responses_aborted === STREAMS, {
    timeout: 60000,
    what: 'every upstream transfer cancelled',
  });
  await waitFor(async () => (await mock.stats()).connections_open === 0, { timeout: 30000, what: 'upstream connections closed' });
}, { timeout: 180000 });

test(`${STREAMS} concurrent streams all complete, then their connections are reused`, async () => {
  await mock.reset();
  await mock.script([{ path: '/chat/completions', default: true, delay_ms: 20, repeat: true }]);
  const res = await Promise.all(Array.from({ length: STREAMS }, (_, i) => stream(`gpt-done-${i}`).done));
  for (const r of res) {
    assert.equal(r.status, 200, r.text);
    assert.ok(r.text.includes('"text":"Hello"') && r.text.includes('"text":" mock"'), r.text);
    assert.ok(r.text.includes('event: message_stop'), r.text);
  }
  const before = await mock.stats();
  assert.equal(before.requests, STREAMS);
  assert.equal(before.responses_completed, STREAMS);
  assert.ok(before.connections_total <= STREAMS, JSON.stringify(before));
  // one at a time: each finds an idle connection left by the burst
  for (let i = 0; i < 20; i++) {
    const r = await stream(`gpt-seq-${i}`).done;
    assert.equal(r.status, 200, r.text);
    assert.ok(r.text.includes('event: message_stop'), r.text);
  }
  const after = await mock.stats();
  assert.equal(after.requests, STREAMS + 20);
  assert.equal(after.connections_total, before.connections_total, `new upstream connections: ${JSON.stringify(after)}`);
}, { timeout: 180000 });

test('shutdown: proxai exits 0 on SIGTERM', async () => {
  const r = await px.stop();
  assert.equal(r.code, 0, JSON.stringify(r));
  agent.destroy();
});

await run();
