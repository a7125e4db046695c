-- The drainer: applies batches of results from the outbox, value flows and
-- rollup rechecks.

-- Copies the values flowing out of p_sources' status into their dependents'
-- specs. A flow whose source value is missing or null is skipped (not
-- produced yet). A dependent's generation moves only when its spec actually
-- changed; those dependents are then offered to the scheduler. Frozen and
-- deleting dependents are left alone. Returns how many specs changed.
CREATE OR REPLACE FUNCTION apply_value_flows(p_sources uuid[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION apply_work_results(p_all work_outbox[], p_lo smallint, p_hi smallint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_rows work_outbox[];
    v_deletes work_outbox[];
    v_sources uuid[];
    v_partial uuid[];
    f work_outbox;
BEGIN
    IF p_all IS NULL OR cardinality(p_all) = 0 THEN
        RETURN 0;
    END IF;
    SELECT array_agg(o ORDER BY o.resource_id) FILTER (WHERE o.task_type = 'delete'),
           array_agg(o ORDER BY o.resource_id) FILTER (WHERE o.task_type <> 'delete')
    INTO v_deletes, v_rows
    FROM unnest(p_all) o;

    PERFORM apply_delete_results(v_deletes, p_lo, p_hi);
    IF v_rows IS NULL THEN
        RETURN cardinality(p_all);
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

    -- Events the workers reported (successes and failures alike).
    PERFORM record_worker_events(o.resource_id, o.generation, o.events)
    FROM unnest(v_rows) o
    WHERE o.events IS NOT NULL AND EXISTS (SELECT 1 FROM resources r WHERE r.id = o.resource_id);

    -- Finished tasks go; a task re-pointed to a newer generation stays.
    DELETE FROM work_queue w
    USING unnest(v_rows) o
    WHERE w.id = o.work_id AND w.shard_id = o.shard_id AND w.shard_id BETWEEN p_lo AND p_hi
      AND o.error_message IS NULL AND o.requeue_after_ms IS NULL
      AND w.generation = o.generation AND w.outcome_pending;

    -- "Not settled yet": run again after the requested delay, counted from
    -- the result's fence time (created_at), so a lagging drain adds nothing.
    UPDATE work_queue w
    SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        outcome_pending = false, claim_epoch = w.claim_epoch + 1,
        not_before = o.created_at + make_interval(secs => o.requeue_after_ms / 1000.0)
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

    RETURN cardinality(p_all);
END
$function$;

CREATE OR REPLACE FUNCTION apply_delete_results(p_rows work_outbox[], p_lo smallint, p_hi smallint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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

    -- Events the teardowns reported.
    PERFORM record_worker_events(o.resource_id, o.generation, o.events)
    FROM unnest(p_rows) o
    WHERE o.events IS NOT NULL AND EXISTS (SELECT 1 FROM resources r WHERE r.id = o.resource_id);

    UPDATE work_queue w
    SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        outcome_pending = false, claim_epoch = w.claim_epoch + 1,
        not_before = o.created_at + make_interval(secs => o.requeue_after_ms / 1000.0)
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
$function$;

-- The batch is picked oldest first (the age index) and removed by tuple id:
-- the picked rows are locked, so their ctids cannot change before the delete.
-- The idle gate reads the age index, so a table still full of dead tuples
-- after a burst is not scanned from its first page.
CREATE OR REPLACE FUNCTION drain_outbox_batch(p_max integer, p_lo smallint, p_hi smallint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_all work_outbox[];
BEGIN
    PERFORM 1 FROM work_outbox WHERE shard_id BETWEEN p_lo AND p_hi ORDER BY created_at LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    WITH popped AS (
        DELETE FROM work_outbox o
        WHERE o.ctid = ANY (ARRAY(
            SELECT p.ctid FROM work_outbox p
            WHERE p.shard_id BETWEEN p_lo AND p_hi
            ORDER BY p.created_at
            LIMIT p_max
            FOR UPDATE SKIP LOCKED))
        RETURNING o.*
    )
    SELECT array_agg(p::work_outbox ORDER BY p.resource_id) INTO v_all FROM popped p;
    IF v_all IS NULL THEN
        RETURN 0;
    END IF;
    -- Global lock order: resources by id, then their task rows.
    PERFORM 1 FROM resources r
    WHERE r.id IN (SELECT o.resource_id FROM unnest(v_all) o)
    ORDER BY r.id
    FOR NO KEY UPDATE;
    RETURN apply_work_results(v_all, p_lo, p_hi);
END
$function$;

-- The drainer's straddle close-out for one shard range, in its own
-- transaction: re-pends armed owners, forgets those no longer blocked (or
-- gone) and those armed longer ago than p_window_secs.
CREATE OR REPLACE FUNCTION drain_rollup_rechecks(p_max integer, p_lo smallint, p_hi smallint, p_window_secs double precision)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;
