#!/usr/bin/python3
"""gen-exact.py writes the requests of the exact-mode test and the reference's prompt text for each.

It builds a fixed set of multi-turn conversations (seed 44) and, for each of the three APIs (Chat
Completions, Anthropic Messages, OpenAI Responses), one request per turn: the conversation so far,
ending on a user turn or on tool results. For each request it computes the prompt text vLLM gives
the engine, in Python and independently of the Go code under test:

  - Messages and Responses bodies are converted to chat messages as vLLM's serving code does
    (entrypoints/anthropic/serving.py _convert_anthropic_to_openai_request,
    entrypoints/openai/responses/utils.py construct_input_messages), transcribed below;
  - every message is then rebuilt as vLLM's chat parser does for a template that does not loop
    over content parts (texts joined with "\\n", null content ""), tool-call arguments decoded
    from their JSON string (_postprocess_messages), tools dumped in the chat form;
  - the messages are rendered with the family's chat_template by Jinja2 exactly as
    gen-templates.py renders (transformers' environment), add_generation_prompt true.

Usage, from the conformance module's directory:

    /usr/bin/python3 scripts/gen-exact.py [testdata] [family]      # family: qwen3 (default)
    NODE_PATH=/tmp/tokref/node_modules node scripts/gen-exact-ids.cjs [testdata] [family]

The first writes testdata/exact/<family>.jsonl.gz with one object per request,
{"api": "chat"|"messages"|"responses", "conv": n, "turn": k, "body": {...}, "text": "..."};
the second adds "ids", the reference tokenizer's encoding of "text" (add_special_tokens=false, as
vLLM tokenizes a rendered chat prompt). The Go test (api/exact_test.go) reads the result.
"""

import gzip
import importlib.util
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("gen_templates", os.path.join(HERE, "gen-templates.py"))
gen_templates = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_templates)

SEED = 44
CONVERSATIONS = 8  # per API
TURNS = 5  # user turns per conversation

SYSTEMS = [
    "You are a careful code reviewer for a Go service that schedules LLM inference. "
    "Point out correctness bugs first, then data races, then style. Quote the line you mean. "
    "Prefer small, concrete suggestions; never rewrite a whole function unless asked. ",
    "Tu es l'assistant de l'équipe d'exploitation. Réponds brièvement, en citant la section du "
    "runbook concernée (« Déploiement », « Incidents », « Capacité »). Si tu ne sais pas, dis-le. ",
    "你是一名数据库顾问。回答要简洁，先给结论，再给理由。遇到不确定的情况，请明确说明假设。"
    "You may also answer in English when the user writes in English; keep code in fenced blocks. ",
]

WORDS = (
    "the scheduler queue backend prefix cache block token router latency replica shard lease "
    "timeout retry budget request stream event index eviction capacity tenant fairness window "
    "gradient deploy rollout canary metric histogram quantile p99 throughput batch prefill decode "
    "kernel memory page table hash chain session affinity score weight probe health drain "
    "naïve café über straße 東京 数据 模型 缓存 déjà-vu résumé"
).split()

TOOLS = [
    {
        "name": "get_metric",
        "description": "Read a Prometheus metric's current value for one backend.",
        "parameters": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "metric name, e.g. vllm:num_requests_running"},
                "backend": {"type": "string"},
            },
            "required": ["name"],
        },
    },
    {
        "name": "search_runbook",
        "description": "Search the runbook; returns the best section's text.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
            "required": ["query"],
        },
    },
]


def sentence(rng, lo, hi):
    n = rng.randint(lo, hi)
    words = [rng.choice(WORDS) for _ in range(n)]
    s = " ".join(words)
    return s[0].upper() + s[1:] + rng.choice([".", "?", "!", "."])


def paragraph(rng, sentences):
    return " ".join(sentence(rng, 6, 18) for _ in range(sentences))


def conversation(rng, c):
    """A conversation in a neutral form: system, then turns of user / (assistant tool call, tool
    result)? / assistant. Every fourth conversation calls a tool in its second turn."""
    system = SYSTEMS[c % len(SYSTEMS)] + paragraph(rng, 90)
    msgs = [{"role": "system", "content": system}]
    tools = TOOLS if c % 4 == 1 else None
    for turn in range(TURNS):
        q = f"Question {turn + 1} of conversation {c}: " + paragraph(rng, rng.randint(1, 4))
        if turn == 0 and rng.random() < 0.5:
            q += "\n\n```go\nfunc (q *Queue) Push(r *Request) error {\n\tq.mu.Lock()\n\tdefer q.mu.Unlock()\n\treturn nil\n}\n```"
        msgs.append({"role": "user", "content": q})
        if tools and turn == 1:
            call_id = f"call_{c}_{turn}"
            args = {"name": "vllm:num_requests_waiting", "backend": f"pod-{c}"}
            msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "name": "get_metric", "arguments": args}]})
            msgs.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps({"value": rng.randint(0, 40)})})
        msgs.append({"role": "assistant", "content": paragraph(rng, rng.randint(2, 6))})
    return msgs, tools


