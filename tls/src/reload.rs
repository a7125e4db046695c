//! Material rebuilt from files when their content changes.
//!
//! Files are polled rather than watched with inotify: mounted secrets
//! (Kubernetes, Vault agents) are swapped through symlinks that file
//! watchers often miss, and a read every few seconds costs nothing.

use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use crate::TlsError;
use crate::material::read;

/// A value readers take a cheap snapshot of, replaced whole by the reloader.
#[derive(Debug)]
pub(crate) struct Slot<T> {
    current: RwLock<Arc<T>>,
}

impl<T> Slot<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            current: RwLock::new(Arc::new(value)),
        }
    }

    /// The current value.
    pub(crate) fn get(&self) -> Arc<T> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            // A writer panicked mid-swap; the Arc inside is still whole.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, value: T) {
        let value = Arc::new(value);
        match self.current.write() {
            Ok(mut guard) => *guard = value,
            Err(poisoned) => *poisoned.into_inner() = value,
        }
    }
}

/// Builds material from the contents of its files, in the order given.
pub(crate) type Build<T> = fn(&[PathBuf], &[Vec<u8>]) -> Result<T, TlsError>;

/// Reads `paths`, builds the material and returns it in a slot that a
/// background task keeps current every `interval` for as long as the slot
/// is referenced elsewhere.
pub(crate) fn load<T: Send + Sync + 'static>(
    what: &'static str,
    paths: Vec<PathBuf>,
    build: Build<T>,
    interval: Duration,
) -> Result<Arc<Slot<T>>, TlsError> {
    let contents = paths.iter().map(|p| read(p)).collect::<Result<Vec<_>, _>>()?;
    let slot = Arc::new(Slot::new(build(&paths, &contents)?));
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| TlsError::NoRuntime)?;
    let watcher = Watcher {
        what,
        paths,
        build,
        applied: contents.clone(),
        seen: contents,
        slot: Arc::downgrade(&slot),
    };
    runtime.spawn(watcher.run(interval));
    Ok(slot)
}

struct Watcher<T> {
    what: &'static str,
    paths: Vec<PathBuf>,
    build: Build<T>,
    /// The contents the slot's material was built from.
    applied: Vec<Vec<u8>>,
    /// The contents last read (a refused set is reported once, not every tick).
    seen: Vec<Vec<u8>>,
    slot: Weak<Slot<T>>,
}

impl<T> Watcher<T> {
    async fn run(mut self, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(slot) = self.slot.upgrade() else {
                return;
            };
            self.check(&slot);
        }
    }

    fn check(&mut self, slot: &Slot<T>) {
        let contents = match self.paths.iter().map(|p| read(p)).collect::<Result<Vec<_>, _>>() {
            Ok(contents) => contents,
            Err(e) => {
                // Mid-rotation a file can be briefly absent; say so once.
                if !self.seen.is_empty() {
                    tracing::warn!(what = self.what, error = %e, "TLS files unreadable; keeping the current material");
                    self.seen.clear();
                }
                return;
            }
        };
        if contents == self.applied || contents == self.seen {
            return;
        }
        match (self.build)(&self.paths, &contents) {
            Ok(material) => {
                slot.set(material);
                tracing::info!(what = self.what, "TLS material reloaded");
                self.applied = contents.clone();
            }
            Err(e) => {
                tracing::warn!(what = self.what, error = %e, "changed TLS files refused; keeping the current material");
            }
        }
        self.seen = contents;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(paths: &[PathBuf], contents: &[Vec<u8>]) -> Result<u32, TlsError> {
        let text = String::from_utf8_lossy(contents.first().map(Vec::as_slice).unwrap_or_default()).into_owned();
        text.trim().parse().map_err(|_| TlsError::Refused {
            what: paths.first().map(|p| p.display().to_string()).unwrap_or_default(),
            reason: "not a number".into(),
        })
    }

    #[tokio::test]
    async fn changed_files_that_build_replace_the_material_and_others_keep_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("n");
        std::fs::write(&path, "1").expect("write");
        assert!(load("test", vec![dir.path().join("absent")], number, Duration::from_secs(60)).is_err());
        let slot = load("test", vec![path.clone()], number, Duration::from_secs(3600)).expect("loads");
        let mut watcher = Watcher {
            what: "test",
            paths: vec![path.clone()],
            build: number,
            applied: vec![b"1".to_vec()],
            seen: vec![b"1".to_vec()],
            slot: Arc::downgrade(&slot),
        };
        assert_eq!(*slot.get(), 1);
        std::fs::write(&path, "not yet").expect("write");
        watcher.check(&slot);
        assert_eq!(
            *slot.get(),
            1,
            "a file that does not build keeps the last good material"
        );
        std::fs::remove_file(&path).expect("remove");
        watcher.check(&slot);
        assert_eq!(*slot.get(), 1, "an absent file keeps it too");
        std::fs::write(&path, "2").expect("write");
        watcher.check(&slot);
        assert_eq!(*slot.get(), 2);
        std::fs::write(&path, "1").expect("write");
        watcher.check(&slot);
        assert_eq!(*slot.get(), 1, "going back to earlier content is a change too");
    }

    #[tokio::test]
    async fn the_watcher_stops_when_the_material_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("n");
        std::fs::write(&path, "7").expect("write");
        let slot = load("test", vec![path], number, Duration::from_millis(10)).expect("loads");
        let weak = Arc::downgrade(&slot);
        drop(slot);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(weak.upgrade().is_none());
    }
}
