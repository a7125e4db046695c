//! The pure parts of a plan (issue 46): how two specs differ, field by
//! field, and the order in which a tree would be torn down.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::resource::ResourceRef;
use super::violation::pointer_token;

/// Most field changes reported for one spec.
pub const MAX_FIELD_CHANGES: usize = 200;

/// One field that differs, by JSON pointer.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDiff {
    /// JSON pointer into the spec.
    pub path: String,
    /// The value now (`None` = absent).
    pub before: Option<Value>,
    /// The value after (`None` = removed).
    pub after: Option<Value>,
}

/// The fields of `after` that differ from `before` (absent = an empty
/// object): maps compared key by key, lists item by item, anything else as
/// a whole. Pointers `skip` accepts are left out (fields value flows fill).
/// At most [`MAX_FIELD_CHANGES`].
pub fn diff(before: Option<&Value>, after: &Value, skip: &dyn Fn(&str) -> bool) -> Vec<FieldDiff> {
    let empty = Value::Object(serde_json::Map::new());
    let mut out = Vec::new();
    walk("", Some(before.unwrap_or(&empty)), Some(after), skip, &mut out);
    out.truncate(MAX_FIELD_CHANGES);
    out
}

fn walk(
    at: &str,
    before: Option<&Value>,
    after: Option<&Value>,
    skip: &dyn Fn(&str) -> bool,
    out: &mut Vec<FieldDiff>,
) {
    if out.len() >= MAX_FIELD_CHANGES || (!at.is_empty() && skip(at)) {
        return;
    }
    match (before, after) {
        (Some(Value::Object(b)), Some(Value::Object(a))) => {
            let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
            for key in keys {
                walk(
                    &format!("{at}/{}", pointer_token(key)),
                    b.get(key),
                    a.get(key),
                    skip,
                    out,
                );
            }
        }
        (Some(Value::Array(b)), Some(Value::Array(a))) => {
            for i in 0..b.len().max(a.len()) {
                walk(&format!("{at}/{i}"), b.get(i), a.get(i), skip, out);
            }
        }
        (b, a) if b != a => out.push(FieldDiff {
            path: at.to_owned(),
            before: b.cloned(),
            after: a.cloned(),
        }),
        _ => {}
    }
}

/// A member of a tree being torn down.
#[derive(Debug, Clone)]
pub struct TreeMember {
    /// The resource.
    pub resource: ResourceRef,
    /// Its owner within the tree (`None` for the root).
    pub owner: Option<ResourceRef>,
}

/// The order the members of a tree are torn down in: each after the
/// members it owns and after the members that depend on it (`edges` are
/// (dependent, dependency) pairs), ties by kind and name. Members caught in
/// a cycle of edges (which a composition cannot declare) come last.
pub fn teardown_order(members: &[TreeMember], edges: &[(ResourceRef, ResourceRef)]) -> Vec<ResourceRef> {
    let key = |r: &ResourceRef| (r.kind.clone(), r.name.clone());
    let known: BTreeSet<(String, String)> = members.iter().map(|m| key(&m.resource)).collect();
    // before[x] = what must be torn down before x.
    let mut before: BTreeMap<(String, String), BTreeSet<(String, String)>> =
        known.iter().map(|k| (k.clone(), BTreeSet::new())).collect();
    for member in members {
        if let Some(owner) = &member.owner
            && known.contains(&key(owner))
            && let Some(waits) = before.get_mut(&key(owner))
        {
            waits.insert(key(&member.resource));
        }
    }
    for (dependent, dependency) in edges {
        if known.contains(&key(dependent))
            && let Some(waits) = before.get_mut(&key(dependency))
        {
            waits.insert(key(dependent));
        }
    }
    let mut order = Vec::with_capacity(known.len());
    let mut done: BTreeSet<(String, String)> = BTreeSet::new();
    while done.len() < known.len() {
        let ready: Vec<(String, String)> = before
            .iter()
            .filter(|(k, waits)| !done.contains(*k) && waits.iter().all(|w| done.contains(w)))
            .map(|(k, _)| k.clone())
            .collect();
        if ready.is_empty() {
            // A cycle: the rest in name order.
            for k in known.iter().filter(|k| !done.contains(*k)) {
                order.push(k.clone());
            }
            break;
        }
        for k in ready {
            done.insert(k.clone());
            order.push(k);
        }
    }
    order
        .into_iter()
        .map(|(kind, name)| ResourceRef { kind, name })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn specs_differ_field_by_field() {
        let before = json!({"teams": ["a", "b"], "region": "eu", "keep": {"x": 1}, "flow": "v"});
        let after = json!({"teams": ["a", "c", "d"], "region": "eu", "keep": {"x": 1}, "new": true});
        let changes = diff(Some(&before), &after, &|p| p == "/flow");
        let shown: Vec<String> = changes
            .iter()
            .map(|c| format!("{} {:?} -> {:?}", c.path, c.before, c.after))
            .collect();
        assert_eq!(
            shown,
            [
                "/new None -> Some(Bool(true))",
                "/teams/1 Some(String(\"b\")) -> Some(String(\"c\"))",
                "/teams/2 None -> Some(String(\"d\"))",
            ]
        );
        assert!(diff(Some(&before), &before, &|_| false).is_empty());
        assert_eq!(diff(None, &json!({"a": 1}), &|_| false).len(), 1);
    }

    #[test]
    fn a_tree_is_torn_down_children_and_dependents_first() {
        let r = |kind: &str, name: &str| ResourceRef {
            kind: kind.into(),
            name: name.into(),
        };
        let root = r("bom", "n");
        let member = |res: ResourceRef, owner: Option<&ResourceRef>| TreeMember {
            resource: res,
            owner: owner.cloned(),
        };
        let members = vec![
            member(root.clone(), None),
            member(r("account", "n-a"), Some(&root)),
            member(r("vpc", "n-a"), Some(&root)),
            member(r("route", "n-a"), Some(&root)),
        ];
        let edges = vec![
            (r("vpc", "n-a"), r("account", "n-a")),
            (r("route", "n-a"), r("vpc", "n-a")),
        ];
        let order: Vec<String> = teardown_order(&members, &edges)
            .into_iter()
            .map(|x| format!("{}/{}", x.kind, x.name))
            .collect();
        assert_eq!(order, ["route/n-a", "vpc/n-a", "account/n-a", "bom/n"]);
    }
}
