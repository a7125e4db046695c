//! What the benchmark binaries share: a durable embedded PostgreSQL in a
//! directory of their own, and latency percentiles.

use std::path::Path;

use converge_service::db::embedded::{EmbeddedOptions, EmbeddedPostgres};
use converge_service::db::ensure_database;
use serde_json::json;

/// Starts (or restarts, when `dir` already holds one) a durable embedded
/// cluster in `dir` with production settings (not the tests' `fsync=off`)
/// plus `settings`, and creates `database` in it; returns the server, which
/// stops when dropped, and a TCP URL of the database.
pub async fn durable_postgres(
    dir: &Path,
    database: &str,
    settings: &[(String, String)],
) -> anyhow::Result<(EmbeddedPostgres, String)> {
    let mut options = EmbeddedOptions::durable(dir);
    options.settings.extend(settings.iter().cloned());
    let server = EmbeddedPostgres::start(&options)?;
    ensure_database(&server.connect_options("postgres"), database).await?;
    let url = server.tcp_url(database);
    Ok((server, url))
}

/// p50, p99, mean and max of a set of timings in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    /// Calls timed.
    pub calls: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Mean.
    pub mean: f64,
    /// Slowest.
    pub max: f64,
}

impl Latency {
    /// The figures of `millis` (all zero when empty).
    pub fn of(mut millis: Vec<f64>) -> Self {
        if millis.is_empty() {
            return Self {
                calls: 0,
                p50: 0.0,
                p99: 0.0,
                mean: 0.0,
                max: 0.0,
            };
        }
        millis.sort_by(f64::total_cmp);
        let at = |q: f64| millis[((millis.len() - 1) as f64 * q).round() as usize];
        Self {
            calls: millis.len(),
            p50: at(0.5),
            p99: at(0.99),
            mean: millis.iter().sum::<f64>() / millis.len() as f64,
            max: at(1.0),
        }
    }

    /// As JSON: `calls`, `p50_ms`, `p99_ms`, `mean_ms`, `max_ms`.
    pub fn to_json(&self) -> serde_json::Value {
        json!({"calls": self.calls, "p50_ms": self.p50, "p99_ms": self.p99, "mean_ms": self.mean, "max_ms": self.max})
    }
}
