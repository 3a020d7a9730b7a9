// Gemini CLI (the real CLI, pinned in test/agents/package.json) as a client of
// proxai, against each upstream protocol: chat, responses and anthropic
// (translated) and gemini (pass-through). The C mock upstream plays the
// model, answering in the UPSTREAM protocol; proxai translates for the CLI,
// which speaks Gemini generateContent (streamGenerateContent?alt=sse, its key
// in x-goog-api-key).
//
// For each upstream: (a) a text answer reaches `gemini -p` output; (b) a tool
// round trip: the model calls the CLI's own shell tool `run_shell_command`
// with `echo proxai-tool-ok`, the CLI runs it (approval mode yolo) and sends
// the next turn, whose upstream form must carry the shell's output in that
// protocol's tool-result shape with the call id mapped back (Gemini has no
// call ids: proxai mints one toward the CLI and maps the functionResponse
// back to the upstream's id); the model's final text is printed. proxai must
// never answer an agent request with an error.
//
// Skips (exit 77, visible `SKIP:` line) only when the Gemini CLI is not
// installed in test/agents/node_modules or cannot start here.
import path from 'node:path';
import { startMock, startProxai, test, run } from '../integration/lib/harness.mjs';
import {
  CALL_ID,
  UPSTREAM_MODEL,
  UPSTREAM_PATH,
  accessLog,
  assertNoRejects,
  describeRequests,
  geminiEnv,
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

const gemini = await requireAgent('gemini');
console.log(`# gemini-cli ${gemini.version}`);

const AGENT_TIMEOUT = 120000;
const SHELL_TOOL = 'run_shell_command'; // the CLI's shell tool (SHELL_TOOL_NAME in its source)
// A model name the CLI knows (its model config and tool set); [route *]
// sends every name upstream as UPSTREAM_MODEL.
const MODEL = 'gemini-2.5-flash';

const mock = await startMock();
await startProxyTrap();
// Runs after run() has printed its summary (run() exits the process).
process.on('exit', () => {
  const hosts = [...new Set(outsideAttempts)];
  console.log(hosts.length ? `# note: ${hosts.length} outside request(s) refused by the loopback proxy trap: ${hosts.join(' | ')}` : '# no outside network attempts');
});

/** Runs `gemini -p` against proxai at pxUrl; resolves to {r, json}. */
async function runGemini(pxUrl, prompt) {
  const home = tmpDir('proxai-gemini-home-');
  const work = tmpDir('proxai-gemini-work-');
  const env = geminiEnv(pxUrl, home);
  const args = ['-p', prompt, '-m', MODEL, '--output-format', 'json', '--approval-mode', 'yolo', '--skip-trust'];
  const r = await runProcess(gemini.path, args, { env, cwd: work, timeoutMs: AGENT_TIMEOUT });
  let json = null;
  try {
    const out = r.stdout.trim();
    json = JSON.parse(out.slice(out.indexOf('{')));
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

/**
 * Every scripted upstream turn reports 12 input / 7 output tokens (the
 * Responses script counts 2 of the 7 as reasoning); the CLI's JSON stats sum
 * them per model (usageMetadata promptTokenCount, candidatesTokenCount +
 * thoughtsTokenCount).
 */
function checkUsage(json, turns) {
  let prompt = 0;
  let cand = 0;
  for (const m of Object.values(json.stats?.models || {})) {
    prompt += m.tokens?.prompt ?? 0;
    cand += (m.tokens?.candidates ?? 0) + (m.tokens?.thoughts ?? 0);
  }
  if (prompt !== 12 * turns || cand !== 7 * turns) {
    throw new Error(`gemini's token stats prompt ${prompt} / candidates ${cand}, want ${12 * turns} / ${7 * turns} (thoughts included): ${JSON.stringify(json.stats?.models)}`);
  }
}

/** The CLI hands the model `Output: <stdout>` (plus other lines): the shell's output, not the command. */
function hasShellOutput(text, line) {
  return text.split(/\r?\n/).some((l) => l.trim() === line || l.trim() === `Output: ${line}`);
}

async function withProxai(upstream, fn) {
  const dir = tmpDir('proxai-gemini-px-');
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

for (const upstream of ['chat', 'responses', 'anthropic', 'gemini']) {
  const upPath = UPSTREAM_PATH[upstream];

  test(`gemini cli -> ${upstream} upstream: text answer`, async () => {
    await mock.reset();
    const answer = `PROXAI-TEXT-${upstream.toUpperCase()} says hello`;
    await mock.script([{ match: 'proxai-marker-text', path: upPath, sse: textAnswerSSE(upstream, answer) }]);
    await withProxai(upstream, async (px, logFile) => {
      const { r, json } = await runGemini(px.url, 'proxai-marker-text: reply with a short greeting.');
      const reqs = await mock.requests();
      saveArtifacts(`gemini_${upstream}_text`, { r, reqs, log: accessLog(logFile), proxai: px.logs().stderr, tap: px.tap?.records });
      assertNoRejects(logFile);
      const main = reqs.filter((q) => q.path.endsWith(upPath) && JSON.stringify(q.body).includes('proxai-marker-text'));
      if (main.length === 0) throw new Error(`the mock never saw the agent's turn on ${upPath}; saw: ${describeRequests(reqs)}; agent: ${agentFailure('gemini', r).message}`);
      if (upstreamModelOf(main[0]) !== UPSTREAM_MODEL) throw new Error(`upstream model ${upstreamModelOf(main[0])}, want ${UPSTREAM_MODEL}`);
      if (JSON.stringify(main[0].headers).includes('proxai-client-key') || (main[0].query || '').includes('proxai-client-key')) {
        throw new Error('the client credential was forwarded upstream');
      }
      if (r.code !== 0 || !json) throw agentFailure('gemini -p failed', r);
      if (json.error || typeof json.response !== 'string' || !json.response.includes(answer)) {
        throw new Error(`gemini's response does not carry the answer ${JSON.stringify(answer)}: ${r.stdout.slice(-2000)}`);
      }
      checkUsage(json, 1);
      const left = await mock.queue();
      if (left.length) throw new Error(`scripted answer not used: ${JSON.stringify(left).slice(0, 300)}`);
    });
  }, { timeout: AGENT_TIMEOUT + 30000 });

  test(`gemini cli -> ${upstream} upstream: ${SHELL_TOOL} tool round trip`, async () => {
    await mock.reset();
    const final = `PROXAI-FINAL-${upstream.toUpperCase()} the check passed`;
    await mock.script([
      // second turn: carries the tool output -> final text
      { match: 'proxai-tool-ok', path: upPath, sse: textAnswerSSE(upstream, final) },
      // first turn -> call the CLI's own shell tool
      { match: 'proxai-marker-tool', path: upPath, sse: toolCallSSE(upstream, SHELL_TOOL, { command: 'echo proxai-tool-ok' }) },
    ]);
    await withProxai(upstream, async (px, logFile) => {
      const { r, json } = await runGemini(px.url, 'proxai-marker-tool: run the shell check, then report.');
      const reqs = await mock.requests();
      saveArtifacts(`gemini_${upstream}_tool`, { r, reqs, log: accessLog(logFile), proxai: px.logs().stderr, tap: px.tap?.records });
      assertNoRejects(logFile);
      const turns = reqs.filter((q) => q.path.endsWith(upPath) && JSON.stringify(q.body).includes('proxai-marker-tool'));
      if (turns.length < 2) {
        throw new Error(`want 2 model turns on ${upPath}, mock saw ${turns.length}: ${describeRequests(reqs)}; agent: ${agentFailure('gemini', r).message}`);
      }
      const second = turns[1].body;
      const call = replayedToolCall(upstream, second);
      if (call.name !== SHELL_TOOL || call.args.command !== 'echo proxai-tool-ok') throw new Error(`replayed tool call is ${JSON.stringify(call)}`);
      const out = toolResultText(upstream, second, SHELL_TOOL);
      if (!hasShellOutput(out, 'proxai-tool-ok')) {
        throw new Error(`tool result for ${CALL_ID[upstream] ?? SHELL_TOOL} does not carry the shell output: ${JSON.stringify(out).slice(0, 500)}`);
      }
      if (r.code !== 0 || !json) throw agentFailure('gemini -p failed', r);
      if (json.error || typeof json.response !== 'string' || !json.response.includes(final)) {
        throw new Error(`gemini's response does not carry the final text ${JSON.stringify(final)}: ${r.stdout.slice(-2000)}`);
      }
      const ran = json.stats?.tools?.byName?.[SHELL_TOOL];
      if (!ran || ran.success !== 1) throw new Error(`the CLI did not run ${SHELL_TOOL} once successfully: ${JSON.stringify(json.stats?.tools)}`);
      checkUsage(json, 2);
      // The reasoning of the tool-call turn comes back upstream in the
      // upstream's own form where the CLI keeps what that needs (checked
      // last: the round trip above is the primary contract). The CLI keeps
      // no thought TEXT in its history, only the thoughtSignature on the
      // functionCall part: enough for Gemini (signature) and Responses
      // (encrypted_content alone), not for Chat (reasoning_content is text)
      // or Anthropic (a thinking block's signature covers its text).
      if (upstream === 'gemini' || upstream === 'responses') replayedReasoning(upstream, second);
      const left = await mock.queue();
      if (left.length) throw new Error(`scripted answers not used: ${JSON.stringify(left).slice(0, 300)}`);
    });
  }, { timeout: AGENT_TIMEOUT + 30000 });
}

await run();
