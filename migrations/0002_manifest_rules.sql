-- Reaction legality rules of kind manifests, enforced by the database itself.
--
-- kind_reactions_violation() is the SQL twin of the service's validate_reactions()
-- (domain/manifest.rs). The kind_manifest table checks it in a constraint,
--     CHECK (kind_reactions_violation(reactions, finalizer_name) IS NULL),
-- so an illegal reaction set can never be stored, even by a writer that skipped
-- the Rust validation. The two implementations must accept and refuse exactly
-- the same reaction sets: change them together (an agreement test runs both over
-- the same table of cases).
--
-- p_reactions is the serde JSON of Vec<Reaction>:
--     [{"name": "work", "trigger": "specChange", "emits": ["status"]}, ...]
-- with optional "verb" and "finalizer" members (absent, null or a string; the
-- empty string means absent, as does an empty p_finalizer_name). Anything else
-- is refused: a non-array, a non-object element, unknown members, missing or
-- mistyped name/trigger/emits, unknown trigger or emit strings.
--
-- Returns NULL when the reactions are legal, otherwise a short message naming
-- the first broken rule (structure first, then R1 to R10 in order):
--   R1  at least one reaction.
--   R2  name: 1-63 ASCII letters, digits, '_', '-', ':', '.'; unique.
--   R3  emits: at least one, no duplicates.
--   R4  verb: required (same syntax as name) and unique for trigger operation;
--       absent or empty for every other trigger.
--   R5  a reaction's finalizer only with trigger deleteRequested.
--   R6  a specChange reaction emitting children must also emit status or
--       conditions and must not emit sideEffect; at most one such reaction.
--   R7  at most one childrenSettled reaction emitting status.
--   R8  at most one reactor reaction; it emits exactly ["sideEffect"]; a kind
--       with a reactor reaction has only reactor reactions.
--   R9  deleteRequested needs a finalizer: its own or p_finalizer_name.
--   R10 finalizer names: 1-253 of lower-case letters, digits, '-', '.', '/',
--       starting and ending with a letter or digit.
--
-- The body uses only immutable built-ins (not format() or array_to_string(),
-- which are merely stable) and no other object of this schema, so it behaves the
-- same under any search_path (pg_dump restores run with an empty one).

CREATE FUNCTION kind_reactions_violation(p_reactions jsonb, p_finalizer_name text)
    RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
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
        -- R1: at least one reaction.
        SELECT 1, NULL::bigint, 'a kind needs at least one reaction'
         WHERE NOT EXISTS (SELECT 1 FROM r)
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
$$;
