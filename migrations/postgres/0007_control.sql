-- sk schema, version 7 (PostgreSQL): job control (docs/operations.md).

-- Queues an operator paused (`Client::pause`): no worker claims a job of a queue whose
-- row has a pause time; running jobs finish. A queue without a row runs.
CREATE TABLE __SCHEMA__.__PREFIX__queues_t (
    queue_name varchar(255) NOT NULL PRIMARY KEY,
    queue_paused_at_ts timestamptz NULL,
    queue_updated_at_ts timestamptz NOT NULL DEFAULT now()
);

-- A run-time limit given at enqueue (`Enqueue::with_timeout`), over the job type's own.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t ADD COLUMN task_timeout_ms bigint NULL;

-- The attempt limit of a job that failed for good or was cancelled, so a retry gives it
-- a fresh budget of the same size; and its run-time limit.
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
    ADD COLUMN task_max_attempts integer NULL,
    ADD COLUMN task_timeout_ms bigint NULL;

-- Operators' counts of the jobs that failed for good or were cancelled, by queue, task
-- type and tenant (`Client::count_by`). Only those rows enter these indexes: enqueue and
-- success write nothing here.
CREATE INDEX __PREFIX__task_results_ended_queue_idx
    ON __SCHEMA__.__PREFIX__task_results_t (task_queue, task_status) WHERE task_status IN (6, 7);
CREATE INDEX __PREFIX__task_results_ended_type_idx
    ON __SCHEMA__.__PREFIX__task_results_t (task_type, task_status) WHERE task_status IN (6, 7);
CREATE INDEX __PREFIX__task_results_ended_tenant_idx
    ON __SCHEMA__.__PREFIX__task_results_t (task_tenant, task_status)
    WHERE task_status IN (6, 7);

-- Live workers (`Client::workers`): each worker's row is written at start, stamped by
-- every heartbeat and removed by a graceful stop; a crashed worker's row stays, stale,
-- until a day later.
CREATE TABLE __SCHEMA__.__PREFIX__workers_t (
    worker_id varchar(255) NOT NULL PRIMARY KEY,
    worker_host varchar(255) NOT NULL,
    worker_pid integer NOT NULL,
    -- JSON arrays; queues NULL: every queue.
    worker_queues text NULL,
    worker_task_types text NOT NULL,
    worker_concurrency integer NOT NULL,
    worker_heartbeat_ms bigint NOT NULL,
    worker_started_at_ts timestamptz NOT NULL,
    worker_seen_at_ts timestamptz NOT NULL
);

-- Throughput (`Client::throughput`): each worker's runs per minute and task type, written
-- from its memory at every heartbeat (absolute values for the minute, so a write repeats
-- safely), with a histogram of run times (JSON: bucket -> runs) for percentiles.
CREATE TABLE __SCHEMA__.__PREFIX__job_stats_t (
    stat_minute_ts timestamptz NOT NULL,
    task_type varchar(255) NOT NULL,
    stat_owner varchar(255) NOT NULL,
    stat_processed bigint NOT NULL,
    stat_failed bigint NOT NULL,
    stat_run_ms bigint NOT NULL,
    stat_histogram text NOT NULL,
    PRIMARY KEY (stat_minute_ts, task_type, stat_owner)
);
