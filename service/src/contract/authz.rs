//! Authorization at the edge of the contract: who the caller is for the
//! policy, the policy in force (reloaded from its file), the decision and
//! its refusal, its audit line and its refusal count (ADR 47).
//!
//! Off unless a policy file is configured; then every call of the API and
//! every worker subscription is decided here. Calls of the application
//! that embeds converge (the in-process transport) are never refused: the
//! policy governs who reaches converge from outside.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tonic::Request;

use super::caller::{ANONYMOUS, PeerIdentity};
use super::status::ApiError;
use crate::domain::authz::{Access, Object, Policy, ResourceAction, Scope, Verb};
use crate::domain::violation::{Violation, clip};

/// Who the policy sees: an identity, or the embedding application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The application that embeds converge: never refused.
    InProcess,
    /// A SPIFFE ID (verified, or the configured identity of plaintext
    /// callers), or [`ANONYMOUS`], which no binding names.
    Identity(String),
}

impl Principal {
    fn identity(&self) -> Option<&str> {
        match self {
            Principal::InProcess => None,
            Principal::Identity(id) => Some(id),
        }
    }
}

/// The policy in force and what the server counts about it. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    file: PathBuf,
    policy: RwLock<Arc<Policy>>,
    /// The file's text the policy was parsed from (reloads compare it).
    text: RwLock<String>,
    plaintext_identity: Option<String>,
    refusals: AtomicU64,
    reload_failures: AtomicU64,
    changes: watch::Sender<u64>,
}

/// Why a policy file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// The file cannot be read.
    #[error("cannot read the authorization policy {file}: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid policy.
    #[error("the authorization policy {file} is not valid: {problems}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Each problem, with its pointer into the document.
        problems: String,
    },
}

impl Authorizer {
    /// No policy: everything is allowed, nothing is counted.
    pub fn off() -> Self {
        Self::default()
    }

    /// The policy of `file`, which must read and check. Plaintext callers
    /// are `plaintext_identity` (a SPIFFE ID) when given, else anonymous.
    pub fn load(file: &Path, plaintext_identity: Option<String>) -> Result<Self, PolicyFileError> {
        let text = read(file)?;
        let policy = parse(file, &text)?;
        tracing::info!(
            file = %file.display(),
            bindings = policy.bindings(),
            "authorization policy loaded"
        );
        Ok(Self {
            inner: Some(Arc::new(Inner {
                file: file.to_owned(),
                policy: RwLock::new(Arc::new(policy)),
                text: RwLock::new(text),
                plaintext_identity,
                refusals: AtomicU64::new(0),
                reload_failures: AtomicU64::new(0),
                changes: watch::Sender::new(0),
            })),
        })
    }

