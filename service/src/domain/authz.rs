//! Authorization policy: roles (sets of permissions) and bindings
//! (identities → a role, optionally scoped by a label selector), and the
//! decision of whether an identity may do something (ADR 47).
//!
//! A permission is a verb on resources of some kinds (`get`, `apply`,
//! `force-finalize`, `serve`, …) or `read`/`write` on a non-resource object
//! (kind manifests and configs, provider configs, reactor bindings, cluster
//! reads). A binding's selector narrows what it grants to resources whose
//! labels match, before and after a write: the tenancy model. A scoped
//! binding grants nothing that has no labels (objects, `serve`).
//!
//! Policy is data read from a file; this module parses and checks it and
//! decides. It knows nothing of gRPC or the database.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use super::identity::IdentityPattern;
use super::labels::LabelSelector;
use super::names::validate_kind_name;
use super::violation::{Violation, clip};

/// Largest policy document accepted, in bytes.
pub const MAX_POLICY_BYTES: usize = 1 << 20;
/// Most roles in one policy.
pub const MAX_ROLES: usize = 256;
/// Most bindings in one policy.
pub const MAX_BINDINGS: usize = 1024;
/// Most rules in one role.
pub const MAX_RULES: usize = 64;
/// Most entries in one list of a rule or a binding (verbs, kinds, subjects).
pub const MAX_ENTRIES: usize = 64;

/// The kind of a [`ResourceAction`] about every kind at once (a fleet
/// summary of all kinds): only a grant on `*` covers it.
pub const EVERY_KIND: &str = "*";

/// A verb on resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// GetResource, ExplainResource, GetResourceGraph, ListResourceEvents, ListSpecRevisions.
    Get,
    /// ListResources, and the fleet summary's counts.
    List,
    /// WatchResources.
    Watch,
    /// ApplyResource, CreateResource, UpdateResource, PatchResource, a rollback, a plan of an apply.
    Apply,
    /// DeleteResource, and a plan of a delete.
    Delete,
    /// ReconcileResource, and the bulk reconcile.
    Reconcile,
    /// QuarantineResource and UnquarantineResource, one or in bulk.
    Quarantine,
    /// InvokeOperation (optionally limited to named operation verbs).
    Invoke,
    /// The admin action force-finalize.
    ForceFinalize,
    /// The admin action clear-failure.
    ClearFailure,
    /// The admin action reset-backoff.
    ResetBackoff,
    /// The admin action release-lease.
    ReleaseLease,
    /// Redrive of reactor deliveries about the resources.
    Redrive,
    /// Subscribe to the kind's tasks as a worker.
    Serve,
}

