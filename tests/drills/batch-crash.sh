#!/usr/bin/env bash
# The crash drill for batched writes: unkeyed POST personal-access-tokens from 64
# connections (wrk) and signed runner reports from 64 more (ops_load), Postgres gathering each
# kind into shared transactions; the server SIGKILLed mid-load once per round and restarted,
# then the records checked against what the clients were answered. A batch is one transaction,
# so a kill leaves each batch all or nothing, and nothing answered 2xx may be missing.
# The criteria are printed first; the script exits non-zero with a `FAILED criterion N` line for
# each broken one. Loopback only; stops by itself. Figures go to RELIABILITY.md.
#
#   tests/drills/batch-crash.sh [rounds]          (default 3; needs wrk and Postgres)
#   DRILL_BIN_DIR=/abs/target/release tests/drills/batch-crash.sh 1   CI's short form: one kill,
#     binaries (control-plane, cpctl, examples/ops_load) from there, never built
# Env: DRILL_SECS (load per round, default 6), DRILL_KILL_AT (seconds into it, default
# DRILL_SECS/2+1), DRILL_MIN_TOKENS (500) and DRILL_MIN_REPORTS (200) answered 2xx per round,
# DRILL_INJECT=drop-answered (deletes one answered token before the check: the drill must fail),
# KEEP=1 (keeps the outputs).
ROUNDS=${1:-3}
SECS=${DRILL_SECS:-6}
KILL_AT=${DRILL_KILL_AT:-$((SECS / 2 + 1))}
MIN_TOKENS=${DRILL_MIN_TOKENS:-500}
MIN_REPORTS=${DRILL_MIN_REPORTS:-200}
CRITERIA=(
  "work done: every round, before its kill, at least $MIN_TOKENS tokens issued and $MIN_REPORTS delivery reports answered 2xx"
  "kill mid-batch: every kill landed with writes in flight: ops_load had at least one report sent before the kill whose answer never came"
  "answered means committed: after the restart, every token answered 2xx exists and every delivery whose report was answered 2xx is received"
  "records whole: 0 tokens without exactly one grant, 0 tokens without exactly one token.issued event, 0 token.issued events naming no token, 0 deliveries whose report events or command disagree with their status, 0 unnumbered events, 0 workspaces with a gap or a repeat"
)
echo "# batch-crash drill: $ROUNDS round(s), $SECS s of load each, SIGKILL $KILL_AT s into it"
echo "criteria:"
for i in "${!CRITERIA[@]}"; do echo "  $((i + 1)). ${CRITERIA[i]}"; done
echo

# tests/bench/lib.sh reads its binaries from DRILL_BIN_DIR when it is set (and builds nothing).
source "$(dirname "${BASH_SOURCE[0]}")/../bench/lib.sh"
BIN=${DRILL_BIN_DIR:-$BIN}
[ -n "${DRILL_BIN_DIR:-}" ] || [ -x $BIN/examples/ops_load ] || \
  cargo build --release -p control-plane --example ops_load
for binary in "$BIN/control-plane" "$BIN/examples/ops_load"; do
  [ -x "$binary" ] || { echo "missing $binary" >&2; exit 2; }
done
LIMITS=(CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off
  CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_MAX_ACTIVE_TOKENS_PER_USER=1000000)
BROKEN=()
broken() { BROKEN+=("FAILED criterion $1 (${CRITERIA[$1 - 1]%%:*}): $2"); }
committed() {
  psql "$DATABASE_URL" -At -F ' ' -c "SELECT (SELECT count(*) FROM tokens WHERE name LIKE 'wrk-%'),
    (SELECT count(*) FROM webhook_deliveries WHERE status = 'received')"
}
started=$SECONDS
read -r tokens_before reports_before < <(committed)

