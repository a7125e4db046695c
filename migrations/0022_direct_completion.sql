-- Results applied where they arrive, when the system is nearly idle.
--
-- On an idle system a result used to take two transactions and a wake-up
-- between them: the broker appended it to the outbox and notified, and the
-- drainer woke, picked it and applied it (about 1 ms of hop and 2.5 ms of
-- statements, measured per idle apply). complete_work does the append's
-- fencing and the drain's work in one transaction, so a broker with only a
-- few tasks in flight applies its results itself. Under load the outbox
-- still batches results into few durable commits (ADR 7); the broker
-- chooses (broker::session).
--
-- The drain's body moves into apply_work_results, shared by both paths:
-- the drain pops its rows from the outbox, complete_work builds them from
-- the task rows it fenced.

-- The caller holds the row locks of the results' resources (taken in id
-- order, before any task row: the global lock order).
CREATE FUNCTION apply_work_results(p_all work_outbox[], p_lo smallint, p_hi smallint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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

    RETURN cardinality(p_all);
END
$$;

CREATE OR REPLACE FUNCTION drain_outbox_batch(p_max integer, p_lo smallint, p_hi smallint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_all work_outbox[];
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
    -- Global lock order: resources by id, then their task rows.
    PERFORM 1 FROM resources r
    WHERE r.id IN (SELECT o.resource_id FROM unnest(v_all) o)
    ORDER BY r.id
    FOR NO KEY UPDATE;
    RETURN apply_work_results(v_all, p_lo, p_hi);
END
$$;

-- The fence, shared by the append and the direct completion: marks the
-- task rows whose lease, epoch, generation and manifest version still match
-- and returns their results as outbox rows. Task rows are only reached by
-- key (the settings keep it so whatever the statistics say, see 0018).
CREATE FUNCTION fence_results(p_results jsonb) RETURNS TABLE (lease uuid, outcome work_outbox)
    LANGUAGE plpgsql
    SET enable_hashjoin = off
    SET enable_mergejoin = off
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    SET plan_cache_mode = force_generic_plan
    AS $$
BEGIN
    RETURN QUERY
    WITH incoming AS (
        SELECT (x->>'workId')::uuid AS work_id, (x->>'shardId')::smallint AS work_shard,
               (x->>'lease')::uuid AS lease, (x->>'epoch')::bigint AS epoch,
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
        WHERE w.id = i.work_id AND w.shard_id = i.work_shard
          AND w.lease_token = i.lease AND w.claim_epoch = i.epoch AND w.generation = i.generation
          AND NOT w.outcome_pending
          AND (w.manifest_version = 0 OR i.manifest_version = 0 OR w.manifest_version = i.manifest_version)
        RETURNING w.id, w.shard_id, w.resource_id, w.task_type, i.*
    )
    SELECT f.lease,
           ROW(f.id, f.shard_id, f.resource_id, f.generation, f.status, f.conditions, f.healthy, f.advance,
               f.requeue_after_ms, f.error, f.reason, f.terminal, clock_timestamp(), f.task_type,
               f.finalizer)::work_outbox
    FROM fenced f;
END
$$;

-- Same behaviour as 0012's, with the fence above (which carries the
-- key-only settings; the insert itself is by key).
CREATE OR REPLACE FUNCTION append_outbox(p_results jsonb) RETURNS SETOF uuid
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    AS $$
BEGIN
    RETURN QUERY
    WITH fenced AS (
        SELECT f.lease, f.outcome FROM fence_results(p_results) f
    ),
    written AS (
        INSERT INTO work_outbox AS o
        SELECT (f.outcome).* FROM fenced f
        ORDER BY (f.outcome).work_id
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

-- Fences and applies a few results in one transaction. Cached generic
-- plans: for a handful of rows, planning each of the drain's statements
-- anew cost more than running them (1.7-2.0 ms against 1.0-1.2 ms per
-- single-result call, measured in psql on a 100k database). Only the plan
-- cache mode is set, so the generic plans cached here are the ones the
-- drain would build itself.
CREATE FUNCTION complete_work(p_results jsonb) RETURNS SETOF uuid
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    AS $$
DECLARE
    v_rows work_outbox[];
    v_leases uuid[];
    v_lo smallint;
    v_hi smallint;
BEGIN
    -- The drain's lock order: resources by id first, then their task rows
    -- (apply_work_results relies on these locks). The resource ids only
    -- choose what to lock; the fenced task rows decide what is applied.
    PERFORM 1 FROM resources r
    WHERE r.id IN (SELECT (x->>'resourceId')::uuid FROM jsonb_array_elements(p_results) AS x)
    ORDER BY r.id
    FOR NO KEY UPDATE;
    SELECT array_agg(f.outcome ORDER BY (f.outcome).resource_id), array_agg(f.lease),
           min((f.outcome).shard_id), max((f.outcome).shard_id)
    INTO v_rows, v_leases, v_lo, v_hi
    FROM fence_results(p_results) f;
    IF v_rows IS NULL THEN
        RETURN;
    END IF;
    PERFORM apply_work_results(v_rows, v_lo, v_hi);
    RETURN QUERY SELECT unnest(v_leases);
END
$$;
