//! ResourceService.GetResourceGraph over real gRPC: descendants in creation
//! order across pages, dependency edges with value flows, and errors.
//!
//! Composition is not built yet, so the tests write composed children and
//! dependency edges straight into the database.

use converge_integration::TestServer;
use converge_integration::api::{apply, apply_manifest, apply_ok, expect_error, fields, resource_of, work_kind};
use converge_proto::v1::{
    DependencyEdge, GetResourceGraphRequest, GetResourceGraphResponse, GraphNode, Phase, ResourceRef, ValueFlow,
};
use converge_sdk::Client;
use serde_json::{Value, json};
use sqlx::PgPool;
use tonic::{Code, Status};
use uuid::Uuid;

/// A server with the kinds `app` (roots) and `part` (composed children).
async fn server_with_kinds() -> anyhow::Result<(TestServer, Client)> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("app", 1, None)).await?;
    apply_manifest(&client, work_kind("part", 1, None)).await?;
    Ok((server, client))
}

/// Applies a root resource and returns its id.
async fn apply_root(client: &Client, kind: &str, name: &str) -> anyhow::Result<Uuid> {
    let resource = resource_of(apply_ok(client, apply(kind, name, json!({}))).await?)?;
    Ok(Uuid::parse_str(&resource.uid)?)
}

/// Inserts a composed `part` child `secs` seconds after now, as a composer would.
async fn insert_child(pool: &PgPool, id: Uuid, name: &str, owner: Uuid, root: Uuid, secs: i32) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO resources (id, kind, kind_version, name, spec, owner_id, root_id, created_at)
         VALUES ($1, 'part', 1, $2, '{}'::jsonb, $3, $4, now() + $5 * interval '1 second')",
    )
    .bind(id)
    .bind(name)
    .bind(owner)
    .bind(root)
    .bind(secs)
    .execute(pool)
    .await?;
    Ok(())
}

/// Inserts a dependency edge declared by `owner`.
async fn insert_edge(
    pool: &PgPool,
    dependent: Uuid,
    dependency: Uuid,
    owner: Uuid,
    flows: Value,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO resource_deps (dependent_id, dependency_id, owner_id, value_flows) VALUES ($1, $2, $3, $4)",
    )
    .bind(dependent)
    .bind(dependency)
    .bind(owner)
    .bind(flows)
    .execute(pool)
    .await?;
    Ok(())
}

async fn graph(
    client: &Client,
    kind: &str,
    name: &str,
    page_size: i32,
    page_token: &str,
) -> Result<GetResourceGraphResponse, Status> {
    client
        .resources()
        .get_resource_graph(GetResourceGraphRequest {
            kind: kind.into(),
            name: name.into(),
            page_size,
            page_token: page_token.into(),
        })
        .await
        .map(|r| r.into_inner())
}

fn reference(kind: &str, name: &str) -> ResourceRef {
    ResourceRef {
        kind: kind.into(),
        name: name.into(),
    }
}

fn edge(dependent: (&str, &str), dependency: (&str, &str), flows: &[(&str, &str)]) -> DependencyEdge {
    DependencyEdge {
        dependent: Some(reference(dependent.0, dependent.1)),
        dependency: Some(reference(dependency.0, dependency.1)),
        value_flows: flows
            .iter()
            .map(|(dependent, source)| ValueFlow {
                dependent_field: (*dependent).into(),
                source_field: (*source).into(),
            })
            .collect(),
    }
}

fn names(nodes: &[GraphNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.name.as_str()).collect()
}

