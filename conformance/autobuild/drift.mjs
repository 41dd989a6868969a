#!/usr/bin/env node
// Catalog drift check: runs Autobuild's OWN event validators over every
// fixture in fixtures/catalog/{build,repository} and reports each
// disagreement with the fixture's expectation.
//
//   npx tsx conformance/autobuild/drift.mjs --autobuild /path/to/autobuild \
//       [--fixtures fixtures/catalog] [--json]
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

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))

function usage(message) {
  if (message) console.error(`drift: ${message}`)
  console.error(
    'usage: npx tsx conformance/autobuild/drift.mjs --autobuild DIR [--fixtures DIR] [--json]',
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

  const results = { checked: 0, agree: 0, disagreements: [] }
  for (const family of ['build', 'repository']) {
    const { fn } = validators[family]
    for (const f of listFixtures(args.fixtures, family)) {
      results.checked++
      const id = `${family}/${f.type}/${f.file}`
      let doc
      try {
        doc = JSON.parse(readFileSync(f.path, 'utf8'))
      } catch (err) {
        results.disagreements.push({ id, kind: 'unreadable', detail: messageOf(err) })
        continue
      }
      const { expect, ...write } = doc
      let accepted = true
      let message = ''
      try {
        fn({ actor: write.actor, type: write.type, payload: write.payload })
      } catch (err) {
        accepted = false
        message = messageOf(err)
        if (err?.name !== 'EventValidationError') message = `${err?.name ?? 'Error'}: ${message}`
      }
      if (f.valid && !accepted) {
        results.disagreements.push({ id, kind: 'valid-rejected', autobuild: message })
      } else if (!f.valid && accepted) {
        results.disagreements.push({ id, kind: 'invalid-accepted', expect })
      } else if (!f.valid && typeof expect === 'string' && !message.includes(expect)) {
        // Same rule (the text before the first ": ", e.g. `invalid payload for "x"`),
        // different detail wording?
        const head = expect.split(': ')[0]
        const samePrefix = head !== expect && message.startsWith(`${head}: `)
        results.disagreements.push({ id, kind: 'message-differs', samePrefix, expect, autobuild: message })
      } else {
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
            `MESSAGE DIFFERS   ${d.id}${d.samePrefix ? ' (same rule prefix, different detail)' : ''}\n    fixture expects: ${JSON.stringify(d.expect)}\n    autobuild:       ${JSON.stringify(d.autobuild)}`,
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
        `${by('unreadable')} unreadable)`,
    )
  }
  process.exit(results.disagreements.length > 0 ? 1 : 0)
}

await main()
