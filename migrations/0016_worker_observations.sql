-- Worker-reported observations: the events a result carries, and liveness
-- conditions.

-- A result's events ([{category, type, reason, message, detail, actor}],
-- checked by the broker), carried from the fence through the outbox to the
-- drain. NULL = none, which is every result of a worker that reports none.
ALTER TYPE task_result ADD ATTRIBUTE events jsonb;
ALTER TABLE work_outbox ADD COLUMN events jsonb;

-- A liveness condition holds for liveness_ms after its last report; reads
-- show it as Unknown once expires_at has passed. Both NULL = an ordinary
-- condition.
ALTER TABLE resource_conditions
    ADD COLUMN liveness_ms bigint CHECK (liveness_ms BETWEEN 1000 AND 86400000),
    ADD COLUMN expires_at timestamptz,
    ADD CONSTRAINT resource_conditions_liveness_check CHECK ((liveness_ms IS NULL) = (expires_at IS NULL));

-- complete_operation takes the outcome's events (functions/operations.sql
-- creates the new signature). The old one exists only in a database
-- migrated before this release: a fresh one gets its functions after all
-- migrations.
DROP FUNCTION IF EXISTS complete_operation(uuid, bigint, jsonb, jsonb, jsonb, boolean, bigint, text, text, boolean, integer);
