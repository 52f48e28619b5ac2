//! PostgreSQL: migrations and every statement sk runs. Every time comparison takes `now`
//! from the caller's clock as a parameter; the database's own `now()` is never used.

use chrono::{DateTime, Utc};
use std::time::Duration;

mod control;
pub(crate) mod flow;
pub(crate) mod partitions;

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection as _, Executor, PgConnection, PgExecutor, PgPool, Postgres, Row};
use uuid::Uuid;

use super::driver::{Admin, Work};
use super::{
    ClaimedJob, Failure, Lease, NewJob, ProbeFailure, ScheduleRow, Schema, Success, TableHealth,
};
use crate::error::{Error, Result};
use crate::model::{JobRecord, QueueCounts, QueuedJob};

/// Versioned migrations, applied in order; `__SCHEMA__`/`__PREFIX__` are substituted.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "initial seed schema",
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "results table autovacuum",
        include_str!("../../../migrations/postgres/0002_results_autovacuum.sql"),
    ),
    (
        3,
        "lean writes per job",
        include_str!("../../../migrations/postgres/0003_lean_writes.sql"),
    ),
    (
        4,
        "the seeds' own contracts",
        include_str!("../../../migrations/postgres/0004_seed_contracts.sql"),
    ),
    (
        5,
        "results partitioned by time",
        include_str!("../../../migrations/postgres/0005_results_partitions.sql"),
    ),
    (
        6,
        "schedules stored in the database",
        include_str!("../../../migrations/postgres/0006_schedules.sql"),
    ),
    (
        7,
        "job control",
        include_str!("../../../migrations/postgres/0007_control.sql"),
    ),
    (
        8,
        "a concurrency limit per queue across workers",
        include_str!("../../../migrations/postgres/0008_global_limits.sql"),
    ),
    (
        9,
        "workflows: jobs that wait on other jobs",
        include_str!("../../../migrations/postgres/0009_workflows.sql"),
    ),
    (
        10,
        "only jobs waited on notify the done channel",
        include_str!("../../../migrations/postgres/0010_waited.sql"),
    ),
    (
        11,
        "every time in the queue and results tables is finite",
        include_str!("../../../migrations/postgres/0011_finite_times.sql"),
    ),
];

/// Completion statements addressed to one results partition, by its name.
type CompleteIn = std::collections::HashMap<String, [Option<std::sync::Arc<str>>; 2]>;

/// The statements of one schema, formatted once and then reused, so sqlx's per-connection
/// cache prepares each of them once per connection.
#[derive(Default)]
pub(crate) struct Statements {
    enqueue_one: String,
    enqueue_one_plain: String,
    enqueue_many: String,
    enqueue_many_keyed: String,
    enqueue_unique: String,
    enqueue_tick: String,
    enqueue_many_uniform: String,
    claim: String,
    /// `claim` that skips the paused queues (`$8`). A separate statement: written into
    /// `claim` as `$8 IS NULL OR ...` (or as a subquery of the queues table) it made the
    /// planner expect almost no rows and sort the whole queue instead of reading the
    /// dequeue index (docs/performance.md).
    claim_skipping: String,
    /// `claim` of one queue with a global limit (`$8`): at most the limit less the
    /// queue's running jobs (`queue_room`, migration 8).
    claim_capped: String,
    /// Upserts the results rows of jobs enqueued without one: safe whatever the queue
    /// row says, for a completion inside the job's own transaction and as the fallback of
    /// `complete_plain`.
    complete: std::sync::Arc<str>,
    /// `complete` with a plain insert of those rows. An upsert costs the server about 3 µs
    /// a row more (a speculative insertion: an index probe, a lock on a token and a second
    /// WAL record per row; docs/performance.md). A queue row says whether its job has a
    /// results row (`task_has_result`); only a row another producer posted with the id of
    /// a job already on record says no wrongly, and then the insert fails on the primary
    /// key and the batch is written again with `complete`.
    complete_plain: std::sync::Arc<str>,
    /// `complete` and `complete_plain` (at index 1) per results partition
    /// (`complete_in`), each made when first used.
    complete_in: std::sync::Mutex<CompleteIn>,
    fail: String,
    give_back: String,
    extend: String,
    counts_by_status: String,
    counts_live: String,
    peek: String,
    job: String,
    metrics: String,
    dead_tuples: String,
    channel: String,
}

