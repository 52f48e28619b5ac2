-- sk schema, version 4 (PostgreSQL): the seeds' own contracts (docs/seeds.md). A producer
-- or consumer written against the Stakhanovise.NET documents works on these tables as they
-- are; what sk keeps beside the seed's columns has a default.

-- The queue: an INSERT that names only the seed's columns is complete.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t
    ALTER COLUMN task_payload TYPE text USING task_payload::text,
    ALTER COLUMN task_payload DROP NOT NULL,
    ALTER COLUMN task_posted_at_ts SET DEFAULT now(),
    ALTER COLUMN task_priority SET DEFAULT 0,
    ALTER COLUMN task_queue SET DEFAULT 'default',
    -- sk_runtime::DEFAULT_MAX_ATTEMPTS
    ALTER COLUMN task_max_attempts SET DEFAULT 25;
-- The seed's UNIQUE lock handle (its sequence already has the seed's name,
-- `<prefix>tasks_queue_t_task_lock_handle_id_seq`).
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t
    ADD CONSTRAINT __PREFIX__tasks_queue_t_task_lock_handle_id_key UNIQUE (task_lock_handle_id);

-- The results: the seed's types, its `task_last_error` beside sk's error columns, and its
-- indexes by type and by status, for the rows operators look up by them: jobs that failed,
-- were cancelled or are held by a seed consumer. Jobs waiting or done (the bulk of the
-- table, counted from the queue table and the statistics) stay out of these indexes, so
-- enqueue and success write no entry in them (docs/seeds.md).
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
    ALTER COLUMN task_payload TYPE text USING task_payload::text,
    ALTER COLUMN task_status TYPE integer,
    ALTER COLUMN task_queue SET DEFAULT 'default',
    ADD COLUMN task_last_error text NULL;
UPDATE __SCHEMA__.__PREFIX__task_results_t
SET task_last_error = task_last_error_type || ': ' || task_last_error_message
    || coalesce(E'\n' || task_last_error_detail, '')
WHERE task_last_error_message IS NOT NULL;
UPDATE __SCHEMA__.__PREFIX__task_results_t
SET task_last_error_is_recoverable = false
WHERE task_last_error_is_recoverable IS NULL;
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
    ALTER COLUMN task_last_error_is_recoverable SET DEFAULT false,
    ALTER COLUMN task_last_error_is_recoverable SET NOT NULL;
CREATE INDEX __PREFIX__task_results_type_idx ON __SCHEMA__.__PREFIX__task_results_t (task_type)
    WHERE task_status NOT IN (1, 3);
CREATE INDEX __PREFIX__task_results_status_idx ON __SCHEMA__.__PREFIX__task_results_t (task_status)
    WHERE task_status NOT IN (1, 3);

-- The metrics (seed 001): one row per metric and owner process.
ALTER TABLE __SCHEMA__.__PREFIX__metrics_t RENAME COLUMN metric_process_id TO metric_owner_process_id;
ALTER TABLE __SCHEMA__.__PREFIX__metrics_t RENAME COLUMN metric_last_updated_ts TO metric_last_updated;
ALTER TABLE __SCHEMA__.__PREFIX__metrics_t
    ALTER COLUMN metric_value SET DEFAULT 0,
    ALTER COLUMN metric_last_updated SET DEFAULT now();
CREATE INDEX __PREFIX__metrics_category_idx ON __SCHEMA__.__PREFIX__metrics_t (metric_category);

-- The execution time statistics (seed 001): keyed by payload type and owner process, so
-- each worker writes its own row (no contention between workers).
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME COLUMN et_task_type TO et_payload_type;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME COLUMN et_total_execution_count TO et_n_execution_cycles;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME COLUMN et_avg_execution_time_ms TO et_avg_execution_time;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME COLUMN et_fastest_execution_time_ms TO et_fastest_execution_time;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME COLUMN et_longest_execution_time_ms TO et_longest_execution_time;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t RENAME COLUMN et_total_execution_time_ms TO et_total_execution_time;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t
    -- Rows written before version 4 were shared by all workers.
    ADD COLUMN et_owner_process_id varchar(255) NOT NULL DEFAULT 'before-v4',
    ADD COLUMN et_last_execution_time bigint NOT NULL DEFAULT 0;
