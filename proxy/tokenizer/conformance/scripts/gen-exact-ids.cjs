#!/usr/bin/env node
// gen-exact-ids.cjs adds the reference token ids to the exact-mode requests gen-exact.py wrote:
// each line of testdata/exact/<family>.jsonl.gz gets "ids", the Hugging Face tokenizers library's
// encoding of its "text" with add_special_tokens=false (vLLM tokenizes a rendered chat prompt
// without adding special tokens; the template wrote them). Run from the conformance module's
// directory, after gen-exact.py, with the reference installed as gen-ids.cjs says:
//
//	NODE_PATH=/tmp/tokref/node_modules node scripts/gen-exact-ids.cjs [testdata] [family]
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const { Tokenizer } = require('tokenizers');

const dir = process.argv[2] || 'testdata';
const fam = process.argv[3] || 'qwen3';

async function main() {
  const file = path.join(dir, 'exact', fam + '.jsonl.gz');
  const lines = zlib.gunzipSync(fs.readFileSync(file)).toString('utf8').split('\n').filter((l) => l !== '');
  const tok = Tokenizer.fromString(zlib.gunzipSync(fs.readFileSync(path.join(dir, fam, 'tokenizer.json.gz'))).toString('utf8'));
  const out = [];
  let tokens = 0;
  for (const line of lines) {
    const rec = JSON.parse(line);
    rec.ids = Array.from((await tok.encode(rec.text, null, { addSpecialTokens: false })).getIds());
    tokens += rec.ids.length;
    out.push(JSON.stringify(rec));
  }
  fs.writeFileSync(file, zlib.gzipSync(Buffer.from(out.join('\n') + '\n'), { level: 9 }));
  console.log(`${file}: ${out.length} requests, ${tokens} tokens (reference tokenizers@${require('tokenizers/package.json').version})`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
