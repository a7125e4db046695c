-- The label index holds resources that have labels, and only those.
--
-- A GIN index with pending-list inserts (the default) writes every new
-- row version into its pending list and rewrites its metapage with it: one
-- WAL record per version, all of them on that one page. A resource without
-- labels still got an entry (GIN indexes an empty value as a placeholder),
-- on its insert and again on every sync that could not stay on its page.
-- In a 100k noop run that was 180,691 metapage records, 30 MB of the run's
-- 250 MB of WAL, and eight concurrent appliers and the drain took turns on
-- the metapage's lock.
--
-- Only an equality requirement reads this index (containment, `@>`), and
-- a resource without labels can never satisfy one, so leaving those
-- resources out loses no match. The selector's SQL states the predicate
-- next to the containment, so the planner can prove the partial index
-- applies (store::resources::push_selector).
CREATE INDEX resources_labeled_idx ON resources USING gin (labels jsonb_path_ops)
    WHERE labels <> '{}'::jsonb;
DROP INDEX resources_labels_idx;
