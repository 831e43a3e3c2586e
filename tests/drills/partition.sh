#!/usr/bin/env bash
# The partition drill: a release server on Postgres + Redis, its Postgres reached through a TCP
# proxy that tests/drills/partition.py runs and controls. Under load (keyed and unkeyed token
# issuance, activity reads) the proxy first stalls every connection (bytes held, nothing
# closed), then heals, then strands the connections open at that moment for good while new ones
# pass. The criteria are printed first; the script exits non-zero with a `FAILED criterion N`
# line for each broken one. Loopback only; stops by itself. Figures go to RELIABILITY.md.
#
#   [STALL_SECS=8] [STRAND_SECS=30] tests/drills/partition.sh
#
# DRILL_BIN_DIR: take control-plane and cpctl from there and build nothing (CI passes its
# release build). KEEP=1 keeps the server's log. DRILL_SERVER_ENV="K=V ..." changes the
# server's settings behind the drill's back, to see it fail (RELIABILITY.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PG=${DRILL_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
REDIS=${DRILL_REDIS_URL:-redis://127.0.0.1:6379}
DB=cp_drill_partition
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  BIN=$DRILL_BIN_DIR
else
  cargo build --release -p control-plane -p cpctl --bins
  BIN=${CARGO_TARGET_DIR:-target}/release
fi
DIR=$(mktemp -d)
PREFIX="partition-$$:"
cleanup() {
  redis-cli -u "$REDIS" --scan --pattern "$PREFIX*" | xargs -r redis-cli -u "$REDIS" del >/dev/null || true
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" || true
  if [ -n "${KEEP:-}" ]; then echo "server log kept in $DIR" >&2; else rm -rf "$DIR"; fi
}
trap cleanup EXIT

psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
CP_KEY_ENCRYPTION_KEY=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS CP_KEY_ENCRYPTION_KEY CP_DATA_DIR=$DIR/data
export DATABASE_URL=$PG/$DB
boot=$("$BIN/cpctl" bootstrap --org drill --workspace main --admin admin@drill.test -o json)
read -r ORG WS TOKEN < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["organisationId"], d["workspaceId"], d["credential"]["token"])' <<<"$boot")
PROXY_PORT=${DRILL_PROXY_PORT:-18095}
HOSTPORT=${PG#*@}
export ORG WS TOKEN PROXY_PORT
export SERVER_BIN=$BIN/control-plane PORT=${DRILL_PORT:-18094} PG_TARGET=$HOSTPORT
export SERVER_DATABASE_URL=${PG%@*}@127.0.0.1:$PROXY_PORT/$DB SERVER_LOG=$DIR/server.log
export REDIS_URL=$REDIS CP_REDIS_PREFIX=$PREFIX
export CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off
export CP_MAX_ACTIVE_TOKENS_PER_USER=1000000
status=0
timeout $(( ${STRAND_SECS:-30} + ${STALL_SECS:-8} + 240 )) python3 tests/drills/partition.py || status=$?
panics=$(grep -c '"panic' "$DIR/server.log" || true)
echo "panics in the server log: $panics"
if [ "$panics" -ne 0 ]; then echo "FAILED: the server panicked" >&2; status=1; fi
exit "$status"
