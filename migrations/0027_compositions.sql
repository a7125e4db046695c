-- Compositions declared as data (ADR 49): the manifest's Composition, whose
-- compose and rollup the server evaluates (CEL). Part of manifest_version.
-- kind_config's composes / rolls_up mirrors read it too
-- (sync_kind_config_from_manifest in functions/kinds.sql).
ALTER TABLE kind_manifest ADD COLUMN composition jsonb;
