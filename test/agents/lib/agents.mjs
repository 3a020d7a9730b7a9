// Shared pieces of the real-agent tests (claude_code.mjs, codex.mjs,
// gemini_cli.mjs):
// locating the pinned agents, the proxai configuration per upstream protocol,
// scripted upstream answers in each upstream protocol, running an agent with a
// timeout, and checks on proxai's access log.
//
// Everything talks to 127.0.0.1 only: the agents get loopback base URLs, a
// loopback HTTP(S) proxy for anything else that refuses and records it
// (startProxyTrap; NO_PROXY=127.0.0.1), and their telemetry / update checks /
// non-essential traffic switched off.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as C from '../../integration/lib/config.mjs';

export const agentsDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const repoRoot = path.resolve(agentsDir, '../..');
export const SKIP_CODE = 77; // meson: test skipped

/** Prints a visible SKIP line and exits with meson's skip code. */
export function skip(reason) {
  console.log(`SKIP: ${reason}`);
  process.exit(SKIP_CODE);
}

/** Resolves the agent binary in test/agents/node_modules/.bin, or SKIPs. */
export async function requireAgent(bin, versionArgs = ['--version']) {
  const p = path.join(agentsDir, 'node_modules/.bin', bin);
  if (!fs.existsSync(p)) {
    skip(`${bin} is not installed (run \`npm ci\` in test/agents; scripts/setup.sh does it)`);
  }
  const r = await runProcess(p, versionArgs, { timeoutMs: 30000, env: {} });
  if (r.code !== 0) {
    skip(`${bin} cannot start on this machine (exit ${r.code}${r.signal ? ', ' + r.signal : ''}): ${(r.stderr || r.stdout).trim().slice(0, 300)}`);
  }
  return { path: p, version: r.stdout.trim() };
}

