-- Claims: a broker takes tasks of one kind version within its shard range.

-- True for the one caller that finds the marker missing (and restores it).
CREATE OR REPLACE FUNCTION claim_queue_recovery()
 RETURNS boolean
 LANGUAGE sql
AS $function$
    WITH restored AS (
        INSERT INTO work_queue_intact DEFAULT VALUES ON CONFLICT DO NOTHING RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM restored);
$function$;

-- The functions returning task rows return SETOF claimed_task (0010), the
-- one declaration of the row's columns on this side.

-- A claim's pick names the order it wants: the oldest tasks first (ADR 17,
-- addendum).
--
-- The claim index (kind, kind_version, id, shard_id) yields the oldest
-- tasks first, but only a pick that names the order makes the planner use
-- it: without ORDER BY, the cached generic plan took the non-partial unique
-- index with only the shard range as its condition and walked past every
-- claimed, still leased task (a 128-task claim grew from 3 to 16 ms as they
-- accumulated, against a flat 2-3 ms with the order named). With ORDER BY id
-- after the two equality conditions only the claim index returns the rows
-- in order, and its entries of claimed tasks are killed once and skipped.
CREATE OR REPLACE FUNCTION claim_range(p_broker text, p_kind text, p_kind_version smallint, p_budget integer, p_lo smallint, p_hi smallint)
 RETURNS SETOF claimed_task
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
    WITH claimed AS (
        UPDATE work_queue w
        SET broker_id = p_broker, lease_token = gen_random_uuid(), claim_epoch = w.claim_epoch + 1,
            heartbeat_at = now(), attempts = w.attempts + 1,
            deadline_at = (SELECT CASE WHEN c.task_deadline_secs > 0
                                       THEN now() + make_interval(secs => c.task_deadline_secs) END
                           FROM kind_config c WHERE c.kind = p_kind AND c.kind_version = p_kind_version)
        WHERE w.ctid = ANY (ARRAY(
            SELECT p.ctid FROM work_queue p
            WHERE p.broker_id IS NULL AND p.kind = p_kind AND p.kind_version = p_kind_version
              AND p.not_before <= now() AND p.shard_id BETWEEN p_lo AND p_hi
            ORDER BY p.id
            LIMIT p_budget
            FOR UPDATE SKIP LOCKED))
        RETURNING w.*
    )
    -- The attributes of claimed_task, in order (as in leased_tasks below).
    SELECT cl.id, cl.shard_id, cl.task_type, cl.lease_token, cl.claim_epoch, cl.generation, cl.manifest_version,
           cl.attempts, extract(epoch FROM cl.deadline_at - now())::float8, r.id, r.kind, r.kind_version::int4,
           r.name, r.labels, r.spec, r.status, r.synced_gen, r.health_ok, r.finalizers, r.composed_gen,
           r.deletion_requested_at, cl.cause, r.provider_config, pc.spec, pc.data, cl.trace_context, cl.created_at
    FROM claimed cl JOIN resources r ON r.id = cl.resource_id
    -- The override, if the resource has one (a probe of an empty key otherwise).
    LEFT JOIN provider_configs pc ON pc.name = r.provider_config;
END
$function$;

-- The free slots of a kind version capped at p_cap: the cap less its leased
-- tasks and running operations (they share it). Takes the kind's claim lock
-- until the transaction ends, so two brokers cannot both take the last free
-- slot: claims of a capped kind queue up here.
CREATE OR REPLACE FUNCTION claim_slots(p_kind text, p_kind_version smallint, p_cap integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(kind_lock_key(p_kind, p_kind_version) # 1);
    RETURN greatest(p_cap
        - (SELECT count(*)::integer FROM work_queue w
           WHERE w.kind = p_kind AND w.kind_version = p_kind_version AND w.broker_id IS NOT NULL)
        - (SELECT count(*)::integer FROM operations o
           WHERE o.kind = p_kind AND o.kind_version = p_kind_version AND o.state = 'running'), 0);
END
$function$;

-- Claims up to p_limit tasks for p_broker, never exceeding the kind's
-- cluster-wide max_inflight: the own range p_lo..p_hi first, then the
-- shards below and above it, so a kind whose workers all reached other
-- members is never starved.
CREATE OR REPLACE FUNCTION claim_work(p_broker text, p_kind text, p_kind_version smallint, p_limit integer, p_lo smallint, p_hi smallint)
 RETURNS SETOF claimed_task
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    v_cap integer;
    v_budget integer := p_limit;
    v_claimed integer := 0;
    v_step integer;
    v_range smallint[];
BEGIN
    SELECT c.max_inflight INTO v_cap FROM kind_config c
    WHERE c.kind = p_kind AND c.kind_version = p_kind_version;
    IF v_cap > 0 THEN
        v_budget := least(v_budget, claim_slots(p_kind, p_kind_version, v_cap));
    END IF;
    FOREACH v_range SLICE 1 IN ARRAY ARRAY[[p_lo, p_hi], [0, p_lo - 1], [p_hi + 1, 255]]::smallint[] LOOP
        EXIT WHEN v_claimed >= v_budget;
        CONTINUE WHEN v_range[1] > v_range[2];
        RETURN QUERY SELECT * FROM claim_range(p_broker, p_kind, p_kind_version, v_budget - v_claimed,
                                               v_range[1], v_range[2]);
        GET DIAGNOSTICS v_step = ROW_COUNT;
        v_claimed := v_claimed + v_step;
    END LOOP;
END
$function$;

-- The leased tasks behind p_leases whose results are not in yet (for leases
-- adopted after a reconnect).
CREATE OR REPLACE FUNCTION leased_tasks(p_leases uuid[])
 RETURNS SETOF claimed_task
 LANGUAGE sql
 STABLE
AS $function$
    -- The attributes of claimed_task, in order (as in claim_range above).
    SELECT cl.id, cl.shard_id, cl.task_type, cl.lease_token, cl.claim_epoch, cl.generation, cl.manifest_version,
           cl.attempts, extract(epoch FROM cl.deadline_at - now())::float8, r.id, r.kind, r.kind_version::int4,
           r.name, r.labels, r.spec, r.status, r.synced_gen, r.health_ok, r.finalizers, r.composed_gen,
           r.deletion_requested_at, cl.cause, r.provider_config, pc.spec, pc.data, cl.trace_context, cl.created_at
    FROM work_queue cl JOIN resources r ON r.id = cl.resource_id
    LEFT JOIN provider_configs pc ON pc.name = r.provider_config
    WHERE cl.lease_token = ANY (p_leases) AND NOT cl.outcome_pending;
$function$;
