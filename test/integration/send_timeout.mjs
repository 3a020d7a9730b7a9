// Send timeout: a client that stops reading a stream for longer than the
// server's idle_timeout is dropped, and its upstream transfer is cancelled,
// so a non-reading client cannot hold an upstream connection forever.
import assert from 'node:assert/strict';
import net from 'node:net';
import { startMock, startProxai, test, run, waitFor, sleep } from './lib/harness.mjs';
import { rawPost } from './lib/client.mjs';
import * as C from './lib/config.mjs';

const mock = await startMock();
const px = await startProxai(
  C.server({ access_log: undefined, idle_timeout: '1s' }) +
  C.upstream('m', 'chat', mock.url, { api_key: 'k', idle_timeout: '60s' }) +
  C.route('*', { upstream: 'm' }));
process.on('exit', () => { px.stop(); mock.stop(); });

test('a client that takes no bytes is dropped after idle_timeout; the upstream is cancelled', async () => {
  await mock.reset();
  const ev = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"${'x'.repeat(4000)}"},"finish_reason":null}]}\n\n`;
  await mock.script([{ sse: [], sse_repeat: { event: ev, count: 200000 }, sse_tail: ['data: [DONE]\n\n'] }]);
  const body = JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  const sock = net.connect(px.port, '127.0.0.1');
  let closed = false;
  sock.on('close', () => (closed = true));
  sock.on('error', () => {});
  await new Promise((r) => sock.once('connect', r));
  sock.write(rawPost('/v1/chat/completions', body));
  sock.pause(); // never read: the kernel buffers fill, then proxai's queue
  await sleep(500);
  assert.equal(closed, false, 'not dropped before the timeout');
  const s = await waitFor(async () => {
    const st = await mock.stats();
    return st.responses_aborted >= 1 ? st : null;
  }, { timeout: 15000, what: 'upstream transfer cancelled after the send timeout' });
  assert.ok(s.responses_aborted >= 1);
  sock.resume();
  await waitFor(() => closed, { timeout: 5000, what: 'client connection closed' });
  // the gateway keeps serving
  const r = await fetch(`${px.url}/healthz`);
  assert.equal(r.status, 200);
});

await run();