    /// Whether a policy is enforced.
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Re-reads the file: a changed file that checks replaces the policy
    /// (and tells [`Authorizer::changes`] subscribers); one that does not
    /// is logged and counted, and the policy in force stays. Returns
    /// whether the policy changed.
    pub fn reload(&self) -> bool {
        let Some(inner) = &self.inner else {
            return false;
        };
        let outcome = read(&inner.file).and_then(|text| {
            if inner.text.read().map(|t| *t == text).unwrap_or(false) {
                return Ok(None);
            }
            parse(&inner.file, &text).map(|policy| Some((text, policy)))
        });
        match outcome {
            Ok(None) => false,
            Ok(Some((text, policy))) => {
                let bindings = policy.bindings();
                if let Ok(mut slot) = inner.policy.write() {
                    *slot = Arc::new(policy);
                }
                if let Ok(mut slot) = inner.text.write() {
                    *slot = text;
                }
                inner.changes.send_modify(|generation| *generation += 1);
                tracing::info!(target: "converge::audit", file = %inner.file.display(), bindings, "authorization policy reloaded");
                true
            }
            Err(e) => {
                inner.reload_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "authorization policy not reloaded; the previous one stays in force");
                false
            }
        }
    }

    /// Re-reads the file every `interval` until `stop` flips.
    pub fn spawn_reloader(&self, interval: Duration, mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            if !this.is_on() {
                return;
            }
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let reloader = this.clone();
                        // File reads block: off the runtime's workers.
                        let _ = tokio::task::spawn_blocking(move || reloader.reload()).await;
                    }
                    _ = stop.changed() => return,
                }
            }
        })
    }

    /// A receiver that sees a new value after every policy change.
    pub fn changes(&self) -> Option<watch::Receiver<u64>> {
        self.inner.as_ref().map(|inner| inner.changes.subscribe())
    }

    /// Refusals so far.
    pub fn refusals(&self) -> u64 {
        self.inner.as_ref().map_or(0, |i| i.refusals.load(Ordering::Relaxed))
    }

    /// Failed reloads so far.
    pub fn reload_failures(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |i| i.reload_failures.load(Ordering::Relaxed))
    }

    /// Who the caller of `request` is for the policy.
    pub fn principal<T>(&self, request: &Request<T>) -> Principal {
        let peer = request.extensions().get::<PeerIdentity>();
        if peer.is_some_and(|p| p.in_process) {
            return Principal::InProcess;
        }
        match peer.and_then(|p| p.spiffe_id.as_deref()) {
            Some(id) => Principal::Identity(id.to_owned()),
            None => Principal::Identity(
                self.inner
                    .as_ref()
                    .and_then(|i| i.plaintext_identity.clone())
                    .unwrap_or_else(|| ANONYMOUS.to_owned()),
            ),
        }
    }

    /// How far `principal` may do `action`: [`Scope::All`] when no policy
    /// is enforced or for the embedding application.
    pub fn scope(&self, principal: &Principal, action: ResourceAction<'_>) -> OwnedScope {
        let (Some(inner), Some(identity)) = (&self.inner, principal.identity()) else {
            return OwnedScope::All;
        };
        let policy = current(inner);
        OwnedScope::from(policy.scope(identity, action))
    }

    /// Whether `principal` may do `action` to every resource of the kind
    /// (a refusal otherwise).
    pub fn require_all(&self, principal: &Principal, action: ResourceAction<'_>, target: &str) -> Result<(), ApiError> {
        match self.scope(principal, action) {
            OwnedScope::All => Ok(()),
            _ => Err(self.refuse(principal, action.verb.as_str(), target)),
        }
    }

    /// Whether `principal` may do `action` at all (to some resources).
    pub fn require_some(
        &self,
        principal: &Principal,
        action: ResourceAction<'_>,
        target: &str,
    ) -> Result<OwnedScope, ApiError> {
        match self.scope(principal, action) {
            OwnedScope::None => Err(self.refuse(principal, action.verb.as_str(), target)),
            scope => Ok(scope),
        }
    }

    /// Whether `principal` may do `action` to one resource whose labels
    /// are `before` (when it exists) and `after` (when the call writes
    /// them): both must be in its scope, so a write cannot move a resource
    /// out of (or into) the caller's reach.
    pub fn require_labels(
        &self,
        principal: &Principal,
        action: ResourceAction<'_>,
        target: &str,
        labels: &[&BTreeMap<String, String>],
    ) -> Result<(), ApiError> {
        let scope = self.scope(principal, action);
        if labels.iter().all(|l| scope.admits(l)) && !matches!(scope, OwnedScope::None) {
            Ok(())
        } else {
            Err(self.refuse(principal, action.verb.as_str(), target))
        }
    }

    /// Whether `principal` may read or write `object`.
    pub fn require_object(&self, principal: &Principal, object: Object, access: Access) -> Result<(), ApiError> {
        let (Some(inner), Some(identity)) = (&self.inner, principal.identity()) else {
            return Ok(());
        };
        if current(inner).allows_object(identity, object, access) {
            if access == Access::Write {
                self.allowed(principal, access.as_str(), object.as_str());
            }
            Ok(())
        } else {
            Err(self.refuse(principal, access.as_str(), object.as_str()))
        }
    }

    /// Logs an allowed state-changing decision on the audit target (only
    /// while a policy is enforced: without one, the access layer's line
    /// is the record).
    pub fn allowed(&self, principal: &Principal, permission: &str, target: &str) {
        if self.inner.is_some() {
            let identity = principal.identity().unwrap_or("in-process");
            tracing::info!(
                target: "converge::audit",
                identity,
                permission,
                target,
                decision = "allowed",
                "authorized"
            );
        }
    }

    /// The refusal of `permission` on `target`, counted and logged.
    pub fn refuse(&self, principal: &Principal, permission: &str, target: &str) -> ApiError {
        if let Some(inner) = &self.inner {
            inner.refusals.fetch_add(1, Ordering::Relaxed);
        }
        let identity = principal.identity().unwrap_or("in-process");
        tracing::warn!(
            target: "converge::audit",
            identity,
            permission,
            target,
            decision = "refused",
            "not authorized"
        );
        ApiError::NotAuthorized {
            permission: permission.to_owned(),
            target: clip(target.to_owned(), 320),
        }
    }
}

/// [`Scope`] without the borrow of the policy (which may be replaced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedScope {
    /// Nothing is granted.
    None,
    /// Every resource of the kind.
    All,
    /// Resources matching at least one of these selectors.
    AnyOf(Vec<crate::domain::labels::LabelSelector>),
}

impl OwnedScope {
    /// Whether a resource with `labels` is in scope.
    pub fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            OwnedScope::None => false,
            OwnedScope::All => true,
            OwnedScope::AnyOf(selectors) => selectors.iter().any(|s| s.matches(labels)),
        }
    }
}

impl From<Scope<'_>> for OwnedScope {
    fn from(scope: Scope<'_>) -> Self {
        match scope {
            Scope::None => OwnedScope::None,
            Scope::All => OwnedScope::All,
            Scope::AnyOf(selectors) => OwnedScope::AnyOf(selectors.into_iter().cloned().collect()),
        }
    }
}

fn current(inner: &Inner) -> Arc<Policy> {
    // A poisoned lock still holds the last policy written whole.
    match inner.policy.read() {
        Ok(policy) => policy.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

fn read(file: &Path) -> Result<String, PolicyFileError> {
    std::fs::read_to_string(file).map_err(|source| PolicyFileError::Read {
        file: file.to_owned(),
        source,
    })
}

fn parse(file: &Path, text: &str) -> Result<Policy, PolicyFileError> {
    Policy::parse(text).map_err(|problems| PolicyFileError::Invalid {
        file: file.to_owned(),
        problems: describe(&problems),
    })
}

fn describe(problems: &[Violation]) -> String {
    problems
        .iter()
        .map(|v| format!("{}: {}", if v.field.is_empty() { "/" } else { &v.field }, v.description))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The action of `verb` on `kind` (all versions).
pub fn on_kind(verb: Verb, kind: &str) -> ResourceAction<'_> {
    ResourceAction {
        verb,
        kind,
        kind_version: None,
        operation: None,
    }
}

/// The action of `verb` on one version of `kind`.
pub fn on_version(verb: Verb, kind: &str, kind_version: i32) -> ResourceAction<'_> {
    ResourceAction {
        verb,
        kind,
        kind_version: Some(kind_version),
        operation: None,
    }
}
