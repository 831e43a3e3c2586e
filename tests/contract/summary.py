"""Prints what a schemathesis run checked, from its NDJSON report: requests sent and their
statuses, by operation, and each check's successes and failures.

Usage: summary.py NDJSON_REPORT
"""

import collections
import json
import sys


def main() -> None:
    statuses = collections.defaultdict(collections.Counter)
    checks = collections.defaultdict(collections.Counter)
    with open(sys.argv[1]) as report:
        for line in report:
            event = json.loads(line)
            recorder = event.get("ScenarioFinished", {}).get("recorder", {})
            label = recorder.get("label", "?")
            for interaction in recorder.get("interactions", {}).values():
                response = interaction.get("response") or {}
                statuses[label][response.get("status_code", "no response")] += 1
            for results in recorder.get("checks", {}).values():
                for check in results:
                    checks[check["name"]][check["status"]] += 1

    print("schemathesis summary: requests by operation and status")
    for label in sorted(statuses):
        counts = ", ".join(f"{status}: {n}" for status, n in sorted(statuses[label].items(), key=str))
        print(f"  {label}: {sum(statuses[label].values())} ({counts})")
    print("schemathesis summary: checks (success / failure)")
    for name in sorted(checks):
        print(f"  {name}: {checks[name]['success']} / {checks[name]['failure']}")


if __name__ == "__main__":
    main()
