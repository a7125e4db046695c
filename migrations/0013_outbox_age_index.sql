-- The drain takes the oldest results of its shard range. Its index was led
-- by shard_id, so an order by age over a range of shards had to read and
-- sort the whole range: once a backlog built up (the 1M converge-load run)
-- every drain sorted tens of thousands of rows per partition and fell
-- further behind. Led by created_at, each partition's scan stops after the
-- batch (a merge of the partitions' orders) and shard_id is checked in the
-- index.
CREATE INDEX work_outbox_age_idx ON work_outbox (created_at, shard_id);
DROP INDEX work_outbox_drain_idx;
