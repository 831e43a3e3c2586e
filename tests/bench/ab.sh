#!/usr/bin/env bash
# A/B of a load (GET activity or token issuance) between server builds, started side by side on
# one database and loaded in turn, round after round, so that drift in the machine's speed hits
# every build alike.
#
#   [AB_SCRIPT=activity|issue] tests/bench/ab.sh ROUNDS SECONDS [ENV=VALUE,]BINARY...
#
# AB_SCRIPT picks the load: GET activity (the default) or token issuance (unkeyed, spread over
# the 128 users; the per-user token cap is lifted so that long runs stay 2xx; keyed, a fresh
# Idempotency-Key per request, with BENCH_IDEMPOTENCY=fresh, which issue.lua reads). A run with
# an answer outside 2xx or a socket error stops the script with a non-zero exit, naming the build
# and the round.
#
# AB_ANALYZE=1 runs ANALYZE on a build's copy before each of its runs (untimed). This Postgres
# runs with autovacuum off, so without it no table is ever analysed and each server connection
# keeps the generic plans it made while the tables were nearly empty; issuance grows the tokens
# table from 128 rows to tens of thousands in a run, and a plan that scans the whole partial
# index tokens_owner_active for `tokens.id = $1` then makes whichever build's connections picked
# it look several times slower (BENCHMARKS.md, "the cost of admission in the route"). ANALYZE
# does what autovacuum's analyses would, and invalidates those plans.
#
# e.g. copy target/release/control-plane (and cpctl) to /tmp/before*, rebuild, then
#   BENCH_CPCTL=/tmp/before-cpctl tests/bench/ab.sh 5 8 /tmp/before target/release/control-plane
# (the oldest build's cpctl sets the database up, so its schema is the oldest build's), or
#   tests/bench/ab.sh 5 8 /tmp/before target/release/control-plane RUST_LOG=warn,/tmp/before
#
# Each build runs on its own copy of the set-up database (${DB}_0, ${DB}_1, ... in the order
# given: CREATE DATABASE ... TEMPLATE), so a newer build's migrations never change the schema an
# older build runs on (0018 drops users.admin, which an older server reads). The copies are
# dropped at exit.
ROUNDS=$1; S=$2; shift 2
SCRIPT=${AB_SCRIPT:-activity}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
COPIES=()
# drop_copies: after lib.sh's cleanup has stopped the servers (waited for here).
drop_copies() {
  local db pid
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for db in "${COPIES[@]}"; do psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true; done
}
trap 'cleanup; drop_copies' EXIT
port=18100; ports=(); specs=("$@")
for i in "${!specs[@]}"; do
  spec=${specs[$i]}
  bin=${spec##*,}; extra=""; [[ $spec == *,* ]] && extra=${spec%,*}
  port_free $port
  # lib.sh's set-up left no connection to $DB (a template must have none).
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS ${DB}_$i WITH (FORCE)" -c "CREATE DATABASE ${DB}_$i TEMPLATE $DB"
  COPIES+=("${DB}_$i")
  env CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off CP_RUNNER_ADDRESS_RATE_LIMIT=off CP_RUNNER_RATE_LIMIT=off CP_MAX_ACTIVE_TOKENS_PER_USER=1000000 \
    DATABASE_URL="$PG/${DB}_$i" $extra \
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
    [ -z "${AB_ANALYZE:-}" ] || psql "$PG/${DB}_$i" -qc ANALYZE
    wrk -t2 -c$CONNS -d"${S}s" -s $HERE/$SCRIPT.lua http://127.0.0.1:${ports[$i]} > "$OUT/$name.txt"
    figures check "$SCRIPT on ${specs[$i]}, round $r:$name:wrk"
    got[$i]=$(awk -v n="$name" '$1 == n {printf "%.0f", $2}' "$OUT/rates.txt")
  done
  line="round $r:"
  for i in "${!ports[@]}"; do line="$line ${got[$i]}"; done
  echo "$line"
  unset got
done
