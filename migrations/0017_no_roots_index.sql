-- resources_roots_created_idx costs more than it saves (issue 8's write
-- budget): "roots only" lists scan the newest-first index and skip
-- children. Roots are most resources in a flat system and one per tree
-- otherwise, so the skip costs about a tree's size per root listed, while
-- the partial index cost two entries (create and sync) per root resource.
DROP INDEX resources_roots_created_idx;
