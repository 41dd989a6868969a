//! Artifact retention (spec section 3: "Retention is enforced server-side
//! inside the store at deposit time (bounded pruning of dispatcher run/config
//! artifact revisions)"), as data: a policy of rules, each an artifact kind
//! (exact, or a `prefix*` pattern) and the number of latest revisions kept.
//!
//! The embedded default (`retention.json`) keeps the latest 100 revisions of
//! the dispatcher and build-runner configuration kinds; `--retention-policy`
//! replaces it with a file or disables it (`none`). The store applies it in
//! the transaction of the put or deposit that adds a revision
//! (`super::ops`). Kinds under `stream:` (finalized stream transcripts) are
//! never selectable: a rule that could match one is refused at load.
//! docs/configuration.md describes the file format.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::protocol::ident::MAX_ID_BYTES;

/// The embedded default policy.
pub const EMBEDDED: &str = include_str!("retention.json");

/// Kinds with this prefix are never pruned (finalized stream artifacts).
pub const STREAM_KIND_PREFIX: &str = "stream:";

/// The largest `keep` a rule may give.
pub const MAX_KEEP: i64 = 1_000_000_000;

/// Revisions pruned per write unless `--retention-prune-limit` says otherwise.
pub const DEFAULT_PRUNE_LIMIT: u32 = 1000;

/// A policy that cannot be loaded; the message names the file and the rule.
#[derive(Debug, thiserror::Error)]
#[error("retention policy {origin}: {message}")]
pub struct PolicyError {
    /// The file the policy came from, or `(embedded)`.
    pub origin: String,
    /// What is wrong, naming the rule (1-based) where one is involved.
    pub message: String,
}

/// Which kinds a rule selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Exactly this kind.
    Exact(String),
    /// Every kind starting with this text (written `text*`).
    Prefix(String),
}

impl Pattern {
    fn matches(&self, kind: &str) -> bool {
        match self {
            Pattern::Exact(exact) => exact == kind,
            Pattern::Prefix(prefix) => kind.starts_with(prefix.as_str()),
        }
    }

    /// Could this pattern select a `stream:` kind?
    fn reaches_streams(&self) -> bool {
        match self {
            Pattern::Exact(exact) => exact.starts_with(STREAM_KIND_PREFIX),
            Pattern::Prefix(prefix) => {
                STREAM_KIND_PREFIX.starts_with(prefix.as_str())
                    || prefix.starts_with(STREAM_KIND_PREFIX)
            }
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pattern::Exact(exact) => f.write_str(exact),
            Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// Keep the latest `keep` revisions of every kind `pattern` selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub pattern: Pattern,
    pub keep: i64,
}

/// The rules in force. An empty policy prunes nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    rules: Vec<Rule>,
}

impl RetentionPolicy {
    /// The embedded default (`src/store/retention.json`).
    pub fn embedded() -> Result<RetentionPolicy, PolicyError> {
        RetentionPolicy::parse(EMBEDDED, "(embedded)")
    }

    /// No rules: nothing is ever pruned.
    pub fn none() -> RetentionPolicy {
        RetentionPolicy::default()
    }

