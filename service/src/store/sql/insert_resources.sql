-- New root resources, each with the first event of its timeline and its
-- first reconcile, in one statement (store/resources.rs, insert_many, which
-- appends the final SELECT of the inserted rows). $1-$6: the resources'
-- kinds, kind versions, names, labels, specs and provider configs, in
-- (kind, name) order; $7-$12: the first event (category, type, reason,
-- message, detail) and its actor.
WITH created AS (
    -- A resource of a data-only kind is synced as it is written: it has no
    -- task (and is left out of queued below).
    INSERT INTO resources (kind, kind_version, name, labels, spec, provider_config, synced_gen)
    SELECT x.kind, x.kind_version, x.name, x.labels, x.spec, x.provider_config,
           CASE WHEN k.data_only THEN 1 ELSE 0 END
    FROM unnest($1::text[], $2::int2[], $3::text[], $4::jsonb[], $5::jsonb[], $6::text[])
        WITH ORDINALITY AS x(kind, kind_version, name, labels, spec, provider_config, n)
    LEFT JOIN kind_config k ON k.kind = x.kind AND k.kind_version = x.kind_version
    ORDER BY x.n
    ON CONFLICT (kind, name) DO NOTHING
    RETURNING *
),
-- A new resource's timeline has no run to extend, nothing to trim
-- and no concurrent writer: no other transaction can see it yet.
started AS (
    INSERT INTO resource_events (resource_id, category, type, reason, message, detail, actor, generation)
    SELECT id, $7, $8, $9, $10, $11, $12, generation FROM created
    RETURNING 1
),
woken AS (
    SELECT notify_throttled('event_changed', 'wake_event_changed') WHERE EXISTS (SELECT 1 FROM started)
),
-- A resource the API creates has no upstream and no children, so
-- the gate (schedule_eligible) would pass it: its task is queued
-- with it instead of in another round trip.
queued AS (
    SELECT enqueue_tasks(array_agg(ROW(c.id, c.kind, c.kind_version, c.generation, k.manifest_version,
                                       c.shard_id)::task_candidate ORDER BY c.id),
                         'reconcile', NULL, 'new')
    FROM created c JOIN kind_config k ON k.kind = c.kind AND k.kind_version = c.kind_version AND NOT k.data_only
)
