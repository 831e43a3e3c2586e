//! The document and the server agree on what responses hold: the bodies the ten operations
//! answer, an error, and every event of the audit stream conform to the schema the server's
//! own `/openapi.json` gives for that status (JSON types, required properties, `nullable`,
//! enums), as a generated client reads them. schemathesis checks the same, and more, against a
//! release build in CI (`tests/contract/run.sh`); this keeps it in the suite, on every backend.

use control_plane::domain::Scope;
use reqwest::Response;
use serde_json::{Value, json};

use crate::support::runner as signatures;
use crate::support::sse::Sse;
use crate::support::{Call, TestApp, issuance_body, routes};
use crate::{reviews, workflows};

struct Document(Value);

impl Document {
    async fn fetch(app: &TestApp) -> Self {
        let response = app.client.get(app.url("/openapi.json")).ok_response().await;
        Self(response.json().await.expect("the document is JSON"))
    }

    /// The schema of `method path`'s response with `status` in `media_type` (parameters such
    /// as `; charset=utf-8` aside).
    fn response(&self, method: &str, path: &str, status: u16, media_type: &str) -> &Value {
        let content = &self.0["paths"][path][method]["responses"][status.to_string()]["content"];
        content
            .as_object()
            .into_iter()
            .flatten()
            .find(|(name, _)| name.split(';').next() == Some(media_type))
            .map(|(_, entry)| &entry["schema"])
            .unwrap_or_else(|| panic!("{method} {path}: no {status} {media_type} schema"))
    }

    fn named(&self, name: &str) -> &Value {
        let schema = &self.0["components"]["schemas"][name];
        assert!(!schema.is_null(), "no schema {name}");
        schema
    }

    /// `schema` itself, or the one its `$ref` names.
    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema["$ref"].as_str() {
            Some(reference) => self.named(
                reference
                    .strip_prefix("#/components/schemas/")
                    .unwrap_or_else(|| panic!("a reference outside the schemas: {reference}")),
            ),
            None => schema,
        }
    }

    /// Records, at `at`, every way `value` falls outside `schema`.
    fn check(&self, at: &str, schema: &Value, value: &Value, problems: &mut Vec<String>) {
        let schema = self.resolve(schema);
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema[key].as_array() {
                let fits = branches.iter().any(|branch| {
                    let mut inner = Vec::new();
                    self.check(at, branch, value, &mut inner);
                    inner.is_empty()
                });
                if !fits {
                    problems.push(format!("{at}: {value} fits no branch of {key}"));
                }
                return;
            }
        }
        let Some(expected) = schema["type"].as_str() else {
            return; // any value
        };
        if value.is_null() {
            if schema["nullable"] != json!(true) {
                problems.push(format!("{at}: null, where the schema says {expected}"));
            }
            return;
        }
        let fits = match expected {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            other => panic!("{at}: unknown type {other}"),
        };
        if !fits {
            problems.push(format!("{at}: {value} is not {expected}"));
            return;
        }
        if let Some(allowed) = schema["enum"].as_array()
            && !allowed.contains(value)
        {
            problems.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
        if let Some(map) = value.as_object() {
            for required in schema["required"].as_array().into_iter().flatten() {
                let name = required.as_str().expect("a property name");
                if !map.contains_key(name) {
                    problems.push(format!("{at}: required property {name} is missing"));
                }
            }
            for (name, inner) in map {
                if let Some(property) = schema["properties"].get(name) {
                    self.check(&format!("{at}.{name}"), property, inner, problems);
                }
            }
        }
        if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
            for item in items {
                self.check(&format!("{at}[]"), schema, item, problems);
            }
        }
    }
}

/// Reads a JSON response of `method path` and checks it against the document's schema for
/// its status.
async fn conforms(
    document: &Document,
    problems: &mut Vec<String>,
    (method, path): (&str, &str),
    response: Response,
) -> Value {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("a JSON body");
    let schema = document.response(method, path, status, "application/json");
    document.check(
        &format!("{method} {path} {status}"),
        schema,
        &body,
        problems,
    );
    body
}

