// The access log line of a response still flushing when the request ends is
// written once the last byte is out, after the request's own memory is gone:
// it must carry everything it names, the lossy list included (the line once
// pointed into the freed request for it; the ASan build aborts on that).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startMock, startProxai, test, run, sleep, waitFor, jsonLines } from './lib/harness.mjs';
import { rawPost } from './lib/client.mjs';
import * as S from './lib/scripts.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxai-logflush-'));
const logPath = path.join(dir, 'access.log');
const mock = await startMock();
const px = await startProxai(S.gatewayConfig(mock.url, { access_log: logPath }));

const logLines = () => jsonLines(logPath);

/* One request on a raw socket that reads nothing until `holdMs` have passed,
 * then everything until the server closes. Resolves to the bytes received. */
function slowReader(body, holdMs) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(px.port, '127.0.0.1');
    const chunks = [];
    const timer = setTimeout(() => { sock.destroy(); reject(new Error('no answer within 60 s')); }, 60000);
    sock.on('connect', () => {
      sock.pause();
      sock.write(rawPost('/v1/messages', body, 'x-api-key: k\r\nConnection: close\r\n'));
      setTimeout(() => sock.resume(), holdMs);
    });
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', (e) => { clearTimeout(timer); reject(e); });
    sock.on('close', () => { clearTimeout(timer); resolve(Buffer.concat(chunks)); });
  });
}

test('a translated answer still flushing at its end: the access log names what was dropped', async () => {
  await mock.reset();
  const text = 'x'.repeat(12 << 20); /* more than the socket buffers take at once */
  await mock.script([{ path: S.UPSTREAM_PATH.chat, body: S.chatBody({ id: 'big1', model: S.UPSTREAM_MODEL.chat, text }) }]);
  const before = logLines().length;
  const req = JSON.stringify({ model: 'to-chat-a', max_tokens: 50, top_k: 5, messages: [{ role: 'user', content: 'hi' }] });
  const answer = slowReader(req, 1500);
  /* meanwhile the gateway ends the request (the rest waits in its queue)
   * and serves others, reusing memory */
  await sleep(700);
  for (let i = 0; i < 5; i++) {
    await mock.script([{ path: S.UPSTREAM_PATH.chat, body: S.chatBody({ id: `s${i}`, model: S.UPSTREAM_MODEL.chat, text: 'ok' }) }]);
    const r = await fetch(`${px.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': 'k' }, body: JSON.stringify({ model: 'to-chat-b', max_tokens: 5, messages: [{ role: 'user', content: 'x'.repeat(2000) }] }) });
    assert.equal(r.status, 200);
    await r.arrayBuffer();
  }
  const bytes = await answer;
  const head = bytes.subarray(0, 4096).toString('latin1');
  assert.match(head, /^HTTP\/1\.1 200 /);
  assert.match(head, /\r\nx-proxai-lossy: [^\r]*top_k/i, head.slice(0, 800));
  assert.ok(bytes.length > text.length, `whole body received (${bytes.length} bytes)`);
  await waitFor(() => logLines().slice(before).some((l) => l.model === 'to-chat-a'), { what: 'access log line', timeout: 20000 });
  const line = logLines().slice(before).find((l) => l.model === 'to-chat-a');
  assert.ok((line.lossy || '').split(',').includes('top_k'), `access log lossy: ${JSON.stringify(line.lossy)}`);
  assert.ok(line.bytes_out > text.length, `bytes_out ${line.bytes_out}`);
}, { timeout: 120000 });

await run();
await px.stop();
await mock.stop();
