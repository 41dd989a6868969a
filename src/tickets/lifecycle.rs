//! The ticket lifecycle and a request's team.
//!
//! As in Autobuild's database ticket source, a server has four distinct
//! configured states: triage, ready, doing and done (by default `Triage`,
//! `Ready`, `Doing`, `Done`; `--ticket-*-state`). Each request's context
//! names its team (`teamKey`) and may pick where a claim moves a ticket
//! (`claimedState`, default the doing state) and where a create files one
//! (`createState`, default the triage state); both must be configured
//! states, and every state written must be one. Done is the one resolved
//! state; a claim succeeds from any state but done and the claimed one.

use super::outcome::Refusal;
use crate::protocol::ident;

/// The default states, in lifecycle order.
pub const DEFAULT_STATES: [&str; 4] = ["Triage", "Ready", "Doing", "Done"];

/// The four configured states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    pub triage: String,
    pub ready: String,
    pub doing: String,
    pub done: String,
}

impl Default for Lifecycle {
    fn default() -> Self {
        let [triage, ready, doing, done] = DEFAULT_STATES.map(str::to_owned);
        Lifecycle {
            triage,
            ready,
            doing,
            done,
        }
    }
}

impl Lifecycle {
    /// The lifecycle of these states, or why they cannot be one: each must
    /// be nonblank and fit the identifier rule (it is stored in a column of
    /// its own), and the four must be distinct.
    pub fn new(triage: &str, ready: &str, doing: &str, done: &str) -> Result<Lifecycle, String> {
        let states = [
            ("triage", triage),
            ("ready", ready),
            ("doing", doing),
            ("done", done),
        ];
        for (at, (name, state)) in states.iter().enumerate() {
            if super::text::is_blank(state) {
                return Err(format!("the {name} state must be nonblank"));
            }
            if let Some(problem) = ident::field_problem(&format!("{name} state"), state) {
                return Err(problem);
            }
            if let Some((other, _)) = states[..at].iter().find(|(_, s)| s == state) {
                return Err(format!(
                    "the ticket states must be distinct: \"{state}\" is both the {other} and the {name} state"
                ));
            }
        }
        Ok(Lifecycle {
            triage: triage.to_owned(),
            ready: ready.to_owned(),
            doing: doing.to_owned(),
            done: done.to_owned(),
        })
    }

    /// The four states, in lifecycle order.
    pub fn states(&self) -> [&str; 4] {
        [&self.triage, &self.ready, &self.doing, &self.done]
    }

    /// `Refusal::Invalid` naming the configured states unless `state` is one.
    pub fn require(&self, state: &str) -> Result<(), Refusal> {
        if self.states().contains(&state) {
            return Ok(());
        }
        Err(Refusal::Invalid(format!(
            "database ticket state \"{}\" is not configured; allowed states: {}",
            ident::shown(state),
            self.states().join(", ")
        )))
    }
}

/// A request's context as sent: its team and optional state choices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    pub team_key: String,
    pub claimed_state: Option<String>,
    pub create_state: Option<String>,
}

/// A request's team, with the states its claims and creates use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team {
    pub key: String,
    /// Where a claim moves a ticket.
    pub claimed: String,
    /// Where a create without an explicit state files a ticket.
    pub create: String,
}

impl Team {
    /// The team of `context` under `lifecycle`, checked as the hosted
    /// database source checks it before any operation: a nonblank team key,
    /// then the claimed and the create state, each configured.
    pub fn resolve(lifecycle: &Lifecycle, context: &Context) -> Result<Team, Refusal> {
        if super::text::is_blank(&context.team_key) {
            return Err(Refusal::Invalid(
                "ticket teamKey must be nonblank".to_owned(),
            ));
        }
        let claimed = context
            .claimed_state
            .clone()
            .unwrap_or_else(|| lifecycle.doing.clone());
        let create = context
            .create_state
            .clone()
            .unwrap_or_else(|| lifecycle.triage.clone());
        lifecycle.require(&claimed)?;
        lifecycle.require(&create)?;
        Ok(Team {
            key: context.team_key.clone(),
            claimed,
            create,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(team: &str, claimed: Option<&str>, create: Option<&str>) -> Context {
        Context {
            team_key: team.into(),
            claimed_state: claimed.map(Into::into),
            create_state: create.map(Into::into),
        }
    }

    #[test]
    fn lifecycles_are_four_distinct_storable_states() {
        assert_eq!(
            Lifecycle::new("Triage", "Ready", "Doing", "Done").unwrap(),
            Lifecycle::default()
        );
        assert!(Lifecycle::new("a", "b", "c", "d").is_ok());
        let err = Lifecycle::new("a", "b", "a", "d").unwrap_err();
        assert!(err.contains("distinct") && err.contains("triage") && err.contains("doing"));
        assert!(
            Lifecycle::new(" ", "b", "c", "d")
                .unwrap_err()
                .contains("nonblank")
        );
        assert!(
            Lifecycle::new("a", "b\0", "c", "d")
                .unwrap_err()
                .contains("NUL")
        );
        let long = "x".repeat(ident::MAX_ID_BYTES + 1);
        assert!(
            Lifecycle::new("a", "b", "c", &long)
                .unwrap_err()
                .contains("limit")
        );
    }

    #[test]
    fn contexts_default_and_check_their_states() {
        let lifecycle = Lifecycle::default();
        let team = Team::resolve(&lifecycle, &context("ENG", None, None)).unwrap();
        assert_eq!(
            (team.claimed.as_str(), team.create.as_str()),
            ("Doing", "Triage")
        );
        let team = Team::resolve(&lifecycle, &context("ENG", Some("Ready"), Some("Done"))).unwrap();
        assert_eq!(
            (team.claimed.as_str(), team.create.as_str()),
            ("Ready", "Done")
        );
        assert_eq!(
            Team::resolve(&lifecycle, &context("ENG", Some("Blocked"), None)),
            Err(Refusal::Invalid(
                "database ticket state \"Blocked\" is not configured; allowed states: Triage, Ready, Doing, Done"
                    .into()
            ))
        );
        assert!(Team::resolve(&lifecycle, &context("ENG", None, Some("done"))).is_err());
        assert_eq!(
            Team::resolve(&lifecycle, &context(" \t", None, None)),
            Err(Refusal::Invalid("ticket teamKey must be nonblank".into()))
        );
    }
}
