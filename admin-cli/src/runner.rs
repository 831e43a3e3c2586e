//! `cpctl runners serve`: an example runner. It receives the control plane's signed command
//! dispatches (Standard Webhooks, `POST /`), verifies them with its own webhook secret (`v1`),
//! with pinned control-plane keys (`v1a`, `whpk_…`), or, given neither, with the keys the
//! control plane publishes at `/.well-known/jwks.json`; it refuses a dispatch that names another
//! runner, answers 202 at once, and reports `received`, `running`, then `succeeded` through the
//! signed status route. It runs nothing: it echoes the command line back as the report's
//! `detail`.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use ed25519_dalek::VerifyingKey;
use poem::http::StatusCode;
use poem::listener::{Acceptor, Listener, TcpAcceptor, TcpListener};
use poem::{Request, Response, Route, Server};
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{
    DispatchData, DispatchPayload, ReceivedWebhook, RunnerSecret, WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER, WEBHOOK_TOLERANCE_SECS, WebhookKeys,
    WebhookVerifyError, parse_jwks, sign_request, verify_webhook,
};

/// Largest dispatch body accepted (a command with 64 arguments of 4 KiB fits).
const MAX_BODY: usize = 512 * 1024;
/// Webhook ids remembered for deduplication; the oldest is forgotten first.
pub const DEFAULT_DEDUP_CAPACITY: usize = 10_000;
/// The control plane allows caching its key set this long (`cache-control: max-age=300`).
const KEYS_MAX_AGE: Duration = Duration::from_secs(300);
/// An unknown signature refetches the key set at most this often, so a flood of bad
/// signatures is not a flood of fetches.
const REFETCH_EVERY: Duration = Duration::from_secs(5);
/// How long one status report retries transient failures (5xx, 429, connection): past a
/// dependency's outage (a Redis master restarting takes seconds; four attempts in 3 s left
/// commands stuck in the scale drill), well short of a command's timeout.
const REPORT_PATIENCE: Duration = Duration::from_secs(60);
/// The longest pause between two attempts, whatever `retry-after` asks.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);
/// The status route's longest `detail`.
const MAX_DETAIL_CHARS: usize = 2000;

/// What the example runner needs.
pub struct RunnerConfig {
    /// Address to listen on (`127.0.0.1:0` for any free port).
    pub listen: String,
    /// Base URL of the control plane, for its key set and the status reports.
    pub control_plane: String,
    pub runner_id: Uuid,
    pub key_id: Uuid,
    /// The runner's Ed25519 private key, signing its reports.
    pub private_key: [u8; 32],
    /// The runner's own webhook secret (`whsec_…`): `v1` signatures verify with it.
    pub webhook_secret: Option<RunnerSecret>,
    /// Control-plane keys trusted for `v1a` signatures instead of the fetched key set.
    pub pinned_keys: Vec<VerifyingKey>,
    pub dedup_capacity: usize,
}

impl RunnerConfig {
    /// Plain http to the control plane only on loopback: the reports it sends are signed, but
    /// the key set it fetches is not, and whoever answers it decides what verifies.
    pub fn check_control_plane(&self) -> anyhow::Result<()> {
        let url = reqwest::Url::parse(&self.control_plane)
            .with_context(|| format!("--control-plane {:?} is not a URL", self.control_plane))?;
        let host = url.host_str().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        match url.scheme() {
            "https" => Ok(()),
            "http" if loopback => Ok(()),
            "http" => anyhow::bail!(
                "--control-plane must be https (plain http only to a loopback address)"
            ),
            other => anyhow::bail!("--control-plane has an unknown scheme {other:?}"),
        }
    }

    /// The key set is fetched only when nothing else to verify with was configured.
    fn fetches_keys(&self) -> bool {
        self.webhook_secret.is_none() && self.pinned_keys.is_empty()
    }
}

impl std::fmt::Debug for RunnerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerConfig")
            .field("listen", &self.listen)
            .field("control_plane", &self.control_plane)
            .field("runner_id", &self.runner_id)
            .field("key_id", &self.key_id)
            .field("private_key", &"<redacted>")
            .field("webhook_secret", &self.webhook_secret)
            .field("pinned_keys", &self.pinned_keys.len())
            .finish()
    }
}

/// The webhook ids seen last, bounded.
struct Seen {
    order: VecDeque<String>,
    ids: HashSet<String>,
    capacity: usize,
}

impl Seen {
    /// True the first time `id` is seen.
    fn insert(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() >= self.capacity.max(1)
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        self.order.push_back(id.to_owned());
        self.ids.insert(id.to_owned());
        true
    }
}

