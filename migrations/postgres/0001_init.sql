-- sk schema, version 1 (PostgreSQL).
-- `__SCHEMA__` and `__PREFIX__` are replaced by the runtime with validated identifiers
-- (defaults: `public` and `sk_`), so the names follow the seed design (Stakhanovise).

CREATE SCHEMA IF NOT EXISTS __SCHEMA__;

-- The small, hot table of live jobs only: waiting, delayed, retrying and running.
-- A finished job's row is deleted in the same statement that records its result.
CREATE TABLE __SCHEMA__.__PREFIX__tasks_queue_t (
    task_id uuid NOT NULL PRIMARY KEY,
    -- FIFO tie-break among jobs of equal priority and not-before time.
    task_lock_handle_id bigserial NOT NULL,
    task_type varchar(255) NOT NULL,
    task_source varchar(255) NOT NULL,
    task_payload jsonb NOT NULL,
    -- Lower runs first.
    task_priority integer NOT NULL,
    task_posted_at_ts timestamptz NOT NULL,
    -- Not-before time while waiting; lease expiry while running.
    task_locked_until_ts timestamptz NOT NULL,
    task_queue varchar(255) NOT NULL,
    -- Incremented by every claim; (task_id, task_attempt, task_locked_by) fences
    -- finalization so a worker that lost its lease cannot overwrite the new holder.
    task_attempt integer NOT NULL DEFAULT 0,
    task_max_attempts integer NOT NULL,
    -- The worker holding the lease; NULL while the job waits.
    task_locked_by varchar(255) NULL
) WITH (
    -- Every job is inserted, updated at least once (claim) and deleted: keep room for
    -- HOT updates and vacuum the table far more eagerly than the default 20%.
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02
);

-- Serves the claim: rows in exactly the order it takes them (priority, not-before, FIFO).
CREATE INDEX __PREFIX__tasks_queue_dequeue_idx
    ON __SCHEMA__.__PREFIX__tasks_queue_t (task_priority, task_locked_until_ts, task_lock_handle_id);

-- One row per job ever posted, kept after the job leaves the queue.
CREATE TABLE __SCHEMA__.__PREFIX__task_results_t (
    task_id uuid NOT NULL PRIMARY KEY,
    task_type varchar(255) NOT NULL,
    task_source varchar(255) NOT NULL,
    task_payload jsonb NOT NULL,
    task_queue varchar(255) NOT NULL,
    -- unprocessed 1, processing 2, processed 3, error 4, faulted 5, fatal 6, cancelled 7
    task_status smallint NOT NULL,
    task_priority integer NOT NULL,
    -- Set by the scheduler ("type@tick") so a cron tick is enqueued once across workers.
    task_unique_key varchar(512) NULL UNIQUE,
    task_error_count integer NOT NULL DEFAULT 0,
    task_last_error_type text NULL,
    task_last_error_message text NULL,
    task_last_error_detail text NULL,
    task_last_error_is_recoverable boolean NULL,
    task_processing_time_milliseconds bigint NOT NULL DEFAULT 0,
    task_posted_at_ts timestamptz NOT NULL,
    task_first_processing_attempted_at_ts timestamptz NULL,
    task_last_processing_attempted_at_ts timestamptz NULL,
    task_processing_finalized_at_ts timestamptz NULL
);

-- Serves pruning of finalized results and the per-status counts of queue info.
CREATE INDEX __PREFIX__task_results_finalized_idx
    ON __SCHEMA__.__PREFIX__task_results_t (task_processing_finalized_at_ts)
    WHERE task_processing_finalized_at_ts IS NOT NULL;

-- Per-type execution statistics, updated in the statement that finalizes the jobs.
CREATE TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t (
    et_task_type varchar(255) NOT NULL PRIMARY KEY,
    et_avg_execution_time_ms bigint NOT NULL,
    et_fastest_execution_time_ms bigint NOT NULL,
    et_longest_execution_time_ms bigint NOT NULL,
    et_total_execution_time_ms bigint NOT NULL,
    et_total_execution_count bigint NOT NULL,
    et_last_updated_ts timestamptz NOT NULL
);

-- Per-process counters, written periodically by each worker's maintenance task.
CREATE TABLE __SCHEMA__.__PREFIX__metrics_t (
    metric_process_id varchar(255) NOT NULL,
    metric_id varchar(255) NOT NULL,
    metric_category varchar(255) NOT NULL,
    metric_value bigint NOT NULL,
    metric_last_updated_ts timestamptz NOT NULL,
    PRIMARY KEY (metric_process_id, metric_id)
);

-- The seed's single-task dequeue, kept for compatibility and for tools; the runtime
-- claims in batches with the same ordering. It takes a lease like the runtime does.
CREATE FUNCTION __SCHEMA__.__PREFIX__try_dequeue_task(
    select_types varchar(255)[],
    exclude_ids uuid[],
    ref_now timestamptz,
    lease interval DEFAULT interval '30 seconds',
    locked_by varchar(255) DEFAULT 'sk_try_dequeue_task'
) RETURNS SETOF __SCHEMA__.__PREFIX__tasks_queue_t
LANGUAGE sql AS $fn$
    WITH next AS (
        SELECT task_id FROM __SCHEMA__.__PREFIX__tasks_queue_t
        WHERE (select_types IS NULL OR task_type = ANY(select_types))
          AND (exclude_ids IS NULL OR task_id <> ALL(exclude_ids))
          AND task_locked_until_ts <= ref_now
        ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE __SCHEMA__.__PREFIX__tasks_queue_t q
        SET task_locked_until_ts = ref_now + lease,
            task_locked_by = $5,
            task_attempt = q.task_attempt + 1
        FROM next WHERE q.task_id = next.task_id
        RETURNING q.*
    ), started AS (
        UPDATE __SCHEMA__.__PREFIX__task_results_t r
        SET task_status = 2,
            task_first_processing_attempted_at_ts = coalesce(r.task_first_processing_attempted_at_ts, ref_now),
            task_last_processing_attempted_at_ts = ref_now
        FROM claimed WHERE r.task_id = claimed.task_id
    )
    SELECT * FROM claimed
$fn$;