impl Verb {
    /// Every verb, in declaration order.
    pub const ALL: [Verb; 14] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Apply,
        Verb::Delete,
        Verb::Reconcile,
        Verb::Quarantine,
        Verb::Invoke,
        Verb::ForceFinalize,
        Verb::ClearFailure,
        Verb::ResetBackoff,
        Verb::ReleaseLease,
        Verb::Redrive,
        Verb::Serve,
    ];

    /// The name used in policy files and refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Apply => "apply",
            Verb::Delete => "delete",
            Verb::Reconcile => "reconcile",
            Verb::Quarantine => "quarantine",
            Verb::Invoke => "invoke",
            Verb::ForceFinalize => "force-finalize",
            Verb::ClearFailure => "clear-failure",
            Verb::ResetBackoff => "reset-backoff",
            Verb::ReleaseLease => "release-lease",
            Verb::Redrive => "redrive",
            Verb::Serve => "serve",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Whether the verb changes state (everything but reads and serve).
    pub fn changes_state(self) -> bool {
        !matches!(self, Verb::Get | Verb::List | Verb::Watch | Verb::Serve)
    }

    /// The verbs a name in a policy file stands for: one verb, or a group
    /// (`read`, `write`, `admin`, `*`).
    fn expand(name: &str) -> Option<u32> {
        let group = |verbs: &[Verb]| verbs.iter().fold(0, |acc, v| acc | v.bit());
        Some(match name {
            "*" => group(&Verb::ALL),
            "read" => group(&[Verb::Get, Verb::List, Verb::Watch]),
            "write" => group(&[Verb::Apply, Verb::Delete]),
            "admin" => group(&[
                Verb::ForceFinalize,
                Verb::ClearFailure,
                Verb::ResetBackoff,
                Verb::ReleaseLease,
                Verb::Redrive,
            ]),
            _ => Verb::ALL.into_iter().find(|v| v.as_str() == name)?.bit(),
        })
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A non-resource object of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Object {
    /// Kind manifests and kind configs (KindService).
    Kinds,
    /// Provider configs (ProviderConfigService).
    ProviderConfigs,
    /// Reactor bindings and their deliveries (ReactorBindingService, except redrive).
    ReactorBindings,
    /// Cluster reads (ClusterService, GetVersion).
    Cluster,
}

impl Object {
    /// Every object, in declaration order.
    pub const ALL: [Object; 4] = [
        Object::Kinds,
        Object::ProviderConfigs,
        Object::ReactorBindings,
        Object::Cluster,
    ];

    /// The name used in policy files and refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            Object::Kinds => "kinds",
            Object::ProviderConfigs => "provider-configs",
            Object::ReactorBindings => "reactor-bindings",
            Object::Cluster => "cluster",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// Reading or changing an [`Object`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Get, list, watch.
    Read,
    /// Apply, update, delete.
    Write,
}

impl Access {
    /// The name used in policy files and refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// Which kinds a rule covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kinds {
    All,
    /// Kind → the versions covered (`None`: all).
    Some(BTreeMap<String, Option<BTreeSet<i32>>>),
}

impl Kinds {
    fn covers(&self, kind: &str, version: Option<i32>) -> bool {
        match self {
            Kinds::All => true,
            // A call about every kind needs a grant on every kind.
            Kinds::Some(_) if kind == EVERY_KIND => false,
            Kinds::Some(kinds) => match (kinds.get(kind), version) {
                (None, _) => false,
                (Some(None), _) => true,
                (Some(Some(versions)), Some(version)) => versions.contains(&version),
                // A call about every version of a kind needs every version.
                (Some(Some(_)), None) => false,
            },
        }
    }
}

/// One checked rule of a role.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    Resources {
        verbs: u32,
        kinds: Kinds,
        /// Operation verbs `invoke` is limited to (empty: all).
        operations: BTreeSet<String>,
    },
    Objects {
        read: u32,
        write: u32,
    },
}

/// One checked binding, with its role's rules resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Binding {
    role: String,
    subjects: Vec<IdentityPattern>,
    scope: Option<LabelSelector>,
    rules: Vec<Rule>,
}

impl Binding {
    fn binds(&self, identity: &str) -> bool {
        self.subjects.iter().any(|s| s.admits(identity))
    }
}

/// What a caller asks to do to resources.
#[derive(Debug, Clone, Copy)]
pub struct ResourceAction<'a> {
    /// The verb.
    pub verb: Verb,
    /// The kind.
    pub kind: &'a str,
    /// The kind version, when the call names one (`None`: every version).
    pub kind_version: Option<i32>,
    /// The operation verb, for [`Verb::Invoke`].
    pub operation: Option<&'a str>,
}

/// How far a grant reaches into a kind's resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope<'p> {
    /// Nothing: the permission is not granted.
    None,
    /// Every resource of the kind.
    All,
    /// Resources whose labels match at least one of these selectors.
    AnyOf(Vec<&'p LabelSelector>),
}

impl Scope<'_> {
    /// Whether a resource with `labels` is in scope.
    pub fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Scope::None => false,
            Scope::All => true,
            Scope::AnyOf(selectors) => selectors.iter().any(|s| s.matches(labels)),
        }
    }

    /// Whether nothing at all is granted.
    pub fn is_none(&self) -> bool {
        matches!(self, Scope::None)
    }
}

/// A checked authorization policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    bindings: Vec<Binding>,
}

