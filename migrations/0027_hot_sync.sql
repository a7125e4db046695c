-- A sync is a HOT update (ADR 14). The drain's UPDATE of resources wrote a
-- new entry into every index of the table for every result, because two
-- indexes named columns a sync changes: resources_phase_created_idx keyed
-- on phase (Reconciling -> Ready), and resources_lagging_idx's predicate
-- read synced_gen. With neither, a sync changes no indexed column and
-- PostgreSQL keeps the new row version on its page without touching any
-- index (fillfactor 90 leaves the room). Spec updates, which bump
-- generation, become HOT for the same reason.

DROP INDEX resources_phase_created_idx;
DROP INDEX resources_lagging_idx;

-- Lists of the rare phases stay index-bound through predicates on columns a
-- successful sync leaves alone (failure_gen stays 0, health_ok stays true):
-- Failed resources have failure_gen > 0, Degraded ones NOT health_ok.
-- Deleting, Quarantined and Orphaned already have partial indexes
-- (resources_deleting_idx, resources_frozen_sweep_idx). Ready and
-- Reconciling are the common phases; their lists walk the creation order.
CREATE INDEX resources_failed_idx ON resources (created_at DESC, id DESC) WHERE failure_gen > 0;
CREATE INDEX resources_unhealthy_idx ON resources (created_at DESC, id DESC) WHERE NOT health_ok;

-- The lost-task backstop walks resources in key order, a slice per reaper
-- pass, instead of reading the dropped lagging index. It returns the last
-- key it looked at (NULL once it reached the end, so the next call starts
-- over) and how many resources it queued.
DROP FUNCTION requeue_lagging(integer, double precision);
CREATE FUNCTION requeue_lagging(p_after uuid, p_scan integer, p_quiet_secs double precision,
                                OUT next_after uuid, OUT requeued integer)
    LANGUAGE plpgsql
    SET enable_seqscan = off
    SET enable_bitmapscan = off
    AS $$
DECLARE
    v_seen integer;
    v_ids uuid[];
BEGIN
    WITH slice AS (
        SELECT r.id, r.shard_id,
               r.synced_gen < r.generation
                   AND r.updated_at < now() - make_interval(secs => p_quiet_secs)
                   AND r.deletion_requested_at IS NULL
                   AND r.frozen_until IS NULL
                   AND r.failure_gen <> r.generation AS lagging
        FROM resources r
        WHERE r.id > COALESCE(p_after, '00000000-0000-0000-0000-000000000000'::uuid)
        ORDER BY r.id
        LIMIT p_scan
    )
    SELECT (array_agg(s.id ORDER BY s.id DESC))[1], count(*),
           array_agg(s.id) FILTER (
               WHERE s.lagging AND NOT EXISTS (
                   SELECT 1 FROM work_queue w
                   WHERE w.resource_id = s.id AND w.task_type = 'reconcile' AND w.shard_id = s.shard_id))
    INTO next_after, v_seen, v_ids
    FROM slice s;
    IF v_seen < p_scan THEN
        next_after := NULL;
    END IF;
    requeued := CASE WHEN v_ids IS NULL THEN 0 ELSE schedule_eligible(v_ids) END;
END
$$;

-- Crash recovery empties unlogged tables, the queue among them. This
-- unlogged marker goes with it, so a reaper that finds it missing knows
-- tasks may be lost and walks the whole table at once instead of a slice
-- per pass. Whoever puts it back does that walk.
CREATE UNLOGGED TABLE work_queue_intact (
    marker boolean PRIMARY KEY DEFAULT true CHECK (marker)
);
INSERT INTO work_queue_intact DEFAULT VALUES;

-- True for the one caller that finds the marker missing (and restores it).
CREATE FUNCTION claim_queue_recovery() RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH restored AS (
        INSERT INTO work_queue_intact DEFAULT VALUES ON CONFLICT DO NOTHING RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM restored);
$$;
