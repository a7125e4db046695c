-- The change log: positions, the stamp on every resource change, the log
-- triggers, the watch hub's page read and retention.

-- Every transaction with an id below this has finished (committed or rolled
-- back): change-log rows below it can no longer appear behind a reader.
CREATE OR REPLACE FUNCTION change_frontier()
 RETURNS bigint
 LANGUAGE sql
AS $function$ SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint $function$;

-- The watch hub's change-log page with a cached plan. Its position bound
-- makes the planner expect a custom plan to be cheaper than a generic one,
-- so the statement was planned anew on every read (0.42 ms of planning per
-- page against a few hundredths of a millisecond of reading, in the
-- statement log of idle applies), and the hub reads a page per wake-up.
--
-- Still one statement, so the frontier is the xmin of the very snapshot the
-- entries are read in (see store::changes).
CREATE OR REPLACE FUNCTION change_page(p_txid bigint, p_seq bigint, p_limit bigint)
 RETURNS TABLE(frontier bigint, txid bigint, seq bigint, resource_id uuid, kind text, change text, image jsonb)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH f AS MATERIALIZED (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS frontier)
    SELECT f.frontier, c.txid, c.seq, c.resource_id, c.kind, c.change, c.image
    FROM f LEFT JOIN LATERAL (
        SELECT l.txid, l.seq, l.resource_id, l.kind, l.change, l.image FROM resource_changes l
        WHERE (l.txid, l.seq) > (p_txid, p_seq) AND l.txid < f.frontier
        ORDER BY l.txid, l.seq LIMIT p_limit) c ON true
    ORDER BY c.txid, c.seq;
END
$function$;

-- Stamps every inserted or changed row with a fresh change-log position.
-- Writers gate their UPDATEs on an actual difference, so an identical
-- rewrite never reaches this trigger and never moves the position.
CREATE OR REPLACE FUNCTION stamp_resource_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    NEW.rv_txid := current_txid();
    NEW.rv_seq := nextval('change_seq');
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$function$;

CREATE OR REPLACE TRIGGER resources_stamp_change BEFORE UPDATE ON resources
    FOR EACH ROW EXECUTE FUNCTION stamp_resource_change();

CREATE OR REPLACE FUNCTION log_resource_inserts()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change)
    SELECT rv_txid, rv_seq, id, kind, 'added' FROM new_rows;
    IF FOUND THEN
        PERFORM notify_throttled('resource_changed', 'wake_resource_changed');
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_log_inserts AFTER INSERT ON resources REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_resource_inserts();

CREATE OR REPLACE FUNCTION log_resource_updates()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change)
    SELECT rv_txid, rv_seq, id, kind, 'modified' FROM new_rows;
    IF FOUND THEN
        PERFORM notify_throttled('resource_changed', 'wake_resource_changed');
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_log_updates AFTER UPDATE ON resources REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_resource_updates();

CREATE OR REPLACE FUNCTION log_resource_deletes()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO resource_changes (txid, seq, resource_id, kind, change, image)
    SELECT current_txid(), nextval('change_seq'), o.id, o.kind, 'deleted', to_jsonb(o)
    FROM old_rows o;
    IF FOUND THEN
        PERFORM notify_throttled('resource_changed', 'wake_resource_changed');
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_log_deletes AFTER DELETE ON resources REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION log_resource_deletes();

CREATE OR REPLACE FUNCTION trim_resource_changes(p_max_age_secs double precision, p_batch integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    trimmed integer;
BEGIN
    WITH gone AS (
        DELETE FROM resource_changes
        WHERE (txid, seq) IN (
            SELECT txid, seq FROM resource_changes
            ORDER BY txid, seq LIMIT p_batch)
          AND recorded_at < now() - make_interval(secs => p_max_age_secs)
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
$function$;
