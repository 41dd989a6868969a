//! Console sessions: a browser signs in with a token abstore issued and gets
//! a cookie holding a random session id, never the token. The token stays
//! in this process's memory, keyed by the SHA-256 of the session id, and is
//! verified again on every request (`super::viewer`), so a revocation or an
//! expiry ends the session within the revocation refresh, as it ends the
//! token's protocol use. Sign-out forgets the session at once. Sessions do
//! not survive a restart: people sign in again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};

/// The session cookie's name.
pub const COOKIE: &str = "abstore_console";

/// Sessions kept at once; signing in beyond it ends the longest idle one.
pub const MAX_SESSIONS: usize = 10_000;

/// A random value of 32 bytes, base64url: session ids and CSRF tokens.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// What a session holds.
#[derive(Clone)]
pub struct Session {
    /// The token it signed in with: verified again on every request.
    pub token: String,
    /// The session's CSRF token, in every form it renders.
    pub csrf: String,
    last_used: Instant,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Session(REDACTED)")
    }
}

/// The signed-in sessions of this process.
pub struct Sessions {
    by_key: Mutex<HashMap<[u8; 32], Session>>,
    max: usize,
    idle: Duration,
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    pub fn new(max: usize, idle: Duration) -> Sessions {
        Sessions {
            by_key: Mutex::new(HashMap::new()),
            max: max.max(1),
            idle,
        }
    }

    /// A new session for `token`: its id (the cookie's value) and CSRF token.
    pub fn open(&self, token: String) -> (String, String) {
        let id = random_token();
        let csrf = random_token();
        let mut map = self.lock();
        let now = Instant::now();
        map.retain(|_, s| now.duration_since(s.last_used) < self.idle);
        if map.len() >= self.max
            && let Some(oldest) = map.iter().min_by_key(|(_, s)| s.last_used).map(|(k, _)| *k)
        {
            map.remove(&oldest);
        }
        map.insert(
            key(&id),
            Session {
                token,
                csrf: csrf.clone(),
                last_used: now,
            },
        );
        (id, csrf)
    }

    /// The session of cookie value `id`, if it is live; its use is noted.
    pub fn find(&self, id: &str) -> Option<Session> {
        let mut map = self.lock();
        let k = key(id);
        let now = Instant::now();
        let session = map.get_mut(&k)?;
        if now.duration_since(session.last_used) >= self.idle {
            map.remove(&k);
            return None;
        }
        session.last_used = now;
        Some(session.clone())
    }

    /// End the session of cookie value `id` (sign-out, or a token that no
    /// longer verifies).
    pub fn end(&self, id: &str) {
        self.lock().remove(&key(id));
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        // A panic while holding the map leaves it consistent (every change
        // is one insert or remove).
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The session id in a request's `Cookie` headers, if any.
pub fn cookie_value(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The `Set-Cookie` value that opens a session: HttpOnly, SameSite=Strict,
/// for the console's paths only, Secure when `secure`.
pub fn set_cookie(id: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={id}; Path=/console/; HttpOnly; SameSite=Strict{secure}")
}

/// The `Set-Cookie` value that clears it.
pub fn clear_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}=; Path=/console/; Max-Age=0; HttpOnly; SameSite=Strict{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_cookie_and_ended_by_sign_out() {
        let sessions = Sessions::new(4, Duration::from_secs(60));
        let (id, csrf) = sessions.open("tok".into());
        let found = sessions.find(&id).expect("live");
        assert_eq!(
            (found.token.as_str(), found.csrf.as_str()),
            ("tok", csrf.as_str())
        );
        assert!(sessions.find("other").is_none());
        sessions.end(&id);
        assert!(sessions.find(&id).is_none());
    }

    #[test]
    fn sessions_are_bounded_and_idle_ones_end() {
        let sessions = Sessions::new(2, Duration::from_secs(60));
        let (first, _) = sessions.open("a".into());
        let (_second, _) = sessions.open("b".into());
        let (_third, _) = sessions.open("c".into());
        assert_eq!(sessions.len(), 2);
        assert!(sessions.find(&first).is_none(), "the oldest made room");
        let idle = Sessions::new(2, Duration::ZERO);
        let (id, _) = idle.open("a".into());
        assert!(idle.find(&id).is_none());
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_when_asked() {
        let cookie = set_cookie("abc", true);
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert!(cookie.ends_with("; Secure"));
        assert!(!set_cookie("abc", false).contains("Secure"));
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("cookie", "x=1; abstore_console=abc; y=2".parse().unwrap());
        assert_eq!(cookie_value(&headers), Some("abc"));
    }
}
