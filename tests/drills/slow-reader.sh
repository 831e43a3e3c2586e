#!/usr/bin/env bash
# The slow-reader drill (issue #56): a server on the embedded store (loopback, --dev tenant,
# replay pages of 5 events); a member user whose token reads the workspace's audit stream from
# `after=0` through several readers, one that keeps up and some that stay far behind (an 8 KB
# receive window draining at 80 KB/s or 1 MB/s, one that stalls); DRILL_EVENTS events before,
# `cpctl users disable` mid-replay, DRILL_AFTER events after. tests/drills/slow_reader.py reports
# per reader the time to its end, the events received, those committed after the cut-off
# (criterion: 0) and whether it ended within the re-check interval plus what its socket held.
# Exits non-zero naming each failed criterion. Stops by itself. Figures go to RELIABILITY.md.
#
#   [DRILL_EVENTS=20000] [DRILL_AFTER=100] [DRILL_READERS=fast,window-8k-80kBps,...]
#   [DRILL_CUT_AT=2] tests/drills/slow-reader.sh
#
# DRILL_BIN_DIR: take control-plane and cpctl from there and build nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  BIN=$DRILL_BIN_DIR
else
  cargo build --release -p control-plane -p cpctl --bins
  BIN=${CARGO_TARGET_DIR:-target}/release
fi
PORT=${DRILL_PORT:-18450}
DIR=$(mktemp -d)
SERVER_PID=
WATCHDOG=
cleanup() {
  [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true
  [ -z "$WATCHDOG" ] || kill "$WATCHDOG" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
# XDG_CONFIG_HOME: --dev keeps its token as cpctl's context `dev` there, not in the caller's home.
env -u DATABASE_URL -u REDIS_URL XDG_CONFIG_HOME="$DIR" "$BIN/control-plane" --dev --data-dir "$DIR/data" \
  --listen "127.0.0.1:$PORT" --log-format json --audit-stream-replay-page 5 \
  --rate-limit off --user-rate-limit off --org-rate-limit off \
  > "$DIR/server.out" 2>&1 &
SERVER_PID=$!
# The server stops by itself even if this script is killed before its trap runs.
( sleep 240; kill "$SERVER_PID" 2>/dev/null ) >/dev/null 2>&1 &
WATCHDOG=$!
for _ in $(seq 1 150); do
  grep -q '"listening"' "$DIR/server.out" 2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$DIR/server.out" >&2; exit 1; }
  sleep 0.2
done
read -r ORG WORKSPACE < <(sed -n 's/^--dev: organisation \([^ ]*\) workspace \([^ ]*\) .*/\1 \2/p' "$DIR/server.out")
read -r ADMIN_TOKEN < <(sed -n 's/^token (shown once): //p' "$DIR/server.out")
[ -n "$WORKSPACE" ] && [ -n "$ADMIN_TOKEN" ] || { echo "no --dev tenant in the server's output" >&2; exit 1; }
# Users, tokens and the pool over HTTP to this server, as the --dev admin (its token goes
# through the environment, not argv).
export CPCTL_SERVER=http://127.0.0.1:$PORT CPCTL_TOKEN=$ADMIN_TOKEN
cpctl() { "$BIN/cpctl" -o json "$@"; }
USER_ID=$(cpctl users create --org "$ORG" "reader-$$@example.com" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
READER_TOKEN=$(cpctl tokens issue --user "$USER_ID" --name slow-reader --scope audit:read \
  --workspace "$WORKSPACE" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
POOL=$(cpctl pools create --workspace "$WORKSPACE" drill | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
status=0
# DISABLE runs with this environment (CPCTL_SERVER, CPCTL_TOKEN): over HTTP, as the admin.
SERVER=127.0.0.1:$PORT ADMIN_TOKEN=$ADMIN_TOKEN READER_TOKEN=$READER_TOKEN WORKSPACE=$WORKSPACE \
  POOL=$POOL DISABLE="$BIN/cpctl users disable $USER_ID" \
  timeout 200 python3 tests/drills/slow_reader.py || status=$?
panics=$(grep -c '"panic' "$DIR/server.out" || true)
echo "panics in the server log: $panics"
if [ "$panics" -ne 0 ]; then echo "FAILED: the server panicked" >&2; status=1; fi
exit "$status"