impl Policy {
    /// Parses and checks a policy document (YAML or JSON). Every problem is
    /// reported with a JSON pointer into the document.
    pub fn parse(text: &str) -> Result<Policy, Vec<Violation>> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(vec![Violation::new(
                "",
                format!("a policy is at most {MAX_POLICY_BYTES} bytes"),
            )]);
        }
        let document: Document = serde_norway::from_str(text)
            .map_err(|e| vec![Violation::new("", clip(format!("not a policy document: {e}"), 400))])?;
        document.check()
    }

    /// The number of bindings.
    pub fn bindings(&self) -> usize {
        self.bindings.len()
    }

    /// How far `identity` may do `action`: which resources of the kind it
    /// reaches.
    pub fn scope(&self, identity: &str, action: ResourceAction<'_>) -> Scope<'_> {
        let mut selectors = Vec::new();
        for binding in self.bindings.iter().filter(|b| b.binds(identity)) {
            if !binding.rules.iter().any(|rule| grants(rule, action)) {
                continue;
            }
            match &binding.scope {
                None => return Scope::All,
                // Serve has no labels to test: a scoped binding never grants it.
                Some(_) if action.verb == Verb::Serve => {}
                Some(selector) => selectors.push(selector),
            }
        }
        if selectors.is_empty() {
            Scope::None
        } else {
            Scope::AnyOf(selectors)
        }
    }

    /// Whether `identity` may read or write `object`. Scoped bindings grant
    /// no object access.
    pub fn allows_object(&self, identity: &str, object: Object, access: Access) -> bool {
        self.bindings
            .iter()
            .filter(|b| b.scope.is_none() && b.binds(identity))
            .flat_map(|b| &b.rules)
            .any(|rule| match rule {
                Rule::Objects { read, write } => {
                    let granted = match access {
                        Access::Read => *read | *write,
                        Access::Write => *write,
                    };
                    granted & object.bit() != 0
                }
                Rule::Resources { .. } => false,
            })
    }
}

fn grants(rule: &Rule, action: ResourceAction<'_>) -> bool {
    match rule {
        Rule::Resources {
            verbs,
            kinds,
            operations,
        } => {
            verbs & action.verb.bit() != 0
                && kinds.covers(action.kind, action.kind_version)
                && (action.verb != Verb::Invoke
                    || operations.is_empty()
                    || action.operation.is_some_and(|op| operations.contains(op)))
        }
        Rule::Objects { .. } => false,
    }
}

