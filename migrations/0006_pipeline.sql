-- The reconcile pipeline: the result outbox and its drainer, composition
-- (children and dependency edges), value flows, the dependency and children
-- gates, and the cascade that schedules dependents and rolls owners up.
--
-- A reconcile task runs the kind's stages in order: compose (when the kind
-- composes and composed_gen < generation), work (when it has a worker
-- reaction), rollup (when it rolls up and every child has settled). The
-- broker applies a composition directly (one transaction, fenced); the final
-- result of the pipeline goes to work_outbox (fenced, unlogged: no WAL flush
-- per result) and the drainer applies many results per transaction.

-- ---------------------------------------------------------------------------
-- Pipeline mirrors of the manifest
-- ---------------------------------------------------------------------------

ALTER TABLE kind_config
    ADD COLUMN composes boolean NOT NULL DEFAULT false,
    ADD COLUMN rolls_up boolean NOT NULL DEFAULT false;

-- Whether a stored reaction list has a reaction with this trigger emitting this part.
CREATE FUNCTION reactions_have(p_reactions jsonb, p_trigger text, p_emit text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT EXISTS (SELECT 1 FROM jsonb_array_elements(p_reactions) AS r
                   WHERE r->>'trigger' = p_trigger AND (r->'emits') ? p_emit)
$$;

CREATE OR REPLACE FUNCTION sync_kind_config_from_manifest() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_composes constant boolean := reactions_have(NEW.reactions, 'specChange', 'children');
    v_rolls_up constant boolean := reactions_have(NEW.reactions, 'childrenSettled', 'status');
BEGIN
    INSERT INTO kind_config AS c (kind, kind_version, max_inflight, task_deadline_secs, resync_interval_secs,
                                  resync_recomposes, orphan_grace_secs, max_transient_attempts,
                                  finalizer_name, manifest_version, composes, rolls_up)
    VALUES (NEW.kind, NEW.kind_version, NEW.max_inflight, NEW.task_deadline_secs, NEW.resync_interval_secs,
            NEW.resync_recomposes, NEW.orphan_grace_secs, NEW.max_transient_attempts,
            NEW.finalizer_name, NEW.manifest_version, v_composes, v_rolls_up)
    ON CONFLICT (kind, kind_version) DO UPDATE
        SET finalizer_name = EXCLUDED.finalizer_name,
            manifest_version = EXCLUDED.manifest_version,
            composes = EXCLUDED.composes,
            rolls_up = EXCLUDED.rolls_up,
            updated_at = now()
        WHERE c.finalizer_name IS DISTINCT FROM EXCLUDED.finalizer_name
           OR c.manifest_version IS DISTINCT FROM EXCLUDED.manifest_version
           OR c.composes IS DISTINCT FROM EXCLUDED.composes
           OR c.rolls_up IS DISTINCT FROM EXCLUDED.rolls_up;
    PERFORM pg_notify('kind_manifest_changed', NEW.kind || ':' || NEW.kind_version::text);
    RETURN NULL;
END
$$;

UPDATE kind_config c
SET composes = reactions_have(m.reactions, 'specChange', 'children'),
    rolls_up = reactions_have(m.reactions, 'childrenSettled', 'status')
FROM kind_manifest m
WHERE m.kind = c.kind AND m.kind_version = c.kind_version;

-- ---------------------------------------------------------------------------
-- Dependency edges
-- ---------------------------------------------------------------------------

-- dependent is worked only after dependency is synced (and torn down before
-- it); value_flows copy fields of the dependency's status into the
-- dependent's spec: [{"dependent": "/json/pointer", "source": "/json/pointer"}].
-- No foreign keys on this hot path: a statement trigger on resources removes
-- the edges of deleted rows.
CREATE TABLE resource_deps (
    dependent_id  uuid  NOT NULL,
    dependency_id uuid  NOT NULL,
    -- The composer that declared the edge; its recompose replaces its edges.
    owner_id      uuid  NOT NULL,
    value_flows   jsonb NOT NULL DEFAULT '[]'::jsonb,
    PRIMARY KEY (dependent_id, dependency_id),
    CHECK (dependent_id <> dependency_id)
);

CREATE INDEX resource_deps_dependency_idx ON resource_deps (dependency_id);
CREATE INDEX resource_deps_owner_idx ON resource_deps (owner_id);

CREATE FUNCTION drop_edges_of_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM resource_deps d USING old_rows o WHERE d.dependent_id = o.id;
    DELETE FROM resource_deps d USING old_rows o WHERE d.dependency_id = o.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER resources_drop_edges
    AFTER DELETE ON resources REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION drop_edges_of_deleted();

-- ---------------------------------------------------------------------------
-- JSON pointers
-- ---------------------------------------------------------------------------

-- An RFC 6901 pointer as a jsonb path ('' = the whole document).
CREATE FUNCTION pointer_to_path(p_pointer text) RETURNS text[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT COALESCE(array_agg(replace(replace(part, '~1', '/'), '~0', '~') ORDER BY n), '{}')
    FROM unnest(string_to_array(substr(p_pointer, 2), '/')) WITH ORDINALITY AS t(part, n)
    WHERE p_pointer <> ''
$$;

-- doc with value set at path, creating missing intermediate objects.
CREATE FUNCTION jsonb_set_deep(p_doc jsonb, p_path text[], p_value jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    v_inner jsonb;
BEGIN
    IF cardinality(p_path) = 0 THEN
        RETURN p_value;
    END IF;
    IF p_doc IS NULL OR jsonb_typeof(p_doc) NOT IN ('object', 'array') THEN
        p_doc := '{}'::jsonb;
    END IF;
    v_inner := p_doc -> p_path[1];
    IF jsonb_typeof(p_doc) = 'array' THEN
        v_inner := p_doc -> (p_path[1]::integer);
    END IF;
    RETURN jsonb_set(p_doc, p_path[1:1], jsonb_set_deep(v_inner, p_path[2:], p_value), true);
EXCEPTION WHEN invalid_text_representation THEN
    -- A non-numeric step into an array: leave the document as it is.
    RETURN p_doc;
END
$$;

-- doc with each {pointer, value} of p_patches (a JSON array) set in order.
CREATE FUNCTION jsonb_patch_pointers(p_doc jsonb, p_patches jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    v_patch jsonb;
BEGIN
    FOR v_patch IN SELECT value FROM jsonb_array_elements(p_patches) LOOP
        p_doc := jsonb_set_deep(p_doc, pointer_to_path(v_patch->>'pointer'), v_patch->'value');
    END LOOP;
    RETURN p_doc;
END
$$;

-- ---------------------------------------------------------------------------
-- Gates
-- ---------------------------------------------------------------------------

-- Whether a child keeps its owner's rollup waiting: it lags and is neither
-- terminally failed, nor being deleted, nor set aside.
CREATE FUNCTION is_progressing(r resources) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT r.synced_gen < r.generation AND r.failure_gen <> r.generation
       AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
$$;

-- Whether every child of p_id has settled (synced, failed or set aside).
CREATE FUNCTION children_settled(p_id uuid) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT NOT EXISTS (SELECT 1 FROM resources c WHERE c.owner_id = p_id AND is_progressing(c))
$$;

-- Whether every upstream of p_id is synced for its current generation.
CREATE FUNCTION upstreams_synced(p_id uuid) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT NOT EXISTS (SELECT 1 FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
                       WHERE d.dependent_id = p_id AND u.synced_gen < u.generation)
$$;

-- ---------------------------------------------------------------------------
-- The work queue and the outbox
-- ---------------------------------------------------------------------------

-- Set when the task's result sits in work_outbox: the lease is done, the
-- row waits for the drainer (no reaping, no deadline, still counted against
-- the kind's max_inflight until applied).
ALTER TABLE work_queue ADD COLUMN outcome_pending boolean NOT NULL DEFAULT false;

CREATE INDEX work_queue_resource_idx ON work_queue (resource_id);

-- The gate: queues a reconcile task for each candidate that is lagging, not
-- being deleted, not frozen, not terminally failed at its generation, whose
-- upstreams are all synced and (for a kind that rolls up) none of whose
-- children is still progressing. An existing task for an older generation is
-- re-pointed (new epoch, lease dropped), so a result for the old generation
-- can no longer land. Returns how many tasks were queued or re-pointed.
CREATE OR REPLACE FUNCTION schedule_eligible(p_ids uuid[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    queued integer;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH candidates AS (
        SELECT r.id, r.kind, r.kind_version, r.generation, r.shard_id, c.manifest_version
        FROM resources r
        JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
        WHERE r.id = ANY (p_ids)
          AND r.generation > r.synced_gen
          AND r.deletion_requested_at IS NULL
          AND r.frozen_until IS NULL
          AND r.failure_gen <> r.generation
          AND upstreams_synced(r.id)
          AND (NOT c.rolls_up OR children_settled(r.id) OR r.composed_gen < r.generation)
        ORDER BY r.id
    ),
    written AS (
        INSERT INTO work_queue AS w (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id)
        SELECT id, 'reconcile', kind, kind_version, generation, manifest_version, shard_id FROM candidates
        ON CONFLICT (resource_id, task_type, shard_id) DO UPDATE
            SET generation = EXCLUDED.generation,
                kind = EXCLUDED.kind,
                kind_version = EXCLUDED.kind_version,
                manifest_version = EXCLUDED.manifest_version,
                claim_epoch = w.claim_epoch + 1,
                broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
                outcome_pending = false, not_before = now(), attempts = 0
            WHERE w.generation < EXCLUDED.generation OR w.kind_version <> EXCLUDED.kind_version
        RETURNING 1
    )
    SELECT count(*) INTO queued FROM written;
    IF queued > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN queued;
END
$$;

-- Owners whose rollup could not be scheduled because a child was still
-- progressing in the arming transaction's snapshot. When the last children
-- settle in concurrent transactions, neither sees the other's commit; the
-- drainer re-runs pend_owners for these in a fresh snapshot. A row stays
-- while its owner stays blocked, for a bounded window (longer than any
-- drain transaction), then goes: the next settling child re-arms it.
CREATE UNLOGGED TABLE rollup_recheck (
    owner_id uuid        PRIMARY KEY,
    shard_id smallint    NOT NULL,
    armed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX rollup_recheck_shard_idx ON rollup_recheck (shard_id);

-- Re-pends owners whose children changed: a lagging owner goes through the
-- gate; a settled owner that rolls up is queued again at its current
-- generation so its rollup folds the new state of its children. With p_arm,
-- owners still blocked by a progressing child are armed for a recheck.
-- Returns how many tasks were queued.
CREATE FUNCTION pend_owners(p_ids uuid[], p_arm boolean) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    queued integer := 0;
    settled_queued integer;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    queued := schedule_eligible(p_ids);
    WITH candidates AS (
        SELECT r.id, r.kind, r.kind_version, r.generation, r.shard_id, c.manifest_version
        FROM resources r
        JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
        WHERE r.id = ANY (p_ids)
          AND c.rolls_up
          AND r.synced_gen >= r.generation
          AND r.deletion_requested_at IS NULL
          AND r.frozen_until IS NULL
          AND r.failure_gen <> r.generation
          AND children_settled(r.id)
        ORDER BY r.id
    ),
    written AS (
        INSERT INTO work_queue (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id)
        SELECT id, 'reconcile', kind, kind_version, generation, manifest_version, shard_id FROM candidates
        ON CONFLICT (resource_id, task_type, shard_id) DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO settled_queued FROM written;
    IF settled_queued > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    IF NOT p_arm THEN
        RETURN queued + settled_queued;
    END IF;
    INSERT INTO rollup_recheck AS rr (owner_id, shard_id)
    SELECT r.id, r.shard_id
    FROM resources r
    JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
    WHERE r.id = ANY (p_ids) AND c.rolls_up
      AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
      AND NOT children_settled(r.id)
    ORDER BY r.id
    ON CONFLICT (owner_id) DO UPDATE SET armed_at = EXCLUDED.armed_at;
    RETURN queued + settled_queued;
END
$$;

-- The drainer's straddle close-out for one shard range, in its own
-- transaction: re-pends armed owners, forgets those no longer blocked (or
-- gone) and those armed longer ago than p_window_secs.
CREATE FUNCTION drain_rollup_rechecks(p_max integer, p_lo smallint, p_hi smallint, p_window_secs double precision)
    RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_ids uuid[];
    queued integer;
BEGIN
    SELECT array_agg(owner_id ORDER BY owner_id) INTO v_ids FROM (
        SELECT owner_id FROM rollup_recheck
        WHERE shard_id BETWEEN p_lo AND p_hi
        ORDER BY armed_at
        LIMIT p_max
        FOR UPDATE SKIP LOCKED) armed;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    queued := pend_owners(v_ids, false);
    DELETE FROM rollup_recheck rr
    WHERE rr.owner_id = ANY (v_ids) AND rr.shard_id BETWEEN p_lo AND p_hi
      AND (rr.armed_at < clock_timestamp() - make_interval(secs => p_window_secs)
           OR NOT EXISTS (SELECT 1 FROM resources r
                          WHERE r.id = rr.owner_id AND r.deletion_requested_at IS NULL
                            AND r.frozen_until IS NULL AND NOT children_settled(r.id)));
    RETURN queued;
END
$$;

-- Results awaiting the drainer: at most one per task row (a newer result of
-- a re-pointed task replaces an older one).
CREATE UNLOGGED TABLE work_outbox (
    work_id          uuid        NOT NULL,
    shard_id         smallint    NOT NULL,
    resource_id      uuid        NOT NULL,
    generation       bigint      NOT NULL,
    -- Success parts (status NULL = unchanged; health_ok NULL = unchanged).
    status           jsonb,
    conditions       jsonb,
    health_ok        boolean,
    -- false: a composite's partial result (its rollup has not run yet), so
    -- the generation is not marked synced.
    advance          boolean     NOT NULL DEFAULT true,
    -- "Not settled yet": apply the parts, run again after this delay.
    requeue_after_ms bigint,
    -- Failure (NULL = success).
    error_message    text,
    error_reason     text,
    terminal         boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (work_id, shard_id)
) PARTITION BY RANGE (shard_id);

DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format(
            'CREATE UNLOGGED TABLE work_outbox_p%s PARTITION OF work_outbox FOR VALUES FROM (%s) TO (%s)
             WITH (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02,
                   autovacuum_vacuum_threshold = 50, autovacuum_analyze_threshold = 50)',
            i, i * 16, (i + 1) * 16);
    END LOOP;
END
$$;

CREATE INDEX work_outbox_drain_idx ON work_outbox (shard_id, created_at);

CREATE SEQUENCE wake_outbox_ready AS bigint MINVALUE 0 START 0;

-- Results of many leases at once, each written only if its fence still
-- matches the task row (same lease token, claim epoch and generation, a
-- compatible manifest version; 0 on either side is "unknown"). p_results is
-- a JSON array of {lease, epoch, generation, manifestVersion, status,
-- conditions, healthy, advance, requeueAfterMs, error, reason, terminal}.
-- Returns the lease tokens that were accepted; the others were stale.
CREATE FUNCTION append_outbox(p_results jsonb) RETURNS SETOF uuid
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY
    WITH incoming AS (
        SELECT (x->>'lease')::uuid AS lease, (x->>'epoch')::bigint AS epoch,
               (x->>'generation')::bigint AS generation,
               COALESCE((x->>'manifestVersion')::bigint, 0) AS manifest_version,
               NULLIF(x->'status', 'null'::jsonb) AS status,
               NULLIF(x->'conditions', 'null'::jsonb) AS conditions,
               (x->>'healthy')::boolean AS healthy,
               COALESCE((x->>'advance')::boolean, true) AS advance,
               (x->>'requeueAfterMs')::bigint AS requeue_after_ms,
               x->>'error' AS error, x->>'reason' AS reason,
               COALESCE((x->>'terminal')::boolean, false) AS terminal
        FROM jsonb_array_elements(p_results) AS x
    ),
    fenced AS (
        UPDATE work_queue w SET outcome_pending = true
        FROM incoming i
        WHERE w.lease_token = i.lease AND w.claim_epoch = i.epoch AND w.generation = i.generation
          AND NOT w.outcome_pending
          AND (w.manifest_version = 0 OR i.manifest_version = 0 OR w.manifest_version = i.manifest_version)
        RETURNING w.id, w.shard_id, w.resource_id, i.*
    ),
    written AS (
        INSERT INTO work_outbox AS o (work_id, shard_id, resource_id, generation, status, conditions, health_ok,
                                      advance, requeue_after_ms, error_message, error_reason, terminal)
        SELECT id, shard_id, resource_id, generation, status, conditions, healthy,
               advance, requeue_after_ms, error, reason, terminal
        FROM fenced
        ORDER BY id
        ON CONFLICT (work_id, shard_id) DO UPDATE
            SET resource_id = EXCLUDED.resource_id, generation = EXCLUDED.generation,
                status = EXCLUDED.status, conditions = EXCLUDED.conditions, health_ok = EXCLUDED.health_ok,
                advance = EXCLUDED.advance, requeue_after_ms = EXCLUDED.requeue_after_ms,
                error_message = EXCLUDED.error_message, error_reason = EXCLUDED.error_reason,
                terminal = EXCLUDED.terminal, created_at = EXCLUDED.created_at
            WHERE o.generation <= EXCLUDED.generation
        RETURNING 1
    )
    SELECT f.lease FROM fenced f;
    IF FOUND THEN
        PERFORM notify_throttled('outbox_ready', 'wake_outbox_ready');
    END IF;
END
$$;

DROP FUNCTION complete_work(uuid, bigint, bigint, bigint, jsonb, jsonb, boolean, text, boolean, bigint);

-- Records a transient or terminal failure of generation p_generation of the
-- resource whose task row the caller locked. A transient failure re-arms the
-- task after the retry delay unless the kind's max_transient_attempts is
-- reached; a terminal one marks the generation failed and removes the task.
-- Nothing happens when the task was re-pointed to a newer generation.
DROP FUNCTION record_work_failure(uuid, smallint, text, boolean);
CREATE FUNCTION record_work_failure(
    p_work_id uuid, p_shard smallint, p_generation bigint, p_message text, p_reason text, p_terminal boolean
) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    w work_queue%ROWTYPE;
    failures integer;
    cap integer;
    terminal boolean;
BEGIN
    SELECT * INTO w FROM work_queue WHERE id = p_work_id AND shard_id = p_shard;
    IF NOT FOUND OR w.generation <> p_generation THEN
        RETURN false;
    END IF;
    SELECT max_transient_attempts INTO cap FROM kind_config WHERE kind = w.kind AND kind_version = w.kind_version;
    UPDATE resources r
    SET failure_attempts = r.failure_attempts + 1
    WHERE r.id = w.resource_id AND r.generation = w.generation
    RETURNING r.failure_attempts INTO failures;
    terminal := p_terminal OR (COALESCE(cap, 0) > 0 AND COALESCE(failures, 0) >= cap);
    IF terminal THEN
        UPDATE resources SET failure_gen = generation WHERE id = w.resource_id AND generation = w.generation;
        DELETE FROM work_queue WHERE id = p_work_id AND shard_id = p_shard;
    ELSE
        UPDATE work_queue
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
            outcome_pending = false, claim_epoch = claim_epoch + 1,
            not_before = now() + retry_delay(COALESCE(failures, 1))
        WHERE id = p_work_id AND shard_id = p_shard;
    END IF;
    PERFORM record_resource_event(
        w.resource_id, 'reconcile', 'Warning',
        COALESCE(NULLIF(p_reason, ''), CASE WHEN terminal THEN 'ReconcileFailed' ELSE 'ReconcileRetrying' END),
        left(p_message, 4096), NULL, 'system:engine', w.generation, 100);
    PERFORM set_resource_conditions(w.resource_id, w.generation, jsonb_build_array(jsonb_build_object(
        'type', 'Synced', 'status', 'False',
        'reason', COALESCE(NULLIF(p_reason, ''), CASE WHEN terminal THEN 'ReconcileFailed' ELSE 'ReconcileRetrying' END),
        'message', left(p_message, 1024))));
    RETURN terminal;
END
$$;

-- Reaper backstop 2 (re-stated for the new failure signature): tasks past
-- their deadline count as a transient failure; a late result is fenced out
-- by the new epoch.
CREATE OR REPLACE FUNCTION expire_overdue_work(p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    overdue record;
    expired integer := 0;
BEGIN
    FOR overdue IN
        SELECT id, shard_id, generation FROM work_queue
        WHERE broker_id IS NOT NULL AND deadline_at < now() AND NOT outcome_pending
        ORDER BY shard_id, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM record_work_failure(overdue.id, overdue.shard_id, overdue.generation,
                                    'the task exceeded its deadline', 'DeadlineExceeded', false);
        expired := expired + 1;
    END LOOP;
    RETURN expired;
END
$$;

-- Reaper backstop 1, re-stated: a lease whose result already waits in the
-- outbox is not stale.
CREATE OR REPLACE FUNCTION reap_stale_work(p_stale_secs double precision, p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    freed integer;
BEGIN
    WITH stale AS (
        SELECT id, shard_id FROM work_queue
        WHERE broker_id IS NOT NULL AND NOT outcome_pending
          AND heartbeat_at < now() - make_interval(secs => p_stale_secs)
        ORDER BY shard_id, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    released AS (
        UPDATE work_queue w
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
            claim_epoch = w.claim_epoch + 1
        FROM stale s WHERE w.id = s.id AND w.shard_id = s.shard_id
        RETURNING 1
    )
    SELECT count(*) INTO freed FROM released;
    IF freed > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN freed;
END
$$;

-- ---------------------------------------------------------------------------
-- Value flows
-- ---------------------------------------------------------------------------

-- Copies the values flowing out of p_sources' status into their dependents'
-- specs. A flow whose source value is missing or null is skipped (not
-- produced yet). A dependent's generation moves only when its spec actually
-- changed; those dependents are then offered to the scheduler. Frozen and
-- deleting dependents are left alone. Returns how many specs changed.
CREATE FUNCTION apply_value_flows(p_sources uuid[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_changed uuid[];
BEGIN
    IF p_sources IS NULL OR cardinality(p_sources) = 0 THEN
        RETURN 0;
    END IF;
    WITH flows AS (
        SELECT d.dependent_id, f->>'dependent' AS pointer, u.status #> pointer_to_path(f->>'source') AS value,
               d.dependency_id, n AS ord
        FROM resource_deps d
        JOIN resources u ON u.id = d.dependency_id
        CROSS JOIN LATERAL jsonb_array_elements(d.value_flows) WITH ORDINALITY AS t(f, n)
        WHERE d.dependency_id = ANY (p_sources)
          AND jsonb_array_length(d.value_flows) > 0
    ),
    targets AS (
        SELECT r.id, r.spec FROM resources r
        WHERE r.id IN (SELECT dependent_id FROM flows WHERE value IS NOT NULL AND value <> 'null'::jsonb)
          AND r.frozen_until IS NULL AND r.deletion_requested_at IS NULL
        ORDER BY r.id
        FOR NO KEY UPDATE
    ),
    patched AS (
        SELECT t.id, jsonb_patch_pointers(t.spec, jsonb_agg(
                   jsonb_build_object('pointer', f.pointer, 'value', f.value) ORDER BY f.dependency_id, f.ord)) AS spec
        FROM targets t
        JOIN flows f ON f.dependent_id = t.id AND f.value IS NOT NULL AND f.value <> 'null'::jsonb
        GROUP BY t.id, t.spec
    ),
    changed AS (
        UPDATE resources r SET spec = p.spec, generation = r.generation + 1, updated_at = now()
        FROM patched p
        WHERE r.id = p.id AND r.spec IS DISTINCT FROM p.spec
        RETURNING r.id
    )
    SELECT array_agg(id ORDER BY id) INTO v_changed FROM changed;
    IF v_changed IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM schedule_eligible(v_changed);
    RETURN cardinality(v_changed);
END
$$;

-- ---------------------------------------------------------------------------
-- The drain
-- ---------------------------------------------------------------------------

-- Applies up to p_max results of one shard range in one transaction:
-- status, synced generation, health, failure bookkeeping and conditions;
-- removes the finished task rows (a task re-pointed to a newer generation
-- survives) or re-arms them (requeue-after, transient failure); copies
-- changed status values into dependents. The cascade trigger on resources
-- then schedules dependents and re-pends owners. Returns the rows drained.
CREATE FUNCTION drain_outbox_batch(p_max integer, p_lo smallint, p_hi smallint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_rows work_outbox[];
    v_sources uuid[];
    v_partial uuid[];
    f work_outbox;
BEGIN
    -- Zero-cost idle gate.
    PERFORM 1 FROM work_outbox WHERE shard_id BETWEEN p_lo AND p_hi LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH picked AS (
        SELECT work_id, shard_id FROM work_outbox
        WHERE shard_id BETWEEN p_lo AND p_hi
        ORDER BY created_at
        LIMIT p_max
        FOR UPDATE SKIP LOCKED
    ),
    popped AS (
        DELETE FROM work_outbox o USING picked p
        WHERE o.work_id = p.work_id AND o.shard_id = p.shard_id AND o.shard_id BETWEEN p_lo AND p_hi
        RETURNING o.*
    )
    SELECT array_agg(p::work_outbox ORDER BY p.resource_id) INTO v_rows FROM popped p;
    IF v_rows IS NULL THEN
        RETURN 0;
    END IF;

    -- Global lock order: resources by id, then their task rows.
    PERFORM 1 FROM resources r
    WHERE r.id IN (SELECT o.resource_id FROM unnest(v_rows) o)
    ORDER BY r.id
    FOR NO KEY UPDATE;

    -- Sources whose status is about to change and that feed dependents.
    SELECT array_agg(r.id) INTO v_sources
    FROM unnest(v_rows) o JOIN resources r ON r.id = o.resource_id
    WHERE o.error_message IS NULL AND o.status IS NOT NULL AND o.status IS DISTINCT FROM r.status
      AND EXISTS (SELECT 1 FROM resource_deps d
                  WHERE d.dependency_id = r.id AND jsonb_array_length(d.value_flows) > 0);

    -- Successes: one coalesced update (fires the cascade trigger once).
    UPDATE resources r
    SET status = COALESCE(o.status, r.status),
        health_ok = COALESCE(o.health_ok, r.health_ok),
        synced_gen = CASE WHEN o.advance AND o.requeue_after_ms IS NULL
                          THEN greatest(r.synced_gen, o.generation) ELSE r.synced_gen END,
        failure_attempts = CASE WHEN o.advance AND o.requeue_after_ms IS NULL AND o.generation = r.generation
                                THEN 0 ELSE r.failure_attempts END,
        failure_gen = CASE WHEN o.advance AND o.requeue_after_ms IS NULL AND r.failure_gen <= o.generation
                           THEN 0 ELSE r.failure_gen END,
        last_reconciled_at = CASE WHEN o.advance AND o.requeue_after_ms IS NULL
                                  THEN now() ELSE r.last_reconciled_at END
    FROM unnest(v_rows) o
    WHERE r.id = o.resource_id AND o.error_message IS NULL
      AND ((o.advance AND o.requeue_after_ms IS NULL)
           OR r.status IS DISTINCT FROM COALESCE(o.status, r.status)
           OR r.health_ok IS DISTINCT FROM COALESCE(o.health_ok, r.health_ok));

    -- A success clears the failure condition.
    DELETE FROM resource_conditions c
    USING unnest(v_rows) o
    WHERE c.resource_id = o.resource_id AND o.error_message IS NULL AND o.advance
      AND o.requeue_after_ms IS NULL AND c.type = 'Synced' AND c.status = 'False';

    -- Conditions the workers reported (written on change only).
    PERFORM set_resource_conditions(o.resource_id, o.generation, o.conditions)
    FROM unnest(v_rows) o
    WHERE o.error_message IS NULL AND o.conditions IS NOT NULL AND jsonb_typeof(o.conditions) = 'array'
      AND jsonb_array_length(o.conditions) > 0;

    -- Finished tasks go; a task re-pointed to a newer generation stays.
    DELETE FROM work_queue w
    USING unnest(v_rows) o
    WHERE w.id = o.work_id AND w.shard_id = o.shard_id AND w.shard_id BETWEEN p_lo AND p_hi
      AND o.error_message IS NULL AND o.requeue_after_ms IS NULL
      AND w.generation = o.generation AND w.outcome_pending;

    -- "Not settled yet": run again after the requested delay.
    UPDATE work_queue w
    SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        outcome_pending = false, claim_epoch = w.claim_epoch + 1,
        not_before = now() + make_interval(secs => o.requeue_after_ms / 1000.0)
    FROM unnest(v_rows) o
    WHERE w.id = o.work_id AND w.shard_id = o.shard_id AND w.shard_id BETWEEN p_lo AND p_hi
      AND o.error_message IS NULL AND o.requeue_after_ms IS NOT NULL
      AND w.generation = o.generation AND w.outcome_pending;

    -- Failures (rare): one at a time.
    FOR f IN SELECT * FROM unnest(v_rows) o WHERE o.error_message IS NOT NULL LOOP
        PERFORM 1 FROM work_queue WHERE id = f.work_id AND shard_id = f.shard_id FOR UPDATE;
        PERFORM record_work_failure(f.work_id, f.shard_id, f.generation, f.error_message, f.error_reason, f.terminal);
    END LOOP;

    -- Value flows out of the changed statuses.
    PERFORM apply_value_flows(v_sources);

    -- A composite's partial result: its rollup runs once its children
    -- settle. Children that settled before this drain saw the task still
    -- present, so offer the owner to the gate now (and arm a recheck).
    SELECT array_agg(o.resource_id) INTO v_partial
    FROM unnest(v_rows) o WHERE o.error_message IS NULL AND NOT o.advance AND o.requeue_after_ms IS NULL;
    PERFORM pend_owners(v_partial, true);

    RETURN cardinality(v_rows);
END
$$;

-- ---------------------------------------------------------------------------
-- The cascade
-- ---------------------------------------------------------------------------

-- After any statement that updated resources: rows that just became synced
-- release their direct dependents to the scheduler; rows whose settledness
-- or health changed (synced, failed, set aside, deleting, health flip)
-- re-pend their owner so its rollup folds the change.
CREATE FUNCTION cascade_on_ready_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_synced uuid[];
    v_owners uuid[];
    v_dependents uuid[];
BEGIN
    SELECT array_agg(n.id) FILTER (WHERE n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen),
           array_agg(DISTINCT n.owner_id) FILTER (
               WHERE n.owner_id IS NOT NULL AND (
                   (n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen)
                   OR (n.failure_gen = n.generation AND o.failure_gen <> o.generation)
                   OR n.health_ok IS DISTINCT FROM o.health_ok
                   OR n.frozen_until IS DISTINCT FROM o.frozen_until
                   OR (n.deletion_requested_at IS NOT NULL AND o.deletion_requested_at IS NULL)))
    INTO v_synced, v_owners
    FROM new_rows n JOIN old_rows o ON o.id = n.id;
    IF v_synced IS NOT NULL THEN
        SELECT array_agg(DISTINCT d.dependent_id) INTO v_dependents
        FROM resource_deps d WHERE d.dependency_id = ANY (v_synced);
        PERFORM schedule_eligible(v_dependents);
    END IF;
    IF v_owners IS NOT NULL THEN
        PERFORM pend_owners(v_owners, true);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER resources_cascade
    AFTER UPDATE ON resources REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION cascade_on_ready_change();

-- ---------------------------------------------------------------------------
-- Composition
-- ---------------------------------------------------------------------------

-- Applies a composer's complete desired composition for generation
-- p_generation of p_owner, in the caller's transaction (the caller holds the
-- task's fence and has validated every child against its kind):
--   p_children: [{kind, kindVersion, name, labels, spec}]
--   p_edges:    [{dependentKind, dependentName, dependencyKind, dependencyName,
--                 flows: [{dependent, source}]}]
-- New children are created (owned by p_owner, rooted at its root), changed
-- ones updated (generation moves only on a real change; values flowing from
-- upstreams are filled in before comparing, so a recompose never undoes
-- them), vanished ones pruned (a kind with a finalizer goes through deletion,
-- others are removed), the owner's edges replaced, and the children offered
-- to the scheduler. Returns {created, updated, pruned}, or {stale} when the
-- owner moved on; an impossible composition (a name held by another owner,
-- an edge to nothing) raises SQLSTATE CV001 and writes nothing.
CREATE FUNCTION apply_composition(p_owner uuid, p_generation bigint, p_children jsonb, p_edges jsonb)
    RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_owner resources%ROWTYPE;
    v_root uuid;
    v_problem text;
    v_created uuid[];
    v_desired uuid[];
    v_updated integer;
    v_marked integer;
    v_removed integer;
BEGIN
    SELECT * INTO v_owner FROM resources WHERE id = p_owner FOR NO KEY UPDATE;
    IF NOT FOUND OR v_owner.generation <> p_generation OR v_owner.composed_gen >= p_generation
       OR v_owner.deletion_requested_at IS NOT NULL THEN
        RETURN jsonb_build_object('stale', true);
    END IF;
    v_root := COALESCE(v_owner.root_id, v_owner.id);

    SELECT (c->>'kind') || '/' || (c->>'name') INTO v_problem
    FROM jsonb_array_elements(p_children) c
    JOIN resources r ON r.kind = c->>'kind' AND r.name = c->>'name'
    WHERE r.owner_id IS DISTINCT FROM p_owner
    LIMIT 1;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'CV001',
            MESSAGE = 'child ' || v_problem || ' already exists and is not owned by this resource';
    END IF;

    WITH created AS (
        INSERT INTO resources (kind, kind_version, name, labels, spec, owner_id, root_id)
        SELECT c->>'kind', (c->>'kindVersion')::smallint, c->>'name',
               COALESCE(c->'labels', '{}'::jsonb), COALESCE(c->'spec', '{}'::jsonb), p_owner, v_root
        FROM jsonb_array_elements(p_children) c
        WHERE NOT EXISTS (SELECT 1 FROM resources r WHERE r.kind = c->>'kind' AND r.name = c->>'name')
        ORDER BY c->>'kind', c->>'name'
        ON CONFLICT (kind, name) DO NOTHING
        RETURNING id
    )
    SELECT COALESCE(array_agg(id), '{}') INTO v_created FROM created;

    SELECT COALESCE(array_agg(r.id ORDER BY r.id), '{}') INTO v_desired
    FROM jsonb_array_elements(p_children) c
    JOIN resources r ON r.kind = c->>'kind' AND r.name = c->>'name' AND r.owner_id = p_owner;
    IF cardinality(v_desired) <> jsonb_array_length(p_children) THEN
        RAISE EXCEPTION 'a child name was taken concurrently' USING ERRCODE = '40001';
    END IF;

    -- Edges: resolve, then replace this owner's set.
    CREATE TEMP TABLE IF NOT EXISTS composition_edges (
        dependent_id uuid, dependency_id uuid, value_flows jsonb, label text
    ) ON COMMIT DELETE ROWS;
    TRUNCATE composition_edges;
    INSERT INTO composition_edges
    SELECT dep.id, up.id, COALESCE(e->'flows', '[]'::jsonb),
           (e->>'dependentKind') || '/' || (e->>'dependentName') || ' -> '
               || (e->>'dependencyKind') || '/' || (e->>'dependencyName')
    FROM jsonb_array_elements(p_edges) e
    LEFT JOIN resources dep ON dep.kind = e->>'dependentKind' AND dep.name = e->>'dependentName'
                           AND dep.owner_id = p_owner
    LEFT JOIN resources up ON up.kind = e->>'dependencyKind' AND up.name = e->>'dependencyName';
    SELECT label INTO v_problem FROM composition_edges WHERE dependent_id IS NULL OR dependency_id IS NULL LIMIT 1;
    IF v_problem IS NOT NULL THEN
        -- Undo the children created above: the composition is refused whole.
        RAISE EXCEPTION USING ERRCODE = 'CV001', MESSAGE = 'edge ' || v_problem || ' names a resource that does not exist';
    END IF;
    DELETE FROM resource_deps d
    WHERE d.owner_id = p_owner
      AND NOT EXISTS (SELECT 1 FROM composition_edges e
                      WHERE e.dependent_id = d.dependent_id AND e.dependency_id = d.dependency_id);
    INSERT INTO resource_deps AS d (dependent_id, dependency_id, owner_id, value_flows)
    SELECT dependent_id, dependency_id, p_owner, value_flows FROM composition_edges
    ORDER BY dependent_id, dependency_id
    ON CONFLICT (dependent_id, dependency_id) DO UPDATE
        SET value_flows = EXCLUDED.value_flows, owner_id = EXCLUDED.owner_id
        WHERE d.value_flows IS DISTINCT FROM EXCLUDED.value_flows OR d.owner_id IS DISTINCT FROM EXCLUDED.owner_id;

    -- Desired specs with the values flowing in from upstreams (or, where an
    -- upstream has not produced its value yet, the value already stored).
    WITH desired AS (
        SELECT r.id, r.spec AS stored, COALESCE(c->'spec', '{}'::jsonb) AS spec,
               COALESCE(c->'labels', '{}'::jsonb) AS labels, (c->>'kindVersion')::smallint AS kind_version
        FROM jsonb_array_elements(p_children) c
        JOIN resources r ON r.kind = c->>'kind' AND r.name = c->>'name' AND r.owner_id = p_owner
    ),
    flows AS (
        SELECT e.dependent_id, f->>'dependent' AS pointer,
               COALESCE(NULLIF(u.status #> pointer_to_path(f->>'source'), 'null'::jsonb),
                        NULLIF(d.stored #> pointer_to_path(f->>'dependent'), 'null'::jsonb)) AS value,
               e.dependency_id, n AS ord
        FROM composition_edges e
        JOIN desired d ON d.id = e.dependent_id
        JOIN resources u ON u.id = e.dependency_id
        CROSS JOIN LATERAL jsonb_array_elements(e.value_flows) WITH ORDINALITY AS t(f, n)
    ),
    patched AS (
        SELECT d.id, d.labels, d.kind_version,
               COALESCE((SELECT jsonb_patch_pointers(d.spec, jsonb_agg(
                                    jsonb_build_object('pointer', f.pointer, 'value', f.value)
                                    ORDER BY f.dependency_id, f.ord))
                         FROM flows f WHERE f.dependent_id = d.id AND f.value IS NOT NULL), d.spec) AS spec
        FROM desired d
    ),
    changed AS (
        UPDATE resources r
        SET spec = p.spec, labels = p.labels, kind_version = p.kind_version,
            generation = r.generation + CASE WHEN r.id = ANY (v_created) THEN 0 ELSE 1 END,
            -- Re-emitted within its orphan grace: adopted again.
            frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END,
            updated_at = now()
        FROM patched p
        WHERE r.id = p.id
          AND ((r.spec, r.labels, r.kind_version) IS DISTINCT FROM (p.spec, p.labels, p.kind_version)
               OR (r.frozen_until IS NOT NULL AND r.frozen_until <> 'infinity'))
        RETURNING r.id = ANY (v_created) AS fresh
    )
    SELECT count(*) FILTER (WHERE NOT fresh) INTO v_updated FROM changed;

    -- Prune what is no longer desired.
    WITH marked AS (
        UPDATE resources r
        SET deletion_requested_at = now(),
            finalizers = ARRAY(SELECT DISTINCT x FROM unnest(r.finalizers || ARRAY[c.finalizer_name]) AS x),
            updated_at = now()
        FROM kind_config c
        WHERE r.owner_id = p_owner AND NOT (r.id = ANY (v_desired))
          AND c.kind = r.kind AND c.kind_version = r.kind_version AND c.finalizer_name IS NOT NULL
          AND r.deletion_requested_at IS NULL
        RETURNING 1
    )
    SELECT count(*) INTO v_marked FROM marked;
    WITH removed AS (
        DELETE FROM resources r
        USING kind_config c
        WHERE r.owner_id = p_owner AND NOT (r.id = ANY (v_desired))
          AND c.kind = r.kind AND c.kind_version = r.kind_version AND c.finalizer_name IS NULL
        RETURNING 1
    )
    SELECT count(*) INTO v_removed FROM removed;

    UPDATE resources SET composed_gen = p_generation WHERE id = p_owner;
    PERFORM schedule_eligible(v_desired);
    PERFORM record_resource_event(
        p_owner, 'compose', 'Normal', 'Composed',
        format('%s children desired: %s created, %s updated, %s pruned',
               cardinality(v_desired), cardinality(v_created), v_updated, v_marked + v_removed),
        jsonb_build_object('created', cardinality(v_created), 'updated', v_updated,
                           'pruned', v_marked + v_removed, 'edges', jsonb_array_length(p_edges)),
        'system:composer', p_generation, 100);
    RETURN jsonb_build_object('created', cardinality(v_created), 'updated', v_updated,
                              'pruned', v_marked + v_removed);
END
$$;
