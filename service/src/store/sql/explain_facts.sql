-- The facts ExplainResource derives its waits from, around the resource $1
-- ($2: the cluster liveness window in seconds, $3: the most names a list
-- carries); loaded by store/explain.rs as FACTS, where its plan is described.
WITH r AS (SELECT * FROM resources WHERE id = $1),
tasks AS (
    SELECT w.task_type, w.kind_version::int4 AS kind_version, w.broker_id, w.heartbeat_at, w.deadline_at,
           CASE WHEN w.not_before = 'infinity' THEN NULL ELSE w.not_before END AS not_before,
           w.attempts, w.outcome_pending, w.cause
    FROM work_queue w, r
    WHERE w.resource_id = r.id AND w.task_type IN ('reconcile', 'delete') AND w.shard_id = r.shard_id
),
-- Its dependents being deleted, found from its edges and probed one by one
-- by id. The LIMIT keeps the planner from driving the join from the set of
-- deleting resources, and the deletion test stays outside the probe: inside,
-- the planner took the (small when planned) partial index of deleting rows
-- and filtered it by id, a walk of every resource being deleted. Evaluated
-- only when read.
dependents AS (
    SELECT x.kind, x.name, x.phase
    FROM resource_deps d, r
    CROSS JOIN LATERAL (SELECT one.kind, one.name, one.phase, one.deletion_requested_at FROM resources one
                        WHERE one.id = d.dependent_id LIMIT 1) x
    WHERE d.dependency_id = r.id AND x.deletion_requested_at IS NOT NULL
)
SELECT statement_timestamp() AS read_at, r.composed_gen, r.updated_at,
       c.kind IS NOT NULL AS kind_known, COALESCE(c.rolls_up, false) AS rolls_up,
       COALESCE(c.max_inflight, 0) AS max_inflight,
       COALESCE(c.max_transient_attempts, 0) AS max_transient_attempts,
       CASE WHEN c.resync_interval_secs > 0 THEN
           COALESCE(r.last_reconciled_at, r.created_at)
           + make_interval(secs => c.resync_interval_secs * (0.9 + 0.2 * r.shard_id / 255.0))
       END AS resync_due,
       (SELECT jsonb_agg(to_jsonb(t)) FROM tasks t) AS tasks,
       (SELECT count(*) FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
        WHERE d.dependent_id = r.id AND u.synced_gen < u.generation) AS upstream_total,
       (SELECT jsonb_agg(jsonb_build_array(x.kind, x.name, x.phase) ORDER BY x.kind, x.name) FROM (
            SELECT u.kind, u.name, u.phase FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
            WHERE d.dependent_id = r.id AND u.synced_gen < u.generation
            ORDER BY u.kind, u.name LIMIT $3) x) AS upstream_first,
       (SELECT jsonb_agg(jsonb_build_array(x.phase, x.n)) FROM (
            SELECT ch.phase, count(*) AS n FROM resources ch WHERE ch.owner_id = r.id GROUP BY ch.phase) x)
           AS children_by_phase,
       (SELECT count(*) FROM resources ch WHERE ch.owner_id = r.id AND is_progressing(ch)) AS children_progressing,
       (SELECT jsonb_agg(jsonb_build_array(x.kind, x.name, x.phase) ORDER BY x.ready, x.progressing DESC, x.kind, x.name)
        FROM (SELECT ch.kind, ch.name, ch.phase, ch.phase = 'Ready' AS ready, is_progressing(ch) AS progressing
              FROM resources ch WHERE ch.owner_id = r.id
              ORDER BY ch.phase = 'Ready', is_progressing(ch) DESC, ch.kind, ch.name LIMIT $3) x) AS children_first,
       CASE WHEN r.deletion_requested_at IS NOT NULL THEN
           (SELECT count(*) FROM dependents)
       ELSE 0 END AS dependents_total,
       CASE WHEN r.deletion_requested_at IS NOT NULL THEN
           (SELECT jsonb_agg(jsonb_build_array(y.kind, y.name, y.phase) ORDER BY y.kind, y.name) FROM (
                SELECT x.kind, x.name, x.phase FROM dependents x ORDER BY x.kind, x.name LIMIT $3) y)
       END AS dependents_first,
       CASE WHEN EXISTS (SELECT 1 FROM tasks t WHERE t.broker_id IS NULL) THEN
           (SELECT jsonb_build_array(
                       count(*) FILTER (WHERE (k->>'ready')::boolean),
                       count(*) FILTER (WHERE NOT (k->>'ready')::boolean),
                       bool_or(m.connected_workers > jsonb_array_length(m.workers)))
            FROM cluster_members m
            LEFT JOIN LATERAL jsonb_array_elements(m.workers) wk ON true
            LEFT JOIN LATERAL jsonb_array_elements(wk->'kinds') k
                   ON k->>'kind' = r.kind AND (k->>'kindVersion')::int = r.kind_version
            WHERE m.state = 'serving' AND m.last_heartbeat > now() - make_interval(secs => $2))
       END AS workers,
       CASE WHEN c.max_inflight > 0 AND EXISTS (SELECT 1 FROM tasks t WHERE t.broker_id IS NULL) THEN
           (SELECT count(*) FROM work_queue w
            WHERE w.kind = r.kind AND w.kind_version = r.kind_version AND w.broker_id IS NOT NULL)
           + (SELECT count(*) FROM operations o
              WHERE o.kind = r.kind AND o.kind_version = r.kind_version AND o.state = 'running')
       END AS in_flight,
       r.provider_config IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM provider_configs pc WHERE pc.name = r.provider_config)
           AS provider_config_missing
FROM r LEFT JOIN kind_config c ON c.kind = r.kind AND c.kind_version = r.kind_version
