-- Watch support: throttled wake-ups for change-log readers, and the horizons
-- below which trimmed history can no longer be resumed from.

-- ---------------------------------------------------------------------------
-- Throttled NOTIFY
-- ---------------------------------------------------------------------------

-- pg_notify serialises committing transactions on the notification queue, so
-- writers wake readers at most about once per 50 ms window per channel. The
-- gate is a sequence because sequences are not transactional: a long
-- transaction that claimed a window cannot hide that claim from others (a
-- row would stay locked or invisible until it commits). A wake is only a
-- latency hint; readers keep polling briefly after each wake and on a
-- failsafe interval, so a skipped notification costs latency, never data.
CREATE SEQUENCE wake_resource_changed AS bigint MINVALUE 0 START 0;
CREATE SEQUENCE wake_event_changed AS bigint MINVALUE 0 START 0;

CREATE FUNCTION notify_throttled(p_channel text, p_gate regclass) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    bucket bigint := floor(extract(epoch FROM clock_timestamp()) * 20)::bigint;
BEGIN
    IF bucket > COALESCE(pg_sequence_last_value(p_gate), 0) THEN
        PERFORM setval(p_gate, bucket);
        PERFORM pg_notify(p_channel, '');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION log_resource_inserts() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change)
    SELECT rv_txid, rv_seq, id, kind, 'added' FROM new_rows;
    IF FOUND THEN
        PERFORM notify_throttled('resource_changed', 'wake_resource_changed');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION log_resource_updates() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change)
    SELECT rv_txid, rv_seq, id, kind, 'modified' FROM new_rows;
    IF FOUND THEN
        PERFORM notify_throttled('resource_changed', 'wake_resource_changed');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION log_resource_deletes() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change, image)
    SELECT current_txid(), nextval('change_seq'), o.id, o.kind, 'deleted', to_jsonb(o)
    FROM old_rows o;
    IF FOUND THEN
        PERFORM notify_throttled('resource_changed', 'wake_resource_changed');
    END IF;
    RETURN NULL;
END
$$;

-- ---------------------------------------------------------------------------
-- Horizons
-- ---------------------------------------------------------------------------

-- The newest change-log position that retention has deleted. A watch may
-- resume only from a position at or above it; below it, changes are gone.
CREATE TABLE watch_horizon (
    log  text   PRIMARY KEY,
    txid bigint NOT NULL DEFAULT 0,
    seq  bigint NOT NULL DEFAULT 0
);
INSERT INTO watch_horizon (log) VALUES ('resource_changes');

