// The three upstream families of the stored Responses tests: their config
// sections, scripted answers, and readers of what the gateway sent them.
import * as C from './config.mjs';

/** [upstream] and [route] sections for the mock at url (with an
 *  openai_responses upstream for oai-* when responses is set). */
export function upstreams(url, { responses = false } = {}) {
  const keys = { api_key: 'up-key', retries: null };
  return (responses ? C.upstream('oai', 'responses', url, keys) + C.route('oai-*', { upstream: 'oai' }) : '')
    + C.upstream('anth', 'anthropic', url, keys)
    + C.upstream('chat', 'chat', url, keys)
    + C.upstream('gem', 'gemini', url, keys)
    + C.route('claude-*', { upstream: 'anth' })
    + C.route('gpt-*', { upstream: 'chat' })
    + C.route('gemini-*', { upstream: 'gem' });
}

const text = (c) => (typeof c === 'string' ? c
  : (c || []).filter((p) => p.type === 'text' || p.text !== undefined).map((p) => p.text).join(''));

export const FAMILIES = [
  {
    name: 'anthropic',
    model: 'claude-sonnet',
    toolCall: () => ({
      path: '/v1/messages',
      body: {
        id: 'msg_tool1', type: 'message', role: 'assistant', model: 'claude-sonnet',
        content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }],
        stop_reason: 'tool_use', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 3 },
      },
    }),
  },
  {
    name: 'chat',
    model: 'gpt-4o',
    toolCall: () => ({
      path: '/chat/completions',
      body: {
        id: 'chatcmpl-tool1', object: 'chat.completion', created: 1, model: 'gpt-4o',
        choices: [{
          index: 0, finish_reason: 'tool_calls',
          message: {
            role: 'assistant', content: null,
            tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
          },
        }],
        usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 },
      },
    }),
  },
  {
    name: 'gemini',
    model: 'gemini-2.5-pro',
    toolCall: () => ({
      path: ':generateContent',
      body: {
        candidates: [{ index: 0, finishReason: 'STOP', content: { role: 'model', parts: [{ functionCall: { name: 'get_weather', args: { city: 'Paris' } } }] } }],
        usageMetadata: { promptTokenCount: 5, candidatesTokenCount: 3, totalTokenCount: 8 },
        modelVersion: 'gemini-2.5-pro', responseId: 'gem_tool1',
      },
    }),
  },
];

/** {system, turns: [[role, text]...]} of an upstream request body. */
export function conversation(fam, body) {
  if (fam.name === 'anthropic') {
    return {
      system: body.system === undefined ? null : text(body.system),
      turns: body.messages.map((m) => [m.role, text(m.content)]),
    };
  }
  if (fam.name === 'chat') {
    const sys = body.messages.filter((m) => m.role === 'system' || m.role === 'developer');
    return {
      system: sys.length ? sys.map((m) => text(m.content)).join('') : null,
      turns: body.messages.filter((m) => !sys.includes(m)).map((m) => [m.role, text(m.content)]),
    };
  }
  return {
    system: body.systemInstruction ? text(body.systemInstruction.parts) : null,
    turns: body.contents.map((c) => [c.role === 'model' ? 'assistant' : 'user', text(c.parts)]),
  };
}

/** The tool call and its result as the upstream got them. */
export function toolExchange(fam, body) {
  if (fam.name === 'anthropic') {
    const call = body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).find((b) => b.type === 'tool_use');
    const res = body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).find((b) => b.type === 'tool_result');
    return { name: call.name, args: call.input, result: text(res.content), paired: res.tool_use_id === call.id };
  }
  if (fam.name === 'chat') {
    const call = body.messages.find((m) => m.tool_calls).tool_calls[0];
    const res = body.messages.find((m) => m.role === 'tool');
    return { name: call.function.name, args: JSON.parse(call.function.arguments), result: text(res.content), paired: res.tool_call_id === call.id };
  }
  const parts = body.contents.flatMap((c) => c.parts);
  const call = parts.find((p) => p.functionCall).functionCall;
  const res = parts.find((p) => p.functionResponse).functionResponse;
  const r = res.response;
  const out = typeof r === 'string' ? r : r.output ?? r.content ?? r.result ?? JSON.stringify(r);
  return { name: call.name, args: call.args, result: typeof out === 'string' ? out : JSON.stringify(out), paired: res.name === call.name };
}

/** An Anthropic answer with a signed thinking block, then text. */
export const anthropicThinking = (signature) => ({
  path: '/v1/messages',
  body: {
    id: 'msg_think1', type: 'message', role: 'assistant', model: 'claude-sonnet',
    content: [{ type: 'thinking', thinking: 'let me see', signature }, { type: 'text', text: 'done' }],
    stop_reason: 'end_turn', stop_sequence: null, usage: { input_tokens: 5, output_tokens: 3 },
  },
});
