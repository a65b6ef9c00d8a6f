#!/usr/bin/env python3
"""Renders templates as transformers does (jinja2, the reference for package jinja's tests).

Reads a JSON array of {"template": str, "vars": object} on stdin and writes a JSON array of
{"out": str} or {"err": str}. The environment is transformers' chat-template environment:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loopcontrols, its
tojson filter, raise_exception, and strftime_now on the fixed clock 2026-01-02 03:04:05.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime(2026, 1, 2, 3, 4, 5).strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

out = []
for case in json.load(sys.stdin):
    try:
        out.append({"out": env.from_string(case["template"]).render(**case["vars"])})
    except Exception as e:  # the kind of failure is compared, not its text
        out.append({"err": type(e).__name__ + ": " + str(e)})
json.dump(out, sys.stdout, ensure_ascii=False)