const tmpDirs = [];
process.on('exit', () => {
  for (const d of tmpDirs) {
    try {
      fs.rmSync(d, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
});

/** A fresh temporary directory, removed when the process exits. */
export function tmpDir(prefix) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tmpDirs.push(d);
  return d;
}

/**
 * Environment that keeps a child off the network: only PATH is inherited, any
 * non-loopback HTTP(S) goes to a dead loopback proxy.
 */
let trapUrl = 'http://127.0.0.1:9';
export const outsideAttempts = [];

/**
 * Starts a loopback "proxy" that refuses everything and records what an agent
 * tried to reach outside 127.0.0.1 (first request line, e.g. `CONNECT
 * host:443`); offlineEnv() points HTTP(S)_PROXY at it from then on. Without
 * it the proxy is a closed port.
 */
export async function startProxyTrap() {
  const net = await import('node:net');
  const server = net.createServer((sock) => {
    let head = '';
    sock.setEncoding('latin1');
    sock.on('data', (d) => {
      head += d;
      const i = head.indexOf('\r\n');
      if (i >= 0 || head.length > 2048) {
        outsideAttempts.push(head.slice(0, i >= 0 ? i : 200));
        sock.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
      }
    });
    sock.on('error', () => {});
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  server.unref();
  trapUrl = `http://127.0.0.1:${server.address().port}`;
  return server;
}

export function offlineEnv(extra) {
  return {
    PATH: process.env.PATH || '/usr/bin:/bin',
    LANG: 'C.UTF-8',
    TERM: 'dumb',
    NO_COLOR: '1',
    HTTP_PROXY: trapUrl,
    HTTPS_PROXY: trapUrl,
    http_proxy: trapUrl,
    https_proxy: trapUrl,
    NO_PROXY: '127.0.0.1,localhost',
    no_proxy: '127.0.0.1,localhost',
    ...extra,
  };
}

const running = new Set();
process.on('exit', () => {
  for (const pid of running) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
});

/**
 * Runs a command to completion with a timeout (its whole process group is
 * killed by PID on timeout). env replaces the environment entirely.
 * Resolves to {code, signal, stdout, stderr, timedOut}.
 */
export function runProcess(bin, args, { env, cwd, timeoutMs = 120000, input = null } = {}) {
  return new Promise((resolve) => {
    const proc = spawn(bin, args, {
      env,
      cwd,
      stdio: [input === null ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      detached: true, // own process group: a timeout kills the agent's children too
    });
    running.add(proc.pid);
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    proc.stdout.setEncoding('utf8');
    proc.stderr.setEncoding('utf8');
    proc.stdout.on('data', (d) => (stdout = (stdout + d).slice(-(4 << 20))));
    proc.stderr.on('data', (d) => (stderr = (stderr + d).slice(-(4 << 20))));
    if (input !== null) proc.stdin.end(input);
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-proc.pid, 'SIGKILL');
      } catch {
        // gone
      }
    }, timeoutMs);
    proc.on('error', (err) => {
      clearTimeout(timer);
      running.delete(proc.pid);
      resolve({ code: null, signal: null, stdout, stderr: stderr + `\nspawn error: ${err.message}`, timedOut });
    });
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      running.delete(proc.pid);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

// ---- proxai configuration --------------------------------------------------

/** The config name of each upstream protocol (the integration suites' table). */
export const PROTOCOLS = C.PROTOCOL;

/**
 * The upstream path suffix of a model turn per upstream protocol (the mock
 * matches scripted answers on it). Gemini's path carries the model:
 * /v1beta/models/{model}:streamGenerateContent (query alt=sse).
 */
export const UPSTREAM_PATH = { anthropic: '/v1/messages', chat: '/chat/completions', responses: '/responses', gemini: ':streamGenerateContent' };

/** The model an upstream request asked for: `model` in the body, or in the path for Gemini. */
export function upstreamModelOf(req) {
  if (req.body && typeof req.body.model === 'string') return req.body.model;
  const m = /\/models\/([^/:]+):/.exec(req.path || '');
  return m ? decodeURIComponent(m[1]) : undefined;
}

/** The upstream model name every route rewrites to (seen only by the mock). */
export const UPSTREAM_MODEL = 'mock-upstream-model';

/**
 * proxai configuration: one upstream `up` of protocol `upstream` (a key of
 * PROTOCOLS) at the mock, every model routed to it and renamed to
 * UPSTREAM_MODEL. Same text as the examples in docs/agents.md.
 */
export function proxaiConfig(upstream, mockUrl, accessLog) {
  return C.server({ access_log: accessLog })
    + C.upstream('up', upstream, mockUrl, { api_key: 'upstream-secret', retries: null })
    + C.route('*', { upstream: 'up', model: UPSTREAM_MODEL, max_tokens: 8192 });
}

/** Parsed JSON lines of proxai's access log file ([] if none yet). */
export function accessLog(file) {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => {
      try {
        return JSON.parse(l);
      } catch {
        return { unparsed: l };
      }
    });
}

/** Throws if proxai answered any request with a 4xx/5xx (it must never reject an agent). */
export function assertNoRejects(file) {
  const bad = accessLog(file).filter((e) => e.unparsed !== undefined || !(e.status >= 200 && e.status < 400));
  if (bad.length) throw new Error(`proxai answered with errors: ${JSON.stringify(bad)}`);
}

/**
 * The Codex configuration the tests use (also in docs/agents.md): a model
 * provider whose base_url is proxai, Responses wire API, no retries, and
 * nothing that looks outside (plugins, analytics, update checks).
 */
export function codexConfig(proxaiUrl, model) {
  return `model = "${model}"
model_provider = "proxai"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.proxai]
name = "proxai"
base_url = "${proxaiUrl}/v1"
wire_api = "responses"
env_key = "PROXAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false

[analytics]
enabled = false
`;
}

/**
 * Claude Code's environment for a run against baseUrl (proxai, or the mock
 * directly): temporary HOME/CLAUDE_CONFIG_DIR, no telemetry, update checks,
 * error reporting, non-essential traffic or retries (also in docs/agents.md).
 */
export function claudeEnv(baseUrl, home, apiKey = 'proxai-client-key') {
  return offlineEnv({
    HOME: home,
    CLAUDE_CONFIG_DIR: path.join(home, '.claude'),
    ANTHROPIC_BASE_URL: baseUrl,
    ANTHROPIC_API_KEY: apiKey,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_ERROR_REPORTING: '1',
    CLAUDE_CODE_MAX_RETRIES: '0',
  });
}

/**
 * The Gemini CLI settings the tests write to $HOME/.gemini/settings.json
 * (also in docs/agents.md): API-key auth (GOOGLE_GEMINI_BASE_URL alone
 * selects the CLI's "gateway" auth type, which its non-interactive mode
 * refuses with "Invalid auth method selected."), no auto-update, usage
 * statistics or telemetry.
 */
export const GEMINI_SETTINGS = {
  security: { auth: { selectedType: 'gemini-api-key' } },
  general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
  privacy: { usageStatisticsEnabled: false },
  telemetry: { enabled: false },
};

/**
 * Gemini CLI's environment for a run against baseUrl (proxai's host root;
 * the CLI appends /v1beta/models/{model}:streamGenerateContent?alt=sse):
 * temporary HOME holding GEMINI_SETTINGS, the client key in GEMINI_API_KEY
 * (sent as x-goog-api-key).
 */
export function geminiEnv(baseUrl, home, apiKey = 'proxai-client-key') {
  fs.mkdirSync(path.join(home, '.gemini'), { recursive: true });
  fs.writeFileSync(path.join(home, '.gemini', 'settings.json'), JSON.stringify(GEMINI_SETTINGS, null, 2));
  return offlineEnv({
    HOME: home,
    GOOGLE_GEMINI_BASE_URL: baseUrl,
    GEMINI_API_KEY: apiKey,
    GEMINI_CLI_NO_RELAUNCH: 'true',
  });
}

// ---- scripted upstream answers ---------------------------------------------

const usage = { input_tokens: 12, output_tokens: 7 };

function anthropicStart(id) {
  return {
    event: 'message_start',
    data: {
      type: 'message_start',
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model: UPSTREAM_MODEL,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: usage.input_tokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 },
      },
    },
  };
}

function anthropicEnd(stop) {
  return [
    { event: 'message_delta', data: { type: 'message_delta', delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: usage.output_tokens } } },
    { event: 'message_stop', data: { type: 'message_stop' } },
  ];
}

