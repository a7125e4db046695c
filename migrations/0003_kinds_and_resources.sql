-- Kinds and resources.
--
-- kind_manifest holds the definition of each (kind, kind_version); kind_config
-- its live operational settings, seeded from the manifest. resources holds
-- every resource, root or composed child, with the lifecycle scalars the phase
-- is derived from. Every committed change to a resource gets a position in the
-- change log (resource_changes) that orders changes by commit; conditions and
-- event runs hang off resources; api_requests remembers idempotent answers.

-- ---------------------------------------------------------------------------
-- Kinds
-- ---------------------------------------------------------------------------

CREATE TABLE kind_manifest (
    kind                   text        NOT NULL,
    kind_version           smallint    NOT NULL CHECK (kind_version >= 1),
    description            text        NOT NULL DEFAULT '',
    spec_schema            jsonb,
    status_schema          jsonb,
    config_schema          jsonb,
    reactions              jsonb       NOT NULL,
    finalizer_name         text,
    -- Policy seeds: copied into kind_config the first time only.
    max_inflight           integer     NOT NULL DEFAULT 0 CHECK (max_inflight >= 0),
    task_deadline_secs     integer     NOT NULL DEFAULT 0 CHECK (task_deadline_secs >= 0),
    resync_interval_secs   integer     NOT NULL DEFAULT 0 CHECK (resync_interval_secs >= 0),
    resync_recomposes      boolean     NOT NULL DEFAULT false,
    orphan_grace_secs      integer     NOT NULL DEFAULT 0 CHECK (orphan_grace_secs >= 0),
    max_transient_attempts integer     NOT NULL DEFAULT 0 CHECK (max_transient_attempts >= 0),
    -- Content hash of schemas, reactions and finalizer (computed by the service).
    manifest_version       bigint      NOT NULL CHECK (manifest_version > 0),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, kind_version),
    -- The service validates first with precise messages; this keeps the
    -- database honest if anything ever bypasses it.
    CONSTRAINT kind_manifest_reactions_legal CHECK (kind_reactions_violation(reactions, finalizer_name) IS NULL)
);

CREATE TABLE kind_config (
    kind                   text        NOT NULL,
    kind_version           smallint    NOT NULL,
    max_inflight           integer     NOT NULL DEFAULT 0 CHECK (max_inflight >= 0),
    task_deadline_secs     integer     NOT NULL DEFAULT 0 CHECK (task_deadline_secs >= 0),
    resync_interval_secs   integer     NOT NULL DEFAULT 0 CHECK (resync_interval_secs >= 0),
    resync_recomposes      boolean     NOT NULL DEFAULT false,
    orphan_grace_secs      integer     NOT NULL DEFAULT 0 CHECK (orphan_grace_secs >= 0),
    max_transient_attempts integer     NOT NULL DEFAULT 0 CHECK (max_transient_attempts >= 0),
    -- Retired versions accept no new resources and no flips; existing ones keep reconciling.
    retired                boolean     NOT NULL DEFAULT false,
    -- Mirrors of the manifest, so in-database sweeps need not read manifests.
    finalizer_name         text,
    manifest_version       bigint      NOT NULL,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, kind_version),
    FOREIGN KEY (kind, kind_version) REFERENCES kind_manifest (kind, kind_version) ON DELETE CASCADE
);

-- The advisory lock key of one (kind, kind_version). Resource writes hold it
-- shared for their transaction; manifest changes hold it exclusively, so a
-- manifest change sees every resource written under the previous manifest
-- (and can check them against the new schema), and no write validates
-- against a manifest that is being replaced. Advisory locks live in shared
-- memory: thousands of concurrent writers share one without touching a row.
CREATE FUNCTION kind_lock_key(p_kind text, p_kind_version integer) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT hashtextextended('kind:' || p_kind || ':' || p_kind_version::text, 0) $$;

