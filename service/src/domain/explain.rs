//! What holds a resource back: the waits of `ExplainResource`, derived from
//! one snapshot of stored state ([`Facts`], read by the store) by
//! [`explain`], a pure function of the resource and its facts.

use chrono::{DateTime, SecondsFormat, Utc};

use super::resource::{ConditionStatus, Phase, Resource, ResourceRef};

/// Most resources a wait names (its totals count them all).
pub const MAX_NAMED: usize = 10;

/// Which of a resource's two task kinds a wait is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskType {
    /// A reconcile of the current generation.
    Reconcile,
    /// A teardown of a resource being deleted.
    Teardown,
}

impl TaskType {
    /// The `work_queue.task_type` value it is stored as.
    pub fn from_db(value: &str) -> Option<TaskType> {
        match value {
            "reconcile" => Some(TaskType::Reconcile),
            "delete" => Some(TaskType::Teardown),
            _ => None,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            TaskType::Reconcile => "reconcile",
            TaskType::Teardown => "teardown",
        }
    }

    /// The condition its failures are recorded on.
    fn failure_condition(self) -> &'static str {
        match self {
            TaskType::Reconcile => "Synced",
            TaskType::Teardown => "Teardown",
        }
    }
}

/// What queued a reconcile task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskCause {
    /// A new generation, a settled upstream or child, or an explicit reconcile.
    Change,
    /// The periodic resync.
    Resync,
    /// The periodic resync, recomposing.
    ResyncRecompose,
    /// A provider config change.
    ConfigChange,
}

impl TaskCause {
    /// The `work_queue.cause` value (`None` = an ordinary change).
    pub fn from_db(value: Option<&str>) -> TaskCause {
        match value {
            Some("resync") => TaskCause::Resync,
            Some("resyncRecompose") => TaskCause::ResyncRecompose,
            Some("configChange") => TaskCause::ConfigChange,
            _ => TaskCause::Change,
        }
    }

    fn note(self) -> &'static str {
        match self {
            TaskCause::Change => "",
            TaskCause::Resync => " (periodic resync)",
            TaskCause::ResyncRecompose => " (periodic resync, recomposing)",
            TaskCause::ConfigChange => " (provider config changed)",
        }
    }
}

/// A resource named by a wait, with its phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// Kind and name.
    pub reference: ResourceRef,
    /// Phase at read time.
    pub phase: Phase,
}

/// One task row of the resource, as the facts read it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFacts {
    /// Reconcile or teardown.
    pub task: TaskType,
    /// Kind version the task is routed by.
    pub kind_version: i32,
    /// The broker member holding its lease (`None` = unclaimed).
    pub member: Option<String>,
    /// The lease's last heartbeat (set at claim).
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// When a held task times out.
    pub deadline_at: Option<DateTime<Utc>>,
    /// When it is claimable; `None` = parked ('infinity': a failed teardown).
    pub not_before: Option<DateTime<Utc>>,
    /// How often it was claimed.
    pub claims: i32,
    /// Whether its result is fenced in and waits for the drainer.
    pub outcome_pending: bool,
    /// What queued it.
    pub cause: TaskCause,
}

/// The workers connected for the resource's kind version, by the live
/// brokers' registry rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkerFacts {
    /// Connected workers serving the pair and ready for it.
    pub ready: i64,
    /// Connected workers serving the pair but not ready.
    pub unready: i64,
    /// Whether some broker lists fewer workers than it has (the registry row
    /// is capped): a ready worker may be among those not listed.
    pub incomplete: bool,
}

