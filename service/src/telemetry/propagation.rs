//! W3C trace context in and out of carriers: gRPC metadata, the
//! `trace_context` map of a worker task, and the text stored with queued
//! work (`traceparent` and, when present, `tracestate`, one per line).

use std::collections::BTreeMap;

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Longest carried trace state, in bytes (W3C caps it at 512).
const MAX_VALUE_BYTES: usize = 512;

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct Map<'a>(&'a BTreeMap<String, String>);

impl Extractor for Map<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct IntoMap<'a>(&'a mut BTreeMap<String, String>);

impl Injector for IntoMap<'_> {
    fn set(&mut self, key: &str, value: String) {
        if value.len() <= MAX_VALUE_BYTES {
            self.0.insert(key.to_owned(), value);
        }
    }
}

/// The remote parent named by incoming request headers (`traceparent`).
pub fn from_headers(headers: &http::HeaderMap) -> Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)))
}

/// The remote parent named by a carrier map.
pub fn from_map(map: &BTreeMap<String, String>) -> Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&Map(map)))
}

/// The carrier map of a span's context (the shape of
/// `StageTask.trace_context`); empty when the span is not part of
/// a sampled trace.
pub fn to_map(span: &tracing::Span) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut IntoMap(&mut map)));
    map
}

/// The current span's context as stored with queued work, or `None` when
/// tracing is off or the current span is not sampled.
pub fn current_as_text() -> Option<String> {
    if !super::tracing_enabled() {
        return None;
    }
    let map = to_map(&tracing::Span::current());
    let parent = map.get("traceparent")?;
    Some(match map.get("tracestate") {
        Some(state) if !state.is_empty() => format!("{parent}\n{state}"),
        _ => parent.clone(),
    })
}

/// The carrier map of text stored by [`current_as_text`].
pub fn map_of_text(text: &str) -> BTreeMap<String, String> {
    let mut lines = text.splitn(2, '\n');
    let mut map = BTreeMap::new();
    if let Some(parent) = lines.next().filter(|p| !p.is_empty()) {
        map.insert("traceparent".to_owned(), parent.to_owned());
    }
    if let Some(state) = lines.next().filter(|s| !s.is_empty()) {
        map.insert("tracestate".to_owned(), state.to_owned());
    }
    map
}

/// Makes `span` a child of the context stored as `text` (a no-op for text
/// that names no valid trace).
pub fn continue_from_text(span: &tracing::Span, text: &str) {
    let _ = span.set_parent(from_map(&map_of_text(text)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_round_trips_to_a_carrier_map() {
        let map = map_of_text("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\nvendor=1");
        assert_eq!(
            map.get("traceparent").map(String::as_str),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert_eq!(map.get("tracestate").map(String::as_str), Some("vendor=1"));
        assert!(map_of_text("").is_empty());
        assert_eq!(map_of_text("00-a-b-01").len(), 1);
    }
}
