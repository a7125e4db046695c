-- A member's stable identity: who it is across restarts (the embedded data
-- directory it owns, or an operator-given name such as a pod's). A process
-- that joins under an identity held by a registered member is that member's
-- successor, so the predecessor is gone and its row can go at once instead
-- of holding its shard range for the liveness window. At most one
-- registered member holds an identity; members without one never evict.
ALTER TABLE cluster_members ADD COLUMN identity text;
CREATE UNIQUE INDEX cluster_members_identity_key ON cluster_members (identity) WHERE identity IS NOT NULL;
