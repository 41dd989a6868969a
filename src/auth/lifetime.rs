//! The longest lifetime a server accepts (`--max-token-lifetime`), and the
//! one parser of a duration (`--ttl`, `--max-token-lifetime`).
//!
//! Tokens carry no issued-at (the scope JSON is strict, and Autobuild mints
//! them), so a lifetime cannot be measured from issue. What a server can
//! bound is how far in the future a token's `exp` lies: a token whose `exp`
//! is more than the maximum beyond the server's now is refused, whatever
//! its signature. A leaked token then stays usable for at most that long
//! (or until revoked), even if it was minted to last for years.

/// `--max-token-lifetime`: how far beyond now a token's `exp` may lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxLifetime(Option<i64>);

impl MaxLifetime {
    /// 90 days: a service token minted once a quarter fits, and a leaked
    /// one is usable for at most a quarter.
    pub const DEFAULT: MaxLifetime = MaxLifetime(Some(90 * DAY_MS));

    /// No bound (`none` or `0`).
    pub const UNLIMITED: MaxLifetime = MaxLifetime(None);

    /// The bound in milliseconds; `None`: unlimited.
    pub fn millis(self) -> Option<i64> {
        self.0
    }

    /// Whether a token expiring at `exp` is within the bound at `now_ms`.
    pub fn admits(self, exp: i64, now_ms: i64) -> bool {
        self.0.is_none_or(|max| exp.saturating_sub(now_ms) <= max)
    }

    /// What a client is told of a token this bound refused at `now_ms`.
    /// Unlike the other refusals this one says why: it is checked only once
    /// the signature verified, so its holder learns nothing a forger could
    /// use, while an operator moving tokens minted for years (Autobuild's
    /// own tool sets no cap) must learn that they are not expired.
    pub fn refusal(self, exp: i64, now_ms: i64) -> String {
        format!(
            "token lifetime too long: it expires in {} (more than this server's \
             --max-token-lifetime of {self}); mint a token that expires sooner, or raise \
             --max-token-lifetime (ABSTORE_MAX_TOKEN_LIFETIME)",
            whole_units(exp.saturating_sub(now_ms))
        )
    }
}

/// `ms` in the largest unit it fills at least once, rounded down (`400d`,
/// `2h`, `1500ms` as `1s`): how far off an `exp` is, for a person.
fn whole_units(ms: i64) -> String {
    let (unit, factor) = UNITS
        .iter()
        .rev()
        .find(|(_, factor)| ms >= *factor)
        .unwrap_or(&UNITS[0]);
    format!("{}{unit}", ms / factor)
}

impl std::str::FromStr for MaxLifetime {
    type Err = String;

    fn from_str(text: &str) -> Result<MaxLifetime, String> {
        match text.trim() {
            "none" | "0" => Ok(MaxLifetime::UNLIMITED),
            text => match parse_duration_ms(text)? {
                0 => Ok(MaxLifetime::UNLIMITED),
                ms => Ok(MaxLifetime(Some(ms))),
            },
        }
    }
}

/// `90d`, `12h`, `1500ms`: the largest unit that says it exactly; `none`.
impl std::fmt::Display for MaxLifetime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(ms) = self.0 else {
            return f.write_str("none");
        };
        let unit = UNITS
            .iter()
            .rev()
            .find(|(_, factor)| ms % factor == 0)
            .unwrap_or(&UNITS[0]);
        write!(f, "{}{}", ms / unit.1, unit.0)
    }
}

const DAY_MS: i64 = 86_400_000;

/// The units a duration may take, smallest first.
const UNITS: [(&str, i64); 5] = [
    ("ms", 1),
    ("s", 1000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", DAY_MS),
];

/// `30s`, `15m`, `1h`, `7d`, `500ms` → milliseconds: digits, then one unit.
pub fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a number with a unit such as 1h"))?;
    let factor = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, factor)| *factor)
        .ok_or_else(|| format!("{text:?}: the unit must be ms, s, m, h or d"))?;
    n.checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_how_far_off_and_name_the_bound() {
        let text = MaxLifetime::DEFAULT.refusal(400 * DAY_MS + 5, 0);
        assert!(text.contains("expires in 400d"), "{text}");
        assert!(text.contains("--max-token-lifetime of 90d"), "{text}");
        let text = MaxLifetime(Some(3_600_000)).refusal(7_200_001, 1);
        assert!(text.contains("expires in 2h"), "{text}");
        assert_eq!(whole_units(1500), "1s");
        assert_eq!(whole_units(999), "999ms");
        assert_eq!(whole_units(i64::MAX), format!("{}d", i64::MAX / DAY_MS));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("1h"), Ok(3_600_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("7d"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("0s"), Ok(0));
        for bad in [
            "",
            "h",
            "1",
            "1w",
            "-1h",
            "1.5h",
            "1 h",
            "99999999999999999d",
        ] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lifetimes_parse_and_print() {
        assert_eq!("90d".parse(), Ok(MaxLifetime::DEFAULT));
        assert_eq!(MaxLifetime::DEFAULT.to_string(), "90d");
        for unlimited in ["none", "0", "0d", "0ms"] {
            assert_eq!(unlimited.parse(), Ok(MaxLifetime::UNLIMITED), "{unlimited}");
        }
        assert_eq!(MaxLifetime::UNLIMITED.to_string(), "none");
        let odd: MaxLifetime = "90m".parse().unwrap();
        assert_eq!(odd.to_string(), "90m");
        assert_eq!(odd.millis(), Some(5_400_000));
        let ms: MaxLifetime = "1500ms".parse().unwrap();
        assert_eq!(ms.to_string(), "1500ms");
        assert!("forever".parse::<MaxLifetime>().is_err());
        assert!("-1d".parse::<MaxLifetime>().is_err());
    }

    #[test]
    fn the_bound_is_inclusive() {
        let max: MaxLifetime = "1h".parse().unwrap();
        let now = 1_784_116_800_000;
        assert!(max.admits(now + 3_600_000, now));
        assert!(!max.admits(now + 3_600_001, now));
        assert!(
            max.admits(now - 5, now),
            "expiry is another check's business"
        );
        assert!(!max.admits(i64::MAX, now));
        assert!(max.admits(i64::MAX, i64::MAX));
        assert!(MaxLifetime::UNLIMITED.admits(i64::MAX, i64::MIN));
        assert!(max.admits(i64::MIN, i64::MAX), "no overflow");
    }
}
