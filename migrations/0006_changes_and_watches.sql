-- The change log, its retention horizon, and the throttled wake-ups of
-- change-log readers.

-- Every committed change to a resource appends one row at the position
-- stamped on the resource row.
--
-- Why (txid, seq) and not a plain sequence: sequence numbers are handed out
-- in statement order, not commit order, so a reader that has seen number
-- 101 may later find a 100 that committed after it. A reader here reads only
-- rows whose txid is below change_frontier() — every transaction below the
-- frontier has finished, and every transaction that starts later gets a
-- higher id — and orders by (txid, seq). Nothing can appear behind a
-- position a reader has passed. A long-running writer holds the frontier
-- back (delaying readers), never makes them skip.
--
-- There is no index on recorded_at: retention walks the oldest positions
-- along the primary key (positions follow commit time closely).
CREATE TABLE resource_changes (
    txid        bigint      NOT NULL,
    seq         bigint      NOT NULL,
    resource_id uuid        NOT NULL,
    kind        text        NOT NULL,
    change      text        NOT NULL CHECK (change IN ('added', 'modified', 'deleted')),
    -- The final state of a physically deleted resource (NULL otherwise: read the row).
    image       jsonb,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (txid, seq)
);

-- Read by key or by range: a statistics target of 10 still gives the row
-- count and keeps ANALYZE of a long log cheap.
ALTER TABLE resource_changes
    ALTER COLUMN txid SET STATISTICS 10,
    ALTER COLUMN seq SET STATISTICS 10,
    ALTER COLUMN resource_id SET STATISTICS 10,
    ALTER COLUMN kind SET STATISTICS 10,
    ALTER COLUMN change SET STATISTICS 10,
    ALTER COLUMN image SET STATISTICS 10,
    ALTER COLUMN recorded_at SET STATISTICS 10;

-- The newest change-log position that retention has deleted. A watch may
-- resume only from a position at or above it; below it, changes are gone.
CREATE TABLE watch_horizon (
    log  text   PRIMARY KEY,
    txid bigint NOT NULL DEFAULT 0,
    seq  bigint NOT NULL DEFAULT 0
);
INSERT INTO watch_horizon (log) VALUES ('resource_changes');

-- Gates of the throttled NOTIFY (notify_throttled): pg_notify serialises
-- committing transactions, so writers wake readers at most once per short
-- window per channel. Sequences, because they are not transactional: a long
-- transaction that claimed a window cannot hide the claim from others. A
-- wake is only a latency hint; readers also poll.
CREATE SEQUENCE wake_resource_changed AS bigint MINVALUE 0 START 0;
CREATE SEQUENCE wake_event_changed AS bigint MINVALUE 0 START 0;
-- Brokers wake on new work.
CREATE SEQUENCE wake_work_ready AS bigint MINVALUE 0 START 0;
-- The drainer wakes on new results.
CREATE SEQUENCE wake_outbox_ready AS bigint MINVALUE 0 START 0;
