-- Fresh statistics for tables that grow from nothing.
--
-- Plans of prepared statements are cached per connection; a plan made while
-- a table held a handful of rows (sequential scans) stays until the table is
-- analyzed again. autovacuum's analyze comes after its naptime (a minute by
-- default), and a control plane can take 100k resources in that minute, each
-- lookup then scanning the whole table. The reaper calls this every pass: it
-- analyzes a table whose live row count has more than doubled since its
-- statistics were taken (which also invalidates the cached plans), and costs
-- one catalog read otherwise.
CREATE FUNCTION analyze_if_grown(p_table regclass, p_min_rows bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_estimate double precision;
    v_live bigint;
BEGIN
    SELECT c.reltuples, s.n_live_tup INTO v_estimate, v_live
    FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE c.oid = p_table;
    IF v_live IS NULL OR v_live < p_min_rows OR v_live <= 2 * greatest(v_estimate, 0) THEN
        RETURN false;
    END IF;
    -- One pod at a time; the others skip rather than queue behind it.
    IF NOT pg_try_advisory_xact_lock(hashtextextended('analyze:' || p_table::text, 0)) THEN
        RETURN false;
    END IF;
    EXECUTE format('ANALYZE %s', p_table);
    RETURN true;
END
$$;

-- The gate with its predicates written inline: called through SQL functions
-- they ran as separate nested queries for every candidate (about a third of
-- a single-resource schedule). Same semantics as in 0006.
CREATE OR REPLACE FUNCTION schedule_eligible(p_ids uuid[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    queued integer;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH candidates AS (
        SELECT r.id, r.kind, r.kind_version, r.generation, r.shard_id, c.manifest_version
        FROM resources r
        JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
        WHERE r.id = ANY (p_ids)
          AND r.generation > r.synced_gen
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
