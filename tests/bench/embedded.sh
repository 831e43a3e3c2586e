#!/usr/bin/env bash
# Figures of token issuance and GET activity on the embedded default (SQLite and
# in-process state) beside Postgres + Redis, same run, same machine, same wrk scripts.
#
#   tests/bench/embedded.sh [seconds]   (default 10; needs wrk, release binaries)
#
# Prints nothing and exits non-zero if a run had an answer outside 2xx or a socket error
# (lib.sh's `figures`).
SECS=${1:-10}
# shellcheck source=lib.sh
BENCH_SETUP=none source "$(dirname "$0")/lib.sh"
PORT=18085

# run NAME DATABASE_URL [REDIS_URL]: a fresh store, 32 users with tokens, then wrk.
run() {
  local name=$1 url=$2 redis=${3:-}
  echo "== $name" >&2
  port_free $PORT
  env DATABASE_URL="$url" ${redis:+REDIS_URL=$redis} CP_REDIS_PREFIX="bench-emb-$$:" \
    CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_MAX_ACTIVE_TOKENS_PER_USER=100000 \
    $BIN/control-plane --listen 127.0.0.1:$PORT --log-format json > "$OUT/$name.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.2; done
  # cpctl bootstraps the same store while the server runs; users and tokens go over HTTP to
  # that server as the bootstrap's operator (a BENCH_CPCTL of an older build, which opens the
  # store for them, ignores CPCTL_* and reads DATABASE_URL).
  local boot
  boot=$(DATABASE_URL="$url" $CPCTL bootstrap --org bench --workspace main --admin u0@bench.test -o json)
  read -r ORG WS TOKEN0 < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["organisationId"], d["workspaceId"], d["credential"]["token"])' <<<"$boot")
  echo "$TOKEN0" > "$OUT/tokens-$name.txt"
  for n in $(seq 1 31); do
    user=$(DATABASE_URL="$url" CPCTL_SERVER="http://127.0.0.1:$PORT" CPCTL_TOKEN="$TOKEN0" \
      $CPCTL users create --org "$ORG" "u$n@bench.test")
    DATABASE_URL="$url" CPCTL_SERVER="http://127.0.0.1:$PORT" CPCTL_TOKEN="$TOKEN0" \
      $CPCTL tokens issue --user "$user" --name bench --scope tokens:issue \
      --scope activity:read --workspace "$WS" -o json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' >> "$OUT/tokens-$name.txt"
  done
  export BENCH_ORG=$ORG BENCH_WS=$WS BENCH_TOKEN=$TOKEN0 BENCH_TOKENS=$OUT/tokens-$name.txt
  wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua "http://127.0.0.1:$PORT" > /dev/null
  wrk_run -s $HERE/issue.lua "http://127.0.0.1:$PORT" > "$OUT/$name-issue.txt"
  wrk_run -s $HERE/activity.lua "http://127.0.0.1:$PORT" > "$OUT/$name-activity.txt"
  stop_servers
}

psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS cp_bench_emb WITH (FORCE)" -c "CREATE DATABASE cp_bench_emb" 2>/dev/null
run postgres "$PG/cp_bench_emb" redis://127.0.0.1:6379
run embedded "sqlite://$OUT/embedded/control-plane.db"

figures check "Postgres + Redis, issue:postgres-issue:wrk" "Postgres + Redis, activity:postgres-activity:wrk" \
  "embedded, issue:embedded-issue:wrk" "embedded, activity:embedded-activity:wrk"
rps() { awk -v n="$1" '$1 == n {printf "%.0f", $2}' "$OUT/rates.txt"; }
p99() { awk '$1 == "99%" {print $2}' "$OUT/$1.txt"; }
echo
echo "| operation | Postgres + Redis req/s (p99) | embedded req/s (p99) | embedded / Postgres + Redis |"
echo "|---|---|---|---|"
for op in issue activity; do
  echo "| $op | $(rps postgres-$op) ($(p99 postgres-$op)) | $(rps embedded-$op) ($(p99 embedded-$op)) | $(ratio embedded-$op postgres-$op) |"
done
echo
echo "checked: no answer outside 2xx (3xx included) and no socket error in any of the four runs"
