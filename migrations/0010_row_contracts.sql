-- The shapes Rust and PL/pgSQL exchange, declared once on the SQL side
-- (service/tests/row_contract.rs compares each with its Rust struct).

-- A claimed task with the state of its resource: the row of claim_range,
-- claim_work and leased_tasks (Rust: store::work::ClaimedTask).
CREATE TYPE claimed_task AS (
    work_id               uuid,
    shard_id              smallint,
    task_type             text,
    lease_token           uuid,
    claim_epoch           bigint,
    generation            bigint,
    manifest_version      bigint,
    attempts              integer,
    deadline_secs         double precision,
    resource_id           uuid,
    kind                  text,
    kind_version          integer,
    name                  text,
    labels                jsonb,
    spec                  jsonb,
    status                jsonb,
    synced_gen            bigint,
    health_ok             boolean,
    finalizers            text[],
    composed_gen          bigint,
    deletion_requested_at timestamptz
);

-- One task's result as fence_results and complete_work read it from their
-- JSON argument with jsonb_populate_recordset (Rust: store::work::TaskResult,
-- serialized in camelCase; the attribute names are its keys). A key left
-- out reads as NULL.
CREATE TYPE task_result AS (
    "workId"          uuid,
    "shardId"         smallint,
    "resourceId"      uuid,
    lease             uuid,
    epoch             bigint,
    generation        bigint,
    "manifestVersion" bigint,
    status            jsonb,
    conditions        jsonb,
    healthy           boolean,
    advance           boolean,
    "requeueAfterMs"  bigint,
    error             text,
    reason            text,
    terminal          boolean,
    finalizer         text
);

-- A child of a composition and an edge between two children, as
-- apply_composition reads them from its JSON arguments with
-- jsonb_populate_recordset (Rust: domain::composition::ChildSpec and
-- StoredEdge, serialized in camelCase). An edge's flows are stored as they
-- come, an array of {dependent, source} (Rust: ValueFlow).
CREATE TYPE composition_child AS (
    kind          text,
    "kindVersion" smallint,
    name          text,
    labels        jsonb,
    spec          jsonb
);

CREATE TYPE composition_edge AS (
    "dependentKind"  text,
    "dependentName"  text,
    "dependencyKind" text,
    "dependencyName" text,
    flows            jsonb
);

-- The claim functions now return SETOF claimed_task (functions/claim.sql
-- creates them again).
DROP FUNCTION IF EXISTS claim_work(text, text, smallint, integer, smallint, smallint);
DROP FUNCTION IF EXISTS claim_range(text, text, smallint, integer, smallint, smallint);
