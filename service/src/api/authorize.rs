//! The API's side of authorization (ADR 47): what a call needs of the
//! policy, decided before it touches anything. With no policy every check
//! here returns at once, without a read.

use std::collections::BTreeMap;

use super::ApiState;
use super::keys::resource_not_found;
use crate::contract::authz::{OwnedScope, Principal, on_kind};
use crate::contract::status::ApiError;
use crate::domain::authz::{ResourceAction, Verb};
use crate::domain::labels::LabelSelector;
use crate::store::resources;

/// Whether `principal` may do `action` to the resource `kind/name`.
///
/// `after` are the labels a write gives it. With a label-scoped grant the
/// stored labels are read (one indexed lookup, only then) and both must be
/// in scope, so a write can neither reach nor move a resource outside the
/// caller's scope. A resource the caller may not see is answered as
/// missing (`RESOURCE_NOT_FOUND`) by calls that address an existing one;
/// a write of a name held outside the scope is refused as not authorized.
pub async fn require_resource(
    state: &ApiState,
    principal: &Principal,
    action: ResourceAction<'_>,
    name: &str,
    after: Option<&BTreeMap<String, String>>,
) -> Result<(), ApiError> {
    // No policy: nothing to decide, nothing to build.
    if !state.authz.is_on() {
        return Ok(());
    }
    let target = format!("{}/{name}", action.kind);
    let scope = state.authz.scope(principal, action);
    let decided = decide(state, principal, action, name, after, &scope, &target).await;
    if decided.is_ok() && action.verb.changes_state() {
        state.authz.allowed(principal, action.verb.as_str(), &target);
    }
    decided
}

async fn decide(
    state: &ApiState,
    principal: &Principal,
    action: ResourceAction<'_>,
    name: &str,
    after: Option<&BTreeMap<String, String>>,
    scope: &OwnedScope,
    target: &str,
) -> Result<(), ApiError> {
    match scope {
        OwnedScope::All => Ok(()),
        OwnedScope::None => Err(state.authz.refuse(principal, action.verb.as_str(), target)),
        OwnedScope::AnyOf(_) => {
            let stored = resources::get(&state.pool, action.kind, name).await?;
            match (stored, after) {
                // Hidden: answered as if it did not exist.
                (Some(stored), None) if !scope.admits(&stored.labels) => Err(resource_not_found(action.kind, name)),
                (Some(stored), Some(_)) if !scope.admits(&stored.labels) => {
                    Err(state.authz.refuse(principal, action.verb.as_str(), target))
                }
                (_, Some(after)) if !scope.admits(after) => {
                    Err(state.authz.refuse(principal, action.verb.as_str(), target))
                }
                _ => Ok(()),
            }
        }
    }
}

/// The selector a call over many resources of `kind` runs with: the
/// caller's own when the grant is whole, else narrowed to the grant's
/// scope. With one scoped grant its requirements are added; with several,
/// the caller's selector must already lie within one of them (the query
/// stays one index-backed selector, never an OR of scopes).
pub fn scoped_selector(
    state: &ApiState,
    principal: &Principal,
    action: ResourceAction<'_>,
    requested: LabelSelector,
) -> Result<LabelSelector, ApiError> {
    let narrowed = narrow(state, principal, action, requested);
    if let Ok(selector) = &narrowed
        && action.verb.changes_state()
    {
        state.authz.allowed(
            principal,
            action.verb.as_str(),
            &format!("{} -l {selector}", action.kind),
        );
    }
    narrowed
}

fn narrow(
    state: &ApiState,
    principal: &Principal,
    action: ResourceAction<'_>,
    requested: LabelSelector,
) -> Result<LabelSelector, ApiError> {
    match state.authz.scope(principal, action) {
        OwnedScope::All => Ok(requested),
        OwnedScope::None => Err(state.authz.refuse(principal, action.verb.as_str(), action.kind)),
        OwnedScope::AnyOf(scopes) => {
            if scopes
                .iter()
                .any(|s| s.requirements.iter().all(|r| requested.requirements.contains(r)))
            {
                return Ok(requested);
            }
            match scopes.as_slice() {
                [only] => {
                    let mut requirements = requested.requirements;
                    requirements.extend(only.requirements.iter().cloned());
                    requirements.sort_by(|a, b| a.key().cmp(b.key()).then_with(|| a.cmp(b)));
                    requirements.dedup();
                    Ok(LabelSelector { requirements })
                }
                _ => Err(state.authz.refuse(
                    principal,
                    action.verb.as_str(),
                    &format!(
                        "{} (several label scopes are granted: select within one, e.g. {})",
                        action.kind, scopes[0]
                    ),
                )),
            }
        }
    }
}

/// Whether `principal` may do `verb` to every resource of `kind`.
pub fn require_kind(state: &ApiState, principal: &Principal, verb: Verb, kind: &str) -> Result<(), ApiError> {
    state.authz.require_all(principal, on_kind(verb, kind), kind)
}
