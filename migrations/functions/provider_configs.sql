-- Provider configs: re-reconciling the resources whose override changed.

-- A change of override is a reason to reconcile, like a spec change, but it
-- moves no generation. For each live resource of p_ids (not being deleted,
-- not orphaned or quarantined):
-- - a terminal failure or a retry count is cleared: the change may be the fix;
-- - a synced resource is queued at its generation with cause 'configChange'
--   (a queued, unclaimed task is made due now);
-- - a task already leased or with its result in the outbox was computed
--   with the old config: it is re-pointed (new epoch, unleased), so the
--   fence drops that result and the task runs again;
-- - a resource still lagging goes through the usual gate (schedule_eligible).
-- Each records one event. Returns how many resources were re-pended.
CREATE OR REPLACE FUNCTION pend_config_change(p_ids uuid[], p_message text, p_actor text, p_keep_runs integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_live uuid[];
    v_lagging uuid[];
    v_row record;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    -- Rows are locked in id order, as every multi-row writer of resources does.
    WITH live AS (
        SELECT r.id, r.synced_gen >= r.generation AS synced
        FROM resources r
        WHERE r.id = ANY (p_ids) AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
        ORDER BY r.id
        FOR NO KEY UPDATE
    )
    SELECT COALESCE(array_agg(id ORDER BY id), '{}'),
           COALESCE(array_agg(id ORDER BY id) FILTER (WHERE NOT synced), '{}')
    INTO v_live, v_lagging FROM live;
    IF cardinality(v_live) = 0 THEN
        RETURN 0;
    END IF;
    UPDATE resources SET failure_gen = 0, failure_attempts = 0
    WHERE id = ANY (v_live) AND (failure_gen <> 0 OR failure_attempts <> 0);

    UPDATE work_queue w
    SET claim_epoch = w.claim_epoch + 1,
        broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        outcome_pending = false, not_before = now(), attempts = 0,
        cause = CASE WHEN r.synced_gen >= r.generation THEN 'configChange' END,
        generation = r.generation
    FROM resources r
    WHERE w.resource_id = ANY (v_live) AND w.task_type = 'reconcile'
      AND (w.broker_id IS NOT NULL OR w.outcome_pending)
      AND r.id = w.resource_id;

    PERFORM enqueue_tasks(array_agg(ROW(r.id, r.kind, r.kind_version, r.generation, c.manifest_version,
                                        r.shard_id)::task_candidate ORDER BY r.id),
                          'reconcile', 'configChange', 'hurry')
    FROM resources r JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
    WHERE r.id = ANY (v_live) AND r.synced_gen >= r.generation;

    PERFORM schedule_eligible(v_lagging);
    FOR v_row IN SELECT id, generation FROM resources WHERE id = ANY (v_live) ORDER BY id LOOP
        PERFORM record_resource_event(v_row.id, 'lifecycle', 'Normal', 'ProviderConfigChanged', p_message,
                                      NULL, p_actor, v_row.generation, p_keep_runs);
    END LOOP;
    PERFORM notify_throttled('work_ready', 'wake_work_ready');
    RETURN cardinality(v_live);
END
$function$;

-- Re-pends every resource that references one of p_names as its override
-- (see pend_config_change).
CREATE OR REPLACE FUNCTION pend_config_users(p_names text[], p_actor text, p_keep_runs integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_ids uuid[];
    v_total integer := 0;
    v_name text;
BEGIN
    IF p_names IS NULL OR cardinality(p_names) = 0 THEN
        RETURN 0;
    END IF;
    FOREACH v_name IN ARRAY p_names LOOP
        SELECT COALESCE(array_agg(r.id ORDER BY r.id), '{}') INTO v_ids
        FROM resources r WHERE r.provider_config = v_name;
        v_total := v_total + pend_config_change(
            v_ids, format('its provider config %s changed; reconciling again at the same generation', v_name),
            p_actor, p_keep_runs);
    END LOOP;
    RETURN v_total;
END
$function$;

-- Tells the brokers that the default config of a pair changed, so they push
-- it to the workers serving the pair (payload "kind:version").
CREATE OR REPLACE FUNCTION notify_default_config(p_kind text, p_kind_version smallint)
 RETURNS void
 LANGUAGE sql
AS $function$
    SELECT pg_notify('provider_config_changed', p_kind || ':' || p_kind_version::text);
$function$;

-- Serialises changes of one pair's default until the transaction ends (the
-- API's apply and a composer's configs), so the check for an existing
-- default and the write that makes another one cannot interleave.
CREATE OR REPLACE FUNCTION lock_config_pair(p_kind text, p_kind_version smallint)
 RETURNS void
 LANGUAGE sql
AS $function$
    SELECT pg_advisory_xact_lock(hashtextextended('provider_config_default:' || p_kind || ':' || p_kind_version::text, 0));
$function$;

-- The backstop of config re-runs (requeue_lagging finds them): queues a
-- reconcile with cause 'configChange' for each of p_ids that has no
-- reconcile task. Nothing else is touched: no failure is cleared and no
-- event recorded, so a resource that keeps failing is not re-run forever.
CREATE OR REPLACE FUNCTION queue_config_reruns(p_ids uuid[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_queued integer;
BEGIN
    SELECT enqueue_tasks(array_agg(ROW(r.id, r.kind, r.kind_version, r.generation, c.manifest_version,
                                       r.shard_id)::task_candidate ORDER BY r.id),
                         'reconcile', 'configChange', 'keep')
    INTO v_queued
    FROM resources r JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
    WHERE r.id = ANY (p_ids);
    RETURN v_queued;
END
$function$;
