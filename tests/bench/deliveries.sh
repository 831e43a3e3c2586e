#!/usr/bin/env bash
# Figures of webhook deliveries end to end, on Postgres + Redis and on the embedded
# store, each in one process on loopback (tests/bench/delivery_bench.rs): a minimal
# receiver as the floor, submission-to-handler latency, a backlog drain, and the example runner
# reporting every command to `succeeded`.
#
#   tests/bench/deliveries.sh [N] [C]   (default 2000 commands, 16 at once; release build)
#
# Env: BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432), BENCH_REDIS_URL
# (default redis://127.0.0.1:6379), CARGO_TARGET_DIR as cargo reads it; DRILL_BIN_DIR: take
# examples/delivery_bench from there and build nothing. delivery_bench stops with an error at
# any answer outside 2xx (submissions, the receiver), so it does not use lib.sh's checks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
N=${1:-2000}
C=${2:-16}
REDIS=${BENCH_REDIS_URL:-redis://127.0.0.1:6379}
BIN=${DRILL_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}/examples/delivery_bench
[ -n "${DRILL_BIN_DIR:-}" ] || cargo build --release -p cpctl --example delivery_bench

# One table: the second run's header is dropped.
REDIS_URL=$REDIS "$BIN" -n "$N" -c "$C"
env -u REDIS_URL "$BIN" --sqlite -n "$N" -c "$C" | tail -n +3
