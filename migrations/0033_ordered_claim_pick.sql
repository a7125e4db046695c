-- A claim's pick names the order it wants: the oldest tasks first (ADR 17,
-- addendum).
--
-- Migration 31 made the claim index (kind, kind_version, id, shard_id) so
-- that walking it yields the oldest tasks first, but the pick had no ORDER
-- BY, so any index that could serve its conditions was as good to the
-- planner. Its cached generic plan took the unique index (resource_id,
-- task_type, shard_id) with only the shard range as an index condition:
-- that index is not partial, so every pick walked past all the tasks
-- already claimed and still leased, reading each one from the heap to
-- filter it out. In a 100k pipeline run every one of the 591 slow claims
-- logged by auto_explain had that plan; in pgbench, a 128-task claim grew
-- from 3 to 16 ms as claimed tasks accumulated, against a flat 2-3 ms with
-- the order named. With ORDER BY id after the two equality conditions,
-- only the claim index returns the rows in order, and its entries of
-- claimed tasks are killed once and then skipped. The body is otherwise
-- that of 0029.
CREATE OR REPLACE FUNCTION claim_range(p_broker text, p_kind text, p_kind_version smallint, p_budget integer, p_lo smallint, p_hi smallint)
 RETURNS TABLE(work_id uuid, shard_id smallint, task_type text, lease_token uuid, claim_epoch bigint, generation bigint, manifest_version bigint, attempts integer, deadline_secs double precision, resource_id uuid, kind text, kind_version integer, name text, labels jsonb, spec jsonb, status jsonb, synced_gen bigint, health_ok boolean, finalizers text[], composed_gen bigint, deletion_requested_at timestamp with time zone)
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
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
    SELECT cl.id, cl.shard_id, cl.task_type, cl.lease_token, cl.claim_epoch, cl.generation, cl.manifest_version,
           cl.attempts, extract(epoch FROM cl.deadline_at - now())::float8, r.id, r.kind, r.kind_version::int4,
           r.name, r.labels, r.spec, r.status, r.synced_gen, r.health_ok, r.finalizers, r.composed_gen,
           r.deletion_requested_at
    FROM claimed cl JOIN resources r ON r.id = cl.resource_id;
END
$function$

;