function anthropicThinking(index, thinking) {
  return [
    { event: 'content_block_start', data: { type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } } },
    { event: 'content_block_delta', data: { type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking } } },
    { event: 'content_block_delta', data: { type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: REASONING_TOKEN.anthropic } } },
    { event: 'content_block_stop', data: { type: 'content_block_stop', index } },
  ];
}

function splitIn(s, n) {
  const parts = [];
  const step = Math.max(1, Math.ceil(s.length / n));
  for (let i = 0; i < s.length; i += step) parts.push(s.slice(i, i + step));
  return parts;
}

function chatChunk(id, delta, finish = null, extra = {}) {
  return {
    data: {
      id,
      object: 'chat.completion.chunk',
      created: 1700000000,
      model: UPSTREAM_MODEL,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...extra,
    },
  };
}

function chatUsage(id) {
  return {
    data: {
      id,
      object: 'chat.completion.chunk',
      created: 1700000000,
      model: UPSTREAM_MODEL,
      choices: [],
      usage: { prompt_tokens: usage.input_tokens, completion_tokens: usage.output_tokens, total_tokens: usage.input_tokens + usage.output_tokens },
    },
  };
}

/** Responses SSE: builds events with sequence numbers around an output list. */
function responsesStream(id, items) {
  const ev = [];
  let seq = 0;
  const push = (type, body) => ev.push({ event: type, data: { type, sequence_number: seq++, ...body } });
  const base = { id, object: 'response', created_at: 1700000000, model: UPSTREAM_MODEL, output: [], usage: null };
  push('response.created', { response: { ...base, status: 'in_progress' } });
  push('response.in_progress', { response: { ...base, status: 'in_progress' } });
  const done = [];
  items.forEach((item, output_index) => {
    if (item.type === 'reasoning') {
      const full = { id: item.id, type: 'reasoning', summary: [{ type: 'summary_text', text: item.summary }], encrypted_content: item.encrypted_content };
      push('response.output_item.added', { output_index, item: { id: item.id, type: 'reasoning', summary: [], encrypted_content: null } });
      push('response.reasoning_summary_part.added', { item_id: item.id, output_index, summary_index: 0, part: { type: 'summary_text', text: '' } });
      push('response.reasoning_summary_text.delta', { item_id: item.id, output_index, summary_index: 0, delta: item.summary });
      push('response.reasoning_summary_text.done', { item_id: item.id, output_index, summary_index: 0, text: item.summary });
      push('response.reasoning_summary_part.done', { item_id: item.id, output_index, summary_index: 0, part: { type: 'summary_text', text: item.summary } });
      push('response.output_item.done', { output_index, item: full });
      done.push(full);
    } else if (item.type === 'message') {
      const part = { type: 'output_text', text: item.text, annotations: [] };
      push('response.output_item.added', { output_index, item: { id: item.id, type: 'message', status: 'in_progress', role: 'assistant', content: [] } });
      push('response.content_part.added', { item_id: item.id, output_index, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
      for (const d of splitIn(item.text, 3)) push('response.output_text.delta', { item_id: item.id, output_index, content_index: 0, delta: d, logprobs: [] });
      push('response.output_text.done', { item_id: item.id, output_index, content_index: 0, text: item.text, logprobs: [] });
      push('response.content_part.done', { item_id: item.id, output_index, content_index: 0, part });
      const full = { id: item.id, type: 'message', status: 'completed', role: 'assistant', content: [part] };
      push('response.output_item.done', { output_index, item: full });
      done.push(full);
    } else if (item.type === 'function_call') {
      push('response.output_item.added', {
        output_index,
        item: { id: item.id, type: 'function_call', status: 'in_progress', call_id: item.call_id, name: item.name, arguments: '' },
      });
      for (const d of splitIn(item.arguments, 2)) push('response.function_call_arguments.delta', { item_id: item.id, output_index, delta: d });
      push('response.function_call_arguments.done', { item_id: item.id, output_index, arguments: item.arguments });
      const full = { id: item.id, type: 'function_call', status: 'completed', call_id: item.call_id, name: item.name, arguments: item.arguments };
      push('response.output_item.done', { output_index, item: full });
      done.push(full);
    }
  });
  push('response.completed', {
    response: {
      ...base,
      status: 'completed',
      output: done,
      usage: {
        input_tokens: usage.input_tokens,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: usage.output_tokens,
        output_tokens_details: { reasoning_tokens: 2 },
        total_tokens: usage.input_tokens + usage.output_tokens,
      },
    },
  });
  return ev;
}

/**
 * Gemini SSE: each chunk a whole GenerateContentResponse (`data: {...}` and
 * CRLF CRLF, no event names, no terminal event); `finish` and usageMetadata
 * on the last chunk only.
 */
function geminiChunk(parts, finish = null) {
  const cand = { content: { role: 'model', parts }, index: 0 };
  const o = { candidates: [cand], modelVersion: UPSTREAM_MODEL, responseId: 'gem_up_resp' };
  if (finish) {
    cand.finishReason = finish;
    o.usageMetadata = { promptTokenCount: usage.input_tokens, candidatesTokenCount: usage.output_tokens, totalTokenCount: usage.input_tokens + usage.output_tokens };
  }
  return `data: ${JSON.stringify(o)}\r\n\r\n`;
}

/**
 * Tool call id per upstream protocol, in that protocol's own style. Gemini
 * has none: proxai mints ids toward the client and maps results back by
 * name and order.
 */
export const CALL_ID = { anthropic: 'toolu_proxai01', chat: 'call_proxai01', responses: 'call_proxai01', gemini: null };

/**
 * Streaming upstream answer with a short reasoning part and a final text, in
 * protocol `proto`.
 */
export function textAnswerSSE(proto, text) {
  if (proto === 'anthropic') {
    return [
      anthropicStart('msg_up_text'),
      ...anthropicThinking(0, 'The user wants a short answer.'),
      { event: 'content_block_start', data: { type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } } },
      ...splitIn(text, 3).map((d) => ({ event: 'content_block_delta', data: { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: d } } })),
      { event: 'content_block_stop', data: { type: 'content_block_stop', index: 1 } },
      ...anthropicEnd('end_turn'),
    ];
  }
  if (proto === 'chat') {
    const id = 'chatcmpl-up-text';
    return [
      chatChunk(id, { role: 'assistant', content: '' }),
      chatChunk(id, { reasoning_content: 'The user wants a short answer.' }),
      ...splitIn(text, 3).map((d) => chatChunk(id, { content: d })),
      chatChunk(id, {}, 'stop'),
      chatUsage(id),
      { data: '[DONE]' },
    ];
  }
  if (proto === 'gemini') {
    const pieces = splitIn(text, 3);
    return [
      geminiChunk([{ text: 'The user wants a short answer.', thought: true }]),
      ...pieces.map((d, i) => geminiChunk([{ text: d }], i === pieces.length - 1 ? 'STOP' : null)),
    ];
  }
  return responsesStream('resp_up_text', [
    { type: 'reasoning', id: 'rs_up_text', summary: 'The user wants a short answer.', encrypted_content: 'ZW5jLXByb3hhaS10ZXh0' },
    { type: 'message', id: 'msg_up_text', text },
  ]);
}

