#!/usr/bin/env bash
# A/B of a load (GET activity or token issuance) between server builds, started side by side on
# one database and loaded in turn, round after round, so that drift in the machine's speed hits
# every build alike.
#
#   [AB_SCRIPT=activity|issue] tests/bench/ab.sh ROUNDS SECONDS [ENV=VALUE,]BINARY...
#
# AB_SCRIPT picks the load: GET activity (the default) or token issuance (unkeyed, spread over
# the 128 users; the per-user token cap is lifted so that long runs stay 2xx). A run with an
# answer outside 2xx or a socket error stops the script with a non-zero exit, naming the build
# and the round.
#
# e.g. copy target/release/control-plane (and cpctl) to /tmp/before*, rebuild, then
#   BENCH_CPCTL=/tmp/before-cpctl tests/bench/ab.sh 5 8 /tmp/before target/release/control-plane
# (the oldest build first: it must start before a newer one migrates the schema), or
#   tests/bench/ab.sh 5 8 /tmp/before target/release/control-plane RUST_LOG=warn,/tmp/before
ROUNDS=$1; S=$2; shift 2
SCRIPT=${AB_SCRIPT:-activity}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
port=18100; ports=(); specs=("$@")
for spec in "$@"; do
  bin=${spec##*,}; extra=""; [[ $spec == *,* ]] && extra=${spec%,*}
  port_free $port
  env CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_MAX_ACTIVE_TOKENS_PER_USER=1000000 $extra \
    "$bin" --listen 127.0.0.1:$port \
    --log-format json > "$OUT/server-$port.log" 2>&1 &
  PIDS+=("$!"); ports+=("$port")
  for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
  wrk -t2 -c$CONNS -d2s -s $HERE/$SCRIPT.lua http://127.0.0.1:$port >/dev/null
  port=$((port+1))
done
echo "req/s of $SCRIPT, one column per build, in the order given: $*"
for r in $(seq 1 "$ROUNDS"); do
  # Every other round loads the builds in reverse, so that a load that slows as it goes
  # (issuance grows the tokens table) does not always favour the first build; columns stay in
  # the order given.
  order=("${!ports[@]}"); (( r % 2 == 0 )) && mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
  declare -A got=()
  for i in "${order[@]}"; do
    # An answer outside 2xx would make a fast build look faster: such a run gives no figure,
    # and the script stops there (lib.sh's `figures`).
    name=ab-$r-$i
    wrk -t2 -c$CONNS -d"${S}s" -s $HERE/$SCRIPT.lua http://127.0.0.1:${ports[$i]} > "$OUT/$name.txt"
    figures check "$SCRIPT on ${specs[$i]}, round $r:$name:wrk"
    got[$i]=$(awk -v n="$name" '$1 == n {printf "%.0f", $2}' "$OUT/rates.txt")
  done
  line="round $r:"
  for i in "${!ports[@]}"; do line="$line ${got[$i]}"; done
  echo "$line"
  unset got
done
