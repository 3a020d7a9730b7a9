// Scripted upstream answers for the mock, per upstream protocol, built from
// one neutral description of an assistant turn:
//
//   {
//     id: 'u1',                     // upstream id stem (chatcmpl-/msg_/resp_ + id)
//     model: 'up-model',            // the model name the upstream reports
//     reasoning: { text, signature },   // optional (signature: Anthropic thinking / Responses encrypted_content)
//     text: 'Hello',                // optional assistant text
//     refusal: 'I cannot',          // optional refusal wording
//     refusalExplanation: '...',    // optional, Anthropic stop_details.explanation
//     toolCalls: [{ id, name, args }],  // args: a JSON value (object)
//     stop: 'end' | 'length' | 'tool' | 'refusal',   // default: 'tool' if toolCalls, else 'end'
//     usage: { input: 10, output: 5 },
//   }
//
// chatBody/anthropicBody/responsesBody give the non-streaming JSON body;
// chatSSE/anthropicSSE/responsesSSE give mock `sse` event lists (objects
// {event?, data}). bodyFor/sseFor pick by protocol name. Everything is
// deterministic.

import * as C from './config.mjs';

export const CREATED = 1700000000;

const stopOf = (d) => d.stop || (d.toolCalls && d.toolCalls.length ? 'tool' : 'end');
const usageOf = (d) => ({ input: 10, output: 5, ...(d.usage || {}) });

/** Splits a string into n roughly equal pieces (code-point safe), at least one piece. */
export function pieces(s, n = 3) {
  const cps = Array.from(s);
  if (cps.length === 0) return [''];
  const size = Math.max(1, Math.ceil(cps.length / n));
  const out = [];
  for (let i = 0; i < cps.length; i += size) out.push(cps.slice(i, i + size).join(''));
  return out;
}

// ---- Chat Completions ---------------------------------------------------------

const CHAT_FINISH = { end: 'stop', length: 'length', tool: 'tool_calls', refusal: 'stop', content_filter: 'content_filter' };

export function chatBody(d) {
  const u = usageOf(d);
  const message = { role: 'assistant', content: d.text ?? null, refusal: d.refusal ?? null };
  if (d.reasoning) message.reasoning_content = d.reasoning.text;
  if (d.toolCalls && d.toolCalls.length) {
    message.tool_calls = d.toolCalls.map((t) => ({
      id: t.id,
      type: 'function',
      function: { name: t.name, arguments: JSON.stringify(t.args) },
    }));
  }
  return {
    id: `chatcmpl-${d.id || 'u1'}`,
    object: 'chat.completion',
    created: CREATED,
    model: d.model || 'up-model',
    choices: [{ index: 0, message, logprobs: null, finish_reason: CHAT_FINISH[stopOf(d)] }],
    usage: { prompt_tokens: u.input, completion_tokens: u.output, total_tokens: u.input + u.output },
  };
}

/**
 * Chat SSE events. opts.interleave: tool-call argument fragments of all calls
 * interleaved (call 0 frag 0, call 1 frag 0, call 0 frag 1, ...).
 * opts.usage (default true): the usage-only chunk before [DONE].
 */
