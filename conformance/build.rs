//! Embeds the catalog fixtures (`fixtures/catalog/`, every catalog set's:
//! the default set's `<family>/<type>/*.json` and each other set's
//! `<set>/inherit.json` and `<set>/<family>/<type>/*.json`) into the runner:
//! writes `$OUT_DIR/catalog_fixtures.rs`, a sorted table of
//! `(path relative to fixtures/catalog, include_str!(…))`, so the binary runs
//! against any server without the checkout. `--catalog-fixtures DIR` can still
//! point a run at another directory laid out the same way at runtime. Which
//! set a run uses is decided at runtime, by its client identity
//! (`src/fixtures.rs`).

use std::fmt::Write as _;
use std::path::Path;

/// Every fixture file under `dir`, as `/`-separated paths relative to `root`:
/// `valid-*.json`, `invalid-*.json` and `inherit.json`.
fn collect(root: &Path, dir: &Path, rows: &mut Vec<(String, String)>) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, rows);
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let fixture = name.ends_with(".json")
            && (name.starts_with("valid-")
                || name.starts_with("invalid-")
                || name == "inherit.json");
        if !fixture {
            continue;
        }
        let Ok(relative) = path.strip_prefix(root) else {
            continue;
        };
        let relative = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let absolute = path.canonicalize().unwrap_or(path);
        rows.push((relative, absolute.display().to_string()));
    }
}

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let root = Path::new(&manifest).join("../fixtures/catalog");
    let mut rows = Vec::new();
    collect(&root, &root, &mut rows);
    rows.sort();
    let mut out = String::from(
        "/// `(path relative to fixtures/catalog, contents)`, sorted.\n\
         pub const EMBEDDED: &[(&str, &str)] = &[\n",
    );
    for (relative, path) in &rows {
        let _ = writeln!(out, "    ({relative:?}, include_str!({path:?})),");
    }
    out.push_str("];\n");
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    if let Err(e) = std::fs::write(Path::new(&out_dir).join("catalog_fixtures.rs"), out) {
        panic!("writing catalog_fixtures.rs: {e}");
    }
}
