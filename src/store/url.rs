//! `--database`: the one parser of a database URL. `serve`, `migrate` and
//! every archive command take a [`DatabaseUrl`], so the same text names the
//! same file (or server) for all of them, and the store is opened and
//! migrated in one place.
//!
//! - `sqlite:PATH` or `sqlite://PATH`: a file. `PATH` is percent-decoded
//!   (`%20` is a space, `%25` a `%`); what follows `?` are options, of which
//!   only `mode=memory` is understood.
//! - `sqlite::memory:` (or `mode=memory`): a database inside this process.
//! - `postgres://…` or `postgresql://…`: a PostgreSQL server, as libpq
//!   reads the URL.
//!
//! Parsing only: opening what it names is `open.rs`'s.

use std::path::PathBuf;
use std::str::FromStr as _;

use anyhow::Context as _;
use sqlx::postgres::PgConnectOptions;

/// A parsed `--database` URL. `Display` and `Debug` show it with any
/// password replaced.
#[derive(Clone)]
pub struct DatabaseUrl {
    /// The text as given, for messages (redacted when shown).
    text: String,
    location: Location,
}

/// What a [`DatabaseUrl`] names.
#[derive(Clone)]
pub enum Location {
    Sqlite(SqliteLocation),
    /// Boxed: the options are ten times the size of a path.
    Postgres(Box<PgConnectOptions>),
}

/// Where a SQLite database lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqliteLocation {
    /// Inside this process only (one per connection).
    Memory,
    /// A file, its path decoded.
    File(PathBuf),
}

impl DatabaseUrl {
    pub fn parse(text: &str) -> anyhow::Result<DatabaseUrl> {
        let location = if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            refuse_ignored_secrets(text)?;
            Location::Postgres(Box::new(
                PgConnectOptions::from_str(text)
                    .with_context(|| format!("--database {}", redact(text)))?,
            ))
        } else if let Some(rest) = text.strip_prefix("sqlite:") {
            Location::Sqlite(
                sqlite_location(rest).with_context(|| format!("--database {}", redact(text)))?,
            )
        } else {
            anyhow::bail!(
                "unsupported --database URL {} (expected sqlite:… or postgres://…)",
                redact(text)
            )
        };
        Ok(DatabaseUrl {
            text: text.to_owned(),
            location,
        })
    }

    pub fn location(&self) -> &Location {
        &self.location
    }

    /// `sqlite` or `postgres`: the build-info metric's label and an
    /// archive's `source`.
    pub fn backend(&self) -> &'static str {
        match self.location {
            Location::Sqlite(_) => "sqlite",
            Location::Postgres(_) => "postgres",
        }
    }
}

impl std::str::FromStr for DatabaseUrl {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<DatabaseUrl> {
        DatabaseUrl::parse(text)
    }
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact(&self.text))
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// The part after `sqlite:`.
fn sqlite_location(rest: &str) -> anyhow::Result<SqliteLocation> {
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path == ":memory:" || query.split('&').any(|option| option == "mode=memory") {
        return Ok(SqliteLocation::Memory);
    }
    anyhow::ensure!(!path.is_empty(), "the SQLite URL names no file");
    let decoded = percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .context("the SQLite path is not UTF-8 once percent-decoded")?;
    Ok(SqliteLocation::File(PathBuf::from(decoded.as_ref())))
}

