#!/usr/bin/env bash
# Foundation benchmarks: token issuance and GET activity through the server, side by side with
# two floors measured in the same run: a bare poem handler, and pgbench running the same SQL.
#
#   tests/bench/run.sh [seconds]        (default 15; needs wrk, pgbench, release binaries)
#
# Postgres at 127.0.0.1:5432 (user postgres). Prints a Markdown table for BENCHMARKS.md.
SECS=${1:-15}
source "$(dirname "$0")/lib.sh"

# Limits off: this measures the foundation alone (tests/bench/fast-state.sh measures them).
start_server 18080 CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off
$BIN/examples/bare 127.0.0.1:18090 > /dev/null 2>&1 &
PIDS+=($!)

echo "warm-up..." >&2
wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua http://127.0.0.1:18080 >/dev/null
echo "bare poem handler..." >&2
wrk_run http://127.0.0.1:18090/ > "$OUT/bare.txt"
echo "GET activity..." >&2
wrk_run -s $HERE/activity.lua http://127.0.0.1:18080 > "$OUT/activity.txt"
echo "pgbench activity SQL..." >&2
pg_run pg_activity -D public_id="$(cut -d_ -f2 <<<"$TOKEN0")" -D ws="$WS" -f "$PWD/$HERE/pgbench-activity.sql"
echo "token issuance..." >&2
wrk_run -s $HERE/issue.lua http://127.0.0.1:18080 > "$OUT/issue.txt"
curl -s http://127.0.0.1:18080/metrics | grep '^http_requests_total' > "$OUT/metrics.txt"
echo "pgbench issuance SQL..." >&2
pg_run pg_issue -D org="$ORG" -D ws="$WS" -f "$PWD/$HERE/pgbench-issue.sql"

summarise "bare poem handler (floor):bare:wrk" "GET activity:activity:wrk" \
  "pgbench: activity SQL (floor):pg_activity:pg" "POST personal-access-tokens:issue:wrk" \
  "pgbench: issuance SQL (floor):pg_issue:pg"
echo
echo "GET activity / its pgbench floor: $(ratio activity pg_activity)"
echo "issuance / its pgbench floor: $(ratio issue pg_issue)"
echo
echo "server responses by operation and status:"
sed 's/^/    /' "$OUT/metrics.txt"
