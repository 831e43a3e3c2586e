//! GCRA limits with integer headers; budgets per token, per user and per organisation, the
//! most restrictive answering; a lower budget for issuance, per user.

use control_plane::domain::{CorrelationId, Scope};
use control_plane::http::TrustedProxies;
use reqwest::Response;
use uuid::Uuid;

use crate::support::{
    Call, Tenant, TestApp, assert_api_error, captured_logs, issuance_body, rate, routes,
    spawn_app_with,
};

/// Another token of the tenant's own user.
async fn second_token(app: &TestApp, tenant: &Tenant) -> String {
    app.scoped_token(tenant, &[Scope::ActivityRead, Scope::TokensIssue])
        .await
}

/// A token of another user of the tenant's organisation.
async fn colleague_token(app: &TestApp, tenant: &Tenant) -> String {
    let user = app
        .services
        .create_user(
            tenant.organisation_id,
            &format!("colleague-{}@example.com", Uuid::new_v4().simple()),
            &CorrelationId::generate(),
        )
        .await
        .expect("a second user");
    let colleague = Tenant {
        user_id: user.id,
        ..tenant.clone()
    };
    app.admin_token(
        &colleague,
        &[Scope::ActivityRead],
        &[tenant.workspace_id],
        &[],
    )
    .await
}

async fn read(app: &TestApp, tenant: &Tenant, token: &str) -> Response {
    let path = routes::activity(tenant.workspace_id);
    app.get(&path, token).response().await
}

fn header(response: &Response, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn limited_responses_carry_integer_headers_until_429() {
    let app = spawn_app_with(|c| c.rate_limit = rate("3/m")).await;
    let tenant = app.bootstrap().await;
    let path = routes::activity(tenant.workspace_id);
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let response = app.get(&path, &tenant.token).ok_response().await;
        assert_eq!(response.headers()["x-ratelimit-limit"], "3");
        remaining.push(
            response.headers()["x-ratelimit-remaining"]
                .to_str()
                .unwrap()
                .parse::<u32>()
                .unwrap(),
        );
    }
    assert_eq!(remaining, [2, 1, 0]);
    let limited = app.get(&path, &tenant.token).response().await;
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1, "retry-after in whole seconds, at least 1");
    assert_eq!(limited.headers()["x-ratelimit-remaining"], "0");
    assert_eq!(limited.headers()["x-ratelimit-limit"], "3");
    assert_api_error(limited, 429, "rate_limited").await;

    // Another principal has its own budget.
    let other = app
        .scoped_token(&tenant, &[control_plane::domain::Scope::ActivityRead])
        .await;
    assert_eq!(app.get(&path, &other).response().await.status(), 200);
}

#[tokio::test]
async fn issuance_has_its_own_lower_budget() {
    let app = spawn_app_with(|c| c.issue_rate_limit = rate("2/m")).await;
    let tenant = app.bootstrap().await;
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    let limited = app.issue(&tenant.token, &issuance_body(&tenant)).await;
    assert_eq!(limited.headers()["x-ratelimit-limit"], "2");
    assert_api_error(limited, 429, "rate_limited").await;
    // Reads are not spent by issuance.
    let path = routes::activity(tenant.workspace_id);
    assert_eq!(app.get(&path, &tenant.token).response().await.status(), 200);
}

#[tokio::test]
async fn unauthenticated_requests_are_limited_per_address() {
    let app = spawn_app_with(|c| c.rate_limit = rate("2/m")).await;
    for _ in 0..2 {
        app.get(&routes::activity("x"), "cpat_not-a-token")
            .expect(401, "unauthenticated")
            .await;
    }
    app.get(&routes::activity("x"), "cpat_not-a-token")
        .expect(429, "rate_limited")
        .await;
}

/// A `/v1` path no operation has spends its address's budget, charged once the router has
/// answered, even with a valid token: it named nothing a token could reach, so the token's own
/// budget is left alone.
#[tokio::test]
async fn requests_no_operation_takes_spend_the_address_budget() {
    let app = spawn_app_with(|c| c.rate_limit = rate("2/m")).await;
    let tenant = app.bootstrap().await;
    for _ in 0..2 {
        app.get("/v1/no-such-operation", &tenant.token)
            .expect(404, "not_found")
            .await;
    }
    app.get("/v1/no-such-operation", &tenant.token)
        .expect(429, "rate_limited")
        .await;
    assert_eq!(read(&app, &tenant, &tenant.token).await.status(), 200);
}

