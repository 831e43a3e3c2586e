//! Connection limits, below HTTP. Every open connection holds a file descriptor, so a client
//! that opens connections and never finishes a request (slowloris) could take them all: at a
//! 1,024-file limit, 1,000 half-sent headers refuse everyone else. [`LimitedAcceptor`] wraps the
//! listener and gives each accepted connection three bounds:
//! - a **process cap** on open connections (by default below the process's open-file limit),
//! - a **per-address cap**, so one address cannot take the process cap alone (raise it, or turn
//!   it off, behind a load balancer, where every connection comes from the balancer's address),
//! - a **header deadline**: a request's header must be complete within the deadline of its first
//!   byte (and a new connection's first header within the deadline of its accept), or the
//!   connection is closed.
//!
//! A connection over a cap is closed at once, before any byte is read: the cheapest answer, and
//! the one a flood cannot make the server spend work on. Connections that send nothing at all
//! are closed by the server's idle timeout (audit streams write a heartbeat well within it).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use poem::http::uri::Scheme;
use poem::listener::Acceptor;
use poem::web::{LocalAddr, RemoteAddr};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The bounds every accepted connection gets.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections in the process.
    pub total: usize,
    /// Open connections from one IP address; `None`: no cap.
    pub per_address: Option<usize>,
    /// How long a request header may take from its first byte.
    pub header_deadline: Duration,
}

/// Open connections, counted per address.
#[derive(Debug, Default)]
struct Live {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// The open-connection counts, shared by the acceptor and every permit it gave out.
#[derive(Debug, Default, Clone)]
struct Counts(Arc<Mutex<Live>>);

impl Counts {
    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A permit for one more connection from `address`, or `None` when a cap is reached.
    fn admit(&self, address: Option<IpAddr>, limits: &ConnectionLimits) -> Option<Permit> {
        let mut live = self.lock();
        if live.total >= limits.total {
            return None;
        }
        if let (Some(ip), Some(cap)) = (address, limits.per_address) {
            let from = live.by_address.entry(ip).or_default();
            if *from >= cap {
                return None;
            }
            *from += 1;
        }
        live.total += 1;
        Some(Permit {
            counts: self.clone(),
            address: address.filter(|_| limits.per_address.is_some()),
        })
    }

    /// Open connections in the process.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.lock().total
    }
}

/// One admitted connection's place in [`Counts`], given back when the connection closes.
#[derive(Debug)]
struct Permit {
    counts: Counts,
    address: Option<IpAddr>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut live = self.counts.lock();
        live.total = live.total.saturating_sub(1);
        if let Some(ip) = self.address
            && let Some(from) = live.by_address.get_mut(&ip)
        {
            *from -= 1;
            if *from == 0 {
                live.by_address.remove(&ip);
            }
        }
    }
}

/// A listener's acceptor with [`ConnectionLimits`].
pub struct LimitedAcceptor<A> {
    inner: A,
    limits: ConnectionLimits,
    counts: Counts,
}

impl<A> LimitedAcceptor<A> {
    pub fn new(inner: A, limits: ConnectionLimits) -> Self {
        Self {
            inner,
            limits,
            counts: Counts::default(),
        }
    }
}

impl<A: Acceptor> Acceptor for LimitedAcceptor<A> {
    type Io = Limited<A::Io>;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(&mut self) -> io::Result<(Self::Io, LocalAddr, RemoteAddr, Scheme)> {
        loop {
            let (io, local, remote, scheme) = self.inner.accept().await?;
            let address = remote.as_socket_addr().map(|a| a.ip());
            match self.counts.admit(address, &self.limits) {
                Some(permit) => {
                    let io = Limited::new(io, permit, self.limits.header_deadline);
                    return Ok((io, local, remote, scheme));
                }
                None => drop(io),
            }
        }
    }
}

/// Where a connection is in its current request, as far as the header deadline cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading a header: it must end (a blank line) before the deadline.
    Header,
    /// The header is complete; the body and the response take the time they take.
    Request,
    /// The response was written; the next byte read starts the next header.
    Between,
}

