-- Cluster membership: the shard count, each member's shard range, and the
-- wake-up of every pod's topology watcher on joins and leaves.

-- The number of logical shards; the service checks it against its own constant at boot.
CREATE OR REPLACE FUNCTION shard_count()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 256 $function$;

-- The shard range of one member: its rank among the live serving members of
-- its role (ordered by member_id) tiles [0, 255] evenly. NULL when the member
-- is not registered, not live, draining, or when there are more members than
-- shards. Members compute this independently; a short overlap while the fleet
-- re-tiles is harmless because every claim is SKIP LOCKED and fenced.
CREATE OR REPLACE FUNCTION assign_member_shards(p_member_id text, p_liveness_secs integer)
 RETURNS TABLE(shard_lo smallint, shard_hi smallint)
 LANGUAGE sql
 STABLE
AS $function$
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
    $function$;

-- Joins and leaves (not heartbeats) wake every pod's topology watcher.
CREATE OR REPLACE FUNCTION notify_cluster_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('cluster_changed', '');
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER cluster_members_changed AFTER INSERT OR DELETE OR UPDATE OF state ON cluster_members
    FOR EACH STATEMENT EXECUTE FUNCTION notify_cluster_changed();
