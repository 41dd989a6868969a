//! The event catalogs as data (sections 2 and 9): every fixture in
//! `fixtures/catalog/{build,repository,session}/<type>/` sent over HTTP to a fresh
//! build, repository or operator session. `valid-*.json` must append (201, the envelope echoing
//! the write); `invalid-*.json` must be a 422 whose message contains the
//! fixture's `expect`, appending nothing. One check per type directory, named
//! `s9.fixtures.<family>.<type>`; the files of one directory go in sequence.
//!
//! In authenticated mode a human actor with a `via` is written with a token
//! carrying that `via` (section 7); a malformed one cannot be carried, so the
//! write is a 403 before the catalog.

use std::collections::BTreeMap;

use super::{CheckResult, Failure, Registry};
use crate::client::{Ctx, Res, same};
use crate::ensure;
use crate::fixtures::{CatalogFixture, catalog_fixtures};

pub fn register(r: &mut Registry) {
    let mut groups: BTreeMap<(String, String), Vec<CatalogFixture>> = BTreeMap::new();
    for f in catalog_fixtures() {
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
}

/// `res` is `None` for the session family: the fixtures go to a fresh
/// operator session, whose `session.created` is sequence 1.
async fn run_dir(c: Ctx, res: Option<Res>, fixtures: Vec<CatalogFixture>) -> CheckResult {
    let (id, path) = match res {
        Some(res) => {
            let id = c.create(res).await?;
            let path = format!("{}/events", res.path(&id));
            (id, path)
        }
        None => {
            let (_, id) = super::sessions::new_session(&c).await?;
            let path = format!("{}/events", super::sessions::session_path(&id));
            (id, path)
        }
    };
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
        for key in ["actor", "type", "payload"] {
            same(&format!("envelope {key}"), &env[key], &f.event[key])?;
        }
        Ok(true)
    } else {
        let msg = r.e422()?;
        if let Some(expect) = &f.expect {
            ensure!(
                msg.contains(expect.as_str()),
                "{}",
                r.fail(format!("422 with error containing {expect:?}"))
            );
        }
        Ok(false)
    }
}
