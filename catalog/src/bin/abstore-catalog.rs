//! `abstore-catalog normalize [--autobuild VERSION]`: runs the embedded
//! catalogs' validator (the default set's, or the set of Autobuild release
//! VERSION) over event writes read from stdin, one JSON object per line
//! (`{"family": "build", "actor": …, "type": …, "payload": …}`), and prints one
//! line per write: `{"ok": <validated payload>}` or `{"error": "<422 message>"}`.
//!
//! It exists so tools outside Rust — the catalog drift check
//! (`conformance/autobuild/drift.mjs`) — can compare abstore's validated
//! payloads with Autobuild's without starting a server.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use abstore_catalog::{Catalogs, Family};
use serde_json::{Value, json};

fn family(name: &str) -> Option<Family> {
    Family::ALL
        .into_iter()
        .find(|family| family.as_str() == name)
}

fn answer(catalogs: &Catalogs, line: &str) -> Value {
    let write: Value = match serde_json::from_str(line) {
        Ok(write) => write,
        Err(error) => return json!({"error": format!("input line is not JSON: {error}")}),
    };
    let Some(family) = write["family"].as_str().and_then(family) else {
        return json!({"error": "input \"family\" must be build, repository or session"});
    };
    let Some(event_type) = write["type"].as_str() else {
        return json!({"error": "input \"type\" must be a string"});
    };
    match catalogs.validate(family, &write["actor"], event_type, &write["payload"]) {
        Ok(payload) => json!({"ok": payload}),
        Err(error) => json!({"error": error.message}),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let version = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["normalize"] => None,
        ["normalize", "--autobuild", version] => Some(version.to_owned()),
        _ => {
            eprintln!("usage: abstore-catalog normalize [--autobuild VERSION] < writes.jsonl");
            return ExitCode::from(2);
        }
    };
    let loaded = match &version {
        None => Catalogs::embedded(),
        Some(version) => Catalogs::embedded_for(version),
    };
    let catalogs = match loaded {
        Ok(catalogs) => catalogs,
        Err(error) => {
            eprintln!("abstore-catalog: {error}");
            return ExitCode::FAILURE;
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines() {
        let line = match line {
            Ok(line) => line,
            Err(error) => {
                eprintln!("abstore-catalog: reading stdin: {error}");
                return ExitCode::FAILURE;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        if writeln!(out, "{}", answer(&catalogs, &line)).is_err() {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
