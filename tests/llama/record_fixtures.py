#!/usr/bin/env python3
"""Record what a real llama.cpp server answers, as fixtures for sandpiper's fake LLM.

Starts serve.py (n_ctx 2048, one slot) and writes tests/llama/fixtures/:

  exceed_context_size.json          HTTP status and body for a prompt larger than the window
  tool_call_arguments_not_json.json HTTP status and body for a history whose assistant tool
                                    call has arguments that are not JSON
  props.json                        GET /props (paths replaced by <cache>)
  models.json                       GET /v1/models (paths replaced by <cache>)
  stream_text_length.sse            a streamed text answer cut by max_tokens
  stream_tool_call.sse              a streamed tool call (few-shot prompt, temperature 0)
  stream_window_full.sse            a prompt that fits (about 2,000 tokens), answered until the
                                    2,048-token window is full: finish_reason "length"
  requests.json                     the request bodies used for the above

Run with the venv's python: .ci/llama-venv/bin/python tests/llama/record_fixtures.py
The Rust tests in tests/tests/llama/provider.rs check that a live server still answers like this.
"""

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures"

PING_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Ping the server",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        },
    },
}


def few_shot_ping() -> list:
    """Three rounds of 'Ping i.' answered by a ping tool call: the base model copies the pattern."""
    messages = [{"role": "system", "content": "You call the ping tool whenever asked to ping."}]
    for i in range(1, 4):
        messages += [
            {"role": "user", "content": f"Ping {i}."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "ping", "arguments": json.dumps({"n": i})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{i}", "content": "pong"},
            {"role": "assistant", "content": "Pinged."},
        ]
    messages.append({"role": "user", "content": "Ping 4."})
    return messages


REQUESTS = {
    "exceed_context_size": {
        "messages": [{"role": "user", "content": "word " * 3000}],
        "max_tokens": 8,
        "stream": True,
    },
    "tool_call_arguments_not_json": {
        "messages": [
            {"role": "user", "content": "Ping 1."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "ping", "arguments": '{"n": 1'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "pong"},
        ],
        "tools": [PING_TOOL],
        "max_tokens": 8,
        "stream": True,
    },
    "stream_text_length": {
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 5,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    "stream_window_full": {
        "messages": [{"role": "user", "content": "word " * 1990}],
        "max_tokens": 200,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    "stream_tool_call": {
        "messages": few_shot_ping(),
        "tools": [PING_TOOL],
        "max_tokens": 30,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    },
}


def call(base: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type"), err.read().decode()


def redact(text: str, cache: str) -> str:
    text = text.replace(cache, "<cache>")
    # ids and clocks differ per run
    text = re.sub(r'"id":"chatcmpl-[A-Za-z0-9]+"', '"id":"chatcmpl-<id>"', text)
    text = re.sub(r'"id":"[A-Za-z0-9]{32}"', '"id":"<call-id>"', text)
    return re.sub(r'"created":( ?)\d+', r'"created":\g<1>0', text)


def main() -> int:
    server = subprocess.Popen(
        [sys.executable, str(HERE / "serve.py"), "--n-ctx", "2048"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = server.stdout.readline()
    if not line.startswith("READY "):
        print(f"serve.py did not start: {line!r}", file=sys.stderr)
        return 1
    base = line.split()[1]
    OUT.mkdir(exist_ok=True)
    status, _, props = call(base, "/props")
    cache = str(Path(json.loads(props)["model_path"]).parent)

    def write(name: str, text: str) -> None:
        (OUT / name).write_text(redact(text, cache))
        print(f"wrote {OUT / name}")

    write("props.json", json.dumps(json.loads(props), indent=2) + "\n")
    write("models.json", json.dumps(json.loads(call(base, "/v1/models")[2]), indent=2) + "\n")
    for name in ("exceed_context_size", "tool_call_arguments_not_json"):
        status, ctype, body = call(base, "/v1/chat/completions", REQUESTS[name])
        record = {"status": status, "content_type": ctype, "body": json.loads(body)}
        write(f"{name}.json", json.dumps(record, indent=2) + "\n")
    for name in ("stream_text_length", "stream_tool_call", "stream_window_full"):
        status, ctype, body = call(base, "/v1/chat/completions", REQUESTS[name])
        assert status == 200, (name, status, body)
        write(f"{name}.sse", body)
    (OUT / "requests.json").write_text(json.dumps(REQUESTS, indent=2) + "\n")
    server.stdin.close()
    server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
