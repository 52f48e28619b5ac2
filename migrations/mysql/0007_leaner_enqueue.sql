-- sk schema, version 7 (MySQL / MariaDB): less written per enqueued job.
--
-- sk's enqueue no longer writes a results row for a job without a unique key: the job is
-- its queue row alone until its first outcome writes the results row, as on PostgreSQL
-- and SQLite (docs/performance.md). Nothing marks a row `task_has_result = 2` any more,
-- so version 5's trigger goes: a row trigger costs its call on every inserted row even
-- when it does nothing (about 1.3 µs a row on MariaDB 10.11).
DROP TRIGGER IF EXISTS __PREFIX__tasks_queue_enqueue;

-- The queue's correlation-id index goes too. InnoDB has no partial index, so every job
-- entered it, most with a NULL, and no claim or finalization read it; the correlation id
-- stays indexed in the results table, where the job list looks for it. PostgreSQL's queue
-- table has no such index either. (`IF EXISTS`: a run cut off after it is completed by
-- the next.)
ALTER TABLE __PREFIX__tasks_queue_t DROP INDEX IF EXISTS __PREFIX__tasks_queue_correlation;
