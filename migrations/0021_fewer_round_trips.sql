-- Fewer round trips on the write path, and one index less per change-log row.

-- A resource write takes its kind version's shared lock and then reads the
-- manifest version in force. Both in one call: the read is a statement of
-- its own inside this VOLATILE function, so it runs on a snapshot taken
-- after the lock was granted and sees any manifest change that held the lock
-- before (a single SQL statement would read on a snapshot taken before it
-- waited for the lock).
CREATE FUNCTION lock_kind_state(p_kind text, p_kind_version smallint)
    RETURNS TABLE (manifest_version bigint, retired boolean)
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(kind_lock_key(p_kind, p_kind_version));
    RETURN QUERY
        SELECT m.manifest_version, COALESCE(c.retired, false)
        FROM kind_manifest m LEFT JOIN kind_config c USING (kind, kind_version)
        WHERE m.kind = p_kind AND m.kind_version = p_kind_version;
END
$$;

-- Every change-log row (two per new resource on its way to Ready) also wrote
-- an entry into an index on recorded_at, used only by retention. Positions
-- follow commit time closely, so retention now walks the oldest positions
-- along the primary key and deletes those old enough. A change recorded
-- late under a low position stops a pass early and is taken by a later one.
DROP INDEX resource_changes_recorded_idx;

CREATE OR REPLACE FUNCTION trim_resource_changes(p_max_age_secs double precision, p_batch integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    trimmed integer;
BEGIN
    WITH gone AS (
        DELETE FROM resource_changes
        WHERE (txid, seq) IN (
            SELECT txid, seq FROM resource_changes
            ORDER BY txid, seq LIMIT p_batch)
          AND recorded_at < now() - make_interval(secs => p_max_age_secs)
        RETURNING txid, seq
    ),
    newest AS (
        SELECT txid, seq FROM gone ORDER BY txid DESC, seq DESC LIMIT 1
    ),
    raised AS (
        UPDATE watch_horizon h SET txid = n.txid, seq = n.seq
        FROM newest n
        WHERE h.log = 'resource_changes' AND (n.txid, n.seq) > (h.txid, h.seq)
        RETURNING 1
    )
    SELECT count(*) INTO trimmed FROM gone;
    RETURN trimmed;
END
$$;
