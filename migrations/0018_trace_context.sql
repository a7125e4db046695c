-- Traces across the queue (issue 28): a task queued inside a traced call
-- keeps the call's W3C trace context, and a claim hands it to the broker
-- with the time the generation was queued (the start of the reconcile
-- latency). NULL when tracing is off: nothing is written for it then.
ALTER TABLE work_queue ADD COLUMN trace_context text;
ALTER TABLE work_queue ALTER COLUMN trace_context SET STATISTICS 0;

ALTER TYPE claimed_task
    ADD ATTRIBUTE trace_context text,
    ADD ATTRIBUTE queued_at timestamptz;
