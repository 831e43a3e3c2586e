//! Finishing touches on the generated OpenAPI document: what the derive macros cannot say.

use serde_json::{Value, json};

use crate::domain::Auth;
use crate::domain::operation::operation_by_route;

pub const DESCRIPTION: &str = "\
The v1 HTTP/JSON interface of the control plane.

* Every response carries `x-correlation-id`: the request's own when it sent a valid one \
(8 to 128 of `[A-Za-z0-9._:-]`, starting alphanumeric), a generated one otherwise. An invalid \
one is a 400 whose body and header carry a freshly generated id.
* Every error has the `ApiError` body; `error.code` is a stable snake_case word: \
`validation_failed`, `invalid_json`, `invalid_body` (the body could not be read), \
`unsupported_media_type`, `payload_too_large`, \
`unauthenticated`, `forbidden`, `not_found`, `method_not_allowed`, `conflict`, \
`token_limit_reached`, `idempotency_key_reused`, `idempotency_in_progress`, \
`idempotency_quota_exceeded` (429: the caller's quota of stored idempotent responses is spent; \
nothing ran; see `retry-after`), `rate_limited`, \
`policy_error` (the authorization policy failed; denied), `invalid_signature` (a runner \
signature was refused), `pool_busy`, `pool_deleted`, `invalid_transition`, \
`already_reported`, `cursor_expired` (410: an activity cursor or a stream's `Last-Event-ID` \
points into audit events the organisation's retention removed; `details.oldestSequence` is the \
oldest kept), `unavailable`, `internal`. `error.details` names the failing field \
(`field`, `reason`, and `errors` listing all of them).
* Rate limits: a bearer request spends its token's, its user's and its organisation's \
budgets at once; `x-ratelimit-limit` and `x-ratelimit-remaining` describe the budget that \
refused a 429, or else the one with the fewest requests left. Signed runner reports spend \
budgets of their own (per client address, then per runner), never a bearer one.
* A wrong or missing `Content-Type` on a JSON body is a 400 `unsupported_media_type` (the \
contract lists no 415). Bodies over the limit (1 MiB by default) are a 413.
* Path ids are strings: an id that is not a uuid matches nothing (a workspace outside the \
token's is 403, an unknown token 404).
* Runner status reports are signed, not bearer-authenticated. Headers: `x-sandbox-runner-id` \
and `x-sandbox-key-id` (uuids from `cpctl runners register`), `x-sandbox-timestamp` (Unix \
seconds, within 300 s of the server's clock), `x-sandbox-nonce` (16 to 128 of \
`[A-Za-z0-9._-]`, single use) and `x-sandbox-signature`: base64 of the Ed25519 signature of \
these lines joined by `\\n`: `v1`, the method, the path as sent without the query, the \
timestamp, the nonce, the runner id, the key id, and the lowercase hex SHA-256 of the raw body.
* Generated clients: openapi-python-client needs no option. openapi-typescript needs \
`--default-non-nullable false`: by default it makes a request field with a `default` required \
(the issuance body's `environmentIds` and `expiresInDays`, which a client may leave out).
* States: runner command `queued → dispatched → running → succeeded | failed | cancelled`; \
webhook delivery `pending → received → running → succeeded | failed` (and `failed` from any \
live state; a delivery's report moves its command: received → dispatched, and so on); workflow \
revision `draft → pending_approval → approved | rejected`; review \
`published | held | rejected | hidden`, decided by the moderation policy.
* The marketplace is shared by every organisation: any user with `reviews:write` may review \
any plugin. Review and report events are organisation-level audit events of the actor's \
organisation (they belong to no workspace's stream).";

pub fn finish(raw: &str) -> String {
    let Ok(mut doc) = serde_json::from_str::<Value>(raw) else {
        return raw.to_owned();
    };
    // Every request body is read by `JsonObject`, which refuses any property it did not read;
    // poem-openapi's schema model cannot say `additionalProperties: false` itself.
    for name in request_body_schemas(&doc) {
        if let Some(schema) = doc
            .pointer_mut(&format!("/components/schemas/{name}"))
            .and_then(Value::as_object_mut)
        {
            schema.insert("additionalProperties".into(), Value::Bool(false));
        }
    }
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, methods) in paths.iter_mut() {
            let Some(methods) = methods.as_object_mut() else {
                continue;
            };
            for (method, operation) in methods.iter_mut() {
                // The declaration says which operations take a key, which a runner signs and
                // what each writes to the audit log.
                let Some(spec) = operation_by_route(&method.to_ascii_uppercase(), path) else {
                    continue;
                };
                add_contract_headers(operation, spec.idempotent, spec.auth == Auth::RunnerSigned);
                if !spec.audit.is_empty() {
                    operation["x-audit-events"] = json!(spec.audit);
                }
            }
        }
        for operation in paths
            .values_mut()
            .filter_map(Value::as_object_mut)
            .flat_map(|m| m.values_mut())
        {
            add_correlation_parameter(operation);
            add_query_patterns(operation);
            let Some(responses) = operation
                .get_mut("responses")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            for response in responses.values_mut().filter_map(Value::as_object_mut) {
                let headers = response.entry("headers").or_insert_with(|| json!({}));
                if let Some(headers) = headers.as_object_mut() {
                    headers.insert(
                        "x-correlation-id".into(),
                        json!({
                            "description": "Correlation id of the request.",
                            "required": true,
                            "schema": { "type": "string" }
                        }),
                    );
                }
            }
        }
    }
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| raw.to_owned())
}

/// The component names of every operation's request body.
fn request_body_schemas(doc: &Value) -> Vec<String> {
    let operations = doc
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|paths| paths.values())
        .filter_map(Value::as_object)
        .flat_map(|methods| methods.values());
    operations
        .filter_map(|op| op.pointer("/requestBody/content")?.as_object())
        .flat_map(|content| content.values())
        .filter_map(|media| media.pointer("/schema/$ref")?.as_str())
        .filter_map(|r| r.strip_prefix("#/components/schemas/"))
        .map(str::to_owned)
        .collect()
}

