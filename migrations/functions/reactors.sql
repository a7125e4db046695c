-- Reactors: recording deliveries at lifecycle transitions, claiming them,
-- completing them, and the backstops.

-- A resource row as a delivery keeps it: the row's JSON plus the kind and
-- name of its owner and root ("ownerRef", "rootRef"; null when absent or
-- already gone), so the reactor sees them even after they are deleted.
CREATE OR REPLACE FUNCTION resource_snapshot(p_row jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
    SELECT p_row || jsonb_build_object(
        'ownerRef', (SELECT jsonb_build_object('kind', x.kind, 'name', x.name) FROM resources x
                     WHERE x.id = (p_row ->> 'owner_id')::uuid),
        'rootRef', (SELECT jsonb_build_object('kind', x.kind, 'name', x.name) FROM resources x
                    WHERE x.id = (p_row ->> 'root_id')::uuid));
$function$;

-- The transitions of an UPDATE statement on resources, recorded as one
-- delivery per matching enabled binding, in the statement's transaction.
-- With no enabled binding for synced, degraded or failed this is one probe
-- of an empty partial index per statement, and nothing is read or written.
-- SYNCED: a new generation reconciled; DEGRADED / FAILED: the phase became
-- that. A repeat of the same (resource, transition, generation, binding)
-- shares its dedup token and is not recorded twice.
CREATE OR REPLACE FUNCTION react_on_update()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM reactor_bindings b
                   WHERE b.enabled AND b.transition IN ('synced', 'degraded', 'failed')) THEN
        RETURN NULL;
    END IF;
    INSERT INTO reactor_deliveries (binding, reactor, reactor_version, transition, resource_id, generation,
                                    resource, dedup_token, shard_id)
    SELECT b.name, b.reactor, b.reactor_version, t.transition, n.id, t.generation, resource_snapshot(to_jsonb(n)),
           n.id::text || ':' || t.transition || ':' || t.generation::text || ':' || b.name, n.shard_id
    FROM new_rows n
    JOIN old_rows o ON o.id = n.id
    CROSS JOIN LATERAL (VALUES
        ('synced', n.synced_gen, n.synced_gen > o.synced_gen AND n.synced_gen >= n.generation),
        ('degraded', n.generation, n.phase = 'Degraded' AND o.phase IS DISTINCT FROM 'Degraded'),
        ('failed', n.generation, n.phase = 'Failed' AND o.phase IS DISTINCT FROM 'Failed')
    ) AS t(transition, generation, fired)
    JOIN reactor_bindings b
      ON b.enabled AND b.transition = t.transition AND b.watch_kind = n.kind
     AND (b.watch_kind_version IS NULL OR b.watch_kind_version = n.kind_version)
     AND n.labels @> b.label_match
    WHERE t.fired
    ORDER BY n.id, b.name
    ON CONFLICT (dedup_token) DO NOTHING;
    IF FOUND THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_react_on_update AFTER UPDATE ON resources
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION react_on_update();

-- CREATED: every inserted resource (through the API or a composer).
CREATE OR REPLACE FUNCTION react_on_insert()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM reactor_bindings b WHERE b.enabled AND b.transition = 'created') THEN
        RETURN NULL;
    END IF;
    INSERT INTO reactor_deliveries (binding, reactor, reactor_version, transition, resource_id, generation,
                                    resource, dedup_token, shard_id)
    SELECT b.name, b.reactor, b.reactor_version, 'created', n.id, n.generation, resource_snapshot(to_jsonb(n)),
           n.id::text || ':created:' || n.generation::text || ':' || b.name, n.shard_id
    FROM new_rows n
    JOIN reactor_bindings b
      ON b.enabled AND b.transition = 'created' AND b.watch_kind = n.kind
     AND (b.watch_kind_version IS NULL OR b.watch_kind_version = n.kind_version)
     AND n.labels @> b.label_match
    ORDER BY n.id, b.name
    ON CONFLICT (dedup_token) DO NOTHING;
    IF FOUND THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_react_on_insert AFTER INSERT ON resources
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION react_on_insert();

