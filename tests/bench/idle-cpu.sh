#!/usr/bin/env bash
# What an idle server costs: CPU and voluntary context switches over SECS seconds with no
# request, on the embedded default (SQLite in a temporary folder, in-process state), for each
# binary given (default: the release build), one after the other.
#
#   tests/bench/idle-cpu.sh [seconds] [binary...]      (default 20 and target/release/control-plane)
#
# Exits non-zero when a server does not start.
set -euo pipefail
SECS=${1:-20}
shift || true
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("${CARGO_TARGET_DIR:-target}/release/control-plane")
HZ=$(getconf CLK_TCK)
PORT=18793

for bin in "${BINS[@]}"; do
  dir=$(mktemp -d)
  abs=$(realpath "$bin")
  (cd "$dir" && CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64) \
    CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64) \
    exec "$abs" --listen 127.0.0.1:$PORT > log 2>&1) &
  pid=$!
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:$PORT/healthz > /dev/null && break; sleep 0.1; done
  curl -sf http://127.0.0.1:$PORT/healthz > /dev/null || { echo "$bin did not start:" >&2; tail -5 "$dir/log" >&2; exit 1; }
  sleep 2 # past its start-up work
  cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
  switches() { awk '/^voluntary_ctxt_switches/ {s += $2} END {print s}' /proc/"$pid"/task/*/status; }
  c0=$(cpu); s0=$(switches); sleep "$SECS"; c1=$(cpu); s1=$(switches)
  kill "$pid"; wait "$pid" 2>/dev/null || true; rm -rf "$dir"
  awk -v b="$bin" -v c=$((c1 - c0)) -v s=$((s1 - s0)) -v hz="$HZ" -v t="$SECS" \
    'BEGIN {printf "%s: %.2f%% of a core, %d context switches a second\n", b, 100 * c / hz / t, s / t}'
done
