#!/usr/bin/env bash
# Warm instances against fresh ones: GET activity with the built-in Rust authorizer, and with
# the Python and JavaScript example authorizers installed `--instances fresh` (a new instance
# for every decision) and `--instances per-organisation` (warm instances, each serving one
# organisation), at 16 and at 64 connections. An embedded server each, with two organisations
# in its store whose requests take turns in every wrk thread (activity-orgs.lua), so that
# per-organisation instances serve more than one organisation at once. One run per server and
# connection count each round, the order rotating; medians of rounds reported, with the ratio
# to the Rust authorizer at the same connections and of per-organisation to fresh. Refused
# (exit 1, naming the run) on any answer outside 2xx, as in every benchmark here, and when a
# server's policy_failures_total rises during a measured run.
#
#   tests/bench/policy-instances.sh [seconds-per-run] [rounds]     (default 10 s, 3 rounds)
#   tests/bench/policy-instances.sh 3 1                            the short form, for CI
#
# BENCH_SECONDS and BENCH_ROUNDS stand in for absent arguments.
# BENCH_POLICY_DIR holds {python,js}-authorizer.wasm, or they are built there by
# policies/examples/build.sh when missing.
# BENCH_CONNS (default "16 64"): the connection counts; BENCH_POLICY_LANGS (default
# "python js"): the installed authorizers measured beside the Rust one.
# BENCH_POLICY_MEMORY_MIB (default 64) is every server's CP_POLICY_MEMORY_MIB;
# BENCH_POLICY_DEADLINE_MS, when set, every server's CP_POLICY_DEADLINE_MS (the server's 50 ms
# otherwise, as a deployment runs); BENCH_POLICY_QUEUE_TIMEOUT_MS (default 1000) every
# server's CP_POLICY_QUEUE_TIMEOUT_MS: with the default (two deadlines), 64 connections on 2
# cores can wait past it for a slot with fresh Python or JavaScript instances (503: 613 and 31
# in 3 s, on 2 cores shared with a build, 2026-12-06), which refuses the run; a longer wait
# shows that cost as latency and throughput instead. The servers inherit the environment, so CP_POLICY_WARM_* (the warm
# instances' bounds) and CP_POLICY_CONCURRENCY set there apply.
SECS=${1:-${BENCH_SECONDS:-10}}
ROUNDS=${2:-${BENCH_ROUNDS:-3}}
# A server compiles a Python or JavaScript component at install when no native code of it is
# cached in its data folder yet: allow it.
START_WAIT=180
# shellcheck source=lib.sh
BENCH_SETUP=none source "$(dirname "$0")/lib.sh"
MEMORY_MIB=${BENCH_POLICY_MEMORY_MIB:-64}
QUEUE_TIMEOUT_MS=${BENCH_POLICY_QUEUE_TIMEOUT_MS:-1000}
read -ra CONN_COUNTS <<<"${BENCH_CONNS:-16 64}"
read -ra LANGS <<<"${BENCH_POLICY_LANGS:-python js}"
MODES=(fresh per-organisation)

# Read whole before it is searched: grep -q stopping early would fail the pipe (pipefail).
install_help=$("$CPCTL" policies install --help)
if ! grep -q -- '--instances' <<<"$install_help"; then
  echo "$CPCTL has no \`policies install --instances\`: build a cpctl (and server) that has" >&2
  exit 1
fi
POLICIES=${BENCH_POLICY_DIR:-$OUT/policies}
for lang in "${LANGS[@]}"; do
  if [ ! -f "$POLICIES/$lang-authorizer.wasm" ]; then
    [ -x policies/examples/build.sh ] || { echo "no $POLICIES/$lang-authorizer.wasm and no policies/examples/build.sh to build it" >&2; exit 1; }
    policies/examples/build.sh "$POLICIES" "$lang" >&2
  fi
done

LIMITS_OFF=(CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off
  CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off)
