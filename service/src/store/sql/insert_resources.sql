-- New root resources, each with the first event of its timeline and its
-- first reconcile, in one statement (store/resources.rs, insert_many, which
-- appends the final SELECT of the inserted rows). $1-$6: the resources'
-- kinds, kind versions, names, labels, specs and provider configs, in
-- (kind, name) order; $7-$12: the first event (category, type, reason,
-- message, detail) and its actor.
WITH created AS (
    INSERT INTO resources (kind, kind_version, name, labels, spec, provider_config)
    SELECT kind, kind_version, name, labels, spec, provider_config
    FROM unnest($1::text[], $2::int2[], $3::text[], $4::jsonb[], $5::jsonb[], $6::text[])
        WITH ORDINALITY AS x(kind, kind_version, name, labels, spec, provider_config, n)
    ORDER BY n
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
    FROM created c JOIN kind_config k ON k.kind = c.kind AND k.kind_version = c.kind_version
)
