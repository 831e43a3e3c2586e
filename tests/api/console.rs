//! The web console over real HTTP, as a browser without script would use it: sign-in with a
//! token, the session cookie's attributes, CSRF and origin checks on every change, session
//! fixation, sign-out and revocation ending the session, a member refused an admin page, and
//! changes made through the console named in the audit log like cpctl's.

use control_plane::domain::{Role, Scope};
use reqwest::header::{COOKIE, SET_COOKIE};
use reqwest::{Response, StatusCode};
use uuid::Uuid;

use crate::support::{TestApp, event_actor, spawn_app_with, tenant_app};

const ADMIN: &[Scope] = &[Scope::AdminRead, Scope::AdminWrite, Scope::AuditRead];

/// A browser's view of the console: the session cookie it holds, and forms it fills in.
struct Browser<'a> {
    app: &'a TestApp,
    cookie: Option<String>,
}

impl<'a> Browser<'a> {
    fn new(app: &'a TestApp) -> Self {
        Self { app, cookie: None }
    }

    /// Signs in with `token`; keeps the session cookie it was given.
    async fn sign_in(&mut self, token: &str) -> Response {
        let response = self.post("/console/sign-in", &[("token", token)]).await;
        if let Some(cookie) = session_cookie(&response) {
            self.cookie = Some(cookie);
        }
        response
    }

    fn with_cookie(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.cookie {
            Some(cookie) => request.header(COOKIE, cookie),
            None => request,
        }
    }

    async fn get(&self, path: &str) -> Response {
        self.with_cookie(self.app.request(reqwest::Method::GET, path))
            .send()
            .await
            .expect("GET")
    }

    async fn page(&self, path: &str) -> String {
        let response = self.get(path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        response.text().await.unwrap()
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Response {
        self.with_cookie(self.app.request(reqwest::Method::POST, path))
            .form(form)
            .send()
            .await
            .expect("POST")
    }

    /// Sends a form of the page at `page` as that page would: with its CSRF value and a key.
    async fn submit(&self, page: &str, action: &str, fields: &[(&str, &str)]) -> Response {
        let html = self.page(page).await;
        let csrf = hidden(&html, "csrf").expect("a CSRF value on the page");
        let key = Uuid::new_v4().to_string();
        let mut form = vec![("csrf", csrf.as_str()), ("key", key.as_str())];
        form.extend_from_slice(fields);
        self.post(action, &form).await
    }
}

/// `name=value` of the session's Set-Cookie.
fn session_cookie(response: &Response) -> Option<String> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.contains("cp_console="))
        .and_then(|v| v.split(';').next())
        .map(str::to_owned)
}

/// The value of the first hidden input named `name`.
fn hidden(html: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html.find(&marker)? + marker.len();
    let end = html[start..].find('"')?;
    Some(html[start..start + end].to_owned())
}

fn location(response: &Response) -> &str {
    response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_token_signs_in_once_into_an_http_only_secure_strict_session_that_never_shows_it() {
    let (app, tenant) = tenant_app().await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let mut browser = Browser::new(&app);

    let signed_in = browser.sign_in(&admin.token).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&signed_in), "/console/tokens");
    let set_cookie = signed_in.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    for attribute in [
        "__Host-cp_console=",
        "Path=/",
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
    ] {
        assert!(
            set_cookie.contains(attribute),
            "{attribute} missing from {set_cookie}"
        );
    }
    assert!(
        !set_cookie.contains(&admin.token),
        "the token is sealed, not in the cookie"
    );

    // As a browser sends it from the sign-in page: its own origin (and `same-origin`).
    let from_page = app
        .request(reqwest::Method::POST, "/console/sign-in")
        .header("origin", &app.address)
        .header("sec-fetch-site", "same-origin")
        .form(&[("token", admin.token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(from_page.status(), StatusCode::SEE_OTHER);

    let page = browser.get("/console/tokens").await;
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.headers()["referrer-policy"], "same-origin");
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(page.headers()["cache-control"], "no-store");
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let html = page.text().await.unwrap();
    assert!(
        html.contains(&admin.token_id.to_string()),
        "the page names the signed-in token"
    );
    assert!(
        !html.contains(&admin.token),
        "the token's secret is never on a page"
    );

    // Without the cookie: sent to sign in, not shown anything.
    let anonymous = Browser::new(&app).get("/console/tokens").await;
    assert_eq!(anonymous.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&anonymous), "/console/sign-in");
}

