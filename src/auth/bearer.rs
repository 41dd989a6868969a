//! The `Authorization: Bearer <token>` header (spec section 7).

/// No usable bearer credential: `401 auth` with this message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("missing bearer token")]
pub struct Unauthenticated;

/// Extract the token from an `Authorization` header value.
///
/// Mirrors the reference server's `/^Bearer\s+(.+)$/i`: the scheme is matched
/// case-insensitively and must be followed by whitespace and a nonempty
/// credential. A missing header, another scheme (`Basic …`), or a bare
/// `Bearer` are all the same "missing bearer token". Surrounding whitespace
/// is trimmed; whether the rest is a token is [`super::verify`]'s call.
pub fn bearer(header: Option<&str>) -> Result<&str, Unauthenticated> {
    const SCHEME: &str = "bearer";
    let value = header.ok_or(Unauthenticated)?.trim_start();
    let scheme = value.get(..SCHEME.len()).ok_or(Unauthenticated)?;
    if !scheme.eq_ignore_ascii_case(SCHEME) {
        return Err(Unauthenticated);
    }
    let rest = &value[SCHEME.len()..];
    let token = rest.trim_start();
    if token.len() == rest.len() {
        // No separator: `Bearerabc` is another scheme.
        return Err(Unauthenticated);
    }
    let token = token.trim_end();
    if token.is_empty() {
        Err(Unauthenticated)
    } else {
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_bearer_in_any_case() {
        for (header, token) in [
            ("Bearer abc.def", "abc.def"),
            ("bearer abc.def", "abc.def"),
            ("BEARER abc.def", "abc.def"),
            ("BeArEr \t abc.def ", "abc.def"),
            ("Bearer a b", "a b"),
        ] {
            assert_eq!(bearer(Some(header)), Ok(token), "{header:?}");
        }
    }

    #[test]
    fn everything_else_is_missing() {
        for header in [
            None,
            Some(""),
            Some("Bearer"),
            Some("Bearer "),
            Some("Bearer   \t"),
            Some("Bearerabc"),
            Some("Basic YWxhZGRpbjpvcGVuc2VzYW1l"),
            Some("Token abc"),
            Some("abc.def"),
            Some("Bear"),
            Some("é"),
        ] {
            assert_eq!(bearer(header), Err(Unauthenticated), "{header:?}");
        }
        assert_eq!(Unauthenticated.to_string(), "missing bearer token");
    }
}
