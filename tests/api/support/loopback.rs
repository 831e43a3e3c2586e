//! A runner's delivery URL on a loopback port: one small HTTP server that records every webhook
//! it gets (`webhook-id`, timestamp, signature, body) and how many are open at once, and
//! answers from a script (a status, or holding the request open), then with a default answer.
//! Deliveries, fair delivery and the dispatch audience tests all play their runners with it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use control_plane::domain::{CorrelationId, ReceivedWebhook};
use poem::listener::{Acceptor, Listener, TcpListener};
use poem::web::Data;
use poem::{EndpointExt, Response, Route, handler, http::StatusCode};
use uuid::Uuid;

use super::server::TestApp;

/// How long a test waits for the dispatcher: a bound, not a speed expected.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// One request the receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) id: String,
    pub(crate) timestamp: String,
    pub(crate) signature: String,
    pub(crate) body: Vec<u8>,
}

impl Received {
    pub(crate) fn as_webhook(&self) -> ReceivedWebhook<'_> {
        ReceivedWebhook {
            id: &self.id,
            timestamp: &self.timestamp,
            signature: &self.signature,
            body: &self.body,
        }
    }
}

/// What the receiver answers to one request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    /// This status at once (with a `location`, so a redirect is one the server must not follow).
    Status(u16),
    /// Holds the request open this long, then 200.
    Hang(Duration),
    /// 204 at once.
    NoContent,
}

struct State {
    script: Mutex<VecDeque<Answer>>,
    /// The answer once the script is spent.
    then: Mutex<Answer>,
    received: Mutex<Vec<Received>>,
    open: AtomicUsize,
    peak: AtomicUsize,
}

/// Counts a request as open until its handler ends or is dropped.
struct Open(Arc<State>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

#[handler]
async fn receive(
    state: Data<&Arc<State>>,
    headers: &poem::http::HeaderMap,
    body: poem::Body,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let body = body.into_vec().await.unwrap_or_default();
    state.received.lock().unwrap().push(Received {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body,
    });
    let now_open = state.open.fetch_add(1, Ordering::SeqCst) + 1;
    state.peak.fetch_max(now_open, Ordering::SeqCst);
    let _open = Open(state.clone());
    let scripted = state.script.lock().unwrap().pop_front();
    let answer = scripted.unwrap_or_else(|| *state.then.lock().unwrap());
    match answer {
        Answer::Status(code) => Response::builder()
            .status(StatusCode::from_u16(code).unwrap())
            .header("location", "http://127.0.0.1:9/elsewhere")
            .body("no"),
        Answer::Hang(d) => {
            tokio::time::sleep(d).await;
            Response::builder().status(StatusCode::OK).finish()
        }
        Answer::NoContent => Response::builder().status(StatusCode::NO_CONTENT).finish(),
    }
}

/// A webhook receiver on a loopback port; its server stops when it drops.
pub(crate) struct Loopback {
    pub(crate) url: String,
    state: Arc<State>,
    _server: tokio::task::JoinHandle<()>,
}

impl Loopback {
    /// Answers `answers` in order, then 204.
    pub(crate) async fn start(answers: &[Answer]) -> Self {
        Self::scripted(answers, Answer::NoContent).await
    }

    /// Holds every request open for `hang` before its 200; `None`: a 204 at once.
    pub(crate) async fn holding(hang: Option<Duration>) -> Self {
        Self::scripted(&[], hang.map_or(Answer::NoContent, Answer::Hang)).await
    }

    /// Answers `answers` in order, then `then` to every further request.
    pub(crate) async fn scripted(answers: &[Answer], then: Answer) -> Self {
        let state = Arc::new(State {
            script: Mutex::new(answers.iter().copied().collect()),
            then: Mutex::new(then),
            received: Mutex::default(),
            open: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        });
        let acceptor = TcpListener::bind("127.0.0.1:0")
            .into_acceptor()
            .await
            .unwrap();
        let port = acceptor.local_addr()[0]
            .as_socket_addr()
            .expect("a socket address")
            .port();
        let app = Route::new()
            .at("/hooks", poem::post(receive))
            .data(state.clone());
        let server = tokio::spawn(async move {
            let _ = poem::Server::new_with_acceptor(acceptor).run(app).await;
        });
        Self {
            url: format!("http://127.0.0.1:{port}/hooks"),
            state,
            _server: server,
        }
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// The `webhook-id` of every request, in arrival order.
    pub(crate) fn received_ids(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.id).collect()
    }

    /// Waits until `count` requests arrived, failing after [`PATIENCE`]; returns them all.
    pub(crate) async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the receiver got {} of {count} requests",
                received.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Requests being answered right now.
    pub(crate) fn open(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    /// The most requests open at once.
    pub(crate) fn peak(&self) -> usize {
        self.state.peak.load(Ordering::SeqCst)
    }

    /// From now on, the peak counts only what is open from here.
    pub(crate) fn reset_peak(&self) {
        self.state.peak.store(self.open(), Ordering::SeqCst);
    }

    /// From now on, every request gets its 204 at once.
    pub(crate) fn answer_at_once(&self) {
        *self.state.then.lock().unwrap() = Answer::NoContent;
    }
}

/// Waits until `done` holds, failing with `what` after [`PATIENCE`].
pub(crate) async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A URL where nothing listens: a port bound, then released.
pub(crate) async fn dead_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/hooks")
}

/// A runner registered in `pool` with `url` as its delivery URL.
pub(crate) async fn runner_at(app: &TestApp, pool: Uuid, url: &str) -> Uuid {
    app.services
        .register_runner(
            pool,
            "runner",
            None,
            Some(url),
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .expect("register a runner")
        .runner
        .id
}

/// Points `runner`'s deliveries at `url`.
pub(crate) async fn set_url(app: &TestApp, runner: Uuid, url: &str) {
    app.services
        .set_runner_url(
            runner,
            Some(url),
            &control_plane::storage::WriteContext::admin(&CorrelationId::generate()),
        )
        .await
        .expect("set the runner's delivery URL");
}
