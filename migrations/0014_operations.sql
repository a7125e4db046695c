-- Operations: durable invocations of a kind's verbs on resources, their
-- leases while a worker runs them, and their outcome.

CREATE TABLE operations (
    -- Time-ordered: newest first is descending id.
    id              uuid        PRIMARY KEY DEFAULT time_ordered_uuid(),
    resource_id     uuid        NOT NULL,
    kind            text        NOT NULL,
    -- The resource's kind version when the operation was last claimed.
    kind_version    smallint,
    verb            text        NOT NULL,
    input           jsonb,
    output          jsonb,
    state           text        NOT NULL DEFAULT 'pending'
                                CHECK (state IN ('pending', 'running', 'succeeded', 'failed')),
    -- Dispatches so far, and the transient failures among them (the retry
    -- limit counts failures; a lost lease or a requeue is not one).
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    failures        integer     NOT NULL DEFAULT 0 CHECK (failures >= 0),
    not_before      timestamptz NOT NULL DEFAULT now(),
    broker_id       text,
    lease_token     uuid,
    claim_epoch     bigint      NOT NULL DEFAULT 1,
    heartbeat_at    timestamptz,
    deadline_at     timestamptz,
    -- A google.rpc.Code and what the failure said; set only when failed.
    error_code      integer,
    error_message   text,
    error_reason    text,
    requested_by    text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    -- A lease exactly while running; an outcome exactly when finished.
    CHECK ((state = 'running') = (lease_token IS NOT NULL)),
    CHECK ((state IN ('succeeded', 'failed')) = (completed_at IS NOT NULL)),
    CHECK ((state = 'failed') = (error_code IS NOT NULL))
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

ALTER TABLE operations
    ALTER COLUMN input SET STATISTICS 0,
    ALTER COLUMN output SET STATISTICS 0;

-- The claim's pick: pending operations of a kind, oldest first. Empty when
-- nothing waits, so the probe of a kind with verbs is one look at it.
CREATE INDEX operations_pending_idx ON operations (kind, id) WHERE state = 'pending';
-- The running ones: the cap's count, the heartbeat and deadline backstops.
CREATE INDEX operations_running_idx ON operations (kind, kind_version) WHERE state = 'running';
CREATE INDEX operations_lease_idx ON operations (lease_token) WHERE lease_token IS NOT NULL;
-- ListOperations (newest first) and removal with the resource.
CREATE INDEX operations_resource_idx ON operations (resource_id, id DESC);
-- The retention sweep.
CREATE INDEX operations_completed_idx ON operations (completed_at) WHERE completed_at IS NOT NULL;

-- A claimed operation with what its task needs (Rust:
-- store::operations::ClaimedOperation).
CREATE TYPE claimed_operation AS (
    operation_id     uuid,
    lease_token      uuid,
    claim_epoch      bigint,
    attempts         integer,
    verb             text,
    input            jsonb,
    requested_by     text,
    kind             text,
    kind_version     integer,
    manifest_version bigint,
    deadline_secs    double precision,
    generation       bigint,
    -- The resource as it was at the claim (resource_snapshot of its row).
    resource         jsonb,
    config_spec      jsonb,
    config_data      bytea
);

-- Operation reactions may declare an input schema ("inputSchema", an
-- object), and emit only operationOutput, status, conditions or
-- sideEffect. kind_manifest's CHECK constraint calls kind_reactions_violation
-- (0002) by its identity, so the function keeps its name and identity: its
-- 0002 body is kept as kind_reactions_core (copied from the catalog, not
-- restated), and the new body checks the new member and rule, then hands the
-- reactions without it to the core.
DO $migration$
DECLARE
    v_source text;
BEGIN
    SELECT p.prosrc INTO STRICT v_source FROM pg_proc p
    WHERE p.oid = 'kind_reactions_violation(jsonb, text)'::regprocedure;
    EXECUTE format(
        'CREATE FUNCTION kind_reactions_core(p_reactions jsonb, p_finalizer_name text) RETURNS text '
        'LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS %L', v_source);
END
$migration$;

-- The schema at creation is pinned, so the call to the core resolves under
-- an empty search_path too (as while pg_dump restores the table).
CREATE OR REPLACE FUNCTION kind_reactions_violation(p_reactions jsonb, p_finalizer_name text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_reaction jsonb;
    v_at       text;
    v_i        integer := 0;
BEGIN
    IF jsonb_typeof(p_reactions) IS DISTINCT FROM 'array' THEN
        RETURN kind_reactions_core(p_reactions, p_finalizer_name);
    END IF;
    FOR v_reaction IN SELECT value FROM jsonb_array_elements(p_reactions) LOOP
        v_at := 'reactions[' || v_i::text || ']';
        v_i := v_i + 1;
        CONTINUE WHEN jsonb_typeof(v_reaction) IS DISTINCT FROM 'object';
        IF coalesce(jsonb_typeof(v_reaction -> 'inputSchema'), 'null') NOT IN ('object', 'null') THEN
            RETURN v_at || '.inputSchema must be an object or null';
        END IF;
        IF jsonb_typeof(v_reaction -> 'inputSchema') = 'object'
           AND (v_reaction ->> 'trigger') IS DISTINCT FROM 'operation' THEN
            RETURN v_at || ': an input schema is only allowed on operation reactions';
        END IF;
        IF (v_reaction ->> 'trigger') = 'operation' AND jsonb_typeof(v_reaction -> 'emits') = 'array'
           AND EXISTS (SELECT 1 FROM jsonb_array_elements(v_reaction -> 'emits') AS x
                       WHERE (x #>> '{}') NOT IN ('operationOutput', 'status', 'conditions', 'sideEffect')
                         AND (x #>> '{}') IN ('children', 'edges', 'configs', 'finalizer')) THEN
            RETURN v_at || ': an operation reaction emits only operationOutput, status, conditions or sideEffect';
        END IF;
    END LOOP;
    RETURN kind_reactions_core(
        (SELECT COALESCE(jsonb_agg(CASE WHEN jsonb_typeof(t.r) = 'object' THEN t.r - 'inputSchema' ELSE t.r END
                                   ORDER BY t.n), '[]'::jsonb)
         FROM jsonb_array_elements(p_reactions) WITH ORDINALITY AS t(r, n)),
        p_finalizer_name);
END
$function$;