def requests_of(msgs):
    """The prefixes of msgs that a client sends: each ending before an assistant message."""
    return [msgs[:i] for i in range(1, len(msgs)) if msgs[i]["role"] == "assistant"]


# ---- Request bodies, one per API ------------------------------------------------------------


def chat_body(msgs, tools):
    out = []
    for m in msgs:
        if m["role"] == "assistant" and m.get("tool_calls"):
            out.append({
                "role": "assistant",
                "content": m["content"] or None,
                "tool_calls": [
                    {"id": t["id"], "type": "function", "function": {"name": t["name"], "arguments": json.dumps(t["arguments"])}}
                    for t in m["tool_calls"]
                ],
            })
        elif m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    body = {"messages": out}
    if tools:
        body["tools"] = [{"type": "function", "function": dict(t)} for t in tools]
    return body


def messages_body(msgs, tools):
    body = {"system": msgs[0]["content"], "messages": []}
    for m in msgs[1:]:
        if m["role"] == "assistant" and m.get("tool_calls"):
            blocks = [{"type": "text", "text": m["content"]}] if m["content"] else []
            blocks += [{"type": "tool_use", "id": t["id"], "name": t["name"], "input": t["arguments"]} for t in m["tool_calls"]]
            body["messages"].append({"role": "assistant", "content": blocks})
        elif m["role"] == "tool":
            body["messages"].append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}]})
        elif m["role"] == "assistant":
            body["messages"].append({"role": "assistant", "content": [{"type": "text", "text": m["content"]}]})
        else:
            body["messages"].append({"role": m["role"], "content": m["content"]})
    if tools:
        body["tools"] = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in tools]
    return body


def responses_body(msgs, tools):
    body = {"instructions": msgs[0]["content"], "input": [], "store": False}
    for m in msgs[1:]:
        if m["role"] == "assistant" and m.get("tool_calls"):
            for t in m["tool_calls"]:
                body["input"].append({"type": "function_call", "call_id": t["id"], "name": t["name"], "arguments": json.dumps(t["arguments"])})
        elif m["role"] == "tool":
            body["input"].append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif m["role"] == "assistant":
            body["input"].append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": m["content"]}]})
        else:
            body["input"].append({"type": "message", "role": "user", "content": m["content"]})
    if tools:
        body["tools"] = [{"type": "function", "name": t["name"], "description": t["description"], "parameters": t["parameters"]} for t in tools]
    return body


# ---- vLLM's conversions to chat messages (transcribed) ---------------------------------------


def tool_dump(fn):
    """ChatCompletionToolsParam(type="function", function=fn).model_dump(): the declared fields
    name, description, parameters first (None when absent), then the extra keys."""
    out = {"name": fn.get("name"), "description": fn.get("description"), "parameters": fn.get("parameters")}
    for k, v in fn.items():
        if k not in out:
            out[k] = v
    return {"type": "function", "function": out}


