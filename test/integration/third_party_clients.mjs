// Widely used third-party clients (not the official SDKs, not the agent
// CLIs) against proxai, each against every upstream protocol it can be
// routed to (issue 26): the Vercel AI SDK (`ai` with @ai-sdk/openai Chat
// and Responses, @ai-sdk/anthropic, @ai-sdk/google), LangChain JS
// (@langchain/openai, @langchain/anthropic, @langchain/google-genai) and
// the OpenAI Agents SDK (@openai/agents, Responses and Chat models). For
// each: a text answer, a stream (with its usage and finish), a tool round
// trip (the call reaches the client whole, the result reaches the upstream
// under the same call id), and an upstream 429 seen as the client's own
// rate-limit error. The C mock is the upstream; its Gemini side answers as
// the real API does (content on the last chunk, signed calls, SAFETY).
import assert from 'node:assert/strict';
import { startMock, startProxai, test, run } from './lib/harness.mjs';
import * as S from './lib/scripts.mjs';

let ai, aiOpenAI, aiAnthropic, aiGoogle, LC, AG, OpenAI;
try {
  ai = await import('ai');
  aiOpenAI = await import('@ai-sdk/openai');
  aiAnthropic = await import('@ai-sdk/anthropic');
  aiGoogle = await import('@ai-sdk/google');
  LC = {
    ...(await import('@langchain/openai')),
    ...(await import('@langchain/anthropic')),
    ...(await import('@langchain/google-genai')),
    ...(await import('@langchain/core/messages')),
    ...(await import('@langchain/core/tools')),
  };
  AG = await import('@openai/agents');
  ({ default: OpenAI } = await import('openai'));
} catch (e) {
  console.error(`cannot load the clients (run \`npm ci\` in test/): ${e.message}`);
  process.exit(1);
}
const { z } = await import('zod');

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
`);

const UPSTREAMS = ['chat', 'responses', 'anthropic', 'gemini'];
const KEY = 'client-key';

// ---- the clients: one object per client, same verbs ----------------------------

const weatherSchema = z.object({ location: z.string() });

const aiClient = (name, proto, make, providerOptions = {}) => ({
  name,
  proto,
  async text(model) {
    const r = await ai.generateText({ model: make(model), prompt: 'Say hi', maxRetries: 0, providerOptions });
    return { text: r.text, input: r.usage.inputTokens, output: r.usage.outputTokens, finish: r.finishReason };
  },
  async stream(model, prompt = 'Say hi') {
    const r = ai.streamText({ model: make(model), prompt, maxRetries: 0, providerOptions, onError: () => {} });
    let text = '';
    for await (const t of r.textStream) text += t;
    const u = await r.usage;
    return { text, input: u.inputTokens, output: u.outputTokens, finish: await r.finishReason };
  },
  async tools(model) {
    const seen = [];
    const r = await ai.generateText({
      model: make(model),
      prompt: 'What is the weather? mock:tool',
      maxRetries: 0,
      providerOptions,
      stopWhen: ai.stepCountIs(3),
      tools: {
        get_weather: ai.tool({
          description: 'Weather of a place',
          inputSchema: weatherSchema,
          execute: async ({ location }) => {
            seen.push(location);
            return `sunny in ${location}`;
          },
        }),
      },
    });
    return { text: r.text, calls: seen };
  },
});

const lcClient = (name, proto, make) => ({
  name,
  proto,
  async text(model) {
    const m = await make(model).invoke('Say hi');
    return { text: textOf(m), input: m.usage_metadata?.input_tokens, output: m.usage_metadata?.output_tokens, finish: finishOf(m) };
  },
  async stream(model, prompt = 'Say hi') {
    let agg;
    for await (const c of await make(model).stream(prompt)) agg = agg ? agg.concat(c) : c;
    return { text: textOf(agg), input: agg.usage_metadata?.input_tokens, output: agg.usage_metadata?.output_tokens, finish: finishOf(agg) };
  },
  async tools(model) {
    const seen = [];
    const weather = LC.tool(async ({ location }) => {
      seen.push(location);
      return `sunny in ${location}`;
    }, { name: 'get_weather', description: 'Weather of a place', schema: weatherSchema });
    const bound = make(model).bindTools([weather]);
    const msgs = [new LC.HumanMessage('What is the weather? mock:tool')];
    const first = await bound.invoke(msgs);
    assert.equal(first.tool_calls?.length, 1, `${name}: one tool call`);
    msgs.push(first);
    for (const tc of first.tool_calls) msgs.push(await weather.invoke(tc));
    const second = await bound.invoke(msgs);
    return { text: textOf(second), calls: seen };
  },
});

// where each LangChain client keeps the finish: Chat finish_reason, Gemini
// finishReason, Responses status, Anthropic stop_reason (streamed: in
// additional_kwargs)
function finishOf(m) {
  const rm = m.response_metadata || {};
  return rm.finish_reason ?? rm.finishReason ?? rm.stop_reason ?? rm.status ?? m.additional_kwargs?.stop_reason;
}

function textOf(m) {
  if (typeof m.content === 'string') return m.content;
  return m.content.filter((p) => p.type === 'text').map((p) => p.text).join('');
}

// The OpenAI Agents SDK: an agent with one model; tracing off (its exporter
// would post to the outside world)
const agClient = (name, proto, Model) => {
  const make = (model, tools = []) => new AG.Agent({ name: 'assistant', instructions: 'Be brief.', tools,
    model: new Model(new OpenAI({ baseURL: `${px.url}/v1`, apiKey: KEY, maxRetries: 0 }), model) });
  const usage = (r) => r.rawResponses.reduce((u, x) => ({ input: u.input + (x.usage?.inputTokens || 0),
    output: u.output + (x.usage?.outputTokens || 0) }), { input: 0, output: 0 });
  return {
    name,
    proto,
    async text(model) {
      const r = await AG.run(make(model), 'Say hi');
      return { text: r.finalOutput, ...usage(r), finish: r.rawResponses.at(-1)?.providerData?.status ?? 'done' };
    },
    async stream(model, prompt = 'Say hi') {
      const r = await AG.run(make(model), prompt, { stream: true });
      let text = '';
      for await (const t of r.toTextStream()) text += t;
      await r.completed;
      return { text, ...usage(r), finish: r.finalOutput != null ? 'done' : null };
    },
    async tools(model) {
      const seen = [];
      const weather = AG.tool({ name: 'get_weather', description: 'Weather of a place', parameters: weatherSchema,
        execute: async ({ location }) => (seen.push(location), `sunny in ${location}`) });
      const r = await AG.run(make(model, [weather]), 'What is the weather? mock:tool');
      return { text: r.finalOutput, calls: seen };
    },
  };
};
AG?.setTracingDisabled?.(true);

const oai = aiOpenAI.createOpenAI({ baseURL: `${px.url}/v1`, apiKey: KEY });
const aan = aiAnthropic.createAnthropic({ baseURL: `${px.url}/v1`, apiKey: KEY });
const agg = aiGoogle.createGoogleGenerativeAI({ baseURL: `${px.url}/v1beta`, apiKey: KEY });

const CLIENTS = [
  aiClient('ai-sdk openai chat', 'chat', (m) => oai.chat(m)),
  // store: false, as Codex and agents with their own history send it (with
  // store on, the SDK refers to earlier output by item_reference, which only
  // a Responses upstream or proxai's own store can resolve)
  aiClient('ai-sdk openai responses', 'responses', (m) => oai.responses(m), { openai: { store: false } }),
  aiClient('ai-sdk anthropic', 'anthropic', (m) => aan(m)),
  aiClient('ai-sdk google', 'gemini', (m) => agg(m)),
  lcClient('langchain openai', 'chat', (m) => new LC.ChatOpenAI({ model: m, apiKey: KEY, maxRetries: 0,
    configuration: { baseURL: `${px.url}/v1` }, streamUsage: true })),
  lcClient('langchain openai responses', 'responses', (m) => new LC.ChatOpenAI({ model: m, apiKey: KEY, maxRetries: 0,
    configuration: { baseURL: `${px.url}/v1` }, useResponsesApi: true })),
  lcClient('langchain anthropic', 'anthropic', (m) => new LC.ChatAnthropic({ model: m, apiKey: KEY, maxRetries: 0,
    anthropicApiUrl: px.url })),
  lcClient('langchain google-genai', 'gemini', (m) => new LC.ChatGoogleGenerativeAI({ model: m, apiKey: KEY, maxRetries: 0,
    baseUrl: px.url })),
  agClient('openai agents responses', 'responses', AG.OpenAIResponsesModel),
  agClient('openai agents chat', 'chat', AG.OpenAIChatCompletionsModel),
];

// ---- scripted upstream answers ----------------------------------------------------

/** A tool call answer for the first request that asks for one (the mock's
 *  Gemini side answers `mock:tool` itself, signed, as the real API does). */
async function scriptToolCall(up) {
  if (up === 'gemini') return;
  const d = { id: 'tc1', model: S.UPSTREAM_MODEL[up], toolCalls: [{ id: 'call_w1', name: 'get_weather', args: { location: 'Paris' } }] };
  await mock.script({ match: 'mock:tool', path: S.UPSTREAM_PATH[up], body: S.bodyFor(up, d) });
}

async function script429(up) {
  const body = up === 'gemini'
    ? { error: { code: 429, message: 'Resource has been exhausted (e.g. check quota).', status: 'RESOURCE_EXHAUSTED' } }
    : S.errorBodyFor(up, 429, 'Rate limit reached for requests');
  await mock.script({ path: up === 'gemini' ? undefined : S.UPSTREAM_PATH[up], status: 429, headers: { 'retry-after': '7' }, body, repeat: true });
}

// ---- the tests ---------------------------------------------------------------------

for (const c of CLIENTS) {
  for (const up of UPSTREAMS) {
    const model = up === 'gemini' ? `to-gemini-${c.proto}` : `to-${up}-${c.proto}`;
    test(`${c.name} -> ${up}: text`, async () => {
      await mock.reset();
      const r = await c.text(model);
      assert.equal(r.text, 'Hello from mock');
      assert.ok(r.input > 0, `input tokens: ${r.input}`);
      assert.ok(r.output > 0, `output tokens: ${r.output}`);
    });
    test(`${c.name} -> ${up}: stream`, async () => {
      await mock.reset();
      const r = await c.stream(model);
      assert.equal(r.text, 'Hello from mock');
      // LangChain's Anthropic client reads input tokens only from
      // message_start; a translated stream learns them with the upstream's
      // final usage (and sends them in message_delta, which it ignores)
      if (!(c.name === 'langchain anthropic' && up !== 'anthropic'))
        assert.ok(r.input > 0, `streamed input tokens: ${r.input}`);
      assert.ok(r.output > 0, `streamed output tokens: ${r.output}`);
      assert.ok(r.finish != null, 'a finish reason');
    });
    test(`${c.name} -> ${up}: tool round trip`, async () => {
      await mock.reset();
      await scriptToolCall(up);
      const r = await c.tools(model);
      assert.deepEqual(r.calls, ['Paris']);
      assert.equal(r.text, 'Hello from mock');
      const reqs = await mock.requests();
      assert.equal(reqs.length, 2, 'the call, then its result');
      const second = JSON.stringify(reqs[1].body);
      assert.match(second, /sunny in Paris/, 'the tool result reaches the upstream');
      // ids are kept verbatim (SPEC 5); a Gemini client has none to keep:
      // proxai maps its calls back by name and order
      if (up !== 'gemini' && c.proto !== 'gemini') assert.match(second, /call_w1/, 'under the same call id');
    });
    test(`${c.name} -> ${up}: upstream 429 is the client's own rate-limit error`, async () => {
      await mock.reset();
      await script429(up);
      let err;
      try {
        await c.text(model);
      } catch (e) {
        err = e;
      }
      assert.ok(err, 'an error');
      const status = err.status ?? err.statusCode ?? err.lastError?.statusCode ?? err.cause?.status;
      assert.equal(status, 429, `${err.constructor.name}: ${err.message}`);
    });
  }
}

