-- sk schema, version 3 (SQLite): a concurrency limit per queue across all workers, as the
-- PostgreSQL schema's version 8.

-- At most this many jobs of the queue run at once, over every worker; NULL: no limit.
ALTER TABLE __PREFIX__queues_t ADD COLUMN queue_global_limit INTEGER NULL;

-- The running jobs of a queue; only leased rows enter it.
CREATE INDEX __PREFIX__tasks_queue_running_idx
    ON __PREFIX__tasks_queue_t (task_queue, task_locked_until_ts)
    WHERE task_locked_by IS NOT NULL;
