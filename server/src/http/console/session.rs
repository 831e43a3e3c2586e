//! A console session is its cookie: the signed-in token, a CSRF secret and an expiry, sealed
//! (XChaCha20-Poly1305) under the server's record key, so every replica opens it and nobody
//! else reads or forges it. Nothing of it is stored until it is signed out: then its id is
//! remembered in the fast state until it would have expired, and a copy of the cookie opens
//! nothing. Every page authenticates the token again, so a session also ends with its token.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use poem::Request;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::domain::RecordCipher;
use crate::storage::{FastStateError, SignOuts};

/// Sessions last at most this long; the token's own expiry ends one sooner.
pub const LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// The cookie's name: `__Host-` makes browsers refuse it unless Secure, on `/`, and set by
/// this host, so a sibling subdomain cannot plant one.
const SECURE_NAME: &str = "__Host-cp_console";
/// The name without Secure, for `--dev` on loopback only (browsers refuse `__Host-` there).
const DEV_NAME: &str = "cp_console";
/// Binds sealed cookies to their purpose: a sealed idempotency record is not a session.
const AAD: &[u8] = b"control-plane console session v1";

#[derive(Serialize, Deserialize)]
struct Sealed {
    sid: String,
    token: String,
    csrf: String,
    exp: i64,
}

/// An open session. Its token never leaves the server but as the API call's bearer.
pub struct Session {
    sid: String,
    token: String,
    csrf: String,
    expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The value every form carries back: a cross-site page cannot read it.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    pub fn csrf_matches(&self, given: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(given.as_bytes()))
    }
}

pub struct Sessions {
    cipher: RecordCipher,
    sign_outs: Arc<dyn SignOuts>,
    prefix: String,
    secure: bool,
}

fn random_hex(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    pub fn new(
        cipher: RecordCipher,
        sign_outs: Arc<dyn SignOuts>,
        prefix: String,
        secure: bool,
    ) -> Self {
        Self {
            cipher,
            sign_outs,
            prefix,
            secure,
        }
    }

    fn name(&self) -> &'static str {
        if self.secure { SECURE_NAME } else { DEV_NAME }
    }

    /// A new session for `token` (always a new id: a session planted before sign-in is never
    /// the one signed in), with its `Set-Cookie` value.
    pub fn start(&self, token: String, token_expires: Option<DateTime<Utc>>) -> (Session, String) {
        let now = Utc::now();
        let longest = now + chrono::Duration::from_std(LIFETIME).unwrap_or_default();
        let expires_at = token_expires.map_or(longest, |t| t.min(longest));
        let session = Session {
            sid: random_hex(16),
            token,
            csrf: random_hex(32),
            expires_at,
        };
        let sealed = serde_json::to_vec(&Sealed {
            sid: session.sid.clone(),
            token: session.token.clone(),
            csrf: session.csrf.clone(),
            exp: expires_at.timestamp(),
        })
        .unwrap_or_default();
        let value = URL_SAFE_NO_PAD.encode(self.cipher.seal(&sealed, AAD));
        let max_age = (expires_at - now).num_seconds().max(0);
        (session, self.cookie(&value, max_age))
    }

    fn cookie(&self, value: &str, max_age: i64) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!(
            "{}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}",
            self.name()
        )
    }

    /// The `Set-Cookie` value that deletes the session's cookie.
    pub fn clear(&self) -> String {
        self.cookie("", 0)
    }

    /// The request's session: `None` without one, with a cookie this server did not seal, one
    /// past its expiry or one signed out. More than one cookie of the name is no session.
    pub async fn open(&self, req: &Request) -> Result<Option<Session>, FastStateError> {
        let mut values = req
            .headers()
            .get_all(poem::http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|line| line.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(name, _)| *name == self.name())
            .map(|(_, value)| value);
        let (Some(value), None) = (values.next(), values.next()) else {
            return Ok(None);
        };
        let Some(sealed) = URL_SAFE_NO_PAD
            .decode(value)
            .ok()
            .and_then(|raw| self.cipher.open(&raw, AAD).ok())
            .and_then(|plain| serde_json::from_slice::<Sealed>(&plain).ok())
        else {
            return Ok(None);
        };
        let Some(expires_at) = DateTime::from_timestamp(sealed.exp, 0) else {
            return Ok(None);
        };
        if expires_at <= Utc::now() {
            return Ok(None);
        }
        if self
            .sign_outs
            .has_ended(&self.ended_key(&sealed.sid))
            .await?
        {
            return Ok(None);
        }
        Ok(Some(Session {
            sid: sealed.sid,
            token: sealed.token,
            csrf: sealed.csrf,
            expires_at,
        }))
    }

    /// Ends `session` on every replica until it would have expired.
    pub async fn end(&self, session: &Session) -> Result<(), FastStateError> {
        let left = (session.expires_at - Utc::now())
            .to_std()
            .unwrap_or_default()
            .max(Duration::from_secs(1));
        self.sign_outs
            .end(&self.ended_key(&session.sid), left)
            .await
    }

    fn ended_key(&self, sid: &str) -> String {
        format!("{}console-signed-out:{sid}", self.prefix)
    }
}
