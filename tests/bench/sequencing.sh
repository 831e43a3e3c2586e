#!/usr/bin/env bash
# Figures of writes into one workspace and into 16, and signed runner reports into
# one workspace, each next to the unserialised floor measured in the same run (pgbench
# committing the two inserts of an issuance, token and audit event, with no per-workspace
# lock: tests/bench/pgbench-two-inserts.sql).
#
#   tests/bench/sequencing.sh [seconds]   (default 15; needs wrk, pgbench, Postgres)
#   WAITS=waits.txt tests/bench/sequencing.sh   also samples pg_stat_activity (pg-waits.sh)
#                                               during the one-workspace issuance
#
# The floor runs first, with no server up (a server's sequencer would number its events), and
# its rows are deleted before the server starts. Prints a Markdown table for BENCHMARKS.md, or
# nothing and exits non-zero if a run had an answer outside 2xx, a socket error, a failed
# transaction or report, or beat the floor (lib.sh's `figures`).
SECS=${1:-15}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
ensure_built examples/ops_load

echo "setting up 16 workspaces and 128 tokens spread over them..." >&2
# Over HTTP, through lib.sh's setup server, stopped before the floor.
setup_server
WSS=("$WS")
for i in $(seq 1 15); do WSS+=("$($CPCTL workspaces create --org "$ORG" "ws$i")"); done
: > "$OUT/tokens16.txt"; : > "$OUT/workspaces16.txt"
while IFS=, read -r n user _; do
  target=${WSS[$((n % 16))]}
  $CPCTL tokens issue --user "$user" --name bench16 --scope tokens:issue --scope activity:read \
    --workspace "$target" -o json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' >> "$OUT/tokens16.txt"
  echo "$target" >> "$OUT/workspaces16.txt"
done < "$OUT/users.csv"
stop_setup_server

echo "pgbench: two inserts, unserialised (floor)..." >&2
pg_run pg_two -D org="$ORG" -D ws="$WS" -f "$PWD/$HERE/pgbench-two-inserts.sql"
delete_floor_rows

start_server 18080 CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off \
  CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_MAX_ACTIVE_TOKENS_PER_USER=1000000
echo "warm-up..." >&2
wrk -t2 -c$CONNS -d3s -s $HERE/issue.lua http://127.0.0.1:18080 >/dev/null
echo "issuance into one workspace..." >&2
[ -n "${WAITS:-}" ] && { $HERE/pg-waits.sh "$SECS" "$DB" > "$WAITS" & }
wrk_run -s $HERE/issue.lua http://127.0.0.1:18080 > "$OUT/issue1.txt"
echo "issuance into 16 workspaces..." >&2
BENCH_TOKENS=$OUT/tokens16.txt BENCH_WORKSPACES=$OUT/workspaces16.txt \
  wrk_run -s $HERE/issue.lua http://127.0.0.1:18080 > "$OUT/issue16.txt"
echo "signed runner reports into one workspace..." >&2
SERVER=http://127.0.0.1:18080 $BIN/examples/ops_load signed $CONNS "$SECS" > "$OUT/reports.txt"

# Gaps or unnumbered events would break the log's promise: count them.
CHECK=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FILTER (WHERE seq IS NULL AND workspace_id IS NOT NULL),
  (SELECT count(*) FROM (SELECT workspace_id, max(seq) - count(*) AS gap FROM audit_events
    WHERE workspace_id IS NOT NULL GROUP BY workspace_id) g WHERE gap <> 0) FROM audit_events")

ROWS=("pgbench: two inserts, unserialised (floor):pg_two:pg"
  "POST personal-access-tokens, one workspace:issue1:wrk"
  "POST personal-access-tokens, 16 workspaces:issue16:wrk"
  "signed runner reports, one workspace (ops_load, $CONNS connections):reports:ops")
# Every run checked and every ratio to the floor taken before anything is printed.
figures check "${ROWS[@]}"
ONE=$(ratio issue1 pg_two); SIXTEEN=$(ratio issue16 pg_two); REPORTS=$(ratio reports pg_two)
summarise "${ROWS[@]}"
echo
echo "issuance into one workspace / floor: $ONE"
echo "issuance into 16 workspaces / floor: $SIXTEEN"
echo "runner reports into one workspace / floor: $REPORTS"
echo "unnumbered events, workspaces with a gap: ${CHECK/|/, }"
