//! The catalogs an imported event must pass (docs/decisions.md, 25): the
//! event write routes judge every event by the catalogs of the client that
//! sends it, so an imported event is carried only if a client abstore
//! serves could have written it. With `--catalog-for VERSION/PROTOCOL`,
//! that client's catalogs; without it, those of any client identity in
//! abstore's embedded index (a store kept for long holds the history of
//! several Autobuild versions). The payload is kept as stored; one the
//! accepting catalog would normalise differently is noted.

use anyhow::{Context as _, anyhow};
use serde_json::Value;

/// The catalog sets an event is judged by, and what to call them.
pub struct EventCatalogs {
    /// `0.8.0/2`, or the list of every known identity.
    pub name: String,
    sets: Vec<abstore_catalog::Catalogs>,
}

/// How the catalogs judged an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    /// Accepted, but the catalog's normalisation (defaults, trims) would
    /// store another payload than the one kept.
    Normalised,
}

impl EventCatalogs {
    /// The embedded catalogs of `identity` (`VERSION/PROTOCOL`), or of
    /// every identity the embedded index names.
    pub fn embedded(identity: Option<&str>) -> anyhow::Result<EventCatalogs> {
        let index = abstore_catalog::VersionedCatalogs::embedded()
            .context("compiling the embedded catalogs")?;
        let identities: Vec<String> = index
            .identities()
            .map(|(v, p)| format!("{v}/{p}"))
            .collect();
        let Some(identity) = identity else {
            // The default set first: its message explains a refusal.
            let mut names: Vec<&str> = vec![index.default_set()];
            names.extend(index.sets().filter(|s| *s != index.default_set()));
            let sets = names
                .into_iter()
                .filter_map(|name| index.set(name).cloned())
                .collect();
            return Ok(EventCatalogs {
                name: format!("any client abstore serves ({})", identities.join(", ")),
                sets,
            });
        };
        let parsed: crate::protocol::clients::ClientIdentity = identity
            .parse()
            .map_err(|why: String| anyhow!("--catalog-for: {why}"))?;
        let catalogs = index
            .for_identity(&parsed.version, parsed.protocol.as_str())
            .ok_or_else(|| {
                anyhow!(
                    "--catalog-for {parsed}: the embedded catalogs have no set for it (known: {})",
                    identities.join(", ")
                )
            })?;
        Ok(EventCatalogs {
            name: parsed.to_string(),
            sets: vec![catalogs.clone()],
        })
    }

    /// Whether some set accepts the event; the first set's refusal when
    /// none does.
    pub fn check(
        &self,
        family: abstore_catalog::Family,
        actor: &Value,
        event_type: &str,
        payload: &Value,
    ) -> Result<Verdict, String> {
        let mut refusal = None;
        for catalogs in &self.sets {
            match catalogs.validate(family, actor, event_type, payload) {
                Ok(validated) if *validated == *payload => return Ok(Verdict::Accepted),
                Ok(_) => return Ok(Verdict::Normalised),
                Err(err) => {
                    refusal.get_or_insert(err.message);
                }
            }
        }
        Err(refusal.unwrap_or_else(|| "no catalog to judge it by".to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn any_known_client_or_the_one_named() {
        let any = EventCatalogs::embedded(None).unwrap();
        assert!(
            any.name.contains("0.8.0/2") && any.name.contains("0.9.0/3"),
            "{}",
            any.name
        );
        let created = json!({"ticket": {"source": "linear", "id": "A-1"}, "repo": "/r", "baseBranch": "main"});
        let dispatcher = json!({"kind": "dispatcher"});
        let build = abstore_catalog::Family::Build;
        assert_eq!(
            any.check(build, &dispatcher, "build.created", &created),
            Ok(Verdict::Accepted)
        );
        assert!(
            any.check(build, &dispatcher, "note.weird", &json!({}))
                .is_err()
        );
        let one = EventCatalogs::embedded(Some("0.8.0/2")).unwrap();
        assert_eq!(one.name, "0.8.0/2");
        assert!(EventCatalogs::embedded(Some("0.1.0/2")).is_err());
    }
}
