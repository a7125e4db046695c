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
    -- A composition declared as data composes, and rolls up when it has a
    -- rollup, exactly like the reactions it replaces (ADR 49).
    v_composes constant boolean := reactions_have(NEW.reactions, 'specChange', 'children')
                                   OR NEW.composition IS NOT NULL;
    v_rolls_up constant boolean := reactions_have(NEW.reactions, 'childrenSettled', 'status')
                                   OR COALESCE(NEW.composition ? 'rollup', false);
    v_data_only constant boolean := jsonb_array_length(NEW.reactions) = 0 AND NEW.composition IS NULL;
BEGIN
    INSERT INTO kind_config AS c (kind, kind_version, max_inflight, task_deadline_secs, resync_interval_secs,
                                  resync_recomposes, orphan_grace_secs, max_transient_attempts,
                                  unserved_condition_after_secs, retry_base_ms, retry_cap_ms, retry_jitter,
                                  finalizer_name, manifest_version, composes, rolls_up, data_only)
    VALUES (NEW.kind, NEW.kind_version, NEW.max_inflight, NEW.task_deadline_secs, NEW.resync_interval_secs,
            NEW.resync_recomposes, NEW.orphan_grace_secs, NEW.max_transient_attempts,
            NEW.unserved_condition_after_secs, NEW.retry_base_ms, NEW.retry_cap_ms, NEW.retry_jitter,
            NEW.finalizer_name, NEW.manifest_version, v_composes, v_rolls_up, v_data_only)
    ON CONFLICT (kind, kind_version) DO UPDATE
        SET finalizer_name = EXCLUDED.finalizer_name,
            manifest_version = EXCLUDED.manifest_version,
            composes = EXCLUDED.composes,
            rolls_up = EXCLUDED.rolls_up,
            data_only = EXCLUDED.data_only,
            updated_at = now()
        WHERE c.finalizer_name IS DISTINCT FROM EXCLUDED.finalizer_name
           OR c.manifest_version IS DISTINCT FROM EXCLUDED.manifest_version
           OR c.composes IS DISTINCT FROM EXCLUDED.composes
           OR c.rolls_up IS DISTINCT FROM EXCLUDED.rolls_up
           OR c.data_only IS DISTINCT FROM EXCLUDED.data_only;
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