/**
 * Streaming upstream answer that calls tool `name` with JSON `args` (id
 * CALL_ID[proto]), preceded by a reasoning part (thinking with signature /
 * reasoning_content / reasoning item with encrypted_content).
 */
export function toolCallSSE(proto, name, args) {
  const json = JSON.stringify(args);
  if (proto === 'anthropic') {
    return [
      anthropicStart('msg_up_tool'),
      ...anthropicThinking(0, 'I will run the command.'),
      { event: 'content_block_start', data: { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: CALL_ID.anthropic, name, input: {} } } },
      ...splitIn(json, 3).map((d) => ({ event: 'content_block_delta', data: { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: d } } })),
      { event: 'content_block_stop', data: { type: 'content_block_stop', index: 1 } },
      ...anthropicEnd('tool_use'),
    ];
  }
  if (proto === 'chat') {
    const id = 'chatcmpl-up-tool';
    const parts = splitIn(json, 3);
    return [
      chatChunk(id, { role: 'assistant', content: null }),
      chatChunk(id, { reasoning_content: 'I will run the command.' }),
      chatChunk(id, { tool_calls: [{ index: 0, id: CALL_ID.chat, type: 'function', function: { name, arguments: '' } }] }),
      ...parts.map((d) => chatChunk(id, { tool_calls: [{ index: 0, function: { arguments: d } }] })),
      chatChunk(id, {}, 'tool_calls'),
      chatUsage(id),
      { data: '[DONE]' },
    ];
  }
  if (proto === 'gemini') {
    // As Gemini 2.5+/3 answer: thought text, then the whole functionCall part
    // carrying the thoughtSignature, finishReason STOP (Gemini has no
    // tool-use finish reason).
    return [
      geminiChunk([{ text: 'I will run the command.', thought: true }]),
      geminiChunk([{ functionCall: { name, args }, thoughtSignature: REASONING_TOKEN.gemini }], 'STOP'),
    ];
  }
  return responsesStream('resp_up_tool', [
    { type: 'reasoning', id: 'rs_up_tool', summary: 'I will run the command.', encrypted_content: REASONING_TOKEN.responses },
    { type: 'function_call', id: 'fc_up_tool', call_id: CALL_ID.responses, name, arguments: json },
  ]);
}

