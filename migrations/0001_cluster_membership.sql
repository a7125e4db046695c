-- Foundation: the shard mapping and the cluster membership registry.
--
-- Work is split into 256 logical shards. Every pod registers itself in
-- cluster_members and heartbeats; each pod computes its own contiguous shard
-- range from the live members of its role, so there is no leader.

-- The shard of a row id. mod() before abs(): hashtext() can return INT_MIN,
-- whose abs() would overflow. The modulus must equal shard_count().
CREATE FUNCTION shard_of(p_id uuid) RETURNS smallint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT abs(mod(hashtext(p_id::text), 256))::smallint $$;

-- The number of logical shards; the service checks it against its own constant at boot.
CREATE FUNCTION shard_count() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 256 $$;

CREATE TABLE cluster_members (
    member_id      text        PRIMARY KEY,
    role           text        NOT NULL CHECK (role IN ('all', 'control', 'broker')),
    state          text        NOT NULL DEFAULT 'serving' CHECK (state IN ('serving', 'draining')),
    version        text        NOT NULL,
    hostname       text        NOT NULL,
    pid            integer     NOT NULL,
    listen_addr    text        NOT NULL,
    -- The shard range [shard_lo, shard_hi] this member last computed for itself.
    shard_lo       smallint,
    shard_hi       smallint,
    in_flight      integer     NOT NULL DEFAULT 0,
    -- Snapshot of the workers connected to this member (broker duty).
    workers        jsonb       NOT NULL DEFAULT '[]'::jsonb,
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL DEFAULT now(),
    CHECK ((shard_lo IS NULL) = (shard_hi IS NULL)),
    CHECK (shard_lo IS NULL OR (0 <= shard_lo AND shard_lo <= shard_hi AND shard_hi < 256))
) WITH (
    -- Tiny but write-hot (a heartbeat every few seconds per pod): leave room for
    -- HOT updates and vacuum by row count, not by fraction.
    fillfactor = 70,
    autovacuum_vacuum_threshold = 2000,
    autovacuum_vacuum_scale_factor = 0
);

-- The shard range of one member: its rank among the live serving members of
-- its role (ordered by member_id) tiles [0, 255] evenly. NULL when the member
-- is not registered, not live, draining, or when there are more members than
-- shards. Members compute this independently; a short overlap while the fleet
-- re-tiles is harmless because every claim is SKIP LOCKED and fenced.
CREATE FUNCTION assign_member_shards(p_member_id text, p_liveness_secs integer)
    RETURNS TABLE (shard_lo smallint, shard_hi smallint)
    LANGUAGE sql STABLE
    AS $$
    WITH me AS (
        SELECT role FROM cluster_members
        WHERE member_id = p_member_id
          AND state = 'serving'
          AND last_heartbeat > now() - make_interval(secs => p_liveness_secs)
    ),
    peers AS (
        SELECT m.member_id,
               (row_number() OVER (ORDER BY m.member_id) - 1)::integer AS rank,
               count(*) OVER ()::integer AS members
        FROM cluster_members m, me
        WHERE m.role = me.role
          AND m.state = 'serving'
          AND m.last_heartbeat > now() - make_interval(secs => p_liveness_secs)
    )
    SELECT (rank * shard_count() / members)::smallint,
           ((rank + 1) * shard_count() / members - 1)::smallint
    FROM peers
    WHERE member_id = p_member_id
      AND members <= shard_count()
    $$;

-- Joins and leaves (not heartbeats) wake every pod's topology watcher.
CREATE FUNCTION notify_cluster_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('cluster_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER cluster_members_changed
    AFTER INSERT OR DELETE OR UPDATE OF state ON cluster_members
    FOR EACH STATEMENT EXECUTE FUNCTION notify_cluster_changed();
