-- Tasks no worker serves: a kind's policy to mark their resources with the
-- condition WorkerAvailable=False after a wait (seconds; 0 = off, the
-- default). A manifest seeds it, like the other policy columns; the config
-- is the live value.
ALTER TABLE kind_manifest ADD COLUMN unserved_condition_after_secs integer NOT NULL DEFAULT 0
    CHECK (unserved_condition_after_secs BETWEEN 0 AND 2592000);
ALTER TABLE kind_config ADD COLUMN unserved_condition_after_secs integer NOT NULL DEFAULT 0
    CHECK (unserved_condition_after_secs BETWEEN 0 AND 2592000);

-- The resources that condition marks, so the sweep that removes it finds
-- them without reading every condition. Partial on a column no write
-- changes (type): empty and never written unless the policy marks a
-- resource, and condition updates stay heap-only.
CREATE INDEX resource_conditions_worker_available_idx ON resource_conditions (resource_id)
    WHERE type = 'WorkerAvailable';
