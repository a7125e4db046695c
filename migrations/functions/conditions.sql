-- Resource conditions.

-- Writes a batch of conditions ([{type, status, reason, message,
-- livenessMs}]) for one resource. Only what differs is written; when a
-- change is visible to readers, the resource row is touched so the change
-- gets a change-log position. A liveness condition (livenessMs set) is also
-- renewed when less than half of its window is left, and a renewal of one
-- that had lapsed (read as Unknown) counts as visible. Returns how many
-- conditions changed visibly.
CREATE OR REPLACE FUNCTION set_resource_conditions(p_id uuid, p_generation bigint, p_conditions jsonb)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    changed integer;
BEGIN
    -- The last report of a type wins (stages of one task may repeat one).
    WITH incoming AS (
        SELECT DISTINCT ON (c->>'type')
               c->>'type' AS type, c->>'status' AS status,
               COALESCE(c->>'reason', '') AS reason, COALESCE(c->>'message', '') AS message,
               (c->>'livenessMs')::bigint AS liveness_ms
        FROM jsonb_array_elements(p_conditions) WITH ORDINALITY AS t(c, n)
        ORDER BY c->>'type', n DESC
    ),
    compared AS (
        SELECT i.*,
               rc.resource_id IS NULL
               OR (rc.status, rc.reason, rc.message, rc.observed_generation, rc.liveness_ms)
                  IS DISTINCT FROM (i.status, i.reason, i.message, p_generation, i.liveness_ms)
               OR rc.expires_at <= now() AS visible,
               i.liveness_ms IS NOT NULL
               AND rc.expires_at < now() + make_interval(secs => i.liveness_ms / 2000.0) AS renew
        FROM incoming i
        LEFT JOIN resource_conditions rc ON rc.resource_id = p_id AND rc.type = i.type
    ),
    written AS (
        INSERT INTO resource_conditions AS rc
            (resource_id, type, status, reason, message, observed_generation, liveness_ms, expires_at)
        SELECT p_id, type, status, reason, message, p_generation, liveness_ms,
               now() + make_interval(secs => liveness_ms / 1000.0)
        FROM compared
        WHERE visible OR renew
        ON CONFLICT (resource_id, type) DO UPDATE
            SET status = EXCLUDED.status,
                reason = EXCLUDED.reason,
                message = EXCLUDED.message,
                observed_generation = EXCLUDED.observed_generation,
                liveness_ms = EXCLUDED.liveness_ms,
                expires_at = EXCLUDED.expires_at,
                -- A lapsed report read as Unknown: renewing it is a transition.
                last_transition_at = CASE WHEN rc.status IS DISTINCT FROM EXCLUDED.status OR rc.expires_at <= now()
                                          THEN now() ELSE rc.last_transition_at END,
                updated_at = CASE WHEN (rc.status, rc.reason, rc.message)
                                       IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message)
                                       OR rc.expires_at <= now()
                                  THEN now() ELSE rc.updated_at END
        RETURNING rc.type
    )
    SELECT count(*) INTO changed FROM written w JOIN compared c ON c.type = w.type WHERE c.visible;
    IF changed > 0 THEN
        UPDATE resources SET updated_at = now() WHERE id = p_id;
    END IF;
    RETURN changed;
END
$function$;
