// Non-streaming translation through the real proxai binary, for all six
// cross-protocol pairs, with the official SDKs as clients and the C mock as
// the scripted upstream (issue 3, Tests). Each test names its pair as
// `<client>__<upstream>`.
import assert from 'node:assert/strict';
import { startMock, startProxai, test, run } from './lib/harness.mjs';
import * as S from './lib/scripts.mjs';

let OpenAI, Anthropic;
try {
  ({ default: OpenAI } = await import('openai'));
  ({ default: Anthropic } = await import('@anthropic-ai/sdk'));
} catch (e) {
  console.error(`cannot load the SDKs (run \`npm ci\` in test/): ${e.message}`);
  process.exit(1);
}

const mock = await startMock();
const px = await startProxai(S.gatewayConfig(mock.url));
const oa = new OpenAI({ baseURL: `${px.url}/v1`, apiKey: 'client-key', maxRetries: 0 });
const an = new Anthropic({ baseURL: px.url, apiKey: 'client-key', maxRetries: 0 });

const TOOLS = [
  { name: 'get_weather', description: 'Weather for a city', schema: { type: 'object', properties: { city: { type: 'string' }, units: { type: 'string' } }, required: ['city'] } },
  { name: 'get_time', description: 'Local time of a city', schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
];

/**
 * A neutral conversation -> the client's request. conv:
 * {system: [..], developer: [..], user: 'text' | parts, images: [{url} | {b64, media}], maxTokens, extra}
 */
function clientRequest(client, model, conv) {
  const user = conv.user ?? 'hi';
  const images = conv.images || [];
  if (client === 'chat') {
    const messages = [];
    for (const s of conv.system || []) messages.push({ role: 'system', content: s });
    for (const s of conv.developer || []) messages.push({ role: 'developer', content: s });
    messages.push({
      role: 'user',
      content: images.length
        ? [{ type: 'text', text: user }, ...images.map((i) => ({ type: 'image_url', image_url: { url: i.url ?? `data:${i.media};base64,${i.b64}` } }))]
        : user,
    });
    const req = { model, messages, ...(conv.extra || {}) };
    if (conv.tools) req.tools = conv.tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.schema } }));
    if (conv.maxTokens) req.max_completion_tokens = conv.maxTokens;
    return req;
  }
  if (client === 'responses') {
    const input = [];
    for (const s of conv.developer || []) input.push({ role: 'developer', content: s });
    input.push({
      role: 'user',
      content: images.length
        ? [{ type: 'input_text', text: user }, ...images.map((i) => ({ type: 'input_image', image_url: i.url ?? `data:${i.media};base64,${i.b64}` }))]
        : user,
    });
    const req = { model, input, ...(conv.extra || {}) };
    if (conv.system) req.instructions = conv.system.join('\n');
    if (conv.tools) req.tools = conv.tools.map((t) => ({ type: 'function', name: t.name, description: t.description, parameters: t.schema, strict: false }));
    if (conv.maxTokens) req.max_output_tokens = conv.maxTokens;
    return req;
  }
  const sys = [...(conv.system || []), ...(conv.developer || [])];
  const req = {
    model,
    max_tokens: conv.maxTokens || 256,
    messages: [
      {
        role: 'user',
        content: images.length
          ? [
              { type: 'text', text: user },
              ...images.map((i) => ({ type: 'image', source: i.url ? { type: 'url', url: i.url } : { type: 'base64', media_type: i.media, data: i.b64 } })),
            ]
          : user,
      },
    ],
    ...(conv.extra || {}),
  };
  if (sys.length === 1) req.system = sys[0];
  else if (sys.length > 1) req.system = sys.map((text) => ({ type: 'text', text }));
  if (conv.tools) req.tools = conv.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.schema }));
  return req;
}

/** Sends a request with the client's SDK; resolves to {data, response}. */
function send(client, req) {
  if (client === 'chat') return oa.chat.completions.create(req).withResponse();
  if (client === 'responses') return oa.responses.create(req).withResponse();
  return an.messages.create(req).withResponse();
}

