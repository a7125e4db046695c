-- Throttled wake-ups (NOTIFY) for readers of the change log, the event log,
-- the queue and the outbox. The gates are the wake_* sequences.

-- Throttled NOTIFY with a 5 ms window. Readers that miss a suppressed
-- wake-up fall back to their linger polling, so on an idle system a 50 ms
-- window was most of the apply->Ready latency (p50 18 ms in engine-bench);
-- 200 notifications per second per channel still keep committing
-- transactions off the notification queue's lock.
CREATE OR REPLACE FUNCTION notify_throttled(p_channel text, p_gate regclass)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    bucket bigint := floor(extract(epoch FROM clock_timestamp()) * 200)::bigint;
BEGIN
    IF bucket > COALESCE(pg_sequence_last_value(p_gate), 0) THEN
        PERFORM setval(p_gate, bucket);
        PERFORM pg_notify(p_channel, '');
    END IF;
END
$function$;
