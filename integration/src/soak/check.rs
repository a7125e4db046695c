//! The soak's invariants, read straight from PostgreSQL and from the
//! workers' shared log, against what the workload's [`Ledger`] says was
//! acknowledged. Each check returns the violations it found (empty = none).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;
use sqlx::PgPool;

use super::workload::{APPLIED_REASON, Ledger, Life, SharedLedger, Watched};

/// A lease not attested for this long is stuck: the reaper frees leases 20 s
/// after their last attestation and runs every second.
pub const STUCK_AFTER_SECS: f64 = 60.0;

/// Violations kept per check (the rest are counted).
const KEEP: usize = 20;

fn cap(violations: &mut Vec<String>) {
    if violations.len() > KEEP {
        let more = violations.len() - KEEP;
        violations.truncate(KEEP);
        violations.push(format!("... and {more} more"));
    }
}

/// Leases held without attestation past [`STUCK_AFTER_SECS`].
pub async fn stuck_leases(pool: &PgPool) -> anyhow::Result<Vec<String>> {
    let stuck: Vec<(String, String, i32)> = sqlx::query_as(
        "SELECT q.kind, COALESCE(r.name, q.resource_id::text), q.attempts
           FROM work_queue q LEFT JOIN resources r ON r.id = q.resource_id
          WHERE q.broker_id IS NOT NULL AND NOT q.outcome_pending
            AND q.heartbeat_at < now() - make_interval(secs => $1)
          LIMIT 20",
    )
    .bind(STUCK_AFTER_SECS)
    .fetch_all(pool)
    .await?;
    Ok(stuck
        .into_iter()
        .map(|(kind, name, attempts)| {
            format!("lease of {kind}/{name} (attempt {attempts}) unattested for over {STUCK_AFTER_SECS} s")
        })
        .collect())
}

/// One stored resource, as the checks read it.
#[derive(Debug, sqlx::FromRow)]
struct Stored {
    name: String,
    generation: i64,
    phase: String,
    spec_value: Option<String>,
    status_value: Option<String>,
    observed: Option<i64>,
}

async fn stored(pool: &PgPool, kind: &str) -> anyhow::Result<HashMap<String, Stored>> {
    let rows: Vec<Stored> = sqlx::query_as(
        "SELECT name, generation, phase, spec->>'value' AS spec_value, status->>'value' AS status_value,
                (status->>'observedGeneration')::bigint AS observed
           FROM resources WHERE kind = $1",
    )
    .bind(kind)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|row| (row.name.clone(), row)).collect())
}

/// Every acknowledged write is stored: each live leaf exists at a
/// generation at least the acknowledged one. While the workload runs, pass
/// `now`: a leaf whose entry changed during the read (a later write was
/// acknowledged meanwhile) is not judged.
pub async fn acknowledged_stored(
    pool: &PgPool,
    ledger: &Ledger,
    now: Option<&SharedLedger>,
) -> anyhow::Result<Vec<String>> {
    let stored = stored(pool, "conf-leaf").await?;
    let after = now.map(|shared| shared.lock().clone());
    let mut violations = Vec::new();
    for (name, leaf) in &ledger.leaves {
        if leaf.life != Life::Live {
            continue;
        }
        if let Some(after) = &after
            && after
                .leaves
                .get(name)
                .is_none_or(|later| later.life != Life::Live || later.generation != leaf.generation)
        {
            continue;
        }
        match stored.get(name) {
            None => violations.push(format!(
                "conf-leaf/{name}: acknowledged at generation {} but not stored",
                leaf.generation
            )),
            Some(row) if row.generation < leaf.generation => violations.push(format!(
                "conf-leaf/{name}: acknowledged at generation {} but stored at {}",
                leaf.generation, row.generation
            )),
            Some(_) => {}
        }
    }
    cap(&mut violations);
    Ok(violations)
}

