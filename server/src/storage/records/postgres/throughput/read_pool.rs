//! The read pool: Postgres connections kept out of the pool for the request path's
//! single-statement reads (credential lookup, a page of activity).
//!
//! sqlx pings every connection the pool takes back, so each query through the pool costs a
//! second round trip. Under load that ping was a tenth of the server's CPU and as much again in
//! Postgres (BENCHMARKS.md). A lane connection is leased from the pool once and handed from
//! reader to reader without it. What the ping guarded against is handled here instead:
//! - a connection idle for [`IDLE_PING_AFTER`] is pinged before it is used again;
//! - a connection whose statement failed at the connection level, ran past the deadline, or
//!   was abandoned mid-statement (the request was cancelled) is closed, never reused, and the
//!   pool opens a replacement;
//! - a connection is handed back to the pool after [`MAX_LEASE`], so connections still retire.
//!
//! The lane holds at most `size` connections, all counted in the pool's `max_connections`;
//! in the smallest pool it keeps none, so writes are never locked out.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::super::map_err;
use crate::storage::StoreError;

/// A lane connection idle this long is pinged before it is used.
const IDLE_PING_AFTER: Duration = Duration::from_secs(10);
/// A lane connection goes back to the pool after this long (sqlx's own default lifetime).
const MAX_LEASE: Duration = Duration::from_secs(30 * 60);

struct Idle {
    conn: PoolConnection<Postgres>,
    leased_at: Instant,
    since: Instant,
}

pub struct ReadPool {
    pool: PgPool,
    idle: Mutex<Vec<Idle>>,
    /// How many connections the read pool keeps between statements. Zero (the smallest pool) keeps
    /// none: each statement takes a connection from the pool and gives it back.
    keep: usize,
    slots: Semaphore,
    acquire_timeout: Duration,
    /// Client-side bound on one statement: a connection that stops answering (a network
    /// partition drops packets silently) yields 503 instead of hanging the request.
    deadline: Duration,
}

impl ReadPool {
    pub fn new(pool: PgPool, size: usize, acquire_timeout: Duration, deadline: Duration) -> Self {
        Self {
            pool,
            idle: Mutex::new(Vec::with_capacity(size)),
            keep: size,
            slots: Semaphore::new(size.max(1)),
            acquire_timeout,
            deadline,
        }
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// A connection for one statement; give it back with [`Lease::settle`].
    pub async fn lease(&self) -> Result<Lease<'_>, StoreError> {
        let unavailable = || StoreError::Unavailable("no Postgres connection was free".into());
        let permit = tokio::time::timeout(self.acquire_timeout, self.slots.acquire())
            .await
            .map_err(|_| unavailable())?
            .map_err(|_| unavailable())?;
        loop {
            let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            let Some(mut idle) = idle else { break };
            if idle.since.elapsed() < IDLE_PING_AFTER {
                return Ok(Lease::new(self, idle.conn, idle.leased_at, permit));
            }
            let alive = tokio::time::timeout(self.deadline, idle.conn.ping()).await;
            if matches!(alive, Ok(Ok(()))) {
                return Ok(Lease::new(self, idle.conn, idle.leased_at, permit));
            }
            drop(idle.conn.detach());
        }
        let conn = self.pool.acquire().await.map_err(map_err)?;
        Ok(Lease::new(self, conn, Instant::now(), permit))
    }

    fn put_back(&self, conn: PoolConnection<Postgres>, leased_at: Instant) {
        if leased_at.elapsed() >= MAX_LEASE {
            return; // dropped: back to the pool, which retires it
        }
        // Not kept (the read pool keeps none): dropped, back to the pool.
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.keep
        {
            idle.push(Idle {
                conn,
                leased_at,
                since: Instant::now(),
            });
        }
    }
}

/// One leased connection. Dropped without [`Lease::settle`] (the request was cancelled while
/// the statement ran), it is closed: its protocol state is unknown.
pub struct Lease<'a> {
    lane: &'a ReadPool,
    conn: Option<PoolConnection<Postgres>>,
    leased_at: Instant,
    _permit: SemaphorePermit<'a>,
}

impl<'a> Lease<'a> {
    fn new(
        lane: &'a ReadPool,
        conn: PoolConnection<Postgres>,
        leased_at: Instant,
        permit: SemaphorePermit<'a>,
    ) -> Self {
        Self {
            lane,
            conn: Some(conn),
            leased_at,
            _permit: permit,
        }
    }

    /// The connection, to run one statement on (within [`ReadPool::deadline`]).
    pub fn conn(&mut self) -> Result<&mut PgConnection, StoreError> {
        // Only `settle` and `drop` take the connection out, and both consume the lease.
        self.conn
            .as_deref_mut()
            .ok_or_else(|| StoreError::Internal("a settled lease was used".into()))
    }

    /// Returns the connection to the read pool, or closes it when the outcome says it is unusable,
    /// and maps the outcome into the store's terms.
    pub fn settle<T>(
        mut self,
        outcome: Result<Result<T, sqlx::Error>, tokio::time::error::Elapsed>,
    ) -> Result<T, StoreError> {
        let conn = self.conn.take();
        match outcome {
            Ok(Ok(value)) => {
                if let Some(conn) = conn {
                    self.lane.put_back(conn, self.leased_at);
                }
                Ok(value)
            }
            Ok(Err(e)) => {
                if let Some(conn) = conn {
                    if leaves_session_usable(&e) {
                        self.lane.put_back(conn, self.leased_at);
                    } else {
                        drop(conn.detach());
                    }
                }
                Err(map_err(e))
            }
            Err(_) => {
                drop(conn.map(PoolConnection::detach));
                Err(StoreError::Unavailable(
                    "Postgres did not answer within the statement deadline".into(),
                ))
            }
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        // Closing the socket needs no I/O; the pool opens a replacement when one is needed.
        drop(self.conn.take().map(PoolConnection::detach));
    }
}

/// Errors after which the connection is known to be in a clean state: the statement itself
/// failed (and Postgres answered), or its rows did not decode. Anything else closes it.
fn leaves_session_usable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            !(code.starts_with("08") || code.starts_with("57P"))
        }
        sqlx::Error::RowNotFound
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::TypeNotFound { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::leaves_session_usable;

    #[test]
    fn only_statement_and_decode_errors_keep_a_connection() {
        assert!(leaves_session_usable(&sqlx::Error::RowNotFound));
        assert!(leaves_session_usable(&sqlx::Error::ColumnNotFound(
            "x".into()
        )));
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(!leaves_session_usable(&sqlx::Error::Io(io)));
        assert!(!leaves_session_usable(&sqlx::Error::Protocol(
            "unexpected message".into()
        )));
        assert!(!leaves_session_usable(&sqlx::Error::PoolTimedOut));
    }
}
