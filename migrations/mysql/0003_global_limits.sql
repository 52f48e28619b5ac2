-- sk schema, version 3 (MySQL / MariaDB): a concurrency limit per queue across all
-- workers, as the PostgreSQL schema's version 8.

-- At most this many jobs of the queue run at once, over every worker; NULL: no limit.
ALTER TABLE __PREFIX__queues_t ADD COLUMN IF NOT EXISTS queue_global_limit INT NULL;

-- The running jobs of a queue (InnoDB has no partial index: waiting rows enter it with
-- a NULL worker, and a count reads only the leased ones).
CREATE INDEX IF NOT EXISTS __PREFIX__tasks_queue_running
    ON __PREFIX__tasks_queue_t (task_queue, task_locked_by, task_locked_until_ts);
