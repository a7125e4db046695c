-- Every read of a resource's events names the resource (list, watch,
-- resume, head), and a resource keeps a bounded number of runs per category
-- (event_runs_per_timeline, 100 by default). The timeline index alone finds
-- them all; sorting a few hundred rows by time or by log position costs
-- less than keeping two more indexes per resource that every event insert
-- and extension writes (the first event of each new resource was two of the
-- ~30 index insertions a resource costs on its way to Ready).
DROP INDEX resource_events_recent_idx;
DROP INDEX resource_events_position_idx;