impl Statements {
    /// `complete` (`plain`: `complete_plain`) with its update of sk's own results rows, and
    /// its inserts of the others (jobs without a results row yet: most, since enqueue writes
    /// none), addressed to one partition (the rows' partition, `partitions::Known`), not
    /// through the partitioned table. A rerun's or next run's new row still goes through
    /// it: its id is new.
    pub(crate) fn complete_in(
        &self,
        schema: &Schema,
        partition: &str,
        plain: bool,
    ) -> std::sync::Arc<str> {
        let mut cache = self
            .complete_in
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sql) = cache
            .get(partition)
            .and_then(|both| both[usize::from(plain)].clone())
        {
            return sql;
        }
        let results = schema.table("task_results_t");
        let qualified = format!("{}.{partition}", schema.schema_name());
        let update = |table: &str| format!("UPDATE {table} r SET task_status = 3,");
        let insert = |table: &str| format!("INSERT INTO {table} AS r (");
        let sql: std::sync::Arc<str> = self
            .completion(plain)
            .replacen(&update(&results), &update(&qualified), 1)
            .replace(&insert(&results), &insert(&qualified))
            .into();
        // One entry per partition the completions met: a few a day; old ones go.
        if cache.len() >= 16 {
            cache.clear();
        }
        cache.entry(partition.to_owned()).or_default()[usize::from(plain)] = Some(sql.clone());
        sql
    }

    /// `complete_plain` or `complete`.
    pub(crate) fn completion(&self, plain: bool) -> &std::sync::Arc<str> {
        if plain {
            &self.complete_plain
        } else {
            &self.complete
        }
    }

    pub(crate) fn new(schema: &Schema) -> Self {
        let q = schema.table("tasks_queue_t");
        let r = schema.table("task_results_t");
        let s = schema.table("task_execution_time_stats_t");
        let m = schema.table("metrics_t");
        // Records the run time of the rows of CTE `done(task_type, ms)` per task type, in
        // this worker's own row ($owner; seed 001 keys the table by payload type and owner
        // process); the same statement finalizes the jobs, so stats and results never
        // disagree. The last execution time is one of the batch's, all finished together.
        let stats = format!(
            "stats AS (
                INSERT INTO {s} AS s (et_payload_type, et_owner_process_id, et_avg_execution_time,
                    et_fastest_execution_time, et_longest_execution_time, et_total_execution_time,
                    et_n_execution_cycles, et_last_execution_time, et_last_updated_ts)
                SELECT task_type, $owner, sum(ms) / count(*), min(ms), max(ms), sum(ms), count(*),
                    (array_agg(ms))[1], $now
                FROM done GROUP BY task_type
                -- Rows locked in one order, so two batches never wait on each other in a cycle.
                ORDER BY task_type
                ON CONFLICT (et_payload_type, et_owner_process_id) DO UPDATE SET
                    et_total_execution_time = s.et_total_execution_time + EXCLUDED.et_total_execution_time,
                    et_n_execution_cycles = s.et_n_execution_cycles + EXCLUDED.et_n_execution_cycles,
                    et_avg_execution_time = (s.et_total_execution_time + EXCLUDED.et_total_execution_time)
                        / (s.et_n_execution_cycles + EXCLUDED.et_n_execution_cycles),
                    et_fastest_execution_time = least(s.et_fastest_execution_time, EXCLUDED.et_fastest_execution_time),
                    et_longest_execution_time = greatest(s.et_longest_execution_time, EXCLUDED.et_longest_execution_time),
                    et_last_execution_time = EXCLUDED.et_last_execution_time,
                    et_last_updated_ts = EXCLUDED.et_last_updated_ts
            )"
        );
        let lost_message = "'worker lost: its lease ran out before it recorded an outcome (a crash, a stall or a lost connection)'";
        // The columns of a queue row that a results row repeats.
        let job_columns_q_noloss = "q.task_id, q.task_type, q.task_source, q.task_queue, q.task_priority,
            q.task_posted_at_ts, q.task_claimed_at_ts, q.task_tenant, q.task_correlation_id, q.task_metadata,
            q.task_timeout_ms";
        let job_columns_q = format!("{job_columns_q_noloss}, q.task_lost_attempts");
        // Writes the outcome of the runs in CTE `done` (`job_columns_q` and `ms`) into their
        // results rows. sk's enqueue wrote those rows; a job posted by another producer (a
        // plain INSERT into the queue, as seed producers do) gets its row here, so every
        // job's outcome is on record (a posting time past chrono's, `infinity` written by
        // hand past migration 11's check, is recorded as the claim's). Followed by the outcome's values, then the
        // `ON CONFLICT` clause, which ends with `update_results`.
        let record_results = format!(
            "INSERT INTO {r} AS r (task_id, task_type, task_source, task_queue, task_priority, task_posted_at_ts,
                task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts,
                task_status, task_error_count, task_last_error_type, task_last_error_message,
                task_last_error_detail, task_last_error, task_last_error_is_recoverable,
                task_processing_time_milliseconds, task_processing_finalized_at_ts, task_payload,
                task_last_locked_by, task_errors, task_output, task_tenant, task_correlation_id, task_metadata,
                task_max_attempts, task_timeout_ms)
            SELECT task_id, task_type, task_source, task_queue, task_priority,
                CASE WHEN isfinite(task_posted_at_ts) THEN task_posted_at_ts ELSE task_claimed_at_ts END,
                coalesce((task_lost_attempts -> 0 ->> 'started_at')::timestamptz, task_claimed_at_ts),
                task_claimed_at_ts,"
        );
        let update_results = "task_processing_time_milliseconds = EXCLUDED.task_processing_time_milliseconds,
                    task_processing_finalized_at_ts = EXCLUDED.task_processing_finalized_at_ts,
                    task_first_processing_attempted_at_ts =
                        coalesce(r.task_first_processing_attempted_at_ts, EXCLUDED.task_first_processing_attempted_at_ts),
                    task_last_processing_attempted_at_ts = EXCLUDED.task_last_processing_attempted_at_ts,
                    task_payload = EXCLUDED.task_payload,
                    task_last_locked_by = EXCLUDED.task_last_locked_by,
                    task_errors = r.task_errors || EXCLUDED.task_errors,
                    task_output = EXCLUDED.task_output,
                    task_max_attempts = EXCLUDED.task_max_attempts,
                    task_timeout_ms = EXCLUDED.task_timeout_ms";
        // Seed 002's fields, in both tables.
        let seed002 = "task_tenant, task_correlation_id, task_metadata";
        // A restart asked for during the run (`task_rerun`, unique mode 2): the finished
        // job's row is deleted as always and a new job with the same key and the newest
        // payload is posted in its place, with its own results row. A periodic job
        // (`task_every_ms`) posts its next run the same way, that long after this outcome.
        let uuid_v7 = schema.table("uuid_v7");
        let rerun = |now: &str| {
            format!(
                "again AS (
                    INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result, {seed002},
                        task_unique_key, task_unique_mode, task_every_ms, task_timeout_ms)
                    SELECT {uuid_v7}({now}), task_type, task_source, task_payload, task_priority, {now},
                        -- A period of over 10,000 years waits until clock::LATEST, as on the other backends.
                        CASE WHEN task_rerun THEN {now} ELSE least({now} + least(task_every_ms, 315569520000000) * interval '1 ms',
                            '9999-12-31 23:59:59.999999+00') END,
                        task_queue, task_max_attempts, true, {seed002}, task_unique_key, task_unique_mode, task_every_ms,
                        task_timeout_ms
                    FROM done WHERE task_rerun OR task_every_ms IS NOT NULL
                    RETURNING task_id, task_type, task_source, task_queue, task_priority, task_unique_key,
                        task_unique_mode, task_posted_at_ts, {seed002}
                ), again_res AS (
                    INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                        task_unique_key, task_unique_mode, task_posted_at_ts, {seed002})
                    SELECT task_id, task_type, task_source, task_queue, 1, task_priority, task_unique_key,
                        task_unique_mode, task_posted_at_ts, {seed002}
                    FROM again
                )"
            )
        };
        // One statement for the failed runs of a batch (arrays, in id order, like
        // `complete`): a run with a retry time waits again, one without leaves the queue;
        // both fenced like `complete`.
        // The outcome of each run, from `held`.
        let outcome =
            "held.attempt, held.retry_at, held.status, held.kind, held.message, held.detail,
            held.recoverable, held.ms, held.seed_error";
        let fail = format!(
            "WITH input AS (
                SELECT * FROM unnest($1::uuid[], $2::int4[], $4::timestamptz[], $5::int4[], $6::text[], $7::text[],
                    $8::text[], $9::bool[], $10::int8[], $12::text[])
                AS i(task_id, attempt, retry_at, status, kind, message, detail, recoverable, ms, seed_error)
            ), held AS MATERIALIZED (
                -- The runs whose lease this worker still holds, their rows locked in id
                -- order, one primary-key probe each: the subquery is kept apart (OFFSET 0)
                -- so that the planner cannot start from the small index of running jobs,
                -- whose statistics say it is empty, and scan the batch once per row there.
                -- The lost attempts move to the results row; `held` reads them before
                -- `kept` clears them (RETURNING shows new values only).
                SELECT input.*, q.task_lost_attempts
                FROM input CROSS JOIN LATERAL (
                    SELECT task_attempt, task_locked_by, task_lost_attempts FROM {q}
                    WHERE task_id = input.task_id
                    OFFSET 0 FOR UPDATE
                ) q
                WHERE q.task_attempt = input.attempt AND q.task_locked_by = $3
            ), kept AS (
                UPDATE {q} q SET task_locked_until_ts = held.retry_at, task_locked_by = NULL,
                    task_lost_attempts = NULL,
                    -- The results row exists from here on, whoever posted the job.
                    task_has_result = true
                FROM held
                WHERE q.task_id = held.task_id AND held.retry_at IS NOT NULL
                RETURNING {job_columns_q_noloss}, held.task_lost_attempts, NULL::text AS task_payload,
                    q.task_max_attempts, q.task_unique_key, q.task_unique_mode, false AS task_rerun,
                    NULL::int8 AS task_every_ms, false AS task_dependants, false AS task_waited, {outcome}
            ), gone AS (
                DELETE FROM {q} q USING held
                WHERE q.task_id = held.task_id AND held.retry_at IS NULL
                RETURNING {job_columns_q}, q.task_payload, q.task_max_attempts, q.task_unique_key,
                    q.task_unique_mode, q.task_rerun, q.task_every_ms, q.task_dependants, q.task_waited, {outcome}
            ), done AS (
                SELECT * FROM kept UNION ALL SELECT * FROM gone
            ), res AS (
                {record_results}
                    status, 1 + jsonb_array_length(coalesce(task_lost_attempts, '[]')), kind, message, detail,
                    seed_error, recoverable, ms, CASE WHEN retry_at IS NULL THEN $11::timestamptz END,
                    -- A job that failed for good keeps its payload, to inspect or re-post.
                    task_payload, $3,
                    coalesce(task_lost_attempts, '[]') || jsonb_build_array(jsonb_build_object('attempt', attempt,
                        'worker', $3::text, 'started_at', task_claimed_at_ts, 'ended_at', $11::timestamptz,
                        'outcome', CASE WHEN retry_at IS NULL THEN 'fatal' ELSE 'retried' END,
                        'kind', kind, 'message', message, 'detail', detail, 'recoverable', recoverable)),
                    NULL, task_tenant, task_correlation_id, task_metadata, task_max_attempts, task_timeout_ms
                FROM done
                ON CONFLICT (task_id) DO UPDATE SET task_status = EXCLUDED.task_status,
                    task_error_count = r.task_error_count + EXCLUDED.task_error_count,
                    task_last_error_type = EXCLUDED.task_last_error_type,
                    task_last_error_message = EXCLUDED.task_last_error_message,
                    task_last_error_detail = EXCLUDED.task_last_error_detail,
                    task_last_error = EXCLUDED.task_last_error,
                    task_last_error_is_recoverable = EXCLUDED.task_last_error_is_recoverable,
                    {update_results}
            ),
            {},
            {}
            -- The runs recorded. A job others wait on that failed for good goes on to
            -- `flow::propagate`; one a `Client::wait` waits on wakes it in another process
            -- (`$13`: the done channel; migration 10).
            SELECT task_id, retry_at IS NULL AND task_dependants, task_type
            FROM done, (SELECT CASE WHEN EXISTS (SELECT 1 FROM done WHERE task_waited)
                THEN pg_notify($13, '') END) AS notify",
            rerun("$11::timestamptz"),
            stats.replace("$now", "$11").replace("$owner", "$3")
        );
        // Fenced: only the holder of this exact claim (id, attempt, worker) may finish it.
        // Runs with sequential scans off (`PgStore::batched`): a primary-key probe per job,
        // in the input's (task_id) order, as every batched statement (`in_lock_order`).
        // The results rows of the jobs flagged without one: an upsert unless `plain`. A
        // scheduler's tick is flagged so though its enqueue wrote the row (`enqueue_tick`),
        // so keyed jobs always take the upsert.
        let insert_new = |filter: &str, plain: bool| {
            let conflict = if plain {
                String::new()
            } else {
                format!("ON CONFLICT (task_id) DO UPDATE SET task_status = 3, {update_results}")
            };
            format!(
                "{record_results}
                        3, jsonb_array_length(coalesce(task_lost_attempts, '[]')), NULL, NULL, NULL, NULL, false, ms,
                        $5::timestamptz, NULL, $4, coalesce(task_lost_attempts, '[]'), output,
                        task_tenant, task_correlation_id, task_metadata, NULL::int4, NULL::int8
                    FROM done WHERE NOT done.task_has_result AND {filter}
                    {conflict}"
            )
        };
        let complete_with = |plain: bool| -> std::sync::Arc<str> {
            format!(
                "WITH input AS (
                    SELECT * FROM unnest($1::uuid[], $2::int4[], $3::int8[], $6::text[]) AS i(task_id, attempt, ms, output)
                ), done AS (
                    DELETE FROM {q} q USING input
                    WHERE q.task_id = input.task_id AND q.task_attempt = input.attempt AND q.task_locked_by = $4
                    -- The payload is needed only for a rerun; not copying it otherwise keeps
                    -- the statement as fast as before restarts existed.
                    RETURNING {job_columns_q}, input.ms, input.output,
                        CASE WHEN q.task_rerun OR q.task_every_ms IS NOT NULL THEN q.task_payload END AS task_payload,
                        q.task_max_attempts, q.task_unique_key, q.task_unique_mode, q.task_rerun, q.task_every_ms,
                        q.task_has_result, q.task_dependants, q.task_waiting_on IS NOT NULL AS task_fed,
                        q.task_waited
                ), res AS (
                    UPDATE {r} r SET task_status = 3, task_processing_time_milliseconds = done.ms,
                        task_processing_finalized_at_ts = $5,
                        task_first_processing_attempted_at_ts = coalesce(r.task_first_processing_attempted_at_ts,
                            (done.task_lost_attempts -> 0 ->> 'started_at')::timestamptz, done.task_claimed_at_ts),
                        task_last_processing_attempted_at_ts = done.task_claimed_at_ts,
                        task_last_locked_by = $4, task_output = done.output,
                        -- Attempts lost before this success (usually none).
                        task_error_count = r.task_error_count
                            + jsonb_array_length(coalesce(done.task_lost_attempts, '[]')),
                        task_errors = CASE WHEN done.task_lost_attempts IS NULL THEN r.task_errors
                            ELSE r.task_errors || done.task_lost_attempts END
                    FROM done WHERE done.task_has_result AND r.task_id = done.task_id
                ), res_new AS (
                    -- Jobs without a results row yet (most: enqueue writes none; and those
                    -- another producer posted): a plain UPDATE for the others (cheaper than
                    -- an upsert), an insert for these, keyed ones apart.
                    {}
                ), res_keyed AS (
                    {}
                ),
                {},
                {}
                -- Wakes `Client::wait` in other processes (`$7`: the done channel), only
                -- for jobs one waits on (migration 10).
                -- Jobs others wait on, and jobs that waited, go on to `flow::settle`.
                SELECT task_id, task_dependants, task_fed
                FROM done, (SELECT CASE WHEN EXISTS (SELECT 1 FROM done WHERE task_waited)
                    THEN pg_notify($7, '') END) AS notify",
                insert_new("done.task_unique_key IS NULL", plain),
                insert_new("done.task_unique_key IS NOT NULL", false),
                rerun("$5::timestamptz"),
                stats.replace("$now", "$5").replace("$owner", "$4")
            )
            .into()
        };
        let complete = complete_with(false);
        let complete_plain = complete_with(true);
        // Keys of mode "once" (the scheduler's ticks) are unique through the job's id, made
        // from the key (`schedule::tick_id`): the results table's primary key holds it in
        // every partition (migration 5). The other modes are unique among live jobs, in the
        // queue table (migration 4).
        let on_key_conflict = "ON CONFLICT (task_id) DO NOTHING";
        let on_live_key_conflict =
            "ON CONFLICT (task_unique_key) WHERE task_unique_key IS NOT NULL";
        Statements {
            // The results row is written first: its id makes a cron tick enqueue at most
            // once across workers, and the queue row exists only if it was new.
            enqueue_one: format!(
                "WITH res AS (
                    INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status,
                        task_priority, task_unique_key, task_posted_at_ts, {seed002})
                    VALUES ($1, $2, $3, $5, 1, $6, $7, $8, $12, $13, $14::jsonb)
                    {on_key_conflict}
                    RETURNING task_id
                ), q AS (
                    INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result, {seed002},
                        task_timeout_ms)
                    SELECT task_id, $2, $3, $4, $6, $8, $9, $5, $10, true, $12, $13, $14::jsonb, $15 FROM res
                    RETURNING task_id
                )
                SELECT (SELECT task_id FROM q) FROM (SELECT pg_notify($11, '')) AS notify"
            ),
            // A job without a unique key is its queue row alone until its first outcome
            // writes its results row (as for a job another producer posts): one row per
            // job at enqueue, not two. The read paths find a waiting job in the queue.
            // (`$7`, the unique key, is bound by `bind_job!` and not used.)
            enqueue_one_plain: format!(
                "WITH q AS (
                    INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result, {seed002},
                        task_timeout_ms)
                    VALUES ($1, $2, $3, $4, $6, $8, $9, $5, $10, false, $12, $13, $14::jsonb, $15)
                    RETURNING task_id
                )
                SELECT (SELECT task_id FROM q) FROM (SELECT pg_notify($11, ''), $7::text) AS notify"
            ),
            // The input in array order, so the FIFO lock handles follow the caller's
            // order. Used when no job carries a unique key: queue rows only, as
            // `enqueue_one_plain`.
            enqueue_many: format!(
                "WITH input AS (
                    SELECT * FROM unnest($1::uuid[], $2::varchar[], $3::varchar[], $4::text[], $5::varchar[],
                        $6::int4[], $7::timestamptz[], $8::int4[], $11::varchar[], $12::varchar[], $13::jsonb[],
                        $14::int8[])
                    AS i(task_id, task_type, task_source, payload, task_queue, task_priority, run_at, max_attempts,
                        {seed002}, timeout_ms)
                ), q AS (
                    INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result, {seed002},
                        task_timeout_ms)
                    SELECT task_id, task_type, task_source, payload, task_priority, $9, run_at, task_queue,
                        max_attempts, false, {seed002}, timeout_ms
                    FROM input
                )
                SELECT 1 FROM (SELECT pg_notify($10, '')) AS notify"
            ),
            // The common batch: one job type, and queue, source, priority, attempts and
            // not-before time alike, so only ids and payloads travel as arrays.
            enqueue_many_uniform: format!(
                "WITH input AS (
                    SELECT * FROM unnest($1::uuid[], $2::text[]) AS i(task_id, payload)
                ), q AS (
                    INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result, {seed002},
                        task_timeout_ms)
                    SELECT task_id, $3, $4, payload, $6, $9, $7, $5, $8, false, $11, $12, $13::jsonb, $14 FROM input
                )
                SELECT 1 FROM (SELECT pg_notify($10, '')) AS notify"
            ),
            // With unique keys (mode skip): a job whose key a live job holds is not
            // inserted, and the statement answers with that job's id instead, in the caller's
            // order (WITH ORDINALITY, which also keeps the FIFO lock handles in that order).
            // Rows the statement inserts are invisible to its own reads, so `e` finds only the
            // jobs that were there before. The caller sends each key once.
            enqueue_many_keyed: format!(
                "WITH input AS (
                    SELECT * FROM unnest($1::uuid[], $2::varchar[], $3::varchar[], $4::text[], $5::varchar[],
                        $6::int4[], $7::timestamptz[], $8::int4[], $15::varchar[], $11::varchar[], $12::varchar[],
                        $13::jsonb[], $14::int8[]) WITH ORDINALITY
                    AS i(task_id, task_type, task_source, payload, task_queue, task_priority, run_at, max_attempts,
                        unique_key, {seed002}, timeout_ms, ord)
                ), q AS (
                    INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result, {seed002},
                        task_unique_key, task_unique_mode, task_timeout_ms)
                    SELECT task_id, task_type, task_source, payload, task_priority, $9, run_at, task_queue,
                        max_attempts, true, {seed002}, unique_key, CASE WHEN unique_key IS NOT NULL THEN 1::int2 END,
                        timeout_ms
                    FROM input ORDER BY ord
                    {on_live_key_conflict} DO NOTHING
                    RETURNING task_id
                ), res AS (
                    INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                        task_unique_key, task_unique_mode, task_posted_at_ts, {seed002})
                    SELECT i.task_id, i.task_type, i.task_source, i.task_queue, 1, i.task_priority, i.unique_key,
                        CASE WHEN i.unique_key IS NOT NULL THEN 1::int2 END, $9, i.task_tenant,
                        i.task_correlation_id, i.task_metadata
                    FROM q JOIN input i USING (task_id)
                )
                SELECT coalesce(q.task_id, e.task_id) AS task_id
                FROM input i
                LEFT JOIN q USING (task_id)
                LEFT JOIN {q} e ON q.task_id IS NULL AND e.task_unique_key = i.unique_key
                CROSS JOIN (SELECT pg_notify($10, '')) AS notify
                ORDER BY i.ord"
            ),
            // A cron tick that must not overlap the last one ($12: the schedule's live key,
            // mode skip, in the queue table) and runs once ($1: the tick's id, made from its
            // key $7, in the results table). The queue row comes first, so a tick skipped
            // while the last one is live leaves no results row. Its results row may still
            // lose a race to another worker's of the same tick, whose whole run ended
            // after this statement's snapshot: the second column is then false and
            // `enqueue_tick` rolls the queue row back. (The same tick live in another
            // worker's row conflicts on both the key and the id: no arbiter.) The queue
            // row says it has no results row (`task_has_result = false`), so its outcome
            // is an upsert through the partitioned table: a tick's id is its tick's time,
            // whose results partition may be made (its rows moved out of the default
            // partition) while the tick waits, where an update by partition would miss it.
            enqueue_tick: format!(
                "WITH q AS (
                    INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result,
                        task_unique_key, task_unique_mode)
                    SELECT $1, $2, $3, $4, $6, $8, $9, $5, $10, false, $12, 1::int2
                    WHERE NOT EXISTS (SELECT 1 FROM {r} WHERE task_id = $1)
                    ON CONFLICT DO NOTHING
                    RETURNING task_id
                ), res AS (
                    INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                        task_unique_key, task_posted_at_ts)
                    SELECT task_id, $2, $3, $5, 1, $6, $7, $8 FROM q
                    {on_key_conflict}
                    RETURNING task_id
                )
                SELECT (SELECT task_id FROM q), EXISTS (SELECT 1 FROM res)
                FROM (SELECT pg_notify($11, '')) AS notify"
            ),
            // One job with a unique key of mode skip (1), restart (2) or replace (3): the
            // key is unique among live jobs (the queue table), and a duplicate changes the
            // live job as its mode says (migration 4) and answers with its id. `xmax = 0`
            // tells a fresh row from an updated one.
            enqueue_unique: format!(
                "WITH q AS (
                    INSERT INTO {q} AS q (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result, {seed002},
                        task_unique_key, task_unique_mode, task_every_ms, task_timeout_ms)
                    VALUES ($1, $2, $3, $4, $6, $8, $9, $5, $10, true, $12, $13, $14::jsonb, $7, $15, $16, $17)
                    {on_live_key_conflict} DO UPDATE SET
                        task_payload = CASE WHEN ($15 = 3 AND q.task_locked_by IS NULL) OR $15 = 2
                            THEN EXCLUDED.task_payload ELSE q.task_payload END,
                        task_locked_until_ts = CASE WHEN $15 = 3 AND q.task_locked_by IS NULL
                            THEN EXCLUDED.task_locked_until_ts ELSE q.task_locked_until_ts END,
                        task_rerun = q.task_rerun OR ($15 = 2 AND q.task_locked_by IS NOT NULL),
                        -- A periodic job's period as the code now says (None for others).
                        task_every_ms = coalesce(EXCLUDED.task_every_ms, q.task_every_ms)
                    RETURNING q.task_id, q.xmax = 0 AS inserted, q.task_locked_by IS NOT NULL AS running
                ), res AS (
                    INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                        task_unique_key, task_unique_mode, task_posted_at_ts, {seed002})
                    SELECT $1, $2, $3, $5, 1, $6, $7, $15, $8, $12, $13, $14::jsonb FROM q WHERE q.inserted
                )
                SELECT q.task_id, q.inserted, q.running FROM q, (SELECT pg_notify($11, '')) AS notify"
            ),
            // The inner select is served by tasks_queue_dequeue_idx, which has exactly its
            // order; SKIP LOCKED lets concurrent workers take disjoint batches without
            // waiting on each other. Only the queue row is written; the claim time goes to
            // the results row at finalization.
            claim: format!(
                // (`lost_message` is a SQL literal, below.)
                // `= ANY(ARRAY(...))` makes the update a primary-key lookup per claimed id;
                // written as a join, large batches got a hash join over a sequential scan
                // of the whole queue table (docs/performance.md).
                //
                // A row still held by a worker when claimed had its lease run out: that
                // attempt is noted as lost in the row (from its old values); the job's next
                // recorded outcome moves the note into its results row.
                "UPDATE {q} q SET task_locked_until_ts = $5, task_locked_by = $6, task_attempt = q.task_attempt + 1,
                    task_claimed_at_ts = $1,
                    task_lost_attempts = CASE WHEN q.task_locked_by IS NULL THEN q.task_lost_attempts
                        ELSE coalesce(q.task_lost_attempts, '[]') || jsonb_build_array(jsonb_build_object(
                            'attempt', q.task_attempt, 'worker', q.task_locked_by,
                            'started_at', q.task_claimed_at_ts, 'ended_at', $1::timestamptz,
                            'outcome', 'lost', 'kind', 'worker_lost', 'message', {lost_message},
                            'recoverable', true)) END
                WHERE q.task_id = ANY(ARRAY(
                    SELECT task_id FROM {q}
                    WHERE task_locked_until_ts <= $1
                      AND task_type = ANY($2)
                      AND ($3::varchar[] IS NULL OR task_queue = ANY($3))
                      AND ($7::varchar[] IS NULL OR task_tenant = ANY($7))
                      AND true -- paused
                    ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id
                    LIMIT $4
                    FOR UPDATE SKIP LOCKED))
                RETURNING q.task_id, q.task_type, q.task_payload, q.task_attempt, q.task_max_attempts,
                    q.task_priority, q.task_queue, q.task_posted_at_ts, q.task_tenant, q.task_correlation_id,
                    q.task_metadata::text AS task_metadata, q.task_timeout_ms, q.task_waiting_on"
            ),
            complete,
            complete_plain,
            complete_in: std::sync::Mutex::default(),
            claim_skipping: String::new(),
            claim_capped: String::new(),
            fail,
            // A given-back job did not use up an attempt, and is claimable at once.
            give_back: format!(
                "UPDATE {q} q SET task_locked_until_ts = $1, task_locked_by = NULL, task_attempt = q.task_attempt - 1
                 FROM unnest($2::uuid[], $3::int4[]) AS i(task_id, attempt)
                 WHERE q.task_id = i.task_id AND q.task_attempt = i.attempt AND q.task_locked_by = $4"
            ),
            // A heartbeat never waits for a row lock, so it cannot deadlock with a
            // finalization of the same rows (whose locks follow its plan's order, which
            // need not be the ids'): it extends the rows it can lock at once, and a row
            // another transaction holds (this worker's own completion of it, or a claim of
            // a lapsed lease) counts as held until the next heartbeat. A row that is gone
            // was lost.
            extend: format!(
                "WITH locked AS MATERIALIZED (
                    SELECT task_id FROM {q} WHERE task_id = ANY($2) FOR UPDATE SKIP LOCKED
                 ), extended AS (
                    UPDATE {q} q SET task_locked_until_ts = $1
                    FROM unnest($2::uuid[], $3::int4[]) AS i(task_id, attempt), locked
                    WHERE q.task_id = locked.task_id AND q.task_id = i.task_id AND q.task_attempt = i.attempt
                      AND q.task_locked_by = $4
                    RETURNING q.task_id
                 )
                 SELECT task_id FROM extended
                 UNION ALL
                 SELECT id FROM unnest($2::uuid[]) AS id
                 WHERE id NOT IN (SELECT task_id FROM locked)
                   AND EXISTS (SELECT 1 FROM {q} b WHERE b.task_id = id)"
            ),
            // Jobs without a results row yet (`enqueue_one_plain`) are unprocessed. A keyed
            // job always has its results row (a cron tick's says otherwise, see
            // `enqueue_tick`), so it is counted there.
            counts_by_status: format!(
                "SELECT task_status, sum(n)::int8 FROM (
                    SELECT task_status::int4 AS task_status, count(*) AS n FROM {r} GROUP BY task_status
                    UNION ALL SELECT 1, count(*) FROM {q} WHERE NOT task_has_result AND task_unique_key IS NULL
                 ) c GROUP BY task_status HAVING sum(n) > 0"
            ),
            counts_live: format!(
                "SELECT
                    count(*) FILTER (WHERE task_locked_by IS NULL AND task_locked_until_ts <= $1),
                    count(*) FILTER (WHERE task_locked_by IS NULL AND task_locked_until_ts > $1
                        AND coalesce(task_waiting_on, 0) = 0),
                    count(*) FILTER (WHERE task_locked_by IS NOT NULL AND task_locked_until_ts > $1),
                    count(*) FILTER (WHERE task_locked_by IS NOT NULL AND task_locked_until_ts <= $1),
                    count(*) FILTER (WHERE task_waiting_on > 0)
                 FROM {q}"
            ),
            peek: format!(
                "SELECT task_id, task_type, task_queue, task_priority, task_attempt, task_max_attempts,
                    task_locked_until_ts, task_posted_at_ts
                 FROM {q} WHERE task_locked_by IS NULL
                 ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id LIMIT $1"
            ),
            // A leased queue row means the job runs now; results hold what happened before.
            // A job posted by another producer has no results row until a worker records
            // a run of it: its queue row alone answers then.
            job: format!(
                "SELECT k.id AS task_id, coalesce(r.task_type, q.task_type) AS task_type,
                    coalesce(r.task_source, q.task_source) AS task_source,
                    coalesce(r.task_queue, q.task_queue) AS task_queue,
                    coalesce(q.task_payload, r.task_payload) AS task_payload,
                    CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > $2 THEN 2
                         ELSE coalesce(r.task_status, 1) END AS task_status,
                    coalesce(q.task_priority, r.task_priority) AS task_priority,
                    coalesce(r.task_error_count, 0) + jsonb_array_length(coalesce(q.task_lost_attempts, '[]'))
                        AS task_error_count, r.task_last_error_type,
                    r.task_last_error_message, r.task_last_error_detail, r.task_last_error_is_recoverable,
                    coalesce(r.task_processing_time_milliseconds, 0) AS task_processing_time_milliseconds,
                    coalesce(r.task_posted_at_ts, q.task_posted_at_ts) AS task_posted_at_ts,
                    coalesce(r.task_first_processing_attempted_at_ts,
                        (q.task_lost_attempts -> 0 ->> 'started_at')::timestamptz, q.task_claimed_at_ts)
                        AS task_first_processing_attempted_at_ts,
                    CASE WHEN q.task_locked_by IS NOT NULL THEN q.task_claimed_at_ts
                         ELSE r.task_last_processing_attempted_at_ts END AS task_last_processing_attempted_at_ts,
                    r.task_processing_finalized_at_ts,
                    q.task_attempt, q.task_max_attempts, q.task_locked_until_ts, q.task_locked_by,
                    coalesce(r.task_errors, '[]') || coalesce(q.task_lost_attempts, '[]') AS task_errors,
                    r.task_last_locked_by, r.task_output,
                    coalesce(r.task_tenant, q.task_tenant) AS task_tenant,
                    coalesce(r.task_correlation_id, q.task_correlation_id) AS task_correlation_id,
                    coalesce(r.task_metadata, q.task_metadata)::text AS task_metadata,
                    coalesce(r.task_unique_key, q.task_unique_key) AS task_unique_key,
                    coalesce(r.task_unique_mode, q.task_unique_mode) AS task_unique_mode
                 FROM (SELECT $1::uuid AS id) k
                 LEFT JOIN {r} r ON r.task_id = k.id
                 LEFT JOIN {q} q ON q.task_id = k.id
                 WHERE r.task_id IS NOT NULL OR q.task_id IS NOT NULL"
            ),
            metrics: format!(
                "INSERT INTO {m} (metric_owner_process_id, metric_id, metric_category, metric_value, metric_last_updated)
                 SELECT $1, id, 'worker', value, $4 FROM unnest($2::varchar[], $3::int8[]) AS i(id, value)
                 ON CONFLICT (metric_owner_process_id, metric_id) DO UPDATE
                 SET metric_value = EXCLUDED.metric_value, metric_last_updated = EXCLUDED.metric_last_updated"
            ),
            // Cumulative statistics, kept by the server whether or not autovacuum runs.
            // The results table's rows live in its partitions (migration 5).
            dead_tuples: format!(
                "SELECT quote_ident(schemaname) || '.' || quote_ident(relname), relid = '{q}'::regclass,
                    n_live_tup, n_dead_tup, n_mod_since_analyze,
                    coalesce(last_analyze, last_autoanalyze) IS NOT NULL
                 FROM pg_stat_user_tables
                 WHERE relid = '{q}'::regclass
                    OR relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = '{r}'::regclass)"
            ),
            channel: schema.channel(),
        }
        .with_claim_skipping()
        .with_claim_capped(schema)
    }

    fn with_claim_skipping(mut self) -> Self {
        self.claim_skipping = self
            .claim
            .replace("AND true -- paused", "AND task_queue <> ALL($8)");
        self
    }

    fn with_claim_capped(mut self, schema: &Schema) -> Self {
        let room = schema.table("queue_room");
        self.claim_capped = self.claim.replace(
            "LIMIT $4",
            &format!("LIMIT least($4, coalesce({room}($8, $1), $4))"),
        );
        self
    }
}

