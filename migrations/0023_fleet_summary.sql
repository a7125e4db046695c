-- The fleet summary's snapshot (engine::fleet_summary; AdminService.GetFleetSummary):
-- one row, rewritten only when the resources table has changed since it was
-- taken, so a fleet that is quiet costs one statistics read per interval.
CREATE TABLE fleet_summary (
    singleton    boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    taken_at     timestamptz NOT NULL,
    -- resources' cumulative write counter (inserts + updates + deletes in
    -- pg_stat_user_tables) when it was taken; NULL when statistics are off.
    write_count  bigint,
    -- The summary (store::summary::Summary as JSON).
    body         jsonb       NOT NULL
);