// What the real Gemini API does beyond text, seen by clients of the other
// protocols (families of issue 26).
test('ai-sdk openai chat <- gemini SAFETY stream: content-filter, not a normal stop', async () => {
  await mock.reset();
  const r = await CLIENTS[0].stream('to-gemini-chat', 'mock:safety');
  assert.equal(r.finish, 'content-filter');
});
test('langchain google-genai <- chat upstream stream: the finish chunk keeps usage and finish', async () => {
  await mock.reset();
  const r = await CLIENTS[7].stream('to-chat-gemini');
  assert.equal(r.finish, 'STOP');
  assert.equal(r.input, 5);
});
test('ai-sdk anthropic <- gemini blocked prompt: a refusal', async () => {
  await mock.reset();
  const r = await CLIENTS[2].stream('to-gemini-anthropic', 'mock:block');
  assert.equal(r.text, '');
  assert.equal(r.finish, 'content-filter');
});
test('ai-sdk anthropic <- Vertex streamed function-call arguments: one whole call', async () => {
  await mock.reset();
  const seen = [];
  const r = ai.streamText({
    model: aan('to-gemini-anthropic'), prompt: 'Weather? mock:stream-args', maxRetries: 0, stopWhen: ai.stepCountIs(3),
    tools: { get_weather: ai.tool({ inputSchema: weatherSchema, execute: async ({ location }) => (seen.push(location), 'sunny') }) },
  });
  let text = '';
  for await (const t of r.textStream) text += t;
  assert.deepEqual(seen, ['Paris']);
  assert.equal(text, 'Hello from mock');
});

test('a Chat client <- Gemini signed call: the thought signature is declared in x-proxai-lossy, body and stream', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { location: { type: 'string' } } } } }];
  for (const stream of [false, true]) {
    await mock.reset();
    const r = await fetch(`${px.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'to-gemini-chat', stream, tools, messages: [{ role: 'user', content: 'Weather? mock:tool' }] }),
    });
    const text = await r.text();
    assert.equal(r.status, 200, text);
    assert.match(text, /get_weather/);
    assert.ok((r.headers.get('x-proxai-lossy') || '').split(',').includes('candidates[].content.parts[].thoughtSignature'),
      `stream ${stream}: x-proxai-lossy ${r.headers.get('x-proxai-lossy')}`);
  }
});

await run();
