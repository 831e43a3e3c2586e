//! The web console at `/console`: server-rendered pages (askama templates, plain forms, one
//! small script for the live audit stream) over the same admin operations cpctl calls. A page
//! is a client of the API: it sends its operation to the API endpoint in this process as the
//! signed-in token ([`client`]), so the authorizer, rate limits, idempotency and audit hold
//! exactly as for any client. The session is a sealed HttpOnly cookie ([`session`]); every
//! change needs the session's CSRF value and a same-origin request. docs/decisions.md, "The
//! console", says why it is built this way.

mod actions;
mod assets;
mod client;
mod pages;
mod session;
mod views;

use std::sync::Arc;

use futures_util::StreamExt;
use poem::endpoint::BoxEndpoint;
use poem::http::{HeaderValue, Method, StatusCode, header};
use poem::{Body, Endpoint, Request, Response};
use serde_json::Value;

use self::assets::ASSETS;
use self::client::{ApiClient, Call, Failure};
use self::pages::{Ctx, Form as Submitted, PageKind};
use self::session::{Session, Sessions};
use self::views::{Choice, Chrome, NavLink, Page, SignIn, html};
use crate::domain::RecordCipher;
use crate::storage::SignOuts;

/// How the console is served.
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    /// Mark the session cookie Secure (with the `__Host-` name); off only for `--dev` on a
    /// loopback address, where the console is reached over plain http.
    pub secure_cookie: bool,
}

/// Every console response's: no inline script or style, nothing from another origin, no
/// framing, no referrer to another site, nothing cached but the hashed assets.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Largest form the console reads.
const FORM_LIMIT: usize = 64 * 1024;

pub struct Console {
    client: ApiClient,
    sessions: Sessions,
}

impl Console {
    /// `api`: the API endpoint the pages are clients of.
    pub fn new(
        api: Arc<BoxEndpoint<'static>>,
        settings: &ConsoleSettings,
        cipher: RecordCipher,
        sign_outs: Arc<dyn SignOuts>,
        key_prefix: String,
    ) -> Self {
        Self {
            client: ApiClient::new(api),
            sessions: Sessions::new(cipher, sign_outs, key_prefix, settings.secure_cookie),
        }
    }
}

impl Endpoint for Console {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let mut response = self.route(req).await;
        let headers = response.headers_mut();
        let fixed = [
            ("content-security-policy", CSP),
            ("x-content-type-options", "nosniff"),
            // Not `no-referrer`: under it a browser sends `Origin: null` on a form POST (the
            // Fetch standard), which the origin check below must refuse.
            ("referrer-policy", "same-origin"),
            ("x-frame-options", "DENY"),
            ("cross-origin-opener-policy", "same-origin"),
            ("cross-origin-resource-policy", "same-origin"),
        ];
        for (name, value) in fixed {
            headers.insert(name, HeaderValue::from_static(value));
        }
        if !headers.contains_key(header::CACHE_CONTROL) {
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
        Ok(response)
    }
}

fn redirect(to: &str) -> Response {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, to)
        .finish()
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// A change must come from a page of this origin: a browser says so in `Sec-Fetch-Site`, and
/// in `Origin`, which must name this host. (Clients that send neither still need the CSRF
/// value, which only a page of the session holds.)
fn same_origin(req: &Request) -> bool {
    if let Some(site) = req.header("sec-fetch-site")
        && site != "same-origin"
    {
        return false;
    }
    match (req.header("origin"), req.header(header::HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(scheme, rest)| matches!(scheme, "http" | "https") && rest == host),
        (Some(_), None) => false,
    }
}

fn refusal(status: StatusCode, code: &str, message: &str, req: &Request) -> Failure {
    Failure {
        status,
        code: code.to_owned(),
        message: message.to_owned(),
        correlation_id: req
            .data::<crate::domain::CorrelationId>()
            .map(|c| c.as_str().to_owned())
            .unwrap_or_default(),
    }
}

/// The sign-in page, with what it says and its status.
fn sign_in_page(
    status: StatusCode,
    notice: Option<&'static str>,
    failure: Option<Failure>,
) -> Response {
    html(
        status,
        &SignIn {
            title: "Sign in",
            assets: &ASSETS,
            notice,
            failure,
        },
    )
}

/// Reads an `application/x-www-form-urlencoded` body of at most [`FORM_LIMIT`] bytes.
async fn read_form(req: &mut Request) -> Option<Submitted> {
    let mut stream = req.take_body().into_bytes_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.ok()?);
        if bytes.len() > FORM_LIMIT {
            return None;
        }
    }
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(&bytes)
        .ok()
        .map(Submitted::new)
}

