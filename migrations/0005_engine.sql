-- The reconcile engine: the work queue, scheduling, fenced completions and
-- the reaper's backstops.
--
-- The durable truth is resources.synced_gen vs generation; work_queue only
-- says who is working on what right now. It is UNLOGGED (a crash empties it)
-- and the reaper re-derives it from the lagging resources.

CREATE UNLOGGED TABLE work_queue (
    id               uuid        NOT NULL DEFAULT gen_random_uuid(),
    resource_id      uuid        NOT NULL,
    task_type        text        NOT NULL CHECK (task_type IN ('reconcile')),
    kind             text        NOT NULL,
    kind_version     smallint    NOT NULL,
    generation       bigint      NOT NULL,
    manifest_version bigint      NOT NULL DEFAULT 0,
    -- Fence: bumped every time the row is claimed, re-pointed or released.
    claim_epoch      bigint      NOT NULL DEFAULT 1,
    -- The lease: held by broker_id under an unguessable token.
    broker_id        text,
    lease_token      uuid,
    heartbeat_at     timestamptz,
    deadline_at      timestamptz,
    -- Not claimable before (retry backoff, requeue-after).
    not_before       timestamptz NOT NULL DEFAULT now(),
    attempts         integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    shard_id         smallint    NOT NULL,
    PRIMARY KEY (id, shard_id),
    UNIQUE (resource_id, task_type, shard_id)
) PARTITION BY RANGE (shard_id);

DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format(
            'CREATE UNLOGGED TABLE work_queue_p%s PARTITION OF work_queue FOR VALUES FROM (%s) TO (%s)
             WITH (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02,
                   autovacuum_vacuum_threshold = 50, autovacuum_analyze_threshold = 50)',
            i, i * 16, (i + 1) * 16);
    END LOOP;
END
$$;

CREATE INDEX work_queue_claim_idx ON work_queue (kind, kind_version, shard_id) WHERE broker_id IS NULL;
CREATE INDEX work_queue_leased_idx ON work_queue (kind, kind_version) WHERE broker_id IS NOT NULL;
CREATE INDEX work_queue_heartbeat_idx ON work_queue (heartbeat_at) WHERE broker_id IS NOT NULL;
CREATE INDEX work_queue_lease_idx ON work_queue (lease_token) WHERE lease_token IS NOT NULL;

-- The reaper's scan of lagging resources (empty when everything is synced).
CREATE INDEX resources_lagging_idx ON resources (shard_id) WHERE synced_gen < generation;

-- Brokers wake on new work; throttled like the watch channel.
CREATE SEQUENCE wake_work_ready AS bigint MINVALUE 0 START 0;

