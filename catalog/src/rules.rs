//! The fixed set of named cross-field rules a catalog document may cite, for
//! constraints JSON Schema cannot express (Autobuild states them as zod
//! `refine`/`superRefine` checks or as explicit checks in its validators).
//!
//! A document binds a rule to an event type, optionally at a JSON pointer
//! inside the payload (`{"rule": "ordered-provider-attempts", "at":
//! "/providerAttempts"}`); a rule whose target is absent does not apply, which
//! is how optional members stay optional. Rules run only after the payload
//! schema accepted the write, so each may rely on the types its schema
//! guarantees and treats anything else as "not applicable" rather than
//! panicking. Names are stable: they are catalog data.

use serde_json::Value;

use crate::actor::ActorKind;

/// How a failed rule is reported.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RuleFailure {
    /// Detail following `invalid payload for "<type>": `.
    Detail(String),
    /// A complete message (Autobuild words its actor-dependent rule this way).
    Message(String),
}

/// What a rule sees.
pub(crate) struct RuleInput<'a> {
    pub(crate) event_type: &'a str,
    pub(crate) actor_kind: ActorKind,
    /// The value at the binding's pointer.
    pub(crate) target: &'a Value,
    /// The binding's pointer (`""` for the payload root), for messages.
    pub(crate) at: &'a str,
}

impl RuleInput<'_> {
    /// The pointer of a member below the target, for messages.
    fn path(&self, below: &str) -> String {
        let joined = format!("{}{below}", self.at);
        if joined.is_empty() {
            "/".to_owned()
        } else {
            joined
        }
    }
}

/// The rules this server implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// `escalation.raised`: source `policy` requires `policyCause`; any other
    /// source forbids it.
    EscalationPolicyCause,
    /// `escalation.answered`: a dispatcher may answer only with `retry`.
    DispatcherAnswersRetry,
    /// Provider attempt lists: element `i` has `index == i`.
    OrderedProviderAttempts,
    /// Provider substitution: `selectedIndex == failed.index + 1`.
    SubstitutionFollowsFailed,
    /// Verify step selection: names are non-blank and duplicate-free.
    VerifyStepSelection,
    /// Restart-required config paths are duplicate-free.
    DistinctConfigPaths,
    /// A skipped verification's reason is non-blank after trimming.
    SkippedReasonNonblank,
    /// A finalize publication head is non-blank after trimming.
    PublicationHeadNonblank,
    /// A PR attachment filename is a safe basename.
    AttachmentFilename,
    /// A hosted PR attachment URL is an `https://` URL.
    HttpsUrl,
}

impl Rule {
    pub(crate) const ALL: [Rule; 10] = [
        Rule::EscalationPolicyCause,
        Rule::DispatcherAnswersRetry,
        Rule::OrderedProviderAttempts,
        Rule::SubstitutionFollowsFailed,
        Rule::VerifyStepSelection,
        Rule::DistinctConfigPaths,
        Rule::SkippedReasonNonblank,
        Rule::PublicationHeadNonblank,
        Rule::AttachmentFilename,
        Rule::HttpsUrl,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Rule::EscalationPolicyCause => "escalation-policy-cause",
            Rule::DispatcherAnswersRetry => "dispatcher-answers-retry",
            Rule::OrderedProviderAttempts => "ordered-provider-attempts",
            Rule::SubstitutionFollowsFailed => "substitution-follows-failed",
            Rule::VerifyStepSelection => "verify-step-selection",
            Rule::DistinctConfigPaths => "distinct-config-paths",
            Rule::SkippedReasonNonblank => "skipped-reason-nonblank",
            Rule::PublicationHeadNonblank => "publication-head-nonblank",
            Rule::AttachmentFilename => "attachment-filename",
            Rule::HttpsUrl => "https-url",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|rule| rule.name() == name)
    }

    pub(crate) fn known_names() -> String {
        Rule::ALL.map(Rule::name).join(", ")
    }

    pub(crate) fn check(self, input: &RuleInput<'_>) -> Result<(), RuleFailure> {
        match self {
            Rule::EscalationPolicyCause => escalation_policy_cause(input),
            Rule::DispatcherAnswersRetry => dispatcher_answers_retry(input),
            Rule::OrderedProviderAttempts => ordered_provider_attempts(input),
            Rule::SubstitutionFollowsFailed => substitution_follows_failed(input),
            Rule::VerifyStepSelection => verify_step_selection(input),
            Rule::DistinctConfigPaths => distinct_config_paths(input),
            Rule::SkippedReasonNonblank => {
                nonblank(input, "a skipped verification requires a non-blank reason")
            }
            Rule::PublicationHeadNonblank => {
                nonblank(input, "a finalize publication head must be non-blank")
            }
            Rule::AttachmentFilename => attachment_filename(input),
            Rule::HttpsUrl => https_url(input),
        }
    }
}

