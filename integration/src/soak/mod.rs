//! The chaos soak (issue 48): a mixed workload against several converge
//! processes and workers in several languages while faults are injected
//! at random, with invariants checked while it runs and once the faults
//! stop. `converge-soak` runs it from the command line; the integration
//! suite runs a short one.
//!
//! The workload ([`workload`]): leaf resources created, changed and
//! deleted; composed trees (children in a dependency chain) created and
//! deleted; operations invoked; a reactor binding delivering every leaf's
//! Synced transition; one watcher resuming across faults.
//!
//! The faults ([`site::Fault`]): SIGKILL and SIGTERM of converge processes
//! and of workers, a PostgreSQL fast restart and a postmaster SIGKILL,
//! drops and stalls of the connections between converge and PostgreSQL and
//! between the workers and converge (through [`crate::faultproxy`]). One
//! at a time, each undone before the next, dealt in rounds of every kind
//! once in a random order.
//!
//! The invariants ([`check`]): every acknowledged write is stored (checked
//! while faults run, and at the end); no lease stays unattested past the
//! reaper; no process exits by itself; after the faults stop, everything
//! converges within a bound (Ready, or Failed where the spec asks, deleted
//! things gone, operations succeeded, deliveries made, the queue empty); no
//! result is applied twice (handler runs vs applied results counted);
//! deleted trees were torn down in dependency order; the watcher saw every
//! change exactly once; no call was answered INTERNAL.

pub mod check;
pub mod site;
pub mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use converge_proto::v1::{Emit, KindManifest, Reaction, Trigger};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::json;
use tokio::task::JoinSet;

use crate::api::apply_ok;
use crate::kinds::{apply_kind, work_manifest};
use crate::languages::{Language, apply_conformance_kinds};
use site::{Fault, Site};
use workload::{Endpoints, SharedLedger, SharedWatched};

/// How a soak runs.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// How long faults are injected.
    pub duration: Duration,
    /// converge processes (each `ROLE=all`).
    pub processes: usize,
    /// Conformance workers, one process each, spread over the processes.
    pub languages: Vec<Language>,
    /// Mean pause between faults (each is drawn within ±50%).
    pub fault_every: Duration,
    /// Leaf writers.
    pub writers: usize,
    /// Seeds the workload and the faults.
    pub seed: u64,
    /// How long everything may take to converge once the faults stop.
    pub settle_within: Duration,
}

impl Default for SoakOptions {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(180),
            processes: 2,
            languages: crate::languages::ALL.to_vec(),
            fault_every: Duration::from_secs(6),
            writers: 4,
            seed: 48,
            settle_within: Duration::from_secs(180),
        }
    }
}

/// What a soak did and found.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    /// The seed (rerun with it to replay the same draws).
    pub seed: u64,
    /// Seconds of faults.
    pub fault_secs: f64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<Fault, u64>,
    /// Each fault: seconds since the start, what, on what.
    pub fault_log: Vec<String>,
    /// Calls acknowledged, by what they did.
    pub acknowledged: BTreeMap<&'static str, u64>,
    /// Failed attempts by code (all retried).
    pub refused: BTreeMap<String, u64>,
    /// Writes never acknowledged (their outcome is not checked).
    pub uncertain: u64,
    /// Seconds from the last fault until everything had converged.
    pub settle_secs: f64,
    /// Handler runs against applied results.
    pub applies: check::Applies,
    /// Dependency edges whose teardown order was checked.
    pub teardown_edges_checked: u64,
    /// The watcher's record.
    pub watch: check::WatchSummary,
    /// Checks made while faults ran.
    pub live_checks: u64,
    /// Every violation found (empty: the soak passed).
    pub violations: Vec<String>,
    /// Where the logs of a run with violations were kept.
    pub kept: Option<std::path::PathBuf>,
}

/// The `soak-op` kind: a work reaction and the verb the operator invokes.
fn op_manifest() -> KindManifest {
    let mut manifest = work_manifest("soak-op");
    manifest.reactions.push(Reaction {
        name: format!("operate:{}", workload::VERB),
        trigger: Trigger::Operation.into(),
        emits: vec![Emit::OperationOutput.into()],
        verb: workload::VERB.into(),
        ..Default::default()
    });
    manifest
}

