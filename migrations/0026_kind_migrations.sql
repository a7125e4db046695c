-- Kind schema evolution (ADR 48): conversions declared by a manifest, the
-- kind version of each spec revision, and durable kind migrations.

-- The manifest's SpecConversions (CEL, evaluated by the server). Not part
-- of manifest_version: workers never see them.
ALTER TABLE kind_manifest ADD COLUMN conversions jsonb NOT NULL DEFAULT '[]';

-- The kind version each revision's spec was written for, so a rollback past
-- a conversion returns to the old version. NULL for revisions stored before
-- this migration (read as the resource's current version).
ALTER TABLE spec_revisions ADD COLUMN kind_version smallint;
ALTER TABLE spec_revisions DROP CONSTRAINT spec_revisions_source_check;
ALTER TABLE spec_revisions ADD CONSTRAINT spec_revisions_source_check
    CHECK (source IN ('apply', 'rollback', 'conversion'));

-- One row per migration. A runner takes a running row FOR UPDATE SKIP
-- LOCKED, converts one batch of resources after `cursor` (uid order) and
-- commits the batch, the cursor and the counts together: a crash loses at
-- most an uncommitted batch, which the next runner redoes.
CREATE TABLE kind_migrations (
    id             uuid        PRIMARY KEY DEFAULT time_ordered_uuid(),
    kind           text        NOT NULL,
    from_version   smallint    NOT NULL CHECK (from_version >= 1),
    to_version     smallint    NOT NULL CHECK (to_version >= 1 AND to_version <> from_version),
    label_selector text        NOT NULL DEFAULT '',
    validate_only  boolean     NOT NULL DEFAULT false,
    state          text        NOT NULL DEFAULT 'running'
                               CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    -- The last resource visited, by (created_at, id): the order of the
    -- index resources_kind_created_idx, which holds only this kind's rows.
    -- NULL before the first batch.
    cursor_at      timestamptz,
    cursor_id      uuid,
    total          bigint      NOT NULL DEFAULT 0,
    converted      bigint      NOT NULL DEFAULT 0,
    failed         bigint      NOT NULL DEFAULT 0,
    -- [{name, message}], at most 20.
    first_failures jsonb       NOT NULL DEFAULT '[]',
    requested_by   text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    ended_at       timestamptz,
    CHECK ((state = 'running') = (ended_at IS NULL))
);

-- At most one running migration per kind (two would race over the same
-- rows); also what the runner and DeleteKindManifest probe.
CREATE UNIQUE INDEX kind_migrations_running_idx ON kind_migrations (kind) WHERE state = 'running';
CREATE INDEX kind_migrations_kind_idx ON kind_migrations (kind, id);
