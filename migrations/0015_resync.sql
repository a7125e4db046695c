-- Periodic resync: a reconcile queued at an unchanged generation because the
-- kind's resync interval passed ('resync'; 'resyncRecompose' also re-runs the
-- composer).

ALTER TABLE work_queue DROP CONSTRAINT work_queue_cause_check;
ALTER TABLE work_queue ADD CONSTRAINT work_queue_cause_check
    CHECK (cause IN ('configChange', 'resync', 'resyncRecompose'));
