//! The checks a ticket-asset put must pass before anything is stored, in
//! Autobuild's order; the first failure is the `422` message
//! (docs/protocol-versions.md, "Validation": the 18 rows).
//!
//! Lengths are counted as Autobuild counts them: labels in UTF-16 code units
//! (JavaScript's `length`), paths and segments in UTF-8 bytes, and a quoted
//! path prefix is its first 40 UTF-16 code units. Blank means blank to
//! JavaScript's `trim`.

use std::collections::HashMap;

use super::limits::{Limits, MAX_LABEL_UNITS, MAX_PATH_BYTES, MAX_SEGMENT_BYTES};
use super::{Layout, human_bytes};
use crate::protocol::numbers::is_js_whitespace;

/// A put request after its shape was checked (strings where strings belong,
/// every file's base64 decoded): what the checks read.
#[derive(Clone, Copy, Debug)]
pub struct PutInput<'a> {
    pub kind: &'a str,
    pub name: &'a str,
    pub layout: &'a str,
    pub entries: &'a [EntryInput<'a>],
}

/// One entry as sent: its `type` (any string), its `path`, and for a file
/// the number of bytes its content decoded to.
#[derive(Clone, Copy, Debug)]
pub struct EntryInput<'a> {
    pub entry_type: &'a str,
    pub path: &'a str,
    pub size: u64,
}

impl EntryInput<'_> {
    fn is_file(&self) -> bool {
        self.entry_type == "file"
    }
}

/// What passed: the layout and the total file bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Valid {
    pub layout: Layout,
    pub size: u64,
}

/// Run every check in order against `limits` (the effective ones); the
/// first failure's message.
pub fn validate(input: &PutInput<'_>, limits: &Limits) -> Result<Valid, String> {
    label("kind", input.kind)?;
    label("name", input.name)?;
    let layout = Layout::parse(input.layout)
        .ok_or_else(|| "ticket asset layout must be 'file' or 'tree'".to_owned())?;
    let entries = input.entries;
    if layout == Layout::File {
        let files = entries.iter().filter(|e| e.is_file()).count();
        if entries.len() != 1 || files != 1 {
            return Err(
                "a 'file' ticket asset has exactly one file entry and no directories".into(),
            );
        }
        if entries[0].path.contains('/') {
            return Err("a 'file' ticket asset's path is its filename".into());
        }
    }
    if entries.len() > limits.max_entries {
        return Err(format!(
            "ticket asset exceeds the {}-entry limit: {} entries (files plus directories)",
            limits.max_entries,
            entries.len()
        ));
    }
    let mut kinds: HashMap<&str, bool> = HashMap::with_capacity(entries.len());
    let mut size: u64 = 0;
    for entry in entries {
        if !matches!(entry.entry_type, "file" | "dir") {
            return Err("ticket asset entry type must be 'file' or 'dir'".into());
        }
        path(entry.path)?;
        if kinds.insert(entry.path, entry.is_file()).is_some() {
            return Err(format!(
                "duplicate ticket asset entry path \"{}\"",
                entry.path
            ));
        }
        if entry.is_file() {
            size = size.saturating_add(entry.size);
        }
    }
    // Every path (in request order, each once) against its ancestors,
    // nearest the root first.
    for entry in entries {
        for (at, _) in entry.path.match_indices('/') {
            let ancestor = &entry.path[..at];
            if kinds.get(ancestor) == Some(&true) {
                return Err(format!(
                    "ticket asset entry \"{}\" has a file as its ancestor directory \"{ancestor}\"",
                    entry.path
                ));
            }
        }
    }
    if size > limits.max_bytes {
        return Err(format!(
            "ticket asset exceeds the {}-byte ({}) limit: {size} bytes",
            limits.max_bytes,
            human_bytes(limits.max_bytes)
        ));
    }
    Ok(Valid { layout, size })
}

/// Rows 1–3 for one label (`kind` or `name`).
fn label(field: &str, value: &str) -> Result<(), String> {
    if value.trim_matches(is_js_whitespace).is_empty() {
        return Err(format!("ticket asset {field} is required"));
    }
    if value.encode_utf16().count() > MAX_LABEL_UNITS {
        return Err(format!(
            "ticket asset {field} must be at most {MAX_LABEL_UNITS} characters"
        ));
    }
    if !is_label(value) {
        return Err(format!(
            "ticket asset {field} \"{value}\" may contain only letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Whether `value` passes the label rule: a kind or name that does not
/// could never have been stored, so a read naming it finds nothing.
pub fn is_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_LABEL_UNITS
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && value != "."
        && value != ".."
}

/// Rows 9–15 for one entry path.
fn path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("ticket asset entry path is required".into());
    }
    if path.contains('\0') {
        return Err(format!(
            "ticket asset entry path \"{path}\" contains a NUL byte"
        ));
    }
    if path.contains('\\') {
        return Err(format!(
            "ticket asset entry path \"{path}\" must use '/' separators"
        ));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!(
            "ticket asset entry path exceeds {MAX_PATH_BYTES} bytes: \"{}…\"",
            prefix40(path)
        ));
    }
    if path.starts_with('/') {
        return Err(format!(
            "ticket asset entry path \"{path}\" must be relative"
        ));
    }
    for segment in path.split('/') {
        if matches!(segment, "" | "." | "..") {
            return Err(format!(
                "ticket asset entry path \"{path}\" has an empty, '.' or '..' segment"
            ));
        }
        if segment.len() > MAX_SEGMENT_BYTES {
            return Err(format!(
                "ticket asset entry path segment exceeds {MAX_SEGMENT_BYTES} bytes in \"{}…\"",
                prefix40(path)
            ));
        }
    }
    Ok(())
}

