#!/usr/bin/env node
// Catalog drift check: runs Autobuild's OWN event validators over every
// fixture in fixtures/catalog/{build,repository} and reports each
// disagreement with the fixture's expectation, and, for every valid fixture,
// each difference between the payload Autobuild's validator returns (its
// normalised, stored payload) and the one abstore's catalog returns.
//
//   npx tsx conformance/autobuild/drift.mjs --autobuild /path/to/autobuild \
//       [--fixtures fixtures/catalog] [--abstore-catalog BIN] [--strict-messages] [--json]
//
// A rejection whose message has the fixture's rule prefix (the text before
// the first ": ", e.g. `invalid payload for "x"`) but a different detail is
// listed as DETAIL DIFFERS and does not fail the check: the protocol fixes
// the prefix, and Autobuild's detail is zod's issue list, abstore's one
// path-naming issue. --strict-messages counts them as disagreements.
//
// abstore's validated payloads come from `abstore-catalog normalize` (the
// catalog crate's binary, the same validator the server runs): BIN when
// given, else `cargo run -q -p abstore-catalog --bin abstore-catalog`.
//
// --autobuild is an Autobuild checkout or an installed package directory
// (e.g. node_modules/@defrex/autobuild) with its dependencies installed. The
// validators are imported from it at run time: `validateEventWrite` from
// src/events/catalog.ts and `validateRepositoryEventWrite` from
// src/events/repository.ts, or the same names from the package's plugin-sdk
// export when that exports them. Nothing is downloaded and no Autobuild code
// is copied here. TypeScript sources need a TS-capable loader: run under
// `npx tsx` (Node) or `bun`.
//
// Exit code: 0 no disagreement, 1 disagreements found, 2 setup error.

import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))

function usage(message) {
  if (message) console.error(`drift: ${message}`)
  console.error(
    'usage: npx tsx conformance/autobuild/drift.mjs --autobuild DIR [--fixtures DIR] [--abstore-catalog BIN] [--strict-messages] [--json]',
  )
  process.exit(2)
}

function parseArgs(argv) {
  const args = { fixtures: resolve(here, '../../fixtures/catalog'), json: false }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--autobuild') args.autobuild = argv[++i]
    else if (a === '--fixtures') args.fixtures = argv[++i]
    else if (a === '--json') args.json = true
    else if (a === '--abstore-catalog') args.abstoreCatalog = argv[++i]
    else if (a === '--strict-messages') args.strictMessages = true
    else if (a === '--help' || a === '-h') usage()
    else usage(`unknown argument ${a}`)
  }
  if (!args.autobuild) usage('--autobuild DIR is required')
  return args
}

/** Finds a named export in the first candidate module that has it. */
async function findExport(root, name, candidates) {
  const tried = []
  for (const rel of candidates) {
    const file = join(root, rel)
    if (!existsSync(file)) {
      tried.push(`${rel} (absent)`)
      continue
    }
    let mod
    try {
      mod = await import(pathToFileURL(file).href)
    } catch (err) {
      tried.push(`${rel} (import failed: ${err?.message ?? err})`)
      continue
    }
    if (typeof mod[name] === 'function') return { fn: mod[name], from: rel }
    tried.push(`${rel} (no ${name})`)
  }
  throw new Error(`cannot find ${name} in ${root}: tried ${tried.join('; ')}`)
}

function listFixtures(root, family) {
  const dir = join(root, family)
  if (!existsSync(dir)) return []
  const out = []
  for (const type of readdirSync(dir).sort()) {
    const typeDir = join(dir, type)
    if (!statSync(typeDir).isDirectory()) continue
    for (const file of readdirSync(typeDir).sort()) {
      if (!file.endsWith('.json')) continue
      const valid = file.startsWith('valid-')
      if (!valid && !file.startsWith('invalid-')) continue
      out.push({ family, type, file, valid, path: join(typeDir, file) })
    }
  }
  return out
}

function messageOf(err) {
  return err instanceof Error ? err.message : String(err)
}

/** abstore's validated payloads for `writes`, from `abstore-catalog normalize`. */
function abstoreValidate(writes, bin) {
  const input = writes.map((w) => JSON.stringify(w)).join('\n') + '\n'
  const [cmd, argv] = bin
    ? [bin, ['normalize']]
    : ['cargo', ['run', '-q', '-p', 'abstore-catalog', '--bin', 'abstore-catalog', '--', 'normalize']]
  const run = spawnSync(cmd, argv, {
    cwd: resolve(here, '../..'),
    input,
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  if (run.status !== 0) {
    throw new Error(`${cmd} ${argv.join(' ')} failed (${run.error?.message ?? `status ${run.status}`})`)
  }
  const lines = run.stdout.split('\n').filter((l) => l.length > 0)
  if (lines.length !== writes.length) {
    throw new Error(`abstore-catalog answered ${lines.length} lines for ${writes.length} writes`)
  }
  return lines.map((l) => JSON.parse(l))
}

/** JSON equality: member order is not significant, everything else is. */
function sameJson(a, b) {
  if (a === b) return true
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false
  if (Array.isArray(a) !== Array.isArray(b)) return false
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => sameJson(x, b[i]))
  const ka = Object.keys(a)
  const kb = Object.keys(b)
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && sameJson(a[k], b[k]))
}

