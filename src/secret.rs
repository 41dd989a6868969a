//! The token signing secret: read from a flag, a file or the environment,
//! checked for length, and never printed (its `Debug` is redacted).

use std::path::Path;

use anyhow::{Context as _, bail};

#[derive(Clone)]
pub struct Secret(Vec<u8>);

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
        let bytes = match (value, file) {
            (Some(_), Some(_)) => bail!(
                "give the secret once: --secret (ABSTORE_SECRET) or --secret-file (ABSTORE_SECRET_FILE)"
            ),
            (Some(value), None) => value.as_bytes().to_vec(),
            (None, Some(path)) => {
                let mut bytes = std::fs::read(path)
                    .with_context(|| format!("reading --secret-file {}", path.display()))?;
                // Files written by `echo` end in a newline that is not part of the secret.
                while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    bytes.pop();
                }
                bytes
            }
            (None, None) => return Ok(None),
        };
        if bytes.is_empty() {
            bail!("the token secret is empty");
        }
        if bytes.len() < crate::auth::MIN_SECRET_LEN && !allow_weak {
            bail!(
                "the token secret is {} bytes; use at least {} random bytes (or --allow-weak-secret for tests)",
                bytes.len(),
                crate::auth::MIN_SECRET_LEN
            );
        }
        Ok(Some(Secret(bytes)))
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_and_checks_length() {
        assert!(Secret::resolve(None, None, false).unwrap().is_none());
        assert!(Secret::resolve(Some("short"), None, false).is_err());
        assert!(
            Secret::resolve(Some("short"), None, true)
                .unwrap()
                .is_some()
        );
        let long = "x".repeat(32);
        assert_eq!(
            Secret::resolve(Some(&long), None, false)
                .unwrap()
                .unwrap()
                .expose(),
            long.as_bytes()
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, format!("{long}\n")).unwrap();
        assert_eq!(
            Secret::resolve(None, Some(&path), false)
                .unwrap()
                .unwrap()
                .expose(),
            long.as_bytes()
        );
        assert!(Secret::resolve(Some(&long), Some(&path), false).is_err());
        assert_eq!(
            format!(
                "{:?}",
                Secret::resolve(Some(&long), None, false).unwrap().unwrap()
            ),
            "Secret(REDACTED)"
        );
    }
}
