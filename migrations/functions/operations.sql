-- Operations: recording invocations, claiming them for workers, applying
-- their outcomes, and the backstops (lost leases, deadlines, deletion).

-- Records an invocation of p_verb on p_resource (checked by the caller) and
-- its OperationInvoked event, and wakes the brokers. Returns the row.
CREATE OR REPLACE FUNCTION invoke_operation(p_resource uuid, p_kind text, p_verb text, p_input jsonb, p_actor text, p_keep_runs integer)
 RETURNS SETOF operations
 LANGUAGE plpgsql
AS $function$
DECLARE
    o operations%ROWTYPE;
BEGIN
    INSERT INTO operations (resource_id, kind, verb, input, requested_by)
    VALUES (p_resource, p_kind, p_verb, p_input, p_actor)
    RETURNING * INTO o;
    PERFORM record_resource_event(
        p_resource, 'operation', 'Normal', 'OperationInvoked',
        format('operation %s (%s) invoked by %s', p_verb, o.id, p_actor),
        jsonb_build_object('operation', o.id, 'verb', p_verb),
        p_actor, (SELECT r.generation FROM resources r WHERE r.id = p_resource), p_keep_runs);
    PERFORM notify_throttled('work_ready', 'wake_work_ready');
    RETURN NEXT o;
END
$function$;

-- Claims up to p_limit due operations on resources of (p_kind,
-- p_kind_version) for p_broker, oldest first, skipping quarantined and
-- deleting resources. Operations share the kind's max_inflight with its
-- tasks (claim_slots). With nothing pending for the
-- kind this is one look at the empty partial index.
CREATE OR REPLACE FUNCTION claim_operations(p_broker text, p_kind text, p_kind_version smallint, p_limit integer)
 RETURNS SETOF claimed_operation
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_cap integer;
    v_deadline integer;
    v_manifest bigint;
    v_budget integer := p_limit;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM operations o WHERE o.kind = p_kind AND o.state = 'pending') THEN
        RETURN;
    END IF;
    SELECT c.max_inflight, c.task_deadline_secs, c.manifest_version INTO v_cap, v_deadline, v_manifest
    FROM kind_config c WHERE c.kind = p_kind AND c.kind_version = p_kind_version;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_cap > 0 THEN
        v_budget := least(v_budget, claim_slots(p_kind, p_kind_version, v_cap));
    END IF;
    IF v_budget <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH picked AS (
        SELECT o.id FROM operations o JOIN resources r ON r.id = o.resource_id
        WHERE o.kind = p_kind AND o.state = 'pending' AND o.not_before <= now()
          AND r.kind_version = p_kind_version AND r.frozen_until IS DISTINCT FROM 'infinity'
          AND r.deletion_requested_at IS NULL
        ORDER BY o.id
        LIMIT v_budget
        FOR UPDATE OF o SKIP LOCKED
    ),
    claimed AS (
        UPDATE operations o
        SET state = 'running', broker_id = p_broker, lease_token = gen_random_uuid(),
            claim_epoch = o.claim_epoch + 1, heartbeat_at = now(), attempts = o.attempts + 1,
            kind_version = p_kind_version,
            deadline_at = CASE WHEN v_deadline > 0 THEN now() + make_interval(secs => v_deadline) END
        FROM picked p WHERE o.id = p.id
        RETURNING o.*
    )
    SELECT c.id, c.lease_token, c.claim_epoch, c.attempts, c.verb, c.input, c.requested_by, c.kind,
           p_kind_version::int4, v_manifest, CASE WHEN v_deadline > 0 THEN v_deadline::float8 END,
           r.generation, resource_snapshot(to_jsonb(r)), pc.spec, pc.data
    FROM claimed c JOIN resources r ON r.id = c.resource_id
    LEFT JOIN provider_configs pc ON pc.name = r.provider_config
    ORDER BY c.id;
END
$function$;

-- Takes over the operation leases a reconnecting worker still holds and
-- returns them as claimed.
CREATE OR REPLACE FUNCTION adopt_operations(p_broker text, p_tokens uuid[], p_epochs bigint[])
 RETURNS SETOF claimed_operation
 LANGUAGE sql
