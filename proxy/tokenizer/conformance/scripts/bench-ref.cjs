#!/usr/bin/env node
// bench-ref.cjs measures the reference's encoding throughput on the conformance corpus, to report
// beside the Go benchmarks (go test -tags conformance_api -bench . ./api). One prompt at a time,
// awaited, so the Rust core runs on one thread (encodeBatch would use several cores): MB/s over
// the corpus's UTF-8 bytes, ns/token, and the mean time of one long (16 KiB, ~8k-token) prompt.
// The time includes the Node binding's per-call overhead (a promise and a thread hop).
//
//	NODE_PATH=/tmp/tokref/node_modules node scripts/bench-ref.cjs [testdata]
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const { Tokenizer } = require('tokenizers');

const dir = process.argv[2] || 'testdata';
const families = ['qwen3', 'gpt-oss', 'deepseek-v3', 'mistral'];
const gunzip = (f) => zlib.gunzipSync(fs.readFileSync(f));

async function main() {
  const prompts = gunzip(path.join(dir, 'corpus.jsonl.gz')).toString('utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
  const bytes = prompts.reduce((n, p) => n + Buffer.byteLength(p), 0);
  const long = prompts.filter((p) => Buffer.byteLength(p) >= 16 << 10);
  console.log(`tokenizers@${require('tokenizers/package.json').version}, ${prompts.length} prompts, ${bytes} bytes, ${long.length} long`);
  for (const fam of families) {
    const tok = Tokenizer.fromString(gunzip(path.join(dir, fam, 'tokenizer.json.gz')).toString('utf8'));
    let tokens = 0;
    for (const p of prompts) tokens += (await tok.encode(p, null, { addSpecialTokens: false })).getIds().length; // warm-up
    const runs = 2;
    let t0 = process.hrtime.bigint();
    for (let r = 0; r < runs; r++) for (const p of prompts) await tok.encode(p, null, { addSpecialTokens: false });
    const ns = Number(process.hrtime.bigint() - t0) / runs;
    let longTokens = 0;
    for (const p of long) longTokens += (await tok.encode(p, null, { addSpecialTokens: false })).getIds().length;
    t0 = process.hrtime.bigint();
    for (let r = 0; r < 5; r++) for (const p of long) await tok.encode(p, null, { addSpecialTokens: false });
    const longNs = Number(process.hrtime.bigint() - t0) / (5 * long.length);
    console.log(`${fam}: corpus ${(bytes / ns * 1e3).toFixed(2)} MB/s, ${(ns / tokens).toFixed(0)} ns/token; long prompt ${(longNs / 1e6).toFixed(2)} ms for ${(longTokens / long.length).toFixed(0)} tokens`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