/// JavaScript's `String.prototype.trim` whitespace: Unicode `White_Space`
/// except U+0085, plus U+FEFF. Autobuild trims with it, so "blank" must mean
/// the same thing here as there.
pub(crate) fn is_js_whitespace(c: char) -> bool {
    (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}'
}

pub(crate) fn js_trim(text: &str) -> &str {
    text.trim_matches(is_js_whitespace)
}

fn escalation_policy_cause(input: &RuleInput<'_>) -> Result<(), RuleFailure> {
    let source = input.target.get("source");
    let has_cause = input.target.get("policyCause").is_some();
    let is_policy = source.and_then(Value::as_str) == Some("policy");
    if is_policy && !has_cause {
        return Err(RuleFailure::Detail(
            r#"source "policy" requires a recognized policyCause"#.to_owned(),
        ));
    }
    if !is_policy && has_cause {
        let shown = source.map_or_else(|| "undefined".to_owned(), Value::to_string);
        return Err(RuleFailure::Detail(format!(
            r#"policyCause is only allowed when source is "policy", not {shown}"#
        )));
    }
    Ok(())
}

fn dispatcher_answers_retry(input: &RuleInput<'_>) -> Result<(), RuleFailure> {
    let resolution = input.target.get("resolution").and_then(Value::as_str);
    if input.actor_kind == ActorKind::Dispatcher && resolution != Some("retry") {
        return Err(RuleFailure::Message(format!(
            r#"dispatcher may only emit "{}" with resolution "retry""#,
            input.event_type
        )));
    }
    Ok(())
}

fn ordered_provider_attempts(input: &RuleInput<'_>) -> Result<(), RuleFailure> {
    let Some(attempts) = input.target.as_array() else {
        return Ok(());
    };
    for (position, attempt) in attempts.iter().enumerate() {
        if attempt.get("index").and_then(Value::as_f64) != Some(position as f64) {
            return Err(RuleFailure::Detail(format!(
                "{}: provider attempt index must be {position} at this ordered position",
                input.path(&format!("/{position}/index"))
            )));
        }
    }
    Ok(())
}

fn substitution_follows_failed(input: &RuleInput<'_>) -> Result<(), RuleFailure> {
    let selected = input.target.get("selectedIndex").and_then(Value::as_f64);
    let failed = input
        .target
        .pointer("/failed/index")
        .and_then(Value::as_f64);
    match (selected, failed) {
        (Some(selected), Some(failed)) if selected != failed + 1.0 => {
            Err(RuleFailure::Detail(format!(
                "{}: selectedIndex must name the configured entry immediately after failed.index",
                input.path("/selectedIndex")
            )))
        }
        _ => Ok(()),
    }
}

fn verify_step_selection(input: &RuleInput<'_>) -> Result<(), RuleFailure> {
    let Some(steps) = input.target.as_array() else {
        return Ok(());
    };
    for (position, step) in steps.iter().enumerate() {
        if step.as_str().is_some_and(|text| js_trim(text).is_empty()) {
            return Err(RuleFailure::Detail(format!(
                "{}: verify step names must not be blank",
                input.path(&format!("/{position}"))
            )));
        }
    }
    if let Some((position, step)) = first_duplicate(steps) {
        return Err(RuleFailure::Detail(format!(
            "{}: duplicate verify step {step}",
            input.path(&format!("/{position}"))
        )));
    }
    Ok(())
}

fn distinct_config_paths(input: &RuleInput<'_>) -> Result<(), RuleFailure> {
    let Some(paths) = input.target.as_array() else {
        return Ok(());
    };
    if let Some((position, path)) = first_duplicate(paths) {
        // Autobuild prints the path bare here, unlike the quoted verify step.
        let bare = path
            .as_str()
            .map_or_else(|| path.to_string(), str::to_owned);
        return Err(RuleFailure::Detail(format!(
            "{}: duplicate config path {bare}",
            input.path(&format!("/{position}"))
        )));
    }
    Ok(())
}

/// The first element equal to an earlier one. Quadratic, which is cheaper than
/// hashing for the handful of entries these lists hold.
fn first_duplicate(items: &[Value]) -> Option<(usize, &Value)> {
    items
        .iter()
        .enumerate()
        .find(|(position, item)| items[..*position].contains(item))
}

fn nonblank(input: &RuleInput<'_>, message: &str) -> Result<(), RuleFailure> {
    match input.target.as_str() {
        Some(text) if js_trim(text).is_empty() => Err(RuleFailure::Detail(format!(
            "{}: {message}",
            input.path("")
        ))),
        _ => Ok(()),
    }
}

