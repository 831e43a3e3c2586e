#!/usr/bin/env bash
# Builds a Python policy (app.py) into a WebAssembly component with a pinned componentize-py,
# installed on first use into a venv under ${CP_POLICY_TOOLS:-~/.cache/cp-policy-tools}.
#
#   ./build.sh                      app.py beside this script -> policy.wasm, wit/ beside it
#   ./build.sh -w moderator -s SRC -d WIT -o OUT.wasm
#
# The world is the one app.py implements (authorize -> authorizer, moderate -> moderator)
# unless -w names it. Needs python3 (3.10 or newer) with venv.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1

usage() { echo "usage: $0 [-w authorizer|moderator] [-s SRC_DIR] [-d WIT_DIR] [-o OUT.wasm]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd -P)
world= src=$here wit= out=
while getopts "w:s:d:o:" opt; do
  case $opt in
    w) world=$OPTARG ;; s) src=$OPTARG ;; d) wit=$OPTARG ;; o) out=$OPTARG ;; *) usage ;;
  esac
done
[ $OPTIND -gt $# ] || usage
src=$(cd "$src" && pwd -P)
wit=${wit:-$src/wit}
out=${out:-$src/policy.wasm}
[ -f "$src/app.py" ] || { echo "no app.py in $src" >&2; exit 2; }
if [ -z "$world" ]; then
  if grep -q 'def authorize' "$src/app.py"; then world=authorizer
  elif grep -q 'def moderate' "$src/app.py"; then world=moderator
  else echo "app.py defines neither authorize nor moderate; pass -w" >&2; exit 2; fi
fi

tools=${CP_POLICY_TOOLS:-$HOME/.cache/cp-policy-tools}
venv=$tools/componentize-py-$COMPONENTIZE_PY_VERSION
# The marker is written last, so an interrupted install is redone rather than trusted.
if [ ! -f "$venv/.installed" ]; then
  echo "installing componentize-py==$COMPONENTIZE_PY_VERSION into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION"
  touch "$venv/.installed"
fi

mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd -P)/$(basename "$out")
# componentize-py writes its generated bindings beside nothing of ours: run it in a scratch dir.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && "$venv/bin/componentize-py" -d "$wit" -w "$world" componentize app -p "$src" -o "$out" >/dev/null)
echo "$out ($world, componentize-py $COMPONENTIZE_PY_VERSION)"
