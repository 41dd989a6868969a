//! Identifier hygiene (docs/decisions.md, 17): every id, artifact kind, lease
//! holder and stream label the store keeps in a text column of its own is at
//! most [`MAX_ID_BYTES`] bytes of UTF-8 and contains no NUL, on every backend.
//!
//! Why: PostgreSQL's `text` refuses NUL outright, and a btree row may not
//! exceed about 2.7 KB, so without one bound the same request would succeed on
//! SQLite and fail (or leave a build that can never be appended to) on
//! PostgreSQL. The largest composite key, an artifact's
//! (family, resource id, artifact kind, revision), stays near 1 KB at the
//! bound. Autobuild's own wire schemas set no maximum; its ids are short
//! slugs, paths and generated tokens, far below the bound.
//!
//! Text kept only inside stored JSON (event payloads, attrs, metadata) needs
//! no rule: JSON keeps a NUL escaped as `\u0000`.

/// The longest id, artifact kind, lease holder or stream label, in bytes of UTF-8.
pub const MAX_ID_BYTES: usize = 512;

/// Why a text cannot be an identifier.
#[derive(Debug, PartialEq, Eq)]
pub enum Unfit {
    Nul,
    TooLong { bytes: usize },
}

/// Check one identifier against the rule.
pub fn check(value: &str) -> Result<(), Unfit> {
    if value.len() > MAX_ID_BYTES {
        Err(Unfit::TooLong { bytes: value.len() })
    } else if value.contains('\0') {
        Err(Unfit::Nul)
    } else {
        Ok(())
    }
}

/// Whether `value` could name something the store keeps (a lookup of an
/// unfit id can answer "absent" without asking the store).
pub fn fits(value: &str) -> bool {
    check(value).is_ok()
}

/// The validation message for body member `field`, or `None` if the value fits.
pub fn field_problem(field: &str, value: &str) -> Option<String> {
    match check(value) {
        Ok(()) => None,
        Err(Unfit::Nul) => Some(format!("\"{field}\" must not contain NUL")),
        Err(Unfit::TooLong { bytes }) => Some(format!(
            "\"{field}\" is {bytes} bytes; the limit is {MAX_ID_BYTES} bytes"
        )),
    }
}

/// An id for error messages: a fitting id whole (messages such as
/// `unknown build "<slug>"` quote it exactly), an over-long one cut at a
/// character boundary with its length, so a 10 MB path never echoes back.
pub fn shown(value: &str) -> String {
    const SHOWN: usize = 64;
    if value.len() <= MAX_ID_BYTES {
        return value.to_owned();
    }
    let mut end = SHOWN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_is_in_bytes_and_inclusive() {
        assert_eq!(check(&"a".repeat(MAX_ID_BYTES)), Ok(()));
        assert_eq!(
            check(&"a".repeat(MAX_ID_BYTES + 1)),
            Err(Unfit::TooLong {
                bytes: MAX_ID_BYTES + 1
            })
        );
        // 2-byte characters: 256 of them is exactly the bound.
        assert!(fits(&"é".repeat(MAX_ID_BYTES / 2)));
        assert!(!fits(&format!("{}a", "é".repeat(MAX_ID_BYTES / 2))));
    }

    #[test]
    fn nul_is_refused_anywhere() {
        for value in ["\0", "a\0", "\0a", "a\0b"] {
            assert_eq!(check(value), Err(Unfit::Nul), "{value:?}");
        }
        assert!(field_problem("slug", "a\0").is_some_and(|m| m.contains("\"slug\"")));
        assert_eq!(field_problem("slug", "ok"), None);
    }

    #[test]
    fn shown_cuts_at_a_character_boundary() {
        assert_eq!(shown("short"), "short");
        let fits = "a".repeat(MAX_ID_BYTES);
        assert_eq!(shown(&fits), fits);
        let long = "é".repeat(MAX_ID_BYTES);
        let cut = shown(&long);
        assert!(cut.starts_with(&"é".repeat(32)), "{cut}");
        assert!(
            cut.ends_with(&format!("({} bytes)", 2 * MAX_ID_BYTES)),
            "{cut}"
        );
    }
}
