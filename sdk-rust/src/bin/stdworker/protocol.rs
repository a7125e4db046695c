//! The stdin/stdout JSON documents of the stdworker protocol
//! (`sdk-rust/STDWORKER.md`).

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use converge_sdk::worker::{
    ChildSpec, Condition, DepEdge, Event, HandlerError, Outcome, ProviderConfigSpec, ReactionRequest, Resource, Stage,
    StageInput, Trigger,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The document a program reads on stdin.
#[derive(Debug, Serialize)]
pub struct ProgramInput<'a> {
    reaction: &'a str,
    stage: Stage,
    trigger: Trigger,
    kind: &'a str,
    kind_version: i32,
    generation: i64,
    attempt: i32,
    plan: bool,
    resource: &'a Resource,
    input: &'a StageInput,
    provider_config: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_bundle: Option<String>,
    deadline_ms: Option<u64>,
}

impl<'a> ProgramInput<'a> {
    pub fn new(request: &'a ReactionRequest) -> Self {
        let bundle = request.effective_bundle();
        Self {
            reaction: &request.reaction,
            stage: request.stage,
            trigger: request.trigger,
            kind: &request.kind.kind,
            kind_version: request.kind.version,
            generation: request.generation,
            attempt: request.attempt,
            plan: request.plan,
            resource: &request.resource,
            input: &request.input,
            provider_config: request.effective_config(),
            provider_bundle: (!bundle.is_empty()).then(|| STANDARD.encode(bundle)),
            deadline_ms: request
                .remaining()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// The document a program prints on stdout. Every field is optional;
/// unknown fields are rejected so typos do not pass silently.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProgramOutput {
    #[serde(default)]
    status: Option<Map<String, Value>>,
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(default)]
    healthy: Option<bool>,
    #[serde(default)]
    requeue_after_secs: Option<f64>,
    #[serde(default)]
    children: Vec<ChildSpec>,
    #[serde(default)]
    edges: Vec<DepEdge>,
    #[serde(default)]
    configs: Vec<ProviderConfigSpec>,
    #[serde(default)]
    operation_output: Option<Map<String, Value>>,
    #[serde(default)]
    error: Option<ProgramError>,
    #[serde(default)]
    events: Vec<Event>,
}

/// A failure reported by the program itself (with exit status 0).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProgramError {
    message: String,
    #[serde(default)]
    terminal: bool,
    #[serde(default)]
    reason: String,
}

