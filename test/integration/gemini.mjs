// Gemini generateContent through the real proxai binary (issue 14, SPEC
// section 11): the official @google/genai SDK as a client against every
// upstream protocol, and the official OpenAI and Anthropic SDKs against a
// Gemini upstream, with the C mock (which speaks Gemini and rejects what the
// real API rejects) as the scripted upstream.
import assert from 'node:assert/strict';
import { startMock, startProxai, test, run } from './lib/harness.mjs';
import * as S from './lib/scripts.mjs';

let OpenAI, Anthropic, GoogleGenAI;
try {
  ({ default: OpenAI } = await import('openai'));
  ({ default: Anthropic } = await import('@anthropic-ai/sdk'));
  ({ GoogleGenAI } = await import('@google/genai'));
} catch (e) {
  console.error(`cannot load the SDKs (run \`npm ci\` in test/): ${e.message}`);
  process.exit(1);
}

const mock = await startMock();
const px = await startProxai(`${S.gatewayConfig(mock.url)}
[upstream gm]
protocol = gemini_generate_content
base_url = ${mock.url}
api_key = up-gem-key
retries = 0
[route to-gemini*]
upstream = gm
model = up-gem-model
[route gemini-*]
upstream = gm
models = gemini-2.5-flash
`);
const genai = (key = 'client-key') =>
  new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: px.url } });
const oa = new OpenAI({ baseURL: `${px.url}/v1`, apiKey: 'client-key', maxRetries: 0 });
const an = new Anthropic({ baseURL: px.url, apiKey: 'client-key', maxRetries: 0 });

async function lastRequest() {
  const reqs = await mock.requests();
  return reqs[reqs.length - 1];
}

const GEM_PARTS = (text) => ({ candidates: [{ content: { role: 'model', parts: [{ text }] }, finishReason: 'STOP', index: 0 }],
  usageMetadata: { promptTokenCount: 7, candidatesTokenCount: 4, totalTokenCount: 11 }, modelVersion: 'up-gem-model', responseId: 'g1' });