/// The document as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    roles: Vec<RoleDocument>,
    #[serde(default)]
    bindings: Vec<BindingDocument>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleDocument {
    name: String,
    #[serde(default)]
    rules: Vec<RuleDocument>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleDocument {
    verbs: Vec<String>,
    #[serde(default)]
    kinds: Option<Vec<String>>,
    #[serde(default)]
    objects: Option<Vec<String>>,
    #[serde(default)]
    operations: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BindingDocument {
    role: String,
    subjects: Vec<String>,
    #[serde(default)]
    selector: Option<String>,
}

impl Document {
    fn check(self) -> Result<Policy, Vec<Violation>> {
        let mut violations = Vec::new();
        if self.roles.len() > MAX_ROLES {
            violations.push(Violation::new("/roles", format!("at most {MAX_ROLES} roles")));
        }
        if self.bindings.len() > MAX_BINDINGS {
            violations.push(Violation::new("/bindings", format!("at most {MAX_BINDINGS} bindings")));
        }
        if !violations.is_empty() {
            return Err(violations);
        }
        let mut roles: BTreeMap<&str, Vec<Rule>> = BTreeMap::new();
        for (i, role) in self.roles.iter().enumerate() {
            let at = format!("/roles/{i}");
            if role.name.is_empty() || role.name.len() > 63 {
                violations.push(Violation::new(format!("{at}/name"), "a role name is 1 to 63 bytes"));
                continue;
            }
            if roles.contains_key(role.name.as_str()) {
                violations.push(Violation::new(format!("{at}/name"), "another role has this name"));
                continue;
            }
            if role.rules.len() > MAX_RULES {
                violations.push(Violation::new(
                    format!("{at}/rules"),
                    format!("at most {MAX_RULES} rules"),
                ));
                continue;
            }
            let rules = role
                .rules
                .iter()
                .enumerate()
                .filter_map(|(j, rule)| rule.check(&format!("{at}/rules/{j}"), &mut violations))
                .collect();
            roles.insert(&role.name, rules);
        }
        let mut bindings = Vec::with_capacity(self.bindings.len());
        for (i, binding) in self.bindings.iter().enumerate() {
            let at = format!("/bindings/{i}");
            let Some(rules) = roles.get(binding.role.as_str()) else {
                violations.push(Violation::new(
                    format!("{at}/role"),
                    format!("no role is named {:?}", clip(binding.role.clone(), 63)),
                ));
                continue;
            };
            if binding.subjects.is_empty() || binding.subjects.len() > MAX_ENTRIES {
                violations.push(Violation::new(
                    format!("{at}/subjects"),
                    format!("a binding names 1 to {MAX_ENTRIES} subjects"),
                ));
                continue;
            }
            let mut subjects = Vec::with_capacity(binding.subjects.len());
            for (j, subject) in binding.subjects.iter().enumerate() {
                match subject.parse::<IdentityPattern>() {
                    Ok(pattern) => subjects.push(pattern),
                    Err(e) => violations.push(Violation::new(format!("{at}/subjects/{j}"), e)),
                }
            }
            let scope = match binding.selector.as_deref().map(LabelSelector::parse) {
                None => None,
                Some(Ok(selector)) if selector.is_empty() => None,
                Some(Ok(selector)) => Some(selector),
                Some(Err(e)) => {
                    violations.push(Violation::new(format!("{at}/selector"), clip(e.to_string(), 400)));
                    continue;
                }
            };
            bindings.push(Binding {
                role: binding.role.clone(),
                subjects,
                scope,
                rules: rules.clone(),
            });
        }
        if violations.is_empty() {
            Ok(Policy { bindings })
        } else {
            Err(violations)
        }
    }
}

impl RuleDocument {
    fn check(&self, at: &str, violations: &mut Vec<Violation>) -> Option<Rule> {
        let before = violations.len();
        for (field, len) in [
            ("verbs", self.verbs.len()),
            ("kinds", self.kinds.as_ref().map_or(0, Vec::len)),
            ("objects", self.objects.as_ref().map_or(0, Vec::len)),
            ("operations", self.operations.len()),
        ] {
            if len > MAX_ENTRIES {
                violations.push(Violation::new(
                    format!("{at}/{field}"),
                    format!("at most {MAX_ENTRIES} entries"),
                ));
            }
        }
        if self.verbs.is_empty() {
            violations.push(Violation::new(format!("{at}/verbs"), "a rule names at least one verb"));
        }
        if violations.len() > before {
            return None;
        }
        match (&self.kinds, &self.objects) {
            (Some(kinds), None) => self.resources(at, kinds, violations),
            (None, Some(objects)) => self.objects(at, objects, violations),
            _ => {
                violations.push(Violation::new(
                    at.to_owned(),
                    "a rule names either kinds (resource verbs) or objects (read, write), not both",
                ));
                None
            }
        }
    }

    fn resources(&self, at: &str, kinds: &[String], violations: &mut Vec<Violation>) -> Option<Rule> {
        let before = violations.len();
        let mut verbs = 0;
        for (i, name) in self.verbs.iter().enumerate() {
            match Verb::expand(name) {
                Some(bits) => verbs |= bits,
                None => violations.push(Violation::new(
                    format!("{at}/verbs/{i}"),
                    format!(
                        "unknown verb {:?}; one of *, read, write, admin, {}",
                        clip(name.clone(), 63),
                        Verb::ALL.map(Verb::as_str).join(", ")
                    ),
                )),
            }
        }
        let mut covered = Kinds::Some(BTreeMap::new());
        for (i, entry) in kinds.iter().enumerate() {
            let field = format!("{at}/kinds/{i}");
            if entry == "*" {
                covered = Kinds::All;
                continue;
            }
            let (kind, version) = match entry.split_once('@') {
                None => (entry.as_str(), None),
                Some((kind, "*")) => (kind, None),
                Some((kind, version)) => match version.parse::<i32>() {
                    Ok(v) if v >= 1 => (kind, Some(v)),
                    _ => {
                        violations.push(Violation::new(field, "a kind is KIND, KIND@VERSION (1 or more) or *"));
                        continue;
                    }
                },
            };
            if let Err(v) = validate_kind_name(&field, kind) {
                violations.push(v);
                continue;
            }
            if let Kinds::Some(map) = &mut covered {
                let slot = map.entry(kind.to_owned()).or_insert_with(|| Some(BTreeSet::new()));
                match (slot, version) {
                    (slot @ Some(_), None) => *slot = None,
                    (Some(versions), Some(v)) => {
                        versions.insert(v);
                    }
                    (None, _) => {}
                }
            }
        }
        if kinds.is_empty() {
            violations.push(Violation::new(
                format!("{at}/kinds"),
                "a rule names at least one kind, or *",
            ));
        }
        for (i, op) in self.operations.iter().enumerate() {
            if op.is_empty() || op.len() > 63 {
                violations.push(Violation::new(
                    format!("{at}/operations/{i}"),
                    "an operation verb is 1 to 63 bytes",
                ));
            }
        }
        if !self.operations.is_empty() && verbs & Verb::Invoke.bit() == 0 {
            violations.push(Violation::new(
                format!("{at}/operations"),
                "operations limit the invoke verb, which this rule does not grant",
            ));
        }
        (violations.len() == before).then(|| Rule::Resources {
            verbs,
            kinds: covered,
            operations: self.operations.iter().cloned().collect(),
        })
    }

    fn objects(&self, at: &str, objects: &[String], violations: &mut Vec<Violation>) -> Option<Rule> {
        let before = violations.len();
        let mut set = 0;
        for (i, name) in objects.iter().enumerate() {
            match name.as_str() {
                "*" => set |= Object::ALL.iter().fold(0, |acc, o| acc | o.bit()),
                _ => match Object::ALL.into_iter().find(|o| o.as_str() == name) {
                    Some(object) => set |= object.bit(),
                    None => violations.push(Violation::new(
                        format!("{at}/objects/{i}"),
                        format!(
                            "unknown object {:?}; one of *, {}",
                            clip(name.clone(), 63),
                            Object::ALL.map(Object::as_str).join(", ")
                        ),
                    )),
                },
            }
        }
        if objects.is_empty() {
            violations.push(Violation::new(
                format!("{at}/objects"),
                "a rule names at least one object, or *",
            ));
        }
        let (mut read, mut write) = (0, 0);
        for (i, verb) in self.verbs.iter().enumerate() {
            match verb.as_str() {
                "read" => read = set,
                "write" => write = set,
                "*" => (read, write) = (set, set),
                _ => violations.push(Violation::new(
                    format!("{at}/verbs/{i}"),
                    "the verbs on objects are read, write and *",
                )),
            }
        }
        if !self.operations.is_empty() {
            violations.push(Violation::new(
                format!("{at}/operations"),
                "operations apply to kinds only",
            ));
        }
        (violations.len() == before).then_some(Rule::Objects { read, write })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
roles:
  - name: admin
    rules:
      - verbs: ["*"]
        kinds: ["*"]
      - verbs: ["*"]
        objects: ["*"]
  - name: team-writer
    rules:
      - verbs: [read, write, reconcile]
        kinds: [app, database@2]
      - verbs: [invoke]
        kinds: [database]
        operations: [backup]
  - name: auditor
    rules:
      - verbs: [read]
        kinds: ["*"]
      - verbs: [read]
        objects: ["*"]
  - name: aws-provider
    rules:
      - verbs: [serve]
        kinds: [account@1, vpc]
bindings:
  - role: admin
    subjects: ["spiffe://corp/ns/platform/sa/admin"]
  - role: team-writer
    subjects: ["spiffe://corp/ns/payments/*"]
    selector: team=payments
  - role: team-writer
    subjects: ["spiffe://corp/ns/payments/*"]
    selector: team=shared
  - role: auditor
    subjects: ["spiffe://corp/ns/audit/sa/auditor"]
  - role: aws-provider
    subjects: ["spiffe://corp/ns/workers/sa/aws"]
"#;

    const ADMIN: &str = "spiffe://corp/ns/platform/sa/admin";
    const PAYMENTS: &str = "spiffe://corp/ns/payments/sa/deployer";
    const AUDITOR: &str = "spiffe://corp/ns/audit/sa/auditor";
    const AWS: &str = "spiffe://corp/ns/workers/sa/aws";

    fn action(verb: Verb, kind: &str, version: Option<i32>) -> ResourceAction<'_> {
        ResourceAction {
            verb,
            kind,
            kind_version: version,
            operation: None,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn an_admin_may_do_everything() {
        let policy = Policy::parse(POLICY).unwrap();
        for verb in Verb::ALL {
            assert_eq!(
                policy.scope(ADMIN, action(verb, "anything", None)),
                Scope::All,
                "{verb}"
            );
        }
        for object in Object::ALL {
            assert!(policy.allows_object(ADMIN, object, Access::Write));
        }
    }

    #[test]
    fn a_scoped_writer_reaches_only_its_labels_and_no_objects() {
        let policy = Policy::parse(POLICY).unwrap();
        let scope = policy.scope(PAYMENTS, action(Verb::Apply, "app", Some(1)));
        assert!(scope.admits(&labels(&[("team", "payments")])));
        assert!(scope.admits(&labels(&[("team", "shared"), ("tier", "web")])));
        assert!(!scope.admits(&labels(&[("team", "search")])));
        assert!(!scope.admits(&labels(&[])));
        // Only version 2 of database.
        assert!(policy.scope(PAYMENTS, action(Verb::Get, "database", Some(2))) != Scope::None);
        assert!(policy.scope(PAYMENTS, action(Verb::Get, "database", Some(1))).is_none());
        assert!(policy.scope(PAYMENTS, action(Verb::Get, "database", None)).is_none());
        assert!(policy.scope(PAYMENTS, action(Verb::Delete, "vpc", None)).is_none());
        assert!(policy.scope(PAYMENTS, action(Verb::List, EVERY_KIND, None)).is_none());
        assert_eq!(policy.scope(AUDITOR, action(Verb::List, EVERY_KIND, None)), Scope::All);
        assert!(
            policy
                .scope(PAYMENTS, action(Verb::ForceFinalize, "app", None))
                .is_none()
        );
        assert!(!policy.allows_object(PAYMENTS, Object::Kinds, Access::Read));
    }

    #[test]
    fn invoke_is_limited_to_the_named_operations() {
        let policy = Policy::parse(POLICY).unwrap();
        let invoke = |op| ResourceAction {
            operation: Some(op),
            ..action(Verb::Invoke, "database", Some(1))
        };
        assert!(!policy.scope(PAYMENTS, invoke("backup")).is_none());
        assert!(policy.scope(PAYMENTS, invoke("drop")).is_none());
    }

    #[test]
    fn an_auditor_reads_and_changes_nothing() {
        let policy = Policy::parse(POLICY).unwrap();
        for verb in Verb::ALL {
            let read = matches!(verb, Verb::Get | Verb::List | Verb::Watch);
            assert_eq!(
                policy.scope(AUDITOR, action(verb, "app", None)) == Scope::All,
                read,
                "{verb}"
            );
        }
        assert!(policy.allows_object(AUDITOR, Object::Cluster, Access::Read));
        assert!(!policy.allows_object(AUDITOR, Object::Kinds, Access::Write));
    }

    #[test]
    fn a_worker_serves_only_its_grant() {
        let policy = Policy::parse(POLICY).unwrap();
        assert_eq!(policy.scope(AWS, action(Verb::Serve, "account", Some(1))), Scope::All);
        assert!(policy.scope(AWS, action(Verb::Serve, "account", Some(2))).is_none());
        assert_eq!(policy.scope(AWS, action(Verb::Serve, "vpc", Some(7))), Scope::All);
        assert!(policy.scope(AWS, action(Verb::Serve, "app", Some(1))).is_none());
        assert!(policy.scope(AWS, action(Verb::Get, "account", Some(1))).is_none());
        // Nobody else is bound: an unknown identity gets nothing.
        assert!(
            policy
                .scope("spiffe://corp/x", action(Verb::Get, "app", None))
                .is_none()
        );
    }

    #[test]
    fn a_scoped_binding_never_grants_serve() {
        let policy = Policy::parse(
            "roles: [{name: w, rules: [{verbs: [serve], kinds: ['*']}]}]\n\
             bindings: [{role: w, subjects: ['spiffe://t/w'], selector: 'team=a'}]",
        )
        .unwrap();
        assert!(
            policy
                .scope("spiffe://t/w", action(Verb::Serve, "app", Some(1)))
                .is_none()
        );
    }

    #[test]
    fn mistakes_are_reported_with_a_pointer_each() {
        let errors = Policy::parse(
            r#"
roles:
  - name: r
    rules:
      - verbs: [gett]
        kinds: [app@0, "Bad Kind"]
      - verbs: [read]
        kinds: [app]
        objects: [cluster]
      - verbs: [read, apply]
        objects: [clusters]
      - verbs: [get]
        kinds: [app]
        operations: [backup]
  - name: r
bindings:
  - role: nobody
    subjects: ["spiffe://t/a"]
  - role: r
    subjects: ["http://not-spiffe"]
    selector: "team in ("
"#,
        )
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "/roles/0/rules/0/verbs/0",
                "/roles/0/rules/0/kinds/0",
                "/roles/0/rules/0/kinds/1",
                "/roles/0/rules/1",
                "/roles/0/rules/2/objects/0",
                "/roles/0/rules/2/verbs/1",
                "/roles/0/rules/3/operations",
                "/roles/1/name",
                "/bindings/0/role",
                "/bindings/1/subjects/0",
                "/bindings/1/selector",
            ]
        );
        assert!(Policy::parse("roles: [{name: r, unknown: 1}]").is_err());
        assert!(Policy::parse(&"#".repeat(MAX_POLICY_BYTES + 1)).is_err());
    }

    #[test]
    fn an_empty_policy_grants_nothing() {
        let policy = Policy::parse("{}").unwrap();
        assert_eq!(policy.bindings(), 0);
        assert!(policy.scope(ADMIN, action(Verb::Get, "app", None)).is_none());
        assert!(!policy.allows_object(ADMIN, Object::Cluster, Access::Read));
    }
}
