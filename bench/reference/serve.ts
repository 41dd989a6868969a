// Launches Autobuild's reference Remote BuildStore server for abstore-load.
//
//   bun bench/reference/serve.ts <autobuild-checkout> <store> [<blob-dir>]
//
// <store> is `sqlite-memory` (bun:sqlite on ":memory:", the counterpart of
// abstore's `sqlite::memory:`), `sqlite-file:<path>` (bun:sqlite on a file in
// WAL mode, the counterpart of abstore's SQLite file) or `memory` (Autobuild's
// MemoryBuildStore: plain JavaScript maps, no SQL at all). Blobs stay in memory
// (MemoryBlobStore), like abstore's `--blobs memory://` in the benchmark, unless
// <blob-dir> is given: then Autobuild's DirBlobStore keeps them in that
// directory (the SQLite stores only), like abstore's `--blobs file://DIR`.
//
// This file contains none of Autobuild's code: it imports the checkout the user
// supplies at run time and wraps its own `startStoreServer` (Bun.serve over
// `createStoreServer`) on 127.0.0.1 with an OS-assigned port, then prints
// `reference listening on http://127.0.0.1:PORT` for the harness. SIGTERM or
// SIGINT stops it.
import { Database } from 'bun:sqlite'
import { join, resolve } from 'node:path'

const [checkoutArg, storeArg, blobDirArg] = process.argv.slice(2)
if (checkoutArg === undefined || storeArg === undefined) {
  console.error(
    'usage: bun serve.ts <autobuild-checkout> sqlite-memory|sqlite-file:<path>|memory [<blob-dir>]',
  )
  process.exit(2)
}
const checkout = resolve(checkoutArg)
const source = (path: string) => join(checkout, 'src', path)

const { startStoreServer } = await import(source('store/remote/server.ts'))
const { MemoryBuildStore, MemoryBlobStore } = await import(source('store/memory.ts'))

let store: unknown
let synchronous = '-'
if (storeArg === 'memory') {
  store = new MemoryBuildStore()
} else if (storeArg === 'sqlite-memory' || storeArg.startsWith('sqlite-file:')) {
  const { SqliteBuildStore } = await import(source('store/local/store.ts'))
  const database =
    storeArg === 'sqlite-memory'
      ? new Database(':memory:')
      : new Database(storeArg.slice('sqlite-file:'.length), { create: true })
  const blobs =
    blobDirArg === undefined
      ? new MemoryBlobStore()
      : new (await import(source('store/local/blobs.ts'))).DirBlobStore(resolve(blobDirArg))
  store = new SqliteBuildStore({ database, blobs })
  // Reported so the run states how durable the reference's commits are
  // (2 = FULL: WAL commits fsync, like abstore's synchronous=FULL).
  const row = database.query('PRAGMA synchronous').get() as Record<string, unknown> | null
  synchronous = String(row === null ? '?' : Object.values(row)[0])
} else {
  console.error(`unknown store "${storeArg}"`)
  process.exit(2)
}

const server = startStoreServer({ store })
console.log(
  `reference store ${storeArg}, blobs ${blobDirArg ?? 'memory'}, PRAGMA synchronous=${synchronous}`,
)
console.log(`reference listening on ${server.url}`)

const stop = async () => {
  await server.stop()
  process.exit(0)
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
