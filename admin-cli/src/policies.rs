//! `cpctl policies` (but `test`, `bench` and `new`, which stay local) and `cpctl webhooks
//! keys` over HTTP: the instance's policies and signing keys, an operator's. `install` sends
//! the component as it is; the server compiles and measures it with its own settings. In JSON
//! a verb prints the object inside the API's envelope.

use std::path::Path;

use anyhow::Context;
use base64::Engine as _;
use serde_json::{Value, json};

use crate::cli::{OutputFormat, PoliciesCommand, WebhooksCommand};
use crate::output::{self, Cell, Column};
use crate::remote::Client;

const POLICY: &[Column] = &[
    ("POLICY", "reference", Cell::Text),
    ("KIND", "kind", Cell::Text),
    ("DIGEST", "digest", Cell::Text),
    ("SIZE", "sizeBytes", Cell::Text),
    ("INSTANCES", "instances", Cell::Text),
    ("CREATED", "createdAt", Cell::Text),
];
const DISAGREEMENT: &[Column] = &[
    ("WHEN", "occurredAt", Cell::Text),
    ("OPERATION", "operation", Cell::Text),
    ("PRINCIPAL", "principalId", Cell::Text),
    ("ACTIVE", "activeDecision", Cell::Text),
    ("SHADOW", "shadowDecision", Cell::Text),
];
const KEY: &[Column] = &[
    ("KID", "kid", Cell::Text),
    ("CURRENT", "current", Cell::Text),
    ("PUBLIC KEY", "publicKey", Cell::Text),
    ("X (JWK)", "x", Cell::Text),
];

impl PoliciesCommand {
    /// `test`, `bench` and `new`: answered by cpctl alone, with no server and no store.
    pub fn is_local(&self) -> bool {
        matches!(
            self,
            PoliciesCommand::Test { .. }
                | PoliciesCommand::Bench { .. }
                | PoliciesCommand::New { .. }
        )
    }
}

/// `name@version` as the route's two parts.
fn version_path(reference: &str) -> anyhow::Result<String> {
    let (name, version) = reference
        .rsplit_once('@')
        .filter(|(n, v)| !n.is_empty() && v.parse::<u32>().is_ok_and(|v| v > 0))
        .with_context(|| format!("{reference}: expected NAME@VERSION"))?;
    Ok(format!("/v1/policies/{name}/versions/{version}"))
}

fn reference(policy: &Value) -> String {
    policy["reference"].as_str().unwrap_or("-").to_owned()
}

/// The policies verbs answered over HTTP.
pub async fn run(
    client: &Client,
    out: OutputFormat,
    command: PoliciesCommand,
) -> anyhow::Result<()> {
    match command {
        PoliciesCommand::Install {
            file,
            kind,
            name,
            memory,
            cases,
            force,
            instances,
        } => {
            let memory = memory.map(|m| m.mib());
            install(
                client,
                out,
                &file,
                &kind,
                &name,
                memory,
                cases.as_deref(),
                force,
                instances,
            )
            .await?
        }
        PoliciesCommand::List => list(client, out).await?,
        PoliciesCommand::Show { policy } => {
            let body = client.get(&version_path(&policy)?).await?;
            match out {
                OutputFormat::Json => println!("{}", body["policy"]),
                OutputFormat::Table => {
                    output::rows(out, POLICY, std::slice::from_ref(&body["policy"]));
                    if let Some(budget) = body["budget"].as_object() {
                        println!("\nmeasured: {}", summary(&Value::Object(budget.clone())));
                    }
                }
            }
        }
        PoliciesCommand::Activate { policy, force } => {
            let path = format!("{}/activate", version_path(&policy)?);
            let body = client.post(&path, json!({ "force": force })).await?;
            let p = &body["policy"];
            match out {
                OutputFormat::Json => println!(
                    "{}",
                    json!({
                        "activated": reference(p),
                        "kind": p["kind"],
                        "forced": body["forced"],
                        "overBudget": body["overBudget"],
                    })
                ),
                OutputFormat::Table => {
                    println!(
                        "{} is the active {}",
                        reference(p),
                        p["kind"].as_str().unwrap_or("-")
                    );
                    if let Some(reason) = body["overBudget"].as_str() {
                        println!("forced over budget: {reason}");
                    }
                }
            }
        }
        PoliciesCommand::Rollback { kind } => {
            let body = client
                .post("/v1/policies/rollback", json!({ "kind": kind }))
                .await?;
            let active = body["active"].as_object().map_or_else(
                || "built-in".to_owned(),
                |p| reference(&Value::Object(p.clone())),
            );
            match out {
                OutputFormat::Json => {
                    println!("{}", json!({ "kind": body["kind"], "active": active }))
                }
                OutputFormat::Table => println!(
                    "the active {} is now {active}",
                    body["kind"].as_str().unwrap_or("-")
                ),
            }
        }
        PoliciesCommand::Remove { policy } => {
            let body = client
                .change(reqwest::Method::DELETE, &version_path(&policy)?, json!({}))
                .await?;
            let removed = reference(&body["policy"]);
            match out {
                OutputFormat::Json => println!("{}", json!({ "removed": removed })),
                OutputFormat::Table => println!("removed {removed}"),
            }
        }
        PoliciesCommand::Shadow { policy, off } => {
            let body = if off {
                json!({})
            } else {
                let policy = policy.context("give NAME@VERSION, or --off")?;
                json!({ "policy": policy })
            };
            let answer = client
                .change(reqwest::Method::PUT, "/v1/policies/shadow", body)
                .await?;
            let shadow = answer["shadow"]
                .as_object()
                .map(|p| reference(&Value::Object(p.clone())));
            match (out, shadow) {
                (OutputFormat::Json, s) => println!("{}", json!({ "shadow": s })),
                (OutputFormat::Table, Some(p)) => {
                    println!("{p} now runs in shadow beside the active authorizer")
                }
                (OutputFormat::Table, None) => println!("shadow evaluation stopped"),
            }
        }
        PoliciesCommand::ShadowReport { limit } => {
            let path = "/v1/policies/shadow/disagreements";
            let items = newest(client, path, &[], limit).await?;
            output::rows(out, DISAGREEMENT, &items);
        }
        PoliciesCommand::Decisions(args) => {
            crate::policy_decisions::list(client, out, args).await?
        }
        PoliciesCommand::Test { .. }
        | PoliciesCommand::Bench { .. }
        | PoliciesCommand::New { .. } => {
            unreachable!("local verbs, in commands.rs")
        }
    }
    Ok(())
}

