//! A root and its composed tree as a person reads it: what `converge graph`
//! prints, and what `converge dev` shows of its BOM (the one-line progress
//! and the summary once it has settled). Reading is [`snapshot`]; the rest
//! are pure functions of a [`Snapshot`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;
use converge_sdk::worker::convert::struct_to_json;

/// The root and every resource of its tree, as listed at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The root.
    pub root: pb::Resource,
    /// Its descendants.
    pub children: Vec<pb::Resource>,
    /// Kinds shown first, in this order (e.g. a demo's provisioning
    /// order); the others follow by name.
    pub kind_order: &'static [&'static str],
}

/// Reads `root` and its tree; `None` when the root does not exist.
pub async fn snapshot(client: &Client, root: &pb::ResourceRef) -> Result<Option<Snapshot>, tonic::Status> {
    let found = match client
        .resources()
        .get_resource(pb::GetResourceRequest {
            kind: root.kind.clone(),
            name: root.name.clone(),
        })
        .await
    {
        Ok(response) => response.into_inner().resource,
        Err(status) if status.code() == tonic::Code::NotFound => None,
        Err(status) => return Err(status),
    };
    let Some(found) = found else { return Ok(None) };
    let mut children = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .resources()
            .list_resources(pb::ListResourcesRequest {
                root: Some(root.clone()),
                page_size: 1000,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        children.extend(page.resources);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    Ok(Some(Snapshot {
        root: found,
        children,
        kind_order: &[],
    }))
}

/// Display name of a phase.
pub fn phase_name(phase: i32) -> &'static str {
    match pb::Phase::try_from(phase) {
        Ok(pb::Phase::Ready) => "Ready",
        Ok(pb::Phase::Reconciling) => "Reconciling",
        Ok(pb::Phase::Degraded) => "Degraded",
        Ok(pb::Phase::Failed) => "Failed",
        Ok(pb::Phase::Deleting) => "Deleting",
        Ok(pb::Phase::Orphaned) => "Orphaned",
        Ok(pb::Phase::Quarantined) => "Quarantined",
        Ok(pb::Phase::Unspecified) | Err(_) => "Unknown",
    }
}

impl Snapshot {
    /// Whether the root has settled for its current generation: reconciled
    /// (Ready or Degraded) or failed.
    pub fn settled(&self) -> bool {
        let root = &self.root;
        match pb::Phase::try_from(root.phase) {
            Ok(pb::Phase::Ready | pb::Phase::Degraded) => root.observed_generation >= root.generation,
            Ok(pb::Phase::Failed) => true,
            _ => false,
        }
    }

    /// Whether the root is Ready.
    pub fn ready(&self) -> bool {
        self.root.phase == pb::Phase::Ready as i32
    }

    /// What identifies a settled state: a new summary is due when it
    /// changes.
    pub fn settled_key(&self) -> (i64, i32) {
        (self.root.generation, self.root.phase)
    }

    /// `kind/name` of the root.
    pub fn root_name(&self) -> String {
        format!("{}/{}", self.root.kind, self.root.name)
    }

    /// The root's `Ready` condition message, or "".
    pub fn root_message(&self) -> &str {
        condition(&self.root, "Ready").map_or("", |c| c.message.as_str())
    }

    /// The children grouped by kind (the kinds of `kind_order` first, then
    /// any other kind by name), each group sorted by name.
    fn by_kind(&self) -> Vec<(&str, Vec<&pb::Resource>)> {
        let mut groups: BTreeMap<(usize, &str), Vec<&pb::Resource>> = BTreeMap::new();
        for child in &self.children {
            let rank = self
                .kind_order
                .iter()
                .position(|k| *k == child.kind)
                .unwrap_or(usize::MAX);
            groups.entry((rank, child.kind.as_str())).or_default().push(child);
        }
        groups
            .into_iter()
            .map(|((_, kind), mut children)| {
                children.sort_by(|a, b| a.name.cmp(&b.name));
                (kind, children)
            })
            .collect()
    }

    /// The progress line (no newline): elapsed time, the root (with its
    /// phase unless Reconciling), the children per phase, and ready/total
    /// per kind. Short enough for an 80-column terminal with the demo's
    /// default tree; the most telling parts come first.
    pub fn progress_line(&self, elapsed: Duration) -> String {
        let mut line = format!("{:.1}s {}", elapsed.as_secs_f64(), self.root_name());
        if self.root.phase != pb::Phase::Reconciling as i32 {
            let _ = write!(line, " ({})", phase_name(self.root.phase));
        }
        line.push(':');
        if self.children.is_empty() {
            line.push_str(" composing...");
            return line;
        }
        let mut phases: BTreeMap<i32, usize> = BTreeMap::new();
        for child in &self.children {
            *phases.entry(child.phase).or_default() += 1;
        }
        let phases: Vec<String> = phases
            .iter()
            .map(|(phase, n)| format!("{n} {}", phase_name(*phase).to_lowercase()))
            .collect();
        let _ = write!(line, " {} |", phases.join(", "));
        for (kind, children) in self.by_kind() {
            let ready = children.iter().filter(|c| c.phase == pb::Phase::Ready as i32).count();
            let _ = write!(line, " {kind} {ready}/{}", children.len());
        }
        line
    }

    /// The multi-line summary of a settled tree. `elapsed` is how long it
    /// took to settle, `None` when it was already settled.
    pub fn summary(&self, elapsed: Option<Duration>) -> String {
        let mut out = String::new();
        let took = match elapsed {
            Some(d) => format!("after {:.1}s", d.as_secs_f64()),
            None => "(unchanged since an earlier run)".to_owned(),
        };
        let _ = writeln!(out, "{} is {} {took}", self.root_name(), phase_name(self.root.phase));
        out.push_str(&self.tree());
        out
    }

    /// The root's `Ready` message, then its children grouped by kind, one
    /// line each with its phase and id (or why it is not Ready): the body
    /// of [`Snapshot::summary`], also what `converge graph` prints.
    pub fn tree(&self) -> String {
        let mut out = String::new();
        let message = self.root_message();
        if !message.is_empty() {
            let _ = writeln!(out, "  {message}");
        }
        let width = self.children.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for (kind, children) in self.by_kind() {
            let ready = children.iter().filter(|c| c.phase == pb::Phase::Ready as i32).count();
            let _ = writeln!(out, "  {kind} ({ready}/{} ready)", children.len());
            for child in children {
                let row = format!(
                    "    {:<width$}  {:<11}  {}",
                    child.name,
                    phase_name(child.phase),
                    detail(child)
                );
                let _ = writeln!(out, "{}", row.trim_end());
            }
        }
        out
    }
}

/// A child's id: the string `<kind>Id` of its status (`accountId` for an
/// `account`), else its `id`.
fn id(child: &pb::Resource) -> Option<String> {
    let status = struct_to_json(child.status.clone()?);
    [format!("{}Id", child.kind), "id".to_owned()]
        .iter()
        .find_map(|field| status.get(field)?.as_str().map(str::to_owned))
}

/// What to show next to a child: its own id when it is Ready, else why not
/// (the condition that explains it: `Synced` for a failed child, where the
/// failure is recorded, `Ready` otherwise), else its id if it has one.
fn detail(child: &pb::Resource) -> String {
    let id = id(child);
    if child.phase == pb::Phase::Ready as i32 {
        return id.unwrap_or_default();
    }
    let preferred = if child.phase == pb::Phase::Failed as i32 {
        ["Synced", "Ready"]
    } else {
        ["Ready", "Synced"]
    };
    let unmet = |c: &&pb::Condition| c.status != pb::ConditionStatus::True as i32 && !c.message.is_empty();
    let why = preferred
        .iter()
        .find_map(|t| condition(child, t).filter(unmet))
        .or_else(|| child.conditions.iter().find(unmet));
    match why {
        Some(c) if c.reason.is_empty() => c.message.clone(),
        Some(c) => format!("{}: {}", c.reason, c.message),
        None => id.unwrap_or_default(),
    }
}

fn condition<'a>(resource: &'a pb::Resource, condition_type: &str) -> Option<&'a pb::Condition> {
    resource.conditions.iter().find(|c| c.r#type == condition_type)
}

