//! Operations: durable invocations of a kind's verbs (imperative actions
//! such as "rotate_credentials") on one resource.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::manifest::{Emit, Reaction, Trigger, is_handle};
use super::violation::Violation;

/// Largest accepted operation input, in bytes of JSON.
pub const MAX_INPUT_BYTES: usize = 256 * 1024;
/// Largest stored operation output, in bytes of JSON.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Most verbs named when a verb is unknown.
pub const MAX_LISTED_VERBS: usize = 20;

/// Progress of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationState {
    /// Waiting for a worker (or for its retry).
    Pending,
    /// A worker holds it.
    Running,
    /// Finished with an output.
    Succeeded,
    /// Finished with an error.
    Failed,
}

impl OperationState {
    /// Every state.
    pub const ALL: [OperationState; 4] = [
        OperationState::Pending,
        OperationState::Running,
        OperationState::Succeeded,
        OperationState::Failed,
    ];

    /// The stored spelling.
    pub fn as_db(self) -> &'static str {
        match self {
            OperationState::Pending => "pending",
            OperationState::Running => "running",
            OperationState::Succeeded => "succeeded",
            OperationState::Failed => "failed",
        }
    }

    /// The state a stored spelling names.
    pub fn from_db(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_db() == value)
    }
}

/// How a failed operation failed, as a `google.rpc.Code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCode {
    /// The worker's handler reported the failure.
    Unknown,
    /// The last attempt ran out of the task deadline.
    DeadlineExceeded,
    /// The verb could not run: the resource started its deletion, or its
    /// manifest no longer declares the verb.
    FailedPrecondition,
}

impl FailureCode {
    /// The `google.rpc.Code` number.
    pub fn code(self) -> i32 {
        match self {
            FailureCode::Unknown => 2,
            FailureCode::DeadlineExceeded => 4,
            FailureCode::FailedPrecondition => 9,
        }
    }

    /// The code of a handler failure with `reason`: DEADLINE_EXCEEDED for
    /// the reason SDKs give a handler cut off by its deadline.
    pub fn of_reason(reason: Option<&str>) -> Self {
        if reason == Some(DEADLINE_EXCEEDED_REASON) {
            FailureCode::DeadlineExceeded
        } else {
            FailureCode::Unknown
        }
    }
}

/// The reason of a failure caused by the task deadline (SDKs and the
/// server's deadline backstop both use it).
pub const DEADLINE_EXCEEDED_REASON: &str = "DeadlineExceeded";

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationError {
    /// The `google.rpc.Code` number.
    pub code: i32,
    /// What the failure said.
    pub message: String,
    /// The worker's (or the server's) UpperCamelCase reason, if any.
    pub reason: Option<String>,
}

/// Why a pending operation is not running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingReason {
    /// Its resource is quarantined.
    Quarantined,
    /// Waiting out a backoff or a requested delay.
    RetryBackoff,
    /// Due; no worker has taken it yet.
    WaitingForWorker,
}

impl PendingReason {
    /// The spelling in the contract.
    pub fn as_str(self) -> &'static str {
        match self {
            PendingReason::Quarantined => "Quarantined",
            PendingReason::RetryBackoff => "RetryBackoff",
            PendingReason::WaitingForWorker => "WaitingForWorker",
        }
    }
}

/// A stored operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// The operation's uid.
    pub id: Uuid,
    /// The resource incarnation it was invoked on.
    pub resource_id: Uuid,
    /// The resource's kind.
    pub kind: String,
    /// The resource's name.
    pub name: String,
    /// The verb.
    pub verb: String,
    /// The input document, if any.
    pub input: Option<Value>,
    /// The output document, if it succeeded with one.
    pub output: Option<Value>,
    /// Progress.
    pub state: OperationState,
    /// Dispatches so far.
    pub attempts: i32,
    /// Why it failed (only when failed).
    pub error: Option<OperationError>,
    /// Who invoked it.
    pub requested_by: String,
    /// When it was invoked.
    pub created_at: DateTime<Utc>,
    /// When it finished.
    pub completed_at: Option<DateTime<Utc>>,
    /// Earliest next dispatch (meaningful while pending).
    pub not_before: DateTime<Utc>,
    /// Whether its resource is quarantined (as of the read).
    pub quarantined: bool,
    /// The time of the read, for [`Operation::pending_reason`].
    pub read_at: DateTime<Utc>,
}

impl Operation {
    /// Why a pending operation is not running; `None` in other states.
    pub fn pending_reason(&self) -> Option<PendingReason> {
        if self.state != OperationState::Pending {
            return None;
        }
        Some(if self.quarantined {
            PendingReason::Quarantined
        } else if self.not_before > self.read_at {
            PendingReason::RetryBackoff
        } else {
            PendingReason::WaitingForWorker
        })
    }
}

