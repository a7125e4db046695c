-- The cascade: readiness changes of resources wake their dependents and owners.

-- The drain's cascade trigger joins its transition tables. PL/pgSQL
-- analyses that statement once, and the row counts of the transition
-- tables it records then stay the planner's estimate for every later call:
-- a drainer whose first drains carried one result planned a nested loop,
-- and its 512-result drains then compared every new row with every old one
-- (262,144 comparisons, 50-74 ms of a drain; ADR 16). The join is planned with
-- nested loops off (for that statement only), so it is a hash join
-- whatever the first call saw.
CREATE OR REPLACE FUNCTION cascade_on_ready_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_synced uuid[];
    v_owners uuid[];
    v_dependents uuid[];
    v_nestloop text := current_setting('enable_nestloop');
BEGIN
    PERFORM set_config('enable_nestloop', 'off', true);
    SELECT array_agg(n.id) FILTER (WHERE n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen),
           array_agg(DISTINCT n.owner_id) FILTER (
               WHERE n.owner_id IS NOT NULL AND (
                   (n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen)
                   OR (n.failure_gen = n.generation AND o.failure_gen <> o.generation)
                   OR n.health_ok IS DISTINCT FROM o.health_ok
                   OR n.frozen_until IS DISTINCT FROM o.frozen_until
                   OR (n.deletion_requested_at IS NOT NULL AND o.deletion_requested_at IS NULL)))
    INTO v_synced, v_owners
    FROM new_rows n JOIN old_rows o ON o.id = n.id;
    PERFORM set_config('enable_nestloop', v_nestloop, true);
    IF v_synced IS NOT NULL THEN
        SELECT array_agg(DISTINCT d.dependent_id) INTO v_dependents
        FROM resource_deps d WHERE d.dependency_id = ANY (v_synced);
        PERFORM schedule_eligible(v_dependents);
    END IF;
    IF v_owners IS NOT NULL THEN
        PERFORM pend_owners(v_owners, true);
    END IF;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE TRIGGER resources_cascade AFTER UPDATE ON resources REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION cascade_on_ready_change();