/// Autobuild's limit is 255 UTF-16 code units (JavaScript string length); the
/// schema's `maxLength` counts code points, so astral characters are checked here.
const FILENAME_MAX_UTF16: usize = 255;

fn attachment_filename(input: &RuleInput<'_>) -> Result<(), RuleFailure> {
    let Some(name) = input.target.as_str() else {
        return Ok(());
    };
    let fail = |message: &str| {
        Err(RuleFailure::Detail(format!(
            "{}: {message}",
            input.path("")
        )))
    };
    let units = name.encode_utf16().count();
    if units > FILENAME_MAX_UTF16 {
        return Err(RuleFailure::Detail(format!(
            "{}: expected string of at most {FILENAME_MAX_UTF16} UTF-16 code units, received {units}",
            input.path("")
        )));
    }
    if js_trim(name).is_empty() {
        return fail("attachment filename must be non-blank");
    }
    if name == "." || name == ".." {
        return fail("attachment filename must name a file");
    }
    if name
        .chars()
        .any(|c| c == '/' || c == '\\' || c <= '\u{1f}' || c == '\u{7f}')
    {
        return fail(
            "attachment filename must be a basename without path separators or control characters",
        );
    }
    Ok(())
}

/// Approximates the WHATWG URL parser Autobuild relies on: an absolute URL
/// with a scheme and a non-empty authority, then the `https://` requirement.
fn https_url(input: &RuleInput<'_>) -> Result<(), RuleFailure> {
    let Some(url) = input.target.as_str() else {
        return Ok(());
    };
    let fail = |message: &str| {
        Err(RuleFailure::Detail(format!(
            "{}: {message}",
            input.path("")
        )))
    };
    if !looks_like_absolute_url(url) {
        return fail("expected a valid URL");
    }
    if !url.starts_with("https://") {
        return fail("hosted PR attachment URL must use HTTPS");
    }
    Ok(())
}