-- Deletes up to p_batch change-log entries older than p_max_age_secs (oldest
-- positions first) and raises the horizon past them, in one statement.
CREATE FUNCTION trim_resource_changes(p_max_age_secs double precision, p_batch integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    trimmed integer;
BEGIN
    WITH gone AS (
        DELETE FROM resource_changes
        WHERE (txid, seq) IN (
            SELECT txid, seq FROM resource_changes
            WHERE recorded_at < now() - make_interval(secs => p_max_age_secs)
            ORDER BY txid, seq LIMIT p_batch)
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

-- Per resource: the newest event-log position among its deleted event runs.
-- An event watch may resume only from a position at or above it.
CREATE TABLE event_horizon (
    resource_id uuid   PRIMARY KEY REFERENCES resources (id) ON DELETE CASCADE,
    txid        bigint NOT NULL,
    seq         bigint NOT NULL
);

-- Raises the event horizon of each resource to the newest position among
-- the given deleted runs.
CREATE FUNCTION raise_event_horizons(p_deleted jsonb) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO event_horizon AS h (resource_id, txid, seq)
    SELECT DISTINCT ON (resource_id) resource_id, txid, seq
    FROM jsonb_to_recordset(p_deleted) AS d(resource_id uuid, txid bigint, seq bigint)
    ORDER BY resource_id, txid DESC, seq DESC
    ON CONFLICT (resource_id) DO UPDATE SET txid = EXCLUDED.txid, seq = EXCLUDED.seq
        WHERE (EXCLUDED.txid, EXCLUDED.seq) > (h.txid, h.seq)
$$;

-- Event runs are trimmed through these functions (not plain DELETEs) so the
-- horizons always move with them.
CREATE FUNCTION trim_event_runs_by_age(p_max_age_secs double precision, p_batch integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    deleted jsonb;
BEGIN
    WITH gone AS (
        DELETE FROM resource_events WHERE id IN (
            SELECT id FROM resource_events WHERE last_at < now() - make_interval(secs => p_max_age_secs)
            ORDER BY last_at LIMIT p_batch)
        RETURNING resource_id, ev_txid AS txid, ev_seq AS seq
    )
    SELECT COALESCE(jsonb_agg(to_jsonb(gone)), '[]'::jsonb) INTO deleted FROM gone;
    PERFORM raise_event_horizons(deleted);
    RETURN jsonb_array_length(deleted);
END
$$;

CREATE FUNCTION trim_event_timelines(p_keep_runs integer, p_batch integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    deleted jsonb;
BEGIN
    WITH gone AS (
        DELETE FROM resource_events WHERE id IN (
            SELECT id FROM (
                SELECT id, row_number() OVER (PARTITION BY resource_id, category ORDER BY run_seq DESC) AS rank
                FROM resource_events) ranked
            WHERE rank > p_keep_runs LIMIT p_batch)
        RETURNING resource_id, ev_txid AS txid, ev_seq AS seq
    )
    SELECT COALESCE(jsonb_agg(to_jsonb(gone)), '[]'::jsonb) INTO deleted FROM gone;
    PERFORM raise_event_horizons(deleted);
    RETURN jsonb_array_length(deleted);
END
$$;

-- Recording an event now also wakes event watchers, and trims through the
-- horizon-keeping path.
CREATE OR REPLACE FUNCTION record_resource_event(
    p_id uuid, p_category text, p_type text, p_reason text, p_message text,
    p_detail jsonb, p_actor text, p_generation bigint, p_keep_runs integer
) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    latest resource_events%ROWTYPE;
    run_id uuid;
    deleted jsonb;
BEGIN
    -- Serialise writers of one timeline so two events cannot both start a run.
    PERFORM pg_advisory_xact_lock(hashtextextended('events:' || p_id::text || ':' || p_category, 0));
    PERFORM notify_throttled('event_changed', 'wake_event_changed');
    SELECT * INTO latest FROM resource_events
    WHERE resource_id = p_id AND category = p_category
    ORDER BY run_seq DESC LIMIT 1;
    IF FOUND AND latest.type = p_type AND latest.reason = p_reason THEN
        UPDATE resource_events
        SET count = count + 1, last_at = now(), message = p_message, detail = p_detail,
            actor = p_actor, generation = p_generation,
            ev_txid = current_txid(), ev_seq = nextval('change_seq')
        WHERE id = latest.id;
        RETURN latest.id;
    END IF;
    INSERT INTO resource_events (resource_id, category, type, reason, message, detail, actor, generation)
    VALUES (p_id, p_category, p_type, p_reason, p_message, p_detail, p_actor, p_generation)
    RETURNING id INTO run_id;
    IF p_keep_runs > 0 THEN
        WITH gone AS (
            DELETE FROM resource_events
            WHERE id IN (SELECT id FROM resource_events
                         WHERE resource_id = p_id AND category = p_category
                         ORDER BY run_seq DESC OFFSET p_keep_runs)
            RETURNING resource_id, ev_txid AS txid, ev_seq AS seq
        )
        SELECT COALESCE(jsonb_agg(to_jsonb(gone)), '[]'::jsonb) INTO deleted FROM gone;
        PERFORM raise_event_horizons(deleted);
    END IF;
    RETURN run_id;
END
$$;
