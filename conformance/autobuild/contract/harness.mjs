// The abstore side of the Autobuild BuildStore contract harness: everything
// the contract factory needs that is not Autobuild's own code.
//
//   - startAbstore(): one fresh `abstore serve` per factory call (SQLite in
//     memory, or a fresh PostgreSQL database), on a loopback port 0;
//   - the clock bridge: before every BuildStore call, push the suite's
//     injected clock to the server's test clock (`POST /_test/clock`);
//   - the identity bridge: add `X-Autobuild-Version` /
//     `X-Autobuild-Protocol-Version` for clients that do not send them
//     (Autobuild < 0.8.0), through the client's fetch seam or a loopback
//     header-adding proxy;
//   - admin tokens for authenticated mode (spec section 7 token encoding).
//
// Runtime-neutral (node:* only): runs under Bun and under Node.

import { spawn, spawnSync } from 'node:child_process'
import { createHmac, randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import { createInterface } from 'node:readline'

const LISTENING = /abstore listening on (http:\/\/\S+)/
const TAG = '[abstore-contract]'

/** Spec section 1: the two identity headers every machine route requires. */
export const VERSION_HEADER = 'x-autobuild-version'
export const PROTOCOL_HEADER = 'x-autobuild-protocol-version'

// ── Server lifecycle ────────────────────────────────────────────────────────

let dbCounter = 0

function psql(adminUrl, sql, psqlBin) {
  const r = spawnSync(psqlBin, [adminUrl, '-v', 'ON_ERROR_STOP=1', '-q', '-c', sql], {
    encoding: 'utf8',
  })
  if (r.error) throw new Error(`${TAG} cannot run ${psqlBin}: ${r.error.message}`)
  if (r.status !== 0) throw new Error(`${TAG} ${psqlBin} "${sql}" failed: ${r.stderr.trim()}`)
}

/** Replace the database name (the URL path) of a postgres:// URL. */
function withDatabase(url, name) {
  const u = new URL(url)
  u.pathname = `/${name}`
  return u.toString()
}

/**
 * Start a fresh abstore. Resolves once it printed its listening line.
 * @param {{bin: string, nowIso: string, autobuildVersion?: string,
 *          secret?: string, postgres?: string, psql?: string,
 *          extraArgs?: string[], startTimeoutMs?: number}} o
 */
export async function startAbstore(o) {
  let database = 'sqlite::memory:'
  let dropDb
  if (o.postgres) {
    const name = `abstore_contract_${process.pid}_${++dbCounter}_${randomBytes(3).toString('hex')}`
    const psqlBin = o.psql ?? 'psql'
    psql(o.postgres, `CREATE DATABASE ${name}`, psqlBin)
    database = withDatabase(o.postgres, name)
    dropDb = () => psql(o.postgres, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`, psqlBin)
  }
  const args = [
    'serve',
    '--listen',
    '127.0.0.1:0',
    '--database',
    database,
    '--blobs',
    'memory://',
    '--test-clock',
    o.nowIso,
  ]
  if (o.autobuildVersion) args.push('--autobuild-version', o.autobuildVersion)
  args.push(...(o.extraArgs ?? []))
  // The secret goes through the environment, not argv (argv is world-readable
  // in `ps`); abstore reads ABSTORE_SECRET exactly like --secret.
  // The caller's ABSTORE_* settings are not inherited: a clean server is
  // configured only by the arguments above.
  const env = { ...process.env, RUST_LOG: process.env.RUST_LOG ?? 'warn' }
  for (const key of Object.keys(env)) if (key.startsWith('ABSTORE_')) delete env[key]
  if (o.secret) env.ABSTORE_SECRET = o.secret

  const child = spawn(o.bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] })
  const stderrTail = []
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk) => {
    stderrTail.push(chunk)
    if (stderrTail.length > 50) stderrTail.shift()
  })
  const exited = new Promise((res) => child.once('exit', (code, signal) => res({ code, signal })))

  const url = await new Promise((res, rej) => {
    const timer = setTimeout(
      () => rej(new Error(`${TAG} abstore did not print its listening line within ${o.startTimeoutMs ?? 20000} ms`)),
      o.startTimeoutMs ?? 20000,
    )
    const lines = createInterface({ input: child.stdout })
    lines.on('line', (line) => {
      const m = LISTENING.exec(line)
      if (m) {
        clearTimeout(timer)
        res(m[1].replace(/\/+$/, ''))
      }
    })
    child.once('error', (err) => {
      clearTimeout(timer)
      rej(new Error(`${TAG} cannot start ${o.bin}: ${err.message}`))
    })
    exited.then(({ code, signal }) => {
      clearTimeout(timer)
      rej(new Error(`${TAG} abstore exited before listening (code ${code}, signal ${signal}):\n${stderrTail.join('')}`))
    })
  }).catch(async (err) => {
    if (child.exitCode === null) child.kill('SIGKILL')
    dropDb?.()
    throw err
  })

  let stopped = false
  async function stop() {
    if (stopped) return
    stopped = true
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 3000)
      await exited
      clearTimeout(timer)
    }
    dropDb?.()
  }
  return { url, pid: child.pid, database, stop, stderrTail: () => stderrTail.join('') }
}

// ── Clock bridge ────────────────────────────────────────────────────────────

/**
 * Returns `sync()`: pushes `clock()` to the server's test clock unless that
 * exact instant was the last value pushed (only the harness moves the
 * server's test clock, so the cache is exact). With no injected clock the
 * wall clock is pushed, mirroring the in-process adapters' system clock.
 * In authenticated mode abstore moves its test clock only for an admin or
 * deployment token: pass the harness's admin `token`.
 */
export function clockBridge(baseUrl, clock, token) {
  const read = clock ?? (() => new Date())
  const headers = { 'content-type': 'application/json' }
  if (token) headers.authorization = `Bearer ${token}`
  let last
  return async function sync() {
    const iso = read().toISOString()
    if (iso === last) return
    const res = await fetch(`${baseUrl}/_test/clock`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ now: iso }),
    })
    if (res.status !== 200) {
      throw new Error(`${TAG} POST /_test/clock ${iso} answered ${res.status}: ${await res.text()}`)
    }
    last = iso
  }
}

/** Methods that are not store calls over the wire. */
const NOT_WRAPPED = new Set(['constructor', 'scopeBuild', 'subscribe', 'close'])

/**
 * Wrap a BuildStore so every async store method first runs `beforeCall()`.
 * `scopeBuild` runs with the wrapper as `this`, so build-scoped handles
 * delegate back through the wrapper (and push the clock too); `subscribe`
 * and `close` are passed through untouched (subscribe polls getEvents, which
 * reads no clock).
 */
export function wrapStore(store, beforeCall) {
  const cache = new Map()
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, target)
      if (typeof value !== 'function' || typeof prop !== 'string') return value
      if (cache.has(prop)) return cache.get(prop)
      let fn
      if (prop === 'scopeBuild') fn = (...args) => value.apply(proxy, args)
      else if (NOT_WRAPPED.has(prop)) fn = (...args) => value.apply(target, args)
      else
        fn = async (...args) => {
          await beforeCall()
          return value.apply(target, args)
        }
      cache.set(prop, fn)
      return fn
    },
  })
  return proxy
}

// ── Identity bridge ─────────────────────────────────────────────────────────

const injectionNotices = new Set()
function noticeOnce(key, message) {
  if (injectionNotices.has(key)) return
  injectionNotices.add(key)
  console.error(`${TAG} ${message}`)
}

/**
 * Decide whether to set the identity headers on one request.
 * mode: 'auto' (only when the client sent neither), 'always' (overwrite).
 */
function applyIdentity(headers, mode, version, protocol) {
  const has = headers.has(VERSION_HEADER) || headers.has(PROTOCOL_HEADER)
  if (mode === 'always' || !has) {
    headers.set(VERSION_HEADER, version)
    headers.set(PROTOCOL_HEADER, protocol)
    noticeOnce(
      `inject:${mode}`,
      `identity headers added by the harness (${mode}): X-Autobuild-Version: ${version}, X-Autobuild-Protocol-Version: ${protocol}` +
        (has ? '' : ' — the client sent none (Autobuild < 0.8.0 does not)'),
    )
    return true
  }
  noticeOnce('client-sends', 'the client sends its own identity headers; the harness leaves them alone')
  return false
}

/**
 * A fetch for the client's fetch seam (`fetchFn` in 0.5.0's
 * RemoteBuildStore) that adds the identity headers. `stats.calls` counts uses
 * so the factory can tell whether the client really used it.
 */
export function identityFetch({ mode, version, protocol, stats }) {
  return async (input, init) => {
    stats.calls++
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined))
    if (mode !== 'off') applyIdentity(headers, mode, version, protocol)
    return fetch(input, { ...init, headers })
  }
}

/**
 * A loopback-only HTTP proxy in front of `target` that adds the identity
 * headers, for clients without a fetch seam. Returns { url, close }.
 */
export async function startIdentityProxy({ target, mode, version, protocol }) {
  const server = createServer(async (req, res) => {
    try {
      const chunks = []
      for await (const chunk of req) chunks.push(chunk)
      const headers = new Headers()
      for (const [k, v] of Object.entries(req.headers)) {
        if (k === 'host' || k === 'connection' || k === 'content-length' || v === undefined) continue
        headers.set(k, Array.isArray(v) ? v.join(', ') : v)
      }
      if (mode !== 'off') applyIdentity(headers, mode, version, protocol)
      const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined
      const upstream = await fetch(`${target}${req.url}`, { method: req.method, headers, body })
      const out = {}
      upstream.headers.forEach((v, k) => {
        if (k !== 'content-length' && k !== 'transfer-encoding' && k !== 'connection') out[k] = v
      })
      const bytes = Buffer.from(await upstream.arrayBuffer())
      out['content-length'] = String(bytes.length)
      res.writeHead(upstream.status, out)
      res.end(bytes)
    } catch (err) {
      res.writeHead(502, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ kind: 'harness', error: `identity proxy: ${err.message}` }))
    }
  })
  await new Promise((res) => server.listen(0, '127.0.0.1', res))
  const { port } = server.address()
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((res) => {
        server.closeAllConnections?.()
        server.close(() => res())
      }),
  }
}

// ── Tokens (spec section 7) ─────────────────────────────────────────────────

/** base64url(JSON scope) + "." + base64url(HMAC-SHA256(secret, first segment)). */
export function mintToken(secret, scope) {
  const payload = Buffer.from(JSON.stringify(scope), 'utf8').toString('base64url')
  const sig = createHmac('sha256', secret).update(payload).digest('base64url')
  return `${payload}.${sig}`
}

/**
 * The admin/runner scope `{build:"*", session:"*"}`, valid for 30 days past
 * `now` (the server's clock): inside abstore's default bound on token
 * lifetimes (`--max-token-lifetime 90d`), which refuses an `exp` further
 * beyond the server's now, and far longer than any contract run.
 */
export function mintAdminToken(secret, now) {
  return mintToken(secret, { build: '*', session: '*', exp: now.getTime() + 30 * 24 * 3600 * 1000 })
}

export function randomSecret() {
  return randomBytes(24).toString('hex') // 48 characters
}
