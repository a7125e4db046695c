-- The watch hub's change-log page with a cached plan. Its position bound
-- makes the planner expect a custom plan to be cheaper than a generic one,
-- so the statement was planned anew on every read (0.42 ms of planning per
-- page against a few hundredths of a millisecond of reading, in the
-- statement log of idle applies), and the hub reads a page per wake-up.
--
-- Still one statement, so the frontier is the xmin of the very snapshot the
-- entries are read in (see store::changes).
CREATE FUNCTION change_page(p_txid bigint, p_seq bigint, p_limit bigint)
    RETURNS TABLE (frontier bigint, txid bigint, seq bigint, resource_id uuid, kind text, change text, image jsonb)
    LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH f AS MATERIALIZED (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS frontier)
    SELECT f.frontier, c.txid, c.seq, c.resource_id, c.kind, c.change, c.image
    FROM f LEFT JOIN LATERAL (
        SELECT l.txid, l.seq, l.resource_id, l.kind, l.change, l.image FROM resource_changes l
        WHERE (l.txid, l.seq) > (p_txid, p_seq) AND l.txid < f.frontier
        ORDER BY l.txid, l.seq LIMIT p_limit) c ON true
    ORDER BY c.txid, c.seq;
END
$$;
