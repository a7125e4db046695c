-- schedule_eligible, continued (0012): with statistics that lag a growing
-- backlog, the planner still preferred a bitmap scan of every lagging
-- resource hash-joined to the given ids (131-236 ms per 500 ids under
-- converge-load instead of ~10 ms). Without hash and merge joins the only
-- plan left probes the primary key once per id.
ALTER FUNCTION schedule_eligible(uuid[])
    SET enable_hashjoin = off
    SET enable_mergejoin = off;
