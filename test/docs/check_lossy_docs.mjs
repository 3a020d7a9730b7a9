// Every lossy field path the translators can emit (each a string literal in a
// px_lossy_add or px_dropped call, or marked PX_LOSSY) must be listed in docs/translation*.md under a
// "## Lossy fields" heading, and every listed path must exist in the code, so
// the documentation and the code cannot drift apart. The code is the
// gateway's (src/proto) and the reference's (test/reference): the codecs
// name a dropped member by its own key or from tables, and the
// differential fuzzers hold their lossy lists equal to the reference's,
// which names each with a literal.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const root = process.argv[2];
const code = new Map(); // path -> file
for (const f of ['src/proto', 'test/reference'].flatMap((d) =>
  readdirSync(join(root, d)).filter((f) => f.endsWith('.c')).map((f) => join(d, f)))) {
  const text = readFileSync(join(root, f), 'utf8');
  for (const m of text.matchAll(/px_lossy_add\s*\(\s*[^,]+,\s*"([^"]+)"\s*\)/g)) code.set(m[1], f);
  // names dropped by streams (px_dropped) and names returned by the shared
  // rules (PX_LOSSY) are lossy names too
  for (const m of text.matchAll(/px_dropped\s*\(\s*[^,]+,\s*"([^"]+)"\s*\)/g)) code.set(m[1], f);
  for (const m of text.matchAll(/PX_LOSSY\s*\(\s*"([^"]+)"\s*\)/g)) code.set(m[1], f);
}
const docsDir = join(root, 'docs');
const docs = new Map(); // path -> doc file
for (const f of readdirSync(docsDir).filter((f) => /^translation.*\.md$/.test(f))) {
  const text = readFileSync(join(docsDir, f), 'utf8');
  const sec = text.split(/^## /m).find((s) => s.startsWith('Lossy fields'));
  if (!sec) continue;
  for (const m of sec.matchAll(/^\s*[-*]\s+`([^`]+)`/gm)) docs.set(m[1], f);
}
let bad = 0;
for (const [p, f] of code) {
  if (!docs.has(p)) { console.log(`not documented: "${p}" (${f})`); bad++; }
}
for (const [p, f] of docs) {
  if (!code.has(p)) { console.log(`documented but not in code: "${p}" (docs/${f})`); bad++; }
}
if (code.size === 0) { console.log('no px_lossy_add literals found'); bad++; }
console.log(`${code.size} lossy paths in code, ${docs.size} documented, ${bad} problem(s)`);
process.exit(bad ? 1 : 0);