ALTER TABLE __SCHEMA__.__PREFIX__task_execution_time_stats_t
    ALTER COLUMN et_owner_process_id DROP DEFAULT,
    ALTER COLUMN et_last_updated_ts SET DEFAULT now(),
    DROP CONSTRAINT __PREFIX__task_execution_time_stats_t_pkey,
    ADD PRIMARY KEY (et_payload_type, et_owner_process_id);

-- The seed's dequeue function, exactly as documented: an empty type array means every
-- type, the not-before time must be strictly before `ref_now`, and the row is deleted and
-- returned with the seed's eight columns in the seed's order. A consumer that calls it in
-- a transaction and commits after its work has the job exactly when it commits; a
-- rollback (or a crash) puts it back. The results row (created for jobs posted outside
-- sk) is marked processing. sk's own workers claim in batches under a lease instead.
DROP FUNCTION __SCHEMA__.__PREFIX__try_dequeue_task(varchar(255)[], uuid[], timestamptz, interval, varchar(255));
CREATE FUNCTION __SCHEMA__.__PREFIX__try_dequeue_task(
    select_types character varying[],
    exclude_ids uuid[],
    ref_now timestamp with time zone
) RETURNS TABLE (
    task_id uuid,
    task_lock_handle_id bigint,
    task_type character varying,
    task_source character varying,
    task_payload text,
    task_priority integer,
    task_posted_at_ts timestamp with time zone,
    task_locked_until_ts timestamp with time zone
)
LANGUAGE sql AS $fn$
    WITH dequeued AS (
        DELETE FROM __SCHEMA__.__PREFIX__tasks_queue_t td
        WHERE td.task_id = (
            SELECT t0.task_id FROM __SCHEMA__.__PREFIX__tasks_queue_t t0
            WHERE (t0.task_type = ANY(select_types) OR coalesce(cardinality(select_types), 0) = 0)
              AND t0.task_locked_until_ts < ref_now
              AND t0.task_id <> ALL(coalesce(exclude_ids, '{}'))
            ORDER BY t0.task_priority, t0.task_locked_until_ts, t0.task_lock_handle_id
            LIMIT 1
            FOR UPDATE SKIP LOCKED)
        RETURNING td.*
    ), started AS (
        INSERT INTO __SCHEMA__.__PREFIX__task_results_t AS r (task_id, task_type, task_source, task_queue,
            task_status, task_priority, task_posted_at_ts, task_first_processing_attempted_at_ts,
            task_last_processing_attempted_at_ts)
        SELECT d.task_id, d.task_type, d.task_source, d.task_queue, 2, d.task_priority, d.task_posted_at_ts,
            ref_now, ref_now
        FROM dequeued d
        ON CONFLICT (task_id) DO UPDATE SET task_status = 2,
            task_first_processing_attempted_at_ts = coalesce(r.task_first_processing_attempted_at_ts, ref_now),
            task_last_processing_attempted_at_ts = ref_now
    )
    SELECT d.task_id, d.task_lock_handle_id, d.task_type, d.task_source, d.task_payload, d.task_priority,
        d.task_posted_at_ts, d.task_locked_until_ts
    FROM dequeued d
$fn$;

