//! SQLite: migrations and every statement sk runs on an embedded database file.
//!
//! SQLite has one writer at a time per file, across processes, and no `SKIP LOCKED`:
//! sk relies on that writer lock instead. A claim picks the due rows, then leases those
//! still due in one `UPDATE`, which takes the write lock before it reads and checks each
//! row again: two claims (of this process or another one on the same file) lease one
//! after the other and the second sees the first's leases, so a job is never claimed
//! twice under one lease, and a claim that lost rows to another claim between its steps
//! claims again at once. (A claim of a queue with a global limit is one
//! `UPDATE … RETURNING`, so the count of its running jobs is taken under the write lock
//! too.) Every write that spans several
//! statements (a batch of completions, a failure, a tick) runs in a `BEGIN IMMEDIATE`
//! transaction, which takes the lock first too; a writer that finds the lock taken waits
//! for the connection's `busy_timeout`. Within a process, an enqueue wakes the workers at
//! once; other processes find new jobs at their poll interval.
//!
//! Times are bound as fixed-width UTC text (`ts`), so text order is time order.

mod control;
pub(crate) mod flow;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool};
use sqlx::{Connection as _, Executor as _, Row as _, Sqlite};
use uuid::Uuid;

use super::driver::{Admin, Work};
use super::{
    ClaimedJob, Failure, Lease, LeasedRow, NewJob, ProbeFailure, Retired, ScheduleRow, Schema,
    Success,
};
use crate::bus::wake;
use crate::error::{Error, Result};
use crate::model::{Attempt, JobRecord, QueueCounts, QueuedJob};

/// Versioned migrations, applied in order; `__PREFIX__` is substituted.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "initial schema",
        include_str!("../../../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "job control",
        include_str!("../../../migrations/sqlite/0002_control.sql"),
    ),
    (
        3,
        "a concurrency limit per queue across workers",
        include_str!("../../../migrations/sqlite/0003_global_limits.sql"),
    ),
    (
        4,
        "workflows: jobs that wait on other jobs",
        include_str!("../../../migrations/sqlite/0004_workflows.sql"),
    ),
    (
        5,
        "the queue table refuses a row sk could not read",
        include_str!("../../../migrations/sqlite/0005_strict_queue.sql"),
    ),
    (
        6,
        "integer columns hold only what sk reads from them",
        include_str!("../../../migrations/sqlite/0006_integer_ranges.sql"),
    ),
];

/// Migration 6's checks, as (table, the value a row's column must meet, per column):
/// [`out_of_range`] names a row that breaks one before the migration runs.
const RANGES: &[(&str, &[(&str, &str)])] = &[
    (
        "tasks_queue_t",
        &[
            ("task_priority", INT4),
            ("task_attempt", INT4),
            ("task_max_attempts", INT4),
            ("task_unique_mode", MODE),
            ("task_rerun", FLAG),
            ("task_has_result", FLAG),
            ("task_waiting_on", INT4),
            ("task_dependants", FLAG),
        ],
    ),
    (
        "task_results_t",
        &[
            ("task_status", INT4),
            ("task_priority", INT4),
            ("task_unique_mode", MODE),
            ("task_error_count", INT4),
            ("task_last_error_is_recoverable", FLAG),
            ("task_processing_time_milliseconds", INT8),
            ("task_max_attempts", INT4),
            ("task_timeout_ms", INT8),
        ],
    ),
];
const INT4: &str = "BETWEEN -2147483648 AND 2147483647";
const INT8: &str = "BETWEEN -9223372036854775808 AND 9223372036854775807";
const FLAG: &str = "IN (0, 1)";
const MODE: &str = "IN (1, 2, 3)";

/// The first row of `schema`'s queue or results table that migration 6's checks would
/// refuse, named with its id, column and value (`None`: every row passes).
async fn out_of_range(tx: &mut SqliteConnection, schema: &Schema) -> Result<Option<String>> {
    for (table, columns) in RANGES {
        let breaks = |(column, check): &(&str, &str)| format!("NOT ({column} {check})");
        let which: Vec<String> = columns
            .iter()
            .map(|c| format!("WHEN {} THEN '{} = ' || quote({})", breaks(c), c.0, c.0))
            .collect();
        let any: Vec<String> = columns.iter().map(breaks).collect();
        let table = schema.flat_table(table);
        let found: Option<(String, String)> = sqlx::query_as(&format!(
            "SELECT hex(task_id), CASE {} END FROM {table} WHERE {} LIMIT 1",
            which.join(" "),
            any.join(" OR ")
        ))
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((id, value)) = found {
            return Ok(Some(format!(
                "the row of job {} in {table} has {value}, which sk cannot read; correct or delete it, then migrate again",
                id.to_lowercase()
            )));
        }
    }
    Ok(None)
}

/// A time as sk stores it on SQLite: `2026-11-22T10:39:48.123456Z`.
pub(crate) fn ts(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// A UUIDv7 of `at`, as the queue's other ids (results are pruned by id order elsewhere;
/// here it keeps the ids of reruns in posting order).
fn uuid_v7(at: DateTime<Utc>) -> Uuid {
    let secs = u64::try_from(at.timestamp()).unwrap_or(0);
    Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        secs,
        at.timestamp_subsec_nanos(),
    ))
}

/// The statements of one schema, formatted once.
#[derive(Default)]
pub(crate) struct Statements {
    queue: String,
    results: String,
    enqueue_one: String,
    enqueue_unique: String,
    enqueue_many: String,
    enqueue_many_keyed: String,
    enqueue_many_uniform: String,
    claim: String,
    claim_capped: String,
    /// The rows of a batch of failures this worker still holds, as one JSON array of
    /// `Row` objects.
    failed_rows: String,
    success: String,
    failure: String,
    again: String,
    stats: String,
    complete: String,
    give_back: String,
    extend: String,
    counts_by_status: String,
    counts_live: String,
    peek: String,
    job: String,
    metrics: String,
}

/// The columns of a new queue row, `$1` to `$16`, in the order `bind_new` binds them.
const NEW_COLUMNS: &str = "task_id, task_type, task_source, task_payload, task_priority,
    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_has_result,
    task_tenant, task_correlation_id, task_metadata, task_unique_key, task_unique_mode, task_every_ms,
    task_timeout_ms";
/// A job without a unique key (`$13`) is its queue row alone until its first outcome
/// writes its results row (as for a job another producer posts): one row per job at
/// enqueue, not two. A keyed job (the scheduler's ticks: its results row makes a tick run
/// once) gets its results row now, through the queue table's trigger.
const NEW_VALUES: &str =
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $13 IS NOT NULL, $10, $11, $12, $13, $14, $15, $16";