for round in $(seq 1 "$ROUNDS"); do
  start_server 18080 "${LIMITS[@]}"
  OPS_LOAD_ANSWERED=$OUT/reports$round.ids SERVER=http://127.0.0.1:18080 \
    $BIN/examples/ops_load signed $CONNS $SECS > "$OUT/reports$round.txt" 2>&1 &
  reports=$!
  # ops_load first creates its deliveries; both loads and the kill's timer start when it is done.
  for _ in $(seq 1 600); do
    grep -q '^sending reports' "$OUT/reports$round.txt" && break
    kill -0 "$reports" 2>/dev/null || break
    sleep 0.1
  done
  DRILL_ANSWERED=$OUT/tokens$round wrk -t2 -c$CONNS -d${SECS}s -s tests/drills/issue-answered.lua \
    http://127.0.0.1:18080 > "$OUT/round$round.txt" 2>&1 &
  load=$!
  sleep "$KILL_AT"
  kill_ms=$(date +%s%3N)
  kill -KILL "${PIDS[-1]}"
  wait "$load" "$reports" || true
  answered_tokens=$( (cat "$OUT/tokens$round"-*.txt 2>/dev/null || true) | wc -l)
  answered_reports=$( (cat "$OUT/reports$round.ids" 2>/dev/null || true) | wc -l)
  # In flight at the kill: ops_load writes when it sent each report whose connection closed
  # before an answer came. (wrk's socket read errors would not do: after the kill they also
  # count connections refused.)
  ops_in_flight=$( (awk -v kill="$kill_ms" '$1 < kill' "$OUT/reports$round.ids.cut-off" 2>/dev/null || true) | wc -l)
  refused_tokens=$(sed -n 's/^answers outside 2xx: \([0-9]*\) .*/\1/p' "$OUT/round$round.txt")
  refused_reports=$(sed -n 's/.*answered otherwise: \([0-9]*\);.*/\1/p' "$OUT/reports$round.txt")
  read -r tokens_now reports_now < <(committed)
  echo "round $round: killed $KILL_AT s into the load; answered 2xx: $answered_tokens tokens," \
    "$answered_reports reports; committed: $((tokens_now - tokens_before)) tokens," \
    "$((reports_now - reports_before)) reports (without an answer:" \
    "$((tokens_now - tokens_before - answered_tokens)) tokens," \
    "$((reports_now - reports_before - answered_reports)) reports); reports in flight at the kill:" \
    "$ops_in_flight; answered outside 2xx:" \
    "${refused_tokens:-?} issuances, ${refused_reports:-?} reports"
  tokens_before=$tokens_now reports_before=$reports_now
  if [ "$answered_tokens" -lt "$MIN_TOKENS" ] || [ "$answered_reports" -lt "$MIN_REPORTS" ]; then
    broken 1 "round $round: $answered_tokens tokens and $answered_reports reports answered 2xx"
  fi
  if [ "$ops_in_flight" -lt 1 ]; then
    broken 2 "round $round: no report was in flight at the kill"
  fi
done
# A restarted server's audit feed numbers what the killed one committed but did not number.
start_server 18080 "${LIMITS[@]}"
sleep 3

cat "$OUT"/tokens*-*.txt > "$OUT/answered-tokens.txt" 2>/dev/null || true
cat "$OUT"/reports*.ids > "$OUT/answered-reports.txt" 2>/dev/null || true
if [ "${DRILL_INJECT:-}" = drop-answered ]; then
  victim=$(head -1 "$OUT/answered-tokens.txt")
  echo "DRILL_INJECT=drop-answered: deleting token $victim, answered 201, before the check"
  psql "$DATABASE_URL" -qc "DELETE FROM token_workspaces WHERE token_id IN
    (SELECT id FROM tokens WHERE name = '$victim')" -c "DELETE FROM tokens WHERE name = '$victim'"
fi

