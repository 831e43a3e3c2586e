#!/usr/bin/env bash
# The tampering drill: a server on the embedded store (loopback, --dev tenant, whose token cpctl
# keeps as its `dev` context) whose workspace gets DRILL_EVENTS events (`cpctl pools create`
# over HTTP, as an operator would), then `cpctl audit export` (the server signs the head) and
# the server's /.well-known/jwks.json. With the server stopped, each tamper below is applied
# with Python's sqlite3 to a fresh copy of the data directory, as a holder of the database file
# would; a server started on the copy must answer `cpctl audit verify` with a broken report
# (non-zero exit) for each tamper and an intact one for the untouched copy; the export is
# verified offline with the published key set, untouched (must pass) and tampered (must fail).
# Prints a figure table; exits non-zero with a `FAILED criterion N` line for each broken one.
# Stops by itself.
# Figures go to RELIABILITY.md ("Tampering drill").
#
#   [DRILL_EVENTS=20] tests/drills/tamper.sh
#
# DRILL_BIN_DIR: take control-plane and cpctl from there and build nothing (CI passes its
# release build). DRILL_PORT (default 18400). KEEP=1 keeps the copies.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ -n "${DRILL_BIN_DIR:-}" ]; then
  BIN=$DRILL_BIN_DIR
else
  cargo build --release -p control-plane --bin control-plane -p cpctl --bin cpctl
  BIN=${CARGO_TARGET_DIR:-target}/release
fi
for binary in "$BIN/control-plane" "$BIN/cpctl"; do
  [ -x "$binary" ] || { echo "missing $binary" >&2; exit 2; }
done
EVENTS=${DRILL_EVENTS:-20}
PORT=${DRILL_PORT:-18400}
CRITERIA=(
  "untouched passes: verify of the untouched copy exits 0, intact, headHash printed"
  "cut tail (stale head) caught: the newest 3 events deleted, the head pointer left"
  "cut tail (head moved back) caught: the newest 3 events deleted and the head pointer set to the event now last"
  "rewound head caught: the head pointer moved back 3 events, the events kept"
  "forged checkpoint caught: event 5 edited and a checkpoint inserted at the head with its hash"
  "edited event caught: one event's data changed"
  "forged signed head caught: a signed head's hash changed"
  "anchor: the untouched copy extends the exported head; a copy cut and re-pointed below it does not"
  "offline: the export verifies with the published key set; an edited or cut export, or one with an extra event line, does not"
)
echo "# tampering drill: $EVENTS events on the embedded store"
echo "criteria:"
for i in "${!CRITERIA[@]}"; do echo "  $((i + 1)). ${CRITERIA[i]}"; done
echo
DIR=$(mktemp -d)
SERVER_PID=
WATCHDOG=
cleanup() {
  [ -z "$SERVER_PID" ] || kill "$SERVER_PID" 2>/dev/null || true
  [ -z "$WATCHDOG" ] || kill "$WATCHDOG" 2>/dev/null || true
  [ -n "${KEEP:-}" ] && echo "kept $DIR" || rm -rf "$DIR"
}
trap cleanup EXIT
# The drill stops by itself even if nothing else stops it.
( sleep 300; kill -TERM $$ 2>/dev/null ) >/dev/null 2>&1 &
WATCHDOG=$!
BROKEN=()
broken() { BROKEN+=("FAILED criterion $1 (${CRITERIA[$1 - 1]%%:*}): $2"); }
# A client of the server on loopback: the `dev` context its --dev start kept, no store setting.
cpctl() { env -u DATABASE_URL -u CP_TOKEN_HASH_KEY -u CPCTL_SERVER -u CPCTL_TOKEN XDG_CONFIG_HOME="$DIR" "$BIN/cpctl" "$@"; }

# serve DATA: a server on that data directory, until `unserve`.
serve() {
  env -u DATABASE_URL -u REDIS_URL XDG_CONFIG_HOME="$DIR" "$BIN/control-plane" --dev --data-dir "$1" \
    --listen "127.0.0.1:$PORT" --log-format json > "$DIR/server.out" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 150); do
    grep -q '"listening"' "$DIR/server.out" 2>/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$DIR/server.out" >&2; exit 1; }
    sleep 0.2
  done
  echo "the server on $1 did not start" >&2; exit 1
}
unserve() { kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }

