#!/usr/bin/env bash
# Issue #6's figures: token issuance and GET activity on the embedded default (SQLite and
# in-process state) beside Postgres + Redis, same run, same machine, same wrk scripts.
#
#   tests/bench/embedded.sh [seconds]   (default 10; needs wrk, release binaries)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
SECS=${1:-10}
CONNS=64
PG=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
BIN=${CARGO_TARGET_DIR:-target}/release
HERE=tests/bench
OUT=$(mktemp -d)
PORT=18085
cargo build --release -p control-plane -p cpctl --bins
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS
SERVER_PID=
trap '[ -n "$SERVER_PID" ] && kill $SERVER_PID 2>/dev/null; rm -rf "$OUT"' EXIT

# run NAME DATABASE_URL [REDIS_URL]: a fresh store, 32 users with tokens, then wrk.
run() {
  local name=$1 url=$2 redis=${3:-}
  echo "== $name" >&2
  env DATABASE_URL="$url" ${redis:+REDIS_URL=$redis} CP_REDIS_PREFIX="bench-emb-$$:" \
    CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_MAX_ACTIVE_TOKENS_PER_USER=100000 \
    $BIN/control-plane --listen 127.0.0.1:$PORT --log-format json > "$OUT/$name.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.2; done
  # cpctl against the same store while the server runs.
  local boot
  boot=$(DATABASE_URL="$url" $BIN/cpctl bootstrap --org bench --workspace main --admin u0@bench.test -o json)
  read -r ORG WS TOKEN0 < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["organisationId"], d["workspaceId"], d["credential"]["token"])' <<<"$boot")
  echo "$TOKEN0" > "$OUT/tokens-$name.txt"
  for n in $(seq 1 31); do
    user=$(DATABASE_URL="$url" $BIN/cpctl users create --org "$ORG" "u$n@bench.test")
    DATABASE_URL="$url" $BIN/cpctl tokens issue --user "$user" --name bench --scope tokens:issue \
      --scope activity:read --workspace "$WS" -o json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' >> "$OUT/tokens-$name.txt"
  done
  export BENCH_ORG=$ORG BENCH_WS=$WS BENCH_TOKEN=$TOKEN0 BENCH_TOKENS=$OUT/tokens-$name.txt
  wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua "http://127.0.0.1:$PORT" > /dev/null
  wrk -t2 -c$CONNS -d"${SECS}s" --latency -s $HERE/issue.lua "http://127.0.0.1:$PORT" > "$OUT/$name-issue.txt"
  wrk -t2 -c$CONNS -d"${SECS}s" --latency -s $HERE/activity.lua "http://127.0.0.1:$PORT" > "$OUT/$name-activity.txt"
  kill $SERVER_PID; wait $SERVER_PID 2>/dev/null || true; SERVER_PID=
}

rps() { awk '/Requests\/sec/ {print $2}' "$OUT/$1.txt"; }
p99() { awk '$1 == "99%" {print $2}' "$OUT/$1.txt"; }
errors() { awk '/non-2xx/ {print $NF}' "$OUT/$1.txt" | head -1; }

psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS cp_bench_emb WITH (FORCE)" -c "CREATE DATABASE cp_bench_emb" 2>/dev/null
run postgres "$PG/cp_bench_emb" redis://127.0.0.1:6379
run embedded "sqlite://$OUT/embedded/control-plane.db"

echo
echo "| operation | Postgres + Redis req/s (p99) | embedded req/s (p99) | embedded / Postgres + Redis |"
echo "|---|---|---|---|"
for op in issue activity; do
  a=$(rps postgres-$op); b=$(rps embedded-$op)
  echo "| $op | $a ($(p99 postgres-$op)) | $b ($(p99 embedded-$op)) | $(python3 -c "print(f'{$b/$a:.2f}')") |"
done
echo
echo "non-2xx: postgres issue $(errors postgres-issue), activity $(errors postgres-activity); embedded issue $(errors embedded-issue), activity $(errors embedded-activity)"
