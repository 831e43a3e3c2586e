//! Token hygiene: each token's last use recorded in the background, at most once a minute
//! (across replicas too), and the `token.expiring` notice given once per token in every
//! workspace it reaches.

use std::time::{Duration, Instant};

use chrono::Utc;
use control_plane::domain::{
    CorrelationId, ExpiresInDays, RevocationReason, Scope, Scopes, Span, TokenName,
};
use control_plane::http::TrustedProxies;
use control_plane::service::{IssueTokenInput, TOKEN_EXPIRING, USER_AGENT_MAX};
use control_plane::storage::{TokenFilter, TokenRecord};
use serde_json::Value;
use uuid::Uuid;

use crate::support::{
    Call, ServerProcess, Tenant, TestApp, events_about, needs, routes, spawn_app_with, sql_all,
    tenant_app,
};

const HASH_KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const RECORD_KEY: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

/// The value of the `token_last_used_writes_total` counter in a `/metrics` text.
fn last_use_writes(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("token_last_used_writes_total "))
        .map(|v| v.trim().parse().unwrap())
        .expect("token_last_used_writes_total is published")
}

async fn metrics_of(base: &str) -> String {
    reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn record(app: &TestApp, id: Uuid) -> TokenRecord {
    let filter = TokenFilter {
        token_id: Some(id),
        ..TokenFilter::default()
    };
    app.services.list_tokens(&filter).await.unwrap().remove(0)
}

/// The token's record once its last use is written (within 10 s).
async fn once_used(app: &TestApp, id: Uuid) -> TokenRecord {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let token = record(app, id).await;
        if token.last_use.is_some() {
            return token;
        }
        assert!(Instant::now() < deadline, "no last use recorded for {id}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A token of the tenant's admin (activity:read) on `workspaces`, expiring in `days`, issued as
/// cpctl does: (id, secret).
async fn token(app: &TestApp, tenant: &Tenant, workspaces: &[Uuid], days: i64) -> (Uuid, String) {
    let input = IssueTokenInput::new(
        TokenName::parse(&format!("t-{}", Uuid::new_v4().simple())).unwrap(),
        [Scope::ActivityRead].into_iter().collect::<Scopes>(),
        tenant.organisation_id,
        workspaces.to_vec(),
        vec![],
        ExpiresInDays::parse(days).unwrap(),
    )
    .unwrap();
    let issued = app
        .services
        .issue_token_for_user(tenant.user_id, input, &CorrelationId::generate())
        .await
        .unwrap();
    (issued.record.id, issued.secret.expose().to_owned())
}

/// `count` activity reads with `secret` and `agent`, over `connections` clients of their own,
/// spread over `bases` (server addresses) in turn.
async fn load(bases: &[&str], path: &str, secret: &str, agent: &str, count: usize) {
    const CONNECTIONS: usize = 8;
    let clients: Vec<reqwest::Client> = (0..CONNECTIONS)
        .map(|_| {
            reqwest::Client::builder()
                .user_agent(agent)
                .build()
                .unwrap()
        })
        .collect();
    let requests = (0..count).map(|i| {
        let client = clients[i % CONNECTIONS].clone();
        let url = format!("{}{path}", bases[i % bases.len()]);
        let secret = secret.to_owned();
        async move {
            let status = client
                .get(url)
                .bearer_auth(secret)
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status, 200);
        }
    });
    futures_util::future::join_all(requests).await;
}

/// Waits until every use the servers at `bases` answered so far went through their last-use
/// writers: a fresh token used once on each, after those uses, has its use written (a process
/// queues uses in order and one task writes them). The fresh tokens, one a base.
async fn uses_written(app: &TestApp, tenant: &Tenant, bases: &[&str]) -> Vec<Uuid> {
    let path = routes::activity(tenant.workspace_id);
    let mut markers = Vec::new();
    for base in bases {
        let (marker, secret) = token(app, tenant, &[tenant.workspace_id], 30).await;
        load(&[base], &path, &secret, "marker/1", 1).await;
        once_used(app, marker).await;
        markers.push(marker);
    }
    markers
}

#[tokio::test]
async fn last_use_appears_after_use_and_is_written_once_a_minute_under_load() {
    let (app, tenant) = tenant_app().await;
    let path = routes::activity(tenant.workspace_id);
    let (a, a_secret) = token(&app, &tenant, &[tenant.workspace_id], 30).await;
    let (b, b_secret) = token(&app, &tenant, &[tenant.workspace_id], 30).await;
    assert_eq!(record(&app, a).await.last_use, None, "never used yet");
    assert_eq!(last_use_writes(&app.metrics().await), 0);

    let before = Utc::now();
    load(&[&app.address], &path, &a_secret, "hygiene-test/1.0", 200).await;
    let used = once_used(&app, a).await.last_use.unwrap();
    assert!(used.at >= before - chrono::Duration::seconds(1) && used.at <= Utc::now());
    assert_eq!(used.address, "127.0.0.1");
    assert_eq!(used.user_agent.as_deref(), Some("hygiene-test/1.0"));

    // A long user agent is kept to its bound; the other token is written once too.
    let long_agent = "x".repeat(USER_AGENT_MAX + 100);
    load(&[&app.address], &path, &b_secret, &long_agent, 100).await;
    let used_b = once_used(&app, b).await.last_use.unwrap();
    assert_eq!(
        used_b.user_agent.map(|a| a.chars().count()),
        Some(USER_AGENT_MAX)
    );
    // Stragglers, if any, have been written by now.
    let markers = uses_written(&app, &tenant, &[&app.address]).await;
    assert_eq!(
        last_use_writes(&app.metrics().await),
        2 + 1,
        "one write per token for 300 requests (and the marker's)"
    );
    assert_eq!(
        record(&app, a).await.last_use.unwrap(),
        used,
        "not rewritten"
    );
    // The tenant's own token was never used over HTTP.
    let tenant_tokens: Vec<(Option<String>,)> = sql_all!(
        &mut app.db().await,
        (Option<String>,),
        "SELECT last_used_address FROM tokens WHERE id <> $1 AND id <> $2 AND id <> $3",
        a,
        b,
        markers[0]
    )
    .unwrap();
    assert_eq!(tenant_tokens, vec![(None,)]);
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_last_use_records_the_forwarded_client() {
    let app = spawn_app_with(|c| {
        c.trusted_proxies = TrustedProxies::parse("127.0.0.1").unwrap();
    })
    .await;
    let tenant = app.bootstrap().await;
    let (id, secret) = token(&app, &tenant, &[tenant.workspace_id], 30).await;
    let path = routes::activity(tenant.workspace_id);
    app.get(&path, &secret)
        .header("x-forwarded-for", "192.0.2.1, 198.51.100.9")
        .ok_response()
        .await;
    let used = once_used(&app, id).await.last_use.unwrap();
    assert_eq!(used.address, "198.51.100.9", "the address the proxy saw");
}

/// Two server processes on one Postgres and one Redis: the claim is shared, so 200 requests
/// spread over both write the token's last use once in all.
#[tokio::test]
async fn redis_only_two_replicas_write_a_tokens_last_use_once() {
    needs!(Postgres, Redis);
    let app = spawn_app_with(|c| c.token_hash_key = Some(HASH_KEY.into())).await;
    let tenant = app.bootstrap().await;
    let (id, secret) = token(&app, &tenant, &[tenant.workspace_id], 30).await;
    let one = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let two = ServerProcess::start(&app.config, HASH_KEY, RECORD_KEY);
    let path = routes::activity(tenant.workspace_id);

    load(
        &[&one.address, &two.address],
        &path,
        &secret,
        "replicas/1",
        200,
    )
    .await;
    once_used(&app, id).await;
    // Stragglers, if any, have been written by now.
    let markers = uses_written(&app, &tenant, &[&one.address, &two.address]).await;
    let writes = last_use_writes(&metrics_of(&one.address).await)
        + last_use_writes(&metrics_of(&two.address).await);
    assert_eq!(
        writes,
        1 + markers.len() as u64,
        "one write across both replicas (and one a marker)"
    );
}

/// The `token.expiring` events about `id`, as (workspace, data).
async fn notices(app: &TestApp, id: Uuid) -> Vec<(Uuid, Value)> {
    let rows: Vec<(Uuid, String)> = sql_all!(
        &mut app.db().await,
        (Uuid, String),
        "SELECT workspace_id, CAST(data AS TEXT) FROM audit_events
         WHERE event_type = $1 AND target_id = $2 ORDER BY workspace_id",
        TOKEN_EXPIRING,
        id
    )
    .unwrap();
    rows.into_iter()
        .map(|(ws, data)| (ws, serde_json::from_str(&data).unwrap()))
        .collect()
}

#[tokio::test]
async fn a_token_near_its_expiry_gets_one_notice_in_each_of_its_workspaces() {
    let app = spawn_app_with(|c| {
        c.token_expiry_notice = "7d".parse().unwrap();
        c.token_expiry_notice_secs = 1;
    })
    .await;
    let tenant = app.bootstrap().await;
    let other = app.create_workspace(tenant.organisation_id, "other").await;
    let both = [tenant.workspace_id, other];
    let (soon, soon_secret) = token(&app, &tenant, &both, 3).await;
    let (far, _) = token(&app, &tenant, &both, 30).await;
    let (revoked, _) = token(&app, &tenant, &both, 3).await;
    app.services
        .revoke_token_access_as_admin(
            None,
            revoked,
            RevocationReason::parse("test").unwrap(),
            false,
            &CorrelationId::generate(),
        )
        .await
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    while notices(&app, soon).await.len() < 2 {
        assert!(Instant::now() < deadline, "no expiry notice within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A pass begun after both were written gives nothing more.
    app.background_pass_after("token_expiry_notices", Utc::now())
        .await;
    let given = notices(&app, soon).await;
    let mut workspaces: Vec<Uuid> = given.iter().map(|(ws, _)| *ws).collect();
    workspaces.sort();
    let mut expected = both.to_vec();
    expected.sort();
    assert_eq!(workspaces, expected, "once in each workspace");
    let soon_record = record(&app, soon).await;
    for (_, data) in &given {
        assert_eq!(data["tokenId"], soon.to_string());
        assert_eq!(data["name"], soon_record.name);
        assert_eq!(
            data["prefix"],
            format!(
                "{}{}",
                control_plane::domain::TOKEN_PREFIX,
                soon_record.public_id
            )
        );
        assert!(data["expiresAt"].is_string());
        assert!(!data.to_string().contains(&soon_secret), "never the secret");
    }
    assert_eq!(
        events_about(&app, TOKEN_EXPIRING, far).await.0,
        0,
        "far from expiry"
    );
    assert_eq!(
        events_about(&app, TOKEN_EXPIRING, revoked).await.0,
        0,
        "revoked"
    );

    // The tenant's admin reads it in the workspace's activity.
    let page = app.activity(&tenant, "").await;
    let seen = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == TOKEN_EXPIRING && e["data"]["tokenId"] == soon.to_string())
        .count();
    assert_eq!(seen, 1);
}

/// Passes running at once (as on several replicas) give each token its notice once.
#[tokio::test]
async fn concurrent_notice_passes_give_each_notice_once() {
    // No background pass during the test: the two below are the only ones.
    let app = spawn_app_with(|c| c.token_expiry_notice_secs = 86_400).await;
    let tenant = app.bootstrap().await;
    let mut soon = Vec::new();
    for _ in 0..5 {
        soon.push(token(&app, &tenant, &[tenant.workspace_id], 2).await.0);
    }
    let span: Span = "7d".parse().unwrap();
    // The background task's first tick runs at start: let it finish before counting (the
    // next is a day away).
    let ever = chrono::DateTime::from_timestamp(0, 0).unwrap();
    app.background_pass_after("token_expiry_notices", ever)
        .await;
    let already: usize = {
        let mut n = 0;
        for id in &soon {
            n += notices(&app, *id).await.len();
        }
        n
    };
    let (x, y) = tokio::join!(
        app.services.notice_expiring_tokens(span),
        app.services.notice_expiring_tokens(span)
    );
    let claimed = x.unwrap().0 + y.unwrap().0;
    assert_eq!(claimed + already, soon.len(), "each token claimed once");
    for id in &soon {
        assert_eq!(notices(&app, *id).await.len(), 1, "one notice for {id}");
    }
    let (again, more) = app.services.notice_expiring_tokens(span).await.unwrap();
    assert_eq!((again, more), (0, false));
}
