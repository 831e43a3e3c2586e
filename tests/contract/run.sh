#!/usr/bin/env bash
# The contract check: a release build of the server must serve an OpenAPI document that
#  (a) openapi-python-client turns into a complete client (no warning; one importable module
#      per operation), and
#  (b) openapi-typescript turns into types that openapi-fetch calls every operation with, each
#      answer read as its typed body or as an ApiError (tests/contract/typescript/), and
#  (c) schemathesis finds faithful, with every one of its checks, against the live server.
# Versions are pinned in tests/contract/requirements.txt and tests/contract/typescript/
# package-lock.json. Exits non-zero on any failure.
#
# Loopback only: the server listens on 127.0.0.1 on a port the kernel picks, and schemathesis
# talks to nothing else. The run is bounded (CP_CONTRACT_TIMEOUT seconds for schemathesis) and
# stops by itself; the server and every temporary file are removed on exit.
#
# Environment (all optional):
#   CARGO_TARGET_DIR       where the release build goes (default: target/)
#   CP_CONTRACT_CACHE      where the virtualenv and node_modules are kept between runs
#                          (default: ~/.cache/control-plane-contract)
#   CP_CONTRACT_EXAMPLES   schemathesis test cases per operation and phase (default: 40)
#   CP_CONTRACT_SEED       schemathesis seed (default: a fixed one, so CI generates the same
#                          cases every run; empty: a fresh one, printed, to explore)
#   CP_CONTRACT_TIMEOUT    hard bound of the schemathesis run in seconds (default: 900)
#   CP_CONTRACT_KEEP       a directory to copy the document, the client and the reports into
#   CP_CONTRACT_BIN_DIR    use the control-plane and cpctl binaries there instead of building
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
here=$root/tests/contract
target=${CARGO_TARGET_DIR:-$root/target}
examples=${CP_CONTRACT_EXAMPLES:-40}
timeout_secs=${CP_CONTRACT_TIMEOUT:-900}

log() { printf '\n--- contract: %s\n' "$*"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cp-contract.XXXXXX")
server_pid=
cleanup() {
  status=$?
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ -n "${CP_CONTRACT_KEEP:-}" ]; then
    mkdir -p "$CP_CONTRACT_KEEP"
    cp -r "$work/openapi.json" "$work/gen" "$work/report" "$work/server.log" "$CP_CONTRACT_KEEP/" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ -f "$work/server.log" ]; then
    echo "contract: failed; the server's last log lines:" >&2
    tail -n 20 "$work/server.log" >&2
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${CP_CONTRACT_BIN_DIR:-}" ]; then
  log "binaries from $CP_CONTRACT_BIN_DIR (no build)"
  bin=$CP_CONTRACT_BIN_DIR
else
  log "release build"
  cargo build --release --locked -p control-plane -p cpctl
  bin=$target/release
fi
server=$bin/control-plane
cpctl=$bin/cpctl

log "python tools (pinned in tests/contract/requirements.txt)"
# One virtualenv per requirements file and Python version, reused while neither changes.
python=${PYTHON:-python3}
key=$( { "$python" --version; cat "$here/requirements.txt"; } | sha256sum | cut -c1-16)
cache=${CP_CONTRACT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/control-plane-contract}
venv=$cache/venv-$key
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  "$venv/bin/pip" check
  touch "$venv/.complete"
fi
# openapi-python-client runs ruff from PATH on what it generates.
export PATH=$venv/bin:$PATH
openapi-python-client --version
st --version