#[tokio::test]
async fn a_wrong_token_gets_the_sign_in_page_with_the_api_error_and_no_session() {
    let (app, _tenant) = tenant_app().await;
    let mut browser = Browser::new(&app);
    let refused = browser.sign_in("cp_not_a_real_token").await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(session_cookie(&refused).is_none());
    let html = refused.text().await.unwrap();
    assert!(
        html.contains("unauthenticated") && html.contains("correlation id"),
        "{html}"
    );
}

#[tokio::test]
async fn an_admin_issues_sees_and_revokes_a_token_and_the_log_names_the_admin() {
    let (app, tenant) = tenant_app().await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&admin.token).await;
    let holder = app
        .user_in_role(&tenant, Role::Member, &[Scope::AuditRead])
        .await;
    let org = tenant.organisation_id.to_string();
    let user = holder.user_id.to_string();
    let workspace = tenant.workspace_id.to_string();
    let name = format!("console-{}", Uuid::new_v4().simple());

    let issued = browser
        .submit(
            "/console/tokens",
            "/console/tokens/issue",
            &[
                ("org", &org),
                ("user", &user),
                ("name", &name),
                ("scopes", "audit:read"),
                ("workspaces", &workspace),
                ("days", "7"),
            ],
        )
        .await;
    let status = issued.status();
    let html = issued.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains("shown once"), "{html}");
    let secret_start = html.find("id=\"secret-value\">").expect("the secret") + 18;
    let secret = &html[secret_start..secret_start + html[secret_start..].find('<').unwrap()];
    // The new token works, as the API says.
    let me: serde_json::Value = app.get_ok("/v1/me", secret).await;
    let token_id: Uuid = serde_json::from_value(me["caller"]["tokenId"].clone()).unwrap();

    let listed = browser.page("/console/tokens").await;
    assert!(listed.contains(&name), "the new token is listed");
    assert!(!listed.contains(secret), "its secret is not shown again");

    let revoked = browser
        .submit(
            "/console/tokens",
            "/console/tokens/revoke",
            &[
                ("org", &org),
                ("token", &token_id.to_string()),
                ("reason", "console test"),
            ],
        )
        .await;
    assert_eq!(revoked.status(), StatusCode::SEE_OTHER, "back to the list");
    let refused = app
        .request(reqwest::Method::GET, "/v1/me")
        .bearer_auth(secret)
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status(),
        StatusCode::UNAUTHORIZED,
        "revoked through the console"
    );
    assert_eq!(
        event_actor(&app, "token.workspace_access_revoked", token_id).await,
        ("user".into(), Some(admin.user_id), Some(admin.token_id)),
        "the console's change names the admin and the token that made it"
    );
}

#[tokio::test]
async fn a_change_without_the_sessions_csrf_value_or_from_another_site_changes_nothing() {
    let (app, tenant) = tenant_app().await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let victim = app
        .user_in_role(&tenant, Role::Member, &[Scope::ActivityRead])
        .await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&admin.token).await;
    let org = tenant.organisation_id.to_string();
    let token = victim.token_id.to_string();
    let fields = [
        ("org", org.as_str()),
        ("token", token.as_str()),
        ("reason", "forged"),
    ];
    let key = Uuid::new_v4().to_string();

    // No CSRF value; a wrong one; one from another session.
    let mut other = Browser::new(&app);
    other.sign_in(&admin.token).await;
    let html = other.page("/console/tokens").await;
    let foreign = hidden(&html, "csrf").unwrap();
    for csrf in ["", "0000", foreign.as_str()] {
        let mut form = vec![("csrf", csrf), ("key", key.as_str())];
        form.extend_from_slice(&fields);
        let refused = browser.post("/console/tokens/revoke", &form).await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "csrf {csrf:?}");
        assert!(
            refused
                .text()
                .await
                .unwrap()
                .contains("nothing was changed")
        );
    }
    // The right value, from another site.
    let html = browser.page("/console/tokens").await;
    let csrf = hidden(&html, "csrf").unwrap();
    let mut form = vec![("csrf", csrf.as_str()), ("key", key.as_str())];
    form.extend_from_slice(&fields);
    for (header, value) in [
        ("origin", "https://attacker.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        let refused = browser
            .with_cookie(app.request(reqwest::Method::POST, "/console/tokens/revoke"))
            .header(header, value)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{header}: {value}");
    }
    let me = app
        .request(reqwest::Method::GET, "/v1/me")
        .bearer_auth(&victim.token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        me.status(),
        StatusCode::OK,
        "the victim's token is untouched"
    );
}

