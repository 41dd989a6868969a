// Starts Autobuild's own reference BuildStore server (src/store/remote/server.ts)
// over its in-memory store, from an Autobuild checkout or installed package
// YOU supply, on a loopback port the OS picks. Nothing of Autobuild is copied
// here: the modules are imported from the checkout at run time.
//
//   ABC_AUTOBUILD=/tmp/autobuild-checkout [ABC_SECRET=s] bun conformance/autobuild/reference/serve.ts
//
// Prints `reference listening on http://127.0.0.1:PORT` once serving, and
// stops on SIGTERM / SIGINT. Bun is required (the server uses Bun.serve).

import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const root = process.env.ABC_AUTOBUILD
if (!root || !existsSync(join(root, 'src/store/remote/server.ts'))) {
  console.error('serve.ts: set ABC_AUTOBUILD to an Autobuild checkout (with src/store/remote/server.ts)')
  process.exit(2)
}
const load = (rel: string) => import(pathToFileURL(join(root, rel)).href)
const { startStoreServer } = await load('src/store/remote/server.ts')
const { MemoryBuildStore } = await load('src/store/memory.ts')

const server = startStoreServer({
  store: new MemoryBuildStore(),
  secret: process.env.ABC_SECRET || undefined,
  hostname: '127.0.0.1',
  port: 0,
})
console.log(`reference listening on ${server.url}`)
const stop = async () => {
  await server.stop()
  process.exit(0)
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