# POLICY: the `policy` label of the server's decision metrics.
declare -A PORT TOKENS WORKSPACES POLICY
NAMES=()
port=18140
# serve LANG [MODE]: a fresh embedded store with two organisations, a server on it, and LANG's
# authorizer installed with `--instances MODE` and activated (none for rust: the built-in one).
serve() {
  local lang=$1 mode=${2:-} name=$1${2:+-$2} dir boot ws token tokens=() workspaces=()
  dir=$OUT/$name
  mkdir -p "$dir"
  for org in a b; do
    boot=$(env DATABASE_URL="sqlite://$dir/control-plane.db" CP_DATA_DIR="$dir" \
      "$CPCTL" bootstrap --org "org-$org" --workspace main --admin "admin@$org.test" -o json)
    read -r ws token < <(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["workspaceId"], d["credential"]["token"])' <<<"$boot")
    workspaces+=("$ws"); tokens+=("$token")
  done
  TOKENS[$name]=${tokens[*]}
  WORKSPACES[$name]=${workspaces[*]}
  PORT[$name]=$port
  POLICY[$name]=built-in
  start_server "$port" DATABASE_URL="sqlite://$dir/control-plane.db" CP_DATA_DIR="$dir" \
    CP_POLICY_MEMORY_MIB="$MEMORY_MIB" CP_POLICY_QUEUE_TIMEOUT_MS="$QUEUE_TIMEOUT_MS" \
    ${BENCH_POLICY_DEADLINE_MS:+CP_POLICY_DEADLINE_MS=$BENCH_POLICY_DEADLINE_MS} "${LIMITS_OFF[@]}"
  if [ "$lang" != rust ]; then
    # Over HTTP, as the first bootstrap's operator: the server measures it with its own settings.
    local operator=(env CPCTL_SERVER="http://127.0.0.1:$port" CPCTL_TOKEN="${tokens[0]}") got
    "${operator[@]}" "$CPCTL" policies install "$POLICIES/$lang-authorizer.wasm" --kind authorizer \
      --name "$lang" --instances "$mode" >/dev/null
    # A server that ignored the mode would measure fresh instances under the other's name.
    got=$("${operator[@]}" "$CPCTL" policies show "$lang@1" -o json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin).get("instances", "(not said)"))')
    if [ "$got" != "$mode" ]; then
      echo "$name: installed with --instances $mode, the server says $got" >&2
      exit 1
    fi
    "${operator[@]}" "$CPCTL" policies activate "$lang@1" >/dev/null
    POLICY[$name]=$lang
  fi
  NAMES+=("$name")
  port=$((port + 1))
}
serve rust
for lang in "${LANGS[@]}"; do
  for mode in "${MODES[@]}"; do serve "$lang" "$mode"; done
done

get() { # NAME CONNECTIONS SECONDS: wrk on NAME's server, the two organisations taking turns
  BENCH_TOKENS=${TOKENS[$1]} BENCH_WORKSPACES=${WORKSPACES[$1]} CONNS=$2 SECS=$3 \
    wrk_run -s $HERE/activity-orgs.lua "http://127.0.0.1:${PORT[$1]}"
}
# The server's policy counters (failures, decisions, warm instances) into FILE.
policy_metrics() { # NAME FILE
  curl -sf "http://127.0.0.1:${PORT[$1]}/metrics" | { grep '^policy_' || true; } > "$2"
}
for name in "${NAMES[@]}"; do get "$name" "${CONN_COUNTS[-1]}" 2 > /dev/null; done
ROWS=()
RUNS=()
for round in $(seq 1 "$ROUNDS"); do
  for conns in "${CONN_COUNTS[@]}"; do
    n=${#NAMES[@]}
    for i in $(seq 0 $((n - 1))); do
      name=${NAMES[$(( (i + round - 1) % n ))]}
      run=$name-c$conns-$round
      echo "round $round: $name, $conns connections" >&2
      policy_metrics "$name" "$OUT/$run.before"
      get "$name" "$conns" "$SECS" > "$OUT/$run.txt"
      policy_metrics "$name" "$OUT/$run.after"
      ROWS+=("$name, $conns connections, round $round:$run:wrk")
      RUNS+=("$run")
    done
  done
done
figures check "${ROWS[@]}"
figures runs "${RUNS[@]}" > "$OUT/runs.txt"

echo "GET activity, two organisations taking turns, ${SECS} s per run, $ROUNDS rounds alternated, median of rounds; slot wait up to $QUEUE_TIMEOUT_MS ms, deadline ${BENCH_POLICY_DEADLINE_MS:-50} ms; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for name in "${NAMES[@]}"; do echo "$name ${POLICY[$name]}"; done > "$OUT/policies.txt"
python3 - "$OUT" "$ROUNDS" "${CONN_COUNTS[*]}" "${NAMES[@]}" <<'PY'
import re, statistics, sys
out, rounds, conn_counts, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
# The `policy` label of each server's decisions: "NAME LABEL" lines.
policy = dict(line.split() for line in open(f"{out}/policies.txt"))

def counters(path):
    """name -> {labels: value} of the policy_* lines of a /metrics scrape."""
    found = {}
    for line in open(path):
        m = re.match(r'^(\w+)(?:\{(.*)\})?\s+(\S+)$', line.strip())
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2] or ""))
            found.setdefault(m[1], []).append((labels, float(m[3])))
    return found

