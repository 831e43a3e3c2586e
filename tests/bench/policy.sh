#!/usr/bin/env bash
# What the policy costs a request: GET activity through the active authorizer component vs the
# allow-all Rust stub, one run, ABBA order (policy, stub, stub, policy), limits off.
#
#   tests/bench/policy.sh [seconds]     (default 15)
# The stub exists only in a build with the `bench-allow-all` feature, kept apart from
# target/release so no binary users run (or the other benchmarks start) carries it.
SECS=${1:-15}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# With DRILL_BIN_DIR set nothing is built: the stub must then be at $BENCH_STUB_BIN.
STUB_TARGET=target/bench-allow-all
STUB_BIN=${BENCH_STUB_BIN:-$STUB_TARGET/release/control-plane}
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  [ -x "$STUB_BIN" ] || { echo "no allow-all stub at $STUB_BIN (with DRILL_BIN_DIR set, nothing is built)" >&2; exit 1; }
else
  cargo build --release --locked -p control-plane --bin control-plane --features bench-allow-all \
    --target-dir "$STUB_TARGET"
fi
start_server 18084 CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off
SERVER_BIN=$STUB_BIN \
  start_server 18085 CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_AUTHORIZER=allow-all
POLICY=http://127.0.0.1:18084
STUB=http://127.0.0.1:18085
HALF=$(( (SECS + 1) / 2 ))
wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua $POLICY >/dev/null
wrk -t2 -c$CONNS -d3s -s $HERE/activity.lua $STUB >/dev/null
get() { SECS=$HALF wrk_run -s $HERE/activity.lua "$@"; }
echo "policy, stub, stub, policy..." >&2
get $POLICY > "$OUT/policy1.txt"
get $STUB > "$OUT/stub1.txt"
get $STUB > "$OUT/stub2.txt"
get $POLICY > "$OUT/policy2.txt"
summarise "GET activity, authorizer component (A1):policy1:wrk" "GET activity, allow-all stub (B1):stub1:wrk" \
  "GET activity, allow-all stub (B2):stub2:wrk" "GET activity, authorizer component (A2):policy2:wrk"
echo
say_ratio "policy / stub (A1+A2)/(B1+B2)" policy1+policy2 stub1+stub2