// ---- what the upstream received -----------------------------------------------

function textOf(content) {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((c) => (typeof c === 'string' ? c : c.text ?? (c.content !== undefined ? textOf(c.content) : ''))).join('');
  return '';
}

/** True when `text` has a line that is exactly `line` (the shell's output, not the command). */
export function hasOutputLine(text, line) {
  return text.split(/\r?\n/).some((l) => l.trim() === line);
}

/**
 * Finds the tool result for CALL_ID[proto] in an upstream request body in
 * that protocol's form; returns its text or throws describing what was there.
 *   anthropic: user message, content block {type: tool_result, tool_use_id}
 *   chat:      message {role: tool, tool_call_id}
 *   responses: input item {type: function_call_output, call_id}
 *   gemini:    user content, part {functionResponse: {name, response}} (no
 *              id: the first one named `name`; its `response.output` text,
 *              else the JSON of `response`)
 */
export function toolResultText(proto, body, name) {
  const id = CALL_ID[proto];
  if (proto === 'gemini') {
    for (const c of body.contents || []) {
      if (c.role !== 'user') continue;
      for (const p of c.parts || []) {
        const fr = p.functionResponse;
        if (!fr || (name && fr.name !== name)) continue;
        const r = fr.response || {};
        return typeof r.output === 'string' ? r.output : JSON.stringify(r);
      }
    }
    throw new Error(`no functionResponse named ${name} in a user turn: ${JSON.stringify((body.contents || []).map((c) => [c.role, (c.parts || []).map((p) => Object.keys(p).join('+'))]))}`);
  }
  if (proto === 'anthropic') {
    for (const m of body.messages || []) {
      if (m.role !== 'user' || !Array.isArray(m.content)) continue;
      for (const b of m.content) if (b.type === 'tool_result' && b.tool_use_id === id) return textOf(b.content);
    }
    throw new Error(`no tool_result with tool_use_id ${id} in messages: ${JSON.stringify((body.messages || []).map((m) => [m.role, Array.isArray(m.content) ? m.content.map((b) => b.type) : typeof m.content]))}`);
  }
  if (proto === 'chat') {
    for (const m of body.messages || []) if (m.role === 'tool' && m.tool_call_id === id) return textOf(m.content);
    throw new Error(`no role:tool message with tool_call_id ${id}: ${JSON.stringify((body.messages || []).map((m) => [m.role, m.tool_call_id]))}`);
  }
  for (const it of Array.isArray(body.input) ? body.input : []) {
    if (it.type === 'function_call_output' && it.call_id === id) return textOf(it.output);
  }
  throw new Error(`no function_call_output with call_id ${id}: ${JSON.stringify((Array.isArray(body.input) ? body.input : []).map((i) => [i.type, i.role, i.call_id]))}`);
}

