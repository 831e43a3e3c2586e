#!/usr/bin/env bash
# The numbering pass at scale: token issuance spread over 1,000 workspaces (one token granted
# to each, so every request appends an event to its own workspace) through one server and
# through three servers on the same Postgres and Redis, next to the unserialised floor of the
# same run (pgbench committing the two inserts of an issuance: pgbench-two-inserts.sql). Each
# pass takes its partition's advisory lock; the three-server run samples pg_stat_activity to
# count how often a backend waits on one, and on what else.
#
#   tests/bench/numbering-scale.sh [seconds] [workspaces]   (default 15 s, 1000 workspaces)
#
# Exits non-zero, with no figure, if a run had an answer outside 2xx or a socket error, beat
# the floor, or left any event unnumbered or any workspace with a gap in its sequence.
SECS=${1:-15}
N=${2:-1000}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

echo "setting up $N workspaces, one token granted to each..." >&2
# Over HTTP, through lib.sh's setup server, stopped before the floor.
setup_server
# Four at a time, each line appended (O_APPEND): writers sharing one offset would overwrite
# each other's lines.
: > "$OUT/wss.txt"
seq 2 "$N" | xargs -P 4 -I{} "$CPCTL" workspaces create --org "$ORG" "scale{}" >> "$OUT/wss.txt"
{ echo "$WS"; cat "$OUT/wss.txt"; } > "$OUT/workspaces.txt"
[ "$(wc -l < "$OUT/workspaces.txt")" -eq "$N" ] || { echo "expected $N workspaces" >&2; exit 1; }
mapfile -t USERS < <(cut -d, -f2 "$OUT/users.csv")
: > "$OUT/pairs.txt"
i=0
while read -r ws; do
  echo "${USERS[$((i % ${#USERS[@]}))]} $ws" >> "$OUT/pairs.txt"
  i=$((i + 1))
done < "$OUT/workspaces.txt"
: > "$OUT/issued.txt"
# shellcheck disable=SC2016 # expanded by the inner shell
xargs -P 4 -L 1 sh -c '"$0" tokens issue --user "$1" --name "scale-$2" --scope tokens:issue --scope activity:read \
  --workspace "$2" -o json | python3 -c "import json,sys; print(json.load(sys.stdin)[\"token\"], \"$2\")"' \
  "$CPCTL" < "$OUT/pairs.txt" >> "$OUT/issued.txt"
[ "$(grep -cE '^cpat_[A-Za-z0-9_]+ [0-9a-f-]{36}$' "$OUT/issued.txt")" -eq "$N" ] \
  || { echo "expected $N lines of a token and its workspace in $OUT/issued.txt" >&2; exit 1; }
stop_setup_server
cut -d' ' -f1 "$OUT/issued.txt" > "$OUT/tokensN.txt"
cut -d' ' -f2 "$OUT/issued.txt" > "$OUT/workspacesN.txt"
# A third of the tokens for each replica, so each workspace is written through one of them.
for r in 0 1 2; do
  awk -v r=$r 'NR % 3 == r' "$OUT/tokensN.txt" > "$OUT/tokens-r$r.txt"
  awk -v r=$r 'NR % 3 == r' "$OUT/workspacesN.txt" > "$OUT/workspaces-r$r.txt"
done

echo "pgbench: two inserts, unserialised (floor)..." >&2
pg_run pg_two -D org="$ORG" -D ws="$WS" -f "$PWD/$HERE/pgbench-two-inserts.sql"
delete_floor_rows

SERVER_ENV=(CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off
  CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_MAX_ACTIVE_TOKENS_PER_USER=1000000)
# issue PORT NAME TOKENS WORKSPACES: one measured wrk run of issuance.
issue() {
  BENCH_TOKENS=$3 BENCH_WORKSPACES=$4 wrk_run -s $HERE/issue.lua "http://127.0.0.1:$1" > "$OUT/$2.txt"
}

