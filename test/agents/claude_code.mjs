// Claude Code (the real CLI, pinned in test/agents/package.json) as a client
// of proxai, against each upstream protocol: anthropic (pass-through), chat,
// responses and gemini (translated). The C mock upstream plays the model, answering
// in the UPSTREAM protocol; proxai translates for Claude Code.
//
// For each upstream: (a) a text answer reaches `claude -p` output; (b) a tool
// round trip: the model calls Claude Code's own `Bash` tool with
// `echo proxai-tool-ok`, Claude Code runs it and sends the next turn, whose
// upstream form must carry the shell's output in that protocol's tool-result
// shape with the tool call id verbatim (Gemini has no ids: proxai mints one
// toward Claude Code and the result goes back as a functionResponse by name);
// the model's final text is printed.
// proxai must never answer an agent request with an error.
//
// Skips (exit 77, visible `SKIP:` line) only when Claude Code is not
// installed in test/agents/node_modules or cannot start here.
import path from 'node:path';
import { startMock, startProxai, test, run } from '../integration/lib/harness.mjs';
import {
  CALL_ID,
  UPSTREAM_MODEL,
  UPSTREAM_PATH,
  assertNoRejects,
  claudeEnv,
  accessLog,
  describeRequests,
  hasOutputLine,
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

const claude = await requireAgent('claude');
console.log(`# ${claude.version}`);

const AGENT_TIMEOUT = 120000;

// Two client models on purpose: claude-sonnet-4-5 makes Claude Code send
// `thinking: {type: enabled, budget_tokens}`, claude-opus-4-6 makes it send
// `thinking: {type: adaptive}` plus `output_config: {effort}`.
const TEXT_MODEL = 'claude-sonnet-4-5';
const TOOL_MODEL = 'claude-opus-4-6';

const mock = await startMock();
await startProxyTrap();
// Runs after run() has printed its summary (run() exits the process).
process.on('exit', () => {
  const hosts = [...new Set(outsideAttempts)];
  console.log(hosts.length ? `# note: ${hosts.length} outside request(s) refused by the loopback proxy trap: ${hosts.join(' | ')}` : '# no outside network attempts');
});

/** Runs `claude -p` against proxai at pxUrl; resolves to {r, json}. */
async function runClaude(pxUrl, prompt, model) {
  const home = tmpDir('proxai-claude-home-');
  const work = tmpDir('proxai-claude-work-');
  const env = claudeEnv(pxUrl, home);
  const args = ['-p', prompt, '--model', model, '--output-format', 'json', '--allowedTools', 'Bash', '--no-session-persistence'];
  const r = await runProcess(claude.path, args, { env, cwd: work, timeoutMs: AGENT_TIMEOUT });
  let json = null;
  try {
    json = JSON.parse(r.stdout.trim().split('\n').pop());
  } catch {
    // reported below
  }
  return { r, json };
}

function agentFailure(what, r) {
  return new Error(
    `${what}: exit ${r.code}${r.signal ? ' ' + r.signal : ''}${r.timedOut ? ' (timed out)' : ''}\n` +
      `stdout: ${r.stdout.slice(-3000)}\nstderr: ${r.stderr.slice(-3000)}`,
  );
}

/** Every scripted upstream turn reports 12 input / 7 output tokens; Claude Code sums its turns. */
function checkUsage(json, turns) {
  const u = json.usage || {};
  if (u.input_tokens !== 12 * turns || u.output_tokens !== 7 * turns) {
    throw new Error(`claude's usage ${JSON.stringify(u)}, want input ${12 * turns} / output ${7 * turns} (message_start / message_delta usage)`);
  }
}

async function withProxai(upstream, fn) {
  const dir = tmpDir('proxai-claude-px-');
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

for (const upstream of ['anthropic', 'chat', 'responses', 'gemini']) {
  const upPath = UPSTREAM_PATH[upstream];

  test(`claude code -> ${upstream} upstream: text answer`, async () => {
    await mock.reset();
    const answer = `PROXAI-TEXT-${upstream.toUpperCase()} says hello`;
    await mock.script([{ match: 'proxai-marker-text', path: upPath, sse: textAnswerSSE(upstream, answer) }]);
    await withProxai(upstream, async (px, logFile) => {
      const { r, json } = await runClaude(px.url, 'proxai-marker-text: reply with a short greeting.', TEXT_MODEL);
      const reqs = await mock.requests();
      saveArtifacts(`claude_${upstream}_text`, { r, reqs, log: accessLog(logFile), proxai: px.logs().stderr, tap: px.tap?.records });
      assertNoRejects(logFile);
      const main = reqs.filter((q) => q.path.endsWith(upPath) && JSON.stringify(q.body).includes('proxai-marker-text'));
      if (main.length === 0) throw new Error(`the mock never saw the agent's turn on ${upPath}; saw: ${describeRequests(reqs)}; agent: ${agentFailure('claude', r).message}`);
      if (upstreamModelOf(main[0]) !== UPSTREAM_MODEL) throw new Error(`upstream model ${upstreamModelOf(main[0])}, want ${UPSTREAM_MODEL}`);
      if (JSON.stringify(main[0].headers).includes('proxai-client-key')) {
        throw new Error('the client credential was forwarded upstream');
      }
      if (r.code !== 0 || !json) throw agentFailure('claude -p failed', r);
      if (json.is_error || typeof json.result !== 'string' || !json.result.includes(answer)) {
        throw new Error(`claude's result does not carry the answer ${JSON.stringify(answer)}: ${r.stdout.slice(-2000)}`);
      }
      checkUsage(json, 1);
      const left = await mock.queue();
      if (left.length) throw new Error(`scripted answer not used: ${JSON.stringify(left).slice(0, 300)}`);
    });
  }, { timeout: AGENT_TIMEOUT + 30000 });

  toolRoundTrip(upstream, TOOL_MODEL, 'Bash tool round trip');
  // A non-Claude model name, as gateway users run it: Claude Code then adds
  // the mid-conversation-tool-changes beta and moves its environment text
  // into `role: system` messages INSIDE `messages` (array content in turn 1,
  // string content in turn 2). That text must reach the upstream.
  toolRoundTrip(upstream, 'gpt-5.5', 'non-Claude model name (system role inside messages), Bash tool round trip', (body) => {
    if (!JSON.stringify(body).includes('You are powered by the model gpt-5.5')) {
      throw new Error('the text of the in-messages system message did not reach the upstream');
    }
  });
}

function toolRoundTrip(upstream, model, title, extraCheck = () => {}) {
  const upPath = UPSTREAM_PATH[upstream];
  test(`claude code -> ${upstream} upstream: ${title}`, async () => {
    await mock.reset();
    const final = `PROXAI-FINAL-${upstream.toUpperCase()} the check passed`;
    await mock.script([
      // second turn: carries the tool output -> final text
      { match: 'proxai-tool-ok', path: upPath, sse: textAnswerSSE(upstream, final) },
      // first turn -> call Claude Code's own Bash tool
      {
        match: 'proxai-marker-tool',
        path: upPath,
        sse: toolCallSSE(upstream, 'Bash', { command: 'echo proxai-tool-ok', description: 'Print the check marker' }),
      },
    ]);
    await withProxai(upstream, async (px, logFile) => {
      const { r, json } = await runClaude(px.url, 'proxai-marker-tool: run the shell check, then report.', model);
      const reqs = await mock.requests();
      saveArtifacts(`claude_${upstream}_tool_${model}`, { r, reqs, log: accessLog(logFile), proxai: px.logs().stderr, tap: px.tap?.records });
      assertNoRejects(logFile);
      const turns = reqs.filter((q) => q.path.endsWith(upPath) && JSON.stringify(q.body).includes('proxai-marker-tool'));
      if (turns.length < 2) {
        throw new Error(`want 2 model turns on ${upPath}, mock saw ${turns.length}: ${describeRequests(reqs)}; agent: ${agentFailure('claude', r).message}`);
      }
      const second = turns[1].body;
      const call = replayedToolCall(upstream, second);
      if (call.name !== 'Bash' || call.args.command !== 'echo proxai-tool-ok') {
        throw new Error(`replayed tool call is ${JSON.stringify(call)}`);
      }
      const out = toolResultText(upstream, second, 'Bash');
      if (!hasOutputLine(out, 'proxai-tool-ok')) {
        throw new Error(`tool result for ${CALL_ID[upstream] ?? 'Bash'} does not carry the shell output: ${JSON.stringify(out).slice(0, 500)}`);
      }
      if (r.code !== 0 || !json) throw agentFailure('claude -p failed', r);
      if (json.is_error || typeof json.result !== 'string' || !json.result.includes(final)) {
        throw new Error(`claude's result does not carry the final text ${JSON.stringify(final)}: ${r.stdout.slice(-2000)}`);
      }
      checkUsage(json, 2);
      // The reasoning that came with the tool call is replayed upstream in
      // the upstream's own form (SPEC 5: signature / encrypted_content
      // survive a round trip where the target can hold them). Checked last:
      // the round trip above is the primary contract.
      for (const t of turns) extraCheck(t.body);
      replayedReasoning(upstream, second);
      const left = await mock.queue();
      if (left.length) throw new Error(`scripted answers not used: ${JSON.stringify(left).slice(0, 300)}`);
    });
  }, { timeout: AGENT_TIMEOUT + 30000 });
}

await run();
