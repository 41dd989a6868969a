//! Ticket assets (protocol 3; docs/protocol-versions.md, "Ticket assets"):
//! named, revisioned bundles of files attached to a ticket, keyed by
//! `(repo, ticketId, kind, name)`. Pure vocabulary, no I/O:
//!
//! - [`limits`]: the per-revision limits, lowered by a deployment request
//!   ceiling, and the `{human}` rendering of a byte count.
//! - [`validate`]: the put validation (the 18 checks, in Autobuild's order,
//!   with its messages) and the label rule reads share.
//! - the messages of the response-ceiling `413`s, here so that the store's
//!   check (put, remove) and the handlers' (reads) say the same thing.

pub mod limits;
pub mod validate;

pub use limits::{Limits, human_bytes};

/// `"file"` (one top-level file) or `"tree"` (any entries, even none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    File,
    Tree,
}

impl Layout {
    pub fn parse(text: &str) -> Option<Layout> {
        match text {
            "file" => Some(Layout::File),
            "tree" => Some(Layout::Tree),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Layout::File => "file",
            Layout::Tree => "tree",
        }
    }
}

/// The `413` of a manifest (a put's answer, a removal's, a manifest read)
/// whose JSON would exceed the deployment ceiling.
pub fn manifest_over_ceiling(kind: &str, name: &str, bytes: usize, ceiling: usize) -> String {
    format!(
        "ticket asset {kind}/{name} manifest is {bytes} bytes, over the {ceiling}-byte response ceiling"
    )
}

/// The `413` of one file whose `{"contentBase64"}` answer would exceed the
/// ceiling: stored under a higher ceiling, it can only be fetched from a
/// store that has one.
pub fn file_over_ceiling(path: &str, size: u64, ceiling: usize) -> String {
    format!(
        "ticket asset file \"{path}\" ({size} bytes) exceeds the {ceiling}-byte response ceiling; \
         fetch it from a store with a higher ceiling"
    )
}

/// The `413` of a list answer over the ceiling.
pub fn list_over_ceiling(ticket_id: &str, bytes: usize, ceiling: usize) -> String {
    format!(
        "ticket asset list of ticket \"{ticket_id}\" is {bytes} bytes, over the {ceiling}-byte response ceiling"
    )
}

/// The `413` of a ticket-asset request body over the ceiling.
pub fn request_over_ceiling(ceiling: usize) -> String {
    format!("ticket asset request body exceeds the deployment request ceiling {ceiling} bytes")
}

/// The exact length of `{"contentBase64":"…"}` for a file of `size` bytes
/// (padded base64: four characters per started three bytes).
pub fn file_answer_len(size: u64) -> u64 {
    const WRAPPER: u64 = r#"{"contentBase64":""}"#.len() as u64;
    WRAPPER + size.div_ceil(3) * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_answer_is_its_base64_in_a_fixed_wrapper() {
        for size in [0u64, 1, 2, 3, 4, 5, 1024] {
            let bytes = vec![0u8; size as usize];
            let answer =
                serde_json::json!({"contentBase64": crate::protocol::base64::encode(&bytes)})
                    .to_string();
            assert_eq!(file_answer_len(size), answer.len() as u64, "{size}");
        }
    }

    #[test]
    fn ceiling_messages_name_what_the_protocol_requires() {
        let m = manifest_over_ceiling("design", "home", 5000, 4096);
        assert!(m.contains("design/home manifest"), "{m}");
        assert!(m.contains("4096-byte response ceiling"), "{m}");
        let f = file_over_ceiling("img/a.png", 3_000_000, 4_194_304);
        for part in [
            "img/a.png",
            "3000000 bytes",
            "4194304-byte",
            "higher ceiling",
        ] {
            assert!(f.contains(part), "{f}");
        }
        assert!(request_over_ceiling(10).contains("deployment request ceiling 10 bytes"));
    }
}