/// How a failure updates a results row that exists (`failure` rows, multi-row).
const FAILURE_UPDATE: &str = "task_status = excluded.task_status,
    task_error_count = task_error_count + excluded.task_error_count,
    task_last_error_type = excluded.task_last_error_type,
    task_last_error_message = excluded.task_last_error_message,
    task_last_error_detail = excluded.task_last_error_detail,
    task_last_error = excluded.task_last_error,
    task_last_error_is_recoverable = excluded.task_last_error_is_recoverable,
    task_processing_time_milliseconds = excluded.task_processing_time_milliseconds,
    task_processing_finalized_at_ts = excluded.task_processing_finalized_at_ts,
    task_payload = excluded.task_payload,
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
            claim: format!(
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
            ),
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
            // posted. `$16`: every failed attempt so far when lost ones are added, else NULL.
            success: format!(
                "INSERT INTO {r} ({job_columns}, task_status, task_error_count,
                    task_processing_time_milliseconds, task_processing_finalized_at_ts, task_last_locked_by,
                    task_output, task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts,
                    task_errors)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 3, $10, $11, $12, $13, $14, $15, $16, coalesce($17, '[]'))
                 ON CONFLICT (task_id) DO UPDATE SET task_status = 3,
                    task_error_count = task_error_count + excluded.task_error_count,
                    task_processing_time_milliseconds = excluded.task_processing_time_milliseconds,
                    task_processing_finalized_at_ts = excluded.task_processing_finalized_at_ts,
                    task_last_locked_by = excluded.task_last_locked_by,
                    task_output = excluded.task_output,
                    task_first_processing_attempted_at_ts =
                        coalesce(task_first_processing_attempted_at_ts, excluded.task_first_processing_attempted_at_ts),
                    task_last_processing_attempted_at_ts = excluded.task_last_processing_attempted_at_ts,
                    task_errors = coalesce($17, task_errors)"
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
            // Several statements, one round trip. The batch (`[id, attempt, ms, output]`
            // rows, `$1`) is matched to the rows this worker still holds under those claims
            // (fenced), which go into a temp table by lock handle with their run time,
            // output and whether they take `complete`'s rare path (lost attempts, reruns,
            // periodic jobs, workflows); the rare ones are copied whole into another, as
            // the queue rows go. Then the results rows of the rest are written, the queue
            // rows deleted and the run times added to this worker's statistics (seed 001);
            // last, the ids it finalized and how many take the rare path, as one row. Only
            // the handle, not a copy of each row, goes through the temp table: copying
            // every row cost 0.7 of 3.9 us a job. (`CROSS JOIN`: the batch first; else
            // SQLite may start from the running-jobs index, which `task_locked_by = $2`
            // matches, and read every lease: 9.6 against 3.9 us a job with 100,000 leased.)
            complete: format!(
                "CREATE TEMP TABLE IF NOT EXISTS sk_went (handle INTEGER PRIMARY KEY, task_id BLOB, task_type,
                    ms INTEGER, output TEXT, rare INTEGER);
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
                        OR q.task_dependants OR q.task_waiting_on IS NOT NULL
                 FROM json_each($1) d CROSS JOIN {q} q ON q.task_id = unhex(d.value ->> 0)
                 WHERE q.task_attempt = d.value ->> 1 AND q.task_locked_by = $2;
                 INSERT INTO temp.sk_gone SELECT q.task_id, q.task_type, q.task_source, q.task_queue,
                    q.task_priority, q.task_posted_at_ts, q.task_tenant, q.task_correlation_id, q.task_metadata,
                    q.task_claimed_at_ts, q.task_lost_attempts,
                    CASE WHEN q.task_rerun OR q.task_every_ms IS NOT NULL THEN q.task_payload END,
                    q.task_max_attempts, q.task_unique_key, q.task_unique_mode, q.task_rerun, q.task_every_ms,
                    q.task_timeout_ms, g.ms, g.output, q.task_dependants, q.task_waiting_on IS NOT NULL
                 FROM temp.sk_went g CROSS JOIN {q} q ON q.task_lock_handle_id = g.handle
                 WHERE g.rare;
                 INSERT INTO {r} ({job_columns}, task_status, task_processing_time_milliseconds,
                    task_processing_finalized_at_ts, task_last_locked_by, task_output,
                    task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts)
                 SELECT {q_job_columns}, 3, g.ms, $3, $2, g.output, q.task_claimed_at_ts, q.task_claimed_at_ts
                 FROM temp.sk_went g CROSS JOIN {q} q ON q.task_lock_handle_id = g.handle
                 WHERE q.task_lost_attempts IS NULL
                 ON CONFLICT (task_id) DO UPDATE SET task_status = 3,
                    task_processing_time_milliseconds = excluded.task_processing_time_milliseconds,
                    task_processing_finalized_at_ts = excluded.task_processing_finalized_at_ts,
                    task_last_locked_by = excluded.task_last_locked_by,
                    task_output = excluded.task_output,
                    task_first_processing_attempted_at_ts =
                        coalesce(task_first_processing_attempted_at_ts, excluded.task_first_processing_attempted_at_ts),
                    task_last_processing_attempted_at_ts = excluded.task_last_processing_attempted_at_ts;
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
            // As on PostgreSQL: a leased queue row means the job runs now; results hold
            // what happened before. The queue row's lost attempts follow the recorded ones
            // (`lost`, appended in `job`).
            job: format!(
                "SELECT k.id AS task_id, coalesce(r.task_type, q.task_type) AS task_type,
                    coalesce(r.task_source, q.task_source) AS task_source,
                    coalesce(r.task_queue, q.task_queue) AS task_queue,
                    coalesce(q.task_payload, r.task_payload) AS task_payload,
                    CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > $2 THEN 2
                         ELSE coalesce(r.task_status, 1) END AS task_status,
                    coalesce(q.task_priority, r.task_priority) AS task_priority,
                    coalesce(r.task_error_count, 0) + json_array_length(coalesce(q.task_lost_attempts, '[]'))
                        AS task_error_count, r.task_last_error_type,
                    r.task_last_error_message, r.task_last_error_detail,
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
                    coalesce(r.task_metadata, q.task_metadata) AS task_metadata,
                    coalesce(r.task_unique_key, q.task_unique_key) AS task_unique_key,
                    coalesce(r.task_unique_mode, q.task_unique_mode) AS task_unique_mode
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

/// Binds a new queue row's `$1` to `$15` (`NEW_COLUMNS` without `task_has_result`).
macro_rules! bind_new {
    ($query:expr, $job:expr, $now:expr, $mode:expr) => {
        $query
            .bind($job.id)
            .bind(&*$job.task_type)
            .bind($job.source)
            .bind($job.payload)
            .bind($job.priority)
            .bind(ts($now))
            .bind(ts($job.run_at))
            .bind($job.queue)
            .bind($job.max_attempts)
            .bind($job.tenant)
            .bind($job.correlation_id)
            .bind($job.metadata)
            .bind($job.unique_key)
            .bind($mode)
            .bind($job.every_ms)
            .bind($job.timeout_ms)
    };
}

pub(crate) async fn migrate_to(pool: &SqlitePool, schema: &Schema, target: i32) -> Result<()> {
    let mut conn = pool.acquire().await?;
    // An in-memory database answers "memory", and keeps it.
    sqlx::query("PRAGMA journal_mode = WAL")
        .execute(&mut *conn)
        .await?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let versions = schema.flat_table("schema_migrations_t");
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {versions} (
             version INTEGER NOT NULL PRIMARY KEY,
             description TEXT NOT NULL,
             applied_at TEXT NOT NULL
         )"
    ))
    .execute(&mut *tx)
    .await?;
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
        if *version == 6 {
            if let Some(reason) = out_of_range(&mut tx, schema).await? {
                return Err(Error::MigrationRefused {
                    version: *version,
                    reason,
                });
            }
        }
        let sql = sql.replace("__PREFIX__", &schema.flat_prefix());
        (&mut *tx)
            .execute(sql.as_str())
            .await
            .map_err(|source| Error::Migration {
                version: *version,
                source,
            })?;
        sqlx::query(&format!(
            "INSERT INTO {versions} (version, description, applied_at) VALUES ($1, $2, $3)"
        ))
        .bind(version)
        .bind(description)
        .bind(ts(Utc::now()))
        .execute(&mut *tx)
        .await?;
        tracing::info!(version, description, "sk: applied migration (SQLite)");
    }
    tx.commit().await?;
    Ok(())
}

