-- The deletion lifecycle: finalizers and the reverse-dependency cascade,
-- orphan-grace pruning, and quarantine.
--
-- Deleting a resource marks its whole teardown tree at once: everything it
-- owns (transitively) and everything that depends on it (transitively). A
-- marked node is torn down only once nothing it owns and nothing marked
-- that depends on it remains, so dependents go before their dependencies,
-- children before their owners and the target last. A node whose kind has a
-- finalizer gets a 'delete' task (its teardown reaction runs on a worker;
-- success strips the finalizer); a node without finalizers is removed. A
-- teardown that keeps failing is retried and keeps blocking everything
-- above it: it is surfaced, never skipped.
--
-- frozen_until holds both set-aside states: a finite instant = Orphaned (a
-- composer dropped the child; it is torn down when the instant passes unless
-- it is re-emitted first), 'infinity' = Quarantined (an operator set it
-- aside; never swept). Every scheduler and rollup gate skips frozen rows.

-- ---------------------------------------------------------------------------
-- Tables and indexes
-- ---------------------------------------------------------------------------

ALTER TABLE work_queue DROP CONSTRAINT work_queue_task_type_check;
ALTER TABLE work_queue ADD CONSTRAINT work_queue_task_type_check CHECK (task_type IN ('reconcile', 'delete'));

-- Which task a result belongs to, and for a teardown the finalizer it clears.
ALTER TABLE work_outbox
    ADD COLUMN task_type text NOT NULL DEFAULT 'reconcile',
    ADD COLUMN finalizer text;

-- The sweeps' idle gates: both indexes are empty in steady state.
CREATE INDEX resources_deleting_idx ON resources (shard_id) WHERE deletion_requested_at IS NOT NULL;
CREATE INDEX resources_frozen_sweep_idx ON resources (frozen_until) WHERE frozen_until IS NOT NULL;

-- ---------------------------------------------------------------------------
-- Marking
-- ---------------------------------------------------------------------------

