//! The observed instruments of this process: figures its parts already
//! keep (broker counters, pool sizes, the database probe, the queue
//! sample), read by callbacks when metrics are collected.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;
use sqlx::PgPool;

use crate::broker::BrokerStats;
use crate::db::probe::DatabaseStatus;
use crate::engine::fleet_summary::{self, SharedSummary};
use crate::engine::queue_sampler::{self, SharedSample};

/// Registers the broker's counters and gauges.
pub fn broker(meter: &Meter, stats: Arc<BrokerStats>) {
    let counter = |name: &'static str, description: &'static str, read: fn(&BrokerStats) -> u64| {
        let stats = stats.clone();
        meter
            .u64_observable_counter(name)
            .with_description(description)
            .with_callback(move |observer| observer.observe(read(&stats), &[]))
            .build();
    };
    counter(
        "converge.broker.tasks.dispatched",
        "Tasks sent to workers (every stage counts).",
        |s| s.dispatched.load(Ordering::Relaxed),
    );
    counter(
        "converge.broker.results.applied",
        "Worker results accepted by the fence.",
        |s| s.applied.load(Ordering::Relaxed),
    );
    counter(
        "converge.fence.rejections",
        "Worker results dropped by the fence: stale (a newer generation, a lost lease, a rotated stage).",
        |s| s.stale.load(Ordering::Relaxed),
    );
    counter("converge.broker.failures", "Task failures recorded.", |s| {
        s.failed.load(Ordering::Relaxed)
    });
    let gauge = |name: &'static str, description: &'static str, read: fn(&BrokerStats) -> i64| {
        let stats = stats.clone();
        meter
            .i64_observable_gauge(name)
            .with_description(description)
            .with_callback(move |observer| observer.observe(read(&stats), &[]))
            .build();
    };
    gauge(
        "converge.broker.workers.connected",
        "Worker streams open on this process.",
        |s| s.connected.load(Ordering::Relaxed),
    );
    gauge(
        "converge.broker.tasks.in_flight",
        "Tasks held by this process's worker streams.",
        |s| s.in_flight.load(Ordering::Relaxed),
    );
}

/// Registers the pool's connection gauges (semantic conventions:
/// `db.client.connection.*`).
pub fn pool(meter: &Meter, pool: PgPool, name: &'static str) {
    let counted = pool.clone();
    meter
        .i64_observable_gauge("db.client.connection.count")
        .with_description("Open connections of the pool, by state.")
        .with_callback(move |observer| {
            let size = i64::from(counted.size());
            let idle = i64::try_from(counted.num_idle()).unwrap_or(i64::MAX);
            let pool_name = KeyValue::new("db.client.connection.pool.name", name);
            observer.observe(
                idle,
                &[pool_name.clone(), KeyValue::new("db.client.connection.state", "idle")],
            );
            observer.observe(
                (size - idle).max(0),
                &[pool_name, KeyValue::new("db.client.connection.state", "used")],
            );
        })
        .build();
    meter
        .i64_observable_gauge("db.client.connection.max")
        .with_description("Connections the pool may open.")
        .with_callback(move |observer| {
            observer.observe(
                i64::from(pool.options().get_max_connections()),
                &[KeyValue::new("db.client.connection.pool.name", name)],
            )
        })
        .build();
}

/// Registers whether the database answers (1) or not (0), as the probe
/// last saw it; `embedded` tells whether it is this process's own cluster.
pub fn database(meter: &Meter, status: DatabaseStatus, embedded: bool) {
    meter
        .i64_observable_gauge("converge.database.up")
        .with_description("1 while the database answers the probe, 0 while it does not.")
        .with_callback(move |observer| {
            observer.observe(
                i64::from(status.is_up()),
                &[KeyValue::new("converge.database.embedded", embedded)],
            )
        })
        .build();
}

