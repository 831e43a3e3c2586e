#!/usr/bin/env bash
# The abuse drill: a release server on loopback (Postgres + Redis) with its default
# limits, then tests/drills/abuse_drill.rs runs each attack for DRILL_SECS (default 10; 2 or 3
# for a short form) while a good client and a runner keep working. Stops by itself. The drill
# prints its criteria first and exits non-zero naming each broken one; this script checks the
# third (no panic in the server log) and exits non-zero if it or any other broke. Figures go to
# RELIABILITY.md.
#
#   DRILL_SECS=10 bash tests/drills/abuse.sh
#   DRILL_BIN_DIR=/path/to/release DRILL_SECS=3 bash tests/drills/abuse.sh   (no build: the
#     control-plane binary and examples/abuse_drill are taken from there)
#   DRILL_POLICY_MARGIN_MS (default 50): what a request may take beyond the policy deadline.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PG=${DRILL_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
REDIS=${DRILL_REDIS_URL:-redis://127.0.0.1:6379}
DB=cp_drill_abuse
PORT=${DRILL_PORT:-18090}
SECS=${DRILL_SECS:-10}
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  BIN=$DRILL_BIN_DIR
else
  BIN=${CARGO_TARGET_DIR:-target}/release
  cargo build --release -p control-plane --bin control-plane --example abuse_drill
fi
for binary in "$BIN/control-plane" "$BIN/examples/abuse_drill"; do
  [ -x "$binary" ] || { echo "missing $binary" >&2; exit 2; }
done
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL=$PG/$DB SERVER=http://127.0.0.1:$PORT REDIS_URL=$REDIS DRILL_SECS=$SECS
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY
LOG=$(mktemp)
ulimit -n 20000
# Every limit at its default except the idempotency quota, lowered (16 MiB) so the drill reaches it.
"$BIN/control-plane" --listen "127.0.0.1:$PORT" --redis-url "$REDIS" \
  --redis-prefix "drill-$$:" --idempotency-quota-bytes 16777216 --log-format json > "$LOG" 2>&1 &
SERVER_PID=$!
export SERVER_PID
# The server stops by itself even if this script is killed before its trap runs.
( sleep $(( SECS * 10 + 180 )); kill "$SERVER_PID" 2>/dev/null ) &
WATCHDOG=$!
cleanup() {
  kill "$SERVER_PID" "$WATCHDOG" 2>/dev/null || true
  redis-cli -u "$REDIS" --scan --pattern "drill-$$:*" | xargs -r redis-cli -u "$REDIS" del >/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "server log kept in $LOG" >&2; else rm -f "$LOG"; fi
}
trap cleanup EXIT
for _ in $(seq 1 100); do curl -sf "$SERVER/readyz" >/dev/null && break; sleep 0.2; done
rc=0
timeout $(( SECS * 10 + 60 ))s "$BIN/examples/abuse_drill" || rc=$?
# The default panic hook writes "thread '…' panicked at"; a JSON log line would carry "panic".
panics=$(grep -Eci 'panicked|"panic' "$LOG" || true)
echo "panics in the server log: $panics"
if [ "$panics" -ne 0 ]; then
  echo "FAILED criterion 3 (no panic): $panics panics in the server log:"
  grep -Ei 'panicked|"panic' "$LOG" | head -5
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "abuse drill: FAILED (exit $rc); the lines above name each broken criterion"
  exit 1
fi
echo "all criteria met"
