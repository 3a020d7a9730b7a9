// The SDK examples of docs/agents.md, run as written against proxai with the
// C mock upstream behind it: the OpenAI SDK (Chat Completions and Responses)
// toward an Anthropic upstream and the Anthropic SDK toward a Chat and a
// Responses upstream, non-streaming and streaming, with the proxai
// configuration the agent tests use (lib/agents.mjs proxaiConfig). The
// upstream answers are the mock's defaults ("Hello from mock").
//
// The SDKs come from test/node_modules (`npm ci` in test/); without them the
// test prints `SKIP: <reason>` and exits 77.
import path from 'node:path';
import { startMock, startProxai, test, run } from '../integration/lib/harness.mjs';
import { UPSTREAM_MODEL, accessLog, assertNoRejects, proxaiConfig, skip, tmpDir } from './lib/agents.mjs';

let OpenAI;
let Anthropic;
try {
  ({ default: OpenAI } = await import('openai'));
  ({ default: Anthropic } = await import('@anthropic-ai/sdk'));
} catch (e) {
  skip(`the official SDKs are not installed in test/node_modules (npm ci in test/): ${e.message}`);
}

const mock = await startMock();
const HELLO = 'Hello from mock';

async function withProxai(upstream, fn) {
  const logFile = path.join(tmpDir('proxai-sdk-px-'), 'access.log');
  const px = await startProxai(proxaiConfig(upstream, mock.url, logFile));
  try {
    await mock.reset();
    await fn(px.url);
    const reqs = await mock.requests();
    const want = { anthropic: '/v1/messages', chat: '/chat/completions', responses: '/responses' }[upstream];
    if (!reqs.length || !reqs.every((q) => q.path.endsWith(want) && q.body.model === UPSTREAM_MODEL)) {
      throw new Error(`upstream requests: ${JSON.stringify(reqs.map((q) => [q.path, q.body?.model]))}`);
    }
    assertNoRejects(logFile);
    if (accessLog(logFile).length !== reqs.length) throw new Error('access log and upstream request counts differ');
  } finally {
    await px.stop();
  }
}

function expectHello(what, text) {
  if (text !== HELLO) throw new Error(`${what}: got ${JSON.stringify(text)}, want ${JSON.stringify(HELLO)}`);
}

for (const upstream of ['anthropic', 'chat']) {
  test(`docs: openai SDK responses.create / responses.stream -> ${upstream} upstream`, async () => {
    await withProxai(upstream, async (PROXAI_URL) => {
      // --- as in docs/agents.md ---
      const client = new OpenAI({ baseURL: `${PROXAI_URL}/v1`, apiKey: 'proxai-client-key', maxRetries: 0 });
      const r = await client.responses.create({ model: 'claude-sonnet-4-5', input: 'Say hello.' });
      expectHello('responses.create output_text', r.output_text);
      let streamed = '';
      const stream = client.responses.stream({ model: 'claude-sonnet-4-5', input: 'Say hello.' });
      for await (const ev of stream) if (ev.type === 'response.output_text.delta') streamed += ev.delta;
      const final = await stream.finalResponse();
      // ---
      expectHello('responses.stream deltas', streamed);
      expectHello('responses.stream finalResponse', final.output_text);
      if (final.status !== 'completed' || !final.usage) throw new Error(`final response ${JSON.stringify(final).slice(0, 400)}`);
    });
  });
}

test('docs: openai SDK chat.completions.create (stream) -> anthropic upstream', async () => {
  await withProxai('anthropic', async (PROXAI_URL) => {
    const client = new OpenAI({ baseURL: `${PROXAI_URL}/v1`, apiKey: 'proxai-client-key', maxRetries: 0 });
    const c = await client.chat.completions.create({ model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'Say hello.' }] });
    expectHello('chat.completions.create', c.choices[0].message.content);
    let streamed = '';
    const s = await client.chat.completions.create({ model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'Say hello.' }], stream: true });
    for await (const chunk of s) streamed += chunk.choices[0]?.delta?.content ?? '';
    expectHello('chat stream', streamed);
  });
});

for (const upstream of ['chat', 'responses']) {
  test(`docs: anthropic SDK messages.create / messages.stream -> ${upstream} upstream`, async () => {
    await withProxai(upstream, async (PROXAI_URL) => {
      // --- as in docs/agents.md ---
      const client = new Anthropic({ baseURL: PROXAI_URL, apiKey: 'proxai-client-key', maxRetries: 0 });
      const m = await client.messages.create({ model: 'gpt-5.5', max_tokens: 1024, messages: [{ role: 'user', content: 'Say hello.' }] });
      const stream = client.messages.stream({ model: 'gpt-5.5', max_tokens: 1024, messages: [{ role: 'user', content: 'Say hello.' }] });
      let streamed = '';
      stream.on('text', (t) => (streamed += t));
      const final = await stream.finalMessage();
      // ---
      expectHello('messages.create', m.content.find((b) => b.type === 'text')?.text);
      expectHello('messages.stream text', streamed);
      expectHello('messages.stream finalMessage', final.content.find((b) => b.type === 'text')?.text);
      if (final.stop_reason !== 'end_turn' || final.model !== 'gpt-5.5') throw new Error(`final message ${JSON.stringify(final).slice(0, 400)}`);
    });
  });
}

await run();
