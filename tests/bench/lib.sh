# shellcheck shell=bash
# Shared set-up of the benchmark scripts (sourced). Creates a fresh database with 128 users,
# each holding a token with tokens:issue and activity:read on one workspace, and exports
# ORG, WS, TOKEN0, OUT (a temporary folder with tokens.txt and users.csv) and DATABASE_URL.
# The users and their tokens are made over HTTP through a temporary server (setup_server), which
# is stopped before the script goes on; a script setting up more calls setup_server again.
# BENCH_SETUP=none before sourcing skips the database (embedded.sh and operations.sh set up
# their own) and keeps only the helpers.
#
# Binaries come from $DRILL_BIN_DIR when it is set (a release folder: control-plane, cpctl,
# examples/...), and then cargo is never run: a missing binary is an error. Otherwise from
# ${CARGO_TARGET_DIR:-target}/release, building what is missing.
#
# Every figure goes through `figures` below before it is printed: a run with any answer
# outside 200..299 (3xx included), a socket error, a failed or aborted pgbench transaction or
# a failed ops_load report gives no figure, and a ratio above 1.0 against a run labelled a
# floor is refused; either way the script exits non-zero, naming the run and what was wrong.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
SECS=${SECS:-15}
CONNS=64
PG=${BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}
# One database per script (cp_bench_run, cp_bench_batch_crash, ...; BENCH_DB names another),
# so that a drill and a benchmark running at once do not drop each other's database.
DB=${BENCH_DB:-cp_bench_$(basename "$0" .sh | tr -c 'a-z0-9_\n' '_')}
BIN=${DRILL_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}
# The cpctl that sets the database up: an A/B against an older build passes that build's, so
# the schema starts at the oldest build's migrations (ab.sh gives each build its own copy, to
# which a newer server adds its own).
CPCTL=${BENCH_CPCTL:-$BIN/cpctl}
# cpctl's users, tokens and workspaces verbs go over HTTP to a running server (CPCTL_SERVER,
# CPCTL_TOKEN), so the set-up runs them against a setup server (setup_server below). None with
# BENCH_CPCTL set: an older cpctl opens the store for those verbs and ignores CPCTL_*, and a
# setup server of this tree would migrate the schema past the older build's, which an A/B must
# not run on. BENCH_SETUP_SERVER=yes starts one anyway (a BENCH_CPCTL wrapping this tree's
# cpctl, such as wrong-secret-cpctl.sh), =no never.
SETUP_SERVER=${BENCH_SETUP_SERVER:-$([ -n "${BENCH_CPCTL:-}" ] && echo no || echo yes)}
SETUP_PID=
# shellcheck disable=SC2034 # HERE is for the scripts that source this file
HERE=tests/bench
OUT=$(mktemp -d)
PIDS=()