struct KeySet {
    keys: Vec<VerifyingKey>,
    fetched_at: Option<Instant>,
}

struct State {
    config: RunnerConfig,
    http: reqwest::Client,
    keys: tokio::sync::RwLock<KeySet>,
    /// Held while fetching, so concurrent requests fetch one at a time; holds the time of the
    /// last refetch an unknown signature caused.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    seen: Mutex<Seen>,
}

/// The outcome of checking a request.
enum Verdict {
    Verified(Box<DispatchPayload>),
    Refused(WebhookVerifyError),
    /// No key set could be fetched: the control plane should try again later.
    NoKeys,
}

fn answer(status: StatusCode, body: Value) -> Response {
    Response::builder()
        .status(status)
        .content_type("application/json")
        .body(body.to_string())
}

impl State {
    fn base(&self) -> &str {
        self.config.control_plane.trim_end_matches('/')
    }

    /// Fetches the key set. With `refetch` (an unknown signature), at most once per
    /// [`REFETCH_EVERY`]: otherwise the cached keys are returned.
    async fn fetch_keys(&self, refetch: bool) -> anyhow::Result<Vec<VerifyingKey>> {
        let mut last_refetch = self.fetching.lock().await;
        if refetch {
            if last_refetch.is_some_and(|at| at.elapsed() < REFETCH_EVERY) {
                return Ok(self.keys.read().await.keys.clone());
            }
            *last_refetch = Some(Instant::now());
        } else {
            // Another request may have fetched while this one waited for the lock.
            let set = self.keys.read().await;
            if !set.keys.is_empty() && set.fetched_at.is_some_and(|at| at.elapsed() < KEYS_MAX_AGE)
            {
                return Ok(set.keys.clone());
            }
        }
        let url = format!("{}/.well-known/jwks.json", self.base());
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("cannot fetch {url}"))?;
        if !response.status().is_success() {
            anyhow::bail!("{url} answered {}", response.status());
        }
        let jwks: Value = response.json().await.context("the key set is not JSON")?;
        let keys = parse_jwks(&jwks).map_err(anyhow::Error::msg)?;
        let mut set = self.keys.write().await;
        set.keys = keys.clone();
        set.fetched_at = Some(Instant::now());
        tracing::info!(
            keys = keys.len(),
            "fetched the control plane's webhook keys"
        );
        Ok(keys)
    }

    /// The cached keys, fetched when there are none or they are older than the allowed age.
    async fn current_keys(&self) -> Vec<VerifyingKey> {
        let (keys, fresh) = {
            let set = self.keys.read().await;
            let fresh = set.fetched_at.is_some_and(|at| at.elapsed() < KEYS_MAX_AGE);
            (set.keys.clone(), fresh)
        };
        if fresh && !keys.is_empty() {
            return keys;
        }
        match self.fetch_keys(false).await {
            Ok(keys) => keys,
            Err(e) => {
                // Stale keys still verify until the control plane drops them.
                tracing::warn!(error = %format!("{e:#}"), "cannot refresh the webhook keys");
                keys
            }
        }
    }

    async fn verify(&self, webhook: &ReceivedWebhook<'_>) -> Verdict {
        let config = &self.config;
        let check = |published: Vec<VerifyingKey>| {
            let keys = WebhookKeys {
                published,
                secrets: config.webhook_secret.iter().cloned().collect(),
            };
            let now = chrono::Utc::now().timestamp();
            verify_webhook(
                webhook,
                &keys,
                config.runner_id,
                now,
                WEBHOOK_TOLERANCE_SECS,
            )
        };
        let verdict = |checked: Result<DispatchPayload, WebhookVerifyError>| match checked {
            Ok(payload) => Verdict::Verified(Box::new(payload)),
            Err(e) => Verdict::Refused(e),
        };
        if !config.fetches_keys() {
            return verdict(check(config.pinned_keys.clone()));
        }
        let keys = self.current_keys().await;
        if keys.is_empty() {
            return Verdict::NoKeys;
        }
        match check(keys.clone()) {
            // Perhaps signed only by a key published since the last fetch (a rotation).
            Err(WebhookVerifyError::NoMatch) => match self.fetch_keys(true).await {
                Ok(fresh) if fresh != keys => verdict(check(fresh)),
                _ => Verdict::Refused(WebhookVerifyError::NoMatch),
            },
            checked => verdict(checked),
        }
    }

    async fn handle(self: Arc<Self>, req: Request) -> Response {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (Some(id), Some(timestamp), Some(signature)) = (
            header(WEBHOOK_ID_HEADER),
            header(WEBHOOK_TIMESTAMP_HEADER),
            header(WEBHOOK_SIGNATURE_HEADER),
        ) else {
            return answer(
                StatusCode::UNAUTHORIZED,
                json!({ "error": "webhook-id, webhook-timestamp and webhook-signature are required" }),
            );
        };
        let body = match req.into_body().into_bytes_limit(MAX_BODY).await {
            Ok(body) => body,
            Err(_) => {
                return answer(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    json!({ "error": format!("the body is limited to {MAX_BODY} bytes") }),
                );
            }
        };
        let webhook = ReceivedWebhook {
            id: &id,
            timestamp: &timestamp,
            signature: &signature,
            body: &body,
        };
        let payload = match self.verify(&webhook).await {
            Verdict::Verified(payload) => payload,
            Verdict::Refused(e) => {
                tracing::warn!(webhook_id = %id, reason = %e, "refused a webhook");
                let status = match e {
                    WebhookVerifyError::NotADispatch => StatusCode::BAD_REQUEST,
                    _ => StatusCode::UNAUTHORIZED,
                };
                return answer(status, json!({ "error": e.to_string() }));
            }
            Verdict::NoKeys => {
                return answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": "the control plane's keys cannot be fetched" }),
                );
            }
        };
        let data = payload.data;
        // Recorded only once verified and parsed: a refused request leaves no trace.
        let new = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(&id);
        tracing::info!(
            webhook_id = %id,
            delivery_id = %data.delivery_id,
            command_id = %data.command_id,
            attempt = data.attempt,
            duplicate = !new,
            "delivery"
        );
        if !new {
            return answer(StatusCode::OK, json!({ "duplicate": true }));
        }
        tokio::spawn(self.clone().run_command(data));
        answer(StatusCode::ACCEPTED, json!({ "accepted": true }))
    }

    /// "Runs" the command: reports received, running, then succeeded with the echoed line.
    async fn run_command(self: Arc<Self>, data: DispatchData) {
        let line: String = std::iter::once(data.command.as_str())
            .chain(data.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(MAX_DETAIL_CHARS)
            .collect();
        let reports = [
            json!({ "status": "received" }),
            json!({ "status": "running" }),
            json!({ "status": "succeeded", "detail": line, "exitCode": 0 }),
        ];
        for report in reports {
            if !self.report(data.delivery_id, &report).await {
                return;
            }
        }
    }

    /// Sends one signed report, retrying transient failures with a fresh nonce; false when
    /// the next report would be pointless.
    async fn report(&self, delivery: Uuid, report: &Value) -> bool {
        let path = format!("/v1/runner/webhook-deliveries/{delivery}/status");
        let body = report.to_string();
        let status = report["status"].as_str().unwrap_or_default();
        let started = Instant::now();
        for attempt in 1.. {
            let nonce = Uuid::new_v4().simple().to_string();
            let headers = sign_request(
                &self.config.private_key,
                self.config.runner_id,
                self.config.key_id,
                "POST",
                &path,
                body.as_bytes(),
                chrono::Utc::now().timestamp(),
                &nonce,
            );
            // The last attempt ends with the patience, not 10 s past it.
            let left = REPORT_PATIENCE.saturating_sub(started.elapsed());
            let mut request = self
                .http
                .post(format!("{}{path}", self.base()))
                .timeout(left.clamp(Duration::from_secs(1), Duration::from_secs(10)))
                .header("content-type", "application/json")
                .body(body.clone());
            for (name, value) in headers.pairs() {
                request = request.header(name, value);
            }
            let (error, asked) = match request.send().await {
                Ok(r) if r.status().is_success() => {
                    tracing::info!(delivery_id = %delivery, status, "reported");
                    return true;
                }
                // Already moved (a redelivery after a restart, or the command ended): the
                // next step says whether anything is left to report.
                Ok(r) if r.status() == reqwest::StatusCode::CONFLICT => {
                    tracing::info!(delivery_id = %delivery, status, "report refused: the delivery already moved");
                    return true;
                }
                Ok(r) if r.status().is_server_error() || r.status().as_u16() == 429 => {
                    let asked = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse().ok())
                        .map(Duration::from_secs);
                    (format!("answered {}", r.status()), asked)
                }
                Ok(r) => {
                    tracing::warn!(delivery_id = %delivery, status, answer = %r.status(), "report refused");
                    return false;
                }
                Err(e) => (format!("{e}"), None),
            };
            // Up to a quarter more, so runners refused together do not retry together.
            let pause = retry_pause(attempt, asked).mul_f64(1.0 + rand::random::<f64>() / 4.0);
            if started.elapsed() + pause > REPORT_PATIENCE {
                tracing::warn!(delivery_id = %delivery, status, attempt, %error, "report failed; giving up");
                break;
            }
            tracing::warn!(delivery_id = %delivery, status, attempt, %error, "report failed; retrying");
            tokio::time::sleep(pause).await;
        }
        false
    }
}

