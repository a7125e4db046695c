-- The task queue becomes one table (it had 16 range partitions by shard_id).
--
-- Every statement on the queue is keyed by task id or bounded by a shard
-- range, and runs from a cached generic plan (0019, 0022). PostgreSQL 15
-- cannot prune the result relations of an UPDATE or DELETE on a partitioned
-- table when the key comes from a join, so each execution of such a plan
-- opened all 16 partitions, their index scans and a RETURNING projection
-- per partition before it touched a row: in a perf profile of a one-result
-- fence, 52% of the backend's time was ExecInitModifyTable. Flat, the same
-- calls in pgbench on an idle database took 0.31-0.44 ms against
-- 0.53-0.67 ms (claim and fence alike). The shard-range predicates stay:
-- the claim index leads with (kind, kind_version, shard_id), so a range is
-- still one index range. See ADR 13.
--
-- The queue is unlogged and holds only what is in flight or waiting, so
-- the copy is as large as the backlog at the moment of the upgrade.

CREATE UNLOGGED TABLE work_queue_flat (LIKE work_queue INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02,
          autovacuum_vacuum_threshold = 50, autovacuum_analyze_threshold = 50);

INSERT INTO work_queue_flat SELECT * FROM work_queue;

DROP TABLE work_queue;
ALTER TABLE work_queue_flat RENAME TO work_queue;

ALTER TABLE work_queue ADD CONSTRAINT work_queue_pkey PRIMARY KEY (id, shard_id);
ALTER TABLE work_queue ADD CONSTRAINT work_queue_resource_id_task_type_shard_id_key
    UNIQUE (resource_id, task_type, shard_id);
CREATE INDEX work_queue_claim_idx ON work_queue (kind, kind_version, shard_id) WHERE broker_id IS NULL;
CREATE INDEX work_queue_leased_idx ON work_queue (kind, kind_version) WHERE broker_id IS NOT NULL;
CREATE INDEX work_queue_heartbeat_idx ON work_queue (heartbeat_at) WHERE broker_id IS NOT NULL;
CREATE INDEX work_queue_lease_idx ON work_queue (lease_token) WHERE lease_token IS NOT NULL;
