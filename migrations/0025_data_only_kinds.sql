-- Data-only kinds: a manifest with no reactions. Its resources are
-- validated, stored and watched, and synced at each generation as it is
-- written, with no task: nothing would ever serve one. Kept on the config
-- (derived from the manifest by its trigger) where enqueue_tasks looks.
ALTER TABLE kind_config ADD COLUMN data_only boolean NOT NULL DEFAULT false;
