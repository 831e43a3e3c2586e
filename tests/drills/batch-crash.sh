#!/usr/bin/env bash
# Issue #17's crash drill for batched issuance: unkeyed POST personal-access-tokens from 64
# connections (Postgres gathers them into shared transactions), the server SIGKILLed mid-load
# once per round and restarted, then the records checked: every issued token has exactly one
# grant and one `token.issued` event, no event names a token that does not exist, and every
# event is numbered without a gap. A batch is one transaction, so a kill leaves each batch all
# or nothing. Loopback only; stops by itself. Figures go to RELIABILITY.md.
#
#   tests/drills/batch-crash.sh [rounds]   (default 3; needs wrk and Postgres)
ROUNDS=${1:-3}
SECS=6
source "$(dirname "${BASH_SOURCE[0]}")/../bench/lib.sh"
LIMITS=(CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off
  CP_MAX_ACTIVE_TOKENS_PER_USER=1000000)

for round in $(seq 1 "$ROUNDS"); do
  start_server 18080 "${LIMITS[@]}"
  wrk -t2 -c$CONNS -d${SECS}s -s $HERE/issue.lua http://127.0.0.1:18080 > "$OUT/round$round.txt" 2>&1 &
  load=$!
  sleep $((SECS / 2))
  kill -KILL "${PIDS[-1]}"
  wait "$load" || true
  echo "round $round: server killed $((SECS / 2)) s into the load" >&2
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
       GROUP BY workspace_id HAVING max(seq) <> count(*)) g)" | {
  read -r issued no_grant no_event orphan unnumbered gapped
  echo "kills: $ROUNDS, tokens issued: $issued"
  echo "tokens without exactly one grant: $no_grant"
  echo "tokens without exactly one event: $no_event"
  echo "events naming no token: $orphan"
  echo "unnumbered events: $unnumbered, workspaces with a gap: $gapped"
  [ "$no_grant$no_event$orphan$unnumbered$gapped" = 00000 ] || { echo "DRILL FAILED" >&2; exit 1; }
}