-- The manifest rules behind kind_manifest's CHECK constraint, in their one
-- home: the constraint calls kind_reactions_violation (a stable wrapper,
-- 0019), which calls kind_reactions_rules. The service checks the same
-- rules first with precise messages (validate_reactions);
-- service/tests/it/manifest_rules.rs holds the two to agreement.
--
-- The shape of a reaction list: members, triggers, emits, names and
-- finalizers.
CREATE OR REPLACE FUNCTION kind_reactions_shape(p_reactions jsonb, p_finalizer_name text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
    c_triggers   CONSTANT text[] := ARRAY['specChange', 'childrenSettled', 'deleteRequested',
                                          'operation', 'reactor', 'resync'];
    c_emits      CONSTANT text[] := ARRAY['children', 'edges', 'configs', 'status', 'conditions',
                                          'finalizer', 'operationOutput', 'sideEffect'];
    c_members    CONSTANT text[] := ARRAY['name', 'trigger', 'emits', 'verb', 'finalizer'];
    -- Reaction names and verbs.
    c_handle     CONSTANT text   := '^[A-Za-z0-9_.:-]{1,63}$';
    c_handle_msg CONSTANT text   := 'must be 1-63 ASCII letters, digits, ''_'', ''-'', '':'' or ''.''';
    -- Finalizer names (the 253-character limit is checked apart).
    c_finalizer  CONSTANT text   := '^[a-z0-9]([a-z0-9./-]*[a-z0-9])?$';
    c_final_msg  CONSTANT text   := 'must be 1-253 lower-case letters, digits, ''-'', ''.'' or ''/'', '
                                    'starting and ending with a letter or digit';
    v_fin_name   CONSTANT text   := nullif(p_finalizer_name, '');
    v_reaction   jsonb;
    v_at         text;
    v_bad        text;
    -- The well-formed reactions, one array per member; verb and finalizer are
    -- NULL when absent, null or empty.
    v_name       text[]  := '{}';
    v_trigger    text[]  := '{}';
    v_emits      jsonb[] := '{}';
    v_verb       text[]  := '{}';
    v_finalizer  text[]  := '{}';
BEGIN
    -- Structure: exactly the shape serde produces for Vec<Reaction>.
    IF p_reactions IS NULL OR jsonb_typeof(p_reactions) <> 'array' THEN
        RETURN 'reactions must be a JSON array';
    END IF;
    FOR v_reaction IN SELECT value FROM jsonb_array_elements(p_reactions) LOOP
        v_at := 'reactions[' || cardinality(v_name)::text || ']';
        IF jsonb_typeof(v_reaction) <> 'object' THEN
            RETURN v_at || ' must be an object';
        END IF;
        SELECT k INTO v_bad FROM jsonb_object_keys(v_reaction) AS k WHERE k <> ALL (c_members) LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RETURN v_at || ' has an unknown member "' || v_bad || '"';
        END IF;
        IF jsonb_typeof(v_reaction -> 'name') IS DISTINCT FROM 'string' THEN
            RETURN v_at || '.name must be a string';
        END IF;
        IF jsonb_typeof(v_reaction -> 'trigger') IS DISTINCT FROM 'string'
           OR (v_reaction ->> 'trigger') <> ALL (c_triggers) THEN
            RETURN v_at || '.trigger must be a known trigger string';
        END IF;
        IF jsonb_typeof(v_reaction -> 'emits') IS DISTINCT FROM 'array' THEN
            RETURN v_at || '.emits must be an array';
        END IF;
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(v_reaction -> 'emits') AS x
                    WHERE jsonb_typeof(x) <> 'string' OR (x #>> '{}') <> ALL (c_emits)) THEN
            RETURN v_at || '.emits must hold known emit strings';
        END IF;
        IF coalesce(jsonb_typeof(v_reaction -> 'verb'), 'null') NOT IN ('string', 'null') THEN
            RETURN v_at || '.verb must be a string or null';
        END IF;
        IF coalesce(jsonb_typeof(v_reaction -> 'finalizer'), 'null') NOT IN ('string', 'null') THEN
            RETURN v_at || '.finalizer must be a string or null';
        END IF;
        v_name      := array_append(v_name, v_reaction ->> 'name');
        v_trigger   := array_append(v_trigger, v_reaction ->> 'trigger');
        v_emits     := array_append(v_emits, v_reaction -> 'emits');
        v_verb      := array_append(v_verb, nullif(v_reaction ->> 'verb', ''));
        v_finalizer := array_append(v_finalizer, nullif(v_reaction ->> 'finalizer', ''));
    END LOOP;

    -- The rules. Every breach yields (rule, reaction index or NULL, message); the
    -- first by rule, then by index, is reported. Rules that allow one reaction of
    -- a role report the later ones.
    WITH r AS (
        SELECT t.name, t.trigger, t.emits, t.verb, t.finalizer, t.n - 1 AS i
          FROM unnest(v_name, v_trigger, v_emits, v_verb, v_finalizer) WITH ORDINALITY
               AS t(name, trigger, emits, verb, finalizer, n)
    ),
    broken(rule, i, message) AS (
        -- R1: a kind without reactions is data only (migration 0025): it has
        -- no teardown, so no finalizer could ever be cleared.
        SELECT 1, NULL::bigint, 'a kind without reactions (data only) cannot have a finalizer_name'
         WHERE NOT EXISTS (SELECT 1 FROM r) AND v_fin_name IS NOT NULL
        -- R2: well-formed, unique names.
        UNION ALL
        SELECT 2, i, 'name ' || c_handle_msg FROM r WHERE name !~ c_handle
        UNION ALL
        SELECT 2, b.i, 'name "' || b.name || '" is already used by reactions[' || a.i::text || ']'
          FROM r AS a JOIN r AS b ON a.name = b.name AND a.i < b.i
        -- R3: at least one emit, none twice.
        UNION ALL
        SELECT 3, i, 'emits must not be empty' FROM r WHERE jsonb_array_length(emits) = 0
        UNION ALL
        SELECT 3, i, 'emits lists an entry twice' FROM r
         WHERE (SELECT count(DISTINCT x) FROM jsonb_array_elements(emits) AS x) <> jsonb_array_length(emits)
        -- R4: a verb exactly on operation reactions, well-formed and unique among them.
        UNION ALL
        SELECT 4, i, 'an operation reaction needs a verb' FROM r WHERE trigger = 'operation' AND verb IS NULL
        UNION ALL
        SELECT 4, i, 'verb ' || c_handle_msg FROM r WHERE trigger = 'operation' AND verb !~ c_handle
        UNION ALL
        SELECT 4, i, 'a verb is only allowed on operation reactions' FROM r
         WHERE trigger <> 'operation' AND verb IS NOT NULL
        UNION ALL
        SELECT 4, b.i, 'verb "' || b.verb || '" is already handled by reactions[' || a.i::text || ']'
          FROM r AS a JOIN r AS b
            ON a.verb = b.verb AND a.i < b.i AND a.trigger = 'operation' AND b.trigger = 'operation'
        -- R5: a reaction finalizer only on teardown reactions.
        UNION ALL
        SELECT 5, i, 'a finalizer is only allowed on deleteRequested reactions' FROM r
         WHERE finalizer IS NOT NULL AND trigger <> 'deleteRequested'
        -- R6: the composer (specChange emitting children): with status or
        -- conditions, without sideEffect, and only one.
        UNION ALL
        SELECT 6, i, 'a specChange reaction emitting children must also emit status or conditions' FROM r
         WHERE trigger = 'specChange' AND emits ? 'children' AND NOT emits ?| ARRAY['status', 'conditions']
        UNION ALL
        SELECT 6, i, 'a specChange reaction emitting children must not emit sideEffect' FROM r
         WHERE trigger = 'specChange' AND emits ? 'children' AND emits ? 'sideEffect'
        UNION ALL
        SELECT 6, b.i, 'only one specChange reaction may emit children' FROM r AS a JOIN r AS b
            ON a.i < b.i AND a.trigger = 'specChange' AND a.emits ? 'children'
                         AND b.trigger = 'specChange' AND b.emits ? 'children'
        -- R7: the rollup (childrenSettled emitting status): only one.
        UNION ALL
        SELECT 7, b.i, 'only one childrenSettled reaction may emit status' FROM r AS a JOIN r AS b
            ON a.i < b.i AND a.trigger = 'childrenSettled' AND a.emits ? 'status'
                         AND b.trigger = 'childrenSettled' AND b.emits ? 'status'
        -- R8: the reactor: emits exactly ["sideEffect"], only one, and alone.
        UNION ALL
        SELECT 8, i, 'a reactor reaction must emit exactly ["sideEffect"]' FROM r
         WHERE trigger = 'reactor' AND emits <> '["sideEffect"]'::jsonb
        UNION ALL
        SELECT 8, b.i, 'a kind has at most one reactor reaction' FROM r AS a JOIN r AS b
            ON a.i < b.i AND a.trigger = 'reactor' AND b.trigger = 'reactor'
        UNION ALL
        SELECT 8, i, 'a kind with a reactor reaction declares only reactor reactions' FROM r
         WHERE trigger <> 'reactor' AND EXISTS (SELECT 1 FROM r AS x WHERE x.trigger = 'reactor')
        -- R9: a teardown needs a finalizer to clear.
        UNION ALL
        SELECT 9, i, 'a deleteRequested reaction needs a finalizer (its own or finalizer_name)' FROM r
         WHERE trigger = 'deleteRequested' AND finalizer IS NULL AND v_fin_name IS NULL
        -- R10: finalizer names.
        UNION ALL
        SELECT 10, NULL, 'finalizer_name ' || c_final_msg
         WHERE v_fin_name IS NOT NULL AND NOT (char_length(v_fin_name) <= 253 AND v_fin_name ~ c_finalizer)
        UNION ALL
        SELECT 10, i, 'finalizer ' || c_final_msg FROM r
         WHERE finalizer IS NOT NULL AND NOT (char_length(finalizer) <= 253 AND finalizer ~ c_finalizer)
    )
    SELECT 'R' || rule::text || ': ' || coalesce('reactions[' || i::text || ']: ', '') || message
      INTO v_bad
      FROM broken
     ORDER BY rule, i NULLS FIRST
     LIMIT 1;
    RETURN v_bad;
END
$function$;

-- Operation reactions may declare an input schema ("inputSchema", an
-- object) and emit only operationOutput, status, conditions or sideEffect;
-- the rest of the rules are the shape's, checked on the reactions without
-- their input schemas. The schema at creation is pinned, so the call
-- resolves under an empty search_path too (as while pg_dump restores the
-- table).
CREATE OR REPLACE FUNCTION kind_reactions_rules(p_reactions jsonb, p_finalizer_name text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
 SET search_path FROM CURRENT
AS $function$
DECLARE
    v_reaction jsonb;
    v_at       text;
    v_i        integer := 0;
BEGIN
    IF jsonb_typeof(p_reactions) IS DISTINCT FROM 'array' THEN
        RETURN kind_reactions_shape(p_reactions, p_finalizer_name);
    END IF;
    FOR v_reaction IN SELECT value FROM jsonb_array_elements(p_reactions) LOOP
        v_at := 'reactions[' || v_i::text || ']';
        v_i := v_i + 1;
        CONTINUE WHEN jsonb_typeof(v_reaction) IS DISTINCT FROM 'object';
        IF coalesce(jsonb_typeof(v_reaction -> 'inputSchema'), 'null') NOT IN ('object', 'null') THEN
            RETURN v_at || '.inputSchema must be an object or null';
        END IF;
        IF jsonb_typeof(v_reaction -> 'inputSchema') = 'object'
           AND (v_reaction ->> 'trigger') IS DISTINCT FROM 'operation' THEN
            RETURN v_at || ': an input schema is only allowed on operation reactions';
        END IF;
        IF (v_reaction ->> 'trigger') = 'operation' AND jsonb_typeof(v_reaction -> 'emits') = 'array'
           AND EXISTS (SELECT 1 FROM jsonb_array_elements(v_reaction -> 'emits') AS x
                       WHERE (x #>> '{}') NOT IN ('operationOutput', 'status', 'conditions', 'sideEffect')
                         AND (x #>> '{}') IN ('children', 'edges', 'configs', 'finalizer')) THEN
            RETURN v_at || ': an operation reaction emits only operationOutput, status, conditions or sideEffect';
        END IF;
    END LOOP;
    RETURN kind_reactions_shape(
        (SELECT COALESCE(jsonb_agg(CASE WHEN jsonb_typeof(t.r) = 'object' THEN t.r - 'inputSchema' ELSE t.r END
                                   ORDER BY t.n), '[]'::jsonb)
         FROM jsonb_array_elements(p_reactions) WITH ORDINALITY AS t(r, n)),
        p_finalizer_name);
END
$function$;
