// Registers Autobuild's own `describeTicketSourceContract('abstore', factory)`
// against a real abstore binary, through Autobuild's own hosted ticket client
// (`HostedTicketSource`, packages/core/src/ports/tickets/remote.ts): every
// contract test gets a fresh server and talks to it over HTTP exactly as
// `[tickets] source = "hosted"` does (docs/tickets.md).
//
// Started by run.mjs, or by the integration test
// `tickets::autobuild_ticket_contract` when ABC_AUTOBUILD is set; it can also
// be run directly:
//
//   ABC_AUTOBUILD=/tmp/autobuild-checkout ABC_ABSTORE_BIN=target/debug/abstore \
//     bun test ./conformance/autobuild/tickets/abstore.tickets.test.ts
//
// ABC_AUTOBUILD    an Autobuild checkout with the hosted ticket client
//                  (packages/core/src/ports/tickets/remote.ts), dependencies
//                  installed (required)
// ABC_ABSTORE_BIN  abstore binary (default: <repo>/target/debug/abstore)
// ABC_SECRET       a signing secret, or "random"; unset = open mode. The
//                  harness mints the deployment token AB_TOKEN would hold.
// ABC_POSTGRES     postgres:// URL of a database to CREATE DATABASE from;
//                  unset = sqlite::memory:
// ABC_PSQL         psql binary (default: psql)
//
// The identity: the client sends its own X-Autobuild-Version (the checkout's
// root package.json) and protocol (store/remote/version.ts). When abstore's
// embedded catalogs know that pair, the server accepts exactly it; otherwise
// the harness rewrites the two headers to 0.8.0/2 through the client's fetch
// seam and says so on stderr (the contract is about tickets, not identities).
//
// Nothing of Autobuild lives here: every Autobuild module is imported at run
// time from ABC_AUTOBUILD. Plain JavaScript syntax, so `node --check` can
// check it without a TypeScript loader.

import { existsSync, readFileSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { mintToken, randomSecret, startAbstore } from '../contract/harness.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const repoRoot = resolve(here, '../../..')
const env = process.env
const TAG = '[abstore-tickets]'

function fail(message) {
  throw new Error(`${TAG} ${message}`)
}

const autobuildRoot = env.ABC_AUTOBUILD
  ? resolve(env.ABC_AUTOBUILD)
  : fail('set ABC_AUTOBUILD to an Autobuild checkout (or use run.mjs --autobuild)')
const bin = resolve(env.ABC_ABSTORE_BIN ?? join(repoRoot, 'target/debug/abstore'))
if (!existsSync(bin)) fail(`no abstore binary at ${bin} (cargo build --bin abstore)`)
const secret = env.ABC_SECRET === 'random' ? randomSecret() : env.ABC_SECRET || undefined

// ── Autobuild's own modules ──────────────────────────────────────────────────

const tickets = join(autobuildRoot, 'packages/core/src/ports/tickets')
function module(path) {
  const full = join(autobuildRoot, path)
  if (!existsSync(full)) {
    fail(`${full} is missing: this Autobuild has no hosted ticket client (it arrived after 0.5.0)`)
  }
  return import(pathToFileURL(full).href)
}
const contract = await module('packages/core/src/ports/tickets/contract.ts')
const remote = await module('packages/core/src/ports/tickets/remote.ts')
const version = await module('packages/core/src/store/remote/version.ts')
if (typeof contract.describeTicketSourceContract !== 'function') {
  fail(`${tickets}/contract.ts does not export describeTicketSourceContract`)
}
if (typeof remote.HostedTicketSource !== 'function') {
  fail(`${tickets}/remote.ts does not export HostedTicketSource`)
}

// The identities abstore's embedded catalogs serve (docs/configuration.md).
const KNOWN = ['0.8.0/2', '0.8.0/3', '0.9.0/3']
const sent = `${version.AUTOBUILD_VERSION}/${version.REMOTE_STORE_PROTOCOL_VERSION}`
const rewrite = !KNOWN.includes(sent)
const accepted = rewrite ? '0.8.0/2' : sent
const pkg = JSON.parse(readFileSync(join(autobuildRoot, 'package.json'), 'utf8'))
console.error(
  `${TAG} Autobuild ${pkg.version} at ${autobuildRoot}; HostedTicketSource sends ${sent}; ` +
    (rewrite ? `abstore knows no catalogs for it: the fetch seam sends ${accepted} instead; ` : '') +
    `abstore ${bin} (${env.ABC_POSTGRES ? 'postgres' : 'sqlite::memory:'}, ` +
    `${secret ? 'authenticated, deployment token' : 'open mode'})`,
)

/** The client's fetch, with the identity rewritten when abstore cannot serve it. */
function clientFetch(stats) {
  return async (input, init) => {
    stats.calls++
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined))
    if (rewrite) {
      const [v, p] = accepted.split('/')
      headers.set(version.AUTOBUILD_VERSION_HEADER, v)
      headers.set(version.REMOTE_STORE_PROTOCOL_VERSION_HEADER, p)
    }
    return fetch(input, { ...init, headers })
  }
}

// ── The contract ─────────────────────────────────────────────────────────────

contract.describeTicketSourceContract('abstore', async () => {
  const server = await startAbstore({
    bin,
    nowIso: new Date().toISOString(),
    secret,
    postgres: env.ABC_POSTGRES || undefined,
    psql: env.ABC_PSQL || undefined,
    extraArgs: ['--accept-client', accepted],
  })
  try {
    // AB_TOKEN for hosted tickets: a deployment operator token, minted
    // from the server's clock (abstore bounds how far ahead `exp` may be).
    const token = secret
      ? mintToken(secret, { operator: true, session: '*', exp: Date.now() + 3600 * 1000 })
      : 'open-mode'
    const stats = { calls: 0 }
    const source = new remote.HostedTicketSource({
      url: server.url,
      token,
      // A team of its own per test, as a scratch team in a live provider.
      teamKey: `AB-${randomUUID()}`,
      claimedState: 'Doing',
      createState: 'Triage',
      fetchFn: clientFetch(stats),
    })
    // Self-check (read-only): the server answers this client, through the seam.
    const probe = await source.get(`probe-${randomUUID()}`).catch((e) => e)
    if (probe instanceof Error) fail(`probe get failed: ${probe.message}`)
    if (stats.calls === 0) fail('HostedTicketSource did not use its fetchFn seam')
    return {
      source,
      states: { ready: 'Ready', claimed: 'Doing', completed: 'Done' },
      editableLabel: 'autobuild',
      cleanup: () => server.stop(),
    }
  } catch (err) {
    await server.stop()
    throw err
  }
})