/// The first row of `schema`'s queue that migration 11's check would refuse, named with
/// its id, column and value (`None`: every row passes).
async fn infinite_time(tx: &mut PgConnection, schema: &Schema) -> Result<Option<String>> {
    let table = schema.table("tasks_queue_t");
    let found: Option<(Uuid, String)> = sqlx::query_as(&format!(
        "SELECT task_id, CASE
             WHEN NOT isfinite(task_posted_at_ts) THEN 'task_posted_at_ts = ' || task_posted_at_ts
             WHEN NOT isfinite(task_locked_until_ts) THEN 'task_locked_until_ts = ' || task_locked_until_ts
             ELSE 'task_claimed_at_ts = ' || task_claimed_at_ts END
         FROM {table}
         WHERE NOT (isfinite(task_posted_at_ts) AND isfinite(task_locked_until_ts)
                    AND coalesce(isfinite(task_claimed_at_ts), true))
         LIMIT 1"
    ))
    .fetch_optional(&mut *tx)
    .await?;
    Ok(found.map(|(id, value)| {
        format!(
            "the row of job {id} in {table} has {value}, which sk cannot read; correct or delete it, then migrate again"
        )
    }))
}

/// Applies the migrations up to `target` (tests use it to build an older schema).
pub(crate) async fn migrate_to(pool: &PgPool, schema: &Schema, target: i32) -> Result<()> {
    let mut tx = pool.begin().await?;
    // `CREATE ... IF NOT EXISTS` on an existing schema sends notices, which sqlx logs at
    // INFO on every worker start; they say nothing a user needs.
    sqlx::query("SET LOCAL client_min_messages = warning")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(format!("sk-migrate:{}", schema.table("")))
        .execute(&mut *tx)
        .await?;
    let versions = schema.table("schema_migrations_t");
    let bootstrap = format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
         CREATE TABLE IF NOT EXISTS {versions} (
             version integer NOT NULL PRIMARY KEY,
             description text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );",
        s = schema.schema_name()
    );
    // A plain string runs through the simple protocol, which allows several statements.
    (&mut *tx).execute(bootstrap.as_str()).await?;
    let current: Option<i32> = sqlx::query_scalar(&format!("SELECT max(version) FROM {versions}"))
        .fetch_one(&mut *tx)
        .await?;
    let current = current.unwrap_or(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > known {
        return Err(Error::SchemaTooNew {
            found: current,
            known,
        });
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current && m.0 <= target)
    {
        if *version == 11 {
            if let Some(reason) = infinite_time(&mut tx, schema).await? {
                return Err(Error::MigrationRefused {
                    version: *version,
                    reason,
                });
            }
        }
        let sql = sql
            .replace("__SCHEMA__", schema.schema_name())
            .replace("__PREFIX__", schema.prefix());
        (&mut *tx)
            .execute(sql.as_str())
            .await
            .map_err(|source| Error::Migration {
                version: *version,
                source,
            })?;
        sqlx::query(&format!(
            "INSERT INTO {versions} (version, description) VALUES ($1, $2)"
        ))
        .bind(version)
        .bind(description)
        .execute(&mut *tx)
        .await?;
        tracing::info!(version, description, "sk: applied migration");
    }
    tx.commit().await?;
    Ok(())
}

