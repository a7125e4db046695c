-- Provider configs: named, runtime-editable worker configuration per
-- (kind, kind_version). At most one per pair is its default, pushed to the
-- workers serving the pair; any config can be a resource's override, handed
-- to the worker with each of that resource's tasks.

CREATE TABLE provider_configs (
    name         text        PRIMARY KEY,
    kind         text        NOT NULL,
    kind_version smallint    NOT NULL CHECK (kind_version >= 1),
    is_default   boolean     NOT NULL DEFAULT false,
    spec         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    data         bytea       NOT NULL DEFAULT ''::bytea,
    -- The composer that emitted the config (NULL: applied through the API);
    -- an owned config goes with its owner.
    owner_id     uuid        REFERENCES resources (id) ON DELETE CASCADE,
    -- Moves on every change; the etag is derived from it.
    revision     bigint      NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    -- The service refuses deleting a manifest that configs use with a clear
    -- message; this keeps the database honest if anything bypasses it.
    FOREIGN KEY (kind, kind_version) REFERENCES kind_manifest (kind, kind_version)
);

-- At most one default per pair; also the workers' lookup of the default.
CREATE UNIQUE INDEX provider_configs_default_key ON provider_configs (kind, kind_version) WHERE is_default;
CREATE INDEX provider_configs_kind_idx ON provider_configs (kind, kind_version, name);
CREATE INDEX provider_configs_owner_idx ON provider_configs (owner_id, name) WHERE owner_id IS NOT NULL;

-- The resources that reference a config (re-reconciled when it changes;
-- they keep it from being deleted). Partial: resources without an override,
-- the common case, add no entry, and a sync changes no indexed column.
CREATE INDEX resources_provider_config_idx ON resources (provider_config, id) WHERE provider_config IS NOT NULL;

-- Why a reconcile task was queued when it is not a spec change: NULL = the
-- generation moved (or another re-pend); 'configChange' = the resource's
-- override changed at the same generation. Sent to workers as the trigger.
ALTER TABLE work_queue ADD COLUMN cause text CHECK (cause IN ('configChange'));
ALTER TABLE work_queue ALTER COLUMN cause SET STATISTICS 10;

-- The claimed task carries its cause and the resource's override: the
-- referenced config's name, spec and data (spec NULL: the reference names
-- no stored config).
ALTER TYPE claimed_task
    ADD ATTRIBUTE cause text,
    ADD ATTRIBUTE provider_config text,
    ADD ATTRIBUTE config_spec jsonb,
    ADD ATTRIBUTE config_data bytea;

-- A config a composer emits, as apply_composition reads it from its JSON
-- argument (Rust: domain::composition::ConfigSpec, camelCase; data is
-- base64). A child names its override in "providerConfig".
CREATE TYPE composition_config AS (
    name          text,
    kind          text,
    "kindVersion" smallint,
    "isDefault"   boolean,
    spec          jsonb,
    data          text
);
ALTER TYPE composition_child ADD ATTRIBUTE "providerConfig" text;

-- apply_composition takes the configs too (functions/composition.sql).
DROP FUNCTION IF EXISTS apply_composition(uuid, bigint, jsonb, jsonb);
