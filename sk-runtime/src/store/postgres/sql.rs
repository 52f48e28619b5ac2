//! The statements of one schema, formatted once and reused, so each is prepared once per connection.

use super::*;
use crate::model::status::{PROCESSED, PROCESSING, UNPROCESSED};
use crate::store::NULL_PRIORITY;

/// Completion statements addressed to one results partition, by its name.
pub(super) type CompleteIn = std::collections::HashMap<String, [Option<std::sync::Arc<str>>; 2]>;

/// The statements of one schema, formatted once and then reused, so sqlx's per-connection
/// cache prepares each of them once per connection.
#[derive(Default)]
pub(crate) struct Statements {
    pub(super) enqueue_one: String,
    pub(super) enqueue_one_plain: String,
    pub(super) enqueue_many: String,
    pub(super) enqueue_many_keyed: String,
    pub(super) enqueue_unique: String,
    pub(super) enqueue_tick: String,
    pub(super) enqueue_many_uniform: String,
    pub(super) claim: String,
    /// `claim` that skips the paused queues (`$8`). A separate statement: written into
    /// `claim` as `$8 IS NULL OR ...` (or as a subquery of the queues table) it made the
    /// planner expect almost no rows and sort the whole queue instead of reading the
    /// dequeue index (docs/performance.md).
    pub(super) claim_skipping: String,
    /// `claim` of one queue with a global limit (`$8`): at most the limit less the
    /// queue's running jobs (`queue_room`, migration 8).
    pub(super) claim_capped: String,
    /// `claim` of one fair queue, per tenant (`with_claim_fair`).
    pub(super) claim_fair: String,
    /// `claim` of jobs without a tenant (`with_claim_untenanted`).
    pub(crate) claim_untenanted: String,
    /// Upserts the results rows of jobs enqueued without one: safe whatever the queue
    /// row says, for a completion inside the job's own transaction and as the fallback of
    /// `complete_plain`.
    pub(super) complete: std::sync::Arc<str>,
    /// `complete` with a plain insert of those rows. An upsert costs the server about 3 µs
    /// a row more (a speculative insertion: an index probe, a lock on a token and a second
    /// WAL record per row; docs/performance.md). A queue row says whether its job has a
    /// results row (`task_has_result`); only a row another producer posted with the id of
    /// a job already on record says no wrongly, and then the insert fails on the primary
    /// key and the batch is written again with `complete`.
    pub(super) complete_plain: std::sync::Arc<str>,
    /// `complete` and `complete_plain` (at index 1) per results partition
    /// (`complete_in`), each made when first used.
    pub(super) complete_in: std::sync::Mutex<CompleteIn>,
    pub(super) fail: String,
    pub(super) give_back: String,
    pub(super) extend: String,
    pub(super) counts_by_status: String,
    pub(super) job: String,
    pub(super) metrics: String,
    pub(super) dead_tuples: String,
    pub(super) channel: String,
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
        let update = |table: &str| format!("UPDATE {table} r SET task_status = {PROCESSED},");
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
        // The rows a claim takes: due, of its job types, queues and tenants, in the
        // claim's order (`claim_fair` takes them per tenant instead).
        let due = format!(
            "SELECT task_id FROM {q}
             WHERE task_locked_until_ts <= $1
               AND task_type = ANY($2)
               AND ($3::varchar[] IS NULL OR task_queue = ANY($3))
               AND ($7::varchar[] IS NULL OR task_tenant = ANY($7))
               AND true -- paused
             ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id
             LIMIT $4
             FOR UPDATE SKIP LOCKED"
        );
        let lost_message = "'worker lost: its lease ran out before it recorded an outcome (a crash, a stall or a lost connection)'";
        // The columns of a queue row that a results row repeats (a NULL priority as
        // `NULL_PRIORITY`).
        let job_columns_q_noloss = format!(
            "q.task_id, q.task_type, q.task_source, q.task_queue,
            coalesce(q.task_priority, {NULL_PRIORITY}) AS task_priority,
            q.task_posted_at_ts, q.task_claimed_at_ts, q.task_tenant, q.task_correlation_id, q.task_metadata,
            q.task_timeout_ms"
        );
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
                    task_metadata = EXCLUDED.task_metadata,
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
        let cap = crate::clock::PERIOD_CAP_MS;
        let rerun = |now: &str| {
            format!(
                "again AS (
                    INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority,
                        task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result, {seed002},
                        task_unique_key, task_unique_mode, task_every_ms, task_timeout_ms)
                    SELECT {uuid_v7}(CASE WHEN task_every_ms < 0 AND NOT task_rerun THEN next.at ELSE {now} END),
                        task_type, task_source, task_payload, task_priority, {now}, next.at,
                        task_queue, task_max_attempts, true, {seed002}, task_unique_key, task_unique_mode, task_every_ms,
                        task_timeout_ms
                    FROM done CROSS JOIN LATERAL (
                        -- As clock::next_run: a positive period from this outcome, a negative
                        -- one (`after = \"due\"`) from when this run was due (its id's time,
                        -- in ms), a past slot due at once, only the latest of several. A
                        -- period of over 10,000 years waits until clock::LATEST.
                        SELECT least(CASE WHEN task_rerun THEN {now}
                            WHEN task_every_ms >= 0 THEN {now} + least(task_every_ms, {cap}) * interval '1 ms'
                            ELSE to_timestamp((due + greatest(1, (floor(extract(epoch FROM {now}) * 1000)::int8 - due)
                                / least(-task_every_ms, {cap})) * least(-task_every_ms, {cap})) / 1000.0) END,
                            '9999-12-31 23:59:59.999999+00') AS at
                        FROM (SELECT ('x' || substr(replace(task_id::text, '-', ''), 1, 12))::bit(48)::int8 AS due) d
                    ) next
                    WHERE task_rerun OR task_every_ms IS NOT NULL
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
                UPDATE {q} q SET task_locked_until_ts = held.retry_at, task_locked_by = NULL, task_updated_at_ts = now(),
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
                ON CONFLICT (task_id) DO UPDATE SET task_status = EXCLUDED.task_status, task_updated_at_ts = now(),
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
                format!("ON CONFLICT (task_id) DO UPDATE SET task_status = {PROCESSED}, task_updated_at_ts = now(), {update_results}")
            };
            format!(
                "{record_results}
                        3, jsonb_array_length(coalesce(task_lost_attempts, '[]')), NULL, NULL, NULL, NULL, false, ms,
                        $5::timestamptz, task_payload, $4, coalesce(task_lost_attempts, '[]'), output,
                        task_tenant, task_correlation_id, task_metadata, NULL::int4, NULL::int8
                    FROM done WHERE NOT done.task_has_result AND {filter}
                    {conflict}"
            )
        };
        let complete_with = |plain: bool| -> std::sync::Arc<str> {
            format!(
                "WITH input AS (
                    SELECT * FROM unnest($1::uuid[], $2::int4[], $3::int8[], $6::text[], $8::bool[])
                        AS i(task_id, attempt, ms, output, keep)
                ), done AS (
                    DELETE FROM {q} q USING input
                    WHERE q.task_id = input.task_id AND q.task_attempt = input.attempt AND q.task_locked_by = $4
                    -- The payload stays on record (seed 001), and a rerun takes it.
                    RETURNING {job_columns_q}, input.ms, input.output, input.keep, q.task_payload,
                        q.task_max_attempts, q.task_unique_key, q.task_unique_mode, q.task_rerun, q.task_every_ms,
                        q.task_has_result, q.task_dependants, q.task_waiting_on IS NOT NULL AS task_fed,
                        q.task_waited
                ), res AS (
                    UPDATE {r} r SET task_status = {PROCESSED}, task_updated_at_ts = now(), task_processing_time_milliseconds = done.ms,
                        task_processing_finalized_at_ts = $5,
                        task_first_processing_attempted_at_ts = coalesce(r.task_first_processing_attempted_at_ts,
                            (done.task_lost_attempts -> 0 ->> 'started_at')::timestamptz, done.task_claimed_at_ts),
                        task_last_processing_attempted_at_ts = done.task_claimed_at_ts,
                        task_last_locked_by = $4, task_output = done.output, task_payload = done.task_payload,
                        task_metadata = done.task_metadata,
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
                -- The transaction's id tells after a lost COMMIT reply whether it
                -- committed (`PgStore::succeeded_here`).
                SELECT task_id, task_dependants, task_fed, pg_current_xact_id()::text::int8
                FROM done, (SELECT CASE WHEN EXISTS (SELECT 1 FROM done WHERE task_waited)
                    THEN pg_notify($7, '') END) AS notify",
                // A success leaves no results row under a retention of zero when
                // nothing needs one (`Success::keep`): no output, no lost attempts to
                // record, no rerun or next run, nothing waiting on it or fed by it.
                insert_new(
                    "done.task_unique_key IS NULL AND (done.keep OR done.output IS NOT NULL
                        OR done.task_lost_attempts IS NOT NULL OR done.task_rerun
                        OR done.task_every_ms IS NOT NULL OR done.task_dependants
                        OR done.task_fed OR done.task_waited)",
                    plain
                ),
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
                    task_updated_at_ts = now(),
                    task_claimed_at_ts = $1,
                    task_lost_attempts = CASE WHEN q.task_locked_by IS NULL THEN q.task_lost_attempts
                        ELSE coalesce(q.task_lost_attempts, '[]') || jsonb_build_array(jsonb_build_object(
                            'attempt', q.task_attempt, 'worker', q.task_locked_by,
                            'started_at', q.task_claimed_at_ts, 'ended_at', $1::timestamptz,
                            'outcome', 'lost', 'kind', 'worker_lost', 'message', {lost_message},
                            'recoverable', true)) END
                WHERE q.task_id = ANY(ARRAY({due}))
                RETURNING q.task_id, q.task_type, q.task_payload, q.task_attempt, q.task_max_attempts,
                    coalesce(q.task_priority, {NULL_PRIORITY}) AS task_priority, q.task_queue, q.task_posted_at_ts, q.task_tenant, q.task_correlation_id,
                    q.task_metadata::text AS task_metadata, q.task_timeout_ms, q.task_waiting_on"
            ),
            complete,
            complete_plain,
            complete_in: std::sync::Mutex::default(),
            claim_skipping: String::new(),
            claim_capped: String::new(),
            claim_fair: String::new(),
            claim_untenanted: String::new(),
            fail,
            // A given-back job did not use up an attempt, and is claimable at once.
            give_back: format!(
                "UPDATE {q} q SET task_locked_until_ts = $1, task_locked_by = NULL, task_attempt = q.task_attempt - 1,
                    task_updated_at_ts = now()
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
                    UPDATE {q} q SET task_locked_until_ts = $1, task_updated_at_ts = now()
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
            // A leased queue row means the job runs now; results hold what happened before.
            // A job posted by another producer has no results row until a worker records
            // a run of it: its queue row alone answers then.
            job: format!(
                "SELECT k.id AS task_id, coalesce(r.task_type, q.task_type) AS task_type,
                    coalesce(r.task_source, q.task_source) AS task_source,
                    coalesce(r.task_queue, q.task_queue) AS task_queue,
                    coalesce(q.task_payload, r.task_payload) AS task_payload,
                    CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > $2 THEN {PROCESSING}
                         ELSE coalesce(r.task_status, {UNPROCESSED}) END AS task_status,
                    coalesce(q.task_priority, r.task_priority, {NULL_PRIORITY}) AS task_priority,
                    coalesce(r.task_error_count, 0) + jsonb_array_length(coalesce(q.task_lost_attempts, '[]'))
                        AS task_error_count, r.task_last_error_type,
                    coalesce(r.task_last_error_message, r.task_last_error) AS task_last_error_message,
                    r.task_last_error_detail, r.task_last_error_is_recoverable,
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
                    coalesce(q.task_metadata, r.task_metadata)::text AS task_metadata,
                    coalesce(r.task_unique_key, q.task_unique_key) AS task_unique_key,
                    coalesce(r.task_unique_mode, q.task_unique_mode) AS task_unique_mode,
                    q.task_version, coalesce(q.task_updated_at_ts, r.task_updated_at_ts) AS task_updated_at_ts
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
        .with_claim_fair(&q, &due)
        .with_claim_untenanted()
    }
}
