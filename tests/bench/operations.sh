#!/usr/bin/env bash
# Figures of signed delivery status reports per second, and the audit stream's fan-out
# to 1000 subscribers (server RSS and publish-to-receive latency). Needs Postgres and Redis.
#
# The reports' figure is refused (no figure, exit non-zero) if ops_load counted a failed
# report (an answer outside 2xx or a transport error; lib.sh's `figures`). The fan-out's are
# refused if a subscriber missed an event; ops_load itself fails on a publish outside 2xx.
# shellcheck source=lib.sh
BENCH_SETUP=none source "$(dirname "$0")/lib.sh"
ensure_built examples/ops_load
DB=cp_bench_ops
PORT=18080
SUBSCRIBERS=${SUBSCRIBERS:-1000}
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL=$PG/$DB SERVER=http://127.0.0.1:$PORT
ulimit -n 20000
port_free $PORT
$BIN/control-plane --listen 127.0.0.1:$PORT --redis-url redis://127.0.0.1:6379 \
  --redis-prefix "bench-ops-$$:" --rate-limit off --user-rate-limit off --org-rate-limit off \
  --runner-address-rate-limit off --runner-rate-limit off --log-format json \
  --audit-streams-per-token "$SUBSCRIBERS" --audit-streams-per-workspace "$SUBSCRIBERS" \
  --audit-streams-per-process "$SUBSCRIBERS" > "$OUT/ops-server.log" 2>&1 &
SERVER_PID=$!
PIDS+=("$SERVER_PID")
for _ in $(seq 1 50); do curl -sf "$SERVER/readyz" >/dev/null && break; sleep 0.2; done

rss() { awk '/VmRSS/ {print $2/1024 " MiB"}' /proc/$SERVER_PID/status; }
echo "== signed delivery status reports (32 connections, 15 s)"
$BIN/examples/ops_load signed 32 15 > "$OUT/reports.txt"
figures check "signed delivery status reports:reports:ops"
cat "$OUT/reports.txt"
echo "== audit fan-out"
echo "server RSS before subscribers: $(rss)"
$BIN/examples/ops_load fanout "$SUBSCRIBERS" 200 > "$OUT/fanout.txt" &
LOAD=$!
sleep 8
echo "server RSS with $SUBSCRIBERS subscribers: $(rss)"
wait $LOAD
awk '/^deliveries: / { seen = 1; if ($2 != $4) missed = $4 - $2 }
  END { if (!seen) print "REFUSED: audit fan-out printed no count of deliveries" > "/dev/stderr"
        else if (missed) print "REFUSED: audit fan-out: " missed " (subscriber, event) deliveries missing" > "/dev/stderr"
        exit (!seen || missed) }' "$OUT/fanout.txt"
cat "$OUT/fanout.txt"
echo "server RSS after the run: $(rss)"
