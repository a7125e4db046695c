-- PL/pgSQL plans each statement that takes a parameter with the parameter's
-- value (a "custom plan") for its first five runs, and keeps doing so for
-- good when the custom plans look cheaper than the generic one. An array
-- parameter always does: the planner sees its length in a custom plan and
-- guesses a hundred rows in a generic one. So every call of these functions
-- planned its statements again: schedule_eligible of one id took 1.2-2.2 ms
-- on an idle database, 0.3-0.7 ms with a cached generic plan (measured with
-- psql on a 10k database). Their joins are forced into index probes
-- (0012, 0018), so the generic plan has the shape a custom one would.
ALTER FUNCTION schedule_eligible(uuid[]) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION append_outbox(jsonb) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION claim_range(text, text, smallint, integer, smallint, smallint)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION claim_work(text, text, smallint, integer, smallint, smallint)
    SET plan_cache_mode = force_generic_plan;
