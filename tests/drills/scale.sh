#!/usr/bin/env bash
# The scale drill (tests/drills/scale_drill.rs): three release servers on a Postgres primary
# with a streaming replica (initdb + pg_basebackup -R, both of this script's own, on free
# loopback ports) and a three-master Redis Cluster (also its own), DRILL_WORKSPACES (1000)
# workspaces under a mixed load with DRILL_STREAMS (200) audit streams open; during it a Redis
# master is killed and restarted without its keys, the replica is stopped, and a server is
# SIGKILLed. With DRILL_REDIS_REPLICAS=1 each master has a replica, and the killed master's
# replica must take over its slots before it comes back (it then rejoins as a replica). The
# drill prints its criteria first and exits non-zero naming each broken one; this script adds
# two (no panic in a server log; with replicas, the takeover happened). Stops by itself;
# figures go to RELIABILITY.md.
#
#   tests/drills/scale.sh                                 (builds what it needs)
#   DRILL_SECS=20 DRILL_WORKSPACES=200 DRILL_STREAMS=50 tests/drills/scale.sh   (CI's short form)
#   DRILL_REDIS_REPLICAS=1 tests/drills/scale.sh          (six Redis nodes: a replica takes over)
#   DRILL_BIN_DIR=/abs/target/release: take control-plane and examples/scale_drill from there
#
# Needs redis-server and redis-cli on the PATH, and the Postgres server binaries
# (pg_config --bindir); run as root, it runs Postgres as the postgres user.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  BIN=$DRILL_BIN_DIR
else
  BIN=${CARGO_TARGET_DIR:-target}/release
  cargo build --release -p control-plane --bin control-plane -p cpctl --example scale_drill
fi
for binary in "$BIN/control-plane" "$BIN/examples/scale_drill"; do
  [ -x "$binary" ] || { echo "missing $binary" >&2; exit 2; }
done
PGBIN=$(pg_config --bindir)
PORT=${DRILL_PORT:-18120}
DIR=$(mktemp -d /tmp/cp-scale-XXXXXX)
chmod 755 "$DIR"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cleanup() {
  set +e
  # The drill's servers, should the drill itself have been stopped before it stopped them.
  for i in 0 1 2; do pkill -9 -f -- "control-plane --listen 127.0.0.1:$((PORT + i)) " 2>/dev/null; done
  for port in "${REDIS_PORTS[@]}"; do redis-cli -p "$port" shutdown nosave >/dev/null 2>&1; done
  for data in replica primary; do
    [ -d "$DIR/pg/$data" ] && as_pg "$PGBIN/pg_ctl" stop -D "$DIR/pg/$data" -m immediate >/dev/null 2>&1
  done
  if [ -n "${KEEP:-}" ]; then echo "kept $DIR" >&2; else rm -rf "$DIR"; fi
  return 0
}
REDIS_PORTS=()
trap cleanup EXIT

echo "starting a Postgres primary and replica..." >&2
mkdir -p "$DIR/pg"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR/pg"
PRIMARY_PORT=$(free_port)
REPLICA_PORT=$(free_port)
as_pg "$PGBIN/initdb" -D "$DIR/pg/primary" -A trust -U postgres --no-sync >/dev/null
cat > "$DIR/pg/primary/postgresql.auto.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PRIMARY_PORT
unix_socket_directories = '$DIR/pg'
max_connections = 300
fsync = off
wal_level = replica
max_wal_senders = 4
EOF
as_pg "$PGBIN/pg_ctl" start -w -t 30 -D "$DIR/pg/primary" -l "$DIR/pg/primary.log" >/dev/null
as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -D "$DIR/pg/replica" \
  -R -X stream --no-sync
echo "port = $REPLICA_PORT" >> "$DIR/pg/replica/postgresql.auto.conf"
as_pg "$PGBIN/pg_ctl" start -w -t 30 -D "$DIR/pg/replica" -l "$DIR/pg/replica.log" >/dev/null
cat > "$DIR/replica-stop.sh" <<EOF
$(declare -f as_pg)
as_pg "$PGBIN/pg_ctl" stop -D "$DIR/pg/replica" -m immediate >/dev/null
EOF