serve "$DIR/data"
read -r WS < <(sed -n 's/^--dev: organisation [^ ]* workspace \([^ ]*\) .*/\1/p' "$DIR/server.out")
[ -n "$WS" ] || { echo "no --dev tenant in the server's output" >&2; exit 1; }
started=$(date +%s%3N)
for n in $(seq 1 "$EVENTS"); do
  cpctl pools create --workspace "$WS" "drill-$n" > /dev/null
done
write_ms=$(( $(date +%s%3N) - started ))
curl -sf "http://127.0.0.1:$PORT/.well-known/jwks.json" > "$DIR/jwks.json"
cpctl audit export --workspace "$WS" > "$DIR/export.ndjson"
HEAD=$(cpctl audit verify --workspace "$WS" -o json)
unserve
HEAD_SEQ=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["headSequence"])' "$HEAD")
HEAD_HASH=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("headHash", ""))' "$HEAD")

# tamper NAME SQL: a fresh copy of the data directory with SQL applied by Python's sqlite3.
tamper() {
  local copy="$DIR/copy-$1"
  rm -rf "$copy"; cp -a "$DIR/data" "$copy"
  python3 - "$copy/control-plane.db" "$2" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript(sys.argv[2])
db.commit()
EOF
  echo "$copy"
}
printf '%-24s %-9s %-5s %-24s %s\n' tamper expected exit problem ms | tee "$DIR/table"
# check N NAME EXPECT(pass|fail) DATA_DIR [extra verify args]
check() {
  local n=$1 name=$2 expect=$3 data=$4; shift 4
  local t0 out status=0 problem
  serve "$data"
  t0=$(date +%s%3N)
  out=$(cpctl audit verify --workspace "$WS" -o json "$@" 2>/dev/null) || status=$?
  local ms=$(( $(date +%s%3N) - t0 ))
  unserve
  problem=$(python3 -c 'import json,sys
try: r=json.loads(sys.argv[1]); print((r.get("broken") or {}).get("problem","-"))
except Exception: print("(no report)")' "$out")
  printf '%-24s %-9s %-5s %-24s %s\n' "$name" "$expect" "$status" "$problem" "$ms" | tee -a "$DIR/table"
  if [ "$expect" = pass ] && [ "$status" -ne 0 ]; then broken "$n" "$name: exit $status ($problem)"; fi
  if [ "$expect" = fail ] && [ "$status" -eq 0 ]; then broken "$n" "$name: verify exited 0"; fi
}
check 1 untouched pass "$DIR/data"
[ ${#HEAD_HASH} -eq 64 ] || broken 1 "headHash is '$HEAD_HASH'"
CUT=$((HEAD_SEQ - 3))
check 2 cut-tail-stale-head fail "$(tamper cut "DELETE FROM audit_events WHERE seq > $CUT;")"
check 3 cut-tail-head-moved fail "$(tamper cutmoved "DELETE FROM audit_events WHERE seq > $CUT;
  UPDATE workspaces SET audit_seq = $CUT, audit_hash = (SELECT hash FROM audit_events WHERE seq = $CUT);")"
check 4 rewound-head fail "$(tamper rewound "UPDATE workspaces SET audit_seq = $CUT,
  audit_hash = (SELECT hash FROM audit_events WHERE seq = $CUT);")"
check 5 forged-checkpoint fail "$(tamper checkpoint "UPDATE audit_events SET data = '{\"name\":\"forged\"}' WHERE seq = 5;
  INSERT INTO audit_checkpoints (workspace_id, last_seq, hash, removed, created_at)
  SELECT id, audit_seq, audit_hash, 0, created_at FROM workspaces;")"
check 6 edited-event fail "$(tamper edited "UPDATE audit_events SET data = '{\"name\":\"forged\"}' WHERE seq = 5;")"
check 7 forged-signed-head fail "$(tamper signed "UPDATE audit_signed_heads SET hash = (SELECT hash FROM audit_events WHERE seq = 1);")"
check 8 anchor-untouched pass "$DIR/data" --anchor "$HEAD_SEQ:$HEAD_HASH"
# The cut, re-pointed copy with its signed heads removed too: only the anchor sees it.
check 8 anchor-cut-unsigned fail "$(tamper anchorcut "DELETE FROM audit_events WHERE seq > $CUT;
  UPDATE workspaces SET audit_seq = $CUT, audit_hash = (SELECT hash FROM audit_events WHERE seq = $CUT);
  DELETE FROM audit_signed_heads;")" --anchor "$HEAD_SEQ:$HEAD_HASH"
# The review's H1: every signed head but the anchor's deleted, a migration-shaped (unsigned,
# hashless) checkpoint put at the anchor, an event below it edited, the head re-hashed from
# zero bytes above it (no events above: the head's hash is the zero bytes).
check 8 anchor-legacy-checkpoint fail "$(tamper legacy "UPDATE audit_events SET data = '{\"name\":\"forged\"}' WHERE seq = 5;
  DELETE FROM audit_signed_heads WHERE seq <> $HEAD_SEQ;
  DELETE FROM audit_checkpoints;
  INSERT INTO audit_checkpoints (workspace_id, last_seq, hash, removed, created_at)
  SELECT id, $HEAD_SEQ, NULL, 0, created_at FROM workspaces WHERE audit_seq = $HEAD_SEQ;
  UPDATE workspaces SET audit_hash = NULL WHERE audit_seq = $HEAD_SEQ;")" --anchor "$HEAD_SEQ:$HEAD_HASH"

# offline NAME EXPECT FILE
offline() {
  local name=$1 expect=$2 file=$3 status=0 t0 ms problem out
  t0=$(date +%s%3N)
  out=$(cpctl audit verify --export "$file" --jwks "$DIR/jwks.json" -o json 2>/dev/null) || status=$?
  ms=$(( $(date +%s%3N) - t0 ))
  problem=$(python3 -c 'import json,sys
try: r=json.loads(sys.argv[1]); print((r.get("broken") or {}).get("problem","-"))
except Exception: print("(no report)")' "$out")
  printf '%-24s %-9s %-5s %-24s %s\n' "$name" "$expect" "$status" "$problem" "$ms" | tee -a "$DIR/table"
  if [ "$expect" = pass ] && [ "$status" -ne 0 ]; then broken 9 "$name: exit $status ($problem)"; fi
  if [ "$expect" = fail ] && [ "$status" -eq 0 ]; then broken 9 "$name: verify exited 0"; fi
}
offline export-untouched pass "$DIR/export.ndjson"
sed '0,/"drill-2"/s//"drill-X"/' "$DIR/export.ndjson" > "$DIR/export-edited.ndjson"
cmp -s "$DIR/export.ndjson" "$DIR/export-edited.ndjson" && broken 9 "the edit did not change the export"
offline export-edited fail "$DIR/export-edited.ndjson"
# The last event line dropped.
python3 - "$DIR/export.ndjson" > "$DIR/export-cut.ndjson" <<'EOF'
import sys
lines = open(sys.argv[1]).read().splitlines()
last = max(i for i, l in enumerate(lines) if l.startswith('{"id":'))
print("\n".join(l for i, l in enumerate(lines) if i != last))
EOF
offline export-cut fail "$DIR/export-cut.ndjson"
# An extra event line after a gap (a sequence past the last): the walk must read every line.
python3 - "$DIR/export.ndjson" > "$DIR/export-extra.ndjson" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
events = [i for i, l in enumerate(lines) if l.startswith('{"id":')]
extra = json.loads(lines[events[1]])
extra["sequence"] = json.loads(lines[events[-1]])["sequence"] + 2
extra["data"] = {"name": "forged"}
lines.insert(events[-1] + 1, json.dumps(extra))
print("\n".join(lines))
EOF
offline export-extra-line fail "$DIR/export-extra.ndjson"
echo
echo "events: $EVENTS written in ${write_ms} ms (one cpctl over HTTP each); head at sequence $HEAD_SEQ"
if [ ${#BROKEN[@]} -gt 0 ]; then
  printf '%s\n' "${BROKEN[@]}" >&2
  exit 1
fi
echo "all criteria met"
