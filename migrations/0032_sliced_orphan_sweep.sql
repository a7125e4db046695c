-- The reaper's orphaned-task backstop walks the queue in key order, one
-- slice per pass, as the lost-task backstop walks resources (0027).
--
-- It joined every unclaimed task with its resource on every pass: a hash
-- join over the whole queue, 0.7-1.0 s per pass with 800,000 tasks queued
-- during a 1M load, growing with the queue. It is a backstop: the write
-- paths that delete or freeze a resource remove its unclaimed tasks
-- themselves (0007), so a slice per pass is enough to catch the races.
-- The delete re-checks that the task is still unclaimed: a claim may take
-- it between the slice's read and the delete.
DROP FUNCTION drop_orphaned_work(integer);
CREATE FUNCTION drop_orphaned_work(p_after uuid, p_scan integer, OUT next_after uuid, OUT dropped integer)
    LANGUAGE plpgsql
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    AS $$
DECLARE
    v_seen integer;
    v_ids uuid[];
BEGIN
    WITH slice AS (
        SELECT w.id, w.resource_id, w.task_type, w.broker_id
        FROM work_queue w
        WHERE w.id > COALESCE(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
        ORDER BY w.id
        LIMIT p_scan
    )
    SELECT (array_agg(s.id ORDER BY s.id DESC))[1], count(*),
           array_agg(s.id) FILTER (
               WHERE s.broker_id IS NULL
                 AND (r.id IS NULL
                      OR (s.task_type = 'reconcile'
                          AND (r.deletion_requested_at IS NOT NULL OR r.frozen_until IS NOT NULL))))
    INTO next_after, v_seen, v_ids
    FROM slice s LEFT JOIN resources r ON r.id = s.resource_id;
    IF v_seen < p_scan THEN
        next_after := NULL;
    END IF;
    dropped := 0;
    IF v_ids IS NOT NULL THEN
        DELETE FROM work_queue w WHERE w.id = ANY (v_ids) AND w.broker_id IS NULL;
        GET DIAGNOSTICS dropped = ROW_COUNT;
    END IF;
END
$$;
