//! The command line as operators use it: `catalog check`, startup failures
//! that must be clear one-line errors, and `migrate`.

use std::process::Command;

fn abstore(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_abstore")).args(args).output().expect("run abstore");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn embedded_catalogs() -> String {
    format!("{}/catalog/catalogs", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn catalog_check_accepts_the_embedded_catalogs() {
    let (ok, stdout, stderr) = abstore(&["catalog", "check", &embedded_catalogs()]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("build.json: 54 event types"), "{stdout}");
    assert!(stdout.contains("is valid"), "{stdout}");
}

#[test]
fn catalog_check_rejects_a_broken_catalog_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["build.json", "repository.json", "session.json"] {
        std::fs::copy(format!("{}/{name}", embedded_catalogs()), dir.path().join(name)).unwrap();
    }
    let build = dir.path().join("build.json");
    let text = std::fs::read_to_string(&build).unwrap().replacen("\"actors\": [", "\"actors\": [\"robot\", ", 1);
    std::fs::write(&build, text).unwrap();
    let (ok, _, stderr) = abstore(&["catalog", "check", dir.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("unknown actor kind \"robot\""), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");

    // A server never starts with a catalog it cannot compile.
    let (ok, _, stderr) = abstore(&["serve", "--listen", "127.0.0.1:0", "--database", "sqlite::memory:", "--blobs", "memory://", "--catalog", dir.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("unknown actor kind \"robot\""), "{stderr}");
}

#[test]
fn unusable_settings_fail_with_one_clear_line() {
    let (ok, _, stderr) = abstore(&["serve", "--listen", "127.0.0.1:0", "--database", "mysql://db/x"]);
    assert!(!ok);
    assert!(stderr.contains("unsupported --database URL"), "{stderr}");
    let (ok, _, stderr) = abstore(&["serve", "--listen", "127.0.0.1:0", "--database", "sqlite::memory:", "--test-clock", "yesterday"]);
    assert!(!ok);
    assert!(stderr.contains("--test-clock \"yesterday\" is not an ISO-8601 UTC time"), "{stderr}");
    let (ok, _, stderr) = abstore(&["serve", "--listen", "127.0.0.1:0", "--database", "postgres://nobody:secret@127.0.0.1:1/none"]);
    assert!(!ok);
    assert!(!stderr.contains("secret"), "the password leaked: {stderr}");
}

#[test]
fn migrate_creates_a_usable_sqlite_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("data/abstore.db").display());
    let (ok, _, stderr) = abstore(&["migrate", "--database", &url]);
    assert!(ok, "{stderr}");
    assert!(dir.path().join("data/abstore.db").exists());
    // Applying again is a no-op.
    assert!(abstore(&["migrate", "--database", &url]).0);
}
