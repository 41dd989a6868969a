//! Varied, deterministic text for generated histories: words, sentences,
//! file paths, ids, hashes and ISO times. Compression ratios are measured on
//! generated stores, so nothing here repeats one fixed string: every summary,
//! path and id is drawn from a seeded generator.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Words that appear in build observations, review findings and diagnostics.
const WORDS: &[&str] = &[
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "for",
    "on",
    "when",
    "after",
    "before",
    "with",
    "without",
    "and",
    "or",
    "but",
    "not",
    "never",
    "still",
    "only",
    "every",
    "each",
    "some",
    "no",
    "is",
    "are",
    "was",
    "should",
    "must",
    "may",
    "does",
    "retry",
    "timeout",
    "cache",
    "index",
    "query",
    "handler",
    "request",
    "response",
    "session",
    "token",
    "lease",
    "heartbeat",
    "migration",
    "schema",
    "column",
    "table",
    "row",
    "batch",
    "queue",
    "worker",
    "thread",
    "lock",
    "mutex",
    "channel",
    "buffer",
    "stream",
    "chunk",
    "artifact",
    "deposit",
    "revision",
    "journal",
    "event",
    "payload",
    "envelope",
    "validator",
    "parser",
    "serializer",
    "encoder",
    "decoder",
    "config",
    "setting",
    "flag",
    "option",
    "default",
    "fallback",
    "error",
    "panic",
    "warning",
    "log",
    "metric",
    "counter",
    "gauge",
    "histogram",
    "trace",
    "span",
    "test",
    "fixture",
    "snapshot",
    "mock",
    "stub",
    "assertion",
    "flaky",
    "race",
    "deadlock",
    "leak",
    "overflow",
    "underflow",
    "boundary",
    "edge",
    "case",
    "path",
    "branch",
    "commit",
    "merge",
    "rebase",
    "conflict",
    "review",
    "finding",
    "verdict",
    "plan",
    "spec",
    "ticket",
    "label",
    "state",
    "status",
    "login",
    "logout",
    "signup",
    "password",
    "email",
    "invoice",
    "payment",
    "refund",
    "cart",
    "checkout",
    "search",
    "filter",
    "sort",
    "page",
    "pagination",
    "cursor",
    "offset",
    "limit",
    "upload",
    "download",
    "image",
    "thumbnail",
    "resize",
    "crop",
    "avatar",
    "profile",
    "account",
    "team",
    "member",
    "role",
    "permission",
    "admin",
    "audit",
    "export",
    "import",
    "backup",
    "restore",
    "webhook",
    "callback",
    "retry-after",
    "rate",
    "limiter",
    "throttle",
    "burst",
    "latency",
    "p99",
    "memory",
    "allocation",
    "copy",
    "clone",
    "borrow",
    "lifetime",
    "async",
    "await",
    "future",
    "promise",
    "callback",
    "closure",
    "iterator",
    "generator",
    "macro",
    "trait",
    "interface",
    "struct",
    "enum",
    "variant",
    "match",
    "unwrap",
    "option",
    "result",
    "nullable",
    "optional",
    "required",
    "deprecated",
    "legacy",
    "module",
    "package",
    "crate",
    "dependency",
    "version",
    "upgrade",
    "downgrade",
    "pin",
    "lockfile",
    "build",
    "compile",
    "link",
    "bundle",
    "minify",
    "sourcemap",
    "deploy",
    "rollback",
    "canary",
    "staging",
    "production",
    "preview",
    "environment",
    "secret",
    "credential",
    "certificate",
    "tls",
    "handshake",
    "socket",
    "connection",
    "pool",
    "idle",
    "keepalive",
    "reconnect",
    "backoff",
    "jitter",
    "clock",
    "skew",
    "timezone",
    "date",
    "duration",
    "interval",
    "deadline",
    "cancel",
    "abort",
    "signal",
    "shutdown",
    "startup",
    "health",
    "readiness",
    "probe",
    "endpoint",
    "route",
    "middleware",
    "header",
    "cookie",
    "cors",
    "csrf",
    "redirect",
    "status-code",
    "body",
    "json",
    "yaml",
    "toml",
    "csv",
    "utf-8",
    "unicode",
    "emoji",
    "escape",
    "quote",
    "whitespace",
    "trim",
    "newline",
    "tab",
    "indent",
    "format",
    "lint",
    "typecheck",
    "coverage",
    "benchmark",
    "regression",
    "baseline",
    "threshold",
    "budget",
    "quota",
    "limit",
    "ceiling",
    "floor",
    "duplicate",
    "missing",
    "stale",
    "orphaned",
    "dangling",
    "unused",
    "dead",
    "unreachable",
    "inconsistent",
    "ambiguous",
    "undocumented",
    "misleading",
    "slow",
    "fast",
    "expensive",
    "cheap",
    "large",
    "small",
    "empty",
    "full",
    "partial",
    "whole",
    "first",
    "last",
    "next",
    "previous",
    "nested",
    "flat",
    "recursive",
    "sorted",
    "unsorted",
    "ordered",
    "random",
];