-- Seeds kind_config on first apply (an operator's later edits survive
-- re-applies) and always refreshes the manifest mirrors; wakes every pod's
-- manifest cache.
CREATE FUNCTION sync_kind_config_from_manifest() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO kind_config AS c (kind, kind_version, max_inflight, task_deadline_secs, resync_interval_secs,
                                  resync_recomposes, orphan_grace_secs, max_transient_attempts,
                                  finalizer_name, manifest_version)
    VALUES (NEW.kind, NEW.kind_version, NEW.max_inflight, NEW.task_deadline_secs, NEW.resync_interval_secs,
            NEW.resync_recomposes, NEW.orphan_grace_secs, NEW.max_transient_attempts,
            NEW.finalizer_name, NEW.manifest_version)
    ON CONFLICT (kind, kind_version) DO UPDATE
        SET finalizer_name = EXCLUDED.finalizer_name,
            manifest_version = EXCLUDED.manifest_version,
            updated_at = now()
        WHERE c.finalizer_name IS DISTINCT FROM EXCLUDED.finalizer_name
           OR c.manifest_version IS DISTINCT FROM EXCLUDED.manifest_version;
    PERFORM pg_notify('kind_manifest_changed', NEW.kind || ':' || NEW.kind_version::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER kind_manifest_sync_config
    AFTER INSERT OR UPDATE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION sync_kind_config_from_manifest();

CREATE FUNCTION notify_kind_manifest_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('kind_manifest_changed', OLD.kind || ':' || OLD.kind_version::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER kind_manifest_deleted
    AFTER DELETE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION notify_kind_manifest_deleted();

-- ---------------------------------------------------------------------------
-- Resources
-- ---------------------------------------------------------------------------

-- Positions in the change logs. A position is (writing transaction id,
-- sequence number); see resource_changes for why both.
CREATE SEQUENCE change_seq AS bigint CACHE 100;

-- The writing transaction's id as a bigint (assigns one if needed).
CREATE FUNCTION current_txid() RETURNS bigint
    LANGUAGE sql VOLATILE
    AS $$ SELECT pg_current_xact_id()::text::bigint $$;

-- Every transaction with an id below this has finished (committed or rolled
-- back): change-log rows below it can no longer appear behind a reader.
CREATE FUNCTION change_frontier() RETURNS bigint
    LANGUAGE sql VOLATILE
    AS $$ SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint $$;

CREATE TABLE resources (
    id                    uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind                  text        NOT NULL,
    kind_version          smallint    NOT NULL CHECK (kind_version >= 1),
    name                  text        NOT NULL,
    labels                jsonb       NOT NULL DEFAULT '{}'::jsonb,
    spec                  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status                jsonb,
    -- Composition: the direct owner (composer) and the root of the tree; NULL for roots.
    owner_id              uuid        REFERENCES resources (id) ON DELETE CASCADE,
    root_id               uuid,
    -- Name of the attached provider config override, if any.
    provider_config       text,
    -- Lifecycle scalars. generation moves exactly when the spec (or the kind
    -- version) changes; synced_gen is the newest generation reconciled.
    generation            bigint      NOT NULL DEFAULT 1 CHECK (generation >= 1),
    synced_gen            bigint      NOT NULL DEFAULT 0 CHECK (synced_gen >= 0),
    health_ok             boolean     NOT NULL DEFAULT true,
    composed_gen          bigint      NOT NULL DEFAULT 0,
    -- The generation that failed terminally (0 = none); Failed while it equals generation.
    failure_gen           bigint      NOT NULL DEFAULT 0,
    -- Consecutive transient failures of the current generation.
    failure_attempts      integer     NOT NULL DEFAULT 0 CHECK (failure_attempts >= 0),
    finalizers            text[]      NOT NULL DEFAULT '{}',
    deletion_requested_at timestamptz,
    -- Finite: orphaned until then; 'infinity': quarantined; NULL: live.
    frozen_until          timestamptz,
    last_reconciled_at    timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    -- Change-log position of the latest committed change (stamped by trigger).
    rv_txid               bigint      NOT NULL DEFAULT 0,
    rv_seq                bigint      NOT NULL DEFAULT 0,
    is_ready              boolean     GENERATED ALWAYS AS (
                              synced_gen >= generation AND health_ok AND deletion_requested_at IS NULL) STORED,
    -- The single source of truth for the phase, with a fixed precedence.
    phase                 text        GENERATED ALWAYS AS (
                              CASE
                                  WHEN deletion_requested_at IS NOT NULL THEN 'Deleting'
                                  WHEN frozen_until = 'infinity' THEN 'Quarantined'
                                  WHEN failure_gen = generation THEN 'Failed'
                                  WHEN frozen_until IS NOT NULL THEN 'Orphaned'
                                  WHEN synced_gen >= generation AND NOT health_ok THEN 'Degraded'
                                  WHEN synced_gen >= generation THEN 'Ready'
                                  ELSE 'Reconciling'
                              END) STORED,
    shard_id              smallint    GENERATED ALWAYS AS (shard_of(id)) STORED,
    CONSTRAINT resources_kind_name_key UNIQUE (kind, name),
    CHECK ((owner_id IS NULL) = (root_id IS NULL))
) WITH (
    -- Room for HOT updates of status and lifecycle scalars.
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

-- List pages, newest first, overall, per kind, per phase, and roots only.
CREATE INDEX resources_created_idx ON resources (created_at DESC, id DESC);
CREATE INDEX resources_kind_created_idx ON resources (kind, created_at DESC, id DESC);
CREATE INDEX resources_phase_created_idx ON resources (phase, created_at DESC, id DESC);
CREATE INDEX resources_roots_created_idx ON resources (created_at DESC, id DESC) WHERE owner_id IS NULL;
CREATE INDEX resources_owner_idx ON resources (owner_id) WHERE owner_id IS NOT NULL;
CREATE INDEX resources_root_idx ON resources (root_id, created_at DESC, id DESC) WHERE root_id IS NOT NULL;
CREATE INDEX resources_labels_idx ON resources USING gin (labels jsonb_path_ops);

-- Stamps every inserted or changed row with a fresh change-log position.
-- Writers gate their UPDATEs on an actual difference, so an identical
-- rewrite never reaches this trigger and never moves the position.
CREATE FUNCTION stamp_resource_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.rv_txid := current_txid();
    NEW.rv_seq := nextval('change_seq');
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER resources_stamp_change
    BEFORE INSERT OR UPDATE ON resources
    FOR EACH ROW EXECUTE FUNCTION stamp_resource_change();

-- The change log. Every committed change to a resource appends one row at
-- the position stamped on the resource row.
--
-- Why (txid, seq) and not a plain sequence: sequence numbers are handed out
-- in statement order, not commit order, so a reader that has seen number
-- 101 may later find a 100 that committed after it. A reader here reads only
-- rows whose txid is below change_frontier() — every transaction below the
-- frontier has finished, and every transaction that starts later gets a
-- higher id — and orders by (txid, seq). Nothing can appear behind a
-- position a reader has passed. A long-running writer holds the frontier
-- back (delaying readers), never makes them skip.
CREATE TABLE resource_changes (
    txid        bigint      NOT NULL,
    seq         bigint      NOT NULL,
    resource_id uuid        NOT NULL,
    kind        text        NOT NULL,
    change      text        NOT NULL CHECK (change IN ('added', 'modified', 'deleted')),
    -- The final state of a physically deleted resource (NULL otherwise: read the row).
    image       jsonb,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (txid, seq)
);

CREATE INDEX resource_changes_recorded_idx ON resource_changes (recorded_at);

CREATE FUNCTION log_resource_inserts() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change)
    SELECT rv_txid, rv_seq, id, kind, 'added' FROM new_rows;
    RETURN NULL;
END
$$;

CREATE FUNCTION log_resource_updates() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change)
    SELECT rv_txid, rv_seq, id, kind, 'modified' FROM new_rows;
    RETURN NULL;
END
$$;

CREATE FUNCTION log_resource_deletes() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change, image)
    SELECT current_txid(), nextval('change_seq'), o.id, o.kind, 'deleted', to_jsonb(o)
    FROM old_rows o;
    RETURN NULL;