/// Inserts one job without a unique key; `None` when a job with its id exists.
pub(crate) async fn enqueue_one<'e, E: sqlx::Executor<'e, Database = Sqlite>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    let mode = job.unique_mode.map(|m| m as i16);
    let id = bind_new!(
        sqlx::query_scalar(&schema.sqlite.enqueue_one),
        job,
        now,
        mode
    )
    .fetch_optional(executor)
    .await?;
    wake();
    Ok(id)
}

/// Inserts one job with a unique key of mode skip, restart or replace; the id of the new
/// or live job, whether it is new, and whether the live job is running.
pub(crate) async fn enqueue_unique<'e, E: sqlx::Executor<'e, Database = Sqlite>>(
    executor: E,
    schema: &Schema,
    job: NewJob,
    mode: crate::model::UniqueMode,
    now: DateTime<Utc>,
) -> Result<(Uuid, bool, bool)> {
    let new_id = job.id;
    let (id, running): (Uuid, bool) = bind_new!(
        sqlx::query_as(&schema.sqlite.enqueue_unique),
        job,
        now,
        Some(mode as i16)
    )
    .fetch_one(executor)
    .await?;
    wake();
    Ok((id, id == new_id, running))
}

/// Inserts many jobs in one statement; the ids in order (a duplicate key's place holds
/// the live job's id, or the first of the batch with that key).
pub(crate) async fn enqueue_many<'e, E: sqlx::Executor<'e, Database = Sqlite>>(
    executor: E,
    schema: &Schema,
    jobs: Vec<NewJob>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let first = &jobs[0];
    if super::uniform(&jobs) {
        let pairs: Vec<(String, &str)> = jobs
            .iter()
            .map(|j| (j.id.simple().to_string(), j.payload.as_str()))
            .collect();
        sqlx::query(&schema.sqlite.enqueue_many_uniform)
            .bind(ts(now))
            .bind(
                serde_json::to_string(&pairs)
                    .map_err(|e| Error::invalid("payload", e.to_string()))?,
            )
            .bind(&*first.task_type)
            .bind(&first.source)
            .bind(first.priority)
            .bind(ts(first.run_at))
            .bind(&first.queue)
            .bind(first.max_attempts)
            .bind(&first.tenant)
            .bind(&first.correlation_id)
            .bind(&first.metadata)
            .bind(first.timeout_ms)
            .execute(executor)
            .await?;
        wake();
        return Ok(jobs.iter().map(|j| j.id).collect());
    }
    let rows: Vec<serde_json::Value> = jobs
        .iter()
        .map(|j| {
            serde_json::json!({
                "id": j.id.simple().to_string(),
                "type": j.task_type,
                "source": j.source,
                "payload": j.payload,
                "priority": j.priority,
                "run_at": ts(j.run_at),
                "queue": j.queue,
                "max_attempts": j.max_attempts,
                "tenant": j.tenant,
                "correlation_id": j.correlation_id,
                "metadata": j.metadata,
                "key": j.unique_key,
                "timeout_ms": j.timeout_ms,
            })
        })
        .collect();
    let rows = serde_json::Value::Array(rows).to_string();
    if jobs.iter().all(|j| j.unique_key.is_none()) {
        sqlx::query(&schema.sqlite.enqueue_many)
            .bind(ts(now))
            .bind(rows)
            .execute(executor)
            .await?;
        wake();
        return Ok(jobs.iter().map(|j| j.id).collect());
    }
    let stored: Vec<(Uuid, Option<String>)> = sqlx::query_as(&schema.sqlite.enqueue_many_keyed)
        .bind(ts(now))
        .bind(rows)
        .fetch_all(executor)
        .await?;
    wake();
    let by_key: HashMap<String, Uuid> = stored
        .into_iter()
        .filter_map(|(id, key)| key.map(|k| (k, id)))
        .collect();
    Ok(jobs
        .iter()
        .map(|j| {
            j.unique_key
                .as_ref()
                .and_then(|k| by_key.get(k).copied())
                .unwrap_or(j.id)
        })
        .collect())
}

/// A queue row as it was when its run ended: a JSON object of `Statements::failed_rows`
/// (the id in hex), or a row of the completion's temp table of rows that take its rare
/// path.
#[derive(sqlx::FromRow, serde::Deserialize)]
struct Row {
    task_id: Uuid,
    task_type: String,
    task_source: String,
    task_queue: String,
    /// Read wide, so a row past the table's checks (`PRAGMA ignore_check_constraints`)
    /// still ends; written back held to `i32`, as every other reader takes it.
    task_priority: i64,
    task_posted_at_ts: String,
    task_tenant: Option<String>,
    task_correlation_id: Option<String>,
    task_metadata: Option<String>,
    task_claimed_at_ts: Option<String>,
    task_lost_attempts: Option<String>,
    task_payload: Option<String>,
    task_max_attempts: i64,
    task_unique_key: Option<String>,
    task_unique_mode: Option<i16>,
    task_rerun: bool,
    task_every_ms: Option<i64>,
    task_timeout_ms: Option<i64>,
    /// Other jobs wait on it.
    task_dependants: bool,
    /// It waited on others (their outputs are its inputs).
    #[sqlx(default)]
    task_fed: bool,
}

impl LeasedRow for Row {
    type Time = String;
    fn task_id(&self) -> Uuid {
        self.task_id
    }
    fn lost_attempts(&self) -> Option<&str> {
        self.task_lost_attempts.as_deref()
    }
    fn claimed_at(&self) -> Option<String> {
        self.task_claimed_at_ts.clone()
    }
    fn parse_time(text: &str) -> Option<String> {
        Some(text.to_owned())
    }
    fn time_text(time: String) -> String {
        time
    }
}

