-- Events: recording runs, event horizons and retention.

-- Records an event: extends the latest run of the resource's timeline (its
-- category) when type and reason match, else starts a run; wakes event
-- watchers, and trims old runs through the horizon-keeping path.
CREATE OR REPLACE FUNCTION record_resource_event(p_id uuid, p_category text, p_type text, p_reason text, p_message text, p_detail jsonb, p_actor text, p_generation bigint, p_keep_runs integer)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
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
$function$;

-- Records the events a worker reported with a result, in order: an array
-- of {category, type, reason, message, detail, actor} the broker checked
-- (domain::event::ReportedEvent). NULL or an empty array records nothing.
CREATE OR REPLACE FUNCTION record_worker_events(p_id uuid, p_generation bigint, p_events jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    e jsonb;
BEGIN
    IF p_events IS NULL OR jsonb_typeof(p_events) <> 'array' THEN
        RETURN;
    END IF;
    FOR e IN SELECT value FROM jsonb_array_elements(p_events) LOOP
        PERFORM record_resource_event(
            p_id, e->>'category', e->>'type', e->>'reason', COALESCE(e->>'message', ''),
            NULLIF(e->'detail', 'null'::jsonb), COALESCE(e->>'actor', 'worker'), p_generation, 100);
    END LOOP;
END
$function$;

-- Raises the event horizon of each resource to the newest position among
-- the given deleted runs.
CREATE OR REPLACE FUNCTION raise_event_horizons(p_deleted jsonb)
 RETURNS void
 LANGUAGE sql
AS $function$
    INSERT INTO event_horizon AS h (resource_id, txid, seq)
    SELECT DISTINCT ON (resource_id) resource_id, txid, seq
    FROM jsonb_to_recordset(p_deleted) AS d(resource_id uuid, txid bigint, seq bigint)
    ORDER BY resource_id, txid DESC, seq DESC
    ON CONFLICT (resource_id) DO UPDATE SET txid = EXCLUDED.txid, seq = EXCLUDED.seq
        WHERE (EXCLUDED.txid, EXCLUDED.seq) > (h.txid, h.seq)
$function$;

CREATE OR REPLACE FUNCTION trim_event_timelines(p_keep_runs integer, p_batch integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;

-- Event runs are trimmed through these functions (not plain DELETEs) so the
-- horizons always move with them.
CREATE OR REPLACE FUNCTION trim_event_runs_by_age(p_max_age_secs double precision, p_batch integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;
