//! JSON log lines that name the trace they were written in.

use std::fmt;
use std::sync::OnceLock;

use opentelemetry::trace::TraceContextExt as _;
use tracing::dispatcher::WeakDispatch;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The installed dispatcher, for reading a span's OpenTelemetry context
/// while an event is formatted (inside the subscriber `get_default` would
/// answer with no dispatcher at all).
static DISPATCH: OnceLock<WeakDispatch> = OnceLock::new();

/// Remembers the global dispatcher just installed.
pub(super) fn remember_dispatch() {
    tracing::dispatcher::get_default(|dispatch| {
        let _ = DISPATCH.set(dispatch.downgrade());
    });
}

/// Wraps a JSON event format: inside a span that belongs to a trace, the
/// line gains `"trace_id"` and `"span_id"` (W3C hex), the keys a log
/// pipeline joins traces on.
pub(super) struct WithTraceIds<F> {
    inner: F,
}

impl<F> WithTraceIds<F> {
    pub(super) fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let ids = ctx.lookup_current().and_then(|span| {
            let dispatch = DISPATCH.get()?.upgrade()?;
            let context = tracing_opentelemetry::get_otel_context(&span.id(), &dispatch)?;
            let span = context.span();
            let ids = span.span_context();
            ids.is_valid().then(|| (ids.trace_id(), ids.span_id()))
        });
        let Some((trace_id, span_id)) = ids else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        match line.trim_end().strip_suffix('}') {
            Some(object) => writeln!(writer, r#"{object},"trace_id":"{trace_id}","span_id":"{span_id}"}}"#),
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::TracerProvider as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_json_line_inside_a_traced_span_names_its_trace_and_span() {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let buffer = Buffer::default();
        let written = buffer.clone();
        let subscriber = tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .event_format(WithTraceIds::new(
                        tracing_subscriber::fmt::format().json().flatten_event(true),
                    ))
                    .with_writer(move || written.clone()),
            )
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let dispatch = tracing::Dispatch::new(subscriber);
        let _ = DISPATCH.set(dispatch.downgrade());
        let expected = tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("operation");
            let ids = {
                let _inside = span.enter();
                tracing::info!("inside");
                let context = span.context();
                let ids = context.span().span_context().clone();
                (ids.trace_id().to_string(), ids.span_id().to_string())
            };
            tracing::info!("outside");
            ids
        });
        let text = String::from_utf8(buffer.0.lock().map(|b| b.clone()).unwrap_or_default()).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        assert_eq!(lines.len(), 2, "two JSON lines: {text}");
        assert_eq!(lines[0]["message"], "inside");
        assert_eq!(lines[0]["trace_id"], expected.0.as_str());
        assert_eq!(lines[0]["span_id"], expected.1.as_str());
        assert_eq!(lines[1]["message"], "outside");
        assert!(lines[1].get("trace_id").is_none());
    }
}