/// The first 40 UTF-16 code units of `text`, as JavaScript's `slice(0, 40)`
/// takes them; a surrogate pair cut in half leaves U+FFFD, which is what a
/// client shows for the lone surrogate JavaScript would send.
fn prefix40(text: &str) -> String {
    let units: Vec<u16> = text.encode_utf16().take(40).collect();
    String::from_utf16_lossy(&units)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ticket_assets::limits::MAX_BYTES;

    fn file<'a>(path: &'a str, size: u64) -> EntryInput<'a> {
        EntryInput {
            entry_type: "file",
            path,
            size,
        }
    }

    fn dir(path: &str) -> EntryInput<'_> {
        EntryInput {
            entry_type: "dir",
            path,
            size: 0,
        }
    }

    fn check(
        kind: &str,
        name: &str,
        layout: &str,
        entries: &[EntryInput<'_>],
    ) -> Result<Valid, String> {
        let input = PutInput {
            kind,
            name,
            layout,
            entries,
        };
        validate(&input, &Limits::effective(None))
    }

    fn tree(entries: &[EntryInput<'_>]) -> String {
        check("design", "home", "tree", entries).unwrap_err()
    }

    #[test]
    fn valid_bundles_pass_with_their_size() {
        assert_eq!(
            check(
                "design",
                "home",
                "tree",
                &[file("index.html", 5), dir("img/empty")]
            ),
            Ok(Valid {
                layout: Layout::Tree,
                size: 5
            })
        );
        assert_eq!(
            check("d", "n", "tree", &[]).map(|v| v.size),
            Ok(0),
            "an empty tree"
        );
        assert!(check("a.B_c-9", "x", "file", &[file("f.png", 0)]).is_ok());
        // A directory may be explicit although a file below implies it.
        assert!(check("d", "n", "tree", &[file("a/b", 1), dir("a")]).is_ok());
        let max = MAX_BYTES;
        assert!(check("d", "n", "tree", &[file("a", max)]).is_ok());
    }

    #[test]
    fn labels_are_checked_kind_first_each_rule_in_order() {
        let err = |kind: &str, name: &str| check(kind, name, "bogus", &[]).unwrap_err();
        assert_eq!(err("", "x"), "ticket asset kind is required");
        assert_eq!(err(" \u{feff}\t", "x"), "ticket asset kind is required");
        // NEL is whitespace to Rust but not to JavaScript's trim.
        assert_eq!(
            err("\u{85}", "x"),
            "ticket asset kind \"\u{85}\" may contain only letters, digits, '.', '_' and '-'"
        );
        assert_eq!(err("x", "  "), "ticket asset name is required");
        // Kind's three rules come before any of name's.
        assert_eq!(
            err("a b", ""),
            "ticket asset kind \"a b\" may contain only letters, digits, '.', '_' and '-'"
        );
        assert_eq!(
            err(&"k".repeat(65), "x"),
            "ticket asset kind must be at most 64 characters"
        );
        assert!(check(&"k".repeat(64), "x", "tree", &[]).is_ok());
        // 32 emoji are 64 UTF-16 units (within the limit: then the character
        // rule), 33 are 66 (over it).
        assert_eq!(
            err("x", &"😀".repeat(32)),
            format!(
                "ticket asset name \"{}\" may contain only letters, digits, '.', '_' and '-'",
                "😀".repeat(32)
            )
        );
        assert_eq!(
            err("x", &"😀".repeat(33)),
            "ticket asset name must be at most 64 characters"
        );
        for dots in [".", ".."] {
            assert_eq!(
                err(dots, "x"),
                format!(
                    "ticket asset kind \"{dots}\" may contain only letters, digits, '.', '_' and '-'"
                )
            );
        }
        assert!(check("...", "x", "tree", &[]).is_ok());
        assert_eq!(
            err("x", "y"),
            "ticket asset layout must be 'file' or 'tree'"
        );
    }

    #[test]
    fn a_file_layout_is_one_top_level_file() {
        let file_err = |entries: &[EntryInput<'_>]| check("d", "n", "file", entries).unwrap_err();
        let one = "a 'file' ticket asset has exactly one file entry and no directories";
        assert_eq!(file_err(&[]), one);
        assert_eq!(file_err(&[dir("a")]), one);
        assert_eq!(file_err(&[file("a", 1), file("b", 1)]), one);
        assert_eq!(file_err(&[file("a", 1), dir("b")]), one);
        let bogus = EntryInput {
            entry_type: "link",
            path: "a",
            size: 0,
        };
        assert_eq!(file_err(&[bogus]), one);
        assert_eq!(
            file_err(&[file("a/b", 1)]),
            "a 'file' ticket asset's path is its filename"
        );
        // Row 6 only looks for '/'; the path rules come later.
        assert_eq!(
            file_err(&[file("", 1)]),
            "ticket asset entry path is required"
        );
    }

    #[test]
    fn entry_count_is_checked_before_any_entry() {
        let paths: Vec<String> = (0..1001).map(|i| format!("f{i}")).collect();
        let mut entries: Vec<EntryInput<'_>> = paths.iter().map(|p| dir(p)).collect();
        entries[0].entry_type = "bogus";
        assert_eq!(
            tree(&entries),
            "ticket asset exceeds the 1000-entry limit: 1001 entries (files plus directories)"
        );
        assert!(check("d", "n", "tree", &entries[1..]).is_ok());
    }

    #[test]
    fn each_entry_is_checked_in_order() {
        let bogus = EntryInput {
            entry_type: "symlink",
            path: "",
            size: 0,
        };
        assert_eq!(
            tree(&[file("ok", 1), bogus]),
            "ticket asset entry type must be 'file' or 'dir'"
        );
        assert_eq!(tree(&[dir("")]), "ticket asset entry path is required");
        assert_eq!(
            tree(&[dir("a\0b\\c")]),
            "ticket asset entry path \"a\0b\\c\" contains a NUL byte"
        );
        assert_eq!(
            tree(&[dir("/a\\b")]),
            "ticket asset entry path \"/a\\b\" must use '/' separators"
        );
        let long = format!("/{}", "é".repeat(128));
        assert_eq!(
            tree(&[dir(&long)]),
            format!(
                "ticket asset entry path exceeds 256 bytes: \"/{}…\"",
                "é".repeat(39)
            )
        );
        let exactly = "a/".repeat(127) + "bc";
        assert_eq!(exactly.len(), 256);
        assert!(check("d", "n", "tree", &[dir(&exactly)]).is_ok());
        assert_eq!(
            tree(&[dir("/a")]),
            "ticket asset entry path \"/a\" must be relative"
        );
        for bad in ["a//b", "a/./b", "a/..", "a/", "."] {
            assert_eq!(
                tree(&[dir(bad)]),
                format!("ticket asset entry path \"{bad}\" has an empty, '.' or '..' segment")
            );
        }
        let segment = "s".repeat(129);
        let long_segment = format!("a/{segment}/..");
        assert_eq!(
            tree(&[dir(&long_segment)]),
            format!(
                "ticket asset entry path segment exceeds 128 bytes in \"a/{}…\"",
                "s".repeat(38)
            )
        );
        // Segments are judged left to right: the empty one comes first here.
        let empty_first = format!("a//{segment}");
        assert!(tree(&[dir(&empty_first)]).contains("has an empty"));
        assert!(check("d", "n", "tree", &[dir(&"s".repeat(128))]).is_ok());
        assert_eq!(
            tree(&[file("a", 1), dir("a")]),
            "duplicate ticket asset entry path \"a\""
        );
    }

    #[test]
    fn the_path_prefix_counts_utf16_units() {
        // 39 ASCII characters, then an emoji whose pair straddles unit 40.
        let path = format!("{}😀{}", "a".repeat(39), "b".repeat(300));
        assert_eq!(
            tree(&[dir(&path)]),
            format!(
                "ticket asset entry path exceeds 256 bytes: \"{}\u{fffd}…\"",
                "a".repeat(39)
            )
        );
    }

    #[test]
    fn no_file_is_an_ancestor_and_the_check_follows_all_entries() {
        // A later entry's type error wins over an earlier ancestor problem:
        // ancestors are checked once every entry passed.
        let bogus = EntryInput {
            entry_type: "x",
            path: "z",
            size: 0,
        };
        assert_eq!(
            tree(&[dir("a/b"), file("a", 1), bogus]),
            "ticket asset entry type must be 'file' or 'dir'"
        );
        assert_eq!(
            tree(&[dir("a/b/c"), file("a/b", 1), file("a", 1)]),
            "ticket asset entry \"a/b/c\" has a file as its ancestor directory \"a\""
        );
        assert_eq!(
            tree(&[file("x", 1), dir("y/z"), file("y", 1)]),
            "ticket asset entry \"y/z\" has a file as its ancestor directory \"y\""
        );
    }

    #[test]
    fn the_byte_limit_is_last_and_names_the_effective_limit() {
        assert_eq!(
            tree(&[file("a", MAX_BYTES), file("b", 1)]),
            "ticket asset exceeds the 26214400-byte (25 MiB) limit: 26214401 bytes"
        );
        let input = PutInput {
            kind: "d",
            name: "n",
            layout: "tree",
            entries: &[file("a", 2_904_961)],
        };
        assert_eq!(
            validate(&input, &Limits::effective(Some(4_194_304))).unwrap_err(),
            "ticket asset exceeds the 2904960-byte (2.8 MiB) limit: 2904961 bytes"
        );
        // Directories have no bytes.
        assert!(check("d", "n", "tree", &[dir("a")]).is_ok());
    }
}