-- Marks the teardown tree of p_id: p_id, everything it owns (transitively)
-- and everything that depends on any of them (transitively). Each node not
-- yet marked gets deletion_requested_at, loses an orphan or quarantine mark
-- (deletion overrides both), gets its kind's finalizer, loses its queued
-- reconcile task and records a DeletionRequested event (p_note, when given,
-- explains the target's deletion). Queues no teardown and removes nothing:
-- that is sweep_deletable's job, in a later statement that sees the marks.
-- Returns the ids of the whole tree (empty when p_id does not exist).
CREATE FUNCTION cascade_mark_for_deletion(p_id uuid, p_actor text, p_note text DEFAULT NULL) RETURNS uuid[]
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_target resources%ROWTYPE;
    v_tree uuid[] := '{}';
    v_walk uuid[];
    v_now uuid[];
    v_new uuid[];
    v_marked record;
BEGIN
    SELECT * INTO v_target FROM resources WHERE id = p_id;
    IF NOT FOUND THEN
        RETURN '{}';
    END IF;
    -- A composition committed while this waited for its locks may have added
    -- children under a node of the tree: walk again after marking until the
    -- tree is stable (a marked owner accepts no new children).
    LOOP
        -- UNION (not UNION ALL) drops nodes already reached: cycle-safe.
        WITH RECURSIVE tree(id) AS (
            SELECT p_id
            UNION
            SELECT n.id
            FROM tree t
            CROSS JOIN LATERAL (
                SELECT c.id FROM resources c WHERE c.owner_id = t.id
                UNION ALL
                SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = t.id
            ) n
        )
        SELECT array_agg(r.id ORDER BY r.id) INTO v_walk
        FROM tree t JOIN resources r ON r.id = t.id;
        EXIT WHEN v_walk IS NULL OR v_walk <@ v_tree;
        v_tree := v_walk;

        -- Global lock order: resources by id.
        PERFORM 1 FROM resources WHERE id = ANY (v_tree) ORDER BY id FOR NO KEY UPDATE;

        WITH marked AS (
            UPDATE resources r
            SET deletion_requested_at = now(),
                frozen_until = NULL,
                finalizers = ARRAY(
                    SELECT DISTINCT f FROM unnest(r.finalizers || (
                        SELECT array_remove(ARRAY[c.finalizer_name], NULL) FROM kind_config c
                        WHERE c.kind = r.kind AND c.kind_version = r.kind_version)) AS f
                    ORDER BY f)
            WHERE r.id = ANY (v_tree) AND r.deletion_requested_at IS NULL
            RETURNING r.id
        )
        SELECT array_agg(id ORDER BY id) INTO v_now FROM marked;
        v_new := COALESCE(v_new, '{}') || COALESCE(v_now, '{}');
    END LOOP;
    FOR v_marked IN
        SELECT r.id, r.kind, r.name, r.generation, r.finalizers FROM resources r
        WHERE r.id = ANY (v_new) ORDER BY r.id
    LOOP
        DELETE FROM work_queue
        WHERE resource_id = v_marked.id AND task_type = 'reconcile' AND broker_id IS NULL;
        PERFORM record_resource_event(
            v_marked.id, 'lifecycle', 'Normal', 'DeletionRequested',
            CASE WHEN v_marked.id = p_id
                 THEN COALESCE(NULLIF(p_note, ''), 'deletion requested by ' || p_actor)
                 ELSE format('deletion requested because %s/%s is being deleted and this resource is owned by it or depends on it',
                             v_target.kind, v_target.name)
            END
            || CASE WHEN cardinality(v_marked.finalizers) > 0
                    THEN '; teardown runs once nothing that depends on it remains'
                    ELSE '' END,
            jsonb_build_object('target', v_target.kind || '/' || v_target.name, 'finalizers', to_jsonb(v_marked.finalizers)),
            p_actor, v_marked.generation, 100);
    END LOOP;
    DELETE FROM rollup_recheck WHERE owner_id = ANY (v_tree);
    RETURN v_tree;
END
$$;

-- ---------------------------------------------------------------------------
-- The sweep
-- ---------------------------------------------------------------------------

-- The level-triggered teardown engine over a set of candidates. A marked
-- candidate with no remaining owned child and no remaining marked dependent
-- is unblocked: with finalizers left and no teardown queued it gets its
-- 'delete' task; with no finalizers left it is removed, and its owner and
-- its dependencies become the next candidates (removing it may have
-- unblocked them). Loops until nothing more is removed or p_max nodes were
-- handled. Candidates locked elsewhere are skipped (the reaper's sweep is
-- the backstop). Returns the tasks queued plus the rows removed.
CREATE FUNCTION sweep_deletable_ids(p_ids uuid[], p_max integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_frontier uuid[] := p_ids;
    v_queue uuid[];
    v_remove uuid[];
    v_next uuid[];
    v_live_owners uuid[];
    v_queued integer;
    v_removed integer;
    v_done integer := 0;
BEGIN
    LOOP
        EXIT WHEN v_frontier IS NULL OR cardinality(v_frontier) = 0 OR v_done >= p_max;
        SELECT array_agg(s.id ORDER BY s.id) FILTER (WHERE cardinality(s.finalizers) > 0 AND NOT s.has_task),
               array_agg(s.id ORDER BY s.id) FILTER (WHERE cardinality(s.finalizers) = 0)
        INTO v_queue, v_remove
        FROM (
            SELECT r.id, r.finalizers,
                   EXISTS (SELECT 1 FROM work_queue w
                           WHERE w.resource_id = r.id AND w.task_type = 'delete' AND w.shard_id = r.shard_id) AS has_task
            FROM resources r
            WHERE r.id = ANY (v_frontier)
              AND r.deletion_requested_at IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM resources c WHERE c.owner_id = r.id)
              AND NOT EXISTS (SELECT 1 FROM resource_deps d JOIN resources x ON x.id = d.dependent_id
                              WHERE d.dependency_id = r.id AND x.deletion_requested_at IS NOT NULL)
            ORDER BY r.id
            LIMIT greatest(p_max - v_done, 1)
            FOR UPDATE OF r SKIP LOCKED
        ) s;

        v_queued := 0;
        IF v_queue IS NOT NULL THEN
            WITH queued AS (
                INSERT INTO work_queue (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id)
                SELECT r.id, 'delete', r.kind, r.kind_version, r.generation, COALESCE(c.manifest_version, 0), r.shard_id
                FROM resources r
                LEFT JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
                WHERE r.id = ANY (v_queue)
                ORDER BY r.id
                ON CONFLICT (resource_id, task_type, shard_id) DO NOTHING
                RETURNING 1
            )
            SELECT count(*) INTO v_queued FROM queued;
            IF v_queued > 0 THEN
                PERFORM notify_throttled('work_ready', 'wake_work_ready');
            END IF;
        END IF;

        v_removed := 0;
        v_next := NULL;
        IF v_remove IS NOT NULL THEN
            -- What removing these may unblock, read before the edges go.
            SELECT array_agg(DISTINCT x.id) INTO v_next FROM (
                SELECT r.owner_id AS id FROM resources r WHERE r.id = ANY (v_remove) AND r.owner_id IS NOT NULL
                UNION
                SELECT d.dependency_id FROM resource_deps d WHERE d.dependent_id = ANY (v_remove)
            ) x;
            SELECT array_agg(DISTINCT o.id) INTO v_live_owners
            FROM resources r JOIN resources o ON o.id = r.owner_id
            WHERE r.id = ANY (v_remove) AND o.deletion_requested_at IS NULL;
            DELETE FROM work_queue WHERE resource_id = ANY (v_remove);
            WITH removed AS (
                DELETE FROM resources r WHERE r.id = ANY (v_remove) RETURNING 1
            )
            SELECT count(*) INTO v_removed FROM removed;
            -- A live owner's rollup folds the loss of a child.
            PERFORM pend_owners(v_live_owners, true);
        END IF;

        v_done := v_done + v_queued + v_removed;
        EXIT WHEN v_removed = 0;
        v_frontier := v_next;
    END LOOP;
    RETURN v_done;
END
$$;

-- The sweep over one shard range: the unblocked marked nodes of the range
-- (oldest marks first) are the candidates; see sweep_deletable_ids. Free
-- when nothing is being deleted (the partial index is empty).
CREATE FUNCTION sweep_deletable(p_max integer, p_lo smallint, p_hi smallint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_ids uuid[];
    v_stray record;
BEGIN
    PERFORM 1 FROM resources WHERE deletion_requested_at IS NOT NULL AND shard_id BETWEEN p_lo AND p_hi LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- Self-healing: a marked node that gained an unmarked child or dependent
    -- after its tree was marked (a composition or edge that raced the mark)
    -- would wait for it forever; its tree is marked again.
    FOR v_stray IN
        SELECT r.id FROM resources r
        WHERE r.deletion_requested_at IS NOT NULL AND r.shard_id BETWEEN p_lo AND p_hi
          AND (EXISTS (SELECT 1 FROM resources c WHERE c.owner_id = r.id AND c.deletion_requested_at IS NULL)
               OR EXISTS (SELECT 1 FROM resource_deps d JOIN resources x ON x.id = d.dependent_id
                          WHERE d.dependency_id = r.id AND x.deletion_requested_at IS NULL))
        ORDER BY r.id
        LIMIT p_max
    LOOP
        PERFORM cascade_mark_for_deletion(v_stray.id, 'system:deletion-sweep');
    END LOOP;
    SELECT array_agg(id) INTO v_ids FROM (
        SELECT r.id FROM resources r
        WHERE r.deletion_requested_at IS NOT NULL AND r.shard_id BETWEEN p_lo AND p_hi
          AND NOT EXISTS (SELECT 1 FROM resources c WHERE c.owner_id = r.id)
          AND NOT EXISTS (SELECT 1 FROM resource_deps d JOIN resources x ON x.id = d.dependent_id
                          WHERE d.dependency_id = r.id AND x.deletion_requested_at IS NOT NULL)
          AND (cardinality(r.finalizers) = 0
               OR NOT EXISTS (SELECT 1 FROM work_queue w
                              WHERE w.resource_id = r.id AND w.task_type = 'delete' AND w.shard_id = r.shard_id))
        ORDER BY r.deletion_requested_at, r.id
        LIMIT p_max) s;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    RETURN sweep_deletable_ids(v_ids, p_max);
END
$$;

-- The API's delete: marks the teardown tree of p_id, then (a separate
-- statement, so the marks are visible) starts the teardown of whatever is
-- already unblocked. false when p_id does not exist.
CREATE FUNCTION request_resource_deletion(p_id uuid, p_actor text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_tree uuid[];
BEGIN
    v_tree := cascade_mark_for_deletion(p_id, p_actor);
    IF cardinality(v_tree) = 0 THEN
        RETURN false;
    END IF;
    PERFORM sweep_deletable_ids(v_tree, 100000);
    RETURN true;
END
$$;

-- ---------------------------------------------------------------------------
-- Teardown results
-- ---------------------------------------------------------------------------

-- A failed teardown of the delete task the caller locked. The task is
-- re-armed: after the retry delay when transient, parked when terminal
-- (ReconcileResource releases it). Either way the node stays Deleting and
-- keeps blocking what is above it; the failure is recorded as a warning
-- event and a Teardown=False condition.
CREATE FUNCTION record_delete_failure(
    p_work_id uuid, p_shard smallint, p_message text, p_reason text, p_terminal boolean
) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    w work_queue%ROWTYPE;
    v_reason text;
BEGIN
    SELECT * INTO w FROM work_queue WHERE id = p_work_id AND shard_id = p_shard AND task_type = 'delete';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_reason := COALESCE(NULLIF(p_reason, ''), CASE WHEN p_terminal THEN 'TeardownFailed' ELSE 'TeardownRetrying' END);
    UPDATE work_queue
    SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        outcome_pending = false, claim_epoch = claim_epoch + 1,
        not_before = CASE WHEN p_terminal THEN 'infinity'::timestamptz
                          ELSE now() + retry_delay(greatest(w.attempts, 1)) END
    WHERE id = p_work_id AND shard_id = p_shard;
    PERFORM record_resource_event(
        w.resource_id, 'deletion', 'Warning', v_reason,
        left(CASE WHEN p_terminal
                  THEN 'the teardown failed and will not be retried until ReconcileResource is called; '
                       || 'the resource stays Deleting and blocks its owner and its dependencies: '
                  ELSE format('the teardown failed (attempt %s) and will be retried; ', w.attempts) END
             || p_message, 4096),
        NULL, 'system:engine', w.generation, 100);
    PERFORM set_resource_conditions(w.resource_id, w.generation, jsonb_build_array(jsonb_build_object(
        'type', 'Teardown', 'status', 'False', 'reason', v_reason, 'message', left(p_message, 1024))));
    RETURN p_terminal;
END
$$;

-- Applies teardown results (the delete-task rows of one drain batch; the
-- caller holds the resources' locks): a success strips the finalizer it
-- cleared and removes the task, then the sweep runs over the stripped nodes
-- so the cascade advances at once; "not done yet" re-arms the task after the
-- delay; a failure goes through record_delete_failure.
CREATE FUNCTION apply_delete_results(p_rows work_outbox[], p_lo smallint, p_hi smallint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_stripped uuid[];
    f work_outbox;
BEGIN
    IF p_rows IS NULL OR cardinality(p_rows) = 0 THEN
        RETURN 0;
    END IF;
    WITH done AS (
        DELETE FROM work_queue w
        USING unnest(p_rows) o
        WHERE w.id = o.work_id AND w.shard_id = o.shard_id AND w.shard_id BETWEEN p_lo AND p_hi
          AND o.error_message IS NULL AND o.requeue_after_ms IS NULL
          AND w.generation = o.generation AND w.outcome_pending AND w.task_type = 'delete'
        RETURNING w.resource_id, o.finalizer
    ),
    stripped AS (
        UPDATE resources r
        SET finalizers = array_remove(r.finalizers, COALESCE(d.finalizer, r.finalizers[1]))
        FROM done d
        WHERE r.id = d.resource_id AND r.deletion_requested_at IS NOT NULL
        RETURNING r.id
    )
    SELECT array_agg(id ORDER BY id) INTO v_stripped FROM stripped;

    UPDATE work_queue w
    SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        outcome_pending = false, claim_epoch = w.claim_epoch + 1,
        not_before = now() + make_interval(secs => o.requeue_after_ms / 1000.0)
    FROM unnest(p_rows) o
    WHERE w.id = o.work_id AND w.shard_id = o.shard_id AND w.shard_id BETWEEN p_lo AND p_hi
      AND o.error_message IS NULL AND o.requeue_after_ms IS NOT NULL
      AND w.generation = o.generation AND w.outcome_pending AND w.task_type = 'delete';

    FOR f IN SELECT * FROM unnest(p_rows) o WHERE o.error_message IS NOT NULL LOOP
        PERFORM 1 FROM work_queue WHERE id = f.work_id AND shard_id = f.shard_id FOR UPDATE;
        PERFORM record_delete_failure(f.work_id, f.shard_id, f.error_message, f.error_reason, f.terminal);
    END LOOP;

    PERFORM sweep_deletable_ids(v_stripped, 100000);
    RETURN cardinality(p_rows);
END
$$;

-- Results of many leases at once, each written only if its fence still
-- matches the task row (same lease token, claim epoch and generation, a
-- compatible manifest version; 0 on either side is "unknown"). p_results is
-- a JSON array of {lease, epoch, generation, manifestVersion, status,
-- conditions, healthy, advance, requeueAfterMs, error, reason, terminal,
-- finalizer}. Returns the lease tokens that were accepted.
CREATE OR REPLACE FUNCTION append_outbox(p_results jsonb) RETURNS SETOF uuid
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
               COALESCE((x->>'terminal')::boolean, false) AS terminal,
               x->>'finalizer' AS finalizer
        FROM jsonb_array_elements(p_results) AS x
    ),
    fenced AS (
        UPDATE work_queue w SET outcome_pending = true
        FROM incoming i
        WHERE w.lease_token = i.lease AND w.claim_epoch = i.epoch AND w.generation = i.generation
          AND NOT w.outcome_pending
          AND (w.manifest_version = 0 OR i.manifest_version = 0 OR w.manifest_version = i.manifest_version)
        RETURNING w.id, w.shard_id, w.resource_id, w.task_type, i.*
    ),
    written AS (
        INSERT INTO work_outbox AS o (work_id, shard_id, resource_id, generation, status, conditions, health_ok,
                                      advance, requeue_after_ms, error_message, error_reason, terminal,
                                      task_type, finalizer)
        SELECT id, shard_id, resource_id, generation, status, conditions, healthy,
               advance, requeue_after_ms, error, reason, terminal, task_type, finalizer
        FROM fenced
        ORDER BY id
        ON CONFLICT (work_id, shard_id) DO UPDATE
            SET resource_id = EXCLUDED.resource_id, generation = EXCLUDED.generation,
                status = EXCLUDED.status, conditions = EXCLUDED.conditions, health_ok = EXCLUDED.health_ok,
                advance = EXCLUDED.advance, requeue_after_ms = EXCLUDED.requeue_after_ms,
                error_message = EXCLUDED.error_message, error_reason = EXCLUDED.error_reason,
                terminal = EXCLUDED.terminal, created_at = EXCLUDED.created_at,
                task_type = EXCLUDED.task_type, finalizer = EXCLUDED.finalizer
            WHERE o.generation <= EXCLUDED.generation
        RETURNING 1
    )
    SELECT f.lease FROM fenced f;
    IF FOUND THEN
        PERFORM notify_throttled('outbox_ready', 'wake_outbox_ready');
    END IF;
END
$$;

-- Records a transient or terminal failure of generation p_generation of the
-- resource whose task row the caller locked (see 0006); a teardown failure
-- goes to record_delete_failure instead. A reconcile task of a resource
-- that was set aside or marked for deletion meanwhile is removed rather
-- than re-armed.
CREATE OR REPLACE FUNCTION record_work_failure(
    p_work_id uuid, p_shard smallint, p_generation bigint, p_message text, p_reason text, p_terminal boolean
) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    w work_queue%ROWTYPE;
    failures integer;
    cap integer;
    terminal boolean;
    v_parked boolean;
BEGIN
    SELECT * INTO w FROM work_queue WHERE id = p_work_id AND shard_id = p_shard;
    IF NOT FOUND OR w.generation <> p_generation THEN
        RETURN false;
    END IF;
    IF w.task_type = 'delete' THEN
        RETURN record_delete_failure(p_work_id, p_shard, p_message, p_reason, p_terminal);
    END IF;
    SELECT max_transient_attempts INTO cap FROM kind_config WHERE kind = w.kind AND kind_version = w.kind_version;
    UPDATE resources r
    SET failure_attempts = r.failure_attempts + 1
    WHERE r.id = w.resource_id AND r.generation = w.generation
    RETURNING r.failure_attempts, (r.frozen_until IS NOT NULL OR r.deletion_requested_at IS NOT NULL)
    INTO failures, v_parked;
    terminal := p_terminal OR (COALESCE(cap, 0) > 0 AND COALESCE(failures, 0) >= cap);
    IF terminal THEN
        UPDATE resources SET failure_gen = generation WHERE id = w.resource_id AND generation = w.generation;
        DELETE FROM work_queue WHERE id = p_work_id AND shard_id = p_shard;
    ELSIF COALESCE(v_parked, false) THEN
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

-- Reaper backstop 4, re-stated: unclaimed reconcile tasks of resources that
-- are gone, deleting or frozen, and unclaimed teardowns of resources that
-- are gone. A teardown of a deleting resource is never dropped.
CREATE OR REPLACE FUNCTION drop_orphaned_work(p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    dropped integer;
BEGIN
    WITH orphaned AS (
        SELECT w.id, w.shard_id FROM work_queue w
        LEFT JOIN resources r ON r.id = w.resource_id
        WHERE w.broker_id IS NULL
          AND (r.id IS NULL
               OR (w.task_type = 'reconcile' AND (r.deletion_requested_at IS NOT NULL OR r.frozen_until IS NOT NULL)))
        LIMIT p_limit
    ),
    gone AS (
        DELETE FROM work_queue w USING orphaned o WHERE w.id = o.id AND w.shard_id = o.shard_id RETURNING 1
    )
    SELECT count(*) INTO dropped FROM gone;
    RETURN dropped;
END
$$;

-- ---------------------------------------------------------------------------
-- The drain, re-stated: teardown results are split off and applied first
-- ---------------------------------------------------------------------------

-- Applies up to p_max results of one shard range in one transaction (see
-- 0006 for the reconcile side). Teardown results go to apply_delete_results.
CREATE OR REPLACE FUNCTION drain_outbox_batch(p_max integer, p_lo smallint, p_hi smallint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_all work_outbox[];
    v_rows work_outbox[];
    v_deletes work_outbox[];
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
    SELECT array_agg(p::work_outbox ORDER BY p.resource_id) INTO v_all FROM popped p;
    IF v_all IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(o ORDER BY o.resource_id) FILTER (WHERE o.task_type = 'delete'),
           array_agg(o ORDER BY o.resource_id) FILTER (WHERE o.task_type <> 'delete')
    INTO v_deletes, v_rows
    FROM unnest(v_all) o;

    -- Global lock order: resources by id, then their task rows.
    PERFORM 1 FROM resources r
    WHERE r.id IN (SELECT o.resource_id FROM unnest(v_all) o)
    ORDER BY r.id
    FOR NO KEY UPDATE;

    PERFORM apply_delete_results(v_deletes, p_lo, p_hi);
    IF v_rows IS NULL THEN
        RETURN cardinality(v_all);
    END IF;

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
      AND jsonb_array_length(o.conditions) > 0
      AND EXISTS (SELECT 1 FROM resources r WHERE r.id = o.resource_id);

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

    RETURN cardinality(v_all);
END
$$;

-- ---------------------------------------------------------------------------
-- Orphan grace
-- ---------------------------------------------------------------------------

-- Tears down composer-dropped children whose grace window passed without a
-- re-emit (frozen_until < now(), which 'infinity' never is): a child of a
-- kind with a finalizer, or one that owns children itself, goes through the
-- deletion cascade (its teardown runs, in order); any other child is
-- removed. The owner gets an event either way. Free when nothing is
-- orphaned (the partial index is empty). Returns the children handled.
CREATE FUNCTION sweep_expired_orphans(p_max integer, p_lo smallint, p_hi smallint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_orphan record;
    v_tree uuid[];
    v_done integer := 0;
BEGIN
    PERFORM 1 FROM resources WHERE frozen_until < now() LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR v_orphan IN
        SELECT r.id, r.kind, r.name, r.owner_id, r.frozen_until, c.finalizer_name,
               EXISTS (SELECT 1 FROM resources x WHERE x.owner_id = r.id) AS owns
        FROM resources r
        LEFT JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
        WHERE r.frozen_until < now() AND r.deletion_requested_at IS NULL
          AND r.shard_id BETWEEN p_lo AND p_hi
        ORDER BY r.id
        LIMIT p_max
        FOR UPDATE OF r SKIP LOCKED
    LOOP
        IF v_orphan.owner_id IS NOT NULL THEN
            PERFORM record_resource_event(
                v_orphan.owner_id, 'compose', 'Normal', 'OrphanExpired',
                format('%s/%s was not emitted again within its orphan grace period and is being torn down',
                       v_orphan.kind, v_orphan.name),
                jsonb_build_object('child', v_orphan.kind || '/' || v_orphan.name),
                'system:orphan-sweep', 0, 100);
        END IF;
        IF v_orphan.finalizer_name IS NOT NULL OR v_orphan.owns THEN
            v_tree := cascade_mark_for_deletion(
                v_orphan.id, 'system:orphan-sweep',
                'its composer stopped emitting it and the orphan grace period ended');
            PERFORM sweep_deletable_ids(v_tree, p_max);
        ELSE
            DELETE FROM work_queue WHERE resource_id = v_orphan.id;
            DELETE FROM resources WHERE id = v_orphan.id;
            PERFORM pend_owners(array_remove(ARRAY[v_orphan.owner_id], NULL), true);
        END IF;
        v_done := v_done + 1;
    END LOOP;
    RETURN v_done;
END
$$;

-- ---------------------------------------------------------------------------
-- Quarantine
-- ---------------------------------------------------------------------------

-- Sets p_id aside: frozen_until = 'infinity' (phase Quarantined), its
-- unclaimed reconcile task dropped (a claimed one lands normally; a
-- teardown is never touched), a Quarantined event and condition. Its owner
-- is re-pended by the cascade trigger, so the owner's rollup stops waiting
-- for it. Returns 'not_found', 'deleting' (refused), 'unchanged' (already
-- quarantined) or 'quarantined'.
CREATE FUNCTION quarantine_resource(p_id uuid, p_actor text, p_message text DEFAULT NULL) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v resources%ROWTYPE;
    v_message text;
BEGIN
    SELECT * INTO v FROM resources WHERE id = p_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF v.deletion_requested_at IS NOT NULL THEN
        RETURN 'deleting';
    END IF;
    IF v.frozen_until = 'infinity' THEN
        RETURN 'unchanged';
    END IF;
    UPDATE resources SET frozen_until = 'infinity' WHERE id = p_id;
    DELETE FROM work_queue WHERE resource_id = p_id AND task_type = 'reconcile' AND broker_id IS NULL;
    DELETE FROM rollup_recheck WHERE owner_id = p_id;
    v_message := 'set aside by ' || p_actor
        || ': nothing reconciles it and it no longer holds up its owner until it is unquarantined'
        || COALESCE(' (' || NULLIF(p_message, '') || ')', '');
    PERFORM record_resource_event(p_id, 'lifecycle', 'Warning', 'Quarantined', v_message, NULL,
                                  p_actor, v.generation, 100);
    PERFORM set_resource_conditions(p_id, v.generation, jsonb_build_array(jsonb_build_object(
        'type', 'Quarantined', 'status', 'True', 'reason', 'Quarantined', 'message', left(v_message, 1024))));
    RETURN 'quarantined';
END
$$;

-- Releases a quarantined p_id (only an 'infinity' mark; an orphan mark is
-- not a quarantine) and offers it to the scheduler: spec edits stored while
-- it was quarantined are reconciled now. Returns 'not_found', 'unchanged'
-- (not quarantined) or 'released'.
CREATE FUNCTION unquarantine_resource(p_id uuid, p_actor text, p_message text DEFAULT NULL) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v resources%ROWTYPE;
BEGIN
    SELECT * INTO v FROM resources WHERE id = p_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF v.frozen_until IS DISTINCT FROM 'infinity'::timestamptz THEN
        RETURN 'unchanged';
    END IF;
    DELETE FROM resource_conditions WHERE resource_id = p_id AND type = 'Quarantined';
    UPDATE resources SET frozen_until = NULL WHERE id = p_id;
    PERFORM record_resource_event(
        p_id, 'lifecycle', 'Normal', 'Unquarantined',
        'released by ' || p_actor || ': it is reconciled again' || COALESCE(' (' || NULLIF(p_message, '') || ')', ''),
        NULL, p_actor, v.generation, 100);
    PERFORM schedule_eligible(ARRAY[p_id]);
    RETURN 'released';
END
$$;

-- ---------------------------------------------------------------------------
-- Composition, re-stated: pruning honours finalizers, dependents and grace
-- ---------------------------------------------------------------------------

-- Applies a composer's complete desired composition (see 0006 for the
-- inputs and the result). Changes from 0006:
-- - a child being deleted is left alone (its teardown is under way), and
--   the edges of dropped children are kept until they are gone, so what is
--   pruned together is torn down in dependency order;
-- - re-emitting an orphaned child clears its mark without a generation bump
--   (a quarantine is never lifted by a re-emit);
-- - a dropped child of a kind with orphan_grace_secs > 0 is marked Orphaned
--   (frozen_until = now + grace) instead of being torn down; one already
--   orphaned or quarantined is left as it is;
-- - any other dropped child of a kind with a finalizer, or one that owns
--   children, goes through the deletion cascade (its teardown tree is torn
--   down in order); the rest are removed.
CREATE OR REPLACE FUNCTION apply_composition(p_owner uuid, p_generation bigint, p_children jsonb, p_edges jsonb)
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
    v_readopted uuid[];
    v_orphaned integer := 0;
    v_marked integer := 0;
    v_removed integer;
    v_child record;
    v_tree uuid[];
    v_trees uuid[] := '{}';
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
    -- The edges of dropped children stay until those children are gone:
    -- they order the teardown of what is pruned together.
    DELETE FROM resource_deps d
    WHERE d.owner_id = p_owner AND d.dependent_id = ANY (v_desired)
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
    compared AS (
        -- Whether the desired state equals the stored one (read before the update).
        SELECT p.*, (r0.spec, r0.labels, r0.kind_version) IS NOT DISTINCT FROM (p.spec, p.labels, p.kind_version) AS same,
               r0.frozen_until IS NOT NULL AND r0.frozen_until <> 'infinity' AS orphaned
        FROM patched p JOIN resources r0 ON r0.id = p.id
    ),
    changed AS (
        UPDATE resources r
        SET spec = p.spec, labels = p.labels, kind_version = p.kind_version,
            generation = r.generation + CASE WHEN r.id = ANY (v_created) OR p.same THEN 0 ELSE 1 END,
            -- Re-emitted within its orphan grace: adopted again.
            frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END,
            updated_at = now()
        FROM compared p
        WHERE r.id = p.id AND r.deletion_requested_at IS NULL
          AND (NOT p.same OR (r.frozen_until IS NOT NULL AND r.frozen_until <> 'infinity'))
        RETURNING r.id, r.id = ANY (v_created) AS fresh, p.same, p.orphaned
    )
    SELECT count(*) FILTER (WHERE NOT fresh AND NOT same),
           COALESCE(array_agg(id ORDER BY id) FILTER (WHERE orphaned), '{}')
    INTO v_updated, v_readopted FROM changed;
    FOR v_child IN SELECT id, generation FROM resources WHERE id = ANY (v_readopted) ORDER BY id LOOP
        PERFORM record_resource_event(
            v_child.id, 'lifecycle', 'Normal', 'Readopted',
            format('its composer %s/%s emits it again within its orphan grace period; nothing was torn down',
                   v_owner.kind, v_owner.name),
            NULL, 'system:composer', v_child.generation, 100);
    END LOOP;

    -- Dropped children: orphan (grace), cascade (finalizer or own children)
    -- or remove. Rows already deleting, orphaned or quarantined stay as they are.
    FOR v_child IN
        SELECT r.id, r.kind, r.name, r.generation, COALESCE(c.orphan_grace_secs, 0) AS grace,
               c.finalizer_name IS NOT NULL AS finalized,
               EXISTS (SELECT 1 FROM resources x WHERE x.owner_id = r.id) AS owns
        FROM resources r
        LEFT JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
        WHERE r.owner_id = p_owner AND NOT (r.id = ANY (v_desired))
          AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
        ORDER BY r.id
    LOOP
        IF v_child.grace > 0 THEN
            UPDATE resources SET frozen_until = now() + make_interval(secs => v_child.grace) WHERE id = v_child.id;
            DELETE FROM work_queue WHERE resource_id = v_child.id AND task_type = 'reconcile' AND broker_id IS NULL;
            PERFORM record_resource_event(
                v_child.id, 'lifecycle', 'Warning', 'Orphaned',
                format('its composer %s/%s no longer emits it; it is torn down in %s s unless emitted again',
                       v_owner.kind, v_owner.name, v_child.grace),
                jsonb_build_object('graceSecs', v_child.grace), 'system:composer', v_child.generation, 100);
            v_orphaned := v_orphaned + 1;
        ELSIF v_child.finalized OR v_child.owns THEN
            v_tree := cascade_mark_for_deletion(
                v_child.id, 'system:composer',
                format('its composer %s/%s no longer emits it', v_owner.kind, v_owner.name));
            v_trees := v_trees || v_tree;
            v_marked := v_marked + 1;
        END IF;
    END LOOP;
    WITH removed AS (
        DELETE FROM resources r
        USING kind_config c
        WHERE r.owner_id = p_owner AND NOT (r.id = ANY (v_desired))
          AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
          AND c.kind = r.kind AND c.kind_version = r.kind_version
          AND c.finalizer_name IS NULL AND c.orphan_grace_secs = 0
          AND NOT EXISTS (SELECT 1 FROM resources x WHERE x.owner_id = r.id)
        RETURNING 1
    )
    SELECT count(*) INTO v_removed FROM removed;

    UPDATE resources SET composed_gen = p_generation WHERE id = p_owner;
    PERFORM schedule_eligible(v_desired);
    -- A separate statement: the sweep sees the marks.
    IF cardinality(v_trees) > 0 THEN
        PERFORM sweep_deletable_ids(v_trees, 100000);
    END IF;
    PERFORM record_resource_event(
        p_owner, 'compose', 'Normal', 'Composed',
        format('%s children desired: %s created, %s updated, %s pruned',
               cardinality(v_desired), cardinality(v_created), v_updated, v_marked + v_removed)
            || CASE WHEN v_orphaned > 0 THEN format(', %s orphaned', v_orphaned) ELSE '' END
            || CASE WHEN cardinality(v_readopted) > 0 THEN format(', %s re-adopted', cardinality(v_readopted)) ELSE '' END,
        jsonb_build_object('created', cardinality(v_created), 'updated', v_updated,
                           'pruned', v_marked + v_removed, 'orphaned', v_orphaned,
                           'readopted', cardinality(v_readopted),
                           'edges', jsonb_array_length(p_edges)),
        'system:composer', p_generation, 100);
    RETURN jsonb_build_object('created', cardinality(v_created), 'updated', v_updated,
                              'pruned', v_marked + v_removed, 'orphaned', v_orphaned);
END
$$;