echo "one server, $N workspaces..." >&2
start_server 18080 "${SERVER_ENV[@]}"
wrk -t2 -c$CONNS -d3s -s $HERE/issue.lua http://127.0.0.1:18080 >/dev/null
issue 18080 one "$OUT/tokensN.txt" "$OUT/workspacesN.txt"
stop_servers

echo "three servers, $N workspaces..." >&2
for r in 0 1 2; do start_server $((18080 + r)) "${SERVER_ENV[@]}"; done
# Background jobs are waited for by pid: the servers are background jobs of this shell too.
RUNS=()
for r in 0 1 2; do
  BENCH_TOKENS=$OUT/tokens-r$r.txt BENCH_WORKSPACES=$OUT/workspaces-r$r.txt \
    wrk -t1 -c8 -d3s -s $HERE/issue.lua "http://127.0.0.1:$((18080 + r))" >/dev/null &
  RUNS+=($!)
done
for pid in "${RUNS[@]}"; do wait "$pid"; done
$HERE/pg-waits.sh "$SECS" "$DB" > "$OUT/waits.txt" &
WAITER=$!
ALL=$CONNS
CONNS=$((ALL / 3))
RUNS=()
for r in 0 1 2; do
  issue $((18080 + r)) "three$r" "$OUT/tokens-r$r.txt" "$OUT/workspaces-r$r.txt" &
  RUNS+=($!)
done
for pid in "${RUNS[@]}"; do wait "$pid"; done
wait "$WAITER" || true
CONNS=$ALL
stop_servers

# The promise the lock keeps: every event numbered, no workspace with a gap.
CHECK=$(psql "$DATABASE_URL" -Atc "SELECT count(*) FILTER (WHERE seq IS NULL AND workspace_id IS NOT NULL),
  (SELECT count(*) FROM (SELECT workspace_id, max(seq) - count(*) AS gap FROM audit_events
    WHERE workspace_id IS NOT NULL GROUP BY workspace_id) g WHERE gap <> 0),
  (SELECT count(DISTINCT workspace_id) FROM audit_events WHERE seq IS NOT NULL) FROM audit_events")
IFS='|' read -r UNNUMBERED GAPS WRITTEN <<<"$CHECK"
if [ "$UNNUMBERED" != 0 ] || [ "$GAPS" != 0 ]; then
  echo "REFUSED: $UNNUMBERED unnumbered events, $GAPS workspaces with a gap" >&2
  exit 1
fi

ROWS=("pgbench: two inserts, unserialised (floor):pg_two:pg"
  "POST personal-access-tokens, $N workspaces, one server ($ALL connections):one:wrk"
  "the same, three servers ($((ALL / 3)) connections each), server 1:three0:wrk"
  "the same, server 2:three1:wrk"
  "the same, server 3:three2:wrk")
figures check "${ROWS[@]}"
ONE=$(ratio one pg_two)
THREE=$(ratio three0+three1+three2 pg_two)
summarise "${ROWS[@]}"
echo
echo "one server / floor: $ONE"
echo "three servers together / floor: $THREE"
# Backends sampled in the three-server run, and those waiting on the advisory lock.
python3 - "$OUT/waits.txt" <<'PY'
import sys
lines = [l for l in open(sys.argv[1]) if "|" in l]
advisory = sum(1 for l in lines if "|Lock:advisory:" in l)
samples = len({l.split("|")[0] for l in lines})
print(f"pg_stat_activity during the three-server run: {samples} samples, {len(lines)} busy "
      f"backends seen, {advisory} of them waiting on a numbering lock "
      f"({100 * advisory / max(1, len(lines)):.1f}%)")
# What each sampled backend was waiting on ("CPU:-": running), most frequent first.
kinds = {}
for l in lines:
    kind = ":".join(l.split("|")[1].split(":")[:2])
    kinds[kind] = kinds.get(kind, 0) + 1
top = sorted(kinds.items(), key=lambda kv: -kv[1])[:6]
print("  by wait event: " + ", ".join(f"{k} {100 * n / max(1, len(lines)):.1f}%" for k, n in top))
PY
echo "checked: $WRITTEN workspaces written, 0 unnumbered events, 0 workspaces with a gap"
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
