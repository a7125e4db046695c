-- The reconcile engine's tables: the task queue, the result outbox and the
-- rollup rechecks.
--
-- The durable truth is resources.synced_gen against generation; these
-- tables only say who works on what right now. They are UNLOGGED (a crash
-- empties them, and the reaper re-derives the queue from lagging resources)
-- and flat: on partitioned tables PostgreSQL 15 could not prune the targets
-- of the cached UPDATE/DELETE plans, which cost more than the work (ADR 13,
-- ADR 15). Shard-range predicates still bound every statement.

CREATE UNLOGGED TABLE work_queue (
    id               uuid        NOT NULL DEFAULT time_ordered_uuid(),
    resource_id      uuid        NOT NULL,
    task_type        text        NOT NULL CHECK (task_type IN ('reconcile', 'delete')),
    kind             text        NOT NULL,
    kind_version     smallint    NOT NULL,
    generation       bigint      NOT NULL,
    manifest_version bigint      NOT NULL DEFAULT 0,
    -- Fence: bumped every time the row is claimed, re-pointed or released.
    claim_epoch      bigint      NOT NULL DEFAULT 1,
    -- The lease: held by broker_id under an unguessable token.
    broker_id        text,
    lease_token      uuid,
    heartbeat_at     timestamptz,
    deadline_at      timestamptz,
    -- Not claimable before (retry backoff, requeue-after).
    not_before       timestamptz NOT NULL DEFAULT now(),
    attempts         integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    shard_id         smallint    NOT NULL,
    -- Set when the task's result sits in work_outbox: the lease is done, the
    -- row waits for the drainer (no reaping, no deadline, still counted against
    -- the kind's max_inflight until applied).
    outcome_pending  boolean     NOT NULL DEFAULT false,
    -- The key is the id alone: with shard_id in it, the claim's generic plan
    -- preferred walking the key from the oldest, already claimed tasks.
    CONSTRAINT work_queue_pkey PRIMARY KEY (id),
    -- Also serves every lookup of a resource's tasks.
    CONSTRAINT work_queue_resource_id_task_type_shard_id_key UNIQUE (resource_id, task_type, shard_id)
) WITH (
    -- A task row gets two new versions before it is deleted (the claim's and
    -- the fence's); at a third full, most fences stay heap-only (80% against
    -- 53% at a half, in a 100k pipeline run).
    fillfactor = 33,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 50,
    autovacuum_analyze_threshold = 50
);

-- The queue is read by key or by range with plans that do not depend on
-- value distributions; a target of 10 still gives the row count and made
-- ANALYZE several times cheaper.
ALTER TABLE work_queue
    ALTER COLUMN id SET STATISTICS 10,
    ALTER COLUMN resource_id SET STATISTICS 10,
    ALTER COLUMN task_type SET STATISTICS 10,
    ALTER COLUMN kind SET STATISTICS 10,
    ALTER COLUMN kind_version SET STATISTICS 10,
    ALTER COLUMN generation SET STATISTICS 10,
    ALTER COLUMN manifest_version SET STATISTICS 10,
    ALTER COLUMN claim_epoch SET STATISTICS 10,
    ALTER COLUMN broker_id SET STATISTICS 10,
    ALTER COLUMN lease_token SET STATISTICS 10,
    ALTER COLUMN heartbeat_at SET STATISTICS 10,
    ALTER COLUMN deadline_at SET STATISTICS 10,
    ALTER COLUMN not_before SET STATISTICS 10,
    ALTER COLUMN attempts SET STATISTICS 10,
    ALTER COLUMN created_at SET STATISTICS 10,
    ALTER COLUMN shard_id SET STATISTICS 10,
    ALTER COLUMN outcome_pending SET STATISTICS 10;

-- The claim's pick: unclaimed tasks of a kind version, oldest (id) first.
CREATE INDEX work_queue_claim_idx ON work_queue (kind, kind_version, id, shard_id) WHERE broker_id IS NULL;
-- Leased tasks; also what the reaper's stale-lease and deadline scans read
-- (there is deliberately no heartbeat index: it cost every claim and every
-- heartbeat an index write).
CREATE INDEX work_queue_leased_idx ON work_queue (kind, kind_version) WHERE broker_id IS NOT NULL;
CREATE INDEX work_queue_lease_idx ON work_queue (lease_token) WHERE lease_token IS NOT NULL;

-- Crash recovery empties unlogged tables, the queue among them. This
-- unlogged marker goes with it, so a reaper that finds it missing knows
-- tasks may be lost and walks the whole table at once instead of a slice
-- per pass. Whoever puts it back does that walk.
CREATE UNLOGGED TABLE work_queue_intact (
    marker boolean PRIMARY KEY DEFAULT true CHECK (marker)
);
INSERT INTO work_queue_intact DEFAULT VALUES;

-- Results waiting for the drainer, which applies them in batches.
CREATE UNLOGGED TABLE work_outbox (
    work_id          uuid        NOT NULL,
    shard_id         smallint    NOT NULL,
    resource_id      uuid        NOT NULL,
    generation       bigint      NOT NULL,
    -- Success parts (status NULL = unchanged; health_ok NULL = unchanged).
    status           jsonb,
    conditions       jsonb,
    health_ok        boolean,
    -- false: a composite's partial result (its rollup has not run yet), so
    -- the generation is not marked synced.
    advance          boolean     NOT NULL DEFAULT true,
    -- "Not settled yet": apply the parts, run again after this delay.
    requeue_after_ms bigint,
    -- Failure (NULL = success).
    error_message    text,
    error_reason     text,
    terminal         boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Which task a result belongs to, and for a teardown the finalizer it clears.
    task_type        text        NOT NULL DEFAULT 'reconcile',
    finalizer        text,
    CONSTRAINT work_outbox_pkey PRIMARY KEY (work_id, shard_id)
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 50,
    autovacuum_analyze_threshold = 50
);

-- The drain takes the oldest results of its shard range. Led by created_at,
-- the scan stops after the batch and checks shard_id in the index (led by
-- shard_id, a range had to be read and sorted whole once a backlog built up).
CREATE INDEX work_outbox_age_idx ON work_outbox (created_at, shard_id);

-- Owners whose rollup must be rechecked by the drainer of their shard.
CREATE UNLOGGED TABLE rollup_recheck (
    owner_id uuid        PRIMARY KEY,
    shard_id smallint    NOT NULL,
    armed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX rollup_recheck_shard_idx ON rollup_recheck (shard_id);
