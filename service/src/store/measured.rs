//! The one wrapper every store operation runs in: a client span and the
//! `db.client.operation.duration` measurement, named by operation (never by
//! SQL text), when telemetry is on; nothing but two atomic loads when off.

use std::future::Future;
use std::time::Instant;

use tracing::Instrument as _;

use super::StoreResult;
use crate::telemetry;

/// Runs the store operation `name` (`module.function`).
pub(crate) async fn measured<T>(name: &'static str, operation: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
    // Spans only inside a traced operation (a call, a reconcile): the
    // engine's own loops would otherwise start a root trace per statement.
    let traced = telemetry::tracing_enabled() && !tracing::Span::current().is_none();
    let timed = telemetry::metrics().is_some();
    if !traced && !timed {
        return operation.await;
    }
    let span = if traced {
        tracing::info_span!(
            "db",
            otel.name = name,
            otel.kind = "client",
            db.system.name = "postgresql",
            db.operation.name = name,
            error.type = tracing::field::Empty,
        )
    } else {
        tracing::Span::none()
    };
    let started = Instant::now();
    let outcome = operation.instrument(span.clone()).await;
    let error = outcome.as_ref().err().map(super::StoreError::class);
    if let Some(class) = error {
        span.record("error.type", class);
    }
    telemetry::metrics::record_db(name, started.elapsed(), error);
    outcome
}