log "records: a fresh embedded SQLite store, seeded with cpctl"
# The embedded default needs no service, so the check runs the same on a laptop and in CI;
# the HTTP layer (routes, bodies, schema) it checks is the same on every backend. Only the
# bootstraps open the store; everything else goes over HTTP once the server is up (below).
data=$work/data
export CP_DATA_DIR=$data
"$cpctl" bootstrap --org contract --workspace main --admin admin@contract.test -o json >"$work/bootstrap.json"
json() { "$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"d": d}))' "$@"; }
token=$(json "$work/bootstrap.json" 'd["credential"]["token"]')
org=$(json "$work/bootstrap.json" 'd["organisationId"]')
ws=$(json "$work/bootstrap.json" 'd["workspaceId"]')
admin=$(json "$work/bootstrap.json" 'd["userId"]')
# A second organisation's admin: the peer object_level_authorization replays reads as (made
# an admin once the server runs, below).
"$cpctl" bootstrap --org stranger --workspace theirs --admin admin@stranger.test -o json >"$work/stranger.json"
stranger=$(json "$work/stranger.json" 'd["credential"]["token"]')
stranger_org=$(json "$work/stranger.json" 'd["organisationId"]')
stranger_user=$(json "$work/stranger.json" 'd["userId"]')

log "server: release build on 127.0.0.1, every rate limit off"
# Rate limits are off (their own flags): schemathesis sends thousands of requests from one
# token and one address, and a 429 would hide what the request was checked for. Token
# issuance is capped per user, so the cap is raised for the same reason. A stream of the audit
# log ends after 1 s (its documented maximum age), so each streamed response is complete.
"$server" --listen 127.0.0.1:0 --log-format json \
  --rate-limit off --user-rate-limit off --org-rate-limit off --issue-rate-limit off \
  --ops-rate-limit off --runner-address-rate-limit off --runner-rate-limit off \
  --max-active-tokens-per-user 1000000 --audit-stream-max-age-secs 1 \
  >"$work/server.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 1 100); do
  port=$("$python" - "$work/server.log" <<'EOF' || true
import json, sys
for line in open(sys.argv[1]):
    try:
        record = json.loads(line)
    except ValueError:
        continue
    fields = record.get("fields", {})
    if fields.get("message") == "listening":
        print(fields["port"])
        break
EOF
)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "contract: the server exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "contract: the server did not report its port" >&2; exit 1; }
base=http://127.0.0.1:$port
"$python" - "$base" <<'EOF'
import sys, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen(sys.argv[1] + "/readyz", timeout=2)
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit("contract: /readyz never answered 200")
EOF
"$python" - "$base/openapi.json" "$work/openapi.json" <<'EOF'
import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1], timeout=10).read())
EOF
echo "listening on $base"
# Everything else over HTTP to this server as the bootstrap's operator (no cpctl verb but the
# store's opens it). The token goes through the environment, not argv.
cpctl_http() { CPCTL_SERVER=$base CPCTL_TOKEN=$token "$cpctl" "$@"; }
# Real ids for the path parameters, so operations get past their 404s: a pool to delete, a
# pool with a runner to send commands to, a workflow revision to approve, a plugin to review
# (and another user's review of it to report, written once the server runs), and a second
# token whose workspace access may be revoked (never the one schemathesis uses; issued once
# the server runs).
pool=$(cpctl_http pools create --workspace "$ws" doomed)
ts_pool=$(cpctl_http pools create --workspace "$ws" doomed-by-typescript)
busy_pool=$(cpctl_http pools create --workspace "$ws" builders)
cpctl_http runners register --pool "$busy_pool" -o json >"$work/runner.json"
workflow=$(cpctl_http workflows create --workspace "$ws" deploy)
revision=$(cpctl_http workflows revisions create --workflow "$workflow")
ts_revision=$(cpctl_http workflows revisions create --workflow "$workflow")
plugin=$(cpctl_http plugins create --org "$org" linter)
# The TypeScript client's own: its changes must not move what schemathesis finds.
ts_busy_pool=$(cpctl_http pools create --workspace "$ws" typescript-builders)
cpctl_http runners register --pool "$ts_busy_pool" -o json >/dev/null
ts_plugin=$(cpctl_http plugins create --org "$org" formatter)
cpctl_http tokens issue --user "$admin" --name victim --scope activity:read --workspace "$ws" -o json >"$work/victim.json"
victim=$(json "$work/victim.json" 'd["id"]')
cpctl_http tokens issue --user "$admin" --name ts-victim --scope activity:read --workspace "$ws" -o json >"$work/ts-victim.json"
ts_victim=$(json "$work/ts-victim.json" 'd["id"]')
# A second user's token, to write the review the admin reports (one's own cannot be reported).
reviewer=$(cpctl_http users create --org "$org" reviewer@contract.test)
cpctl_http tokens issue --user "$reviewer" --name reviewer --scope reviews:write --workspace "$ws" -o json >"$work/reviewer.json"
reviewer_token=$(json "$work/reviewer.json" 'd["token"]')
# Bootstrap makes an operator, who administers every organisation; the peer is the other
# organisation's admin, whom this organisation's users are not shown to. An operator may name
# another organisation: the stranger's.
cpctl_http users set-role "$stranger_user" --role admin --org "$stranger_org" >/dev/null
# The reviews to report, written over HTTP (reviews have no cpctl command to create them).
# The token goes through the environment, not argv, which any local user can read.
write_review() {
  REVIEWER_TOKEN=$reviewer_token "$python" - "$base/v1/marketplace/plugins/$1/reviews/me" <<'EOF'
import json, os, sys, urllib.request
body = json.dumps({"rating": 4, "title": "Solid", "body": "It lints what it says."}).encode()
request = urllib.request.Request(sys.argv[1], data=body, method="PUT", headers={
    "Authorization": "Bearer " + os.environ["REVIEWER_TOKEN"], "Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(request, timeout=10))["review"]["id"])
EOF
}
review=$(write_review "$plugin")
ts_review=$(write_review "$ts_plugin")

log "(a) openapi-python-client: a complete client, no warning"
# --fail-on-warning fails on the generator's own warnings; its output is also searched, so a
# warning from a post-generation hook (ruff) fails too.
mkdir -p "$work/gen"
(cd "$work/gen" && openapi-python-client generate --path "$work/openapi.json" --meta none \
  --output-path control_plane_client --fail-on-warning) >"$work/generate.log" 2>&1 || {
  cat "$work/generate.log" >&2
  echo "contract: openapi-python-client failed" >&2
  exit 1
}
cat "$work/generate.log"
if grep -qiE 'warning|error' "$work/generate.log"; then
  echo "contract: openapi-python-client reported a warning or an error (above)" >&2
  exit 1
fi
"$venv/bin/python" "$here/check_client.py" "$work/openapi.json" "$work/gen/control_plane_client"

log "(b) openapi-typescript and openapi-fetch: every operation called, typed"
# Generated with --default-non-nullable false: by default openapi-typescript makes a request
# field with a `default` required, and the issuance body would demand environmentIds and
# expiresInDays. check.ts issues with the contract's required fields only, so it compiles only
# with the option; the first compile below, without it, must fail, or the option is moot.
command -v npm >/dev/null || { echo "contract: npm is needed for the TypeScript check" >&2; exit 1; }
ts_src=$here/typescript
ts_key=$( { node --version; cat "$ts_src/package-lock.json"; } | sha256sum | cut -c1-16)
ts_modules=$cache/node-$ts_key
if [ ! -f "$ts_modules/.complete" ]; then
  rm -rf "$ts_modules"
  mkdir -p "$ts_modules"
  cp "$ts_src/package.json" "$ts_src/package-lock.json" "$ts_modules/"
  (cd "$ts_modules" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  touch "$ts_modules/.complete"
fi
ts=$work/typescript
mkdir -p "$ts"
# package.json says "type": "module", for tsc's output and for node.
cp "$ts_src/check.ts" "$ts_src/tsconfig.json" "$ts_src/package.json" "$ts/"
ln -s "$ts_modules/node_modules" "$ts/node_modules"
ts_bin=$ts_modules/node_modules/.bin
"$ts_bin/openapi-typescript" "$work/openapi.json" -o "$ts/schema.d.ts" >"$work/ts-generate.log" 2>&1 || {
  cat "$work/ts-generate.log" >&2; echo "contract: openapi-typescript failed" >&2; exit 1; }
if (cd "$ts" && "$ts_bin/tsc" -p tsconfig.json >"$work/ts-defaults.log" 2>&1); then
  echo "contract: check.ts compiled against openapi-typescript's default options; the issuance body should not" >&2
  exit 1
fi
grep -q "environmentIds, expiresInDays" "$work/ts-defaults.log" || {
  cat "$work/ts-defaults.log" >&2
  echo "contract: check.ts failed against the default options for another reason than the defaulted fields" >&2
  exit 1
}
rm -rf "$ts/out"
"$ts_bin/openapi-typescript" "$work/openapi.json" -o "$ts/schema.d.ts" --default-non-nullable false \
  >"$work/ts-generate.log" 2>&1 || { cat "$work/ts-generate.log" >&2; exit 1; }
(cd "$ts" && "$ts_bin/tsc" -p tsconfig.json) || { echo "contract: check.ts does not compile" >&2; exit 1; }
CP_TS_BASE=$base CP_TS_TOKEN=$token CP_TS_DOCUMENT=$work/openapi.json CP_TS_ORG=$org \
  CP_TS_WORKSPACE=$ws CP_TS_BUSY_POOL=$ts_busy_pool CP_TS_DOOMED_POOL=$ts_pool \
  CP_TS_WORKFLOW=$workflow CP_TS_REVISION=$ts_revision CP_TS_PLUGIN=$ts_plugin CP_TS_REVIEW=$ts_review \
  CP_TS_VICTIM=$ts_victim CP_TS_POLICY="$root/policies/dist/authz.wasm" node "$ts/out/check.js"

log "(c) schemathesis: every check, against the live server"
# A config file for the ids made above. Path ids are fixed to the seeded ones: the coverage
# phase ignores dictionaries and would send `0` for every id, so no request would get past its
# 403 or 404 (an unknown id is still tried: by the coverage phase's unexpected-value cases and
# by use_after_free). Body ids are a seeded id most of the time and a generated one otherwise.
# Two identities (a Web Fuzzing Commons auth file): every request goes as the seeded admin
# (`user` pins it; unpinned, schemathesis would move an operation to the next identity on its
# first 403); the stranger, admin of another organisation, is the peer object_level_authorization
# replays the admin's successful reads as (it must be refused).
cat >"$work/auth.json" <<EOF
{"auth": [
  {"name": "owner", "fixedHeaders": [{"name": "Authorization", "value": "Bearer $token"}]},
  {"name": "stranger", "fixedHeaders": [{"name": "Authorization", "value": "Bearer $stranger"}]}
]}
EOF
# schemathesis's default statuses of positive_data_acceptance (config/_checks.py).
accepted='"2xx", "3xx", "401", "403", "404", "409", "429", "5xx"'
cat >"$work/schemathesis.toml" <<EOF
[auth.wfc]
path = "$work/auth.json"
user = "owner"
peers = ["owner", "stranger"]

# Nothing persists between runs (no example database, no crash cache in the work tree): each
# run is the same function of the seed and the server.
[generation]
database = "none"

[cache]
enabled = false

[dictionaries]
workspace = { values = ["$ws"] }
organisation = { values = ["$org"] }
pool = { values = ["$busy_pool"] }

[parameters]
"path.workspaceId" = "$ws"
"path.poolId" = "$pool"
"path.workflowId" = "$workflow"
"path.revisionId" = "$revision"
"path.pluginId" = "$plugin"
"path.reviewId" = "$review"
"path.tokenId" = "$victim"
"path.organisationId" = "$org"
"path.userId" = "$reviewer"
"body.organisationId" = { dictionary = "organisation", probability = 0.8 }
"body.workspaceIds[*]" = { dictionary = "workspace", probability = 0.8 }
"body.poolId" = { dictionary = "pool", probability = 0.8 }

# The only schema-valid requests the server may refuse, each with its documented status: what
# no schema can state. An install's body is any bytes, most not a component (422), and its
# cases header must decode to a cases file (400); a runner's public key must be an Ed25519
# point, and its delivery URL pass the server's egress rule (its flags decide; 400); audit keys
# must be Ed25519 points (400). A list of statuses replaces schemathesis's default for the
# check, so the default is repeated.
[[operations]]
include-operation-id = "installPolicy"
[operations.checks]
positive_data_acceptance.expected-statuses = [$accepted, "400", "422"]

[[operations]]
include-operation-id = [
  "registerRunner", "addRunnerKey", "setRunnerDeliveryUrl", "exportAuditLog", "verifyAuditLog",
]
[operations.checks]
positive_data_acceptance.expected-statuses = [$accepted, "400"]

# A well-formed cursor into events that retention has purged is 410 cursor_expired (documented
# on both): the log's state decides, not the request's shape (a stateful scenario purged, then
# listed from sequence 2).
[[operations]]
include-operation-id = ["listActivity", "streamAuditEvents"]
[operations.checks]
positive_data_acceptance.expected-statuses = [$accepted, "410"]
EOF
seed_args=()
seed=${CP_CONTRACT_SEED-20261124}
[ -z "$seed" ] || seed_args=(--seed "$seed")
mkdir -p "$work/report"
cd "$work"  # whatever schemathesis writes by itself lands in the temporary directory
st_status=0
timeout --signal=INT --kill-after=30 "$timeout_secs" \
  st --config-file "$work/schemathesis.toml" run "$base/openapi.json" \
    --checks all --max-examples "$examples" --workers 2 "${seed_args[@]}" \
    --request-timeout 10 --no-color \
    --report junit,ndjson --report-dir "$work/report" || st_status=$?
"$venv/bin/python" "$here/summary.py" "$work"/report/ndjson-*.ndjson
if [ "$st_status" -ne 0 ]; then
  echo "contract: schemathesis failed (exit $st_status)" >&2
  exit "$st_status"
fi

log "passed: both clients generated and complete, schemathesis found no failure"
