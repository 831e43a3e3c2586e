#!/usr/bin/env bash
# The slowloris drill: a release server on the embedded store (loopback, --dev tenant) under the
# usual 1,024-file limit; tests/drills/slowloris.py opens DRILL_CONNECTIONS half-open
# connections from 127.0.0.1 (half a header, then a byte every 2 s) for DRILL_SECS while a good
# client from 127.0.0.3 reads its activity five times a second. Exits non-zero naming each
# criterion that fails. Stops by itself. Figures go to RELIABILITY.md.
#
#   [DRILL_SECS=30] [DRILL_CONNECTIONS=3000] tests/drills/slowloris.sh
#
# DRILL_BIN_DIR: take control-plane from there and build nothing (CI passes its release build).
# DRILL_SERVER_ARGS: extra server flags, e.g. `--max-connections-per-address off
# --header-timeout-ms 600000` to see the drill fail without the defences.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  BIN=$DRILL_BIN_DIR
else
  cargo build --release -p control-plane --bin control-plane
  BIN=${CARGO_TARGET_DIR:-target}/release
fi
PORT=${DRILL_PORT:-18093}
DIR=$(mktemp -d)
SERVER_PID=
WATCHDOG=
cleanup() {
  [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true
  [ -z "$WATCHDOG" ] || kill "$WATCHDOG" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
# The server gets the common default file limit; the attacker, many more.
( ulimit -n 1024; exec env -u DATABASE_URL -u REDIS_URL XDG_CONFIG_HOME="$DIR" "$BIN/control-plane" --dev \
    --data-dir "$DIR/data" --listen "127.0.0.1:$PORT" --log-format json ${DRILL_SERVER_ARGS:-} ) \
  > "$DIR/server.out" 2>&1 &
SERVER_PID=$!
# The server stops by itself even if this script is killed before its trap runs.
( sleep $(( ${DRILL_SECS:-30} + 120 )); kill "$SERVER_PID" 2>/dev/null ) >/dev/null 2>&1 &
WATCHDOG=$!
for _ in $(seq 1 150); do
  grep -q '"listening"' "$DIR/server.out" 2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$DIR/server.out" >&2; exit 1; }
  sleep 0.2
done
read -r WORKSPACE < <(sed -n 's/^--dev: organisation [^ ]* workspace \([^ ]*\) .*/\1/p' "$DIR/server.out")
read -r TOKEN < <(sed -n 's/^token (shown once): //p' "$DIR/server.out")
[ -n "$WORKSPACE" ] && [ -n "$TOKEN" ] || { echo "no --dev tenant in the server's output" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)"
status=0
SERVER=127.0.0.1:$PORT SERVER_PID=$SERVER_PID TOKEN=$TOKEN WORKSPACE=$WORKSPACE \
  timeout $(( ${DRILL_SECS:-30} + 60 )) python3 tests/drills/slowloris.py || status=$?
panics=$(grep -c '"panic' "$DIR/server.out" || true)
echo "panics in the server log: $panics"
if [ "$panics" -ne 0 ]; then echo "FAILED: the server panicked" >&2; status=1; fi
exit "$status"