/// Registers the resources-by-phase gauge, read from the fleet summary's
/// snapshot (bounded: kinds x versions x seven phases).
pub fn resources(meter: &Meter, shared: SharedSummary) {
    meter
        .i64_observable_gauge("converge.resources")
        .with_description("Resources by kind, kind version and phase, from the fleet summary's latest snapshot.")
        .with_callback(move |observer| {
            for count in fleet_summary::latest(&shared)
                .map(|s| s.phase_counts)
                .unwrap_or_default()
            {
                observer.observe(
                    count.count,
                    &[
                        KeyValue::new("converge.kind", count.kind),
                        KeyValue::new("converge.kind_version", i64::from(count.kind_version)),
                        KeyValue::new("converge.phase", count.phase),
                    ],
                );
            }
        })
        .build();
}

/// Registers the sampled figures of tasks no worker serves, by (kind,
/// kind_version): bounded by the configured kind versions.
pub fn unserved(meter: &Meter, figures: crate::engine::unserved::SharedFigures) {
    let tasks = figures.clone();
    meter
        .i64_observable_gauge("converge.unserved.tasks")
        .with_description("Tasks nobody holds of a kind version no connected worker serves.")
        .with_callback(move |observer| {
            for figure in crate::engine::unserved::latest(&tasks) {
                observer.observe(figure.tasks, &pair_labels(figure.kind, figure.kind_version));
            }
        })
        .build();
    meter
        .f64_observable_gauge("converge.unserved.task_oldest_age")
        .with_unit("s")
        .with_description("Age of the oldest task of a kind version no connected worker serves.")
        .with_callback(move |observer| {
            let now = chrono::Utc::now();
            for figure in crate::engine::unserved::latest(&figures) {
                let age = (now - figure.oldest_waiting_since).num_milliseconds().max(0) as f64 / 1000.0;
                observer.observe(age, &pair_labels(figure.kind, figure.kind_version));
            }
        })
        .build();
}

fn pair_labels(kind: String, version: i32) -> [KeyValue; 2] {
    [
        KeyValue::new("converge.kind", kind),
        KeyValue::new("converge.kind_version", i64::from(version)),
    ]
}

/// Registers the sampled queue figures.
pub fn queue(meter: &Meter, sample: SharedSample) {
    let depth = sample.clone();
    meter
        .i64_observable_gauge("converge.queue.depth")
        .with_description("Tasks in the work queue by kind and state (queued: waiting for a claim; leased: held).")
        .with_callback(move |observer| {
            for figure in queue_sampler::latest(&depth).kinds {
                let kind = KeyValue::new("converge.kind", figure.kind);
                observer.observe(
                    figure.queued,
                    &[kind.clone(), KeyValue::new("converge.task.state", "queued")],
                );
                observer.observe(figure.leased, &[kind, KeyValue::new("converge.task.state", "leased")]);
            }
        })
        .build();
    let age = sample.clone();
    meter
        .f64_observable_gauge("converge.queue.oldest_age")
        .with_unit("s")
        .with_description("Age of the oldest due task nobody holds, by kind.")
        .with_callback(move |observer| {
            for figure in queue_sampler::latest(&age).kinds {
                observer.observe(figure.oldest_due_secs, &[KeyValue::new("converge.kind", figure.kind)]);
            }
        })
        .build();
    meter
        .f64_observable_gauge("converge.drain.lag")
        .with_unit("s")
        .with_description("Age of the oldest worker result not yet applied by the drainer.")
        .with_callback(move |observer| observer.observe(queue_sampler::latest(&sample).drain_lag_secs, &[]))
        .build();
}

/// Registers the authorization counters: refusals, and policy reloads that
/// failed (the previous policy stayed in force).
pub fn authz(meter: &Meter, authz: crate::contract::authz::Authorizer) {
    let reloads = authz.clone();
    meter
        .u64_observable_counter("converge.authz.refusals")
        .with_description("Calls and worker subscriptions the authorization policy refused.")
        .with_callback(move |observer| observer.observe(authz.refusals(), &[]))
        .build();
    meter
        .u64_observable_counter("converge.authz.reload_failures")
        .with_description("Re-reads of the authorization policy file that did not check; the previous policy stayed.")
        .with_callback(move |observer| observer.observe(reloads.reload_failures(), &[]))
        .build();
}
