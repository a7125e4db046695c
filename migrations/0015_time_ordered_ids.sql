-- Row ids that grow with time (the UUIDv7 layout: 48 bits of Unix
-- milliseconds, then random bits). Random v4 ids spread every insert over
-- the whole of each index led by an id (resources' primary key, the three
-- per-resource event indexes, the task keys), so at a million resources
-- each insert touches a cold page and, after a checkpoint, logs a full page
-- image of it. Time-ordered ids append to the right edge instead. Shards are
-- unaffected: shard_of() hashes the whole id.
CREATE FUNCTION time_ordered_uuid() RETURNS uuid
    LANGUAGE sql VOLATILE PARALLEL SAFE
    AS $$
    -- Bytes 0-5: milliseconds since the epoch; version nibble 0111 (bits
    -- 52 and 53 set on top of v4's 0100); the variant bits stay v4's.
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
    $$;

ALTER TABLE resources ALTER COLUMN id SET DEFAULT time_ordered_uuid();
ALTER TABLE resource_events ALTER COLUMN id SET DEFAULT time_ordered_uuid();
ALTER TABLE work_queue ALTER COLUMN id SET DEFAULT time_ordered_uuid();
