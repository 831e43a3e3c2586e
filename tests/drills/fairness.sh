#!/usr/bin/env bash
# The fairness drill: a release server on loopback (Postgres, in-process fast state, rate
# limits off so the whole flood reaches the delivery queue, delivery flags at their defaults);
# tests/drills/fairness_drill.rs gives one organisation a runner that holds every delivery
# DRILL_SLEEP_SECS (30) and floods it with DRILL_FLOOD_RATE (100) commands a second for
# DRILL_SECS (30), while another organisation submits DRILL_VICTIM_RATE (10) a second and
# times each one to its runner. Stops by itself. The drill prints its criteria first and exits
# non-zero naming each broken one; this script checks the last (no panic in the server log).
# Figures go to RELIABILITY.md.
#
#   tests/drills/fairness.sh                       (builds the release server and the drill)
#   DRILL_SECS=6 tests/drills/fairness.sh          (short form, as CI runs it)
#   DRILL_BIN_DIR=/path/to/release: take control-plane and examples/fairness_drill from there
#   DRILL_SERVER_ARGS: extra server flags, e.g. `--delivery-per-pool 1024
#     --delivery-per-organisation 1024 --delivery-breaker-after 0` to see the drill fail
#     without the defences.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PG=${DRILL_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
DB=cp_drill_fairness
PORT=${DRILL_PORT:-18094}
SECS=${DRILL_SECS:-30}
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  BIN=$DRILL_BIN_DIR
else
  BIN=${CARGO_TARGET_DIR:-target}/release
  cargo build --release -p control-plane --bin control-plane --example fairness_drill
fi
for binary in "$BIN/control-plane" "$BIN/examples/fairness_drill"; do
  [ -x "$binary" ] || { echo "missing $binary" >&2; exit 2; }
done
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL=$PG/$DB SERVER=http://127.0.0.1:$PORT DRILL_SECS=$SECS
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY
LOG=$(mktemp)
ulimit -n "$(ulimit -Hn)"
# shellcheck disable=SC2086 # DRILL_SERVER_ARGS is a list of flags
env -u REDIS_URL "$BIN/control-plane" --listen "127.0.0.1:$PORT" --log-format json \
  --rate-limit off --user-rate-limit off --org-rate-limit off \
  --delivery-http-hosts localhost,127.0.0.1,::1 ${DRILL_SERVER_ARGS:-} \
  > "$LOG" 2>&1 &
SERVER_PID=$!
# The server stops by itself even if this script is killed before its trap runs.
( sleep $(( SECS + 120 )); kill "$SERVER_PID" 2>/dev/null ) >/dev/null 2>&1 &
WATCHDOG=$!
cleanup() {
  kill "$SERVER_PID" "$WATCHDOG" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "server log kept in $LOG" >&2; else rm -f "$LOG"; fi
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
for _ in $(seq 1 150); do curl -sf "$SERVER/readyz" >/dev/null && break; sleep 0.2; done
curl -sf "$SERVER/readyz" >/dev/null || { cat "$LOG" >&2; exit 1; }
rc=0
timeout $(( SECS + 60 ))s "$BIN/examples/fairness_drill" || rc=$?
# The default panic hook writes "thread '…' panicked at"; a JSON log line would carry "panic".
panics=$(grep -Eci 'panicked|"panic' "$LOG" || true)
echo "panics in the server log: $panics"
if [ "$panics" -ne 0 ]; then
  echo "FAILED criterion 4 (no panic): $panics panics in the server log:"
  grep -Ei 'panicked|"panic' "$LOG" | head -5
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "fairness drill: FAILED (exit $rc); the lines above name each broken criterion"
  exit 1
fi
echo "all criteria met"
