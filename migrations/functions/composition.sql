-- Composition: a composer's desired children, edges and provider configs.

-- Applies a composer's complete desired composition: the children (created,
-- updated or dropped) and the dependency edges between them, JSON arrays of
-- the shapes composition_child and composition_edge (0010). In particular:
-- - a child being deleted is left alone (its teardown is under way), and
--   the edges of dropped children are kept until they are gone, so what is
--   pruned together is torn down in dependency order;
-- - re-emitting an orphaned child clears its mark without a generation bump
--   (a quarantine is never lifted by a re-emit);
-- - a dropped child of a kind with orphan_grace_secs > 0 is marked Orphaned
--   (frozen_until = now + grace) instead of being torn down; one already
--   orphaned or quarantined is left as it is;
-- - any other dropped child of a kind with a finalizer, or one that owns
--   children, goes through the deletion cascade (its teardown tree is torn
--   down in order); the rest are removed;
-- - the configs (composition_config, 0011) are upserted as owned by
--   p_owner before the children, so children can reference them; a name
--   held by a config applied through the API or owned by another resource
--   refuses the composition. A changed config re-pends the resources that
--   reference it, a changed default is announced to the brokers, and a
--   config no longer emitted is deleted, unless a resource still references
--   it (a dropped child still being torn down): it then stays, owned, until
--   a later composition or its owner's removal takes it;
-- - a child's "providerConfig" must name one of these configs or a config
--   applied through the API, of the child's own kind and version; a child
--   whose reference changed is re-pended like a config change (no
--   generation bump).
CREATE OR REPLACE FUNCTION apply_composition(p_owner uuid, p_generation bigint, p_children jsonb, p_edges jsonb, p_configs jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_owner resources%ROWTYPE;
    v_root uuid;
    v_problem text;
    v_created uuid[];
    v_desired uuid[];
    v_updated integer;
    v_readopted uuid[];
    v_orphaned integer := 0;
    v_marked integer := 0;
    v_removed integer;
    v_child record;
    v_tree uuid[];
    v_trees uuid[] := '{}';
    v_configs_changed text[];
    v_configs_created integer := 0;
    v_configs_pruned integer := 0;
    v_defaults text[] := '{}';
    v_moved uuid[];
    v_pair record;
BEGIN
    SELECT * INTO v_owner FROM resources WHERE id = p_owner FOR NO KEY UPDATE;
    -- Composing the generation already composed is a resync's recompose (the
    -- caller holds the task's fence); only an older generation is stale.
    IF NOT FOUND OR v_owner.generation <> p_generation OR v_owner.composed_gen > p_generation
       OR v_owner.deletion_requested_at IS NOT NULL THEN
        RETURN jsonb_build_object('stale', true);
    END IF;
    v_root := COALESCE(v_owner.root_id, v_owner.id);

    SELECT c.kind || '/' || c.name INTO v_problem
    FROM jsonb_populate_recordset(NULL::composition_child, p_children) c
    JOIN resources r ON r.kind = c.kind AND r.name = c.name
    WHERE r.owner_id IS DISTINCT FROM p_owner
    LIMIT 1;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'CV001',
            MESSAGE = 'child ' || v_problem || ' already exists and is not owned by this resource';
    END IF;

    -- Configs first: children may reference them.
    SELECT c.name INTO v_problem
    FROM jsonb_populate_recordset(NULL::composition_config, p_configs) c
    JOIN provider_configs pc ON pc.name = c.name
    WHERE pc.owner_id IS DISTINCT FROM p_owner
    LIMIT 1;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'CV001',
            MESSAGE = 'provider config ' || v_problem || ' already exists and is not owned by this resource';
    END IF;
    SELECT c.name INTO v_problem
    FROM jsonb_populate_recordset(NULL::composition_config, p_configs) c
    JOIN provider_configs pc ON pc.name = c.name
    WHERE (pc.kind, pc.kind_version) IS DISTINCT FROM (c.kind, c."kindVersion")
    LIMIT 1;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'CV001',
            MESSAGE = 'provider config ' || v_problem || ' exists for another kind or kind version (they are immutable)';
    END IF;
    -- Default changes of a pair are serialised with the API's (lock_config_pair).
    PERFORM lock_config_pair(x.kind, x.version)
    FROM (SELECT DISTINCT c.kind, c."kindVersion" AS version
          FROM jsonb_populate_recordset(NULL::composition_config, p_configs) c
          WHERE COALESCE(c."isDefault", false)
          ORDER BY 1, 2) x;
    SELECT c.name || ' (the default of ' || c.kind || ' version ' || c."kindVersion" || ' is ' || pc.name || ')'
    INTO v_problem
    FROM jsonb_populate_recordset(NULL::composition_config, p_configs) c
    JOIN provider_configs pc ON pc.kind = c.kind AND pc.kind_version = c."kindVersion" AND pc.is_default
                             AND pc.name <> c.name
    WHERE COALESCE(c."isDefault", false) AND pc.owner_id IS DISTINCT FROM p_owner
    LIMIT 1;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'CV001',
            MESSAGE = 'provider config ' || v_problem || ' cannot be a default: its pair already has one';
    END IF;
    WITH upserted AS (
        INSERT INTO provider_configs AS pc (name, kind, kind_version, is_default, spec, data, owner_id)
        SELECT c.name, c.kind, c."kindVersion", COALESCE(c."isDefault", false), COALESCE(c.spec, '{}'::jsonb),
               decode(COALESCE(c.data, ''), 'base64'), p_owner
        FROM jsonb_populate_recordset(NULL::composition_config, p_configs) c
        ORDER BY c.name
        ON CONFLICT (name) DO UPDATE
            SET is_default = EXCLUDED.is_default, spec = EXCLUDED.spec, data = EXCLUDED.data,
                revision = pc.revision + 1, updated_at = now()
            WHERE (pc.is_default, pc.spec, pc.data) IS DISTINCT FROM (EXCLUDED.is_default, EXCLUDED.spec, EXCLUDED.data)
        RETURNING pc.name, pc.kind, pc.kind_version, pc.is_default, pc.revision = 1 AS fresh
    )
    SELECT COALESCE(array_agg(name) FILTER (WHERE NOT fresh), '{}'),
           count(*) FILTER (WHERE fresh),
           -- Pairs whose default may have moved (a flag that flipped off is
           -- announced too: the pair may have lost its default).
           COALESCE(array_agg(DISTINCT kind || ':' || kind_version), '{}')
    INTO v_configs_changed, v_configs_created, v_defaults
    FROM upserted;

    SELECT c.kind || '/' || c.name || ' references provider config ' || c."providerConfig" ||
           CASE WHEN pc.name IS NULL THEN ', which does not exist'
                WHEN pc.owner_id IS NOT NULL AND pc.owner_id <> p_owner THEN ', which another resource owns'
                ELSE ', which is for ' || pc.kind || ' version ' || pc.kind_version END
    INTO v_problem
    FROM jsonb_populate_recordset(NULL::composition_child, p_children) c
    LEFT JOIN provider_configs pc ON pc.name = c."providerConfig"
    WHERE NULLIF(c."providerConfig", '') IS NOT NULL
      AND (pc.name IS NULL OR (pc.owner_id IS NOT NULL AND pc.owner_id <> p_owner)
           OR (pc.kind, pc.kind_version) IS DISTINCT FROM (c.kind, c."kindVersion"))
    LIMIT 1;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'CV001', MESSAGE = 'child ' || v_problem;
    END IF;

    WITH created AS (
        INSERT INTO resources (kind, kind_version, name, labels, spec, owner_id, root_id, provider_config)
        SELECT c.kind, c."kindVersion", c.name,
               COALESCE(c.labels, '{}'::jsonb), COALESCE(c.spec, '{}'::jsonb), p_owner, v_root,
               NULLIF(c."providerConfig", '')
        FROM jsonb_populate_recordset(NULL::composition_child, p_children) c
        WHERE NOT EXISTS (SELECT 1 FROM resources r WHERE r.kind = c.kind AND r.name = c.name)
        ORDER BY c.kind, c.name
        ON CONFLICT (kind, name) DO NOTHING
        RETURNING id
    )
    SELECT COALESCE(array_agg(id), '{}') INTO v_created FROM created;

    SELECT COALESCE(array_agg(r.id ORDER BY r.id), '{}') INTO v_desired
    FROM jsonb_populate_recordset(NULL::composition_child, p_children) c
    JOIN resources r ON r.kind = c.kind AND r.name = c.name AND r.owner_id = p_owner;
    IF cardinality(v_desired) <> jsonb_array_length(p_children) THEN
        RAISE EXCEPTION 'a child name was taken concurrently' USING ERRCODE = '40001';
    END IF;

    -- Edges: resolve, then replace this owner's set.
    CREATE TEMP TABLE IF NOT EXISTS composition_edges (
        dependent_id uuid, dependency_id uuid, value_flows jsonb, label text
    ) ON COMMIT DELETE ROWS;
    TRUNCATE composition_edges;
    INSERT INTO composition_edges
    SELECT dep.id, up.id, COALESCE(e.flows, '[]'::jsonb),
           e."dependentKind" || '/' || e."dependentName" || ' -> '
               || e."dependencyKind" || '/' || e."dependencyName"
    FROM jsonb_populate_recordset(NULL::composition_edge, p_edges) e
    LEFT JOIN resources dep ON dep.kind = e."dependentKind" AND dep.name = e."dependentName"
                           AND dep.owner_id = p_owner
    LEFT JOIN resources up ON up.kind = e."dependencyKind" AND up.name = e."dependencyName";
    SELECT label INTO v_problem FROM composition_edges WHERE dependent_id IS NULL OR dependency_id IS NULL LIMIT 1;
    IF v_problem IS NOT NULL THEN
        -- Undo the children created above: the composition is refused whole.
        RAISE EXCEPTION USING ERRCODE = 'CV001', MESSAGE = 'edge ' || v_problem || ' names a resource that does not exist';
    END IF;
    -- The edges of dropped children stay until those children are gone:
    -- they order the teardown of what is pruned together.
    DELETE FROM resource_deps d
    WHERE d.owner_id = p_owner AND d.dependent_id = ANY (v_desired)
      AND NOT EXISTS (SELECT 1 FROM composition_edges e
                      WHERE e.dependent_id = d.dependent_id AND e.dependency_id = d.dependency_id);
    INSERT INTO resource_deps AS d (dependent_id, dependency_id, owner_id, value_flows)
    SELECT dependent_id, dependency_id, p_owner, value_flows FROM composition_edges
    ORDER BY dependent_id, dependency_id
    ON CONFLICT (dependent_id, dependency_id) DO UPDATE
        SET value_flows = EXCLUDED.value_flows, owner_id = EXCLUDED.owner_id
        WHERE d.value_flows IS DISTINCT FROM EXCLUDED.value_flows OR d.owner_id IS DISTINCT FROM EXCLUDED.owner_id;

    -- Desired specs with the values flowing in from upstreams (or, where an
    -- upstream has not produced its value yet, the value already stored).
    WITH desired AS (
        SELECT r.id, r.spec AS stored, COALESCE(c.spec, '{}'::jsonb) AS spec,
               COALESCE(c.labels, '{}'::jsonb) AS labels, c."kindVersion" AS kind_version,
               NULLIF(c."providerConfig", '') AS provider_config
        FROM jsonb_populate_recordset(NULL::composition_child, p_children) c
        JOIN resources r ON r.kind = c.kind AND r.name = c.name AND r.owner_id = p_owner
    ),
    flows AS (
        SELECT e.dependent_id, f->>'dependent' AS pointer,
               COALESCE(NULLIF(u.status #> pointer_to_path(f->>'source'), 'null'::jsonb),
                        NULLIF(d.stored #> pointer_to_path(f->>'dependent'), 'null'::jsonb)) AS value,
               e.dependency_id, n AS ord
        FROM composition_edges e
        JOIN desired d ON d.id = e.dependent_id
        JOIN resources u ON u.id = e.dependency_id
        CROSS JOIN LATERAL jsonb_array_elements(e.value_flows) WITH ORDINALITY AS t(f, n)
    ),
    patched AS (
        SELECT d.id, d.labels, d.kind_version, d.provider_config,
               COALESCE((SELECT jsonb_patch_pointers(d.spec, jsonb_agg(
                                    jsonb_build_object('pointer', f.pointer, 'value', f.value)
                                    ORDER BY f.dependency_id, f.ord))
                         FROM flows f WHERE f.dependent_id = d.id AND f.value IS NOT NULL), d.spec) AS spec
        FROM desired d
    ),
    compared AS (
        -- Whether the desired state equals the stored one (read before the update).
        SELECT p.*, (r0.spec, r0.labels, r0.kind_version) IS NOT DISTINCT FROM (p.spec, p.labels, p.kind_version) AS same,
               r0.provider_config IS NOT DISTINCT FROM p.provider_config AS same_config,
               r0.frozen_until IS NOT NULL AND r0.frozen_until <> 'infinity' AS orphaned
        FROM patched p JOIN resources r0 ON r0.id = p.id
    ),
    changed AS (
        UPDATE resources r
        SET spec = p.spec, labels = p.labels, kind_version = p.kind_version, provider_config = p.provider_config,
            generation = r.generation + CASE WHEN r.id = ANY (v_created) OR p.same THEN 0 ELSE 1 END,
            -- Re-emitted within its orphan grace: adopted again.
            frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END,
            updated_at = now()
        FROM compared p
        WHERE r.id = p.id AND r.deletion_requested_at IS NULL
          AND (NOT p.same OR NOT p.same_config OR (r.frozen_until IS NOT NULL AND r.frozen_until <> 'infinity'))
        RETURNING r.id, r.id = ANY (v_created) AS fresh, p.same, p.same_config, p.orphaned
    )
    SELECT count(*) FILTER (WHERE NOT fresh AND NOT same),
           COALESCE(array_agg(id ORDER BY id) FILTER (WHERE orphaned), '{}'),
           -- Same spec, other override: reconciled again without a generation bump.
           COALESCE(array_agg(id ORDER BY id) FILTER (WHERE NOT fresh AND same AND NOT same_config), '{}')
    INTO v_updated, v_readopted, v_moved FROM changed;
    FOR v_child IN SELECT id, generation FROM resources WHERE id = ANY (v_readopted) ORDER BY id LOOP
        PERFORM record_resource_event(
            v_child.id, 'lifecycle', 'Normal', 'Readopted',
            format('its composer %s/%s emits it again within its orphan grace period; nothing was torn down',
                   v_owner.kind, v_owner.name),
            NULL, 'system:composer', v_child.generation, 100);
    END LOOP;

    -- Dropped children: orphan (grace), cascade (finalizer or own children)
    -- or remove. Rows already deleting, orphaned or quarantined stay as they are.
    FOR v_child IN
        SELECT r.id, r.kind, r.name, r.generation, COALESCE(c.orphan_grace_secs, 0) AS grace,
               c.finalizer_name IS NOT NULL AS finalized,
               EXISTS (SELECT 1 FROM resources x WHERE x.owner_id = r.id) AS owns
        FROM resources r
        LEFT JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
        WHERE r.owner_id = p_owner AND NOT (r.id = ANY (v_desired))
          AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
        ORDER BY r.id
    LOOP
        IF v_child.grace > 0 THEN
            UPDATE resources SET frozen_until = now() + make_interval(secs => v_child.grace) WHERE id = v_child.id;
            DELETE FROM work_queue WHERE resource_id = v_child.id AND task_type = 'reconcile' AND broker_id IS NULL;
            PERFORM record_resource_event(
                v_child.id, 'lifecycle', 'Warning', 'Orphaned',
                format('its composer %s/%s no longer emits it; it is torn down in %s s unless emitted again',
                       v_owner.kind, v_owner.name, v_child.grace),
                jsonb_build_object('graceSecs', v_child.grace), 'system:composer', v_child.generation, 100);
            v_orphaned := v_orphaned + 1;
        ELSIF v_child.finalized OR v_child.owns THEN
            v_tree := cascade_mark_for_deletion(
                v_child.id, 'system:composer',
                format('its composer %s/%s no longer emits it', v_owner.kind, v_owner.name));
            v_trees := v_trees || v_tree;
            v_marked := v_marked + 1;
        END IF;
    END LOOP;
    WITH removed AS (
        DELETE FROM resources r
        USING kind_config c
        WHERE r.owner_id = p_owner AND NOT (r.id = ANY (v_desired))
          AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
          AND c.kind = r.kind AND c.kind_version = r.kind_version
          AND c.finalizer_name IS NULL AND c.orphan_grace_secs = 0
          AND NOT EXISTS (SELECT 1 FROM resources x WHERE x.owner_id = r.id)
        RETURNING 1
    )
    SELECT count(*) INTO v_removed FROM removed;

    -- Owned configs no longer emitted, unless still referenced.
    WITH pruned AS (
        DELETE FROM provider_configs pc
        WHERE pc.owner_id = p_owner
          AND NOT EXISTS (SELECT 1 FROM jsonb_populate_recordset(NULL::composition_config, p_configs) c
                          WHERE c.name = pc.name)
          AND NOT EXISTS (SELECT 1 FROM resources r WHERE r.provider_config = pc.name)
        RETURNING pc.kind, pc.kind_version, pc.is_default
    )
    SELECT count(*), v_defaults || COALESCE(array_agg(kind || ':' || kind_version) FILTER (WHERE is_default), '{}')
    INTO v_configs_pruned, v_defaults FROM pruned;

    UPDATE resources SET composed_gen = p_generation WHERE id = p_owner;
    PERFORM schedule_eligible(v_desired);
    PERFORM pend_config_users(v_configs_changed, 'system:composer', 100);
    PERFORM pend_config_change(
        v_moved, format('its composer %s/%s attached another provider config', v_owner.kind, v_owner.name),
        'system:composer', 100);
    FOR v_pair IN SELECT DISTINCT split_part(x, ':', 1) AS kind, split_part(x, ':', 2)::smallint AS version
                  FROM unnest(v_defaults) AS x LOOP
        PERFORM notify_default_config(v_pair.kind, v_pair.version);
    END LOOP;
    -- A separate statement: the sweep sees the marks.
    IF cardinality(v_trees) > 0 THEN
        PERFORM sweep_deletable_ids(v_trees, 100000);
    END IF;
    PERFORM record_resource_event(
        p_owner, 'compose', 'Normal', 'Composed',
        format('%s children desired: %s created, %s updated, %s pruned',
               cardinality(v_desired), cardinality(v_created), v_updated, v_marked + v_removed)
            || CASE WHEN v_orphaned > 0 THEN format(', %s orphaned', v_orphaned) ELSE '' END
            || CASE WHEN cardinality(v_readopted) > 0 THEN format(', %s re-adopted', cardinality(v_readopted)) ELSE '' END
            || CASE WHEN jsonb_array_length(p_configs) > 0 OR v_configs_pruned > 0
                    THEN format('; %s provider configs desired: %s created, %s changed, %s pruned',
                                jsonb_array_length(p_configs), v_configs_created,
                                cardinality(v_configs_changed), v_configs_pruned)
                    ELSE '' END,
        jsonb_build_object('created', cardinality(v_created), 'updated', v_updated,
                           'pruned', v_marked + v_removed, 'orphaned', v_orphaned,
                           'readopted', cardinality(v_readopted),
                           'configsCreated', v_configs_created, 'configsChanged', cardinality(v_configs_changed),
                           'configsPruned', v_configs_pruned,
                           'edges', jsonb_array_length(p_edges)),
        'system:composer', p_generation, 100);
    RETURN jsonb_build_object('created', cardinality(v_created), 'updated', v_updated,
                              'pruned', v_marked + v_removed, 'orphaned', v_orphaned);
END
$function$;
