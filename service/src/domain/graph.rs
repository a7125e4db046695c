//! Composition graphs: a resource, the resources it composed (transitively)
//! and the dependency edges between them.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::resource::{Phase, ResourceRef};

/// Deepest level of descendants a graph read follows below its root; deeper
/// resources are left out.
pub const MAX_GRAPH_DEPTH: i32 = 64;

/// One resource of a composition graph: its identity and lifecycle summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphNode {
    /// Resource id.
    pub id: Uuid,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Kind version.
    pub kind_version: i32,
    /// Current phase.
    pub phase: Phase,
    /// Direct owner (composer), if any.
    pub owner: Option<ResourceRef>,
    /// Current spec generation.
    pub generation: i64,
    /// Newest reconciled generation.
    pub synced_gen: i64,
    /// Creation time (the first part of the node order).
    pub created_at: DateTime<Utc>,
}

/// One value copied along a dependency edge from the dependency's status
/// into the dependent's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueFlow {
    /// JSON pointer into the dependent's spec that receives the value.
    pub dependent_field: String,
    /// JSON pointer into the dependency's status that supplies it.
    pub source_field: String,
}

/// A dependency edge: `dependent` is reconciled only after `dependency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyEdge {
    /// The resource that depends on the other.
    pub dependent: ResourceRef,
    /// The resource depended upon.
    pub dependency: ResourceRef,
    /// Values copied along the edge (empty for an ordering-only edge).
    pub value_flows: Vec<ValueFlow>,
}

/// One page of a resource's composition graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphPage {
    /// The resource the graph was read for.
    pub root: GraphNode,
    /// Descendants on this page, by (creation time, id) ascending.
    pub nodes: Vec<GraphNode>,
    /// Edges whose dependent is the root or one of `nodes`, in that order.
    pub edges: Vec<DependencyEdge>,
}

impl GraphPage {
    /// Drops the edges whose dependent is neither the root nor one of
    /// [`GraphPage::nodes`] (after the nodes were cut to a page).
    pub fn retain_edges_of_nodes(&mut self) {
        let Self { root, nodes, edges } = self;
        edges.retain(|edge| {
            let is = |node: &GraphNode| node.kind == edge.dependent.kind && node.name == edge.dependent.name;
            is(root) || nodes.iter().any(is)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> GraphNode {
        GraphNode {
            id: Uuid::new_v4(),
            kind: "k".into(),
            name: name.into(),
            kind_version: 1,
            phase: Phase::Ready,
            owner: None,
            generation: 1,
            synced_gen: 1,
            created_at: DateTime::<Utc>::UNIX_EPOCH,
        }
    }

    fn edge(dependent: &str, dependency: &str) -> DependencyEdge {
        let reference = |name: &str| ResourceRef {
            kind: "k".into(),
            name: name.into(),
        };
        DependencyEdge {
            dependent: reference(dependent),
            dependency: reference(dependency),
            value_flows: Vec::new(),
        }
    }

    #[test]
    fn retained_edges_start_at_the_root_or_a_node() {
        let mut page = GraphPage {
            root: node("root"),
            nodes: vec![node("a"), node("b")],
            edges: vec![edge("root", "x"), edge("a", "b"), edge("c", "a"), edge("b", "c")],
        };
        page.retain_edges_of_nodes();
        assert_eq!(page.edges, vec![edge("root", "x"), edge("a", "b"), edge("b", "c")]);
    }
}