impl Console {
    async fn route(&self, mut req: Request) -> Response {
        let path = req.uri().path().to_owned();
        let method = req.method().clone();
        if path.starts_with("/console/assets/") && method == Method::GET {
            return assets::serve(&path);
        }
        match (method, path.as_str()) {
            (Method::GET, "/console" | "/console/") => redirect("/console/tokens"),
            (Method::GET, "/console/sign-in") => {
                let notice = match req.uri().query() {
                    Some("ended") => Some("Your session ended: sign in again."),
                    Some("signed-out") => Some("Signed out."),
                    _ => None,
                };
                sign_in_page(StatusCode::OK, notice, None)
            }
            (Method::POST, "/console/sign-in") => self.sign_in(&mut req).await,
            (Method::POST, "/console/sign-out") => self.sign_out(&mut req).await,
            (Method::GET, "/console/audit/stream") => self.audit_stream(&req).await,
            (Method::GET, page) => match PageKind::at(page) {
                Some(kind) => self.page(&req, kind).await,
                None => Response::builder().status(StatusCode::NOT_FOUND).finish(),
            },
            (Method::POST, action) => self.act(&mut req, action).await,
            _ => Response::builder()
                .status(StatusCode::METHOD_NOT_ALLOWED)
                .finish(),
        }
    }

