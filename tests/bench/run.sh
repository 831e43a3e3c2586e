#!/usr/bin/env bash
# Foundation benchmarks: token issuance and GET activity through the server, side by side with
# floors measured in the same run: a bare poem handler, pgbench running the activity SQL, and
# pgbench running the least an issuance must do (tests/bench/pgbench-issue-floor.sql).
#
#   tests/bench/run.sh [seconds]        (default 15; needs wrk, pgbench, release binaries)
#
# Postgres at 127.0.0.1:5432 (user postgres). Prints a Markdown table for BENCHMARKS.md, or
# nothing and exits non-zero if a run had an answer outside 2xx, a socket error or a failed
# transaction, or if the server beat a floor (lib.sh's `figures`).
SECS=${1:-15}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
ensure_built examples/bare

# Limits off: this measures the foundation alone (tests/bench/fast-state.sh measures them).
start_server 18080 CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off
port_free 18090
$BIN/examples/bare 127.0.0.1:18090 > /dev/null 2>&1 &
PIDS+=($!)

echo "warm-up..." >&2
wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua http://127.0.0.1:18080 >/dev/null
echo "bare poem handler..." >&2
wrk_run -s $HERE/count.lua http://127.0.0.1:18090/ > "$OUT/bare.txt"
echo "GET activity..." >&2
wrk_run -s $HERE/activity.lua http://127.0.0.1:18080 > "$OUT/activity.txt"
echo "pgbench activity SQL..." >&2
pg_run pg_activity -D public_id="$(cut -d_ -f2 <<<"$TOKEN0")" -D ws="$WS" -f "$PWD/$HERE/pgbench-activity.sql"
echo "token issuance..." >&2
wrk_run -s $HERE/issue.lua http://127.0.0.1:18080 > "$OUT/issue.txt"
curl -s http://127.0.0.1:18080/metrics | grep '^http_requests_total' > "$OUT/metrics.txt"
# The issuance floor runs with no server up: a server's sequencer would number its events.
stop_servers
echo "pgbench issuance floor SQL (no server up)..." >&2
pg_run pg_issue -D ws="$WS" -f "$PWD/$HERE/pgbench-issue-floor.sql"
delete_floor_rows

ROWS=("bare poem handler (floor):bare:wrk" "GET activity:activity:wrk"
  "pgbench: activity SQL (floor):pg_activity:pg" "POST personal-access-tokens:issue:wrk"
  "pgbench: issuance floor SQL (floor):pg_issue:pg")
# Every run checked and every ratio to a floor taken before anything is printed: a refusal
# leaves no table behind.
figures check "${ROWS[@]}"
ACTIVITY=$(ratio activity pg_activity)
ISSUE=$(ratio issue pg_issue)
summarise "${ROWS[@]}"
echo
echo "GET activity / its pgbench floor: $ACTIVITY"
echo "issuance / its pgbench floor: $ISSUE"
echo
echo "server responses by operation and status:"
sed 's/^/    /' "$OUT/metrics.txt"