/// Sets up the kinds, the binding, the workers and the operation targets.
async fn prepare(site: &mut Site, options: &SoakOptions, endpoints: &Endpoints) -> anyhow::Result<()> {
    let client = endpoints.pick();
    apply_conformance_kinds(&client).await?;
    apply_kind(&client, op_manifest()).await?;
    crate::kinds::bind_synced_sink(&client, "soak-sink", "soak-synced", "conf-leaf").await?;
    let log = site.scratch().join("workers.log");
    for (i, language) in options.languages.iter().enumerate() {
        let command = site.conformance_worker(*language, i, &log).await?;
        site.add_worker(language.name().to_owned(), command)?;
    }
    let noop = site.noop_worker(options.languages.len(), "soak-op:1,soak-sink:1")?;
    site.add_worker("noop".into(), noop)?;
    for i in 0..workload::OP_TARGETS {
        apply_ok(
            &client,
            crate::api::apply("soak-op", &format!("soak-op-{i}"), json!({})),
        )
        .await?;
    }
    crate::eventually(Duration::from_secs(60), || async {
        let ready: i64 =
            sqlx::query_scalar("SELECT count(*) FROM resources WHERE kind = 'soak-op' AND phase = 'Ready'")
                .fetch_one(site.pool())
                .await?;
        Ok((ready == workload::OP_TARGETS as i64).then_some(()))
    })
    .await
}

