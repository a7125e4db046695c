//! A reactor chain: `bom-publisher` appends the rolled-up status of every
//! synced `bom` to a JSON-lines file, the sink named by its default provider
//! config (`{"path": "..."}`).
//!
//! Wire it with a default config and a binding (see `examples/publisher/README.md`):
//! the binding records one delivery in the transaction of each bom's sync,
//! the broker hands it to this provider, and the line lands in the file.
//! Deliveries are at least once; the sink is idempotent by dedup token.

use std::io::Write as _;
use std::path::PathBuf;

use converge_sdk::worker::{
    HandlerError, KindVersion, Outcome, Provider, ReactionRequest, StageInput, WorkerBuilder, async_trait,
};
use serde_json::json;

/// The reactor kind.
pub const PUBLISHER: &str = "bom-publisher";
/// Its version.
pub const KIND_VERSION: i32 = 1;
/// The manifest file, `(path under examples/, content)`.
pub const MANIFEST_FILE: (&str, &str) = ("publisher/manifest.json", include_str!("../publisher/manifest.json"));

/// Registers the publisher on `builder`.
pub fn register(builder: WorkerBuilder) -> WorkerBuilder {
    builder.provider(Publisher)
}

/// Serves `bom-publisher`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Publisher;

#[async_trait]
impl Provider for Publisher {
    fn kind(&self) -> KindVersion {
        KindVersion::new(PUBLISHER, KIND_VERSION)
    }

    /// Without a sink there is nowhere to publish: no deliveries until the
    /// default config names one.
    fn requires_default_config(&self) -> bool {
        true
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let StageInput::React(input) = &request.input else {
            return Err(HandlerError::terminal("bom-publisher only reacts"));
        };
        let path = request
            .effective_config()
            .and_then(|c| c.get("path").and_then(|p| p.as_str()).map(PathBuf::from))
            .ok_or_else(|| HandlerError::transient("no sink: the default provider config names no path"))?;
        let line = json!({
            "dedupToken": input.dedup_token,
            "binding": input.binding,
            "bom": request.resource.name,
            "generation": request.generation,
            "status": request.resource.status,
        });
        let token = input.dedup_token.clone();
        tokio::task::spawn_blocking(move || append_once(&path, &token, &line.to_string()))
            .await
            .map_err(|e| HandlerError::transient(format!("the sink write did not finish: {e}")))?
            .map_err(|e| HandlerError::transient(format!("cannot write the sink: {e}")))?;
        Ok(Outcome::new())
    }
}

/// Appends `line` unless a line with `token` is already there.
fn append_once(path: &std::path::Path, token: &str, line: &str) -> std::io::Result<()> {
    let quoted = format!("\"dedupToken\":{}", json!(token));
    match std::fs::read_to_string(path) {
        Ok(existing) if existing.lines().any(|l| l.contains(&quoted)) => return Ok(()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(file, "{line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_appended_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sink.jsonl");
        let line = json!({"dedupToken": "a:synced:1:b", "bom": "demo"}).to_string();
        append_once(&path, "a:synced:1:b", &line).unwrap();
        append_once(&path, "a:synced:1:b", &line).unwrap();
        let other = json!({"dedupToken": "a:synced:2:b", "bom": "demo"}).to_string();
        append_once(&path, "a:synced:2:b", &other).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    }

    #[test]
    fn the_manifest_is_a_reactor_kind() {
        let request = crate::parse_apply_request(MANIFEST_FILE.0, MANIFEST_FILE.1).unwrap();
        let manifest = request.manifest.unwrap();
        assert_eq!(
            (manifest.kind.as_str(), manifest.kind_version),
            (PUBLISHER, KIND_VERSION)
        );
        assert_eq!(manifest.reactions.len(), 1);
        assert!(manifest.config_schema.is_some());
    }
}