-- DELETED: every physically removed resource (after its teardown, if it had
-- one), with its final state.
CREATE OR REPLACE FUNCTION react_on_delete()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM reactor_bindings b WHERE b.enabled AND b.transition = 'deleted') THEN
        RETURN NULL;
    END IF;
    INSERT INTO reactor_deliveries (binding, reactor, reactor_version, transition, resource_id, generation,
                                    resource, dedup_token, shard_id)
    SELECT b.name, b.reactor, b.reactor_version, 'deleted', o.id, o.generation, resource_snapshot(to_jsonb(o)),
           o.id::text || ':deleted:' || o.generation::text || ':' || b.name, o.shard_id
    FROM old_rows o
    JOIN reactor_bindings b
      ON b.enabled AND b.transition = 'deleted' AND b.watch_kind = o.kind
     AND (b.watch_kind_version IS NULL OR b.watch_kind_version = o.kind_version)
     AND o.labels @> b.label_match
    ORDER BY o.id, b.name
    ON CONFLICT (dedup_token) DO NOTHING;
    IF FOUND THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_react_on_delete AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION react_on_delete();

-- Claims up to p_limit due deliveries to the reactor (p_reactor,
-- p_version) for p_broker: those naming the version, and those naming none
-- when it is the highest applied, non-retired one. The own shard range
-- first, then the rest, oldest first within each.
CREATE OR REPLACE FUNCTION claim_deliveries(p_broker text, p_reactor text, p_version smallint, p_limit integer, p_lo smallint, p_hi smallint)
 RETURNS SETOF claimed_delivery
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_manifest bigint;
    v_deadline integer;
    v_latest smallint;
    v_claimed integer := 0;
    v_step integer;
    v_range smallint[];
BEGIN
    SELECT c.manifest_version, c.task_deadline_secs INTO v_manifest, v_deadline
    FROM kind_config c WHERE c.kind = p_reactor AND c.kind_version = p_version;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT max(c.kind_version) INTO v_latest FROM kind_config c WHERE c.kind = p_reactor AND NOT c.retired;
    FOREACH v_range SLICE 1 IN ARRAY ARRAY[[p_lo, p_hi], [0, p_lo - 1], [p_hi + 1, 255]]::smallint[] LOOP
        EXIT WHEN v_claimed >= p_limit;
        CONTINUE WHEN v_range[1] > v_range[2];
        RETURN QUERY
        WITH claimed AS (
            UPDATE reactor_deliveries d
            SET broker_id = p_broker, lease_token = gen_random_uuid(), claim_epoch = d.claim_epoch + 1,
                heartbeat_at = now(), attempts = d.attempts + 1
            WHERE d.ctid = ANY (ARRAY(
                SELECT p.ctid FROM reactor_deliveries p
                WHERE p.reactor = p_reactor AND p.broker_id IS NULL AND p.failed_at IS NULL
                  AND p.not_before <= now() AND p.shard_id BETWEEN v_range[1] AND v_range[2]
                  AND (p.reactor_version = p_version OR (p.reactor_version IS NULL AND p_version = v_latest))
                ORDER BY p.id
                LIMIT p_limit - v_claimed
                FOR UPDATE SKIP LOCKED))
            RETURNING d.*
        )
        SELECT c.id, c.lease_token, c.claim_epoch, c.attempts, c.binding, c.reactor, p_version::int4, v_manifest,
               CASE WHEN v_deadline > 0 THEN v_deadline::float8 END, c.transition, c.generation, c.resource,
               c.dedup_token
        FROM claimed c;
        GET DIAGNOSTICS v_step = ROW_COUNT;
        v_claimed := v_claimed + v_step;
    END LOOP;
END
$function$;

-- Applies the outcome of one delivery if its lease and epoch still hold:
-- a success removes it; a transient failure releases it for a retry after
-- the backoff; a terminal failure, or the reactor kind's transient attempts
-- exhausted (max_transient_attempts, 10 when unbounded: a delivery is never
-- retried forever), marks it failed and records an event on the watched
-- resource. False when the fence dropped it.
CREATE OR REPLACE FUNCTION complete_delivery(p_lease uuid, p_epoch bigint, p_error text, p_reason text, p_terminal boolean)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    d reactor_deliveries%ROWTYPE;
    v_max integer;
