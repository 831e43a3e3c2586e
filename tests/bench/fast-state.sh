#!/usr/bin/env bash
# Idempotency and rate limits: each request kind against a server with them on
# (Redis at 127.0.0.1:6379) and one with them off, in one run, plus the pgbench floor of an
# issuance (tests/bench/pgbench-issue-floor.sql, run last with no server up) and the Redis
# round trips per request (from INFO commandstats).
#
#   tests/bench/fast-state.sh [seconds]     (default 15)
#
# Prints nothing and exits non-zero if a run had an answer outside 2xx, a socket error or a
# failed transaction, or if issuance beat its floor (lib.sh's `figures`).
SECS=${1:-15}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
REDIS=${BENCH_REDIS_URL:-redis://127.0.0.1:6379}
HIGH=100000000/m   # limits that are checked on every request but never reached

start_server 18081 REDIS_URL="$REDIS" CP_REDIS_PREFIX=bench: CP_RATE_LIMIT=$HIGH CP_ISSUE_RATE_LIMIT=$HIGH CP_USER_RATE_LIMIT=$HIGH CP_ORG_RATE_LIMIT=$HIGH CP_RUNNER_ADDRESS_RATE_LIMIT=$HIGH CP_RUNNER_RATE_LIMIT=$HIGH
start_server 18082 REDIS_URL="$REDIS" CP_REDIS_PREFIX=bench: CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off
ON=http://127.0.0.1:18081
OFF=http://127.0.0.1:18082

calls() { redis-cli -u "$REDIS" INFO commandstats | awk -F'[=,:]' '/^cmdstat_(evalsha|eval|del)[:]/ { n += $3 } END { print n + 0 }'; }
requests() { awk '/requests in/ { print $1 }' "$OUT/$1.txt"; }
per_request() { # name calls-before calls-after
  awk -v c=$(( $3 - $2 )) -v r="$(requests "$1")" 'BEGIN { printf "%.2f", c / r }'
}

echo "warm-up..." >&2
wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua $ON >/dev/null
wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua $OFF >/dev/null

echo "GET activity, limits off / on..." >&2
wrk_run -s $HERE/activity.lua $OFF > "$OUT/get_off.txt"
c0=$(calls); wrk_run -s $HERE/activity.lua $ON > "$OUT/get_on.txt"; c1=$(calls)
# Issuance slows as its tables grow and checkpoints start, so whichever variant ran first would
# win: ABBA order (off, on, on, off), half the duration each, compared as sums.
HALF=$(( (SECS + 1) / 2 ))
issue_run() { SECS=$HALF wrk_run -s $HERE/issue.lua "$@"; }
echo "issuance without key, limits off (A)..." >&2
issue_run $OFF > "$OUT/issue_off1.txt"
echo "issuance with a fresh key per request, limits on (B, B)..." >&2
c2=$(calls)
BENCH_IDEMPOTENCY=fresh issue_run $ON > "$OUT/issue_on1.txt"
BENCH_IDEMPOTENCY=fresh issue_run $ON > "$OUT/issue_on2.txt"
c3=$(calls)
echo "issuance without key, limits off (A)..." >&2
issue_run $OFF > "$OUT/issue_off2.txt"
echo "replays of one key..." >&2
# The key's first request completes alone first: replays of a key whose request is still
# running are answered 409 (idempotency_in_progress), which would disqualify the run.
BENCH_IDEMPOTENCY=replay wrk -t1 -c1 -d1s -s $HERE/issue.lua $ON > /dev/null
c4=$(calls); BENCH_IDEMPOTENCY=replay wrk_run -s $HERE/issue.lua $ON > "$OUT/replay.txt"; c5=$(calls)
curl -s $ON/metrics | grep "^http_requests_total" > "$OUT/metrics.txt"
# The floor runs with no server up: a server's sequencer would number its events.
stop_servers
echo "pgbench issuance floor SQL (no server up)..." >&2
pg_run pg_issue -D ws="$WS" -f "$PWD/$HERE/pgbench-issue-floor.sql"
delete_floor_rows
redis-cli -u "$REDIS" --scan --pattern 'bench:*' | xargs -r -n 500 redis-cli -u "$REDIS" DEL > /dev/null

ROWS=("GET activity, no limits:get_off:wrk" "GET activity, limits:get_on:wrk"
  "issuance, no key, no limits (A1):issue_off1:wrk" "issuance, fresh key, limits (B1):issue_on1:wrk"
  "issuance, fresh key, limits (B2):issue_on2:wrk" "issuance, no key, no limits (A2):issue_off2:wrk"
  "replay of one key, limits:replay:wrk" "pgbench: issuance floor SQL (floor):pg_issue:pg")
# Every run checked and every ratio to the floor taken before anything is printed: a refusal
# leaves no table behind.
figures check "${ROWS[@]}"
KEYED_FLOOR=$(ratio issue_on1+issue_on2 pg_issue+pg_issue)
UNKEYED_FLOOR=$(ratio issue_off1+issue_off2 pg_issue+pg_issue)
summarise "${ROWS[@]}"
echo
keyed=$(( $(requests issue_on1) + $(requests issue_on2) ))
echo "Redis commands per request: GET with limits $(per_request get_on "$c0" "$c1"), keyed issuance $(awk -v c=$(( c3 - c2 )) -v r=$keyed 'BEGIN { printf "%.2f", c / r }'), replay $(per_request replay "$c4" "$c5")"
say_ratio "issuance with key / without (B1+B2)/(A1+A2)" issue_on1+issue_on2 issue_off1+issue_off2
echo "issuance with key / its pgbench floor (B1+B2)/(2 floor): $KEYED_FLOOR"
echo "issuance without key / its pgbench floor (A1+A2)/(2 floor): $UNKEYED_FLOOR"
say_ratio "GET with limits / without" get_on get_off
sed "s/^/    /" "$OUT/metrics.txt"