/// Everything beyond the resource row that the waits are derived from, read
/// in the same snapshot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Facts {
    /// The database time of the read.
    pub read_at: DateTime<Utc>,
    /// Generation the children were last composed for.
    pub composed_gen: i64,
    /// Last change of the row.
    pub updated_at: DateTime<Utc>,
    /// Whether its kind version has a manifest (kind_config row).
    pub kind_known: bool,
    /// Whether the kind rolls up its children.
    pub rolls_up: bool,
    /// The kind version's cap (0 = none).
    pub max_inflight: i32,
    /// The kind version's transient retry budget (0 = unlimited).
    pub max_transient_attempts: i32,
    /// When the periodic resync next finds it due (`None` = the kind does not resync).
    pub resync_due: Option<DateTime<Utc>>,
    /// Its task rows (at most one per task type).
    pub tasks: Vec<TaskFacts>,
    /// Upstream dependencies not synced.
    pub upstream_total: i64,
    /// The first of them.
    pub upstream_first: Vec<Named>,
    /// Every child, counted by phase (in [`Phase::ALL`] order).
    pub children_by_phase: Vec<(Phase, i64)>,
    /// Children still progressing (see `is_progressing`).
    pub children_progressing: i64,
    /// The first children, those not Ready first (progressing ones first among them).
    pub children_first: Vec<Named>,
    /// Dependents being deleted (read only while the resource is deleted).
    pub dependents_total: i64,
    /// The first of them.
    pub dependents_first: Vec<Named>,
    /// Connected workers (read only when an unclaimed task exists).
    pub workers: Option<WorkerFacts>,
    /// Tasks and operations of the kind version in flight (read only when it
    /// is capped and an unclaimed task exists).
    pub in_flight: Option<i64>,
    /// Whether the provider config override names no stored config.
    pub provider_config_missing: bool,
}

impl Facts {
    fn children_total(&self) -> i64 {
        self.children_by_phase.iter().map(|(_, n)| n).sum()
    }

    fn children_not_ready(&self) -> i64 {
        self.children_by_phase
            .iter()
            .filter(|(p, _)| *p != Phase::Ready)
            .map(|(_, n)| n)
            .sum()
    }
}

/// One thing holding a resource back, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitCause {
    /// Upstream dependencies not synced.
    Dependencies {
        /// How many.
        total: i64,
        /// The first of them.
        first: Vec<Named>,
    },
    /// Children not Ready.
    Children {
        /// How many are not Ready.
        total: i64,
        /// How many of those are progressing.
        progressing: i64,
        /// Every child by phase.
        by_phase: Vec<(Phase, i64)>,
        /// The first not Ready.
        first: Vec<Named>,
    },
    /// No ready worker connected.
    NoWorker {
        /// Kind.
        kind: String,
        /// Kind version.
        kind_version: i32,
        /// Connected workers of the pair that are not ready.
        unready_workers: i64,
    },
    /// The kind version's cap is reached.
    ConcurrencyCap {
        /// In flight now.
        in_flight: i64,
        /// The cap.
        limit: i32,
    },
    /// A task is queued and claimable.
    Queued {
        /// Which task.
        task: TaskType,
        /// What queued it (reconcile tasks only).
        cause: Option<TaskCause>,
        /// Since when it is claimable.
        eligible_at: DateTime<Utc>,
        /// Claims before.
        claims: i32,
    },
    /// A task is held by a worker.
    Running {
        /// Which task.
        task: TaskType,
        /// The broker member.
        member: String,
        /// Last heartbeat.
        heartbeat_at: Option<DateTime<Utc>>,
        /// Deadline.
        deadline_at: Option<DateTime<Utc>>,
        /// Which claim this is.
        claims: i32,
    },
    /// A result waits for the drainer.
    Applying {
        /// Which task.
        task: TaskType,
    },
    /// A transient failure's retry delay.
    RetryBackoff {
        /// Which task.
        task: TaskType,
        /// Failures so far.
        attempt: i32,
        /// The budget (0 = unlimited).
        max_attempts: i32,
        /// When it is claimable again.
        retry_at: DateTime<Utc>,
        /// Last failure's reason.
        last_error_reason: String,
        /// Last failure's message.
        last_error: String,
    },
    /// The worker asked to be called again later.
    Requeued {
        /// Which task.
        task: TaskType,
        /// When it is claimable again.
        retry_at: DateTime<Utc>,
    },
    /// A failure that is not retried by itself.
    Failed {
        /// Which task.
        task: TaskType,
        /// The generation that failed.
        generation: i64,
        /// Whether the retry budget was used up.
        budget_exhausted: bool,
        /// Consecutive failures.
        attempts: i32,
        /// Last failure's reason.
        last_error_reason: String,
        /// Last failure's message.
        last_error: String,
    },
    /// Quarantined.
    Quarantined {
        /// Since when (from its condition).
        since: Option<DateTime<Utc>>,
        /// The condition's note.
        message: String,
    },
    /// Orphaned.
    Orphaned {
        /// The composer that dropped it.
        owner: Option<ResourceRef>,
        /// When its grace ends.
        teardown_at: DateTime<Utc>,
    },
    /// Being deleted, removal blocked.
    Deletion {
        /// When deletion was requested.
        requested_at: DateTime<Utc>,
        /// Dependents still there.
        dependents_total: i64,
        /// The first of them.
        dependents: Vec<Named>,
        /// Children still there.
        children_total: i64,
        /// The first of them.
        children: Vec<Named>,
        /// Finalizers not cleared.
        finalizers: Vec<String>,
    },
    /// The provider config override does not exist.
    ProviderConfigMissing {
        /// Its name.
        name: String,
    },
    /// Reported unhealthy.
    Unhealthy {
        /// Types of its False conditions.
        false_conditions: Vec<String>,
    },
    /// Lagging with nothing queued.
    Unscheduled {
        /// Since when unchanged.
        since: DateTime<Utc>,
    },
}