/// An unauthenticated read carrying `forwarded` as its `X-Forwarded-For` field lines: its status.
async fn anonymous_read(app: &TestApp, forwarded: &[&str]) -> u16 {
    let mut request = app.get(&routes::activity("x"), "cpat_not-a-token");
    for line in forwarded {
        request = request.header("x-forwarded-for", *line);
    }
    request.status_code().await
}

#[tokio::test]
async fn a_forwarded_address_is_not_believed_by_default() {
    let app = spawn_app_with(|c| c.rate_limit = rate("2/m")).await;
    assert_eq!(anonymous_read(&app, &["203.0.113.1"]).await, 401);
    assert_eq!(anonymous_read(&app, &["203.0.113.2"]).await, 401);
    // A third "client" is the same peer, whose budget is spent.
    assert_eq!(anonymous_read(&app, &["203.0.113.3"]).await, 429);
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    let app = spawn_app_with(|c| {
        c.rate_limit = rate("2/m");
        c.trusted_proxies = TrustedProxies::parse("127.0.0.0/8").unwrap();
    })
    .await;
    assert_eq!(anonymous_read(&app, &["203.0.113.1"]).await, 401);
    assert_eq!(anonymous_read(&app, &["203.0.113.1"]).await, 401);
    assert_eq!(anonymous_read(&app, &["203.0.113.1"]).await, 429);
    assert_eq!(
        anonymous_read(&app, &["203.0.113.2"]).await,
        401,
        "another client behind the same proxy"
    );
    // A client that writes another's address is still charged as itself: the proxy appended
    // its real address on the right, in the same field line or in a line of its own.
    assert_eq!(
        anonymous_read(&app, &["203.0.113.9, 203.0.113.1"]).await,
        429
    );
    assert_eq!(
        anonymous_read(&app, &["203.0.113.9", "203.0.113.1"]).await,
        429
    );
    // A second trusted hop (127.0.0.9) is skipped to the client it saw.
    assert_eq!(anonymous_read(&app, &["203.0.113.1, 127.0.0.9"]).await, 429);
    // An entry that is no address stops at the hop that wrote it: here the peer, whose budget
    // requests without the header share.
    assert_eq!(anonymous_read(&app, &["203.0.113.3, unknown"]).await, 401);
    assert_eq!(anonymous_read(&app, &[]).await, 401);
    assert_eq!(anonymous_read(&app, &[]).await, 429);
    assert_eq!(anonymous_read(&app, &["203.0.113.3"]).await, 401);
}