/// What is not (yet) as the ledger says it should end: live leaves Ready
/// with their last value reconciled (or Failed when asked), deleted ones
/// gone, live trees Ready with their children, deleted trees gone with
/// theirs, operations succeeded, reactor deliveries made, the queue empty.
pub async fn unconverged(pool: &PgPool, ledger: &Ledger) -> anyhow::Result<Vec<String>> {
    let leaves = stored(pool, "conf-leaf").await?;
    let trees = stored(pool, "conf-composite").await?;
    let mut left = Vec::new();
    for (name, leaf) in &ledger.leaves {
        let row = leaves.get(name);
        match (leaf.life, row) {
            (Life::Uncertain, _) => {}
            (Life::Deleted, Some(row)) => left.push(format!("conf-leaf/{name}: deleted but still {}", row.phase)),
            (Life::Deleted, None) => {}
            (Life::Live, None) => left.push(format!("conf-leaf/{name}: acknowledged but missing")),
            (Life::Live, Some(row)) if leaf.expect_failed => {
                if row.phase != "Failed" {
                    left.push(format!("conf-leaf/{name}: {} (expected Failed)", row.phase));
                }
            }
            (Life::Live, Some(row)) => {
                let value = Some(leaf.value.as_str());
                if row.phase != "Ready"
                    || row.spec_value.as_deref() != value
                    || row.status_value.as_deref() != value
                    || row.observed != Some(row.generation)
                    || row.generation < leaf.generation
                {
                    left.push(format!(
                        "conf-leaf/{name}: {} at generation {} (observed {:?}), value {:?} reconciled {:?}, acknowledged {:?} at generation {}",
                        row.phase, row.generation, row.observed, row.spec_value, row.status_value, leaf.value, leaf.generation
                    ));
                }
            }
        }
    }
    for (name, tree) in &ledger.trees {
        match tree.life {
            Life::Uncertain => {}
            Life::Live => {
                match trees.get(name) {
                    Some(row) if row.phase == "Ready" => {}
                    Some(row) => left.push(format!("conf-composite/{name}: {}", row.phase)),
                    None => left.push(format!("conf-composite/{name}: acknowledged but missing")),
                }
                for child in &tree.children {
                    match leaves.get(child) {
                        Some(row) if row.phase == "Ready" => {}
                        Some(row) => left.push(format!("conf-leaf/{child} of {name}: {}", row.phase)),
                        None => left.push(format!("conf-leaf/{child} of {name}: missing")),
                    }
                }
            }
            Life::Deleted => {
                if let Some(row) = trees.get(name) {
                    left.push(format!("conf-composite/{name}: deleted but still {}", row.phase));
                }
                for child in &tree.children {
                    if let Some(row) = leaves.get(child) {
                        left.push(format!("conf-leaf/{child} of deleted {name}: still {}", row.phase));
                    }
                }
            }
        }
    }
    let operations: Vec<(String, String)> =
        sqlx::query_as("SELECT id::text, state FROM operations WHERE id::text = ANY($1) AND state <> 'succeeded'")
            .bind(&ledger.operations)
            .fetch_all(pool)
            .await?;
    for (id, state) in operations {
        left.push(format!("operation {id}: {state}"));
    }
    let found: i64 = sqlx::query_scalar("SELECT count(*) FROM operations WHERE id::text = ANY($1)")
        .bind(&ledger.operations)
        .fetch_one(pool)
        .await?;
    if found != ledger.operations.len() as i64 {
        left.push(format!(
            "{} operations acknowledged, {found} stored",
            ledger.operations.len()
        ));
    }
    let deliveries: (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE failed_at IS NULL), count(*) FILTER (WHERE failed_at IS NOT NULL)
           FROM reactor_deliveries",
    )
    .fetch_one(pool)
    .await?;
    if deliveries != (0, 0) {
        left.push(format!(
            "reactor deliveries: {} pending, {} failed",
            deliveries.0, deliveries.1
        ));
    }
    let queued: i64 = sqlx::query_scalar("SELECT count(*) FROM work_queue")
        .fetch_one(pool)
        .await?;
    if queued > 0 {
        left.push(format!("{queued} tasks still queued"));
    }
    cap(&mut left);
    Ok(left)
}

/// The workers' shared log, one JSON object a line, in write order.
pub fn worker_log(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect())
}

/// Handler runs against applied results.
#[derive(Debug, Default, serde::Serialize)]
pub struct Applies {
    /// `work` handlers of written leaves that ended (success or failure).
    pub invocations: u64,
    /// Their results applied (the applied events counted).
    pub applied: u64,
    /// Languages that ran them, with their counts.
    pub by_language: BTreeMap<String, u64>,
}

/// No generation's result is applied twice: each written value's applied
/// event counts at most 1, and the final value of a live leaf exactly 1.
pub async fn applied_once(pool: &PgPool, ledger: &Ledger, log: &[Value]) -> anyhow::Result<(Applies, Vec<String>)> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT r.name, e.message, sum(e.count)::bigint
           FROM resource_events e JOIN resources r ON r.id = e.resource_id
          WHERE r.kind = 'conf-leaf' AND starts_with(e.reason, $1)
          GROUP BY r.name, e.message",
    )
    .bind(APPLIED_REASON)
    .fetch_all(pool)
    .await?;
    let mut violations = Vec::new();
    let mut applies = Applies::default();
    let mut counts: HashMap<(String, String), i64> = HashMap::new();
    for (name, message, count) in rows {
        applies.applied += u64::try_from(count).unwrap_or_default();
        if count > 1 {
            violations.push(format!(
                "conf-leaf/{name}: the result for {message:?} was applied {count} times"
            ));
        }
        counts.insert((name, message), count);
    }
    for (name, leaf) in &ledger.leaves {
        if leaf.life == Life::Live && !leaf.expect_failed {
            let count = counts.get(&(name.clone(), leaf.value.clone())).copied().unwrap_or(0);
            if count != 1 {
                violations.push(format!(
                    "conf-leaf/{name}: the result for its final value {:?} was applied {count} times",
                    leaf.value
                ));
            }
        }
    }
    for line in log {
        let written = line["name"].as_str().is_some_and(|n| n.starts_with("leaf-"));
        if line["event"] == "end" && line["reaction"] == "work" && written {
            applies.invocations += 1;
            let language = line["language"].as_str().unwrap_or("?").to_owned();
            *applies.by_language.entry(language).or_default() += 1;
        }
    }
    cap(&mut violations);
    Ok((applies, violations))
}

