//! Embeds the catalog fixtures (`fixtures/catalog/{build,repository}/<type>/*.json`)
//! into the runner: writes `$OUT_DIR/catalog_fixtures.rs`, a sorted table of
//! `(family, type directory, file name, include_str!(…))`, so the binary runs
//! against any server without the checkout. `--catalog-fixtures DIR` can still
//! point a run at another catalog's fixtures at runtime.

use std::fmt::Write as _;
use std::path::Path;

const FAMILIES: [&str; 3] = ["build", "repository", "session"];

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let root = Path::new(&manifest).join("../fixtures/catalog");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut rows = Vec::new();
    for family in FAMILIES {
        let dir = root.join(family);
        println!("cargo:rerun-if-changed={}", dir.display());
        let Ok(types) = std::fs::read_dir(&dir) else {
            continue;
        };
        for ty in types.flatten() {
            if !ty.path().is_dir() {
                continue;
            }
            println!("cargo:rerun-if-changed={}", ty.path().display());
            let Ok(files) = std::fs::read_dir(ty.path()) else {
                continue;
            };
            for f in files.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if name.ends_with(".json")
                    && (name.starts_with("valid-") || name.starts_with("invalid-"))
                {
                    let path = f.path().canonicalize().unwrap_or(f.path());
                    rows.push((
                        family.to_string(),
                        ty.file_name().to_string_lossy().into_owned(),
                        name,
                        path.display().to_string(),
                    ));
                }
            }
        }
    }
    rows.sort();
    let mut out = String::from(
        "/// `(family, type directory, file name, contents)`, sorted.\n\
         pub const EMBEDDED: &[(&str, &str, &str, &str)] = &[\n",
    );
    for (family, ty, name, path) in &rows {
        let _ = writeln!(
            out,
            "    ({family:?}, {ty:?}, {name:?}, include_str!({path:?})),"
        );
    }
    out.push_str("];\n");
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    if let Err(e) = std::fs::write(Path::new(&out_dir).join("catalog_fixtures.rs"), out) {
        panic!("writing catalog_fixtures.rs: {e}");
    }
}
