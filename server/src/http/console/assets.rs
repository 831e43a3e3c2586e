//! The console's stylesheet, script and icon, compiled into the binary and served under names that
//! carry their content's hash, so a browser may keep them for a year and never holds a stale
//! one after an upgrade. Nothing is fetched from anywhere else.

use std::sync::LazyLock;

use poem::Response;
use poem::http::StatusCode;
use sha2::{Digest, Sha256};

const CSS: &[u8] = include_bytes!("assets/console.css");
const JS: &[u8] = include_bytes!("assets/console.js");
const ICON: &[u8] = include_bytes!("assets/icon.svg");

pub struct Assets {
    pub css: String,
    pub js: String,
    pub icon: String,
}

fn hashed(name: &str, extension: &str, bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let short: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("/console/assets/{name}.{short}.{extension}")
}

pub static ASSETS: LazyLock<Assets> = LazyLock::new(|| Assets {
    css: hashed("console", "css", CSS),
    js: hashed("console", "js", JS),
    icon: hashed("icon", "svg", ICON),
});

/// The asset at `path` (the whole request path), or a 404.
pub fn serve(path: &str) -> Response {
    let (bytes, content_type) = if path == ASSETS.css {
        (CSS, "text/css; charset=utf-8")
    } else if path == ASSETS.js {
        (JS, "text/javascript; charset=utf-8")
    } else if path == ASSETS.icon {
        (ICON, "image/svg+xml")
    } else {
        return Response::builder().status(StatusCode::NOT_FOUND).finish();
    };
    Response::builder()
        .content_type(content_type)
        .header("cache-control", "public, max-age=31536000, immutable")
        .body(bytes)
}
