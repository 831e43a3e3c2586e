# shellcheck shell=bash
# Shared by tests/console/run.sh and tests/bench/console-weight.sh (sourced): finds the
# binaries, Chromium and playwright-core, bootstraps an SQLite store in a temporary folder and
# starts a release server on 127.0.0.1 at a port the kernel picks.
#
#   CP_CONSOLE_BIN_DIR or DRILL_BIN_DIR  folder holding control-plane and cpctl
#                                        (default: target/ci of this tree)
#   CONSOLE_CHROMIUM                     the browser (default /usr/bin/chromium, Debian's)
#   CONSOLE_DEV=1                        run the server with --dev (cookie cp_console without
#                                        Secure) instead of the production cookie
#   KEEP=1                               keep the temporary folder (server log, store)
#
# After console_start: CONSOLE_URL, CONSOLE_ORG, CONSOLE_WS, CONSOLE_USER, CONSOLE_TOKEN (the
# bootstrap's operator, every scope), CONSOLE_CHROMIUM, CONSOLE_DIR are exported.
set -euo pipefail
CONSOLE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CONSOLE_HERE=$CONSOLE_ROOT/tests/console
CONSOLE_BIN=${CP_CONSOLE_BIN_DIR:-${DRILL_BIN_DIR:-$CONSOLE_ROOT/target/ci}}
CONSOLE_CHROMIUM=${CONSOLE_CHROMIUM:-/usr/bin/chromium}
CONSOLE_PID=
CONSOLE_DIR=

console_preflight() {
  local f
  for f in control-plane cpctl; do
    if [ ! -x "$CONSOLE_BIN/$f" ]; then
      echo "no $CONSOLE_BIN/$f: build it first" >&2
      echo "  (cd $CONSOLE_ROOT && flock /tmp/cargo.lock cargo build --profile ci -p control-plane -p cpctl --bins)" >&2
      echo "  or name the folder holding control-plane and cpctl in CP_CONSOLE_BIN_DIR (or DRILL_BIN_DIR)" >&2
      return 1
    fi
  done
  if [ ! -x "$CONSOLE_CHROMIUM" ]; then
    echo "no Chromium at $CONSOLE_CHROMIUM; install Debian's:" >&2
    echo "  apt-get update && apt-get install -y chromium" >&2
    echo "(a browser download of the test tool's own is not used: never run 'playwright install')" >&2
    return 1
  fi
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "node and npm are needed (node 20 or later): apt-get install -y nodejs npm" >&2
    return 1
  fi
  # playwright-core, exactly the version in package-lock.json, with no browser download.
  local want have
  want=$(node -e 'console.log(require(process.argv[1]).packages["node_modules/playwright-core"].version)' "$CONSOLE_HERE/package-lock.json")
  have=$(node -e 'try { console.log(require(process.argv[1]).version) } catch { console.log("") }' \
    "$CONSOLE_HERE/node_modules/playwright-core/package.json")
  if [ "$have" != "$want" ]; then
    echo "installing playwright-core $want (npm ci)..." >&2
    (cd "$CONSOLE_HERE" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund >&2)
  fi
  export CONSOLE_CHROMIUM
}

console_stop() {
  if [ -n "$CONSOLE_PID" ]; then
    kill "$CONSOLE_PID" 2>/dev/null || true
    wait "$CONSOLE_PID" 2>/dev/null || true
    CONSOLE_PID=
  fi
  if [ -n "$CONSOLE_DIR" ]; then
    if [ -n "${KEEP:-}" ]; then echo "server log and store kept in $CONSOLE_DIR" >&2; else rm -rf "$CONSOLE_DIR"; fi
    CONSOLE_DIR=
  fi
}

# console_start [ENV=VALUE ...]: bootstraps and starts the server, with the given extra
# environment, and waits (at most 20 s) until /readyz answers.
console_start() {
  CONSOLE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cp-console.XXXXXX")
  local store=(env DATABASE_URL="sqlite://$CONSOLE_DIR/cp.db" CP_DATA_DIR="$CONSOLE_DIR")
  CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
  CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
  export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS
  local boot
  boot=$("${store[@]}" "$CONSOLE_BIN/cpctl" bootstrap --org console --workspace main --admin admin@console.test -o json)
  read -r CONSOLE_ORG CONSOLE_WS CONSOLE_USER CONSOLE_TOKEN < <(python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["organisationId"], d["workspaceId"], d["userId"], d["credential"]["token"])' <<<"$boot")
  local dev=()
  [ -z "${CONSOLE_DEV:-}" ] || dev=(--dev)
  "${store[@]}" "$@" "$CONSOLE_BIN/control-plane" --listen 127.0.0.1:0 --log-format json "${dev[@]}" \
    > "$CONSOLE_DIR/server.log" 2>&1 &
  CONSOLE_PID=$!
  local port= _
  for _ in $(seq 1 100); do
    kill -0 "$CONSOLE_PID" 2>/dev/null || break
    port=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        fields = json.loads(line).get("fields", {})
    except ValueError:
        continue
    if fields.get("message") == "listening":
        print(fields["port"]); break' "$CONSOLE_DIR/server.log")
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    port=
    sleep 0.2
  done
  if [ -z "$port" ]; then
    echo "the server did not start:" >&2; tail -5 "$CONSOLE_DIR/server.log" >&2; return 1
  fi
  export CONSOLE_URL=http://127.0.0.1:$port CONSOLE_ORG CONSOLE_WS CONSOLE_USER CONSOLE_TOKEN CONSOLE_DIR
  echo "server $CONSOLE_BIN/control-plane on $CONSOLE_URL (store $CONSOLE_DIR/cp.db${CONSOLE_DEV:+, --dev})" >&2
}