END
$$;

CREATE TRIGGER resources_log_inserts
    AFTER INSERT ON resources REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_resource_inserts();
CREATE TRIGGER resources_log_updates
    AFTER UPDATE ON resources REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_resource_updates();
CREATE TRIGGER resources_log_deletes
    AFTER DELETE ON resources REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_resource_deletes();

-- ---------------------------------------------------------------------------
-- Conditions
-- ---------------------------------------------------------------------------

CREATE TABLE resource_conditions (
    resource_id         uuid        NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    type                text        NOT NULL,
    status              text        NOT NULL CHECK (status IN ('True', 'False', 'Unknown')),
    reason              text        NOT NULL DEFAULT '',
    message             text        NOT NULL DEFAULT '',
    observed_generation bigint      NOT NULL DEFAULT 0,
    -- Moves only when status flips.
    last_transition_at  timestamptz NOT NULL DEFAULT now(),
    -- Moves when status, reason or message change; an identical rewrite moves nothing.
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, type)
);

-- Writes a batch of conditions ([{type, status, reason, message}]) for one
-- resource. Only what differs is written; when anything did, the resource row
-- is touched so the change gets a change-log position. Returns how many
-- conditions changed.
CREATE FUNCTION set_resource_conditions(p_id uuid, p_generation bigint, p_conditions jsonb) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    changed integer;
BEGIN
    WITH incoming AS (
        SELECT c->>'type' AS type, c->>'status' AS status,
               COALESCE(c->>'reason', '') AS reason, COALESCE(c->>'message', '') AS message
        FROM jsonb_array_elements(p_conditions) AS c
    ),
    written AS (
        INSERT INTO resource_conditions AS rc (resource_id, type, status, reason, message, observed_generation)
        SELECT p_id, type, status, reason, message, p_generation FROM incoming
        ON CONFLICT (resource_id, type) DO UPDATE
            SET status = EXCLUDED.status,
                reason = EXCLUDED.reason,
                message = EXCLUDED.message,
                observed_generation = EXCLUDED.observed_generation,
                last_transition_at = CASE WHEN rc.status IS DISTINCT FROM EXCLUDED.status
                                          THEN now() ELSE rc.last_transition_at END,
                updated_at = CASE WHEN (rc.status, rc.reason, rc.message)
                                       IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message)
                                  THEN now() ELSE rc.updated_at END
            WHERE (rc.status, rc.reason, rc.message, rc.observed_generation)
                  IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message, EXCLUDED.observed_generation)
        RETURNING 1
    )
    SELECT count(*) INTO changed FROM written;
    IF changed > 0 THEN
        UPDATE resources SET updated_at = now() WHERE id = p_id;
    END IF;
    RETURN changed;
