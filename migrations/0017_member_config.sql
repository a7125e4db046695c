-- The static, non-secret settings a member booted with (role, listen
-- address, pool size, ...; never a database URL or a key), written when it
-- registers and shown by ListClusterMembers for diagnosis. Its connected
-- workers have had their column (workers) since 0001; the heartbeat now
-- fills it.
ALTER TABLE cluster_members ADD COLUMN config jsonb NOT NULL DEFAULT '{}'::jsonb;
