-- A rollup keeps its tree's place in the claim order (issue 48): the tasks
-- pend_owners queues for owners whose children settled take an id ordered at
-- the owner's creation instead of now. enqueue_tasks and schedule_eligible
-- gain a trailing `p_by_age boolean DEFAULT false` for it; their old
-- signatures are dropped here and functions/schedule.sql creates the new
-- ones (existing calls read the default). IF EXISTS: on a fresh database the
-- function files have not run yet.
DROP FUNCTION IF EXISTS enqueue_tasks(task_candidate[], text, text, text);
DROP FUNCTION IF EXISTS schedule_eligible(uuid[]);
