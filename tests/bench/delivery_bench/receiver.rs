//! The minimal receiver: a poem handler on loopback that notes the instant each request's handler
//! starts, by its `webhook-id`, reads the body and answers 204. The floor hits it directly; in the
//! dispatch and backlog measurements it is the runners' delivery URL, and `all_arrived` waits
//! until it has seen every delivery.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use control_plane::domain::WEBHOOK_ID_HEADER;
use poem::listener::{Acceptor, Listener};

/// Arrival instants at the minimal receiver, by `webhook-id`.
pub(super) type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

/// The minimal receiver: notes when each request's handler starts, reads the body, answers 204.
pub(super) async fn start_receiver(arrivals: Arrivals) -> anyhow::Result<String> {
    let endpoint = poem::Route::new().at(
        "/",
        poem::post(poem::endpoint::make(move |req: poem::Request| {
            let arrivals = arrivals.clone();
            async move {
                let at = Instant::now();
                if let Some(id) = req
                    .headers()
                    .get(WEBHOOK_ID_HEADER)
                    .and_then(|v| v.to_str().ok())
                {
                    arrivals
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(id.to_owned())
                        .or_insert(at);
                }
                let _ = req.into_body().into_bytes().await;
                poem::http::StatusCode::NO_CONTENT
            }
        })),
    );
    let acceptor = poem::listener::TcpListener::bind("127.0.0.1:0")
        .into_acceptor()
        .await?;
    let port = acceptor.local_addr()[0]
        .as_socket_addr()
        .context("no socket address")?
        .port();
    tokio::spawn(poem::Server::new_with_acceptor(acceptor).run(endpoint));
    Ok(format!("http://127.0.0.1:{port}/"))
}

/// Waits until `arrivals` holds every id of `ids`, or fails after `limit`.
pub(super) async fn all_arrived(
    arrivals: &Arrivals,
    ids: &[String],
    limit: Duration,
) -> anyhow::Result<()> {
    let until = Instant::now() + limit;
    loop {
        let missing = {
            let seen = arrivals.lock().unwrap_or_else(|e| e.into_inner());
            ids.iter().filter(|id| !seen.contains_key(*id)).count()
        };
        if missing == 0 {
            return Ok(());
        }
        if Instant::now() > until {
            bail!(
                "{missing} of {} deliveries did not arrive within {limit:?}",
                ids.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