#[tokio::test]
async fn graph_pages_descendants_in_creation_order_with_their_edges() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let pool = server.database().pool();
    let shop = apply_root(&client, "app", "shop").await?;
    let external = apply_root(&client, "part", "external").await?;
    let (db, api) = (Uuid::new_v4(), Uuid::new_v4());
    insert_child(pool, db, "db", shop, shop, 1).await?;
    insert_child(pool, api, "api", shop, shop, 2).await?;
    // Two grandchildren created at the same instant: ordered by id.
    let (mut disk, mut cert) = (Uuid::new_v4(), Uuid::new_v4());
    if cert < disk {
        std::mem::swap(&mut disk, &mut cert);
    }
    sqlx::query(
        "INSERT INTO resources (id, kind, kind_version, name, owner_id, root_id, created_at)
         VALUES ($1, 'part', 1, 'db-disk', $3, $5, now() + interval '3 seconds'),
                ($2, 'part', 1, 'api-cert', $4, $5, now() + interval '3 seconds')",
    )
    .bind(disk)
    .bind(cert)
    .bind(db)
    .bind(api)
    .bind(shop)
    .execute(pool)
    .await?;
    // db is reconciled at its second generation.
    sqlx::query("UPDATE resources SET generation = 2, synced_gen = 2 WHERE id = $1")
        .bind(db)
        .execute(pool)
        .await?;
    insert_edge(
        pool,
        shop,
        external,
        shop,
        json!([{"dependent": "/region", "source": "/region"}]),
    )
    .await?;
    insert_edge(
        pool,
        api,
        db,
        shop,
        json!([{"dependent": "/db_host", "source": "/host"}, {"dependent": "/db_port", "source": "/port"}]),
    )
    .await?;
    insert_edge(pool, cert, api, api, json!([])).await?;
    insert_edge(pool, disk, external, db, json!([])).await?;

    let first = graph(&client, "app", "shop", 2, "").await?;
    let root = first.root.clone().ok_or_else(|| anyhow::anyhow!("no root"))?;
    assert_eq!(root.uid, shop.to_string());
    assert_eq!(
        (root.kind.as_str(), root.name.as_str(), root.kind_version),
        ("app", "shop", 1)
    );
    assert_eq!(root.owner, None);
    assert_eq!(root.phase(), Phase::Reconciling);
    assert_eq!((root.generation, root.observed_generation), (1, 0));
    assert_eq!(names(&first.nodes), ["db", "api"]);
    let db_node = &first.nodes[0];
    assert_eq!(db_node.uid, db.to_string());
    assert_eq!(db_node.kind, "part");
    assert_eq!(db_node.kind_version, 1);
    assert_eq!(db_node.owner, Some(reference("app", "shop")));
    assert_eq!(db_node.phase(), Phase::Ready);
    assert_eq!((db_node.generation, db_node.observed_generation), (2, 2));
    let api_node = &first.nodes[1];
    assert_eq!(api_node.uid, api.to_string());
    assert_eq!(api_node.phase(), Phase::Reconciling);
    assert_eq!((api_node.generation, api_node.observed_generation), (1, 0));
    // The root's edge, then the page's; not db-disk's, which is on the next page.
    assert_eq!(
        first.edges,
        [
            edge(("app", "shop"), ("part", "external"), &[("/region", "/region")]),
            edge(
                ("part", "api"),
                ("part", "db"),
                &[("/db_host", "/host"), ("/db_port", "/port")]
            ),
        ]
    );
    assert!(!first.next_page_token.is_empty());

    let second = graph(&client, "app", "shop", 2, &first.next_page_token).await?;
    assert_eq!(second.root, first.root);
    assert_eq!(names(&second.nodes), ["db-disk", "api-cert"]);
    assert_eq!(second.nodes[0].uid, disk.to_string());
    assert_eq!(second.nodes[0].owner, Some(reference("part", "db")));
    assert_eq!(second.nodes[1].uid, cert.to_string());
    assert_eq!(second.nodes[1].owner, Some(reference("part", "api")));
    assert_eq!(
        second.edges,
        [
            edge(("app", "shop"), ("part", "external"), &[("/region", "/region")]),
            edge(("part", "db-disk"), ("part", "external"), &[]),
            edge(("part", "api-cert"), ("part", "api"), &[]),
        ]
    );
    assert_eq!(second.next_page_token, "");

    // One page holds everything at the default size.
    let all = graph(&client, "app", "shop", 0, "").await?;
    assert_eq!(names(&all.nodes), ["db", "api", "db-disk", "api-cert"]);
    assert_eq!(all.edges.len(), 4);
    assert_eq!(all.next_page_token, "");

    // A subtree: db's graph is db-disk alone; db's owner is left out of the root.
    let subtree = graph(&client, "part", "db", 0, "").await?;
    assert_eq!(subtree.root.as_ref().map(|r| r.uid.clone()), Some(db.to_string()));
    assert_eq!(subtree.root.as_ref().and_then(|r| r.owner.clone()), None);
    assert_eq!(names(&subtree.nodes), ["db-disk"]);
    assert_eq!(subtree.edges, [edge(("part", "db-disk"), ("part", "external"), &[])]);

    // A token belongs to the resource it was issued for.
    let v = expect_error(
        graph(&client, "part", "db", 2, &first.next_page_token).await,
        Code::InvalidArgument,
        "INVALID_PAGE_TOKEN",
    );
    assert_eq!(fields(&v), ["/page_token"]);
    server.shutdown().await
}

