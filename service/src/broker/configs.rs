//! The default provider configs as this broker last pushed them, and the
//! refresher that turns their changes into `ProviderConfigUpdate`s for the
//! sessions: woken by the `provider_config_changed` notification of a
//! change anywhere in the cluster, and re-reading every default
//! periodically and after a possibly missed notification (the manifest
//! cache's scheme), so each change reaches every broker's workers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use converge_proto::worker_v1 as wpb;
use sqlx::PgPool;
use tokio::sync::broadcast;

use crate::contract::convert::json_to_struct;
use crate::db::notify::{Notice, Subscription};
use crate::domain::provider_config::ProviderConfig;
use crate::store::{StoreResult, provider_configs};

/// How often every default is re-read even without notifications.
const FAILSAFE_INTERVAL: Duration = Duration::from_secs(30);
/// Updates buffered per session before it counts as fallen behind (it then
/// re-reads the defaults of its pairs).
const BUFFER: usize = 256;

type Pair = (String, i32);

/// The defaults last announced, by pair (their etags), and the feed of changes.
#[derive(Debug)]
pub(super) struct DefaultConfigs {
    known: Mutex<HashMap<Pair, String>>,
    updates: broadcast::Sender<Arc<wpb::ProviderConfigUpdate>>,
}

impl DefaultConfigs {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            known: Mutex::new(HashMap::new()),
            updates: broadcast::channel(BUFFER).0,
        })
    }

    /// The feed of default changes, for one session.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Arc<wpb::ProviderConfigUpdate>> {
        self.updates.subscribe()
    }

    /// Re-reads one pair's default; announces it if it changed.
    async fn refresh_pair(&self, pool: &PgPool, pair: Pair) -> StoreResult<()> {
        let mut conn = pool.acquire().await?;
        let current = provider_configs::default_of(&mut conn, &pair.0, pair.1).await?;
        self.settle(pair, current);
        Ok(())
    }

    /// Re-reads every default; announces those that changed or went away.
    async fn refresh_all(&self, pool: &PgPool) -> StoreResult<()> {
        let all = provider_configs::all_defaults(pool).await?;
        let mut gone: Vec<Pair> = self.lock().keys().cloned().collect();
        for config in all {
            let pair = (config.kind.clone(), config.kind_version);
            gone.retain(|p| *p != pair);
            self.settle(pair, Some(config));
        }
        for pair in gone {
            self.settle(pair, None);
        }
        Ok(())
    }

    /// Records the pair's current default and announces it if it differs
    /// from the last one announced.
    fn settle(&self, pair: Pair, current: Option<ProviderConfig>) {
        let etag = current.as_ref().map(ProviderConfig::etag);
        {
            let mut known = self.lock();
            if known.get(&pair) == etag.as_ref() {
                return;
            }
            match &etag {
                Some(etag) => known.insert(pair.clone(), etag.clone()),
                None => known.remove(&pair),
            };
        }
        tracing::debug!(kind = %pair.0, version = pair.1, present = current.is_some(), "default provider config changed");
        // No receiver is no error: no worker is connected.
        let _ = self.updates.send(Arc::new(update_of(pair, current)));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Pair, String>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The push message of a pair's default (`None`: it has none any more).
pub(super) fn update_of(pair: Pair, current: Option<ProviderConfig>) -> wpb::ProviderConfigUpdate {
    match current {
        Some(config) => wpb::ProviderConfigUpdate {
            kind: pair.0,
            kind_version: pair.1,
            spec: json_to_struct(&config.spec),
            data: config.data,
            deleted: false,
        },
        None => wpb::ProviderConfigUpdate {
            kind: pair.0,
            kind_version: pair.1,
            spec: None,
            data: Vec::new(),
            deleted: true,
        },
    }
}

/// Keeps `configs` current until the broker is dropped.
pub(super) async fn refresh(configs: std::sync::Weak<DefaultConfigs>, pool: PgPool, mut changes: Subscription) {
    let mut tick = tokio::time::interval(FAILSAFE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let notice = tokio::select! {
            _ = tick.tick() => Notice::Missed,
            notice = changes.next() => match notice {
                Some(notice) => notice,
                None => return,
            },
        };
        let Some(configs) = configs.upgrade() else { return };
        let refreshed = match notice {
            Notice::Notified { payload, .. } => match parse_pair(&payload) {
                Some(pair) => configs.refresh_pair(&pool, pair).await,
                None => configs.refresh_all(&pool).await,
            },
            Notice::Missed => configs.refresh_all(&pool).await,
        };
        if let Err(e) = refreshed {
            tracing::debug!(error = %e, "could not re-read default provider configs; retrying at the next tick");
        }
    }
}

/// `kind:version` of a notification payload.
fn parse_pair(payload: &str) -> Option<Pair> {
    let (kind, version) = payload.rsplit_once(':')?;
    Some((kind.to_owned(), version.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_name_a_pair() {
        assert_eq!(parse_pair("vpc:2"), Some(("vpc".to_owned(), 2)));
        assert_eq!(parse_pair("vpc"), None);
        assert_eq!(parse_pair("vpc:x"), None);
    }

    #[test]
    fn a_gone_default_is_announced_as_deleted() {
        let update = update_of(("vpc".into(), 1), None);
        assert!(update.deleted);
        assert!(update.spec.is_none());
    }
}
