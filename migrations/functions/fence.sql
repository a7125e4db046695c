-- Results: the fence that drops stale results, the outbox append, direct
-- completion, and failure records.

-- The results arrive as a JSON array of objects of the shape task_result
-- (0010), read with jsonb_populate_recordset: its attribute names are the
-- keys, and a key left out or null reads as NULL. That parses a batch in
-- about half the time of one `->>` per key (200 batches of 130 results in
-- psql: 120-130 ms against 220-245 ms); the fence's plan is the same.

-- The fence (fence_results) knows the task id, so it reaches its task by
-- primary key, whose keys are time-ordered and close together. The planner
-- found the lease index (random tokens) as good for the fence's join, so
-- the lease is compared in a form no index serves, `(lease_token = lease)
-- IS TRUE` (the same test in a WHERE clause): the key is its only way in.
CREATE OR REPLACE FUNCTION fence_results(p_results jsonb)
 RETURNS TABLE(lease uuid, outcome work_outbox)
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET enable_bitmapscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
BEGIN
    RETURN QUERY
    WITH incoming AS (
        SELECT x."workId" AS work_id, x."shardId" AS work_shard, x.lease, x.epoch, x.generation,
               COALESCE(x."manifestVersion", 0) AS manifest_version, x.status, x.conditions, x.healthy,
               COALESCE(x.advance, true) AS advance, x."requeueAfterMs" AS requeue_after_ms,
               x.error, x.reason, COALESCE(x.terminal, false) AS terminal, x.finalizer, x.events
        FROM jsonb_populate_recordset(NULL::task_result, p_results) AS x
    ),
    fenced AS (
        UPDATE work_queue w SET outcome_pending = true
        FROM incoming i
        WHERE w.id = i.work_id AND w.shard_id = i.work_shard
          AND (w.lease_token = i.lease) IS TRUE AND w.claim_epoch = i.epoch AND w.generation = i.generation
          AND NOT w.outcome_pending
          AND (w.manifest_version = 0 OR i.manifest_version = 0 OR w.manifest_version = i.manifest_version)
        RETURNING w.id, w.shard_id, w.resource_id, w.task_type, i.*
    )
    SELECT f.lease,
           ROW(f.id, f.shard_id, f.resource_id, f.generation, f.status, f.conditions, f.healthy, f.advance,
               f.requeue_after_ms, f.error, f.reason, f.terminal, clock_timestamp(), f.task_type,
               f.finalizer, f.events)::work_outbox
    FROM fenced f;
END
$function$;

-- Appends fenced results to the outbox for the drainer and marks their tasks
-- outcome_pending. The fence (above) carries the key-only plan settings; the
-- insert itself is by key.
CREATE OR REPLACE FUNCTION append_outbox(p_results jsonb)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
                task_type = EXCLUDED.task_type, finalizer = EXCLUDED.finalizer, events = EXCLUDED.events
            WHERE o.generation <= EXCLUDED.generation
        RETURNING 1
    )
    SELECT f.lease FROM fenced f;
    IF FOUND THEN
        PERFORM notify_throttled('outbox_ready', 'wake_outbox_ready');
    END IF;
END
$function$;

-- Fences and applies a few results in one transaction. Cached generic
-- plans: for a handful of rows, planning each of the drain's statements
-- anew cost more than running them (1.7-2.0 ms against 1.0-1.2 ms per
-- single-result call, measured in psql on a 100k database). Only the plan
-- cache mode is set, so the generic plans cached here are the ones the
-- drain would build itself.
CREATE OR REPLACE FUNCTION complete_work(p_results jsonb)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
 SET lock_timeout TO '100ms'
AS $function$
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
    WHERE r.id IN (SELECT x."resourceId" FROM jsonb_populate_recordset(NULL::task_result, p_results) AS x)
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
$function$;

-- Records a transient or terminal failure of generation p_generation of the
-- resource whose task row the caller locked; a teardown failure
-- goes to record_delete_failure instead. A reconcile task of a resource
-- that was set aside or marked for deletion meanwhile is removed rather
-- than re-armed.
CREATE OR REPLACE FUNCTION record_work_failure(p_work_id uuid, p_shard smallint, p_generation bigint, p_message text, p_reason text, p_terminal boolean)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    w work_queue%ROWTYPE;
    failures integer;
    cap integer;
    terminal boolean;
    v_parked boolean;
    v_base_ms integer;
    v_cap_ms integer;
    v_jitter text;
BEGIN
    SELECT * INTO w FROM work_queue WHERE id = p_work_id AND shard_id = p_shard;
    IF NOT FOUND OR w.generation <> p_generation THEN
        RETURN false;
    END IF;
    IF w.task_type = 'delete' THEN
        RETURN record_delete_failure(p_work_id, p_shard, p_message, p_reason, p_terminal);
    END IF;
    SELECT c.max_transient_attempts, c.retry_base_ms, c.retry_cap_ms, c.retry_jitter
    INTO cap, v_base_ms, v_cap_ms, v_jitter
    FROM kind_config c WHERE c.kind = w.kind AND c.kind_version = w.kind_version;
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
            not_before = now() + retry_delay_for(COALESCE(failures, 1), v_base_ms, v_cap_ms, v_jitter)
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
$function$;