/// Binds the parameters every single-job insert statement shares, `$1` to `$11`.
macro_rules! bind_job {
    ($query:expr, $job:ident, $now:ident, $sql:ident) => {
        $query
            .bind($job.id)
            .bind(&*$job.task_type)
            .bind($job.source)
            .bind($job.payload)
            .bind($job.queue)
            .bind($job.priority)
            .bind($job.unique_key)
            .bind($now)
            .bind($job.run_at)
            .bind($job.max_attempts)
            .bind(&$sql.channel)
    };
}

/// Inserts one job; `None` when its unique key already exists.
pub(crate) async fn enqueue_one<'e, E: PgExecutor<'e>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    let sql = &schema.sql;
    let statement = match job.unique_key {
        None => &sql.enqueue_one_plain,
        Some(_) => &sql.enqueue_one,
    };
    let id: Option<Uuid> = bind_job!(sqlx::query_scalar(statement), job, now, sql)
        .bind(job.tenant)
        .bind(job.correlation_id)
        .bind(job.metadata)
        .bind(job.timeout_ms)
        .fetch_one(executor)
        .await?;
    Ok(id)
}

/// Inserts many jobs in one statement; returns the ids in order (a duplicate key's place
/// holds the live job's id).
pub(crate) async fn enqueue_many<'e, E: PgExecutor<'e>>(
    executor: E,
    schema: &Schema,
    mut jobs: Vec<NewJob>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let Some(first) = jobs.first() else {
        return Ok(Vec::new());
    };
    if super::uniform(&jobs) {
        let (task_type, source, queue) = (
            first.task_type.clone(),
            first.source.clone(),
            first.queue.clone(),
        );
        let timeout_ms = first.timeout_ms;
        let (priority, run_at, max_attempts) = (first.priority, first.run_at, first.max_attempts);
        let (tenant, correlation_id, metadata) = (
            first.tenant.clone(),
            first.correlation_id.clone(),
            first.metadata.clone(),
        );
        let (ids, payloads): (Vec<Uuid>, Vec<String>) =
            jobs.into_iter().map(|j| (j.id, j.payload)).unzip();
        sqlx::query(&schema.sql.enqueue_many_uniform)
            .bind(&ids)
            .bind(payloads)
            .bind(task_type)
            .bind(source)
            .bind(queue)
            .bind(priority)
            .bind(run_at)
            .bind(max_attempts)
            .bind(now)
            .bind(&schema.sql.channel)
            .bind(tenant)
            .bind(correlation_id)
            .bind(metadata)
            .bind(timeout_ms)
            .execute(executor)
            .await?;
        return Ok(ids);
    }
    // A key that comes again in the batch gets the id of its first job, which is sent
    // alone (the statement cannot see its own inserts).
    let mut first_with_key: std::collections::HashMap<String, usize> = Default::default();
    let mut same_as: Vec<Option<usize>> = Vec::with_capacity(jobs.len());
    let mut sent = Vec::with_capacity(jobs.len());
    for job in jobs.drain(..) {
        let earlier = job
            .unique_key
            .as_ref()
            .and_then(|k| first_with_key.get(k).copied());
        same_as.push(earlier);
        if earlier.is_none() {
            if let Some(key) = &job.unique_key {
                first_with_key.insert(key.clone(), sent.len());
            }
            sent.push(job);
        }
    }
    let n = sent.len();
    let mut columns = Columns::with_capacity(n);
    for job in sent {
        columns.push(job);
    }
    let keyed = columns.keys.iter().any(Option::is_some);
    let ids = columns.ids.clone();
    let keys = columns.keys.clone();
    let sql = if keyed {
        &schema.sql.enqueue_many_keyed
    } else {
        &schema.sql.enqueue_many
    };
    let mut query = sqlx::query(sql)
        .bind(columns.ids)
        .bind(columns.types)
        .bind(columns.sources)
        .bind(columns.payloads)
        .bind(columns.queues)
        .bind(columns.priorities)
        .bind(columns.run_ats)
        .bind(columns.max_attempts)
        .bind(now)
        .bind(&schema.sql.channel);
    query = query
        .bind(columns.tenants)
        .bind(columns.correlation_ids)
        .bind(columns.metadata)
        .bind(columns.timeouts);
    if !keyed {
        query.execute(executor).await?;
        return Ok(ids);
    }
    let found: Vec<Option<Uuid>> = query
        .bind(columns.keys)
        .fetch_all(executor)
        .await?
        .into_iter()
        .map(|row| row.try_get(0))
        .collect::<sqlx::Result<_>>()?;
    let mut stored = Vec::with_capacity(found.len());
    for (id, key) in found.into_iter().zip(&keys) {
        // Our insert waited for a concurrent one with the same key, which committed after
        // this statement's snapshot was taken: the job exists, but its id is not visible.
        stored.push(id.ok_or_else(|| {
            Error::invalid(
                "unique key",
                format!("{key:?} was enqueued by a concurrent transaction just now; enqueue again to get its id"),
            )
        })?);
    }
    let mut batch = Vec::with_capacity(same_as.len());
    let mut next = 0;
    for earlier in same_as {
        match earlier {
            Some(index) => batch.push(stored[index]),
            None => {
                batch.push(stored[next]);
                next += 1;
            }
        }
    }
    Ok(batch)
}