/** The tool call the assistant turn replays upstream (same id and name), or throws. */
export function replayedToolCall(proto, body) {
  const id = CALL_ID[proto];
  if (proto === 'anthropic') {
    for (const m of body.messages || []) {
      if (m.role !== 'assistant' || !Array.isArray(m.content)) continue;
      for (const b of m.content) if (b.type === 'tool_use' && b.id === id) return { name: b.name, args: b.input };
    }
  } else if (proto === 'chat') {
    for (const m of body.messages || []) for (const c of m.tool_calls || []) if (c.id === id) return { name: c.function.name, args: JSON.parse(c.function.arguments) };
  } else if (proto === 'gemini') {
    // No ids in Gemini: the model turn's functionCall part (an `id` toward
    // Gemini would be another protocol's field).
    for (const c of body.contents || []) {
      if (c.role !== 'model') continue;
      for (const p of c.parts || []) if (p.functionCall) return { name: p.functionCall.name, args: p.functionCall.args, id: p.functionCall.id };
    }
  } else {
    for (const it of Array.isArray(body.input) ? body.input : []) if (it.type === 'function_call' && it.call_id === id) return { name: it.name, args: JSON.parse(it.arguments) };
  }
  throw new Error(`the assistant's tool call ${id ?? ''} is not replayed in the ${proto} request`);
}

/** Short description of an upstream request for error messages. */
export function describeRequests(reqs) {
  return reqs.map((r) => `${r.method} ${r.path}${r.query ? '?' + r.query : ''} (${JSON.stringify(r.body).length} bytes)`).join('; ');
}