fn header(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "header", "required": false, "description": description, "schema": schema })
}

/// What the contract says of every operation and the derive cannot: the `Idempotency-Key`
/// request header and `idempotency-replayed` response header of idempotent operations, the
/// rate-limit headers, and the runner signature headers of the signed route.
fn add_contract_headers(operation: &mut Value, idempotent: bool, signed: bool) {
    let Some(operation) = operation.as_object_mut() else {
        return;
    };
    let parameters = operation.entry("parameters").or_insert_with(|| json!([]));
    if let Some(list) = parameters.as_array_mut() {
        if idempotent {
            list.push(header(
                "Idempotency-Key",
                "Enables exact replay of this request for 24 hours; scoped to the caller and the operation.",
                json!({ "type": "string", "minLength": 16, "maxLength": 200, "pattern": "^[A-Za-z0-9._:-]+$" }),
            ));
        }
        if signed {
            let uuid = json!({ "type": "string", "format": "uuid" });
            let mut required = |name: &str, description: &str, schema: Value| {
                let mut h = header(name, description, schema);
                h["required"] = Value::Bool(true);
                list.push(h);
            };
            required("x-sandbox-runner-id", "The runner.", uuid.clone());
            required("x-sandbox-key-id", "The runner's key that signed.", uuid);
            required(
                "x-sandbox-timestamp",
                "Unix seconds; within 300 s of the server's clock.",
                json!({ "type": "string", "pattern": "^[0-9]+$" }),
            );
            required(
                "x-sandbox-nonce",
                "Single use.",
                json!({ "type": "string", "minLength": 16, "maxLength": 128, "pattern": "^[A-Za-z0-9._-]+$" }),
            );
            required(
                "x-sandbox-signature",
                "Base64 Ed25519 signature of the lines described in the API description.",
                json!({ "type": "string" }),
            );
        }
    }
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let integer = json!({ "type": "integer" });
    for (status, response) in responses.iter_mut() {
        let Some(headers) = response
            .as_object_mut()
            .map(|r| r.entry("headers").or_insert_with(|| json!({})))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        if idempotent && status.starts_with('2') {
            headers.insert(
                "idempotency-replayed".into(),
                json!({ "description": "`true` when this response is a replay.", "schema": { "type": "string", "enum": ["true"] } }),
            );
        }
        let limited = status == "429";
        for (name, description) in [
            (
                "x-ratelimit-limit",
                "Requests allowed in a burst, by the budget that refused (a 429) or else the tightest.",
            ),
            (
                "x-ratelimit-remaining",
                "Requests left before the limit, in the same budget.",
            ),
        ] {
            headers.insert(
                name.into(),
                json!({ "description": description, "required": limited, "schema": integer }),
            );
        }
        if limited {
            headers.insert(
                "retry-after".into(),
                json!({ "description": "Seconds until a request is allowed (for `idempotency_quota_exceeded`, until the quota's window ends).", "required": true, "schema": integer }),
            );
        }
        if status == "503" {
            headers.insert(
                "retry-after".into(),
                json!({ "description": "Seconds to wait before retrying.", "required": true, "schema": integer }),
            );
        }
    }
}

