//! The token signing secrets: read from a flag, a file or the environment,
//! checked for length, reloadable while serving, and never printed (the
//! `Debug` is redacted and no log line carries them).
//!
//! The source holds one secret per line. The first signs what
//! `abstore token mint` prints; every one verifies, so a rotation adds the
//! new secret on top, waits for old tokens to expire, then drops the old one
//! (docs/security.md). `SIGHUP`, or a change of the file's contents, reloads
//! the file without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::auth::{self, InvalidToken, Scope};

/// The secrets in force, shared by every request and the reload task.
#[derive(Clone)]
pub struct Secret {
    keys: Arc<RwLock<Keys>>,
    /// Where a reload reads from; `None` when the secrets came from the flag
    /// or the variable, which cannot change while the process runs.
    file: Option<PathBuf>,
    allow_weak: bool,
}

/// At least one key; the first signs.
#[derive(PartialEq, Eq)]
struct Keys(Vec<Vec<u8>>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(REDACTED)")
    }
}

impl Secret {
    /// Resolve `--secret` / `--secret-file`; `None` means open mode.
    /// A secret shorter than [`crate::auth::MIN_SECRET_LEN`] bytes is refused
    /// unless `allow_weak`.
    pub fn resolve(
        value: Option<&str>,
        file: Option<&Path>,
        allow_weak: bool,
    ) -> anyhow::Result<Option<Secret>> {
        let keys = match (value, file) {
            (Some(_), Some(_)) => bail!(
                "give the secret once: --secret (ABSTORE_SECRET) or --secret-file (ABSTORE_SECRET_FILE)"
            ),
            (Some(value), None) => parse(value.as_bytes(), allow_weak)?,
            (None, Some(path)) => read(path, allow_weak)?,
            (None, None) => return Ok(None),
        };
        Ok(Some(Secret {
            keys: Arc::new(RwLock::new(keys)),
            file: file.map(Path::to_path_buf),
            allow_weak,
        }))
    }

    /// How many secrets verify (the first of them signs).
    pub fn len(&self) -> usize {
        self.read_keys(|keys| keys.0.len())
    }

    /// Never true: a secret source holds at least one secret.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sign `scope` with the first secret.
    pub fn mint(&self, scope: &Scope) -> String {
        self.read_keys(|keys| auth::mint(&keys.0[0], scope))
    }

    /// Verify `token` against every secret in force at `now_ms`. Each
    /// comparison is constant-time ([`auth::verify`]); which secret matched is
    /// not reported, so the answer is the same opaque failure either way.
    pub fn verify(&self, token: &str, now_ms: i64) -> Result<Scope, InvalidToken> {
        self.read_keys(|keys| {
            keys.0
                .iter()
                .find_map(|key| auth::verify(key, token, now_ms).ok())
                .ok_or(InvalidToken)
        })
    }

    /// Re-read the secret file. An unreadable or invalid file leaves the
    /// secrets in force unchanged (a half-edited file must not lock everyone
    /// out). Returns whether anything changed.
    pub fn reload(&self) -> anyhow::Result<bool> {
        let Some(path) = &self.file else {
            bail!(
                "the secret came from --secret/ABSTORE_SECRET; only --secret-file can be reloaded"
            );
        };
        let fresh = read(path, self.allow_weak)?;
        let mut keys = self
            .keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *keys == fresh {
            return Ok(false);
        }
        *keys = fresh;
        Ok(true)
    }

    /// Reload on `SIGHUP` and whenever the file's contents change (checked
    /// every `poll`), until the process ends. Logs counts, never secrets.
    pub async fn watch(self, poll: Duration) {
        if self.file.is_none() {
            return;
        }
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let signal = async {
                match hangup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let signal = std::future::pending::<()>();
            let cause = tokio::select! {
                _ = signal => "SIGHUP",
                _ = ticker.tick() => "file check",
            };
            match self.reload() {
                Ok(true) => {
                    metrics::counter!("abstore_secret_reloads_total", "result" => "changed")
                        .increment(1);
                    tracing::info!(cause, secrets = self.len(), "token secrets reloaded");
                }
                // Asked for by a signal, a reload always says what it found;
                // the periodic check stays quiet while nothing changes.
                Ok(false) if cause == "SIGHUP" => {
                    metrics::counter!("abstore_secret_reloads_total", "result" => "unchanged")
                        .increment(1);
                    tracing::info!(
                        cause,
                        secrets = self.len(),
                        "token secrets unchanged (SIGHUP)"
                    );
                }
                Ok(false) => {}
                Err(err) => {
                    metrics::counter!("abstore_secret_reloads_total", "result" => "error")
                        .increment(1);
                    tracing::error!(cause, error = %format!("{err:#}"), "token secrets NOT reloaded; the previous ones stay in force");
                }
            }
        }
    }