BEGIN
    SELECT * INTO d FROM reactor_deliveries
    WHERE lease_token = p_lease AND claim_epoch = p_epoch AND failed_at IS NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_error IS NULL THEN
        DELETE FROM reactor_deliveries WHERE id = d.id;
        RETURN true;
    END IF;
    SELECT COALESCE(NULLIF(max(c.max_transient_attempts), 0), 10) INTO v_max
    FROM kind_config c WHERE c.kind = d.reactor AND (d.reactor_version IS NULL OR c.kind_version = d.reactor_version);
    IF p_terminal OR d.attempts >= v_max THEN
        UPDATE reactor_deliveries
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, claim_epoch = claim_epoch + 1,
            failed_at = now(), last_error = p_error
        WHERE id = d.id;
        IF EXISTS (SELECT 1 FROM resources r WHERE r.id = d.resource_id) THEN
            PERFORM record_resource_event(
                d.resource_id, 'reactor', 'Warning', 'ReactorDeliveryFailed',
                format('reactor %s (binding %s) failed on %s after %s attempt(s): %s',
                       d.reactor, d.binding, d.transition, d.attempts, left(p_error, 400)),
                jsonb_build_object('binding', d.binding, 'reactor', d.reactor, 'transition', d.transition,
                                   'dedupToken', d.dedup_token, 'attempts', d.attempts, 'terminal', p_terminal,
                                   'reason', p_reason),
                'system:reactor', d.generation, 100);
        END IF;
    ELSE
        UPDATE reactor_deliveries
        SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, claim_epoch = claim_epoch + 1,
            not_before = now() + retry_delay(d.attempts), last_error = p_error
        WHERE id = d.id;
    END IF;
    RETURN true;
END
$function$;

-- An operator's redrive of deliveries that gave up: each of p_ids still
-- marked failed gets its attempts back (from 0), its error cleared, is due
-- at once and keeps its dedup token, so it is delivered once more; an event
-- on its watched resource (when that still exists) names p_actor and
-- p_reason. Returns how many were redriven.
CREATE OR REPLACE FUNCTION redrive_deliveries(p_ids uuid[], p_actor text, p_reason text)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    d record;
    v_count integer := 0;
BEGIN
    FOR d IN
        UPDATE reactor_deliveries x
        SET attempts = 0, failed_at = NULL, last_error = NULL, not_before = now(), claim_epoch = x.claim_epoch + 1
        WHERE x.id = ANY (p_ids) AND x.failed_at IS NOT NULL
        RETURNING x.resource_id, x.binding, x.reactor, x.transition, x.dedup_token, x.generation
    LOOP
        v_count := v_count + 1;
        IF EXISTS (SELECT 1 FROM resources r WHERE r.id = d.resource_id) THEN
            PERFORM record_resource_event(
                d.resource_id, 'reactor', 'Normal', 'ReactorDeliveryRedriven',
                format('reactor %s (binding %s) on %s redriven by %s: %s',
                       d.reactor, d.binding, d.transition, p_actor, left(p_reason, 400)),
                jsonb_build_object('binding', d.binding, 'reactor', d.reactor, 'transition', d.transition,
                                   'dedupToken', d.dedup_token, 'reason', left(p_reason, 1024)),
                p_actor, d.generation, 100);
        END IF;
    END LOOP;
    IF v_count > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN v_count;
END
$function$;

-- Releases delivery leases whose heartbeat is older than p_stale_secs (the
-- broker or its worker is gone); returns how many.
CREATE OR REPLACE FUNCTION reap_stale_deliveries(p_stale_secs double precision, p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_reaped integer;
BEGIN
    UPDATE reactor_deliveries d
    SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, claim_epoch = d.claim_epoch + 1
    WHERE d.ctid = ANY (ARRAY(
        SELECT s.ctid FROM reactor_deliveries s
        WHERE s.lease_token IS NOT NULL AND s.heartbeat_at < now() - make_interval(secs => p_stale_secs)
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS v_reaped = ROW_COUNT;
    IF v_reaped > 0 THEN
        PERFORM notify_throttled('work_ready', 'wake_work_ready');
    END IF;
    RETURN v_reaped;
END
$function$;

-- Takes over the delivery leases a reconnecting worker still holds and
-- returns them as claimed (their reactor version resolved as at claim).
CREATE OR REPLACE FUNCTION adopt_deliveries(p_broker text, p_tokens uuid[], p_epochs bigint[])
 RETURNS SETOF claimed_delivery
 LANGUAGE sql
AS $function$
    WITH adopted AS (
        UPDATE reactor_deliveries d SET broker_id = p_broker, heartbeat_at = now()
        FROM unnest(p_tokens, p_epochs) AS l(token, epoch)
        WHERE d.lease_token = l.token AND d.claim_epoch = l.epoch AND d.failed_at IS NULL
        RETURNING d.*
    )
    SELECT a.id, a.lease_token, a.claim_epoch, a.attempts, a.binding, a.reactor, c.kind_version::int4,
           c.manifest_version, CASE WHEN c.task_deadline_secs > 0 THEN c.task_deadline_secs::float8 END,
           a.transition, a.generation, a.resource, a.dedup_token
    FROM adopted a
    JOIN kind_config c ON c.kind = a.reactor AND c.kind_version = COALESCE(
        a.reactor_version,
        (SELECT max(x.kind_version) FROM kind_config x WHERE x.kind = a.reactor AND NOT x.retired));
$function$;
