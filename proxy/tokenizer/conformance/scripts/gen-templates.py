#!/usr/bin/python3
"""gen-templates.py writes the golden renderings of the conformance conversations.

It renders every conversation of testdata/conversations.jsonl.gz with each family's chat_template
(from testdata/<family>/tokenizer_config.json.gz) the way transformers' apply_chat_template does:
Jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and a no-op {% generation %} tag, the globals raise_exception (raises TemplateError) and
strftime_now, a tojson filter that keeps non-ASCII and sorts no keys, and the variables messages,
tools (None when the request has none), documents (None), add_generation_prompt, the tokenizer's
special tokens (bos_token, eos_token, unk_token, pad_token, additional_special_tokens, as strings)
and the conversation's chat_template_kwargs.

Usage, from the conformance module's directory, with Debian's Jinja2:

    apt-get install -y python3-jinja2
    /usr/bin/python3 scripts/gen-templates.py [testdata]

It writes testdata/<family>/templates.jsonl.gz, one JSON object per conversation, in order:
{"text": "..."} for a rendering or {"error": "..."} when the template raised (the Go renderer must
then fail too), and <family>/templates.meta.json. A family whose tokenizer_config.json has no
chat_template is skipped.
"""

import gzip
import hashlib
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FAMILIES = ["qwen3", "gpt-oss", "deepseek-v3", "mistral"]
SPECIAL_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers tracks assistant
    masks with it; the text is unchanged)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    # Fixed, so goldens are reproducible; no template of the four families calls it.
    return datetime(2026, 12, 7, 12, 0, 0).strftime(fmt)


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def content(tok):
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


def special_tokens(cfg):
    out = {}
    for k in SPECIAL_KEYS:
        v = content(cfg.get(k))
        if v is not None:
            out[k] = v
    extra = cfg.get("additional_special_tokens")
    if extra:
        out["additional_special_tokens"] = [content(t) for t in extra]
    return out


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "testdata"
    raw = gzip.open(os.path.join(d, "conversations.jsonl.gz")).read()
    convs = [json.loads(line) for line in raw.decode("utf-8").split("\n") if line]
    for fam in FAMILIES:
        cfg = json.loads(gzip.open(os.path.join(d, fam, "tokenizer_config.json.gz")).read())
        source = cfg.get("chat_template")
        if isinstance(source, list):  # named templates: the default one
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        if not source:
            print(f"{fam}: no chat_template, skipped")
            continue
        tmpl = compile_template(source)
        specials = special_tokens(cfg)
        lines, errors = [], 0
        for c in convs:
            kwargs = dict(specials)
            kwargs.update(c.get("chat_template_kwargs") or {})
            try:
                text = tmpl.render(
                    messages=c["messages"],
                    tools=c.get("tools") or None,
                    documents=None,
                    add_generation_prompt=c.get("add_generation_prompt", False),
                    **kwargs,
                )
                lines.append(json.dumps({"text": text}, ensure_ascii=False))
            except Exception as e:  # the template raised: the golden is the failure
                errors += 1
                lines.append(json.dumps({"error": f"{type(e).__name__}: {e}"}, ensure_ascii=False))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with open(os.path.join(d, fam, "templates.jsonl.gz"), "wb") as f:
            f.write(gzip.compress(data, compresslevel=9, mtime=0))
        meta = {
            "reference": f"jinja2 {jinja2.__version__} (python {sys.version.split()[0]})",
            "conversations_sha256": hashlib.sha256(raw).hexdigest(),
            "conversations": len(convs),
            "rendered": len(convs) - errors,
            "errors": errors,
            "chat_template_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
        }
        with open(os.path.join(d, fam, "templates.meta.json"), "w") as f:
            f.write(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        print(f"{fam}: {len(convs)} conversations, {len(convs) - errors} rendered, {errors} raised")


if __name__ == "__main__":
    main()