/// Inserts a cron tick unless the schedule's last tick is still live (`live_key`) or this
/// tick was enqueued already; `None` when skipped. On `None` the caller rolls back: the
/// queue row may have gone in for a tick whose results row another worker wrote (and whose
/// run ended) after this statement's snapshot.
pub(crate) async fn enqueue_tick<'e, E: PgExecutor<'e>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    live_key: &str,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    let sql = &schema.sql;
    let (id, recorded): (Option<Uuid>, bool) =
        bind_job!(sqlx::query_as(&sql.enqueue_tick), job, now, sql)
            .bind(live_key)
            .fetch_one(executor)
            .await?;
    Ok(id.filter(|_| recorded))
}

/// Inserts one job with a unique key of mode skip, restart or replace; returns the id of
/// the new or live job, whether it is new, and whether the live job is running.
pub(crate) async fn enqueue_unique<'e, E: PgExecutor<'e>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    mode: crate::model::UniqueMode,
    now: DateTime<Utc>,
) -> Result<(Uuid, bool, bool)> {
    let sql = &schema.sql;
    Ok(
        bind_job!(sqlx::query_as(&sql.enqueue_unique), job, now, sql)
            .bind(job.tenant)
            .bind(job.correlation_id)
            .bind(job.metadata)
            .bind(mode as i16)
            .bind(job.every_ms)
            .bind(job.timeout_ms)
            .fetch_one(executor)
            .await?,
    )
}

