//! A three-master Redis Cluster on loopback for the tests (`redis-server` and `redis-cli` on
//! the PATH). [`shared`] starts one per test binary on fixed ports (7101-7103), or reuses the
//! one already healthy there, and leaves it running for the next run; [`RedisCluster::start`]
//! starts one on free ports for a test that stops its nodes, shut down when it drops.

#![allow(dead_code)] // Each test binary uses a different part of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The ports of the shared cluster; each node's cluster bus is its port + 10000.
pub const SHARED_PORTS: [u16; 3] = [7101, 7102, 7103];

pub struct RedisCluster {
    ports: Vec<u16>,
    dir: PathBuf,
    /// Whether dropping it shuts its nodes down (not the shared one).
    owned: bool,
}

/// The shared cluster's `REDIS_URL`, started (or found healthy) once per test binary.
pub fn shared() -> Result<String, String> {
    static SHARED: OnceLock<Result<String, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let dir = std::env::temp_dir().join("cp-redis-cluster");
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            // Another test binary (or run) may be starting it at the same moment.
            let lock = std::fs::File::create(dir.join("lock")).map_err(|e| e.to_string())?;
            lock.lock().map_err(|e| e.to_string())?;
            let cluster = RedisCluster {
                ports: SHARED_PORTS.to_vec(),
                dir,
                owned: false,
            };
            if !cluster.healthy() {
                cluster.stop_stale()?;
                cluster.create(15_000)?;
            }
            Ok(cluster.url())
        })
        .clone()
}

impl RedisCluster {
    /// A new cluster on free ports, for one test; shut down and removed when dropped. A short
    /// node timeout, so a stopped master turns the cluster to `fail` within about a second.
    pub fn start() -> Result<Self, String> {
        let mut ports = Vec::new();
        while ports.len() < 3 {
            let port = free_port_pair();
            if !ports
                .iter()
                .any(|&p: &u16| p == port || p.abs_diff(port) == 10_000)
            {
                ports.push(port);
            }
        }
        let dir = std::env::temp_dir().join(format!("cp-redis-cluster-{}", ports[0]));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cluster = Self {
            ports,
            dir,
            owned: true,
        };
        cluster.create(1_000)?;
        Ok(cluster)
    }

    /// `REDIS_URL` naming every node as a seed.
    pub fn url(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Stops one node at once, forgetting its data (`shutdown nosave`).
    pub fn stop_node(&self, port: u16) {
        let _ = cli(port, &["shutdown", "nosave"]);
        let started = Instant::now();
        while answers(port) && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a stopped node again with its cluster configuration: it rejoins with its slots
    /// (and no keys).
    pub fn restart_node(&self, port: u16, node_timeout_ms: u32) -> Result<(), String> {
        self.start_node(port, node_timeout_ms)
    }

    /// `cluster_state` as `port` reports it (`ok`, `fail`), or `None` when it does not answer.
    pub fn state(&self, port: u16) -> Option<String> {
        let info = cli(port, &["cluster", "info"])?;
        info.lines()
            .find_map(|l| l.trim().strip_prefix("cluster_state:"))
            .map(str::to_owned)
    }

    /// Waits until every node reports `cluster_state:ok` and sees every slot assigned.
    pub fn wait_ok(&self) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if self.healthy() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "the Redis Cluster on {:?} did not reach cluster_state:ok in 30 s",
            self.ports
        ))
    }

    /// The port of the node holding a key that matches `pattern` (asked of every node).
    pub fn holder_of(&self, pattern: &str) -> Option<u16> {
        self.ports.iter().copied().find(|&port| {
            cli(port, &["--scan", "--pattern", pattern]).is_some_and(|keys| !keys.trim().is_empty())
        })
    }

    fn healthy(&self) -> bool {
        self.ports.iter().all(|&port| {
            cli(port, &["cluster", "info"]).is_some_and(|info| {
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_assigned:16384")
                    && info.contains(&format!("cluster_known_nodes:{}", self.ports.len()))
            })
        })
    }

    /// Shuts down what answers on the shared ports, when it is a node this harness started
    /// there (its directory is ours): a cluster left broken by an interrupted run.
    fn stop_stale(&self) -> Result<(), String> {
        for &port in &self.ports {
            if !answers(port) {
                continue;
            }
            let dir = cli(port, &["config", "get", "dir"]).unwrap_or_default();
            if !dir.lines().any(|l| Path::new(l.trim()) == self.dir) {
                return Err(format!(
                    "port {port} is taken by something other than the test Redis Cluster \
                     (expected a node in {}): stop it, or free ports {:?} and {:?}",
                    self.dir.display(),
                    self.ports,
                    self.ports.iter().map(|p| p + 10_000).collect::<Vec<_>>()
                ));
            }
            self.stop_node(port);
        }
        Ok(())
    }

    fn create(&self, node_timeout_ms: u32) -> Result<(), String> {
        for &port in &self.ports {
            let _ = std::fs::remove_file(self.dir.join(format!("nodes-{port}.conf")));
            self.start_node(port, node_timeout_ms)?;
        }
        let nodes: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-cli on the PATH: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&output.stdout)
            ));
        }
        self.wait_ok()
    }

    fn start_node(&self, port: u16, node_timeout_ms: u32) -> Result<(), String> {
        let status = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-node-timeout", &node_timeout_ms.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join(format!("{port}.log")))
            .args(["--save", "", "--appendonly", "no", "--daemonize", "yes"])
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("redis-server on the PATH: {e}"))?;
        if !status.success() {
            return Err(format!("redis-server on port {port} did not start"));
        }
        let started = Instant::now();
        while cli(port, &["ping"]).is_none_or(|r| r.trim() != "PONG") {
            if started.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "redis-server on port {port} did not answer in 10 s"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        for &port in &self.ports {
            let _ = cli(port, &["shutdown", "nosave"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli -p PORT ARGS…`'s output, or `None` when it fails or the node does not answer.
fn cli(port: u16, args: &[&str]) -> Option<String> {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success() && !text.starts_with("Could not connect")).then_some(text)
}

fn answers(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_port_pair() -> u16 {
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("local address").port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}