    fn read_keys<T>(&self, f: impl FnOnce(&Keys) -> T) -> T {
        f(&self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Create `path` holding one fresh random secret (64 hex characters, 32
/// bytes of entropy), readable by its owner only, and its missing parent
/// directories (owner-only too). Used by `--create-secret-file` so a
/// container starts authenticated with no setup.
pub fn create_file(path: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let mut dirs = std::fs::DirBuilder::new();
        dirs.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut dirs, 0o700);
        dirs.create(parent).with_context(|| {
            format!(
                "creating the directory {} for --secret-file {}",
                parent.display(),
                path.display()
            )
        })?;
    }
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating --secret-file {}", path.display()))?;
    writeln!(file, "{}", hex::encode(bytes))
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing --secret-file {}", path.display()))
}

fn read(path: &Path, allow_weak: bool) -> anyhow::Result<Keys> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading --secret-file {}", path.display()))?;
    parse(&bytes, allow_weak).with_context(|| format!("--secret-file {}", path.display()))
}

/// One secret per line; `\r\n` endings and blank lines are ignored, so files
/// written by `echo` or an editor work.
fn parse(bytes: &[u8], allow_weak: bool) -> anyhow::Result<Keys> {
    let keys: Vec<Vec<u8>> = bytes
        .split(|b| *b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if keys.is_empty() {
        bail!("the token secret is empty");
    }
    for (n, key) in keys.iter().enumerate() {
        if key.len() < auth::MIN_SECRET_LEN && !allow_weak {
            bail!(
                "token secret {} (line {}) is {} bytes; use at least {} random bytes (or --allow-weak-secret for tests)",
                n + 1,
                n + 1,
                key.len(),
                auth::MIN_SECRET_LEN
            );
        }
    }
    Ok(Keys(keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> Scope {
        Scope::Legacy {
            build: auth::WILDCARD.into(),
            session: auth::WILDCARD.into(),
            exp: i64::MAX,
        }
    }

    #[test]
    fn resolves_and_checks_length() {
        assert!(Secret::resolve(None, None, false).unwrap().is_none());
        assert!(Secret::resolve(Some("short"), None, false).is_err());
        assert!(Secret::resolve(Some(""), None, true).is_err());
        assert!(
            Secret::resolve(Some("short"), None, true)
                .unwrap()
                .is_some()
        );
        let long = "x".repeat(32);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, format!("{long}\n")).unwrap();
        let from_file = Secret::resolve(None, Some(&path), false).unwrap().unwrap();
        let from_flag = Secret::resolve(Some(&long), None, false).unwrap().unwrap();
        assert_eq!(from_file.len(), 1);
        // The trailing newline is not part of the secret.
        assert_eq!(from_file.mint(&scope()), from_flag.mint(&scope()));
        assert_eq!(
            from_file.mint(&scope()),
            auth::mint(long.as_bytes(), &scope())
        );
        assert!(Secret::resolve(Some(&long), Some(&path), false).is_err());
        assert_eq!(format!("{from_flag:?}"), "Secret(REDACTED)");
    }

    #[test]
    fn first_signs_every_one_verifies_and_each_is_checked() {
        let (new, old) = ("n".repeat(32), "o".repeat(40));
        let both = Secret::resolve(Some(&format!("{new}\r\n\n{old}\n")), None, false)
            .unwrap()
            .unwrap();
        assert_eq!(both.len(), 2);
        assert_eq!(both.mint(&scope()), auth::mint(new.as_bytes(), &scope()));
        assert!(
            both.verify(&auth::mint(old.as_bytes(), &scope()), 0)
                .is_ok()
        );
        assert!(
            both.verify(&auth::mint(new.as_bytes(), &scope()), 0)
                .is_ok()
        );
        assert!(both.verify(&auth::mint(&[b'z'; 32], &scope()), 0).is_err());
        let weak_second = format!("{new}\nshort\n");
        let err = Secret::resolve(Some(&weak_second), None, false).unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    }

    #[test]
    fn reload_swaps_only_valid_files() {
        let (new, old) = ("n".repeat(32), "o".repeat(32));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, &old).unwrap();
        let secret = Secret::resolve(None, Some(&path), false).unwrap().unwrap();
        let old_token = auth::mint(old.as_bytes(), &scope());
        std::fs::write(&path, format!("{new}\n{old}\n")).unwrap();
        assert!(secret.reload().unwrap());
        assert!(!secret.reload().unwrap());
        assert!(secret.verify(&old_token, 0).is_ok());
        // A broken file keeps the secrets in force.
        std::fs::write(&path, "short\n").unwrap();
        assert!(secret.reload().is_err());
        assert!(secret.verify(&old_token, 0).is_ok());
        std::fs::write(&path, &new).unwrap();
        assert!(secret.reload().unwrap());
        assert!(secret.verify(&old_token, 0).is_err());
        // A flag's secret cannot be reloaded.
        let flag = Secret::resolve(Some(&new), None, false).unwrap().unwrap();
        assert!(flag.reload().is_err());
    }

    #[test]
    fn created_files_are_private_and_usable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        create_file(&path).unwrap();
        assert!(create_file(&path).is_err(), "never overwrites");
        // Missing parents are created, readable by the owner only.
        let nested = dir.path().join("run/abstore/secret");
        create_file(&nested).unwrap();
        assert_eq!(
            Secret::resolve(None, Some(&nested), false)
                .unwrap()
                .unwrap()
                .len(),
            1
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(nested.parent().unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        let secret = Secret::resolve(None, Some(&path), false).unwrap().unwrap();
        assert_eq!(secret.len(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
