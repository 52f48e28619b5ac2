-- sk schema, version 27 (PostgreSQL): `sk_try_dequeue_task` as migration 12 made it, and
-- the results row it writes for the job it hands a seed consumer keeps the job's payload,
-- tenant, correlation id, metadata and retry limit: the queue row is deleted, so the
-- results row is the job's only record (it lost the payload before). The body's first
-- line marks it as sk's: `sk migrate` and a worker's start find a function of that name
-- without the mark (the seed's own text, run over an sk database, whose `RETURNING *`
-- answers sk's wider row where the function declares the seed's eight columns, so every
-- call failed) and put this one back (`store::postgres::migrate::restore_dequeue`).
DROP FUNCTION IF EXISTS __SCHEMA__.__PREFIX__try_dequeue_task(character varying[], uuid[], timestamp with time zone);
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
    -- sk's dequeue function (migration 27)
    WITH dequeued AS (
        DELETE FROM __SCHEMA__.__PREFIX__tasks_queue_t td
        WHERE td.task_id = (
            SELECT t0.task_id FROM __SCHEMA__.__PREFIX__tasks_queue_t t0
            WHERE (t0.task_type = ANY(select_types) OR cardinality(select_types) = 0)
              AND t0.task_locked_until_ts < ref_now
              AND t0.task_id <> ALL(exclude_ids)
              AND NOT EXISTS (SELECT 1 FROM __SCHEMA__.__PREFIX__queues_t p
                              WHERE p.queue_name = t0.task_queue AND p.queue_paused_at_ts IS NOT NULL)
            ORDER BY t0.task_priority, t0.task_locked_until_ts, t0.task_lock_handle_id
            LIMIT 1
            FOR UPDATE SKIP LOCKED)
        RETURNING td.*
    ), started AS (
        INSERT INTO __SCHEMA__.__PREFIX__task_results_t AS r (task_id, task_type, task_source, task_queue,
            task_status, task_priority, task_posted_at_ts, task_first_processing_attempted_at_ts,
            task_last_processing_attempted_at_ts, task_payload, task_tenant, task_correlation_id,
            task_metadata, task_max_attempts, task_timeout_ms)
        SELECT d.task_id, d.task_type, d.task_source, d.task_queue, 2, coalesce(d.task_priority, 2147483647),
            d.task_posted_at_ts, ref_now, ref_now, d.task_payload, d.task_tenant, d.task_correlation_id,
            d.task_metadata, d.task_max_attempts, d.task_timeout_ms
        FROM dequeued d
        ON CONFLICT (task_id) DO UPDATE SET task_status = 2,
            task_first_processing_attempted_at_ts = coalesce(r.task_first_processing_attempted_at_ts, ref_now),
            task_last_processing_attempted_at_ts = ref_now,
            task_payload = excluded.task_payload,
            task_metadata = coalesce(excluded.task_metadata, r.task_metadata)
    )
    SELECT d.task_id, d.task_lock_handle_id, d.task_type, d.task_source, d.task_payload, d.task_priority,
        d.task_posted_at_ts, d.task_locked_until_ts
    FROM dequeued d
$fn$;