async function main() {
  const args = parseArgs(process.argv.slice(2))
  const root = resolve(args.autobuild)
  if (!existsSync(root)) usage(`${root} does not exist`)
  let version = 'unknown'
  try {
    version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version ?? version
  } catch {}

  const sdk = ['src/plugin-sdk/index.ts', 'dist/plugin-sdk/index.js']
  let validators
  try {
    validators = {
      build: await findExport(root, 'validateEventWrite', ['src/events/catalog.ts', ...sdk]),
      repository: await findExport(root, 'validateRepositoryEventWrite', [
        'src/events/repository.ts',
        ...sdk,
      ]),
    }
  } catch (err) {
    console.error(`drift: ${messageOf(err)}`)
    process.exit(2)
  }

  // Every readable fixture, with abstore's answer for it (one process run).
  const fixtures = []
  const results = { checked: 0, agree: 0, payloadsCompared: 0, disagreements: [] }
  for (const family of ['build', 'repository']) {
    for (const f of listFixtures(args.fixtures, family)) {
      const id = `${family}/${f.type}/${f.file}`
      try {
        fixtures.push({ ...f, id, doc: JSON.parse(readFileSync(f.path, 'utf8')) })
      } catch (err) {
        results.checked++
        results.disagreements.push({ id, kind: 'unreadable', detail: messageOf(err) })
      }
    }
  }
  let abstore
  try {
    abstore = abstoreValidate(
      fixtures.map((f) => ({ family: f.family, actor: f.doc.actor, type: f.doc.type, payload: f.doc.payload })),
      args.abstoreCatalog,
    )
  } catch (err) {
    console.error(`drift: abstore's validator: ${messageOf(err)}`)
    process.exit(2)
  }

  for (const [index, f] of fixtures.entries()) {
    const { fn } = validators[f.family]
    results.checked++
    const id = f.id
    {
      const { expect, ...write } = f.doc
      let accepted = true
      let message = ''
      let returned
      try {
        returned = fn({ actor: write.actor, type: write.type, payload: write.payload })
      } catch (err) {
        accepted = false
        message = messageOf(err)
        if (err?.name !== 'EventValidationError') message = `${err?.name ?? 'Error'}: ${message}`
      }
      const ours = abstore[index]
      if (f.valid && !accepted) {
        results.disagreements.push({ id, kind: 'valid-rejected', autobuild: message })
      } else if (f.valid && !('ok' in ours)) {
        results.disagreements.push({ id, kind: 'abstore-rejected', abstore: ours.error })
      } else if (f.valid && !sameJson(returned.payload, ours.ok)) {
        results.payloadsCompared++
        results.disagreements.push({ id, kind: 'payload-differs', autobuild: returned.payload, abstore: ours.ok })
      } else if (!f.valid && accepted) {
        results.disagreements.push({ id, kind: 'invalid-accepted', expect })
      } else if (!f.valid && typeof expect === 'string' && !message.includes(expect)) {
        // Same rule (the text before the first ": ", e.g. `invalid payload for "x"`),
        // different detail wording?
        const head = expect.split(': ')[0]
        const samePrefix = head !== expect && message.startsWith(`${head}: `)
        results.disagreements.push({ id, kind: 'message-differs', samePrefix, expect, autobuild: message })
      } else {
        if (f.valid) results.payloadsCompared++
        results.agree++
      }
    }
  }

  if (args.json) {
    console.log(JSON.stringify({ autobuild: root, version, fixtures: args.fixtures, ...results }, null, 2))
  } else {
    console.log(`Autobuild ${version} at ${root}`)
    console.log(`fixtures: ${resolve(args.fixtures)}`)
    for (const d of results.disagreements) {
      switch (d.kind) {
        case 'valid-rejected':
          console.log(`VALID REJECTED    ${d.id}\n    autobuild: ${d.autobuild}`)
          break
        case 'invalid-accepted':
          console.log(`INVALID ACCEPTED  ${d.id}\n    fixture expects: ${JSON.stringify(d.expect)}`)
          break
        case 'message-differs':
          console.log(
            `${d.samePrefix ? 'DETAIL DIFFERS    ' : 'MESSAGE DIFFERS   '}${d.id}${d.samePrefix ? ' (same rule prefix, different detail)' : ''}\n    fixture expects: ${JSON.stringify(d.expect)}\n    autobuild:       ${JSON.stringify(d.autobuild)}`,
          )
          break
        case 'abstore-rejected':
          console.log(`ABSTORE REJECTED  ${d.id}\n    abstore: ${d.abstore}`)
          break
        case 'payload-differs':
          console.log(
            `PAYLOAD DIFFERS   ${d.id}\n    autobuild: ${JSON.stringify(d.autobuild)}\n    abstore:   ${JSON.stringify(d.abstore)}`,
          )
          break
        default:
          console.log(`UNREADABLE        ${d.id}: ${d.detail}`)
      }
    }
    const by = (k) => results.disagreements.filter((d) => d.kind === k).length
    console.log(
      `${results.checked} fixtures: ${results.agree} agree, ${results.disagreements.length} disagree ` +
        `(${by('valid-rejected')} valid rejected, ${by('invalid-accepted')} invalid accepted, ` +
        `${by('message-differs')} message differs [${results.disagreements.filter((d) => d.samePrefix).length} with the same rule prefix], ` +
        `${by('payload-differs')} validated payload differs [of ${results.payloadsCompared} compared], ` +
        `${by('abstore-rejected')} valid rejected by abstore, ${by('unreadable')} unreadable)`,
    )
  }
  const failing = results.disagreements.filter((d) => args.strictMessages || !d.samePrefix)
  process.exit(failing.length > 0 ? 1 : 0)
}

await main()
