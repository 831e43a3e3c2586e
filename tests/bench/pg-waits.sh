#!/usr/bin/env bash
# Samples what the busy backends of the benchmark's databases are doing, about every 50 ms
# (plus psql's start-up), for at most SECS seconds: one line per backend,
# `HH:MM:SS.mmm|wait_event_type:wait_event:state:query…`. Run it beside
# delivery_bench, whose `phase … at HH:MM:SS.mmm` lines (stderr) say what was running when.
#
#   tests/bench/pg-waits.sh [SECS] [DATABASE LIKE-pattern] > waits.txt &
set -euo pipefail
SECS=${1:-60}
LIKE=${2:-cp_delivery_bench%}
PG=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
end=$((SECONDS + SECS))
while [ $SECONDS -lt $end ]; do
  psql -qAt "$PG/postgres" -v like="$LIKE" <<'SQL'
SELECT to_char(clock_timestamp(), 'HH24:MI:SS.MS') || '|' || coalesce(wait_event_type, 'CPU')
       || ':' || coalesce(wait_event, '-') || ':' || state || ':'
       || left(regexp_replace(query, '\s+', ' ', 'g'), 60)
FROM pg_stat_activity WHERE datname LIKE :'like' AND state <> 'idle';
SQL
  sleep 0.05
done
