// Codex (the real CLI, pinned in test/agents/package.json) as a client of
// proxai, against each upstream protocol: responses (pass-through), chat,
// anthropic and gemini (translated). Codex speaks only the Responses API;
// the C mock upstream plays the model in the UPSTREAM protocol and proxai
// translates.
//
// For each upstream: (a) a text answer reaches `codex exec`'s output; (b) a
// tool round trip: the model calls Codex's own shell tool `exec_command` with
// `{"cmd": "echo proxai-tool-ok"}`, Codex runs it and sends the next turn,
// whose upstream form must carry the shell's output in that protocol's
// tool-result shape with the call id verbatim (Gemini has no ids: the
// functionResponse goes back by name) and the reasoning of the tool-call
// turn replayed; the model's final text is printed. proxai must never
// answer an agent request with an error.
//
// Skips (exit 77, visible `SKIP:` line) only when Codex is not installed in
// test/agents/node_modules or cannot start here.
import fs from 'node:fs';
import path from 'node:path';
import { startMock, startProxai, test, run } from '../integration/lib/harness.mjs';
import {
  CALL_ID,
  UPSTREAM_MODEL,
  UPSTREAM_PATH,
  accessLog,
  assertNoRejects,
  codexConfig,
  describeRequests,
  hasOutputLine,
  offlineEnv,
  proxaiConfig,
  replayedReasoning,
  replayedToolCall,
  requireAgent,
  runProcess,
  saveArtifacts,
  startProxyTrap,
  outsideAttempts,
  startTap,
  textAnswerSSE,
  tmpDir,
  toolCallSSE,
  toolResultText,
  upstreamModelOf,
} from './lib/agents.mjs';

const codex = await requireAgent('codex');
console.log(`# ${codex.version}`);

const AGENT_TIMEOUT = 120000;

// Two client models on purpose: gpt-5.5 is known to this Codex version and
// makes it send a `custom` (freeform grammar) apply_patch tool, a hosted
// `tool_search` and `web_search`, `reasoning.effort` and `text.verbosity`;
// an unknown model (fallback metadata) makes it send a `namespace` tool
// (multi_agent_v1) and `reasoning.summary` instead.
const TEXT_MODEL = 'gpt-5.1-codex';
const TOOL_MODEL = 'gpt-5.5';

const mock = await startMock();
await startProxyTrap();
// Runs after run() has printed its summary (run() exits the process).
process.on('exit', () => {
  const hosts = [...new Set(outsideAttempts)];
  console.log(hosts.length ? `# note: ${hosts.length} outside request(s) refused by the loopback proxy trap: ${hosts.join(' | ')}` : '# no outside network attempts');
});

/** Runs `codex exec` against proxai at pxUrl; resolves to {r, last}. */
async function runCodex(pxUrl, prompt, model) {
  const home = tmpDir('proxai-codex-home-');
  const codexHome = path.join(home, '.codex');
  const work = tmpDir('proxai-codex-work-');
  fs.mkdirSync(codexHome);
  fs.writeFileSync(path.join(codexHome, 'config.toml'), codexConfig(pxUrl, model));
  const lastFile = path.join(home, 'last-message.txt');
  const env = offlineEnv({ HOME: home, CODEX_HOME: codexHome, PROXAI_API_KEY: 'proxai-client-key' });
  const args = [
    'exec',
    '--json', // JSONL events on stdout: items (reasoning, agent_message, command_execution) and turn usage
    '--strict-config', // an unknown config key fails loudly after a Codex bump
    '--skip-git-repo-check',
    '--dangerously-bypass-approvals-and-sandbox',
    '--ephemeral',
    '--color',
    'never',
    '-o',
    lastFile,
    prompt,
  ];
  const r = await runProcess(codex.path, args, { env, cwd: work, timeoutMs: AGENT_TIMEOUT });
  const last = fs.existsSync(lastFile) ? fs.readFileSync(lastFile, 'utf8') : '';
  const events = [];
  for (const line of r.stdout.split('\n')) {
    try {
      if (line.trim().startsWith('{')) events.push(JSON.parse(line));
    } catch {
      // not an event line
    }
  }
  const items = events.filter((e) => e.type === 'item.completed').map((e) => e.item);
  const usage = events.filter((e) => e.type === 'turn.completed').map((e) => e.usage).pop();
  return { r, last, items, usage };
}

/** Checks Codex's --json events: reasoning shown, final message, usage from response.completed. */
function checkEvents({ items, usage, r }, final, turns) {
  const msgs = items.filter((i) => i.type === 'agent_message').map((i) => i.text);
  if (!msgs.some((t) => t.includes(final))) throw new Error(`no agent_message with ${JSON.stringify(final)}: ${JSON.stringify(items)}; ${agentFailure('codex', r).message}`);
  if (!items.some((i) => i.type === 'reasoning' && /answer|command/.test(i.text || ''))) {
    throw new Error(`the upstream reasoning did not reach Codex as a reasoning item: ${JSON.stringify(items)}`);
  }
  // Every scripted upstream turn reports 12 input / 7 output tokens.
  if (!usage || usage.input_tokens !== 12 * turns || usage.output_tokens !== 7 * turns) {
    throw new Error(`turn usage ${JSON.stringify(usage)}, want input ${12 * turns} / output ${7 * turns} (response.completed usage)`);
  }
}

function agentFailure(what, r) {
  return new Error(
    `${what}: exit ${r.code}${r.signal ? ' ' + r.signal : ''}${r.timedOut ? ' (timed out)' : ''}\n` +
      `stdout: ${r.stdout.slice(-3000)}\nstderr: ${r.stderr.slice(-3000)}`,
  );
}

