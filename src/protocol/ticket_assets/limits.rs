//! The per-revision limits of ticket assets and how a deployment request
//! ceiling lowers them (the formula Autobuild's client and servers share).

use serde_json::{Map, Value};

/// Total file bytes per revision without a ceiling (25 MiB).
pub const MAX_BYTES: u64 = 25 * 1024 * 1024;
/// Files plus directories per revision.
pub const MAX_ENTRIES: usize = 1000;
/// UTF-8 bytes per entry path.
pub const MAX_PATH_BYTES: usize = 256;
/// UTF-8 bytes per path segment.
pub const MAX_SEGMENT_BYTES: usize = 128;
/// Kind and name length, in UTF-16 code units (JavaScript's `length`).
pub const MAX_LABEL_UNITS: usize = 64;

/// The worst-case JSON of a put request besides its base64 content: an
/// envelope, and per entry a longest path plus keys, quotes and padding.
const WIRE_OVERHEAD: u64 = 1024 + MAX_ENTRIES as u64 * (MAX_PATH_BYTES as u64 + 64);

/// The limits a store advertises (`GET …/ticket-asset-limits`) and enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Total decoded file bytes of one revision.
    pub max_bytes: u64,
    /// Files plus directories of one revision.
    pub max_entries: usize,
    /// The deployment ceiling on every ticket-asset request and response
    /// body, when there is one.
    pub max_request_bytes: Option<u64>,
}

impl Limits {
    /// The effective limits under `ceiling`: the defaults without one;
    /// with one, the file bytes whose base64 still fits beside the
    /// worst-case overhead, `min(25 MiB, max(0, ⌊(ceiling − 321024) × 3/4⌋))`.
    pub fn effective(ceiling: Option<u64>) -> Limits {
        let max_bytes = match ceiling {
            None => MAX_BYTES,
            Some(ceiling) => {
                let room = u128::from(ceiling.saturating_sub(WIRE_OVERHEAD));
                u64::try_from(room * 3 / 4)
                    .unwrap_or(u64::MAX)
                    .min(MAX_BYTES)
            }
        };
        Limits {
            max_bytes,
            max_entries: MAX_ENTRIES,
            max_request_bytes: ceiling,
        }
    }

    /// The limits route's answer: `maxRequestBytes` only with a ceiling.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("maxBytes".into(), self.max_bytes.into());
        out.insert("maxEntries".into(), self.max_entries.into());
        if let Some(ceiling) = self.max_request_bytes {
            out.insert("maxRequestBytes".into(), ceiling.into());
        }
        Value::Object(out)
    }
}

/// A byte count as Autobuild's messages render it: a whole number of MiB as
/// `25 MiB`; other values of at least 1 MiB with one decimal, rounded half
/// up as JavaScript's `toFixed` rounds the exact quotient (`2.8 MiB`); a
/// multiple of 1024 below that as `N KiB`; otherwise `N bytes`.
pub fn human_bytes(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        let tenths = (u128::from(bytes) * 10 + u128::from(MIB / 2)) / u128::from(MIB);
        format!("{}.{} MiB", tenths / 10, tenths % 10)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_lowers_the_byte_limit_by_the_shared_formula() {
        assert_eq!(
            Limits::effective(None),
            Limits {
                max_bytes: 26_214_400,
                max_entries: 1000,
                max_request_bytes: None
            }
        );
        // The hosted service's 4 MiB.
        assert_eq!(Limits::effective(Some(4_194_304)).max_bytes, 2_904_960);
        // abstore's default body limit, 16 MiB.
        assert_eq!(Limits::effective(Some(16_777_216)).max_bytes, 12_342_144);
        // At and below the overhead nothing fits; far above, the default caps it.
        assert_eq!(Limits::effective(Some(321_024)).max_bytes, 0);
        assert_eq!(Limits::effective(Some(0)).max_bytes, 0);
        assert_eq!(Limits::effective(Some(321_025)).max_bytes, 0);
        assert_eq!(Limits::effective(Some(321_028)).max_bytes, 3);
        assert_eq!(Limits::effective(Some(u64::MAX)).max_bytes, 26_214_400);
        assert_eq!(Limits::effective(Some(7)).max_entries, 1000);
    }

    #[test]
    fn the_limits_answer_has_max_request_bytes_only_with_a_ceiling() {
        assert_eq!(
            Limits::effective(None).to_json().to_string(),
            r#"{"maxBytes":26214400,"maxEntries":1000}"#
        );
        assert_eq!(
            Limits::effective(Some(4_194_304)).to_json().to_string(),
            r#"{"maxBytes":2904960,"maxEntries":1000,"maxRequestBytes":4194304}"#
        );
    }

    #[test]
    fn byte_counts_render_as_autobuild_renders_them() {
        for (bytes, text) in [
            (26_214_400, "25 MiB"),
            (1_048_576, "1 MiB"),
            (2_904_960, "2.8 MiB"),
            (12_342_144, "11.8 MiB"),
            // An exact half rounds up, as JavaScript's toFixed does.
            (1_310_720, "1.3 MiB"),
            (1_048_577, "1.0 MiB"),
            (2_097_151, "2.0 MiB"),
            (1_047_552, "1023 KiB"),
            (1024, "1 KiB"),
            (1025, "1025 bytes"),
            (1023, "1023 bytes"),
            (0, "0 bytes"),
        ] {
            assert_eq!(human_bytes(bytes), text, "{bytes}");
        }
    }
}
