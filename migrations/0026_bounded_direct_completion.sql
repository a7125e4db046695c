-- A direct completion gives up on a resource lock after 100 ms. The broker
-- session waits for its flush, so a completion blocked behind a row lock
-- (an API transaction, a drain, a composition, a user's own transaction on
-- the table) stalled its whole worker stream: no dispatches and no other
-- results until the lock went. Failing fast, the session hands the same
-- results to the outbox, whose append takes no resource locks, and the
-- drain applies them once the lock is gone (ADR 12's fallback).
ALTER FUNCTION complete_work(jsonb) SET lock_timeout = '100ms';
