-- Reaper backstop 3, re-stated: only resources that have lagged without a
-- task for a few seconds. Every write path schedules at once, so a fresh
-- lagging resource has (or is about to have) its task; under load the old
-- form re-checked thousands of those every pass (62 ms/pass at 100k in
-- converge-load's profile). After a crash emptied the queue, recovery starts
-- p_quiet_secs later.
DROP FUNCTION requeue_lagging(integer);
CREATE FUNCTION requeue_lagging(p_limit integer, p_quiet_secs double precision) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    ids uuid[];
BEGIN
    SELECT array_agg(r.id) INTO ids FROM (
        SELECT r.id FROM resources r
        WHERE r.synced_gen < r.generation
          AND r.updated_at < now() - make_interval(secs => p_quiet_secs)
          AND r.deletion_requested_at IS NULL
          AND r.frozen_until IS NULL
          AND r.failure_gen <> r.generation
          AND NOT EXISTS (SELECT 1 FROM work_queue w
                          WHERE w.resource_id = r.id AND w.task_type = 'reconcile' AND w.shard_id = r.shard_id)
        LIMIT p_limit) r;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    RETURN schedule_eligible(ids);
END
$$;