const DIRS: &[&str] = &[
    "src",
    "src/api",
    "src/auth",
    "src/billing",
    "src/components",
    "src/db",
    "src/http",
    "src/jobs",
    "src/lib",
    "src/models",
    "src/routes",
    "src/services",
    "src/store",
    "src/ui",
    "src/utils",
    "app/controllers",
    "app/models",
    "app/views",
    "lib",
    "packages/core/src",
    "packages/web/src",
    "packages/cli/src",
    "test",
    "tests/integration",
    "tests/unit",
    "scripts",
    "migrations",
    "docs",
    "config",
];

const EXTENSIONS: &[&str] = &[
    "ts", "tsx", "rs", "go", "py", "sql", "md", "json", "toml", "css",
];

/// Human users who answer escalations and flip dispatcher settings.
pub const USERS: &[&str] = &[
    "alice", "bob", "carol", "dmitri", "eve", "farah", "gus", "hiro", "ines", "jonas",
];

/// A seeded generator of everything textual in a history.
pub struct Text {
    rng: StdRng,
}

impl Text {
    pub fn new(seed: u64) -> Text {
        Text {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Uniform in `low..=high`.
    pub fn int(&mut self, low: i64, high: i64) -> i64 {
        self.rng.random_range(low..=high)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p.clamp(0.0, 1.0))
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.rng.random_range(0..items.len())]
    }

    pub fn word(&mut self) -> &'static str {
        self.pick(WORDS)
    }

    /// `min..=max` words, first one capitalised, no final period (as
    /// Autobuild's agents write summaries).
    pub fn sentence(&mut self, min: usize, max: usize) -> String {
        let n = self.rng.random_range(min..=max);
        let mut out = String::with_capacity(n * 8);
        for i in 0..n {
            let word = self.word();
            if i == 0 {
                let mut chars = word.chars();
                if let Some(first) = chars.next() {
                    out.extend(first.to_uppercase());
                    out.push_str(chars.as_str());
                }
            } else {
                out.push(' ');
                out.push_str(word);
            }
        }
        out
    }

    /// A few sentences, each ending with a period.
    pub fn paragraph(&mut self, sentences: usize) -> String {
        (0..sentences)
            .map(|_| format!("{}.", self.sentence(5, 16)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub fn file(&mut self) -> String {
        let dir = self.pick(DIRS);
        let name = format!("{}-{}", self.word(), self.word());
        let ext = self.pick(EXTENSIONS);
        format!("{dir}/{}.{ext}", name.replace(['/', ' '], "-"))
    }

    /// `n` lowercase hex digits.
    pub fn hex(&mut self, n: usize) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        (0..n)
            .map(|_| DIGITS[self.rng.random_range(0..16)] as char)
            .collect()
    }

    /// An id such as `o_3f2a91`.
    pub fn id(&mut self, prefix: &str) -> String {
        format!("{prefix}_{}", self.hex(6))
    }

    /// A ticket title, e.g. "Retry the webhook callback after timeout".
    pub fn title(&mut self) -> String {
        self.sentence(3, 7)
    }
}

/// A slug from a title: lowercase words joined by `-`, at most 40 bytes.
pub fn kebab(title: &str) -> String {
    let mut out = String::new();
    for word in title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        if out.len() + word.len() + 1 > 40 {
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&word.to_ascii_lowercase());
    }
    if out.is_empty() {
        out.push_str("build");
    }
    out
}

/// Epoch milliseconds as JavaScript's `Date.toISOString()` writes them
/// (`2026-07-15T12:00:00.000Z`), the form both servers store and serve.
pub fn iso(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (the well-known era-based conversion).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_matches_javascript() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_784_116_800_000), "2026-07-15T12:00:00.000Z");
        assert_eq!(iso(951_825_600_123), "2000-02-29T12:00:00.123Z");
    }

    #[test]
    fn kebab_makes_slugs() {
        assert_eq!(
            kebab("Retry the webhook, after timeout"),
            "retry-the-webhook-after-timeout"
        );
        assert_eq!(kebab("!!!"), "build");
    }

    #[test]
    fn text_is_deterministic_and_varied() {
        let (mut a, mut b) = (Text::new(7), Text::new(7));
        let one: Vec<String> = (0..50).map(|_| a.sentence(4, 12)).collect();
        let two: Vec<String> = (0..50).map(|_| b.sentence(4, 12)).collect();
        assert_eq!(one, two);
        let distinct: std::collections::HashSet<&String> = one.iter().collect();
        assert!(distinct.len() > 45, "sentences repeat: {distinct:?}");
    }
}

/// The inverse of [`iso`] for the times servers send (`…T12:00:00.000Z`);
/// `None` for anything else.
pub fn parse_iso(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[10] != b'T' || b[23] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second, millis) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn parse_iso_inverts_iso() {
        for ms in [0, 1_784_116_800_000, 951_825_600_123, 1_700_000_000_999] {
            assert_eq!(parse_iso(&iso(ms)), Some(ms));
        }
        assert_eq!(parse_iso("2026-07-15 12:00:00"), None);
    }
}
