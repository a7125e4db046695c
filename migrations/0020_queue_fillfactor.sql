-- A task row is updated twice before it is deleted: by the claim (which
-- changes indexed columns, so it writes new index entries anyway) and by
-- append_outbox, which only sets outcome_pending. That second update can be
-- a heap-only (HOT) update, with no index entries at all, but only when the
-- row's page has room for the new version; inserts used to fill the pages,
-- and one in ten such updates was HOT (pg_stat_user_tables after a 10k run).
-- Half of each page now stays free for the versions of its own rows.
DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format('ALTER TABLE work_queue_p%s SET (fillfactor = 50)', i);
    END LOOP;
END
$$;
