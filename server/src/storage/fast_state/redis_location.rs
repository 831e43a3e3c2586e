//! Where the Redis fast state lives, parsed once from `REDIS_URL`: one URL names a single Redis,
//! several comma-separated URLs name the seed nodes of a Redis Cluster. A cluster's nodes are
//! reached one way (one scheme, one user and password), since the cluster client uses the
//! first node's settings for every node it discovers. Errors name an item by its position and
//! never repeat a URL, which may hold a password.

use std::fmt;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

/// A parsed `REDIS_URL`. Built only by [`RedisLocation::parse`].
#[derive(Clone)]
pub struct RedisLocation(Nodes);

#[derive(Clone)]
enum Nodes {
    Single(ConnectionInfo),
    Cluster(Vec<ConnectionInfo>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisLocationError {
    #[error("REDIS_URL is empty")]
    Empty,
    #[error("REDIS_URL item {0} is empty (a stray comma?)")]
    EmptyItem(usize),
    #[error("REDIS_URL item {0} is not a redis:// or rediss:// URL")]
    NotRedis(usize),
    #[error(
        "REDIS_URL mixes schemes ({0}:// and {1}://): every node of a cluster is reached the same way"
    )]
    MixedSchemes(String, String),
    #[error(
        "REDIS_URL item {0} gives a user or password that differs from item 1: every node of a cluster takes the same credentials"
    )]
    DifferentCredentials(usize),
    #[error("REDIS_URL item {0} is a Unix socket: a cluster's nodes are reached over TCP")]
    SocketInCluster(usize),
}

impl RedisLocation {
    pub fn parse(raw: &str) -> Result<Self, RedisLocationError> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(RedisLocationError::Empty);
        }
        let mut scheme: Option<&str> = None;
        let mut nodes = Vec::new();
        for (index, item) in raw.split(',').enumerate() {
            let position = index + 1;
            let item = item.trim();
            if item.is_empty() {
                return Err(RedisLocationError::EmptyItem(position));
            }
            let (this, _) = item
                .split_once("://")
                .ok_or(RedisLocationError::NotRedis(position))?;
            if !matches!(this, "redis" | "rediss" | "redis+unix" | "unix") {
                return Err(RedisLocationError::NotRedis(position));
            }
            match scheme {
                Some(first) if first != this => {
                    return Err(RedisLocationError::MixedSchemes(first.into(), this.into()));
                }
                _ => scheme = Some(this),
            }
            let info = item
                .into_connection_info()
                .map_err(|_| RedisLocationError::NotRedis(position))?;
            nodes.push(info);
        }
        if nodes.len() == 1 {
            return Ok(Self(Nodes::Single(nodes.remove(0))));
        }
        let credentials = |info: &ConnectionInfo| {
            let settings = info.redis_settings();
            (
                settings.username().map(str::to_owned),
                settings.password().map(str::to_owned),
            )
        };
        let first = credentials(&nodes[0]);
        for (index, node) in nodes.iter().enumerate() {
            if matches!(node.addr(), ConnectionAddr::Unix(_)) {
                return Err(RedisLocationError::SocketInCluster(index + 1));
            }
            if credentials(node) != first {
                return Err(RedisLocationError::DifferentCredentials(index + 1));
            }
        }
        Ok(Self(Nodes::Cluster(nodes)))
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.0, Nodes::Cluster(_))
    }

    /// The single Redis, or `None` for a cluster.
    pub(super) fn single(&self) -> Option<&ConnectionInfo> {
        match &self.0 {
            Nodes::Single(info) => Some(info),
            Nodes::Cluster(_) => None,
        }
    }

    /// The seed nodes of a cluster, or `None` for a single Redis.
    pub(super) fn seeds(&self) -> Option<&[ConnectionInfo]> {
        match &self.0 {
            Nodes::Single(_) => None,
            Nodes::Cluster(nodes) => Some(nodes),
        }
    }

    fn addresses(&self) -> Vec<String> {
        let nodes = match &self.0 {
            Nodes::Single(info) => std::slice::from_ref(info),
            Nodes::Cluster(nodes) => nodes.as_slice(),
        };
        nodes.iter().map(|n| n.addr().to_string()).collect()
    }
}

/// Addresses only: what a log line may say about where Redis is.
impl fmt::Display for RedisLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Nodes::Single(_) => write!(f, "Redis at {}", self.addresses().join("")),
            Nodes::Cluster(_) => {
                write!(f, "Redis Cluster seeded by {}", self.addresses().join(", "))
            }
        }
    }
}

impl fmt::Debug for RedisLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisLocation({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_url_is_a_single_redis_several_are_a_cluster() {
        let single = RedisLocation::parse("redis://127.0.0.1:6379").unwrap();
        assert!(!single.is_cluster());
        let cluster = RedisLocation::parse(
            "redis://127.0.0.1:7101, redis://127.0.0.1:7102,redis://127.0.0.1:7103",
        )
        .unwrap();
        assert!(cluster.is_cluster());
        assert_eq!(cluster.seeds().unwrap().len(), 3);
        assert_eq!(
            cluster.to_string(),
            "Redis Cluster seeded by 127.0.0.1:7101, 127.0.0.1:7102, 127.0.0.1:7103"
        );
    }

    #[test]
    fn empty_items_mixed_schemes_and_other_urls_are_refused() {
        use RedisLocationError::*;
        let cases = [
            ("", Empty),
            ("redis://a:1,,redis://b:2", EmptyItem(2)),
            ("redis://a:1,", EmptyItem(2)),
            (
                "redis://a:1,rediss://b:2",
                MixedSchemes("redis".into(), "rediss".into()),
            ),
            ("redis://a:1,postgres://b:2", NotRedis(2)),
            ("127.0.0.1:6379", NotRedis(1)),
            (
                "redis://a:1,unix:///tmp/r.sock",
                MixedSchemes("redis".into(), "unix".into()),
            ),
        ];
        for (raw, expected) in cases {
            assert_eq!(RedisLocation::parse(raw).unwrap_err(), expected, "{raw}");
        }
    }

    #[test]
    fn differing_credentials_are_refused_without_printing_them() {
        let err =
            RedisLocation::parse("redis://app:hunter2-secret@a:1,redis://app:other-secret@b:2")
                .unwrap_err();
        assert_eq!(err, RedisLocationError::DifferentCredentials(2));
        let line = err.to_string();
        assert!(!line.contains("secret") && !line.contains('\n'), "{line}");
        // The same credentials on every node are one cluster; neither Display nor Debug
        // shows the password.
        let ok =
            RedisLocation::parse("redis://app:hunter2-secret@a:1,redis://app:hunter2-secret@b:2")
                .unwrap();
        assert!(!format!("{ok} {ok:?}").contains("secret"));
        assert_eq!(
            RedisLocation::parse("redis://:s1@a:1,redis://b:2").unwrap_err(),
            RedisLocationError::DifferentCredentials(2)
        );
    }
}
