//! Retry policy per kind (issue 42): the backoff base, cap and jitter a
//! manifest seeds and UpdateKindConfig edits live, measured on the retry
//! times a real worker's transient failures arm. Spreads are statistical
//! properties of the armed delays, not timings of the test.

use std::time::Duration;

use converge_integration::api::{apply_manifest, spawn_worker, work_kind};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{
    BatchApplyResourcesRequest, ExplainResourceRequest, KindConfig, ReconcileResourceRequest, RetryJitter,
    UpdateKindConfigRequest,
};
use converge_sdk::Client;
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Worker, async_trait};

/// Fails every task transiently.
#[derive(Clone)]
struct Failing(&'static str);

#[async_trait]
impl Provider for Failing {
    fn kind(&self) -> KindVersion {
        KindVersion::new(self.0, 1)
    }

    async fn handle(&self, _request: ReactionRequest) -> Result<Outcome, HandlerError> {
        Err(HandlerError::transient("the provider is down").with_reason("ProviderDown"))
    }
}

async fn kind_with(client: &Client, kind: &str, base_ms: i32, cap_ms: i32, jitter: RetryJitter) -> anyhow::Result<()> {
    let mut manifest = work_kind(kind, 1, None);
    if let Some(policy) = manifest.policy.as_mut() {
        policy.max_transient_attempts = 1000;
        policy.retry_base_ms = base_ms;
        policy.retry_cap_ms = cap_ms;
        policy.retry_jitter = jitter as i32;
    }
    apply_manifest(client, manifest).await?;
    Ok(())
}

async fn apply_many(client: &Client, kind: &str, count: usize) -> anyhow::Result<()> {
    let requests = (0..count)
        .map(|i| converge_integration::api::apply(kind, &format!("{kind}-{i}"), serde_json::json!({})))
        .map(|mut r| {
            r.kind = kind.into();
            r
        })
        .collect();
    client
        .resources()
        .batch_apply_resources(BatchApplyResourcesRequest {
            requests,
            ..Default::default()
        })
        .await?;
    Ok(())
}

/// The first retry delay armed for each of `kind`'s tasks, in seconds,
/// once all `count` resources have failed at least once: the task's retry
/// time less the failure's own transaction time (the resource's
/// `updated_at`, written by the same transaction), so the host's speed
/// does not blur it. Resources already past their first retry (short
/// jittered delays) are left out.
async fn armed_delays(server: &TestServer, kind: &str, count: i64) -> anyhow::Result<Vec<f64>> {
    let pool = server.database().pool().clone();
    eventually(Duration::from_secs(120), || {
        let pool = pool.clone();
        async move {
            let failed: i64 =
                sqlx::query_scalar("SELECT count(*) FROM resources WHERE kind = $1 AND failure_attempts >= 1")
                    .bind(kind)
                    .fetch_one(&pool)
                    .await?;
            if failed < count {
                return Ok(None);
            }
            let delays: Vec<f64> = sqlx::query_scalar(
                "SELECT extract(epoch FROM w.not_before - r.updated_at)::float8
                 FROM work_queue w JOIN resources r ON r.id = w.resource_id
                 WHERE w.kind = $1 AND w.broker_id IS NULL AND r.failure_attempts = 1 AND w.not_before > now()",
            )
            .bind(kind)
            .fetch_all(&pool)
            .await?;
            Ok(Some(delays))
        }
    })
    .await
}

/// The failure count of one resource.
async fn attempts(server: &TestServer, kind: &str, name: &str) -> anyhow::Result<i32> {
    Ok(
        sqlx::query_scalar("SELECT failure_attempts FROM resources WHERE kind = $1 AND name = $2")
            .bind(kind)
            .bind(name)
            .fetch_one(server.database().pool())
            .await?,
    )
}

#[tokio::test]
async fn retry_delays_follow_the_kinds_base_cap_and_jitter_and_edits_apply_to_the_next_failure() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    // 100 s first delays: the test's own seconds do not blur the spread.
    kind_with(&client, "steady", 100_000, 100_000, RetryJitter::None).await?;
    kind_with(&client, "spread", 100_000, 100_000, RetryJitter::Full).await?;
    kind_with(&client, "halved", 100_000, 100_000, RetryJitter::Equal).await?;
    let mut workers = Vec::new();
    for kind in ["steady", "spread", "halved"] {
        workers.push(spawn_worker(
            Worker::builder()
                .endpoint(server.address())
                .provider(Failing(kind))
                .max_parallel(64)
                .heartbeat_interval(Duration::from_millis(500)),
        ));
        apply_many(&client, kind, 200).await?;
    }

    // No jitter: every delay is the base (less the seconds since).
    let steady = armed_delays(&server, "steady", 200).await?;
    assert_eq!(steady.len(), 200);
    let (min, max) = bounds(&steady);
    assert!(min > 99.99 && max < 100.01, "no jitter: {min}..{max}");

    // Full jitter: spread over [0, base].
    let spread = armed_delays(&server, "spread", 200).await?;
    assert!(spread.len() >= 100, "{} first delays still armed", spread.len());
    let (min, max) = bounds(&spread);
    assert!(min < 0.5 * max && max <= 100.0, "full jitter: {min}..{max}");
    let below_half = spread.iter().filter(|d| **d < 50.0).count();
    let share = below_half as f64 / spread.len() as f64;
    assert!(
        (0.2..=0.8).contains(&share),
        "full jitter: {below_half} of {} below half",
        spread.len()
    );

    // Equal jitter: in [base/2, base].
    let halved = armed_delays(&server, "halved", 200).await?;
    assert_eq!(halved.len(), 200);
    let (min, max) = bounds(&halved);
    assert!(
        (50.0..75.0).contains(&min) && max <= 100.0,
        "equal jitter: {min}..{max}"
    );

    // ExplainResource says when the next attempt is, and which attempt.
    let explained = client
        .resources()
        .explain_resource(ExplainResourceRequest {
            kind: "steady".into(),
            name: "steady-0".into(),
        })
        .await?
        .into_inner();
    let backoff = explained
        .waiting_for
        .iter()
        .find_map(|w| match &w.cause {
            Some(converge_proto::v1::wait::Cause::RetryBackoff(b)) => Some(b.clone()),
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("no retry backoff in {explained:?}"))?;
    assert_eq!(backoff.attempt, 1);
    assert_eq!(backoff.retry_time, explained.next_due_time);
    let read = explained.read_time.map(|t| t.seconds).unwrap_or_default();
    let due = backoff.retry_time.map(|t| t.seconds).unwrap_or_default();
    assert!((0..=100).contains(&(due - read)), "retry in {} s", due - read);

    // A live edit applies from the next failure: a 300 s cap, no jitter.
    let before = attempts(&server, "spread", "spread-0").await?;
    client
        .kinds()
        .update_kind_config(UpdateKindConfigRequest {
            config: Some(KindConfig {
                kind: "spread".into(),
                kind_version: 1,
                retry_base_ms: 300_000,
                retry_cap_ms: 300_000,
                retry_jitter: RetryJitter::None as i32,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["retry_base_ms".into(), "retry_cap_ms".into(), "retry_jitter".into()],
            }),
            ..Default::default()
        })
        .await?;
    client
        .resources()
        .reconcile_resource(ReconcileResourceRequest {
            kind: "spread".into(),
            name: "spread-0".into(),
            reset_backoff: false,
            ..Default::default()
        })
        .await?;
    let pool = server.database().pool().clone();
    let next: f64 = eventually(Duration::from_secs(60), || {
        let pool = pool.clone();
        async move {
            let row: Option<(i32, f64)> = sqlx::query_as(
                "SELECT r.failure_attempts, extract(epoch FROM w.not_before - r.updated_at)::float8
                 FROM resources r JOIN work_queue w ON w.resource_id = r.id
                 WHERE r.kind = 'spread' AND r.name = 'spread-0' AND w.broker_id IS NULL",
            )
            .fetch_optional(&pool)
            .await?;
            Ok(row.and_then(|(attempts, delay)| (attempts > before).then_some(delay)))
        }
    })
    .await?;
    assert!((next - 300.0).abs() < 0.01, "after the edit: {next}");
    // The others keep the delays armed before the edit.
    let others = armed_delays(&server, "spread", 200).await?;
    assert!(!others.is_empty() && bounds(&others).1 <= 100.0);
    drop(workers);
    server.shutdown().await
}

fn bounds(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)))
}
