#!/usr/bin/env node
// Runs Autobuild's own BuildStore contract (`describeBuildStoreContract`)
// against abstore, through Autobuild's own HTTP client, with the test runner
// the supplied Autobuild uses (`bun test`).
//
//   node conformance/autobuild/contract/run.mjs --autobuild DIR [options]
//
// Validates the options, then runs
//   bun test --timeout MS ./abstore.contract.test.ts
// in this directory with the ABC_* variables the test file reads. Nothing is
// downloaded; the Autobuild checkout/package and Bun are supplied by you.
// Exit status: bun's (0 = every contract test passed), or 2 on a setup error.

import { existsSync, readFileSync } from 'node:fs'
import { spawnSync } from 'node:child_process'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const repoRoot = resolve(here, '../../..')

const HELP = `usage: node conformance/autobuild/contract/run.mjs --autobuild DIR [options]

  --autobuild DIR          Autobuild checkout or installed package, dependencies
                           installed (required)
  --abstore BIN            abstore binary (default: target/debug/abstore)
  --bun BIN                Bun executable (default: $BUN, else \`bun\` on PATH)
  --autobuild-version V    passed to abstore as --autobuild-version and sent as
                           X-Autobuild-Version when the client sends none
                           (default: the supplied Autobuild's package version)
  --protocol-version P     X-Autobuild-Protocol-Version to send (default: 2)
  --identity-via MODE      fetch: add the identity headers in a fetch passed to
                           the client's fetch seam (default);
                           proxy: a loopback header-adding HTTP proxy in front
                           of abstore; none: never add them
  --identity-headers MODE  auto: add only when the client sent none (default);
                           always: overwrite the client's values
  --secret S | --auth      authenticated mode with secret S (>= 32 bytes) or a
                           random one; the harness mints an admin token
                           (default: open mode)
  --postgres URL           use PostgreSQL: a fresh database per factory call,
                           created from URL with psql and dropped afterwards
                           (e.g. postgres://postgres@127.0.0.1:5432/postgres)
  --psql BIN               psql executable (default: psql)
  --server-arg ARG         extra \`abstore serve\` argument (repeatable)
  --timeout MS             per-test timeout (default: 30000)
  --filter PATTERN         only tests whose name matches (bun --test-name-pattern)
  --no-clock-sync          negative control: do not connect the suite's clock
  -h, --help
`

function usage(message) {
  if (message) console.error(`run: ${message}`)
  console.error(HELP)
  process.exit(2)
}

const o = {
  abstore: join(repoRoot, 'target/debug/abstore'),
  bun: process.env.BUN || 'bun',
  protocolVersion: '2',
  identityVia: 'fetch',
  identityHeaders: 'auto',
  timeout: '30000',
  serverArgs: [],
  clockSync: true,
}
const argv = process.argv.slice(2)
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]
  const next = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`))
  if (a === '--autobuild') o.autobuild = next()
  else if (a === '--abstore') o.abstore = next()
  else if (a === '--bun') o.bun = next()
  else if (a === '--autobuild-version') o.autobuildVersion = next()
  else if (a === '--protocol-version') o.protocolVersion = next()
  else if (a === '--identity-via') o.identityVia = next()
  else if (a === '--identity-headers') o.identityHeaders = next()
  else if (a === '--secret') o.secret = next()
  else if (a === '--auth') o.secret = 'random'
  else if (a === '--postgres') o.postgres = next()
  else if (a === '--psql') o.psql = next()
  else if (a === '--server-arg') o.serverArgs.push(next())
  else if (a === '--timeout') o.timeout = next()
  else if (a === '--filter') o.filter = next()
  else if (a === '--no-clock-sync') o.clockSync = false
  else if (a === '-h' || a === '--help') {
    console.log(HELP)
    process.exit(0)
  } else usage(`unknown argument ${a}`)
}
if (!o.autobuild) usage('--autobuild DIR is required')
o.autobuild = resolve(o.autobuild)
o.abstore = resolve(o.abstore)
if (!existsSync(join(o.autobuild, 'package.json'))) usage(`${o.autobuild} has no package.json`)
// A checkout has its own node_modules; an installed package sits inside one.
if (!existsSync(join(o.autobuild, 'node_modules')) && !o.autobuild.split(/[\\/]/).includes('node_modules')) {
  usage(`${o.autobuild}: dependencies are not installed (npm install --ignore-scripts there)`)
}
if (!existsSync(o.abstore)) usage(`no abstore binary at ${o.abstore} (cd ${repoRoot} && cargo build --bin abstore)`)
if (!['fetch', 'proxy', 'none'].includes(o.identityVia)) usage(`--identity-via ${o.identityVia}`)
if (!['auto', 'always'].includes(o.identityHeaders)) usage(`--identity-headers ${o.identityHeaders}`)
if (o.secret && o.secret !== 'random' && Buffer.byteLength(o.secret) < 32) {
  usage('--secret must be at least 32 bytes (abstore refuses weak secrets)')
}

const pkg = JSON.parse(readFileSync(join(o.autobuild, 'package.json'), 'utf8'))
const testScript = pkg.scripts?.test ?? ''
if (!/\bbun\b/.test(testScript)) {
  console.error(
    `run: note: Autobuild ${pkg.version}'s test script is ${JSON.stringify(testScript)}, not bun test; ` +
      'this harness only drives bun test',
  )
}
const bunCheck = spawnSync(o.bun, ['--version'], { encoding: 'utf8' })
if (bunCheck.status !== 0) usage(`cannot run Bun (${o.bun}): install it, or pass --bun / set BUN`)

const env = {
  ...process.env,
  ABC_AUTOBUILD: o.autobuild,
  ABC_ABSTORE_BIN: o.abstore,
  ABC_PROTOCOL_VERSION: o.protocolVersion,
  ABC_IDENTITY_VIA: o.identityVia,
  ABC_IDENTITY_HEADERS: o.identityHeaders,
  ABC_SERVER_ARGS: JSON.stringify(o.serverArgs),
  ABC_CLOCK_SYNC: o.clockSync ? 'on' : 'off',
}
for (const [key, value] of [
  ['ABC_AUTOBUILD_VERSION', o.autobuildVersion],
  ['ABC_SECRET', o.secret],
  ['ABC_POSTGRES', o.postgres],
  ['ABC_PSQL', o.psql],
]) {
  if (value) env[key] = value
  else delete env[key]
}

const args = ['test', '--timeout', o.timeout]
if (o.filter) args.push('--test-name-pattern', o.filter)
args.push('./abstore.contract.test.ts')
console.error(`run: Bun ${bunCheck.stdout.trim()}: ${o.bun} ${args.join(' ')} (in ${here})`)
const r = spawnSync(o.bun, args, { cwd: here, env, stdio: 'inherit' })
process.exit(r.status ?? 2)
