#!/usr/bin/env bash
# A full audit export of 100,000 events over HTTP: the server's resident memory (VmRSS, and its
# peak VmHWM, from /proc/PID/status) before and after, the export's duration and size, and the
# offline check of what came over the wire. The events are seeded by SQL unnumbered into one
# workspace of a fresh Postgres database; the server's numbering pass numbers and chains them
# (a valid chain, as if written by the service), and verify on the server checks it before the
# export. The export streams a page at a time, so its memory should not grow with the log.
#
#   tests/bench/audit-export.sh            # EVENTS=100000, the ci profile's binaries
#
# Binaries: $BIN (default target/ci: `cargo build --profile ci -p control-plane -p cpctl
# --bins`, built here when missing). Postgres: $BENCH_POSTGRES_URL (default
# postgres://postgres@127.0.0.1:5432), database cp_bench_audit_export (dropped and made again).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
EVENTS=${EVENTS:-100000}
PG=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
DB=${BENCH_DB:-cp_bench_audit_export}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/ci}
OUT=$(mktemp -d)
SERVER_PID=

if [ ! -x "$BIN/control-plane" ] || [ ! -x "$BIN/cpctl" ]; then
  cargo build --profile ci -p control-plane -p cpctl --bins
fi

cleanup() {
  [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "outputs kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT

CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
CP_WEBHOOK_SIGNING_KEYS=$(head -c 32 /dev/urandom | base64)
# The key-encryption key and the policy cache in the run's folder, not the checkout.
CP_DATA_DIR=$OUT/data
export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS CP_WEBHOOK_SIGNING_KEYS CP_DATA_DIR
[ -z "${KEEP:-}" ] || env | grep "^CP_" > "$OUT/env"

psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL=$PG/$DB
boot=$("$BIN/cpctl" bootstrap --org bench --workspace audit --admin ops@bench.test -o json)
read -r ORG WS TOKEN < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["organisationId"], d["workspaceId"], d["credential"]["token"])' <<<"$boot")

echo "seeding $EVENTS audit events..." >&2
psql "$DATABASE_URL" -q <<SQL
INSERT INTO audit_events (id, organisation_id, workspace_id, event_type, actor_kind, actor_id,
    target_kind, target_id, correlation_id, occurred_at, data)
SELECT gen_random_uuid(), '$ORG', '$WS', 'bench.event', e.actor_kind, e.actor_id,
    'workspace', '$WS', 'bench-' || g, now() - interval '1 day' + g * interval '1 ms',
    jsonb_build_object('n', g, 'note', 'an audit event of the export benchmark')
FROM generate_series(1, $EVENTS) g,
     (SELECT actor_kind, actor_id FROM audit_events WHERE workspace_id = '$WS' LIMIT 1) e;
SQL

CP_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off \
  "$BIN/control-plane" --listen 127.0.0.1:0 --log-format json > "$OUT/server.log" 2>&1 &
SERVER_PID=$!
port=
for _ in $(seq 1 100); do
  port=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        fields = json.loads(line).get("fields", {})
    except ValueError:
        continue
    if fields.get("message") == "listening":
        print(fields["port"]); break' "$OUT/server.log")
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
  port=
  sleep 0.2
done
[ -n "$port" ] || { echo "the server did not start:" >&2; tail -3 "$OUT/server.log" >&2; exit 1; }
BASE=http://127.0.0.1:$port

# The numbering pass (the sweep, every second) numbers and chains the seeded events.
for _ in $(seq 1 600); do
  left=$(psql "$DATABASE_URL" -tAc "SELECT count(*) FROM audit_events WHERE seq IS NULL AND workspace_id IS NOT NULL")
  [ "$left" = 0 ] && break
  sleep 1
done
[ "$left" = 0 ] || { echo "$left events still unnumbered" >&2; exit 1; }

api() { curl -sS --fail-with-body -H "authorization: Bearer $TOKEN" "$BASE$1"; }
verification=$(api "/v1/organisations/$ORG/workspaces/$WS/audit/verification") \
  || { echo "verification refused: $verification" >&2; exit 1; }
python3 -c 'import json,sys; v=json.load(sys.stdin)["verification"]; assert v["intact"], v; print("verified on the server:", v["verified"], "events, head", v["headSequence"])' <<<"$verification" >&2

mem() { awk '/^(VmRSS|VmHWM):/ { printf "%s %d MiB  ", $1, $2 / 1024 }' "/proc/$SERVER_PID/status"; }
before=$(mem)
start=$(date +%s.%N)
api "/v1/organisations/$ORG/workspaces/$WS/audit/export" > "$OUT/export.ndjson"
end=$(date +%s.%N)
after=$(mem)
size=$(stat -c %s "$OUT/export.ndjson")
lines=$(wc -l < "$OUT/export.ndjson")

curl -sf "$BASE/.well-known/jwks.json" > "$OUT/jwks.json"
"$BIN/cpctl" audit verify --export "$OUT/export.ndjson" --jwks "$OUT/jwks.json" >&2

echo "audit export of $EVENTS events (+ bootstrap's), $lines lines, $((size / 1024 / 1024)) MiB in $(python3 -c "print(f'{$end - $start:.2f}')") s"
echo "server memory before: $before"
echo "server memory after:  $after"