/// The pause before attempt `attempt + 1`: doubling from 250 ms up to 5 s, or longer when the
/// control plane's `retry-after` asks for it (up to [`MAX_RETRY_PAUSE`]).
fn retry_pause(attempt: u32, asked: Option<Duration>) -> Duration {
    let backoff = Duration::from_millis(250) * 2u32.pow(attempt.saturating_sub(1).min(5));
    backoff
        .min(Duration::from_secs(5))
        .max(asked.unwrap_or_default())
        .min(MAX_RETRY_PAUSE)
}

/// The example runner, bound and ready to serve.
pub struct RunnerServer {
    acceptor: TcpAcceptor,
    state: Arc<State>,
}

impl RunnerServer {
    /// Binds the address and tries a first fetch of the key set (a failure is retried on the
    /// first webhook).
    pub async fn bind(config: RunnerConfig) -> anyhow::Result<Self> {
        config.check_control_plane()?;
        let acceptor = TcpListener::bind(config.listen.clone())
            .into_acceptor()
            .await
            .with_context(|| format!("could not listen on {}", config.listen))?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .context("could not build the HTTP client")?;
        let state = Arc::new(State {
            seen: Mutex::new(Seen {
                order: VecDeque::new(),
                ids: HashSet::new(),
                capacity: config.dedup_capacity,
            }),
            config,
            http,
            keys: tokio::sync::RwLock::new(KeySet {
                keys: Vec::new(),
                fetched_at: None,
            }),
            fetching: tokio::sync::Mutex::new(None),
        });
        if state.config.fetches_keys()
            && let Err(e) = state.fetch_keys(false).await
        {
            tracing::warn!(error = %format!("{e:#}"), "cannot fetch the webhook keys yet");
        }
        Ok(Self { acceptor, state })
    }