/// What a query parameter a handler reads itself accepts, stated in the document from the
/// parser's own definitions (its pattern, its values, its bounds), so every value the
/// document allows is accepted and every other refused.
enum QueryRule {
    Pattern(&'static str),
    Values(Vec<&'static str>),
    /// A named schema of the document.
    Schema(&'static str),
    DateTime,
    Range(i64, i64),
}

fn query_rule(operation: &str, parameter: &str) -> Option<QueryRule> {
    use crate::domain::{
        DeliveryStatus, KEY_ID_CURSOR_PATTERN, SEQUENCE_PATTERN, UUID_CURSOR_PATTERN,
    };
    use crate::policy::{DecisionOutcome, MEMORY_CEILING_MIB};
    use crate::service::audit_integrity::ANCHOR_PATTERN;
    use crate::service::{DECISION_CURSOR_PATTERN, EVENT_TYPES_PATTERN, POLICY_NAME_PATTERN};

    Some(match (operation, parameter) {
        // The workspace logs and the disagreements page by sequence.
        ("listActivity" | "listShadowDisagreements", "cursor") | ("streamAuditEvents", "after") => {
            QueryRule::Pattern(SEQUENCE_PATTERN)
        }
        ("listPolicyDecisions", "cursor") => QueryRule::Pattern(DECISION_CURSOR_PATTERN),
        ("listWebhookSigningKeys", "cursor") => QueryRule::Pattern(KEY_ID_CURSOR_PATTERN),
        // Every other list pages by the last item's id (`AdminPage`).
        (_, "cursor") => QueryRule::Pattern(UUID_CURSOR_PATTERN),
        (_, "types") => QueryRule::Pattern(EVENT_TYPES_PATTERN),
        (_, "since" | "until") => QueryRule::DateTime,
        ("listDeliveries", "status") => {
            QueryRule::Values(DeliveryStatus::ALL.iter().map(|s| s.as_str()).collect())
        }
        ("listPolicyDecisions", "outcome") => {
            QueryRule::Values(DecisionOutcome::ALL.iter().map(|o| o.as_str()).collect())
        }
        ("verifyAuditLog", "anchor") => QueryRule::Pattern(ANCHOR_PATTERN),
        ("installPolicy", "kind") => QueryRule::Schema("PolicyKind"),
        ("installPolicy", "instances") => QueryRule::Schema("PolicyInstances"),
        ("installPolicy", "name") => QueryRule::Pattern(POLICY_NAME_PATTERN),
        ("installPolicy", "memoryMib") => QueryRule::Range(1, i64::from(MEMORY_CEILING_MIB)),
        _ => return None,
    })
}

fn add_query_patterns(operation: &mut Value) {
    let id = operation["operationId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let parameters = operation
        .get_mut("parameters")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "query");
    for parameter in parameters {
        let Some(rule) = parameter["name"].as_str().and_then(|n| query_rule(&id, n)) else {
            continue;
        };
        let Some(schema) = parameter["schema"].as_object_mut() else {
            continue;
        };
        match rule {
            QueryRule::Pattern(pattern) => {
                schema.insert("pattern".into(), json!(pattern));
            }
            QueryRule::Values(values) => {
                schema.insert("enum".into(), json!(values));
            }
            QueryRule::Schema(name) => {
                schema.clear();
                schema.insert("$ref".into(), json!(format!("#/components/schemas/{name}")));
            }
            QueryRule::DateTime => {
                schema.insert("format".into(), json!("date-time"));
            }
            QueryRule::Range(min, max) => {
                schema.insert("minimum".into(), json!(min));
                schema.insert("maximum".into(), json!(max));
            }
        }
    }
}

/// Every operation accepts the optional `x-correlation-id` request header.
fn add_correlation_parameter(operation: &mut Value) {
    let Some(operation) = operation.as_object_mut() else {
        return;
    };
    let parameters = operation.entry("parameters").or_insert_with(|| json!([]));
    if let Some(list) = parameters.as_array_mut() {
        list.push(json!({
            "name": "x-correlation-id",
            "in": "header",
            "required": false,
            "description": "Correlation id; generated when omitted.",
            "schema": { "type": "string", "minLength": 8, "maxLength": 128, "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]+$" }
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed public document, compared byte for byte so that every change to the
    /// interface shows in review.
    #[test]
    fn openapi_document_matches_the_snapshot() {
        crate::http::snapshot::assert_snapshot("openapi.json", &crate::http::openapi_document());
    }

    /// The operation table (`domain::operation`) and the routes the `#[oai(...)]` attributes
    /// declare are the same operations: every row is in the document with its id, method,
    /// route and security, and every `/v1` operation of the document is exactly one row.
    #[test]
    fn the_operation_table_is_the_documents() {
        use crate::domain::operation::OPERATIONS;

        let document: Value = serde_json::from_str(&crate::http::openapi_document()).expect("JSON");
        let paths = document["paths"].as_object().expect("paths");
        let mut documented = 0;
        for (path, methods) in paths.iter().filter(|(p, _)| p.starts_with("/v1/")) {
            for (method, operation) in methods.as_object().expect("methods") {
                documented += 1;
                let rows: Vec<_> = OPERATIONS
                    .iter()
                    .filter(|op| {
                        op.route == path.as_str() && op.method.eq_ignore_ascii_case(method)
                    })
                    .collect();
                assert_eq!(rows.len(), 1, "{method} {path}: {} rows", rows.len());
                let row = rows[0];
                assert_eq!(operation["operationId"], row.id, "{method} {path}");
                let security = match row.auth {
                    Auth::Bearer(_) | Auth::AnyToken => json!([{ "BearerAuth": [] }]),
                    Auth::RunnerSigned | Auth::None => Value::Null,
                };
                assert_eq!(operation["security"], security, "{}", row.id);
            }
        }
        assert_eq!(
            documented,
            OPERATIONS.len(),
            "a row missing from the document"
        );
    }

    /// Client generators such as openapi-python-client refuse an `allOf` that wraps a `$ref`
    /// in a description-only object; the document has no `allOf` at all.
    #[test]
    fn the_document_has_no_all_of() {
        let document = crate::http::openapi_document();
        assert!(
            !document.contains("\"allOf\""),
            "an allOf crept into the document"
        );
    }
}
