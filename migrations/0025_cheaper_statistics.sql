-- Cheaper ANALYZE of the tables a bulk load grows. engine::statistics
-- analyses each of them several times while it grows (the plans need
-- their row counts), and in a 100k load those ANALYZEs took 3.6-4.0 s of
-- backend time out of about 50 s of CPU.
--
-- Payload columns that no plan filters by get no statistics at all. Most
-- of ANALYZE resources went to comparing jsonb to build histograms nobody
-- reads: on 100k resources it took 455 ms with spec and status analysed
-- and 297 ms without. Labels keep theirs: selectors filter on them, and
-- their selectivity picks the list plan.
ALTER TABLE resources
    ALTER COLUMN spec SET STATISTICS 0,
    ALTER COLUMN status SET STATISTICS 0;

-- The engine's own tables are read by key or by range, with plans that do
-- not depend on value distributions (the queue's functions even rule out
-- other scans, see 0018). A statistics target of 10 samples 3,000 rows
-- instead of 30,000 and still gives the row count: ANALYZE work_queue with
-- 90k tasks took 175-188 ms at the default and 20-34 ms at 10, and
-- resource_changes with 200k entries 77-87 ms and 15-18 ms.
DO $$
DECLARE
    col record;
BEGIN
    FOR col IN
        SELECT a.attrelid::regclass AS tbl, a.attname
        FROM pg_attribute a
        WHERE a.attrelid IN ('work_queue'::regclass, 'resource_changes'::regclass, 'resource_events'::regclass)
          AND a.attnum > 0 AND NOT a.attisdropped
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET STATISTICS 10', col.tbl, col.attname);
    END LOOP;
END
$$;

ALTER TABLE resource_events
    ALTER COLUMN message SET STATISTICS 0,
    ALTER COLUMN detail SET STATISTICS 0;
