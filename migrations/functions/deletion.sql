-- Deletion: marking teardown trees, quarantine, the level-triggered teardown
-- sweeps, teardown failures and orphaned work.

-- Marks the teardown tree of p_id: p_id, everything it owns (transitively)
-- and everything that depends on any of them (transitively). Each node not
-- yet marked gets deletion_requested_at, loses an orphan or quarantine mark
-- (deletion overrides both), gets its kind's finalizer, loses its queued
-- reconcile task and its pending operations (failed) and records a
-- DeletionRequested event (p_note, when given, explains the target's
-- deletion). Queues no teardown and removes nothing:
-- that is sweep_deletable's job, in a later statement that sees the marks.
-- Returns the ids of the whole tree (empty when p_id does not exist).
CREATE OR REPLACE FUNCTION cascade_mark_for_deletion(p_id uuid, p_actor text, p_note text DEFAULT NULL::text)
 RETURNS uuid[]
 LANGUAGE plpgsql
AS $function$
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
    PERFORM fail_operations_of_deleting(v_new);
    RETURN v_tree;
END
$function$;

-- The API's delete: marks the teardown tree of p_id, then (a separate
-- statement, so the marks are visible) starts the teardown of whatever is
-- already unblocked. false when p_id does not exist.
CREATE OR REPLACE FUNCTION request_resource_deletion(p_id uuid, p_actor text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
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
$function$;

-- Sets p_id aside: frozen_until = 'infinity' (phase Quarantined), its
-- unclaimed reconcile task dropped (a claimed one lands normally; a
-- teardown is never touched), a Quarantined event and condition. Its owner
-- is re-pended by the cascade trigger, so the owner's rollup stops waiting
-- for it. Returns 'not_found', 'deleting' (refused), 'unchanged' (already
-- quarantined) or 'quarantined'.
CREATE OR REPLACE FUNCTION quarantine_resource(p_id uuid, p_actor text, p_message text DEFAULT NULL::text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
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
$function$;

-- Releases a quarantined p_id (only an 'infinity' mark; an orphan mark is
-- not a quarantine) and offers it to the scheduler: spec edits stored while
-- it was quarantined are reconciled now. Returns 'not_found', 'unchanged'
-- (not quarantined) or 'released'.
CREATE OR REPLACE FUNCTION unquarantine_resource(p_id uuid, p_actor text, p_message text DEFAULT NULL::text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
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
$function$;

-- The level-triggered teardown engine over a set of candidates. A marked
-- candidate with no remaining owned child and no remaining marked dependent
-- is unblocked: with finalizers left and no teardown queued it gets its
-- 'delete' task; with no finalizers left it is removed, and its owner and
-- its dependencies become the next candidates (removing it may have
-- unblocked them). Loops until nothing more is removed or p_max nodes were
-- handled. Candidates locked elsewhere are skipped (the reaper's sweep is
-- the backstop). Returns the tasks queued plus the rows removed.
CREATE OR REPLACE FUNCTION sweep_deletable_ids(p_ids uuid[], p_max integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
            SELECT enqueue_tasks(array_agg(ROW(r.id, r.kind, r.kind_version, r.generation,
                                               COALESCE(c.manifest_version, 0), r.shard_id)::task_candidate
                                           ORDER BY r.id),
                                 'delete', NULL, 'keep')
            INTO v_queued
            FROM resources r
            LEFT JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
            WHERE r.id = ANY (v_queue);
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
$function$;

-- The sweep over one shard range: the unblocked marked nodes of the range
-- (oldest marks first) are the candidates; see sweep_deletable_ids. Free
-- when nothing is being deleted (the partial index is empty).
CREATE OR REPLACE FUNCTION sweep_deletable(p_max integer, p_lo smallint, p_hi smallint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;

-- Tears down composer-dropped children whose grace window passed without a
-- re-emit (frozen_until < now(), which 'infinity' never is): a child of a
-- kind with a finalizer, or one that owns children itself, goes through the
-- deletion cascade (its teardown runs, in order); any other child is
-- removed. The owner gets an event either way. Free when nothing is
-- orphaned (the partial index is empty). Returns the children handled.
CREATE OR REPLACE FUNCTION sweep_expired_orphans(p_max integer, p_lo smallint, p_hi smallint)
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
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
$function$;

-- A failed teardown of the delete task the caller locked. The task is
-- re-armed: after the retry delay when transient, parked when terminal
-- (ReconcileResource releases it). Either way the node stays Deleting and
-- keeps blocking what is above it; the failure is recorded as a warning
-- event and a Teardown=False condition.
CREATE OR REPLACE FUNCTION record_delete_failure(p_work_id uuid, p_shard smallint, p_message text, p_reason text, p_terminal boolean)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
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
                          ELSE now() + kind_retry_delay(w.kind, w.kind_version, greatest(w.attempts, 1)) END
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
$function$;

CREATE OR REPLACE FUNCTION drop_orphaned_work(p_kind text, p_kind_version smallint, p_after uuid, p_scan integer, OUT next_kind text, OUT next_kind_version smallint, OUT next_after uuid, OUT dropped integer)
 RETURNS record
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
DECLARE
    v_seen integer;
    v_ids uuid[];
BEGIN
    WITH slice AS (
        SELECT w.id, w.kind, w.kind_version, w.resource_id, w.task_type
        FROM work_queue w
        WHERE w.broker_id IS NULL
          AND (w.kind, w.kind_version, w.id) > (COALESCE(p_kind, ''), COALESCE(p_kind_version, 0::smallint),
                                                COALESCE(p_after, '00000000-0000-0000-0000-000000000000'::uuid))
        ORDER BY w.kind, w.kind_version, w.id
        LIMIT p_scan
    )
    SELECT count(*),
           (array_agg(s.kind ORDER BY s.kind DESC, s.kind_version DESC, s.id DESC))[1],
           (array_agg(s.kind_version ORDER BY s.kind DESC, s.kind_version DESC, s.id DESC))[1],
           (array_agg(s.id ORDER BY s.kind DESC, s.kind_version DESC, s.id DESC))[1],
           array_agg(s.id) FILTER (
               WHERE r.id IS NULL
                  OR (s.task_type = 'reconcile'
                      AND (r.deletion_requested_at IS NOT NULL OR r.frozen_until IS NOT NULL)))
    INTO v_seen, next_kind, next_kind_version, next_after, v_ids
    FROM slice s LEFT JOIN resources r ON r.id = s.resource_id;
    IF v_seen < p_scan THEN
        next_kind := NULL;
        next_kind_version := NULL;
        next_after := NULL;
    END IF;
    dropped := 0;
    IF v_ids IS NOT NULL THEN
        DELETE FROM work_queue w WHERE w.id = ANY (v_ids) AND w.broker_id IS NULL;
        GET DIAGNOSTICS dropped = ROW_COUNT;
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION drop_edges_of_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_ids uuid[];
BEGIN
    -- Keys, not joins with the transition table: PL/pgSQL would keep the
    -- first call's row count as the join's estimate (see 0030). Each delete
    -- probes its index once per deleted resource.
    v_ids := ARRAY(SELECT o.id FROM old_rows o);
    DELETE FROM resource_deps d WHERE d.dependent_id = ANY (v_ids);
    DELETE FROM resource_deps d WHERE d.dependency_id = ANY (v_ids);
    DELETE FROM resource_events e WHERE e.resource_id = ANY (v_ids);
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_drop_edges AFTER DELETE ON resources REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION drop_edges_of_deleted();