/// Per task type: total and count, fastest, longest and last run time (seed 001).
#[derive(Default)]
struct Stats(HashMap<String, (i64, i64, i64, i64, i64)>);

impl Stats {
    fn add(&mut self, task_type: &str, ms: i64) {
        let e = self
            .0
            .entry(task_type.to_owned())
            .or_insert((0, 0, i64::MAX, i64::MIN, 0));
        e.0 += ms;
        e.1 += 1;
        e.2 = e.2.min(ms);
        e.3 = e.3.max(ms);
        e.4 = ms;
    }
}

/// The failed attempts recorded for `id` followed by `more`, as a JSON array.
async fn errors_with(
    tx: &mut SqliteConnection,
    schema: &Schema,
    id: Uuid,
    more: Vec<serde_json::Value>,
) -> Result<String> {
    let recorded: Option<String> = sqlx::query_scalar(&format!(
        "SELECT task_errors FROM {} WHERE task_id = $1",
        schema.sqlite.results
    ))
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let mut all: Vec<serde_json::Value> = recorded
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    all.extend(more);
    Ok(serde_json::Value::Array(all).to_string())
}

/// The worker's view of the store on SQLite.
#[derive(Clone)]
pub(crate) struct SqliteStore {
    pub(crate) pool: SqlitePool,
    pub(crate) schema: Schema,
    pub(crate) worker_id: String,
    /// This worker's writes, one at a time (`SqliteStore::writing`).
    pub(crate) writer: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// A checkpoint of this worker's is running (`SqliteStore::checkpoint`).
    pub(crate) checkpointing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Jobs this worker finished since it last started a checkpoint.
    pub(crate) since_checkpoint: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How many finished jobs a worker's WAL checkpoint waits for (`SqliteStore::checkpoint`):
/// about a third of the WAL pages at which SQLite checkpoints by itself, in a burn-down.
const CHECKPOINT_EVERY: u64 = 256;

impl SqliteStore {
    fn sql(&self) -> &Statements {
        &self.schema.sqlite
    }

    /// The database file, for messages.
    pub(crate) fn address(&self) -> String {
        address(&self.pool.connect_options())
    }

    /// A connection for a write, and this worker's turn to write. The worker's claims,
    /// completions and heartbeats would otherwise queue on SQLite's own lock, whose busy
    /// handler retries by sleeping (1 ms, then longer steps up to 100 ms); a mutex hands
    /// over at once. Other processes and the application's enqueues still meet at
    /// SQLite's lock.
    async fn writing(
        &self,
    ) -> Result<(
        tokio::sync::MutexGuard<'_, ()>,
        sqlx::pool::PoolConnection<Sqlite>,
    )> {
        let turn = self.writer.lock().await;
        Ok((turn, self.pool.acquire().await?))
    }

    /// After `jobs` more completions: once this worker has finished `CHECKPOINT_EVERY`
    /// jobs since its last one, starts a passive checkpoint of the WAL on another
    /// connection, unless one of its own is running. The pages its writes added to the
    /// WAL then go back into the database file beside its next writes instead of in one
    /// of them: else the commit that takes the WAL past `wal_autocheckpoint` pages (1,000
    /// by default) checkpoints in line, holding this worker's turn to write while it
    /// copies and syncs (about 6 ms after every two or three batches of 1,000 jobs in a
    /// burn-down). Not after every completion: a trickle of jobs would sync the file once
    /// a job. The automatic checkpoint stays, for when this one falls behind; a database
    /// not in WAL mode takes the pragma as a no-op.
    fn checkpoint(&self, jobs: usize) {
        use std::sync::atomic::Ordering;
        let since = self
            .since_checkpoint
            .fetch_add(jobs as u64, Ordering::Relaxed)
            + jobs as u64;
        if since < CHECKPOINT_EVERY || self.checkpointing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.since_checkpoint.store(0, Ordering::Relaxed);
        let pool = self.pool.clone();
        let running = std::sync::Arc::clone(&self.checkpointing);
        tokio::spawn(async move {
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&pool)
                .await
            {
                tracing::debug!("sk: a WAL checkpoint failed (the automatic one stays): {e}");
            }
            running.store(false, Ordering::Release);
        });
    }

