-- Planner statistics for tables that grow from nothing (engine::statistics).

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
CREATE OR REPLACE FUNCTION analyze_if_grown(p_table regclass, p_min_rows bigint)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
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
$function$;
