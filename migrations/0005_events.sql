-- Events, aggregated into runs, and the horizons of their trimmed history.

CREATE TABLE resource_events (
    id          uuid        PRIMARY KEY DEFAULT time_ordered_uuid(),
    -- No foreign key: its check cost every event insert a lookup and a
    -- key-share lock on the resource. The resources' delete trigger removes
    -- a deleted resource's events; an event written in a race with that
    -- deletion is never read (every read names its resource) and expires.
    resource_id uuid        NOT NULL,
    category    text        NOT NULL,
    type        text        NOT NULL CHECK (type IN ('Normal', 'Warning')),
    reason      text        NOT NULL,
    message     text        NOT NULL DEFAULT '',
    detail      jsonb,
    count       bigint      NOT NULL DEFAULT 1 CHECK (count >= 1),
    first_at    timestamptz NOT NULL DEFAULT now(),
    last_at     timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL DEFAULT '',
    generation  bigint      NOT NULL DEFAULT 0,
    -- Append order of the run within its timeline (fixed at insert).
    run_seq     bigint      NOT NULL DEFAULT nextval('change_seq'),
    -- Event-log position of the latest change to the run (moves on extension).
    ev_txid     bigint      NOT NULL DEFAULT current_txid(),
    ev_seq      bigint      NOT NULL DEFAULT nextval('change_seq')
);

-- Read by key or by resource with plans that do not depend on value
-- distributions: a target of 10 keeps ANALYZE cheap, and the payload
-- columns get no statistics at all.
ALTER TABLE resource_events
    ALTER COLUMN id SET STATISTICS 10,
    ALTER COLUMN resource_id SET STATISTICS 10,
    ALTER COLUMN category SET STATISTICS 10,
    ALTER COLUMN type SET STATISTICS 10,
    ALTER COLUMN reason SET STATISTICS 10,
    ALTER COLUMN message SET STATISTICS 0,
    ALTER COLUMN detail SET STATISTICS 0,
    ALTER COLUMN count SET STATISTICS 10,
    ALTER COLUMN first_at SET STATISTICS 10,
    ALTER COLUMN last_at SET STATISTICS 10,
    ALTER COLUMN actor SET STATISTICS 10,
    ALTER COLUMN generation SET STATISTICS 10,
    ALTER COLUMN run_seq SET STATISTICS 10,
    ALTER COLUMN ev_txid SET STATISTICS 10,
    ALTER COLUMN ev_seq SET STATISTICS 10;

-- Every read names the resource, whose runs per category are bounded, so
-- the timeline index alone finds them; sorting those few rows by time or
-- position is cheaper than two more indexes written on every event.
CREATE INDEX resource_events_timeline_idx ON resource_events (resource_id, category, run_seq DESC);
-- Retention by age.
CREATE INDEX resource_events_age_idx ON resource_events (last_at);

-- Per resource: the newest event-log position among its deleted event runs.
-- An event watch may resume only from a position at or above it.
CREATE TABLE event_horizon (
    resource_id uuid   PRIMARY KEY REFERENCES resources (id) ON DELETE CASCADE,
    txid        bigint NOT NULL,
    seq         bigint NOT NULL
);