    /// A transaction that holds the write lock from its start (module docs).
    async fn write(conn: &mut SqliteConnection) -> Result<sqlx::Transaction<'_, Sqlite>> {
        Ok(conn.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Posts a restart or a periodic job's next run after `row`'s outcome (as on
    /// PostgreSQL: a new job with the same key, payload and period).
    /// Whether it posted one.
    async fn again(
        &self,
        tx: &mut SqliteConnection,
        row: &Row,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        if !row.task_rerun && row.task_every_ms.is_none() {
            return Ok(false);
        }
        let run_at = match row.task_every_ms {
            Some(ms) if !row.task_rerun => crate::clock::add_millis(now, ms),
            _ => now,
        };
        sqlx::query(&self.sql().again)
            .bind(uuid_v7(now))
            .bind(&row.task_type)
            .bind(&row.task_source)
            .bind(&row.task_payload)
            .bind(int4(row.task_priority))
            .bind(ts(now))
            .bind(ts(run_at))
            .bind(&row.task_queue)
            .bind(int4(row.task_max_attempts))
            .bind(&row.task_tenant)
            .bind(&row.task_correlation_id)
            .bind(&row.task_metadata)
            .bind(&row.task_unique_key)
            .bind(row.task_unique_mode)
            .bind(row.task_every_ms)
            .bind(row.task_timeout_ms)
            .execute(&mut *tx)
            .await?;
        Ok(true)
    }

    async fn write_stats(
        &self,
        tx: &mut SqliteConnection,
        stats: Stats,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut types: Vec<_> = stats.0.into_iter().collect();
        types.sort_by(|a, b| a.0.cmp(&b.0));
        for (task_type, (total, n, fastest, longest, last)) in types {
            sqlx::query(&self.sql().stats)
                .bind(task_type)
                .bind(&self.worker_id)
                .bind(total)
                .bind(fastest)
                .bind(longest)
                .bind(n)
                .bind(last)
                .bind(ts(now))
                .execute(&mut *tx)
                .await?;
        }
        Ok(())
    }

    /// Records one successful run inside the job's own transaction (the caller commits);
    /// false when the lease was lost (fenced), and the caller then rolls back.
    pub(crate) async fn complete_in(
        &self,
        tx: &mut SqliteConnection,
        done: &Success,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let (held, _posted) = self
            .complete_on(tx, std::slice::from_ref(done), now)
            .await?;
        // A rerun or next run it posted is found by the next poll.
        Ok(!held.is_empty())
    }

    /// The statements of a completion, on a connection in a write transaction: the ids
    /// whose lease was held, and whether a job was posted (a rerun, a periodic job's next).
    async fn complete_on(
        &self,
        tx: &mut SqliteConnection,
        done: &[Success],
        now: DateTime<Utc>,
    ) -> Result<(Vec<Uuid>, bool)> {
        let batch: Vec<(String, i32, i64, Option<&str>)> = done
            .iter()
            .map(|s| {
                (
                    s.lease.id.simple().to_string(),
                    s.lease.attempt,
                    s.millis,
                    s.output.as_deref(),
                )
            })
            .collect();
        let batch = serde_json::to_string(&batch)
            .map_err(|e| Error::invalid("job output", e.to_string()))?;
        // Set-based: a batch costs the same few statements however long it is (each
        // statement is a round trip to sqlx's SQLite thread, which is what a job costs).
        let rows = sqlx::query(&self.sql().complete)
            .bind(batch)
            .bind(&self.worker_id)
            .bind(ts(now))
            .fetch_all(&mut *tx)
            .await?;
        let row = last_row(&rows, "the completion")?;
        let (held, rare): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
        let mut posted = false;
        if rare > 0 {
            // Lost attempts to move into the record, reruns and next runs to post, jobs
            // others wait on and jobs that waited (`flow::settle`): the rows the batch
            // copied whole.
            let rows = sqlx::query("SELECT * FROM temp.sk_gone")
                .fetch_all(&mut *tx)
                .await?;
            let mut outputs = Vec::new();
            let mut fed = Vec::new();
            for row in rows {
                let ms: i64 = row.try_get("ms")?;
                let output: Option<String> = row.try_get("output")?;
                let row = <Row as sqlx::FromRow<_>>::from_row(&row)?;
                if row.task_dependants {
                    outputs.push((row.task_id, output.clone()));
                }
                if row.task_fed {
                    fed.push(row.task_id);
                }
                let lost = row.lost();
                if !lost.is_empty() {
                    let first = row.first_started(&lost);
                    let lost_count = lost.len() as i64;
                    let errors = errors_with(&mut *tx, &self.schema, row.task_id, lost).await?;
                    sqlx::query(&self.sql().success)
                        .bind(row.task_id)
                        .bind(&row.task_type)
                        .bind(&row.task_source)
                        .bind(&row.task_queue)
                        .bind(int4(row.task_priority))
                        .bind(&row.task_posted_at_ts)
                        .bind(&row.task_tenant)
                        .bind(&row.task_correlation_id)
                        .bind(&row.task_metadata)
                        .bind(lost_count)
                        .bind(ms)
                        .bind(ts(now))
                        .bind(&self.worker_id)
                        .bind(output)
                        .bind(first)
                        .bind(&row.task_claimed_at_ts)
                        .bind(errors)
                        .execute(&mut *tx)
                        .await?;
                }
                posted |= self.again(&mut *tx, &row, now).await?;
            }
            let outputs: Vec<(Uuid, Option<&str>)> =
                outputs.iter().map(|(id, o)| (*id, o.as_deref())).collect();
            posted |= flow::settle(&mut *tx, &self.schema, &outputs, &fed, now).await?;
        }
        let held: Vec<Uuid> = from_json(&held, "completed ids")?;
        Ok((held, posted))
    }

    /// The statements of `fail`, in a write transaction: the ids whose lease was held.
    async fn fail_on(
        &self,
        tx: &mut SqliteConnection,
        failures: &[Failure],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>> {
        let by_id: HashMap<Uuid, &Failure> = failures.iter().map(|f| (f.lease.id, f)).collect();
        let hex = |id: Uuid| id.simple().to_string();
        let json = |value: serde_json::Value| value.to_string();
        let leases = json(serde_json::json!(failures
            .iter()
            .map(|f| (hex(f.lease.id), f.lease.attempt))
            .collect::<Vec<_>>()));
        // One JSON value for all rows, not a row each (as a claim's: `ClaimedRow`).
        let rows: String = sqlx::query_scalar(&self.sql().failed_rows)
            .bind(leases)
            .bind(&self.worker_id)
            .fetch_one(&mut *tx)
            .await?;
        let rows: Vec<Row> = from_json(&rows, "failed rows")?;
        if rows.is_empty() {
            return Ok(HashSet::new());
        }
        let (retried, last): (Vec<&Row>, Vec<&Row>) = rows
            .iter()
            .partition(|r| by_id[&r.task_id].retry_at.is_some());
        if !last.is_empty() {
            let ids = json(serde_json::json!(last
                .iter()
                .map(|r| hex(r.task_id))
                .collect::<Vec<_>>()));
            sqlx::query(&format!(
                "DELETE FROM {} WHERE task_id IN (SELECT unhex(value) FROM json_each($1))",
                self.sql().queue
            ))
            .bind(ids)
            .execute(&mut *tx)
            .await?;
        }
        if !retried.is_empty() {
            // The rows wait again, each until its retry time; their lost attempts move to
            // the results rows.
            let retry_at = json(serde_json::json!(retried
                .iter()
                .map(|r| (hex(r.task_id), by_id[&r.task_id].retry_at.map(ts)))
                .collect::<Vec<_>>()));
            sqlx::query(&format!(
                "UPDATE {q} SET task_locked_until_ts = j.value ->> 1, task_locked_by = NULL,
                    task_lost_attempts = NULL, task_has_result = 1
                 FROM json_each($1) j WHERE {q}.task_id = unhex(j.value ->> 0)",
                q = self.sql().queue
            ))
            .bind(retry_at)
            .execute(&mut *tx)
            .await?;
        }
        // Each results row's list of failed attempts gets this one (and the lost ones).
        let ids = json(serde_json::json!(rows
            .iter()
            .map(|r| hex(r.task_id))
            .collect::<Vec<_>>()));
        let recorded: HashMap<Uuid, Option<String>> = sqlx::query_as(&format!(
            "SELECT task_id, task_errors FROM {} WHERE task_id IN (SELECT unhex(value) FROM json_each($1))",
            self.schema.sqlite.results
        ))
        .bind(ids)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        let values = super::failed_runs(&rows, &by_id, &recorded, &self.worker_id, ts(now));
        // SQLite takes at most 32,766 bound values a statement: 25 a row.
        for chunk in values.chunks(1000) {
            let mut query = sqlx::QueryBuilder::<Sqlite>::new(&self.sql().failure);
            query.push(" ");
            query.push_values(chunk, |mut v, run| {
                let (row, f) = (run.row, run.failure);
                let last_run = f.retry_at.is_none();
                v.push_bind(row.task_id)
                    .push_bind(&row.task_type)
                    .push_bind(&row.task_source)
                    .push_bind(&row.task_queue)
                    .push_bind(int4(row.task_priority))
                    .push_bind(&row.task_posted_at_ts)
                    .push_bind(&row.task_tenant)
                    .push_bind(&row.task_correlation_id)
                    .push_bind(&row.task_metadata)
                    .push_bind(f.status as i32)
                    .push_bind(run.failed)
                    .push_bind(&f.kind)
                    .push_bind(&f.message)
                    .push_bind(&f.detail)
                    .push_bind(f.seed_error())
                    .push_bind(f.recoverable)
                    .push_bind(f.millis)
                    .push_bind(last_run.then(|| ts(now)))
                    // A job that failed for good keeps its payload, to inspect or re-post.
                    .push_bind(if last_run {
                        row.task_payload.as_deref()
                    } else {
                        None
                    })
                    .push_bind(&self.worker_id)
                    .push_bind(run.log.as_str())
                    .push("NULL")
                    .push_bind(run.first.as_deref())
                    .push_bind(&row.task_claimed_at_ts)
                    .push_bind(int4(row.task_max_attempts))
                    .push_bind(row.task_timeout_ms);
            });
            query.push(format!(
                " ON CONFLICT (task_id) DO UPDATE SET {FAILURE_UPDATE}"
            ));
            query.build().execute(&mut *tx).await?;
        }
        // Periodic jobs' next runs, and jobs others wait on, which end with this one.
        let mut roots = Vec::new();
        for row in &last {
            self.again(&mut *tx, row, now).await?;
            if row.task_dependants {
                let message = super::dependency_message(
                    row.task_id,
                    &row.task_type,
                    false,
                    &by_id[&row.task_id].message,
                );
                roots.push((row.task_id, message));
            }
        }
        if !roots.is_empty() {
            flow::propagate(&mut *tx, &self.schema, roots, false, now).await?;
        }
        let mut stats = Stats::default();
        for row in &rows {
            stats.add(&row.task_type, by_id[&row.task_id].millis);
        }
        self.write_stats(&mut *tx, stats, now).await?;
        Ok(rows.iter().map(|r| r.task_id).collect())
    }

    /// Which of the ids (a JSON array of hex ids) this worker recorded as succeeded
    /// (`Store::succeeded_here`), by the results table's primary key.
    pub(crate) async fn succeeded_here(&self, ids: &str) -> Result<Vec<Uuid>> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT task_id FROM {} WHERE task_id IN (SELECT unhex(value) FROM json_each($1))
             AND task_status = $2 AND task_last_locked_by = $3",
            self.schema.sqlite.results
        ))
        .bind(ids)
        .bind(crate::model::JobStatus::Processed as i32)
        .bind(&self.worker_id)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// Leases as a JSON array of `[id, attempt]` rows.
fn lease_list(leases: &[Lease]) -> String {
    let rows: Vec<(String, i32)> = leases
        .iter()
        .map(|l| (l.id.simple().to_string(), l.attempt))
        .collect();
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned())
}

/// A claimed row as the claim's last statement gives it, in one JSON array of them: the
/// id in hex, then `ClaimedJob`'s columns in order with the lock handle before the
/// timeout. One text value for the whole claim instead of a row per job: each row of a
/// result crosses from sqlx's SQLite thread on its own, with its values copied, while the
/// claim holds the write lock (about half of what a claim cost).
type ClaimedRow = (
    String,
    String,
    Option<String>,
    i32,
    i32,
    i32,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    Option<i32>,
);

/// The jobs of a claim's JSON array (`ClaimedRow`), each with its lock handle. A row sk
/// cannot read (a value another producer wrote that no check refused) comes back
/// [`ClaimedJob::unreadable`], alone: the rest of the claim runs.
fn claimed(json: &str) -> Result<Vec<(i64, ClaimedJob)>> {
    match serde_json::from_str::<Vec<ClaimedRow>>(json) {
        Ok(rows) => rows.into_iter().map(claimed_job).collect(),
        Err(_) => {
            let rows: Vec<serde_json::Value> = from_json(json, "claimed rows")?;
            Ok(rows
                .into_iter()
                .filter_map(
                    |row| match serde_json::from_value::<ClaimedRow>(row.clone()) {
                        Ok(row) => claimed_job(row).map_err(|e| super::unleasable(&e)).ok(),
                        Err(e) => unreadable_row(&row, &e)
                            .map_err(|e| super::unleasable(&e))
                            .ok(),
                    },
                )
                .collect())
        }
    }
}

/// A claimed row of a claim's JSON array that does not decode as a `ClaimedRow`: its id
/// (0), task type (1), attempt (3) and lock handle (11), with `error` as its reason.
fn unreadable_row(row: &serde_json::Value, error: &serde_json::Error) -> Result<(i64, ClaimedJob)> {
    let id = row[0]
        .as_str()
        .and_then(|id| Uuid::parse_str(id).ok())
        .ok_or_else(|| undecodable(format!("a claimed row's id: {row}")))?;
    let lease = (
        row[1].as_str(),
        row[3].as_i64().and_then(|a| i32::try_from(a).ok()),
        row[11].as_i64(),
    );
    let (Some(task_type), Some(attempt), Some(handle)) = lease else {
        return Err(undecodable(format!(
            "claimed job {id}'s task type, attempt or lock handle: {row}"
        )));
    };
    Ok((
        handle,
        ClaimedJob::unreadable(id, task_type.to_owned(), attempt, error.to_string()),
    ))
}

/// One decoded claimed row as a job, with its lock handle.
fn claimed_job(row: ClaimedRow) -> Result<(i64, ClaimedJob)> {
    let (
        id,
        task_type,
        task_payload,
        task_attempt,
        task_max_attempts,
        task_priority,
        task_queue,
        posted,
        task_tenant,
        task_correlation_id,
        task_metadata,
        handle,
        task_timeout_ms,
        task_waiting_on,
    ) = row;
    let task_id = Uuid::parse_str(&id).map_err(|e| undecodable(format!("claimed id {id}: {e}")))?;
    let task_posted_at_ts = match DateTime::parse_from_rfc3339(&posted) {
        Ok(at) => at.with_timezone(&Utc),
        // The table's check makes this rare: the job ends alone, with the reason.
        Err(e) => {
            let reason = format!("its posting time {posted:?} is not a time: {e}");
            let job = ClaimedJob::unreadable(task_id, task_type, task_attempt, reason);
            return Ok((handle, job));
        }
    };
    let job = ClaimedJob {
        task_id,
        task_type,
        task_payload,
        task_attempt,
        task_max_attempts,
        task_priority,
        task_queue,
        task_posted_at_ts,
        task_tenant,
        task_correlation_id,
        task_metadata,
        task_timeout_ms,
        task_waiting_on,
        claimed_at: None,
        unreadable: None,
    };
    Ok((handle, job))
}

/// An integer read wide, held to `i32` (the range every reader of it takes).
fn int4(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}

/// A value sk read back and cannot decode, as sqlx reports one.
fn undecodable(what: String) -> Error {
    Error::Database(sqlx::Error::Decode(what.into()))
}

/// A JSON value a statement built, decoded; `what` names it in the error.
fn from_json<T: serde::de::DeserializeOwned>(json: &str, what: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| undecodable(format!("{what}: {e}")))
}