/// A batch of jobs as one array per column, for `unnest`.
#[derive(Default)]
struct Columns {
    ids: Vec<Uuid>,
    types: Vec<String>,
    sources: Vec<String>,
    payloads: Vec<String>,
    queues: Vec<String>,
    priorities: Vec<i32>,
    run_ats: Vec<DateTime<Utc>>,
    max_attempts: Vec<i32>,
    keys: Vec<Option<String>>,
    tenants: Vec<Option<String>>,
    correlation_ids: Vec<Option<String>>,
    metadata: Vec<Option<String>>,
    timeouts: Vec<Option<i64>>,
}

impl Columns {
    fn with_capacity(n: usize) -> Self {
        Columns {
            ids: Vec::with_capacity(n),
            types: Vec::with_capacity(n),
            sources: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            queues: Vec::with_capacity(n),
            priorities: Vec::with_capacity(n),
            run_ats: Vec::with_capacity(n),
            max_attempts: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
            tenants: Vec::with_capacity(n),
            correlation_ids: Vec::with_capacity(n),
            metadata: Vec::with_capacity(n),
            timeouts: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, job: NewJob) {
        self.ids.push(job.id);
        self.types.push(job.task_type.into_owned());
        self.sources.push(job.source);
        self.payloads.push(job.payload);
        self.queues.push(job.queue);
        self.priorities.push(job.priority);
        self.run_ats.push(job.run_at);
        self.max_attempts.push(job.max_attempts);
        self.keys.push(job.unique_key);
        self.tenants.push(job.tenant);
        self.correlation_ids.push(job.correlation_id);
        self.metadata.push(job.metadata);
        self.timeouts.push(job.timeout_ms);
    }
}

/// A batch of leases as id and attempt arrays, sorted by id.
///
/// Every statement that locks several queue rows takes them in `task_id` order: the batch
/// arrives sorted, and whatever join the planner picks (a nested loop over the input, a
/// merge join, or a hash join probed by the input) walks it in that order. So the
/// heartbeat, the completer, a stop and another worker's control call never wait on each
/// other in a cycle, which PostgreSQL would resolve only after `deadlock_timeout` by
/// aborting one of them.
fn in_lock_order(leases: &[Lease]) -> (Vec<Uuid>, Vec<i32>) {
    let mut sorted: Vec<Lease> = leases.to_vec();
    sorted.sort_unstable_by_key(|l| l.id);
    sorted.into_iter().map(|l| (l.id, l.attempt)).unzip()
}

/// The worker's view of the store: every statement that runs under a lease.
#[derive(Clone)]
pub(crate) struct PgStore {
    pub(crate) pool: PgPool,
    pub(crate) schema: Schema,
    pub(crate) worker_id: String,
    /// Results partitions, for statements that address one directly.
    pub(crate) partitions: partitions::Known,
}

/// How long sk waits for a pooled connection before it looks for the reason itself: the
/// pool's own wait (its `acquire_timeout`, 30 s by default) retries a refused connection
/// in silence and then says only that it timed out.
const ACQUIRE_WAIT: Duration = Duration::from_secs(2);

/// `host:port` (or the socket path) and database of a connection's options.
fn address(options: &PgConnectOptions) -> String {
    let place = match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    };
    match options.get_database() {
        Some(db) => format!("{place}/{db}"),
        None => place,
    }
}

impl PgStore {
    /// Where the pool connects, for messages.
    pub(crate) fn address(&self) -> String {
        address(&self.pool.connect_options())
    }

    /// The connections a role without superuser rights may open (`max_connections` less
    /// the reserved ones), and the client connections open now.
    pub(crate) async fn connection_room(&self) -> Result<(i64, i64)> {
        let mut conn = self.acquire().await?;
        Ok(sqlx::query_as(
            "SELECT current_setting('max_connections')::int8
                 - current_setting('superuser_reserved_connections')::int8
                 - coalesce(current_setting('reserved_connections', true)::int8, 0),
                 (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')",
        )
        .fetch_one(&mut *conn)
        .await?)
    }

    /// A pooled connection, or within [`ACQUIRE_WAIT`] an error that says why there is none.
    pub(crate) async fn acquire(&self) -> Result<PoolConnection<Postgres>> {
        match tokio::time::timeout(ACQUIRE_WAIT, self.pool.acquire()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) => Err(match self.probe().await {
                Err(ProbeFailure::Transient(e) | ProbeFailure::Permanent(e)) => e,
                Ok(()) => super::pool_timed_out(
                    ACQUIRE_WAIT,
                    self.pool.size(),
                    self.pool.options().get_max_connections(),
                ),
            }),
            Ok(Err(e)) => Err(self.lost(e)),
        }
    }

    /// Names the database when a connection broke (reset, closed, refused).
    fn lost(&self, error: sqlx::Error) -> Error {
        match error {
            sqlx::Error::Io(io) => Error::Connect {
                address: self.address(),
                cause: io.to_string(),
            },
            other => other.into(),
        }
    }

    fn lost_in(&self, error: Error) -> Error {
        match error {
            Error::Database(e) => self.lost(e),
            other => other,
        }
    }

    /// Runs `claim` (or `claim_skipping`, with paused queues) on `conn`.
    async fn claim_on(
        &self,
        conn: &mut PgConnection,
        claim: &super::Claim<'_>,
    ) -> Result<Vec<ClaimedJob>> {
        let sql = &self.schema.sql;
        let query = if claim.paused.is_empty() {
            self.claim_query(&sql.claim, claim)
        } else {
            self.claim_query(&sql.claim_skipping, claim)
                .bind(claim.paused)
        };
        let rows = query.fetch_all(conn).await.map_err(|e| self.lost(e))?;
        Ok(claimed(&rows))
    }

    /// A claim statement with `$1` to `$7` bound.
    fn claim_query<'q>(
        &'q self,
        statement: &'q str,
        claim: &super::Claim<'q>,
    ) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
        sqlx::query(statement)
            .bind(claim.now)
            .bind(claim.task_types)
            .bind(claim.queues)
            .bind(claim.limit)
            .bind(claim.lease_until)
            .bind(&self.worker_id)
            .bind(claim.tenants)
    }

    /// Starts a transaction for a statement that joins a batch of ids to sk's tables.
    /// Each such statement is a primary-key probe per row, but in a custom plan the
    /// planner sees the batch's length and, from a few hundred rows on, prefers hash joins
    /// over sequential scans of the queue and the ever-growing results table (5 to 30 times
    /// slower here; docs/performance.md). The setting is scoped to this transaction, and
    /// goes with the `BEGIN` in one simple query: one round trip, not two.
    async fn batched(conn: &mut PgConnection) -> Result<sqlx::Transaction<'_, sqlx::Postgres>> {
        Ok(conn
            .begin_with("BEGIN; SET LOCAL enable_seqscan = off")
            .await?)
    }

    /// Records one successful run inside the job's own transaction (the caller commits);
    /// false when the lease was lost (fenced), and the caller then rolls back.
    pub(crate) async fn complete_in(
        &self,
        tx: &mut PgConnection,
        done: &Success,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        sqlx::query("SET LOCAL enable_seqscan = off")
            .execute(&mut *tx)
            .await?;
        let held: Vec<(Uuid, bool, bool)> = sqlx::query_as(&self.schema.sql.complete)
            .bind([done.lease.id])
            .bind([done.lease.attempt])
            .bind([done.millis])
            .bind(&self.worker_id)
            .bind(now)
            .bind([done.output.as_deref()])
            .bind(self.schema.done_channel())
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.lost(e))?;
        let held = self.settle(tx, &[done], held, now).await?;
        Ok(!held.is_empty())
    }

    /// The workflow step of a completion (`flow::settle`), for the `held` rows of the
    /// complete statement that others wait on or that waited; the ids held.
    async fn settle(
        &self,
        tx: &mut PgConnection,
        done: &[&Success],
        held: Vec<(Uuid, bool, bool)>,
        now: DateTime<Utc>,
    ) -> Result<Vec<Uuid>> {
        if held.iter().any(|(_, dependants, fed)| *dependants || *fed) {
            let outputs: Vec<(Uuid, Option<&str>)> = held
                .iter()
                .filter(|(_, dependants, _)| *dependants)
                .filter_map(|(id, _, _)| {
                    let success = done.iter().find(|s| s.lease.id == *id)?;
                    Some((*id, success.output.as_deref()))
                })
                .collect();
            let fed: Vec<Uuid> = held.iter().filter(|h| h.2).map(|h| h.0).collect();
            flow::settle(tx, &self.schema, &outputs, &fed, now)
                .await
                .map_err(|e| self.lost_in(e))?;
        }
        Ok(held.into_iter().map(|(id, _, _)| id).collect())
    }

    /// The stored schedules (migration 6).
    /// Which of the ids (a JSON array of simple hex ids) this worker recorded as
    /// succeeded (`Store::succeeded_here`), by the results table's primary key.
    pub(crate) async fn succeeded_here(&self, ids: &str) -> Result<Vec<Uuid>> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT task_id FROM {} WHERE task_id IN
                (SELECT value::uuid FROM jsonb_array_elements_text($1::jsonb))
             AND task_status = $2 AND task_last_locked_by = $3",
            self.schema.table("task_results_t")
        ))
        .bind(ids)
        .bind(crate::model::JobStatus::Processed as i32)
        .bind(&self.worker_id)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Locks a stored schedule as the worker read it (same update time) until `tx` ends, so a