/// Whether an app started with `trusted` logged the warning, with these very blocks: the
/// captured log is every in-process app's.
async fn warned_at_start(trusted: &str) -> bool {
    let trusted = TrustedProxies::parse(trusted).unwrap();
    let blocks = trusted.to_string();
    // Logged while the app is built, so once it answers the line is there or never will be.
    let _app = spawn_app_with(|c| c.trusted_proxies = trusted).await;
    captured_logs().lines().any(|line| {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(line) else {
            return false;
        };
        let fields = &entry["fields"];
        fields["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("--trusted-proxies holds every address"))
            && fields["blocks"] == blocks.as_str()
    })
}

// How the blocks may split every address is `http/forwarded.rs`'s unit tests' (splits,
// overlaps, IPv4-mapped blocks, one address short); here, that the verdict reaches the log,
// for a split set and for a set one address short, each from a server of its own.
#[tokio::test]
async fn trusting_every_address_is_warned_of_at_start() {
    let every = "192.0.0.0/2, 10.0.0.0/8, 0.0.0.0/1, 128.0.0.0/2";
    assert!(warned_at_start(every).await, "warned of {every}");
    let short = "0.0.0.0/1, 128.0.0.0/2, 192.0.0.0/3, 224.0.0.0/4, 240.0.0.0/5, 248.0.0.0/6, \
                 252.0.0.0/7, 254.0.0.0/8, 255.0.0.0/9, 255.128.0.0/10, 255.192.0.0/11, \
                 255.224.0.0/12, 255.240.0.0/13, 255.248.0.0/14, 255.252.0.0/15, \
                 255.254.0.0/16, 255.255.0.0/17, 255.255.128.0/18, 255.255.192.0/19, \
                 255.255.224.0/20, 255.255.240.0/21, 255.255.248.0/22, 255.255.252.0/23, \
                 255.255.254.0/24, 255.255.255.0/25, 255.255.255.128/26, 255.255.255.192/27, \
                 255.255.255.224/28, 255.255.255.240/29, 255.255.255.248/30, \
                 255.255.255.252/31, 255.255.255.254";
    assert!(!warned_at_start(short).await, "not warned of {short}");
}

#[tokio::test]
async fn two_tokens_of_one_user_share_the_user_budget() {
    let app = spawn_app_with(|c| c.user_rate_limit = rate("3/m")).await;
    let tenant = app.bootstrap().await;
    let other = second_token(&app, &tenant).await;
    let mut statuses = Vec::new();
    for token in [&tenant.token, &other, &tenant.token, &other] {
        statuses.push(read(&app, &tenant, token).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429], "three requests per user");
    let limited = read(&app, &tenant, &tenant.token).await;
    assert_eq!(
        header(&limited, "x-ratelimit-limit"),
        "3",
        "the user budget"
    );
    assert_api_error(limited, 429, "rate_limited").await;
    // Another user of the organisation has a budget of its own.
    let colleague = colleague_token(&app, &tenant).await;
    assert_eq!(read(&app, &tenant, &colleague).await.status(), 200);
}

#[tokio::test]
async fn the_organisation_budget_bounds_all_of_its_users() {
    let app = spawn_app_with(|c| c.org_rate_limit = rate("3/m")).await;
    let tenant = app.bootstrap().await;
    let colleague = colleague_token(&app, &tenant).await;
    let mut statuses = Vec::new();
    for token in [&tenant.token, &colleague, &tenant.token, &colleague] {
        statuses.push(read(&app, &tenant, token).await.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    let limited = read(&app, &tenant, &colleague).await;
    assert_eq!(header(&limited, "x-ratelimit-limit"), "3");
    assert!(header(&limited, "retry-after").parse::<u64>().unwrap() >= 1);
    assert_api_error(limited, 429, "rate_limited").await;
    // Another organisation is not spent.
    let elsewhere = app.bootstrap().await;
    assert_eq!(read(&app, &elsewhere, &elsewhere.token).await.status(), 200);
}

#[tokio::test]
async fn the_tightest_budget_is_reported_and_a_refusal_spends_no_other() {
    let app = spawn_app_with(|c| {
        c.rate_limit = rate("2/m");
        c.user_rate_limit = rate("3/m");
        c.org_rate_limit = rate("50/m");
    })
    .await;
    let tenant = app.bootstrap().await;
    let other = second_token(&app, &tenant).await;
    // Allowed: the headers show the budget with the fewest requests left, the token's.
    let first = read(&app, &tenant, &tenant.token).await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-ratelimit-limit"), "2");
    assert_eq!(header(&first, "x-ratelimit-remaining"), "1");
    assert_eq!(read(&app, &tenant, &tenant.token).await.status(), 200);
    // The token's budget refuses; the user's is not charged for the refusals.
    for _ in 0..3 {
        let limited = read(&app, &tenant, &tenant.token).await;
        assert_eq!(header(&limited, "x-ratelimit-limit"), "2", "the token's");
        assert_api_error(limited, 429, "rate_limited").await;
    }
    // So the second token still has the user's third request, and then the user's budget
    // is the one that refuses.
    let third = read(&app, &tenant, &other).await;
    assert_eq!(third.status(), 200);
    assert_eq!(header(&third, "x-ratelimit-limit"), "3");
    assert_eq!(header(&third, "x-ratelimit-remaining"), "0");
    let limited = read(&app, &tenant, &other).await;
    assert_eq!(header(&limited, "x-ratelimit-limit"), "3", "the user's");
    assert_api_error(limited, 429, "rate_limited").await;
}

#[tokio::test]
async fn issuance_is_limited_per_user_not_per_token() {
    let app = spawn_app_with(|c| c.issue_rate_limit = rate("2/m")).await;
    let tenant = app.bootstrap().await;
    let other = second_token(&app, &tenant).await;
    assert_eq!(
        app.issue(&tenant.token, &issuance_body(&tenant))
            .await
            .status(),
        200
    );
    assert_eq!(
        app.issue(&other, &issuance_body(&tenant)).await.status(),
        200
    );
    for token in [&tenant.token, &other] {
        let limited = app.issue(token, &issuance_body(&tenant)).await;
        assert_eq!(header(&limited, "x-ratelimit-limit"), "2");
        assert_api_error(limited, 429, "rate_limited").await;
    }
    // Another user of the organisation issues on its own budget.
    let user = app
        .services
        .create_user(
            tenant.organisation_id,
            &format!("issuer-{}@example.com", Uuid::new_v4().simple()),
            &CorrelationId::generate(),
        )
        .await
        .unwrap();
    let issuer = Tenant {
        user_id: user.id,
        ..tenant.clone()
    };
    let token = app
        .admin_token(
            &issuer,
            &[Scope::ActivityRead, Scope::TokensIssue],
            &[tenant.workspace_id],
            &[],
        )
        .await;
    assert_eq!(
        app.issue(&token, &issuance_body(&tenant)).await.status(),
        200
    );
}