/// The row a batch of statements answers with, from its last statement.
fn last_row<'r>(
    rows: &'r [sqlx::sqlite::SqliteRow],
    what: &str,
) -> Result<&'r sqlx::sqlite::SqliteRow> {
    rows.last()
        .ok_or_else(|| undecodable(format!("{what} returned no row")))
}

/// The database file of a connection's options.
fn address(options: &SqliteConnectOptions) -> String {
    format!("sqlite:{}", options.get_filename().display())
}

/// The ids as a JSON array of hex strings, for `json_each`.
pub(super) fn id_list(ids: &[Uuid]) -> String {
    let hex: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
    serde_json::to_string(&hex).unwrap_or_else(|_| "[]".to_owned())
}

impl Admin for SqlitePool {
    /// Brings the schema to the newest version: in a `BEGIN IMMEDIATE` transaction, so
    /// workers starting at once apply each migration exactly once. Puts the file in WAL mode
    /// (readers never wait for the writer; the mode stays with the file).
    async fn migrate(&self, schema: &Schema) -> Result<()> {
        let pool = self;
        migrate_to(pool, schema, i32::MAX).await
    }

    /// This build's migrations, each with when it was applied to `schema` (`None`: not yet).
    async fn migrations(
        &self,
        schema: &Schema,
    ) -> Result<Vec<(i32, &'static str, Option<DateTime<Utc>>)>> {
        let pool = self;
        let versions = schema.flat_table("schema_migrations_t");
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
        for row in sqlx::query(&schema.sqlite.counts_by_status)
            .fetch_all(pool)
            .await?
        {
            let status: i32 = row.try_get(0)?;
            let n: i64 = row.try_get(1)?;
            counts
                .by_status
                .push((crate::model::JobStatus::from_code(status), n));
        }
        let row = sqlx::query(&schema.sqlite.counts_live)
            .bind(ts(now))
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
        Ok(sqlx::query_as(&schema.sqlite.peek)
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
        let Some(row) = sqlx::query(&schema.sqlite.job)
            .bind(id)
            .bind(ts(now))
            .fetch_optional(pool)
            .await?
        else {
            return Ok(None);
        };
        let mut record = <JobRecord as sqlx::FromRow<_>>::from_row(&row)?;
        let lost: Option<String> = row.try_get("lost")?;
        if let Some(lost) = lost {
            let lost: Vec<Attempt> = from_json(&lost, &format!("task_lost_attempts of job {id}"))?;
            record.failed_attempts.extend(lost);
        }
        Ok(Some(record))
    }

    /// Adds or replaces a stored schedule.
    async fn schedule_put(&self, schema: &Schema, row: &ScheduleRow) -> Result<()> {
        let pool = self;
        sqlx::query(&format!(
            "INSERT INTO {} (schedule_name, task_type, task_payload, schedule_cron, schedule_overlap,
                schedule_updated_at_ts)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (schedule_name) DO UPDATE SET task_type = excluded.task_type,
                task_payload = excluded.task_payload, schedule_cron = excluded.schedule_cron,
                schedule_overlap = excluded.schedule_overlap,
                schedule_updated_at_ts = excluded.schedule_updated_at_ts",
            schema.flat_table("schedules_t")
        ))
        .bind(&row.schedule_name)
        .bind(&row.task_type)
        .bind(&row.task_payload)
        .bind(&row.schedule_cron)
        .bind(row.schedule_overlap)
        .bind(ts(row.schedule_updated_at_ts))
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Removes a stored schedule; false if there was none of that name. A tick is enqueued
    /// in a write transaction that checks the schedule first, so none is enqueued after this.
    async fn schedule_remove(&self, schema: &Schema, name: &str) -> Result<bool> {
        let pool = self;
        let done = sqlx::query(&format!(
            "DELETE FROM {} WHERE schedule_name = $1",
            schema.flat_table("schedules_t")
        ))
        .bind(name)
        .execute(pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Every stored schedule, by name.
    async fn schedule_list(&self, schema: &Schema) -> Result<Vec<ScheduleRow>> {
        let pool = self;
        Ok(sqlx::query_as(&format!(
            "SELECT schedule_name, task_type, task_payload, schedule_cron, schedule_overlap,
                schedule_updated_at_ts
             FROM {} ORDER BY schedule_name",
            schema.flat_table("schedules_t")
        ))
        .fetch_all(pool)
        .await?)
    }
}

impl Work for SqliteStore {
    async fn claim(&self, claim: &super::Claim<'_>) -> Result<Vec<ClaimedJob>> {
        let super::Claim {
            task_types,
            queues,
            tenants,
            paused,
            capped,
            limit,
            now,
            lease_until,
        } = *claim;
        let capped = match queues {
            Some([queue]) if capped => Some(queue),
            _ => None,
        };
        let list = |l: &[String]| serde_json::to_string(l).unwrap_or_default();
        let query = |sql, limit: i64| {
            sqlx::query(sql)
                .bind(ts(now))
                .bind(list(task_types))
                .bind(queues.map(list))
                .bind(limit)
                .bind(ts(lease_until))
                .bind(&self.worker_id)
                .bind(tenants.map(list))
                .bind((!paused.is_empty()).then(|| list(paused)))
        };
        let mut jobs = Vec::new();
        let (_turn, mut conn) = self.writing().await?;
        if let Some(queue) = capped {
            let rows = query(&self.sql().claim_capped, limit)
                .bind(queue)
                .fetch_all(&mut *conn)
                .await?;
            for row in rows {
                let handle: i64 = row.try_get("task_lock_handle_id")?;
                match super::claimed_row(&row, 0) {
                    Ok(job) => jobs.push((handle, job)),
                    Err(e) => super::unleasable(&e),
                }
            }
        } else {
            // Candidates another writer leased between the claim's steps are claimed for
            // again at once, until the claim has its limit or lost none.
            let mut want = limit;
            while want > 0 {
                let rows = query(&self.sql().claim, want).fetch_all(&mut *conn).await?;
                let row = last_row(&rows, "the claim")?;
                let candidates: i64 = row.try_get(0)?;
                let leased = claimed(row.try_get(1)?)?;
                let n = leased.len() as i64;
                jobs.extend(leased);
                want -= n;
                if n == candidates {
                    break;
                }
            }
        }
        drop((_turn, conn));
        // Back to the claim's order (the rows come in lock-handle order, and a job of
        // another claim round may come first).
        jobs.sort_by_key(|(handle, job)| (job.task_priority, *handle));
        Ok(jobs.into_iter().map(|(_, job)| job).collect())
    }

    /// Finalizes successful runs (fenced); the ids whose lease was still held.
    async fn complete(&self, done: &[Success], now: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        let (held, posted) = self.complete_on(&mut tx, done, now).await?;
        tx.commit().await?;
        drop((_turn, conn));
        self.checkpoint(held.len());
        if posted {
            wake();
        }
        Ok(held)
    }

    /// The outputs of job `id`'s dependencies, in order.
    async fn inputs(&self, id: Uuid) -> Result<Vec<Option<Option<String>>>> {
        let mut conn = self.pool.acquire().await?;
        flow::inputs(&mut conn, &self.schema, id).await
    }

    /// Records failed runs (retry or final) in one transaction, a few statements for the
    /// whole batch; per failure, false when its lease was lost (fenced).
    async fn fail(&self, failures: &[Failure], now: DateTime<Utc>) -> Result<Vec<bool>> {
        if failures.is_empty() {
            return Ok(Vec::new());
        }
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        let held = self.fail_on(&mut tx, failures, now).await?;
        tx.commit().await?;
        if !held.is_empty() {
            wake();
        }
        Ok(failures
            .iter()
            .map(|f| held.contains(&f.lease.id))
            .collect())
    }

    /// Releases leases at once (graceful stop), without using up an attempt.
    async fn give_back(&self, leases: &[Lease], now: DateTime<Utc>) -> Result<u64> {
        let (_turn, mut conn) = self.writing().await?;
        let n = sqlx::query(&self.sql().give_back)
            .bind(ts(now))
            .bind(lease_list(leases))
            .bind(&self.worker_id)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        wake();
        Ok(n)
    }

    /// Extends the leases still held; their ids (a missing one was lost).
    async fn extend(&self, leases: &[Lease], until: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let (_turn, mut conn) = self.writing().await?;
        Ok(sqlx::query_scalar(&self.sql().extend)
            .bind(ts(until))
            .bind(lease_list(leases))
            .bind(&self.worker_id)
            .fetch_all(&mut *conn)
            .await?)
    }

    /// Posts one job with a unique key of mode `mode` (the periodic jobs' first runs).
    async fn enqueue_unique(
        &self,
        job: NewJob,
        mode: crate::model::UniqueMode,
        now: DateTime<Utc>,
    ) -> Result<(Uuid, bool, bool)> {
        enqueue_unique(&self.pool, &self.schema, job, mode, now).await
    }

    /// Posts a cron tick once across workers (its id comes from its key); with
    /// `live_key`, only while no earlier tick holding that key is live; with `stored`, only
    /// while that stored schedule exists as it was read. False if it was not posted.
    async fn enqueue_tick(
        &self,
        job: NewJob,
        live_key: Option<&str>,
        stored: Option<(&str, DateTime<Utc>)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        if let Some((name, updated_at)) = stored {
            let exists: Option<i32> = sqlx::query_scalar(&format!(
                "SELECT 1 FROM {} WHERE schedule_name = $1 AND schedule_updated_at_ts = $2",
                self.schema.flat_table("schedules_t")
            ))
            .bind(name)
            .bind(ts(updated_at))
            .fetch_optional(&mut *tx)
            .await?;
            if exists.is_none() {
                return Ok(false);
            }
        }
        let results = &self.sql().results;
        let queue = &self.sql().queue;
        let seen: Option<i32> =
            sqlx::query_scalar(&format!("SELECT 1 FROM {results} WHERE task_id = $1"))
                .bind(job.id)
                .fetch_optional(&mut *tx)
                .await?;
        if seen.is_some() {
            return Ok(false);
        }
        if let Some(key) = live_key {
            let live: Option<i32> =
                sqlx::query_scalar(&format!("SELECT 1 FROM {queue} WHERE task_unique_key = $1"))
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
            if live.is_some() {
                return Ok(false);
            }
        }
        // The results row keeps the tick's key; the queue row holds the live key (mode
        // skip) or none.
        sqlx::query(&format!(
            "INSERT INTO {results} (task_id, task_type, task_source, task_queue, task_status, task_priority,
                task_unique_key, task_posted_at_ts)
             VALUES ($1, $2, $3, $4, 1, $5, $6, $7)"
        ))
        .bind(job.id)
        .bind(&*job.task_type)
        .bind(&job.source)
        .bind(&job.queue)
        .bind(job.priority)
        .bind(&job.unique_key)
        .bind(ts(now))
        .execute(&mut *tx)
        .await?;
        let mut job = job;
        job.unique_key = live_key.map(str::to_owned);
        let mode = live_key.map(|_| crate::model::UniqueMode::Skip as i16);
        bind_new!(sqlx::query(&self.sql().again), job, now, mode)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        wake();
        Ok(true)
    }

    async fn stored_schedules(&self) -> Result<Vec<ScheduleRow>> {
        Admin::schedule_list(&self.pool, &self.schema).await
    }

    async fn migrate(&self) -> Result<()> {
        Admin::migrate(&self.pool, &self.schema).await
    }

    /// SQLite has no partitions: results are pruned row by row (`retire_partitions`).
    async fn ensure_partitions(&self, _now: DateTime<Utc>, _span: Duration) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Deletes the results of jobs finished before `cutoff`, a thousand rows per
    /// statement (each a short write, so workers' claims go between them). The archive
    /// schema does not apply (`WorkerBuilder::build` refuses it on SQLite).
    async fn retire_partitions(
        &self,
        cutoff: DateTime<Utc>,
        _archive: Option<&str>,
        _within: bool,
        stopping: &tokio_util::sync::CancellationToken,
    ) -> Result<Retired> {
        let results = &self.sql().results;
        let statement = format!(
            "DELETE FROM {results} WHERE task_id IN (
                SELECT task_id FROM {results}
                WHERE task_processing_finalized_at_ts IS NOT NULL AND task_processing_finalized_at_ts < $1
                  AND task_id NOT IN (SELECT task_id FROM {})
                LIMIT 1000)",
            self.sql().queue
        );
        let mut retired = Retired::default();
        while !stopping.is_cancelled() {
            let n = sqlx::query(&statement)
                .bind(ts(cutoff))
                .execute(&mut *self.writing().await?.1)
                .await?
                .rows_affected();
            retired.rows += n;
            if n < 1000 {
                break;
            }
        }
        Ok(retired)
    }

    /// SQLite reuses the pages of deleted rows without a vacuum: nothing to watch.
    async fn table_health(&self) -> Result<Vec<super::TableHealth>> {
        Ok(Vec::new())
    }

    async fn vacuum(&self, _table: &str) -> Result<bool> {
        Ok(false)
    }

    async fn write_metrics(&self, metrics: &[(&str, i64)], now: DateTime<Utc>) -> Result<()> {
        let (_turn, mut conn) = self.writing().await?;
        let mut tx = Self::write(&mut conn).await?;
        for (id, value) in metrics {
            sqlx::query(&self.sql().metrics)
                .bind(&self.worker_id)
                .bind(id)
                .bind(value)
                .bind(ts(now))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Opens the file outside the pool, saying why it cannot.
    async fn probe(&self) -> std::result::Result<(), ProbeFailure> {
        let options = self.pool.connect_options();
        match SqliteConnection::connect_with(&options).await {
            Ok(conn) => {
                let _ = conn.close().await;
                Ok(())
            }
            Err(e) => {
                let busy =
                    matches!(&e, sqlx::Error::Database(db) if db.code().as_deref() == Some("5"));
                let error = Error::Connect {
                    address: address(&options),
                    cause: e.to_string(),
                };
                Err(if busy {
                    ProbeFailure::Transient(error)
                } else {
                    ProbeFailure::Permanent(error)
                })
            }
        }
    }
}
