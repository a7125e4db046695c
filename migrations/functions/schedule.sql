-- Scheduling: which resources get a task, when, and the lagging backstop.

-- Retry delay after the n-th consecutive transient failure: 1 s doubling, capped at 60 s
-- (the exponent is clamped so that a count past 1024 cannot overflow).
CREATE OR REPLACE FUNCTION retry_delay(p_attempts integer)
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT make_interval(secs => least(60, power(2, least(greatest(p_attempts - 1, 0), 40)))::double precision) $function$;

-- The same under a kind's retry policy (kind_config): the base (ms; 0 =
-- 1000) doubling per failure up to the cap (ms; 0 = 60000), then the
-- jitter: 'none' the delay d itself, 'full' uniform in [0, d], 'equal'
-- d/2 plus uniform in [0, d/2]. With the defaults it is retry_delay.
CREATE OR REPLACE FUNCTION retry_delay_for(p_attempts integer, p_base_ms integer, p_cap_ms integer, p_jitter text)
 RETURNS interval
 LANGUAGE sql
 VOLATILE
AS $function$
    SELECT make_interval(secs => CASE p_jitter
                                     WHEN 'full' THEN d * random()
                                     WHEN 'equal' THEN d / 2 + d / 2 * random()
                                     ELSE d END / 1000.0)
    FROM (SELECT least(COALESCE(NULLIF(p_cap_ms, 0), 60000)::double precision,
                       COALESCE(NULLIF(p_base_ms, 0), 1000)::double precision
                       * power(2, least(greatest(p_attempts - 1, 0), 40))) AS d) AS delay
$function$;

-- The retry delay of a kind version's task after its n-th failure.
CREATE OR REPLACE FUNCTION kind_retry_delay(p_kind text, p_kind_version integer, p_attempts integer)
 RETURNS interval
 LANGUAGE sql
 STABLE
AS $function$
    SELECT COALESCE(
        (SELECT retry_delay_for(p_attempts, c.retry_base_ms, c.retry_cap_ms, c.retry_jitter)
         FROM kind_config c WHERE c.kind = p_kind AND c.kind_version = p_kind_version),
        retry_delay(p_attempts))
$function$;

-- A task id ordered where p_resource was created: the time-ordered prefix
-- of the resource's id (resources.id defaults to time_ordered_uuid) with
-- fresh random bits, so it sorts among the tasks queued at that moment.
CREATE OR REPLACE FUNCTION queue_id_at(p_resource uuid)
 RETURNS uuid
 LANGUAGE sql
 PARALLEL RESTRICTED
AS $function$
    SELECT encode(
        substring(uuid_send(p_resource) FROM 1 FOR 8)
        || int8send(((random() * 2147483647)::bigint << 31) | (random() * 2147483647)::bigint
                    | (-9223372036854775808)::bigint),
        'hex')::uuid
$function$;

