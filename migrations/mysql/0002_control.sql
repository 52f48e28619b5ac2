-- sk schema, version 2 (MySQL / MariaDB): job control, as the PostgreSQL schema's version 7.

-- Queues an operator paused: no worker claims their jobs; running jobs finish.
CREATE TABLE IF NOT EXISTS __PREFIX__queues_t (
    queue_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    queue_paused_at_ts DATETIME(6) NULL,
    queue_updated_at_ts DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- A run-time limit given at enqueue, over the job type's own.
ALTER TABLE __PREFIX__tasks_queue_t ADD COLUMN IF NOT EXISTS task_timeout_ms BIGINT NULL;

-- The attempt and run-time limits of a job that failed for good or was cancelled, so a
-- retry gives it a fresh budget.
ALTER TABLE __PREFIX__task_results_t
    ADD COLUMN IF NOT EXISTS task_max_attempts INT NULL,
    ADD COLUMN IF NOT EXISTS task_timeout_ms BIGINT NULL;

-- Live workers: written at start, stamped by every heartbeat, removed by a graceful stop.
CREATE TABLE IF NOT EXISTS __PREFIX__workers_t (
    worker_id VARCHAR(255) NOT NULL PRIMARY KEY,
    worker_host VARCHAR(255) NOT NULL,
    worker_pid INT NOT NULL,
    worker_queues LONGTEXT NULL,
    worker_task_types LONGTEXT NOT NULL,
    worker_concurrency INT NOT NULL,
    worker_heartbeat_ms BIGINT NOT NULL,
    worker_started_at_ts DATETIME(6) NOT NULL,
    worker_seen_at_ts DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Throughput: each worker's runs per minute and task type, with a run-time histogram.
CREATE TABLE IF NOT EXISTS __PREFIX__job_stats_t (
    stat_minute_ts DATETIME(6) NOT NULL,
    task_type VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    stat_owner VARCHAR(255) NOT NULL,
    stat_processed BIGINT NOT NULL,
    stat_failed BIGINT NOT NULL,
    stat_run_ms BIGINT NOT NULL,
    stat_histogram LONGTEXT NOT NULL,
    PRIMARY KEY (stat_minute_ts, task_type, stat_owner)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
