-- Operator actions on resources (AdminService.ActOnResources, store::admin).

-- Whether p_action applies to r as it is now: the one rule both the
-- selection of a bulk page and the action itself go by.
CREATE OR REPLACE FUNCTION action_applies(r resources, p_action text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE p_action
        WHEN 'reconcile' THEN r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
        WHEN 'quarantine' THEN r.deletion_requested_at IS NULL
                               AND r.frozen_until IS DISTINCT FROM 'infinity'::timestamptz
        WHEN 'unquarantine' THEN r.frozen_until = 'infinity'::timestamptz
        WHEN 'clear_failure' THEN
            (r.deletion_requested_at IS NULL AND r.failure_gen = r.generation)
            OR (r.deletion_requested_at IS NOT NULL AND EXISTS (
                SELECT 1 FROM work_queue w
                WHERE w.resource_id = r.id AND w.task_type = 'delete'
                  AND w.broker_id IS NULL AND w.not_before = 'infinity'::timestamptz))
        WHEN 'reset_backoff' THEN EXISTS (
                SELECT 1 FROM work_queue w
                WHERE w.resource_id = r.id AND w.broker_id IS NULL AND NOT w.outcome_pending
                  AND w.not_before > now() AND w.not_before < 'infinity'::timestamptz)
        WHEN 'release_lease' THEN EXISTS (
                SELECT 1 FROM work_queue w
                WHERE w.resource_id = r.id AND w.broker_id IS NOT NULL AND NOT w.outcome_pending)
        WHEN 'force_finalize' THEN r.deletion_requested_at IS NOT NULL
        ELSE false
    END
$function$;

-- Runs p_action on p_id for p_actor, who gave p_reason, and records it on
-- an event of the resource. Locks the resource first (callers take rows in
-- id order, as every queue writer does), then re-checks action_applies.
-- Returns false, changing nothing, when the resource is gone or the action
-- does not apply to it.
CREATE OR REPLACE FUNCTION act_on_resource(p_id uuid, p_action text, p_actor text, p_reason text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    r resources%ROWTYPE;
    v_note text := COALESCE(': ' || NULLIF(p_reason, ''), '');
BEGIN
    SELECT * INTO r FROM resources WHERE id = p_id FOR NO KEY UPDATE;
    IF NOT FOUND OR NOT action_applies(r, p_action) THEN
        RETURN false;
    END IF;
    CASE p_action
    WHEN 'quarantine' THEN
        RETURN quarantine_resource(p_id, p_actor, p_reason) = 'quarantined';
    WHEN 'unquarantine' THEN
        RETURN unquarantine_resource(p_id, p_actor, p_reason) = 'released';
    WHEN 'reconcile' THEN
        PERFORM request_reconcile(p_id, false);
        PERFORM record_resource_event(p_id, 'lifecycle', 'Normal', 'ReconcileRequested',
            left('reconcile requested by ' || p_actor || v_note, 4096), NULL, p_actor, r.generation, 100);
    WHEN 'clear_failure' THEN
        IF r.deletion_requested_at IS NULL THEN
            PERFORM request_reconcile(p_id, true);
        ELSE
            UPDATE work_queue SET not_before = now(), attempts = 0
            WHERE resource_id = p_id AND task_type = 'delete' AND broker_id IS NULL
              AND not_before = 'infinity'::timestamptz;
            PERFORM notify_throttled('work_ready', 'wake_work_ready');
        END IF;
        PERFORM record_resource_event(p_id, 'lifecycle', 'Normal', 'FailureCleared',
            left('failure cleared by ' || p_actor || '; retrying' || v_note, 4096), NULL, p_actor, r.generation, 100);
    WHEN 'reset_backoff' THEN
        UPDATE resources SET failure_attempts = 0 WHERE id = p_id AND failure_attempts <> 0;
        UPDATE work_queue SET not_before = now(), attempts = 0
        WHERE resource_id = p_id AND broker_id IS NULL AND NOT outcome_pending
          AND not_before > now() AND not_before < 'infinity'::timestamptz;
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
        PERFORM record_resource_event(p_id, 'lifecycle', 'Normal', 'BackoffReset',
            left('retry delay reset by ' || p_actor || '; runs now' || v_note, 4096), NULL, p_actor, r.generation, 100);
    WHEN 'release_lease' THEN
        -- The new epoch fences off the result of the broker that held it.
        UPDATE work_queue w
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
            claim_epoch = w.claim_epoch + 1, not_before = now()
        WHERE w.resource_id = p_id AND w.broker_id IS NOT NULL AND NOT w.outcome_pending;
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
        PERFORM record_resource_event(p_id, 'lifecycle', 'Warning', 'LeaseReleased',
            left('task lease taken back by ' || p_actor || '; any worker may run it now' || v_note, 4096),
            NULL, p_actor, r.generation, 100);
    WHEN 'force_finalize' THEN
        -- The event goes first: the sweep may remove the resource (and its
        -- events with it; the audit log keeps the record).
        PERFORM record_resource_event(p_id, 'deletion', 'Warning', 'ForceFinalized',
            left('teardown completed by ' || p_actor || ' without the worker: finalizers '
                 || COALESCE(NULLIF(array_to_string(r.finalizers, ', '), ''), '(none)')
                 || ' removed, nothing external was cleaned up' || v_note, 4096),
            jsonb_build_object('finalizers', to_jsonb(r.finalizers)), p_actor, r.generation, 100);
        DELETE FROM work_queue WHERE resource_id = p_id;
        UPDATE resources SET finalizers = '{}' WHERE id = p_id;
        PERFORM set_resource_conditions(p_id, r.generation, jsonb_build_array(jsonb_build_object(
            'type', 'Teardown', 'status', 'True', 'reason', 'ForceFinalized',
            'message', left('finalized by ' || p_actor || v_note, 1024))));
        PERFORM sweep_deletable_ids(ARRAY[p_id], 100000);
    END CASE;
    RETURN true;
END
$function$;
