-- Bookkeeping of the repeatable function definitions (migrations/functions/,
-- applied by service/src/db/migrate.rs after the versioned migrations): the
-- SHA-256 of each file as last applied. A file whose hash differs is applied
-- again, and its row updated, in one transaction.
CREATE TABLE schema_functions (
    file       text        PRIMARY KEY,
    sha256     bytea       NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
