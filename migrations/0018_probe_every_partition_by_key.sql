-- The 1M converge-load run stalled for minutes once the applies ended:
-- drains took 1-10 s each. Autovacuum had recorded several work_queue
-- partitions as empty (reltuples 0) while they held tens of thousands of
-- tasks, and in the drain's nested loops the planner then chose, for every
-- row at hand, a sequential scan of such a partition, or a bitmap scan
-- bounded only by the shard range. Queue partitions that outgrew their
-- statistics are now re-analysed within seconds (engine::statistics). The
-- append and the claim only ever reach task rows by key, so for them those
-- scans are also penalised here. The drain is left without such settings:
-- its transition-table joins and its outbox pick need hash joins and sorts
-- (measured: ten times slower with them off).
ALTER FUNCTION append_outbox(jsonb)
    SET enable_seqscan = off
    SET enable_bitmapscan = off;
ALTER FUNCTION claim_range(text, text, smallint, integer, smallint, smallint)
    SET enable_seqscan = off
    SET enable_bitmapscan = off;
ALTER FUNCTION schedule_eligible(uuid[])
    SET enable_bitmapscan = off;
