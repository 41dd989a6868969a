//! The event catalogs as data (sections 2 and 9): every catalog fixture of
//! the catalog set the server serves the run's client identity
//! (`fixtures/catalog/{build,repository,session}/<type>/` for 0.8.0, with
//! `fixtures/catalog/<set>/` for another set) sent over HTTP to a fresh
//! build, repository or operator session. One check per type directory, named
//! `s9.fixtures.<family>.<type>`; the files of one directory go in sequence.
//!
//! What the spec requires, and so what `s9.fixtures.*` asserts:
//! - `valid-*.json` appends (201) and the envelope carries the *validated*
//!   payload (section 3): the fixture's `normalized` payload when it has one
//!   (Autobuild's validators fill defaults and trim strings), else the payload
//!   as sent; member order is not significant;
//! - `invalid-*.json` is a 422 whose message begins with the rule's prefix —
//!   the fixture's `expect` up to its first `": "` (`invalid payload for
//!   "x": `, `invalid actor for "x": `), or the whole `expect` when it has none
//!   (`actor kind "k" may not emit "t" (allowed: …)`) — and appends nothing.
//!   The detail after the prefix is each server's own (Autobuild writes zod's
//!   issue list there).
//!
//! `abstore.s9.fixture-details.<family>` additionally asserts abstore's own
//! detail wording (the whole `expect` fragment); `--strict-spec` skips it.
//!
//! In authenticated mode a human actor with a `via` is written with a token
//! carrying that `via` (section 7); a malformed one cannot be carried, so the
//! write is a 403 before the catalog.

use std::collections::BTreeMap;

use super::{CheckResult, Failure, Registry};
use crate::client::{Ctx, Res, same};
use crate::ensure;
use crate::fixtures::{CatalogFixture, catalog_fixtures_of};

pub fn register(r: &mut Registry) {
    let all = match catalog_fixtures_of(r.catalog_set()) {
        Ok(all) => all,
        Err(e) => {
            // A `--catalog-fixtures` directory without this set's fixtures:
            // one failing check says so instead of none passing silently.
            r.add("s9.fixtures", "9", move |_| {
                let e = e.clone();
                async move { Err(Failure::Fail(e)) }
            });
            return;
        }
    };
    let mut groups: BTreeMap<(String, String), Vec<CatalogFixture>> = BTreeMap::new();
    for f in all.iter().cloned() {
        groups
            .entry((f.family.clone(), f.dir.clone()))
            .or_default()
            .push(f);
    }
    for ((family, dir), fixtures) in groups {
        let res = match family.as_str() {
            "build" => Some(Res::Build),
            "repository" => Some(Res::Repo),
            _ => None,
        };
        r.add(format!("s9.fixtures.{family}.{dir}"), "9", move |c| {
            run_dir(c, res, fixtures.clone())
        });
    }
    for family in ["build", "repository", "session"] {
        let invalid: Vec<CatalogFixture> = all
            .iter()
            .filter(|f| f.family == family && !f.valid && f.expect.is_some())
            .cloned()
            .collect();
        if invalid.is_empty() {
            continue;
        }
        let res = match family {
            "build" => Some(Res::Build),
            "repository" => Some(Res::Repo),
            _ => None,
        };
        r.add(
            format!("abstore.s9.fixture-details.{family}"),
            "9",
            move |c| details(c, res, invalid.clone()),
        );
    }
}

/// The part of an `expect` fragment the spec fixes: up to and including the
/// first `": "`, or all of it.
fn rule_prefix(expect: &str) -> &str {
    match expect.find(": ") {
        Some(at) => &expect[..at + 2],
        None => expect,
    }
}

/// A fresh resource of the family and its events path.
async fn events_path(c: &Ctx, res: Option<Res>) -> Result<(String, String), Failure> {
    Ok(match res {
        Some(res) => {
            let id = c.create(res).await?;
            let path = format!("{}/events", res.path(&id));
            (id, path)
        }
        None => {
            let (_, id) = super::sessions::new_session(c).await?;
            let path = format!("{}/events", super::sessions::session_path(&id));
            (id, path)
        }
    })
}

/// abstore's wording: each invalid fixture's message contains its whole
/// `expect` fragment.
async fn details(c: Ctx, res: Option<Res>, fixtures: Vec<CatalogFixture>) -> CheckResult {
    let (_, path) = events_path(&c, res).await?;
    let mut errors = Vec::new();
    for f in &fixtures {
        let Some(w) = c.writer_for(&f.event)? else {
            continue;
        };
        let r = w.post(&path, &f.event).send().await?;
        let expect = f.expect.as_deref().unwrap_or_default();
        match r.e422() {
            Ok(msg) if msg.contains(expect) => {}
            Ok(msg) => errors.push(format!("{}/{}: {msg:?} lacks {expect:?}", f.dir, f.file)),
            Err(e) => errors.push(format!("{}/{}: {e}", f.dir, f.file)),
        }
    }
    ensure!(
        errors.is_empty(),
        "{} of {} messages differ:\n  {}",
        errors.len(),
        fixtures.len(),
        errors.join("\n  ")
    );
    Ok(())
}

/// `res` is `None` for the session family: the fixtures go to a fresh
/// operator session, whose `session.created` is sequence 1.
async fn run_dir(c: Ctx, res: Option<Res>, fixtures: Vec<CatalogFixture>) -> CheckResult {
    let (id, path) = events_path(&c, res).await?;
    let mut appended = 0usize;
    let mut errors = Vec::new();
    for f in &fixtures {
        match one(&c, &path, f).await {
            Ok(true) => appended += 1,
            Ok(false) => {}
            Err(Failure::Fail(e)) => errors.push(format!("{}: {e}", f.file)),
            Err(skip) => return Err(skip),
        }
    }
    ensure!(
        errors.is_empty(),
        "{} of {} fixtures disagree:\n  {}",
        errors.len(),
        fixtures.len(),
        errors.join("\n  ")
    );
    let n = match res {
        Some(res) => c.seqs(res, &id).await?.len(),
        None => super::sessions::session_events(&c, &id, "").await?.len() - 1,
    };
    ensure!(
        n == appended,
        "{appended} fixtures were accepted but the stream holds {n} events (a rejected write appended?)"
    );
    Ok(())
}

/// Sends one fixture; returns whether it appended.
async fn one(c: &Ctx, path: &str, f: &CatalogFixture) -> Result<bool, Failure> {
    ensure!(
        f.event.is_object(),
        "the fixture is not a JSON object event write"
    );
    let Some(w) = c.writer_for(&f.event)? else {
        c.post(path, &f.event).send().await?.error(403, "auth")?;
        return Ok(false);
    };
    let r = w.post(path, &f.event).send().await?;
    if f.valid {
        let env = r.json_status(201)?;
        for key in ["actor", "type"] {
            same(&format!("envelope {key}"), &env[key], &f.event[key])?;
        }
        // JSON objects compare without regard to member order.
        let validated = f.normalized.as_ref().unwrap_or(&f.event["payload"]);
        same(
            "envelope payload (the validated payload)",
            &env["payload"],
            validated,
        )?;
        Ok(true)
    } else {
        let msg = r.e422()?;
        if let Some(expect) = &f.expect {
            let prefix = rule_prefix(expect);
            let matches = if prefix.len() < expect.len() {
                msg.starts_with(prefix)
            } else {
                msg.contains(prefix)
            };
            ensure!(
                matches,
                "{}",
                r.fail(format!("422 with an error beginning {prefix:?}"))
            );
        }
        Ok(false)
    }
}
