//! `abstore serve`'s flags for the web console (docs/console.md).

use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::http::console::ConsoleSettings;

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Web console")]
pub struct ConsoleArgs {
    /// Serve no web console: every path under /console/ is then an unknown
    /// route (404).
    #[arg(long, env = "ABSTORE_NO_CONSOLE")]
    pub no_console: bool,

    /// The address people reach this server at (`https://store.example/`),
    /// behind a reverse proxy: the console's own origin for its Origin
    /// check, and, when `https`, its session cookie is `Secure`.
    #[arg(long, env = "ABSTORE_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,

    /// Console sign-in attempts one address may make per window; more are
    /// answered 429.
    #[arg(long, env = "ABSTORE_CONSOLE_SIGN_IN_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub console_sign_in_attempts: u32,

    /// The window of `--console-sign-in-attempts`, in seconds.
    #[arg(long, env = "ABSTORE_CONSOLE_SIGN_IN_WINDOW_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub console_sign_in_window_seconds: u64,

    /// A console session unused this long ends (seconds).
    #[arg(long, env = "ABSTORE_CONSOLE_SESSION_IDLE_SECONDS", default_value_t = 12 * 3600, value_parser = clap::value_parser!(u64).range(60..=30 * 86_400))]
    pub console_session_idle_seconds: u64,
}

impl ConsoleArgs {
    /// The console's settings, or `None` with `--no-console`.
    pub fn into_settings(self) -> anyhow::Result<Option<ConsoleSettings>> {
        if self.no_console {
            return Ok(None);
        }
        let public_url = match self.public_url {
            None => None,
            Some(text) => {
                let url = url::Url::parse(&text)
                    .with_context(|| format!("--public-url {text:?} is not a URL"))?;
                anyhow::ensure!(
                    matches!(url.scheme(), "http" | "https") && url.host().is_some(),
                    "--public-url {text:?} must be an http or https URL with a host"
                );
                Some(url)
            }
        };
        Ok(Some(ConsoleSettings {
            public_url,
            sign_in_attempts: self.console_sign_in_attempts,
            sign_in_window: Duration::from_secs(self.console_sign_in_window_seconds),
            session_idle: Duration::from_secs(self.console_session_idle_seconds),
            facts: Vec::new(),
        }))
    }
}
