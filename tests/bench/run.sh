#!/usr/bin/env bash
# Foundation benchmarks: token issuance and GET activity through the server, side by side with
# two floors measured in the same run: a bare poem handler, and pgbench running the same SQL.
#
#   tests/bench/run.sh [seconds]        (default 15; needs wrk, pgbench, release binaries)
#
# Postgres at 127.0.0.1:5432 (user postgres). Prints a Markdown table for BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-15}
CONNS=64
PG=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
DB=cp_bench
BIN=target/release
OUT=$(mktemp -d)
HERE=tests/bench

[ -x $BIN/control-plane ] && [ -x $BIN/cpctl ] && [ -x $BIN/examples/bare ] || \
  cargo build --release -p control-plane -p cpctl --bins --example bare

cleanup() { kill "${SERVER:-}" "${BARE:-}" 2>/dev/null || true; [ -n "${KEEP:-}" ] && echo "outputs kept in $OUT" >&2 || rm -rf "$OUT"; }
trap cleanup EXIT

psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL=$PG/$DB
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY

echo "setting up 128 users with tokens..." >&2
boot=$($BIN/cpctl bootstrap --org bench --workspace main --admin u0@bench.test -o json)
read -r ORG WS USER0 TOKEN0 < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["organisationId"], d["workspaceId"], d["userId"], d["credential"]["token"])' <<<"$boot")
echo "$TOKEN0" > "$OUT/tokens.txt"
echo "0,$USER0,$(cut -d_ -f2 <<<"$TOKEN0")" > "$OUT/users.csv"
for n in $(seq 1 127); do
  user=$($BIN/cpctl users create --org "$ORG" "u$n@bench.test")
  token=$($BIN/cpctl tokens issue --user "$user" --name bench --scope tokens:issue --scope activity:read --workspace "$WS" -o json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  echo "$token" >> "$OUT/tokens.txt"
  echo "$n,$user,$(cut -d_ -f2 <<<"$token")" >> "$OUT/users.csv"
done
psql "$DATABASE_URL" -qc "CREATE TABLE bench_users (n int PRIMARY KEY, user_id uuid NOT NULL, public_id text NOT NULL)" \
  -c "\copy bench_users FROM '$OUT/users.csv' CSV"

$BIN/control-plane --listen 127.0.0.1:18080 --log-format json > /dev/null 2>&1 &
SERVER=$!
$BIN/examples/bare 127.0.0.1:18090 > /dev/null 2>&1 &
BARE=$!
for _ in $(seq 1 50); do curl -sf http://127.0.0.1:18080/readyz >/dev/null && break; sleep 0.2; done

export BENCH_ORG=$ORG BENCH_WS=$WS BENCH_TOKEN=$TOKEN0 BENCH_TOKENS=$OUT/tokens.txt
wrk_run() { wrk -t2 -c$CONNS -d"${SECS}s" --latency "$@"; }
pg_run() {
  local name=$1; shift
  (cd "$OUT" && pgbench -n -M prepared -c $CONNS -j 2 -T "$SECS" -l --log-prefix="$name" "$@" "$DATABASE_URL") > "$OUT/$name.txt" 2>&1
}

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

python3 - "$OUT" <<'PY'
import glob, os, re, sys
out = sys.argv[1]
def unit(v):
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    return float(m[1]) * {"us": 0.001, "ms": 1, "s": 1000}[m[2]]
def wrk(name):
    t = open(os.path.join(out, name + ".txt")).read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t)[1])
    p = {k: unit(v) for k, v in re.findall(r"^\s+(50|99)%\s+(\S+)", t, re.M)}
    bad = re.search(r"non-2xx responses: (\d+)", t)
    return rps, p["50"], p["99"], int(bad[1]) if bad else 0
def pg(name):
    t = open(os.path.join(out, name + ".txt")).read()
    tps = float(re.search(r"tps = ([\d.]+)", t)[1])
    lat = []
    for f in glob.glob(os.path.join(out, name + ".*")):
        if f.endswith(".txt"): continue
        for line in open(f):
            parts = line.split()
            if len(parts) >= 3: lat.append(int(parts[2]) / 1000.0)
    lat.sort()
    q = lambda x: lat[min(len(lat) - 1, int(x * len(lat)))]
    return tps, q(0.50), q(0.99), 0
rows = [
    ("bare poem handler (floor)", wrk("bare")),
    ("GET activity", wrk("activity")),
    ("pgbench: activity SQL (floor)", pg("pg_activity")),
    ("POST personal-access-tokens", wrk("issue")),
    ("pgbench: issuance SQL (floor)", pg("pg_issue")),
]
print("| run | req/s | p50 ms | p99 ms | non-2xx |")
print("|---|---:|---:|---:|---:|")
for name, (rps, p50, p99, bad) in rows:
    print(f"| {name} | {rps:,.0f} | {p50:.2f} | {p99:.2f} | {bad} |")
a, pa, i, pi = rows[1][1][0], rows[2][1][0], rows[3][1][0], rows[4][1][0]
print()
print(f"GET activity / its pgbench floor: {a / pa:.2f}")
print(f"issuance / its pgbench floor: {i / pi:.2f}")
print()
print("server responses by operation and status:")
for line in open(os.path.join(out, "metrics.txt")):
    print("    " + line.strip())
PY
