# Shared set-up of the benchmark scripts (sourced). Creates a fresh database with 128 users,
# each holding a token with tokens:issue and activity:read on one workspace, and exports
# ORG, WS, TOKEN0, OUT (a temporary folder with tokens.txt and users.csv) and DATABASE_URL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
SECS=${SECS:-15}
CONNS=64
PG=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
DB=cp_bench
BIN=${CARGO_TARGET_DIR:-target}/release
# The cpctl that sets the database up: an A/B against an older build passes that build's, so
# the schema starts at the oldest build's migrations and each newer server adds its own.
CPCTL=${BENCH_CPCTL:-$BIN/cpctl}
HERE=tests/bench
OUT=$(mktemp -d)
PIDS=()

[ -x $BIN/control-plane ] && [ -x $BIN/cpctl ] && [ -x $BIN/examples/bare ] || \
  cargo build --release -p control-plane -p cpctl --bins --example bare

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ -n "${KEEP:-}" ]; then echo "outputs kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT

psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
export DATABASE_URL=$PG/$DB
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS

echo "setting up 128 users with tokens..." >&2
boot=$($CPCTL bootstrap --org bench --workspace main --admin u0@bench.test -o json)
read -r ORG WS USER0 TOKEN0 < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["organisationId"], d["workspaceId"], d["userId"], d["credential"]["token"])' <<<"$boot")
echo "$TOKEN0" > "$OUT/tokens.txt"
echo "0,$USER0,$(cut -d_ -f2 <<<"$TOKEN0")" > "$OUT/users.csv"
for n in $(seq 1 127); do
  user=$($CPCTL users create --org "$ORG" "u$n@bench.test")
  token=$($CPCTL tokens issue --user "$user" --name bench --scope tokens:issue --scope activity:read --workspace "$WS" -o json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  echo "$token" >> "$OUT/tokens.txt"
  echo "$n,$user,$(cut -d_ -f2 <<<"$token")" >> "$OUT/users.csv"
done
psql "$DATABASE_URL" -qc "CREATE TABLE bench_users (n int PRIMARY KEY, user_id uuid NOT NULL, public_id text NOT NULL)" \
  -c "\copy bench_users FROM '$OUT/users.csv' CSV"
export BENCH_ORG=$ORG BENCH_WS=$WS BENCH_TOKEN=$TOKEN0 BENCH_TOKENS=$OUT/tokens.txt

# start_server PORT [ENV=VALUE ...]: a release server in the background, waited for; SERVER_BIN
# names another binary (policy.sh's allow-all build).
start_server() {
  local port=$1; shift
  env "$@" "${SERVER_BIN:-$BIN/control-plane}" --listen "127.0.0.1:$port" --log-format json > "$OUT/server-$port.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return; sleep 0.2; done
  echo "server on $port did not start" >&2; return 1
}

wrk_run() { wrk -t2 -c$CONNS -d"${SECS}s" --latency "$@"; }
pg_run() {
  local name=$1; shift
  (cd "$OUT" && pgbench -n -M prepared -c $CONNS -j 2 -T "$SECS" -l --log-prefix="$name" "$@" "$DATABASE_URL") > "$OUT/$name.txt" 2>&1
}

# summarise ROW... where ROW is "label:file:kind" (kind wrk|pg): prints a Markdown table.
summarise() {
  python3 - "$OUT" "$@" <<'PY'
import glob, os, re, sys
out, rows = sys.argv[1], sys.argv[2:]
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
print("| run | req/s | p50 ms | p99 ms | non-2xx |")
print("|---|---:|---:|---:|---:|")
results = {}
for row in rows:
    label, name, kind = row.rsplit(":", 2)
    r = (wrk if kind == "wrk" else pg)(name)
    results[name] = r
    print(f"| {label} | {r[0]:,.0f} | {r[1]:.2f} | {r[2]:.2f} | {r[3]} |")
with open(os.path.join(out, "rates.txt"), "w") as f:
    for k, v in results.items(): f.write(f"{k} {v[0]}\n")
PY
}
ratio() { awk -v a="$1" -v b="$2" 'FNR==NR { r[$1] = $2; next } END { printf "%.2f\n", r[a] / r[b] }' "$OUT/rates.txt" /dev/null; }