# ensure_built FILE...: the binaries under $BIN a script runs (control-plane, cpctl,
# examples/NAME). Builds the missing ones, or with DRILL_BIN_DIR set refuses to go on.
ensure_built() {
  local missing=() f
  for f in "$@"; do [ -x "$BIN/$f" ] || missing+=("$f"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ -n "${DRILL_BIN_DIR:-}" ]; then
    echo "DRILL_BIN_DIR=$DRILL_BIN_DIR has no ${missing[*]} (with DRILL_BIN_DIR set, nothing is built)" >&2
    return 1
  fi
  local args=(-p control-plane -p cpctl --bins)
  for f in "${missing[@]}"; do
    case $f in examples/*) args+=(--example "${f#examples/}") ;; esac
  done
  cargo build --release "${args[@]}"
}
ensure_built control-plane cpctl

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -z "$SETUP_PID" ] || kill "$SETUP_PID" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "outputs kept in $OUT" >&2; else rm -rf "$OUT"; fi
}
trap cleanup EXIT

CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS

# setup_server: the set-up's temporary server ($SETUP_SERVER=yes), $BIN/control-plane on
# $DATABASE_URL at a loopback port the kernel picks, every limit off, waited for (/readyz); exports
# CPCTL_SERVER and CPCTL_TOKEN=$TOKEN0 (the bootstrap's operator, every scope) for the cpctl calls
# that follow. stop_setup_server stops it and waits for it, so that no server numbers events
# during a floor and no connection is left to the database, and unsets both.
setup_server() {
  [ "$SETUP_SERVER" = yes ] || return 0
  env CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off \
    CP_MAX_ACTIVE_TOKENS_PER_USER=1000000 \
    "$BIN/control-plane" --listen 127.0.0.1:0 --log-format json > "$OUT/setup-server.log" 2>&1 &
  SETUP_PID=$!
  local port= _
  for _ in $(seq 1 $((${START_WAIT:-10} * 5))); do
    kill -0 "$SETUP_PID" 2>/dev/null || break
    port=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        fields = json.loads(line).get("fields", {})
    except ValueError:
        continue
    if fields.get("message") == "listening":
        print(fields["port"]); break' "$OUT/setup-server.log")
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    port=
    sleep 0.2
  done
  if [ -z "$port" ]; then
    echo "the setup server did not start:" >&2; tail -3 "$OUT/setup-server.log" >&2; return 1
  fi
  export CPCTL_SERVER=http://127.0.0.1:$port CPCTL_TOKEN=$TOKEN0
}
stop_setup_server() {
  [ -n "$SETUP_PID" ] || return 0
  kill "$SETUP_PID" 2>/dev/null || true
  wait "$SETUP_PID" 2>/dev/null || true
  SETUP_PID=
  unset CPCTL_SERVER CPCTL_TOKEN
}

if [ "${BENCH_SETUP:-users}" != none ]; then
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
  export DATABASE_URL=$PG/$DB

  echo "setting up 128 users with tokens..." >&2
  boot=$($CPCTL bootstrap --org bench --workspace main --admin u0@bench.test -o json)
  read -r ORG WS USER0 TOKEN0 < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["organisationId"], d["workspaceId"], d["userId"], d["credential"]["token"])' <<<"$boot")
  echo "$TOKEN0" > "$OUT/tokens.txt"
  echo "0,$USER0,$(cut -d_ -f2 <<<"$TOKEN0")" > "$OUT/users.csv"
  setup_server
  for n in $(seq 1 127); do
    user=$($CPCTL users create --org "$ORG" "u$n@bench.test")
    token=$($CPCTL tokens issue --user "$user" --name bench --scope tokens:issue --scope activity:read --workspace "$WS" -o json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
    echo "$token" >> "$OUT/tokens.txt"
    echo "$n,$user,$(cut -d_ -f2 <<<"$token")" >> "$OUT/users.csv"
  done
  stop_setup_server
  psql "$DATABASE_URL" -qc "CREATE TABLE bench_users (n int PRIMARY KEY, user_id uuid NOT NULL, public_id text NOT NULL)" \
    -c "\copy bench_users FROM '$OUT/users.csv' CSV"
  export BENCH_ORG=$ORG BENCH_WS=$WS BENCH_TOKEN=$TOKEN0 BENCH_TOKENS=$OUT/tokens.txt
fi

# port_free PORT: fails, saying so, if something already answers on PORT (another script's
# server: measuring it would be measuring someone else's run).
port_free() {
  if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$1/"; then
    echo "port $1 is already answered by another process: not starting a server there" >&2
    return 1
  fi
}
# start_server PORT [ENV=VALUE ...]: a release server in the background, waited for (at most
# START_WAIT seconds, default 10); SERVER_BIN names another binary (policy.sh's allow-all build).
start_server() {
  local port=$1 pid; shift
  port_free "$port"
  env "$@" "${SERVER_BIN:-$BIN/control-plane}" --listen "127.0.0.1:$port" --log-format json > "$OUT/server-$port.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 $((${START_WAIT:-10} * 5))); do
    kill -0 "$pid" 2>/dev/null || break
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return
    sleep 0.2
  done
  echo "server on $port did not start:" >&2; tail -3 "$OUT/server-$port.log" >&2; return 1
}
# stop_servers: stops every process started so far (servers, the bare handler) and waits for
# them, so that a floor can run with no server numbering its events or sharing the cores.
stop_servers() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}

# wrk_run ARGS...: a measured wrk run. Its script must load count.lua (activity.lua and
# issue.lua do; a run with no script of its own passes -s $HERE/count.lua), or `figures`
# refuses the run for want of a count.
wrk_run() { wrk -t2 -c$CONNS -d"${SECS}s" --latency "$@"; }
# pg_run NAME ARGS...: pgbench into $OUT/NAME.txt (and per-transaction logs for percentiles).
pg_run() {
  local name=$1 rc=0; shift
  (cd "$OUT" && pgbench -n -M prepared -c $CONNS -j 2 -T "$SECS" -l --log-prefix="$name" "$@" "$DATABASE_URL") > "$OUT/$name.txt" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    echo "REFUSED: pgbench run $name exited with $rc:" >&2; tail -5 "$OUT/$name.txt" | sed 's/^/    /' >&2
    return 1
  fi
}
# delete_floor_rows: what a pgbench floor inserted (pgbench-issue-floor.sql,
# pgbench-two-inserts.sql): its events, left without a sequence (no server's sequencer may
# number them during another measured run), its tokens' grants and its tokens.
delete_floor_rows() {
  psql "$DATABASE_URL" -qc "DELETE FROM audit_events WHERE seq IS NULL AND workspace_id IS NOT NULL
      AND correlation_id = '5f0e6a8e-0000-4000-8000-000000000000'" \
    -c "DELETE FROM token_workspaces WHERE token_id IN (SELECT id FROM tokens WHERE name LIKE 'pgbench-%')" \
    -c "DELETE FROM tokens WHERE name LIKE 'pgbench-%'"
}

# figures COMMAND ARG...: the checks and the arithmetic behind every printed figure, once.
#   figures check ROW...  ROW is "label:name:kind", the run's output in $OUT/name.txt; kind
#                         wrk (a script loading count.lua), pg (pg_run) or ops (ops_load
#                         signed). Refuses (exit 1, each refused run named on stderr with its
#                         bad answers by status) unless every run is clean: no answer outside
#                         2xx by count.lua or by wrk's own "Non-2xx or 3xx" line, no socket
#                         error, every wrk thread counted; for pgbench, no failed transaction
#                         and no aborted client; for ops_load, no failed report. Records each
#                         clean run's rate in $OUT/rates.txt ("floor" when its label says so).
#   figures table ROW...  the same checks, then a Markdown table of the rows.
#   figures ratio A B     A's rate over B's, two decimals; A and B are run names or sums of
#                         them ("a1+a2"). Refused (exit 1) above 1.0 when B is a floor.
#   figures medians NAME...  "req/s p50 p99" (ms), each the median over the named wrk runs,
#                         which `check` has passed.
#   figures runs NAME...  "NAME req/s p50 p99 requests" (ms), one line per named wrk run,
#                         which `check` has passed.
figures() {
  python3 - "$OUT" "$@" <<'PY'
import glob, os, re, sys
out, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
rates_file = os.path.join(out, "rates.txt")

def unit(v):
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    return float(m[1]) * {"us": 0.001, "ms": 1, "s": 1000}[m[2]]

def read(name):
    path = os.path.join(out, name + ".txt")
    return open(path).read() if os.path.exists(path) else ""

def wrk(name):
    t, bad = read(name), []
    rps = re.search(r"Requests/sec:\s+([\d.]+)", t)
    done = re.search(r"(\d+) requests in", t)
    if not rps or not done:
        return None, ["no wrk summary in its output"]
    if int(done[1]) == 0:
        bad.append("no request completed")
    own = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    if own and int(own[1]):
        bad.append(f"wrk counted {own[1]} answers with status > 399")
    hook = re.search(r"^answers outside 2xx: (\d+) \(([^)]*)\), from (\d+) threads$", t, re.M)
    threads = re.search(r"(\d+) threads and \d+ connections", t)
    if not hook:
        bad.append("no count of answers (its wrk script must load tests/bench/count.lua)")
    else:
        if int(hook[1]):
            bad.append(f"{hook[1]} answers outside 2xx, by status {hook[2]}")
        if threads and int(hook[3]) != int(threads[1]):
            bad.append(f"answers counted in {hook[3]} of {threads[1]} threads")
    for line in sorted(set(l.lower() for l in re.findall(r"^\s*(socket errors: .*)$", t, re.M | re.I))):
        if any(int(n) for n in re.findall(r"\d+", line)):
            bad.append(line)
    p = {k: unit(v) for k, v in re.findall(r"^\s+(50|99)%\s+(\S+)", t, re.M)}
    return (float(rps[1]), p.get("50"), p.get("99"), int(done[1])), bad

def pg(name):
    t, bad = read(name), []
    tps = re.search(r"tps = ([\d.]+)", t)
    done = re.search(r"number of transactions actually processed: (\d+)", t)
    if not tps or not done:
        return None, ["no pgbench summary in its output"]
    if int(done[1]) == 0:
        bad.append("no transaction completed")
    failed = re.search(r"number of failed transactions: (\d+)", t)
    if not failed:
        bad.append("pgbench printed no count of failed transactions")
    elif int(failed[1]):
        bad.append(f"{failed[1]} failed transactions")
    aborted = len(re.findall(r"aborted", t))
    if aborted:
        bad.append(f"{aborted} lines saying a client or the run aborted")
    lat = []
    for f in glob.glob(os.path.join(out, name + ".*")):
        if f.endswith(".txt"): continue
        for line in open(f):
            parts = line.split()
            if len(parts) >= 3: lat.append(int(parts[2]) / 1000.0)
    lat.sort()
    q = lambda x: lat[min(len(lat) - 1, int(x * len(lat)))] if lat else None
    return (float(tps[1]), q(0.50), q(0.99)), bad

def ops(name):
    t, bad = read(name), []
    m = re.search(r"signed reports: (\d+) ok, (\d+) failed in ([\d.]+) s = ([\d.]+) req/s", t)
    if not m:
        return None, ["no ops_load summary in its output"]
    if int(m[1]) == 0:
        bad.append("no report succeeded")
    if int(m[2]):
        bad.append(f"{m[2]} failed reports (answers outside 2xx or transport errors: ops_load does not tell them apart)")
    return (float(m[4]), None, None), bad

def load_rates():
    rates = {}
    if os.path.exists(rates_file):
        for line in open(rates_file):
            parts = line.split()
            rates[parts[0]] = (float(parts[1]), len(parts) > 2 and parts[2] == "floor")
    return rates

def check(rows):
    results, refused = [], []
    for row in rows:
        label, name, kind = row.rsplit(":", 2)
        r, bad = {"wrk": wrk, "pg": pg, "ops": ops}[kind](name)
        if bad:
            refused.append(f'REFUSED: run "{label}" ({name}): ' + "; ".join(bad))
        else:
            results.append((label, name, r))
    if refused:
        for line in refused: print(line, file=sys.stderr)
        print(f"no figure reported: {len(refused)} of {len(rows)} runs refused", file=sys.stderr)
        sys.exit(1)
    rates = load_rates()
    for label, name, r in results:
        rates[name] = (r[0], "floor" in label)
    with open(rates_file, "w") as f:
        for k, (v, floor) in rates.items(): f.write(f"{k} {v} {'floor' if floor else '-'}\n")
    return results

def ms(v): return "–" if v is None else f"{v:.2f}"

if cmd == "check":
    check(args)
elif cmd == "table":
    results = check(args)
    print("| run | req/s | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    for label, name, r in results:
        print(f"| {label} | {r[0]:,.0f} | {ms(r[1])} | {ms(r[2])} |")
    print("\nchecked: no answer outside 2xx (3xx included), no socket error, no failed transaction or report")
elif cmd == "ratio":
    rates = load_rates()
    def total(expr):
        names = expr.split("+")
        missing = [n for n in names if n not in rates]
        if missing:
            print(f"REFUSED: no checked figure for {', '.join(missing)}", file=sys.stderr); sys.exit(1)
        return sum(rates[n][0] for n in names), all(rates[n][1] for n in names)
    a, _ = total(args[0])
    b, floor = total(args[1])
    if floor and a > b:
        print(f"REFUSED: {args[0]} is {a / b:.2f} of {args[1]}, which is labelled a floor: "
              "a floor that is exceeded is not a floor", file=sys.stderr)
        sys.exit(1)
    print(f"{a / b:.2f}")
elif cmd == "medians":
    import statistics
    runs = [wrk(name)[0] for name in args]
    print(" ".join(f"{statistics.median(r[i] for r in runs):.3f}" for i in range(3)))
elif cmd == "runs":
    for name in args:
        print(name, *wrk(name)[0])
else:
    sys.exit(f"figures: unknown command {cmd}")
PY
}
# summarise ROW...: figures table (kept for the scripts' old calls).
summarise() { figures table "$@"; }
# ratio A B: figures ratio. Call it as `r=$(ratio a b)`, not inside another command's
# arguments, so that a refusal stops the script (set -e); say_ratio does that.
ratio() { figures ratio "$@"; }
# say_ratio LABEL A B: prints "LABEL: RATIO", or stops the script if the ratio is refused.
say_ratio() {
  local r
  r=$(figures ratio "$2" "$3") || exit 1
  echo "$1: $r"
}
