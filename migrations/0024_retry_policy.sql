-- Retry policy per kind version: the first delay and the cap of the
-- doubling backoff (milliseconds; 0 = today's 1 s and 60 s) and the jitter
-- that spreads it. A manifest seeds them, like the other policy columns;
-- the config is the live value, read by the failure paths only.
ALTER TABLE kind_manifest
    ADD COLUMN retry_base_ms integer NOT NULL DEFAULT 0 CHECK (retry_base_ms BETWEEN 0 AND 3600000),
    ADD COLUMN retry_cap_ms integer NOT NULL DEFAULT 0 CHECK (retry_cap_ms BETWEEN 0 AND 86400000),
    ADD COLUMN retry_jitter text NOT NULL DEFAULT 'none' CHECK (retry_jitter IN ('none', 'full', 'equal'));
ALTER TABLE kind_config
    ADD COLUMN retry_base_ms integer NOT NULL DEFAULT 0 CHECK (retry_base_ms BETWEEN 0 AND 3600000),
    ADD COLUMN retry_cap_ms integer NOT NULL DEFAULT 0 CHECK (retry_cap_ms BETWEEN 0 AND 86400000),
    ADD COLUMN retry_jitter text NOT NULL DEFAULT 'none' CHECK (retry_jitter IN ('none', 'full', 'equal'));
