-- Periodic resync (drift re-observation): a slice of one kind version's
-- resources per call, walked by name, re-pended when settled and not
-- reconciled for about the kind's resync interval.

-- Queues resync reconciles for the due resources among the next p_scan of
-- kind p_kind after the name p_after (NULL = from the start), at
-- kind_version p_kind_version. Due: synced for its generation (Ready or
-- Degraded), not failed, frozen or deleting, and last reconciled more than
-- the interval ago, spread by shard over 0.9-1.1 times the interval so a
-- kind applied at once does not come due at once. A resource with a task
-- already queued keeps it. next_after is NULL once the walk reached the end
-- (the next call starts over). One caller per kind version at a time (a
-- transaction-scoped try-lock; the others get scanned = 0).
CREATE OR REPLACE FUNCTION queue_resyncs(p_kind text, p_kind_version smallint, p_after text, p_scan integer, p_interval_secs double precision, p_recompose boolean, OUT next_after text, OUT scanned integer, OUT queued integer)
 LANGUAGE plpgsql
AS $function$
BEGIN
    next_after := p_after;
    scanned := 0;
    queued := 0;
    IF NOT pg_try_advisory_xact_lock(kind_lock_key(p_kind, p_kind_version) # 2) THEN
        RETURN;
    END IF;
    WITH slice AS (
        SELECT r.id, r.name, r.kind_version, r.generation, r.synced_gen, r.failure_gen, r.frozen_until,
               r.deletion_requested_at, COALESCE(r.last_reconciled_at, r.created_at) AS reconciled_at, r.shard_id
        FROM resources r
        WHERE r.kind = p_kind AND (p_after IS NULL OR r.name > p_after)
        ORDER BY r.name
        LIMIT p_scan
    ),
    due AS (
        SELECT s.id, s.generation, s.shard_id FROM slice s
        WHERE s.kind_version = p_kind_version AND s.synced_gen >= s.generation AND s.failure_gen <> s.generation
          AND s.frozen_until IS NULL AND s.deletion_requested_at IS NULL
          AND s.reconciled_at < now() - make_interval(secs => p_interval_secs * (0.9 + 0.2 * s.shard_id / 255.0))
    ),
    enqueued AS (
        SELECT enqueue_tasks(array_agg(ROW(d.id, p_kind, p_kind_version, d.generation, c.manifest_version,
                                           d.shard_id)::task_candidate ORDER BY d.id),
                             'reconcile', CASE WHEN p_recompose THEN 'resyncRecompose' ELSE 'resync' END, 'keep') AS n
        FROM due d JOIN kind_config c ON c.kind = p_kind AND c.kind_version = p_kind_version
    )
    SELECT (SELECT max(s.name) FROM slice s), (SELECT count(*)::integer FROM slice),
           (SELECT n FROM enqueued)
    INTO next_after, scanned, queued;
    IF scanned < p_scan THEN
        next_after := NULL;
    END IF;
END
$function$;