export function chatSSE(d, { interleave = false, usage = true, fragments = 3 } = {}) {
  const u = usageOf(d);
  const id = `chatcmpl-${d.id || 'u1'}`;
  const model = d.model || 'up-model';
  const chunk = (delta, finish = null) => ({
    data: { id, object: 'chat.completion.chunk', created: CREATED, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(usage ? { usage: null } : {}) },
  });
  const ev = [chunk({ role: 'assistant', content: '' })];
  if (d.reasoning) for (const p of pieces(d.reasoning.text, fragments)) ev.push(chunk({ reasoning_content: p }));
  if (d.text) for (const p of pieces(d.text, fragments)) ev.push(chunk({ content: p }));
  if (d.refusal) for (const p of pieces(d.refusal, fragments)) ev.push(chunk({ refusal: p }));
  const calls = d.toolCalls || [];
  const frags = calls.map((t) => pieces(JSON.stringify(t.args), fragments));
  const starts = calls.map((t, i) => chunk({ tool_calls: [{ index: i, id: t.id, type: 'function', function: { name: t.name, arguments: '' } }] }));
  const argChunk = (i, s) => chunk({ tool_calls: [{ index: i, function: { arguments: s } }] });
  if (interleave) {
    starts.forEach((s) => ev.push(s));
    const max = Math.max(0, ...frags.map((f) => f.length));
    for (let k = 0; k < max; k++) calls.forEach((_, i) => k < frags[i].length && ev.push(argChunk(i, frags[i][k])));
  } else {
    calls.forEach((_, i) => {
      ev.push(starts[i]);
      frags[i].forEach((f) => ev.push(argChunk(i, f)));
    });
  }
  ev.push(chunk({}, CHAT_FINISH[stopOf(d)]));
  if (usage) {
    ev.push({ data: { id, object: 'chat.completion.chunk', created: CREATED, model, choices: [], usage: { prompt_tokens: u.input, completion_tokens: u.output, total_tokens: u.input + u.output } } });
  }
  ev.push({ data: '[DONE]' });
  return ev;
}

export const chatErrorEvent = (message) => ({ data: { error: { message, type: 'server_error', param: null, code: null } } });

// ---- Anthropic Messages -------------------------------------------------------

const ANT_STOP = { end: 'end_turn', length: 'max_tokens', tool: 'tool_use', refusal: 'refusal' };

function anthropicBlocks(d) {
  const blocks = [];
  if (d.reasoning) blocks.push({ type: 'thinking', thinking: d.reasoning.text, signature: d.reasoning.signature || 'sig-1' });
  if (d.text) blocks.push({ type: 'text', text: d.text });
  if (d.refusal) blocks.push({ type: 'text', text: d.refusal });
  for (const t of d.toolCalls || []) blocks.push({ type: 'tool_use', id: t.id, name: t.name, input: t.args });
  return blocks;
}

export function anthropicBody(d) {
  const u = usageOf(d);
  const body = {
    id: `msg_${d.id || 'u1'}`,
    type: 'message',
    role: 'assistant',
    model: d.model || 'up-model',
    content: anthropicBlocks(d),
    stop_reason: ANT_STOP[stopOf(d)],
    stop_sequence: null,
    usage: { input_tokens: u.input, output_tokens: u.output },
  };
  if (stopOf(d) === 'refusal') body.stop_details = { type: 'refusal', category: 'cyber', explanation: d.refusalExplanation || 'Declined by policy.' };
  return body;
}

