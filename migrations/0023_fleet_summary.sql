-- The fleet summary's snapshot (engine::fleet_summary; AdminService.GetFleetSummary):
-- one row, retaken only while someone uses it (a summary call in the last ten
-- minutes, or a process exporting metrics) and only when the resources table has
-- changed since it was taken. Unused, it costs one statistics read per interval.
CREATE TABLE fleet_summary (
    singleton    boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    taken_at     timestamptz NOT NULL,
    -- resources' cumulative write counter (inserts + updates + deletes in
    -- pg_stat_user_tables) when it was taken; NULL when statistics are off.
    write_count  bigint,
    -- When GetFleetSummary last asked for it (moved at most once a minute).
    requested_at timestamptz NOT NULL DEFAULT now(),
    -- The summary (domain::admin::FleetSummary as JSON).
    body         jsonb       NOT NULL
);
