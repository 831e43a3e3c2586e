//! cpctl as a client of the HTTP API: `login`, `context list|use|remove` and `whoami`, which
//! read no records store and no server setting.
//!
//! A context is a server and a token, kept by `cpctl login` in
//! `$XDG_CONFIG_HOME/cpctl/contexts.json` (`control_plane::startup::cpctl_contexts`, which
//! `--dev` writes too). `--context` picks a context for one command;
//! `CPCTL_SERVER` and `CPCTL_TOKEN` override the chosen one (both set: no file is read). A
//! token comes from standard input or the environment, never from an argument, which every
//! user of the machine can read in `ps`.

use std::io::{BufRead, IsTerminal};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use clap::Subcommand;
use control_plane::startup::cpctl_contexts::{Context, Contexts};
use serde_json::{Value, json};

use crate::cli::OutputFormat;

pub const SERVER_VAR: &str = "CPCTL_SERVER";
pub const TOKEN_VAR: &str = "CPCTL_TOKEN";

#[derive(Debug, Clone, Subcommand)]
pub enum ContextCommand {
    /// The contexts `cpctl login` kept; `*` marks the current one.
    List,
    /// Make a context the current one.
    Use { name: String },
    /// Forget a context and its token.
    Remove { name: String },
}

/// Where a client verb goes and with which token.
pub struct Target {
    server: String,
    token: String,
    /// The token's organisation as the context recorded it; `None` when the token came from
    /// `CPCTL_TOKEN`, whose organisation only the server knows.
    organisation: Option<String>,
}

fn variable(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub fn target(context: Option<&str>) -> anyhow::Result<Target> {
    let (server, token) = (variable(SERVER_VAR), variable(TOKEN_VAR));
    if let (Some(server), Some(token)) = (&server, &token) {
        return Ok(Target {
            server: server_url(server)?,
            token: token.clone(),
            organisation: None,
        });
    }
    let contexts = Contexts::load(&Contexts::path()?)?;
    let name = context
        .map(str::to_owned)
        .or(contexts.current.clone())
        .ok_or_else(|| {
            anyhow!(
                "no context: run `cpctl login --server URL`, or set {SERVER_VAR} and {TOKEN_VAR}"
            )
        })?;
    let chosen = contexts
        .contexts
        .get(&name)
        .ok_or_else(|| anyhow!("no context named {name} (`cpctl context list` shows them)"))?;
    let organisation = token
        .is_none()
        .then(|| chosen.organisation_id.clone())
        .flatten();
    Ok(Target {
        server: server_url(&server.unwrap_or_else(|| chosen.server.clone()))?,
        token: token.unwrap_or_else(|| chosen.token.clone()),
        organisation,
    })
}

/// The server's base URL, without a trailing slash. Plain http only to a loopback address: a
/// bearer token sent in clear to another host is a token given away.
fn server_url(raw: &str) -> anyhow::Result<String> {
    let url = reqwest::Url::parse(raw).with_context(|| format!("{raw} is not a URL"))?;
    let host = url.host_str().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => bail!("{raw}: plain http only to a loopback address; use https"),
        other => bail!("{raw}: the scheme must be https (or http to loopback), not {other}"),
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        bail!("{raw}: a server URL has no credentials, query or fragment");
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// An answer other than a 2xx: the ApiError's code and message, and the request's correlation
/// id, for the operator to quote.
#[derive(Debug)]
pub struct ApiFailure {
    status: u16,
    code: String,
    message: String,
    correlation_id: String,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} (HTTP {}, correlation id {})",
            self.code, self.message, self.status, self.correlation_id
        )
    }
}

impl std::error::Error for ApiFailure {}

pub struct Client {
    http: reqwest::Client,
    target: Target,
}

impl Client {
    pub fn new(target: Target) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("cpctl/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { http, target })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.http.get(self.url(path))).await
    }