-- The one writer of new work_queue rows. p_tasks are the resources to queue,
-- with the columns the caller read when it chose them; p_task_type is
-- 'reconcile' or 'delete'; p_cause the task's cause (NULL for the stage's own
-- trigger). A resource that already has a task of that type is handled by
-- p_on_conflict:
--   'new'     none can: the resources were created by this statement (a
--             plain insert, which a conflict fails: the create path, the
--             hottest writer, pays no speculative insertion);
--   'keep'    the task stays as it is;
--   'advance' it is re-pointed at a newer generation (or another kind
--             version) and its lease revoked (claim_epoch + 1), so the result
--             of the older one is fenced off;
--   'hurry'   a task that is not leased and has no result pending runs now
--             (past its retry delay), keeping its cause when it has one.
-- With p_by_age a newly inserted task takes its resource's place in the
-- claim order (an id ordered at the resource's creation, queue_id_at)
-- instead of the back of the queue: pend_owners queues a tree's rollup so,
-- and claims take a kind's tasks oldest id first, so the trees of a burst
-- finish one after another instead of all at its end. A task that exists
-- keeps its id.
-- A task queued or advanced carries the calling transaction's trace context
-- when the call is traced (api/write.rs sets converge.trace_context; unset
-- reads as NULL). Rows go in resource-id order, as every queue writer takes
-- them, so two writers wait on each other instead of deadlocking. Wakes the
-- brokers when anything changed; returns how many tasks were queued or changed.
-- The four INSERTs differ only in their ON CONFLICT clause, which SQL cannot
-- take as a value; dynamic SQL would give up the cached plans.
CREATE OR REPLACE FUNCTION enqueue_tasks(p_tasks task_candidate[], p_task_type text, p_cause text,
                                         p_on_conflict text, p_by_age boolean DEFAULT false)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_trace text := nullif(current_setting('converge.trace_context', true), '');
    v_count integer;
BEGIN
    IF p_tasks IS NULL OR cardinality(p_tasks) = 0 THEN
        RETURN 0;
    END IF;
    -- Data-only kinds have nothing to run: their resources are synced at the
    -- generation asked for instead of queued. Free unless one exists (one
    -- read of the small kind_config).
    IF p_task_type = 'reconcile' AND EXISTS (SELECT 1 FROM kind_config WHERE data_only) THEN
        UPDATE resources r SET synced_gen = t.generation
        FROM unnest(p_tasks) t
        JOIN kind_config c ON c.kind = t.kind AND c.kind_version = t.kind_version AND c.data_only
        WHERE r.id = t.resource_id AND r.synced_gen < t.generation;
        p_tasks := ARRAY(
            SELECT ROW(t.resource_id, t.kind, t.kind_version, t.generation, t.manifest_version,
                       t.shard_id)::task_candidate
            FROM unnest(p_tasks) t
            WHERE NOT EXISTS (SELECT 1 FROM kind_config c
                              WHERE c.kind = t.kind AND c.kind_version = t.kind_version AND c.data_only));
        IF cardinality(p_tasks) = 0 THEN
            RETURN 0;
        END IF;
    END IF;
    CASE p_on_conflict
    WHEN 'new' THEN
        INSERT INTO work_queue (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id,
                                cause, trace_context)
        SELECT t.resource_id, p_task_type, t.kind, t.kind_version, t.generation, t.manifest_version, t.shard_id,
               p_cause, v_trace
        FROM unnest(p_tasks) t
        ORDER BY t.resource_id;
    WHEN 'keep' THEN
        INSERT INTO work_queue (id, resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id,
                                cause, trace_context)
        SELECT CASE WHEN p_by_age THEN queue_id_at(t.resource_id) ELSE time_ordered_uuid() END,
               t.resource_id, p_task_type, t.kind, t.kind_version, t.generation, t.manifest_version, t.shard_id,
               p_cause, v_trace
        FROM unnest(p_tasks) t
        ORDER BY t.resource_id
        ON CONFLICT (resource_id, task_type, shard_id) DO NOTHING;
    WHEN 'advance' THEN
        INSERT INTO work_queue AS w (id, resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id,
                                     cause, trace_context)
        SELECT CASE WHEN p_by_age THEN queue_id_at(t.resource_id) ELSE time_ordered_uuid() END,
               t.resource_id, p_task_type, t.kind, t.kind_version, t.generation, t.manifest_version, t.shard_id,
               p_cause, v_trace
        FROM unnest(p_tasks) t
        ORDER BY t.resource_id
        ON CONFLICT (resource_id, task_type, shard_id) DO UPDATE
            SET generation = EXCLUDED.generation,
                trace_context = EXCLUDED.trace_context,
                -- A new generation starts its reconcile latency now.
                created_at = now(),
                kind = EXCLUDED.kind,
                kind_version = EXCLUDED.kind_version,
                manifest_version = EXCLUDED.manifest_version,
                claim_epoch = w.claim_epoch + 1,
                broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
                outcome_pending = false, not_before = now(), attempts = 0, cause = EXCLUDED.cause
            WHERE w.generation < EXCLUDED.generation OR w.kind_version <> EXCLUDED.kind_version;
    WHEN 'hurry' THEN
        INSERT INTO work_queue AS w (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id,
                                     cause, trace_context)
        SELECT t.resource_id, p_task_type, t.kind, t.kind_version, t.generation, t.manifest_version, t.shard_id,
               p_cause, v_trace
        FROM unnest(p_tasks) t
        ORDER BY t.resource_id
        ON CONFLICT (resource_id, task_type, shard_id) DO UPDATE
            SET not_before = now(), cause = COALESCE(w.cause, EXCLUDED.cause)
            WHERE w.broker_id IS NULL AND NOT w.outcome_pending;
    ELSE
        RAISE EXCEPTION 'enqueue_tasks: unknown conflict rule %', p_on_conflict;
    END CASE;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN v_count;
END
$function$;

-- Whether every upstream of p_id is synced for its current generation.
CREATE OR REPLACE FUNCTION upstreams_synced(p_id uuid)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT NOT EXISTS (SELECT 1 FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
                       WHERE d.dependent_id = p_id AND u.synced_gen < u.generation)
$function$;

-- Whether a child keeps its owner's rollup waiting: it lags and is neither
-- terminally failed, nor being deleted, nor set aside.
CREATE OR REPLACE FUNCTION is_progressing(r resources)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT r.synced_gen < r.generation AND r.failure_gen <> r.generation
       AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
$function$;

-- Whether every child of p_id has settled (synced, failed or set aside).
CREATE OR REPLACE FUNCTION children_settled(p_id uuid)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT NOT EXISTS (SELECT 1 FROM resources c WHERE c.owner_id = p_id AND is_progressing(c))
$function$;

-- The candidates are looked up id by id: a LATERAL primary-key probe the
-- planner cannot reorder (with statistics that still describe a nearly
-- empty table, early in a bulk load, it otherwise drove the join from
-- resources and compared every row with the ids), without hash or merge
-- joins and with sequential scans off, so a table believed tiny is still
-- probed through its index. Duplicate ids are folded so the upsert sees
-- each id once. JIT is off here and in every function that turns plan
-- types off: the settings last for the statements it calls, where a scan
-- with no alternative (enqueue_tasks' probe of kind_config) is then costed
-- at 10^10, past jit_above_cost, and each call compiled for ~90 ms.
CREATE OR REPLACE FUNCTION schedule_eligible(p_ids uuid[], p_by_age boolean DEFAULT false)
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET enable_bitmapscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    queued integer;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH candidates AS (
        SELECT r.id, r.kind, r.kind_version, r.generation, r.shard_id, c.manifest_version
        FROM (SELECT DISTINCT x.id FROM unnest(p_ids) AS x(id)) wanted
        -- One probe per id: the LIMIT keeps the subquery from being merged
        -- into a join the planner could drive from resources instead.
        CROSS JOIN LATERAL (SELECT * FROM resources one WHERE one.id = wanted.id LIMIT 1) r
        JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
        WHERE r.generation > r.synced_gen
          AND r.deletion_requested_at IS NULL
          AND r.frozen_until IS NULL
          AND r.failure_gen <> r.generation
          -- Every upstream is synced.
          AND NOT EXISTS (SELECT 1 FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
                          WHERE d.dependent_id = r.id AND u.synced_gen < u.generation)
          -- A kind that rolls up waits for its progressing children, unless it must recompose.
          AND (NOT c.rolls_up OR r.composed_gen < r.generation
               OR NOT EXISTS (SELECT 1 FROM resources ch
                              WHERE ch.owner_id = r.id AND ch.synced_gen < ch.generation
                                AND ch.failure_gen <> ch.generation AND ch.deletion_requested_at IS NULL
                                AND ch.frozen_until IS NULL))
        ORDER BY r.id
    )
    SELECT enqueue_tasks(array_agg(ROW(id, kind, kind_version, generation, manifest_version, shard_id)::task_candidate
                                   ORDER BY id),
                         'reconcile', NULL, 'advance', p_by_age)
    INTO queued FROM candidates;
    RETURN queued;
END
$function$;

-- Re-pends owners whose children changed: a lagging owner goes through the
-- gate; a settled owner that rolls up is queued again at its current
-- generation so its rollup folds the new state of its children. Either task
-- keeps the owner's place in the claim order (p_by_age of enqueue_tasks): a
-- rollup finishes work begun, so it goes ahead of the later roots'
-- compositions of a burst instead of behind all of them. With p_arm,
-- owners still blocked by a progressing child are armed for a recheck.
-- Returns how many tasks were queued.
CREATE OR REPLACE FUNCTION pend_owners(p_ids uuid[], p_arm boolean)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    queued integer := 0;
    settled_queued integer;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    queued := schedule_eligible(p_ids, true);
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
    )
    SELECT enqueue_tasks(array_agg(ROW(id, kind, kind_version, generation, manifest_version, shard_id)::task_candidate
                                   ORDER BY id),
                         'reconcile', NULL, 'keep', true)
    INTO settled_queued FROM candidates;
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
$function$;

-- An operator's "reconcile now" (store::work::request_reconcile): clears a
-- terminal failure of the current generation (and the failure count when
-- p_reset), queues a reconcile even if the resource is synced or hurries the
-- one waiting out a retry delay, and releases a teardown parked after a
-- terminal failure or waiting out its retry delay.
CREATE OR REPLACE FUNCTION request_reconcile(p_id uuid, p_reset boolean)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE resources SET failure_gen = 0,
           failure_attempts = CASE WHEN p_reset THEN 0 ELSE failure_attempts END
    WHERE id = p_id AND (failure_gen <> 0 OR (p_reset AND failure_attempts <> 0));
    PERFORM enqueue_tasks(array_agg(ROW(r.id, r.kind, r.kind_version, r.generation, c.manifest_version,
                                        r.shard_id)::task_candidate),
                          'reconcile', NULL, 'hurry')
    FROM resources r JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
    WHERE r.id = p_id AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL;
    UPDATE work_queue SET not_before = now()
    WHERE resource_id = p_id AND task_type = 'delete' AND broker_id IS NULL AND not_before > now();
    IF FOUND THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
END
$function$;

CREATE OR REPLACE FUNCTION requeue_lagging(p_after uuid, p_scan integer, p_quiet_secs double precision, OUT next_after uuid, OUT requeued integer)
 RETURNS record
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET max_parallel_workers_per_gather TO '0'
AS $function$
DECLARE
    v_seen integer;
    v_ids uuid[];
    v_config_ids uuid[];
BEGIN
    WITH slice AS (
        SELECT r.id, r.shard_id,
               r.synced_gen < r.generation
                   AND r.updated_at < now() - make_interval(secs => p_quiet_secs)
                   AND r.deletion_requested_at IS NULL
                   AND r.frozen_until IS NULL
                   AND r.failure_gen <> r.generation AS lagging,
               -- Synced, but its override changed after its last reconcile:
               -- the re-run a config change queued was lost (a crash emptied
               -- the queue). Resources without an override skip the probe.
               CASE WHEN r.provider_config IS NULL OR r.synced_gen < r.generation OR r.failure_gen <> 0
                         OR r.deletion_requested_at IS NOT NULL OR r.frozen_until IS NOT NULL THEN false
                    ELSE EXISTS (SELECT 1 FROM provider_configs pc
                                 WHERE pc.name = r.provider_config
                                   AND pc.updated_at < now() - make_interval(secs => p_quiet_secs)
                                   AND pc.updated_at > COALESCE(r.last_reconciled_at, '-infinity'::timestamptz))
               END AS config_stale
        FROM resources r
        WHERE r.id > COALESCE(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
        ORDER BY r.id
        LIMIT p_scan
    )
    SELECT (array_agg(s.id ORDER BY s.id DESC))[1], count(*),
           array_agg(s.id) FILTER (
               WHERE s.lagging AND NOT EXISTS (
                   SELECT 1 FROM work_queue w
                   WHERE w.resource_id = s.id AND w.task_type = 'reconcile' AND w.shard_id = s.shard_id)),
           array_agg(s.id) FILTER (WHERE s.config_stale)
    INTO next_after, v_seen, v_ids, v_config_ids
    FROM slice s;
    IF v_seen < p_scan THEN
        next_after := NULL;
    END IF;
    requeued := CASE WHEN v_ids IS NULL THEN 0 ELSE schedule_eligible(v_ids) END;
    IF v_config_ids IS NOT NULL THEN
        requeued := requeued + queue_config_reruns(v_config_ids);
    END IF;
END
$function$;
