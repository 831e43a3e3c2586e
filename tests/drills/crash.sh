#!/usr/bin/env bash
# Issue #14's crash drill: keyed POST runner-commands in flight, the server SIGKILLed once per
# round, restarted, every key retried with its body until answered, then the commands counted
# per key. Runs on Postgres + Redis and on the embedded default (SQLite, no Redis). Loopback
# only; stops by itself. Figures go to RELIABILITY.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PG=${DRILL_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
REDIS=${DRILL_REDIS_URL:-redis://127.0.0.1:6379}
DB=cp_drill_crash
cargo build --release -p control-plane --bin control-plane --example crash_drill
T=${CARGO_TARGET_DIR:-target}/release
export SERVER_BIN=$T/control-plane
# Fixed keys: a restarted server must read what the killed one hashed and encrypted.
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

echo "== Postgres + Redis"
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
DATABASE_URL=$PG/$DB REDIS_URL=$REDIS CP_REDIS_PREFIX="crash-$$:" PORT=18091 \
  timeout 900 $T/examples/crash_drill
redis-cli -u "$REDIS" --scan --pattern "crash-$$:*" | xargs -r redis-cli -u "$REDIS" del >/dev/null || true

echo "== embedded (SQLite, no Redis)"
DATABASE_URL="sqlite://$DIR/cp.db" PORT=18092 timeout 900 $T/examples/crash_drill
