//! What an operation checks before its transaction, in the order the hosted
//! database source checks it; the store runs these first
//! (`store::tickets`), so every caller gets the same refusals.

use super::TicketSettings;
use super::lifecycle::Team;
use super::operation::{Draft, Patch};
use super::outcome::Refusal;
use super::text::is_blank;

/// A create's state (`options.state`, else the team's create state), once
/// the draft passes: a nonblank title, then a nonblank body, then a
/// configured state; then the bounds on its texts, labels and blockers.
pub fn create(
    settings: &TicketSettings,
    team: &Team,
    draft: &Draft,
    state: Option<&str>,
) -> Result<String, Refusal> {
    if is_blank(&draft.title) {
        return Err(Refusal::Invalid(
            "database ticket create: title must be nonblank".into(),
        ));
    }
    if is_blank(&draft.body) {
        return Err(Refusal::Invalid(
            "database ticket create: body must be nonblank".into(),
        ));
    }
    let state = state.unwrap_or(&team.create);
    settings.lifecycle.require(state)?;
    let bounds = &settings.bounds;
    bounds.text("input.draft.title", &draft.title)?;
    bounds.text("input.draft.body", &draft.body)?;
    bounds.labels("input.draft.labels", &draft.labels)?;
    bounds.draft_blockers(distinct(&draft.blocked_by).len())?;
    Ok(state.to_owned())
}

/// An update's fields: a named title or body must not be blank (every such
/// problem in one message, title first, as Autobuild's
/// `validateTicketUpdate` words it), then the bounds.
pub fn update(settings: &TicketSettings, patch: &Patch) -> Result<(), Refusal> {
    let mut problems = Vec::new();
    if patch.title.as_deref().is_some_and(is_blank) {
        problems.push("title: title must not be blank");
    }
    if patch.body.as_deref().is_some_and(is_blank) {
        problems.push("body: body must not be blank");
    }
    if !problems.is_empty() {
        return Err(Refusal::Invalid(format!(
            "invalid ticket update — {}",
            problems.join("; ")
        )));
    }
    let bounds = &settings.bounds;
    if let Some(title) = &patch.title {
        bounds.text("input.patch.title", title)?;
    }
    if let Some(body) = &patch.body {
        bounds.text("input.patch.body", body)?;
    }
    if let Some(labels) = &patch.labels {
        bounds.labels("input.patch.labels", labels)?;
    }
    Ok(())
}

/// A comment's body within the text bound (any text, blank included).
pub fn comment(settings: &TicketSettings, body: &str) -> Result<(), Refusal> {
    settings.bounds.text("input.body", body)
}

/// `ids` without repeats, in first-seen order.
pub fn distinct(ids: &[String]) -> Vec<&str> {
    let mut seen = std::collections::HashSet::new();
    ids.iter()
        .map(String::as_str)
        .filter(|id| seen.insert(*id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tickets::lifecycle::{Context, Lifecycle};

    fn settings() -> TicketSettings {
        TicketSettings::default()
    }

    fn team() -> Team {
        let context = Context {
            team_key: "ENG".into(),
            claimed_state: None,
            create_state: None,
        };
        Team::resolve(&Lifecycle::default(), &context).unwrap()
    }

    fn draft(title: &str, body: &str) -> Draft {
        Draft {
            title: title.into(),
            body: body.into(),
            labels: vec![],
            blocked_by: vec![],
        }
    }

    #[test]
    fn creates_check_title_body_then_state() {
        let s = settings();
        assert_eq!(
            create(&s, &team(), &draft("t", "b"), None),
            Ok("Triage".into())
        );
        assert_eq!(
            create(&s, &team(), &draft("t", "b"), Some("Done")),
            Ok("Done".into())
        );
        let message = |r: Result<String, Refusal>| r.unwrap_err().message().to_owned();
        assert_eq!(
            message(create(&s, &team(), &draft(" ", ""), Some("Nope"))),
            "database ticket create: title must be nonblank"
        );
        assert_eq!(
            message(create(&s, &team(), &draft("t", "\n\t"), Some("Nope"))),
            "database ticket create: body must be nonblank"
        );
        assert!(
            message(create(&s, &team(), &draft("t", "b"), Some("Nope")))
                .contains("\"Nope\" is not configured")
        );
    }

    #[test]
    fn updates_name_every_blank_field() {
        let s = settings();
        let patch = |title: Option<&str>, body: Option<&str>| Patch {
            title: title.map(Into::into),
            body: body.map(Into::into),
            labels: None,
        };
        assert!(update(&s, &patch(Some("t"), None)).is_ok());
        assert_eq!(
            update(&s, &patch(Some("   "), None)).unwrap_err().message(),
            "invalid ticket update — title: title must not be blank"
        );
        assert_eq!(
            update(&s, &patch(Some(" "), Some("\n")))
                .unwrap_err()
                .message(),
            "invalid ticket update — title: title must not be blank; body: body must not be blank"
        );
    }

    #[test]
    fn distinct_keeps_first_seen_order() {
        let ids = ["b", "a", "b", "c", "a"].map(String::from);
        assert_eq!(distinct(&ids), ["b", "a", "c"]);
    }
}
