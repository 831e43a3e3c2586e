//! Connection bounds against a slow or greedy client (slowloris): a header not finished in time
//! closes its connection, and one address cannot hold more than its cap while another address
//! is still served. Raw TCP from chosen loopback addresses, below any HTTP client.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{TestApp, spawn_app_with};

async fn connect_from(source: [u8; 4], app: &TestApp) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind((std::net::Ipv4Addr::from(source), 0).into())
        .unwrap();
    let server = app.address.trim_start_matches("http://").parse().unwrap();
    socket.connect(server).await.expect("connect")
}

/// Whether the server closed the connection within `within` (end of stream or a reset).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let closed = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, closed).await.is_ok()
}

/// A whole `GET /readyz` on the connection; the status line of the answer.
async fn ready(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A `GET /readyz` on the connection, kept open afterwards; the status line of the answer.
async fn answered(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await;
        match read {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_header_not_finished_within_its_deadline_closes_the_connection() {
    let app = spawn_app_with(|c| c.header_timeout_ms = 300).await;
    let mut slow = connect_from([127, 0, 0, 1], &app).await;
    slow.write_all(b"GET /readyz HTTP/1.1\r\nHost: test\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)).await,
        "a half-sent header is closed"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "not before its deadline"
    );

    // A connection that sends nothing is held to the same deadline from its accept.
    let mut silent = connect_from([127, 0, 0, 1], &app).await;
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await);

    let mut whole = connect_from([127, 0, 0, 1], &app).await;
    assert_eq!(ready(&mut whole).await, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn one_address_holds_at_most_its_cap_and_another_is_still_served() {
    let app = spawn_app_with(|c| {
        c.max_connections_per_address = control_plane::config::CapOption(Some(3));
    })
    .await;
    let greedy = [127, 0, 0, 4];
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut connection = connect_from(greedy, &app).await;
        // Answered, so accepted and counted before the next one is; kept open.
        assert_eq!(answered(&mut connection).await, "HTTP/1.1 200 OK");
        held.push(connection);
    }
    let mut over = connect_from(greedy, &app).await;
    assert!(
        closed_within(&mut over, Duration::from_secs(2)).await,
        "the fourth connection from one address is closed at once"
    );
    let mut other = connect_from([127, 0, 0, 5], &app).await;
    assert_eq!(
        ready(&mut other).await,
        "HTTP/1.1 200 OK",
        "another address"
    );

    // Closing one frees its place, once the server has seen it close.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = connect_from(greedy, &app).await;
        if ready(&mut again).await == "HTTP/1.1 200 OK" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed connection's place was never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