def total(scrape, metric, **want):
    return sum(v for labels, v in scrape.get(metric, []) if all(labels.get(k) == x for k, x in want.items()))

# "NAME req/s p50 p99 requests" per run, from lib.sh's figures.
runs = {line.split()[0]: line.split()[1:] for line in open(f"{out}/runs.txt")}
refused, warm, med = [], {}, {}
for name in names:
    for conns in conn_counts:
        rps, p50, p99, reused, counted = [], [], [], 0, 0
        for r in range(1, rounds + 1):
            run = f"{name}-c{conns}-{r}"
            before, after = counters(f"{out}/{run}.before"), counters(f"{out}/{run}.after")
            failed = total(after, "policy_failures_total") - total(before, "policy_failures_total")
            if failed:
                refused.append(f"REFUSED: run {run}: policy_failures_total rose by {failed:.0f}")
            if policy[name] != "built-in":
                decided = (total(after, "policy_decisions_total", kind="authorizer", policy=policy[name])
                           - total(before, "policy_decisions_total", kind="authorizer", policy=policy[name]))
                if decided <= 0:
                    refused.append(f"REFUSED: run {run}: no decision of the policy {policy[name]} counted")
            # Which instance each per-organisation decision ran in (absent for fresh ones).
            delta = {i: total(after, "policy_warm_decisions_total", instance=i)
                        - total(before, "policy_warm_decisions_total", instance=i)
                     for i in ("reused", "new", "one_off")}
            reused += delta["reused"]; counted += sum(delta.values())
            rps.append(float(runs[run][0])); p50.append(float(runs[run][1])); p99.append(float(runs[run][2]))
        med[name, conns] = (statistics.median(rps), statistics.median(p50), statistics.median(p99), min(rps), max(rps))
        warm[name, conns] = reused / counted if counted else None
if refused:
    for line in refused: print(line, file=sys.stderr)
    print(f"no figure reported: {len(refused)} runs refused", file=sys.stderr)
    sys.exit(1)

print("\n| authorizer | instances | connections | req/s (median; min-max) | p50 ms | p99 ms | / Rust | per-organisation / fresh | warm decisions reused |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for conns in conn_counts:
    rust = med["rust", conns][0]
    for name in names:
        lang, _, mode = name.partition("-")
        r = med[name, conns]
        fresh = med.get((f"{lang}-fresh", conns))
        vs_fresh = f"{r[0] / fresh[0]:.2f}" if mode == "per-organisation" and fresh else "–"
        w = warm[name, conns]
        reused = f"{w:.1%}" if w is not None else "–"
        print(f"| {lang} | {mode or 'built-in'} | {conns} | {r[0]:,.0f} ({r[3]:,.0f}-{r[4]:,.0f}) | {r[1]:.2f} | {r[2]:.2f} "
              f"| {r[0] / rust:.2f} | {vs_fresh} | {reused} |")
PY
echo
echo "checked: no answer outside 2xx (3xx included), no socket error, no rise of policy_failures_total in any run"
stop_servers