-- The job record (seed 004's audit log): every attempt that did not succeed is kept in
-- `task_errors` (attempt, worker, start, end, outcome, error), including a lease that ran
-- out ("worker lost"): the claim that takes such a job over notes the holder it replaces
-- in the queue row (`task_lost_attempts`, NULL otherwise), and the job's next recorded
-- outcome moves the note into the results row. The worker of the last recorded attempt
-- and a handler's output sit beside them.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t ADD COLUMN task_lost_attempts jsonb NULL;
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
    ADD COLUMN task_errors jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN task_last_locked_by varchar(255) NULL,
    ADD COLUMN task_output text NULL;
-- Errors recorded before version 4 become the first entry of the array.
UPDATE __SCHEMA__.__PREFIX__task_results_t
SET task_errors = jsonb_build_array(jsonb_build_object(
        'attempt', task_error_count,
        'started_at', task_last_processing_attempted_at_ts,
        'outcome', CASE WHEN task_status = 6 THEN 'fatal' ELSE 'retried' END,
        'kind', task_last_error_type, 'message', task_last_error_message,
        'detail', task_last_error_detail, 'recoverable', task_last_error_is_recoverable))
WHERE task_last_error_message IS NOT NULL;

-- Seed 002's fields: tenant, correlation id and user metadata (a JSON object) on every
-- job, in the queue row (workers filter by tenant; the context shows all three) and the
-- results row, indexed there for the lookups by tenant and by correlation id. Jobs
-- without them write no index entry.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t
    ADD COLUMN task_tenant varchar(255) NULL,
    ADD COLUMN task_correlation_id varchar(255) NULL,
    ADD COLUMN task_metadata jsonb NULL;
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t
    ADD COLUMN task_tenant varchar(255) NULL,
    ADD COLUMN task_correlation_id varchar(255) NULL,
    ADD COLUMN task_metadata jsonb NULL;
CREATE INDEX __PREFIX__task_results_tenant_idx ON __SCHEMA__.__PREFIX__task_results_t (task_tenant)
    WHERE task_tenant IS NOT NULL;
CREATE INDEX __PREFIX__task_results_correlation_idx
    ON __SCHEMA__.__PREFIX__task_results_t (task_correlation_id)
    WHERE task_correlation_id IS NOT NULL;

-- Unique keys with modes (seed 003's restart-on-update), chosen per enqueue:
--   NULL once a key is enqueued once until its result is pruned (the scheduler's ticks);
--             unique in the results table, as before;
--   1 skip    while a job with the key is live, enqueueing it again returns that job;
--   2 restart as skip while the job waits (re-posts coalesce, the newest payload wins);
--             while it runs, it runs once more after the current run (`task_rerun`); a
--             finished job's key is free, so re-posting it runs it again;
--   3 replace as skip, but a waiting job takes the new payload and run-at.
-- Modes 1 to 3 are unique among live jobs: in the queue table.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t
    ADD COLUMN task_unique_key varchar(512) NULL,
    ADD COLUMN task_unique_mode smallint NULL,
    ADD COLUMN task_rerun boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX __PREFIX__tasks_queue_unique_key_idx
    ON __SCHEMA__.__PREFIX__tasks_queue_t (task_unique_key) WHERE task_unique_key IS NOT NULL;
ALTER TABLE __SCHEMA__.__PREFIX__task_results_t ADD COLUMN task_unique_mode smallint NULL;
DROP INDEX __SCHEMA__.__PREFIX__task_results_unique_key_idx;
CREATE UNIQUE INDEX __PREFIX__task_results_unique_key_idx
    ON __SCHEMA__.__PREFIX__task_results_t (task_unique_key)
    WHERE task_unique_key IS NOT NULL AND task_unique_mode IS NULL;

-- A UUIDv7 made in SQL (PostgreSQL 15 has none), for the rerun a restart asks for:
-- sk's ids are time-ordered, which pruning relies on.
CREATE FUNCTION __SCHEMA__.__PREFIX__uuid_v7(at timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE AS $fn$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send((extract(epoch FROM at) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$fn$;

-- Seed 003's periodic tasks (`#[job(every = "7s")]`): one live job per such type (unique
-- key `sk-every:<type>`, mode skip, posted by each worker at start); the statement that
-- records a run's outcome posts the next run `task_every_ms` later, so runs never overlap.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t ADD COLUMN task_every_ms bigint NULL;

-- Whether the job's results row exists: sk's enqueue writes it with the queue row (true);
-- a row another producer INSERTs gets the default, and its results row is created when a
-- worker records its first outcome. Lets a success update the results row with a plain
-- UPDATE for sk's jobs instead of an upsert.
ALTER TABLE __SCHEMA__.__PREFIX__tasks_queue_t ADD COLUMN task_has_result boolean NOT NULL DEFAULT false;
UPDATE __SCHEMA__.__PREFIX__tasks_queue_t q SET task_has_result = true
WHERE EXISTS (SELECT 1 FROM __SCHEMA__.__PREFIX__task_results_t r WHERE r.task_id = q.task_id);