/// Runs a soak; the report lists every violation found (the caller decides
/// what a violation means; [`Report::violations`] empty = passed).
pub async fn run(options: &SoakOptions) -> anyhow::Result<Report> {
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut site = Site::start(options.processes).await?;
    let endpoints = Endpoints::new(&site.api_addresses())?;
    prepare(&mut site, options, &endpoints).await?;
    let mut report = Report {
        seed: options.seed,
        ..Report::default()
    };
    let ledger = SharedLedger::default();
    let watched = SharedWatched::default();
    let (stop, stopped) = tokio::sync::watch::channel(false);

    let mut watching = JoinSet::new();
    watching.spawn(workload::watcher(endpoints.clone(), watched.clone(), stopped.clone()));
    crate::eventually(Duration::from_secs(30), || async {
        Ok(watched.lock().start.map(|_| ()))
    })
    .await?;

    let (stop_writers, writers_stopped) = tokio::sync::watch::channel(false);
    let mut writers = JoinSet::new();
    for w in 0..options.writers {
        writers.spawn(workload::leaf_writer(
            w,
            options.seed.wrapping_add(1 + w as u64),
            endpoints.clone(),
            ledger.clone(),
            writers_stopped.clone(),
        ));
    }
    writers.spawn(workload::tree_writer(
        options.seed.wrapping_add(100),
        endpoints.clone(),
        ledger.clone(),
        writers_stopped.clone(),
    ));
    writers.spawn(workload::operator(
        options.seed.wrapping_add(200),
        endpoints.clone(),
        ledger.clone(),
        writers_stopped.clone(),
    ));

    // Faults, one at a time, with the live checks between them.
    let started = Instant::now();
    let mut violations = Vec::new();
    let mut deck = site::Deck::default();
    while started.elapsed() < options.duration {
        let mean = options.fault_every.as_millis() as u64;
        let pause = Duration::from_millis(rng.random_range(mean / 2..=mean + mean / 2));
        live_checks(&mut site, &ledger, &mut report, &mut violations, pause).await;
        let fault = deck.deal(&mut rng);
        let at = started.elapsed().as_secs_f64();
        let target = site
            .inject(fault, &mut rng)
            .await
            .map_err(|e| anyhow::anyhow!("injecting {fault:?} at {at:.1} s: {e:#}"))?;
        *report.faults.entry(fault).or_default() += 1;
        let line = format!("{at:.1}s {fault:?} {target}");
        // Progress for a long run's operator (the report has them all).
        eprintln!("soak: {line}; {} violations so far", violations.len());
        report.fault_log.push(line);
    }
    report.fault_secs = started.elapsed().as_secs_f64();
    let faults_over = Instant::now();

    // The writers finish their call in flight (retried until acknowledged).
    stop_writers.send_replace(true);
    while writers.join_next().await.is_some() {}

    // Everything converges within the bound.
    let deadline = faults_over + options.settle_within;
    let mut left = Vec::new();
    loop {
        let snapshot = snapshot(&ledger);
        match check::unconverged(site.pool(), &snapshot).await {
            Ok(now) if now.is_empty() => {
                left.clear();
                break;
            }
            Ok(now) => left = now,
            Err(e) => left = vec![format!("could not read the database: {e:#}")],
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    report.settle_secs = faults_over.elapsed().as_secs_f64();
    for what in left {
        violations.push(format!(
            "not converged {:.0} s after the faults stopped: {what}",
            options.settle_within.as_secs_f64()
        ));
    }
    violations.extend(site.exited());

    // The watcher has caught up with the change log's end.
    let end: Option<(i64, i64)> =
        sqlx::query_as("SELECT txid, seq FROM resource_changes ORDER BY txid DESC, seq DESC LIMIT 1")
            .fetch_optional(site.pool())
            .await?;
    let caught_up = crate::eventually(Duration::from_secs(30), || async {
        Ok((watched.lock().last >= end).then_some(()))
    })
    .await;
    if caught_up.is_err() {
        violations.push(format!(
            "the watcher did not reach the change log's end {end:?} within 30 s"
        ));
    }
    stop.send_replace(true);
    while watching.join_next().await.is_some() {}

    let snapshot = snapshot(&ledger);
    let log = check::worker_log(&site.scratch().join("workers.log"))?;
    violations.extend(check::acknowledged_stored(site.pool(), &snapshot, None).await?);
    let (applies, found) = check::applied_once(site.pool(), &snapshot, &log).await?;
    report.applies = applies;
    violations.extend(found);
    let (checked, found) = check::deletion_order(&snapshot, &log);
    report.teardown_edges_checked = checked;
    violations.extend(found);
    let (summary, found) = {
        let record = std::mem::take(&mut *watched.lock());
        check::watch_exactly_once(site.pool(), &record).await?
    };
    report.watch = summary;
    violations.extend(found);
    violations.extend(snapshot.unexplained.iter().cloned());

    report.acknowledged = snapshot.acknowledged.clone();
    report.refused = snapshot.refused.clone();
    report.uncertain = snapshot
        .leaves
        .values()
        .filter(|l| l.life == workload::Life::Uncertain)
        .count() as u64
        + snapshot
            .trees
            .values()
            .filter(|t| t.life == workload::Life::Uncertain)
            .count() as u64;
    report.violations = violations;
    if !report.violations.is_empty() {
        for i in 0..site.processes() {
            eprintln!("--- converge-{i} log tail\n{}", site.converge_log_tail(i, 30));
        }
        report.kept = Some(site.keep_scratch());
    }
    Ok(report)
}

/// A copy of the ledger, for checks that await.
fn snapshot(ledger: &SharedLedger) -> workload::Ledger {
    ledger.lock().clone()
}

/// Checks while faults run, every second for `pause`: acknowledged writes
/// stored, no stuck lease, no process gone by itself. A check the database
/// cannot answer (it may be down) is skipped.
async fn live_checks(
    site: &mut Site,
    ledger: &SharedLedger,
    report: &mut Report,
    violations: &mut Vec<String>,
    pause: Duration,
) {
    let until = Instant::now() + pause;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1).min(until.saturating_duration_since(Instant::now()))).await;
        let before = snapshot(ledger);
        if let Ok(found) = check::acknowledged_stored(site.pool(), &before, Some(ledger)).await {
            report.live_checks += 1;
            violations.extend(found);
        }
        if let Ok(found) = check::stuck_leases(site.pool()).await {
            violations.extend(found);
        }
        violations.extend(site.exited());
        violations.dedup();
    }
}
