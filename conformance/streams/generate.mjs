// Differential expectations for abstore's stream assembly (src/streams/assemble.rs).
//
// For every fixtures/streams/NAME.parts.json (an array of parts, or
// {"parts": [...], "abstoreDiffers": "reason"}), run the parts through the real
// `ai` package's readUIMessageStream and keep the last snapshot per message id,
// in order of first appearance. Expectation files are {"messages": [...],
// "dropped": N}.
//
// Parts abstore drops before assembly are dropped here too, before the SDK sees
// them, and counted: anything that is not an object with a string `type`, the
// SDK types the protocol does not name (steering-message, reset-step), and
// parts failing the SDK's own uiMessageChunkSchema (which also rejects unknown
// types).
//
// Fixtures declaring `abstoreDiffers` contain parts the SDK throws on (and then
// stops); their expectation files are written by hand and never overwritten.
// For them this script checks that the SDK does throw, and cross-checks the
// hand-written file against the SDK run with every throwing part removed (the
// SDK throws before changing anything, so that is abstore's drop-and-continue).
//
// Usage: node generate.mjs [--check] [--print-derived] [FIXTURE_DIR]
//   --check          compare instead of writing; exit 1 on any difference
//   --print-derived  print the derived expectation of abstoreDiffers fixtures
// FIXTURE_DIR defaults to ../../fixtures/streams next to this script.

import { readFileSync, readdirSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import {
  readUIMessageStream,
  uiMessageChunkSchema,
  UIMessageStreamError,
} from 'ai';

const args = process.argv.slice(2);
const check = args.includes('--check');
const printDerived = args.includes('--print-derived');
const positional = args.filter(a => !a.startsWith('--'));
const here = dirname(fileURLToPath(import.meta.url));
const fixtureDir = resolve(positional[0] ?? join(here, '../../fixtures/streams'));

// SDK chunk types that protocol version 1 (spec section 6) does not name.
const UNNAMED_TYPES = new Set(['steering-message', 'reset-step']);
const schema = uiMessageChunkSchema();

async function keepsPart(part) {
  if (part === null || typeof part !== 'object' || Array.isArray(part)) return false;
  if (typeof part.type !== 'string' || UNNAMED_TYPES.has(part.type)) return false;
  return (await schema.validate(part)).success;
}

// A processing error (the SDK stops there), as opposed to an `error` part,
// which reaches onError as a plain Error and does not stop anything.
function isHalt(error) {
  return UIMessageStreamError.isInstance(error) || error instanceof TypeError;
}

async function runSdk(parts) {
  const input = structuredClone(parts);
  const stream = new ReadableStream({
    start(controller) {
      for (const part of input) controller.enqueue(part);
      controller.close();
    },
  });
  let halt;
  const messages = [];
  const slot = new Map();
  for await (const message of readUIMessageStream({
    stream,
    onError: error => {
      if (isHalt(error)) halt ??= error;
    },
  })) {
    if (slot.has(message.id)) {
      messages[slot.get(message.id)] = message;
    } else {
      slot.set(message.id, messages.length);
      messages.push(message);
    }
  }
  // JSON round trip: keys holding `undefined` disappear, as on the wire.
  return { messages: JSON.parse(JSON.stringify(messages)), halt };
}

// Remove, one at a time, the first part the SDK halts on.
async function dropAndContinue(parts) {
  let remaining = parts;
  const removed = [];
  for (;;) {
    if (!(await runSdk(remaining)).halt) return { remaining, removed };
    let bad = remaining.length - 1;
    for (let k = 1; k <= remaining.length; k++) {
      if ((await runSdk(remaining.slice(0, k))).halt) {
        bad = k - 1;
        break;
      }
    }
    removed.push(remaining[bad]);
    remaining = remaining.filter((_, i) => i !== bad);
  }
}

// Compare as JSON values with numbers as doubles (what both sides mean).
const same = (a, b) => isDeepStrictEqual(JSON.parse(JSON.stringify(a)), JSON.parse(JSON.stringify(b)));
const show = value => JSON.stringify(value, null, 2) + '\n';

const names = readdirSync(fixtureDir)
  .filter(f => f.endsWith('.parts.json'))
  .map(f => f.slice(0, -'.parts.json'.length))
  .sort();

let failures = 0;
let generated = 0;
let differs = 0;
for (const name of names) {
  const fixture = JSON.parse(readFileSync(join(fixtureDir, `${name}.parts.json`), 'utf8'));
  const parts = Array.isArray(fixture) ? fixture : fixture.parts;
  const reason = Array.isArray(fixture) ? undefined : fixture.abstoreDiffers;
  const kept = [];
  for (const part of parts) if (await keepsPart(part)) kept.push(part);
  const filtered = parts.length - kept.length;
  const expectedPath = join(fixtureDir, `${name}.expected.json`);
  const { messages, halt } = await runSdk(kept);

  if (reason === undefined) {
    generated++;
    if (halt) {
      console.error(`FAIL ${name}: the SDK stops (${halt.message}); declare abstoreDiffers`);
      failures++;
      continue;
    }
    const expected = { messages, dropped: filtered };
    if (check) {
      const current = existsSync(expectedPath) ? JSON.parse(readFileSync(expectedPath, 'utf8')) : undefined;
      if (!same(current, expected)) {
        console.error(`FAIL ${name}: ${name}.expected.json differs from the SDK`);
        failures++;
      }
    } else {
      writeFileSync(expectedPath, show(expected));
    }
    continue;
  }

  differs++;
  if (!halt) {
    console.error(`FAIL ${name}: declares abstoreDiffers but the SDK does not stop`);
    failures++;
    continue;
  }
  const { remaining, removed } = await dropAndContinue(kept);
  const derived = { messages: (await runSdk(remaining)).messages, dropped: filtered + removed.length };
  if (printDerived) console.log(`${name} (derived):\n${show(derived)}`);
  const current = existsSync(expectedPath) ? JSON.parse(readFileSync(expectedPath, 'utf8')) : undefined;
  if (!same(current, derived)) {
    console.error(`FAIL ${name}: hand-written expectation differs from the SDK with its throwing parts removed`);
    failures++;
  } else {
    console.log(`ok   ${name}: SDK stops (${halt.message.split('.')[0]}); hand-written expectation confirmed`);
  }
}

console.log(
  `${names.length} fixtures: ${generated} from the SDK, ${differs} abstoreDiffers; ${failures} failure(s)`,
);
process.exit(failures === 0 ? 0 : 1);
