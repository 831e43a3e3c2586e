//! A TCP proxy a test puts between the server and a dependency (Postgres, Redis), to cut and
//! restore it, as the dependency going down and coming back, or to stall it, as a network that
//! silently drops packets (all of them, or only the connections open at that moment, as when
//! a NAT or a firewall forgets them).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A TCP proxy that a test can cut and restore, to simulate a dependency going down, or
/// stall, to simulate a network that silently drops packets.
pub struct Proxy {
    pub port: u16,
    target: String,
    /// The number the next accepted connection gets.
    numbers: Arc<AtomicU64>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Which connections have their bytes held instead of forwarded; they stay open.
    stalled: Arc<tokio::sync::watch::Sender<Stall>>,
}

/// Connections are numbered as they are accepted; those below `before` are held for good.
#[derive(Clone, Copy, Default)]
struct Stall {
    all: bool,
    before: u64,
}

impl Stall {
    fn holds(&self, connection: u64) -> bool {
        self.all || connection < self.before
    }
}

impl Proxy {
    pub async fn start(target: &str) -> Arc<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let proxy = Arc::new(Self {
            port,
            target: target.to_owned(),
            numbers: Arc::default(),
            task: Mutex::new(None),
            stalled: Arc::new(tokio::sync::watch::channel(Stall::default()).0),
        });
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let target = self.target.clone();
        let stalled = self.stalled.clone();
        let numbers = self.numbers.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((inbound, _)) = listener.accept().await {
                let target = target.clone();
                let stalled = stalled.clone();
                let number = numbers.fetch_add(1, Ordering::SeqCst);
                connections.spawn(async move {
                    if let Ok(outbound) = tokio::net::TcpStream::connect(target).await {
                        let (in_read, in_write) = inbound.into_split();
                        let (out_read, out_write) = outbound.into_split();
                        tokio::join!(
                            pump(in_read, out_write, stalled.subscribe(), number),
                            pump(out_read, in_write, stalled.subscribe(), number),
                        );
                    }
                });
            }
        });
        if let Ok(mut slot) = self.task.lock() {
            *slot = Some(task);
        }
    }

    /// Holds every byte from now on, in both directions, without closing anything.
    pub fn stall(&self) {
        self.stalled.send_modify(|s| s.all = true);
    }

    /// Forwards again, held bytes first (a stranded connection stays held).
    pub fn unstall(&self) {
        self.stalled.send_modify(|s| s.all = false);
    }

    /// Holds every byte of the connections open now, for good; later ones are forwarded.
    pub fn strand_open_connections(&self) {
        let before = self.numbers.load(Ordering::SeqCst);
        self.stalled.send_modify(|s| s.before = before);
    }

    /// Stops accepting and drops every open connection (the JoinSet aborts them on drop).
    pub fn cut(&self) {
        if let Ok(mut slot) = self.task.lock()
            && let Some(task) = slot.take()
        {
            task.abort();
        }
    }

    pub async fn restore(&self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("rebind proxy");
        self.serve(listener);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: tokio::sync::watch::Receiver<Stall>,
    connection: u64,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let held = stalled.wait_for(|s| !s.holds(connection)).await.is_err();
        if held || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
