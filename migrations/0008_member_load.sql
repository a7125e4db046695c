-- What each member reports with its heartbeat: connected worker streams and
-- its broker's counters since start ({dispatched, applied, failed, stale,
-- composed}), so operators can see stale results the fence dropped.
ALTER TABLE cluster_members
    ADD COLUMN connected_workers integer NOT NULL DEFAULT 0,
    ADD COLUMN counters jsonb NOT NULL DEFAULT '{}'::jsonb;
