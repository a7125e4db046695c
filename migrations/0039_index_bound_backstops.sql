-- The reaper's backstops read what they look for through their indexes,
-- whatever the statistics of the moment say. Under a bulk load the
-- statistics trail the tables (engine::statistics refreshes them as the
-- tables double), and the plans they gave the backstops read whole tables
-- on every pass (auto_explain of a 100k noop run):
--
-- * The stale-lease and deadline scans. The queue's statistics put the
--   leased tasks at 5,000-8,000 rows, so both ran as a sequential scan of
--   the queue or a bitmap scan of the leased index: 20-40 ms each per pass.
--   A bitmap scan also never marks the index entries of deleted tasks as
--   dead, so every pass read all of them from the heap again. A plain scan
--   of the leased index marks them, and the next pass skips them.
-- * The orphan sweep's first check ("is anything frozen past its grace?")
--   ran as a sequential scan of resources: 19 ms per pass at 100k, ten
--   times that at 1M. The partial index on frozen_until answers it at once.
-- * The lost-task walk's slice (10,000 resources from a cursor, in id
--   order) ran as a parallel scan of a whole creation-order index, sorted
--   by id: 43 ms per pass at 100k, once 142 ms. Its rows come in id order
--   from the primary key without a sort, and a backstop has no business
--   starting parallel workers.
ALTER FUNCTION reap_stale_work(double precision, integer)
    SET enable_seqscan = off
    SET enable_bitmapscan = off;
ALTER FUNCTION expire_overdue_work(integer)
    SET enable_seqscan = off
    SET enable_bitmapscan = off;
ALTER FUNCTION sweep_expired_orphans(integer, smallint, smallint)
    SET enable_seqscan = off;
ALTER FUNCTION requeue_lagging(uuid, integer, double precision)
    SET enable_sort = off
    SET max_parallel_workers_per_gather = 0;
