//! Logging setup: `tracing` with text or JSON output.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt;

use crate::config::LogFormat;

/// Installs the global subscriber. Call once, at the binary edge.
///
/// `filter` has been validated by the config parser; an invalid one falls back to `info`.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // A second init (tests, embedding) is harmless: keep the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
