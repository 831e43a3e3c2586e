#!/usr/bin/env bash
# Issue #13's abuse drill: a release server on loopback (Postgres + Redis) with its default
# limits, then server/examples/abuse_drill.rs runs each attack for DRILL_SECS (default 10) while a
# good client and a runner keep working. Stops by itself; exits non-zero when the good client or
# the runner was refused or the server answered a 5xx. Figures go to RELIABILITY.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PG=${DRILL_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
REDIS=${DRILL_REDIS_URL:-redis://127.0.0.1:6379}
DB=cp_drill_abuse
PORT=${DRILL_PORT:-18090}
BIN=target/release
cargo build --release -p control-plane --bin control-plane --example abuse_drill
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL=$PG/$DB SERVER=http://127.0.0.1:$PORT REDIS_URL=$REDIS
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY
LOG=$(mktemp)
ulimit -n 20000
# Every limit at its default except the idempotency quota, lowered (16 MiB) so the drill reaches it.
$BIN/control-plane --listen "127.0.0.1:$PORT" --redis-url "$REDIS" \
  --redis-prefix "drill-$$:" --idempotency-quota-bytes 16777216 --log-format json > "$LOG" 2>&1 &
SERVER_PID=$!
export SERVER_PID
# The server stops by itself even if this script is killed before its trap runs.
( sleep $(( ${DRILL_SECS:-10} * 10 + 180 )); kill "$SERVER_PID" 2>/dev/null ) &
WATCHDOG=$!
cleanup() {
  kill "$SERVER_PID" "$WATCHDOG" 2>/dev/null || true
  redis-cli -u "$REDIS" --scan --pattern "drill-$$:*" | xargs -r redis-cli -u "$REDIS" del >/dev/null || true
  rm -f "$LOG"
}
trap cleanup EXIT
for _ in $(seq 1 100); do curl -sf "$SERVER/readyz" >/dev/null && break; sleep 0.2; done
timeout $(( ${DRILL_SECS:-10} * 10 + 60 ))s $BIN/examples/abuse_drill
echo "panics in the server log: $(grep -c '"panic' "$LOG" || true)"
