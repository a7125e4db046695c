//! The statuses of `grpc.health.v1.Health`, and the probe that keeps them
//! true to the database.
//!
//! Every second the probe runs `SELECT 1` on a connection of its own to the
//! primary. When the connection is refused or dropped, or a check goes
//! unanswered for [`SILENCE_BEFORE_DOWN`] (a slow database is not a missing
//! one: the check is not abandoned, the probe keeps waiting for the same
//! answer rather than reconnecting), the overall status ("") and every
//! service's turn NOT_SERVING, and the API refuses calls at once with UNAVAILABLE (see
//! [`crate::api::availability`]); when it answers again they turn back to
//! SERVING. The same tick checks the read replica, if any, so stale-tolerant
//! reads return to it once it answers. A drain wins over the probe: once
//! [`Health::drain`] has run, nothing turns a status back to SERVING.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::db::probe::{Answer, DatabaseStatus, Probe};
use crate::db::replica::ReadPool;

/// How often the database is checked.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How long a check of the primary may go unanswered before the database
/// counts as down; a refused or dropped connection counts at once. Long on
/// purpose: a database starved of CPU was seen to leave `SELECT 1` unanswered
/// for over 5 s while it still served every call, and refusing those calls
/// would turn slowness into errors. A call meanwhile waits at most the
/// pool's acquire timeout (10 s).
pub const SILENCE_BEFORE_DOWN: Duration = Duration::from_secs(15);

/// Longest one check of the primary is waited for; then its connection is
/// closed and the next check opens a new one.
pub const CHECK_LIMIT: Duration = Duration::from_secs(30);

/// What the health service says, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Serving.
    Serving,
    /// The database did not answer the last check.
    DatabaseDown,
    /// Draining for shutdown; final.
    Draining,
}

/// The health reporter of this process and the services it reports on.
pub struct Health {
    reporter: HealthReporter,
    services: Vec<&'static str>,
    state: Mutex<State>,
    /// Whether the overall status is SERVING: what `/readyz` answers.
    ready: watch::Sender<bool>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").field("services", &self.services).finish()
    }
}

impl Health {
    /// Reports every one of `services` and the overall status as SERVING,
    /// and keeps `ready` equal to "the overall status is SERVING".
    pub async fn serving(reporter: HealthReporter, services: Vec<&'static str>, ready: watch::Sender<bool>) -> Self {
        let health = Self {
            reporter,
            services,
            state: Mutex::new(State::Serving),
            ready,
        };
        health.report(ServingStatus::Serving).await;
        health
    }

    /// Follows the database: NOT_SERVING while it is down, SERVING once it
    /// answers again; nothing once draining.
    pub async fn database_changed(&self, up: bool) {
        let mut state = self.state.lock().await;
        let next = match (*state, up) {
            (State::Draining, _) => return,
            (_, true) => State::Serving,
            (_, false) => State::DatabaseDown,
        };
        if next != *state {
            *state = next;
            self.report(if up {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            })
            .await;
        }
    }

    /// Reports NOT_SERVING for good: the process is draining.
    pub async fn drain(&self) {
        let mut state = self.state.lock().await;
        *state = State::Draining;
        self.report(ServingStatus::NotServing).await;
    }

    async fn report(&self, status: ServingStatus) {
        self.ready.send_replace(status == ServingStatus::Serving);
        for name in self.services.iter().copied().chain([""]) {
            self.reporter.set_service_status(name, status).await;
        }
    }
}

/// Starts the probe: every [`PROBE_INTERVAL`] until `stop` flips, checks the
/// primary (behind the pool `primary`, with its current options), records the answer in `status` and `health`, and
/// checks the replica behind `reads`.
pub fn spawn_probe(
    primary: sqlx::PgPool,
    status: DatabaseStatus,
    health: Arc<Health>,
    reads: ReadPool,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut probe = Probe::following(primary, "converge-probe");
        let mut replica_probe = reads.replica_probe();
        let mut tick = tokio::time::interval(PROBE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => {}
            }
            let answer = {
                let check = probe.check(CHECK_LIMIT);
                tokio::pin!(check);
                tokio::select! {
                    _ = stop.changed() => break,
                    answer = &mut check => answer,
                    _ = tokio::time::sleep(SILENCE_BEFORE_DOWN) => {
                        record(&status, &health, Answer::TimedOut).await;
                        tokio::select! {
                            _ = stop.changed() => break,
                            answer = &mut check => answer,
                        }
                    }
                }
            };
            record(&status, &health, answer).await;
            if let Some(replica_probe) = &mut replica_probe {
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = reads.check_replica(replica_probe) => {}
                }
            }
        }
        probe.close().await;
        if let Some(replica_probe) = replica_probe {
            replica_probe.close().await;
        }
    })
}

/// Records what a check found in `status` and `health`.
async fn record(status: &DatabaseStatus, health: &Health, answer: Answer) {
    let up = answer.answered();
    if status.set(up) {
        if up {
            tracing::info!("the database answers again; serving");
        } else {
            tracing::warn!(?answer, "the database does not answer; not serving until it does");
        }
    }
    health.database_changed(up).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus as Wire;
    use tonic_health::pb::health_server::Health as _;
    use tonic_health::server::HealthService;

    async fn status_of(service: &HealthService, name: &str) -> i32 {
        service
            .check(tonic::Request::new(HealthCheckRequest { service: name.into() }))
            .await
            .map(|r| r.into_inner().status)
            .unwrap_or(-1)
    }

    #[tokio::test]
    async fn the_database_flips_the_statuses_until_a_drain() {
        const API: &str = "converge.v1.ResourceService";
        let reporter = HealthReporter::new();
        let service = HealthService::from_health_reporter(reporter.clone());
        let (ready, readiness) = watch::channel(false);
        let health = Health::serving(reporter, vec![API], ready).await;
        assert!(*readiness.borrow());
        let (serving, not_serving) = (Wire::Serving as i32, Wire::NotServing as i32);
        assert_eq!(status_of(&service, "").await, serving);
        assert_eq!(status_of(&service, API).await, serving);

        health.database_changed(false).await;
        assert!(!*readiness.borrow());
        assert_eq!(status_of(&service, "").await, not_serving);
        assert_eq!(status_of(&service, API).await, not_serving);

        health.database_changed(true).await;
        assert_eq!(status_of(&service, "").await, serving);
        assert_eq!(status_of(&service, API).await, serving);

        health.drain().await;
        health.database_changed(true).await;
        assert_eq!(status_of(&service, "").await, not_serving, "a drain is final");
        assert!(!*readiness.borrow(), "a drain is final");
        assert_eq!(status_of(&service, API).await, not_serving);
    }
}
