-- Reactors: bindings from the lifecycle transitions of one kind to a
-- reactor kind, and the durable deliveries they record.

CREATE TABLE reactor_bindings (
    name               text        PRIMARY KEY,
    watch_kind         text        NOT NULL,
    -- NULL: every version of the watched kind.
    watch_kind_version smallint    CHECK (watch_kind_version >= 1),
    transition         text        NOT NULL CHECK (transition IN ('created', 'synced', 'degraded', 'failed', 'deleted')),
    label_match        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    reactor            text        NOT NULL,
    -- NULL: the highest applied, non-retired version when delivered.
    reactor_version    smallint    CHECK (reactor_version >= 1),
    enabled            boolean     NOT NULL DEFAULT true,
    -- Moves on every change; the etag is derived from it.
    revision           bigint      NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CHECK (watch_kind <> reactor)
);

-- The transition triggers' probe: with no enabled binding for a transition
-- they stop after one look at this (empty) partial index.
CREATE INDEX reactor_bindings_fire_idx ON reactor_bindings (transition, watch_kind) WHERE enabled;
CREATE INDEX reactor_bindings_reactor_idx ON reactor_bindings (reactor, name);

-- One row per (transition, binding) to deliver. LOGGED: a committed
-- transition is never lost. Written in the transaction of the transition
-- with the binding as it was then; a row leaves when its delivery succeeds,
-- or stays marked failed (failed_at) until the retention sweep.
CREATE TABLE reactor_deliveries (
    id              uuid        PRIMARY KEY DEFAULT time_ordered_uuid(),
    binding         text        NOT NULL,
    reactor         text        NOT NULL,
    reactor_version smallint,
    transition      text        NOT NULL,
    resource_id     uuid        NOT NULL,
    generation      bigint      NOT NULL,
    -- The watched resource as it was at the transition (its row, as JSON).
    resource        jsonb       NOT NULL,
    -- "<uid>:<transition>:<generation>:<binding>": the same on every attempt.
    dedup_token     text        NOT NULL,
    shard_id        smallint    NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    not_before      timestamptz NOT NULL DEFAULT now(),
    broker_id       text,
    lease_token     uuid,
    claim_epoch     bigint      NOT NULL DEFAULT 1,
    heartbeat_at    timestamptz,
    failed_at       timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT reactor_deliveries_dedup_key UNIQUE (dedup_token)
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

-- The claim's pick: deliverable rows of a reactor kind, oldest first.
CREATE INDEX reactor_deliveries_claim_idx ON reactor_deliveries (reactor, id)
    WHERE broker_id IS NULL AND failed_at IS NULL;
CREATE INDEX reactor_deliveries_lease_idx ON reactor_deliveries (lease_token) WHERE lease_token IS NOT NULL;
CREATE INDEX reactor_deliveries_binding_idx ON reactor_deliveries (binding);
CREATE INDEX reactor_deliveries_failed_idx ON reactor_deliveries (failed_at) WHERE failed_at IS NOT NULL;

-- A claimed delivery with what its task needs (Rust: store::reactors::ClaimedDelivery).
CREATE TYPE claimed_delivery AS (
    delivery_id      uuid,
    lease_token      uuid,
    claim_epoch      bigint,
    attempts         integer,
    binding          text,
    reactor          text,
    reactor_version  integer,
    manifest_version bigint,
    deadline_secs    double precision,
    transition       text,
    generation       bigint,
    resource         jsonb,
    dedup_token      text
);