/// `policies install FILE --kind K --name N [--memory-mib N] [--cases F] [--force]
/// [--instances fresh|per-organisation]`: the reference on stdout (scripts read it), the
/// server's measurement on stderr; both in one document with `-o json`.
#[allow(clippy::too_many_arguments, reason = "the verb's flags")]
async fn install(
    client: &Client,
    out: OutputFormat,
    file: &Path,
    kind: &str,
    name: &str,
    memory_mib: Option<u32>,
    cases: Option<&Path>,
    force: bool,
    instances: control_plane::policy::Instances,
) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut query = vec![
        ("kind", kind.to_owned()),
        ("name", name.to_owned()),
        ("instances", instances.as_str().to_owned()),
    ];
    if let Some(mib) = memory_mib {
        query.push(("memoryMib", mib.to_string()));
    }
    if force {
        query.push(("force", "true".to_owned()));
    }
    let mut headers = Vec::new();
    if let Some(path) = cases {
        let text =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
        headers.push(("Policy-Cases", encoded));
    }
    let body = client
        .upload("/v1/policies", &query, &headers, bytes)
        .await?;
    match out {
        OutputFormat::Json => {
            let mut doc = body["policy"].clone();
            doc["budget"] = body["budget"].clone();
            println!("{doc}");
        }
        OutputFormat::Table => {
            println!("{}", reference(&body["policy"]));
            eprintln!("measured: {}", summary(&body["budget"]));
            if let Some(reason) = body["budget"]["overBudget"].as_str() {
                eprintln!("over budget: {reason}; activation will need --force");
            }
        }
    }
    Ok(())
}

/// A measurement in one line, as `policies bench` prints it.
fn summary(b: &Value) -> String {
    let ms = |key: &str| b[key].as_f64().unwrap_or(0.0);
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (deadline {} ms); peak memory {:.1} MiB (budget {} MiB); {} failures",
        ms("p50Ms"),
        ms("p99Ms"),
        ms("maxMs"),
        b["deadlineMs"],
        b["peakMemoryBytes"].as_f64().unwrap_or(0.0) / f64::from(1 << 20),
        b["memoryBudgetMib"],
        b["failures"],
    )
}

/// Every version, and which are active or in shadow.
async fn list(client: &Client, out: OutputFormat) -> anyhow::Result<()> {
    let all = client.get_all("/v1/policies", &[]).await?;
    // The state in force, from a page of its own (the listing's pages each carry it).
    let state = client.get("/v1/policies?limit=1").await?["active"].take();
    let named = |p: &Value| p.as_object().map(|_| reference(p));
    let active = |p: &Value| named(p).unwrap_or_else(|| "built-in".to_owned());
    match out {
        OutputFormat::Json => println!(
            "{}",
            json!({
                "policies": all,
                "active": {
                    "authorizer": active(&state["authorizer"]),
                    "moderator": active(&state["moderator"]),
                },
                "shadow": named(&state["shadow"]),
            })
        ),
        OutputFormat::Table => {
            output::rows(out, POLICY, &all);
            let default = |p: &Value| named(p).unwrap_or_else(|| "built-in default".to_owned());
            println!("\nactive authorizer: {}", default(&state["authorizer"]));
            println!("active moderator:  {}", default(&state["moderator"]));
            if let Some(shadow) = named(&state["shadow"]) {
                println!("shadow authorizer: {shadow}");
            }
        }
    }
    Ok(())
}

/// At most `limit` items of a newest-first list, page after page.
pub async fn newest(
    client: &Client,
    path: &str,
    filters: &[(&str, String)],
    limit: u32,
) -> anyhow::Result<Vec<Value>> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    while items.len() < limit as usize {
        let page_size = (limit as usize - items.len()).min(200);
        let mut url = reqwest::Url::parse("http://cpctl.invalid")?.join(path)?;
        {
            let mut query = url.query_pairs_mut();
            for (name, value) in filters {
                query.append_pair(name, value);
            }
            query.append_pair("limit", &page_size.to_string());
            if let Some(cursor) = &cursor {
                query.append_pair("cursor", cursor);
            }
        }
        let mut page = client
            .get(&format!(
                "{}?{}",
                url.path(),
                url.query().unwrap_or_default()
            ))
            .await?;
        if let Value::Array(found) = page["items"].take() {
            items.extend(found);
        }
        match page["nextCursor"].as_str() {
            Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
            _ => break,
        }
    }
    Ok(items)
}

/// `cpctl webhooks keys`: the public keys webhooks to runners are signed with, current first.
pub async fn webhooks(
    client: &Client,
    out: OutputFormat,
    command: WebhooksCommand,
) -> anyhow::Result<()> {
    let WebhooksCommand::Keys = command;
    let keys = client.get_all("/v1/webhook-signing-keys", &[]).await?;
    output::rows(out, KEY, &keys);
    Ok(())
}
