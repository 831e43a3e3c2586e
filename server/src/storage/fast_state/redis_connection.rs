//! The connection beneath the Redis adapter: a single Redis through a `ConnectionManager`
//! (it reconnects by itself), or a Redis Cluster through the cluster client, which follows
//! `MOVED`/`ASK`, retries `TRYAGAIN`/`CLUSTERDOWN` and refreshes its slot map. Both are the
//! crate's `aio::ConnectionLike`, so every script runs unchanged on either. Each attempt, and a
//! cluster call's retries together, are bounded by the adapter's timeout: a node that is down
//! ends as an error (503), never a hang. Retries are few and short because a retried script
//! whose first answer was lost could run twice; `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN`
//! all mean it did not run.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use super::redis_location::RedisLocation;

/// How many times the cluster client tries a call again (after a redirection, a `TRYAGAIN`,
/// a `CLUSTERDOWN` or a lost connection), and its wait between tries.
const CLUSTER_RETRIES: u32 = 3;
const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 100);

/// What dials: made from the location without touching the network.
#[derive(Clone)]
pub enum RedisDialler {
    Single(redis::Client),
    /// Boxed: a cluster client is twice a single one's size, and a dialler is made once.
    Cluster(Box<ClusterClient>),
}

/// One open connection (cheap to clone: both kinds multiplex over shared sockets).
#[derive(Clone)]
pub enum RedisConnection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisDialler {
    pub fn new(location: &RedisLocation, timeout: Duration) -> Result<Self, RedisError> {
        if let Some(info) = location.single() {
            return Ok(Self::Single(redis::Client::open(info.clone())?));
        }
        let seeds = location.seeds().unwrap_or_default().to_vec();
        let (min_wait, max_wait) = CLUSTER_RETRY_WAIT_MS;
        let client = ClusterClient::builder(seeds)
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .overall_response_timeout(Some(timeout * 2))
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(min_wait)
            .max_retry_wait(max_wait)
            .build()?;
        Ok(Self::Cluster(Box::new(client)))
    }

    /// Connects; bounded by `timeout` in all (a cluster asks each seed in turn for its slots).
    pub async fn connect(&self, timeout: Duration) -> Result<RedisConnection, RedisError> {
        let timed_out = || RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        match self {
            Self::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1);
                let manager = ConnectionManager::new_with_config(client.clone(), config);
                tokio::time::timeout(timeout, manager)
                    .await
                    .map_err(|_| timed_out())?
                    .map(RedisConnection::Single)
            }
            Self::Cluster(client) => tokio::time::timeout(timeout, client.get_async_connection())
                .await
                .map_err(|_| timed_out())?
                .map(RedisConnection::Cluster),
        }
    }
}

impl RedisConnection {
    /// Opens a connection to `location` (the test suite's own look at what the server stored).
    pub async fn open(location: &RedisLocation, timeout: Duration) -> Result<Self, RedisError> {
        RedisDialler::new(location, timeout)?.connect(timeout).await
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}
