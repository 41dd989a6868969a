//! The token signing secrets: read from a flag, a file or the environment,
//! checked for strength ([`Rules`]), reloadable while serving, and never
//! printed (the `Debug` is redacted and no log line carries them).
//!
//! Whoever reads a secret can mint any token, so a secret file must be
//! private to its owner (mode `0600` or stricter), and a secret must look
//! random: at least [`auth::MIN_SECRET_LEN`] bytes and about
//! [`MIN_SECRET_BITS`] bits by [`estimated_bits`]. Each rule has an explicit
//! way out for tests and odd platforms (`--allow-insecure-secret-file`,
//! `--allow-weak-secret`).
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

use crate::auth::{self, InvalidToken, Refusal, Scope};

/// The secrets in force, shared by every request and the reload task.
#[derive(Clone)]
pub struct Secret {
    keys: Arc<RwLock<Keys>>,
    /// Where a reload reads from; `None` when the secrets came from the flag
    /// or the variable, which cannot change while the process runs.
    file: Option<PathBuf>,
    rules: Rules,
}

/// What a secret source must satisfy, and the explicit exceptions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// Accept short or low-entropy secrets (`--allow-weak-secret`: tests).
    pub allow_weak: bool,
    /// Accept a secret file readable or writable by its group or by others
    /// (`--allow-insecure-secret-file`).
    pub allow_insecure_file: bool,
}

/// The least entropy a secret must have by [`estimated_bits`], unless weak
/// secrets are allowed: what a random 16-byte key holds, half of
/// HMAC-SHA256's key size, and far beyond any guessing.
pub const MIN_SECRET_BITS: f64 = 128.0;

/// At least one key; the first signs.
#[derive(PartialEq, Eq)]
struct Keys(Vec<Vec<u8>>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(REDACTED)")
    }
}

