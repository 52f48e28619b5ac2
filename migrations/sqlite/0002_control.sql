-- sk schema, version 2 (SQLite): job control, as the PostgreSQL schema's version 7.

-- Queues an operator paused: no worker claims their jobs; running jobs finish.
CREATE TABLE __PREFIX__queues_t (
    queue_name TEXT NOT NULL PRIMARY KEY,
    queue_paused_at_ts TEXT NULL,
    queue_updated_at_ts TEXT NOT NULL
);

-- A run-time limit given at enqueue, over the job type's own.
ALTER TABLE __PREFIX__tasks_queue_t ADD COLUMN task_timeout_ms INTEGER NULL;

-- The attempt and run-time limits of a job that failed for good or was cancelled, so a
-- retry gives it a fresh budget.
ALTER TABLE __PREFIX__task_results_t ADD COLUMN task_max_attempts INTEGER NULL;
ALTER TABLE __PREFIX__task_results_t ADD COLUMN task_timeout_ms INTEGER NULL;

-- Operators' counts of the jobs that failed for good or were cancelled, by queue, task
-- type and tenant; only those rows enter these indexes.
CREATE INDEX __PREFIX__task_results_ended_queue_idx
    ON __PREFIX__task_results_t (task_queue, task_status) WHERE task_status IN (6, 7);
CREATE INDEX __PREFIX__task_results_ended_type_idx
    ON __PREFIX__task_results_t (task_type, task_status) WHERE task_status IN (6, 7);
CREATE INDEX __PREFIX__task_results_ended_tenant_idx
    ON __PREFIX__task_results_t (task_tenant, task_status)
    WHERE task_status IN (6, 7);

-- Live workers: written at start, stamped by every heartbeat, removed by a graceful stop.
CREATE TABLE __PREFIX__workers_t (
    worker_id TEXT NOT NULL PRIMARY KEY,
    worker_host TEXT NOT NULL,
    worker_pid INTEGER NOT NULL,
    worker_queues TEXT NULL,
    worker_task_types TEXT NOT NULL,
    worker_concurrency INTEGER NOT NULL,
    worker_heartbeat_ms INTEGER NOT NULL,
    worker_started_at_ts TEXT NOT NULL,
    worker_seen_at_ts TEXT NOT NULL
);

-- Throughput: each worker's runs per minute and task type, with a run-time histogram.
CREATE TABLE __PREFIX__job_stats_t (
    stat_minute_ts TEXT NOT NULL,
    task_type TEXT NOT NULL,
    stat_owner TEXT NOT NULL,
    stat_processed INTEGER NOT NULL,
    stat_failed INTEGER NOT NULL,
    stat_run_ms INTEGER NOT NULL,
    stat_histogram TEXT NOT NULL,
    PRIMARY KEY (stat_minute_ts, task_type, stat_owner)
);
