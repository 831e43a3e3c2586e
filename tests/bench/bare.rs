//! The floor for HTTP benchmarks: a bare poem handler with no middleware, storage or auth.
//! `cargo run --release -p control-plane --example bare -- 127.0.0.1:18090`

use poem::listener::TcpListener;
use poem::web::Json;
use poem::{Route, Server, get, handler};

#[handler]
fn hello() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "items": [], "nextCursor": null }))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18090".into());
    Server::new(TcpListener::bind(addr))
        .run(Route::new().at("/*", get(hello).post(hello)))
        .await
}
