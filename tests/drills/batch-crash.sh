#!/usr/bin/env bash
# Issue #17's crash drill for batched writes: unkeyed POST personal-access-tokens from 64
# connections and signed runner reports from 64 more (Postgres gathers each kind into shared
# transactions), the server SIGKILLed mid-load once per round and restarted, then the records
# checked: every issued token has exactly one grant and one `token.issued` event, no event
# names a token that does not exist, every reported delivery has exactly one report event and
# its command moved with it, no unreported delivery has one, and every event is numbered
# without a gap. A batch is one transaction, so a kill leaves each batch all or nothing.
# Loopback only; stops by itself. Figures go to RELIABILITY.md.
#
#   tests/drills/batch-crash.sh [rounds]   (default 3; needs wrk and Postgres)
ROUNDS=${1:-3}
SECS=6
source "$(dirname "${BASH_SOURCE[0]}")/../bench/lib.sh"
[ -x $BIN/examples/ops_load ] || cargo build --release -p control-plane --example ops_load
LIMITS=(CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off
  CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_MAX_ACTIVE_TOKENS_PER_USER=1000000)

for round in $(seq 1 "$ROUNDS"); do
  start_server 18080 "${LIMITS[@]}"
  wrk -t2 -c$CONNS -d${SECS}s -s $HERE/issue.lua http://127.0.0.1:18080 > "$OUT/round$round.txt" 2>&1 &
  load=$!
  SERVER=http://127.0.0.1:18080 $BIN/examples/ops_load signed $CONNS $SECS > "$OUT/reports$round.txt" 2>&1 &
  reports=$!
  sleep $((SECS / 2 + 1))
  kill -KILL "${PIDS[-1]}"
  wait "$load" "$reports" || true
  echo "round $round: server killed $((SECS / 2 + 1)) s into the load;" \
    "$(grep -h 'signed reports:' "$OUT/reports$round.txt" || echo 'reports: none')" >&2
done
# A restarted server's audit feed numbers what the killed one committed but did not number.
start_server 18080 "${LIMITS[@]}"
sleep 3

psql "$DATABASE_URL" -At -F ' ' -c "
  SELECT
    (SELECT count(*) FROM tokens WHERE name LIKE 'wrk-%'),
    (SELECT count(*) FROM tokens t WHERE t.name LIKE 'wrk-%'
       AND (SELECT count(*) FROM token_workspaces g WHERE g.token_id = t.id) <> 1),
    (SELECT count(*) FROM tokens t WHERE t.name LIKE 'wrk-%'
       AND (SELECT count(*) FROM audit_events e
            WHERE e.target_id = t.id AND e.event_type = 'token.issued') <> 1),
    (SELECT count(*) FROM audit_events e WHERE e.event_type = 'token.issued'
       AND NOT EXISTS (SELECT 1 FROM tokens t WHERE t.id = e.target_id)),
    (SELECT count(*) FROM audit_events WHERE seq IS NULL AND workspace_id IS NOT NULL),
    (SELECT count(*) FROM (SELECT workspace_id FROM audit_events WHERE workspace_id IS NOT NULL
       GROUP BY workspace_id HAVING max(seq) <> count(*)) g),
    (SELECT count(*) FROM webhook_deliveries WHERE status = 'received'),
    (SELECT count(*) FROM webhook_deliveries d JOIN runner_commands c ON c.id = d.command_id
       WHERE (SELECT count(*) FROM audit_events e WHERE e.target_id = d.id
              AND e.event_type = 'webhook_delivery.status_reported')
             <> CASE d.status WHEN 'received' THEN 1 ELSE 0 END
          OR c.status <> CASE d.status WHEN 'received' THEN 'dispatched' ELSE 'queued' END)" | {
  read -r issued no_grant no_event orphan unnumbered gapped reported broken
  echo "kills: $ROUNDS, tokens issued: $issued, deliveries reported: $reported"
  echo "tokens without exactly one grant: $no_grant"
  echo "tokens without exactly one event: $no_event"
  echo "events naming no token: $orphan"
  echo "deliveries whose events or command disagree with their status: $broken"
  echo "unnumbered events: $unnumbered, workspaces with a gap: $gapped"
  [ "$no_grant$no_event$orphan$broken$unnumbered$gapped" = 000000 ] || { echo "DRILL FAILED" >&2; exit 1; }
}
