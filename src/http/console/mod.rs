//! The web console (issue 51; docs/console.md): server-rendered pages under
//! `/console/` for the people who run a store: its repositories, builds,
//! sessions and their logs, artifacts and streams, the hosted tickets as a
//! board, and an operator's view. Served by `abstore serve` on its own
//! listener; `--no-console` leaves the routes out of the table altogether.
//!
//! Everything a store holds was written by someone else, so every page is a
//! `maud` template (escaped unless a value is marked otherwise, and only the
//! Markdown renderer's sanitized output is), served with a strict
//! Content-Security-Policy and no inline script or style (`respond`).
//!
//! - [`session`]: sign-in sessions (cookie ↔ token, kept in memory) and
//!   their CSRF tokens.
//! - [`viewer`]: who is looking, and what their token lets them see.
//! - [`limiter`]: sign-in attempts per address.
//! - [`guard`]: the checks of a state-changing request (Origin, CSRF).
//! - [`respond`]: headers, the page shell, error pages, redirects.
//! - [`assets`]: the embedded stylesheet and script, content-hashed.
//! - [`markdown`]: ticket bodies, with every raw HTML node dropped.
//! - [`mod@format`]: times, sizes and payloads as a page shows them.
//! - [`pages`]: one file per page; [`live`]: the build page's held read.

pub mod assets;
pub mod format;
pub mod guard;
pub mod headers;
pub mod limiter;
pub mod live;
pub mod markdown;
pub mod pages;
pub mod respond;
pub mod session;
pub mod viewer;

use std::time::Duration;

/// The sign-in route: the one request the connection layer tells its
/// peer's address (`crate::connections`), for the per-address limit.
pub const SIGN_IN_PATH: &str = crate::connections::CONSOLE_SIGN_IN_PATH;

/// How the console is configured (`abstore serve` flags).
#[derive(Clone, Debug)]
pub struct ConsoleSettings {
    /// `--public-url`: the address people reach the server at, for
    /// absolute links; its scheme also says whether cookies are `Secure`.
    pub public_url: Option<url::Url>,
    /// `--console-sign-in-attempts` per `--console-sign-in-window-seconds`
    /// from one address.
    pub sign_in_attempts: u32,
    pub sign_in_window: Duration,
    /// A session unused this long ends (`--console-session-idle-seconds`).
    pub session_idle: Duration,
    /// The operator page's facts: retention rules and the like, as lines.
    pub facts: Vec<(String, String)>,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        ConsoleSettings {
            public_url: None,
            sign_in_attempts: 10,
            sign_in_window: Duration::from_secs(60),
            session_idle: Duration::from_secs(12 * 3600),
            facts: Vec::new(),
        }
    }
}

/// The console's state, shared by its routes.
pub struct Console {
    pub settings: ConsoleSettings,
    pub sessions: session::Sessions,
    pub sign_ins: limiter::Limiter,
    /// Open mode's CSRF token (no sessions there): random per process.
    pub open_csrf: String,
}

impl Console {
    pub fn new(settings: ConsoleSettings) -> Console {
        Console {
            sessions: session::Sessions::new(session::MAX_SESSIONS, settings.session_idle),
            sign_ins: limiter::Limiter::new(
                settings.sign_in_attempts,
                settings.sign_in_window,
                limiter::MAX_ADDRESSES,
            ),
            open_csrf: session::random_token(),
            settings,
        }
    }
}
