#!/usr/bin/env bash
# Issue #5's figures: signed delivery status reports per second, and the audit stream's fan-out
# to 1000 subscribers (server RSS and publish-to-receive latency). Needs Postgres and Redis.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PG=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
DB=cp_bench_ops
BIN=${CARGO_TARGET_DIR:-target}/release
PORT=18080
SUBSCRIBERS=${SUBSCRIBERS:-1000}
cargo build --release -p control-plane --bin control-plane --example ops_load
psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL=$PG/$DB SERVER=http://127.0.0.1:$PORT
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY
ulimit -n 20000
$BIN/control-plane --listen 127.0.0.1:$PORT --redis-url redis://127.0.0.1:6379 \
  --redis-prefix "bench-ops-$$:" --rate-limit off --user-rate-limit off --org-rate-limit off \
  --runner-address-rate-limit off --runner-rate-limit off --log-format json \
  --audit-streams-per-token "$SUBSCRIBERS" --audit-streams-per-workspace "$SUBSCRIBERS" \
  --audit-streams-per-process "$SUBSCRIBERS" > /tmp/ops-server.log 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do curl -sf "$SERVER/readyz" >/dev/null && break; sleep 0.2; done

rss() { awk '/VmRSS/ {print $2/1024 " MiB"}' /proc/$SERVER_PID/status; }
echo "== signed delivery status reports (32 connections, 15 s)"
$BIN/examples/ops_load signed 32 15
echo "== audit fan-out"
echo "server RSS before subscribers: $(rss)"
$BIN/examples/ops_load fanout "$SUBSCRIBERS" 200 &
LOAD=$!
sleep 8
echo "server RSS with $SUBSCRIBERS subscribers: $(rss)"
wait $LOAD
echo "server RSS after the run: $(rss)"
