-- The two backstops that look at leased tasks (stale leases, overdue
-- deadlines) read them through the leased index only.
--
-- Their plans followed the statistics of the moment. Under load the queue's
-- statistics, taken while most tasks waited or most were leased, put the
-- leased tasks at 5,000-8,000 rows, so the planner chose a sequential scan
-- of the whole queue or a bitmap scan of the leased index: 20-40 ms per
-- call in a 100k run (auto_explain), twice per reaper pass. A bitmap scan
-- also never marks the index entries of deleted tasks as dead, so every
-- pass read all of them from the heap again. A plain scan of the leased
-- index reads the leased tasks and marks the entries of deleted ones, so
-- the next pass skips them.
ALTER FUNCTION reap_stale_work(double precision, integer)
    SET enable_seqscan = off
    SET enable_bitmapscan = off;
ALTER FUNCTION expire_overdue_work(integer)
    SET enable_seqscan = off
    SET enable_bitmapscan = off;