/// Turns a program's stdout into an outcome. Empty output is success with
/// nothing changed; malformed output is a transient failure (a fixed
/// program may be deployed while the broker retries).
pub fn parse_output(stdout: &[u8]) -> Result<Outcome, HandlerError> {
    let invalid = |what: String| HandlerError::transient(format!("invalid outcome on stdout: {what}"));
    let text = std::str::from_utf8(stdout).map_err(|e| invalid(format!("not UTF-8 ({e})")))?;
    if text.trim().is_empty() {
        return Ok(Outcome::new());
    }
    let output: ProgramOutput = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    if let Some(error) = output.error {
        let message = if error.message.is_empty() {
            "the program reported an error without a message".to_owned()
        } else {
            error.message
        };
        let failure = if error.terminal {
            HandlerError::terminal(message)
        } else {
            HandlerError::transient(message)
        };
        let failure = output.events.into_iter().fold(failure, HandlerError::with_event);
        return Err(failure.with_reason(error.reason));
    }
    if let Some(index) = output.children.iter().position(|c| !c.spec.is_object()) {
        return Err(invalid(format!("children[{index}].spec must be an object")));
    }
    if let Some(index) = output
        .configs
        .iter()
        .position(|c| c.spec.as_ref().is_some_and(|s| !s.is_object() && !s.is_null()))
    {
        return Err(invalid(format!("configs[{index}].spec must be an object")));
    }
    let requeue_after = match output.requeue_after_secs {
        None => None,
        Some(secs) => Some(
            Duration::try_from_secs_f64(secs)
                .map_err(|_| invalid(format!("requeue_after_secs {secs} is not a non-negative number")))?,
        ),
    };
    Ok(Outcome {
        status: output.status.map(Value::Object),
        conditions: output.conditions,
        children: output.children,
        edges: output.edges,
        configs: output.configs,
        operation_output: output.operation_output.map(Value::Object),
        healthy: output.healthy,
        requeue_after,
        events: output.events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use converge_sdk::worker::ConditionStatus;
    use serde_json::json;

    #[test]
    fn full_outcome_parses() {
        let out = json!({
            "status": {"n": 1},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Done"}],
            "healthy": true,
            "requeue_after_secs": 2.5,
            "children": [{"kind": "leaf", "kind_version": 1, "name": "a", "spec": {"x": 1}}],
            "edges": [{"dependent": {"kind": "leaf", "name": "a"}, "dependency": {"kind": "leaf", "name": "b"},
                       "value_flows": [{"dependent_field": "/x", "source_field": "/y"}]}],
            "operation_output": {"ok": true}
        });
        let outcome = parse_output(out.to_string().as_bytes()).unwrap();
        assert_eq!(outcome.status, Some(json!({"n": 1})));
        assert_eq!(outcome.conditions[0].status, ConditionStatus::True);
        assert_eq!(outcome.requeue_after, Some(Duration::from_millis(2500)));
        assert_eq!(outcome.children[0].name, "a");
        assert_eq!(outcome.edges[0].value_flows[0].source_field, "/y");
        assert_eq!(outcome.healthy, Some(true));
    }

    #[test]
    fn events_and_liveness_parse_and_events_come_with_errors_too() {
        let out = json!({
            "conditions": [{"type": "Reachable", "status": "True", "liveness_secs": 1.5}],
            "events": [{"category": "probe", "type": "Warning", "reason": "ProbeSlow", "message": "slow",
                        "detail": {"ms": 900}}]
        });
        let outcome = parse_output(out.to_string().as_bytes()).unwrap();
        assert_eq!(outcome.conditions[0].liveness, Some(Duration::from_millis(1500)));
        assert_eq!(outcome.events[0].event_type, converge_sdk::worker::EventType::Warning);
        assert_eq!(outcome.events[0].detail, Some(json!({"ms": 900})));
        let failed = json!({"events": [{"reason": "Attempted"}], "error": {"message": "no"}});
        let error = parse_output(failed.to_string().as_bytes()).unwrap_err();
        assert_eq!(error.events()[0].reason, "Attempted");
        assert!(parse_output(br#"{"events": [{"reason": "A", "colour": "red"}]}"#).is_err());
        assert!(parse_output(br#"{"conditions": [{"type": "A", "status": "True", "liveness_secs": -1}]}"#).is_err());
    }

    #[test]
    fn empty_stdout_is_an_empty_success() {
        assert_eq!(parse_output(b"  \n").unwrap(), Outcome::new());
    }

    #[test]
    fn malformed_output_is_transient() {
        for bad in [
            &b"not json"[..],
            br#"{"stauts": {}}"#,
            br#"{"status": 5}"#,
            br#"{"requeue_after_secs": -1}"#,
        ] {
            let err = parse_output(bad).unwrap_err();
            assert!(!err.is_terminal(), "{err}");
            assert!(err.message().starts_with("invalid outcome"), "{err}");
        }
    }

    #[test]
    fn reported_errors_keep_their_class() {
        let err =
            parse_output(br#"{"error": {"message": "nope", "terminal": true, "reason": "BadSpec"}}"#).unwrap_err();
        assert!(err.is_terminal());
        assert_eq!(err.reason(), "BadSpec");
        let err = parse_output(br#"{"error": {"message": "later"}}"#).unwrap_err();
        assert!(!err.is_terminal());
    }
}
