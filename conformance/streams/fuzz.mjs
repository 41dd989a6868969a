// Random differential check of abstore's stream assembly against the real SDK.
//
// Writes N random part sequences (valid, schema-failing, undefined and
// out-of-sequence parts mixed) with their expectations to DIR, in the format of
// fixtures/streams. Expectations are derived as generate.mjs does: parts failing
// the schema or of unnamed types are dropped, then each part the SDK stops on is
// removed (drop-and-continue). Then point the Rust fixture test at DIR:
//
//   node fuzz.mjs /tmp/stream-fuzz 7 400
//   ABSTORE_STREAM_FIXTURES=/tmp/stream-fuzz cargo test streams::assemble::fixtures
//
// Usage: node fuzz.mjs DIR [SEED] [N]. Same seed, same sequences.
import { writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { readUIMessageStream, uiMessageChunkSchema, UIMessageStreamError } from 'ai';
const schema = uiMessageChunkSchema();
const UNNAMED = new Set(['steering-message', 'reset-step']);
let seed = Number(process.argv[3] ?? 1);
const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const pick = a => a[Math.floor(rnd() * a.length)];
const ids = ['a', 'b', 'c'];
const calls = ['c1', 'c2', 'c3'];
const appr = ['p1', 'p2'];
const mids = ['m1', 'm2', ''];
const frag = ['{', '"k', '":', '1', '.5', ',', '"s":"x', 'y"', '[', 'tr', 'ue', ']', '}', 'nul', '\\u00', 'e9', '"', ' ', '😀', '__proto__'];
const pm = () => rnd() < 0.3 ? { providerMetadata: { p: { v: Math.floor(rnd() * 9) } } } : {};
const meta = () => pick([{ a: 1 }, { n: { x: rnd() } }, null, 'str', [1, 2], 3, { n: { y: [1] } }, { a: null }]);
const gens = [
  () => ({ type: 'start', ...(rnd() < 0.6 ? { messageId: pick(mids) } : {}), ...(rnd() < 0.4 ? { messageMetadata: meta() } : {}) }),
  () => ({ type: 'finish', ...(rnd() < 0.4 ? { messageMetadata: meta() } : {}) }),
  () => ({ type: 'message-metadata', messageMetadata: meta() }),
  () => ({ type: 'start-step' }), () => ({ type: 'finish-step' }),
  () => ({ type: 'text-start', id: pick(ids), ...pm() }),
  () => ({ type: 'text-delta', id: pick(ids), delta: pick(['x', 'yz ', '😀']), ...pm() }),
  () => ({ type: 'text-end', id: pick(ids), ...pm() }),
  () => ({ type: 'reasoning-start', id: pick(ids) }),
  () => ({ type: 'reasoning-delta', id: pick(ids), delta: 'r' }),
  () => ({ type: 'reasoning-end', id: pick(ids), ...pm() }),
  () => ({ type: 'tool-input-start', toolCallId: pick(calls), toolName: pick(['t', 'u']), ...(rnd() < 0.3 ? { dynamic: true } : {}), ...(rnd() < 0.2 ? { inputEncoding: pick(['json', 'text']) } : {}), ...(rnd() < 0.2 ? { title: 'T' } : {}), ...(rnd() < 0.2 ? { toolMetadata: { m: 1 } } : {}), ...(rnd() < 0.2 ? { providerExecuted: rnd() < 0.5 } : {}), ...pm() }),
  () => ({ type: 'tool-input-delta', toolCallId: pick(calls), inputTextDelta: pick(frag) }),
  () => ({ type: 'tool-input-delta', toolCallId: pick(calls), inputTextDelta: pick(frag) }),
  () => ({ type: 'tool-input-available', toolCallId: pick(calls), toolName: pick(['t', 'u']), input: { i: 1 }, ...(rnd() < 0.3 ? { dynamic: true } : {}), ...(rnd() < 0.2 ? { title: 'T2' } : {}), ...pm() }),
  () => ({ type: 'tool-input-error', toolCallId: pick(calls), toolName: 't', input: 'bad', errorText: 'e', ...(rnd() < 0.3 ? { dynamic: true } : {}) }),
  () => ({ type: 'tool-output-available', toolCallId: pick(calls), output: rnd(), ...(rnd() < 0.3 ? { preliminary: true } : {}), ...(rnd() < 0.2 ? { toolMetadata: { o: 1 } } : {}), ...pm() }),
  () => ({ type: 'tool-output-error', toolCallId: pick(calls), errorText: 'oe', ...pm() }),
  () => ({ type: 'tool-output-denied', toolCallId: pick(calls) }),
  () => ({ type: 'tool-approval-request', approvalId: pick(appr), toolCallId: pick(calls), ...(rnd() < 0.3 ? { reason: 'r' } : {}), ...(rnd() < 0.3 ? { inputSchemaInput: null } : {}) }),
  () => ({ type: 'tool-approval-response', approvalId: pick(appr), approved: rnd() < 0.5, ...(rnd() < 0.3 ? { reason: 'x' } : {}), ...(rnd() < 0.2 ? { providerExecuted: true } : {}) }),
  () => ({ type: pick(['data-a', 'data-b']), ...(rnd() < 0.7 ? { id: pick(ids) } : {}), data: rnd(), ...(rnd() < 0.2 ? { transient: rnd() < 0.5 } : {}) }),
  () => ({ type: 'source-url', sourceId: 's', url: 'u', ...(rnd() < 0.5 ? { title: 't' } : {}) }),
  () => ({ type: 'file', url: 'u', mediaType: 'm', ...pm() }),
  () => ({ type: 'custom', kind: 'k.x' }),
  () => ({ type: pick(['reset-step', 'bogus', 'error', 'abort']), errorText: 'e' }),
  () => ({ type: 'text-delta', id: 'a', delta: null }),
];
async function runSdk(parts) {
  const input = structuredClone(parts);
  const stream = new ReadableStream({ start(c) { for (const p of input) c.enqueue(p); c.close(); } });
  let halt; const messages = []; const slot = new Map();
  for await (const m of readUIMessageStream({ stream, onError: e => { if (UIMessageStreamError.isInstance(e) || e instanceof TypeError) halt ??= e; } })) {
    if (slot.has(m.id)) messages[slot.get(m.id)] = m; else { slot.set(m.id, messages.length); messages.push(m); }
  }
  return { messages: JSON.parse(JSON.stringify(messages)), halt };
}
const dir = process.argv[2]; rmSync(dir, { recursive: true, force: true }); mkdirSync(dir, { recursive: true });
const N = Number(process.argv[4] ?? 300);
for (let n = 0; n < N; n++) {
  const len = 5 + Math.floor(rnd() * 40);
  const parts = Array.from({ length: len }, () => pick(gens)());
  let kept = [];
  for (const p of parts) if (typeof p.type === 'string' && !UNNAMED.has(p.type) && (await schema.validate(p)).success) kept.push(p);
  let dropped = parts.length - kept.length;
  for (;;) {
    if (!(await runSdk(kept)).halt) break;
    let bad = kept.length - 1;
    for (let k = 1; k <= kept.length; k++) if ((await runSdk(kept.slice(0, k))).halt) { bad = k - 1; break; }
    kept = kept.filter((_, i) => i !== bad); dropped++;
  }
  const { messages } = await runSdk(kept);
  const name = `fuzz-${String(n).padStart(4, '0')}`;
  writeFileSync(`${dir}/${name}.parts.json`, JSON.stringify(parts));
  writeFileSync(`${dir}/${name}.expected.json`, JSON.stringify({ messages, dropped }));
}
console.log('wrote', N);
