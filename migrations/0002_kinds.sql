-- Kind manifests (what a kind declares) and kind configuration (the
-- operator's policy per kind version, seeded from the manifest).

-- The manifest rules, behind kind_manifest's CHECK constraint; the service
-- checks the same rules first with precise messages (validate_reactions).
-- The constraint needs it at CREATE TABLE time, so it lives here, not in
-- functions/: changing it needs a new migration.
CREATE OR REPLACE FUNCTION kind_reactions_violation(p_reactions jsonb, p_finalizer_name text)
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
$function$;

CREATE TABLE kind_manifest (
    kind                   text        NOT NULL,
    kind_version           smallint    NOT NULL CHECK (kind_version >= 1),
    description            text        NOT NULL DEFAULT '',
    spec_schema            jsonb,
    status_schema          jsonb,
    config_schema          jsonb,
    reactions              jsonb       NOT NULL,
    finalizer_name         text,
    -- Policy seeds: copied into kind_config the first time only.
    max_inflight           integer     NOT NULL DEFAULT 0 CHECK (max_inflight >= 0),
    task_deadline_secs     integer     NOT NULL DEFAULT 0 CHECK (task_deadline_secs >= 0),
    resync_interval_secs   integer     NOT NULL DEFAULT 0 CHECK (resync_interval_secs >= 0),
    resync_recomposes      boolean     NOT NULL DEFAULT false,
    orphan_grace_secs      integer     NOT NULL DEFAULT 0 CHECK (orphan_grace_secs >= 0),
    max_transient_attempts integer     NOT NULL DEFAULT 0 CHECK (max_transient_attempts >= 0),
    -- Content hash of schemas, reactions and finalizer (computed by the service).
    manifest_version       bigint      NOT NULL CHECK (manifest_version > 0),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, kind_version),
    -- The service validates first with precise messages; this keeps the
    -- database honest if anything ever bypasses it.
    CONSTRAINT kind_manifest_reactions_legal CHECK (kind_reactions_violation(reactions, finalizer_name) IS NULL)
);

CREATE TABLE kind_config (
    kind                   text        NOT NULL,
    kind_version           smallint    NOT NULL,
    max_inflight           integer     NOT NULL DEFAULT 0 CHECK (max_inflight >= 0),
    task_deadline_secs     integer     NOT NULL DEFAULT 0 CHECK (task_deadline_secs >= 0),
    resync_interval_secs   integer     NOT NULL DEFAULT 0 CHECK (resync_interval_secs >= 0),
    resync_recomposes      boolean     NOT NULL DEFAULT false,
    orphan_grace_secs      integer     NOT NULL DEFAULT 0 CHECK (orphan_grace_secs >= 0),
    max_transient_attempts integer     NOT NULL DEFAULT 0 CHECK (max_transient_attempts >= 0),
    -- Retired versions accept no new resources and no flips; existing ones keep reconciling.
    retired                boolean     NOT NULL DEFAULT false,
    -- Mirrors of the manifest, so in-database sweeps need not read manifests.
    finalizer_name         text,
    manifest_version       bigint      NOT NULL,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    -- Pipeline mirrors of the manifest's reactions.
    composes               boolean     NOT NULL DEFAULT false,
    rolls_up               boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (kind, kind_version),
    FOREIGN KEY (kind, kind_version) REFERENCES kind_manifest (kind, kind_version) ON DELETE CASCADE
);
