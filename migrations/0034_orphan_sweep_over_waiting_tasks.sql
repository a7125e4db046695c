-- The orphaned-task backstop walks the waiting tasks only, along the claim
-- index, instead of the whole queue along its primary key.
--
-- Migration 32 walked the primary key from a cursor. The pipeline deletes
-- finished tasks oldest first, so between two reaper passes the stretch
-- just ahead of the cursor filled with deleted tasks, and the next slice
-- read each of them from the heap before reaching a live one: 80-120 ms per
-- pass under a 100k load whatever the slice size (2,000 or 10,000), 3% of
-- the database's time. The backstop only ever dropped waiting tasks
-- (broker_id IS NULL), which are exactly the entries of the claim index
-- (kind, kind_version, id, shard_id). Claims already mark the entries of
-- the tasks they took as dead in that index, so the walk skips them
-- without a heap read. In psql, a 2,000-task slice behind 50,000 finished
-- tasks took 10 ms this way against 38-65 ms along the primary key. (Each
-- task of a slice still costs a heap read and a probe of resources; the
-- reaper now takes 2,000 per pass.)
--
-- The cursor becomes (kind, kind_version, id), the index's order. The
-- delete still re-checks that each task is unclaimed.
DROP FUNCTION drop_orphaned_work(uuid, integer);
CREATE FUNCTION drop_orphaned_work(p_kind text, p_kind_version smallint, p_after uuid, p_scan integer,
                                   OUT next_kind text, OUT next_kind_version smallint, OUT next_after uuid,
                                   OUT dropped integer)
    LANGUAGE plpgsql
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    AS $$
DECLARE
    v_seen integer;
    v_ids uuid[];
BEGIN
    WITH slice AS (
        SELECT w.id, w.kind, w.kind_version, w.resource_id, w.task_type
        FROM work_queue w
        WHERE w.broker_id IS NULL
          AND (w.kind, w.kind_version, w.id) > (COALESCE(p_kind, ''), COALESCE(p_kind_version, 0::smallint),
                                                COALESCE(p_after, '00000000-0000-0000-0000-000000000000'::uuid))
        ORDER BY w.kind, w.kind_version, w.id
        LIMIT p_scan
    )
    SELECT count(*),
           (array_agg(s.kind ORDER BY s.kind DESC, s.kind_version DESC, s.id DESC))[1],
           (array_agg(s.kind_version ORDER BY s.kind DESC, s.kind_version DESC, s.id DESC))[1],
           (array_agg(s.id ORDER BY s.kind DESC, s.kind_version DESC, s.id DESC))[1],
           array_agg(s.id) FILTER (
               WHERE r.id IS NULL
                  OR (s.task_type = 'reconcile'
                      AND (r.deletion_requested_at IS NOT NULL OR r.frozen_until IS NOT NULL)))
    INTO v_seen, next_kind, next_kind_version, next_after, v_ids
    FROM slice s LEFT JOIN resources r ON r.id = s.resource_id;
    IF v_seen < p_scan THEN
        next_kind := NULL;
        next_kind_version := NULL;
        next_after := NULL;
    END IF;
    dropped := 0;
    IF v_ids IS NOT NULL THEN
        DELETE FROM work_queue w WHERE w.id = ANY (v_ids) AND w.broker_id IS NULL;
        GET DIAGNOSTICS dropped = ROW_COUNT;
    END IF;
END
$$;
