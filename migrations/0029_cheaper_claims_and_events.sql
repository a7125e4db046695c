-- Two per-row costs of the throughput path (ADR 16).
--
-- 1. A claim updates the tasks it picked by tuple id. The pick locks them
--    (FOR UPDATE SKIP LOCKED), so their ctids cannot change before the
--    update, which then needs no primary-key probe per task; the kind's
--    deadline is read once instead of joined per task. pgbench, 256-task
--    claims from a 100k backlog on an idle database: 15.5 / 13.7 / 16.1 ms
--    before, 14.0 / 13.2 / 12.2 ms after, in three rounds on fresh copies.

CREATE OR REPLACE FUNCTION claim_range(p_broker text, p_kind text, p_kind_version smallint, p_budget integer, p_lo smallint, p_hi smallint)
 RETURNS TABLE(work_id uuid, shard_id smallint, task_type text, lease_token uuid, claim_epoch bigint, generation bigint, manifest_version bigint, attempts integer, deadline_secs double precision, resource_id uuid, kind text, kind_version integer, name text, labels jsonb, spec jsonb, status jsonb, synced_gen bigint, health_ok boolean, finalizers text[], composed_gen bigint, deletion_requested_at timestamp with time zone)
 LANGUAGE plpgsql
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH claimed AS (
        UPDATE work_queue w
        SET broker_id = p_broker, lease_token = gen_random_uuid(), claim_epoch = w.claim_epoch + 1,
            heartbeat_at = now(), attempts = w.attempts + 1,
            deadline_at = (SELECT CASE WHEN c.task_deadline_secs > 0
                                       THEN now() + make_interval(secs => c.task_deadline_secs) END
                           FROM kind_config c WHERE c.kind = p_kind AND c.kind_version = p_kind_version)
        WHERE w.ctid = ANY (ARRAY(
            SELECT p.ctid FROM work_queue p
            WHERE p.broker_id IS NULL AND p.kind = p_kind AND p.kind_version = p_kind_version
              AND p.not_before <= now() AND p.shard_id BETWEEN p_lo AND p_hi
            LIMIT p_budget
            FOR UPDATE SKIP LOCKED))
        RETURNING w.*
    )
    SELECT cl.id, cl.shard_id, cl.task_type, cl.lease_token, cl.claim_epoch, cl.generation, cl.manifest_version,
           cl.attempts, extract(epoch FROM cl.deadline_at - now())::float8, r.id, r.kind, r.kind_version::int4,
           r.name, r.labels, r.spec, r.status, r.synced_gen, r.health_ok, r.finalizers, r.composed_gen,
           r.deletion_requested_at
    FROM claimed cl JOIN resources r ON r.id = cl.resource_id;
END
$function$;

-- 2. An event no longer checks its resource through a foreign key. The
--    check ran once per inserted event, as a trigger that looked the
--    resource up and took a key-share lock on it (a WAL record per row):
--    26-50 ms of a 500-resource batch apply under auto_explain, and
--    1.4 s of statement time per 100k applies in pg_stat_statements. Events
--    are written by the engine and the API for resources they hold or have
--    just written; the ON DELETE CASCADE it provided becomes one
--    statement-level delete in the resources' delete trigger. An event
--    written in a race with its resource's deletion is invisible (every
--    read names its resource) and expires with the event retention.
ALTER TABLE resource_events DROP CONSTRAINT resource_events_resource_id_fkey;

CREATE OR REPLACE FUNCTION drop_edges_of_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_ids uuid[];
BEGIN
    -- Keys, not joins with the transition table: PL/pgSQL would keep the
    -- first call's row count as the join's estimate (see 0030). Each delete
    -- probes its index once per deleted resource.
    v_ids := ARRAY(SELECT o.id FROM old_rows o);
    DELETE FROM resource_deps d WHERE d.dependent_id = ANY (v_ids);
    DELETE FROM resource_deps d WHERE d.dependency_id = ANY (v_ids);
    DELETE FROM resource_events e WHERE e.resource_id = ANY (v_ids);
    RETURN NULL;
END
$$;
