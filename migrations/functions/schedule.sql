-- Scheduling: which resources get a task, when, and the lagging backstop.

-- Retry delay after the n-th consecutive transient failure: 1 s doubling, capped at 60 s.
CREATE OR REPLACE FUNCTION retry_delay(p_attempts integer)
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT make_interval(secs => least(60, power(2, greatest(p_attempts - 1, 0)))::double precision) $function$;

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
-- each id once.
CREATE OR REPLACE FUNCTION schedule_eligible(p_ids uuid[])
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_seqscan TO 'off'
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
    ),
    written AS (
        -- The trace context of the calling transaction, when it is traced
        -- (api/write.rs sets it; unset reads as NULL).
        INSERT INTO work_queue AS w (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id,
                                     trace_context)
        SELECT id, 'reconcile', kind, kind_version, generation, manifest_version, shard_id,
               nullif(current_setting('converge.trace_context', true), '')
        FROM candidates
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
                outcome_pending = false, not_before = now(), attempts = 0, cause = NULL
            WHERE w.generation < EXCLUDED.generation OR w.kind_version <> EXCLUDED.kind_version
        RETURNING 1
    )
    SELECT count(*) INTO queued FROM written;
    IF queued > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN queued;
END
$function$;

-- Re-pends owners whose children changed: a lagging owner goes through the
-- gate; a settled owner that rolls up is queued again at its current
-- generation so its rollup folds the new state of its children. With p_arm,
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
$function$;

CREATE OR REPLACE FUNCTION requeue_lagging(p_after uuid, p_scan integer, p_quiet_secs double precision, OUT next_after uuid, OUT requeued integer)
 RETURNS record
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
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