export function anthropicSSE(d, { fragments = 3 } = {}) {
  const u = usageOf(d);
  const e = (event, data) => ({ event, data: { type: event, ...data } });
  const ev = [
    e('message_start', {
      message: { id: `msg_${d.id || 'u1'}`, type: 'message', role: 'assistant', model: d.model || 'up-model', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: u.input, output_tokens: 1 } },
    }),
  ];
  anthropicBlocks(d).forEach((b, index) => {
    if (b.type === 'thinking') {
      ev.push(e('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } }));
      for (const p of pieces(b.thinking, fragments)) ev.push(e('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: p } }));
      ev.push(e('content_block_delta', { index, delta: { type: 'signature_delta', signature: b.signature } }));
    } else if (b.type === 'text') {
      ev.push(e('content_block_start', { index, content_block: { type: 'text', text: '' } }));
      if (index === 0) ev.push(e('ping', {}));
      for (const p of pieces(b.text, fragments)) ev.push(e('content_block_delta', { index, delta: { type: 'text_delta', text: p } }));
    } else {
      ev.push(e('content_block_start', { index, content_block: { type: 'tool_use', id: b.id, name: b.name, input: {} } }));
      for (const p of pieces(JSON.stringify(b.input), fragments)) ev.push(e('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: p } }));
    }
    ev.push(e('content_block_stop', { index }));
  });
  const delta = { stop_reason: ANT_STOP[stopOf(d)], stop_sequence: null };
  if (stopOf(d) === 'refusal') delta.stop_details = { type: 'refusal', category: 'cyber', explanation: d.refusalExplanation || 'Declined by policy.' };
  ev.push(e('message_delta', { delta, usage: { output_tokens: u.output } }));
  ev.push(e('message_stop', {}));
  return ev;
}

export const anthropicErrorEvent = (message, type = 'overloaded_error') => ({ event: 'error', data: { type: 'error', error: { type, message } } });

// ---- Responses ----------------------------------------------------------------

function responsesItems(d) {
  const id = d.id || 'u1';
  const items = [];
  if (d.reasoning) {
    const r = { id: `rs_${id}`, type: 'reasoning', summary: [{ type: 'summary_text', text: d.reasoning.text }] };
    if (d.reasoning.signature) r.encrypted_content = d.reasoning.signature;
    items.push(r);
  }
  const content = [];
  if (d.text) content.push({ type: 'output_text', text: d.text, annotations: [], logprobs: [] });
  if (d.refusal) content.push({ type: 'refusal', refusal: d.refusal });
  if (content.length) items.push({ id: `msg_${id}`, type: 'message', role: 'assistant', status: stopOf(d) === 'length' ? 'incomplete' : 'completed', content });
  (d.toolCalls || []).forEach((t, i) =>
    items.push({ id: `fc_${id}_${i}`, type: 'function_call', status: 'completed', call_id: t.id, name: t.name, arguments: JSON.stringify(t.args) }),
  );
  return items;
}

function responseObject(d, status, output) {
  const u = usageOf(d);
  return {
    id: `resp_${d.id || 'u1'}`,
    object: 'response',
    created_at: CREATED,
    status,
    model: d.model || 'up-model',
    output,
    error: null,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    parallel_tool_calls: true,
    tool_choice: 'auto',
    tools: [],
    usage:
      status === 'in_progress'
        ? null
        : { input_tokens: u.input, input_tokens_details: { cached_tokens: 0 }, output_tokens: u.output, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: u.input + u.output },
  };
}

const respStatus = (d) => (stopOf(d) === 'length' ? 'incomplete' : 'completed');

export function responsesBody(d) {
  return responseObject(d, respStatus(d), responsesItems(d));
}

export function responsesSSE(d, { fragments = 3, terminal = true } = {}) {
  let seq = 0;
  const ev = [];
  const e = (type, data) => ev.push({ event: type, data: { type, sequence_number: seq++, ...data } });
  e('response.created', { response: responseObject(d, 'in_progress', []) });
  e('response.in_progress', { response: responseObject(d, 'in_progress', []) });
  const items = responsesItems(d);
  items.forEach((item, output_index) => {
    const item_id = item.id;
    if (item.type === 'reasoning') {
      e('response.output_item.added', { output_index, item: { ...item, summary: [] } });
      const text = item.summary[0].text;
      e('response.reasoning_summary_part.added', { item_id, output_index, summary_index: 0, part: { type: 'summary_text', text: '' } });
      for (const p of pieces(text, fragments)) e('response.reasoning_summary_text.delta', { item_id, output_index, summary_index: 0, delta: p });
      e('response.reasoning_summary_text.done', { item_id, output_index, summary_index: 0, text });
      e('response.reasoning_summary_part.done', { item_id, output_index, summary_index: 0, part: { type: 'summary_text', text } });
    } else if (item.type === 'message') {
      e('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', content: [] } });
      item.content.forEach((part, content_index) => {
        if (part.type === 'output_text') {
          e('response.content_part.added', { item_id, output_index, content_index, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } });
          for (const p of pieces(part.text, fragments)) e('response.output_text.delta', { item_id, output_index, content_index, delta: p, logprobs: [] });
          e('response.output_text.done', { item_id, output_index, content_index, text: part.text, logprobs: [] });
        } else {
          e('response.content_part.added', { item_id, output_index, content_index, part: { type: 'refusal', refusal: '' } });
          for (const p of pieces(part.refusal, fragments)) e('response.refusal.delta', { item_id, output_index, content_index, delta: p });
          e('response.refusal.done', { item_id, output_index, content_index, refusal: part.refusal });
        }
        e('response.content_part.done', { item_id, output_index, content_index, part });
      });
    } else {
      e('response.output_item.added', { output_index, item: { ...item, status: 'in_progress', arguments: '' } });
      for (const p of pieces(item.arguments, fragments)) e('response.function_call_arguments.delta', { item_id, output_index, delta: p });
      e('response.function_call_arguments.done', { item_id, output_index, arguments: item.arguments });
    }
    e('response.output_item.done', { output_index, item });
  });
  if (terminal) {
    const status = respStatus(d);
    e(status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response: responseObject(d, status, items) });
  }
  return ev;
}

export const responsesErrorEvent = (message) => ({ event: 'error', data: { type: 'error', code: 'server_error', message, param: null, sequence_number: 99 } });

// ---- by protocol --------------------------------------------------------------

export const bodyFor = (proto, d) => ({ chat: chatBody, anthropic: anthropicBody, responses: responsesBody })[proto](d);
export const sseFor = (proto, d, opts) => ({ chat: chatSSE, anthropic: anthropicSSE, responses: responsesSSE })[proto](d, opts);
export const errorEventFor = (proto, message) => ({ chat: chatErrorEvent, anthropic: anthropicErrorEvent, responses: responsesErrorEvent })[proto](message);

/** Upstream error bodies in each protocol's own shape. */
export function errorBodyFor(proto, status, message) {
  const oaType = { 400: 'invalid_request_error', 401: 'invalid_request_error', 429: 'rate_limit_error', 500: 'server_error' }[status] || 'server_error';
  const oaCode = { 401: 'invalid_api_key', 429: 'rate_limit_exceeded' }[status] || null;
  const antType = { 400: 'invalid_request_error', 401: 'authentication_error', 429: 'rate_limit_error', 500: 'api_error', 529: 'overloaded_error' }[status] || 'api_error';
  if (proto === 'anthropic') return { type: 'error', error: { type: antType, message }, request_id: 'req_up1' };
  return { error: { message, type: oaType, param: null, code: oaCode } };
}

/** Drops a stream's terminal event(s): Chat [DONE] (and finish/usage), Anthropic message_delta+message_stop, Responses terminal. */
export function truncateSSE(proto, events) {
  if (proto === 'chat') return events.filter((e) => e.data !== '[DONE]' && !(e.data.choices && (e.data.choices.length === 0 || e.data.choices[0].finish_reason)));
  if (proto === 'anthropic') return events.filter((e) => e.event !== 'message_delta' && e.event !== 'message_stop');
  return events.filter((e) => !/^response\.(completed|incomplete|failed)$/.test(e.event));
}

// ---- gateway setup shared by the translation tests ------------------------------

/** Upstream protocol config names (lib/config.mjs) and, per protocol, the
 *  model a `to-<proto>*` route rewrites to and the upstream's name. */
export const PROTO_NAME = C.PROTOCOL;
export const UPSTREAM_MODEL = { chat: 'up-chat-model', responses: 'up-resp-model', anthropic: 'up-ant-model', gemini: 'up-gem-model' };
export const UPSTREAM_NAME = { chat: 'oc', responses: 'or', anthropic: 'an', gemini: 'gm' };
/** The six translated pairs of the three protocols these scripts answer for, [client, upstream]. */
export const PAIRS = [
  ['chat', 'anthropic'],
  ['chat', 'responses'],
  ['responses', 'chat'],
  ['responses', 'anthropic'],
  ['anthropic', 'chat'],
  ['anthropic', 'responses'],
];
const UPSTREAM_KEY = { chat: 'up-chat-key', responses: 'up-resp-key', anthropic: 'up-ant-key', gemini: 'up-gem-key' };

/** proxai config: an upstream of each of the four protocols on the mock, and
 *  a route `to-<proto>*` to each with the model rewritten (UPSTREAM_MODEL);
 *  serverKeys go to [server]. */
export function gatewayConfig(mockUrl, serverKeys = {}) {
  let s = C.server(serverKeys);
  for (const p of Object.keys(C.PROTOCOL))
    s += C.upstream(UPSTREAM_NAME[p], p, mockUrl, {
      api_key: UPSTREAM_KEY[p],
      anthropic_version: p === 'anthropic' ? '2023-06-01' : undefined,
    });
  for (const p of Object.keys(C.PROTOCOL))
    s += C.route(`to-${p}*`, { upstream: UPSTREAM_NAME[p], model: UPSTREAM_MODEL[p], max_tokens: p === 'anthropic' ? 1000 : undefined });
  return s;
}

/** Upstream request path suffix per protocol (Gemini's names the method). */
export const UPSTREAM_PATH = { chat: '/chat/completions', responses: '/responses', anthropic: '/v1/messages', gemini: ':generateContent' };

// ---- client-side helpers --------------------------------------------------------

/**
 * Normalizes a client-visible answer (non-streaming body or an SDK's
 * accumulated final object) into the neutral shape:
 * {text, refusal, reasoning, toolCalls: [{id, name, args}], stop, usage: {input, output}, model}.
 * text/refusal/reasoning are null when absent. stop for Responses is the status
 * ('completed', 'incomplete', 'failed'), for Chat the finish_reason, for
 * Anthropic the stop_reason (protocol-native, not mapped).
 */
export function normalize(proto, r) {
  const joined = (xs) => (xs.length ? xs.join('') : null);
  if (proto === 'chat') {
    const ch = r.choices[0];
    const m = ch.message;
    return {
      text: m.content ?? null,
      refusal: m.refusal ?? null,
      reasoning: m.reasoning_content ?? null,
      toolCalls: (m.tool_calls || []).map((t) => ({ id: t.id, name: t.function.name, args: JSON.parse(t.function.arguments) })),
      stop: ch.finish_reason,
      usage: r.usage ? { input: r.usage.prompt_tokens, output: r.usage.completion_tokens } : null,
      model: r.model,
    };
  }
  if (proto === 'anthropic') {
    return {
      text: joined(r.content.filter((b) => b.type === 'text').map((b) => b.text)),
      refusal: null,
      reasoning: joined(r.content.filter((b) => b.type === 'thinking').map((b) => b.thinking)),
      toolCalls: r.content.filter((b) => b.type === 'tool_use').map((b) => ({ id: b.id, name: b.name, args: b.input })),
      stop: r.stop_reason,
      usage: r.usage ? { input: r.usage.input_tokens, output: r.usage.output_tokens } : null,
      model: r.model,
    };
  }
  const parts = r.output.filter((i) => i.type === 'message').flatMap((i) => i.content);
  const reasoning = r.output
    .filter((i) => i.type === 'reasoning')
    .flatMap((i) => [...(i.summary || []).map((s) => s.text), ...(i.content || []).map((c) => c.text)]);
  return {
    text: joined(parts.filter((p) => p.type === 'output_text').map((p) => p.text)),
    refusal: joined(parts.filter((p) => p.type === 'refusal').map((p) => p.refusal)),
    reasoning: joined(reasoning),
    toolCalls: r.output.filter((i) => i.type === 'function_call').map((i) => ({ id: i.call_id, name: i.name, args: JSON.parse(i.arguments) })),
    stop: r.status,
    usage: r.usage ? { input: r.usage.input_tokens, output: r.usage.output_tokens } : null,
    model: r.model,
  };
}

/** Text of a message's content in any protocol (string, or array of text-ish parts). */
export function contentText(c) {
  if (c == null) return '';
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((p) => (typeof p === 'string' ? p : p.text ?? p.output ?? contentText(p.content))).join('');
  return String(c.text ?? '');
}
