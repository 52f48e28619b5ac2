-- sk schema, version 1 (SQLite): the PostgreSQL schema's tables as of its version 6, in
-- one file. SQLite has no schemas: `__PREFIX__` is the table prefix, and a schema name
-- other than `public` goes in front of it (`Schema::new("jobs", "sk_")` gives
-- `jobs_sk_tasks_queue_t`), so two schemas share a file without meeting.
--
-- Times are text, `YYYY-MM-DDTHH:MM:SS.ffffffZ` in UTC, always with six digits, so that
-- comparing two times as text compares them in time (sk binds every time in this form;
-- the defaults below write it too). Ids are UUIDs as 16-byte blobs.

-- The small, hot table of live jobs. The rowid is the FIFO lock handle (AUTOINCREMENT:
-- never reused, so later jobs always sort after earlier ones).
CREATE TABLE __PREFIX__tasks_queue_t (
    task_lock_handle_id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id BLOB NOT NULL UNIQUE,
    task_type TEXT NOT NULL,
    task_source TEXT NOT NULL DEFAULT 'app',
    task_payload TEXT NULL,
    -- Lower runs first.
    task_priority INTEGER NOT NULL DEFAULT 0,
    task_posted_at_ts TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z'),
    -- Not-before time while waiting; lease expiry while running.
    task_locked_until_ts TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z'),
    task_queue TEXT NOT NULL DEFAULT 'default',
    -- (task_id, task_attempt, task_locked_by) fences every write under a lease.
    task_attempt INTEGER NOT NULL DEFAULT 0,
    task_max_attempts INTEGER NOT NULL DEFAULT 25,
    task_locked_by TEXT NULL,
    task_claimed_at_ts TEXT NULL,
    -- Attempts whose lease ran out, as a JSON array, until the next recorded outcome.
    task_lost_attempts TEXT NULL,
    task_tenant TEXT NULL,
    task_correlation_id TEXT NULL,
    -- A JSON object.
    task_metadata TEXT NULL,
    -- Unique keys: mode 1 skip, 2 restart, 3 replace (unique among live jobs, here);
    -- NULL for the scheduler's ticks, unique by their id in the results table.
    task_unique_key TEXT NULL,
    task_unique_mode INTEGER NULL,
    task_rerun INTEGER NOT NULL DEFAULT 0,
    task_every_ms INTEGER NULL,
    -- Whether the results row exists (sk's enqueue writes it, through the trigger below).
    task_has_result INTEGER NOT NULL DEFAULT 0
);

-- Serves the claim: rows in exactly the order it takes them (priority, not-before, FIFO).
CREATE INDEX __PREFIX__tasks_queue_dequeue_idx
    ON __PREFIX__tasks_queue_t (task_priority, task_locked_until_ts, task_lock_handle_id);
CREATE UNIQUE INDEX __PREFIX__tasks_queue_unique_key_idx
    ON __PREFIX__tasks_queue_t (task_unique_key) WHERE task_unique_key IS NOT NULL;

-- One row per job ever posted, kept after the job leaves the queue until the retention
-- prunes it (row by row: SQLite has no partitions).
CREATE TABLE __PREFIX__task_results_t (
    task_id BLOB NOT NULL PRIMARY KEY,
    task_type TEXT NOT NULL,
    task_source TEXT NOT NULL,
    task_payload TEXT NULL,
    task_queue TEXT NOT NULL DEFAULT 'default',
    -- unprocessed 1, processing 2, processed 3, error 4, faulted 5, fatal 6, cancelled 7
    task_status INTEGER NOT NULL,
    task_priority INTEGER NOT NULL,
    task_unique_key TEXT NULL,
    task_unique_mode INTEGER NULL,
    task_error_count INTEGER NOT NULL DEFAULT 0,
    task_last_error_type TEXT NULL,
    task_last_error_message TEXT NULL,
    task_last_error_detail TEXT NULL,
    task_last_error TEXT NULL,
    task_last_error_is_recoverable INTEGER NOT NULL DEFAULT 0,
    task_processing_time_milliseconds INTEGER NOT NULL DEFAULT 0,
    task_posted_at_ts TEXT NOT NULL,
    task_first_processing_attempted_at_ts TEXT NULL,
    task_last_processing_attempted_at_ts TEXT NULL,
    task_processing_finalized_at_ts TEXT NULL,
    -- Every attempt that did not succeed, as a JSON array (seed 004's audit log).
    task_errors TEXT NOT NULL DEFAULT '[]',
    task_last_locked_by TEXT NULL,
    task_output TEXT NULL,
    task_tenant TEXT NULL,
    task_correlation_id TEXT NULL,
    task_metadata TEXT NULL
);

CREATE INDEX __PREFIX__task_results_type_idx ON __PREFIX__task_results_t (task_type)
    WHERE task_status NOT IN (1, 3);
CREATE INDEX __PREFIX__task_results_status_idx ON __PREFIX__task_results_t (task_status)
    WHERE task_status NOT IN (1, 3);
CREATE INDEX __PREFIX__task_results_tenant_idx ON __PREFIX__task_results_t (task_tenant)
    WHERE task_tenant IS NOT NULL;
CREATE INDEX __PREFIX__task_results_correlation_idx ON __PREFIX__task_results_t (task_correlation_id)
    WHERE task_correlation_id IS NOT NULL;
-- Serves the retention's pruning.
CREATE INDEX __PREFIX__task_results_finalized_idx
    ON __PREFIX__task_results_t (task_processing_finalized_at_ts)
    WHERE task_processing_finalized_at_ts IS NOT NULL;

-- A job's results row is written with its queue row, in the same statement: SQLite has no
-- data-modifying WITH, and an enqueue through the application's pool or transaction is
-- one statement. A row another producer inserts (task_has_result = 0) gets its results
-- row when a worker records its first outcome.
CREATE TRIGGER __PREFIX__tasks_queue_results_row AFTER INSERT ON __PREFIX__tasks_queue_t
WHEN NEW.task_has_result
BEGIN
    INSERT INTO __PREFIX__task_results_t (task_id, task_type, task_source, task_queue, task_status,
        task_priority, task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant,
        task_correlation_id, task_metadata)
    VALUES (NEW.task_id, NEW.task_type, NEW.task_source, NEW.task_queue, 1, NEW.task_priority,
        NEW.task_unique_key, NEW.task_unique_mode, NEW.task_posted_at_ts, NEW.task_tenant,
        NEW.task_correlation_id, NEW.task_metadata)
    ON CONFLICT (task_id) DO NOTHING;
END;

-- Per-type execution statistics of each worker (seed 001).
CREATE TABLE __PREFIX__task_execution_time_stats_t (
    et_payload_type TEXT NOT NULL,
    et_owner_process_id TEXT NOT NULL,
    et_avg_execution_time INTEGER NOT NULL,
    et_fastest_execution_time INTEGER NOT NULL,
    et_longest_execution_time INTEGER NOT NULL,
    et_total_execution_time INTEGER NOT NULL,
    et_n_execution_cycles INTEGER NOT NULL,
    et_last_execution_time INTEGER NOT NULL DEFAULT 0,
    et_last_updated_ts TEXT NOT NULL,
    PRIMARY KEY (et_payload_type, et_owner_process_id)
);

-- Per-process counters, written periodically by each worker's maintenance (seed 001).
CREATE TABLE __PREFIX__metrics_t (
    metric_owner_process_id TEXT NOT NULL,
    metric_id TEXT NOT NULL,
    metric_category TEXT NOT NULL,
    metric_value INTEGER NOT NULL DEFAULT 0,
    metric_last_updated TEXT NOT NULL,
    PRIMARY KEY (metric_owner_process_id, metric_id)
);

-- Cron schedules stored in the database (`sk_runtime::StoredSchedules`).
CREATE TABLE __PREFIX__schedules_t (
    schedule_name TEXT NOT NULL PRIMARY KEY,
    task_type TEXT NOT NULL,
    task_payload TEXT NOT NULL,
    schedule_cron TEXT NOT NULL,
    schedule_overlap INTEGER NOT NULL DEFAULT 0,
    schedule_updated_at_ts TEXT NOT NULL
);
