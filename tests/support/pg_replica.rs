//! A Postgres primary and its streaming replica on loopback, for one test: `initdb` a primary
//! on a free port, `pg_basebackup -R` it into a replica on another, both run as the `postgres`
//! user when the tests run as root (Postgres refuses root). Stopped at once and removed when
//! dropped. The binaries come from `pg_config --bindir`.

#![allow(dead_code)] // Each test binary uses a different part of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct PgPair {
    dir: PathBuf,
    bin: PathBuf,
    pub primary_port: u16,
    pub replica_port: u16,
}

impl PgPair {
    /// Whether this machine can make one: the server binaries, and a `postgres` user to run
    /// them when the tests run as root.
    pub fn available() -> Result<(), String> {
        let bin = bindir()?;
        if !bin.join("initdb").exists() || !bin.join("pg_basebackup").exists() {
            return Err(format!("initdb and pg_basebackup in {}", bin.display()));
        }
        if !succeeds(Command::new("pgrep").arg("--version")) {
            return Err("pgrep (procps), to freeze the replica".into());
        }
        if is_root() && !succeeds(Command::new("id").arg("postgres")) {
            return Err("a postgres user to run initdb as (the tests run as root)".into());
        }
        Ok(())
    }

    pub fn start() -> Result<Self, String> {
        let bin = bindir()?;
        let dir =
            std::env::temp_dir().join(format!("cp-pg-pair-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let pair = Self {
            primary_port: free_port(),
            replica_port: free_port(),
            dir,
            bin,
        };
        if is_root() {
            chown_postgres(&pair.dir)?;
        }
        let primary = pair.dir.join("primary");
        // Trust on loopback, replication included (initdb's default lines with -A trust).
        pair.run(
            "initdb",
            &[
                "-D",
                path(&primary),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        )?;
        std::fs::write(
            primary.join("postgresql.auto.conf"),
            format!(
                "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n\
                 fsync = off\nwal_level = replica\nmax_wal_senders = 4\n\
                 hot_standby_feedback = on\n",
                pair.primary_port,
                pair.dir.display()
            ),
        )
        .map_err(|e| e.to_string())?;
        pair.pg_ctl_start(&primary)?;
        let replica = pair.dir.join("replica");
        pair.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &pair.primary_port.to_string(),
                "-U",
                "postgres",
                "-D",
                path(&replica),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        )?;
        // The copy carries the primary's settings; -R appended primary_conninfo after them.
        let auto = replica.join("postgresql.auto.conf");
        let conf = std::fs::read_to_string(&auto).map_err(|e| e.to_string())?;
        std::fs::write(&auto, format!("{conf}port = {}\n", pair.replica_port))
            .map_err(|e| e.to_string())?;
        pair.pg_ctl_start(&replica)?;
        Ok(pair)
    }

    pub fn primary_url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}",
            self.primary_port
        )
    }

    pub fn replica_url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}",
            self.replica_port
        )
    }

    /// Stops the replica at once (`-m immediate`), as a crash would.
    pub fn stop_replica(&self) -> Result<(), String> {
        self.run(
            "pg_ctl",
            &[
                "stop",
                "-D",
                path(&self.dir.join("replica")),
                "-m",
                "immediate",
            ],
        )
    }

    /// Stops every process of the replica with SIGSTOP (SIGCONT with `false`): its sockets stay
    /// open and take what is sent, but nothing answers, as behind a partition that drops
    /// packets. The postmaster is stopped first, so it forks no child after the children are
    /// listed; a process that has exited meanwhile is skipped.
    pub fn freeze_replica(&self, frozen: bool) -> Result<(), String> {
        let pidfile = self.dir.join("replica").join("postmaster.pid");
        let pid =
            std::fs::read_to_string(&pidfile).map_err(|e| format!("{}: {e}", pidfile.display()))?;
        let postmaster = pid.lines().next().unwrap_or_default().trim().to_owned();
        let signal = if frozen { "-STOP" } else { "-CONT" };
        let send = |pid: &str| succeeds(Command::new("kill").args([signal, pid]));
        if !send(&postmaster) {
            return Err(format!("kill {signal} {postmaster} failed"));
        }
        let children = Command::new("pgrep")
            .args(["-P", &postmaster])
            .output()
            .map_err(|e| format!("pgrep: {e}"))?;
        for child in String::from_utf8_lossy(&children.stdout).split_whitespace() {
            send(child);
        }
        Ok(())
    }

    pub fn start_replica(&self) -> Result<(), String> {
        self.pg_ctl_start(&self.dir.join("replica"))
    }

    fn pg_ctl_start(&self, data: &Path) -> Result<(), String> {
        let log = data.with_extension("log");
        self.run(
            "pg_ctl",
            &[
                "start",
                "-w",
                "-t",
                "30",
                "-D",
                path(data),
                "-l",
                path(&log),
            ],
        )
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let program = self.bin.join(tool);
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let output = command
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{tool}: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{tool} {args:?} failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }
}

impl Drop for PgPair {
    fn drop(&mut self) {
        // A test that failed while the replica was frozen: a stopped postmaster would not stop.
        let _ = self.freeze_replica(false);
        for data in ["replica", "primary"] {
            let _ = self.run(
                "pg_ctl",
                &["stop", "-D", path(&self.dir.join(data)), "-m", "immediate"],
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until `check` holds, up to `patience`.
pub fn wait_until(patience: Duration, mut check: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < patience {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn bindir() -> Result<PathBuf, String> {
    let output = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .map_err(|e| format!("pg_config on the PATH: {e}"))?;
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim().to_owned(),
    ))
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn chown_postgres(dir: &Path) -> Result<(), String> {
    if succeeds(Command::new("chown").arg("postgres:postgres").arg(dir)) {
        Ok(())
    } else {
        Err(format!(
            "could not give {} to the postgres user",
            dir.display()
        ))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
