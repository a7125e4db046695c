-- Resource conditions.

-- Writes a batch of conditions ([{type, status, reason, message}]) for one
-- resource. Only what differs is written; when anything did, the resource row
-- is touched so the change gets a change-log position. Returns how many
-- conditions changed.
CREATE OR REPLACE FUNCTION set_resource_conditions(p_id uuid, p_generation bigint, p_conditions jsonb)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    changed integer;
BEGIN
    WITH incoming AS (
        SELECT c->>'type' AS type, c->>'status' AS status,
               COALESCE(c->>'reason', '') AS reason, COALESCE(c->>'message', '') AS message
        FROM jsonb_array_elements(p_conditions) AS c
    ),
    written AS (
        INSERT INTO resource_conditions AS rc (resource_id, type, status, reason, message, observed_generation)
        SELECT p_id, type, status, reason, message, p_generation FROM incoming
        ON CONFLICT (resource_id, type) DO UPDATE
            SET status = EXCLUDED.status,
                reason = EXCLUDED.reason,
                message = EXCLUDED.message,
                observed_generation = EXCLUDED.observed_generation,
                last_transition_at = CASE WHEN rc.status IS DISTINCT FROM EXCLUDED.status
                                          THEN now() ELSE rc.last_transition_at END,
                updated_at = CASE WHEN (rc.status, rc.reason, rc.message)
                                       IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message)
                                  THEN now() ELSE rc.updated_at END
            WHERE (rc.status, rc.reason, rc.message, rc.observed_generation)
                  IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message, EXCLUDED.observed_generation)
        RETURNING 1
    )
    SELECT count(*) INTO changed FROM written;
    IF changed > 0 THEN
        UPDATE resources SET updated_at = now() WHERE id = p_id;
    END IF;
    RETURN changed;
END
$function$;
