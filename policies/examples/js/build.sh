#!/usr/bin/env bash
# Builds a JavaScript policy (policy.js) into a WebAssembly component with a pinned
# @bytecodealliance/componentize-js, installed on first use into an npm prefix under
# ${CP_POLICY_TOOLS:-~/.cache/cp-policy-tools}. (`jco componentize` is not used: it fails to
# resolve the WIT path; the componentize-js binary of the same package works.)
#
#   ./build.sh                      policy.js beside this script -> policy.wasm, wit/ beside it
#   ./build.sh -w moderator -s SRC -d WIT -o OUT.wasm
#
# The world is the one policy.js exports (authorize -> authorizer, moderate -> moderator)
# unless -w names it. Needs node (18 or newer) and npm.
set -euo pipefail

COMPONENTIZE_JS_VERSION=0.23.0

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
[ -f "$src/policy.js" ] || { echo "no policy.js in $src" >&2; exit 2; }
if [ -z "$world" ]; then
  if grep -q 'export function authorize' "$src/policy.js"; then world=authorizer
  elif grep -q 'export function moderate' "$src/policy.js"; then world=moderator
  else echo "policy.js exports neither authorize nor moderate; pass -w" >&2; exit 2; fi
fi

tools=${CP_POLICY_TOOLS:-$HOME/.cache/cp-policy-tools}
prefix=$tools/componentize-js-$COMPONENTIZE_JS_VERSION
# The marker is written last, so an interrupted install is redone rather than trusted.
if [ ! -f "$prefix/.installed" ]; then
  echo "installing @bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION into $prefix" >&2
  rm -rf "$prefix"
  npm install --silent --no-audit --no-fund --prefix "$prefix" "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION"
  touch "$prefix/.installed"
fi

mkdir -p "$(dirname "$out")"
# A policy has no WASI capability at all (policies/wit/policy.wit): leave out the HTTP
# imports, which the server would refuse at install.
"$prefix/node_modules/.bin/componentize-js" "$src/policy.js" --wit "$wit" -n "$world" -o "$out" \
  -d http fetch-event >/dev/null
echo "$out ($world, componentize-js $COMPONENTIZE_JS_VERSION)"
