"""Verifies one dispatch with the official Standard Webhooks and Svix libraries.

Reads {"secret", "id", "timestamp", "signature", "body"} (body as base64) on stdin; prints
{"standardwebhooks": bool, "svix": bool}: whether each library accepts it with that secret.
Used by the HTTP suite (tests/api/dispatch_audience.rs) through CP_TEST_WEBHOOK_PYTHON.
"""

import base64
import json
import sys

import standardwebhooks
import svix.webhooks

case = json.load(sys.stdin)
body = base64.b64decode(case["body"])
headers = {
    "webhook-id": case["id"],
    "webhook-timestamp": case["timestamp"],
    "webhook-signature": case["signature"],
}
result = {}
for name, verifier in [
    ("standardwebhooks", standardwebhooks.Webhook(case["secret"])),
    ("svix", svix.webhooks.Webhook(case["secret"])),
]:
    try:
        verifier.verify(body, headers)
        result[name] = True
    except Exception:  # each library raises its own verification error type
        result[name] = False
print(json.dumps(result))