    /// Read and parse a policy file.
    pub fn from_file(path: &Path) -> Result<RetentionPolicy, PolicyError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| PolicyError {
            origin: origin.clone(),
            message: format!("cannot be read: {err}"),
        })?;
        RetentionPolicy::parse(&text, &origin)
    }

    /// Parse a policy document strictly: `{"rules": [{"kind", "keep"}, …]}`,
    /// with optional `$comment` members, and nothing else.
    pub fn parse(text: &str, origin: &str) -> Result<RetentionPolicy, PolicyError> {
        let fail = |message: String| PolicyError {
            origin: origin.to_owned(),
            message,
        };
        let document: Value =
            serde_json::from_str(text).map_err(|err| fail(format!("is not valid JSON: {err}")))?;
        let Value::Object(top) = document else {
            return Err(fail(
                "must be a JSON object with a \"rules\" array".to_owned(),
            ));
        };
        only_members(&top, &["$comment", "rules"]).map_err(|member| {
            fail(format!(
                "unknown member {member:?} (allowed: \"rules\", \"$comment\")"
            ))
        })?;
        let Some(rules) = top.get("rules") else {
            return Err(fail("\"rules\" is required".to_owned()));
        };
        let Value::Array(rules) = rules else {
            return Err(fail("\"rules\" must be an array".to_owned()));
        };
        let mut parsed: Vec<Rule> = Vec::with_capacity(rules.len());
        for (index, rule) in rules.iter().enumerate() {
            let rule = parse_rule(rule).map_err(|(name, message)| {
                let name = name.map(|n| format!(" ({n:?})")).unwrap_or_default();
                fail(format!("rule {}{name}: {message}", index + 1))
            })?;
            if let Some(earlier) = parsed.iter().position(|r| r.pattern == rule.pattern) {
                return Err(fail(format!(
                    "rule {} ({:?}): the same kind pattern as rule {}",
                    index + 1,
                    rule.pattern.to_string(),
                    earlier + 1
                )));
            }
            parsed.push(rule);
        }
        Ok(RetentionPolicy { rules: parsed })
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// How many latest revisions of `kind` are kept, or `None` when no rule
    /// selects it (always `None` for `stream:` kinds). The most specific
    /// rule wins: an exact kind over any pattern, a longer prefix over a
    /// shorter one.
    pub fn keep_for(&self, kind: &str) -> Option<i64> {
        if kind.starts_with(STREAM_KIND_PREFIX) {
            return None;
        }
        self.rules
            .iter()
            .filter(|rule| rule.pattern.matches(kind))
            .max_by_key(|rule| match &rule.pattern {
                Pattern::Exact(_) => usize::MAX,
                Pattern::Prefix(prefix) => prefix.len(),
            })
            .map(|rule| rule.keep)
    }
}

impl std::fmt::Display for RetentionPolicy {
    /// `kind=keep` pairs, for the configuration log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.rules.is_empty() {
            return f.write_str("none");
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", rule.pattern, rule.keep)?;
        }
        Ok(())
    }
}

/// The first member of `object` not in `allowed`.
fn only_members<'a>(object: &'a Map<String, Value>, allowed: &[&str]) -> Result<(), &'a str> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(member) => Err(member),
        None => Ok(()),
    }
}

/// One rule, or the rule's kind text (when readable) and what is wrong.
fn parse_rule(rule: &Value) -> Result<Rule, (Option<String>, String)> {
    let Value::Object(rule) = rule else {
        return Err((
            None,
            "must be an object {\"kind\": …, \"keep\": …}".to_owned(),
        ));
    };
    let name = rule.get("kind").and_then(Value::as_str).map(str::to_owned);
    let fail = |message: String| (name.clone(), message);
    only_members(rule, &["$comment", "kind", "keep"]).map_err(|member| {
        fail(format!(
            "unknown member {member:?} (allowed: \"kind\", \"keep\", \"$comment\")"
        ))
    })?;
    let kind = match rule.get("kind") {
        None => return Err(fail("\"kind\" is required".to_owned())),
        Some(Value::String(kind)) => kind,
        Some(_) => return Err(fail("\"kind\" must be a string".to_owned())),
    };
    let pattern = pattern(kind).map_err(&fail)?;
    if pattern.reaches_streams() {
        return Err(fail(format!(
            "would select {STREAM_KIND_PREFIX}* kinds (finalized stream artifacts), which are never pruned"
        )));
    }
    let keep = match rule.get("keep") {
        None => return Err(fail("\"keep\" is required".to_owned())),
        Some(keep) => keep,
    };
    let keep = keep
        .as_i64()
        .filter(|keep| (1..=MAX_KEEP).contains(keep))
        .ok_or_else(|| {
            fail(format!(
                "\"keep\" must be a whole number from 1 to {MAX_KEEP} (the latest revisions kept; \
                 remove the rule to keep every revision), got {keep}"
            ))
        })?;
    Ok(Rule { pattern, keep })
}

