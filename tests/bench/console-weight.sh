#!/usr/bin/env bash
# The console's page weight and first render with many tokens: a release server on 127.0.0.1
# (SQLite store in a temporary folder, rate limits off so the seeding is not throttled), 1,000
# tokens seeded for one user through the API, then /console/tokens and the baseline
# /console/sign-in loaded in headless Debian Chromium, cache off, median of 10 loads each
# (tests/bench/console-weight.mjs). Prints a Markdown table.
#
#   tests/bench/console-weight.sh [loads] [tokens]      (default 10 loads, 1000 tokens)
#
# Binaries from CP_CONSOLE_BIN_DIR or DRILL_BIN_DIR (default target/ci); Chromium from
# /usr/bin/chromium (apt-get install -y chromium); playwright-core as tests/console/run.sh
# installs it (npm ci from tests/console/package-lock.json).
source "$(dirname "${BASH_SOURCE[0]}")/../console/server.sh"
LOADS=${1:-10}
TOKENS=${2:-1000}
console_preflight
trap console_stop EXIT
console_start \
  CP_RATE_LIMIT=off CP_ISSUE_RATE_LIMIT=off CP_USER_RATE_LIMIT=off CP_ORG_RATE_LIMIT=off \
  CP_MAX_ACTIVE_TOKENS_PER_USER=1000000
node "$CONSOLE_ROOT/tests/bench/console-weight.mjs" "$LOADS" "$TOKENS"
