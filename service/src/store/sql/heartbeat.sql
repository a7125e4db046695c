-- A worker's heartbeat: refreshes the leases it attests that this broker
-- ($1) holds, in the three leased tables at once. Each pair of arrays is a
-- table's (token, epoch) list; an empty pair updates nothing.
WITH tasks AS (
    UPDATE work_queue t SET heartbeat_at = now()
    FROM unnest($2::uuid[], $3::bigint[]) AS l(token, epoch)
    WHERE t.lease_token = l.token AND t.claim_epoch = l.epoch AND t.broker_id = $1
    RETURNING 1
), deliveries AS (
    UPDATE reactor_deliveries t SET heartbeat_at = now()
    FROM unnest($4::uuid[], $5::bigint[]) AS l(token, epoch)
    WHERE t.lease_token = l.token AND t.claim_epoch = l.epoch AND t.broker_id = $1
    RETURNING 1
), operations AS (
    UPDATE operations t SET heartbeat_at = now()
    FROM unnest($6::uuid[], $7::bigint[]) AS l(token, epoch)
    WHERE t.lease_token = l.token AND t.claim_epoch = l.epoch AND t.broker_id = $1
    RETURNING 1
)
SELECT (SELECT count(*) FROM tasks) + (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM operations)
