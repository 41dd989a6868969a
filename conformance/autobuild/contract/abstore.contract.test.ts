// Registers Autobuild's own `describeBuildStoreContract('abstore', factory)`
// against a real abstore binary, through Autobuild's own HTTP client.
//
// Normally started by run.mjs (which validates options and sets the ABC_*
// variables below); it can also be run directly:
//
//   ABC_AUTOBUILD=/tmp/autobuild-checkout ABC_ABSTORE_BIN=target/debug/abstore \
//     bun test ./conformance/autobuild/contract/abstore.contract.test.ts
//
// ABC_AUTOBUILD         Autobuild checkout or installed package (required)
// ABC_ABSTORE_BIN       abstore binary (default: <repo>/target/debug/abstore)
// ABC_AUTOBUILD_VERSION server --autobuild-version and injected header value
//                       (default: the supplied Autobuild's package.json version)
// ABC_PROTOCOL_VERSION  injected X-Autobuild-Protocol-Version (default: 2)
// ABC_IDENTITY_VIA      fetch | proxy | none   (default: fetch)
// ABC_IDENTITY_HEADERS  auto | always          (default: auto)
// ABC_SECRET            a signing secret, or "random"; unset = open mode
// ABC_POSTGRES          postgres:// URL of a database to CREATE DATABASE from;
//                       unset = sqlite::memory:
// ABC_PSQL              psql binary (default: psql)
// ABC_SERVER_ARGS       JSON array of extra `abstore serve` arguments
// ABC_CLOCK_SYNC        on | off (default: on). `off` is a negative control
//                       only: the server clock then stays at the factory's
//                       start instant and the clock-driven tests must fail.
//
// Nothing of Autobuild lives here: every Autobuild module is imported at run
// time from ABC_AUTOBUILD.

import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import {
  clockBridge,
  identityFetch,
  mintAdminToken,
  randomSecret,
  startAbstore,
  startIdentityProxy,
  wrapStore,
} from './harness.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const repoRoot = resolve(here, '../../..')
const env = process.env

function fail(message: string): never {
  throw new Error(`[abstore-contract] ${message}`)
}

const autobuildRoot = env.ABC_AUTOBUILD
  ? resolve(env.ABC_AUTOBUILD)
  : fail('set ABC_AUTOBUILD to an Autobuild checkout or installed package (or use run.mjs --autobuild)')
const pkgJsonPath = join(autobuildRoot, 'package.json')
if (!existsSync(pkgJsonPath)) fail(`${autobuildRoot} has no package.json`)
const pkg = JSON.parse(readFileSync(pkgJsonPath, 'utf8'))

const bin = resolve(env.ABC_ABSTORE_BIN ?? join(repoRoot, 'target/debug/abstore'))
if (!existsSync(bin)) fail(`no abstore binary at ${bin} (cargo build --bin abstore)`)

const autobuildVersion = env.ABC_AUTOBUILD_VERSION || pkg.version
const protocolVersion = env.ABC_PROTOCOL_VERSION || '2'
const identityVia = env.ABC_IDENTITY_VIA || 'fetch'
const identityHeaders = env.ABC_IDENTITY_HEADERS || 'auto'
if (!['fetch', 'proxy', 'none'].includes(identityVia)) fail(`ABC_IDENTITY_VIA=${identityVia}`)
if (!['auto', 'always'].includes(identityHeaders)) fail(`ABC_IDENTITY_HEADERS=${identityHeaders}`)
const secret = env.ABC_SECRET === 'random' ? randomSecret() : env.ABC_SECRET || undefined
const serverArgs: string[] = env.ABC_SERVER_ARGS ? JSON.parse(env.ABC_SERVER_ARGS) : []
const clockSync = (env.ABC_CLOCK_SYNC || 'on') === 'on'

// ── Autobuild's own modules ──────────────────────────────────────────────────

function sdkEntry(): string {
  const src = join(autobuildRoot, 'src/plugin-sdk/index.ts')
  if (existsSync(src)) return src
  const exp = pkg.exports?.['./plugin-sdk']
  const rel = typeof exp === 'string' ? exp : (exp?.import ?? exp?.default)
  if (typeof rel === 'string' && existsSync(join(autobuildRoot, rel))) return join(autobuildRoot, rel)
  return fail(`cannot find the plugin-sdk entry in ${autobuildRoot}`)
}