/// Shortens `line` to at most `width` characters.
pub fn fit(line: &str, width: usize) -> &str {
    converge_service::domain::names::first_chars(line, width)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn resource(kind: &str, name: &str, phase: pb::Phase, status: serde_json::Value) -> pb::Resource {
        pb::Resource {
            kind: kind.into(),
            name: name.into(),
            phase: phase as i32,
            generation: 1,
            observed_generation: i64::from(phase == pb::Phase::Ready),
            status: converge_sdk::worker::convert::json_to_struct(status, "status").ok(),
            ..Default::default()
        }
    }

    fn snapshot() -> Snapshot {
        let mut failed = resource("route", "demo-ledger", pb::Phase::Failed, json!({}));
        failed.conditions.push(pb::Condition {
            r#type: "Ready".into(),
            status: pb::ConditionStatus::False as i32,
            reason: "ReconcileFailed".into(),
            message: "reconciling the resource failed".into(),
            ..Default::default()
        });
        failed.conditions.push(pb::Condition {
            r#type: "Synced".into(),
            status: pb::ConditionStatus::False as i32,
            reason: "SimulatedFailure".into(),
            message: "simulated failure".into(),
            ..Default::default()
        });
        let mut root = resource("bom", "demo", pb::Phase::Degraded, json!({}));
        root.observed_generation = 1;
        root.conditions.push(pb::Condition {
            r#type: "Ready".into(),
            status: pb::ConditionStatus::False as i32,
            reason: "ChildrenNotReady".into(),
            message: "1 of 4 children not ready: route/demo-ledger (failed)".into(),
            ..Default::default()
        });
        Snapshot {
            root,
            children: vec![
                failed,
                resource("vpc", "demo-ledger", pb::Phase::Reconciling, json!({})),
                resource(
                    "account",
                    "demo-network",
                    pb::Phase::Ready,
                    json!({"accountId": "acct-000000000001"}),
                ),
                resource(
                    "tgw",
                    "demo-tgw",
                    pb::Phase::Ready,
                    json!({"tgwId": "tgw-00000000000a"}),
                ),
            ],
            kind_order: &["account", "tgw", "vpc", "route"],
        }
    }

    #[test]
    fn the_progress_line_counts_phases_and_kinds() {
        let line = snapshot().progress_line(Duration::from_millis(3400));
        assert_eq!(
            line,
            "3.4s bom/demo (Degraded): 2 ready, 1 reconciling, 1 failed | account 1/1 tgw 1/1 vpc 0/1 route 0/1"
        );
        let empty = Snapshot {
            children: Vec::new(),
            ..snapshot()
        };
        assert_eq!(
            empty.progress_line(Duration::from_secs(12)),
            "12.0s bom/demo (Degraded): composing..."
        );
    }

    #[test]
    fn the_summary_groups_children_by_kind_with_ids_or_reasons() {
        let text = snapshot().summary(Some(Duration::from_secs(2)));
        assert_eq!(
            text,
            "bom/demo is Degraded after 2.0s\n\
             \x20 1 of 4 children not ready: route/demo-ledger (failed)\n\
             \x20 account (1/1 ready)\n\
             \x20   demo-network  Ready        acct-000000000001\n\
             \x20 tgw (1/1 ready)\n\
             \x20   demo-tgw      Ready        tgw-00000000000a\n\
             \x20 vpc (0/1 ready)\n\
             \x20   demo-ledger   Reconciling\n\
             \x20 route (0/1 ready)\n\
             \x20   demo-ledger   Failed       SimulatedFailure: simulated failure\n"
        );
    }

    #[test]
    fn settled_means_reconciled_for_the_generation_or_failed() {
        let mut s = snapshot();
        assert!(s.settled() && !s.ready());
        s.root.generation = 2;
        assert!(!s.settled());
        s.root.phase = pb::Phase::Failed as i32;
        assert!(s.settled());
        s.root.phase = pb::Phase::Reconciling as i32;
        assert!(!s.settled());
    }

    #[test]
    fn fit_cuts_on_characters() {
        assert_eq!(fit("abcdef", 4), "abcd");
        assert_eq!(fit("ab", 4), "ab");
        assert_eq!(fit("é€xyz", 2), "é€");
    }
}
