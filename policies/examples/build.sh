#!/usr/bin/env bash
# Builds the example policies (the default authorizer and moderator ported to Python and
# JavaScript) into OUTDIR/{python,js}-{authorizer,moderator}.wasm, the hostile Python
# authorizers (python/hostile/: spin, sleep, bomb) into OUTDIR/python-hostile-*.wasm, and the
# authorizer that remembers organisations ({python,js}/remember-orgs/: isolation tests of
# per-organisation instances) into OUTDIR/{python,js}-remember-orgs.wasm, with the pinned
# tools of python/build.sh and js/build.sh (installed on first use under
# ${CP_POLICY_TOOLS:-~/.cache/cp-policy-tools}).
#
#   policies/examples/build.sh OUTDIR            both languages
#   policies/examples/build.sh OUTDIR python     one
set -euo pipefail

usage() { echo "usage: $0 OUTDIR [python|js]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
case "${2:-all}" in python) langs=(python) ;; js) langs=(js) ;; all) langs=(python js) ;; *) usage ;; esac

examples=$(cd "$(dirname "$0")" && pwd -P)
wit=$(cd "$examples/../wit" && pwd -P)
mkdir -p "$1"
outdir=$(cd "$1" && pwd -P)

for lang in "${langs[@]}"; do
  for world in authorizer moderator; do
    start=$SECONDS
    "$examples/$lang/build.sh" -w "$world" -s "$examples/$lang/$world" -d "$wit" \
      -o "$outdir/$lang-$world.wasm" >/dev/null
    size=$(wc -c <"$outdir/$lang-$world.wasm")
    echo "$lang-$world.wasm: $((size / 1024)) KiB in $((SECONDS - start)) s"
  done
  if [ "$lang" = python ]; then
    for hostile in spin sleep bomb; do
      "$examples/python/build.sh" -w authorizer -s "$examples/python/hostile/$hostile" -d "$wit" \
        -o "$outdir/python-hostile-$hostile.wasm" >/dev/null
    done
    echo "python-hostile-{spin,sleep,bomb}.wasm"
  fi
  "$examples/$lang/build.sh" -w authorizer -s "$examples/$lang/remember-orgs" -d "$wit" \
    -o "$outdir/$lang-remember-orgs.wasm" >/dev/null
  echo "$lang-remember-orgs.wasm"
done