/// tick is enqueued only while its schedule exists unchanged; false if it was removed or
/// changed since.
pub(crate) async fn schedule_hold(
    tx: &mut PgConnection,
    schema: &Schema,
    name: &str,
    updated_at: DateTime<Utc>,
) -> Result<bool> {
    Ok(sqlx::query_scalar::<_, i32>(&format!(
        "SELECT 1 FROM {} WHERE schedule_name = $1 AND schedule_updated_at_ts = $2 FOR SHARE",
        schema.table("schedules_t")
    ))
    .bind(name)
    .bind(updated_at)
    .fetch_optional(tx)
    .await?
    .is_some())
}

/// A claim's rows, each decoded on its own (`super::claimed_row`); a row of which not even
/// the lease can be read is left to its lease, named in the log.
fn claimed(rows: &[sqlx::postgres::PgRow]) -> Vec<ClaimedJob> {
    rows.iter()
        .filter_map(|row| {
            super::claimed_row(row, 0)
                .map_err(|e| super::unleasable(&e))
                .ok()
        })
        .collect()
}

impl Admin for PgPool {
    /// Brings the schema to the newest version. Concurrent callers serialize on an advisory
    /// lock, so several workers starting at once apply each migration exactly once.
    /// Then creates the results partitions for now and the next days, so jobs enqueued before
    /// a worker starts land in them.
    async fn migrate(&self, schema: &Schema) -> Result<()> {
        let pool = self;
        migrate_to(pool, schema, i32::MAX).await?;
        partitions::ensure(pool, schema, Utc::now(), partitions::DEFAULT_PERIOD, None).await?;
        Ok(())
    }

    /// This build's migrations, each with when it was applied to `schema` (`None`: not yet).
    async fn migrations(
        &self,
        schema: &Schema,
    ) -> Result<Vec<(i32, &'static str, Option<DateTime<Utc>>)>> {
        let pool = self;
        let versions = schema.table("schema_migrations_t");
        let applied: Vec<(i32, DateTime<Utc>)> =
            match sqlx::query_as(&format!("SELECT version, applied_at FROM {versions}"))
                .fetch_all(pool)
                .await
            {
                Ok(rows) => rows,
                Err(e) if super::no_such_table(&e) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
        Ok(MIGRATIONS
            .iter()
            .map(|&(version, description, _)| {
                let at = applied
                    .iter()
                    .find(|(v, _)| *v == version)
                    .map(|(_, at)| *at);
                (version, description, at)
            })
            .collect())
    }

    async fn counts(&self, schema: &Schema, now: DateTime<Utc>) -> Result<QueueCounts> {
        let pool = self;
        let mut counts = QueueCounts::default();
        for row in sqlx::query(&schema.sql.counts_by_status)
            .fetch_all(pool)
            .await?
        {
            let status: i32 = row.try_get(0)?;
            let n: i64 = row.try_get(1)?;
            counts
                .by_status
                .push((crate::model::JobStatus::from_code(status), n));
        }
        let row = sqlx::query(&schema.sql.counts_live)
            .bind(now)
            .fetch_one(pool)
            .await?;
        counts.available = row.try_get(0)?;
        counts.scheduled = row.try_get(1)?;
        counts.running = row.try_get(2)?;
        counts.lease_expired = row.try_get(3)?;
        counts.pending = row.try_get(4)?;
        Ok(counts)
    }

    async fn peek(&self, schema: &Schema, limit: i64) -> Result<Vec<QueuedJob>> {
        let pool = self;
        Ok(sqlx::query_as(&schema.sql.peek)
            .bind(limit)
            .fetch_all(pool)
            .await?)
    }

    async fn job(
        &self,
        schema: &Schema,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<Option<JobRecord>> {
        let pool = self;
        Ok(sqlx::query_as(&schema.sql.job)
            .bind(id)
            .bind(now)
            .fetch_optional(pool)
            .await?)
    }

    /// Adds or replaces a stored schedule.
    async fn schedule_put(&self, schema: &Schema, row: &ScheduleRow) -> Result<()> {
        let pool = self;
        sqlx::query(&format!(
            "INSERT INTO {} (schedule_name, task_type, task_payload, schedule_cron, schedule_overlap,
                schedule_updated_at_ts)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (schedule_name) DO UPDATE SET task_type = EXCLUDED.task_type,
                task_payload = EXCLUDED.task_payload, schedule_cron = EXCLUDED.schedule_cron,
                schedule_overlap = EXCLUDED.schedule_overlap,
                schedule_updated_at_ts = EXCLUDED.schedule_updated_at_ts",
            schema.table("schedules_t")
        ))
        .bind(&row.schedule_name)
        .bind(&row.task_type)
        .bind(&row.task_payload)
        .bind(&row.schedule_cron)
        .bind(row.schedule_overlap)
        .bind(row.schedule_updated_at_ts)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Removes a stored schedule; false if there was none of that name. Waits for a tick of
    /// it being enqueued (`schedule_hold`); none is enqueued after this returns.
    async fn schedule_remove(&self, schema: &Schema, name: &str) -> Result<bool> {
        let pool = self;
        let done = sqlx::query(&format!(
            "DELETE FROM {} WHERE schedule_name = $1",
            schema.table("schedules_t")
        ))
        .bind(name)
        .execute(pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Every stored schedule, by name.
    async fn schedule_list(&self, schema: &Schema) -> Result<Vec<ScheduleRow>> {
        let executor = self;
        Ok(sqlx::query_as(&format!(
            "SELECT schedule_name, task_type, task_payload, schedule_cron, schedule_overlap,
                schedule_updated_at_ts
             FROM {} ORDER BY schedule_name",
            schema.table("schedules_t")
        ))
        .fetch_all(executor)
        .await?)
    }
}

impl Work for PgStore {
    async fn claim(&self, claim: &super::Claim<'_>) -> Result<Vec<ClaimedJob>> {
        let mut conn = self.acquire().await?;
        let capped = match claim.queues {
            Some([queue]) if claim.capped => queue,
            _ => return self.claim_on(&mut conn, claim).await,
        };
        if claim.paused.contains(capped) {
            return Ok(Vec::new());
        }
        // A queue with a limit across workers: the claim locks the queue's row
        // (`queue_room`), so claims of it take turns, each counting the running jobs
        // after the one before committed.
        let rows = self
            .claim_query(&self.schema.sql.claim_capped, claim)
            .bind(capped)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| self.lost(e))?;
        Ok(claimed(&rows))
    }

    /// Finalizes successful runs; returns the ids whose lease was still held.
    async fn complete(&self, done: &[Success], now: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let mut done: Vec<&Success> = done.iter().collect();
        done.sort_unstable_by_key(|s| s.lease.id);
        let ids: Vec<Uuid> = done.iter().map(|s| s.lease.id).collect();
        let attempts: Vec<i32> = done.iter().map(|s| s.lease.attempt).collect();
        let millis: Vec<i64> = done.iter().map(|s| s.millis).collect();
        let outputs: Vec<Option<&str>> = done.iter().map(|s| s.output.as_deref()).collect();
        // The jobs' results rows are updated in their partition when one holds them all
        // (`partitions::Known`); through the partitioned table otherwise, and if that
        // partition is gone (42P01: maintenance retired it since it was read, which it
        // does only when none of its jobs is live, so these rows are not there).
        let mut partition = self.partitions.of(&ids);
        // The plain insert of new results rows first; the upsert if one was there (23505:
        // a row another producer posted with the id of a job on record; `complete_plain`).
        let mut plain = true;
        loop {
            let statement = match &partition {
                Some(name) => self.schema.sql.complete_in(&self.schema, name, plain),
                None => self.schema.sql.completion(plain).clone(),
            };
            let mut conn = self.acquire().await?;
            let mut tx = Self::batched(&mut conn)
                .await
                .map_err(|e| self.lost_in(e))?;
            let held = sqlx::query_as(&statement)
                .bind(&ids)
                .bind(&attempts)
                .bind(&millis)
                .bind(&self.worker_id)
                .bind(now)
                .bind(&outputs)
                .bind(self.schema.done_channel())
                .fetch_all(&mut *tx)
                .await;
            match held {
                Err(sqlx::Error::Database(e))
                    if partition.is_some() && e.code().as_deref() == Some("42P01") =>
                {
                    partition = None;
                }
                Err(sqlx::Error::Database(e)) if plain && e.code().as_deref() == Some("23505") => {
                    plain = false;
                }
                held => {
                    let held = held.map_err(|e| self.lost(e))?;
                    let held = self.settle(&mut tx, &done, held, now).await?;
                    tx.commit().await.map_err(|e| self.lost(e))?;
                    return Ok(held);
                }
            }
        }
    }

    /// The outputs of job `id`'s dependencies, in order.
    async fn inputs(&self, id: Uuid) -> Result<Vec<Option<Option<String>>>> {
        let mut conn = self.acquire().await?;
        flow::inputs(&mut conn, &self.schema, id).await
    }

    /// Records failed runs (retry or final) in one statement and one transaction, rows
    /// locked in id order; per failure, false when its lease was lost (fenced).
    async fn fail(&self, failures: &[Failure], now: DateTime<Utc>) -> Result<Vec<bool>> {
        let mut sorted: Vec<&Failure> = failures.iter().collect();
        sorted.sort_unstable_by_key(|f| f.lease.id);
        let ids: Vec<Uuid> = sorted.iter().map(|f| f.lease.id).collect();
        let attempts: Vec<i32> = sorted.iter().map(|f| f.lease.attempt).collect();
        let retry_at: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|f| f.retry_at).collect();
        let status: Vec<i32> = sorted.iter().map(|f| f.status as i32).collect();
        let kinds: Vec<&str> = sorted.iter().map(|f| f.kind.as_str()).collect();
        let messages: Vec<&str> = sorted.iter().map(|f| f.message.as_str()).collect();
        let details: Vec<Option<&str>> = sorted.iter().map(|f| f.detail.as_deref()).collect();
        let recoverable: Vec<bool> = sorted.iter().map(|f| f.recoverable).collect();
        let millis: Vec<i64> = sorted.iter().map(|f| f.millis).collect();
        let seed_errors: Vec<String> = sorted.iter().map(|f| f.seed_error()).collect();
        let mut conn = self.acquire().await?;
        let mut tx = Self::batched(&mut conn)
            .await
            .map_err(|e| self.lost_in(e))?;
        let held: Vec<(Uuid, bool, String)> = sqlx::query_as(&self.schema.sql.fail)
            .bind(&ids)
            .bind(&attempts)
            .bind(&self.worker_id)
            .bind(&retry_at)
            .bind(&status)
            .bind(&kinds)
            .bind(&messages)
            .bind(&details)
            .bind(&recoverable)
            .bind(&millis)
            .bind(now)
            .bind(&seed_errors)
            .bind(self.schema.done_channel())
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.lost(e))?;
        // Jobs others wait on that failed for good end those jobs in the same transaction.
        let roots: Vec<(Uuid, String)> = held
            .iter()
            .filter(|(_, dependants, _)| *dependants)
            .filter_map(|(id, _, task_type)| {
                let f = sorted[sorted.binary_search_by_key(id, |f| f.lease.id).ok()?];
                Some((
                    *id,
                    super::dependency_message(*id, task_type, false, &f.message),
                ))
            })
            .collect();
        if !roots.is_empty() {
            flow::propagate(&mut tx, &self.schema, roots, false, now)
                .await
                .map_err(|e| self.lost_in(e))?;
        }
        tx.commit().await.map_err(|e| self.lost(e))?;
        let held: std::collections::HashSet<Uuid> = held.into_iter().map(|(id, _, _)| id).collect();
        Ok(failures
            .iter()
            .map(|f| held.contains(&f.lease.id))
            .collect())
    }

    /// Releases leases at once (graceful stop), without using up an attempt.
    async fn give_back(&self, leases: &[Lease], now: DateTime<Utc>) -> Result<u64> {
        let (ids, attempts) = in_lock_order(leases);
        let mut conn = self.acquire().await?;
        let mut tx = Self::batched(&mut conn)
            .await
            .map_err(|e| self.lost_in(e))?;
        let done = sqlx::query(&self.schema.sql.give_back)
            .bind(now)
            .bind(ids)
            .bind(attempts)
            .bind(&self.worker_id)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.lost(e))?;
        tx.commit().await.map_err(|e| self.lost(e))?;
        Ok(done.rows_affected())
    }