/// Any URL (a database, a blob location) with its secrets replaced by
/// `REDACTED`, for logs and error messages: the password of its user
/// information and the value of every query parameter that carries one
/// ([`secret_parameter`]: PostgreSQL takes `?password=`, object stores take
/// keys and tokens). Text with nothing to hide is returned as given.
///
/// A URL that does not parse is never echoed whole, since where its password
/// ends cannot be known: only its scheme, its length and why it does not
/// parse are shown. Text that is not meant as a URL at all (no `://`: a
/// local path, `sqlite::memory:`) has no user information to hide and is
/// shown as given.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            let mut changed = false;
            if parsed.password().is_some() {
                changed |= parsed.set_password(Some("REDACTED")).is_ok();
            }
            if parsed
                .query_pairs()
                .any(|(name, _)| secret_parameter(&name))
            {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(name, value)| {
                        let value = if secret_parameter(&name) {
                            "REDACTED".to_owned()
                        } else {
                            value.into_owned()
                        };
                        (name.into_owned(), value)
                    })
                    .collect();
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
                changed = true;
            }
            if changed {
                parsed.to_string()
            } else {
                url.to_owned()
            }
        }
        Err(err) => match url.split_once("://") {
            Some((scheme, _)) if !scheme.is_empty() && scheme.bytes().all(is_scheme_byte) => {
                format!(
                    "{scheme}://… (an unparseable URL of {} bytes, not shown: {err})",
                    url.len()
                )
            }
            Some(_) => format!(
                "(an unparseable URL of {} bytes, not shown: {err})",
                url.len()
            ),
            None => url.to_owned(),
        },
    }
}

/// Whether a URL query parameter's value is a secret, by its name (any
/// case): passwords (`password`, PostgreSQL's `sslpassword`, …), secrets,
/// tokens, keys, credentials and signatures (object stores' URLs).
pub fn secret_parameter(name: &str) -> bool {
    const MARKERS: [&str; 8] = [
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "key",
        "credential",
        "signature",
    ];
    let name = name.to_ascii_lowercase();
    MARKERS.iter().any(|marker| name.contains(marker))
}

/// RFC 3986's scheme characters (after the first letter).
fn is_scheme_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.')
}