    /// `get` with a query.
    pub async fn get_with(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Value> {
        self.send(self.http.get(self.url(path)).query(query)).await
    }

    /// A `GET` whose body is read as it arrives (an export): the response once its status is
    /// a 2xx, with no overall timeout (the body may take minutes), else the ApiError.
    pub async fn download(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> anyhow::Result<reqwest::Response> {
        let response = self
            .http
            .get(self.url(path))
            .query(query)
            .timeout(Duration::from_secs(24 * 3600))
            .bearer_auth(&self.target.token)
            .send()
            .await
            .map_err(|e| anyhow!("cannot reach {}: {}", self.target.server, e.without_url()))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(answer(response)
            .await
            .err()
            .unwrap_or_else(|| anyhow!("unexpected answer")))
    }

    /// Every item of a cursor-paged list, page after page (200 a page, the most the API gives).
    pub async fn get_all(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> anyhow::Result<Vec<Value>> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut request = self
                .http
                .get(self.url(path))
                .query(query)
                .query(&[("limit", "200")]);
            if let Some(cursor) = &cursor {
                request = request.query(&[("cursor", cursor)]);
            }
            let mut page = self.send(request).await?;
            if let Value::Array(found) = page["items"].take() {
                items.extend(found);
            }
            match page["nextCursor"].as_str() {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(items),
            }
        }
    }

    /// A change: `POST`, or `PUT` with `put`. Each carries a fresh `Idempotency-Key`, so a
    /// request that reached the server twice (a proxy's retry) is carried out once.
    pub async fn change(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let key = uuid::Uuid::new_v4().to_string();
        let request = self
            .http
            .request(method, self.url(path))
            .header("Idempotency-Key", key)
            .json(&body);
        self.send(request).await
    }

    /// A policy component up, as the request's body (`application/wasm`), with `query` and
    /// `headers`, under a fresh `Idempotency-Key`. The server compiles and measures it before
    /// it answers: a large component takes longer than the client's usual 30 seconds.
    pub async fn upload(
        &self,
        path: &str,
        query: &[(&str, String)],
        headers: &[(&str, String)],
        bytes: Vec<u8>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .http
            .post(self.url(path))
            .query(query)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .header(reqwest::header::CONTENT_TYPE, "application/wasm")
            .timeout(Duration::from_secs(600))
            .body(bytes);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        self.send(request).await
    }

    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.change(reqwest::Method::POST, path, body).await
    }

    /// The organisation a verb acts in: `--org` when given, else the calling token's own (the
    /// context's record of it, or the server's answer to `GET /v1/me`).
    pub async fn organisation(&self, given: Option<uuid::Uuid>) -> anyhow::Result<String> {
        if let Some(id) = given {
            return Ok(id.to_string());
        }
        if let Some(id) = &self.target.organisation {
            return Ok(id.clone());
        }
        let me = self.get("/v1/me").await?;
        me["caller"]["organisationId"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("the server named no organisation for this token: pass --org"))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.target.server)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let response = request
            .bearer_auth(&self.target.token)
            .send()
            .await
            .map_err(|e| anyhow!("cannot reach {}: {}", self.target.server, e.without_url()))?;
        answer(response).await
    }
}

async fn answer(response: reqwest::Response) -> anyhow::Result<Value> {
    let status = response.status();
    let correlation_id = response
        .headers()
        .get("x-correlation-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(body);
    }
    let text = |field: &str| body["error"][field].as_str().map(str::to_owned);
    Err(ApiFailure {
        status: status.as_u16(),
        code: text("code").unwrap_or_else(|| "error".into()),
        message: text("message").unwrap_or_else(|| "the server gave no ApiError".into()),
        correlation_id,
    }
    .into())
}

/// The token, one line of standard input; a prompt on standard error when it is a terminal.
fn read_token() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("token (read from standard input, never an argument): ");
    }
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    let token = line.trim().to_owned();
    if token.is_empty() {
        bail!("no token on standard input: `cpctl login --server URL < token-file`");
    }
    Ok(token)
}