#[tokio::test]
async fn a_leaf_has_no_nodes() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let leaf = apply_root(&client, "app", "leaf").await?;
    let answer = graph(&client, "app", "leaf", 0, "").await?;
    assert_eq!(answer.root.map(|r| r.uid), Some(leaf.to_string()));
    assert!(answer.nodes.is_empty());
    assert!(answer.edges.is_empty());
    assert_eq!(answer.next_page_token, "");
    server.shutdown().await
}

#[tokio::test]
async fn graph_errors_name_the_problem() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    apply_root(&client, "app", "shop").await?;
    let v = expect_error(
        graph(&client, "app", "missing", 0, "").await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    assert!(v.is_empty());
    let v = expect_error(
        graph(&client, "app", "Bad_Name", 0, "").await,
        Code::InvalidArgument,
        "INVALID_NAME",
    );
    assert_eq!(fields(&v), ["/name"]);
    let v = expect_error(
        graph(&client, "", "", 0, "").await,
        Code::InvalidArgument,
        "INVALID_NAME",
    );
    assert_eq!(fields(&v), ["/kind", "/name"]);
    let v = expect_error(
        graph(&client, "app", "shop", -1, "").await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&v), ["/page_size"]);
    let v = expect_error(
        graph(&client, "app", "shop", 0, "not-a-token").await,
        Code::InvalidArgument,
        "INVALID_PAGE_TOKEN",
    );
    assert_eq!(fields(&v), ["/page_token"]);
    server.shutdown().await
}

#[tokio::test]
async fn the_walk_survives_an_ownership_cycle_and_stops_at_its_depth_bound() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let pool = server.database().pool();

    // a owns b and b owns a: a's graph is b alone, and the read terminates.
    let a = apply_root(&client, "app", "a").await?;
    let b = Uuid::new_v4();
    insert_child(pool, b, "b", a, a, 1).await?;
    sqlx::query("UPDATE resources SET owner_id = $2, root_id = $2 WHERE id = $1")
        .bind(a)
        .bind(b)
        .execute(pool)
        .await?;
    let cycle = graph(&client, "app", "a", 0, "").await?;
    assert_eq!(names(&cycle.nodes), ["b"]);
    let cycle = graph(&client, "part", "b", 0, "").await?;
    assert_eq!(names(&cycle.nodes), ["a"]);

    // A chain 70 levels deep is cut at 64.
    let top = apply_root(&client, "app", "top").await?;
    let mut owner = top;
    for level in 1..=70 {
        let id = Uuid::new_v4();
        insert_child(pool, id, &format!("level-{level}"), owner, top, level).await?;
        owner = id;
    }
    let deep = graph(&client, "app", "top", 0, "").await?;
    let expected: Vec<String> = (1..=64).map(|level| format!("level-{level}")).collect();
    assert_eq!(names(&deep.nodes), expected);
    server.shutdown().await
}
