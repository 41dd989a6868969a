// Fills an Autobuild LOCAL store (SQLite + blob directory) through Autobuild's
// own code, from a checkout or installed package YOU supply: the modules are
// imported from it at run time; nothing of Autobuild is copied here.
//
//   bun conformance/autobuild/reference/populate-local.ts <autobuild-checkout> <state-root> <fixtures/catalog>
//
// It opens the store as Autobuild does (`openLocalStore(root)`: `autobuild.sqlite`
// in WAL mode and `blobs/`), then writes builds with every `valid-*.json`
// build event of the fixture tree that Autobuild's validator accepts (the rest
// are counted and left out), artifacts with several revisions (text and
// binary), leases (held, released), a repository with its journal events,
// artifacts and lease, and prints one JSON line describing what it wrote:
// `{"builds": [...], "repos": [...], "kinds": {...}, "refused": N}`.
// tests/it/autobuild_import.rs (`autobuild_reference_*`) then imports the
// directory into abstore and compares every read route with Autobuild's
// reference server (bench/reference/serve.ts) over the same directory.

import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'

const [checkoutArg, rootArg, fixturesArg] = process.argv.slice(2)
if (checkoutArg === undefined || rootArg === undefined || fixturesArg === undefined) {
  console.error('usage: bun populate-local.ts <autobuild-checkout> <state-root> <fixtures/catalog>')
  process.exit(2)
}
const checkout = resolve(checkoutArg)
const storeModule = ['src/store/local/store.ts', 'packages/core/src/store/local/store.ts']
  .map((rel) => join(checkout, rel))
  .find((path) => existsSync(path))
if (storeModule === undefined) {
  console.error(`populate-local.ts: no local store module in ${checkout}`)
  process.exit(2)
}
const { openLocalStore } = await import(pathToFileURL(storeModule).href)
const store = openLocalStore(resolve(rootArg))

/** The `valid-*.json` writes of one fixture family, by type then file name. */
function writes(family: string): { actor: unknown; type: string; payload: unknown }[] {
  const dir = join(resolve(fixturesArg), family)
  const out = []
  for (const type of readdirSync(dir).sort()) {
    if (type.startsWith('_')) continue
    const typeDir = join(dir, type)
    for (const file of readdirSync(typeDir).sort()) {
      if (!file.startsWith('valid-')) continue
      const write = JSON.parse(readFileSync(join(typeDir, file), 'utf8'))
      out.push({ actor: write.actor, type: write.type, payload: write.payload })
    }
  }
  return out
}

let refused = 0
let buildEvents = 0
const repo = '/home/me/widgets'
const builds = ['imp-1', 'imp-2', 'imp-3']
await store.createBuild({
  slug: 'imp-1',
  repo,
  ticket: { source: 'linear', id: 'AUT-1' },
  branch: 'ab/aut-1',
})
await store.createBuild({ slug: 'imp-2', repo })
await store.createBuild({ slug: 'imp-3', repo: 'acme/other', branch: 'main' })
for (const write of writes('build')) {
  try {
    await store.append('imp-1', write)
    buildEvents++
  } catch {
    refused++
  }
}
await store.append('imp-3', writes('build')[0])
const text = (n: number) => `# Plan\n\nrevision ${n} — ünïcode\n`
for (let n = 0; n < 3; n++) {
  await store.putArtifact('imp-1', { kind: 'plan', content: text(n), metadata: { round: n, by: 'ann' } })
}
await store.putArtifact('imp-1', {
  kind: 'screenshot',
  content: new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 255]),
})
await store.putArtifact('imp-2', { kind: 'plan', content: text(9) })
await store.claimLease('imp-1', 'runner-1', 3_600_000)
await store.claimLease('imp-2', 'runner-2', 60_000)
await store.releaseLease('imp-2', 'runner-2')

await store.ensureRepo(repo)
for (const write of writes('repository')) {
  try {
    await store.appendRepo(repo, write)
  } catch {
    refused++
  }
}
for (let n = 0; n < 2; n++) {
  await store.putRepoArtifact(repo, { kind: 'operator-notes', content: `notes ${n}`, metadata: { n } })
}
await store.claimRepoLease(repo, 'dispatcher', 3_600_000)
await store.ensureRepo('acme/other')

await store.close()
console.log(
  JSON.stringify({
    builds,
    repos: [repo, 'acme/other'],
    kinds: { 'imp-1': ['plan', 'screenshot'], 'imp-2': ['plan'], 'imp-3': [] },
    repoKinds: { [repo]: ['operator-notes'], 'acme/other': [] },
    buildEvents,
    refused,
  }),
)