/** Writes the test's evidence (agent output, proxai log, mock requests) under $AGENTS_ARTIFACTS if set. */
export function saveArtifacts(name, data) {
  const dir = process.env.AGENTS_ARTIFACTS;
  if (!dir) return;
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `${name.replace(/[^a-z0-9_.-]+/gi, '_')}.json`), JSON.stringify(data, null, 1));
}

// ---- diagnostic tap ------------------------------------------------------------

/**
 * A recording HTTP relay on 127.0.0.1 in front of `targetUrl` (used when
 * AGENTS_TAP=1, to see what an agent sends proxai and what proxai answers,
 * x-proxai-lossy included). Streams responses through unbuffered.
 * Returns {url, records, stop()}.
 */
export async function startTap(targetUrl) {
  const http = await import('node:http');
  const target = new URL(targetUrl);
  const records = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const rec = { method: req.method, url: req.url, headers: req.headers, body: body.toString('utf8'), status: null, resHeaders: null, resBody: '' };
      records.push(rec);
      const up = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host } },
        (ures) => {
          rec.status = ures.statusCode;
          rec.resHeaders = ures.headers;
          res.writeHead(ures.statusCode, ures.headers);
          ures.on('data', (c) => {
            if (rec.resBody.length < 1 << 20) rec.resBody += c.toString('utf8');
            res.write(c);
          });
          ures.on('end', () => res.end());
        },
      );
      up.on('error', (e) => {
        rec.status = 599;
        rec.resBody = String(e);
        res.destroy();
      });
      up.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    records,
    stop: () => new Promise((resolve) => {
      server.closeAllConnections?.();
      server.close(() => resolve());
    }),
  };
}

/** Signature / encrypted_content the scripted tool-call answers carry (toolCallSSE). */
export const REASONING_TOKEN = { anthropic: 'c2lnLXByb3hhaS10ZXN0', responses: 'ZW5jLXByb3hhaS10b29s', gemini: 'Z2VtLXNpZy1wcm94YWk=' };

/**
 * Checks that the reasoning of the tool-call turn (toolCallSSE) comes back in
 * the next upstream request in that protocol's form:
 *   anthropic: assistant thinking block with its signature;
 *   responses: reasoning input item with its encrypted_content;
 *   chat:      assistant reasoning_content (the only form Chat has);
 *   gemini:    a model-turn part with its thoughtSignature.
 * Throws describing the assistant turn otherwise.
 */
export function replayedReasoning(proto, body) {
  if (proto === 'gemini') {
    for (const c of body.contents || []) {
      if (c.role === 'model' && (c.parts || []).some((p) => p.thoughtSignature === REASONING_TOKEN.gemini)) return;
    }
    throw new Error(`thoughtSignature ${REASONING_TOKEN.gemini} not replayed; model turns: ${JSON.stringify((body.contents || []).filter((c) => c.role === 'model')).slice(0, 800)}`);
  }
  if (proto === 'anthropic') {
    for (const m of body.messages || []) {
      if (m.role !== 'assistant' || !Array.isArray(m.content)) continue;
      if (m.content.some((b) => b.type === 'thinking' && b.signature === REASONING_TOKEN.anthropic)) return;
    }
    throw new Error(`thinking block with signature ${REASONING_TOKEN.anthropic} not replayed; assistant turns: ${JSON.stringify((body.messages || []).filter((m) => m.role === 'assistant')).slice(0, 800)}`);
  }
  if (proto === 'chat') {
    if ((body.messages || []).some((m) => m.role === 'assistant' && typeof m.reasoning_content === 'string' && m.reasoning_content.includes('I will run the command.'))) return;
    throw new Error(`reasoning_content not replayed; assistant turns: ${JSON.stringify((body.messages || []).filter((m) => m.role === 'assistant')).slice(0, 800)}`);
  }
  const input = Array.isArray(body.input) ? body.input : [];
  if (input.some((i) => i.type === 'reasoning' && i.encrypted_content === REASONING_TOKEN.responses)) return;
  throw new Error(`reasoning item with encrypted_content ${REASONING_TOKEN.responses} not replayed; input items: ${JSON.stringify(input.map((i) => [i.type, i.role, i.call_id]))}; request keys: ${Object.keys(body).join(',')}`);
}
