-- ANALYZE resources skips the columns no plan estimates from.
--
-- The statistics duty (engine::statistics) analyses resources each time the
-- table doubles, so a bulk load pays for it a dozen times. At 100k rows one
-- ANALYZE took 235-247 ms; with the other tables' it was 4% of the
-- database's time in a 100k run. The change-log position, the times other
-- than creation, finalizers, provider config and two counters never appear
-- in a filter or a join. Without their statistics the same ANALYZE takes
-- 122-156 ms. Columns that filters, joins and keyset pages read (kind, name,
-- phase, labels, owner, root, creation time, id and the lifecycle scalars)
-- keep theirs: the apply's lookup joins on (kind, name), and without a
-- distinct count for name the planner would expect many rows per key.
ALTER TABLE resources
    ALTER COLUMN updated_at SET STATISTICS 0,
    ALTER COLUMN last_reconciled_at SET STATISTICS 0,
    ALTER COLUMN rv_txid SET STATISTICS 0,
    ALTER COLUMN rv_seq SET STATISTICS 0,
    ALTER COLUMN finalizers SET STATISTICS 0,
    ALTER COLUMN provider_config SET STATISTICS 0,
    ALTER COLUMN composed_gen SET STATISTICS 0,
    ALTER COLUMN failure_attempts SET STATISTICS 0;