fn pattern(kind: &str) -> Result<Pattern, String> {
    if kind.is_empty() || kind == "*" {
        return Err("\"kind\" must name a kind or a nonempty prefix followed by *".to_owned());
    }
    if kind.len() > MAX_ID_BYTES || kind.contains('\0') {
        return Err(format!(
            "\"kind\" must be at most {MAX_ID_BYTES} bytes without NUL, like every artifact kind"
        ));
    }
    match kind.find('*') {
        None => Ok(Pattern::Exact(kind.to_owned())),
        Some(at) if at == kind.len() - 1 => Ok(Pattern::Prefix(kind[..at].to_owned())),
        Some(_) => Err("\"kind\" may hold one *, only at its end (a prefix pattern)".to_owned()),
    }
}

/// What the store applies on every put and deposit: the policy and the
/// most revisions one write may prune (so one write's work is bounded; a
/// larger backlog, e.g. after lowering a bound, drains over later writes).
#[derive(Clone, Debug)]
pub struct Retention {
    pub policy: Arc<RetentionPolicy>,
    pub prune_limit: i64,
}

impl Retention {
    /// `--retention-policy` (`None`: the embedded default; `none`: disabled;
    /// otherwise a file) and `--retention-prune-limit`.
    pub fn load(policy: Option<&Path>, prune_limit: u32) -> Result<Retention, PolicyError> {
        let policy = match policy {
            None => RetentionPolicy::embedded()?,
            Some(path) if path == Path::new("none") => RetentionPolicy::none(),
            Some(path) => RetentionPolicy::from_file(path)?,
        };
        Ok(Retention {
            policy: Arc::new(policy),
            prune_limit: i64::from(prune_limit),
        })
    }

    /// Prune nothing (the archive tools and `migrate` write no artifacts).
    pub fn disabled() -> Retention {
        Retention {
            policy: Arc::new(RetentionPolicy::none()),
            prune_limit: i64::from(DEFAULT_PRUNE_LIMIT),
        }
    }
}

