#!/usr/bin/env bash
# The virtualenv the server tests drive deepseek-server from: the real `openai` client,
# `prometheus_client` (its text-format parser), LangChain's OpenAI chat model and selenium (the
# web UI's browser test drives Debian's chromium with it), pinned, from PyPI; cached under target/.
# Prints the venv's python. .ci/run calls it before the tests; the tests call it if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$PWD/target/server-venv
PINS="openai==3.57.0 prometheus_client==0.26.0 httpx==0.28.1 langchain-openai==1.8.1 langchain-core==1.8.3 tiktoken==0.14.0 selenium==4.51.0"
if ! "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("openai") == "3.57.0" and m.version("prometheus_client") == "0.26.0" and m.version("httpx") == "0.28.1" and m.version("langchain-openai") == "1.8.1" and m.version("langchain-core") == "1.8.3" and m.version("selenium") == "4.51.0"' 2>/dev/null; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" >&2
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q --disable-pip-version-check $PINS >&2
fi
echo "$VENV/bin/python"