    async fn sign_in(&self, req: &mut Request) -> Response {
        if !same_origin(req) {
            let failure = refusal(
                StatusCode::FORBIDDEN,
                "forbidden",
                "a sign-in must come from this console's own page",
                req,
            );
            return sign_in_page(StatusCode::FORBIDDEN, None, Some(failure));
        }
        let Some(form) = read_form(req).await else {
            let failure = refusal(
                StatusCode::BAD_REQUEST,
                "validation_failed",
                "the form could not be read",
                req,
            );
            return sign_in_page(StatusCode::BAD_REQUEST, None, Some(failure));
        };
        let token = form.get("token").trim().to_owned();
        let me = self
            .client
            .call(req, &token, Call::get("/v1/me".into()))
            .await;
        let caller = match me.into_result() {
            Ok(body) => body,
            Err(failure) => return sign_in_page(failure.status, None, Some(failure)),
        };
        let expires = caller["caller"]["expiresAt"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc));
        // Always a new session: one planted in the browser before sign-in is replaced.
        let (_, cookie) = self.sessions.start(token, expires);
        with_cookie(redirect("/console/tokens"), &cookie)
    }

    async fn sign_out(&self, req: &mut Request) -> Response {
        let form = read_form(req).await;
        let session = match self.sessions.open(req).await {
            Ok(Some(session)) => session,
            Ok(None) => return with_cookie(redirect("/console/sign-in"), &self.sessions.clear()),
            Err(_) => return self.unavailable(req),
        };
        let csrf_ok = form
            .as_ref()
            .is_some_and(|f| session.csrf_matches(f.get("csrf")));
        if !same_origin(req) || !csrf_ok {
            let failure = refusal(
                StatusCode::FORBIDDEN,
                "forbidden",
                "the sign-out did not come from this console's own page",
                req,
            );
            return sign_in_page(StatusCode::FORBIDDEN, None, Some(failure));
        }
        if self.sessions.end(&session).await.is_err() {
            return self.unavailable(req);
        }
        with_cookie(
            redirect("/console/sign-in?signed-out"),
            &self.sessions.clear(),
        )
    }

    fn unavailable(&self, req: &Request) -> Response {
        let failure = refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "a dependency is unavailable; retry later",
            req,
        );
        let mut response = sign_in_page(StatusCode::SERVICE_UNAVAILABLE, None, Some(failure));
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        response
    }

    /// The signed-in caller of a page or a change, or the response that sends them to sign in.
    async fn context<'a>(&'a self, req: &'a Request, here: PageKind) -> Result<Ctx<'a>, Response> {
        let session = match self.sessions.open(req).await {
            Ok(Some(session)) => session,
            Ok(None) => return Err(redirect("/console/sign-in")),
            Err(_) => return Err(self.unavailable(req)),
        };
        let me = self
            .client
            .call(req, session.token(), Call::get("/v1/me".into()))
            .await;
        if me.status == StatusCode::UNAUTHORIZED {
            // The token ended (revoked, expired, its user disabled): so did the session.
            return Err(with_cookie(
                redirect("/console/sign-in?ended"),
                &self.sessions.clear(),
            ));
        }
        let caller = match me.into_result() {
            Ok(body) => body["caller"].clone(),
            Err(failure) => return Err(sign_in_page(failure.status, None, Some(failure))),
        };
        let mut ctx = Ctx::new(&self.client, req, session, caller, here);
        if ctx.is_operator() {
            // An operator acts on every organisation: the chosen one, or their own.
            let reply = ctx.get("/v1/organisations?limit=100".into()).await;
            if let Ok(page) = reply {
                ctx.set_organisations(&page);
            }
        }
        Ok(ctx)
    }

    async fn page(&self, req: &Request, kind: PageKind) -> Response {
        let ctx = match self.context(req, kind).await {
            Ok(ctx) => ctx,
            Err(response) => return response,
        };
        let built = pages::build(&ctx, kind).await;
        self.render(&ctx, kind.title(), built)
    }

    fn render(
        &self,
        ctx: &Ctx<'_>,
        title: &str,
        built: Result<views::Content, Failure>,
    ) -> Response {
        let chrome = self.chrome(ctx);
        let (status, content, failure) = match built {
            Ok(content) => (StatusCode::OK, content, None),
            Err(failure) => (failure.status, views::Content::default(), Some(failure)),
        };
        html(
            status,
            &Page {
                title: title.to_owned(),
                assets: &ASSETS,
                chrome,
                failure,
                notice: content.notice,
                secret: content.secret,
                sections: content.sections,
                live: content.live,
            },
        )
    }

    fn chrome(&self, ctx: &Ctx<'_>) -> Chrome {
        let org = ctx.organisation().to_owned();
        let nav = PageKind::NAV
            .iter()
            .map(|&kind| NavLink {
                label: kind.title(),
                href: format!("{}?org={org}", kind.path()),
                current: kind == ctx.here,
            })
            .collect();
        Chrome {
            nav,
            organisations: ctx
                .organisations()
                .iter()
                .map(|(id, name)| Choice::new(id.clone(), name.clone(), *id == org))
                .collect(),
            here: ctx.here.path(),
            who: ctx.who(),
            csrf: ctx.session.csrf().to_owned(),
        }
    }

    /// A change: same origin, the session's CSRF value, then the operation.
    async fn act(&self, req: &mut Request, action: &str) -> Response {
        let Some(action) = actions::Action::at(action) else {
            return Response::builder().status(StatusCode::NOT_FOUND).finish();
        };
        let form = read_form(req).await;
        let req: &Request = req;
        let ctx = match self.context(req, action.page()).await {
            Ok(ctx) => ctx,
            Err(response) => return response,
        };
        let Some(form) = form else {
            let failure = refusal(
                StatusCode::BAD_REQUEST,
                "validation_failed",
                "the form could not be read",
                req,
            );
            return self.render(&ctx, "Not done", Err(failure));
        };
        if !same_origin(req) || !ctx.session.csrf_matches(form.get("csrf")) {
            let failure = refusal(
                StatusCode::FORBIDDEN,
                "forbidden",
                "the change did not come from this console's own page (or the page is from an earlier session): nothing was changed",
                req,
            );
            return self.render(&ctx, "Not done", Err(failure));
        }
        match actions::act(&ctx, action, &form).await {
            Ok(actions::Done::Back(to)) => redirect(&to),
            Ok(actions::Done::Show(content)) => self.render(&ctx, action.title(), Ok(content)),
            Err(failure) => self.render(&ctx, "Not done", Err(failure)),
        }
    }

    /// The live audit stream of the page's workspace: the API's, as the session's token, each
    /// event sent unnamed so the page's one `EventSource` listener sees every type.
    async fn audit_stream(&self, req: &Request) -> Response {
        let session: Session = match self.sessions.open(req).await {
            Ok(Some(session)) => session,
            Ok(None) => {
                return Response::builder()
                    .status(StatusCode::UNAUTHORIZED)
                    .finish();
            }
            Err(_) => {
                return Response::builder()
                    .status(StatusCode::SERVICE_UNAVAILABLE)
                    .finish();
            }
        };
        let query = pages::Query::of(req);
        let Some(workspace) = query.uuid("ws") else {
            return Response::builder().status(StatusCode::BAD_REQUEST).finish();
        };
        let mut path = format!("/v1/workspaces/{workspace}/audit/stream");
        if let Some(types) = query.get("types").filter(|t| !t.is_empty()) {
            path.push('?');
            path.push_str(&serde_urlencoded::to_string([("types", types)]).unwrap_or_default());
        }
        let response = self
            .client
            .respond(req, session.token(), Call::get(path))
            .await;
        if !response.status().is_success() {
            return response;
        }
        let (parts, body) = response.into_parts();
        let unnamed = body.into_bytes_stream().map(|chunk| {
            chunk.map(|bytes| {
                // In process, each chunk is one whole event or comment (audit.rs renders them so).
                let text = String::from_utf8_lossy(&bytes);
                let kept: String = text
                    .split_inclusive('\n')
                    .filter(|line| !line.starts_with("event: "))
                    .collect();
                bytes::Bytes::from(kept)
            })
        });
        Response::from_parts(parts, Body::from_bytes_stream(unnamed))
    }
}

/// A JSON value's text for a cell: strings as they are, null as a dash.
pub(crate) fn text(value: &Value) -> String {
    match value {
        Value::Null => "—".to_owned(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(text).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}
