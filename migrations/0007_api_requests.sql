-- Idempotent requests.
--
-- The answer to every successful mutating call that carried a request_id,
-- written in the same transaction as its effect, so a retry gets the first
-- answer and never a second effect. The row is inserted first (a concurrent
-- retry waits on it) and the answer filled in before commit. Trimmed by age.
CREATE TABLE api_requests (
    request_id   text        PRIMARY KEY,
    method       text        NOT NULL,
    request_hash bytea       NOT NULL,
    response     bytea       NOT NULL DEFAULT ''::bytea,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX api_requests_created_idx ON api_requests (created_at);