fn context_name(server: &str) -> String {
    reqwest::Url::parse(server)
        .ok()
        .and_then(|url| {
            let host = url.host_str()?.to_owned();
            Some(match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        })
        .unwrap_or_else(|| server.to_owned())
}

/// `cpctl login`: checks the token with `GET /v1/me`, then keeps it as a context, the current
/// one. Nothing is written when the server refuses it.
pub async fn login(out: OutputFormat, server: &str, name: Option<String>) -> anyhow::Result<()> {
    let server = server_url(server)?;
    let token = read_token()?;
    let client = Client::new(Target {
        server: server.clone(),
        token: token.clone(),
        organisation: None,
    })?;
    let me = client.get("/v1/me").await?;
    let caller = &me["caller"];
    let name = name.unwrap_or_else(|| context_name(&server));
    let path = Contexts::path()?;
    let field = |key: &str| caller[key].as_str().map(str::to_owned);
    Contexts::keep(
        &path,
        &name,
        Context {
            server: server.clone(),
            token,
            user_id: field("userId"),
            organisation_id: field("organisationId"),
            role: field("role"),
        },
    )?;
    match out {
        OutputFormat::Json => println!(
            "{}",
            json!({ "context": name, "server": server, "caller": caller })
        ),
        OutputFormat::Table => println!(
            "logged in to {server} as user {} ({}); context {name} is current",
            field("userId").unwrap_or_default(),
            field("role").unwrap_or_default()
        ),
    }
    Ok(())
}

pub async fn whoami(out: OutputFormat, context: Option<&str>) -> anyhow::Result<()> {
    let me = Client::new(target(context)?)?.get("/v1/me").await?;
    let caller = &me["caller"];
    match out {
        OutputFormat::Json => println!("{caller}"),
        OutputFormat::Table => {
            let text = |key: &str| caller[key].as_str().unwrap_or("-").to_owned();
            let list = |key: &str| {
                let items: Vec<&str> = caller[key]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if items.is_empty() {
                    "-".to_owned()
                } else {
                    items.join(", ")
                }
            };
            println!("token:        {}", text("tokenId"));
            println!("user:         {}", text("userId"));
            println!("organisation: {}", text("organisationId"));
            println!("role:         {}", text("role"));
            println!("scopes:       {}", list("scopes"));
            println!("workspaces:   {}", list("workspaceIds"));
            println!("environments: {}", list("environmentIds"));
            println!("expires:      {}", text("expiresAt"));
        }
    }
    Ok(())
}

pub fn context(out: OutputFormat, command: ContextCommand) -> anyhow::Result<()> {
    let path = Contexts::path()?;
    let mut contexts = Contexts::load(&path)?;
    match command {
        ContextCommand::List => {
            let current = contexts.current.as_deref();
            match out {
                OutputFormat::Json => {
                    let rows: Vec<Value> = contexts
                        .contexts
                        .iter()
                        .map(|(name, c)| {
                            json!({ "name": name, "server": c.server, "userId": c.user_id,
                                    "organisationId": c.organisation_id, "role": c.role,
                                    "current": Some(name.as_str()) == current })
                        })
                        .collect();
                    println!("{}", Value::Array(rows));
                }
                OutputFormat::Table => {
                    println!("CURRENT\tNAME\tSERVER\tUSER\tROLE");
                    for (name, c) in &contexts.contexts {
                        let mark = if Some(name.as_str()) == current {
                            "*"
                        } else {
                            ""
                        };
                        println!(
                            "{mark}\t{name}\t{}\t{}\t{}",
                            c.server,
                            c.user_id.as_deref().unwrap_or("-"),
                            c.role.as_deref().unwrap_or("-")
                        );
                    }
                }
            }
        }
        ContextCommand::Use { name } => {
            if !contexts.contexts.contains_key(&name) {
                bail!("no context named {name} (`cpctl context list` shows them)");
            }
            contexts.current = Some(name.clone());
            contexts.save(&path)?;
            println!("context {name} is current");
        }
        ContextCommand::Remove { name } => {
            if contexts.contexts.remove(&name).is_none() {
                bail!("no context named {name} (`cpctl context list` shows them)");
            }
            if contexts.current.as_deref() == Some(name.as_str()) {
                contexts.current = None;
            }
            contexts.save(&path)?;
            println!("context {name} removed");
        }
    }
    Ok(())
}
