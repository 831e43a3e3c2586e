#!/usr/bin/env bash
# The crash drill (tests/drills/crash_drill.rs): keyed POST runner-commands in flight, the
# server SIGKILLed once per round, restarted, every key retried with its body until answered,
# then the commands and the audit log checked against the drill's criteria (it prints them
# first). Runs on Postgres + Redis and on the embedded default (SQLite, no Redis). Loopback
# only; stops by itself; exits non-zero when any criterion fails on either backend. Figures go
# to RELIABILITY.md.
#
#   [DRILL_ROUNDS=3] [DRILL_KEYS=240] tests/drills/crash.sh
#
# DRILL_BIN_DIR: take control-plane and examples/crash_drill from there and build nothing (CI
# passes its release build). SERVER_BIN: another server binary (a debug build with a fault
# switch, to see the drill fail).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PG=${DRILL_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
REDIS=${DRILL_REDIS_URL:-redis://127.0.0.1:6379}
DB=cp_drill_crash
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  T=$DRILL_BIN_DIR
else
  cargo build --release -p control-plane --bin control-plane --example crash_drill
  T=${CARGO_TARGET_DIR:-target}/release
fi
export SERVER_BIN=${SERVER_BIN:-$T/control-plane}
DRILL=$T/examples/crash_drill
# Fixed keys: a restarted server must read what the killed one hashed and encrypted.
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
status=0

echo "== Postgres + Redis"
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
DATABASE_URL=$PG/$DB REDIS_URL=$REDIS CP_REDIS_PREFIX="crash-$$:" PORT=18091 \
  timeout 900 "$DRILL" || status=$?
redis-cli -u "$REDIS" --scan --pattern "crash-$$:*" | xargs -r redis-cli -u "$REDIS" del >/dev/null || true
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"

echo "== embedded (SQLite, no Redis)"
env -u REDIS_URL DATABASE_URL="sqlite://$DIR/cp.db" PORT=18092 timeout 900 "$DRILL" || status=$?

[ "$status" -eq 0 ] || echo "crash drill: FAILED (exit $status); the lines above name each broken criterion" >&2
exit "$status"