-- The gate: queues a reconcile task for each candidate that is lagging, not
-- being deleted, not frozen (orphaned or quarantined) and not terminally
-- failed at its current generation. An existing task for an older
-- generation is re-pointed (new epoch, lease dropped), so a result for the
-- old generation can no longer land. Returns how many tasks were queued or
-- re-pointed.
CREATE FUNCTION schedule_eligible(p_ids uuid[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    queued integer;
BEGIN
    WITH candidates AS (
        SELECT r.id, r.kind, r.kind_version, r.generation, r.shard_id, c.manifest_version
        FROM resources r
        JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
        WHERE r.id = ANY (p_ids)
          AND r.generation > r.synced_gen
          AND r.deletion_requested_at IS NULL
          AND r.frozen_until IS NULL
          AND r.failure_gen <> r.generation
        ORDER BY r.id
    ),
    written AS (
        INSERT INTO work_queue AS w (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id)
        SELECT id, 'reconcile', kind, kind_version, generation, manifest_version, shard_id FROM candidates
        ON CONFLICT (resource_id, task_type, shard_id) DO UPDATE
            SET generation = EXCLUDED.generation,
                kind = EXCLUDED.kind,
                kind_version = EXCLUDED.kind_version,
                manifest_version = EXCLUDED.manifest_version,
                claim_epoch = w.claim_epoch + 1,
                broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
                not_before = now(), attempts = 0
            WHERE w.generation < EXCLUDED.generation OR w.kind_version <> EXCLUDED.kind_version
        RETURNING 1
    )
    SELECT count(*) INTO queued FROM written;
    IF queued > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN queued;
END
$$;

-- Retry delay after the n-th consecutive transient failure: 1 s doubling, capped at 60 s.
CREATE FUNCTION retry_delay(p_attempts integer) RETURNS interval
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT make_interval(secs => least(60, power(2, greatest(p_attempts - 1, 0)))::double precision) $$;

-- Records a transient or terminal failure of the current generation of one
-- resource whose task row is locked by the caller, and either re-arms the
-- task after the retry delay or (terminal) removes it.
CREATE FUNCTION record_work_failure(p_work_id uuid, p_shard smallint, p_message text, p_terminal boolean)
    RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    w work_queue%ROWTYPE;
    failures integer;
    cap integer;
    terminal boolean;
BEGIN
    SELECT * INTO w FROM work_queue WHERE id = p_work_id AND shard_id = p_shard;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT max_transient_attempts INTO cap FROM kind_config WHERE kind = w.kind AND kind_version = w.kind_version;
    UPDATE resources r
    SET failure_attempts = r.failure_attempts + 1
    WHERE r.id = w.resource_id AND r.generation = w.generation
    RETURNING r.failure_attempts INTO failures;
    terminal := p_terminal OR (COALESCE(cap, 0) > 0 AND COALESCE(failures, 0) >= cap);
    IF terminal THEN
        UPDATE resources SET failure_gen = generation WHERE id = w.resource_id AND generation = w.generation;
        DELETE FROM work_queue WHERE id = p_work_id AND shard_id = p_shard;
    ELSE
        UPDATE work_queue
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
            claim_epoch = claim_epoch + 1,
            not_before = now() + retry_delay(COALESCE(failures, 1))
        WHERE id = p_work_id AND shard_id = p_shard;
    END IF;
    PERFORM record_resource_event(
        w.resource_id, 'reconcile', 'Warning',
        CASE WHEN terminal THEN 'ReconcileFailed' ELSE 'ReconcileRetrying' END,
        left(p_message, 4096), NULL, 'system:engine', w.generation, 100);
    RETURN terminal;
END
$$;

-- Applies a worker's result if, and only if, its fence still matches the
-- durable task row: same lease token, claim epoch and generation, and a
-- compatible manifest version (0 on either side is "unknown"). Returns
-- 'stale' (dropped), 'applied', 'requeued' or 'failed'.
CREATE FUNCTION complete_work(
    p_lease uuid, p_epoch bigint, p_generation bigint, p_manifest_version bigint,
    p_status jsonb, p_conditions jsonb, p_healthy boolean,
    p_error text, p_terminal boolean, p_requeue_after_ms bigint
) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    w work_queue%ROWTYPE;
BEGIN
    SELECT * INTO w FROM work_queue WHERE lease_token = p_lease FOR UPDATE;
    IF NOT FOUND OR w.claim_epoch <> p_epoch OR w.generation <> p_generation
       OR (w.manifest_version <> 0 AND p_manifest_version <> 0 AND w.manifest_version <> p_manifest_version) THEN
        RETURN 'stale';
    END IF;
    IF p_error IS NOT NULL THEN
        PERFORM record_work_failure(w.id, w.shard_id, p_error, p_terminal);
        RETURN 'failed';
    END IF;
    IF p_conditions IS NOT NULL AND jsonb_array_length(p_conditions) > 0 THEN
        PERFORM set_resource_conditions(w.resource_id, w.generation, p_conditions);
    END IF;
    IF p_requeue_after_ms IS NOT NULL AND p_requeue_after_ms > 0 THEN
        -- "Not settled yet": keep the status, do not mark the generation synced.
        UPDATE resources
        SET status = COALESCE(p_status, status), health_ok = COALESCE(p_healthy, health_ok)
        WHERE id = w.resource_id
          AND (status IS DISTINCT FROM COALESCE(p_status, status) OR health_ok IS DISTINCT FROM COALESCE(p_healthy, health_ok));
        UPDATE work_queue
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
            claim_epoch = claim_epoch + 1,
            not_before = now() + make_interval(secs => p_requeue_after_ms / 1000.0)
        WHERE id = w.id AND shard_id = w.shard_id;
        RETURN 'requeued';
    END IF;
    UPDATE resources
    SET status = COALESCE(p_status, status),
        synced_gen = greatest(synced_gen, w.generation),
        health_ok = COALESCE(p_healthy, true),
        failure_attempts = 0,
        failure_gen = 0,
        last_reconciled_at = now()
    WHERE id = w.resource_id;
    DELETE FROM work_queue WHERE id = w.id AND shard_id = w.shard_id;
    RETURN 'applied';
END
$$;

-- Reaper backstop 1: leases whose holder stopped heartbeating are freed (new
-- epoch) so another broker can claim them.
CREATE FUNCTION reap_stale_work(p_stale_secs double precision, p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    freed integer;
BEGIN
    WITH stale AS (
        SELECT id, shard_id FROM work_queue
        WHERE broker_id IS NOT NULL AND heartbeat_at < now() - make_interval(secs => p_stale_secs)
        ORDER BY shard_id, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    released AS (
        UPDATE work_queue w
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
            claim_epoch = w.claim_epoch + 1
        FROM stale s WHERE w.id = s.id AND w.shard_id = s.shard_id
        RETURNING 1
    )
    SELECT count(*) INTO freed FROM released;
    IF freed > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN freed;
END
$$;

-- Reaper backstop 2: tasks past their deadline count as a transient failure
-- (a late result is then fenced out by the new epoch).
CREATE FUNCTION expire_overdue_work(p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    overdue record;
    expired integer := 0;
BEGIN
    FOR overdue IN
        SELECT id, shard_id FROM work_queue
        WHERE broker_id IS NOT NULL AND deadline_at < now()
        ORDER BY shard_id, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM record_work_failure(overdue.id, overdue.shard_id, 'the task exceeded its deadline', false);
        expired := expired + 1;
    END LOOP;
    RETURN expired;
END
$$;

-- Reaper backstop 3: lagging resources without a task get one (after a
-- crash emptied the unlogged queue, or a task was lost). Zero-cost when
-- nothing lags: the partial index is empty.
CREATE FUNCTION requeue_lagging(p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    ids uuid[];
BEGIN
    SELECT array_agg(r.id) INTO ids FROM (
        SELECT r.id FROM resources r
        WHERE r.synced_gen < r.generation
          AND r.deletion_requested_at IS NULL
          AND r.frozen_until IS NULL
          AND r.failure_gen <> r.generation
          AND NOT EXISTS (SELECT 1 FROM work_queue w
                          WHERE w.resource_id = r.id AND w.task_type = 'reconcile' AND w.shard_id = r.shard_id)
        LIMIT p_limit) r;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    RETURN schedule_eligible(ids);
END
$$;

-- Reaper backstop 4: tasks of resources that are gone, deleting or frozen.
CREATE FUNCTION drop_orphaned_work(p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    dropped integer;
BEGIN
    WITH orphaned AS (
        SELECT w.id, w.shard_id FROM work_queue w
        LEFT JOIN resources r ON r.id = w.resource_id
        WHERE w.broker_id IS NULL
          AND (r.id IS NULL OR r.deletion_requested_at IS NOT NULL OR r.frozen_until IS NOT NULL)
        LIMIT p_limit
    ),
    gone AS (
        DELETE FROM work_queue w USING orphaned o WHERE w.id = o.id AND w.shard_id = o.shard_id RETURNING 1
    )
    SELECT count(*) INTO dropped FROM gone;
    RETURN dropped;
END
$$;
