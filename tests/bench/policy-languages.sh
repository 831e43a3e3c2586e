#!/usr/bin/env bash
# GET activity with the built-in Rust authorizer, a Python and a JavaScript authorizer active,
# each with pooled copy-on-write instances and with on-demand ones
# (CP_POLICY_INSTANCE_ALLOCATION): an embedded server each, one run, rounds alternated (the order
# rotates each round), medians reported with ratios against the Rust authorizer of the same
# allocation, and with each server's CPU and minor page faults per request (from /proc). Then
# the decision alone, in process: tests/bench/policy_profile.rs.
#
#   tests/bench/policy-languages.sh [seconds-per-run] [rounds]     (default 10 s, 3 rounds)
#
# The Python and JavaScript components are BENCH_POLICY_DIR/{python,js}-authorizer.wasm, or
# built there by policies/examples/build.sh when BENCH_POLICY_DIR is unset.
# BENCH_POLICY_MEMORY_MIB (default 64) is every server's CP_POLICY_MEMORY_MIB.
# BENCH_POLICY_ALLOCATIONS (default "pooling on-demand") limits the allocations measured.
# BENCH_POLICY_SLOTS="2 32" runs each pooled Python and JavaScript server once per decision slot
# count (CP_POLICY_CONCURRENCY), named python-pooling@2 and so on; unset, the server's default.
SECS=${1:-10}
# A server compiles a Python or JavaScript component at start when no native code of its
# engine configuration is cached yet (on-demand allocation is another configuration): allow it.
START_WAIT=180
ROUNDS=${2:-3}
# shellcheck source=lib.sh
BENCH_SETUP=none source "$(dirname "$0")/lib.sh"
ensure_built examples/policy_profile
# As the figures this compares with were measured: 16 connections.
CONNS=16
MEMORY_MIB=${BENCH_POLICY_MEMORY_MIB:-64}

POLICIES=${BENCH_POLICY_DIR:-$OUT/policies}
if [ ! -f "$POLICIES/python-authorizer.wasm" ] || [ ! -f "$POLICIES/js-authorizer.wasm" ]; then
  [ -x policies/examples/build.sh ] || { echo "no $POLICIES/{python,js}-authorizer.wasm and no policies/examples/build.sh to build them" >&2; exit 1; }
  policies/examples/build.sh "$POLICIES" >&2
fi

# On-demand instances copy a Python heap's 12 MiB image into every decision: at 16 connections
# they pass the 50 ms default and fail closed (403 policy_error: 9 to 1,425 a run on
# 2026-11-26), which refuses the run. They get a 1 s deadline, so their cost shows as latency
# and throughput; the pooled servers keep the default every deployment runs with.
declare -A DEADLINE_MS=([pooling]=50 [on-demand]=1000)
LIMITS_OFF=(CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off
  CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off)
