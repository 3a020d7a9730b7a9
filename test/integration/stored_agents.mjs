// A real framework that chains turns by previous_response_id: the OpenAI
// Agents SDK (@openai/agents, Responses API) running an agent with a tool on
// a Claude, a Chat and a Gemini model through proxai. Its second run names
// the first run's last response (previousResponseId) and sends only what is
// new, and its tool loop inside a run chains each model call to the one
// before: the upstream must still get the whole conversation, tool calls
// paired with their results (SPEC section 14).
import assert from 'node:assert/strict';
import { startMock, startProxai, test, run } from './lib/harness.mjs';
import { startRedis } from './lib/redis.mjs';
import * as C from './lib/config.mjs';
import * as up from './lib/stored.mjs';

process.env.OPENAI_AGENTS_DISABLE_TRACING = '1';
const { default: OpenAI } = await import('openai');
const agents = await import('@openai/agents');
const { z } = await import('zod');

const redis = await startRedis();
const mock = await startMock();
const px = await startProxai(C.server()
  + C.state({ backend: 'redis', redis: redis.url, prefix: `ag${process.pid}:` })
  + up.upstreams(mock.url)
  + C.key('agent', { secret: 'sk-agent' }));

agents.setTracingDisabled(true);
// what the SDK itself sends, to show it relies on the stored turns
const sent = [];
const recording = async (url, init) => {
  if (init?.body) sent.push(JSON.parse(init.body));
  return fetch(url, init);
};
agents.setDefaultOpenAIClient(new OpenAI({ baseURL: `${px.url}/v1`, apiKey: 'sk-agent', maxRetries: 0, fetch: recording }));
agents.setOpenAIAPI('responses');

const calls = [];
const getWeather = agents.tool({
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    calls.push(city);
    return `sunny in ${city}`;
  },
});

for (const fam of up.FAMILIES) {
  test(`${fam.name}: two runs chained by previousResponseId, a tool call in each`, async () => {
    await mock.reset();
    calls.length = 0;
    sent.length = 0;
    const agent = new agents.Agent({
      name: 'Forecaster', instructions: 'Answer briefly.', model: fam.model, tools: [getWeather],
    });
    await mock.script(fam.toolCall()); // the first model call asks for the tool
    const r1 = await agents.run(agent, 'Weather in Paris?');
    assert.equal(r1.finalOutput, 'Hello from mock');
    assert.match(r1.lastResponseId, /^resp_[a-z0-9]{24}$/);
    await mock.script(fam.toolCall());
    const r2 = await agents.run(agent, 'And tomorrow?', { previousResponseId: r1.lastResponseId });
    assert.equal(r2.finalOutput, 'Hello from mock');
    assert.deepEqual(calls, ['Paris', 'Paris']);
    // the SDK sent the second run's input alone, naming the first run
    assert.equal(sent[2].previous_response_id, r1.lastResponseId);
    assert.deepEqual(JSON.stringify(sent[2].input).includes('Weather in Paris'), false);
    // and its tool loop chained the tool's output to the call's response
    assert.match(sent[3].previous_response_id, /^resp_[a-z0-9]{24}$/);
    assert.deepEqual(sent[3].input.map((i) => i.type), ['function_call_output']);
    const reqs = (await mock.requests()).filter((r) => r.method === 'POST');
    assert.equal(reqs.length, 4, 'two model calls per run');
    // the last call: both runs, both tool exchanges, in order
    const last = up.conversation(fam, reqs[3].body);
    assert.equal(last.turns[0][1], 'Weather in Paris?');
    assert.ok(last.turns.some((t) => t[1] === 'And tomorrow?'), JSON.stringify(last.turns));
    const ex = up.toolExchange(fam, reqs[3].body);
    assert.equal(ex.paired, true);
    assert.equal(ex.result, 'sunny in Paris');
    const body = JSON.stringify(reqs[3].body);
    assert.equal(body.split('get_weather').length - 1 >= 3, true, 'both calls and the tool declaration');
    assert.equal(body.split('sunny in Paris').length - 1, 2, 'both results');
  }, { timeout: 60000 });
}

await run();
await redis.stop();