const gemSSE = (chunks) => chunks.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`);

// ---- Gemini clients against every upstream ----

for (const up of ['chat', 'responses', 'anthropic', 'gemini']) {
  test(`genai generateContent -> ${up}`, async () => {
    await mock.reset();
    const r = await genai().models.generateContent({ model: `to-${up}-x`, contents: 'Say hi' });
    assert.equal(r.text, 'Hello from mock');
    assert.equal(r.modelVersion, `to-${up}-x`);
    assert.ok(r.usageMetadata.promptTokenCount > 0);
    const rec = await lastRequest();
    if (up === 'gemini') {
      assert.equal(rec.path, '/v1beta/models/up-gem-model:generateContent');
      assert.equal(rec.headers['x-goog-api-key'], 'up-gem-key');
      assert.equal(rec.body.model, undefined);
    } else {
      assert.equal(rec.body.model, S.UPSTREAM_MODEL[up]);
      assert.equal(rec.headers['x-goog-api-key'], undefined); // never forwarded
    }
  });

  test(`genai generateContentStream -> ${up}`, async () => {
    await mock.reset();
    const stream = await genai().models.generateContentStream({ model: `to-${up}-x`, contents: 'Say hi' });
    let text = '';
    let finish;
    for await (const chunk of stream) {
      text += chunk.text ?? '';
      finish = chunk.candidates?.[0]?.finishReason ?? finish;
    }
    assert.equal(text, 'Hello from mock');
    assert.equal(finish, 'STOP');
    const rec = await lastRequest();
    if (up === 'gemini') assert.equal(rec.path, '/v1beta/models/up-gem-model:streamGenerateContent');
  });
}

test('genai: tool call round trip through a Chat upstream (ids minted and mapped back)', async () => {
  await mock.reset();
  await mock.script({ path: '/chat/completions', body: S.chatBody({ id: 't1', model: 'up', toolCalls: [{ id: 'call_abc', name: 'get_weather', args: { city: 'Paris' } }] }) });
  const tools = [{ functionDeclarations: [{ name: 'get_weather', description: 'Weather', parameters: { type: 'OBJECT', properties: { city: { type: 'STRING' } }, required: ['city'] } }] }];
  const g = genai();
  const r = await g.models.generateContent({ model: 'to-chat-x', contents: 'Weather in Paris?', config: { tools } });
  assert.equal(r.functionCalls.length, 1);
  assert.equal(r.functionCalls[0].name, 'get_weather');
  assert.deepEqual(r.functionCalls[0].args, { city: 'Paris' });
  let rec = await lastRequest();
  assert.equal(rec.body.tools[0].function.parameters.properties.city.type, 'string');
  // the second turn sends the call and its response back
  await mock.reset();
  const contents = [
    { role: 'user', parts: [{ text: 'Weather in Paris?' }] },
    r.candidates[0].content,
    { role: 'user', parts: [{ functionResponse: { name: 'get_weather', id: r.functionCalls[0].id, response: { output: '18C' } } }] },
  ];
  const r2 = await g.models.generateContent({ model: 'to-chat-x', contents, config: { tools } });
  assert.equal(r2.text, 'Hello from mock');
  rec = await lastRequest();
  const call = rec.body.messages.find((m) => m.tool_calls);
  const result = rec.body.messages.find((m) => m.role === 'tool');
  assert.equal(result.tool_call_id, call.tool_calls[0].id);
  assert.equal(result.content, '18C');
});

test('genai: countTokens through an Anthropic upstream', async () => {
  await mock.reset();
  const r = await genai().models.countTokens({ model: 'to-anthropic-x', contents: 'count me' });
  assert.ok(r.totalTokens > 0);
  const rec = await lastRequest();
  assert.equal(rec.path, '/v1/messages/count_tokens');
  assert.equal(rec.body.max_tokens, undefined);
});

test('genai: an upstream 429 is RESOURCE_EXHAUSTED, status kept', async () => {
  await mock.reset();
  await mock.script({ path: '/v1/messages', status: 429, body: { type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } } });
  await assert.rejects(genai().models.generateContent({ model: 'to-anthropic-x', contents: 'hi' }), (e) => {
    assert.equal(e.status, 429);
    assert.match(e.message, /slow down/);
    assert.match(e.message, /RESOURCE_EXHAUSTED/);
    return true;
  });
});

test('gemini: the client key in ?key= is accepted and never forwarded; a model with CR LF is refused', async () => {
  await mock.reset();
  const res = await fetch(`${px.url}/v1beta/models/to-chat-x:generateContent?key=client-key`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }),
  });
  assert.equal(res.status, 200);
  const rec = await lastRequest();
  assert.equal(rec.query, null);
  const bad = await fetch(`${px.url}/v1beta/models/a%0D%0ASet-Cookie:%20x:generateContent`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }),
  });
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get('set-cookie'), null);
  const e = await bad.json();
  assert.equal(e.error.status, 'INVALID_ARGUMENT');
});

test('gemini: an unknown method is 404 and GET /v1beta/models lists the routes in the Gemini shape', async () => {
  const res = await fetch(`${px.url}/v1beta/models`);
  assert.equal(res.status, 200);
  const j = await res.json();
  assert.ok(j.models.some((m) => m.name === 'models/gemini-2.5-flash'));
  assert.ok(!j.models.some((m) => m.name.includes('*'))); // never a glob
  const nf = await fetch(`${px.url}/v1beta/models/x:embedContent`, { method: 'POST', body: '{}' });
  assert.equal(nf.status, 404);
});

test('genai: reasoning through an Anthropic upstream (thinking budget out, thought parts back)', async () => {
  await mock.reset();
  await mock.script({ path: '/v1/messages', sse: S.anthropicSSE({ id: 'th1', reasoning: { text: 'Check small primes.' }, text: '97 is prime.' }) });
  const stream = await genai().models.generateContentStream({ model: 'to-anthropic-x', contents: 'Is 97 prime?',
    config: { thinkingConfig: { includeThoughts: true, thinkingBudget: 2048 }, maxOutputTokens: 4000 } });
  let thought = '', text = '';
  for await (const chunk of stream)
    for (const p of chunk.candidates?.[0]?.content?.parts ?? []) {
      if (p.thought) thought += p.text ?? '';
      else text += p.text ?? '';
    }
  assert.equal(thought, 'Check small primes.');
  assert.equal(text, '97 is prime.');
  const rec = await lastRequest();
  assert.deepEqual(rec.body.thinking, { type: 'enabled', budget_tokens: 2048 });
  assert.equal(rec.body.max_tokens, 4000);
});

test('genai: a slow Gemini stream arrives whole; a client that leaves mid-stream does not hurt the next one', async () => {
  await mock.reset();
  await mock.script({ path: ':streamGenerateContent', delay_ms: 150, chunk: 7, sse: gemSSE([
    { candidates: [{ content: { role: 'model', parts: [{ text: 'slow ' }] }, index: 0 }], modelVersion: 'up', responseId: 's1' },
    { candidates: [{ content: { role: 'model', parts: [{ text: 'but ' }] }, index: 0 }], modelVersion: 'up', responseId: 's1' },
    { candidates: [{ content: { role: 'model', parts: [{ text: 'whole' }] }, finishReason: 'STOP', index: 0 }], modelVersion: 'up', responseId: 's1' },
  ]) });
  let text = '';
  for await (const c of await genai().models.generateContentStream({ model: 'to-gemini-x', contents: 'hi' })) text += c.text ?? '';
  assert.equal(text, 'slow but whole');
  // a client that drops its stream after the first chunk
  await mock.script({ path: ':streamGenerateContent', delay_ms: 300, sse: gemSSE([
    { candidates: [{ content: { role: 'model', parts: [{ text: 'a' }] }, index: 0 }], modelVersion: 'up', responseId: 's2' },
    { candidates: [{ content: { role: 'model', parts: [{ text: 'b' }] }, finishReason: 'STOP', index: 0 }], modelVersion: 'up', responseId: 's2' },
  ]) });
  const ac = new AbortController();
  const res = await fetch(`${px.url}/v1beta/models/to-gemini-x:streamGenerateContent?alt=sse`, {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json', 'x-goog-api-key': 'k' },
    body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }),
  });
  const reader = res.body.getReader();
  await reader.read();
  ac.abort();
  const r = await genai().models.generateContent({ model: 'to-gemini-x', contents: 'again' });
  assert.equal(r.text, 'Hello from mock');
});

// ---- other clients against a Gemini upstream ----

test('openai chat -> gemini: reasoning effort asks for thoughts; thought parts come back as reasoning_content', async () => {
  await mock.reset();
  await mock.script({ path: ':generateContent', body: { candidates: [{ content: { role: 'model', parts: [{ text: 'Divisors up to 9.', thought: true }, { text: 'Yes.' }] }, finishReason: 'STOP', index: 0 }],
    usageMetadata: { promptTokenCount: 5, candidatesTokenCount: 2, thoughtsTokenCount: 9, totalTokenCount: 16 }, modelVersion: 'up', responseId: 'rs' } });
  const r = await oa.chat.completions.create({ model: 'to-gemini-x', reasoning_effort: 'medium', messages: [{ role: 'user', content: '97 prime?' }] });
  assert.equal(r.choices[0].message.content, 'Yes.');
  assert.equal(r.choices[0].message.reasoning_content, 'Divisors up to 9.');
  assert.equal(r.usage.completion_tokens, 11);
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 9);
  const rec = await lastRequest();
  assert.deepEqual(rec.body.generationConfig.thinkingConfig, { includeThoughts: true, thinkingBudget: 8192 });
});

test('openai chat -> gemini: text, streamed and not', async () => {
  await mock.reset();
  const r = await oa.chat.completions.create({ model: 'to-gemini-x', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(r.choices[0].message.content, 'Hello from mock');
  assert.equal(r.model, 'to-gemini-x');
  const rec = await lastRequest();
  assert.equal(rec.path, '/v1beta/models/up-gem-model:generateContent');
  assert.deepEqual(rec.body.contents, [{ role: 'user', parts: [{ text: 'hi' }] }]);
  const s = await oa.chat.completions.create({ model: 'to-gemini-x', messages: [{ role: 'user', content: 'hi' }], stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, 'Hello from mock');
});

test('anthropic -> gemini: parallel tool calls and unicode split across writes', async () => {
  await mock.reset();
  await mock.script({ path: ':streamGenerateContent', chunk: 3, sse: gemSSE([
    { candidates: [{ content: { role: 'model', parts: [{ text: 'Météo ' }] }, index: 0 }], modelVersion: 'up', responseId: 'r9' },
    { candidates: [{ content: { role: 'model', parts: [{ functionCall: { name: 'get_weather', args: { city: 'Paris' } } }, { functionCall: { name: 'get_weather', args: { city: 'Rome' } } }] }, finishReason: 'STOP', index: 0 }],
      usageMetadata: { promptTokenCount: 9, candidatesTokenCount: 5, totalTokenCount: 14 }, modelVersion: 'up', responseId: 'r9' },
  ]) });
  const stream = an.messages.stream({ model: 'to-gemini-x', max_tokens: 100, messages: [{ role: 'user', content: 'weather?' }],
    tools: [{ name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }] });
  const msg = await stream.finalMessage();
  assert.equal(msg.stop_reason, 'tool_use');
  assert.equal(msg.content[0].text, 'Météo ');
  const calls = msg.content.filter((b) => b.type === 'tool_use');
  assert.deepEqual(calls.map((c) => c.input.city), ['Paris', 'Rome']);
  assert.notEqual(calls[0].id, calls[1].id);
  assert.equal(msg.usage.output_tokens, 5);
});

test('anthropic -> gemini: a stream cut before its finishReason ends with an error event', async () => {
  await mock.reset();
  await mock.script({ path: ':streamGenerateContent', sse: gemSSE([
    { candidates: [{ content: { role: 'model', parts: [{ text: 'partial' }] }, index: 0 }], modelVersion: 'up', responseId: 'r8' },
  ]) });
  const stream = an.messages.stream({ model: 'to-gemini-x', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
  await assert.rejects(stream.finalMessage());
});

test('anthropic -> gemini: SAFETY is a refusal; max tokens', async () => {
  await mock.reset();
  await mock.script([
    { path: ':generateContent', body: { ...GEM_PARTS('no'), candidates: [{ content: { role: 'model', parts: [{ text: 'I cannot.' }] }, finishReason: 'SAFETY', index: 0 }] } },
    { path: ':generateContent', body: { ...GEM_PARTS('Once'), candidates: [{ content: { role: 'model', parts: [{ text: 'Once' }] }, finishReason: 'MAX_TOKENS', index: 0 }] } },
  ]);
  const r = await an.messages.create({ model: 'to-gemini-x', max_tokens: 100, messages: [{ role: 'user', content: 'x' }] });
  assert.equal(r.stop_reason, 'refusal');
  const r2 = await an.messages.create({ model: 'to-gemini-x', max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
  assert.equal(r2.stop_reason, 'max_tokens');
  const rec = await lastRequest();
  assert.equal(rec.body.generationConfig.maxOutputTokens, 1);
});

test('openai chat -> gemini: a Gemini 503 error keeps its status and message', async () => {
  await mock.reset();
  await mock.script({ path: ':generateContent', status: 503, body: { error: { code: 503, message: 'The model is overloaded.', status: 'UNAVAILABLE' } } });
  await assert.rejects(oa.chat.completions.create({ model: 'to-gemini-x', messages: [{ role: 'user', content: 'hi' }] }), (e) => {
    assert.equal(e.status, 503);
    assert.match(e.message, /overloaded/);
    return true;
  });
});

test('gemini pass-through: the model is rewritten in the URL and in modelVersion, streamed and not', async () => {
  await mock.reset();
  const r = await genai().models.generateContent({ model: 'to-gemini-x', contents: 'hi' });
  assert.equal(r.modelVersion, 'to-gemini-x');
  const g = await genai().models.generateContent({ model: 'gemini-2.5-flash', contents: 'hi' });
  assert.equal(g.modelVersion, 'gemini-2.5-flash');
  const rec = await lastRequest();
  assert.equal(rec.path, '/v1beta/models/gemini-2.5-flash:generateContent');
});

test('gemini pass-through: a blocked prompt ends the stream cleanly (no error appended); the real API\'s finish chunk keeps content', async () => {
  await mock.reset();
  const raw = await fetch(`${px.url}/v1beta/models/to-gemini-x:streamGenerateContent?alt=sse`, {
    method: 'POST',
    headers: { 'x-goog-api-key': 'client-key', 'content-type': 'application/json' },
    body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'mock:block' }] }] }),
  });
  const text = await raw.text();
  assert.equal(raw.status, 200);
  const chunks = text.split(/\r?\n\r?\n/).filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
  assert.equal(chunks.length, 1, text);
  assert.equal(chunks[0].promptFeedback.blockReason, 'SAFETY');
  assert.ok(!text.includes('"error"'), 'no error appended to a complete stream');
  // the SDK reads the block as the API's own
  const seen = [];
  for await (const c of await genai().models.generateContentStream({ model: 'to-gemini-x', contents: 'mock:block' })) seen.push(c);
  assert.equal(seen.at(-1).promptFeedback.blockReason, 'SAFETY');
  // through a translated upstream the finish chunk has content, as the real API's
  for (const up of ['chat', 'responses', 'anthropic']) {
    const r = await fetch(`${px.url}/v1beta/models/to-${up}-x:streamGenerateContent?alt=sse`, {
      method: 'POST',
      headers: { 'x-goog-api-key': 'client-key', 'content-type': 'application/json' },
      body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'hi' }] }] }),
    });
    const evs = (await r.text()).split(/\r?\n\r?\n/).filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
    const last = evs.at(-1).candidates[0];
    assert.equal(last.finishReason, 'STOP', up);
    assert.ok(last.content && last.content.role === 'model', `${up}: the finish chunk has content`);
  }
});

test('gemini clients: a refusal from another protocol finishes SAFETY with its words (Anthropic explanation as finishMessage)', async () => {
  await mock.reset();
  await mock.script({ path: '/v1/messages', body: S.anthropicBody({ id: 'rf1', model: 'up-ant-model', refusal: "I can't help with that.", stop: 'refusal', refusalExplanation: 'Unsafe request.' }) });
  // (the SDK keeps finishMessage only from Vertex: read the wire)
  const raw = await fetch(`${px.url}/v1beta/models/to-anthropic-x:generateContent`, {
    method: 'POST',
    headers: { 'x-goog-api-key': 'client-key', 'content-type': 'application/json' },
    body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'bad' }] }] }),
  });
  const cand = (await raw.json()).candidates[0];
  assert.equal(cand.finishReason, 'SAFETY');
  assert.equal(cand.content.parts[0].text, "I can't help with that.");
  assert.equal(cand.finishMessage, 'Unsafe request.');
  await mock.script({ path: '/chat/completions', body: S.chatBody({ id: 'rf2', model: 'up-chat-model', refusal: 'No.' }) });
  const c = await genai().models.generateContent({ model: 'to-chat-x', contents: 'bad' });
  assert.equal(c.candidates[0].finishReason, 'SAFETY');
  assert.equal(c.text, 'No.');
});

await run();
