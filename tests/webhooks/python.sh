#!/usr/bin/env bash
# Prints the path of a Python that has the pinned receiver libraries (requirements.txt),
# creating a cached virtualenv on first use. The HTTP suite reads it from
# CP_TEST_WEBHOOK_PYTHON: export CP_TEST_WEBHOOK_PYTHON=$(tests/webhooks/python.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
key=$( { "$python" --version; cat "$here/requirements.txt"; } | sha256sum | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/control-plane-webhooks
venv=$cache/venv-$key
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
  "$venv/bin/pip" check >&2
  touch "$venv/.complete"
fi
echo "$venv/bin/python"
