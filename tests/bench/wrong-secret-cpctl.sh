#!/usr/bin/env bash
# A cpctl whose printed tokens carry a wrong secret (the last character changed), to see a
# script refuse its figures: every request made with those tokens is answered 401. The
# bootstrap's token is left as it is: lib.sh's set-up issues the others with it over HTTP
# (through its setup server, which BENCH_SETUP_SERVER=yes starts for a BENCH_CPCTL), so the
# issuance spread over them is refused.
#
#   BENCH_SETUP_SERVER=yes BENCH_CPCTL=tests/bench/wrong-secret-cpctl.sh tests/bench/run.sh 3
#   (exits 1, REFUSED: ...)
#
# Runs ${REAL_CPCTL:-${DRILL_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}/cpctl}.
set -euo pipefail
"${REAL_CPCTL:-${DRILL_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}/cpctl}" "$@" | python3 -c '
import json, sys
text = sys.stdin.read()
try:
    d = json.loads(text)
except ValueError:
    sys.stdout.write(text); sys.exit()
def bad(t): return t[:-1] + ("A" if t[-1] != "A" else "B")
if isinstance(d, dict) and "token" in d: d["token"] = bad(d["token"])
print(json.dumps(d))'
