-- The reaper's backstops: stale leases and overdue deadlines.

-- Reaper backstop 1: releases leases whose broker stopped heartbeating. A
-- lease whose result already waits in the outbox is not stale.
CREATE OR REPLACE FUNCTION reap_stale_work(p_stale_secs double precision, p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
DECLARE
    freed integer;
BEGIN
    WITH stale AS (
        SELECT id, shard_id FROM work_queue
        WHERE broker_id IS NOT NULL AND NOT outcome_pending
          AND heartbeat_at < now() - make_interval(secs => p_stale_secs)
        ORDER BY shard_id, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    released AS (
        UPDATE work_queue w
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
            claim_epoch = w.claim_epoch + 1
        FROM stale s WHERE w.id = s.id AND w.shard_id = s.shard_id
        RETURNING 1
    )
    SELECT count(*) INTO freed FROM released;
    IF freed > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN freed;
END
$function$;

-- Reaper backstop 2: tasks past their deadline count as a transient failure;
-- a late result is fenced out by the new epoch.
CREATE OR REPLACE FUNCTION expire_overdue_work(p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
DECLARE
    overdue record;
    expired integer := 0;
BEGIN
    FOR overdue IN
        SELECT id, shard_id, generation FROM work_queue
        WHERE broker_id IS NOT NULL AND deadline_at < now() AND NOT outcome_pending
        ORDER BY shard_id, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM record_work_failure(overdue.id, overdue.shard_id, overdue.generation,
                                    'the task exceeded its deadline', 'DeadlineExceeded', false);
        expired := expired + 1;
    END LOOP;
    RETURN expired;
END
$function$;