/// The operation reaction of a verb, as a manifest declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbReaction {
    /// The verb.
    pub verb: String,
    /// The reaction name workers key their handler by.
    pub reaction: String,
    /// Whether the outcome's status is applied to the resource.
    pub emits_status: bool,
    /// Whether the outcome's conditions (and health) are applied.
    pub emits_conditions: bool,
    /// Whether the outcome's output is stored.
    pub emits_output: bool,
}

/// The verbs a manifest's reactions declare, in declaration order.
pub fn verbs_of(reactions: &[Reaction]) -> Vec<VerbReaction> {
    reactions
        .iter()
        .filter(|r| r.trigger == Trigger::Operation)
        .filter_map(|r| {
            let verb = r.verb.as_deref().filter(|v| !v.is_empty())?;
            Some(VerbReaction {
                verb: verb.to_owned(),
                reaction: r.name.clone(),
                emits_status: r.emits.contains(&Emit::Status),
                emits_conditions: r.emits.contains(&Emit::Conditions),
                emits_output: r.emits.contains(&Emit::OperationOutput),
            })
        })
        .collect()
}

/// Checks a verb's syntax (as manifests declare verbs).
pub fn validate_verb(field: &str, verb: &str) -> Result<(), Violation> {
    if is_handle(verb) {
        Ok(())
    } else {
        Err(Violation::new(
            field,
            "must be 1-63 characters of ASCII letters, digits, '_', '-', ':' and '.'",
        ))
    }
}

/// The message of a verb the kind does not declare: names the declared
/// verbs (at most [`MAX_LISTED_VERBS`]).
pub fn unknown_verb_message(kind: &str, kind_version: i32, verb: &str, declared: &[VerbReaction]) -> String {
    if declared.is_empty() {
        return format!("kind {kind:?} version {kind_version} declares no operation verbs (asked for {verb:?})");
    }
    let mut names: Vec<&str> = declared
        .iter()
        .take(MAX_LISTED_VERBS)
        .map(|v| v.verb.as_str())
        .collect();
    if declared.len() > MAX_LISTED_VERBS {
        names.push("...");
    }
    format!(
        "kind {kind:?} version {kind_version} declares no operation {verb:?}; declared verbs: {}",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reaction(name: &str, trigger: Trigger, emits: &[Emit], verb: Option<&str>) -> Reaction {
        Reaction {
            name: name.into(),
            trigger,
            emits: emits.to_vec(),
            verb: verb.map(Into::into),
            finalizer: None,
            input_schema: None,
        }
    }

    #[test]
    fn verbs_come_from_operation_reactions_only() {
        let verbs = verbs_of(&[
            reaction("work", Trigger::SpecChange, &[Emit::Status], None),
            reaction(
                "operate:rotate",
                Trigger::Operation,
                &[Emit::OperationOutput, Emit::Status],
                Some("rotate"),
            ),
        ]);
        assert_eq!(
            verbs,
            vec![VerbReaction {
                verb: "rotate".into(),
                reaction: "operate:rotate".into(),
                emits_status: true,
                emits_conditions: false,
                emits_output: true,
            }]
        );
        assert!(unknown_verb_message("db", 1, "x", &verbs).contains("declared verbs: rotate"));
        assert!(unknown_verb_message("db", 1, "x", &[]).contains("declares no operation verbs"));
    }

    #[test]
    fn pending_reasons() {
        let now = Utc::now();
        let mut op = Operation {
            id: Uuid::nil(),
            resource_id: Uuid::nil(),
            kind: "db".into(),
            name: "a".into(),
            verb: "rotate".into(),
            input: None,
            output: None,
            state: OperationState::Pending,
            attempts: 0,
            error: None,
            requested_by: "anonymous".into(),
            created_at: now,
            completed_at: None,
            not_before: now,
            quarantined: false,
            read_at: now,
        };
        assert_eq!(op.pending_reason(), Some(PendingReason::WaitingForWorker));
        op.not_before = now + chrono::Duration::seconds(5);
        assert_eq!(op.pending_reason(), Some(PendingReason::RetryBackoff));
        op.quarantined = true;
        assert_eq!(op.pending_reason(), Some(PendingReason::Quarantined));
        op.state = OperationState::Running;
        assert_eq!(op.pending_reason(), None);
    }

    #[test]
    fn deadline_reason_maps_to_its_code() {
        assert_eq!(FailureCode::of_reason(Some("DeadlineExceeded")).code(), 4);
        assert_eq!(FailureCode::of_reason(Some("Boom")).code(), 2);
        assert_eq!(FailureCode::of_reason(None).code(), 2);
        assert_eq!(OperationState::from_db("succeeded"), Some(OperationState::Succeeded));
    }
}