/// One wait: a line for people and the typed cause.
#[derive(Debug, Clone, PartialEq)]
pub struct Wait {
    /// One human-readable line.
    pub message: String,
    /// The cause.
    pub cause: WaitCause,
}

/// The answer of `ExplainResource` beyond the resource itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Most decisive first; empty when nothing holds the resource back.
    pub waits: Vec<Wait>,
    /// When the control plane next acts on it by itself.
    pub next_due: Option<DateTime<Utc>>,
    /// When the facts were read.
    pub read_at: DateTime<Utc>,
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn names(list: &[Named]) -> String {
    list.iter()
        .map(|n| format!("{} ({})", n.reference, n.phase.as_db()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "n thing(s){after}", with the names listed and an ellipsis when cut.
fn counted(total: i64, singular: &str, plural: &str, after: &str, first: &[Named]) -> String {
    let noun = if total == 1 { singular } else { plural };
    let more = if total > first.len() as i64 { ", ..." } else { "" };
    if first.is_empty() {
        format!("{total} {noun}{after}")
    } else {
        format!("{total} {noun}{after}: {}{more}", names(first))
    }
}

/// The last failure recorded on `condition`, when it is False.
fn last_error(resource: &Resource, condition: &str) -> (String, String) {
    resource
        .conditions
        .iter()
        .find(|c| c.type_ == condition && c.status == ConditionStatus::False)
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

fn error_suffix(reason: &str, message: &str) -> String {
    match (reason.is_empty(), message.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!(": {reason}"),
        (true, false) => format!(": {message}"),
        (false, false) => format!(": {reason}: {message}"),
    }
}

/// Collects waits and the earliest due time.
struct Answer {
    waits: Vec<Wait>,
    next_due: Option<DateTime<Utc>>,
}

impl Answer {
    fn push(&mut self, message: String, cause: WaitCause) {
        self.waits.push(Wait { message, cause });
    }

    fn due(&mut self, at: DateTime<Utc>) {
        self.next_due = Some(self.next_due.map_or(at, |d| d.min(at)));
    }
}

/// Derives what holds `resource` back from its `facts` (read in the same
/// snapshot): what blocks it first, then the state of its tasks.
pub fn explain(resource: &Resource, facts: &Facts) -> Explanation {
    let mut answer = Answer {
        waits: Vec::new(),
        next_due: None,
    };
    let now = facts.read_at;
    let lagging = resource.synced_gen < resource.generation;
    let failed = resource.failure_gen == resource.generation;

    if let Some(requested_at) = resource.deletion_requested_at {
        let children_total = facts.children_total();
        let mut blockers = Vec::new();
        if facts.dependents_total > 0 {
            blockers.push(counted(
                facts.dependents_total,
                "dependent",
                "dependents",
                "",
                &facts.dependents_first,
            ));
        }
        if children_total > 0 {
            blockers.push(counted(children_total, "child", "children", "", &facts.children_first));
        }
        if !resource.finalizers.is_empty() {
            blockers.push(format!("finalizers [{}]", resource.finalizers.join(", ")));
        }
        let message = if blockers.is_empty() {
            format!(
                "being deleted since {}: nothing blocks its removal any more",
                time(requested_at)
            )
        } else {
            format!(
                "being deleted since {}: waiting for {}",
                time(requested_at),
                blockers.join("; ")
            )
        };
        answer.push(
            message,
            WaitCause::Deletion {
                requested_at,
                dependents_total: facts.dependents_total,
                dependents: facts.dependents_first.clone(),
                children_total,
                children: facts.children_first.clone(),
                finalizers: resource.finalizers.clone(),
            },
        );
        if facts.provider_config_missing {
            push_config_missing(&mut answer, resource);
        }
        // The teardown first; a reconcile claimed before the deletion still lands.
        for task in sorted_tasks(facts, TaskType::Teardown) {
            task_waits(&mut answer, resource, facts, task, now);
        }
        return finish(answer, now);
    }

    if resource.quarantined {
        let (since, message) = resource
            .conditions
            .iter()
            .find(|c| c.type_ == "Quarantined" && c.status == ConditionStatus::True)
            .map(|c| (Some(c.last_transition_at), c.message.clone()))
            .unwrap_or((None, String::new()));
        let line = match since {
            Some(at) => format!("quarantined since {}; UnquarantineResource releases it", time(at)),
            None => "quarantined; UnquarantineResource releases it".to_owned(),
        };
        answer.push(line, WaitCause::Quarantined { since, message });
        // A reconcile claimed before the quarantine still lands.
        for task in sorted_tasks(facts, TaskType::Reconcile) {
            if task.member.is_some() {
                task_waits(&mut answer, resource, facts, task, now);
            }
        }
        return finish(answer, now);
    }

    if let Some(teardown_at) = resource.orphan_until {
        let owner = resource.owner.clone();
        let by = owner.as_ref().map(|o| format!(" by {o}")).unwrap_or_default();
        answer.push(
            format!(
                "orphaned{by}: it is torn down at {} unless its composer emits it again",
                time(teardown_at)
            ),
            WaitCause::Orphaned { owner, teardown_at },
        );
        answer.due(teardown_at);
        for task in sorted_tasks(facts, TaskType::Reconcile) {
            if task.member.is_some() {
                task_waits(&mut answer, resource, facts, task, now);
            }
        }
        return finish(answer, now);
    }

    if facts.provider_config_missing {
        push_config_missing(&mut answer, resource);
    }

    if failed {
        let (reason, message) = last_error(resource, TaskType::Reconcile.failure_condition());
        let budget_exhausted =
            facts.max_transient_attempts > 0 && resource.failure_attempts >= facts.max_transient_attempts;
        let how = if budget_exhausted {
            format!("after {} attempts, its retry budget", resource.failure_attempts)
        } else {
            "terminally".to_owned()
        };
        answer.push(
            format!(
                "reconcile of generation {} failed {how}{}; a new spec or ReconcileResource retries it",
                resource.generation,
                error_suffix(&reason, &message)
            ),
            WaitCause::Failed {
                task: TaskType::Reconcile,
                generation: resource.generation,
                budget_exhausted,
                attempts: resource.failure_attempts,
                last_error_reason: reason,
                last_error: message,
            },
        );
        return finish(answer, now);
    }

    let children_not_ready = facts.children_not_ready();
    let children_wait = |answer: &mut Answer, why: &str| {
        answer.push(
            format!(
                "{why} {}",
                counted(
                    children_not_ready,
                    "child is not Ready",
                    "children are not Ready",
                    "",
                    &not_ready(facts)
                )
            ),
            WaitCause::Children {
                total: children_not_ready,
                progressing: facts.children_progressing,
                by_phase: facts.children_by_phase.clone(),
                first: not_ready(facts),
            },
        );
    };

    if lagging {
        if facts.upstream_total > 0 {
            answer.push(
                format!(
                    "waiting for {}",
                    counted(
                        facts.upstream_total,
                        "upstream dependency",
                        "upstream dependencies",
                        " to sync",
                        &facts.upstream_first
                    )
                ),
                WaitCause::Dependencies {
                    total: facts.upstream_total,
                    first: facts.upstream_first.clone(),
                },
            );
        }
        if facts.rolls_up && facts.composed_gen >= resource.generation && facts.children_progressing > 0 {
            children_wait(&mut answer, "its rollup waits for its children to settle:");
        }
    } else if !resource.health_ok {
        let false_conditions: Vec<String> = resource
            .conditions
            .iter()
            .filter(|c| c.status == ConditionStatus::False)
            .take(MAX_NAMED)
            .map(|c| c.type_.clone())
            .collect();
        let line = if false_conditions.is_empty() {
            "its last reconcile reported it unhealthy".to_owned()
        } else {
            format!(
                "its last reconcile reported it unhealthy (False: {})",
                false_conditions.join(", ")
            )
        };
        answer.push(line, WaitCause::Unhealthy { false_conditions });
        if children_not_ready > 0 {
            children_wait(&mut answer, "unhealthy below it:");
        }
    } else if facts.rolls_up && facts.children_progressing > 0 {
        children_wait(&mut answer, "its rollup is refreshed once its children settle:");
    }

    let tasks = sorted_tasks(facts, TaskType::Reconcile);
    if tasks.is_empty() {
        if lagging
            && facts.upstream_total == 0
            && answer
                .waits
                .iter()
                .all(|w| !matches!(w.cause, WaitCause::Children { .. }))
        {
            let since = facts.updated_at;
            let line = if facts.kind_known {
                format!(
                    "generation {} is not reconciled and no task is queued (unchanged since {}); \
                     the lagging sweep queues it",
                    resource.generation,
                    time(since)
                )
            } else {
                format!(
                    "generation {} is not reconciled and cannot be: kind {:?} version {} has no manifest",
                    resource.generation, resource.kind, resource.kind_version
                )
            };
            answer.push(line, WaitCause::Unscheduled { since });
        }
        if !lagging && let Some(due) = facts.resync_due {
            answer.due(due);
        }
    }
    for task in tasks {
        task_waits(&mut answer, resource, facts, task, now);
    }
    finish(answer, now)
}

fn finish(answer: Answer, now: DateTime<Utc>) -> Explanation {
    Explanation {
        waits: answer.waits,
        next_due: answer.next_due,
        read_at: now,
    }
}

fn push_config_missing(answer: &mut Answer, resource: &Resource) {
    let name = resource.provider_config.clone().unwrap_or_default();
    answer.push(
        format!("provider config {name:?} does not exist: apply it or detach it from the resource"),
        WaitCause::ProviderConfigMissing { name },
    );
}

/// The children not Ready among the first ones read.
fn not_ready(facts: &Facts) -> Vec<Named> {
    facts
        .children_first
        .iter()
        .filter(|n| n.phase != Phase::Ready)
        .cloned()
        .collect()
}

/// The resource's tasks, `first` first.
fn sorted_tasks(facts: &Facts, first: TaskType) -> Vec<&TaskFacts> {
    let mut tasks: Vec<&TaskFacts> = facts.tasks.iter().collect();
    tasks.sort_by_key(|t| t.task != first);
    tasks
}

/// The waits of one task row: why it is not claimed, or who holds it.
fn task_waits(answer: &mut Answer, resource: &Resource, facts: &Facts, task: &TaskFacts, now: DateTime<Utc>) {
    let noun = task.task.noun();
    if let Some(member) = &task.member {
        if task.outcome_pending {
            answer.push(
                format!("the {noun} result is in; the drainer applies it"),
                WaitCause::Applying { task: task.task },
            );
            return;
        }
        let mut line = format!("{noun} running on member {member} (claim {})", task.claims);
        if let Some(at) = task.heartbeat_at {
            line.push_str(&format!(", last heartbeat {}", time(at)));
        }
        if let Some(at) = task.deadline_at {
            line.push_str(&format!(", deadline {}", time(at)));
            answer.due(at);
        }
        answer.push(
            line,
            WaitCause::Running {
                task: task.task,
                member: member.clone(),
                heartbeat_at: task.heartbeat_at,
                deadline_at: task.deadline_at,
                claims: task.claims,
            },
        );
        return;
    }
    let (reason, message) = last_error(resource, task.task.failure_condition());
    let Some(not_before) = task.not_before else {
        // Parked: a teardown that failed terminally.
        answer.push(
            format!(
                "{noun} failed terminally{}; ReconcileResource retries it",
                error_suffix(&reason, &message)
            ),
            WaitCause::Failed {
                task: task.task,
                generation: resource.generation,
                budget_exhausted: false,
                attempts: task.claims,
                last_error_reason: reason,
                last_error: message,
            },
        );
        return;
    };
    if not_before > now {
        answer.due(not_before);
        let (attempt, max_attempts) = match task.task {
            TaskType::Reconcile => (resource.failure_attempts, facts.max_transient_attempts),
            TaskType::Teardown => (task.claims, 0),
        };
        // A failure leaves its condition; a requeue_after answer leaves none.
        let failing = attempt > 0 && !(reason.is_empty() && message.is_empty());
        if failing {
            let of = if max_attempts > 0 {
                format!("attempt {attempt} of {max_attempts}")
            } else {
                format!("attempt {attempt}")
            };
            answer.push(
                format!(
                    "{noun} failed ({of}) and is retried at {}{}",
                    time(not_before),
                    error_suffix(&reason, &message)
                ),
                WaitCause::RetryBackoff {
                    task: task.task,
                    attempt,
                    max_attempts,
                    retry_at: not_before,
                    last_error_reason: reason,
                    last_error: message,
                },
            );
        } else {
            answer.push(
                format!("the worker asked for the {noun} to run again at {}", time(not_before)),
                WaitCause::Requeued {
                    task: task.task,
                    retry_at: not_before,
                },
            );
        }
        return;
    }
    answer.due(not_before);
    if let Some(workers) = facts.workers
        && workers.ready == 0
        && !workers.incomplete
    {
        let unready = if workers.unready > 0 {
            format!(
                " ({} connected worker{} report{} it not ready)",
                workers.unready,
                if workers.unready == 1 { "" } else { "s" },
                if workers.unready == 1 { "s" } else { "" }
            )
        } else {
            String::new()
        };
        answer.push(
            format!(
                "no ready worker is connected for kind {:?} version {}{unready}",
                resource.kind, task.kind_version
            ),
            WaitCause::NoWorker {
                kind: resource.kind.clone(),
                kind_version: task.kind_version,
                unready_workers: workers.unready,
            },
        );
    }
    if let Some(in_flight) = facts.in_flight
        && facts.max_inflight > 0
        && in_flight >= i64::from(facts.max_inflight)
    {
        answer.push(
            format!(
                "kind {:?} version {} is at its concurrency cap: {in_flight} in flight of {}",
                resource.kind, task.kind_version, facts.max_inflight
            ),
            WaitCause::ConcurrencyCap {
                in_flight,
                limit: facts.max_inflight,
            },
        );
    }
    let cause = (task.task == TaskType::Reconcile).then_some(task.cause);
    answer.push(
        format!(
            "{noun} queued{}, claimable since {} (claimed {} time{} before)",
            cause.map(TaskCause::note).unwrap_or_default(),
            time(not_before),
            task.claims,
            if task.claims == 1 { "" } else { "s" }
        ),
        WaitCause::Queued {
            task: task.task,
            cause,
            eligible_at: not_before,
            claims: task.claims,
        },
    );
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::TimeZone;
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::domain::position::Position;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).single().unwrap_or_default()
    }

    fn resource() -> Resource {
        Resource {
            id: Uuid::nil(),
            kind: "probe".into(),
            kind_version: 1,
            name: "p".into(),
            labels: BTreeMap::new(),
            spec: json!({}),
            status: None,
            owner: None,
            root: None,
            provider_config: None,
            generation: 2,
            synced_gen: 2,
            health_ok: true,
            failure_gen: 0,
            failure_attempts: 0,
            finalizers: Vec::new(),
            deletion_requested_at: None,
            orphan_until: None,
            quarantined: false,
            phase: Phase::Ready,
            created_at: at(-100),
            updated_at: at(-10),
            position: Position { txid: 1, seq: 1 },
            conditions: Vec::new(),
        }
    }

    fn facts() -> Facts {
        Facts {
            read_at: at(0),
            composed_gen: 0,
            updated_at: at(-10),
            kind_known: true,
            ..Facts::default()
        }
    }

    fn queued(not_before: DateTime<Utc>) -> TaskFacts {
        TaskFacts {
            task: TaskType::Reconcile,
            kind_version: 1,
            member: None,
            heartbeat_at: None,
            deadline_at: None,
            not_before: Some(not_before),
            claims: 0,
            outcome_pending: false,
            cause: TaskCause::Change,
        }
    }

    #[test]
    fn a_ready_resource_waits_for_nothing_and_is_next_due_at_its_resync() {
        let answer = explain(
            &resource(),
            &Facts {
                resync_due: Some(at(50)),
                ..facts()
            },
        );
        assert!(answer.waits.is_empty());
        assert_eq!(answer.next_due, Some(at(50)));
    }

    #[test]
    fn a_capped_task_without_a_worker_names_both_before_the_queue() {
        let mut r = resource();
        r.synced_gen = 1;
        let f = Facts {
            tasks: vec![queued(at(-5))],
            workers: Some(WorkerFacts {
                ready: 0,
                unready: 2,
                incomplete: false,
            }),
            in_flight: Some(3),
            max_inflight: 3,
            ..facts()
        };
        let answer = explain(&r, &f);
        assert_eq!(answer.waits.len(), 3);
        assert!(matches!(
            answer.waits[0].cause,
            WaitCause::NoWorker { unready_workers: 2, .. }
        ));
        assert_eq!(
            answer.waits[0].message,
            "no ready worker is connected for kind \"probe\" version 1 (2 connected workers report it not ready)"
        );
        assert!(matches!(
            answer.waits[1].cause,
            WaitCause::ConcurrencyCap { in_flight: 3, limit: 3 }
        ));
        assert!(matches!(answer.waits[2].cause, WaitCause::Queued { claims: 0, .. }));
        assert_eq!(answer.next_due, Some(at(-5)));
    }

    #[test]
    fn an_incomplete_registry_never_claims_that_no_worker_is_connected() {
        let mut r = resource();
        r.synced_gen = 1;
        let f = Facts {
            tasks: vec![queued(at(-5))],
            workers: Some(WorkerFacts {
                ready: 0,
                unready: 0,
                incomplete: true,
            }),
            ..facts()
        };
        let answer = explain(&r, &f);
        assert_eq!(answer.waits.len(), 1);
        assert!(matches!(answer.waits[0].cause, WaitCause::Queued { .. }));
    }

    #[test]
    fn a_parked_teardown_is_a_failure_and_schedules_nothing() {
        let mut r = resource();
        r.deletion_requested_at = Some(at(-30));
        r.finalizers = vec!["f".into()];
        let f = Facts {
            tasks: vec![TaskFacts {
                task: TaskType::Teardown,
                not_before: None,
                claims: 1,
                ..queued(at(0))
            }],
            ..facts()
        };
        let answer = explain(&r, &f);
        assert!(matches!(answer.waits[0].cause, WaitCause::Deletion { .. }));
        assert!(matches!(
            answer.waits[1].cause,
            WaitCause::Failed {
                task: TaskType::Teardown,
                ..
            }
        ));
        assert_eq!(answer.next_due, None);
    }

    #[test]
    fn long_lists_are_cut_with_an_ellipsis_and_keep_their_total() {
        let mut r = resource();
        r.synced_gen = 1;
        let first: Vec<Named> = (0..MAX_NAMED)
            .map(|i| Named {
                reference: ResourceRef {
                    kind: "cell".into(),
                    name: format!("u{i}"),
                },
                phase: Phase::Reconciling,
            })
            .collect();
        let f = Facts {
            upstream_total: 25,
            upstream_first: first,
            ..facts()
        };
        let answer = explain(&r, &f);
        assert_eq!(answer.waits.len(), 1);
        assert!(
            answer.waits[0]
                .message
                .starts_with("waiting for 25 upstream dependencies to sync: cell/u0")
        );
        assert!(answer.waits[0].message.ends_with("cell/u9 (Reconciling), ..."));
    }
}
