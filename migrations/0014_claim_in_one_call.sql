-- The claim in one call (was a transaction of four to six statements sent
-- from the broker): the kind's cap, the member's own shard range first,
-- then the ranges on either side of it. The joins back to the partitioned
-- queue stay nested loops (see 0012), scoped to these functions.

-- Claims up to p_budget runnable tasks of (p_kind, p_kind_version) in the
-- shards p_lo..p_hi for p_broker; returns them with what a worker needs of
-- their resources.
CREATE FUNCTION claim_range(
    p_broker text, p_kind text, p_kind_version smallint, p_budget integer, p_lo smallint, p_hi smallint
) RETURNS TABLE (
    work_id uuid, shard_id smallint, task_type text, lease_token uuid, claim_epoch bigint, generation bigint,
    manifest_version bigint, attempts integer, deadline_secs double precision, resource_id uuid, kind text,
    kind_version integer, name text, labels jsonb, spec jsonb, status jsonb, synced_gen bigint,
    health_ok boolean, finalizers text[], composed_gen bigint, deletion_requested_at timestamptz
)
    LANGUAGE plpgsql
    SET enable_hashjoin = off
    SET enable_mergejoin = off
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT w.id, w.shard_id FROM work_queue w
        WHERE w.broker_id IS NULL AND w.kind = p_kind AND w.kind_version = p_kind_version
          AND w.not_before <= now() AND w.shard_id BETWEEN p_lo AND p_hi
        LIMIT p_budget
        FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE work_queue w
        SET broker_id = p_broker, lease_token = gen_random_uuid(), claim_epoch = w.claim_epoch + 1,
            heartbeat_at = now(), attempts = w.attempts + 1,
            deadline_at = CASE WHEN c.task_deadline_secs > 0
                               THEN now() + make_interval(secs => c.task_deadline_secs) END
        FROM picked p, kind_config c
        WHERE w.id = p.id AND w.shard_id = p.shard_id AND c.kind = w.kind AND c.kind_version = w.kind_version
        RETURNING w.*
    )
    SELECT cl.id, cl.shard_id, cl.task_type, cl.lease_token, cl.claim_epoch, cl.generation, cl.manifest_version,
           cl.attempts, extract(epoch FROM cl.deadline_at - now())::float8, r.id, r.kind, r.kind_version::int4,
           r.name, r.labels, r.spec, r.status, r.synced_gen, r.health_ok, r.finalizers, r.composed_gen,
           r.deletion_requested_at
    FROM claimed cl JOIN resources r ON r.id = cl.resource_id;
END
$$;

-- Claims up to p_limit tasks for p_broker, never exceeding the kind's
-- cluster-wide max_inflight: the own range p_lo..p_hi first, then the
-- shards below and above it, so a kind whose workers all reached other
-- members is never starved.
CREATE FUNCTION claim_work(
    p_broker text, p_kind text, p_kind_version smallint, p_limit integer, p_lo smallint, p_hi smallint
) RETURNS TABLE (
    work_id uuid, shard_id smallint, task_type text, lease_token uuid, claim_epoch bigint, generation bigint,
    manifest_version bigint, attempts integer, deadline_secs double precision, resource_id uuid, kind text,
    kind_version integer, name text, labels jsonb, spec jsonb, status jsonb, synced_gen bigint,
    health_ok boolean, finalizers text[], composed_gen bigint, deletion_requested_at timestamptz
)
    LANGUAGE plpgsql
    AS $$
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
        -- Claims of a capped kind queue up here, so two brokers cannot
        -- both take the last free slot.
        PERFORM pg_advisory_xact_lock(kind_lock_key(p_kind, p_kind_version) # 1);
        v_budget := least(v_budget, greatest(v_cap - (
            SELECT count(*)::integer FROM work_queue w
            WHERE w.kind = p_kind AND w.kind_version = p_kind_version AND w.broker_id IS NOT NULL), 0));
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
$$;
