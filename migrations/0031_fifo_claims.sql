-- Claims take the oldest waiting tasks first (ADR 17).
--
-- The claim index was (kind, kind_version, shard_id): a claim over a shard
-- range walked the range shard by shard, and since a resource's shard is a
-- hash of its id, the tasks of one claim lay scattered over the whole
-- queue and the whole resources table, one page each. With the task id
-- (time-ordered) after the kind, a claim walks the queue in creation order:
-- the tasks it takes, and the resources they name, share pages, and so do
-- the results the drain applies later. It is also fair: a shard no longer
-- waits behind the shards numbered before it. The shard range stays an
-- index condition on the last column, so a member that owns part of the
-- ring skips the other members' tasks inside the index.
--
-- The primary key loses shard_id, a leftover of the partitioned queue (a
-- partition key must be part of it). With shard_id in it, the generic plan
-- of the claim's pick preferred walking the primary key with the shard
-- range as its condition, from the oldest, already claimed tasks on.
-- Every lookup by (id, shard_id) stays a lookup by id.
ALTER TABLE work_queue DROP CONSTRAINT work_queue_pkey;
ALTER TABLE work_queue ADD CONSTRAINT work_queue_pkey PRIMARY KEY (id);
DROP INDEX work_queue_claim_idx;
CREATE INDEX work_queue_claim_idx ON work_queue (kind, kind_version, id, shard_id) WHERE broker_id IS NULL;

-- The fence (fence_results) knows the task id, so it reaches its task by
-- primary key, whose keys are time-ordered and close together. With the
-- key down to (id), the planner found the lease index (random tokens) as
-- good for the fence's join and took it instead. The fence now compares
-- the lease in a form no index serves, `(lease_token = lease) IS TRUE`
-- (the same test in a WHERE clause), so the key is its only way in. The
-- body is otherwise that of 0028.
CREATE OR REPLACE FUNCTION fence_results(p_results jsonb)
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
          AND (w.lease_token = i.lease) IS TRUE AND w.claim_epoch = i.epoch AND w.generation = i.generation
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
$function$;