impl Secret {
    /// Resolve `--secret` / `--secret-file`; `None` means open mode. The
    /// file and every secret must pass `rules` (`read`, `parse`).
    pub fn resolve(
        value: Option<&str>,
        file: Option<&Path>,
        rules: Rules,
    ) -> anyhow::Result<Option<Secret>> {
        let keys = match (value, file) {
            (Some(_), Some(_)) => bail!(
                "give the secret once: --secret (ABSTORE_SECRET) or --secret-file (ABSTORE_SECRET_FILE)"
            ),
            (Some(value), None) => parse(value.as_bytes(), rules)?,
            (None, Some(path)) => read(path, rules)?,
            (None, None) => return Ok(None),
        };
        Ok(Some(Secret {
            keys: Arc::new(RwLock::new(keys)),
            file: file.map(Path::to_path_buf),
            rules,
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
        self.check(token, now_ms).map_err(|_| InvalidToken)
    }

    /// [`Secret::verify`], saying why a token failed, for the server's
    /// accounting: `Expired` when a secret in force signed it, `Malformed`
    /// when none did (or it is not a token at all).
    pub fn check(&self, token: &str, now_ms: i64) -> Result<Scope, Refusal> {
        self.read_keys(|keys| {
            let mut refusal = Refusal::Malformed;
            for key in &keys.0 {
                match auth::check(key, token, now_ms) {
                    Ok(scope) => return Ok(scope),
                    Err(Refusal::Expired) => refusal = Refusal::Expired,
                    Err(Refusal::Malformed) => {}
                }
            }
            Err(refusal)
        })
    }

    /// Re-read the secret file. An unreadable or invalid file (a weak
    /// secret, a mode open to group or others) leaves the secrets in force
    /// unchanged (a half-edited file must not lock everyone out). Returns
    /// whether anything changed.
    pub fn reload(&self) -> anyhow::Result<bool> {
        let Some(path) = &self.file else {
            bail!(
                "the secret came from --secret/ABSTORE_SECRET; only --secret-file can be reloaded"
            );
        };
        let fresh = read(path, self.rules)?;
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

/// Read a secret file, refusing one its group or others may read or write
/// (unless `rules.allow_insecure_file`): they could mint any token, or
/// replace the secret.
fn read(path: &Path, rules: Rules) -> anyhow::Result<Keys> {
    #[cfg(unix)]
    if !rules.allow_insecure_file {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path)
            .with_context(|| format!("reading --secret-file {}", path.display()))?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o077 != 0 {
            bail!(
                "--secret-file {path} is open to its group or to others (mode {mode:04o}): whoever \
                 can read it can mint any token. Make it private with `chmod 600 {path}` (owned by \
                 the user abstore runs as), or accept it with --allow-insecure-secret-file \
                 (ABSTORE_ALLOW_INSECURE_SECRET_FILE)",
                path = path.display()
            );
        }
    }
    let bytes =
        std::fs::read(path).with_context(|| format!("reading --secret-file {}", path.display()))?;
    parse(&bytes, rules).with_context(|| format!("--secret-file {}", path.display()))
}

/// One secret per line; `\r\n` endings and blank lines are ignored, so files
/// written by `echo` or an editor work. Unless `rules.allow_weak`, each must
/// be [`auth::MIN_SECRET_LEN`] bytes long and hold [`MIN_SECRET_BITS`] by
/// [`estimated_bits`].
fn parse(bytes: &[u8], rules: Rules) -> anyhow::Result<Keys> {
    let keys: Vec<Vec<u8>> = bytes
        .split(|b| *b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if keys.is_empty() {
        bail!("the token secret is empty");
    }
    if rules.allow_weak {
        return Ok(Keys(keys));
    }
    for (n, key) in keys.iter().enumerate() {
        if key.len() < auth::MIN_SECRET_LEN {
            bail!(
                "token secret {} (line {}) is {} bytes; use at least {} random bytes (or --allow-weak-secret for tests)",
                n + 1,
                n + 1,
                key.len(),
                auth::MIN_SECRET_LEN
            );
        }
        let bits = estimated_bits(key);
        if bits < MIN_SECRET_BITS {
            bail!(
                "token secret {} (line {}) looks weak: about {bits:.0} bits by the spread of its \
                 bytes (a repeated character or word?), at least {MIN_SECRET_BITS:.0} needed; \
                 generate one with `openssl rand -base64 48` (or --allow-weak-secret for tests)",
                n + 1,
                n + 1,
            );
        }
    }
    Ok(Keys(keys))
}

/// A cheap, deliberately rough estimate of a secret's entropy in bits: its
/// length times the Shannon entropy of its own byte frequencies. It catches
/// what a person types instead of generating (`aaaa…`, a word repeated to
/// length: `passwordpassword…` is about 2.75 bits a byte), and every random
/// secret of the recommended sizes passes with a wide margin: 64 characters
/// of `openssl rand -hex 32` estimate about 240 bits, `-base64 48` about
/// 340, 32 random bytes about 150. Short hex is estimated low (32 hex
/// characters, 128 real bits, estimate about 110): use a longer secret.
pub fn estimated_bits(secret: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for byte in secret {
        counts[usize::from(*byte)] += 1;
    }
    let n = secret.len() as f64;
    let per_byte: f64 = counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / n;
            -p * p.log2()
        })
        .sum();
    per_byte * n
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

    const STRICT: Rules = Rules {
        allow_weak: false,
        allow_insecure_file: false,
    };
    const WEAK_OK: Rules = Rules {
        allow_weak: true,
        allow_insecure_file: false,
    };

    /// A strong secret (36 bytes, 30 distinct), distinct per `tag`.
    fn strong(tag: char) -> String {
        format!("{tag}{tag}-0123456789abcdefghijklmnopqrstuvw")
    }

    /// Write `text` to `path` readable by its owner only.
    fn write_private(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }

    #[test]
    fn resolves_and_checks_length() {
        assert!(Secret::resolve(None, None, STRICT).unwrap().is_none());
        assert!(Secret::resolve(Some("short"), None, STRICT).is_err());
        assert!(Secret::resolve(Some(""), None, WEAK_OK).is_err());
        assert!(
            Secret::resolve(Some("short"), None, WEAK_OK)
                .unwrap()
                .is_some()
        );
        let long = strong('x');
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write_private(&path, &format!("{long}\n"));
        let from_file = Secret::resolve(None, Some(&path), STRICT).unwrap().unwrap();
        let from_flag = Secret::resolve(Some(&long), None, STRICT).unwrap().unwrap();
        assert_eq!(from_file.len(), 1);
        // The trailing newline is not part of the secret.
        assert_eq!(from_file.mint(&scope()), from_flag.mint(&scope()));
        assert_eq!(
            from_file.mint(&scope()),
            auth::mint(long.as_bytes(), &scope())
        );
        assert!(Secret::resolve(Some(&long), Some(&path), STRICT).is_err());
        assert_eq!(format!("{from_flag:?}"), "Secret(REDACTED)");
    }

    #[test]
    fn long_but_repetitive_secrets_are_weak() {
        for weak in [
            "a".repeat(32),
            "a".repeat(200),
            "ab".repeat(32),
            "password".repeat(4),
            "passwordpasswordpasswordpassword!".to_owned(),
        ] {
            let err = Secret::resolve(Some(&weak), None, STRICT).unwrap_err();
            assert!(format!("{err:#}").contains("looks weak"), "{weak}: {err:#}");
            assert!(!format!("{err:#}").contains(&weak), "the secret was echoed");
            assert!(Secret::resolve(Some(&weak), None, WEAK_OK).is_ok());
        }
        // Generated secrets pass: hex and base64 text, and raw random bytes.
        for _ in 0..200 {
            let bytes: [u8; 32] = rand::random();
            assert!(estimated_bits(&bytes) >= MIN_SECRET_BITS);
            let hex = hex::encode(bytes);
            assert!(estimated_bits(hex.as_bytes()) >= MIN_SECRET_BITS, "{hex}");
            let b64 = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                rand::random::<[u8; 32]>(),
            );
            assert!(estimated_bits(b64.as_bytes()) >= MIN_SECRET_BITS, "{b64}");
        }
        // The estimate of a string of n distinct bytes is n * log2(n).
        assert!((estimated_bits(b"0123456789abcdef0123456789abcdef") - 128.0).abs() < 1e-9);
        assert_eq!(estimated_bits(&[b'a'; 64]), 0.0);
        assert_eq!(estimated_bits(b""), 0.0);
    }

    #[cfg(unix)]
    #[test]
    fn secret_files_must_be_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write_private(&path, &strong('p'));
        for mode in [0o640, 0o604, 0o620, 0o660, 0o644, 0o666] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = format!(
                "{:#}",
                Secret::resolve(None, Some(&path), STRICT).unwrap_err()
            );
            assert!(err.contains(&format!("mode {mode:04o}")), "{err}");
            assert!(err.contains("chmod 600"), "{err}");
            let allowed = Rules {
                allow_insecure_file: true,
                ..STRICT
            };
            assert!(Secret::resolve(None, Some(&path), allowed).is_ok());
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(Secret::resolve(None, Some(&path), STRICT).is_ok());
        }
    }