/// A connection that keeps its [`Permit`] while open and is closed when a header is late.
pub struct Limited<Io> {
    inner: Io,
    _permit: Permit,
    deadline: Duration,
    phase: Phase,
    /// The last bytes read of the header so far, to find `\r\n\r\n` across reads.
    tail: [u8; 3],
    timer: Pin<Box<Sleep>>,
}

impl<Io> Limited<Io> {
    fn new(inner: Io, permit: Permit, deadline: Duration) -> Self {
        Self {
            inner,
            _permit: permit,
            deadline,
            phase: Phase::Header,
            tail: [0; 3],
            timer: Box::pin(tokio::time::sleep(deadline)),
        }
    }

    /// Follows the bytes just read: the end of a header, or the start of the next one.
    fn saw(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.phase == Phase::Between {
            self.phase = Phase::Header;
            self.tail = [0; 3];
            self.timer.as_mut().reset(Instant::now() + self.deadline);
        }
        if self.phase != Phase::Header {
            return;
        }
        // The blank line may straddle the previous read: join its last three bytes to these.
        let mut seam = [0u8; 6];
        seam[..3].copy_from_slice(&self.tail);
        let head = bytes.len().min(3);
        seam[3..3 + head].copy_from_slice(&bytes[..head]);
        let ended = |w: &[u8]| w == b"\r\n\r\n";
        if seam[..3 + head].windows(4).any(ended) || bytes.windows(4).any(ended) {
            self.phase = Phase::Request;
            return;
        }
        let n = bytes.len().min(3);
        self.tail.rotate_left(n);
        self.tail[3 - n..].copy_from_slice(&bytes[bytes.len() - n..]);
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Limited<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.saw(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.phase == Phase::Header => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "request header not complete within its deadline",
                ))),
                Poll::Pending => Poll::Pending,
            },
            other => other,
        }
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Limited<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.phase == Phase::Request {
            self.phase = Phase::Between;
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.phase == Phase::Request {
            self.phase = Phase::Between;
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_address: Option<usize>) -> ConnectionLimits {
        ConnectionLimits {
            total,
            per_address,
            header_deadline: Duration::from_secs(1),
        }
    }

    #[test]
    fn caps_count_open_connections_and_closing_one_frees_its_place() {
        let counts = Counts::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let l = limits(3, Some(2));
        let first = counts.admit(Some(a), &l).expect("first");
        let _second = counts.admit(Some(a), &l).expect("second");
        assert!(counts.admit(Some(a), &l).is_none(), "the address's cap");
        let _other = counts.admit(Some(b), &l).expect("another address");
        assert!(counts.admit(Some(b), &l).is_none(), "the process cap");
        drop(first);
        assert_eq!(counts.open(), 2);
        assert!(
            counts.admit(Some(a), &l).is_some(),
            "a closed one frees its place"
        );
        let unlimited = limits(10, None);
        let held: Vec<_> = (0..5).map(|_| counts.admit(Some(a), &unlimited)).collect();
        assert!(
            held.iter().all(Option::is_some),
            "no per-address cap when off"
        );
    }

    fn limited() -> Limited<tokio::io::Empty> {
        let counts = Counts::default();
        let permit = counts.admit(None, &limits(1, None)).unwrap();
        Limited::new(tokio::io::empty(), permit, Duration::from_secs(1))
    }

    #[tokio::test]
    async fn a_header_ends_at_its_blank_line_even_split_across_reads() {
        let mut io = limited();
        io.saw(b"GET / HTTP/1.1\r\nHost: x\r");
        assert_eq!(io.phase, Phase::Header);
        io.saw(b"\n\r");
        assert_eq!(io.phase, Phase::Header);
        io.saw(b"\n");
        assert_eq!(
            io.phase,
            Phase::Request,
            "the blank line straddled three reads"
        );
        io.saw(b"body without a blank line");
        assert_eq!(io.phase, Phase::Request, "a body is not a header");
        io.phase = Phase::Between;
        io.saw(b"G");
        assert_eq!(io.phase, Phase::Header, "the next request's first byte");
    }
}