    pub fn port(&self) -> u16 {
        self.acceptor
            .local_addr()
            .first()
            .and_then(|a| a.as_socket_addr().map(|s| s.port()))
            .unwrap_or_default()
    }

    fn endpoint(&self) -> Route {
        let state = self.state.clone();
        Route::new().at(
            "/",
            poem::post(poem::endpoint::make(move |req: Request| {
                let state = state.clone();
                async move { state.handle(req).await }
            })),
        )
    }

    /// Serves until the future is dropped.
    pub async fn run(self) -> std::io::Result<()> {
        let endpoint = self.endpoint();
        Server::new_with_acceptor(self.acceptor).run(endpoint).await
    }

    /// Serves until Ctrl-C.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let endpoint = self.endpoint();
        tracing::info!(port = self.port(), runner_id = %self.state.config.runner_id, "runner listening");
        Server::new_with_acceptor(self.acceptor)
            .run_with_graceful_shutdown(
                endpoint,
                async {
                    let _ = tokio::signal::ctrl_c().await;
                },
                Some(Duration::from_secs(5)),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_ids_are_bounded_and_forget_the_oldest() {
        let mut seen = Seen {
            order: VecDeque::new(),
            ids: HashSet::new(),
            capacity: 2,
        };
        assert!(seen.insert("a"));
        assert!(!seen.insert("a"));
        assert!(seen.insert("b"));
        assert!(seen.insert("c"));
        assert!(seen.insert("a"), "the oldest was forgotten");
        assert!(!seen.insert("c"));
    }

    #[test]
    fn report_retries_back_off_and_honour_retry_after_within_bounds() {
        let ms = |n| Duration::from_millis(n);
        let pauses: Vec<_> = (1..=8).map(|a| retry_pause(a, None)).collect();
        assert_eq!(
            pauses,
            [250, 500, 1000, 2000, 4000, 5000, 5000, 5000].map(ms)
        );
        assert_eq!(retry_pause(1, Some(Duration::from_secs(3))), ms(3000));
        assert_eq!(retry_pause(6, Some(Duration::from_secs(1))), ms(5000));
        assert_eq!(
            retry_pause(1, Some(Duration::from_secs(3600))),
            MAX_RETRY_PAUSE
        );
        // A run of 503s is retried for about REPORT_PATIENCE, not four attempts.
        let spent: Duration = (1..=12).map(|a| retry_pause(a, None)).sum();
        assert!(spent > Duration::from_secs(30) && spent < REPORT_PATIENCE);
    }
}
