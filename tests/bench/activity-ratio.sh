#!/usr/bin/env bash
# GET activity against its pgbench floor, alternated ROUNDS times so that machine noise (this
# runs on shared virtual cores) shows as a spread instead of hiding in a single ratio.
#
#   tests/bench/activity-ratio.sh [rounds] [seconds]     (defaults 5 and 10)
#
# A round with an answer outside 2xx, a socket error or a failed transaction, or in which the
# server beats its floor, stops the script with a non-zero exit (lib.sh's `figures`).
SECS=${2:-10}
ROUNDS=${1:-5}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

# Postgres and Redis, as the server runs in production; BENCH_REDIS_URL names another Redis.
start_server 18080 REDIS_URL="${BENCH_REDIS_URL:-redis://127.0.0.1:6379}" CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off
wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua http://127.0.0.1:18080 >/dev/null
PUBLIC_ID=$(cut -d_ -f2 <<<"$TOKEN0")
for r in $(seq 1 "$ROUNDS"); do
  wrk_run -s $HERE/activity.lua http://127.0.0.1:18080 > "$OUT/activity.txt"
  pg_run pg_activity -D public_id="$PUBLIC_ID" -D ws="$WS" -f "$PWD/$HERE/pgbench-activity.sql"
  figures check "GET activity (round $r):activity:wrk" "pgbench: activity SQL (floor, round $r):pg_activity:pg"
  rm -f "$OUT"/pg_activity.[0-9]*
  r_=$(ratio activity pg_activity)
  awk -v r="$r" -v ratio="$r_" '{ v[$1] = $2 } END { printf "round %d: GET activity %.0f req/s, floor %.0f tps, ratio %s\n", r, v["activity"], v["pg_activity"], ratio }' "$OUT/rates.txt"
done | tee "$OUT/rounds.txt"
awk '{print $NF}' "$OUT/rounds.txt" | sort -n | awk '{v[NR]=$1} END {printf "median ratio: %.2f (min %.2f, max %.2f)\n", v[int((NR+1)/2)], v[1], v[NR]}'