    /// Extends the leases still held; returns their ids (a missing one was lost).
    async fn extend(&self, leases: &[Lease], until: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let (ids, attempts) = in_lock_order(leases);
        let mut conn = self.acquire().await?;
        let mut tx = Self::batched(&mut conn)
            .await
            .map_err(|e| self.lost_in(e))?;
        let held = sqlx::query_scalar(&self.schema.sql.extend)
            .bind(until)
            .bind(ids)
            .bind(attempts)
            .bind(&self.worker_id)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.lost(e))?;
        tx.commit().await.map_err(|e| self.lost(e))?;
        Ok(held)
    }

    /// Posts one job with a unique key of mode `mode` (the periodic jobs' first runs).
    async fn enqueue_unique(
        &self,
        job: NewJob,
        mode: crate::model::UniqueMode,
        now: DateTime<Utc>,
    ) -> Result<(Uuid, bool, bool)> {
        let mut conn = self.acquire().await?;
        enqueue_unique(&mut *conn, &self.schema, job, mode, now).await
    }

    /// Posts a cron tick, once across workers (its id comes from its unique key); with
    /// `live_key`, only while no earlier tick holding that key is live (no overlap); with
    /// `stored`, only while that stored schedule exists as it was read (name and update
    /// time), so none goes in after `StoredSchedules::remove` returns. False if it was not
    /// posted.
    async fn enqueue_tick(
        &self,
        job: NewJob,
        live_key: Option<&str>,
        stored: Option<(&str, DateTime<Utc>)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut conn = self.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        if let Some((name, updated_at)) = stored {
            if !schedule_hold(&mut tx, &self.schema, name, updated_at).await? {
                return Ok(false);
            }
        }
        let id = match live_key {
            None => enqueue_one(&mut *tx, &self.schema, job, now).await?,
            Some(key) => enqueue_tick(&mut *tx, &self.schema, job, key, now).await?,
        };
        if id.is_none() {
            // Nothing to keep: a queue row without its results row is a tick that
            // already ran (`enqueue_tick`), and goes with the rollback.
            tx.rollback().await?;
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn stored_schedules(&self) -> Result<Vec<ScheduleRow>> {
        Admin::schedule_list(&self.pool, &self.schema).await
    }

    /// Applies the migrations and creates the results partitions for `now` and ahead.
    async fn migrate(&self) -> Result<()> {
        Admin::migrate(&self.pool, &self.schema).await
    }

    /// Creates the results partitions from `now`'s span to two spans ahead (their names),
    /// and keeps the map of partitions the completions address directly.
    async fn ensure_partitions(&self, now: DateTime<Utc>, span: Duration) -> Result<Vec<String>> {
        partitions::ensure(&self.pool, &self.schema, now, span, Some(&self.partitions)).await
    }

    /// Retires the results partitions past `cutoff` (`partitions::retire`), and reads the
    /// partitions again for the completions' map if it retired any.
    async fn retire_partitions(
        &self,
        cutoff: DateTime<Utc>,
        archive: Option<&str>,
        within: bool,
        stopping: &tokio_util::sync::CancellationToken,
    ) -> Result<super::Retired> {
        let retired =
            partitions::retire(&self.pool, &self.schema, cutoff, archive, within, stopping).await?;
        if !retired.dropped.is_empty() || !retired.archived.is_empty() {
            self.partitions
                .set(partitions::list(&self.pool, &self.schema).await?);
        }
        Ok(retired)
    }

    /// Live and dead tuples of the queue table and of each results partition.
    async fn table_health(&self) -> Result<Vec<TableHealth>> {
        let rows: Vec<(String, bool, i64, i64, i64, bool)> =
            sqlx::query_as(&self.schema.sql.dead_tuples)
                .fetch_all(&mut *self.acquire().await?)
                .await
                .map_err(|e| self.lost(e))?;
        Ok(rows
            .into_iter()
            .map(
                |(name, is_queue, live, dead, changed, analyzed)| TableHealth {
                    name,
                    is_queue,
                    live,
                    dead,
                    changed,
                    analyzed,
                },
            )
            .collect())
    }

    /// Vacuums one of sk's tables (`name` as [`TableHealth`] gives it) unless another
    /// worker is doing it; returns whether this worker did.
    async fn vacuum(&self, table: &str) -> Result<bool> {
        let mut conn = self.acquire().await?;
        let key = format!("sk-vacuum:{table}");
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
            .bind(&key)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.lost(e))?;
        if !locked {
            return Ok(false);
        }
        let statement = format!("VACUUM (ANALYZE) {table}");
        let vacuumed = (&mut *conn).execute(statement.as_str()).await;
        let unlocked = sqlx::query("SELECT pg_advisory_unlock(hashtext($1))")
            .bind(&key)
            .execute(&mut *conn)
            .await;
        vacuumed?;
        unlocked?;
        Ok(true)
    }

    async fn write_metrics(&self, metrics: &[(&str, i64)], now: DateTime<Utc>) -> Result<()> {
        let (ids, values): (Vec<&str>, Vec<i64>) = metrics.iter().copied().unzip();
        sqlx::query(&self.schema.sql.metrics)
            .bind(&self.worker_id)
            .bind(ids)
            .bind(values)
            .bind(now)
            .execute(&mut *self.acquire().await?)
            .await
            .map_err(|e| self.lost(e))?;
        Ok(())
    }

    /// One connection attempt outside the pool, whose own retries hide the cause.
    async fn probe(&self) -> Result<(), ProbeFailure> {
        let options = self.pool.connect_options();
        let unreachable = |cause: String| Error::Connect {
            address: address(&options),
            cause,
        };
        let error =
            match tokio::time::timeout(ACQUIRE_WAIT, PgConnection::connect_with(&options)).await {
                Ok(Ok(conn)) => {
                    let _ = conn.close().await;
                    return Ok(());
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(ProbeFailure::Transient(unreachable(format!(
                        "no answer within {}",
                        humantime::format_duration(ACQUIRE_WAIT)
                    ))))
                }
            };
        Err(match &error {
            sqlx::Error::Io(io) => ProbeFailure::Transient(unreachable(io.to_string())),
            sqlx::Error::Protocol(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => {
                ProbeFailure::Transient(unreachable(error.to_string()))
            }
            sqlx::Error::Database(db) => {
                // 57P03: the server is starting up or shutting down; 53300: too many
                // connections; class 08: connection exceptions.
                let code = db.code().unwrap_or_default();
                let cause = db.message().to_owned();
                if code == "57P03" || code == "53300" || code.starts_with("08") {
                    ProbeFailure::Transient(unreachable(cause))
                } else {
                    ProbeFailure::Permanent(unreachable(cause))
                }
            }
            _ => ProbeFailure::Permanent(unreachable(error.to_string())),
        })
    }
}
