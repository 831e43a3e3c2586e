#!/usr/bin/env bash
# A large policy upload: a valid component (the default authorizer) padded with a custom
# section to MiB MiB (default 60) goes up to `POST /v1/policies` of a server built with the ci
# profile, on loopback, on a fresh embedded store; the server reads it (under its 64 MiB upload
# limit), compiles it, measures it and stores it. Printed: the server's resident memory
# (VmRSS) before and after, its peak (VmHWM), and the upload's time and answer.
#
#   tests/bench/policy-upload.sh [MiB]
#
# Needs `cargo build --profile ci -p control-plane -p cpctl` (BENCH_BIN overrides target/ci).
set -euo pipefail
MIB=${1:-60}
BIN=${BENCH_BIN:-${CARGO_TARGET_DIR:-target}/ci}
PORT=${BENCH_PORT:-18190}
OUT=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$OUT"
}
trap cleanup EXIT

# The default authorizer, with one custom section (id 0) of MIB MiB appended: a component the
# engine accepts, whose padding it skips.
python3 - "$OUT/padded.wasm" "$MIB" <<'EOF'
import sys
path, mib = sys.argv[1], int(sys.argv[2])
base = open("policies/dist/authz.wasm", "rb").read()
def leb(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
name = b"bench-padding"
pad = mib * 1024 * 1024 - len(base) - 16 - len(name)
body = leb(len(name)) + name + b"\0" * pad
open(path, "wb").write(base + b"\0" + leb(len(body)) + body)
EOF

store=(env DATABASE_URL="sqlite://$OUT/control-plane.db" CP_DATA_DIR="$OUT")
TOKEN=$("${store[@]}" "$BIN/cpctl" bootstrap --org bench --workspace main --admin ops@bench.test -o json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["credential"]["token"])')
"${store[@]}" "$BIN/control-plane" --listen "127.0.0.1:$PORT" --log-format json \
  >"$OUT/server.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break
  sleep 0.2
done
rss() { awk -v k="$1:" '$1 == k { print $2 / 1024 " MiB" }' "/proc/$PID/status"; }

echo "component: $(stat -c %s "$OUT/padded.wasm") bytes"
echo "before: VmRSS $(rss VmRSS), VmHWM $(rss VmHWM)"
read -r status took < <(curl -sS -o "$OUT/answer.json" -w '%{http_code} %{time_total}\n' -X POST \
  "http://127.0.0.1:$PORT/v1/policies?kind=authorizer&name=padded" \
  -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/wasm' \
  -H "Idempotency-Key: $(python3 -c 'import uuid; print(uuid.uuid4())')" \
  --data-binary @"$OUT/padded.wasm")
echo "upload: HTTP $status in ${took}s: $(head -c 300 "$OUT/answer.json")"
echo "after:  VmRSS $(rss VmRSS), VmHWM $(rss VmHWM)"
sleep 2
echo "2 s later: VmRSS $(rss VmRSS)"
