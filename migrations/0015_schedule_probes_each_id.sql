-- schedule_eligible, once more (0012, 0013): while the statistics still
-- describe a nearly empty table (the first seconds of a bulk load), the
-- planner drove the join from resources -- through resources_lagging_idx or
-- a full primary-key scan -- and compared every row with the given ids
-- (90 ms to almost a second per 500 ids in converge-load). Each id is now
-- looked up by itself (a LATERAL probe the planner cannot reorder), with
-- sequential scans off so that a table believed tiny is still probed
-- through its index.

CREATE OR REPLACE FUNCTION schedule_eligible(p_ids uuid[]) RETURNS integer
    LANGUAGE plpgsql
    SET enable_hashjoin = off
    SET enable_mergejoin = off
    SET enable_seqscan = off
    AS $$
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
        INSERT INTO work_queue AS w (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id)
        SELECT id, 'reconcile', kind, kind_version, generation, manifest_version, shard_id FROM candidates
        ON CONFLICT (resource_id, task_type, shard_id) DO UPDATE
            SET generation = EXCLUDED.generation,
                kind = EXCLUDED.kind,
                kind_version = EXCLUDED.kind_version,
                manifest_version = EXCLUDED.manifest_version,
                claim_epoch = w.claim_epoch + 1,
                broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
                outcome_pending = false, not_before = now(), attempts = 0
            WHERE w.generation < EXCLUDED.generation OR w.kind_version <> EXCLUDED.kind_version
        RETURNING 1
    )
    SELECT count(*) INTO queued FROM written;
    IF queued > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN queued;
END
$$;