REPLICAS=${DRILL_REDIS_REPLICAS:-0}
case $REPLICAS in 0|1) ;; *) echo "DRILL_REDIS_REPLICAS must be 0 or 1" >&2; exit 2 ;; esac
NODES=$(( 3 * (1 + REPLICAS) ))
echo "starting a three-master Redis Cluster ($REPLICAS replica per master)..." >&2
while [ ${#REDIS_PORTS[@]} -lt "$NODES" ]; do
  # The cluster bus listens on port + 10000: both must be free.
  port=$(python3 -c 'import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    if p >= 55000: continue
    try:
        b = socket.socket(); b.bind(("127.0.0.1", p + 10000)); print(p); break
    except OSError: pass')
  [[ " ${REDIS_PORTS[*]} " == *" $port "* ]] || REDIS_PORTS+=("$port")
done
start_node() {
  redis-server --port "$1" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file "nodes-$1.conf" --cluster-node-timeout 1000 --dir "$DIR" \
    --logfile "$DIR/redis-$1.log" --save '' --appendonly no --daemonize yes >/dev/null
}
for port in "${REDIS_PORTS[@]}"; do start_node "$port"; done
# A daemonized node answers a moment after it forks; a loaded machine makes that moment long.
for port in "${REDIS_PORTS[@]}"; do
  for _ in $(seq 1 100); do
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
    sleep 0.1
  done
  [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] || {
    echo "the Redis node on $port did not start:" >&2; tail -5 "$DIR/redis-$port.log" >&2; exit 1; }
done
redis-cli --cluster create "${REDIS_PORTS[@]/#/127.0.0.1:}" --cluster-replicas "$REPLICAS" \
  --cluster-yes >/dev/null
# Ready: every node sees the cluster ok, and every replica has finished its first sync (a
# master killed before that would leave nothing to take over).
for _ in $(seq 1 150); do
  ready=1
  for port in "${REDIS_PORTS[@]}"; do
    redis-cli -p "$port" cluster info | grep -q cluster_state:ok || ready=0
    if redis-cli -p "$port" role | head -1 | grep -q slave; then
      redis-cli -p "$port" info replication | grep -q master_link_status:up || ready=0
    fi
  done
  [ "$ready" = 1 ] && break
  sleep 0.2
done
[ "$ready" = 1 ] || { echo "the Redis Cluster did not become ready" >&2; exit 1; }
# The node killed: a master (with replicas, `--cluster create` chooses which nodes are).
KILLED=$(redis-cli -p "${REDIS_PORTS[0]}" cluster nodes |
  awk '$3 ~ /master/ { split($2, a, "[:@]"); print a[2]; exit }')
echo "redis-cli -p $KILLED shutdown nosave >/dev/null 2>&1 || true" > "$DIR/redis-kill.sh"
cat > "$DIR/redis-start.sh" <<EOF
redis-server --port $KILLED --bind 127.0.0.1 --cluster-enabled yes \
  --cluster-config-file nodes-$KILLED.conf --cluster-node-timeout 1000 --dir $DIR \
  --logfile $DIR/redis-$KILLED.log --save '' --appendonly no --daemonize yes >/dev/null
EOF

DB=control_plane
psql -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -qc "CREATE DATABASE $DB"
export DATABASE_URL="postgres://postgres@127.0.0.1:$PRIMARY_PORT/$DB"
export CP_READ_DATABASE_URL="postgres://postgres@127.0.0.1:$REPLICA_PORT/$DB"
REDIS_URL=$(printf 'redis://127.0.0.1:%s,' "${REDIS_PORTS[@]}")
export REDIS_URL=${REDIS_URL%,}
CP_TOKEN_HASH_KEY=$(head -c 32 /dev/urandom | base64)
CP_IDEMPOTENCY_KEYS=$(head -c 32 /dev/urandom | base64)
CP_KEY_ENCRYPTION_KEY=$(head -c 32 /dev/urandom | base64)
export CP_TOKEN_HASH_KEY CP_IDEMPOTENCY_KEYS CP_KEY_ENCRYPTION_KEY
export SERVER_BIN=$BIN/control-plane DRILL_DIR=$DIR PORT
export CP_REDIS_PREFIX="scale:"
ulimit -n "$(ulimit -Hn)"
SECS=${DRILL_SECS:-60}
rc=0
echo "criteria this script adds: 7. no panic in a server log$([ "$REPLICAS" -gt 0 ] &&
  echo '; 8. a replica took over the killed master'"'"'s slots before it came back')"
# Stops by itself: the drill is bounded, and the trap stops what it started.
timeout -k 10 $(( SECS + 540 ))s "$BIN/examples/scale_drill" || rc=$?
# The default panic hook writes "thread '…' panicked at"; a JSON log line would carry "panic".
panics=$(cat "$DIR"/server-*.log 2>/dev/null | grep -Eci 'panicked|"panic' || true)
echo "panics in the server logs: $panics"
if [ "$panics" -ne 0 ]; then
  echo "FAILED criterion 7 (no panic): $panics panics in the server logs:"
  grep -Ehi 'panicked|"panic' "$DIR"/server-*.log | head -5
  rc=1
fi
if [ "$REPLICAS" -gt 0 ]; then
  # Restarted, the killed master rejoins as a replica only if another node took its slots
  # while it was down; had it come back first, it would still be their master.
  role=$(redis-cli -p "$KILLED" role 2>/dev/null | head -1)
  echo "the killed Redis master ($KILLED) is now: ${role:-not answering}"
  if [ "$role" != slave ]; then
    echo "FAILED criterion 8 (a replica took over the killed master's slots): it is ${role:-not answering}"
    rc=1
  fi
fi
if [ "$rc" -ne 0 ]; then
  echo "scale drill: FAILED (exit $rc); the lines above name each broken criterion"
  exit 1
fi
echo "scale drill: all criteria met"