END
$$;

-- ---------------------------------------------------------------------------
-- Events, aggregated into runs
-- ---------------------------------------------------------------------------

CREATE TABLE resource_events (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    resource_id uuid        NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    category    text        NOT NULL,
    type        text        NOT NULL CHECK (type IN ('Normal', 'Warning')),
    reason      text        NOT NULL,
    message     text        NOT NULL DEFAULT '',
    detail      jsonb,
    count       bigint      NOT NULL DEFAULT 1 CHECK (count >= 1),
    first_at    timestamptz NOT NULL DEFAULT now(),
    last_at     timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL DEFAULT '',
    generation  bigint      NOT NULL DEFAULT 0,
    -- Append order of the run within its timeline (fixed at insert).
    run_seq     bigint      NOT NULL DEFAULT nextval('change_seq'),
    -- Event-log position of the latest change to the run (moves on extension).
    ev_txid     bigint      NOT NULL DEFAULT current_txid(),
    ev_seq      bigint      NOT NULL DEFAULT nextval('change_seq')
);

CREATE INDEX resource_events_timeline_idx ON resource_events (resource_id, category, run_seq DESC);
CREATE INDEX resource_events_recent_idx ON resource_events (resource_id, last_at DESC, id DESC);
CREATE INDEX resource_events_position_idx ON resource_events (resource_id, ev_txid, ev_seq);
CREATE INDEX resource_events_age_idx ON resource_events (last_at);

-- Records one event. When the latest run of the resource's category has the
-- same type and reason, that run is extended (count, last time, message,
-- detail, actor, generation); otherwise a new run starts. Consecutive, not
-- global, aggregation: flapping between two reasons yields alternating runs.
-- A new run trims the timeline to p_keep_runs (0 = no limit).
CREATE FUNCTION record_resource_event(
    p_id uuid, p_category text, p_type text, p_reason text, p_message text,
    p_detail jsonb, p_actor text, p_generation bigint, p_keep_runs integer
) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    latest resource_events%ROWTYPE;
    run_id uuid;
BEGIN
    -- Serialise writers of one timeline so two events cannot both start a run.
    PERFORM pg_advisory_xact_lock(hashtextextended('events:' || p_id::text || ':' || p_category, 0));
    SELECT * INTO latest FROM resource_events
    WHERE resource_id = p_id AND category = p_category
    ORDER BY run_seq DESC LIMIT 1;
    IF FOUND AND latest.type = p_type AND latest.reason = p_reason THEN
        UPDATE resource_events
        SET count = count + 1, last_at = now(), message = p_message, detail = p_detail,
            actor = p_actor, generation = p_generation,
            ev_txid = current_txid(), ev_seq = nextval('change_seq')
        WHERE id = latest.id;
        RETURN latest.id;
    END IF;
    INSERT INTO resource_events (resource_id, category, type, reason, message, detail, actor, generation)
    VALUES (p_id, p_category, p_type, p_reason, p_message, p_detail, p_actor, p_generation)
    RETURNING id INTO run_id;
    IF p_keep_runs > 0 THEN
        DELETE FROM resource_events
        WHERE id IN (SELECT id FROM resource_events
                     WHERE resource_id = p_id AND category = p_category
                     ORDER BY run_seq DESC OFFSET p_keep_runs);
    END IF;
    RETURN run_id;
END
$$;

-- ---------------------------------------------------------------------------
-- Idempotent requests
-- ---------------------------------------------------------------------------

-- The answer to every successful mutating call that carried a request_id,
-- written in the same transaction as its effect, so a retry gets the first
-- answer and never a second effect. The row is inserted first (a concurrent
-- retry waits on it) and the answer filled in before commit. Trimmed by age.
CREATE TABLE api_requests (
    request_id   text        PRIMARY KEY,
    method       text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     bytea       NOT NULL DEFAULT ''::bytea,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX api_requests_created_idx ON api_requests (created_at);
