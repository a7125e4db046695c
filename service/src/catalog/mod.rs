//! The compiled kind manifests of this process.
//!
//! Correctness never depends on this cache: every resource write reads the
//! manifest version in force inside its own transaction (under the kind's
//! shared lock) and asks the catalog for exactly that version, recompiling
//! from the database when the cache is behind. The LISTEN wake and the
//! failsafe re-read only keep the cache warm, so writes rarely compile.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sqlx::{PgConnection, PgPool};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::db::notify::{Channel, Notice, Notifications};
use crate::domain::compiled::{CompiledKind, compile_manifest};
use crate::store::{StoreError, kinds};

/// How often the whole cache is re-checked against the database even without
/// notifications.
const FAILSAFE_INTERVAL: Duration = Duration::from_secs(30);

/// Why a compiled manifest could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The manifest vanished (deleted concurrently).
    #[error("kind {kind} version {kind_version} has no manifest")]
    Missing {
        /// Kind.
        kind: String,
        /// Kind version.
        kind_version: i32,
    },
    /// A stored manifest no longer compiles (it was valid when stored).
    #[error("stored manifest of {kind} version {kind_version} does not compile: {detail}")]
    Invalid {
        /// Kind.
        kind: String,
        /// Kind version.
        kind_version: i32,
        /// What failed.
        detail: String,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] StoreError),
}

type Key = (String, i32);

/// Compiled manifests keyed by (kind, kind_version).
#[derive(Debug, Default)]
pub struct KindCatalog {
    compiled: RwLock<HashMap<Key, Arc<CompiledKind>>>,
}

impl KindCatalog {
    /// An empty catalog.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The cached compiled manifest of a kind version, if any.
    pub fn cached(&self, kind: &str, kind_version: i32) -> Option<Arc<CompiledKind>> {
        let map = self.compiled.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        map.get(&(kind.to_owned(), kind_version)).cloned()
    }

    /// The manifest version of a cached kind version, if cached.
    pub fn cached_version(&self, kind: &str, kind_version: i32) -> Option<i64> {
        self.cached(kind, kind_version).map(|c| c.manifest_version)
    }

    /// Caches a compiled manifest.
    pub fn insert(&self, compiled: Arc<CompiledKind>) {
        let key = (compiled.manifest.kind.clone(), compiled.manifest.kind_version);
        let mut map = self.compiled.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        map.insert(key, compiled);
    }

    /// Forgets one kind version.
    pub fn evict(&self, kind: &str, kind_version: i32) {
        let mut map = self.compiled.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        map.remove(&(kind.to_owned(), kind_version));
    }

    /// The compiled manifest of a kind version: cached, or loaded now.
    pub async fn current(&self, pool: &PgPool, kind: &str, kind_version: i32) -> Option<Arc<CompiledKind>> {
        if let Some(hit) = self.cached(kind, kind_version) {
            return Some(hit);
        }
        let mut conn = pool.acquire().await.ok()?;
        let compiled = load(&mut conn, kind, kind_version).await.ok()?;
        self.insert(compiled.clone());
        Some(compiled)
    }

    /// The compiled manifest of (kind, kind_version) at exactly
    /// `manifest_version`, read through `conn` (inside the caller's
    /// transaction) when the cache holds another version.
    pub async fn compiled(
        &self,
        conn: &mut PgConnection,
        kind: &str,
        kind_version: i32,
        manifest_version: i64,
    ) -> Result<Arc<CompiledKind>, CatalogError> {
        if let Some(hit) = self.cached(kind, kind_version)
            && hit.manifest_version == manifest_version
        {
            return Ok(hit);
        }
        let compiled = load(conn, kind, kind_version).await?;
        self.insert(compiled.clone());
        Ok(compiled)
    }

    /// Keeps the cache fresh until `stop` flips: reloads a kind version when
    /// its manifest changes anywhere in the cluster, and re-checks every
    /// cached entry periodically in case a notification was missed.
    pub fn spawn_refresher(
        self: Arc<Self>,
        pool: PgPool,
        notifications: &Notifications,
        mut stop: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        let mut changes = notifications.subscribe(&[Channel::KindManifestChanged]);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FAILSAFE_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tick.tick() => self.recheck_all(&pool).await,
                    notice = changes.recv() => match notice {
                        Notice::Notified { payload, .. } => self.refresh_one(&pool, &payload).await,
                        Notice::Missed => self.recheck_all(&pool).await,
                    },
                }
            }
        })
    }

    async fn refresh_one(&self, pool: &PgPool, payload: &str) {
        let Some((kind, version)) = payload.rsplit_once(':') else {
            return;
        };
        let Ok(version) = version.parse::<i32>() else { return };
        self.evict(kind, version);
        let loaded = match pool.acquire().await {
            Ok(mut conn) => load(&mut conn, kind, version).await,
            Err(e) => Err(CatalogError::Database(e.into())),
        };
        match loaded {
            Ok(compiled) => self.insert(compiled),
            Err(CatalogError::Missing { .. }) => {}
            Err(e) => tracing::warn!(error = %e, kind, version, "could not refresh a kind manifest"),
        }
    }

    async fn recheck_all(&self, pool: &PgPool) {
        let keys: Vec<(Key, i64)> = {
            let map = self.compiled.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            map.iter().map(|(k, v)| (k.clone(), v.manifest_version)).collect()
        };
        let Ok(mut conn) = pool.acquire().await else { return };
        for ((kind, version), cached_version) in keys {
            match kinds::kind_state(&mut conn, &kind, version).await {
                Ok(Some(state)) if state.manifest_version == cached_version => {}
                Ok(_) => self.evict(&kind, version),
                Err(e) => {
                    tracing::debug!(error = %e, "manifest cache re-check failed");
                    return;
                }
            }
        }
    }
}

async fn load(conn: &mut PgConnection, kind: &str, kind_version: i32) -> Result<Arc<CompiledKind>, CatalogError> {
    let stored = kinds::get_manifest(conn, kind, kind_version)
        .await?
        .ok_or_else(|| CatalogError::Missing {
            kind: kind.to_owned(),
            kind_version,
        })?;
    let compiled = compile_manifest(stored.manifest).map_err(|violations| CatalogError::Invalid {
        kind: kind.to_owned(),
        kind_version,
        detail: violations
            .iter()
            .map(|v| format!("{}: {}", v.field, v.description))
            .collect::<Vec<_>>()
            .join("; "),
    })?;
    Ok(Arc::new(compiled))
}