    #[test]
    fn first_signs_every_one_verifies_and_each_is_checked() {
        let (new, old) = (strong('n'), strong('o'));
        let both = Secret::resolve(Some(&format!("{new}\r\n\n{old}\n")), None, STRICT)
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
        let err = Secret::resolve(Some(&weak_second), None, STRICT).unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    }

    #[test]
    fn reload_swaps_only_valid_files() {
        let (new, old) = (strong('n'), strong('o'));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write_private(&path, &old);
        let secret = Secret::resolve(None, Some(&path), STRICT).unwrap().unwrap();
        let old_token = auth::mint(old.as_bytes(), &scope());
        write_private(&path, &format!("{new}\n{old}\n"));
        assert!(secret.reload().unwrap());
        assert!(!secret.reload().unwrap());
        assert!(secret.verify(&old_token, 0).is_ok());
        // A broken file keeps the secrets in force: too short, too uniform,
        // or readable by others.
        write_private(&path, "short\n");
        assert!(secret.reload().is_err());
        assert!(secret.verify(&old_token, 0).is_ok());
        write_private(&path, &"z".repeat(64));
        assert!(secret.reload().is_err());
        assert!(secret.verify(&old_token, 0).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            write_private(&path, &new);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(secret.reload().is_err());
            assert!(secret.verify(&old_token, 0).is_ok());
        }
        write_private(&path, &new);
        assert!(secret.reload().unwrap());
        assert!(secret.verify(&old_token, 0).is_err());
        // A flag's secret cannot be reloaded.
        let flag = Secret::resolve(Some(&new), None, STRICT).unwrap().unwrap();
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
            Secret::resolve(None, Some(&nested), STRICT)
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
        let secret = Secret::resolve(None, Some(&path), STRICT).unwrap().unwrap();
        assert_eq!(secret.len(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
