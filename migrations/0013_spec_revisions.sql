-- Spec history of root resources: one row per generation written through
-- the API (apply, create, batch, rollback), the last revision_limit per
-- resource kept; removed with the resource.

CREATE TABLE spec_revisions (
    resource_id         uuid        NOT NULL,
    generation          bigint      NOT NULL CHECK (generation >= 1),
    spec                jsonb       NOT NULL,
    source              text        NOT NULL CHECK (source IN ('apply', 'rollback')),
    -- For a rollback, the generation whose spec was restored.
    restored_generation bigint,
    actor               text        NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, generation)
) WITH (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

ALTER TABLE spec_revisions ALTER COLUMN spec SET STATISTICS 0;

-- How many revisions each resource of a kind version keeps (editable live).
ALTER TABLE kind_config ADD COLUMN revision_limit integer NOT NULL DEFAULT 10 CHECK (revision_limit >= 1);