fn looks_like_absolute_url(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once(':') else {
        return false;
    };
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let Some(authority_and_path) = rest.strip_prefix("//") else {
        return scheme_ok && !rest.is_empty();
    };
    let host = authority_and_path
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    scheme_ok && !host.is_empty() && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(rule: Rule, kind: ActorKind, target: &Value, at: &str) -> Result<(), RuleFailure> {
        rule.check(&RuleInput {
            event_type: "test.event",
            actor_kind: kind,
            target,
            at,
        })
    }

    fn kernel_run(rule: Rule, target: Value, at: &str) -> Result<(), RuleFailure> {
        run(rule, ActorKind::Kernel, &target, at)
    }

    fn detail(result: Result<(), RuleFailure>) -> String {
        match result {
            Err(RuleFailure::Detail(text)) => text,
            other => panic!("expected a detail failure, got {other:?}"),
        }
    }

    #[test]
    fn names_round_trip_and_are_unique() {
        for rule in Rule::ALL {
            assert_eq!(Rule::from_name(rule.name()), Some(rule));
        }
        assert_eq!(Rule::from_name("no-such-rule"), None);
        assert_eq!(Rule::known_names().split(", ").count(), Rule::ALL.len());
    }

    #[test]
    fn escalation_policy_cause_requires_and_forbids() {
        let rule = Rule::EscalationPolicyCause;
        assert!(
            kernel_run(
                rule,
                json!({"source": "policy", "policyCause": "review-round-limit"}),
                ""
            )
            .is_ok()
        );
        assert!(kernel_run(rule, json!({"source": "agent"}), "").is_ok());
        assert_eq!(
            detail(kernel_run(rule, json!({"source": "policy"}), "")),
            r#"source "policy" requires a recognized policyCause"#
        );
        assert_eq!(
            detail(kernel_run(
                rule,
                json!({"source": "stall", "policyCause": "review-round-limit"}),
                ""
            )),
            r#"policyCause is only allowed when source is "policy", not "stall""#
        );
    }

    #[test]
    fn dispatcher_answers_retry_only() {
        let rule = Rule::DispatcherAnswersRetry;
        assert!(
            run(
                rule,
                ActorKind::Dispatcher,
                &json!({"resolution": "retry"}),
                ""
            )
            .is_ok()
        );
        assert!(run(rule, ActorKind::Human, &json!({"resolution": "abort"}), "").is_ok());
        assert_eq!(
            run(
                rule,
                ActorKind::Dispatcher,
                &json!({"resolution": "abort"}),
                ""
            ),
            Err(RuleFailure::Message(
                r#"dispatcher may only emit "test.event" with resolution "retry""#.to_owned()
            ))
        );
    }

    #[test]
    fn ordered_provider_attempts_checks_positions() {
        let rule = Rule::OrderedProviderAttempts;
        assert!(
            kernel_run(
                rule,
                json!([{"index": 0}, {"index": 1}]),
                "/providerAttempts"
            )
            .is_ok()
        );
        assert_eq!(
            detail(kernel_run(
                rule,
                json!([{"index": 0}, {"index": 2}]),
                "/providerAttempts"
            )),
            "/providerAttempts/1/index: provider attempt index must be 1 at this ordered position"
        );
    }

    #[test]
    fn substitution_follows_failed_checks_successor() {
        let rule = Rule::SubstitutionFollowsFailed;
        assert!(
            kernel_run(
                rule,
                json!({"failed": {"index": 0}, "selectedIndex": 1}),
                "/substitution"
            )
            .is_ok()
        );
        assert_eq!(
            detail(kernel_run(
                rule,
                json!({"failed": {"index": 0}, "selectedIndex": 2}),
                "/substitution"
            )),
            "/substitution/selectedIndex: selectedIndex must name the configured entry immediately after failed.index"
        );
    }

    #[test]
    fn verify_step_selection_rejects_blank_and_duplicates() {
        let rule = Rule::VerifyStepSelection;
        assert!(kernel_run(rule, json!([]), "/verifySteps").is_ok());
        assert!(kernel_run(rule, json!(["types", "unit"]), "/verifySteps").is_ok());
        assert_eq!(
            detail(kernel_run(
                rule,
                json!(["types", " \u{feff}\t"]),
                "/verifySteps"
            )),
            "/verifySteps/1: verify step names must not be blank"
        );
        assert_eq!(
            detail(kernel_run(
                rule,
                json!(["types", "unit", "types"]),
                "/verifySteps"
            )),
            r#"/verifySteps/2: duplicate verify step "types""#
        );
    }

    #[test]
    fn distinct_config_paths_rejects_duplicates() {
        let rule = Rule::DistinctConfigPaths;
        assert!(kernel_run(rule, json!(["forge", "plugins"]), "/restartRequired").is_ok());
        assert_eq!(
            detail(kernel_run(
                rule,
                json!(["forge", "forge"]),
                "/restartRequired"
            )),
            "/restartRequired/1: duplicate config path forge"
        );
    }

    #[test]
    fn nonblank_rules_use_js_trim() {
        assert!(kernel_run(Rule::SkippedReasonNonblank, json!("  no UI  "), "/reason").is_ok());
        assert_eq!(
            detail(kernel_run(
                Rule::SkippedReasonNonblank,
                json!(" \n "),
                "/reason"
            )),
            "/reason: a skipped verification requires a non-blank reason"
        );
        assert!(kernel_run(Rule::PublicationHeadNonblank, json!("abc123"), "/headSha").is_ok());
        assert_eq!(
            detail(kernel_run(
                Rule::PublicationHeadNonblank,
                json!("\u{3000}"),
                "/headSha"
            )),
            "/headSha: a finalize publication head must be non-blank"
        );
        // U+0085 is Unicode whitespace but not JavaScript whitespace.
        assert!(kernel_run(Rule::PublicationHeadNonblank, json!("\u{85}"), "/headSha").is_ok());
    }

    #[test]
    fn attachment_filename_is_a_safe_basename() {
        let rule = Rule::AttachmentFilename;
        assert!(kernel_run(rule, json!("screenshot.png"), "/filename").is_ok());
        for (name, message) in [
            ("   ", "attachment filename must be non-blank"),
            ("..", "attachment filename must name a file"),
            (
                "a/b.png",
                "attachment filename must be a basename without path separators or control characters",
            ),
            (
                "a\\b.png",
                "attachment filename must be a basename without path separators or control characters",
            ),
            (
                "a\u{7f}.png",
                "attachment filename must be a basename without path separators or control characters",
            ),
        ] {
            assert_eq!(
                detail(kernel_run(rule, json!(name), "/filename")),
                format!("/filename: {message}")
            );
        }
        let astral = "😀".repeat(128);
        assert!(
            detail(kernel_run(rule, json!(astral), "/filename")).contains("255 UTF-16 code units")
        );
    }

    #[test]
    fn https_url_requires_https() {
        let rule = Rule::HttpsUrl;
        assert!(
            kernel_run(
                rule,
                json!("https://github.com/a/b/releases/download/x.png"),
                "/asset/url"
            )
            .is_ok()
        );
        assert_eq!(
            detail(kernel_run(
                rule,
                json!("http://github.com/x.png"),
                "/asset/url"
            )),
            "/asset/url: hosted PR attachment URL must use HTTPS"
        );
        assert_eq!(
            detail(kernel_run(rule, json!("not a url"), "/asset/url")),
            "/asset/url: expected a valid URL"
        );
        assert_eq!(
            detail(kernel_run(rule, json!("https://"), "/asset/url")),
            "/asset/url: expected a valid URL"
        );
    }
}
