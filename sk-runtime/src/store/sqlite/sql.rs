//! The statements of one schema, formatted once and reused.

use super::*;
use crate::model::status::{PROCESSED, PROCESSING, UNPROCESSED};

/// The statements of one schema, formatted once.
#[derive(Default)]
pub(crate) struct Statements {
    pub(super) queue: String,
    pub(super) results: String,
    pub(super) enqueue_one: String,
    pub(super) enqueue_unique: String,
    pub(super) enqueue_many: String,
    pub(super) enqueue_many_keyed: String,
    pub(super) enqueue_many_uniform: String,
    pub(super) claim: String,
    pub(super) claim_key: String,
    pub(super) claim_untenanted: String,
    pub(super) claim_capped: String,
    /// The rows of a batch of failures this worker still holds, as one JSON array of
    /// `Row` objects.
    pub(super) failed_rows: String,
    pub(super) success: String,
    pub(super) failure: String,
    pub(super) again: String,
    pub(super) stats: String,
    pub(super) complete: String,
    pub(super) give_back: String,
    pub(super) extend: String,
    pub(super) counts_by_status: String,
    pub(super) job: String,
    pub(super) metrics: String,
}

/// The columns of a new queue row, `$1` to `$16`, in the order `bind_new` binds them.
pub(super) const NEW_COLUMNS: &str = "task_id, task_type, task_source, task_payload, task_priority,
    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result,
    task_tenant, task_correlation_id, task_metadata, task_unique_key, task_unique_mode, task_every_ms,
    task_timeout_ms";

/// A job without a unique key (`$13`) is its queue row alone until its first outcome
/// writes its results row (as for a job another producer posts): one row per job at
/// enqueue, not two. A keyed job (the scheduler's ticks: its results row makes a tick run
/// once) gets its results row now, through the queue table's trigger.
pub(super) const NEW_VALUES: &str =
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $13 IS NOT NULL, $10, $11, $12, $13, $14, $15, $16";

/// How a failure updates a results row that exists (`failure` rows, multi-row).
pub(super) const FAILURE_UPDATE: &str = "task_status = excluded.task_status,
    task_error_count = task_error_count + excluded.task_error_count,
    task_last_error_type = excluded.task_last_error_type,
    task_last_error_message = excluded.task_last_error_message,
    task_last_error_detail = excluded.task_last_error_detail,
    task_last_error = excluded.task_last_error,
    task_last_error_is_recoverable = excluded.task_last_error_is_recoverable,
    task_processing_time_milliseconds = excluded.task_processing_time_milliseconds,
    task_processing_finalized_at_ts = excluded.task_processing_finalized_at_ts,
    task_payload = excluded.task_payload,
    task_metadata = excluded.task_metadata,
    task_last_locked_by = excluded.task_last_locked_by,
    task_errors = excluded.task_errors,
    task_output = NULL,
    task_max_attempts = excluded.task_max_attempts,
    task_timeout_ms = excluded.task_timeout_ms,
    task_first_processing_attempted_at_ts =
        coalesce(task_first_processing_attempted_at_ts, excluded.task_first_processing_attempted_at_ts),
    task_last_processing_attempted_at_ts = excluded.task_last_processing_attempted_at_ts";