AS $function$
    WITH adopted AS (
        UPDATE operations o SET broker_id = p_broker, heartbeat_at = now()
        FROM unnest(p_tokens, p_epochs) AS l(token, epoch)
        WHERE o.lease_token = l.token AND o.claim_epoch = l.epoch AND o.state = 'running'
        RETURNING o.*
    )
    SELECT a.id, a.lease_token, a.claim_epoch, a.attempts, a.verb, a.input, a.requested_by, a.kind,
           a.kind_version::int4, c.manifest_version, extract(epoch FROM a.deadline_at - now())::float8,
           r.generation, resource_snapshot(to_jsonb(r)), pc.spec, pc.data
    FROM adopted a
    JOIN resources r ON r.id = a.resource_id
    JOIN kind_config c ON c.kind = a.kind AND c.kind_version = a.kind_version
    LEFT JOIN provider_configs pc ON pc.name = r.provider_config;
$function$;

-- Ends operation p_id as failed (google.rpc code p_code) with a Warning
-- event on its resource. The caller holds the row.
CREATE OR REPLACE FUNCTION fail_operation(p_id uuid, p_code integer, p_message text, p_reason text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    o operations%ROWTYPE;
BEGIN
    UPDATE operations
    SET state = 'failed', broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        claim_epoch = claim_epoch + 1, completed_at = now(), error_code = p_code,
        error_message = left(p_message, 4000), error_reason = NULLIF(p_reason, '')
    WHERE id = p_id
    RETURNING * INTO o;
    IF NOT FOUND OR NOT EXISTS (SELECT 1 FROM resources r WHERE r.id = o.resource_id) THEN
        RETURN;
    END IF;
    PERFORM record_resource_event(
        o.resource_id, 'operation', 'Warning', 'OperationFailed',
        format('operation %s (%s) failed after %s attempt(s): %s', o.verb, o.id, o.attempts, left(p_message, 400)),
        jsonb_build_object('operation', o.id, 'verb', o.verb, 'attempts', o.attempts, 'reason', p_reason),
        'system:operations', (SELECT r.generation FROM resources r WHERE r.id = o.resource_id), 100);
END
$function$;

-- Applies the outcome of one dispatch if its lease and epoch still hold;
-- false when the fence dropped it. A success first writes the status,
-- health and conditions the reaction emits (NULL / empty when it emits
-- none) to the resource, then ends the operation SUCCEEDED with p_output,
-- or, with p_requeue_ms, puts it back to wait that long (not a failure). A
-- failure ends it FAILED (code p_code) when terminal or when the kind's
-- transient attempts are used up (max_transient_attempts; 10 when that is
-- 0, so a verb is never retried forever), else puts it back to wait out the
-- backoff. The worker's events (p_events, NULL = none) are recorded either
-- way.
CREATE OR REPLACE FUNCTION complete_operation(p_lease uuid, p_epoch bigint, p_output jsonb, p_status jsonb, p_conditions jsonb, p_healthy boolean, p_requeue_ms bigint, p_error text, p_reason text, p_terminal boolean, p_code integer, p_events jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    o operations%ROWTYPE;
    v_generation bigint;
    v_max integer;
BEGIN
    SELECT * INTO o FROM operations
    WHERE lease_token = p_lease AND claim_epoch = p_epoch AND state = 'running'
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_events IS NOT NULL THEN
        SELECT r.generation INTO v_generation FROM resources r WHERE r.id = o.resource_id;
        IF FOUND THEN
            PERFORM record_worker_events(o.resource_id, v_generation, p_events);
        END IF;
    END IF;
    IF p_error IS NOT NULL THEN
        SELECT COALESCE(NULLIF(c.max_transient_attempts, 0), 10) INTO v_max
        FROM kind_config c WHERE c.kind = o.kind AND c.kind_version = o.kind_version;
        IF p_terminal OR o.failures + 1 >= COALESCE(v_max, 10) THEN
            UPDATE operations SET failures = failures + 1 WHERE id = o.id;
            PERFORM fail_operation(o.id, p_code, p_error, p_reason);
        ELSE
            UPDATE operations
            SET state = 'pending', broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
                claim_epoch = claim_epoch + 1, failures = failures + 1,
                not_before = now() + retry_delay(o.failures + 1), error_message = left(p_error, 4000),
                error_reason = NULLIF(p_reason, '')
            WHERE id = o.id;
        END IF;
        RETURN true;
    END IF;
    UPDATE resources r
    SET status = COALESCE(p_status, r.status), health_ok = COALESCE(p_healthy, r.health_ok)
    WHERE r.id = o.resource_id
      AND (r.status IS DISTINCT FROM COALESCE(p_status, r.status)
           OR r.health_ok IS DISTINCT FROM COALESCE(p_healthy, r.health_ok))
    RETURNING r.generation INTO v_generation;
    IF FOUND AND p_status IS NOT NULL THEN
        PERFORM apply_value_flows(ARRAY[o.resource_id]);
    END IF;
    IF p_conditions IS NOT NULL AND jsonb_typeof(p_conditions) = 'array' AND jsonb_array_length(p_conditions) > 0 THEN
        SELECT r.generation INTO v_generation FROM resources r WHERE r.id = o.resource_id;
        IF FOUND THEN
            PERFORM set_resource_conditions(o.resource_id, v_generation, p_conditions);
        END IF;
    END IF;
    IF p_requeue_ms IS NOT NULL THEN
        UPDATE operations
        SET state = 'pending', broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
            claim_epoch = claim_epoch + 1, not_before = now() + make_interval(secs => p_requeue_ms / 1000.0)
        WHERE id = o.id;
        RETURN true;
    END IF;
    UPDATE operations
    SET state = 'succeeded', broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        claim_epoch = claim_epoch + 1, completed_at = now(), output = p_output,
        error_message = NULL, error_reason = NULL
    WHERE id = o.id;
    IF EXISTS (SELECT 1 FROM resources r WHERE r.id = o.resource_id) THEN
        PERFORM record_resource_event(
            o.resource_id, 'operation', 'Normal', 'OperationSucceeded',
            format('operation %s (%s) succeeded after %s attempt(s)', o.verb, o.id, o.attempts),
            jsonb_build_object('operation', o.id, 'verb', o.verb, 'attempts', o.attempts),
            'system:operations', (SELECT r.generation FROM resources r WHERE r.id = o.resource_id), 100);
    END IF;
    RETURN true;
END
$function$;

-- The backstops of running operations: a lease not attested for
-- p_stale_secs (its broker or worker is gone) goes back to pending without
-- counting as a failure; one past its task deadline counts as a transient
-- failure (DEADLINE_EXCEEDED once the attempts are used up), and a late
-- result is fenced out by the new epoch. Returns how many were handled.
CREATE OR REPLACE FUNCTION reap_operations(p_stale_secs double precision, p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_stale integer;
    v_overdue integer := 0;
    r record;
BEGIN
    UPDATE operations o
    SET state = 'pending', broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
        claim_epoch = o.claim_epoch + 1
    WHERE o.id = ANY (ARRAY(
        SELECT s.id FROM operations s
        WHERE s.state = 'running' AND s.heartbeat_at < now() - make_interval(secs => p_stale_secs)
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS v_stale = ROW_COUNT;
    FOR r IN
        SELECT s.lease_token, s.claim_epoch FROM operations s
        WHERE s.state = 'running' AND s.deadline_at < now()
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM complete_operation(r.lease_token, r.claim_epoch, NULL, NULL, NULL, NULL, NULL,
                                   'the operation exceeded its task deadline', 'DeadlineExceeded', false, 4);
        v_overdue := v_overdue + 1;
    END LOOP;
    IF v_stale + v_overdue > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN v_stale + v_overdue;
END
$function$;

-- Fails the pending operations of resources whose deletion was just
-- requested (FAILED_PRECONDITION): a verb never starts on a resource being
-- torn down. With no pending operation anywhere, one look at an empty index.
CREATE OR REPLACE FUNCTION fail_operations_of_deleting(p_ids uuid[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_id uuid;
    v_failed integer := 0;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0
       OR NOT EXISTS (SELECT 1 FROM operations o WHERE o.state = 'pending') THEN
        RETURN 0;
    END IF;
    FOR v_id IN
        SELECT o.id FROM operations o
        WHERE o.resource_id = ANY (p_ids) AND o.state = 'pending'
        ORDER BY o.id
        FOR UPDATE
    LOOP
        PERFORM fail_operation(v_id, 9, 'the resource is being deleted; the operation did not run',
                               'DeletionPending');
        v_failed := v_failed + 1;
    END LOOP;
    RETURN v_failed;
END
$function$;

-- A removed resource's operations go with it.
CREATE OR REPLACE FUNCTION drop_operations_of_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM operations) THEN
        DELETE FROM operations o USING old_rows r WHERE o.resource_id = r.id;
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_drop_operations AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION drop_operations_of_deleted();
