#!/usr/bin/env node
// gen-ids.cjs writes the golden token ids of the conformance corpus, computed by the Hugging Face
// tokenizers library itself (its Rust core, prebuilt for Node as the npm package `tokenizers`).
//
// The reference is installed in a scratch directory, never in the repository:
//
//	mkdir -p /tmp/tokref && (cd /tmp/tokref && npm init -y >/dev/null && npm install tokenizers@0.23.2)
//	NODE_PATH=/tmp/tokref/node_modules node scripts/gen-ids.cjs [testdata]
//
// (run from the conformance module's directory). For every family directory under testdata it
// reads tokenizer.json.gz and tokenizer_config.json.gz, encodes every prompt of corpus.jsonl.gz
// with add_special_tokens=false and =true, and writes <family>/ids.jsonl.gz, one JSON object per
// prompt, in corpus order:
//
//	{"ids":[...]}                        encode(text, add_special_tokens=false)
//	"pre":[...], "suf":[...]             add_special_tokens=true gives pre + ids + suf (omitted when empty)
//	"special":[...]                      ...or, if it is not of that shape, the whole of it
//
// and <family>/ids.meta.json (reference version, corpus digest, the post-processor used).
//
// add_special_tokens=true follows what the engine (transformers) does, not tokenizer.json alone:
// for tokenizer_class LlamaTokenizer/LlamaTokenizerFast, transformers' LlamaTokenizerFast replaces
// the post-processor with a TemplateProcessing built from tokenizer_config.json's add_bos_token,
// add_eos_token, bos_token and eos_token (update_post_processor). DeepSeek-V3's tokenizer.json has
// a ByteLevel post-processor, so only this rule gives it the BOS its engine adds.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const crypto = require('node:crypto');
const { Tokenizer, templateProcessing } = require('tokenizers');

const REFERENCE = 'tokenizers@' + require('tokenizers/package.json').version;
const dir = process.argv[2] || 'testdata';
const families = ['qwen3', 'gpt-oss', 'deepseek-v3', 'mistral'];

function gunzip(file) {
  return zlib.gunzipSync(fs.readFileSync(file));
}

function tokenContent(t) {
  if (t == null) return null;
  return typeof t === 'string' ? t : t.content;
}

// llamaPostProcessor returns transformers' LlamaTokenizerFast post-processor for the config, or
// null when transformers keeps tokenizer.json's own.
function llamaPostProcessor(tok, cfg) {
  if (!['LlamaTokenizer', 'LlamaTokenizerFast'].includes(cfg.tokenizer_class)) return null;
  const addBos = cfg.add_bos_token ?? true; // LlamaTokenizerFast's defaults
  const addEos = cfg.add_eos_token ?? false;
  const bos = tokenContent(cfg.bos_token);
  const eos = tokenContent(cfg.eos_token);
  const parts = [];
  const special = [];
  if (addBos && bos != null) {
    parts.push(bos + ':0');
    special.push([bos, tok.tokenToId(bos)]);
  }
  parts.push('$A:0');
  if (addEos && eos != null) {
    parts.push(eos + ':0');
    special.push([eos, tok.tokenToId(eos)]);
  }
  const single = parts.join(' ');
  return { single, special, processor: templateProcessing(single, null, special) };
}

function indexOfRun(hay, needle) {
  outer: for (let k = 0; k + needle.length <= hay.length; k++) {
    for (let j = 0; j < needle.length; j++) if (hay[k + j] !== needle[j]) continue outer;
    return k;
  }
  return -1;
}

async function main() {
  const corpusRaw = gunzip(path.join(dir, 'corpus.jsonl.gz'));
  const corpusSha = crypto.createHash('sha256').update(corpusRaw).digest('hex');
  const prompts = corpusRaw.toString('utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
  for (const fam of families) {
    const tokJSON = gunzip(path.join(dir, fam, 'tokenizer.json.gz')).toString('utf8');
    const cfg = JSON.parse(gunzip(path.join(dir, fam, 'tokenizer_config.json.gz')).toString('utf8'));
    const tok = Tokenizer.fromString(tokJSON);
    const pp = llamaPostProcessor(tok, cfg);
    if (pp) tok.setPostProcessor(pp.processor);
    const lines = [];
    let tokens = 0;
    let shaped = 0;
    for (const text of prompts) {
      const plain = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      const special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      tokens += plain.length;
      const rec = { ids: Array.from(plain) };
      const k = plain.length === 0 ? special.length : indexOfRun(special, plain);
      // The shape pre + ids + suf: for an empty prompt, take everything as pre.
      if (k >= 0) {
        const pre = Array.from(special.slice(0, k));
        const suf = Array.from(special.slice(k + plain.length));
        if (pre.length) rec.pre = pre;
        if (suf.length) rec.suf = suf;
        shaped++;
      } else {
        rec.special = Array.from(special);
      }
      lines.push(JSON.stringify(rec));
    }
    const out = zlib.gzipSync(Buffer.from(lines.join('\n') + '\n'), { level: 9 });
    fs.writeFileSync(path.join(dir, fam, 'ids.jsonl.gz'), out);
    const meta = {
      reference: REFERENCE,
      corpus_sha256: corpusSha,
      prompts: prompts.length,
      tokens,
      post_processor: pp ? 'TemplateProcessing ' + JSON.stringify(pp.single) + ' (transformers LlamaTokenizerFast, from tokenizer_config.json)' : "tokenizer.json's own",
      tokenizer_json_sha256: crypto.createHash('sha256').update(tokJSON).digest('hex'),
    };
    fs.writeFileSync(path.join(dir, fam, 'ids.meta.json'), JSON.stringify(meta, null, 2) + '\n');
    console.log(`${fam}: ${prompts.length} prompts, ${tokens} tokens, ${shaped} of shape pre+ids+suf, ${out.length} bytes gz`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