impl Statements {
    pub(crate) fn new(schema: &Schema) -> Self {
        let q = schema.flat_table("tasks_queue_t");
        let r = schema.flat_table("task_results_t");
        let s = schema.flat_table("task_execution_time_stats_t");
        let m = schema.flat_table("metrics_t");
        let queues = schema.flat_table("queues_t");
        let lost_message = "'worker lost: its lease ran out before it recorded an outcome (a crash, a stall or a lost connection)'";
        // The columns a results row repeats from its queue row, `$1` to `$9`.
        // The batch as one JSON array of rows, in the caller's order (so the lock handles
        // follow it). With unique keys (mode skip), a key a live job holds leaves that job
        // as it is, and the statement answers with its id (a no-op update returns the row).
        let many = "SELECT unhex(value ->> 'id'), value ->> 'type', value ->> 'source', value ->> 'payload',
                value ->> 'priority', $1, value ->> 'run_at', value ->> 'queue', value ->> 'max_attempts',
                value ->> 'key' IS NOT NULL,
                value ->> 'tenant', value ->> 'correlation_id', value ->> 'metadata', value ->> 'key',
                CASE WHEN value ->> 'key' IS NOT NULL THEN 1 END, NULL, value ->> 'timeout_ms'
             FROM json_each($2) WHERE true ORDER BY key";
        let job_columns =
            "task_id, task_type, task_source, task_queue, task_priority, task_posted_at_ts,
            task_tenant, task_correlation_id, task_metadata";
        let q_job_columns = "q.task_id, q.task_type, q.task_source, q.task_queue, q.task_priority,
            q.task_posted_at_ts, q.task_tenant, q.task_correlation_id, q.task_metadata";
        // The due rows a claim takes, in its order, and what leasing one writes.
        let due = format!(
            "SELECT task_lock_handle_id FROM {q}
             WHERE task_locked_until_ts <= $1
               AND task_type IN (SELECT value FROM json_each($2))
               AND ($3 IS NULL OR task_queue IN (SELECT value FROM json_each($3)))
               AND ($7 IS NULL OR task_tenant IN (SELECT value FROM json_each($7)))
               AND ($8 IS NULL OR task_queue NOT IN (SELECT value FROM json_each($8)))
             ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id
             LIMIT $4"
        );
        let lease = format!(
            "task_locked_until_ts = $5, task_locked_by = $6, task_attempt = task_attempt + 1,
                task_claimed_at_ts = $1,
                task_lost_attempts = CASE WHEN task_locked_by IS NULL THEN task_lost_attempts
                    ELSE json_insert(coalesce(task_lost_attempts, '[]'), '$[#]', json_object(
                        'attempt', task_attempt, 'worker', task_locked_by,
                        'started_at', task_claimed_at_ts, 'ended_at', $1,
                        'outcome', 'lost', 'kind', 'worker_lost', 'message', {lost_message},
                        'recoverable', json('true'))) END"
        );
        let claim_of = |due: &str| {
            format!(
                    "CREATE TEMP TABLE IF NOT EXISTS sk_claim (handle INTEGER PRIMARY KEY);
                     DELETE FROM temp.sk_claim;
                     INSERT INTO temp.sk_claim {due};
                     UPDATE {q} SET {lease}
                     WHERE task_lock_handle_id IN (SELECT handle FROM temp.sk_claim) AND task_locked_until_ts <= $1;
                     SELECT (SELECT count(*) FROM temp.sk_claim), json_group_array(json_array(hex(q.task_id),
                        q.task_type, q.task_payload, q.task_attempt, q.task_max_attempts, q.task_priority,
                        q.task_queue, q.task_posted_at_ts, q.task_tenant, q.task_correlation_id, q.task_metadata,
                        q.task_lock_handle_id, q.task_timeout_ms, q.task_waiting_on))
                     FROM temp.sk_claim c CROSS JOIN {q} q ON q.task_lock_handle_id = c.handle
                     WHERE q.task_locked_by = $6 AND q.task_locked_until_ts = $5"
                )
        };
        Statements {
            queue: q.clone(),
            results: r.clone(),
            enqueue_one: format!(
                "INSERT INTO {q} ({NEW_COLUMNS}) SELECT {NEW_VALUES}
                 WHERE NOT EXISTS (SELECT 1 FROM {r} WHERE task_id = $1)
                 ON CONFLICT DO NOTHING
                 RETURNING task_id"
            ),
            // A duplicate key changes the live job as its mode says (`UniqueMode`); the
            // statement answers with the live job's row, so an id other than `$1` means
            // the job was there already.
            enqueue_unique: format!(
                "INSERT INTO {q} AS q ({NEW_COLUMNS}) VALUES ({NEW_VALUES})
                 ON CONFLICT (task_unique_key) WHERE task_unique_key IS NOT NULL DO UPDATE SET
                    task_payload = CASE WHEN ($14 = 3 AND q.task_locked_by IS NULL) OR $14 = 2
                        THEN excluded.task_payload ELSE q.task_payload END,
                    task_locked_until_ts = CASE WHEN $14 = 3 AND q.task_locked_by IS NULL
                        THEN excluded.task_locked_until_ts ELSE q.task_locked_until_ts END,
                    task_rerun = q.task_rerun OR ($14 = 2 AND q.task_locked_by IS NOT NULL),
                    task_every_ms = coalesce(excluded.task_every_ms, q.task_every_ms)
                 RETURNING task_id, task_locked_by IS NOT NULL"
            ),
            // The batch as one JSON array of rows, in the caller's order (so the lock
            // handles follow it). A key a live job holds (mode skip) leaves that job as it
            // is, and the statement answers with its id (a no-op update returns the row).
            enqueue_many: format!("INSERT INTO {q} ({NEW_COLUMNS}) {many}"),
            // The common batch: one job type, and everything but ids and payloads alike,
            // so only `[id, payload]` pairs travel as JSON (each `->>` parses its row's
            // JSON again: short rows are what makes this fast).
            enqueue_many_uniform: format!(
                "INSERT INTO {q} ({NEW_COLUMNS})
                 SELECT unhex(value ->> 0), $3, $4, value ->> 1, $5, $1, $6, $7, $8, 0, $9, $10, $11,
                    NULL, NULL, NULL, $12
                 FROM json_each($2) ORDER BY key"
            ),
            enqueue_many_keyed: format!(
                "INSERT INTO {q} AS q ({NEW_COLUMNS}) {many}
                 ON CONFLICT (task_unique_key) WHERE task_unique_key IS NOT NULL
                    DO UPDATE SET task_unique_key = q.task_unique_key
                 RETURNING task_id, task_unique_key"
            ),
            // Three steps in one call (module docs): the due rows in claim order into a temp
            // table, then those still due leased in one `UPDATE`, which takes the write lock
            // before it reads; then the leased rows as one JSON array, with the number of
            // candidates (fewer leased: another writer took some between the steps). A row
            // still held by a worker had its lease run out: that attempt is noted as lost.
            // (`CROSS JOIN` reads the temp table first: else SQLite may start from the
            // running-jobs index, which `task_locked_by = $6` matches, and read every lease.)
            claim: claim_of(&due),
            // `claim` of the jobs without a tenant (what a claim of a queue with a limit
            // per tenant takes after each tenant's, `fair::claim_within`).
            claim_untenanted: claim_of(&due.replace(
                "AND ($7 IS NULL OR task_tenant IN (SELECT value FROM json_each($7)))",
                "AND task_tenant IS NULL",
            )),
            // `claim` of one tenant (`$7`'s one) of one fair queue (`$3`'s one), through
            // the fair index in the claim's order (migration 10). Named: after `ANALYZE`,
            // SQLite preferred skipping through the claim-order index, past every other
            // tenant's rows.
            claim_key: claim_of(&due.replace(
                &format!("FROM {q}\n             WHERE task_locked_until_ts <= $1"),
                &format!(
                    "FROM {q} INDEXED BY {}
                     WHERE task_queue = json_extract($3, '$[0]') AND task_tenant = json_extract($7, '$[0]')
                       AND task_locked_until_ts <= $1",
                    schema.flat_table("tasks_queue_fair_idx")
                ),
            )),
            // `claim` of one queue with a global limit (`$9`): at most the limit less its
            // running jobs, counted in the one statement that leases them, under the write
            // lock, so claims take turns. (A negative LIMIT is none in SQLite, hence
            // `max(0, ...)`.)
            claim_capped: format!(
                "UPDATE {q} SET {lease}
                 WHERE task_lock_handle_id IN ({})
                 RETURNING task_id, task_type, task_payload, task_attempt, task_max_attempts, task_priority,
                    task_queue, task_posted_at_ts, task_tenant, task_correlation_id, task_metadata,
                    task_lock_handle_id, task_timeout_ms, task_waiting_on",
                due.replace(
                    "LIMIT $4",
                    &format!(
                        "LIMIT max(0, min($4, coalesce((SELECT queue_global_limit FROM {queues} WHERE queue_name = $9)
                            - (SELECT count(*) FROM {q} WHERE task_queue = $9 AND task_locked_by IS NOT NULL
                                AND task_locked_until_ts > $1), $4)))"
                    )
                )
            ),
            // `$1`: `[id, attempt]` rows. Fenced: only the holder of this exact claim (id,
            // attempt, worker) may finish it.
            failed_rows: format!(
                "SELECT json_group_array(json_object('task_id', hex(q.task_id), 'task_type', q.task_type,
                    'task_source', q.task_source, 'task_queue', q.task_queue, 'task_priority', q.task_priority,
                    'task_posted_at_ts', q.task_posted_at_ts, 'task_tenant', q.task_tenant,
                    'task_correlation_id', q.task_correlation_id, 'task_metadata', q.task_metadata,
                    'task_claimed_at_ts', q.task_claimed_at_ts, 'task_lost_attempts', q.task_lost_attempts,
                    'task_payload', q.task_payload, 'task_max_attempts', q.task_max_attempts,
                    'task_unique_key', q.task_unique_key, 'task_unique_mode', q.task_unique_mode,
                    'task_rerun', json(CASE WHEN q.task_rerun THEN 'true' ELSE 'false' END),
                    'task_every_ms', q.task_every_ms, 'task_timeout_ms', q.task_timeout_ms,
                    'task_dependants', json(CASE WHEN q.task_dependants THEN 'true' ELSE 'false' END),
                    'task_fed', json(CASE WHEN q.task_waiting_on IS NOT NULL THEN 'true' ELSE 'false' END)))
                 FROM json_each($1) j CROSS JOIN {q} q
                    ON q.task_id = unhex(j.value ->> 0) AND q.task_attempt = j.value ->> 1
                 WHERE q.task_locked_by = $2"
            ),
            // A success, into the results row, or a new one for a job another producer
            // posted. `$17`: every failed attempt so far when lost ones are added, else NULL;
            // `$18`: the payload, kept on record.
            success: format!(
                "INSERT INTO {r} ({job_columns}, task_status, task_error_count,
                    task_processing_time_milliseconds, task_processing_finalized_at_ts, task_last_locked_by,
                    task_output, task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts,
                    task_errors, task_payload)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 3, $10, $11, $12, $13, $14, $15, $16, coalesce($17, '[]'),
                    $18)
                 ON CONFLICT (task_id) DO UPDATE SET task_status = {PROCESSED},
                    task_error_count = task_error_count + excluded.task_error_count,
                    task_processing_time_milliseconds = excluded.task_processing_time_milliseconds,
                    task_processing_finalized_at_ts = excluded.task_processing_finalized_at_ts,
                    task_last_locked_by = excluded.task_last_locked_by,
                    task_output = excluded.task_output,
                    task_first_processing_attempted_at_ts =
                        coalesce(task_first_processing_attempted_at_ts, excluded.task_first_processing_attempted_at_ts),
                    task_last_processing_attempted_at_ts = excluded.task_last_processing_attempted_at_ts,
                    task_errors = coalesce($17, task_errors), task_payload = excluded.task_payload,
                    task_metadata = excluded.task_metadata"
            ),
            failure: format!(
                "INSERT INTO {r} ({job_columns}, task_status, task_error_count, task_last_error_type,
                    task_last_error_message, task_last_error_detail, task_last_error, task_last_error_is_recoverable,
                    task_processing_time_milliseconds, task_processing_finalized_at_ts, task_payload,
                    task_last_locked_by, task_errors, task_output, task_first_processing_attempted_at_ts,
                    task_last_processing_attempted_at_ts, task_max_attempts, task_timeout_ms)"
            ),
            // A restart asked for during the run, or a periodic job's next run.
            again: format!("INSERT INTO {q} ({NEW_COLUMNS}) VALUES ({NEW_VALUES})"),
            stats: format!(
                "INSERT INTO {s} (et_payload_type, et_owner_process_id, et_avg_execution_time,
                    et_fastest_execution_time, et_longest_execution_time, et_total_execution_time,
                    et_n_execution_cycles, et_last_execution_time, et_last_updated_ts)
                 VALUES ($1, $2, $3 / $6, $4, $5, $3, $6, $7, $8)
                 ON CONFLICT (et_payload_type, et_owner_process_id) DO UPDATE SET
                    et_total_execution_time = et_total_execution_time + excluded.et_total_execution_time,
                    et_n_execution_cycles = et_n_execution_cycles + excluded.et_n_execution_cycles,
                    et_avg_execution_time = (et_total_execution_time + excluded.et_total_execution_time)
                        / (et_n_execution_cycles + excluded.et_n_execution_cycles),
                    et_fastest_execution_time = min(et_fastest_execution_time, excluded.et_fastest_execution_time),
                    et_longest_execution_time = max(et_longest_execution_time, excluded.et_longest_execution_time),
                    et_last_execution_time = excluded.et_last_execution_time,
                    et_last_updated_ts = excluded.et_last_updated_ts"
            ),
            // Several statements, one round trip. The batch (`[id, attempt, ms, output,
            // keep]` rows, `$1`) is matched to the rows this worker still holds under
            // those claims (fenced), which go into a temp table by lock handle with their
            // run time, output, whether they take `complete`'s rare path (lost attempts,
            // reruns, periodic jobs, workflows) and whether they keep a results row
            // (`Success::keep`, a results row already there, a unique key); the rare ones
            // are copied whole into another, as the queue rows go. Then the results rows
            // of the rest that keep one are written, the queue rows deleted and the run times added to this worker's statistics (seed 001);
            // last, the ids it finalized and how many take the rare path, as one row. Only
            // the handle, not a copy of each row, goes through the temp table: copying
            // every row cost 0.7 of 3.9 us a job. (`CROSS JOIN`: the batch first; else
            // SQLite may start from the running-jobs index, which `task_locked_by = $2`
            // matches, and read every lease: 9.6 against 3.9 us a job with 100,000 leased.)
            complete: format!(
                "CREATE TEMP TABLE IF NOT EXISTS sk_went (handle INTEGER PRIMARY KEY, task_id BLOB, task_type,
                    ms INTEGER, output TEXT, rare INTEGER, keep INTEGER);
                 CREATE TEMP TABLE IF NOT EXISTS sk_gone (task_id BLOB PRIMARY KEY, task_type, task_source,
                    task_queue, task_priority, task_posted_at_ts, task_tenant, task_correlation_id, task_metadata,
                    task_claimed_at_ts, task_lost_attempts, task_payload, task_max_attempts, task_unique_key,
                    task_unique_mode, task_rerun, task_every_ms, task_timeout_ms, ms, output, task_dependants,
                    task_fed);
                 DELETE FROM temp.sk_went;
                 DELETE FROM temp.sk_gone;
                 INSERT INTO temp.sk_went SELECT q.task_lock_handle_id, q.task_id, q.task_type,
                    d.value ->> 2, d.value ->> 3,
                    q.task_lost_attempts IS NOT NULL OR q.task_rerun OR q.task_every_ms IS NOT NULL
                        OR q.task_dependants OR q.task_waiting_on IS NOT NULL,
                    d.value ->> 4 OR q.task_has_result OR q.task_unique_key IS NOT NULL
                 FROM json_each($1) d CROSS JOIN {q} q ON q.task_id = unhex(d.value ->> 0)
                 WHERE q.task_attempt = d.value ->> 1 AND q.task_locked_by = $2;
                 INSERT INTO temp.sk_gone SELECT q.task_id, q.task_type, q.task_source, q.task_queue,
                    q.task_priority, q.task_posted_at_ts, q.task_tenant, q.task_correlation_id, q.task_metadata,
                    q.task_claimed_at_ts, q.task_lost_attempts, q.task_payload,
                    q.task_max_attempts, q.task_unique_key, q.task_unique_mode, q.task_rerun, q.task_every_ms,
                    q.task_timeout_ms, g.ms, g.output, q.task_dependants, q.task_waiting_on IS NOT NULL
                 FROM temp.sk_went g CROSS JOIN {q} q ON q.task_lock_handle_id = g.handle
                 WHERE g.rare;
                 INSERT INTO {r} ({job_columns}, task_status, task_processing_time_milliseconds,
                    task_processing_finalized_at_ts, task_last_locked_by, task_output,
                    task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts, task_payload)
                 SELECT {q_job_columns}, 3, g.ms, $3, $2, g.output, q.task_claimed_at_ts, q.task_claimed_at_ts,
                    q.task_payload
                 FROM temp.sk_went g CROSS JOIN {q} q ON q.task_lock_handle_id = g.handle
                 WHERE q.task_lost_attempts IS NULL AND (g.keep OR g.rare OR g.output IS NOT NULL)
                 ON CONFLICT (task_id) DO UPDATE SET task_status = {PROCESSED},
                    task_processing_time_milliseconds = excluded.task_processing_time_milliseconds,
                    task_processing_finalized_at_ts = excluded.task_processing_finalized_at_ts,
                    task_last_locked_by = excluded.task_last_locked_by,
                    task_output = excluded.task_output,
                    task_first_processing_attempted_at_ts =
                        coalesce(task_first_processing_attempted_at_ts, excluded.task_first_processing_attempted_at_ts),
                    task_last_processing_attempted_at_ts = excluded.task_last_processing_attempted_at_ts,
                    task_payload = excluded.task_payload, task_metadata = excluded.task_metadata;
                 DELETE FROM {q} WHERE task_lock_handle_id IN (SELECT handle FROM temp.sk_went);
                 INSERT INTO {s} (et_payload_type, et_owner_process_id, et_avg_execution_time,
                    et_fastest_execution_time, et_longest_execution_time, et_total_execution_time,
                    et_n_execution_cycles, et_last_execution_time, et_last_updated_ts)
                 SELECT task_type, $2, sum(ms) / count(*), min(ms), max(ms), sum(ms), count(*), max(ms), $3
                 FROM temp.sk_went WHERE true GROUP BY task_type
                 ON CONFLICT (et_payload_type, et_owner_process_id) DO UPDATE SET
                    et_total_execution_time = et_total_execution_time + excluded.et_total_execution_time,
                    et_n_execution_cycles = et_n_execution_cycles + excluded.et_n_execution_cycles,
                    et_avg_execution_time = (et_total_execution_time + excluded.et_total_execution_time)
                        / (et_n_execution_cycles + excluded.et_n_execution_cycles),
                    et_fastest_execution_time = min(et_fastest_execution_time, excluded.et_fastest_execution_time),
                    et_longest_execution_time = max(et_longest_execution_time, excluded.et_longest_execution_time),
                    et_last_execution_time = excluded.et_last_execution_time,
                    et_last_updated_ts = excluded.et_last_updated_ts;
                 SELECT coalesce(json_group_array(hex(task_id)), '[]'), count(*) FILTER (WHERE rare)
                 FROM temp.sk_went"
            ),
            // A given-back job did not use up an attempt, and is claimable at once.
            // `$2`: `[id, attempt]` rows; each is found by its id.
            give_back: format!(
                "UPDATE {q} AS q SET task_locked_until_ts = $1, task_locked_by = NULL,
                    task_attempt = q.task_attempt - 1
                 FROM (SELECT unhex(value ->> 0) AS id, value ->> 1 AS attempt FROM json_each($2)) AS l
                 WHERE q.task_id = l.id AND q.task_attempt = l.attempt AND q.task_locked_by = $3"
            ),
            extend: format!(
                "UPDATE {q} AS q SET task_locked_until_ts = $1
                 FROM (SELECT unhex(value ->> 0) AS id, value ->> 1 AS attempt FROM json_each($2)) AS l
                 WHERE q.task_id = l.id AND q.task_attempt = l.attempt AND q.task_locked_by = $3
                 RETURNING task_id"
            ),
            // Jobs without a results row yet (`NEW_VALUES`) are unprocessed.
            counts_by_status: format!(
                "SELECT task_status, sum(n) FROM (
                    SELECT task_status, count(*) AS n FROM {r} GROUP BY task_status
                    UNION ALL SELECT 1, count(*) FROM {q} WHERE NOT task_has_result
                 ) GROUP BY task_status HAVING sum(n) > 0"
            ),
            // As on PostgreSQL: a leased queue row means the job runs now; results hold
            // what happened before. The queue row's lost attempts follow the recorded ones
            // (`lost`, appended in `job`).
            job: format!(
                "SELECT k.id AS task_id, coalesce(r.task_type, q.task_type) AS task_type,
                    coalesce(r.task_source, q.task_source) AS task_source,
                    coalesce(r.task_queue, q.task_queue) AS task_queue,
                    coalesce(q.task_payload, r.task_payload) AS task_payload,
                    CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > $2 THEN {PROCESSING}
                         ELSE coalesce(r.task_status, {UNPROCESSED}) END AS task_status,
                    coalesce(q.task_priority, r.task_priority) AS task_priority,
                    coalesce(r.task_error_count, 0) + json_array_length(coalesce(q.task_lost_attempts, '[]'))
                        AS task_error_count, r.task_last_error_type,
                    coalesce(r.task_last_error_message, r.task_last_error) AS task_last_error_message, r.task_last_error_detail,
                    r.task_last_error_is_recoverable = 1 AS task_last_error_is_recoverable,
                    coalesce(r.task_processing_time_milliseconds, 0) AS task_processing_time_milliseconds,
                    coalesce(r.task_posted_at_ts, q.task_posted_at_ts) AS task_posted_at_ts,
                    coalesce(r.task_first_processing_attempted_at_ts,
                        json_extract(q.task_lost_attempts, '$[0].started_at'), q.task_claimed_at_ts)
                        AS task_first_processing_attempted_at_ts,
                    CASE WHEN q.task_locked_by IS NOT NULL THEN q.task_claimed_at_ts
                         ELSE r.task_last_processing_attempted_at_ts END AS task_last_processing_attempted_at_ts,
                    r.task_processing_finalized_at_ts,
                    q.task_attempt, q.task_max_attempts, q.task_locked_until_ts, q.task_locked_by,
                    coalesce(r.task_errors, '[]') AS task_errors, q.task_lost_attempts AS lost,
                    r.task_last_locked_by, r.task_output,
                    coalesce(r.task_tenant, q.task_tenant) AS task_tenant,
                    coalesce(r.task_correlation_id, q.task_correlation_id) AS task_correlation_id,
                    coalesce(q.task_metadata, r.task_metadata) AS task_metadata,
                    coalesce(r.task_unique_key, q.task_unique_key) AS task_unique_key,
                    coalesce(r.task_unique_mode, q.task_unique_mode) AS task_unique_mode,
                    q.task_version, NULL AS task_updated_at_ts
                 FROM (SELECT $1 AS id) k
                 LEFT JOIN {r} r ON r.task_id = k.id
                 LEFT JOIN {q} q ON q.task_id = k.id
                 WHERE r.task_id IS NOT NULL OR q.task_id IS NOT NULL"
            ),
            metrics: format!(
                "INSERT INTO {m} (metric_owner_process_id, metric_id, metric_category, metric_value, metric_last_updated)
                 VALUES ($1, $2, 'worker', $3, $4)
                 ON CONFLICT (metric_owner_process_id, metric_id) DO UPDATE
                 SET metric_value = excluded.metric_value, metric_last_updated = excluded.metric_last_updated"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tenants_claim_names_the_fair_index() {
        let sql = super::Statements::new(&crate::Schema::default());
        assert!(
            sql.claim_key
                .contains("INDEXED BY sk_tasks_queue_fair_idx\n"),
            "{}",
            sql.claim_key
        );
        assert!(!sql.claim.contains("INDEXED BY"));
    }
}
