-- The result outbox becomes one table (it had 16 range partitions by
-- shard_id), and the drain removes the results it picked by tuple id.
--
-- The drain popped its batch with a DELETE joined to the rows it had
-- picked. Over the partitioned table PostgreSQL planned that join as a hash
-- of the whole outbox, so every drain read every waiting result: with
-- 20,000 waiting (a 100k load keeps thousands there), the pop took 15-20 ms
-- of a 512-result drain against 1.6 ms for the pick itself. A nested loop
-- over 16 partitions was slower still (measured for ADR 10). On one table
-- the picked rows are deleted by ctid, a TID scan of exactly those rows:
-- they are locked by the pick, so their ctids cannot change before the
-- delete. As for the queue (ADR 13), the shard-range predicates stay and
-- the age index still serves a range. See ADR 15.
--
-- Three functions take or return the outbox's row type, which belongs to
-- the table, so they are dropped with the old table and created again with
-- the same bodies (from 0022 and 0007) for the new one.

ALTER TABLE work_outbox RENAME TO work_outbox_parted;
ALTER TABLE work_outbox_parted RENAME CONSTRAINT work_outbox_pkey TO work_outbox_parted_pkey;
ALTER INDEX work_outbox_age_idx RENAME TO work_outbox_parted_age_idx;

CREATE UNLOGGED TABLE work_outbox (LIKE work_outbox_parted INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    WITH (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02,
          autovacuum_vacuum_threshold = 50, autovacuum_analyze_threshold = 50);
ALTER TABLE work_outbox ADD CONSTRAINT work_outbox_pkey PRIMARY KEY (work_id, shard_id);
CREATE INDEX work_outbox_age_idx ON work_outbox (created_at, shard_id);

INSERT INTO work_outbox SELECT * FROM work_outbox_parted;

DROP FUNCTION apply_delete_results(work_outbox_parted[], smallint, smallint);
DROP FUNCTION apply_work_results(work_outbox_parted[], smallint, smallint);
DROP FUNCTION fence_results(jsonb);
DROP TABLE work_outbox_parted;

CREATE FUNCTION apply_delete_results(p_rows work_outbox[], p_lo smallint, p_hi smallint)
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
$function$

;
CREATE FUNCTION apply_work_results(p_all work_outbox[], p_lo smallint, p_hi smallint)
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
$function$

;
CREATE FUNCTION fence_results(p_results jsonb)
 RETURNS TABLE(lease uuid, outcome work_outbox)
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
$function$

;

-- The batch is picked oldest first and removed by tuple id (see above).
-- The idle gate reads the age index, so a table still full of dead tuples
-- after a burst is not scanned from its first page.
CREATE OR REPLACE FUNCTION drain_outbox_batch(p_max integer, p_lo smallint, p_hi smallint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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
$$;