const sdkPath = sdkEntry()
const sdk = await import(pathToFileURL(sdkPath).href)
if (typeof sdk.describeBuildStoreContract !== 'function') {
  fail(`${sdkPath} does not export describeBuildStoreContract`)
}

type AnyStore = Record<string, any>
type MakeClient = (o: { url: string; token?: string; fetchFn: typeof fetch }) => AnyStore

/** Autobuild's HTTP-backed BuildStore constructor, whatever this version calls it. */
async function findClient(): Promise<{ name: string; make: MakeClient }> {
  const clientPath = join(autobuildRoot, 'src/store/remote/client.ts')
  const client = existsSync(clientPath) ? await import(pathToFileURL(clientPath).href) : {}
  for (const [where, mod] of [
    ['plugin-sdk', sdk],
    ['src/store/remote/client.ts', client],
  ] as const) {
    if (typeof mod.createHttpBackedBuildStore === 'function') {
      return {
        name: `createHttpBackedBuildStore (${where})`,
        // `fetchFn` is the 0.5.0 seam's name; `fetch` is passed too in case a
        // later version renamed it. The factory verifies the seam is used.
        make: (o) => mod.createHttpBackedBuildStore({ ...o, fetch: o.fetchFn }),
      }
    }
  }
  for (const [where, mod] of [
    ['plugin-sdk', sdk],
    ['src/store/remote/client.ts', client],
  ] as const) {
    if (typeof mod.RemoteBuildStore === 'function') {
      return { name: `RemoteBuildStore (${where})`, make: (o) => new mod.RemoteBuildStore(o) }
    }
  }
  return fail(`no createHttpBackedBuildStore or RemoteBuildStore in ${autobuildRoot}`)
}

const client = await findClient()
const backend = env.ABC_POSTGRES ? 'postgres' : 'sqlite::memory:'
console.error(
  `[abstore-contract] Autobuild ${pkg.version} at ${autobuildRoot}; client ${client.name}; ` +
    `abstore ${bin} (${backend}, ${secret ? 'authenticated' : 'open'} mode, --autobuild-version ${autobuildVersion}); ` +
    `identity headers via ${identityVia} (${identityHeaders}, ${autobuildVersion}/${protocolVersion}); ` +
    `clock sync ${clockSync ? 'on' : 'OFF (negative control)'}`,
)

// ── The contract ─────────────────────────────────────────────────────────────

sdk.describeBuildStoreContract('abstore', async (opts?: { clock?: () => Date }) => {
  const clock = opts?.clock
  const now = (clock ?? (() => new Date()))()
  const server = await startAbstore({
    bin,
    nowIso: now.toISOString(),
    autobuildVersion,
    secret,
    postgres: env.ABC_POSTGRES || undefined,
    psql: env.ABC_PSQL || undefined,
    extraArgs: serverArgs,
  })
  let proxy: { url: string; close: () => Promise<void> } | undefined
  try {
    let url = server.url
    if (identityVia === 'proxy') {
      proxy = await startIdentityProxy({
        target: server.url,
        mode: identityHeaders,
        version: autobuildVersion,
        protocol: protocolVersion,
      })
      url = proxy.url
    }
    const stats = { calls: 0 }
    const fetchFn = identityFetch({
      mode: identityVia === 'fetch' ? identityHeaders : 'off',
      version: autobuildVersion,
      protocol: protocolVersion,
      stats,
    }) as typeof fetch
    // Minted from the server's clock (the suite's): abstore bounds how far
    // beyond its now a token's expiry may lie.
    const token = secret ? mintAdminToken(secret, now) : undefined
    const raw = client.make({ url, ...(token ? { token } : {}), fetchFn })

    // Self-check (read-only): the fetch seam is really used, and the server
    // accepts this client's identity. A 409 here means a version mismatch.
    await clockBridge(server.url, clock, token)()
    const probe = await raw.getBuild('abstore-contract-harness-probe').catch((e: unknown) => e)
    if (probe instanceof Error) {
      fail(`probe GET /builds/abstore-contract-harness-probe failed: ${probe.message}`)
    }
    if (identityVia === 'fetch' && stats.calls === 0) {
      fail(`${client.name} did not use the fetch seam; rerun with --identity-via proxy`)
    }

    const store = clockSync ? wrapStore(raw, clockBridge(server.url, clock, token)) : raw
    return {
      store,
      cleanup: async () => {
        await proxy?.close()
        await server.stop()
      },
    }
  } catch (err) {
    await proxy?.close()
    await server.stop()
    throw err
  }
})