def anthropic_to_chat(body):
    """vLLM's _convert_anthropic_to_openai_request: messages and tools."""
    msgs = []
    system = body.get("system")
    if isinstance(system, str):
        if system:
            msgs.append({"role": "system", "content": system})
    elif isinstance(system, list):
        msgs.append({"role": "system", "content": "".join(b.get("text", "") for b in system if b.get("type") == "text")})
    for m in body["messages"]:
        content = m["content"]
        if isinstance(content, str):
            msgs.append({"role": m["role"], "content": content})
            continue
        parts, calls, reasoning, tool_msgs = [], [], [], []
        for b in content:
            t = b.get("type")
            if t == "text" and b.get("text"):
                parts.append({"type": "text", "text": b["text"]})
            elif t == "thinking":
                reasoning.append(b.get("thinking", ""))
            elif t == "tool_use":
                calls.append({"id": b.get("id"), "type": "function",
                              "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}})
            elif t == "tool_result":
                if m["role"] == "user":
                    tool_msgs.append({"role": "tool", "tool_call_id": b.get("id", ""), "content": str(b.get("content", ""))})
                else:
                    parts.append({"type": "text", "text": "Tool result: " + str(b.get("content", ""))})
        msgs.extend(tool_msgs)
        out = {"role": m["role"]}
        if len(parts) == 1:
            out["content"] = parts[0]["text"]
        elif parts:
            out["content"] = parts
        if calls:
            out["tool_calls"] = calls
        if reasoning:
            out["reasoning"] = "".join(reasoning)
        if parts or calls or reasoning:
            msgs.append(out)
    tools = None
    if body.get("tools"):
        tools = []
        for t in body["tools"]:
            params = dict(t.get("input_schema") or {})
            params.setdefault("type", "object")
            tools.append(tool_dump({"name": t["name"], "description": t.get("description"), "parameters": params}))
    return msgs, tools


def responses_to_chat(body):
    """vLLM's construct_input_messages (no previous response) and the tools' flattening."""
    msgs = []
    if body.get("instructions"):
        msgs.append({"role": "system", "content": body["instructions"]})
    inp = body["input"]
    if isinstance(inp, str):
        msgs.append({"role": "user", "content": inp})
        inp = []
    for item in inp:
        prev = msgs[-1] if msgs and msgs[-1]["role"] == "assistant" else None
        t = item.get("type")
        if t == "function_call":
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
            if prev is not None:
                prev.setdefault("tool_calls", []).append(call)
            else:
                msgs.append({"role": "assistant", "tool_calls": [call]})
        elif t == "function_call_output":
            msgs.append({"role": "tool", "content": item["output"], "tool_call_id": item["call_id"]})
        elif item.get("role") == "assistant":
            c = item["content"]
            text = c if isinstance(c, str) else c[0].get("text", "")
            if prev is not None and not prev.get("content"):
                prev["content"] = text
            else:
                msgs.append({"role": "assistant", "content": text})
        else:
            msgs.append({k: v for k, v in item.items() if k != "type"})
    tools = None
    if body.get("tools"):
        tools = [tool_dump({k: v for k, v in t.items() if k != "type"}) for t in body["tools"] if t.get("type") == "function"]
    return msgs, tools


def vllm_messages(msgs):
    """_parse_chat_message_content for a "string" content format, then _postprocess_messages."""
    out = []
    for m in msgs:
        c = m.get("content")
        if c is None:
            texts = []
        elif isinstance(c, str):
            texts = [c]
        else:
            texts = [p.get("text", "") for p in c if p.get("type") in ("text", "input_text", "output_text", "refusal", "thinking")]
        r = {"role": m["role"], "content": "\n".join(texts)}
        if m["role"] == "assistant":
            if "tool_calls" in m:
                r["tool_calls"] = m["tool_calls"]
            if m.get("reasoning") is not None:
                r["reasoning"] = m["reasoning"]
                r["reasoning_content"] = m["reasoning"]
        if m["role"] == "tool" and "tool_call_id" in m:
            r["tool_call_id"] = m["tool_call_id"]
        if isinstance(m.get("name"), str):
            r["name"] = m["name"]
        out.append(r)
    for r in out:
        if r["role"] != "assistant" or "tool_calls" not in r:
            continue
        if not r["tool_calls"]:
            del r["tool_calls"]
            continue
        calls = []
        for t in r["tool_calls"]:
            t = json.loads(json.dumps(t))
            a = t["function"].get("arguments")
            t["function"]["arguments"] = json.loads(a) if isinstance(a, str) and a else (a or {})
            calls.append(t)
        r["tool_calls"] = calls
    return out


def chat_to_chat(body):
    tools = [tool_dump(t["function"]) for t in body["tools"]] if body.get("tools") else None
    return body["messages"], tools


CONVERT = {"chat": chat_to_chat, "messages": anthropic_to_chat, "responses": responses_to_chat}
BODY = {"chat": chat_body, "messages": messages_body, "responses": responses_body}


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "testdata"
    fam = sys.argv[2] if len(sys.argv) > 2 else "qwen3"
    cfg = json.loads(gzip.open(os.path.join(d, fam, "tokenizer_config.json.gz")).read())
    tmpl = gen_templates.compile_template(cfg["chat_template"])
    specials = gen_templates.special_tokens(cfg)
    rng = random.Random(SEED)
    lines = []
    for api in ("chat", "messages", "responses"):
        for c in range(CONVERSATIONS):
            msgs, tools = conversation(rng, c)
            for turn, prefix in enumerate(requests_of(msgs)):
                body = BODY[api](prefix, tools)
                chat, chat_tools = CONVERT[api](json.loads(json.dumps(body)))
                text = tmpl.render(messages=vllm_messages(chat), tools=chat_tools, documents=None,
                                   add_generation_prompt=True, **specials)
                lines.append(json.dumps({"api": api, "conv": c, "turn": turn, "body": body, "text": text}, ensure_ascii=False))
    os.makedirs(os.path.join(d, "exact"), exist_ok=True)
    out = os.path.join(d, "exact", fam + ".jsonl.gz")
    with open(out, "wb") as f:
        f.write(gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), compresslevel=9, mtime=0))
    print(f"{out}: {len(lines)} requests")


if __name__ == "__main__":
    main()
