// Read every answer a plan names through the runtime's own fetch (Node's
// undici, or Bun's), as its users do, and keep what fetch decoded
// (tests/it/http_clients.rs).
//
//     node read.mjs PLAN OUT      bun read.mjs PLAN OUT
//
// PLAN is the test's JSON plan (the headers every request carries; the
// reads, each a URL, the Accept-Encoding to send and its output's name).
// Each read's decoded body goes to OUT/NAME and what came with it to
// OUT/NAME.json (status, Content-Encoding, fetch's error if it failed);
// OUT/decodes.json lists the codings this runtime's fetch decodes.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import zlib from 'node:zlib';

const [plan, out] = process.argv.slice(2);
const { headers, reads } = JSON.parse(readFileSync(plan, 'utf8'));
mkdirSync(out, { recursive: true });

// Both runtimes' fetch decode gzip and br. zstd: Bun's does; Node's (undici)
// only in its later releases, where node:zlib has zstd too, so it is asked
// of this runtime's fetch itself, with an answer served here.
async function fetchDecodesZstd() {
  if (typeof zlib.zstdCompressSync !== 'function') {
    return typeof Bun !== 'undefined';
  }
  const body = zlib.zstdCompressSync(Buffer.from('[1]'));
  const server = http.createServer((_, response) => {
    response.writeHead(200, { 'content-encoding': 'zstd' });
    response.end(body);
  });
  await new Promise((listening) => server.listen(0, '127.0.0.1', listening));
  try {
    const response = await fetch(`http://127.0.0.1:${server.address().port}/`);
    return (await response.text()) === '[1]';
  } catch {
    return false;
  } finally {
    server.close();
  }
}
const decodes = ['identity', 'gzip', 'br'];
if (await fetchDecodesZstd()) {
  decodes.push('zstd');
}
writeFileSync(join(out, 'decodes.json'), JSON.stringify(decodes));

for (const { url, accept, name } of reads) {
  const meta = { status: null, encoding: null, error: null };
  let body = new Uint8Array();
  try {
    const response = await fetch(url, { headers: { ...headers, 'accept-encoding': accept } });
    meta.status = response.status;
    meta.encoding = response.headers.get('content-encoding');
    body = new Uint8Array(await response.arrayBuffer());
  } catch (err) {
    meta.error = `${err?.name}: ${err?.message}${err?.cause ? ` (${err.cause.message ?? err.cause})` : ''}`;
  }
  writeFileSync(join(out, name), body);
  writeFileSync(join(out, `${name}.json`), JSON.stringify(meta));
}
