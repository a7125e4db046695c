-- Plans that stay index-bound however large the backlog grows. The 100k
-- converge-load profile (issue 8) found three statements whose plans scanned
-- the backlog instead of probing the rows at hand:
-- * schedule_eligible picked its candidates through resources_lagging_idx
--   (every lagging resource) and filtered them by id: 64-250 ms per 500 ids
--   under load, up to a second early in a load, instead of ~10 ms;
-- * append_outbox and the claim joined their handful of rows to work_queue
--   with a hash join over a sequential scan of every partition: the planner
--   costs a parameterized probe of a partitioned table as a probe of each of
--   its 16 partitions, although run-time pruning visits one.

-- The candidates are looked up id by id: a LATERAL primary-key probe the
-- planner cannot reorder (with statistics that still describe a nearly
-- empty table, early in a bulk load, it otherwise drove the join from
-- resources and compared every row with the ids), without hash or merge
-- joins and with sequential scans off, so a table believed tiny is still
-- probed through its index. Duplicate ids are folded so the upsert sees
-- each id once.
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

-- Results now name their task row (workId, shardId): the fence is checked
-- on that one row of one partition. The lease token, epoch, generation and
-- manifest version still decide whether the result counts.
CREATE OR REPLACE FUNCTION append_outbox(p_results jsonb) RETURNS SETOF uuid
    LANGUAGE plpgsql
    SET enable_hashjoin = off
    SET enable_mergejoin = off
    AS $$
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
          AND w.lease_token = i.lease AND w.claim_epoch = i.epoch AND w.generation = i.generation
          AND NOT w.outcome_pending
          AND (w.manifest_version = 0 OR i.manifest_version = 0 OR w.manifest_version = i.manifest_version)
        RETURNING w.id, w.shard_id, w.resource_id, w.task_type, i.*
    ),
    written AS (
        INSERT INTO work_outbox AS o (work_id, shard_id, resource_id, generation, status, conditions, health_ok,
                                      advance, requeue_after_ms, error_message, error_reason, terminal,
                                      task_type, finalizer)
        SELECT id, shard_id, resource_id, generation, status, conditions, healthy,
               advance, requeue_after_ms, error, reason, terminal, task_type, finalizer
        FROM fenced
        ORDER BY id
        ON CONFLICT (work_id, shard_id) DO UPDATE
            SET resource_id = EXCLUDED.resource_id, generation = EXCLUDED.generation,
                status = EXCLUDED.status, conditions = EXCLUDED.conditions, health_ok = EXCLUDED.health_ok,
                advance = EXCLUDED.advance, requeue_after_ms = EXCLUDED.requeue_after_ms,
                error_message = EXCLUDED.error_message, error_reason = EXCLUDED.error_reason,
                terminal = EXCLUDED.terminal, created_at = EXCLUDED.created_at,
                task_type = EXCLUDED.task_type, finalizer = EXCLUDED.finalizer
            WHERE o.generation <= EXCLUDED.generation
        RETURNING 1
    )
    SELECT f.lease FROM fenced f;
    IF FOUND THEN
        PERFORM notify_throttled('outbox_ready', 'wake_outbox_ready');
    END IF;
END
$$;

-- Fewer writes per resource (the same 100k profile):
-- * A new row takes its change-log position from column defaults instead of
--   a per-row PL/pgSQL trigger; updates keep the trigger (it also moves
--   updated_at).
ALTER TABLE resources
    ALTER COLUMN rv_txid SET DEFAULT current_txid(),
    ALTER COLUMN rv_seq SET DEFAULT nextval('change_seq');
DROP TRIGGER resources_stamp_change ON resources;
CREATE TRIGGER resources_stamp_change
    BEFORE UPDATE ON resources
    FOR EACH ROW EXECUTE FUNCTION stamp_resource_change();
-- * Lookups of a resource's tasks use the unique (resource_id, task_type,
--   shard_id) index; this one only cost a write per task.
DROP INDEX work_queue_resource_idx;
