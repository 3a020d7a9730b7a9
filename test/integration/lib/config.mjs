// proxai.conf text for the suites, one function per section, all four
// protocols by their short names (chat, responses, anthropic, gemini):
//
//   import * as C from './lib/config.mjs';
//   C.server() + C.upstream('oc', 'chat', mock.url) + C.route('*', { upstream: 'oc' })
//     + C.key('k1', { secret: 'sk-1', rpm: 10 }) + C.redisState(port, 't1:', { on_error: 'allow' })
//
// A value may be a string, a number, a boolean (on/off) or an array (joined
// with ", "); undefined and null leave the key out. `{{PORT}}` is filled by
// startProxai.

/** The config name of each protocol. */
export const PROTOCOL = {
  chat: 'openai_chat_completions',
  responses: 'openai_responses',
  anthropic: 'anthropic_messages',
  gemini: 'gemini_generate_content',
};

/** The base_url of an upstream at url for a protocol (OpenAI's paths sit under /v1). */
export const baseUrl = (proto, url) => (proto === 'chat' || proto === 'responses' ? `${url}/v1` : url);

const value = (v) => (Array.isArray(v) ? v.join(', ') : typeof v === 'boolean' ? (v ? 'on' : 'off') : String(v));

const EACH = Symbol('each');
/** A key written once per value (header = A: 1, header = B: 2). */
export const each = (...values) => ({ [EACH]: values });

/** `[head]` and its `key = value` lines. */
export function section(head, keys = {}) {
  let s = `[${head}]\n`;
  for (const [k, v] of Object.entries(keys)) {
    if (v === undefined || v === null) continue;
    for (const one of v[EACH] ?? [v]) s += `${k} = ${value(one)}\n`;
  }
  return s;
}

/** [server]: a free port on 127.0.0.1, no access log, then keys. */
export const server = (keys = {}) => section('server', { listen: '127.0.0.1:{{PORT}}', access_log: 'off', ...keys });

/** [upstream name] of protocol proto (a short name or a config name) at url:
 *  api_key up-<name>-key, no retries, then keys. */
export const upstream = (name, proto, url, keys = {}) =>
  section(`upstream ${name}`, {
    protocol: PROTOCOL[proto] ?? proto,
    base_url: baseUrl(proto, url),
    api_key: `up-${name}-key`,
    retries: 0,
    ...keys,
  });

/** [route pattern] with keys (upstream, model, fallbacks ...). */
export const route = (pattern, keys = {}) => section(`route ${pattern}`, keys);

/** [key name] with keys (secret, models, rpm, tpm ...). */
export const key = (name, keys = {}) => section(`key ${name}`, keys);

/** Several [key name] sections: {name: keys, ...} in order. */
export const keys = (all) => Object.entries(all).map(([name, k]) => key(name, k)).join('');

/** [team name] with keys (budget, budget_window ...). */
export const team = (name, keys = {}) => section(`team ${name}`, keys);

/** [price pattern] with keys (input, output, cache_read, cache_write: USD
 *  per million tokens). */
export const price = (pattern, keys = {}) => section(`price ${pattern}`, keys);

/** [state] with keys (backend, dir, on_error ...). */
export const state = (keys = {}) => section('state', keys);

/** [state] on the redis-server at port (database 0) under prefix, then keys
 *  (on_error, timeout ...). */
export const redisState = (port, prefix, keys = {}) =>
  section('state', { backend: 'redis', redis: `redis://127.0.0.1:${port}/0`, prefix, ...keys });

/** [admin] with its token, then keys. */
export const admin = (token, keys = {}) => section('admin', { token, ...keys });

/** [responses] (stored responses: store, ttl, max_size ...). */
export const responses = (keys = {}) => section('responses', keys);

/** [trace] (OpenTelemetry export: endpoint, sample ...). */
export const trace = (keys = {}) => section('trace', keys);
