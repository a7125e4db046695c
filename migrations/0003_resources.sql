-- Resources, their conditions and the dependency edges between them.

-- Positions in the change logs. A position is (writing transaction id,
-- sequence number); see resource_changes for why both. The event log draws
-- from the same sequence.
CREATE SEQUENCE change_seq AS bigint CACHE 100;

CREATE TABLE resources (
    id                    uuid        PRIMARY KEY DEFAULT time_ordered_uuid(),
    kind                  text        NOT NULL,
    kind_version          smallint    NOT NULL CHECK (kind_version >= 1),
    name                  text        NOT NULL,
    labels                jsonb       NOT NULL DEFAULT '{}'::jsonb,
    spec                  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status                jsonb,
    -- Composition: the direct owner (composer) and the root of the tree; NULL for roots.
    owner_id              uuid        REFERENCES resources (id) ON DELETE CASCADE,
    root_id               uuid,
    -- Name of the attached provider config override, if any.
    provider_config       text,
    -- Lifecycle scalars. generation moves exactly when the spec (or the kind
    -- version) changes; synced_gen is the newest generation reconciled.
    generation            bigint      NOT NULL DEFAULT 1 CHECK (generation >= 1),
    synced_gen            bigint      NOT NULL DEFAULT 0 CHECK (synced_gen >= 0),
    health_ok             boolean     NOT NULL DEFAULT true,
    composed_gen          bigint      NOT NULL DEFAULT 0,
    -- The generation that failed terminally (0 = none); Failed while it equals generation.
    failure_gen           bigint      NOT NULL DEFAULT 0,
    -- Consecutive transient failures of the current generation.
    failure_attempts      integer     NOT NULL DEFAULT 0 CHECK (failure_attempts >= 0),
    finalizers            text[]      NOT NULL DEFAULT '{}',
    deletion_requested_at timestamptz,
    -- Finite: orphaned until then; 'infinity': quarantined; NULL: live.
    frozen_until          timestamptz,
    last_reconciled_at    timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    -- Change-log position of the latest committed change. A new row takes it
    -- from these defaults (cheaper than a per-row trigger); updates are
    -- stamped by the resources_stamp_change trigger.
    rv_txid               bigint      NOT NULL DEFAULT current_txid(),
    rv_seq                bigint      NOT NULL DEFAULT nextval('change_seq'),
    is_ready              boolean     GENERATED ALWAYS AS (
                              synced_gen >= generation AND health_ok AND deletion_requested_at IS NULL) STORED,
    -- The single source of truth for the phase, with a fixed precedence.
    phase                 text        GENERATED ALWAYS AS (
                              CASE
                                  WHEN deletion_requested_at IS NOT NULL THEN 'Deleting'
                                  WHEN frozen_until = 'infinity' THEN 'Quarantined'
                                  WHEN failure_gen = generation THEN 'Failed'
                                  WHEN frozen_until IS NOT NULL THEN 'Orphaned'
                                  WHEN synced_gen >= generation AND NOT health_ok THEN 'Degraded'
                                  WHEN synced_gen >= generation THEN 'Ready'
                                  ELSE 'Reconciling'
                              END) STORED,
    shard_id              smallint    GENERATED ALWAYS AS (shard_of(id)) STORED,
    CONSTRAINT resources_kind_name_key UNIQUE (kind, name),
    CHECK ((owner_id IS NULL) = (root_id IS NULL))
) WITH (
    -- Pages filled to 60%: claims take the oldest tasks first, so one drain
    -- statement syncs most rows of a page; at 90% most syncs left the page
    -- (full updates), at 60% most stay heap-only (measured in 100k runs).
    fillfactor = 60,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

-- No statistics for columns no plan filters, joins or estimates by: ANALYZE
-- of resources runs each time the table doubles, and jsonb histograms were
-- most of its cost. Labels, kind, name, phase, owner, root, ids and creation
-- time keep theirs (selectors and the apply's (kind, name) join need them).
ALTER TABLE resources
    ALTER COLUMN spec SET STATISTICS 0,
    ALTER COLUMN status SET STATISTICS 0,
    ALTER COLUMN provider_config SET STATISTICS 0,
    ALTER COLUMN composed_gen SET STATISTICS 0,
    ALTER COLUMN failure_attempts SET STATISTICS 0,
    ALTER COLUMN finalizers SET STATISTICS 0,
    ALTER COLUMN last_reconciled_at SET STATISTICS 0,
    ALTER COLUMN updated_at SET STATISTICS 0,
    ALTER COLUMN rv_txid SET STATISTICS 0,
    ALTER COLUMN rv_seq SET STATISTICS 0;

-- List pages, newest first, overall and per kind. There is deliberately no
-- "roots only" index (its two writes per root cost more than skipping
-- children in the newest-first scan) and no index keyed on phase or on
-- synced_gen: a sync must change no indexed column so it can be heap-only.
CREATE INDEX resources_created_idx ON resources (created_at DESC, id DESC);
CREATE INDEX resources_kind_created_idx ON resources (kind, created_at DESC, id DESC);
CREATE INDEX resources_owner_idx ON resources (owner_id) WHERE owner_id IS NOT NULL;
CREATE INDEX resources_root_idx ON resources (root_id, created_at DESC, id DESC) WHERE root_id IS NOT NULL;
-- Only resources with labels: an equality selector (containment) can never
-- match an empty label set, and empty entries made every insert and moved
-- sync write the GIN metapage. Selectors repeat the predicate so the planner
-- can use this partial index (store::resources::push_selector).
CREATE INDEX resources_labeled_idx ON resources USING gin (labels jsonb_path_ops)
    WHERE labels <> '{}'::jsonb;
-- Lists of the rare phases, through predicates a successful sync leaves alone.
CREATE INDEX resources_failed_idx ON resources (created_at DESC, id DESC) WHERE failure_gen > 0;
CREATE INDEX resources_unhealthy_idx ON resources (created_at DESC, id DESC) WHERE NOT health_ok;
-- The deletion and orphan sweeps' idle gates: both are empty in steady state.
CREATE INDEX resources_deleting_idx ON resources (shard_id) WHERE deletion_requested_at IS NOT NULL;
CREATE INDEX resources_frozen_sweep_idx ON resources (frozen_until) WHERE frozen_until IS NOT NULL;

CREATE TABLE resource_conditions (
    resource_id         uuid        NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    type                text        NOT NULL,
    status              text        NOT NULL CHECK (status IN ('True', 'False', 'Unknown')),
    reason              text        NOT NULL DEFAULT '',
    message             text        NOT NULL DEFAULT '',
    observed_generation bigint      NOT NULL DEFAULT 0,
    -- Moves only when status flips.
    last_transition_at  timestamptz NOT NULL DEFAULT now(),
    -- Moves when status, reason or message change; an identical rewrite moves nothing.
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, type)
);

-- Dependency edges between the children of a composition.
CREATE TABLE resource_deps (
    dependent_id  uuid  NOT NULL,
    dependency_id uuid  NOT NULL,
    -- The composer that declared the edge; its recompose replaces its edges.
    owner_id      uuid  NOT NULL,
    value_flows   jsonb NOT NULL DEFAULT '[]'::jsonb,
    PRIMARY KEY (dependent_id, dependency_id),
    CHECK (dependent_id <> dependency_id)
);

CREATE INDEX resource_deps_dependency_idx ON resource_deps (dependency_id);
CREATE INDEX resource_deps_owner_idx ON resource_deps (owner_id);
