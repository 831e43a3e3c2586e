#!/usr/bin/env bash
# End-to-end tests of the web console in headless Debian Chromium (playwright-core drives the
# browser the system has; no browser is downloaded).
#
#   tests/console/run.sh
#
# Starts a release server (control-plane and cpctl from CP_CONSOLE_BIN_DIR or DRILL_BIN_DIR,
# default target/ci) on 127.0.0.1 with an SQLite store in a temporary folder, runs
# `node --test tests/console/*.test.mjs` against it, stops it, and exits non-zero on any
# failure. Screenshots of each page go to $CONSOLE_SHOTS (default a temporary folder, printed at
# the end).
#
# The server runs without --dev: Chromium treats http://127.0.0.1 as a secure context and keeps
# the production cookie (`__Host-cp_console`, Secure) over plain http there; the tests check it.
# CONSOLE_DEV=1 runs it with --dev (cookie `cp_console`) instead.
#
# Deliveries: loopback may be reached over plain http (CP_DELIVERY_HTTP_HOSTS), one attempt
# and then failed (CP_DELIVERY_RETRY_SCHEDULE=0s), due deliveries looked for every 20 ms.
source "$(dirname "${BASH_SOURCE[0]}")/server.sh"
console_preflight
trap console_stop EXIT
CONSOLE_SHOTS=${CONSOLE_SHOTS:-$(mktemp -d "${TMPDIR:-/tmp}/cp-console-shots.XXXXXX")}
mkdir -p "$CONSOLE_SHOTS"
export CONSOLE_SHOTS

console_start \
  CP_DELIVERY_HTTP_HOSTS=127.0.0.1 \
  CP_DELIVERY_RETRY_SCHEDULE=0s \
  CP_DELIVERY_BREAKER_AFTER=0 \
  CP_DELIVERY_POLL_MS=20 \
  CP_DELIVERY_CONNECT_TIMEOUT_MS=1000 \
  CP_DELIVERY_TIMEOUT_MS=2000

rc=0
(cd "$CONSOLE_ROOT" && node --test --test-concurrency=1 tests/console/*.test.mjs) || rc=$?
if [ "$rc" != 0 ] && [ -n "$CONSOLE_DIR" ]; then
  echo "the server's last log lines:" >&2; tail -20 "$CONSOLE_DIR/server.log" >&2
fi
console_stop
echo "screenshots: $CONSOLE_SHOTS"
ls -1 "$CONSOLE_SHOTS" | sed 's/^/  /'
if [ "$rc" != 0 ]; then
  echo "FAILED: the console's browser tests (node --test exited with $rc)" >&2
fi
exit "$rc"
