-- sk schema, version 1 (MySQL 8 / MariaDB 10.6+): the PostgreSQL schema's tables as of its
-- version 6, in one file. As on SQLite the tables live in the connection's database:
-- `__PREFIX__` is the table prefix, and a schema name other than `public` goes in front of
-- it (`Schema::new("jobs", "sk_")` gives `jobs_sk_tasks_queue_t`).
--
-- Names that select or identify jobs (task type, queue, tenant, correlation id, unique key,
-- schedule name) compare exactly, as on PostgreSQL: `utf8mb4_bin`. sk reads them back
-- through `CAST(… AS CHAR)`, since a client sees a binary collation as bytes.
--
-- Times are DATETIME(6) in UTC (sqlx sets each connection's time_zone to +00:00; the
-- defaults use UTC_TIMESTAMP). Ids are UUIDs as BINARY(16): a UUIDv7 sorts by posting
-- time, which is what the results table's partitions are ranges of.

-- The small, hot table of live jobs. The auto-increment key is the FIFO lock handle.
CREATE TABLE IF NOT EXISTS __PREFIX__tasks_queue_t (
    task_lock_handle_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_id BINARY(16) NOT NULL,
    task_type VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    task_source VARCHAR(255) NOT NULL DEFAULT 'app',
    task_payload LONGTEXT NULL,
    -- Lower runs first.
    task_priority INT NOT NULL DEFAULT 0,
    task_posted_at_ts DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    -- Not-before time while waiting; lease expiry while running.
    task_locked_until_ts DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    task_queue VARCHAR(255) COLLATE utf8mb4_bin NOT NULL DEFAULT 'default',
    -- (task_id, task_attempt, task_locked_by) fences every write under a lease.
    task_attempt INT NOT NULL DEFAULT 0,
    task_max_attempts INT NOT NULL DEFAULT 25,
    task_locked_by VARCHAR(255) NULL,
    task_claimed_at_ts DATETIME(6) NULL,
    -- Attempts whose lease ran out, as a JSON array, until the next recorded outcome.
    task_lost_attempts LONGTEXT NULL,
    -- Seed 002's tenant and correlation id.
    task_tenant VARCHAR(255) COLLATE utf8mb4_bin NULL,
    task_correlation_id VARCHAR(255) COLLATE utf8mb4_bin NULL,
    -- A JSON object.
    task_metadata LONGTEXT NULL,
    -- Unique keys: mode 1 skip, 2 restart, 3 replace (unique among live jobs: a UNIQUE
    -- index lets any number of NULLs through); NULL for the scheduler's ticks.
    task_unique_key VARCHAR(512) COLLATE utf8mb4_bin NULL,
    task_unique_mode SMALLINT NULL,
    task_rerun TINYINT(1) NOT NULL DEFAULT 0,
    task_every_ms BIGINT NULL,
    -- Whether the results row exists (sk's enqueue writes both).
    task_has_result TINYINT(1) NOT NULL DEFAULT 0,
    UNIQUE KEY __PREFIX__tasks_queue_task_id (task_id),
    UNIQUE KEY __PREFIX__tasks_queue_unique_key (task_unique_key),
    -- Serves the claim: rows in exactly the order it takes them (priority, not-before,
    -- FIFO), so a claim reads (and skips, if locked) little more than what it takes.
    KEY __PREFIX__tasks_queue_dequeue (task_priority, task_locked_until_ts, task_lock_handle_id),
    -- A worker serving some tenants claims by this one (seed 002 keeps the tenant in its
    -- claim index); the correlation id finds a job's related jobs.
    KEY __PREFIX__tasks_queue_tenant (task_tenant, task_priority, task_locked_until_ts, task_lock_handle_id),
    KEY __PREFIX__tasks_queue_correlation (task_correlation_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- One row per job ever posted, kept after the job leaves the queue until the retention
-- retires it. Partitioned by range of the UUIDv7 id, that is by posting time (seed 002's
-- design): maintenance splits `p_future` into the next periods' partitions ahead of time
-- and retires whole partitions past the retention (never one a live job has a row in).
-- `p_future` (and, once maintenance ran, `p_before`) take the ids outside every period,
-- such as another producer's UUIDv4s; the retention prunes those row by row.
CREATE TABLE IF NOT EXISTS __PREFIX__task_results_t (
    task_id BINARY(16) NOT NULL,
    task_type VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    task_source VARCHAR(255) NOT NULL,
    task_payload LONGTEXT NULL,
    task_queue VARCHAR(255) COLLATE utf8mb4_bin NOT NULL DEFAULT 'default',
    -- unprocessed 1, processing 2, processed 3, error 4, faulted 5, fatal 6, cancelled 7
    task_status SMALLINT NOT NULL,
    task_priority INT NOT NULL,
    task_unique_key VARCHAR(512) COLLATE utf8mb4_bin NULL,
    task_unique_mode SMALLINT NULL,
    task_error_count INT NOT NULL DEFAULT 0,
    task_last_error_type VARCHAR(255) NULL,
    task_last_error_message LONGTEXT NULL,
    task_last_error_detail LONGTEXT NULL,
    task_last_error LONGTEXT NULL,
    task_last_error_is_recoverable TINYINT(1) NOT NULL DEFAULT 0,
    task_processing_time_milliseconds BIGINT NOT NULL DEFAULT 0,
    task_posted_at_ts DATETIME(6) NOT NULL,
    task_first_processing_attempted_at_ts DATETIME(6) NULL,
    task_last_processing_attempted_at_ts DATETIME(6) NULL,
    task_processing_finalized_at_ts DATETIME(6) NULL,
    -- Every attempt that did not succeed, as a JSON array (seed 004's audit log).
    task_errors LONGTEXT NOT NULL DEFAULT ('[]'),
    task_last_locked_by VARCHAR(255) NULL,
    task_output LONGTEXT NULL,
    task_tenant VARCHAR(255) COLLATE utf8mb4_bin NULL,
    task_correlation_id VARCHAR(255) COLLATE utf8mb4_bin NULL,
    task_metadata LONGTEXT NULL,
    PRIMARY KEY (task_id),
    KEY __PREFIX__task_results_type (task_type, task_status),
    KEY __PREFIX__task_results_status (task_status),
    KEY __PREFIX__task_results_tenant (task_tenant),
    KEY __PREFIX__task_results_correlation (task_correlation_id),
    -- Serves the retention's pruning by rows.
    KEY __PREFIX__task_results_finalized (task_processing_finalized_at_ts)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
PARTITION BY RANGE COLUMNS (task_id) (PARTITION p_future VALUES LESS THAN (MAXVALUE));

-- Per-type execution statistics of each worker (seed 001).
CREATE TABLE IF NOT EXISTS __PREFIX__task_execution_time_stats_t (
    et_payload_type VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    et_owner_process_id VARCHAR(255) NOT NULL,
    et_avg_execution_time BIGINT NOT NULL,
    et_fastest_execution_time BIGINT NOT NULL,
    et_longest_execution_time BIGINT NOT NULL,
    et_total_execution_time BIGINT NOT NULL,
    et_n_execution_cycles BIGINT NOT NULL,
    et_last_execution_time BIGINT NOT NULL DEFAULT 0,
    et_last_updated_ts DATETIME(6) NOT NULL,
    PRIMARY KEY (et_payload_type, et_owner_process_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Per-process counters, written periodically by each worker's maintenance (seed 001).
CREATE TABLE IF NOT EXISTS __PREFIX__metrics_t (
    metric_owner_process_id VARCHAR(255) NOT NULL,
    metric_id VARCHAR(255) NOT NULL,
    metric_category VARCHAR(255) NOT NULL,
    metric_value BIGINT NOT NULL DEFAULT 0,
    metric_last_updated DATETIME(6) NOT NULL,
    PRIMARY KEY (metric_owner_process_id, metric_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- Cron schedules stored in the database (`sk_runtime::StoredSchedules`).
CREATE TABLE IF NOT EXISTS __PREFIX__schedules_t (
    schedule_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    task_type VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
    task_payload LONGTEXT NOT NULL,
    schedule_cron VARCHAR(255) NOT NULL,
    schedule_overlap TINYINT(1) NOT NULL DEFAULT 0,
    schedule_updated_at_ts DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