read -r issued no_grant no_event orphan unnumbered gapped reported disagree \
  answered_tokens lost_tokens unanswered_tokens answered_reports lost_reports unanswered_reports \
  < <(psql "$DATABASE_URL" -qAt -F ' ' <<SQL
CREATE TEMP TABLE answered_tokens (name text);
\copy answered_tokens FROM '$OUT/answered-tokens.txt'
CREATE TEMP TABLE answered_reports (id uuid);
\copy answered_reports FROM '$OUT/answered-reports.txt'
-- Counts per target, once: audit_events has no index on target_id, and a subquery per row
-- scanned it for each of the rounds' 90,000 deliveries.
CREATE TEMP TABLE events AS SELECT target_id, event_type, count(*) AS n FROM audit_events
  WHERE event_type IN ('token.issued', 'webhook_delivery.status_reported') GROUP BY 1, 2;
CREATE TEMP TABLE grants AS SELECT token_id, count(*) AS n FROM token_workspaces GROUP BY 1;
SELECT
  (SELECT count(*) FROM tokens WHERE name LIKE 'wrk-%'),
  (SELECT count(*) FROM tokens t LEFT JOIN grants g ON g.token_id = t.id
     WHERE t.name LIKE 'wrk-%' AND coalesce(g.n, 0) <> 1),
  (SELECT count(*) FROM tokens t
     LEFT JOIN events e ON e.target_id = t.id AND e.event_type = 'token.issued'
     WHERE t.name LIKE 'wrk-%' AND coalesce(e.n, 0) <> 1),
  (SELECT count(*) FROM audit_events e WHERE e.event_type = 'token.issued'
     AND NOT EXISTS (SELECT 1 FROM tokens t WHERE t.id = e.target_id)),
  (SELECT count(*) FROM audit_events WHERE seq IS NULL AND workspace_id IS NOT NULL),
  (SELECT count(*) FROM (SELECT workspace_id FROM audit_events WHERE workspace_id IS NOT NULL
     GROUP BY workspace_id HAVING max(seq) <> count(*) OR count(DISTINCT seq) <> count(seq)) g),
  (SELECT count(*) FROM webhook_deliveries WHERE status = 'received'),
  (SELECT count(*) FROM webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
     LEFT JOIN events e ON e.target_id = d.id AND e.event_type = 'webhook_delivery.status_reported'
     WHERE coalesce(e.n, 0) <> CASE d.status WHEN 'received' THEN 1 ELSE 0 END
        OR c.status <> CASE d.status WHEN 'received' THEN 'dispatched' ELSE 'queued' END),
  (SELECT count(*) FROM answered_tokens),
  (SELECT count(*) FROM answered_tokens a
     WHERE NOT EXISTS (SELECT 1 FROM tokens t WHERE t.name = a.name)),
  (SELECT count(*) FROM tokens t WHERE t.name LIKE 'wrk-%'
     AND NOT EXISTS (SELECT 1 FROM answered_tokens a WHERE a.name = t.name)),
  (SELECT count(*) FROM answered_reports),
  (SELECT count(*) FROM answered_reports a WHERE NOT EXISTS
     (SELECT 1 FROM webhook_deliveries d WHERE d.id = a.id AND d.status = 'received')),
  (SELECT count(*) FROM webhook_deliveries d WHERE d.status = 'received'
     AND NOT EXISTS (SELECT 1 FROM answered_reports a WHERE a.id = d.id));
SQL
)
[ -n "$unanswered_reports" ] || { echo "the check's query failed" >&2; exit 2; }
echo
echo "kills: $ROUNDS, tokens issued: $issued, deliveries reported: $reported"
echo "answered 2xx: $answered_tokens tokens, $answered_reports reports; of them not committed:" \
  "$lost_tokens tokens, $lost_reports reports"
echo "committed without an answer (cut off by a kill): $unanswered_tokens tokens," \
  "$unanswered_reports reports"
echo "tokens without exactly one grant: $no_grant"
echo "tokens without exactly one event: $no_event"
echo "events naming no token: $orphan"
echo "deliveries whose events or command disagree with their status: $disagree"
echo "unnumbered events: $unnumbered, workspaces with a gap: $gapped"
if [ "$lost_tokens" -ne 0 ] || [ "$lost_reports" -ne 0 ]; then
  broken 3 "$lost_tokens tokens and $lost_reports delivery reports answered 2xx are not committed"
fi
faults=()
for pair in "tokens without exactly one grant:$no_grant" "tokens without exactly one event:$no_event" \
  "events naming no token:$orphan" "deliveries whose events or command disagree:$disagree" \
  "unnumbered events:$unnumbered" "workspaces with a gap or a repeat:$gapped"; do
  [ "${pair##*:}" = 0 ] || faults+=("${pair%:*}: ${pair##*:}")
done
[ ${#faults[@]} -eq 0 ] || broken 4 "$(printf '%s; ' "${faults[@]}" | sed 's/; $//')"
echo "took $((SECONDS - started)) s after set-up"
if [ ${#BROKEN[@]} -ne 0 ]; then
  printf '%s\n' "${BROKEN[@]}"
  echo "batch-crash drill: FAILED (exit 1); the lines above name each broken criterion"
  exit 1
fi
echo "all criteria met"