async function withProxai(upstream, fn) {
  const dir = tmpDir('proxai-codex-px-');
  const logFile = path.join(dir, 'access.log');
  const px = await startProxai(proxaiConfig(upstream, mock.url, logFile));
  // AGENTS_TAP=1: the agent talks to a recording relay in front of proxai
  // (diagnostics only; the records go to the artifacts).
  const tap = process.env.AGENTS_TAP === '1' ? await startTap(px.url) : null;
  try {
    return await fn(tap ? { ...px, url: tap.url, tap } : px, logFile);
  } finally {
    if (tap) await tap.stop();
    await px.stop();
  }
}

for (const upstream of ['responses', 'chat', 'anthropic', 'gemini']) {
  const upPath = UPSTREAM_PATH[upstream];

  test(`codex -> ${upstream} upstream: text answer`, async () => {
    await mock.reset();
    const answer = `PROXAI-TEXT-${upstream.toUpperCase()} says hello`;
    await mock.script([{ match: 'proxai-marker-text', path: upPath, sse: textAnswerSSE(upstream, answer) }]);
    await withProxai(upstream, async (px, logFile) => {
      const run1 = await runCodex(px.url, 'proxai-marker-text: reply with a short greeting.', TEXT_MODEL);
      const reqs = await mock.requests();
      const { r, last } = run1;
      saveArtifacts(`codex_${upstream}_text`, { r, last, reqs, log: accessLog(logFile), proxai: px.logs().stderr, tap: px.tap?.records });
      assertNoRejects(logFile);
      const main = reqs.filter((q) => q.path.endsWith(upPath) && JSON.stringify(q.body).includes('proxai-marker-text'));
      if (main.length === 0) throw new Error(`the mock never saw the agent's turn on ${upPath}; saw: ${describeRequests(reqs)}; agent: ${agentFailure('codex', r).message}`);
      if (upstreamModelOf(main[0]) !== UPSTREAM_MODEL) throw new Error(`upstream model ${upstreamModelOf(main[0])}, want ${UPSTREAM_MODEL}`);
      if (JSON.stringify(main[0].headers).includes('proxai-client-key')) throw new Error('the client credential was forwarded upstream');
      if (r.code !== 0) throw agentFailure('codex exec failed', r);
      checkEvents(run1, answer, 1);
      if (!last.includes(answer)) {
        throw new Error(`codex did not print the answer ${JSON.stringify(answer)}; last message: ${JSON.stringify(last)}; ${agentFailure('codex', r).message}`);
      }
      const left = await mock.queue();
      if (left.length) throw new Error(`scripted answer not used: ${JSON.stringify(left).slice(0, 300)}`);
    });
  }, { timeout: AGENT_TIMEOUT + 30000 });

  test(`codex -> ${upstream} upstream: exec_command tool round trip`, async () => {
    await mock.reset();
    const final = `PROXAI-FINAL-${upstream.toUpperCase()} the check passed`;
    await mock.script([
      // second turn: carries the tool output -> final text
      { match: 'proxai-tool-ok', path: upPath, sse: textAnswerSSE(upstream, final) },
      // first turn -> call Codex's own shell tool
      { match: 'proxai-marker-tool', path: upPath, sse: toolCallSSE(upstream, 'exec_command', { cmd: 'echo proxai-tool-ok' }) },
    ]);
    await withProxai(upstream, async (px, logFile) => {
      const run1 = await runCodex(px.url, 'proxai-marker-tool: run the shell check, then report.', TOOL_MODEL);
      const reqs = await mock.requests();
      const { r, last } = run1;
      saveArtifacts(`codex_${upstream}_tool`, { r, last, reqs, log: accessLog(logFile), proxai: px.logs().stderr, tap: px.tap?.records });
      assertNoRejects(logFile);
      const turns = reqs.filter((q) => q.path.endsWith(upPath) && JSON.stringify(q.body).includes('proxai-marker-tool'));
      if (turns.length < 2) {
        throw new Error(`want 2 model turns on ${upPath}, mock saw ${turns.length}: ${describeRequests(reqs)}; agent: ${agentFailure('codex', r).message}`);
      }
      const second = turns[1].body;
      const call = replayedToolCall(upstream, second);
      if (call.name !== 'exec_command' || call.args.cmd !== 'echo proxai-tool-ok') throw new Error(`replayed tool call is ${JSON.stringify(call)}`);
      const out = toolResultText(upstream, second, 'exec_command');
      if (!hasOutputLine(out, 'proxai-tool-ok')) {
        throw new Error(`tool result for ${CALL_ID[upstream] ?? 'exec_command'} does not carry the shell output: ${JSON.stringify(out).slice(0, 500)}`);
      }
      if (r.code !== 0) throw agentFailure('codex exec failed', r);
      checkEvents(run1, final, 2);
      const ran = run1.items.find((i) => i.type === 'command_execution');
      if (!ran || !hasOutputLine(ran.aggregated_output || '', 'proxai-tool-ok')) throw new Error(`no command_execution with the output: ${JSON.stringify(run1.items)}`);
      if (!last.includes(final)) {
        throw new Error(`codex did not print the final text ${JSON.stringify(final)}; last message: ${JSON.stringify(last)}; ${agentFailure('codex', r).message}`);
      }
      // The reasoning of the tool-call turn is replayed upstream in the
      // upstream's own form (checked last: the round trip above is the
      // primary contract).
      replayedReasoning(upstream, second);
      const left = await mock.queue();
      if (left.length) throw new Error(`scripted answers not used: ${JSON.stringify(left).slice(0, 300)}`);
    });
  }, { timeout: AGENT_TIMEOUT + 30000 });
}

await run();