/// Deleted trees were torn down in dependency order: each child's first
/// teardown comes after the first teardown of the child that depends on it
/// (the workers share one log file, so its order is the order of writes).
pub fn deletion_order(ledger: &Ledger, log: &[Value]) -> (u64, Vec<String>) {
    let mut first: HashMap<&str, usize> = HashMap::new();
    for (i, line) in log.iter().enumerate() {
        if line["event"] == "teardown"
            && let Some(name) = line["name"].as_str()
        {
            first.entry(name).or_insert(i);
        }
    }
    let mut checked = 0;
    let mut violations = Vec::new();
    for (name, tree) in &ledger.trees {
        if tree.life != Life::Deleted {
            continue;
        }
        for pair in tree.children.windows(2) {
            let (dependency, dependent) = (&pair[0], &pair[1]);
            match (first.get(dependency.as_str()), first.get(dependent.as_str())) {
                (Some(a), Some(b)) => {
                    checked += 1;
                    if a < b {
                        violations.push(format!(
                            "{name}: {dependency} was torn down before {dependent}, which depends on it"
                        ));
                    }
                }
                // Its dependent never got a teardown: it must never have existed.
                (Some(_), None) => violations.push(format!(
                    "{name}: {dependency} was torn down and {dependent}, which depends on it, never was"
                )),
                _ => {}
            }
        }
    }
    cap(&mut violations);
    (checked, violations)
}

/// What the watcher's record came to.
#[derive(Debug, Default, serde::Serialize)]
pub struct WatchSummary {
    /// Change messages received.
    pub messages: u64,
    /// Change-log entries after its start.
    pub changes: u64,
    /// Reconnections (each resumed from its last position).
    pub resumes: u64,
}

/// The watcher, resumed across faults, saw every change exactly once:
/// positions only grow (nothing twice, nothing older after a resume), each
/// message is a real change of its resource, and every resource's last
/// change (its deletion, for a deleted one) was seen. Entries of one
/// resource read together are delivered as its latest state, so an
/// intermediate change may be represented by a later one.
pub async fn watch_exactly_once(pool: &PgPool, watched: &Watched) -> anyhow::Result<(WatchSummary, Vec<String>)> {
    let mut violations = Vec::new();
    for refusal in &watched.refused {
        violations.push(format!("a resume was refused: {refusal}"));
    }
    let Some(start) = watched.start else {
        return Ok((WatchSummary::default(), vec!["the watcher never started".into()]));
    };
    let rows: Vec<(i64, i64, String, String)> = sqlx::query_as(
        "SELECT txid, seq, resource_id::text, change FROM resource_changes
          WHERE (txid, seq) > ($1, $2) ORDER BY txid, seq",
    )
    .bind(start.0)
    .bind(start.1)
    .fetch_all(pool)
    .await?;
    let mut summary = WatchSummary {
        messages: watched.seen.len() as u64,
        changes: rows.len() as u64,
        resumes: watched.resumes.len() as u64,
    };
    let mut last_of: HashMap<&str, ((i64, i64), bool)> = HashMap::new();
    let mut entries: HashMap<((i64, i64), &str), bool> = HashMap::new();
    for (txid, seq, uid, change) in &rows {
        let deleted = change == "deleted";
        last_of.insert(uid.as_str(), ((*txid, *seq), deleted));
        entries.insert(((*txid, *seq), uid.as_str()), deleted);
    }
    let mut previous = start;
    let mut seen_last: HashMap<&str, ((i64, i64), bool)> = HashMap::new();
    for seen in &watched.seen {
        if seen.position <= previous {
            violations.push(format!(
                "{} at {:?} after {:?}: delivered twice or out of order",
                seen.uid, seen.position, previous
            ));
        }
        previous = previous.max(seen.position);
        if !entries.contains_key(&(seen.position, seen.uid.as_str())) {
            violations.push(format!("{} at {:?}: no such change", seen.uid, seen.position));
        }
        seen_last.insert(seen.uid.as_str(), (seen.position, seen.deleted));
    }
    for (uid, (at, deleted)) in &last_of {
        match seen_last.get(uid) {
            Some((seen_at, seen_deleted)) if seen_at == at && seen_deleted == deleted => {}
            Some((seen_at, _)) => violations.push(format!(
                "{uid}: last change at {at:?} (deleted: {deleted}) but last seen at {seen_at:?}"
            )),
            None => violations.push(format!("{uid}: changed at {at:?} (deleted: {deleted}) but never seen")),
        }
    }
    summary.resumes = watched.resumes.len() as u64;
    cap(&mut violations);
    Ok((summary, violations))
}
