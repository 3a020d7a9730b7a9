// Regenerates test/agents/captured/: what the pinned agents really send,
// captured with each agent (Claude Code, Codex, Gemini CLI) pointed
// DIRECTLY at the C mock upstream (no proxai), for a tool round trip (turn
// 1: the prompt; turn 2: the tool call replayed with its output and the
// model's reasoning). Prompt and system text
// is replaced by placeholders ("<text: N chars>"), ids by stable
// placeholders; shapes, field names, headers and tool definitions are kept
// (tool descriptions shortened). Not a test: run it after bumping an agent.
//
//   MOCK_BIN=build/test/mock_upstream node test/agents/capture.mjs
import fs from 'node:fs';
import path from 'node:path';
import { startMock } from '../integration/lib/harness.mjs';
import { agentsDir, claudeEnv, codexConfig, geminiEnv, offlineEnv, requireAgent, runProcess, textAnswerSSE, tmpDir, toolCallSSE } from './lib/agents.mjs';

const outDir = path.join(agentsDir, 'captured');
const mock = await startMock();

const KEEP = /proxai-(marker|tool-ok)|^echo proxai-tool-ok$/;
const idMap = new Map();
function placeholderId(v) {
  if (!idMap.has(v)) idMap.set(v, `<id-${idMap.size + 1}>`);
  return idMap.get(v);
}
const UUIDISH = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{64}/g;

/** Placeholders for prompt text and ids; keeps structure. */
function sanitize(v, key = '', inTools = false) {
  if (Array.isArray(v)) return v.map((x) => sanitize(x, key, inTools));
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) o[k] = sanitize(x, k, inTools || k === 'tools');
    return o;
  }
  if (typeof v !== 'string') return v;
  if (inTools) {
    if (key === 'description' && v.length > 160) return v.slice(0, 160) + `... <${v.length} chars>`;
    if (key === 'definition' && v.length > 400) return v.slice(0, 400) + `... <${v.length} chars>`;
    return v;
  }
  if (['text', 'content', 'output', 'thinking'].includes(key) || v.length > 200) {
    if (KEEP.test(v)) return v.length > 400 ? v.replace(/^[\s\S]*?(?=proxai-)/, '<text> ') : v;
    return `<text: ${v.length} chars>`;
  }
  return v.replace(UUIDISH, (m) => placeholderId(m));
}

function sanitizeHeaders(h) {
  const o = {};
  for (const [k, v] of Object.entries(h)) {
    if (k === 'host' || k === 'content-length') continue;
    if (k === 'x-api-key' || k === 'authorization' || k === 'x-goog-api-key') o[k] = '<client key>';
    else o[k] = v.replace(UUIDISH, (m) => placeholderId(m));
  }
  return o;
}

function save(name, reqs) {
  const turns = reqs.map((r) => ({ method: r.method, path: r.path, query: r.query, headers: sanitizeHeaders(r.headers), body: sanitize(r.body) }));
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, name), JSON.stringify(turns, null, 2) + '\n');
  console.log(`wrote captured/${name} (${turns.length} requests)`);
}

// Claude Code -> mock (anthropic protocol)
{
  const claude = await requireAgent('claude');
  await mock.reset();
  await mock.script([
    { match: 'proxai-tool-ok', path: '/v1/messages', sse: textAnswerSSE('anthropic', 'PROXAI-FINAL done') },
    { match: 'proxai-marker-tool', path: '/v1/messages', sse: toolCallSSE('anthropic', 'Bash', { command: 'echo proxai-tool-ok', description: 'Print the check marker' }) },
  ]);
  const home = tmpDir('proxai-cap-claude-');
  const env = claudeEnv(mock.url, home, 'test');
  const r = await runProcess(claude.path, ['-p', 'proxai-marker-tool: run the shell check, then report.', '--model', 'claude-opus-4-6', '--output-format', 'json', '--allowedTools', 'Bash', '--no-session-persistence'], { env, cwd: tmpDir('proxai-cap-work-'), timeoutMs: 120000 });
  if (r.code !== 0) console.log(`claude exited ${r.code}: ${r.stderr.slice(-500)}`);
  save(`claude_code-${claude.version.split(' ')[0]}.json`, await mock.requests());
}

// Codex -> mock (responses protocol)
{
  const codex = await requireAgent('codex');
  for (const model of ['gpt-5.5', 'gpt-5.1-codex']) {
    await mock.reset();
    await mock.script([
      { match: 'proxai-tool-ok', path: '/responses', sse: textAnswerSSE('responses', 'PROXAI-FINAL done') },
      { match: 'proxai-marker-tool', path: '/responses', sse: toolCallSSE('responses', 'exec_command', { cmd: 'echo proxai-tool-ok' }) },
    ]);
    const home = tmpDir('proxai-cap-codex-');
    const codexHome = path.join(home, '.codex');
    fs.mkdirSync(codexHome);
    fs.writeFileSync(path.join(codexHome, 'config.toml'), codexConfig(mock.url, model));
    const env = offlineEnv({ HOME: home, CODEX_HOME: codexHome, PROXAI_API_KEY: 'test' });
    const r = await runProcess(codex.path, ['exec', '--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', '--ephemeral', '--color', 'never', 'proxai-marker-tool: run the shell check, then report.'], { env, cwd: tmpDir('proxai-cap-work-'), timeoutMs: 120000 });
    if (r.code !== 0) console.log(`codex exited ${r.code}: ${r.stderr.slice(-500)}`);
    save(`codex-${codex.version.split(' ').pop()}-${model}.json`, await mock.requests());
  }
}

// Gemini CLI -> mock (gemini protocol; the mock's host root is its base URL)
{
  const gemini = await requireAgent('gemini');
  await mock.reset();
  await mock.script([
    { match: 'proxai-tool-ok', path: ':streamGenerateContent', sse: textAnswerSSE('gemini', 'PROXAI-FINAL done') },
    { match: 'proxai-marker-tool', path: ':streamGenerateContent', sse: toolCallSSE('gemini', 'run_shell_command', { command: 'echo proxai-tool-ok' }) },
  ]);
  const home = tmpDir('proxai-cap-gemini-');
  const env = geminiEnv(mock.url, home, 'test');
  const r = await runProcess(gemini.path, ['-p', 'proxai-marker-tool: run the shell check, then report.', '-m', 'gemini-2.5-flash', '--output-format', 'json', '--approval-mode', 'yolo', '--skip-trust'], { env, cwd: tmpDir('proxai-cap-work-'), timeoutMs: 120000 });
  if (r.code !== 0) console.log(`gemini exited ${r.code}: ${r.stderr.slice(-500)}`);
  save(`gemini_cli-${gemini.version}.json`, await mock.requests());
}

await mock.stop();
process.exit(0);
