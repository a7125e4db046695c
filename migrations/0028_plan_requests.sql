-- Plans of composer workers (issue 46): a PlanResource that needs a composer
-- worker's answer posts its compose here; a broker holding a stream of a
-- worker of the kind claims it, sends it as a COMPOSE task in plan mode and
-- writes the worker's answer back; the API call waits for it and removes
-- the row. Unlogged: a plan is an answer to a waiting caller, not state;
-- a crash that truncates it fails that call, which the caller retries.
CREATE UNLOGGED TABLE plan_requests (
    -- Also the lease token of the task sent (a random UUID: unguessable).
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind            text        NOT NULL,
    kind_version    smallint    NOT NULL,
    -- The resource as proposed; resource_id is the stored one's (its
    -- children, edges, configs and status are the task's input), NULL for
    -- a resource that would be created.
    resource_id     uuid,
    name            text        NOT NULL,
    labels          jsonb       NOT NULL DEFAULT '{}',
    spec            jsonb       NOT NULL,
    provider_config text,
    -- The generation the apply would give it.
    generation      bigint      NOT NULL,
    state           text        NOT NULL DEFAULT 'pending'
                                CHECK (state IN ('pending', 'running', 'answered')),
    broker_id       text,
    -- The worker's ComposeResult (protobuf), or why there is none.
    result          bytea,
    error_message   text,
    error_reason    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Past it nobody waits: unclaimed rows are not claimed, and the
    -- retention sweep removes what a vanished caller left.
    expires_at      timestamptz NOT NULL,
    CHECK ((state = 'pending') = (broker_id IS NULL))
);

-- The claim's pick: pending requests of a pair, oldest first. Empty unless
-- someone is planning.
CREATE INDEX plan_requests_pending_idx ON plan_requests (kind, kind_version, created_at) WHERE state = 'pending';
CREATE INDEX plan_requests_expires_idx ON plan_requests (expires_at);