/// PostgreSQL: refuse a secret-bearing query parameter the driver does not
/// understand (libpq's `sslpassword`, …). The driver would ignore it, and
/// log its name and value at start, so the secret would reach the log and
/// do nothing. `password` is understood (and redacted everywhere); `sslkey`
/// names a file.
fn refuse_ignored_secrets(text: &str) -> anyhow::Result<()> {
    const UNDERSTOOD: [&str; 3] = ["password", "sslkey", "ssl-key"];
    let Ok(parsed) = url::Url::parse(text) else {
        // The driver's own parse fails and says why (through `redact`).
        return Ok(());
    };
    if let Some((name, _)) = parsed
        .query_pairs()
        .find(|(name, _)| secret_parameter(name) && !UNDERSTOOD.contains(&name.as_ref()))
    {
        anyhow::bail!(
            "--database {}: the parameter {name:?} is not supported by abstore's PostgreSQL driver \
             (it would be ignored); remove it (a password goes in the URL's user information or \
             in ?password=)",
            redact(text)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn sqlite(text: &str) -> SqliteLocation {
        match DatabaseUrl::parse(text).unwrap().location {
            Location::Sqlite(location) => location,
            Location::Postgres(_) => panic!("{text} parsed as PostgreSQL"),
        }
    }

    #[test]
    fn sqlite_urls_name_memory_or_a_decoded_file() {
        assert_eq!(sqlite("sqlite::memory:"), SqliteLocation::Memory);
        assert_eq!(
            sqlite("sqlite:file:x?mode=memory&cache=shared"),
            SqliteLocation::Memory
        );
        assert_eq!(
            sqlite("sqlite:///tmp/a b.db"),
            SqliteLocation::File("/tmp/a b.db".into())
        );
        // The issue-23 case: a percent-escaped space is a space, for every
        // command alike; `%25` is a literal `%`.
        assert_eq!(
            sqlite("sqlite:///srv/my%20store/100%25.db"),
            SqliteLocation::File("/srv/my store/100%.db".into())
        );
        assert_eq!(
            sqlite("sqlite://./data/abstore.db?mode=rwc"),
            SqliteLocation::File("./data/abstore.db".into())
        );
        assert_eq!(
            sqlite("sqlite:rel.db"),
            SqliteLocation::File("rel.db".into())
        );
        let err = DatabaseUrl::parse("sqlite://").unwrap_err();
        assert!(format!("{err:#}").contains("names no file"), "{err:#}");
        assert!(DatabaseUrl::parse("sqlite:///x%FF.db").is_err());
    }

    #[test]
    fn postgres_urls_and_others() {
        for text in ["postgres://u@h/d", "postgresql://u@h:5433/d"] {
            let url = DatabaseUrl::parse(text).unwrap();
            assert!(matches!(url.location(), Location::Postgres(_)));
            assert_eq!(url.backend(), "postgres");
        }
        let err = DatabaseUrl::parse("mysql://u:pw@db/x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unsupported --database URL"), "{err}");
        assert!(!err.contains("pw"), "{err}");
        assert_eq!(
            DatabaseUrl::parse("sqlite://./a.db").unwrap().backend(),
            "sqlite"
        );
        assert!(matches!(
            DatabaseUrl::parse("sqlite:///abs/a.db").unwrap().location(),
            Location::Sqlite(SqliteLocation::File(p)) if p == Path::new("/abs/a.db")
        ));
    }

    #[test]
    fn shown_without_passwords() {
        let url = DatabaseUrl::parse("postgres://u:secret@h/db").unwrap();
        assert_eq!(url.to_string(), "postgres://u:REDACTED@h/db");
        assert!(!format!("{url:?}").contains("secret"));
        assert_eq!(redact("sqlite://./x.db"), "sqlite://./x.db");
        assert_eq!(redact("s3://k:s@bucket/p"), "s3://k:REDACTED@bucket/p");
        // Nothing to hide: shown exactly as given (not re-encoded).
        assert_eq!(redact("sqlite:///tmp/a b.db"), "sqlite:///tmp/a b.db");
        assert_eq!(redact("./abstore-data/blobs"), "./abstore-data/blobs");
        assert_eq!(redact("sqlite::memory:"), "sqlite::memory:");
    }

    #[test]
    fn secret_query_parameters_are_redacted() {
        let url = DatabaseUrl::parse(
            "postgres://u@h/db?sslmode=require&password=hunter2&application_name=x",
        )
        .unwrap();
        let shown = url.to_string();
        assert_eq!(
            shown,
            "postgres://u@h/db?sslmode=require&password=REDACTED&application_name=x"
        );
        assert!(!format!("{url:?}").contains("hunter2"));
        for (text, hidden) in [
            ("postgres://u:pw1@h/db?PASSWORD=pw2", ["pw1", "pw2"]),
            (
                "s3://bucket/p?aws_secret_access_key=k1&token=k2",
                ["k1", "k2"],
            ),
            ("az://c/p?account_key=k1&sas_token=k2", ["k1", "k2"]),
        ] {
            let shown = redact(text);
            for secret in hidden {
                assert!(!shown.contains(secret), "{text} -> {shown}");
            }
            assert!(shown.contains("REDACTED"), "{shown}");
        }
    }

    #[test]
    fn unparseable_urls_are_never_echoed() {
        for text in [
            "postgres://u:hunter2@h:notaport/db",
            "postgres://u:hunter2@[::1/db",
            "postgresql://u:hun ter2@h:99999/db",
        ] {
            let err = format!("{:#}", DatabaseUrl::parse(text).unwrap_err());
            assert!(!err.contains("hunter2") && !err.contains("ter2"), "{err}");
            assert!(err.contains("unparseable URL"), "{err}");
            assert!(err.starts_with("--database postgres"), "{err}");
        }
        let shown = redact("weird://u:hunter2@h:notaport/");
        assert_eq!(
            shown,
            "weird://… (an unparseable URL of 29 bytes, not shown: invalid port number)"
        );
    }

    #[test]
    fn ignored_secret_parameters_are_refused() {
        let err = DatabaseUrl::parse("postgres://u@h/db?sslpassword=hunter2")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"sslpassword\" is not supported"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        // What the driver understands is accepted.
        DatabaseUrl::parse("postgres://u@h/db?password=x&sslkey=/k.pem&sslmode=disable").unwrap();
    }
}