impl Default for Retention {
    /// The embedded policy, which a unit test proves parses.
    fn default() -> Self {
        Retention {
            policy: Arc::new(
                RetentionPolicy::embedded().expect("the embedded retention policy parses"),
            ),
            prune_limit: i64::from(DEFAULT_PRUNE_LIMIT),
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn parse(text: &str) -> Result<RetentionPolicy, String> {
        RetentionPolicy::parse(text, "p.json").map_err(|e| e.to_string())
    }

    #[test]
    fn the_embedded_policy_keeps_100_configuration_revisions() {
        let policy = RetentionPolicy::embedded().unwrap();
        for kind in [
            "dispatcher-config",
            "dispatcher-effective-config",
            "build-runner-effective-config",
        ] {
            assert_eq!(policy.keep_for(kind), Some(100), "{kind}");
        }
        for kind in [
            "plan",
            "dispatcher-configs",
            "stream:s1",
            "",
            "build-runner",
        ] {
            assert_eq!(policy.keep_for(kind), None, "{kind}");
        }
        assert_eq!(Retention::default().prune_limit, 1000);
    }

    #[test]
    fn exact_and_prefix_rules_most_specific_wins() {
        let policy = parse(
            r#"{"$comment": "x", "rules": [
                {"kind": "cfg-*", "keep": 5},
                {"kind": "cfg-build-*", "keep": 2, "$comment": "narrower"},
                {"kind": "cfg-build-main", "keep": 9}
            ]}"#,
        )
        .unwrap();
        assert_eq!(policy.keep_for("cfg-a"), Some(5));
        assert_eq!(policy.keep_for("cfg-"), Some(5));
        assert_eq!(policy.keep_for("cfg-build-x"), Some(2));
        assert_eq!(policy.keep_for("cfg-build-main"), Some(9));
        assert_eq!(policy.keep_for("cfg"), None);
        assert_eq!(policy.to_string(), "cfg-*=5 cfg-build-*=2 cfg-build-main=9");
        assert!(parse(r#"{"rules": []}"#).unwrap().is_empty());
        assert_eq!(RetentionPolicy::none().to_string(), "none");
    }

    #[test]
    fn stream_kinds_are_never_selectable() {
        for kind in [
            "stream:s1",
            "stream:*",
            "stream*",
            "s*",
            "stre*",
            "stream:x*",
        ] {
            let err = parse(&format!(
                r#"{{"rules": [{{"kind": "{kind}", "keep": 3}}]}}"#
            ))
            .unwrap_err();
            assert!(
                err.contains(&format!("rule 1 (\"{kind}\")")) && err.contains("never pruned"),
                "{kind}: {err}"
            );
        }
        // Kinds that merely resemble a stream kind are allowed.
        let policy =
            parse(r#"{"rules": [{"kind": "stream", "keep": 3}, {"kind": "streams*", "keep": 4}]}"#)
                .unwrap();
        assert_eq!(policy.keep_for("stream"), Some(3));
        assert_eq!(policy.keep_for("streams-x"), Some(4));
        assert_eq!(policy.keep_for("stream:s"), None);
    }

    #[test]
    fn strict_parsing_names_the_rule() {
        let cases = [
            ("[]", "must be a JSON object"),
            ("{", "is not valid JSON"),
            (r#"{"rule": []}"#, "unknown member \"rule\""),
            (r#"{}"#, "\"rules\" is required"),
            (r#"{"rules": {}}"#, "\"rules\" must be an array"),
            (r#"{"rules": [3]}"#, "rule 1: must be an object"),
            (
                r#"{"rules": [{"kind": "a", "keep": 1}, {"kind": "b", "keep": 1, "max": 2}]}"#,
                "rule 2 (\"b\"): unknown member \"max\"",
            ),
            (
                r#"{"rules": [{"keep": 1}]}"#,
                "rule 1: \"kind\" is required",
            ),
            (
                r#"{"rules": [{"kind": 7, "keep": 1}]}"#,
                "rule 1: \"kind\" must be a string",
            ),
            (
                r#"{"rules": [{"kind": "", "keep": 1}]}"#,
                "rule 1 (\"\"): \"kind\" must name",
            ),
            (
                r#"{"rules": [{"kind": "*", "keep": 1}]}"#,
                "rule 1 (\"*\"): \"kind\" must name",
            ),
            (
                r#"{"rules": [{"kind": "a*b", "keep": 1}]}"#,
                "only at its end",
            ),
            (
                r#"{"rules": [{"kind": "a**", "keep": 1}]}"#,
                "only at its end",
            ),
            (
                r#"{"rules": [{"kind": "a"}]}"#,
                "rule 1 (\"a\"): \"keep\" is required",
            ),
            (r#"{"rules": [{"kind": "a", "keep": 0}]}"#, "got 0"),
            (r#"{"rules": [{"kind": "a", "keep": -1}]}"#, "got -1"),
            (r#"{"rules": [{"kind": "a", "keep": 2.5}]}"#, "got 2.5"),
            (r#"{"rules": [{"kind": "a", "keep": "3"}]}"#, "got \"3\""),
            (
                r#"{"rules": [{"kind": "a", "keep": 1000000001}]}"#,
                "from 1 to 1000000000",
            ),
            (
                r#"{"rules": [{"kind": "a*", "keep": 1}, {"kind": "a*", "keep": 2}]}"#,
                "rule 2 (\"a*\"): the same kind pattern as rule 1",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.starts_with("retention policy p.json: "), "{err}");
            assert!(err.contains(want), "{text}: {err}");
        }
        let long = "k".repeat(MAX_ID_BYTES + 1);
        let err = parse(&format!(
            r#"{{"rules": [{{"kind": "{long}", "keep": 1}}]}}"#
        ))
        .unwrap_err();
        assert!(err.contains("at most 512 bytes"), "{err}");
    }

    #[test]
    fn load_reads_a_file_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.json");
        std::fs::write(&path, r#"{"rules": [{"kind": "x", "keep": 3}]}"#).unwrap();
        let loaded = Retention::load(Some(&path), 7).unwrap();
        assert_eq!(loaded.policy.keep_for("x"), Some(3));
        assert_eq!(loaded.prune_limit, 7);
        assert!(
            Retention::load(Some(Path::new("none")), 1)
                .unwrap()
                .policy
                .is_empty()
        );
        assert_eq!(
            Retention::load(None, 1)
                .unwrap()
                .policy
                .keep_for("dispatcher-config"),
            Some(100)
        );
        let err = Retention::load(Some(&dir.path().join("missing.json")), 1).unwrap_err();
        assert!(
            err.to_string().contains("missing.json: cannot be read"),
            "{err}"
        );
    }
}