/** Scripts one upstream answer, sends, returns {data, headers, norm, up: the recorded upstream request}. */
async function exchange(client, upstream, conv, answer, { extraEntry = {} } = {}) {
  await mock.reset();
  await mock.script([{ path: S.UPSTREAM_PATH[upstream], body: S.bodyFor(upstream, { model: S.UPSTREAM_MODEL[upstream], ...answer }), ...extraEntry }]);
  const req = clientRequest(client, `to-${upstream}`, conv);
  const { data, response } = await send(client, req);
  const recs = await mock.requests();
  assert.equal(recs.length, 1, 'exactly one upstream request');
  return { req, data, headers: response.headers, norm: S.normalize(client, data), up: recs[0] };
}

const userTextOf = {
  chat: (b) => b.messages.filter((m) => m.role === 'user').map((m) => S.contentText(m.content)).join('|'),
  anthropic: (b) => b.messages.filter((m) => m.role === 'user').map((m) => S.contentText(m.content)).join('|'),
  responses: (b) =>
    typeof b.input === 'string' ? b.input : b.input.filter((m) => m.role === 'user').map((m) => S.contentText(m.content)).join('|'),
};

for (const [client, upstream] of S.PAIRS) {
  const pair = `${client}__${upstream}`;
  const model = `to-${upstream}`;

  test(`${pair}: plain text, model names, upstream request shape`, async () => {
    const x = await exchange(client, upstream, { user: 'Say hello' }, { id: 'plain1', text: 'Hello there, friend.', usage: { input: 12, output: 4 } });
    assert.equal(x.norm.text, 'Hello there, friend.');
    assert.equal(x.norm.refusal, null);
    assert.deepEqual(x.norm.toolCalls, []);
    assert.equal(x.norm.stop, { chat: 'stop', anthropic: 'end_turn', responses: 'completed' }[client]);
    assert.deepEqual(x.norm.usage, { input: 12, output: 4 });
    assert.equal(x.data.model, model, 'response model is the requested one');
    assert.equal(x.headers.get('x-proxai-upstream'), `${S.UPSTREAM_NAME[upstream]}/${S.UPSTREAM_MODEL[upstream]}`);
    // The upstream got its own protocol, the rewritten model and the client's text.
    assert.ok(x.up.path.endsWith(S.UPSTREAM_PATH[upstream]), x.up.path);
    assert.equal(x.up.body.model, S.UPSTREAM_MODEL[upstream]);
    assert.ok(!x.up.body.stream, 'non-streaming request upstream');
    assert.match(userTextOf[upstream](x.up.body), /Say hello/);
    if (upstream === 'anthropic') {
      assert.ok(x.up.headers['anthropic-version'], 'anthropic-version sent upstream');
      assert.equal(x.up.headers['x-api-key'] ?? x.up.headers.authorization?.replace(/^Bearer /, ''), 'up-ant-key');
    } else {
      assert.equal(x.up.headers.authorization, `Bearer ${upstream === 'chat' ? 'up-chat-key' : 'up-resp-key'}`);
    }
    assert.ok(!JSON.stringify(x.up.headers).includes('client-key'), 'client credential not forwarded');
    // ids minted from the upstream id
    const idPrefix = { chat: 'chatcmpl-', anthropic: 'msg_', responses: 'resp_' }[client];
    assert.ok(x.data.id.startsWith(idPrefix) && x.data.id.includes('plain1'), `id ${x.data.id}`);
  });

  test(`${pair}: tool round trip (two calls -> results -> final answer), history as the upstream receives it`, async () => {
    const idA = upstream === 'anthropic' ? 'toolu_01AbC' : 'call_Xy9';
    const idB = upstream === 'anthropic' ? 'toolu_02DeF' : 'call_Zq7';
    const argsA = { city: 'Paris', units: 'c', nested: { list: [1, 2, { deep: 'é"\\' }] } };
    const argsB = { city: 'Paris' };
    const conv = { user: 'Weather and time in Paris?', tools: TOOLS };
    const x1 = await exchange(client, upstream, conv, {
      id: 'tool1',
      text: upstream === 'responses' ? undefined : 'Let me check.',
      toolCalls: [
        { id: idA, name: 'get_weather', args: argsA },
        { id: idB, name: 'get_time', args: argsB },
      ],
    });
    assert.deepEqual(x1.norm.toolCalls, [
      { id: idA, name: 'get_weather', args: argsA },
      { id: idB, name: 'get_time', args: argsB },
    ]);
    assert.equal(x1.norm.stop, { chat: 'tool_calls', anthropic: 'tool_use', responses: 'completed' }[client]);
    // The tools reached the upstream in its own form.
    const upTools = x1.up.body.tools.map((t) => ({ name: t.name ?? t.function?.name, schema: t.input_schema ?? t.parameters ?? t.function?.parameters }));
    assert.deepEqual(upTools, TOOLS.map((t) => ({ name: t.name, schema: t.schema })));

    // Second turn: the client sends the results back in its own protocol.
    const req2 = structuredClone(x1.req);
    if (client === 'chat') {
      const m = x1.data.choices[0].message;
      req2.messages.push({ role: 'assistant', content: m.content ?? null, tool_calls: m.tool_calls });
      req2.messages.push({ role: 'tool', tool_call_id: idA, content: '18C and sunny' });
      req2.messages.push({ role: 'tool', tool_call_id: idB, content: '14:05' });
    } else if (client === 'anthropic') {
      req2.messages.push({ role: 'assistant', content: x1.data.content });
      req2.messages.push({
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: idA, content: '18C and sunny' },
          { type: 'tool_result', tool_use_id: idB, content: '14:05' },
        ],
      });
    } else {
      req2.input.push(...x1.data.output);
      req2.input.push({ type: 'function_call_output', call_id: idA, output: '18C and sunny' });
      req2.input.push({ type: 'function_call_output', call_id: idB, output: '14:05' });
    }
    await mock.reset();
    await mock.script([{ path: S.UPSTREAM_PATH[upstream], body: S.bodyFor(upstream, { id: 'tool2', model: S.UPSTREAM_MODEL[upstream], text: 'It is 18C and 14:05 in Paris.' }) }]);
    const { data } = await send(client, req2);
    assert.equal(S.normalize(client, data).text, 'It is 18C and 14:05 in Paris.');
    const [up2] = await mock.requests();
    const b = up2.body;
    if (upstream === 'chat') {
      const asst = b.messages.find((m) => m.role === 'assistant' && m.tool_calls);
      assert.ok(asst, `assistant tool_calls in ${JSON.stringify(b.messages)}`);
      assert.deepEqual(
        asst.tool_calls.map((t) => ({ id: t.id, type: t.type, name: t.function.name, args: JSON.parse(t.function.arguments) })),
        [
          { id: idA, type: 'function', name: 'get_weather', args: argsA },
          { id: idB, type: 'function', name: 'get_time', args: argsB },
        ],
      );
      const i = b.messages.indexOf(asst);
      const tools = b.messages.slice(i + 1).filter((m) => m.role === 'tool');
      assert.deepEqual(tools.map((m) => [m.tool_call_id, S.contentText(m.content)]), [[idA, '18C and sunny'], [idB, '14:05']]);
      assert.equal(b.messages[i + 1].role, 'tool', 'results follow the assistant message');
    } else if (upstream === 'anthropic') {
      const ai = b.messages.findIndex((m) => m.role === 'assistant');
      assert.ok(ai >= 0, JSON.stringify(b.messages));
      const uses = b.messages[ai].content.filter((c) => c.type === 'tool_use');
      assert.deepEqual(uses.map((u) => ({ id: u.id, name: u.name, input: u.input })), [
        { id: idA, name: 'get_weather', input: argsA },
        { id: idB, name: 'get_time', input: argsB },
      ]);
      assert.equal(b.messages.length, ai + 2, 'both results in ONE user message right after the assistant turn');
      const res = b.messages[ai + 1];
      assert.equal(res.role, 'user');
      assert.deepEqual(
        res.content.filter((c) => c.type === 'tool_result').map((c) => [c.tool_use_id, S.contentText(c.content)]),
        [[idA, '18C and sunny'], [idB, '14:05']],
      );
    } else {
      const calls = b.input.filter((it) => it.type === 'function_call');
      assert.deepEqual(calls.map((c) => ({ call_id: c.call_id, name: c.name, args: JSON.parse(c.arguments) })), [
        { call_id: idA, name: 'get_weather', args: argsA },
        { call_id: idB, name: 'get_time', args: argsB },
      ]);
      const outs = b.input.filter((it) => it.type === 'function_call_output');
      assert.deepEqual(outs.map((o) => [o.call_id, S.contentText(o.output)]), [[idA, '18C and sunny'], [idB, '14:05']]);
      assert.ok(b.input.indexOf(outs[0]) > b.input.indexOf(calls[1]), 'outputs after the calls');
    }
  });

  test(`${pair}: refusal`, async () => {
    const W = "I can't help with that request.";
    const x = await exchange(client, upstream, { user: 'do a bad thing' }, { id: 'ref1', refusal: W, stop: 'refusal', refusalExplanation: 'Policy: unsafe.' });
    if (client === 'chat') {
      const m = x.data.choices[0].message;
      assert.equal(m.refusal, W);
      assert.ok(m.content == null || m.content === '', `content must not repeat the refusal: ${JSON.stringify(m.content)}`);
      assert.equal(x.data.choices[0].finish_reason, 'stop');
    } else if (client === 'anthropic') {
      assert.equal(x.data.stop_reason, 'refusal');
      assert.equal(x.norm.text, W, 'wording kept in a text block');
      assert.equal(typeof x.data.stop_details?.explanation, 'string', `stop_details.explanation: ${JSON.stringify(x.data.stop_details)}`);
    } else {
      assert.equal(x.norm.refusal, W, `refusal part in ${JSON.stringify(x.data.output)}`);
      assert.equal(x.norm.text, null, 'refusal wording not duplicated as output_text');
      // SPEC 5: from Chat (message.refusal) -> completed; from Anthropic stop_reason refusal -> failed.
      assert.equal(x.data.status, upstream === 'anthropic' ? 'failed' : 'completed');
    }
  });

  if (upstream === 'chat') {
    test(`${pair}: Chat finish_reason content_filter (SPEC 5)`, async () => {
      const x = await exchange(client, upstream, { user: 'x' }, { id: 'cf1', text: 'Partial', stop: 'content_filter' });
      if (client === 'anthropic') assert.equal(x.data.stop_reason, 'refusal', JSON.stringify(x.data));
      else {
        assert.equal(x.data.status, 'incomplete', JSON.stringify(x.data));
        assert.equal(x.data.incomplete_details?.reason, 'content_filter');
      }
    });
  }

  test(`${pair}: max tokens (request limit mapped, truncation reported)`, async () => {
    const x = await exchange(client, upstream, { user: 'write a lot', maxTokens: 77 }, { id: 'len1', text: 'Once upon a ti', stop: 'length' });
    const upMax = { chat: x.up.body.max_completion_tokens ?? x.up.body.max_tokens, anthropic: x.up.body.max_tokens, responses: x.up.body.max_output_tokens }[upstream];
    assert.equal(upMax, 77, `upstream max tokens in ${JSON.stringify(x.up.body)}`);
    assert.equal(x.norm.text, 'Once upon a ti');
    if (client === 'chat') assert.equal(x.data.choices[0].finish_reason, 'length');
    else if (client === 'anthropic') assert.equal(x.data.stop_reason, 'max_tokens');
    else {
      assert.equal(x.data.status, 'incomplete');
      assert.equal(x.data.incomplete_details?.reason, 'max_output_tokens');
    }
  });

  test(`${pair}: reasoning`, async () => {
    const x = await exchange(client, upstream, { user: 'think' }, { id: 'rsn1', reasoning: { text: 'Six times seven is 42.', signature: 'sig-XYZ' }, text: '42' });
    assert.equal(x.norm.text, '42');
    assert.equal(x.norm.reasoning, 'Six times seven is 42.', `reasoning in ${JSON.stringify(x.data)}`);
    if (client === 'chat') assert.ok(!String(x.data.choices[0].message.content).includes('Six times'), 'thinking not in content');
    if (client === 'responses') {
      const kinds = x.data.output.map((i) => i.type);
      assert.ok(kinds.indexOf('reasoning') < kinds.indexOf('message'), `reasoning item first: ${kinds}`);
    }
    if (client === 'anthropic') assert.equal(x.data.content[0].type, 'thinking');
  });

  test(`${pair}: reasoning sent back in history is carried or named as lossy`, async () => {
    const R = 'Six times seven is 42.';
    const x1 = await exchange(client, upstream, { user: 'think' }, { id: 'rsh1', reasoning: { text: R, signature: 'sig-XYZ' }, text: '42' });
    const req2 = structuredClone(x1.req);
    if (client === 'chat') {
      const m = x1.data.choices[0].message;
      req2.messages.push({ role: 'assistant', content: m.content, reasoning_content: m.reasoning_content });
      req2.messages.push({ role: 'user', content: 'and again?' });
    } else if (client === 'anthropic') {
      req2.messages.push({ role: 'assistant', content: x1.data.content });
      req2.messages.push({ role: 'user', content: 'and again?' });
    } else {
      req2.input.push(...x1.data.output);
      req2.input.push({ role: 'user', content: 'and again?' });
    }
    await mock.reset();
    await mock.script([{ path: S.UPSTREAM_PATH[upstream], body: S.bodyFor(upstream, { id: 'rsh2', model: S.UPSTREAM_MODEL[upstream], text: 'ok' }) }]);
    const { response } = await send(client, req2);
    const lossy = response.headers.get('x-proxai-lossy') || '';
    const [up] = await mock.requests();
    const b = up.body;
    let carried;
    let signature;
    if (upstream === 'chat') {
      const a = b.messages.find((m) => m.role === 'assistant');
      carried = a?.reasoning_content;
    } else if (upstream === 'anthropic') {
      const t = b.messages.find((m) => m.role === 'assistant')?.content.find((c) => c.type === 'thinking');
      carried = t?.thinking;
      signature = t?.signature;
    } else {
      const r = b.input.find((i) => i.type === 'reasoning');
      carried = r && [...(r.summary || []), ...(r.content || [])].map((s) => s.text).join('');
      signature = r?.encrypted_content;
    }
    const where = `upstream ${JSON.stringify(b.messages ?? b.input)}; x-proxai-lossy: ${lossy}`;
    if (upstream === 'chat') assert.equal(carried, R, `Chat can hold reasoning_content: ${where}`);
    else if (client === 'responses' && upstream === 'anthropic') {
      // A thinking signature that made the round trip Anthropic -> Responses client -> Anthropic survives.
      assert.equal(carried, R, where);
      assert.equal(signature, 'sig-XYZ', where);
    } else {
      assert.ok(carried === R || /reasoning|thinking|encrypted|signature|summary/.test(lossy), `reasoning neither carried nor named as lossy: ${where}`);
    }
  });

  test(`${pair}: image input (URL and base64) in the upstream's own form`, async () => {
    const b64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
    const url = 'https://example.test/cat.png';
    const x = await exchange(client, upstream, { user: 'describe', images: [{ url }, { b64, media: 'image/png' }] }, { id: 'img1', text: 'A cat.' });
    assert.equal(x.norm.text, 'A cat.');
    const b = x.up.body;
    if (upstream === 'chat') {
      const parts = b.messages.find((m) => m.role === 'user').content;
      assert.deepEqual(parts.filter((p) => p.type === 'image_url').map((p) => p.image_url.url), [url, `data:image/png;base64,${b64}`]);
      assert.deepEqual(parts.filter((p) => p.type === 'text').map((p) => p.text), ['describe']);
    } else if (upstream === 'anthropic') {
      const parts = b.messages.find((m) => m.role === 'user').content;
      assert.deepEqual(parts.filter((p) => p.type === 'image').map((p) => p.source), [
        { type: 'url', url },
        { type: 'base64', media_type: 'image/png', data: b64 },
      ]);
    } else {
      const parts = b.input.find((m) => m.role === 'user').content;
      assert.deepEqual(parts.filter((p) => p.type === 'input_image').map((p) => p.image_url), [url, `data:image/png;base64,${b64}`]);
      assert.deepEqual(parts.filter((p) => p.type === 'input_text').map((p) => p.text), ['describe']);
    }
  });

  test(`${pair}: system + developer instructions placement`, async () => {
    const x = await exchange(client, upstream, { system: ['Sys A rule.'], developer: ['Dev B rule.'], user: 'hello' }, { id: 'sys1', text: 'ok' });
    const b = x.up.body;
    if (upstream === 'anthropic') {
      const sys = typeof b.system === 'string' ? b.system : b.system.map((s) => s.text).join('\n');
      assert.match(sys, /Sys A rule\.[\s\S]*Dev B rule\./, `system: ${JSON.stringify(b.system)}`);
      assert.ok(b.messages.every((m) => m.role === 'user' || m.role === 'assistant'), 'no system role in messages');
      assert.equal(S.contentText(b.messages[0].content), 'hello');
    } else if (upstream === 'responses') {
      // Folded into `instructions` (or kept as system/developer input items before the user turn).
      const items = (Array.isArray(b.input) ? b.input : []).filter((m) => m.role === 'system' || m.role === 'developer');
      const all = [b.instructions || '', ...items.map((m) => S.contentText(m.content))].join('\n');
      assert.match(all, /Sys A rule\.[\s\S]*Dev B rule\./, `instructions ${JSON.stringify(b.instructions)} input ${JSON.stringify(b.input)}`);
      assert.match(b.instructions || '', /Sys A rule\./, 'system text in instructions');
      assert.match(userTextOf.responses(b), /hello/);
    } else {
      const sysMsgs = b.messages.filter((m) => m.role === 'system' || m.role === 'developer');
      assert.match(sysMsgs.map((m) => S.contentText(m.content)).join('\n'), /Sys A rule\.[\s\S]*Dev B rule\./, JSON.stringify(b.messages));
      assert.ok(b.messages.indexOf(sysMsgs[0]) < b.messages.findIndex((m) => m.role === 'user'), 'instructions before the user turn');
    }
  });

  for (const [status, cls, msg] of [
    [401, 'AuthenticationError', 'Invalid authentication credentials'],
    [429, 'RateLimitError', 'Rate limit reached for requests, slow down'],
    [500, 'InternalServerError', 'The server had an error processing your request'],
  ]) {
    test(`${pair}: upstream ${status} -> SDK ${cls} with the message kept`, async () => {
      await mock.reset();
      const headers = status === 429 ? { 'retry-after': '7', 'content-type': 'application/json' } : { 'content-type': 'application/json' };
      await mock.script([{ path: S.UPSTREAM_PATH[upstream], status, headers, body: S.errorBodyFor(upstream, status, msg) }]);
      const req = clientRequest(client, model, { user: 'hi' });
      let err;
      try {
        await send(client, req);
      } catch (e) {
        err = e;
      }
      assert.ok(err, 'the SDK call must throw');
      const SDK = client === 'anthropic' ? Anthropic : OpenAI;
      assert.ok(err instanceof SDK[cls], `expected ${cls}, got ${err.constructor.name}: ${err.message}`);
      assert.equal(err.status, status);
      assert.ok(err.message.includes(msg), `message kept: ${err.message}`);
      if (status === 429) assert.equal(err.headers.get('retry-after'), '7');
      // The error body is in the client's shape.
      if (client === 'anthropic') assert.equal(err.error?.type, 'error', JSON.stringify(err.error));
      else assert.equal(typeof err.error?.message, 'string', JSON.stringify(err.error));
      assert.equal((await mock.requests()).length, 1, 'no retry with retries = 0');
    });
  }

  test(`${pair}: HTML upstream error -> 502 in the client's shape`, async () => {
    await mock.reset();
    await mock.script([{ path: S.UPSTREAM_PATH[upstream], status: 502, headers: { 'content-type': 'text/html' }, body: '<html><body><h1>502 Bad Gateway</h1></body></html>' }]);
    const err = await send(client, clientRequest(client, model, { user: 'hi' })).then(
      () => null,
      (e) => e,
    );
    assert.ok(err, 'must throw');
    assert.equal(err.status, 502, `${err.status} ${err.message}`);
    assert.ok(err instanceof (client === 'anthropic' ? Anthropic : OpenAI).InternalServerError, err.constructor.name);
    assert.ok(!err.message.includes('<html>'), `no raw HTML in the message: ${err.message}`);
    if (client === 'anthropic') assert.equal(err.error?.error?.type, 'api_error', JSON.stringify(err.error));
    else assert.equal(err.error?.type, 'api_error', JSON.stringify(err.error));
  });

  if (upstream === 'chat') {
    test(`${pair}: multi-choice Chat response is rejected, never merged or truncated`, async () => {
      const body = S.chatBody({ id: 'mc1', model: S.UPSTREAM_MODEL.chat, text: 'Option A' });
      body.choices.push({ index: 1, message: { role: 'assistant', content: 'Option B', refusal: null }, logprobs: null, finish_reason: 'stop' });
      await mock.reset();
      await mock.script([{ path: S.UPSTREAM_PATH.chat, body }]);
      const err = await send(client, clientRequest(client, model, { user: 'hi' })).then(
        (r) => r.data,
        (e) => e,
      );
      assert.ok(err instanceof Error, `must be an error, got ${JSON.stringify(err)}`);
      assert.ok(err.status >= 500, `${err.status} ${err.message}`);
    });
  }

  if (upstream === 'responses') {
    test(`${pair}: a Responses answer that is none (failed, not finished) is a 5xx naming why`, async () => {
      for (const [status, extra, words] of [
        ['failed', { error: { code: 'server_error', message: 'the model stopped' } }, 'upstream response failed: the model stopped'],
        ['in_progress', {}, 'upstream response is not finished (status in_progress)'],
      ]) {
        const body = { ...S.responsesBody({ id: 'resp_f1', model: S.UPSTREAM_MODEL.responses, text: 'partial' }), status, ...extra };
        await mock.reset();
        await mock.script([{ path: S.UPSTREAM_PATH.responses, body }]);
        const err = await send(client, clientRequest(client, model, { user: 'hi' })).then(
          (r) => r.data,
          (e) => e,
        );
        assert.ok(err instanceof Error, `must be an error, got ${JSON.stringify(err)}`);
        assert.ok(err.status >= 500, `${err.status} ${err.message}`);
        assert.ok(err.message.includes(words), err.message);
      }
    });
  }

  if (upstream !== 'chat' || client !== 'responses') {
    test(`${pair}: invalid tool-call arguments in history are rejected with a 400, never replaced by {}`, async () => {
      const req = clientRequest(client, model, { user: 'hi', tools: TOOLS });
      if (client === 'chat') {
        req.messages.push({ role: 'assistant', content: null, tool_calls: [{ id: 'call_bad', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Par' } }] });
        req.messages.push({ role: 'tool', tool_call_id: 'call_bad', content: 'x' });
      } else if (client === 'responses') {
        req.input.push({ type: 'function_call', call_id: 'call_bad', name: 'get_weather', arguments: '{"city": "Par' });
        req.input.push({ type: 'function_call_output', call_id: 'call_bad', output: 'x' });
      } else {
        return; // Anthropic tool_use.input is an object: nothing to parse
      }
      await mock.reset();
      const err = await send(client, req).then(
        () => null,
        (e) => e,
      );
      const reqs = await mock.requests();
      if (upstream === 'anthropic') {
        assert.ok(err, `must be rejected; upstream got ${JSON.stringify(reqs.map((r) => r.body.messages))}`);
        assert.equal(err.status, 400, err.message);
        assert.ok(err instanceof OpenAI.BadRequestError, err.constructor.name);
        assert.equal(reqs.length, 0, 'nothing sent upstream');
      } else {
        // Chat <-> Responses carry arguments as a string: passed verbatim, not parsed.
        if (err) {
          assert.equal(err.status, 400, err.message);
          assert.equal(reqs.length, 0, 'nothing sent upstream');
        } else {
          const b = reqs[0].body;
          const args = upstream === 'chat'
            ? b.messages.find((m) => m.tool_calls)?.tool_calls[0].function.arguments
            : b.input.find((i) => i.type === 'function_call')?.arguments;
          assert.equal(args, '{"city": "Par', 'kept verbatim, never replaced');
        }
      }
    });
  }

  test(`${pair}: x-proxai-lossy names what was dropped`, async () => {
    // A parameter the upstream cannot hold, per client protocol.
    const extra = { chat: { frequency_penalty: 0.5 }, responses: { max_tool_calls: 3 }, anthropic: { top_k: 5 } }[client];
    const field = Object.keys(extra)[0];
    const x = await exchange(client, upstream, { user: 'hi', extra }, { id: 'lossy1', text: 'ok' });
    const lossy = (x.headers.get('x-proxai-lossy') || '').split(',').map((s) => s.trim());
    assert.ok(lossy.includes(field), `x-proxai-lossy ${JSON.stringify(x.headers.get('x-proxai-lossy'))} should name ${field}`);
    assert.ok(!(field in x.up.body), `${field} not sent upstream`);
    // And a request that loses nothing says nothing (Anthropic default max_tokens aside).
    const y = await exchange(client, upstream, { user: 'hi', maxTokens: 50 }, { id: 'lossy2', text: 'ok' });
    assert.equal(y.headers.get('x-proxai-lossy'), null, `nothing dropped, got ${y.headers.get('x-proxai-lossy')}`);
  });
}

await run();
