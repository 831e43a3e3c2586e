#!/usr/bin/env bash
# Where one-workspace issuance spends its CPU, next to the floor of sequencing.sh: each
# process kind's CPU (from /proc, over the middle of the run) in cores and in microseconds per
# request, and, when Postgres preloads pg_stat_statements, the statements by execution time.
#
#   tests/bench/cpu-split.sh [seconds]        (default 10; needs wrk, pgbench, Postgres)
#   PERF=perf.data tests/bench/cpu-split.sh   also records the server with `perf record`
#   LOAD=reports tests/bench/cpu-split.sh     signed runner reports (ops_load) instead
#   LOAD=activity tests/bench/cpu-split.sh    GET activity with Redis, next to its floor
#                                             (activity-ratio.sh's two runs)
#
# pg_stat_statements needs `shared_preload_libraries = 'pg_stat_statements'` and a restart;
# without it the statement table is skipped. A run with an answer outside 2xx, a socket error
# or a failed transaction or report stops the script with a non-zero exit (lib.sh's `figures`).
SECS=${1:-10}
LOAD=${LOAD:-issuance}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ "$LOAD" = issuance ] || ensure_built examples/ops_load
HZ=$(getconf CLK_TCK)

# CPU ticks of each process of the kinds measured: "pid kind ticks", sorted by pid. One read
# of /proc, not a fork per process: under load a loop of forks took seconds, and backends that
# ended in between went uncounted.
ticks() {
  cat /proc/[0-9]*/stat 2>/dev/null \
    | awk '{c = $2; gsub(/[()]/, "", c)} c ~ /^(postgres|control-plane|wrk|pgbench|ops_load)$/ {print $1, c, $14 + $15}' \
    | sort -k1,1
}
# sample NAME: cores used by each kind between 2 s into the run and 2 s before its end,
# counting the processes alive at both ends (a backend that exits in between is left out).
sample() {
  local window=$((SECS - 4)) a b
  sleep 2; a=$(ticks); sleep "$window"; b=$(ticks)
  join -o 1.2,1.3,2.3 <(echo "$a") <(echo "$b") \
    | awk -v hz="$HZ" -v s="$window" '{t[$1] += $3 - $2} END {for (k in t) printf "%s %.2f cores\n", k, t[k] / hz / s}' \
    | sort > "$OUT/cpu-$1.txt"
}
# split NAME RUN: the kinds' cores of sample NAME, and each kind's CPU per request of RUN
# (its rate as `figures check` recorded it).
split() {
  awk -v rate="$(awk -v r="$2" '$1 == r {print $2}' "$OUT/rates.txt")" \
    '{printf "%-14s %s cores, %4.0f us per request\n", $1, $2, $2 * 1e6 / rate}' "$OUT/cpu-$1.txt"
}
# record_server: with PERF set, `perf record` of the server started last, for SECS.
record_server() {
  [ -n "${PERF:-}" ] || return 0
  perf record -F 499 -g -e cpu-clock -p "${PIDS[-1]}" -o "$PERF" -- sleep "$SECS" >/dev/null 2>&1 &
  PIDS+=($!)
}
LIMITS_OFF=(CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off
  CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off)
STATEMENTS=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_stat_statements'" \
  -c "SHOW shared_preload_libraries" | tail -1 | grep -c pg_stat_statements || true)

if [ "$LOAD" = activity ]; then
  sample floor & SAMPLER=$!
  pg_run pg_activity -D public_id="$(cut -d_ -f2 <<<"$TOKEN0")" -D ws="$WS" -f "$PWD/$HERE/pgbench-activity.sql"
  wait $SAMPLER
  figures check "pgbench: activity SQL (floor):pg_activity:pg"
  echo "== floor: pgbench, activity SQL"; grep -o "tps = [0-9.]*" "$OUT/pg_activity.txt"; split floor pg_activity
  start_server 18080 REDIS_URL="${BENCH_REDIS_URL:-redis://127.0.0.1:6379}" "${LIMITS_OFF[@]}"
  wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua http://127.0.0.1:18080 >/dev/null
  record_server
  sample activity & SAMPLER=$!
  wrk_run -s $HERE/activity.lua http://127.0.0.1:18080 > "$OUT/activity.txt"; wait $SAMPLER
  figures check "GET activity:activity:wrk"
  echo "== GET activity, a 50-event page"; grep -E "Requests/sec|answers outside 2xx" "$OUT/activity.txt"; split activity activity
  exit 0
fi

sample floor & SAMPLER=$!
pg_run pg_two -D org="$ORG" -D ws="$WS" -f "$PWD/$HERE/pgbench-two-inserts.sql"; wait $SAMPLER
figures check "pgbench: two inserts (floor):pg_two:pg"
echo "== floor: pgbench, two inserts"; grep -o "tps = [0-9.]*" "$OUT/pg_two.txt"; split floor pg_two
delete_floor_rows

start_server 18080 "${LIMITS_OFF[@]}" CP_MAX_ACTIVE_TOKENS_PER_USER=1000000
wrk -t2 -c$CONNS -d3s -s $HERE/issue.lua http://127.0.0.1:18080 >/dev/null
if [ "$STATEMENTS" = 1 ]; then
  psql "$DATABASE_URL" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null
fi
record_server
if [ "$LOAD" = issuance ]; then
  sample issue & SAMPLER=$!
  wrk_run -s $HERE/issue.lua http://127.0.0.1:18080 > "$OUT/issue1.txt"; wait $SAMPLER
  figures check "POST personal-access-tokens, one workspace:issue1:wrk"
  echo "== POST personal-access-tokens, one workspace"
  grep -E "Requests/sec|answers outside 2xx" "$OUT/issue1.txt"; split issue issue1
else
  # ops_load creates its deliveries first (about a second): the sampler starts after that.
  SERVER=http://127.0.0.1:18080 $BIN/examples/ops_load signed $CONNS "$SECS" > "$OUT/reports.txt" &
  LOADER=$!
  until grep -q creating "$OUT/reports.txt" 2>/dev/null; do sleep 0.1; done; sleep 1
  sample reports & SAMPLER=$!
  wait $LOADER; wait $SAMPLER
  figures check "signed runner reports, one workspace:reports:ops"
  echo "== signed runner reports, one workspace"
  grep "signed reports:" "$OUT/reports.txt"; split reports reports
fi
if [ "$STATEMENTS" = 1 ]; then
  psql "$DATABASE_URL" -c "SELECT calls, round(total_exec_time::numeric) AS total_ms,
      round((total_exec_time / calls)::numeric, 3) AS ms_per_call,
      left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
    FROM pg_stat_statements WHERE calls > 10 ORDER BY total_exec_time DESC LIMIT 15"
fi
