-- A task a caller chose to queue: the argument of enqueue_tasks
-- (migrations/functions/schedule.sql), the one writer of new work_queue rows.
-- The caller reads these columns in the statement that chose the resources,
-- so enqueue_tasks looks nothing up again.
CREATE TYPE task_candidate AS (
    resource_id      uuid,
    kind             text,
    kind_version     smallint,
    generation       bigint,
    manifest_version bigint,
    shard_id         smallint
);
