-- Foundation: row ids, the shard mapping and the cluster membership registry.
--
-- Work is split into 256 logical shards. Every pod registers itself in
-- cluster_members and heartbeats; each pod computes its own contiguous shard
-- range from the live members of its role, so there is no leader.
--
-- The three functions here are used by column defaults and generated columns
-- of later tables, so they must exist before those tables and live in this
-- versioned migration (not in functions/): changing one needs a new
-- migration. Every other function is in migrations/functions/.

-- The shard of a row id. mod() before abs(): hashtext() can return INT_MIN,
-- whose abs() would overflow. The modulus must equal shard_count().
CREATE OR REPLACE FUNCTION shard_of(p_id uuid)
 RETURNS smallint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$ SELECT abs(mod(hashtext(p_id::text), 256))::smallint $function$;

-- Time-ordered ids take their random bits from the backend's own
-- pseudo-random generator instead of the operating system's strong one.
--
-- Every resource costs three ids at creation (the resource, its first
-- event, its task). gen_random_uuid() asks OpenSSL for 16 strong random
-- bytes on every call, and the old body then spliced the timestamp into
-- them through overlay, set_bit and a hex round trip: 1.9 us per id in
-- psql (100,000 calls: 192 ms), and OpenSSL alone was 1.3% of all CPU in
-- a 100k load's system profile. Ids are not secrets (the API shows them);
-- they need to grow with time and not collide. The same UUIDv7 layout is
-- now built from two integers: 48 bits of Unix milliseconds, the version
-- nibble 0111 and 12 random bits, then the variant bits 10 and 62 more
-- random bits, all from random(), which PostgreSQL seeds per backend from
-- the strong source: 0.76 us per id (100,000 calls: 76 ms). Lease tokens,
-- which do fence workers, still come from gen_random_uuid().
CREATE OR REPLACE FUNCTION time_ordered_uuid()
 RETURNS uuid
 LANGUAGE sql
 PARALLEL RESTRICTED
AS $function$
    SELECT encode(
        int8send((floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint << 16)
                 | 28672 | (random() * 4095)::bigint)
        || int8send(((random() * 2147483647)::bigint << 31) | (random() * 2147483647)::bigint
                    | (-9223372036854775808)::bigint),
        'hex')::uuid
    $function$;

-- The writing transaction's id as a bigint (assigns one if needed).
CREATE OR REPLACE FUNCTION current_txid()
 RETURNS bigint
 LANGUAGE sql
AS $function$ SELECT pg_current_xact_id()::text::bigint $function$;

CREATE TABLE cluster_members (
    member_id      text        PRIMARY KEY,
    role           text        NOT NULL CHECK (role IN ('all', 'control', 'broker')),
    state          text        NOT NULL DEFAULT 'serving' CHECK (state IN ('serving', 'draining')),
    version        text        NOT NULL,
    hostname       text        NOT NULL,
    pid            integer     NOT NULL,
    listen_addr    text        NOT NULL,
    -- The shard range [shard_lo, shard_hi] this member last computed for itself.
    shard_lo       smallint,
    shard_hi       smallint,
    in_flight      integer     NOT NULL DEFAULT 0,
    -- Snapshot of the workers connected to this member (broker duty).
    workers        jsonb       NOT NULL DEFAULT '[]'::jsonb,
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL DEFAULT now(),
    -- Reported with each heartbeat: connected worker streams and the broker's
    -- counters since start ({dispatched, applied, failed, stale, composed}),
    -- so operators can see stale results the fence dropped.
    connected_workers integer  NOT NULL DEFAULT 0,
    counters       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    CHECK ((shard_lo IS NULL) = (shard_hi IS NULL)),
    CHECK (shard_lo IS NULL OR (0 <= shard_lo AND shard_lo <= shard_hi AND shard_hi < 256))
) WITH (
    -- Tiny but write-hot (a heartbeat every few seconds per pod): room for HOT
    -- updates, and vacuum by a row count rather than a fraction of the table.
    fillfactor = 70,
    autovacuum_vacuum_threshold = 2000,
    autovacuum_vacuum_scale_factor = 0
);
