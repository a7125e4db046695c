-- Kinds: manifest rules shared by the pipeline, the per-kind advisory lock,
-- and the mirrors of a manifest in kind_config.

-- Whether a stored reaction list has a reaction with this trigger emitting this part.
CREATE OR REPLACE FUNCTION reactions_have(p_reactions jsonb, p_trigger text, p_emit text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT EXISTS (SELECT 1 FROM jsonb_array_elements(p_reactions) AS r
                   WHERE r->>'trigger' = p_trigger AND (r->'emits') ? p_emit)
$function$;

-- The advisory lock key of one (kind, kind_version). Resource writes hold it
-- shared for their transaction; manifest changes hold it exclusively, so a
-- manifest change sees every resource written under the previous manifest
-- (and can check them against the new schema), and no write validates
-- against a manifest that is being replaced. Advisory locks live in shared
-- memory: thousands of concurrent writers share one without touching a row.
CREATE OR REPLACE FUNCTION kind_lock_key(p_kind text, p_kind_version integer)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$ SELECT hashtextextended('kind:' || p_kind || ':' || p_kind_version::text, 0) $function$;

-- A resource write takes its kind version's shared lock and then reads the
-- manifest version in force. Both in one call: the read is a statement of
-- its own inside this VOLATILE function, so it runs on a snapshot taken
-- after the lock was granted and sees any manifest change that held the lock
-- before (a single SQL statement would read on a snapshot taken before it
-- waited for the lock).
CREATE OR REPLACE FUNCTION lock_kind_state(p_kind text, p_kind_version smallint)
 RETURNS TABLE(manifest_version bigint, retired boolean)
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(kind_lock_key(p_kind, p_kind_version));
    RETURN QUERY
        SELECT m.manifest_version, COALESCE(c.retired, false)
        FROM kind_manifest m LEFT JOIN kind_config c USING (kind, kind_version)
        WHERE m.kind = p_kind AND m.kind_version = p_kind_version;
END
$function$;

CREATE OR REPLACE FUNCTION sync_kind_config_from_manifest()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_composes constant boolean := reactions_have(NEW.reactions, 'specChange', 'children');
    v_rolls_up constant boolean := reactions_have(NEW.reactions, 'childrenSettled', 'status');
BEGIN
    INSERT INTO kind_config AS c (kind, kind_version, max_inflight, task_deadline_secs, resync_interval_secs,
                                  resync_recomposes, orphan_grace_secs, max_transient_attempts,
                                  finalizer_name, manifest_version, composes, rolls_up)
    VALUES (NEW.kind, NEW.kind_version, NEW.max_inflight, NEW.task_deadline_secs, NEW.resync_interval_secs,
            NEW.resync_recomposes, NEW.orphan_grace_secs, NEW.max_transient_attempts,
            NEW.finalizer_name, NEW.manifest_version, v_composes, v_rolls_up)
    ON CONFLICT (kind, kind_version) DO UPDATE
        SET finalizer_name = EXCLUDED.finalizer_name,
            manifest_version = EXCLUDED.manifest_version,
            composes = EXCLUDED.composes,
            rolls_up = EXCLUDED.rolls_up,
            updated_at = now()
        WHERE c.finalizer_name IS DISTINCT FROM EXCLUDED.finalizer_name
           OR c.manifest_version IS DISTINCT FROM EXCLUDED.manifest_version
           OR c.composes IS DISTINCT FROM EXCLUDED.composes
           OR c.rolls_up IS DISTINCT FROM EXCLUDED.rolls_up;
    PERFORM pg_notify('kind_manifest_changed', NEW.kind || ':' || NEW.kind_version::text);
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER kind_manifest_sync_config AFTER INSERT OR UPDATE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION sync_kind_config_from_manifest();

CREATE OR REPLACE FUNCTION notify_kind_manifest_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('kind_manifest_changed', OLD.kind || ':' || OLD.kind_version::text);
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER kind_manifest_deleted AFTER DELETE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION notify_kind_manifest_deleted();