#[tokio::test]
async fn a_session_planted_before_sign_in_is_replaced_and_a_forged_cookie_opens_nothing() {
    let (app, tenant) = tenant_app().await;
    let attacker = app
        .user_in_role(&tenant, Role::Member, &[Scope::ActivityRead])
        .await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;

    // The attacker's own session, planted in the victim's browser.
    let mut planted = Browser::new(&app);
    planted.sign_in(&attacker.token).await;
    let attackers_cookie = planted.cookie.clone().unwrap();
    let mut victim = Browser {
        app: &app,
        cookie: Some(attackers_cookie.clone()),
    };
    victim.sign_in(&admin.token).await;
    let victims_cookie = victim.cookie.clone().unwrap();
    assert_ne!(
        victims_cookie, attackers_cookie,
        "sign-in always starts a new session"
    );
    let page = victim.page("/console/tokens").await;
    assert!(page.contains(&admin.token_id.to_string()));
    // The attacker's cookie still opens only the attacker's session.
    let theirs = planted.page("/console/tokens").await;
    assert!(!theirs.contains(&admin.token_id.to_string()));

    // A cookie this server did not seal, or one edited by a byte, opens nothing.
    let mut edited = victims_cookie.clone().into_bytes();
    let last = edited.len() - 2;
    edited[last] = if edited[last] == b'A' { b'B' } else { b'A' };
    for forged in [
        "__Host-cp_console=forged".to_owned(),
        String::from_utf8(edited).unwrap(),
    ] {
        let stranger = Browser {
            app: &app,
            cookie: Some(forged.clone()),
        };
        let refused = stranger.get("/console/tokens").await;
        assert_eq!(refused.status(), StatusCode::SEE_OTHER, "{forged}");
        assert_eq!(location(&refused), "/console/sign-in");
    }
}

#[tokio::test]
async fn sign_out_ends_the_session_for_every_copy_of_its_cookie() {
    let (app, tenant) = tenant_app().await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&admin.token).await;
    let copy = Browser {
        app: &app,
        cookie: browser.cookie.clone(),
    };
    copy.page("/console/tokens").await;

    let html = browser.page("/console/tokens").await;
    let csrf = hidden(&html, "csrf").unwrap();
    let out = browser.post("/console/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let cleared = out.headers()[SET_COOKIE].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");

    let refused = copy.get("/console/tokens").await;
    assert_eq!(
        refused.status(),
        StatusCode::SEE_OTHER,
        "a copied cookie opens nothing"
    );
    assert_eq!(location(&refused), "/console/sign-in");
    // The token itself is not revoked by signing out of the console.
    let me = app
        .request(reqwest::Method::GET, "/v1/me")
        .bearer_auth(&admin.token)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), StatusCode::OK);
}