const ISSUE: (&str, &str) = ("post", "/v1/personal-access-tokens");
const REVOKE: (&str, &str) = (
    "delete",
    "/v1/workspaces/{workspaceId}/access-tokens/{tokenId}",
);
const SUBMIT: (&str, &str) = ("post", "/v1/workspaces/{workspaceId}/runner-commands");
const REPORT: (&str, &str) = ("post", "/v1/runner/webhook-deliveries/{deliveryId}/status");
const DELETE_POOL: (&str, &str) = (
    "delete",
    "/v1/workspaces/{workspaceId}/runner-pools/{poolId}",
);
const APPROVAL: (&str, &str) = (
    "post",
    "/v1/workspaces/{workspaceId}/workflows/{workflowId}/revisions/{revisionId}/request-approval",
);
const PUT_REVIEW: (&str, &str) = ("put", "/v1/marketplace/plugins/{pluginId}/reviews/me");
const REPORT_REVIEW: (&str, &str) = (
    "post",
    "/v1/marketplace/plugins/{pluginId}/reviews/{reviewId}/report",
);
const ACTIVITY: (&str, &str) = ("get", "/v1/workspaces/{workspaceId}/activity");
const STREAM: &str = "/v1/workspaces/{workspaceId}/audit/stream";

#[tokio::test]
async fn every_response_and_stream_event_conforms_to_the_document() {
    let (app, tenant, pool, runner) = signatures::fixture().await.parts();
    let ws = tenant.workspace_id;
    let document = Document::fetch(&app).await;
    let mut problems = Vec::new();

    let issued = app.issue(&tenant.token, &issuance_body(&tenant)).await;
    let issued = conforms(&document, &mut problems, ISSUE, issued).await;
    let token_id = issued["credential"]["id"].as_str().expect("id");
    let revoke = app
        .delete_json(
            &routes::revoke_token(ws, token_id),
            &tenant.token,
            &json!({"reason": "rotated"}),
        )
        .response()
        .await;
    conforms(&document, &mut problems, REVOKE, revoke).await;

    // A command without an environment: its `environmentId` is null.
    let submitted = app
        .post_json(
            &routes::runner_commands(ws),
            &tenant.token,
            &json!({"poolId": pool, "command": "echo"}),
        )
        .response()
        .await;
    let submitted = conforms(&document, &mut problems, SUBMIT, submitted).await;
    assert!(submitted["command"]["environmentId"].is_null());
    let delivery = submitted["command"]["deliveryId"].as_str().expect("id");
    let reported = signatures::report(&app, &runner, delivery, json!({"status": "received"})).await;
    conforms(&document, &mut problems, REPORT, reported).await;
    let deleted = app
        .delete_json(
            &routes::runner_pool(ws, pool),
            &tenant.token,
            &json!({"force": true}),
        )
        .response()
        .await;
    conforms(&document, &mut problems, DELETE_POOL, deleted).await;

    // Created by an admin (cpctl's path): its events' actor has a null id.
    let (workflow, revision) = workflows::draft(&app, ws, "deploy").await;
    let approval =
        workflows::request_approval(&app, &tenant.token, ws, workflow, revision, &json!({})).await;
    conforms(&document, &mut problems, APPROVAL, approval).await;

    let plugin = reviews::create_plugin(&app, &tenant, "formatter").await;
    let review = json!({"rating": 5, "title": "Great", "body": "Saved us hours every week."});
    let put = reviews::put_review(&app, &tenant.token, plugin, &review).await;
    let put = conforms(&document, &mut problems, PUT_REVIEW, put).await;
    let review_id = put["review"]["id"].as_str().expect("id");
    let (_, reporter) = reviews::user_token(&app, &tenant, &[Scope::ReviewsReport]).await;
    let reported = reviews::report(
        &app,
        &reporter,
        plugin,
        review_id,
        &json!({"reason": "spam"}),
    )
    .await;
    conforms(&document, &mut problems, REPORT_REVIEW, reported).await;

    // One page holds every event: `nextCursor` is null.
    let activity = app
        .get(
            &format!("{}?limit=100", routes::activity(ws)),
            &tenant.token,
        )
        .response()
        .await;
    let activity = conforms(&document, &mut problems, ACTIVITY, activity).await;
    assert!(activity["nextCursor"].is_null());
    let items = activity["items"].as_array().expect("items");
    assert!(
        items.iter().any(|item| item["actor"]["id"].is_null()),
        "an admin's event: {items:?}"
    );

    // An error, as every operation documents it.
    let missing = app
        .delete_json(
            &routes::runner_pool(ws, uuid::Uuid::new_v4()),
            &tenant.token,
            &json!({}),
        )
        .response()
        .await;
    assert_eq!(missing.status(), 404);
    conforms(&document, &mut problems, DELETE_POOL, missing).await;

    // Each event of the stream, as an SSE parser hands it over (`data` unparsed), and its data.
    let event_schema = document.response("get", STREAM, 200, "text/event-stream");
    let mut stream = Sse::open(&app, &tenant.token, ws, "?after=0", None).await;
    stream.expect_preamble().await;
    for _ in items {
        let event = stream.next_event().await;
        let parsed = json!({
            "id": event.id.to_string(),
            "event": event.event,
            "data": event.data.to_string(),
        });
        document.check("stream event", event_schema, &parsed, &mut problems);
        let item = document.named("ActivityItem");
        document.check("stream event data", item, &event.data, &mut problems);
    }

    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn the_checker_refuses_a_null_a_wrong_type_and_a_missing_property() {
    let app = crate::support::spawn_app().await;
    let document = Document::fetch(&app).await;
    let command = document.named("RunnerCommand");
    let mut problems = Vec::new();
    document.check(
        "command",
        command,
        &json!({"id": null, "workspaceId": 1, "args": [2]}),
        &mut problems,
    );
    for expected in [
        "command: required property poolId is missing",
        "command.id: null, where the schema says string",
        "command.workspaceId: 1 is not string",
        "command.args[]: 2 is not string",
    ] {
        assert!(
            problems.iter().any(|p| p == expected),
            "{expected} not in {problems:#?}"
        );
    }
}

/// `cursor`, `after` and `types` are strings with a pattern: every value the pattern allows is
/// served and every other is a 400 naming the parameter (schemathesis found a schema-valid
/// `cursor` refused when the document said only `string`).
#[tokio::test]
async fn query_parameters_accept_exactly_what_their_pattern_allows() {
    let app = crate::support::spawn_app().await;
    let tenant = app.bootstrap().await;
    let ws = tenant.workspace_id;
    let document = Document::fetch(&app).await;
    let pattern = |path: &str, name: &str| {
        document.0["paths"][path]["get"]["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["schema"]["pattern"].clone())
            .unwrap_or_else(|| panic!("{path}: no {name}"))
    };
    let sequence = json!(control_plane::domain::SEQUENCE_PATTERN);
    assert_eq!(pattern(ACTIVITY.1, "cursor"), sequence);
    assert_eq!(pattern(STREAM, "after"), sequence);
    for path in [
        "/v1/organisations/{organisationId}/users",
        "/v1/organisations/{organisationId}/tokens",
    ] {
        assert_eq!(
            pattern(path, "cursor"),
            json!(control_plane::domain::UUID_CURSOR_PATTERN),
            "{path}"
        );
    }
    assert_eq!(
        pattern(STREAM, "types"),
        json!(control_plane::service::EVENT_TYPES_PATTERN)
    );

    let status = |path: String| {
        let request = app.get(&path, &tenant.token);
        async move {
            let response = request.response().await;
            let status = response.status().as_u16();
            let field = if status == 400 {
                let body: Value = response.json().await.unwrap();
                body["error"]["details"]["field"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            } else {
                String::new()
            };
            (status, field)
        }
    };
    let ok = (200, String::new());
    let refused = |field: &str| (400, field.to_owned());
    let activity = routes::activity(ws);
    for cursor in ["", "0", "1", "000042", "999999999999999999"] {
        let got = status(format!("{activity}?cursor={cursor}")).await;
        assert_eq!(got, ok, "cursor={cursor}");
    }
    for cursor in [
        "-1",
        "%2B1",
        "%201",
        "1.5",
        "abc",
        "1e3",
        "9999999999999999999",
    ] {
        let got = status(format!("{activity}?cursor={cursor}")).await;
        assert_eq!(got, refused("cursor"), "cursor={cursor}");
    }

    let stream = routes::audit_stream(ws);
    let fifty = vec!["token.issued"; 50].join(",");
    let long = "t".repeat(100);
    for query in [
        "after=".to_owned(),
        "after=0".to_owned(),
        "after=999999999999999999".to_owned(),
        format!("types={fifty}"),
        format!("types={long}"),
        "types=,,".to_owned(),
    ] {
        assert_eq!(status(format!("{stream}?{query}")).await, ok, "{query}");
    }
    for (query, field) in [
        ("after=-1".to_owned(), "after"),
        ("after=%2B1".to_owned(), "after"),
        ("after=9999999999999999999".to_owned(), "after"),
        (format!("types={fifty},token.issued"), "types"),
        (format!("types={long}t"), "types"),
    ] {
        assert_eq!(
            status(format!("{stream}?{query}")).await,
            refused(field),
            "{query}"
        );
    }
}
