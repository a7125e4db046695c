-- Claims take the oldest waiting tasks first (ADR 17).
--
-- The claim index was (kind, kind_version, shard_id): a claim over a shard
-- range walked the range shard by shard, and since a resource's shard is a
-- hash of its id, the tasks of one claim lay scattered over the whole
-- queue and the whole resources table, one page each. With the task id
-- (time-ordered) after the kind, a claim walks the queue in creation order:
-- the tasks it takes, and the resources they name, share pages, and so do
-- the results the drain applies later. It is also fair: a shard no longer
-- waits behind the shards numbered before it. The shard range stays an
-- index condition on the last column, so a member that owns part of the
-- ring skips the other members' tasks inside the index.
--
-- The primary key loses shard_id, a leftover of the partitioned queue (a
-- partition key must be part of it). With shard_id in it, the generic plan
-- of the claim's pick preferred walking the primary key with the shard
-- range as its condition, from the oldest, already claimed tasks on.
-- Every lookup by (id, shard_id) stays a lookup by id.
ALTER TABLE work_queue DROP CONSTRAINT work_queue_pkey;
ALTER TABLE work_queue ADD CONSTRAINT work_queue_pkey PRIMARY KEY (id);
DROP INDEX work_queue_claim_idx;
CREATE INDEX work_queue_claim_idx ON work_queue (kind, kind_version, id, shard_id) WHERE broker_id IS NULL;

-- The fence (fence_results) knows the task id, so it should reach its task
-- by primary key, whose keys are time-ordered and close together. With the
-- key down to (id), the planner found the lease index (random tokens) as
-- good and took it instead. The lease index now covers leased tasks only
-- (a task has a lease token exactly while broker_id is set), and the
-- lookups that know nothing but a lease say so; the fence does not, so it
-- cannot take this index.
DROP INDEX work_queue_lease_idx;
CREATE INDEX work_queue_lease_idx ON work_queue (lease_token) WHERE broker_id IS NOT NULL;