#[tokio::test]
async fn revoking_the_token_ends_its_session_at_the_next_page() {
    let (app, tenant) = tenant_app().await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let operator = app.user_in_role(&tenant, Role::Operator, ADMIN).await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&admin.token).await;
    browser.page("/console/users").await;

    let revoke = crate::support::routes::admin_revoke_token(tenant.organisation_id, admin.token_id);
    let _: serde_json::Value = app
        .post_ok(
            &revoke,
            &operator.token,
            &serde_json::json!({ "reason": "test" }),
        )
        .await;
    let ended = browser.get("/console/users").await;
    assert_eq!(ended.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&ended), "/console/sign-in?ended");
    assert!(
        session_cookie(&ended).is_some_and(|c| c.ends_with('=')),
        "the cookie is cleared"
    );
}

#[tokio::test]
async fn a_member_is_refused_the_users_page_and_sees_and_revokes_only_their_own_tokens() {
    let (app, tenant) = tenant_app().await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let member = app
        .user_in_role(&tenant, Role::Member, &[Scope::AuditRead])
        .await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&member.token).await;

    let refused = browser.get("/console/users").await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(
        refused.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = refused.text().await.unwrap();
    assert!(
        html.contains("forbidden") && html.contains("correlation id"),
        "{html}"
    );

    // A second token of the member's, issued by their admin.
    let org = tenant.organisation_id;
    let issued: serde_json::Value = app
        .post_ok(
            &format!("/v1/organisations/{org}/users/{}/tokens", member.user_id),
            &admin.token,
            &serde_json::json!({
                "name": "second", "scopes": ["audit:read"], "workspaceIds": [tenant.workspace_id]
            }),
        )
        .await;
    let second = issued["credential"]["id"].as_str().unwrap().to_owned();
    let second_secret = issued["credential"]["token"].as_str().unwrap().to_owned();

    let own = browser.page("/console/tokens").await;
    assert!(own.contains(&member.token_id.to_string()) || own.contains("this session"));
    assert!(own.contains("second"), "the member's other token is listed");
    assert!(
        !own.contains(&admin.token_id.to_string()),
        "nobody else's token is"
    );

    let revoked = browser
        .submit(
            "/console/tokens",
            "/console/tokens/revoke-own",
            &[("token", &second), ("reason", "not needed")],
        )
        .await;
    assert_eq!(
        revoked.status(),
        StatusCode::SEE_OTHER,
        "{:?}",
        revoked.text().await
    );
    let me = app
        .request(reqwest::Method::GET, "/v1/me")
        .bearer_auth(&second_secret)
        .send()
        .await
        .unwrap();
    assert_eq!(
        me.status(),
        StatusCode::UNAUTHORIZED,
        "revoked by its own user"
    );
    // The admin's token is not the member's to revoke.
    let foreign = browser
        .submit(
            "/console/tokens",
            "/console/tokens/revoke-own",
            &[
                ("token", &admin.token_id.to_string()),
                ("reason", "not mine"),
            ],
        )
        .await;
    assert_eq!(foreign.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_audit_page_streams_the_workspaces_events_unnamed() {
    let (app, tenant) = tenant_app().await;
    let admin = app.user_in_role(&tenant, Role::Admin, ADMIN).await;
    let mut browser = Browser::new(&app);
    browser.sign_in(&admin.token).await;
    let page = browser
        .page(&format!("/console/audit?ws={}", tenant.workspace_id))
        .await;
    assert!(page.contains("intact"), "the verification result is shown");
    let stream_path = format!("/console/audit/stream?ws={}", tenant.workspace_id);
    assert!(page.contains(&stream_path.replace('&', "&amp;")));

    let mut stream = browser.get(&stream_path).await;
    assert_eq!(stream.status(), StatusCode::OK);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    // The stream is live from its start: an event written now arrives on it.
    let first = stream.chunk().await.unwrap().expect("the subscription");
    assert!(String::from_utf8_lossy(&first).contains("subscribed"));
    app.user_in_role(&tenant, Role::Member, &[Scope::AuditRead])
        .await;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.contains("data: ") {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .expect("the stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!seen.contains("event: "), "events are sent unnamed: {seen}");
}

#[tokio::test]
async fn the_console_is_not_served_when_turned_off() {
    let app = spawn_app_with(|config| config.console = false).await;
    let response = app
        .request(reqwest::Method::GET, "/console/sign-in")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
}