declare -A PORT PID WS TOKEN
NAMES=()
port=18110
# serve LANG ALLOCATION [SLOTS]: a fresh embedded store whose active authorizer is LANG's, and a
# server on it with SLOTS decision slots (the default when omitted).
serve() {
  local lang=$1 allocation=$2 slots=${3:-} name=$1-$2${3:+@$3} dir boot
  dir=$OUT/$name
  mkdir -p "$dir"
  local store=(env DATABASE_URL="sqlite://$dir/control-plane.db" CP_DATA_DIR="$dir"
    CP_POLICY_MEMORY_MIB="$MEMORY_MIB")
  boot=$("${store[@]}" "$CPCTL" bootstrap --org bench --workspace main --admin u0@bench.test -o json)
  read -r WS["$name"] TOKEN["$name"] < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["workspaceId"], d["credential"]["token"])' <<<"$boot")
  PORT[$name]=$port
  start_server "$port" DATABASE_URL="sqlite://$dir/control-plane.db" CP_DATA_DIR="$dir" \
    CP_POLICY_MEMORY_MIB="$MEMORY_MIB" CP_POLICY_INSTANCE_ALLOCATION="$allocation" \
    CP_POLICY_DEADLINE_MS="${DEADLINE_MS[$allocation]}" ${slots:+CP_POLICY_CONCURRENCY=$slots} \
    "${LIMITS_OFF[@]}"
  if [ "$lang" != rust ]; then
    # Over HTTP, as the bootstrap's operator: the server measures it with its own settings.
    local operator=(env CPCTL_SERVER="http://127.0.0.1:$port" CPCTL_TOKEN="${TOKEN[$name]}")
    "${operator[@]}" "$CPCTL" policies install "$POLICIES/$lang-authorizer.wasm" --kind authorizer --name "$lang" >/dev/null
    "${operator[@]}" "$CPCTL" policies activate "$lang@1" >/dev/null
  fi
  PID[$name]=${PIDS[-1]}
  NAMES+=("$name")
  port=$((port + 1))
}
read -ra SLOTS <<<"${BENCH_POLICY_SLOTS:-}"
for allocation in ${BENCH_POLICY_ALLOCATIONS:-pooling on-demand}; do
  serve rust "$allocation"
  for lang in python js; do
    if [ "$allocation" = pooling ] && [ ${#SLOTS[@]} -gt 0 ]; then
      for slots in "${SLOTS[@]}"; do serve $lang pooling "$slots"; done
    else
      serve $lang "$allocation"
    fi
  done
done

get() { # NAME SECONDS: wrk on NAME's server
  BENCH_WS=${WS[$1]} BENCH_TOKEN=${TOKEN[$1]} SECS=$2 \
    wrk_run -s $HERE/activity.lua "http://127.0.0.1:${PORT[$1]}"
}
# The server's minor page faults and CPU ticks (user + system) so far: what a request costs the
# server beyond the decision measured in process (a fault in a threaded process can cost a
# TLB shootdown on the other cores).
server_counts() { awk '{print $10, $14 + $15}' "/proc/${PID[$1]}/stat"; }
for name in "${NAMES[@]}"; do get "$name" 2 > /dev/null; done
ROWS=()
for round in $(seq 1 "$ROUNDS"); do
  n=${#NAMES[@]}
  for i in $(seq 0 $((n - 1))); do
    name=${NAMES[$(( (i + round - 1) % n ))]}
    echo "round $round: $name" >&2
    before=$(server_counts "$name")
    get "$name" "$SECS" > "$OUT/$name-$round.txt"
    echo "$before $(server_counts "$name") $(getconf CLK_TCK)" > "$OUT/$name-$round.counts"
    ROWS+=("$name round $round:$name-$round:wrk")
  done
done
figures check "${ROWS[@]}"

echo "GET activity, ${CONNS} connections, ${SECS} s per run, $ROUNDS rounds alternated, median of rounds; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
RUNS=()
for name in "${NAMES[@]}"; do for round in $(seq 1 "$ROUNDS"); do RUNS+=("$name-$round"); done; done
figures runs "${RUNS[@]}" > "$OUT/runs.txt"
python3 - "$OUT" "$ROUNDS" "${NAMES[@]}" <<'PY'
import statistics, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
# "NAME req/s p50 p99 requests" per run, from lib.sh's figures.
runs = {line.split()[0]: line.split()[1:] for line in open(f"{out}/runs.txt")}
med = {}
for name in names:
    rps, p50, p99, faults, cpu = [], [], [], [], []
    for r in range(1, rounds + 1):
        run = runs[f"{name}-{r}"]
        rps.append(float(run[0])); p50.append(float(run[1])); p99.append(float(run[2]))
        n = int(run[3])
        f0, c0, f1, c1, hz = map(int, open(f"{out}/{name}-{r}.counts").read().split())
        faults.append((f1 - f0) / n); cpu.append((c1 - c0) / hz / n * 1e6)
    med[name] = (statistics.median(rps), statistics.median(p50), statistics.median(p99), min(rps), max(rps),
                 statistics.median(faults), statistics.median(cpu))
print("\n| authorizer | allocation | req/s (median; min-max) | p50 ms | p99 ms | / Rust, same allocation | / Rust pooling | server CPU µs/request | page faults/request |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for name in names:
    lang, allocation = name.split("-", 1)
    r = med[name]
    same = med[f"rust-{allocation.split('@')[0]}"][0]
    pool = med.get("rust-pooling", (None,))[0]
    vs_pool = f"{r[0] / pool:.2f}" if pool else "–"
    print(f"| {lang} | {allocation} | {r[0]:,.0f} ({r[3]:,.0f}-{r[4]:,.0f}) | {r[1]:.2f} | {r[2]:.2f} | {r[0]/same:.2f} | {vs_pool} | {r[6]:,.0f} | {r[5]:.0f} |")
PY
echo
echo "checked: no answer outside 2xx (3xx included) and no socket error in any run"
stop_servers

echo
echo "One decision in process (fresh instance each), $MEMORY_MIB MiB budget, microseconds:"
"$BIN/examples/policy_profile" --memory-mib "$MEMORY_MIB" --decisions 2000 \
  builtin "$POLICIES/python-authorizer.wasm" "$POLICIES/js-authorizer.wasm"
