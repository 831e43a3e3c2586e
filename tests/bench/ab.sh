#!/usr/bin/env bash
# A/B of GET activity between server builds, started side by side on one database and loaded
# in turn, round after round, so that drift in the machine's speed hits every build alike.
#
#   tests/bench/ab.sh ROUNDS SECONDS [ENV=VALUE,]BINARY...
#
# e.g. copy target/release/control-plane to /tmp/before, rebuild, then
#   tests/bench/ab.sh 5 8 /tmp/before target/release/control-plane RUST_LOG=warn,/tmp/before
ROUNDS=$1; S=$2; shift 2
source "$(dirname "$0")/lib.sh"
port=18100; ports=()
for spec in "$@"; do
  bin=${spec##*,}; extra=""; [[ $spec == *,* ]] && extra=${spec%,*}
  env CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off $extra "$bin" --listen 127.0.0.1:$port \
    --log-format json > "$OUT/server-$port.log" 2>&1 &
  PIDS+=($!); ports+=($port)
  for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
  wrk -t2 -c$CONNS -d2s -s $HERE/activity.lua http://127.0.0.1:$port >/dev/null
  port=$((port+1))
done
echo "req/s of GET activity, one column per build, in the order given: $*"
for r in $(seq 1 "$ROUNDS"); do
  line="round $r:"
  for p in "${ports[@]}"; do
    line="$line $(wrk -t2 -c$CONNS -d"${S}s" -s $HERE/activity.lua http://127.0.0.1:$p | awk '/Requests\/sec/ {printf "%.0f", $2}')"
  done
  echo "$line"
done
