#!/usr/bin/env python3
"""Renders chats as transformers' apply_chat_template(tokenize=False) does, for tokenizer's tests.

Reads a JSON object {"configs": {name: tokenizer_config}, "cases": [{"config": name, "chat":
Chat}]} on stdin and writes a JSON array of {"out": str} or {"err": str}. The environment is
transformers' (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
loopcontrols, its tojson, raise_exception, strftime_now on the fixed clock 2026-01-02
03:04:05); the variables are the special tokens set in the config, messages, tools (None
when absent), documents=None, add_generation_prompt, and chat_template_kwargs.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
           "mask_token", "additional_special_tokens"]


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime(2026, 1, 2, 3, 4, 5).strftime(fmt)


def token(v):
    if isinstance(v, dict):
        return v.get("content")
    if isinstance(v, list):
        return [token(x) for x in v if token(x)]
    return v


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

req = json.load(sys.stdin)
compiled = {}
specials = {}
for name, cfg in req["configs"].items():
    compiled[name] = env.from_string(cfg["chat_template"])
    specials[name] = {k: token(cfg[k]) for k in SPECIAL if k in cfg and token(cfg[k])}

out = []
for case in req["cases"]:
    chat = case["chat"]
    kwargs = dict(specials[case["config"]])
    kwargs.update(chat.get("chat_template_kwargs") or {})
    try:
        out.append({"out": compiled[case["config"]].render(
            messages=chat["messages"], tools=chat.get("tools") or None, documents=None,
            add_generation_prompt=chat.get("add_generation_prompt", False), **kwargs)})
    except Exception as e:
        out.append({"err": type(e).__name__ + ": " + str(e)})
json.dump(out, sys.stdout, ensure_ascii=False)
